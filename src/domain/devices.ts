import { badRequest, forbidden, notFound, unauthorized } from '../errors.js';
import { hashSecret, newDeviceToken, newId, sameHash } from '../ids.js';
import type { Repositories } from '../storage/index.js';
import type { DeviceWithToken } from '../storage/repos/devices.js';
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

  function getOwned(account: Account, id: string): DeviceWithToken {
    const device = repos.devices.findById(id);
    if (!device || device.accountSeq !== account.seq) throw notFound('device not found');
    return device;
  }

  /** True when the device exists and belongs to the account. */
  function isOwnedBy(account: Account, id: string): boolean {
    return repos.devices.findById(id)?.accountSeq === account.seq;
  }

  function getAny(id: string): DeviceWithToken {
    const device = repos.devices.findById(id);
    if (!device) throw notFound(`no device ${id}`);
    return device;
  }

  function checkActive(device: DeviceWithToken): { device: DeviceWithToken; account: Account } {
    const account = repos.accounts.findBySeq(device.accountSeq);
    if (!account) throw unauthorized('invalid device id or access token');
    if (account.status === 'suspended') throw forbidden('account is suspended');
    if (device.status === 'paused') throw forbidden('device is paused');
    return { device, account };
  }

  function setStatus(device: Device, status: 'active' | 'paused'): Device {
    repos.devices.setStatus(device.seq, status, clock.now());
    events.emit('device.changed', { deviceId: device.id, change: status === 'paused' ? 'paused' : 'resumed' });
    return repos.devices.findBySeq(device.seq)!;
  }

  return {
    getOwned,
    isOwnedBy,
    getAny,
    list: (account: Account, opts: { limit: number; offset: number; status?: string }) => ({
      devices: repos.devices.listByAccount(account.seq, opts),
      total: repos.devices.count(account.seq, opts.status),
    }),

    /** Creates a device; its access token is returned once, only its hash is stored. */
    create(account: Account, input: DeviceInput): { device: Device; accessToken: string } {
      const values = normalize(account, input);
      const token = newDeviceToken();
      const id = newId('dev');
      repos.transaction(() => {
        if (repos.devices.count(account.seq) >= account.limits.deviceLimit) {
          throw forbidden(`device limit reached: the ${account.plan} plan allows ${account.limits.deviceLimit} devices`);
        }
        repos.devices.insert({ id, accountSeq: account.seq, ...values, tokenHash: hashSecret(token), now: clock.now() });
      });
      return { device: repos.devices.findById(id)!, accessToken: token };
    },

    update(device: Device, account: Account, input: DeviceInput): Device {
      const values = normalize(account, input, device);
      repos.devices.update(device.seq, { ...values, now: clock.now() });
      events.emit('device.changed', { deviceId: device.id, change: 'updated' });
      return repos.devices.findBySeq(device.seq)!;
    },

    pause: (device: Device) => setStatus(device, 'paused'),
    resume: (device: Device) => setStatus(device, 'active'),

    /** New token; the old one stops working at once. */
    regenerateToken(device: Device): { device: Device; accessToken: string } {
      const token = newDeviceToken();
      repos.devices.setTokenHash(device.seq, hashSecret(token), clock.now());
      events.emit('device.changed', { deviceId: device.id, change: 'token' });
      return { device: repos.devices.findBySeq(device.seq)!, accessToken: token };
    },

    /**
     * Removes the device and all its data. Readings go in batches of short transactions so
     * a device with millions of rows never holds the write lock for long.
     */
    remove(device: Device): void {
      // Refuse new data first: a deleted device must not keep ingesting while its rows go.
      repos.devices.setTokenHash(device.seq, hashSecret(newDeviceToken()), clock.now());
      events.emit('device.changed', { deviceId: device.id, change: 'deleted' });
      while (repos.transaction(() => repos.readings.deleteBatchOfDevice(device.seq, 5_000)) > 0);
      repos.transaction(() => {
        repos.rollups.deleteDevice(device.seq);
        repos.devices.remove(device.seq);
      });
    },

    /**
     * Authenticates a device by id and access token (HTTP ingest, snapshot upload, MQTT
     * CONNECT). Looked up on every call so a paused device or regenerated token takes effect
     * at once, whoever changed it. Order: credentials (401), then status (403).
     */
    authenticate(deviceId: unknown, token: unknown): { device: DeviceWithToken; account: Account } {
      if (typeof deviceId !== 'string' || typeof token !== 'string' || !deviceId || !token) {
        throw unauthorized('invalid device id or access token');
      }
      const device = repos.devices.findForAuth(deviceId);
      if (!device || !sameHash(device.tokenHash, hashSecret(token))) throw unauthorized('invalid device id or access token');
      return checkActive(device);
    },

    /** For a session authenticated earlier (MQTT): the device must still exist and be active. */
    authorizeSession(deviceId: unknown): { device: DeviceWithToken; account: Account } {
      const device = typeof deviceId === 'string' ? repos.devices.findForAuth(deviceId) : null;
      if (!device) throw unauthorized('device no longer exists');
      return checkActive(device);
    },

    recordRejection(device: Device, reason: string): void {
      repos.devices.recordRejection(device.seq, reason.slice(0, 500), clock.now());
    },
  };
}

export type DeviceService = ReturnType<typeof deviceService>;
