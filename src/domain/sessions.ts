/**
 * Dashboard sessions and sign-in. The cookie carries a random session id; the
 * database keeps only its SHA-256 hash, with an expiry and a per-session CSRF token that the
 * dashboard's JS sends back in a header on every state-changing request (docs/dashboard.md).
 */

import { badRequest, rateLimited, unauthorized } from '../errors.js';
import { hashSecret, randomBase62, sameText } from '../ids.js';
import type { Repositories, SessionRecord } from '../storage/repositories.js';
import { type Clock, DAY_MS, HOUR_MS, MINUTE_MS } from '../time.js';
import type { AccountService } from './accounts.js';
import { hashPassword, verifyPassword } from './passwords.js';
import type { Account } from './types.js';

/** A session lives this long after its last use (sliding), and is refreshed at most hourly. */
export const SESSION_IDLE_MS = 7 * DAY_MS;
const TOUCH_INTERVAL_MS = HOUR_MS;

/** Failed sign-ins: per email and per client address, counted over a sliding window. */
const THROTTLE_WINDOW_MS = 15 * MINUTE_MS;
const MAX_FAILURES_PER_EMAIL = 5;
const MAX_FAILURES_PER_IP = 20;

/** One message for unknown email and wrong password: no account enumeration. */
const SIGN_IN_FAILED = 'wrong email or password';

/** In-memory failure counter; a restart forgets it, which only helps a patient attacker a little. */
class SignInThrottle {
  private failures = new Map<string, number[]>();

  constructor(private readonly clock: Clock) {}

  private recent(key: string): number[] {
    const since = this.clock.now() - THROTTLE_WINDOW_MS;
    const list = (this.failures.get(key) ?? []).filter((t) => t > since);
    if (list.length) this.failures.set(key, list);
    else this.failures.delete(key);
    return list;
  }

  /** Throws 429 when either the email or the address has too many recent failures. */
  check(email: string, ip: string): void {
    for (const [key, max] of [
      [`e:${email.toLowerCase()}`, MAX_FAILURES_PER_EMAIL],
      [`i:${ip}`, MAX_FAILURES_PER_IP],
    ] as const) {
      const list = this.recent(key);
      if (list.length >= max) {
        const retryAfter = Math.max(1, Math.ceil((list[0]! + THROTTLE_WINDOW_MS - this.clock.now()) / 1000));
        throw rateLimited(`too many failed sign-ins; try again in ${retryAfter} s`, retryAfter);
      }
    }
  }

  fail(email: string, ip: string): void {
    const now = this.clock.now();
    for (const key of [`e:${email.toLowerCase()}`, `i:${ip}`]) this.failures.set(key, [...this.recent(key), now]);
    // Bound memory under a spray of random emails.
    if (this.failures.size > 50_000) this.failures.clear();
  }

  succeed(email: string): void {
    this.failures.delete(`e:${email.toLowerCase()}`);
  }
}

export interface ResolvedSession {
  account: Account;
  session: SessionRecord;
}

export function sessionService(repos: Repositories, accounts: AccountService, clock: Clock) {
  const throttle = new SignInThrottle(clock);
  // Verifying against a real hash for unknown emails keeps both failures equally slow.
  let dummyHash: Promise<string> | null = null;

  async function open(account: Account): Promise<{ sessionId: string; session: SessionRecord }> {
    const sessionId = randomBase62(43);
    const now = clock.now();
    await repos.sessions.removeExpired(now);
    const session: SessionRecord = {
      idHash: hashSecret(sessionId),
      accountSeq: account.seq,
      csrfToken: randomBase62(32),
      createdAt: now,
      lastUsedAt: now,
      expiresAt: now + SESSION_IDLE_MS,
    };
    // Refused when the password changed since it was checked: its reset signed out every
    // session, and this one would have outlived it.
    if (!(await repos.sessions.insert(session, account.passwordHash))) throw unauthorized(SIGN_IN_FAILED);
    return { sessionId, session };
  }

  return {
    throttle,

    /** Email + password → a new session; the same error for unknown email and wrong password. */
    async signIn(email: string, password: string, ip: string): Promise<{ sessionId: string; session: SessionRecord; account: Account }> {
      const normalized = (email ?? '').trim();
      if (!normalized || !password) throw badRequest('email and password are required');
      throttle.check(normalized, ip);
      const account = await repos.accounts.findByEmail(normalized);
      // An unknown email costs the same scrypt work as a wrong password, so timing tells nothing.
      dummyHash ??= hashPassword(randomBase62(16));
      const hash = account?.passwordHash ?? (await dummyHash);
      const ok = (await verifyPassword(password, hash)) && !!account?.passwordHash;
      if (!ok || !account) {
        throttle.fail(normalized, ip);
        throw unauthorized(SIGN_IN_FAILED);
      }
      throttle.succeed(normalized);
      return { ...(await open(account)), account };
    },

    open,

    /** The session and its account for a cookie value, or null (unknown, expired, account gone). */
    async resolve(sessionId: string | undefined | null): Promise<ResolvedSession | null> {
      if (!sessionId || sessionId.length > 200) return null;
      const session = await repos.sessions.findByHash(hashSecret(sessionId));
      const now = clock.now();
      if (!session) return null;
      if (session.expiresAt <= now) {
        await repos.sessions.remove(session.idHash);
        return null;
      }
      const account = await repos.accounts.findBySeq(session.accountSeq);
      if (!account) return null;
      if (now - session.lastUsedAt >= TOUCH_INTERVAL_MS) await repos.sessions.touch(session.idHash, now, now + SESSION_IDLE_MS);
      return { account, session };
    },

    async signOut(session: SessionRecord): Promise<void> {
      await repos.sessions.remove(session.idHash);
    },

    /**
     * The admin's reset (`accounts set-password`): a forgotten password, or an account made
     * without one. Signs out every session of the account, as after a suspected compromise.
     */
    async resetPassword(idOrEmail: string, password: string): Promise<Account> {
      const account = await accounts.resolve(idOrEmail);
      await accounts.setPassword(account.seq, password);
      await repos.sessions.removeOthers(account.seq, null);
      return (await accounts.get(account.seq))!;
    },

    /** Needs the current password; signs out every other session of the account. */
    async changePassword(resolved: ResolvedSession, current: string, next: string): Promise<void> {
      if (!(await verifyPassword(current ?? '', resolved.account.passwordHash))) throw badRequest('the current password is wrong');
      // Only over the hash just checked: a reset made meanwhile (the CLI, another node) stands.
      if (!(await accounts.setPassword(resolved.account.seq, next ?? '', resolved.account.passwordHash))) {
        throw badRequest('the current password is wrong');
      }
      await repos.sessions.removeOthers(resolved.account.seq, resolved.session.idHash);
    },

    /**
     * First run (docs/operations.md, "First run"): the one-time token creates the first account, only while no
     * account exists. The caller forgets the token once this succeeds.
     */
    async completeSetup(expectedToken: string | null, presentedToken: string, email: string, password: string) {
      if (
        !expectedToken ||
        !presentedToken ||
        !sameText(hashSecret(presentedToken), hashSecret(expectedToken)) ||
        (await accounts.count()) > 0
      ) {
        throw unauthorized('this setup link is no longer valid');
      }
      // Created only while there is still no account: the same link used twice at once (two
      // tabs, two nodes) passed the check above both times.
      const account = await accounts.createFirst({ email, password: password ?? '' });
      if (!account) throw unauthorized('this setup link is no longer valid');
      // accounts.create validated the password length only when one is given.
      return { ...(await open(account)), account };
    },
  };
}
