import { badRequest, conflict, notFound } from '../errors.js';
import { newId, randomBase62 } from '../ids.js';
import type { NewAccount, Repositories } from '../storage/repositories.js';
import type { Clock } from '../time.js';
import type { DomainEvents } from './events.js';
import { hashPassword, MIN_PASSWORD_LENGTH } from './passwords.js';
import { isPlanName, PLAN_DEFAULTS, PLAN_NAMES, type PlanLimits } from './plans.js';
import type { Account } from './types.js';

const EMAIL = /^[^\s@]+@[^\s@]+$/;

export type PlanOverrides = Partial<PlanLimits>;

interface NewAccountInput {
  email: string;
  name?: string;
  plan?: string;
  password?: string | null;
}

export function accountService(repos: Repositories, events: DomainEvents, clock: Clock) {
  const newWebhookSecret = () => `whsec_${randomBase62(32)}`;

  /** ACCOUNT is an account id or its email (docs/cli.md, "Output and exit status"). */
  async function resolve(idOrEmail: string): Promise<Account> {
    const account = await (idOrEmail.startsWith('acc_') ? repos.accounts.findById(idOrEmail) : repos.accounts.findByEmail(idOrEmail));
    if (!account) throw notFound(`no account ${idOrEmail}`);
    return account;
  }

  /** The row of a new account, checked: the input's values, its plan's defaults. */
  async function newAccount(input: NewAccountInput): Promise<NewAccount> {
    const email = input.email.trim();
    if (!EMAIL.test(email)) throw badRequest(`invalid email address "${input.email}"`);
    const plan = input.plan ?? 'starter';
    if (!isPlanName(plan)) throw badRequest(`unknown plan "${plan}" (one of ${PLAN_NAMES.join(', ')})`);
    if (input.password != null && input.password.length < MIN_PASSWORD_LENGTH) {
      throw badRequest(`password must be at least ${MIN_PASSWORD_LENGTH} characters`);
    }
    const passwordHash = input.password != null ? await hashPassword(input.password) : null;
    if (await repos.accounts.findByEmail(email)) throw conflict(`an account with email ${email} exists`);
    return {
      id: newId('acc'),
      email,
      name: input.name?.trim() ?? '',
      passwordHash,
      plan,
      limits: PLAN_DEFAULTS[plan],
      webhookSecret: newWebhookSecret(),
      now: clock.now(),
    };
  }

  return {
    resolve,
    get: async (seq: number) => await repos.accounts.findBySeq(seq),
    list: async () => await repos.accounts.list(),
    count: async () => await repos.accounts.count(),

    async create(input: NewAccountInput): Promise<Account> {
      const account = await newAccount(input);
      // newAccount checked the address, but another creation may have taken it since.
      if (!(await repos.accounts.insert(account))) throw conflict(`an account with email ${account.email} exists`);
      return (await repos.accounts.findById(account.id))!;
    },

    /**
     * The first-run setup's account: created only while there is no account, checked when it
     * goes in (repos.accounts.insertFirst), so two setups at once make one; null when one exists.
     */
    async createFirst(input: NewAccountInput): Promise<Account | null> {
      const account = await newAccount(input);
      if (!(await repos.accounts.insertFirst(account))) return null;
      return (await repos.accounts.findById(account.id))!;
    },

    /** Sets the whole plan at once: its defaults, then this call's overrides (docs/cli.md, "accounts"). */
    async setPlan(idOrEmail: string, plan: string, overrides: PlanOverrides = {}): Promise<Account> {
      const account = await resolve(idOrEmail);
      if (!isPlanName(plan)) throw badRequest(`unknown plan "${plan}" (one of ${PLAN_NAMES.join(', ')})`);
      const limits = { ...PLAN_DEFAULTS[plan] };
      for (const [k, v] of Object.entries(overrides) as [keyof PlanLimits, number | undefined][]) {
        if (v === undefined) continue;
        if (!Number.isInteger(v) || v < 0) throw badRequest(`limit ${k} must be a non-negative integer`);
        limits[k] = v;
      }
      await repos.accounts.setPlan(account.seq, plan, limits, clock.now());
      events.emit('account.changed', { accountId: account.id, change: 'plan' });
      return (await repos.accounts.findBySeq(account.seq))!;
    },

    async setStatus(idOrEmail: string, status: 'active' | 'suspended'): Promise<Account> {
      const account = await resolve(idOrEmail);
      await repos.accounts.setStatus(account.seq, status, clock.now());
      events.emit('account.changed', { accountId: account.id, change: status === 'suspended' ? 'suspended' : 'resumed' });
      return (await repos.accounts.findBySeq(account.seq))!;
    },

    /** The account's webhook signing secret; the same until rotated (docs/alerts.md, "webhook"). */
    async webhookSecret(idOrEmail: string, rotate = false): Promise<{ account: Account; secret: string }> {
      const account = await resolve(idOrEmail);
      let secret = account.webhookSecret;
      if (rotate || !secret) {
        secret = newWebhookSecret();
        await repos.accounts.setWebhookSecret(account.seq, secret, clock.now());
      }
      return { account, secret };
    },

    /** Sets the password; with `replacing`, only while the stored hash is that one (false otherwise). */
    async setPassword(seq: number, password: string, replacing?: string | null): Promise<boolean> {
      if (password.length < MIN_PASSWORD_LENGTH) throw badRequest(`password must be at least ${MIN_PASSWORD_LENGTH} characters`);
      return await repos.accounts.setPasswordHash(seq, await hashPassword(password), clock.now(), replacing);
    },
  };
}

export type AccountService = ReturnType<typeof accountService>;
