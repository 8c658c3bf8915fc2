import { type ChildProcess, type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { onTestFinished } from 'vitest';
import { backendEnv } from './backend.js';
import { CLI } from './cli.js';

/** A port that was free a moment ago (for child processes that need a known port). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export interface ServeProcess {
  child: ChildProcessWithoutNullStreams;
  output: () => string;
  /** Resolves with the exit code once the process ends. */
  exited: Promise<number | null>;
}

/**
 * Kills `child` once the test that started it has finished, passed or failed: a test that
 * fails before stopping its server must not leave it running. A child started outside a
 * test (a beforeAll) is left to its afterAll.
 */
export function killWhenTestEnds(child: ChildProcess): void {
  try {
    onTestFinished(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
  } catch {
    // Not inside a test.
  }
}

/**
 * Starts `telemetryd serve` as a child process and waits until a line matches `ready`. Its
 * `--data-dir` gets that data dir's database on a PostgreSQL test run (backend.ts).
 */
export async function spawnServe(
  args: string[],
  opts: { env?: Record<string, string>; ready?: RegExp; timeoutMs?: number } = {},
): Promise<ServeProcess> {
  const dataDirAt = args.indexOf('--data-dir');
  const dataDir = dataDirAt >= 0 ? args[dataDirAt + 1] : undefined;
  const child = spawn(process.execPath, [CLI, 'serve', ...args], { env: { ...process.env, ...backendEnv(dataDir), ...opts.env } });
  killWhenTestEnds(child);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const ready = opts.ready ?? /HTTP listening on/;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start:\n${out}`)), opts.timeoutMs ?? 15_000);
    const check = () => {
      if (ready.test(out)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', check);
    child.stderr.on('data', check);
    child.on('exit', () => {
      clearTimeout(timer);
      reject(new Error(`serve exited early:\n${out}`));
    });
  });
  return { child, output: () => out, exited };
}
