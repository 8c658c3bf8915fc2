import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres, openDataDirStorage } from '../helpers/backend.js';
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

  it('a change committed by another connection applies to the next reading, before the change watcher polls', async () => {
    // The admin CLI is another connection to the same database; open one here so the reading
    // can follow the commit within milliseconds (the CLI's process exit alone takes longer
    // than the watcher's 250 ms poll).
    const opened = await openDataDirStorage(server.dataDir);
    try {
      const admin = opened.services;
      const alert = await server.services.alerts.create(s.device, {
        name: 'second connection',
        field: 'q',
        operator: '>',
        value: 0,
        cooldown: 0,
      });
      // SQLite: the server reads PRAGMA data_version on its next lookup, so nothing to wait for.
      // PostgreSQL: the change reaches it as a notification, asynchronously; the next
      // reading after it has been heard is the one that must see it.
      const changeFromAdmin = async (change: () => Promise<unknown>) => {
        const seen = server.storage.repos.externalCommits.current();
        await change();
        if (onPostgres) await expect.poll(() => server.storage.repos.externalCommits.current(), { timeout: 5_000 }).not.toBe(seen);
      };
      await send(server, s.device, s.token, { q: 1 });
      await changeFromAdmin(async () => admin.alerts.setEnabled(await admin.alerts.getAny(alert.id), false));
      await send(server, s.device, s.token, { q: 2 });
      await changeFromAdmin(async () => admin.alerts.setEnabled(await admin.alerts.getAny(alert.id), true));
      await send(server, s.device, s.token, { q: 3 });
      expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value)).toEqual([3, 1]);
    } finally {
      await opened.close();
    }
  });

  it('--no-data SECONDS creates a no_data alert (any reading, or --field PATH); chat URLs, --clear-value and --no-notify-resolved are kept', async () => {
    const base = ['alerts', 'create', '--device', s.device.id, '--json'];
    const any = await cli([...base, '--name', 'silent', '--no-data', '30']);
    expect(any.status, any.stderr).toBe(0);
    expect(any.json).toMatchObject({
      kind: 'no_data',
      condition: { field: '*', operator: 'no_data', value: 30 },
      state: 'ok',
      notify_resolved: true,
      actions: ['email'],
      enabled: true,
    });
    const path = await cli([...base, '--name', 'no temp', '--no-data', '2592000', '--field', 'env.temp', '--disabled']);
    expect(path.status, path.stderr).toBe(0);
    expect(path.json).toMatchObject({ kind: 'no_data', condition: { field: 'env.temp', value: 2592000 }, enabled: false });

    const chat = await cli([
      ...base,
      ...['--name', 'warm', '--field', 't', '--operator', '>=', '--value', '30', '--clear-value', '27.5', '--no-notify-resolved'],
      ...['--action', 'slack', '--slack-url', 'https://hooks.example.test/services/T/B/x'],
      ...['--action', 'discord', '--discord-url', 'https://chat.example.test/api/webhooks/1/abc'],
      ...['--action', 'ntfy', '--ntfy-url', 'https://ntfy.example.test/fridge'],
    ]);
    expect(chat.status, chat.stderr).toBe(0);
    expect(chat.json).toMatchObject({
      kind: 'threshold',
      condition: { field: 't', operator: '>=', value: 30, clear_value: 27.5 },
      notify_resolved: false,
      actions: ['slack', 'discord', 'ntfy'],
      slack_url: 'https://hooks.example.test/services/T/B/x',
      discord_url: 'https://chat.example.test/api/webhooks/1/abc',
      ntfy_url: 'https://ntfy.example.test/fridge',
      webhook_url: null,
    });
    // The running server evaluates the CLI's alert at once, and resolves it below 27.5 only.
    await send(server, s.device, s.token, { t: 31 });
    await send(server, s.device, s.token, { t: 29 });
    expect((await server.services.alerts.getAny(chat.json.id)).state).toBe('firing');
    await send(server, s.device, s.token, { t: 27 });
    expect((await server.services.alerts.getAny(chat.json.id)).state).toBe('ok');
  });

  it('refuses every inconsistent no_data, clear-value and channel definition', async () => {
    const base = ['alerts', 'create', '--device', s.device.id, '--name', 'x', '--json'];
    const threshold = ['--field', 't', '--operator', '>', '--value', '1'];
    const cases: [string[], RegExp][] = [
      [['--field', 't'], /--operator, --value.*--no-data/],
      [[], /--field, --operator, --value/],
      [['--field', 't', '--operator', '>'], /missing --value/],
      [['--no-data', '30', '--operator', '>', '--value', '1'], /--no-data takes no --operator or --value/],
      [['--no-data', '9'], /--no-data must be a whole number of seconds from 10 to 2592000/],
      [['--no-data', '2592001'], /from 10 to 2592000/],
      [['--no-data', '12.5'], /whole number/],
      [['--no-data', 'soon'], /whole number/],
      [['--no-data', '30', '--clear-value', '1'], /--clear-value applies to threshold alerts only/],
      [['--no-data', '30', '--field', 'a..b'], /field/],
      [['--field', 't', '--operator', '==', '--value', '1', '--clear-value', '0'], /clear_value does not apply to the == operator/],
      [['--field', 't', '--operator', '!=', '--value', '1', '--clear-value', '0'], /clear_value does not apply to the != operator/],
      [[...threshold, '--clear-value', 'cool'], /--clear-value must be a decimal number/],
      [[...threshold, '--action', 'slack'], /slack action needs a slack URL/],
      [[...threshold, '--action', 'discord'], /discord action needs a discord URL/],
      [[...threshold, '--action', 'ntfy'], /ntfy action needs a ntfy URL/],
      [[...threshold, '--action', 'slack', '--slack-url', 'not a url'], /invalid slack URL/],
      [[...threshold, '--action', 'ntfy', '--ntfy-url', 'ftp://ntfy.example.test/t'], /ntfy URL must be http/],
      [[...threshold, '--action', 'teams'], /unknown action "teams"/],
      // clear_value on the wrong side of the threshold, or equal to it.
      [
        ['--field', 't', '--operator', '>', '--value', '30', '--clear-value', '35'],
        /^telemetryd: clear_value must be below the threshold for the > operator \(got clear_value 35, value 30\)$/,
      ],
      [
        ['--field', 't', '--operator', '>=', '--value', '30', '--clear-value', '30'],
        /clear_value must be below the threshold for the >= operator/,
      ],
      [
        ['--field', 't', '--operator', '>', '--value', '30', '--clear-value', '30'],
        /clear_value must be below the threshold for the > operator/,
      ],
      [
        ['--field', 't', '--operator', '<', '--value', '5', '--clear-value', '2'],
        /clear_value must be above the threshold for the < operator \(got clear_value 2, value 5\)/,
      ],
      [
        ['--field', 't', '--operator', '<=', '--value', '-5', '--clear-value', '-5'],
        /clear_value must be above the threshold for the <= operator/,
      ],
      // A channel URL without its action: the default action is email alone.
      [
        [...threshold, '--webhook-url', 'https://hooks.example.test/x'],
        /^telemetryd: --webhook-url is used only by --action webhook, which is not given$/,
      ],
      [[...threshold, '--action', 'email', '--slack-url', 'https://hooks.example.test/s'], /--slack-url is used only by --action slack/],
      [
        [...threshold, '--action', 'webhook', '--webhook-url', 'https://hooks.example.test/x', '--ntfy-url', 'https://ntfy.example.test/t'],
        /--ntfy-url is used only by --action ntfy/,
      ],
      [
        ['--no-data', '30', '--discord-url', 'https://chat.example.test/api/webhooks/1/x'],
        /--discord-url is used only by --action discord/,
      ],
    ];
    for (const [extra, message] of cases) {
      const r = await cli([...base, ...extra]);
      expect(r.status, extra.join(' ')).not.toBe(0);
      expect(r.stdout, extra.join(' ')).toBe('');
      expect(r.stderr.trim().split('\n'), extra.join(' ')).toHaveLength(1);
      expect(r.stderr.trim(), extra.join(' ')).toMatch(message);
    }
    // Nothing was stored by any of them.
    expect((await server.services.alerts.listForDevice(s.device)).filter((a) => a.name === 'x')).toEqual([]);
  });

  it('takes a --clear-value just past --value on the resolving side, and a URL together with its --action', async () => {
    const base = ['alerts', 'create', '--device', s.device.id, '--name', 'edge', '--json'];
    for (const [operator, value, clear] of [
      ['>', '30', '29.99'],
      ['>=', '30', '29'],
      ['<', '5', '5.5'],
      ['<=', '-5', '-4'],
    ] as const) {
      const r = await cli([...base, '--field', 't', '--operator', operator, '--value', value, '--clear-value', clear]);
      expect(r.status, r.stderr).toBe(0);
      expect(r.json.condition).toEqual({ field: 't', operator, value: Number(value), clear_value: Number(clear) });
    }
    const hooked = await cli([
      ...base,
      ...['--no-data', '30', '--action', 'ntfy', '--ntfy-url', 'https://ntfy.example.test/t'],
      ...['--action', 'webhook', '--webhook-url', 'https://hooks.example.test/x'],
    ]);
    expect(hooked.status, hooked.stderr).toBe(0);
    expect(hooked.json).toMatchObject({
      actions: ['ntfy', 'webhook'],
      ntfy_url: 'https://ntfy.example.test/t',
      webhook_url: 'https://hooks.example.test/x',
    });
    expect((await server.services.alerts.listForDevice(s.device)).filter((a) => a.name === 'edge')).toHaveLength(5);
  });

  it('refuses invalid definitions with one line on stderr and nothing on stdout', async () => {
    const base = ['alerts', 'create', '--device', s.device.id, '--name', 'x', '--field', 't', '--json'];
    const cases: [string[], RegExp][] = [
      [['--operator', '>', '--value', '1', '--action', 'webhook'], /webhook URL/],
      [['--operator', '=>', '--value', '1'], /operator/],
      [['--operator', '>', '--value', 'warm'], /--value must be a decimal number/],
      [['--operator', '>', '--value', '0x10'], /--value must be a decimal number, got "0x10"/],
      [['--operator', '>', '--value', '1', '--severity', 'fatal'], /severity/],
      [['--operator', '>', '--value', '1', '--action', 'sms'], /action/],
      [['--operator', '>', '--value', '1', '--cooldown', '-1'], /cooldown/],
      // A year at most (PostgreSQL's column is a 32-bit integer).
      [
        ['--operator', '>', '--value', '1', '--cooldown', '31536001'],
        /cooldown must be a whole number of seconds from 0 to 31,536,000 \(365 days\)/,
      ],
      [['--operator', '>', '--value', '1', '--cooldown', '99999999999'], /cooldown must be a whole number of seconds from 0 to 31,536,000/],
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
