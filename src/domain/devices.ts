import { badRequest, forbidden, notFound, unauthorized } from '../errors.js';
import { hashSecret, newDeviceToken, newId, sameText } from '../ids.js';
import { type Awaitable, type DeviceWithToken, isPromise, type Repositories } from '../storage/repositories.js';
import type { Clock } from '../time.js';
import type { DomainEvents } from './events.js';
import { type Account, DEVICE_TYPES, type Device, type FieldDefinition, type SchemaMode } from './types.js';

export interface DeviceInput {
  name: string;
  type?: string;
  description?: string;
  snapshotsEnabled?: boolean;
  schemaMode?: string;
  fields?: unknown;
  /** Dashboard-side settings (data direction, connectivity, interval); free-form otherwise. */
  settings?: Record<string, unknown>;
}

const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/;

/** Validates field definitions from the CLI, the dashboard or an imported JSON file. */
export function validateFields(raw: unknown, limit: number): FieldDefinition[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw badRequest('fields must be an array of {name, label, unit}');
  const seen = new Set<string>();
  const fields = raw.map((f, i) => {
    if (!f || typeof f !== 'object' || Array.isArray(f)) throw badRequest(`field #${i + 1} must be an object with name, label, unit`);
    const { name, label, unit } = f as Record<string, unknown>;
    if (typeof name !== 'string' || !FIELD_NAME.test(name)) {
      throw badRequest(`field #${i + 1}: name must be 1-64 letters, digits, _ . - and start with a letter or _`);
    }
    if (label !== undefined && typeof label !== 'string') throw badRequest(`field ${name}: label must be a string`);
    if (unit !== undefined && typeof unit !== 'string') throw badRequest(`field ${name}: unit must be a string`);
    if (seen.has(name)) throw badRequest(`field ${name} is declared twice`);
    seen.add(name);
    return { name, label: (label as string | undefined)?.trim() || name, unit: (unit as string | undefined)?.trim() ?? '' };
  });
  if (fields.length > limit) throw badRequest(`${fields.length} fields declared; the plan allows ${limit} per device`);
  return fields;
}

/** An authenticated device and its account, both active. */
export interface Authenticated {
  device: DeviceWithToken;
  account: Account;
}

export function deviceService(repos: Repositories, events: DomainEvents, clock: Clock) {
  function normalize(account: Account, input: DeviceInput, existing?: Device) {
    const name = (input.name ?? '').trim();
    if (!name) throw badRequest('a device needs a name');
    if (name.length > 200) throw badRequest('device name is longer than 200 characters');
    const type = input.type ?? existing?.type ?? 'sensor';
    if (!(DEVICE_TYPES as readonly string[]).includes(type))
      throw badRequest(`unknown device type "${type}" (one of ${DEVICE_TYPES.join(', ')})`);
    // Strict is the default on the free plan, flexible elsewhere (docs/api.md, "Schema modes").
    const schemaMode = (input.schemaMode ?? existing?.schemaMode ?? (account.plan === 'free' ? 'strict' : 'flexible')) as SchemaMode;
    if (schemaMode !== 'strict' && schemaMode !== 'flexible') throw badRequest('schema mode must be strict or flexible');
    const fields = input.fields === undefined && existing ? existing.fields : validateFields(input.fields, account.limits.fieldLimit);
    const settings = input.settings ?? existing?.settings ?? {};
    if (typeof settings !== 'object' || Array.isArray(settings)) throw badRequest('settings must be an object');
    return {
      name,
      type,
      description: (input.description ?? existing?.description ?? '').trim(),
      schemaMode,
      fields,
      settings,
      snapshotsEnabled: input.snapshotsEnabled ?? existing?.snapshotsEnabled ?? false,
    };
  }

  async function getOwned(account: Account, id: string): Promise<DeviceWithToken> {
    const device = await repos.devices.findById(id);
    if (!device || device.accountSeq !== account.seq) throw notFound('device not found');
    return device;
  }

  /**
   * The account's device, for routes that read its readings (history, aggregates, export):
   * served from the authentication cache, so a hit costs no query, and its lastSeen is the
   * archived value, not the newest reading's time. Routes that show last_seen use getOwned.
   */
  async function getOwnedForReading(account: Account, id: string): Promise<DeviceWithToken> {
    const device = await repos.devices.findForAuth(id);
    if (!device || device.accountSeq !== account.seq) throw notFound('device not found');
    return device;
  }

  /** True when the device exists and belongs to the account. */
  async function isOwnedBy(account: Account, id: string): Promise<boolean> {
    return (await repos.devices.findForAuth(id))?.accountSeq === account.seq;
  }

  async function getAny(id: string): Promise<DeviceWithToken> {
    const device = await repos.devices.findById(id);
    if (!device) throw notFound(`no device ${id}`);
    return device;
  }

  function checkAccount(device: DeviceWithToken, account: Account | null): Authenticated {
    if (!account) throw unauthorized('invalid device id or access token');
    if (account.status === 'suspended') throw forbidden('account is suspended');
    if (device.status === 'paused') throw forbidden('device is paused');
    return { device, account };
  }

  /**
   * The device's account, and the checks of both. Synchronous when the repository answers
   * synchronously (SQLite; a cache hit anywhere): a promise only when the lookup is one.
   */
  function checkActive(device: DeviceWithToken): Awaitable<Authenticated> {
    const account = repos.accounts.findBySeq(device.accountSeq);
    return isPromise(account) ? account.then((a) => checkAccount(device, a)) : checkAccount(device, account);
  }

  /**
   * The last token that matched each cached device row. Hashing the token was the largest
   * part of authenticating an HTTP reading; a device sends the same token every time, so a
   * match against the one already verified skips the hash. Kept per row object: a row read
   * again (the cache dropped on any change to devices, a new token among them) starts with
   * nothing verified. Compared in constant time like the hashes, so a wrong guess learns
   * nothing from the time taken. The token lives only in this process's memory, as it does
   * in every request that carries it; the database keeps only its hash.
   */
  const verifiedTokens = new WeakMap<DeviceWithToken, string>();

  function checkCredentials(device: DeviceWithToken | null, token: string): Awaitable<Authenticated> {
    if (!device) throw unauthorized('invalid device id or access token');
    const verified = verifiedTokens.get(device);
    if (verified === undefined || !sameText(verified, token)) {
      if (!sameText(device.tokenHash, hashSecret(token))) throw unauthorized('invalid device id or access token');
      verifiedTokens.set(device, token);
    }
    return checkActive(device);
  }

  function checkSession(device: DeviceWithToken | null): Awaitable<Authenticated> {
    if (!device) throw unauthorized('device no longer exists');
    return checkActive(device);
  }

  async function setStatus(device: Device, status: 'active' | 'paused'): Promise<Device> {
    await repos.devices.setStatus(device.seq, status, clock.now());
    events.emit('device.changed', { deviceId: device.id, change: status === 'paused' ? 'paused' : 'resumed' });
    return (await repos.devices.findBySeq(device.seq))!;
  }

  return {
    getOwned,
    getOwnedForReading,
    isOwnedBy,
    getAny,
    list: async (account: Account, opts: { limit: number; offset: number; status?: string }) => ({
      devices: await repos.devices.listByAccount(account.seq, opts),
      total: await repos.devices.count(account.seq, opts.status),
    }),

    /** Creates a device; its access token is returned once, only its hash is stored. */
    async create(account: Account, input: DeviceInput): Promise<{ device: Device; accessToken: string }> {
      const values = normalize(account, input);
      const token = newDeviceToken();
      const id = newId('dev');
      const inserted = await repos.devices.insertWithinLimit(
        { id, accountSeq: account.seq, ...values, tokenHash: hashSecret(token), now: clock.now() },
        account.limits.deviceLimit,
      );
      if (!inserted) throw forbidden(`device limit reached: the ${account.plan} plan allows ${account.limits.deviceLimit} devices`);
      return { device: (await repos.devices.findById(id))!, accessToken: token };
    },

    async update(device: Device, account: Account, input: DeviceInput): Promise<Device> {
      const values = normalize(account, input, device);
      await repos.devices.update(device.seq, { ...values, now: clock.now() });
      events.emit('device.changed', { deviceId: device.id, change: 'updated' });
      return (await repos.devices.findBySeq(device.seq))!;
    },

    pause: (device: Device) => setStatus(device, 'paused'),
    resume: (device: Device) => setStatus(device, 'active'),

    /** New token; the old one stops working at once. */
    async regenerateToken(device: Device): Promise<{ device: Device; accessToken: string }> {
      const token = newDeviceToken();
      await repos.devices.setTokenHash(device.seq, hashSecret(token), clock.now());
      events.emit('device.changed', { deviceId: device.id, change: 'token' });
      return { device: (await repos.devices.findBySeq(device.seq))!, accessToken: token };
    },

    /**
     * Removes the device and all its data. Readings go in batches of short transactions so
     * a device with millions of rows never holds the write lock for long, with a turn of the
     * event loop between two: on SQLite each batch answers synchronously, and without the
     * turn the whole deletion would run as one stretch of microtasks, holding every other
     * device's commits and acknowledgements until it ended. Readings committed meanwhile
     * go with the row (removeWithRollups), or are refused once it is gone (the writers).
     */
    async remove(device: Device): Promise<void> {
      // Refuse new data first: a deleted device must not keep ingesting while its rows go.
      await repos.devices.setTokenHash(device.seq, hashSecret(newDeviceToken()), clock.now());
      events.emit('device.changed', { deviceId: device.id, change: 'deleted' });
      while ((await repos.readings.deleteBatchOfDevice(device.seq, 5_000)) > 0) await new Promise((resolve) => setImmediate(resolve));
      await repos.devices.removeWithRollups(device.seq);
      events.emit('device.removed', { deviceId: device.id, accountSeq: device.accountSeq });
    },

    /**
     * Authenticates a device by id and access token (HTTP ingest, snapshot upload, MQTT
     * CONNECT). Looked up on every call so a paused device or regenerated token takes effect
     * at once, whoever changed it. Order: credentials (401), then status (403).
     *
     * On the hot path of every reading: the device and its account come from the in-memory
     * cache (readCache.ts), and the answer is a value, not a promise, whenever the
     * repositories answer synchronously (SQLite always, any backend on a cache hit), so the
     * caller awaits nothing then (`isPromise`). Refusals are thrown synchronously in that case,
     * and rejected otherwise.
     */
    authenticate(deviceId: unknown, token: unknown): Awaitable<Authenticated> {
      if (typeof deviceId !== 'string' || typeof token !== 'string' || !deviceId || !token) {
        throw unauthorized('invalid device id or access token');
      }
      const device = repos.devices.findForAuth(deviceId);
      return isPromise(device) ? device.then((d) => checkCredentials(d, token)) : checkCredentials(device, token);
    },

    /**
     * For a session authenticated earlier (MQTT): the device must still exist and be active,
     * and, given the hash of the token the session presented, still have that token: a
     * token regenerated elsewhere (the admin CLI, another node) refuses the session's next
     * reading, before the re-check that closes the connection (up to 250 ms later). Awaitable
     * as authenticate.
     */
    authorizeSession(deviceId: unknown, tokenHash?: string): Awaitable<Authenticated> {
      if (typeof deviceId !== 'string') return checkSession(null);
      const device = repos.devices.findForAuth(deviceId);
      const check = (d: DeviceWithToken | null) => {
        if (d && tokenHash !== undefined && d.tokenHash !== tokenHash) throw unauthorized('access token was regenerated');
        return checkSession(d);
      };
      return isPromise(device) ? device.then(check) : check(device);
    },

    async recordRejection(device: Device, reason: string): Promise<void> {
      await repos.devices.recordRejection(device.seq, reason.slice(0, 500), clock.now());
    },
  };
}

export type DeviceService = ReturnType<typeof deviceService>;
