import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { connectTls } from '../mqtt/support.js';
import { history, send, waitFor } from './helpers.js';

describe('alerts on readings published over MQTT', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ 'mqtt-port': '0' });
  });
  afterAll(() => server.stop());

  it('a QoS 1 publish is evaluated like an HTTP reading: trigger, cooldown, webhook', async () => {
    const bodies: string[] = [];
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString('utf8')));
      req.on('end', () => {
        bodies.push(body);
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`;
    const s = await seedAccount(server);
    const alert = await server.services.alerts.create(s.device, {
      name: 'mqtt hot',
      field: 'env.temp',
      operator: '>',
      value: 30,
      cooldown: 3600,
      actions: ['webhook'],
      webhookUrl: url,
    });
    const client = await connectTls(server, { username: s.device.id, password: s.token });
    try {
      await client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ env: { temp: 29 } }), { qos: 1 });
      await client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ env: { temp: 31.25 } }), { qos: 1 });
      // Within the cooldown, over either transport: nothing more is recorded.
      await client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ env: { temp: 40 } }), { qos: 1 });
      await send(server, s.device, s.token, { env: { temp: 41 } });

      const events = (await history(server, s.key, alert.id)).body.data;
      expect(events.map((e) => e.condition_value)).toEqual([31.25]);
      const shown = await (await server.request(`/v1/alerts/${alert.id}`, { key: s.key })).json();
      expect(shown.data.last_triggered).toBe(events[0]!.triggered_at);

      const body = JSON.parse(await waitFor(() => bodies[0], 'the webhook'));
      expect(body.event.id).toBe(events[0]!.id);
      expect(body.reading.data).toEqual({ env: { temp: 31.25 } });
    } finally {
      await client.endAsync();
      receiver.closeAllConnections();
      await new Promise<void>((resolve) => receiver.close(() => resolve()));
    }
  });
});
