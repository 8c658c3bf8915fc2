import type { Pool, PoolClient, QueryArrayConfig, QueryResultRow } from 'pg';

/** The pool, or the client of a transaction in progress: a statement runs on either. */
export type Queryable = Pool | PoolClient;

/**
 * Whether a value is text with a NUL character, which PostgreSQL's text type cannot hold
 * (the server refuses the parameter): no stored id, e-mail or hash can equal it.
 */
const holdsNul = (values: unknown[]): boolean => values.some((v) => typeof v === 'string' && v.includes('\u0000'));

/**
 * A named prepared statement: node-postgres parses and plans it once per connection, on
 * its first use there, and sends only the values after that. For the statements that run
 * often (look-ups, pages, counts); the text must never change under one name. A look-up
 * (`first`) by text with a NUL in it finds nothing, as on SQLite, instead of failing: ids
 * in request paths and bodies reach it unchecked.
 */
export function prepared<R extends QueryResultRow = QueryResultRow>(name: string, text: string) {
  const fullName = `telemetryd-${name}`;
  return {
    rows: async (db: Queryable, values: unknown[]): Promise<R[]> => (await db.query<R>({ name: fullName, text, values })).rows,
    first: async (db: Queryable, values: unknown[]): Promise<R | undefined> =>
      holdsNul(values) ? undefined : (await db.query<R>({ name: fullName, text, values })).rows[0],
    /** Rows as arrays, in column order: no key object per row on long pages. */
    arrays: async <T extends unknown[]>(db: Queryable, values: unknown[]): Promise<T[]> =>
      (await db.query<T>({ name: fullName, text, values, rowMode: 'array' } as QueryArrayConfig)).rows,
    /** How many rows an INSERT, UPDATE or DELETE touched. */
    run: async (db: Queryable, values: unknown[]): Promise<number> => (await db.query({ name: fullName, text, values })).rowCount ?? 0,
  };
}

/** What a transaction's function returns to end it with ROLLBACK instead of COMMIT, and give `result`. */
export class Rollback<T> {
  constructor(readonly result: T) {}
}

/**
 * Runs `fn` as one transaction on one pooled client: BEGIN, then COMMIT, or ROLLBACK when
 * `fn` throws (the error is rethrown) or returns a Rollback (a refusal, not an error). `fn` must use `client` for every statement: the pool
 * would hand another connection out, outside the transaction. A client whose ROLLBACK failed
 * (the connection broke, also before BEGIN went through) is destroyed rather than returned
 * to the pool.
 */
export async function inTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T | Rollback<T>>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      if (result instanceof Rollback) {
        await client.query('ROLLBACK');
        return result.result;
      }
      await client.query('COMMIT');
      return result;
    } catch (err) {
      try {
        await client.query('ROLLBACK');
      } catch (rollbackFailed) {
        broken = rollbackFailed as Error;
      }
      throw err;
    }
  } finally {
    client.release(broken);
  }
}
