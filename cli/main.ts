import { Command, Option } from 'commander';
import { COMMIT, VERSION } from '../src/version.js';
import { accountsCommand } from './accounts.js';
import { alertsCommand } from './alerts.js';
import { backupCommands } from './backup.js';
import { failureLine, withCommonOptions } from './context.js';
import { devicesCommand } from './devices.js';
import { keysCommand } from './keys.js';
import { serveCommand } from './serve.js';

/** The telemetryd command line: a stable contract (docs/cli.md). */
export function buildProgram(): Command {
  const program = new Command('telemetryd')
    .description('Self-hosted IoT telemetry: HTTP and MQTT ingest, read-only Public API, web dashboard.')
    .version(VERSION, '-V, --version-flag', 'print the version number')
    .enablePositionalOptions();
  // `--version` as most commands spell it, beside the documented `-V, --version-flag`
  // (commander gives its version option one long name).
  program.addOption(new Option('--version').hideHelp());
  program.on('option:version', () => {
    process.stdout.write(`${VERSION}\n`);
    process.exit(0);
  });

  program.addCommand(serveCommand());
  program.addCommand(accountsCommand());
  program.addCommand(keysCommand());
  program.addCommand(devicesCommand());
  program.addCommand(alertsCommand());
  for (const cmd of backupCommands()) program.addCommand(cmd);
  // Like every command it takes --data-dir, --config and --json, so scripts can pass the
  // same common options to all of them; it reads neither.
  withCommonOptions(program.command('version').description('print the version and build commit')).action((opts: { json?: boolean }) => {
    process.stdout.write(opts.json ? `${JSON.stringify({ version: VERSION, commit: COMMIT })}\n` : `telemetryd ${VERSION} (${COMMIT})\n`);
  });
  unknownOptionsFirst(program);
  oneLineUsageErrors(program);
  return program;
}

/**
 * A mistyped option is reported as unknown (with commander's "Did you mean"), not as the
 * required option it was meant to be: commander checks required options before unknown ones,
 * so `keys create --acount 1` would say that `--account` is missing. Required options are
 * checked here instead, in a preAction hook, which runs after the check for unknown options.
 */
function unknownOptionsFirst(program: Command): void {
  const required = new WeakSet<Option>();
  const collect = (cmd: Command) => {
    for (const option of cmd.options) {
      if (!option.mandatory) continue;
      option.makeOptionMandatory(false);
      required.add(option);
    }
    for (const sub of cmd.commands) collect(sub);
  };
  collect(program);
  program.hook('preAction', (_program, action) => {
    for (const option of action.options) {
      if (required.has(option) && action.getOptionValue(option.attributeName()) === undefined) {
        action.error(`required option '${option.flags}' not specified`, { code: 'commander.missingMandatoryOptionValue' });
      }
    }
  });
}

/**
 * commander's usage errors (an unknown command or option, a missing argument) in the one-line
 * form of every other failure (docs/cli.md, "Output and exit status"), pointing at the help
 * of the command that was being parsed. Set on each command: added commands inherit nothing.
 */
function oneLineUsageErrors(cmd: Command, path: string[] = []): void {
  const names = [...path, cmd.name()];
  cmd.configureOutput({
    outputError: (message, write) => {
      const text = message
        .replace(/^error: /, '')
        .trim()
        .replace(/\s*\n\s*/g, ' ');
      write(`telemetryd: ${text} (see ${names.join(' ')} --help)\n`);
    },
  });
  for (const sub of cmd.commands) oneLineUsageErrors(sub, names);
}

async function main() {
  await buildProgram().parseAsync(process.argv);
}

main().catch((err: unknown) => {
  process.stderr.write(`${failureLine(err)}\n`);
  process.exit(1);
});
