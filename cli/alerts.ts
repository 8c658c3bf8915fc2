import { Command } from 'commander';
import type { AlertInput } from '../src/domain/alerts.js';
import { presentAlertDetail } from '../src/domain/presenters.js';
import { ALERT_ACTIONS, ALERT_OPERATORS, ALERT_SEVERITIES, NO_DATA_MAX_SECONDS, NO_DATA_MIN_SECONDS } from '../src/domain/types.js';
import { badRequest } from '../src/errors.js';
import { collect, deleteCommand, intOption, runAdmin, withCommonOptions } from './context.js';

const human = (a: ReturnType<typeof presentAlertDetail>) =>
  `${a.id}  ${a.name}  ${a.device_id}  ${
    a.kind === 'no_data'
      ? `no data on ${a.condition.field} for ${a.condition.value}s`
      : `${a.condition.field} ${a.condition.operator} ${a.condition.value}${a.condition.clear_value !== undefined ? ` (clear ${a.condition.clear_value})` : ''}`
  }  ${a.severity}  ${a.enabled ? 'enabled' : 'disabled'}  ${a.state}  cooldown ${a.cooldown}s  actions ${a.actions.join(',')}`;

/** A decimal number as JSON spells one, with an optional leading '+' (a shell user's "+5"). */
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/**
 * A number given on the command line, in decimal: empty or non-numeric text is refused, not
 * read as 0, and JavaScript's other spellings (0x10, 0b1, Infinity) are refused rather than
 * read as a threshold the user did not write.
 */
function numberOption(flag: string, text: string): number {
  const value = Number(text);
  if (!DECIMAL.test(text.trim()) || !Number.isFinite(value)) throw badRequest(`${flag} must be a decimal number, got "${text}"`);
  return value;
}

interface CreateOptions {
  device: string;
  name: string;
  field?: string;
  operator?: string;
  value?: string;
  clearValue?: string;
  /** commander reads `--no-data SECONDS` as the option `data`: the seconds when given, `true` otherwise. */
  data?: string | boolean;
  severity?: string;
  cooldown?: number;
  action?: string[];
  webhookUrl?: string;
  slackUrl?: string;
  discordUrl?: string;
  ntfyUrl?: string;
  notifyResolved: boolean;
  disabled?: boolean;
}

/** The alert definition of `alerts create`: a threshold (--field --operator --value) or a silence (--no-data). */
function createInput(opts: CreateOptions): AlertInput {
  // The domain refuses this too; here the message can name the flags the user typed.
  for (const [action, url] of [
    ['webhook', opts.webhookUrl],
    ['slack', opts.slackUrl],
    ['discord', opts.discordUrl],
    ['ntfy', opts.ntfyUrl],
  ] as const) {
    if (url?.trim() && !opts.action?.includes(action))
      throw badRequest(`--${action}-url is used only by --action ${action}, which is not given`);
  }
  const common = {
    name: opts.name,
    severity: opts.severity,
    cooldown: opts.cooldown,
    actions: opts.action,
    webhookUrl: opts.webhookUrl,
    slackUrl: opts.slackUrl,
    discordUrl: opts.discordUrl,
    ntfyUrl: opts.ntfyUrl,
    notifyResolved: opts.notifyResolved,
    enabled: !opts.disabled,
  };
  if (typeof opts.data === 'string') {
    if (opts.operator !== undefined || opts.value !== undefined) throw badRequest('--no-data takes no --operator or --value');
    if (opts.clearValue !== undefined) throw badRequest('--clear-value applies to threshold alerts only, not --no-data');
    const seconds = Number(opts.data);
    if (!/^\d+$/.test(opts.data.trim()) || seconds < NO_DATA_MIN_SECONDS || seconds > NO_DATA_MAX_SECONDS) {
      throw badRequest(
        `--no-data must be a whole number of seconds from ${NO_DATA_MIN_SECONDS} to ${NO_DATA_MAX_SECONDS}, got "${opts.data}"`,
      );
    }
    return { ...common, kind: 'no_data', field: opts.field ?? '*', value: seconds };
  }
  const missing = (['field', 'operator', 'value'] as const).filter((k) => opts[k] === undefined);
  if (missing.length > 0) {
    throw badRequest(`give --field, --operator and --value (missing ${missing.map((k) => `--${k}`).join(', ')}), or --no-data SECONDS`);
  }
  return {
    ...common,
    kind: 'threshold',
    field: opts.field,
    operator: opts.operator,
    value: numberOption('--value', opts.value!),
    clearValue: opts.clearValue === undefined ? null : numberOption('--clear-value', opts.clearValue),
  };
}

export function alertsCommand(): Command {
  const alerts = new Command('alerts').description('manage alerts');

  withCommonOptions(
    alerts
      .command('create')
      .description('create an alert on a device: a threshold (--field --operator --value) or a silence (--no-data SECONDS)')
      .requiredOption('--device <id>', 'dev_… id')
      .requiredOption('--name <name>', 'alert name')
      .option(
        '--field <field>',
        'telemetry field, or a dotted path such as env.temp (with --no-data: only readings with a number there count; default *, any reading)',
      )
      .option('--operator <op>', ALERT_OPERATORS.join(' '))
      .option('--value <number>', 'threshold')
      .option('--clear-value <number>', 'resolve only once the value is back below (> >=) or above (< <=) this number')
      .option('--no-data <seconds>', `fire when the device sends nothing for this long (${NO_DATA_MIN_SECONDS}-${NO_DATA_MAX_SECONDS} s)`)
      .option('--severity <severity>', `${ALERT_SEVERITIES.join(', ')} (default: warning)`)
      .option('--cooldown <seconds>', 'seconds after a trigger during which matches record nothing (default: 300)', intOption('--cooldown'))
      .option('--action <action>', `${ALERT_ACTIONS.join(', ')} (repeatable; default: email)`, collect)
      .option('--webhook-url <url>', 'where the webhook action POSTs')
      .option('--slack-url <url>', 'Slack (or compatible) incoming-webhook URL of the slack action')
      .option('--discord-url <url>', 'Discord webhook URL of the discord action')
      .option('--ntfy-url <url>', 'ntfy topic URL of the ntfy action')
      .option('--no-notify-resolved', 'do not notify when the alert resolves')
      .option('--disabled', 'create it disabled'),
  ).action((opts: CreateOptions, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const input = createInput(opts);
      const device = await services.devices.getAny(opts.device);
      const shown = presentAlertDetail(await services.alerts.create(device, input));
      print(shown, `created ${human(shown)}`);
    }),
  );

  withCommonOptions(alerts.command('list').description("list a device's alerts").requiredOption('--device <id>', 'dev_… id')).action(
    (opts: { device: string }, cmd: Command) =>
      runAdmin(cmd, async ({ services, print }) => {
        const data = (await services.alerts.listForDevice(await services.devices.getAny(opts.device))).map(presentAlertDetail);
        print({ data }, data.length ? data.map(human).join('\n') : 'no alerts');
      }),
  );

  deleteCommand(alerts, {
    what: 'an alert and its trigger history',
    idHint: 'alert_… id',
    loses: 'its trigger history',
    find: (services, id) => services.alerts.getAny(id),
    remove: (services, alert) => services.alerts.remove(alert),
  });

  for (const action of ['enable', 'disable'] as const) {
    withCommonOptions(alerts.command(action).description(`${action} an alert`).argument('<id>', 'alert_… id')).action(
      (id: string, _o, cmd: Command) =>
        runAdmin(cmd, async ({ services, print }) => {
          const shown = presentAlertDetail(await services.alerts.setEnabled(await services.alerts.getAny(id), action === 'enable'));
          print(shown, human(shown));
        }),
    );
  }

  return alerts;
}
