import { Command } from 'commander';
import { planHasApiAccess } from '../src/domain/plans.js';
import { presentApiKey } from '../src/domain/presenters.js';
import { runAdmin, warn, withCommonOptions } from './context.js';

const human = (k: ReturnType<typeof presentApiKey>) =>
  `${k.id}  ${k.key_prefix}…  ${k.name}  ${k.revoked_at ? `revoked ${k.revoked_at}` : 'valid'}  last used ${k.last_used_at ?? 'never'}`;

export function keysCommand(): Command {
  const keys = new Command('keys').description('manage Public API keys');

  withCommonOptions(
    keys
      .command('create')
      .description('create an API key; the full key is printed once, only its hash is kept')
      .requiredOption('--account <account>', 'account id or email')
      .requiredOption('--name <name>', 'label of the key'),
  ).action((opts: { account: string; name: string }, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const account = await services.accounts.resolve(opts.account);
      const { key, record } = await services.keys.create(account, opts.name);
      print({ ...presentApiKey(record), key }, `${key}\n(${record.id}; shown once: store it now)`);
      // Created anyway: the key works from the moment the plan changes.
      if (!planHasApiAccess(account.plan))
        warn(
          `${account.email} is on the free plan, which has no Public API: this key is refused (403) until the account's plan changes (accounts set-plan ${account.email} starter)`,
        );
    }),
  );

  withCommonOptions(
    keys
      .command('list')
      .description("list an account's keys, newest first, revoked included")
      .requiredOption('--account <account>', 'account id or email'),
  ).action((opts: { account: string }, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const data = (await services.keys.list(await services.accounts.resolve(opts.account))).map(presentApiKey);
      print({ data }, data.length ? data.map(human).join('\n') : 'no keys');
    }),
  );

  withCommonOptions(
    keys.command('revoke').description('revoke a key: refused with 401 from its next request').argument('<key-id>', 'key_… id'),
  ).action((keyId: string, _o, cmd: Command) =>
    runAdmin(cmd, async ({ services, print }) => {
      const shown = presentApiKey(await services.keys.revoke(keyId));
      print(shown, human(shown));
    }),
  );

  return keys;
}
