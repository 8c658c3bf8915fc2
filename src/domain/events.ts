/**
 * In-process domain events. Listeners are isolated: one that throws is logged and the
 * others still run, so an alert action can never break ingest.
 */
import type { StorageFailureKind } from './storageStatus.js';
import type { ActionDelivery, Alert, AlertAction, AlertEvent, Device, StoredReading } from './types.js';

export interface DomainEventMap {
  /** A reading was committed. */
  'reading.stored': { device: Device; reading: StoredReading; parsed: Record<string, unknown>; transport?: Transport };
  /**
   * Another node of the cluster committed a reading of an account with a live view open on
   * this node (cluster.ts followReadings); this node's own readings are 'reading.stored' only.
   */
  'reading.storedElsewhere': { deviceId: string; accountSeq: number; reading: StoredReading };
  /** A reading was refused for good (not stored); the device's rejection count went up. */
  'reading.rejected': { device: Device; reason: string; transport: Transport };
  /** `count` writes (readings or a snapshot) were refused because storage could not take them. */
  'storage.refused': { kind: StorageFailureKind; count: number };
  /** A device's credentials or status changed, or it was deleted: open sessions must be re-checked. */
  'device.changed': { deviceId: string; change: 'paused' | 'resumed' | 'token' | 'deleted' | 'updated' };
  /**
   * A deleted device's row is gone (after its 'deleted' change, which came first so that its
   * sessions closed before its data went): nothing of it can be stored any more. `accountSeq`
   * is its owner's, which can no longer be looked up by then (the dashboard's live view).
   */
  'device.removed': { deviceId: string; accountSeq: number };
  /** An account was suspended, resumed or changed plan. */
  'account.changed': { accountId: string; change: 'suspended' | 'resumed' | 'plan' };
  /** Another process (the admin CLI) committed to the database: caches must be dropped. */
  'external.change': Record<string, never>;
  /** `reading` is null for a no_data trigger (it was the absence of readings). */
  'alert.triggered': { alert: Alert; event: AlertEvent; reading: StoredReading | null };
  /** A firing alert went back to ok on this reading; `event` carries `resolvedAt`. */
  'alert.resolved': { alert: Alert; event: AlertEvent; reading: StoredReading };
  /** An alert was created, changed, enabled/disabled or deleted: evaluation caches must be dropped. */
  'alert.changed': { alertId: string; change: 'created' | 'updated' | 'enabled' | 'disabled' | 'deleted' };
  /** One action of a trigger event finished (sent, failed); `event.deliveries` is the new state. */
  'alert.delivery': { event: AlertEvent; action: AlertAction; status: ActionDelivery['status'] };
}

export type Transport = 'http' | 'mqtt';
type Listener<K extends keyof DomainEventMap> = (payload: DomainEventMap[K]) => void;

export class DomainEvents {
  private listeners = new Map<keyof DomainEventMap, Listener<never>[]>();

  constructor(private readonly onListenerError: (err: unknown, event: string) => void = () => {}) {}

  on<K extends keyof DomainEventMap>(event: K, listener: Listener<K>): () => void {
    const list = this.listeners.get(event) ?? [];
    list.push(listener as Listener<never>);
    this.listeners.set(event, list);
    return () => {
      const current = this.listeners.get(event) ?? [];
      this.listeners.set(
        event,
        current.filter((l) => l !== (listener as Listener<never>)),
      );
    };
  }

  emit<K extends keyof DomainEventMap>(event: K, payload: DomainEventMap[K]): void {
    for (const listener of this.listeners.get(event) ?? []) {
      try {
        (listener as Listener<K>)(payload);
      } catch (err) {
        this.onListenerError(err, event);
      }
    }
  }
}
