// What the benchmark drives in-process: the real storage and domain code of telemetryd,
// bundled by run.mjs into .cache/bench/internals.cjs (better-sqlite3 stays external and
// is resolved from node_modules). Nothing here is part of the product.

export { composeServices, openStorage } from '../../src/composition.js';
export { DB_FILE, openDatabase } from '../../src/storage/db.js';
export { MIGRATIONS } from '../../src/storage/migrations.js';
// The cluster's haproxy configuration of the tests and docs/cluster.md, for `--cluster N`.
export { clusterHaproxyConfig } from '../../test/helpers/clusterConfig.js';
// The throwaway PostgreSQL server of the tests, for `--backend postgres`.
export { createDatabase, psql, startPostgres } from '../../test/helpers/postgres.js';
