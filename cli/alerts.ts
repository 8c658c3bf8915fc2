import { Command } from 'commander';
import { presentAlertDetail } from '../src/domain/presenters.js';
import { ALERT_OPERATORS, ALERT_SEVERITIES } from '../src/domain/types.js';
import { badRequest } from '../src/errors.js';
import { collect, intOption, runAdmin, withCommonOptions } from './context.js';

const human = (a: ReturnType<typeof presentAlertDetail>) =>
  `${a.id}  ${a.name}  ${a.device_id}  ${a.condition.field} ${a.condition.operator} ${a.condition.value}  ${a.severity}  ${a.enabled ? 'enabled' : 'disabled'}  cooldown ${a.cooldown}s  actions ${a.actions.join(',')}`;

export function alertsCommand(): Command {
  const alerts = new Command('alerts').description('manage alerts');

  withCommonOptions(
    alerts
      .command('create')
      .description('create an alert on a device')
      .requiredOption('--device <id>', 'dev_… id')
      .requiredOption('--name <name>', 'alert name')
      .requiredOption('--field <field>', 'telemetry field, or a dotted path such as env.temp')
      .requiredOption('--operator <op>', ALERT_OPERATORS.join(' '))
      .requiredOption('--value <number>', 'threshold')
      .option('--severity <severity>', `${ALERT_SEVERITIES.join(', ')} (default: warning)`)
      .option('--cooldown <seconds>', 'seconds after a trigger during which matches record nothing (default: 300)', intOption('--cooldown'))
      .option('--action <action>', 'email or webhook (repeatable; default: email)', collect)
      .option('--webhook-url <url>', 'where the webhook action POSTs')
      .option('--disabled', 'create it disabled'),
  ).action(
    (
      opts: {
        device: string;
        name: string;
        field: string;
        operator: string;
        value: string;
        severity?: string;
        cooldown?: number;
        action?: string[];
        webhookUrl?: string;
        disabled?: boolean;
      },
      cmd: Command,
    ) =>
      runAdmin(cmd, ({ services, print }) => {
        const value = Number(opts.value);
        if (opts.value.trim() === '' || !Number.isFinite(value)) throw badRequest(`--value must be a number, got "${opts.value}"`);
        const device = services.devices.getAny(opts.device);
        const alert = services.alerts.create(device, {
          name: opts.name,
          field: opts.field,
          operator: opts.operator,
          value,
          severity: opts.severity,
          cooldown: opts.cooldown,
          actions: opts.action,
          webhookUrl: opts.webhookUrl,
          enabled: !opts.disabled,
        });
        const shown = presentAlertDetail(alert);
        print(shown, `created ${human(shown)}`);
      }),
  );

  for (const action of ['enable', 'disable'] as const) {
    withCommonOptions(alerts.command(action).description(`${action} an alert`).argument('<id>', 'alert_… id')).action(
      (id: string, _o, cmd: Command) =>
        runAdmin(cmd, ({ services, print }) => {
          const shown = presentAlertDetail(services.alerts.setEnabled(services.alerts.getAny(id), action === 'enable'));
          print(shown, human(shown));
        }),
    );
  }

  return alerts;
}
