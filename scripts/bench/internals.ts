// What the benchmark drives in-process: the real storage and domain code of telemetryd,
// bundled by run.mjs into .cache/bench/internals.cjs (better-sqlite3 stays external and
// is resolved from node_modules). Nothing here is part of the product.

export { composeServices } from '../../src/composition.js';
export { DB_FILE, openDatabase } from '../../src/storage/db.js';
export { MIGRATIONS } from '../../src/storage/migrations.js';
// The throwaway PostgreSQL server of the tests, for `--backend postgres`.
export { createDatabase, psql, startPostgres } from '../../test/helpers/postgres.js';
