import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { openDatabase } from '../../src/storage/db.js';
import { runCliAsync } from '../helpers/cli.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { history, send } from './helpers.js';

describe('telemetryd alerts (CLI) against a running server', () => {
  let server: TestServer;
  let s: Awaited<ReturnType<typeof seedAccount>>;
  const cli = (args: string[]) => runCliAsync([...args], { dataDir: server.dataDir });

  beforeAll(async () => {
    server = await startTestServer();
    s = await seedAccount(server);
  });
  afterAll(() => server.stop());

  it('alerts create applies the documented defaults (docs/cli.md) and the running server evaluates it at once', async () => {
    const r = await cli([
      'alerts',
      'create',
      '--device',
      s.device.id,
      '--name',
      'hot',
      '--field',
      'env.temp',
      '--operator',
      '>',
      '--value',
      '30',
      '--json',
    ]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toMatchObject({
      device_id: s.device.id,
      name: 'hot',
      condition: { field: 'env.temp', operator: '>', value: 30 },
      actions: ['email'],
      severity: 'warning',
      enabled: true,
      cooldown: 300,
      last_triggered: null,
      webhook_url: null,
    });
    expect(r.json.id).toMatch(/^alert_/);
    // No restart, no wait: the very next reading is evaluated against the new alert.
    await send(server, s.device, s.token, { env: { temp: 31 } });
    const events = (await history(server, s.key, r.json.id)).body.data;
    expect(events.map((e) => e.condition_value)).toEqual([31]);
  });

  it('--action is repeatable, --disabled creates it disabled, and enable/disable take effect on the next reading', async () => {
    const r = await cli([
      'alerts',
      'create',
      '--device',
      s.device.id,
      '--name',
      'cold',
      '--field',
      't',
      '--operator',
      '<=',
      '--value',
      '-5',
      '--severity',
      'critical',
      '--cooldown',
      '0',
      '--action',
      'email',
      '--action',
      'webhook',
      '--webhook-url',
      'http://127.0.0.1:9/hook',
      '--disabled',
      '--json',
    ]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toMatchObject({
      actions: ['email', 'webhook'],
      severity: 'critical',
      cooldown: 0,
      enabled: false,
      webhook_url: 'http://127.0.0.1:9/hook',
      condition: { value: -5 },
    });
    const id = r.json.id as string;

    await send(server, s.device, s.token, { t: -6 });
    expect((await history(server, s.key, id)).body.data).toHaveLength(0);

    const enabled = await cli(['alerts', 'enable', id, '--json']);
    expect(enabled.status, enabled.stderr).toBe(0);
    expect(enabled.json.enabled).toBe(true);
    await send(server, s.device, s.token, { t: -7 });
    expect((await history(server, s.key, id)).body.data.map((e) => e.condition_value)).toEqual([-7]);

    const disabled = await cli(['alerts', 'disable', id, '--json']);
    expect(disabled.json.enabled).toBe(false);
    await send(server, s.device, s.token, { t: -8 });
    expect((await history(server, s.key, id)).body.data).toHaveLength(1);
  });

  it('a change committed by another connection applies to the very next reading, before the change watcher polls', async () => {
    // The admin CLI is another connection to the same file; open one here so the reading can
    // follow the commit within milliseconds (the CLI's process exit alone takes longer than
    // the watcher's 250 ms poll).
    const db = openDatabase(server.dataDir);
    try {
      const admin = composeServices(db).services;
      const alert = server.services.alerts.create(s.device, {
        name: 'second connection',
        field: 'q',
        operator: '>',
        value: 0,
        cooldown: 0,
      });
      await send(server, s.device, s.token, { q: 1 });
      admin.alerts.setEnabled(admin.alerts.getAny(alert.id), false);
      await send(server, s.device, s.token, { q: 2 });
      admin.alerts.setEnabled(admin.alerts.getAny(alert.id), true);
      await send(server, s.device, s.token, { q: 3 });
      expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value)).toEqual([3, 1]);
    } finally {
      db.close();
    }
  });

  it('refuses invalid definitions with one line on stderr and nothing on stdout', async () => {
    const base = ['alerts', 'create', '--device', s.device.id, '--name', 'x', '--field', 't', '--json'];
    const cases: [string[], RegExp][] = [
      [['--operator', '>', '--value', '1', '--action', 'webhook'], /webhook URL/],
      [['--operator', '=>', '--value', '1'], /operator/],
      [['--operator', '>', '--value', 'warm'], /--value must be a number/],
      [['--operator', '>', '--value', '1', '--severity', 'fatal'], /severity/],
      [['--operator', '>', '--value', '1', '--action', 'sms'], /action/],
      [['--operator', '>', '--value', '1', '--cooldown', '-1'], /cooldown/],
    ];
    for (const [extra, message] of cases) {
      const r = await cli([...base, ...extra]);
      expect(r.status, extra.join(' ')).not.toBe(0);
      expect(r.stdout, extra.join(' ')).toBe('');
      expect(r.stderr.trim().split('\n'), extra.join(' ')).toHaveLength(1);
      expect(r.stderr, extra.join(' ')).toMatch(message);
    }
    const unknownDevice = await cli([
      'alerts',
      'create',
      '--device',
      'dev_nope',
      '--name',
      'x',
      '--field',
      't',
      '--operator',
      '>',
      '--value',
      '1',
      '--json',
    ]);
    expect(unknownDevice.status).not.toBe(0);
    const unknownAlert = await cli(['alerts', 'enable', 'alert_nope', '--json']);
    expect(unknownAlert.status).not.toBe(0);
    expect(unknownAlert.stdout).toBe('');
  });
});
