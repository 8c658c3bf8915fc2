import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';

/** Liveness plus database reachability, for load balancers and systemd watchdogs. */
export async function healthRoutes(app: FastifyInstance, { services, version }: { services: Services; version: string }) {
  app.get('/healthz', { schema: { hide: true } }, async (_request, reply) => {
    const problem = services.storageStatus.databaseProblem();
    if (problem === null) return { status: 'ok', version, database: 'ok' };
    return reply.code(503).send({ status: 'unavailable', version, database: problem });
  });
}
