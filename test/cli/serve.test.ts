import { spawn, spawnSync } from 'node:child_process';
import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import path from 'node:path';
import { generate } from 'selfsigned';
import { describe, expect, it } from 'vitest';
import { buildServerConfig } from '../../src/config.js';
import { startServer } from '../../src/server.js';
import { backendEnv, onPostgres } from '../helpers/backend.js';
import { CLI, runCli } from '../helpers/cli.js';
import { freePort, spawnServe } from '../helpers/process.js';
import { tempDir } from '../helpers/server.js';

describe('telemetryd serve', () => {
  it('resolves configuration flag > env > config file > default', async () => {
    const dir = tempDir();
    const [pFile, pEnv, pFlag] = [await freePort(), await freePort(), await freePort()];
    const config = path.join(dir, 'config.json');
    writeFileSync(config, JSON.stringify({ 'http-port': pFile, 'mqtt-port': 'off', host: '127.0.0.1', 'log-level': 'warn' }));
    const base = ['--data-dir', dir, '--config', config];

    const cases: [string[], Record<string, string>, number][] = [
      [base, {}, pFile],
      [base, { TELEMETRYD_HTTP_PORT: String(pEnv) }, pEnv],
      [[...base, '--http-port', String(pFlag)], { TELEMETRYD_HTTP_PORT: String(pEnv) }, pFlag],
    ];
    for (const [args, env, expected] of cases) {
      const serve = await spawnServe(args, { env });
      expect(serve.output()).toContain(`HTTP listening on 127.0.0.1:${expected}`);
      // Which database it serves, so a node on a file of its own stands out.
      expect(serve.output()).toContain(`Storage: ${onPostgres ? 'PostgreSQL ' : `SQLite ${path.join(dir, 'telemetryd.db')}`}`.trim());
      expect(serve.output()).toContain(`, snapshots in ${path.join(dir, 'snapshots')}\n`);
      expect(serve.output()).not.toMatch(/MQTT/);
      const res = await fetch(`http://127.0.0.1:${expected}/healthz`);
      expect(res.status).toBe(200);
      serve.child.kill('SIGTERM');
      expect(await serve.exited).toBe(0);
    }
  });

  it('prints the first-run setup URL while no account exists and exits 0 on SIGINT', async () => {
    const dir = tempDir();
    const port = await freePort();
    const serve = await spawnServe(
      [
        '--data-dir',
        dir,
        '--http-port',
        String(port),
        '--host',
        '127.0.0.1',
        '--mqtt-port',
        'off',
        '--public-url',
        'http://telemetry.local:8080/',
      ],
      { ready: /First run/ },
    );
    expect(serve.output()).toMatch(/open http:\/\/telemetry\.local:8080\/setup\?token=[0-9A-Za-z]{32}/);
    // The command-line alternative names this server's storage, so pasted in another directory
    // it creates the account where the server looks.
    const hint = /\(or: (echo .*)\)\n/.exec(serve.output())?.[1];
    expect(hint).toBe(
      `echo 'a password' | telemetryd accounts create --email you@example.com --password-stdin ${onPostgres ? '--database-url "$TELEMETRYD_DATABASE_URL"' : `--data-dir ${dir}`}`,
    );
    const pasted = spawnSync('sh', ['-c', hint!.replace('telemetryd ', `${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} `)], {
      cwd: tempDir(),
      encoding: 'utf8',
      env: { ...process.env, ...backendEnv(dir) },
    });
    expect(pasted.status, pasted.stderr).toBe(0);
    expect(runCli(['accounts', 'list', '--json'], { dataDir: dir }).json.data.map((a: { email: string }) => a.email)).toEqual([
      'you@example.com',
    ]);
    const started = Date.now();
    serve.child.kill('SIGINT');
    expect(await serve.exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  // A device on the LAN is given the machine's address there; the certificate must name it.
  const lanAddress = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && !a.internal && a.family === 'IPv4')?.address;
  it.skipIf(lanAddress === undefined)('listening on every interface, the generated certificate names the LAN addresses', async () => {
    const dir = tempDir();
    const serve = await spawnServe(['--data-dir', dir, '--http-port', '0', '--mqtt-port', '0', '--log-level', 'error'], {
      ready: /MQTT over TLS listening on [^\s]*:\d+/,
    });
    try {
      const port = Number(/MQTT over TLS listening on [^\s]*:(\d+)/.exec(serve.output())![1]);
      const certFile = path.join(dir, 'tls', 'cert.pem');
      const names = new X509Certificate(readFileSync(certFile)).subjectAltName ?? '';
      expect(names).toContain(`IP Address:${lanAddress}`);
      expect(names).toContain('DNS:localhost');
      // A client that checks the name connects by that address: the CONNECT is answered
      // (CONNACK 4, unknown device), not refused at the handshake.
      const pub = spawnSync(
        'mosquitto_pub',
        ['--cafile', certFile, '-h', lanAddress!, '-p', String(port), '-u', 'dev_x', '-P', 'x', '-t', 'd/dev_x/t', '-m', '{}'],
        { encoding: 'utf8', timeout: 10_000 },
      );
      expect(pub.stderr).toMatch(/not authori[sz]ed|bad user name or password/i);
      expect(pub.stderr).not.toMatch(/certificate|handshake|host name/i);
      expect(serve.output()).not.toContain('warning');
    } finally {
      serve.child.kill('SIGTERM');
      await serve.exited;
    }
  });

  it.skipIf(lanAddress === undefined || onPostgres)('warns when the machine has a LAN address its certificate does not name', async () => {
    const dir = tempDir();
    const start = async (host: string[]) => {
      const serve = await spawnServe(['--data-dir', dir, ...host, '--http-port', '0', '--mqtt-port', '0', '--log-level', 'error'], {
        ready: /MQTT over TLS listening on [^\s]*:\d+/,
      });
      serve.child.kill('SIGTERM');
      expect(await serve.exited).toBe(0);
      return serve.output();
    };
    // Made while listening on loopback only: the LAN address is not in it, as after a new lease.
    expect(await start(['--host', '127.0.0.1'])).not.toContain('warning');
    const warned = await start([]);
    const line = warned.split('\n').find((l) => l.startsWith('warning: the self-signed MQTT certificate was generated before'));
    expect(line, warned).toBeDefined();
    // "… had the address A, B: devices given it …": the machine's LAN address is among them.
    expect(line!.split(': devices')[0]!.split(/,? /)).toContain(lanAddress);
    // Generated again, it names the address and the warning is gone.
    rmSync(path.join(dir, 'tls'), { recursive: true });
    await start([]);
    expect(await start([])).not.toContain('warning');
  });

  it('warns when the certificate generated on an earlier start does not name the host of --public-url', async () => {
    const dir = tempDir();
    const start = async (publicUrl: string) => {
      const serve = await spawnServe(
        [
          '--data-dir',
          dir,
          '--host',
          '127.0.0.1',
          '--http-port',
          '0',
          '--mqtt-port',
          '0',
          '--public-url',
          publicUrl,
          '--log-level',
          'error',
        ],
        { ready: /First run/ },
      );
      serve.child.kill('SIGTERM');
      expect(await serve.exited).toBe(0);
      return serve.output();
    };
    // The first start generates the certificate for the names it is given.
    expect(await start('http://telemetry.example:8080')).toContain('generated self-signed certificate');
    expect(await start('http://telemetry.example:8080')).not.toContain('warning');
    // A later --public-url naming another host is not in it: devices checking that name would fail.
    const moved = await start('http://10.9.8.7:8080');
    expect(moved).toContain(
      'warning: the self-signed MQTT certificate was generated for other names and does not name 10.9.8.7 (--public-url/--host): devices that check it by that name fail the TLS handshake; ',
    );
    expect(moved).toContain(
      onPostgres
        ? 'give --tls-cert/--tls-key a certificate that does'
        : `delete ${path.join(dir, 'tls')} and start again to generate one that does`,
    );
  });

  it('a port in use ends the start with one line, and no listening line for a port that closes again', async () => {
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const port = (busy.address() as AddressInfo).port;
    try {
      const r = runCli(['serve', '--data-dir', tempDir(), '--host', '127.0.0.1', '--http-port', '0', '--mqtt-port', String(port)]);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(new RegExp(`^telemetryd: port already in use: .*127\\.0\\.0\\.1:${port}`, 'm'));
      expect(r.stdout).not.toContain('listening on');
    } finally {
      busy.close();
    }
  });

  // With --database-url several nodes share the database by design (test/cluster).
  it.skipIf(onPostgres)(
    'serves a SQLite data dir from one process at a time; admin commands and a restart after a crash still work',
    async () => {
      const dir = tempDir();
      const args = (port: number) => ['--data-dir', dir, '--host', '127.0.0.1', '--http-port', String(port), '--mqtt-port', 'off'];
      const first = await spawnServe(args(await freePort()));
      const secondPort = await freePort();
      const second = runCli(['serve', ...args(secondPort)], { timeoutMs: 10_000 });
      expect(second.status).toBe(1);
      expect(second.stderr.trim().split('\n')).toEqual([
        `telemetryd: another telemetryd serve is using the data dir ${dir} (it holds ${path.join(dir, 'serve.lock')}); stop it first, or start this one with another --data-dir`,
      ]);
      expect(second.stdout).not.toContain('listening on');
      await expect(fetch(`http://127.0.0.1:${secondPort}/healthz`)).rejects.toThrow();
      // The lock file holds nothing and has no journal beside it.
      expect(readdirSync(dir).filter((f) => f.startsWith('serve.lock'))).toEqual(['serve.lock']);
      // The lock is the server's alone: an admin command beside it writes, and the server sees it.
      const created = runCli(['accounts', 'create', '--email', 'lock@example.com', '--json'], { dataDir: dir });
      expect(created.status).toBe(0);
      // A server that dies without closing leaves no lock behind.
      first.child.kill('SIGKILL');
      await first.exited;
      const third = await spawnServe(args(await freePort()));
      expect(third.output()).toContain('HTTP listening on');
      expect(third.output()).not.toContain('First run');
      third.child.kill('SIGTERM');
      expect(await third.exited).toBe(0);
      // Whatever a lock file was found holding, it is emptied, not taken for a database.
      writeFileSync(path.join(dir, 'serve.lock'), 'not a database');
      const fourth = await spawnServe(args(await freePort()));
      expect(fourth.output()).toContain('HTTP listening on');
      fourth.child.kill('SIGTERM');
      expect(await fourth.exited).toBe(0);
      // Never through a link: the file it points to is left exactly as it was.
      const target = path.join(tempDir(), 'precious');
      writeFileSync(target, 'keep me');
      rmSync(path.join(dir, 'serve.lock'));
      symlinkSync(target, path.join(dir, 'serve.lock'));
      const linked = runCli(['serve', ...args(await freePort())], { timeoutMs: 10_000 });
      expect(linked.status).toBe(1);
      expect(linked.stderr).toBe(
        `telemetryd: ${path.join(dir, 'serve.lock')} is a symbolic link; remove it and start again (serve creates it)\n`,
      );
      expect(readFileSync(target, 'utf8')).toBe('keep me');
    },
  );

  it.skipIf(onPostgres)('lets go of the data dir when its database fails to open, so the next start on it serves', async () => {
    const dir = tempDir();
    // A folder where the database file should be: SQLite cannot open it.
    mkdirSync(path.join(dir, 'telemetryd.db'));
    const config = () =>
      buildServerConfig({ 'data-dir': dir, host: '127.0.0.1', 'http-port': '0', 'mqtt-port': 'off', 'log-level': 'silent' });
    await expect(startServer(config())).rejects.toThrow(/telemetryd\.db/);
    rmSync(path.join(dir, 'telemetryd.db'), { recursive: true });
    const server = await startServer(config());
    try {
      expect((await fetch(`${server.httpUrl}/healthz`)).status).toBe(200);
      // In the same process too, a second start on the dir is refused while this one serves.
      await expect(startServer(config())).rejects.toThrow(/another telemetryd serve is using the data dir/);
    } finally {
      await server.close();
    }
  });

  it('fails with one clear line for a bad option', async () => {
    const dir = tempDir();
    await expect(spawnServe(['--data-dir', dir, '--http-port', 'eighty'], { timeoutMs: 5_000 })).rejects.toThrow(
      /--http-port must be a port number/,
    );
  });

  it('refuses a public URL without a scheme and a certificate pair it cannot use, naming the flag, before listening', async () => {
    const dir = tempDir();
    const file = (name: string, contents: string) => {
      writeFileSync(path.join(dir, name), contents);
      return path.join(dir, name);
    };
    const notPem = file('not.pem', 'not a certificate\n');
    const { cert } = await generate([{ name: 'commonName', value: 'elsewhere' }], { keyType: 'ec', curve: 'P-256' });
    const certFile = file('cert.pem', cert);
    const otherKey = file(
      'other.key',
      generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    );
    const cases: [string[], RegExp][] = [
      [['--public-url', 'localhost:8080'], /^telemetryd: --public-url must be an http:\/\/ or https:\/\/ address, got "localhost:8080"$/],
      [['--tls-cert', path.join(dir, 'missing.pem'), '--tls-key', otherKey], /^telemetryd: --tls-cert \S+missing\.pem: no such file$/],
      [['--tls-cert', notPem, '--tls-key', otherKey], /^telemetryd: --tls-cert \S+not\.pem: not a PEM certificate$/],
      [['--tls-cert', certFile, '--tls-key', notPem], /^telemetryd: --tls-key \S+not\.pem: not a PEM private key$/],
      [
        ['--tls-cert', certFile, '--tls-key', otherKey],
        /^telemetryd: --tls-key \S+other\.key is not the private key of --tls-cert \S+cert\.pem$/,
      ],
    ];
    for (const [args, message] of cases) {
      const r = runCli(['serve', '--http-port', '0', '--mqtt-port', 'off', ...args], { dataDir: dir });
      expect(r.status).not.toBe(0);
      expect(r.stdout).not.toMatch(/listening/);
      expect(r.stderr.trim()).toMatch(message);
    }
  });

  describe('log lines', () => {
    const listening = /Server listening at http:\/\/127\.0\.0\.1:\d+/;
    const serveArgs = async (dir: string) => [
      '--data-dir',
      dir,
      '--host',
      '127.0.0.1',
      '--http-port',
      String(await freePort()),
      '--mqtt-port',
      'off',
    ];

    it('are JSON objects when stdout is not a terminal, and readable lines with --log-format pretty', async () => {
      const json = await spawnServe(await serveArgs(tempDir()), { ready: listening });
      const line = json
        .output()
        .split('\n')
        .find((l) => listening.test(l))!;
      expect(JSON.parse(line)).toMatchObject({ level: 30, msg: expect.stringMatching(listening) });
      json.child.kill('SIGTERM');
      expect(await json.exited).toBe(0);

      const pretty = await spawnServe([...(await serveArgs(tempDir())), '--log-format', 'pretty'], { ready: listening });
      expect(pretty.output()).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO {2}Server listening at http:\/\/127\.0\.0\.1:\d+$/m);
      expect(pretty.output()).not.toMatch(/^\{/m);
      pretty.child.kill('SIGTERM');
      expect(await pretty.exited).toBe(0);
    });

    it('are readable on a terminal by default', async () => {
      // script(1) gives serve a pseudo-terminal as stdout, as a person's shell would.
      const command = [process.execPath, CLI, 'serve', ...(await serveArgs(tempDir()))].map((a) => `'${a}'`).join(' ');
      const child = spawn('script', ['-qfec', command, '/dev/null']);
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      await expect.poll(() => out, { timeout: 15_000 }).toMatch(listening);
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
      expect(out).toMatch(/\d\d:\d\d:\d\d\.\d{3} INFO {2}Server listening at/);
      expect(out).not.toMatch(/"msg":/);
    });

    it('refuses an unknown format with one clear line', async () => {
      await expect(spawnServe([...(await serveArgs(tempDir())), '--log-format', 'xml'], { timeoutMs: 5_000 })).rejects.toThrow(
        /--log-format must be "pretty" or "json", got "xml"/,
      );
    });
  });

  it('version takes the options every command takes', () => {
    const dir = tempDir();
    const config = path.join(dir, 'config.json');
    writeFileSync(config, JSON.stringify({ 'data-dir': dir }));
    const r = runCli(['version', '--data-dir', dir, '--config', config, '--json']);
    expect(r.status).toBe(0);
    expect(r.json).toEqual({ version: expect.stringMatching(/^\d+\.\d+\.\d+/), commit: expect.any(String) });
  });
});
