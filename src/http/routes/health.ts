import type { FastifyInstance } from 'fastify';
import type { Services } from '../../domain/services.js';

/** Liveness plus database reachability, for load balancers and systemd watchdogs. */
export async function healthRoutes(app: FastifyInstance, { services, version }: { services: Services; version: string }) {
  app.get('/healthz', { schema: { hide: true } }, async (_request, reply) => {
    try {
      // A real read of the schema (a read transaction on the file), not `SELECT 1`, which
      // SQLite answers without touching the database.
      services.repos.db.prepare('SELECT count(*) FROM sqlite_master').get();
      return { status: 'ok', version, database: 'ok' };
    } catch (err) {
      return reply.code(503).send({ status: 'unavailable', version, database: (err as Error).message });
    }
  });
}
