import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { presentDeviceDetail } from '../src/domain/presenters.js';
import { DEVICE_TYPES } from '../src/domain/types.js';
import { badRequest } from '../src/errors.js';
import { collect, deleteCommand, runAdmin, warn, withCommonOptions } from './context.js';

const human = (d: ReturnType<typeof presentDeviceDetail>) =>
  `${d.id}  ${d.name}  ${d.type}  ${d.status}  last seen ${d.last_seen ?? 'never'}  rejected ${d.rejected_count}${d.last_rejection_reason ? ` (last: ${d.last_rejection_reason})` : ''}`;

/** `--field NAME[:LABEL[:UNIT]]` */
function parseFieldFlag(spec: string) {
  const [name, label, ...unit] = spec.split(':');
  return { name, label: label ?? name, unit: unit.join(':') };
}

function readFieldsFile(file: string): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw badRequest(`cannot read fields file ${file}: ${(err as Error).message}`);
  }
  if (!Array.isArray(parsed)) throw badRequest(`fields file ${file} must hold a JSON array of {name, label, unit}`);
  return parsed;
}

export function devicesCommand(): Command {
  const devices = new Command('devices').description('manage devices');

  withCommonOptions(
    devices
      .command('create')
      .description('create a device; its access token is printed once, only its hash is kept')
      .requiredOption('--account <account>', 'account id or email')
      .requiredOption('--name <name>', 'device name')
      .option('--type <type>', `${DEVICE_TYPES.join(', ')} (default: sensor)`)
      .option('--description <text>', 'free text')
      .option('--snapshots', 'allow camera snapshot uploads')
      .option('--schema <mode>', 'strict (only declared fields) or flexible; default strict on free, flexible otherwise')
      .option('--field <name[:label[:unit]]>', 'declare a data field (repeatable)', collect)
      .option('--fields-file <file.json>', 'declare data fields from a JSON array of {name, label, unit}'),
  ).action(
    (
      opts: {
        account: string;
        name: string;
        type?: string;
        description?: string;
        snapshots?: boolean;
        schema?: string;
        field?: string[];
        fieldsFile?: string;
      },
      cmd: Command,
    ) =>
      runAdmin(cmd, async ({ services, print }) => {
        const account = await services.accounts.resolve(opts.account);
        const fields = [
          ...(opts.fieldsFile ? (readFieldsFile(opts.fieldsFile) as unknown[]) : []),
          ...(opts.field ?? []).map(parseFieldFlag),
        ];
        const { device, accessToken } = await services.devices.create(account, {
          name: opts.name,
          type: opts.type,
          description: opts.description,
          snapshotsEnabled: Boolean(opts.snapshots),
          schemaMode: opts.schema,
          fields,
        });
        const { id, ...detail } = presentDeviceDetail(device);
        const shown = { id, access_token: accessToken, ...detail };
        print(shown, `created ${human(presentDeviceDetail(device))}\naccess token: ${accessToken}\n(shown once: store it now)`);
        // The free plan's default schema: without fields such a device stores nothing.
        if (detail.schema_mode === 'strict' && detail.fields.length === 0)
          warn(
            `${id} has a strict schema and no declared fields, so it refuses every reading: declare its fields in the dashboard, or create it with --field NAME or --schema flexible`,
          );
      }),
  );

  withCommonOptions(
    devices.command('list').description("list an account's devices").requiredOption('--account <account>', 'account id or email'),
  ).action((opts: { account: string }, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const account = await services.accounts.resolve(opts.account);
      const data = (await services.devices.list(account, { limit: Number.MAX_SAFE_INTEGER, offset: 0 })).devices.map(presentDeviceDetail);
      print({ data }, data.length ? data.map(human).join('\n') : 'no devices');
    }),
  );

  for (const action of ['pause', 'resume'] as const) {
    withCommonOptions(
      devices
        .command(action)
        .description(
          action === 'pause'
            ? 'pause a device: its data is refused (403) and MQTT sessions closed'
            : 'accept data from a paused device again',
        )
        .argument('<id>', 'dev_… id'),
    ).action((id: string, _o, cmd: Command) =>
      runAdmin(cmd, async ({ services, print }) => {
        const device = await services.devices.getAny(id);
        const shown = presentDeviceDetail(await services.devices[action](device));
        print(shown, human(shown));
      }),
    );
  }

  deleteCommand(devices, {
    what: 'a device and all its data',
    idHint: 'dev_… id',
    loses: 'all its data',
    find: (services, id) => services.devices.getAny(id),
    async remove(services, device) {
      const outside = await services.snapshots.snapshotsOutsideFolder(device);
      await services.devices.remove(device);
      if (outside.count > 0)
        process.stderr.write(
          `telemetryd: warning: ${device.id} had ${outside.count} snapshot${outside.count === 1 ? '' : 's'} but ${outside.folder} holds no folder of its files: they are left in the server's snapshots folder, under ${device.id}/, to remove by hand (is --snapshots-dir the server's?)\n`,
        );
    },
  });

  withCommonOptions(
    devices
      .command('regenerate-token')
      .description('issue a new access token; the old one stops working at once')
      .argument('<id>', 'dev_… id'),
  ).action((id: string, _o, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const { device, accessToken } = await services.devices.regenerateToken(await services.devices.getAny(id));
      print({ id: device.id, access_token: accessToken }, `access token: ${accessToken}\n(shown once: store it now)`);
    }),
  );

  return devices;
}
