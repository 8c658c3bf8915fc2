import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { CLI, type CliResult, runCliAsync } from './cli.js';
import { clusterHaproxyConfig, type NodePorts } from './clusterConfig.js';
import { type RunningHaproxy, runHaproxy } from './haproxy.js';
import { createDatabase, type PostgresServer, startPostgres } from './postgres.js';
import { freePort } from './process.js';
import { tempDir } from './server.js';

/**
 * A cluster for end-to-end tests: a throwaway PostgreSQL, N `serve` processes of the built
 * bundle (dist/telemetryd.cjs) on the same database URL and the same snapshots folder, each
 * with its own data dir and ports, and Debian's haproxy in front of them with the
 * configuration `clusterHaproxyConfig` generates (clusterConfig.ts; the one docs/cluster.md shows).
 *
 * Nodes are real child processes, so a test can kill -9 one and start it again on the same
 * ports (haproxy's configuration names them), and stop PostgreSQL under them.
 */

interface ClusterNode {
  /** 0-based index; haproxy calls it node<index+1>. */
  index: number;
  ports: NodePorts;
  dataDir: string;
  /** The node's own HTTP address, bypassing haproxy. */
  url: string;
  proc: ChildProcess;
  /** Everything this node printed since its last start. */
  output: () => string;
  /** Resolves when the current process ends. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface Cluster {
  pg: PostgresServer;
  databaseUrl: string;
  snapshotsDir: string;
  nodes: ClusterNode[];
  haproxy: RunningHaproxy;
  /** http://127.0.0.1:<haproxy HTTP port> */
  url: string;
  /** haproxy's plain MQTT port (PROXY v2 to each node's plain listener). */
  mqttPlainPort: number;
  /** haproxy's MQTT over TLS port. */
  mqttTlsPort: number;
  /** kill -9 of a node; resolves once the process is gone. */
  kill(index: number): Promise<void>;
  /** Starts a killed (or stopped) node again on its ports and data dir; resolves once it listens. */
  restart(index: number): Promise<void>;
  /** Stops PostgreSQL at once, like a crash (the nodes keep running). */
  stopPostgres(): Promise<void>;
  startPostgres(): Promise<void>;
  /** Runs the built CLI with `--database-url` of the cluster; `input` goes to its stdin. */
  cli(args: string[], input?: string): Promise<CliResult>;
  /** Waits until haproxy's checks see every live node up (after a restart). */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** Stops haproxy, every node and PostgreSQL, and removes every temp dir. */
  stop(): Promise<void>;
}

export interface ClusterOptions {
  nodes?: number;
  /** Extra `serve` options for every node. */
  serveArgs?: string[];
  /** Extra environment for every node. */
  env?: Record<string, string>;
}

/** Children to kill when the test process exits without having stopped the cluster. */
const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const count = options.nodes ?? 3;
  const pg = await startPostgres();
  const root = tempDir('telemetryd-cluster-');
  const cleanups: (() => Promise<void>)[] = [async () => pg.stop(), async () => rmSync(root, { recursive: true, force: true })];
  try {
    const databaseUrl = await createDatabase(pg, 'cluster');
    const snapshotsDir = path.join(root, 'shared-snapshots');
    mkdirSync(snapshotsDir, { mode: 0o700 });
    const nodes: ClusterNode[] = [];
    const argsOf = (n: { ports: NodePorts; dataDir: string }) => [
      'serve',
      '--data-dir',
      n.dataDir,
      '--database-url',
      databaseUrl,
      '--snapshots-dir',
      snapshotsDir,
      '--host',
      '127.0.0.1',
      '--http-port',
      String(n.ports.http),
      '--mqtt-port',
      String(n.ports.mqttTls),
      '--mqtt-plain-port',
      String(n.ports.mqttPlain),
      '--trust-proxy',
      '--mqtt-proxy-protocol',
      '--log-level',
      'warn',
      ...(options.serveArgs ?? []),
    ];
    const launch = async (index: number, ports: NodePorts, dataDir: string): Promise<ClusterNode> => {
      const proc = spawn(process.execPath, [CLI, ...argsOf({ ports, dataDir })], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, ...options.env },
      });
      live.add(proc);
      let out = '';
      proc.stdout!.on('data', (d) => (out += d));
      proc.stderr!.on('data', (d) => (out += d));
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        proc.once('exit', (code, signal) => {
          live.delete(proc);
          resolve({ code, signal });
        }),
      );
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`node${index + 1} did not start:\n${out}`)), 30_000);
        const check = () => {
          if (/HTTP listening on/.test(out) && /MQTT without TLS listening on/.test(out) && /MQTT over TLS listening on/.test(out)) {
            clearTimeout(timer);
            resolve();
          }
        };
        proc.stdout!.on('data', check);
        void exited.then(() => {
          clearTimeout(timer);
          reject(new Error(`node${index + 1} exited before listening:\n${out}`));
        });
      });
      return { index, ports, dataDir, url: `http://127.0.0.1:${ports.http}`, proc, output: () => out, exited };
    };
    const stopNode = async (n: ClusterNode, signal: NodeJS.Signals) => {
      if (n.proc.exitCode === null && n.proc.signalCode === null) n.proc.kill(signal);
      await n.exited;
    };
    cleanups.unshift(async () => {
      await Promise.all(nodes.map((n) => stopNode(n, 'SIGKILL')));
    });

    const newPorts = async (): Promise<NodePorts> => ({ http: await freePort(), mqttPlain: await freePort(), mqttTls: await freePort() });
    // A port found free can be taken by another test's process before the node binds it:
    // a first start that fails that way is tried again on other ports (haproxy's
    // configuration is written after, with the ports the nodes got).
    const firstLaunch = async (index: number): Promise<ClusterNode> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await launch(index, await newPorts(), path.join(root, `node${index + 1}`));
        } catch (err) {
          if (attempt >= 3 || !/EADDRINUSE|port already in use/.test(String(err))) throw err;
        }
      }
    };
    // The first node alone migrates the schema (others would wait on its lock anyway), then
    // the rest start together.
    nodes.push(await firstLaunch(0));
    nodes.push(...(await Promise.all(Array.from({ length: count - 1 }, (_, j) => firstLaunch(j + 1)))));
    const portsOf = nodes.map((n) => n.ports);

    const front = { http: await freePort(), mqttTls: await freePort(), mqttPlain: await freePort() };
    const config = clusterHaproxyConfig({
      bind: { http: `127.0.0.1:${front.http}`, mqttTls: `127.0.0.1:${front.mqttTls}`, mqttPlain: `127.0.0.1:${front.mqttPlain}` },
      nodes: portsOf,
      checkInterval: '200',
    });
    const haproxy = await runHaproxy(config, { http: front.http, mqttTls: front.mqttTls, mqttPlain: front.mqttPlain });
    cleanups.unshift(() => haproxy.stop());

    const cluster: Cluster = {
      pg,
      databaseUrl,
      snapshotsDir,
      nodes,
      haproxy,
      url: `http://127.0.0.1:${front.http}`,
      mqttPlainPort: front.mqttPlain,
      mqttTlsPort: front.mqttTls,
      async kill(index) {
        await stopNode(nodes[index]!, 'SIGKILL');
      },
      async restart(index) {
        const old = nodes[index]!;
        await stopNode(old, 'SIGKILL');
        nodes[index] = await launch(index, old.ports, old.dataDir);
      },
      stopPostgres: () => pg.kill(),
      startPostgres: () => pg.start(),
      cli: (args, input) => runCliAsync([...args, '--database-url', databaseUrl], { input }),
      async waitHealthy(timeoutMs = 10_000) {
        const end = Date.now() + timeoutMs;
        for (;;) {
          const checks = await Promise.all(
            nodes.map((n) =>
              fetch(`${n.url}/healthz`)
                .then((r) => r.status === 200)
                .catch(() => false),
            ),
          );
          // Two passing haproxy checks (rise 2) after the node answers.
          if (checks.every(Boolean)) return new Promise((r) => setTimeout(r, 600));
          if (Date.now() > end) throw new Error(`nodes not healthy: ${JSON.stringify(checks)}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      },
      async stop() {
        for (const c of cleanups.splice(0)) await c();
      },
    };
    return cluster;
  } catch (err) {
    for (const c of cleanups.splice(0)) await c().catch(() => {});
    throw err;
  }
}
