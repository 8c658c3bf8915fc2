import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';

/**
 * Liveness, database reachability and whether storage takes writes, for load balancers and
 * systemd watchdogs: 200 "ok"; 503 "degraded" with the reason while writes are refused (low
 * disk space, disk full, I/O error); 503 "unavailable" when the database cannot be read.
 */
export async function healthRoutes(app: FastifyInstance, { services, version }: { services: Services; version: string }) {
  app.get('/healthz', { schema: { hide: true } }, async (_request, reply) => {
    const { status, reason, database } = services.storageStatus.health();
    if (status === 'ok') return { status, version, database };
    return reply.code(503).send(reason === null ? { status, version, database } : { status, reason, version, database });
  });
}
