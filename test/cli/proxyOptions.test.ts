/**
 * --trust-proxy and --mqtt-proxy-protocol through the real CLI: a bare flag, its environment
 * variable and its config-file key (flag > env > file), and a clear refusal of a bad value.
 */
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { freePort, type ServeProcess, spawnServe } from '../helpers/process.js';
import { tempDir } from '../helpers/server.js';

const PROXY_PROTOCOL_LINE = 'MQTT listeners expect a PROXY protocol header on every connection';

async function serveOutput(args: string[], env: Record<string, string> = {}): Promise<string> {
  const dir = tempDir();
  const port = await freePort();
  const serve = await spawnServe(
    ['--data-dir', dir, '--host', '127.0.0.1', '--http-port', String(port), '--mqtt-port', '0', '--log-level', 'warn', ...args],
    // The first-run line comes last: once it is there, everything start-up prints is.
    { env, ready: /First run: open/ },
  );
  const output = serve.output();
  serve.child.kill('SIGTERM');
  expect(await serve.exited).toBe(0);
  return output;
}

describe('serve proxy options', () => {
  it('takes bare flags, and the same from the environment and a config file', async () => {
    const bare = await serveOutput(['--trust-proxy', '--mqtt-proxy-protocol']);
    expect(bare).toContain('HTTP client addresses come from X-Forwarded-For set by a proxy at a loopback or private address');
    expect(bare).toContain(PROXY_PROTOCOL_LINE);

    const fromEnv = await serveOutput([], { TELEMETRYD_TRUST_PROXY: '10.0.0.5,10.1.0.0/16', TELEMETRYD_MQTT_PROXY_PROTOCOL: 'on' });
    expect(fromEnv).toContain('set by proxies at 10.0.0.5, 10.1.0.0/16 (--trust-proxy)');
    expect(fromEnv).toContain(PROXY_PROTOCOL_LINE);

    const config = path.join(tempDir(), 'config.json');
    writeFileSync(config, JSON.stringify({ 'trust-proxy': ['192.168.1.2'], 'mqtt-proxy-protocol': true }));
    const fromFile = await serveOutput(['--config', config]);
    expect(fromFile).toContain('set by proxies at 192.168.1.2 (--trust-proxy)');
    expect(fromFile).toContain(PROXY_PROTOCOL_LINE);

    // The environment beats the file; "off" turns both off.
    const off = await serveOutput(['--config', config], { TELEMETRYD_TRUST_PROXY: 'off', TELEMETRYD_MQTT_PROXY_PROTOCOL: 'off' });
    expect(off).not.toContain('X-Forwarded-For');
    expect(off).not.toContain(PROXY_PROTOCOL_LINE);

    const neither = await serveOutput([]);
    expect(neither).not.toContain('X-Forwarded-For');
    expect(neither).not.toContain(PROXY_PROTOCOL_LINE);
  });

  it('warns, at most once a minute, about connections that come without a PROXY header', async () => {
    const serve = await spawnServe(
      [
        '--data-dir',
        tempDir(),
        '--host',
        '127.0.0.1',
        '--http-port',
        String(await freePort()),
        '--mqtt-port',
        '0',
        '--mqtt-proxy-protocol',
      ],
      { ready: /First run: open/ },
    );
    const mqttPort = Number(/MQTT over TLS listening on 127\.0\.0\.1:(\d+)/.exec(serve.output())![1]);
    const clientHello = Buffer.from([0x16, 0x03, 0x01, 0x00]); // a TLS ClientHello's start
    expect(await warningsAfter(serve, mqttPort, [clientHello, clientHello, clientHello], /without a valid PROXY header closed/g)).toBe(1);
  });

  it('without it, warns at most once a minute about connections to the TLS port that start with a PROXY header or plain MQTT', async () => {
    const serve = await spawnServe(
      ['--data-dir', tempDir(), '--host', '127.0.0.1', '--http-port', String(await freePort()), '--mqtt-port', '0', '--log-level', 'debug'],
      { ready: /First run: open/ },
    );
    const mqttPort = Number(/MQTT over TLS listening on 127\.0\.0\.1:(\d+)/.exec(serve.output())![1]);
    const starts = [
      Buffer.from('PROXY TCP4 10.1.2.3 127.0.0.1 40000 8883\r\n'),
      Buffer.from('\r\n\r\n\0\r\nQUIT\n'), // PROXY v2's signature
      Buffer.from([0x10, 0x10, 0x00, 0x04, 0x4d, 0x51, 0x54, 0x54]), // a plain MQTT CONNECT's start
    ];
    expect(await warningsAfter(serve, mqttPort, starts, /did not start with TLS closed/g)).toBe(1);
    // Each of them was no TLS record at all, which is what the warning is for.
    expect(
      serve.output().match(/MQTT TLS handshake failed.*wrong version number|wrong version number.*MQTT TLS handshake failed/g),
    ).toHaveLength(3);
  });

  it('refuses a bad value with one clear line', () => {
    const dir = tempDir();
    const badProxy = runCli(['serve', '--data-dir', dir, '--trust-proxy', 'haproxy.lan']);
    expect(badProxy.status).not.toBe(0);
    expect(badProxy.stderr).toMatch(/--trust-proxy takes on\/off or IP addresses and CIDR ranges/);
    const badSwitch = runCli(['serve', '--data-dir', dir], { env: { TELEMETRYD_MQTT_PROXY_PROTOCOL: 'maybe' } });
    expect(badSwitch.status).not.toBe(0);
    expect(badSwitch.stderr).toMatch(/--mqtt-proxy-protocol must be on or off, got "maybe"/);
  });
});

/**
 * Opens one connection to `port` per entry of `starts`, sends it and waits until the server
 * closes it; then stops the server and counts the log lines matching `warning`.
 */
async function warningsAfter(serve: ServeProcess, port: number, starts: Buffer[], warning: RegExp): Promise<number> {
  for (const start of starts) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.resume();
    await new Promise((resolve) => {
      socket.once('connect', () => socket.write(start));
      socket.once('close', resolve);
    });
  }
  await new Promise((r) => setTimeout(r, 200));
  const warnings = serve.output().match(warning) ?? [];
  serve.child.kill('SIGTERM');
  expect(await serve.exited).toBe(0);
  return warnings.length;
}
