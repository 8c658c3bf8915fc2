import { type ChildProcess, spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort } from './process.js';
import { tempDir } from './server.js';

/** Debian's haproxy (.ci/run installs it). */
const HAPROXY = '/usr/sbin/haproxy';

export interface Frontend {
  name: string;
  mode: 'http' | 'tcp';
  /** Lines of the frontend section after `bind`, e.g. `option forwardfor`. */
  frontendLines?: string[];
  /** The backend's one server line after `server node`, e.g. `127.0.0.1:8080 send-proxy-v2`. */
  server: string;
  /** Lines of the backend section before its server line, e.g. `option httpchk GET /healthz`. */
  backendLines?: string[];
}

export interface RunningHaproxy {
  /** Port of each frontend by name, on 127.0.0.1. */
  ports: Record<string, number>;
  config: string;
  output: () => string;
  stop(): Promise<void>;
}

/**
 * Starts a real haproxy in the foreground with a config generated into a temp dir, one
 * frontend/backend pair per entry on free ports, and waits until every frontend accepts
 * connections.
 */
export async function startHaproxy(frontends: Frontend[]): Promise<RunningHaproxy> {
  const ports: Record<string, number> = {};
  const sections = ['global', '  maxconn 256', '', 'defaults', '  timeout connect 5s', '  timeout client 30s', '  timeout server 30s', ''];
  for (const f of frontends) {
    ports[f.name] = await freePort();
    sections.push(
      `frontend ${f.name}`,
      `  mode ${f.mode}`,
      `  bind 127.0.0.1:${ports[f.name]}`,
      ...(f.frontendLines ?? []).map((l) => `  ${l}`),
    );
    sections.push(`  default_backend ${f.name}_node`, '');
    sections.push(
      `backend ${f.name}_node`,
      `  mode ${f.mode}`,
      ...(f.backendLines ?? []).map((l) => `  ${l}`),
      `  server node ${f.server}`,
      '',
    );
  }
  return runHaproxy(sections.join('\n'), ports);
}

/**
 * Runs haproxy in the foreground on `config` (written into a temp dir) and waits until each
 * of `ports` on 127.0.0.1 accepts connections.
 */
export async function runHaproxy(config: string, ports: Record<string, number>): Promise<RunningHaproxy> {
  const dir = tempDir('telemetryd-haproxy-');
  const file = path.join(dir, 'haproxy.cfg');
  writeFileSync(file, config);
  const child: ChildProcess = spawn(HAPROXY, ['-db', '-f', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const port of Object.values(ports))
      await waitForPort(
        port,
        () => child.exitCode !== null,
        () => out,
      );
  } catch (err) {
    await stop();
    throw err;
  }
  return { ports, config, output: () => out, stop };
}

async function waitForPort(port: number, gone: () => boolean, output: () => string): Promise<void> {
  const end = Date.now() + 10_000;
  for (;;) {
    if (gone()) throw new Error(`haproxy exited:\n${output()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    if (Date.now() > end) throw new Error(`haproxy did not listen on ${port}:\n${output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
