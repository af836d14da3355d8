import { ValidationError } from '../errors/validation-error.js';
import type { ObjectKind } from '../model/states.js';
import type { StoreBackend } from '../store/backend.js';

/**
 * Keys that a hook of this process chose with `ctx.lockOneOf` and whose recording
 * transaction has not ended yet, by the store of their broker: key → holder id. Two
 * acquires running side by side in one process then choose different free keys instead of
 * colliding on the first; across processes a collision is a slot-lock conflict, retried.
 */
const pendingOf = new WeakMap<StoreBackend, Map<string, string>>();

/** Longest key list `lockOneOf` takes: a resource with more slots than this is a mistake. */
const MAX_KEYS = 100_000;

/**
 * The slot locks one hook call asks for (`ctx.lockSlots`, `ctx.lockOneOf`). They are
 * taken all or nothing in the transaction that records the hook's outcome; `settled()`
 * is called once that transaction is over, committed or not.
 */
export class SlotRequest {
  /** Every key to lock. */
  readonly keys: string[] = [];
  private readonly picked: string[] = [];

  constructor(
    private readonly store: StoreBackend,
    private readonly holder: { kind: ObjectKind; id: string },
  ) {}

  /** `ctx.lockSlots`. */
  readonly lockSlots = (keys: string[]): void => {
    this.keys.push(...keys.map(String));
  };

  /**
   * `ctx.lockOneOf`: the first of `keys` that no other object holds and no other hook of
   * this process has just chosen; the holder locks it with the rest of its slots. When
   * every key is held, the first one is returned: the recording transaction then meets a
   * slot-lock conflict and the hook's caller retries later, as for `lockSlots`.
   */
  readonly lockOneOf = async (keys: readonly string[]): Promise<string> => {
    if (!Array.isArray(keys) || keys.length === 0 || keys.length > MAX_KEYS) {
      throw new ValidationError('lockOneOf(keys)', `must be an array of 1 to ${MAX_KEYS} slot keys (got ${Array.isArray(keys) ? `${keys.length} keys` : typeof keys})`);
    }
    const bad = keys.findIndex((k) => typeof k !== 'string' || k === '' || k.includes('\u0000'));
    if (bad >= 0) throw new ValidationError(`lockOneOf(keys)[${bad}]`, 'must be a non-empty string without NUL characters');
    let pending = pendingOf.get(this.store);
    if (!pending) pendingOf.set(this.store, (pending = new Map()));
    const free = await this.store.freeSlots(this.holder.kind, this.holder.id, [...new Set(keys)]);
    const mine = (k: string) => !this.keys.includes(k);
    const key = free.find((k) => mine(k) && (pending.get(k) ?? this.holder.id) === this.holder.id) ?? free.find(mine) ?? keys[0]!;
    if (!pending.has(key)) {
      pending.set(key, this.holder.id);
      this.picked.push(key);
    }
    this.keys.push(key);
    return key;
  };

  /** The recording transaction is over: the keys this hook chose are no longer pending. */
  settled(): void {
    const pending = pendingOf.get(this.store);
    for (const key of this.picked.splice(0)) if (pending?.get(key) === this.holder.id) pending.delete(key);
  }
}
