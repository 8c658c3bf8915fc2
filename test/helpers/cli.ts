import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { backendEnv } from './backend.js';

export const CLI = path.resolve('dist/telemetryd.cjs');

export interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
  json: any;
}

/**
 * Runs the built CLI bundle in a child process, as a script would. On a PostgreSQL test run
 * a command on a data dir gets that data dir's database (TELEMETRYD_DATABASE_URL, backend.ts).
 */
export function runCli(
  args: string[],
  opts: { dataDir?: string; input?: string; env?: Record<string, string>; timeoutMs?: number } = {},
): CliResult {
  const full = opts.dataDir ? [...args, '--data-dir', opts.dataDir] : args;
  const r = spawnSync(process.execPath, [CLI, ...full], {
    encoding: 'utf8',
    input: opts.input,
    // A command that should end at once but does not (a `serve` expected to refuse) is killed,
    // and its status null fails the test, rather than the test hanging.
    timeout: opts.timeoutMs,
    env: { ...process.env, ...backendEnv(opts.dataDir ?? opts.env?.TELEMETRYD_DATA_DIR), ...opts.env },
  });
  let json: unknown;
  if (args.includes('--json') && r.status === 0) json = JSON.parse(r.stdout);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, json };
}

/** Async variant for when a server runs in the same test process (keeps its event loop free). */
export function runCliAsync(args: string[], opts: { dataDir?: string; input?: string } = {}): Promise<CliResult> {
  const full = opts.dataDir ? [...args, '--data-dir', opts.dataDir] : args;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...full], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...backendEnv(opts.dataDir) },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (status) => {
      let json: unknown;
      if (args.includes('--json') && status === 0) json = JSON.parse(stdout);
      resolve({ status, stdout, stderr, json });
    });
    child.stdin.end(opts.input ?? '');
  });
}
