import type { Clock } from '../time.js';

export interface AuthThrottleOptions {
  /** Failed CONNECTs from one address within `windowMs` before it is locked out. */
  maxFailures?: number;
  windowMs?: number;
  /** How long a locked-out address is refused, whatever credentials it sends. */
  lockoutMs?: number;
  /** Addresses remembered at most (oldest forgotten first): bounded memory under a flood. */
  maxTracked?: number;
}

interface Entry {
  failures: number;
  windowStart: number;
  lockedUntil: number;
}

/**
 * MQTT authentication failures throttled per client address (docs/reliability.md
 * "Security"): after `maxFailures` bad CONNECTs (unknown device, wrong token) within
 * `windowMs`, every CONNECT from that address is refused for `lockoutMs` without looking at
 * its credentials, so guessing tokens costs a lockout per handful of guesses and the refusal
 * says nothing about whether a guess was right. A successful CONNECT clears the address.
 */
export class AuthThrottle {
  private readonly entries = new Map<string, Entry>();
  private readonly maxFailures: number;
  private readonly windowMs: number;
  private readonly lockoutMs: number;
  private readonly maxTracked: number;

  constructor(
    private readonly clock: Clock,
    options: AuthThrottleOptions = {},
  ) {
    this.maxFailures = options.maxFailures ?? 10;
    this.windowMs = options.windowMs ?? 60_000;
    this.lockoutMs = options.lockoutMs ?? 60_000;
    this.maxTracked = options.maxTracked ?? 10_000;
  }

  /** Seconds until the address may try again; 0 when it may try now. */
  lockedFor(address: string | undefined): number {
    const entry = this.entries.get(address ?? '');
    const now = this.clock.now();
    if (!entry || entry.lockedUntil <= now) return 0;
    return Math.ceil((entry.lockedUntil - now) / 1000);
  }

  recordFailure(address: string | undefined): void {
    const key = address ?? '';
    const now = this.clock.now();
    let entry = this.entries.get(key);
    if (!entry || now - entry.windowStart >= this.windowMs) {
      entry = { failures: 0, windowStart: now, lockedUntil: entry?.lockedUntil ?? 0 };
    }
    entry.failures++;
    if (entry.failures >= this.maxFailures) {
      entry.lockedUntil = now + this.lockoutMs;
      entry.failures = 0;
      entry.windowStart = now;
    }
    // Re-insert so Map order is least recently failed first; forget the oldest past the cap.
    this.entries.delete(key);
    this.entries.set(key, entry);
    while (this.entries.size > this.maxTracked) this.entries.delete(this.entries.keys().next().value!);
  }

  recordSuccess(address: string | undefined): void {
    this.entries.delete(address ?? '');
  }

  get tracked(): number {
    return this.entries.size;
  }
}
