/**
 * A delivery a crashed server left pending is sent by the next start (docs/alerts.md,
 * "Deliveries"): the real server as a child process, a webhook that holds its first request
 * open while the server is killed with SIGKILL, then a restart on the same data dir.
 */
import { rmSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import type { Composition } from '../../src/composition.js';
import { onPostgres, openDataDirStorage } from '../helpers/backend.js';
import { tempDir } from '../helpers/server.js';
import { seedViaCli, startChildServer, stopChild } from '../reliability/helpers.js';
import { waitFor } from './helpers.js';

const dataDir = tempDir('telemetryd-crashed-deliveries-');

/** The data dir's services while no server runs, closed after `use`. */
async function withServices<T>(use: (services: Composition['services']) => Promise<T>): Promise<T> {
  const storage = await openDataDirStorage(dataDir);
  try {
    return await use(storage.services);
  } finally {
    await storage.close();
  }
}
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('alert deliveries across a crash', () => {
  it('a webhook left pending by a SIGKILLed server is sent once the server starts again', async () => {
    const bodies: string[] = [];
    const held: ServerResponse[] = [];
    let answer = false;
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        bodies.push(body);
        if (answer) res.writeHead(200).end();
        else held.push(res);
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    try {
      const seed = await seedViaCli(dataDir);
      // Created before the server starts, as the admin CLI would.
      const alertId = await withServices(async (services) => {
        const device = await services.devices.getAny(seed.deviceId);
        return (
          await services.alerts.create(device, {
            name: 'hot hook',
            field: 't',
            operator: '>',
            value: 1,
            actions: ['webhook'],
            webhookUrl: url,
          })
        ).id;
      });

      const first = await startChildServer(dataDir);
      const res = await fetch(`${first.url}/api/devices/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ device_id: seed.deviceId, access_token: seed.token, data: { t: 5 } }),
      });
      expect(res.status).toBe(200);
      // The first attempt reached the receiver, which holds it: the delivery is in flight.
      await waitFor(() => (bodies.length === 1 ? true : null), 'the first attempt');
      first.proc.kill('SIGKILL');
      expect((await first.exited).signal).toBe('SIGKILL');

      answer = true;
      const second = await startChildServer(dataDir);
      try {
        // The same event, sent again by the new server (on PostgreSQL once the dead node's
        // deliveries are past their grace period).
        await waitFor(() => (bodies.length >= 2 ? true : null), 'the delivery sent again', onPostgres ? 20_000 : 5_000);
        const [sent, again] = bodies.map((b) => JSON.parse(b) as { event: { id: string }; alert: { id: string } });
        expect(again!.event.id).toBe(sent!.event.id);
        expect(again!.alert.id).toBe(alertId);
        await new Promise((r) => setTimeout(r, 300));
      } finally {
        expect((await stopChild(second)).code).toBe(0);
      }
      // Recorded as sent, once; nothing else was sent.
      expect(bodies).toHaveLength(2);
      const deliveries = await withServices(async (services) => {
        const [event] = (await services.alerts.historyWithDeliveries(await services.alerts.getAny(alertId), 10)) as {
          deliveries: unknown[];
        }[];
        return event!.deliveries;
      });
      expect(deliveries).toMatchObject([{ action: 'webhook', status: 'sent' }]);
    } finally {
      for (const r of held) r.destroy();
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });
});
