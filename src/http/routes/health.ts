import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';

/**
 * Liveness, database reachability and whether storage takes writes, for load balancers and
 * systemd watchdogs: 200 "ok"; 503 "degraded" with the reason while writes are refused (low
 * disk space, disk full, I/O error); 503 "unavailable" when the database cannot be read.
 * `storage` names the backend, so a cluster's load balancer can keep out a node that was
 * started without its database URL and serves a SQLite file of its own.
 */
export async function healthRoutes(
  app: FastifyInstance,
  { services, version, storage }: { services: Services; version: string; storage: 'sqlite' | 'postgres' },
) {
  app.get('/healthz', { schema: { hide: true } }, async (_request, reply) => {
    const { status, reason, database } = services.storageStatus.health();
    if (status === 'ok') return { status, version, database, storage };
    return reply.code(503).send(reason === null ? { status, version, database, storage } : { status, reason, version, database, storage });
  });
}
