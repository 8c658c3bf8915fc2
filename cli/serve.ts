import { Command } from 'commander';
import { buildServerConfig, SERVE_OPTIONS, type ServerConfig, STORAGE_OPTIONS } from '../src/config.js';
import type { startServer as StartServer } from '../src/server.js';
import { addSpecOption, fail, resolveRawOptions, withCommonOptions, withSourceOf } from './context.js';

/** Bound on a clean shutdown: exit 0 within 10 seconds (docs/operations.md, "Shutdown"). */
const SHUTDOWN_GRACE_MS = 8_000;

export function serveCommand(): Command {
  const serve = new Command('serve').description('run the server: HTTP (Public API, Device API, dashboard) and MQTT');
  withCommonOptions(serve);
  for (const spec of SERVE_OPTIONS) addSpecOption(serve, spec);
  serve.action(async (_opts, cmd: Command) => {
    let config: ServerConfig;
    try {
      config = buildServerConfig(resolveRawOptions(cmd, [...STORAGE_OPTIONS, ...SERVE_OPTIONS]), { stdoutIsTty: process.stdout.isTTY });
    } catch (err) {
      fail(withSourceOf(cmd, err));
    }
    // Signal handlers go in before start-up, so a SIGTERM during start still shuts down cleanly.
    let server: Awaited<ReturnType<typeof StartServer>> | null = null;
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      console.log(`${signal}: shutting down`);
      const timer = setTimeout(() => {
        console.error('shutdown took too long; exiting');
        process.exit(1);
      }, SHUTDOWN_GRACE_MS);
      timer.unref();
      if (!server) return; // start-up finishes, then sees `stopping`
      server.close().then(
        () => process.exit(0),
        (err) => {
          console.error(`shutdown failed: ${(err as Error).message}`);
          process.exit(1);
        },
      );
    };
    process.on('SIGINT', () => stop('SIGINT'));
    process.on('SIGTERM', () => stop('SIGTERM'));
    try {
      // Imported here so admin commands (accounts, keys, …) do not load fastify and aedes.
      const { startServer } = await import('../src/server.js');
      server = await startServer(config, { print: (line) => console.log(line) });
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      fail(e.code === 'EADDRINUSE' ? new Error(`port already in use: ${e.message}`) : withSourceOf(cmd, e));
    }
    if (stopping) {
      await server.close();
      process.exit(0);
    }
  });
  return serve;
}
