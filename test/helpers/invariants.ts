import { isLegalTransition, type ObjectKind } from '../../lib/model/states.js';

/*
 * The invariants that the model test (test/helpers/model.ts) and the multi-process test
 * (test/multi-process.test.ts) both check from the `logs` table, in one place.
 */

/** The allocation limit as the design states it, written out here so that a looser default in the library fails the tests. */
export const allocationLimit = (active: number) => Math.max(1, Math.ceil(0.25 * active));

/** Whether an allocation may start while `allocating` resources are being built and `active` are active. */
export const admitted = (allocating: number, active: number) => allocating < allocationLimit(active);

/** A log row as both tests read it. */
export interface ReplayedLog {
  id: number;
  type: string;
  lease: string | null;
  resource: string | null;
  data: Record<string, any>;
}

/**
 * Replays `status.changed` and `resource.allocating` rows in id order, which per object is the
 * order of its transitions (one writer at a time). Checks that every logged change is legal
 * and that each object's chain is connected from `pending`; keeps each object's status and
 * the statuses it visited. Feed it rows as they come (`apply`), or all at once.
 */
export class TransitionReplay {
  private readonly objects = new Map<string, { kind: ObjectKind; status: string; visited: Set<string> }>();
  readonly problems: string[] = [];

  /** The object a row is about, as `kind:id`. */
  static keyOf(log: ReplayedLog): string {
    if (log.type === 'resource.allocating') return `resource:${log.resource}`;
    const kind = log.data.kind as ObjectKind;
    return `${kind}:${kind === 'lease' ? log.lease : log.resource}`;
  }

  /** Applies one row (others than the two types are ignored); the problems it found, also added to `problems`. */
  apply(log: ReplayedLog): string[] {
    const found: string[] = [];
    if (log.type === 'resource.allocating') {
      this.objects.set(`resource:${log.resource}`, { kind: 'resource', status: 'pending', visited: new Set(['pending']) });
    } else if (log.type === 'status.changed') {
      const key = TransitionReplay.keyOf(log);
      const kind = log.data.kind as ObjectKind;
      const { from, to } = log.data as { from: string; to: string };
      if (!isLegalTransition(kind, from, to)) found.push(`illegal transition logged: ${key} ${from} -> ${to} [log ${log.id}]`);
      let entry = this.objects.get(key);
      if (!entry) {
        if (kind === 'resource') found.push(`status change of ${key} before its resource.allocating log [log ${log.id}]`);
        entry = { kind, status: 'pending', visited: new Set(['pending']) };
        this.objects.set(key, entry);
      }
      if (entry.status !== from) found.push(`status chain of ${key} broken: logged ${from} -> ${to} after it was ${entry.status} [log ${log.id}]`);
      entry.status = to;
      entry.visited.add(to);
    }
    this.problems.push(...found);
    return found;
  }

  /** The replayed status of `kind:id`, if any row named it. */
  status(key: string): string | undefined {
    return this.objects.get(key)?.status;
  }

  /** The statuses `kind:id` passed through, `pending` first. */
  visited(key: string): Set<string> | undefined {
    return this.objects.get(key)?.visited;
  }

  /** How many objects of a kind are in `status` now. */
  count(kind: ObjectKind, status: string): number {
    let n = 0;
    for (const o of this.objects.values()) if (o.kind === kind && o.status === status) n++;
    return n;
  }

  /** Every replayed object of a kind, with its status. */
  entries(kind: ObjectKind): Array<[string, string]> {
    return [...this.objects.entries()].filter(([, o]) => o.kind === kind).map(([key, o]) => [key.slice(kind.length + 1), o.status]);
  }

  /** Forgets everything: the next rows are replayed from the first again. */
  clear(): void {
    this.objects.clear();
    this.problems.length = 0;
  }
}
