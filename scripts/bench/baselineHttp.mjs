// Bare fastify baseline (BENCHMARKS.md, "What it measures"): parses the JSON POST and answers {success:true}, nothing
// else. Prints its port on stdout, then serves until killed.
import Fastify from 'fastify';

const app = Fastify({ logger: false, bodyLimit: 65_536 });
app.post('/api/devices/ingest', async (request) => {
  const body = request.body;
  if (!body || typeof body !== 'object') throw new Error('bad body');
  return { success: true };
});
await app.listen({ host: '127.0.0.1', port: 0 });
console.log(`PORT ${app.server.address().port}`);
