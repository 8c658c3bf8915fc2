import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
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
    const started = Date.now();
    serve.child.kill('SIGINT');
    expect(await serve.exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('fails with one clear line for a bad option', async () => {
    const dir = tempDir();
    await expect(spawnServe(['--data-dir', dir, '--http-port', 'eighty'], { timeoutMs: 5_000 })).rejects.toThrow(
      /--http-port must be a port number/,
    );
  });
});
