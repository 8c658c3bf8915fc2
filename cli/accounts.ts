import { Command } from 'commander';
import { isPlanName, PLAN_NAMES, type PlanLimits } from '../src/domain/plans.js';
import { presentAccount } from '../src/domain/presenters.js';
import { badRequest } from '../src/errors.js';
import { intOption, readPassword, runAdmin, withCommonOptions } from './context.js';

const human = (a: ReturnType<typeof presentAccount>) => `${a.id}  ${a.email}  plan=${a.plan}  status=${a.status}`;

export function accountsCommand(): Command {
  const accounts = new Command('accounts').description('manage accounts (owners of devices, keys and alerts)');

  withCommonOptions(
    accounts
      .command('create')
      .description('create an account')
      .requiredOption('--email <email>', 'owner email (sign-in name, alert email recipient)')
      .option('--name <name>', 'display name')
      .option('--plan <plan>', `plan: ${PLAN_NAMES.join(', ')} (default: starter)`)
      .option('--password-stdin', 'read a dashboard password from standard input'),
  ).action(async (opts: { email: string; name?: string; plan?: string; passwordStdin?: boolean }, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const password = opts.passwordStdin ? await readPassword() : null;
      const account = await services.accounts.create({ email: opts.email, name: opts.name, plan: opts.plan, password });
      const shown = presentAccount(account);
      print(shown, `created account ${human(shown)}`);
    }),
  );

  withCommonOptions(
    accounts
      .command('set-password')
      .description("set an account's dashboard password, read from standard input; signs out its sessions")
      .argument('<account>', 'account id or email')
      .requiredOption('--password-stdin', 'read the password from standard input'),
  ).action((account: string, _o, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const shown = presentAccount(await services.sessions.resetPassword(account, await readPassword()));
      print(shown, `password set for ${human(shown)}`);
    }),
  );

  withCommonOptions(accounts.command('list').description('list accounts')).action((_o, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const data = (await services.accounts.list()).map(presentAccount);
      print({ data }, data.length ? data.map(human).join('\n') : 'no accounts');
    }),
  );

  const overrides: [string, keyof PlanLimits][] = [
    ['rate-per-minute', 'ratePerMinute'],
    ['rate-per-day', 'ratePerDay'],
    ['device-limit', 'deviceLimit'],
    ['retention-days', 'retentionDays'],
    ['snapshots-per-day', 'snapshotsPerDay'],
    ['snapshot-retention-days', 'snapshotRetentionDays'],
    ['field-limit', 'fieldLimit'],
  ];
  const setPlan = accounts
    .command('set-plan')
    .description("set an account's plan: the plan's defaults, then the overrides given here")
    .argument('<account>', 'account id or email')
    .argument('<plan>', PLAN_NAMES.join(', '));
  for (const [flag, key] of overrides) setPlan.option(`--${flag} <n>`, `override ${key}`, intOption(`--${flag}`));
  withCommonOptions(setPlan).action((account: string, plan: string, opts: Record<string, number | undefined>, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      // No account id or email is a plan name: the two arguments were given the other way round.
      if (isPlanName(account) && !isPlanName(plan))
        throw badRequest(`accounts set-plan takes ACCOUNT then PLAN: "${account}" is a plan; try: accounts set-plan ${plan} ${account}`);
      const limits: Partial<PlanLimits> = {};
      for (const [, key] of overrides) if (opts[key] !== undefined) limits[key] = opts[key];
      const shown = presentAccount(await services.accounts.setPlan(account, plan, limits));
      print(shown, `${human(shown)}  ${JSON.stringify(shown.limits)}`);
    }),
  );

  for (const [name, status] of [
    ['suspend', 'suspended'],
    ['resume', 'active'],
  ] as const) {
    withCommonOptions(
      accounts
        .command(name)
        .description(name === 'suspend' ? 'suspend an account: Public API 403, its devices refused' : 'lift a suspension')
        .argument('<account>', 'account id or email'),
    ).action((account: string, _o, cmd: Command) =>
      runAdmin(cmd, async ({ services, print }) => {
        const shown = presentAccount(await services.accounts.setStatus(account, status));
        print(shown, human(shown));
      }),
    );
  }

  withCommonOptions(
    accounts
      .command('webhook-secret')
      .description('print the secret that signs webhook deliveries (X-Telemetryd-Signature)')
      .argument('<account>', 'account id or email')
      .option('--rotate', 'replace the secret with a new one'),
  ).action((account: string, opts: { rotate?: boolean }, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const { account: a, secret } = await services.accounts.webhookSecret(account, Boolean(opts.rotate));
      print({ account: a.id, webhook_secret: secret }, secret);
    }),
  );

  return accounts;
}
