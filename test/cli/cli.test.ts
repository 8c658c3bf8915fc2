import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyPassword } from '../../src/domain/passwords.js';
import { openDatabase } from '../../src/storage/db.js';
import { onPostgres } from '../helpers/backend.js';
import { CLI, runCli, runCliAsync } from '../helpers/cli.js';
import { ingest, startTestServer, type TestServer, tempDir } from '../helpers/server.js';

describe('admin CLI contract (docs/cli.md)', () => {
  const dir = tempDir();
  const cli = (...args: string[]) => runCli(args, { dataDir: dir });

  it('accounts create / list / set-plan / suspend / resume / webhook-secret', () => {
    const created = cli('accounts', 'create', '--email', 'owner@example.com', '--name', 'Owner', '--json');
    expect(created.status).toBe(0);
    expect(created.json).toMatchObject({ id: expect.stringMatching(/^acc_/), email: 'owner@example.com', plan: 'starter' });
    expect(created.stdout.trim().split('\n')).toHaveLength(1);

    const dup = cli('accounts', 'create', '--email', 'OWNER@example.com', '--json');
    expect(dup.status).not.toBe(0);
    expect(dup.stdout).toBe('');
    expect(dup.stderr.trim().split('\n')).toHaveLength(1);

    const list = cli('accounts', 'list', '--json');
    expect(list.json.data.map((a: any) => a.email)).toEqual(['owner@example.com']);

    const plan = cli('accounts', 'set-plan', 'owner@example.com', 'business', '--rate-per-minute', '7', '--json');
    expect(plan.json).toMatchObject({
      plan: 'business',
      limits: { rate_per_minute: 7, rate_per_day: 50_000, device_limit: 100, retention_days: 90 },
    });
    // Earlier overrides do not carry over.
    const plan2 = cli('accounts', 'set-plan', created.json.id, 'business', '--json');
    expect(plan2.json.limits.rate_per_minute).toBe(300);
    expect(cli('accounts', 'set-plan', created.json.id, 'gold', '--json').status).not.toBe(0);
    expect(cli('accounts', 'set-plan', created.json.id, 'starter', '--device-limit', '-1').status).not.toBe(0);

    expect(cli('accounts', 'suspend', 'owner@example.com', '--json').json.status).toBe('suspended');
    expect(cli('accounts', 'resume', 'owner@example.com', '--json').json.status).toBe('active');

    const secret = cli('accounts', 'webhook-secret', 'owner@example.com', '--json').json;
    expect(secret).toEqual({ account: created.json.id, webhook_secret: expect.any(String) });
    expect(cli('accounts', 'webhook-secret', 'owner@example.com', '--json').json.webhook_secret).toBe(secret.webhook_secret);
    const rotated = cli('accounts', 'webhook-secret', 'owner@example.com', '--rotate', '--json').json;
    expect(rotated.webhook_secret).not.toBe(secret.webhook_secret);

    expect(cli('accounts', 'create', '--email', 'not-an-email').status).not.toBe(0);
    expect(cli('accounts', 'suspend', 'nobody@example.com').status).not.toBe(0);
    // The arguments the other way round: no account is named like a plan.
    const swapped = cli('accounts', 'set-plan', 'business', 'me@example.com', '--json');
    expect(swapped.status).toBe(1);
    expect(swapped.stdout).toBe('');
    expect(swapped.stderr).toBe(
      'telemetryd: accounts set-plan takes ACCOUNT then PLAN: "business" is a plan; try: accounts set-plan me@example.com business\n',
    );
  });

  it('accounts create --password-stdin stores only a scrypt hash', () => {
    const r = runCli(['accounts', 'create', '--email', 'pw@example.com', '--password-stdin', '--json'], {
      dataDir: dir,
      input: 'correct horse battery\n',
    });
    expect(r.status).toBe(0);
    const short = runCli(['accounts', 'create', '--email', 'pw2@example.com', '--password-stdin'], { dataDir: dir, input: 'short\n' });
    expect(short.status).not.toBe(0);
    expect(short.stderr).toMatch(/at least 8/);
    const none = runCli(['accounts', 'set-password', 'pw@example.com', '--password-stdin', '--json'], { dataDir: dir, input: '' });
    expect(none.status).toBe(1);
    expect(none.stdout).toBe('');
    expect(none.stderr).toBe(
      "telemetryd: no password on standard input (--password-stdin): pipe it in, e.g. echo 'a long password' | telemetryd …\n",
    );
  });

  // util-linux `script` gives the command a pseudo-terminal, as an operator's shell would.
  it.skipIf(spawnSync('script', ['--version']).status !== 0 || onPostgres)(
    '--password-stdin at a terminal prompts for one line instead of waiting silently for end of input',
    async () => {
      const command = `${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} accounts create --email tty@example.com --password-stdin --json --data-dir ${JSON.stringify(dir)}`;
      const r = spawnSync('script', ['-qec', command, '/dev/null'], {
        encoding: 'utf8',
        input: 'correct horse battery\r',
        timeout: 30_000,
      });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      expect(r.stdout).toContain('password (not shown; end with Enter): ');
      expect(r.stdout).toContain('"email":"tty@example.com"');
      const db = openDatabase(dir);
      const row = db.prepare("SELECT password_hash FROM accounts WHERE email = 'tty@example.com'").get() as { password_hash: string };
      db.close();
      expect(await verifyPassword('correct horse battery', row.password_hash)).toBe(true);
    },
  );

  it('keys create / list / revoke', () => {
    const k = cli('keys', 'create', '--account', 'owner@example.com', '--name', 'ci', '--json').json;
    expect(k).toMatchObject({ id: expect.stringMatching(/^key_/), name: 'ci', key: expect.stringMatching(/^tlm_[0-9A-Za-z]{32,}$/) });
    expect(k.key_prefix).toBe(k.key.slice(0, 12));
    const list = cli('keys', 'list', '--account', 'owner@example.com', '--json').json;
    expect(list.data[0]).toMatchObject({ id: k.id, key_prefix: k.key_prefix, revoked_at: null, last_used_at: null });
    expect(JSON.stringify(list)).not.toContain(k.key);
    const revoked = cli('keys', 'revoke', k.id, '--json').json;
    expect(revoked.revoked_at).toMatch(/Z$/);
    expect(cli('keys', 'revoke', 'key_missing', '--json').status).not.toBe(0);
  });

  it('devices create with fields / list / pause / resume / regenerate-token / delete', () => {
    const fieldsFile = path.join(dir, 'fields.json');
    writeFileSync(
      fieldsFile,
      JSON.stringify([
        { name: 'temp', label: 'Temperature', unit: '°C' },
        { name: 'hum', label: 'Humidity', unit: '%' },
      ]),
    );
    const d = cli(
      'devices',
      'create',
      '--account',
      'owner@example.com',
      '--name',
      'cam',
      '--type',
      'camera',
      '--snapshots',
      '--schema',
      'strict',
      '--fields-file',
      fieldsFile,
      '--field',
      'co2:CO2:ppm',
      '--json',
    ).json;
    expect(d).toMatchObject({
      id: expect.stringMatching(/^dev_/),
      access_token: expect.any(String),
      name: 'cam',
      type: 'camera',
      status: 'active',
      schema_mode: 'strict',
      snapshots_enabled: true,
    });
    expect(d.access_token.length).toBeGreaterThanOrEqual(32);
    expect(d.fields).toEqual([
      { name: 'temp', label: 'Temperature', unit: '°C' },
      { name: 'hum', label: 'Humidity', unit: '%' },
      { name: 'co2', label: 'CO2', unit: 'ppm' },
    ]);
    expect(cli('devices', 'create', '--account', 'owner@example.com', '--name', 'x', '--type', 'toaster').status).not.toBe(0);

    const list = cli('devices', 'list', '--account', 'owner@example.com', '--json').json;
    expect(list.data).toHaveLength(1);
    expect(list.data[0]).not.toHaveProperty('access_token');
    expect(list.data[0]).toMatchObject({ rejected_count: 0, last_rejection_reason: null });

    expect(cli('devices', 'pause', d.id, '--json').json.status).toBe('paused');
    expect(cli('devices', 'resume', d.id, '--json').json.status).toBe('active');
    const regen = cli('devices', 'regenerate-token', d.id, '--json').json;
    expect(Object.keys(regen)).toEqual(['id', 'access_token']);
    expect(regen.access_token).not.toBe(d.access_token);

    const refused = cli('devices', 'delete', d.id, '--json');
    expect(refused.status).not.toBe(0);
    expect(refused.stderr).toMatch(/--yes/);
    expect(cli('devices', 'delete', d.id, '--yes', '--json').json).toEqual({ deleted: d.id });
    expect(cli('devices', 'list', '--account', 'owner@example.com', '--json').json.data).toEqual([]);
    // A device that is not there: "not found" (exit 3), with or without --yes.
    for (const confirm of [[], ['--yes']]) {
      const missing = cli('devices', 'delete', d.id, ...confirm);
      expect(missing.status).toBe(3);
      expect(missing.stderr.trim()).toBe(`telemetryd: no device ${d.id}`);
    }
  });

  it('free plan: strict by default and at most 5 fields', () => {
    cli('accounts', 'create', '--email', 'free@example.com', '--plan', 'free');
    const fields = ['a', 'b', 'c', 'd', 'e', 'f'].flatMap((f) => ['--field', f]);
    const tooMany = cli('devices', 'create', '--account', 'free@example.com', '--name', 'n', ...fields, '--json');
    expect(tooMany.status).not.toBe(0);
    expect(tooMany.stderr).toMatch(/allows 5/);
    const ok = cli('devices', 'create', '--account', 'free@example.com', '--name', 'n', '--json');
    expect(ok.json.schema_mode).toBe('strict');
    // Strict without fields refuses every reading: created, and said so on stderr.
    expect(ok.stderr).toBe(
      `telemetryd: warning: ${ok.json.id} has a strict schema and no declared fields, so it refuses every reading: declare its fields in the dashboard, or create it with --field NAME or --schema flexible\n`,
    );
    const declared = cli('devices', 'create', '--account', 'free@example.com', '--name', 'm', '--field', 'temp', '--json');
    expect(declared.status).toBe(0);
    expect(declared.stderr).toBe('');
    // A key of a free account is refused by the Public API until the plan changes: created, and said so.
    const key = cli('keys', 'create', '--account', 'free@example.com', '--name', 'k', '--json');
    expect(key.status).toBe(0);
    expect(key.json.key).toMatch(/^tlm_/);
    expect(key.stderr).toBe(
      "telemetryd: warning: free@example.com is on the free plan, which has no Public API: this key is refused (403) until the account's plan changes (accounts set-plan free@example.com starter)\n",
    );
  });

  it('device limit of the plan', () => {
    cli('accounts', 'create', '--email', 'limited@example.com', '--plan', 'free');
    cli('accounts', 'set-plan', 'limited@example.com', 'free', '--device-limit', '1');
    expect(cli('devices', 'create', '--account', 'limited@example.com', '--name', 'one').status).toBe(0);
    const second = cli('devices', 'create', '--account', 'limited@example.com', '--name', 'two');
    expect(second.status).not.toBe(0);
    expect(second.stderr).toMatch(/device limit/);
  });

  it('alerts create / enable / disable / list / delete with the documented defaults', () => {
    const d = cli('devices', 'create', '--account', 'owner@example.com', '--name', 'therm', '--json').json;
    const a = cli(
      'alerts',
      'create',
      '--device',
      d.id,
      '--name',
      'hot',
      '--field',
      'env.temp',
      '--operator',
      '>',
      '--value',
      '30',
      '--json',
    ).json;
    expect(a).toMatchObject({
      id: expect.stringMatching(/^alert_/),
      device_id: d.id,
      condition: { field: 'env.temp', operator: '>', value: 30 },
      severity: 'warning',
      cooldown: 300,
      actions: ['email'],
      enabled: true,
      last_triggered: null,
    });
    const neg = cli(
      'alerts',
      'create',
      '--device',
      d.id,
      '--name',
      'cold',
      '--field',
      't',
      '--operator',
      '<=',
      '--value',
      '-5.5',
      '--severity',
      'critical',
      '--cooldown',
      '0',
      '--disabled',
      '--json',
    ).json;
    expect(neg).toMatchObject({ condition: { value: -5.5 }, severity: 'critical', cooldown: 0, enabled: false });
    expect(cli('alerts', 'enable', neg.id, '--json').json.enabled).toBe(true);
    expect(cli('alerts', 'disable', neg.id, '--json').json.enabled).toBe(false);
    expect(
      cli('alerts', 'create', '--device', d.id, '--name', 'w', '--field', 't', '--operator', '>', '--value', '1', '--action', 'webhook')
        .status,
    ).not.toBe(0);
    expect(
      cli(
        'alerts',
        'create',
        '--device',
        d.id,
        '--name',
        'w',
        '--field',
        't',
        '--operator',
        '>',
        '--value',
        '1',
        '--action',
        'webhook',
        '--webhook-url',
        'http://127.0.0.1:9/hook',
        '--json',
      ).json.actions,
    ).toEqual(['webhook']);
    expect(cli('alerts', 'create', '--device', d.id, '--name', 'w', '--field', 't', '--operator', '=~', '--value', '1').status).not.toBe(0);
    expect(cli('alerts', 'create', '--device', d.id, '--name', 'w', '--field', 't', '--operator', '>', '--value', 'abc').status).not.toBe(
      0,
    );

    // list, oldest first, each as create printed it; delete asks for --yes.
    const listed = cli('alerts', 'list', '--device', d.id, '--json').json.data;
    expect(listed.map((x: { id: string }) => x.id).slice(0, 2)).toEqual([a.id, neg.id]);
    expect(Object.keys(listed[1]).sort()).toEqual(Object.keys(neg).sort());
    expect(listed[1]).toMatchObject({ id: neg.id, enabled: false, severity: 'critical', condition: { value: -5.5 } });
    const unconfirmed = cli('alerts', 'delete', neg.id);
    expect(unconfirmed.status).toBe(1);
    expect(unconfirmed.stderr).toMatch(/--yes/);
    expect(cli('alerts', 'delete', neg.id, '--yes', '--json').json).toEqual({ deleted: neg.id });
    expect(cli('alerts', 'list', '--device', d.id, '--json').json.data.map((x: { id: string }) => x.id)).not.toContain(neg.id);
    expect(cli('alerts', 'delete', neg.id, '--yes').status).toBe(3);
    expect(cli('alerts', 'list', '--device', 'dev_nope').status).toBe(3);
  });

  it('version, help and the data dir from TELEMETRYD_DATA_DIR', () => {
    const version = runCli(['version', '--json']).json;
    expect(version).toEqual({ version: expect.stringMatching(/^\d+\.\d+\.\d+/), commit: expect.any(String) });
    for (const flag of ['-V', '--version-flag', '--version']) expect(runCli([flag]).stdout, flag).toBe(`${version.version}\n`);
    const help = runCli(['--help']);
    for (const c of ['serve', 'accounts', 'keys', 'devices', 'alerts', 'version']) expect(help.stdout).toContain(c);
    const fromEnv = runCli(['accounts', 'list', '--json'], { env: { TELEMETRYD_DATA_DIR: dir } });
    expect(fromEnv.json.data.length).toBeGreaterThan(0);
  });

  // A PostgreSQL database is named by its URL, never created by a command in passing.
  it.skipIf(onPostgres)('a command that names what a new, empty data dir cannot hold says the data dir was empty', () => {
    const fresh = tempDir();
    const first = runCli(['devices', 'list', '--account', 'me@example.com'], { dataDir: fresh });
    expect(first.status).toBe(3);
    expect(first.stderr).toBe(
      `telemetryd: no account me@example.com (${fresh} held no database: this command created an empty one; is --data-dir the server's?)\n`,
    );
    // The next attempt finds the empty database the first one created, and says so too.
    const again = runCli(['keys', 'create', '--account', 'me@example.com', '--name', 'k'], { dataDir: fresh });
    expect(again.stderr).toBe(`telemetryd: no account me@example.com (${fresh} holds no accounts; is --data-dir the server's?)\n`);
    // Where accounts exist, a name that is not there is only that.
    expect(runCli(['accounts', 'create', '--email', 'other@example.com'], { dataDir: fresh }).status).toBe(0);
    const named = runCli(['devices', 'list', '--account', 'me@example.com'], { dataDir: fresh });
    expect(named.stderr).toBe('telemetryd: no account me@example.com\n');
  });

  it.skipIf(onPostgres)('warns when the database was migrated by a newer telemetryd, and goes on', () => {
    const dir = tempDir();
    expect(runCli(['accounts', 'create', '--email', 'newer@example.com'], { dataDir: dir }).status).toBe(0);
    const db = openDatabase(dir);
    const known = db.pragma('user_version', { simple: true }) as number;
    db.pragma(`user_version = ${known + 1}`);
    db.close();
    const r = runCli(['accounts', 'list', '--json'], { dataDir: dir });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toBe(
      `telemetryd: warning: the database's schema is at version ${known + 1}, newer than this telemetryd knows (${known}): a newer telemetryd has used it; run that version\n`,
    );
    expect((r.json as { data: { email: string }[] }).data.map((a) => a.email)).toEqual(['newer@example.com']);
  });

  it('a usage error is one line like every other failure, pointing at the right help', () => {
    const cases: [string[], string][] = [
      [['frobnicate', '--json'], "telemetryd: unknown command 'frobnicate' (see telemetryd --help)"],
      [['device', 'list'], "telemetryd: unknown command 'device' (Did you mean devices?) (see telemetryd --help)"],
      [['devices', 'add'], "telemetryd: unknown command 'add' (see telemetryd devices --help)"],
      [['devices', 'delete'], "telemetryd: missing required argument 'id' (see telemetryd devices delete --help)"],
      [['serve', '--port', '9000'], "telemetryd: unknown option '--port' (Did you mean --host?) (see telemetryd serve --help)"],
      // A mistyped required option is named as the typo, not as the option it was meant to be.
      [
        ['keys', 'create', '--acount', 'me@example.com', '--name', 'k'],
        "telemetryd: unknown option '--acount' (Did you mean --account?) (see telemetryd keys create --help)",
      ],
      [
        ['keys', 'create', '--account', 'me@example.com', '--nmae', 'k'],
        "telemetryd: unknown option '--nmae' (Did you mean --name?) (see telemetryd keys create --help)",
      ],
      [
        ['keys', 'create', '--account', 'me@example.com'],
        "telemetryd: required option '--name <name>' not specified (see telemetryd keys create --help)",
      ],
      [['alerts', 'list'], "telemetryd: required option '--device <id>' not specified (see telemetryd alerts list --help)"],
    ];
    for (const [args, line] of cases) {
      const r = runCli(args, { dataDir: dir });
      expect(r.status, args.join(' ')).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(`${line}\n`);
    }
  });

  it('a failure whose message spans lines is still one line on stderr, its breaks written as \\n', () => {
    expect(runCli(['accounts', 'create', '--email', 'lines@example.com'], { dataDir: dir }).status).toBe(0);
    const file = path.join(dir, 'broken-fields.json');
    // A JSON parser's message quotes the text it could not read, line breaks included.
    writeFileSync(file, '[\n  oops\n]\n');
    const r = runCli(['devices', 'create', '--account', 'lines@example.com', '--name', 'n', '--fields-file', file], { dataDir: dir });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    const lines = r.stderr.split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[1]).toBe('');
    expect(lines[0]).toMatch(new RegExp(`^telemetryd: cannot read fields file ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: `));
    expect(lines[0]).toContain('\\n  oops\\n');
  });

  // With --database-url an admin command needs no data dir.
  it.skipIf(onPostgres)('a data dir that cannot be made is one line, where the file system never makes it too (under /proc)', () => {
    const unmakeable = `/proc/telemetryd-${process.pid}/data`;
    for (const args of [
      ['accounts', 'list'],
      ['serve', '--http-port', '0', '--mqtt-port', 'off'],
    ]) {
      // Node's recursive mkdir retries for ever there: a hang would be killed and fail here.
      const r = runCli(args, { env: { TELEMETRYD_DATA_DIR: unmakeable }, timeoutMs: 10_000 });
      expect(r.status, args.join(' ')).toBe(1);
      expect(r.stderr).toBe(
        `telemetryd: cannot create the data dir ${unmakeable}: ENOENT: no such file or directory, mkdir '/proc/telemetryd-${process.pid}'\n`,
      );
    }
  });
});

describe('admin CLI against a running server', () => {
  let server: TestServer;
  const cli = (...args: string[]) => runCliAsync(args, { dataDir: server.dataDir });

  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.stop());

  it('a key, a pause, a regenerated token, a revocation and a suspension take effect without restart', async () => {
    await cli('accounts', 'create', '--email', 'live@example.com');
    const key = (await cli('keys', 'create', '--account', 'live@example.com', '--name', 'live', '--json')).json;
    const dev = (await cli('devices', 'create', '--account', 'live@example.com', '--name', 'd', '--json')).json;
    expect((await server.request('/v1/devices', { key: key.key })).status).toBe(200);
    const send = (token: string) => ingest(server, { device_id: dev.id, access_token: token, data: { v: 1 } });
    expect((await send(dev.access_token)).status).toBe(200);

    await cli('devices', 'pause', dev.id);
    expect((await send(dev.access_token)).status).toBe(403);
    await cli('devices', 'resume', dev.id);
    expect((await send(dev.access_token)).status).toBe(200);

    const regen = (await cli('devices', 'regenerate-token', dev.id, '--json')).json;
    expect((await send(dev.access_token)).status).toBe(401);
    expect((await send(regen.access_token)).status).toBe(200);

    await cli('accounts', 'set-plan', 'live@example.com', 'starter', '--rate-per-minute', '1000');
    const res = await server.request('/v1/devices', { key: key.key });
    expect(res.headers.get('x-ratelimit-limit')).toBe('1000');

    await cli('accounts', 'suspend', 'live@example.com');
    expect((await server.request('/v1/devices', { key: key.key })).status).toBe(403);
    expect((await send(regen.access_token)).status).toBe(403);
    await cli('accounts', 'resume', 'live@example.com');

    await cli('keys', 'revoke', key.id);
    expect((await server.request('/v1/devices', { key: key.key })).status).toBe(401);

    await cli('devices', 'delete', dev.id, '--yes');
    expect((await send(regen.access_token)).status).toBe(401);
  });

  it('accounts set-password lets an account made without a password sign in, and signs out its sessions', async () => {
    const signIn = (password: string) =>
      server.request('/ui/api/sign-in', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' },
        body: JSON.stringify({ email: 'nopw@example.com', password }),
      });
    // A signed-in route: 200 while the session lives, 401 once it ended.
    const sessionOf = (cookie: string) => server.request('/ui/api/account', { headers: { cookie } });
    const setPassword = (password: string, ...more: string[]) =>
      runCliAsync(['accounts', 'set-password', 'nopw@example.com', '--password-stdin', ...more], {
        dataDir: server.dataDir,
        input: `${password}\n`,
      });

    const created = (await cli('accounts', 'create', '--email', 'nopw@example.com', '--json')).json;
    expect((await signIn('first password 1')).status).toBe(401);

    const set = await setPassword('first password 1', '--json');
    expect(set.status, set.stderr).toBe(0);
    expect(set.json).toMatchObject({ id: created.id, email: 'nopw@example.com' });
    const first = await signIn('first password 1');
    expect(first.status).toBe(200);
    const cookie = (first.headers.get('set-cookie') ?? '').split(';')[0]!;
    expect((await sessionOf(cookie)).status).toBe(200);

    // Too short: refused, and nothing changes.
    const short = await setPassword('short');
    expect(short.status).not.toBe(0);
    expect(short.stderr).toMatch(/at least 8/);
    expect((await sessionOf(cookie)).status).toBe(200);

    expect((await setPassword('second password 2')).status).toBe(0);
    expect((await sessionOf(cookie)).status).toBe(401);
    expect((await signIn('first password 1')).status).toBe(401);
    expect((await signIn('second password 2')).status).toBe(200);

    const unknown = await runCliAsync(['accounts', 'set-password', 'nobody@example.com', '--password-stdin'], {
      dataDir: server.dataDir,
      input: 'whatever password\n',
    });
    expect(unknown.status).toBe(3);
    expect(unknown.stderr).toMatch(/no account nobody@example.com/);
  });
});
