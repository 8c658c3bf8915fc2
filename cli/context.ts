import { existsSync } from 'node:fs';
import path from 'node:path';
import { type Command, Option } from 'commander';
import { newerSchemaWarning, openStorage, type Services } from '../src/composition.js';
import {
  buildStorageConfig,
  CONFIG_OPTION,
  ConfigError,
  envName,
  loadConfigFile,
  type OptionSpec,
  STORAGE_OPTIONS,
  type StorageConfig,
} from '../src/config.js';
import { AppError, badRequest } from '../src/errors.js';
import { DB_FILE } from '../src/storage/db.js';
import { DatabaseUrlError } from '../src/storage/postgres/connect.js';

/** Declares an option once: flag, TELEMETRYD_<FLAG> env var, and its default in the help. */
export function addSpecOption(cmd: Command, spec: OptionSpec): Command {
  const description = spec.default !== undefined ? `${spec.description} (default: ${spec.default})` : spec.description;
  return cmd.addOption(new Option(spec.flags, description).env(envName(spec.name)));
}

/** Options every command takes: --data-dir, --snapshots-dir, --database-url, --config, --json. */
export function withCommonOptions(cmd: Command): Command {
  for (const spec of STORAGE_OPTIONS) addSpecOption(cmd, spec);
  addSpecOption(cmd, CONFIG_OPTION);
  return cmd.option('--json', 'print exactly one JSON object on stdout');
}

const camel = (name: string) => name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

/**
 * flag > env > config file > default (docs/operations.md, "Configuration"): commander has already applied the
 * flag and env; values absent from both are taken from the config file. Defaults are applied
 * by buildServerConfig, after this.
 */
export function resolveRawOptions(cmd: Command, specs: OptionSpec[]): Record<string, unknown> {
  const opts = cmd.opts() as Record<string, unknown>;
  if (isBlank(opts.config)) throw new ConfigError(emptyValue(cmd, CONFIG_OPTION.name));
  const file = typeof opts.config === 'string' ? loadConfigFile(opts.config) : {};
  const out: Record<string, unknown> = {};
  for (const spec of specs) {
    const fromCli = opts[camel(spec.name)];
    if (fromCli !== undefined) {
      if (isBlank(fromCli)) throw new ConfigError(emptyValue(cmd, spec.name));
      out[spec.name] = fromCli;
    } else {
      if (isBlank(file[spec.name]))
        throw new ConfigError(`config file ${opts.config}: "${spec.name}" is empty; leave it out for the default`);
      out[spec.name] = file[spec.name];
    }
  }
  return out;
}

/**
 * A bad value's message names its flag; when the value came from the environment or the
 * config file, it says so, since the user never typed that flag.
 */
export function withSourceOf(cmd: Command, err: unknown): unknown {
  // A database URL that does not parse or connect names --database-url too.
  const option = err instanceof ConfigError ? err.option : err instanceof DatabaseUrlError ? 'database-url' : undefined;
  if (option === undefined) return err;
  const source = cmd.getOptionValueSource(camel(option));
  const config = cmd.opts().config;
  const from = source === 'env' ? envName(option) : source === undefined && typeof config === 'string' ? `config file ${config}` : null;
  return from ? new ConfigError(`${(err as Error).message} (from ${from})`, option) : err;
}

/**
 * An empty value is refused, never read as "unset": an unset variable in a script's
 * `--database-url "$URL"` would otherwise open a SQLite database in the working directory,
 * and an empty `--mqtt-port` would turn MQTT off without a word.
 */
const isBlank = (value: unknown) => typeof value === 'string' && value.trim() === '';

function emptyValue(cmd: Command, name: string): string {
  return cmd.getOptionValueSource(camel(name)) === 'env'
    ? `${envName(name)} is set but empty; unset it for the default`
    : `--${name} is empty`;
}

export interface CommandContext {
  services: Services;
  json: boolean;
  /** Prints the JSON object with --json, else the human text. */
  print(json: unknown, human: string): void;
}

/**
 * Runs an admin command against the data dir's SQLite database or the PostgreSQL database of
 * --database-url: opens it (the server may hold it too; on SQLite busy_timeout makes us wait
 * rather than fail), runs, closes. A running server sees the change at once (SQLite: its
 * data_version watch; PostgreSQL: the change notification the commit sends). Failures print one line
 * on stderr and exit non-zero; with --json nothing is printed on stdout.
 */
export async function runAdmin(cmd: Command, fn: (ctx: CommandContext) => Promise<void> | void): Promise<void> {
  const opts = cmd.opts() as { json?: boolean };
  const json = Boolean(opts.json);
  let hint: string | undefined;
  try {
    const storage = storageOf(cmd);
    const newDataDir = !storage.databaseUrl && !existsSync(path.join(storage.dataDir, DB_FILE));
    const composition = await openStorage(storage);
    const { services } = composition;
    const newerSchema = newerSchemaWarning(composition.storage.schema);
    if (newerSchema) process.stderr.write(`telemetryd: warning: ${newerSchema}\n`);
    try {
      await fn({
        services,
        json,
        print(value, human) {
          process.stdout.write(json ? `${JSON.stringify(value)}\n` : human.endsWith('\n') ? human : `${human}\n`);
        },
      });
    } catch (err) {
      // Run from another directory, a command opens a new, empty ./telemetryd-data: say so
      // rather than only that the account or device it names does not exist, on this run
      // and on the next (the database it created is still empty then).
      if (err instanceof AppError && err.status === 404 && (await services.accounts.list()).length === 0) {
        hint = storage.databaseUrl
          ? "the database holds no accounts; is --database-url the server's?"
          : `${storage.dataDir} ${newDataDir ? 'held no database: this command created an empty one' : 'holds no accounts'}; is --data-dir the server's?`;
      }
      throw err;
    } finally {
      await composition.close();
    }
  } catch (err) {
    fail(withSourceOf(cmd, err), hint);
  }
}

/**
 * `<group> delete <id> --yes`: a permanent deletion. The thing is looked up first, so one
 * that does not exist is reported as such (exit 3), confirmed or not; without --yes nothing
 * is deleted and the error says what would go.
 */
export function deleteCommand<T>(
  group: Command,
  spec: {
    what: string;
    idHint: string;
    loses: string;
    find: (services: Services, id: string) => Promise<T>;
    remove: (services: Services, found: T) => Promise<void>;
  },
): void {
  withCommonOptions(
    group
      .command('delete')
      .description(`delete ${spec.what}, permanently`)
      .argument('<id>', spec.idHint)
      .option('--yes', 'confirm the deletion'),
  ).action((id: string, opts: { yes?: boolean }, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const found = await spec.find(services, id);
      if (!opts.yes) throw badRequest(`deleting ${id} removes ${spec.loses}; repeat with --yes to confirm`);
      await spec.remove(services, found);
      print({ deleted: id }, `deleted ${id}`);
    }),
  );
}

/** Where a command's data is (data dir, snapshots dir, database URL): flag > env > config file > default. */
export function storageOf(cmd: Command): StorageConfig {
  return buildStorageConfig(resolveRawOptions(cmd, STORAGE_OPTIONS));
}

/**
 * A failure's message as the one line scripts read: line breaks inside it (a JSON parser's
 * message quotes the text it could not read, line breaks and all) are written as `\n`.
 */
export function failureLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return `telemetryd: ${message.replace(/\r?\n/g, '\\n')}`;
}

/** Prints the one-line failure and exits: 3 for something named that does not exist (with `notFoundHint` then), else 1. */
export function fail(err: unknown, notFoundHint?: string): never {
  const notFound = err instanceof AppError && err.status === 404;
  process.stderr.write(`${failureLine(err)}${notFound && notFoundHint ? ` (${notFoundHint})` : ''}\n`);
  process.exit(notFound ? 3 : 1);
}

/** Parses a whole non-negative number option, with a clear message. */
export function intOption(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) throw new Error(`${name} must be a whole number >= 0, got "${value}"`);
    return n;
  };
}

export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** A warning on stderr: stdout keeps its one line or JSON object. */
export function warn(message: string): void {
  process.stderr.write(`telemetryd: warning: ${message}\n`);
}

/**
 * `--password-stdin`: the whole of standard input (less one final newline) when it is a pipe
 * or a file; at a terminal, one line typed after a prompt on stderr, not echoed.
 */
export async function readPassword(): Promise<string> {
  const stdin = process.stdin;
  if (!stdin.isTTY) {
    const piped = await readStdin();
    // Nothing at all is a forgotten pipe (a script run without its input), not a short password.
    if (piped === '')
      throw new Error("no password on standard input (--password-stdin): pipe it in, e.g. echo 'a long password' | telemetryd …");
    return piped;
  }
  process.stderr.write('password (not shown; end with Enter): ');
  stdin.setRawMode(true);
  stdin.setEncoding('utf8');
  let typed: string[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const onData = (chunk: string) => {
        for (const ch of chunk) {
          if (ch === '\r' || ch === '\n' || ch === '\u0004') {
            stdin.off('data', onData);
            return resolve();
          }
          if (ch === '\u0003') {
            stdin.off('data', onData);
            return reject(new Error('no password given (interrupted)'));
          }
          if (ch === '\u007f' || ch === '\b') typed = typed.slice(0, -1);
          else typed.push(ch);
        }
      };
      stdin.on('data', onData);
      stdin.resume();
    });
  } finally {
    stdin.setRawMode(false);
    stdin.pause();
    process.stderr.write('\n');
  }
  return typed.join('');
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
}
