import { defineBlueprint, type Blueprint } from '../../lib/index.js';
import { round, sleep } from '../support/measure.js';
import { StatementCounter } from '../support/statement-counter.js';
import type { Tier } from '../support/tiers.js';
import { fullCycle, openBroker, prewarm } from './common.js';

/**
 * The two blueprints the issue sets statement targets for, both exclusive (a slot lock
 * per resource and one lease per resource, as `fakeBlueprint({ exclusive: true })`):
 * `plain` has only `allocateResource`, `acquireLease` (the slot lock) and
 * `destroyResource`; `everyHook` has `activateLease`, `releaseLease` and `destroyLease`
 * too. No hook waits for anything.
 */
export const SHAPES = ['plain', 'everyHook'] as const;
export type ShapeName = (typeof SHAPES)[number];

function shapeBlueprint(shape: ShapeName): Blueprint {
  const noop = async () => undefined;
  const implementation = defineBlueprint({
    type: shape,
    allocateResource: noop,
    async acquireLease(ctx) {
      ctx.lockSlots([`${shape}:${ctx.resource.id}`]);
    },
    destroyResource: noop,
    ...(shape === 'everyHook' ? { activateLease: noop, releaseLease: noop, destroyLease: noop } : {}),
  });
  return implementation({ name: shape, limits: { maxLeasesPerResource: 1 } });
}

export interface HalfCounts {
  statements: number;
  commits: number;
}

export interface ShapeCounts {
  cycles: number;
  /** `acquire()` called until the lease is active. */
  acquire: HalfCounts;
  /** `release()` called until the lease is destroyed, and a 30 ms tail for the resource's own pass. */
  release: HalfCounts;
  total: HalfCounts;
}

/** Statements and commits per full cycle of one shape, counted at the driver, 1 acquirer on a warm resource. */
export async function shapeCounts(tier: Tier, shape: ShapeName, cycles: number): Promise<ShapeCounts> {
  const { broker } = await openBroker(tier, `shape_${shape}`, shapeBlueprint(shape));
  try {
    await prewarm(broker, 1, shape);
    for (let i = 0; i < 5; i++) await fullCycle(broker, shape);
    const acquire = new StatementCounter();
    const release = new StatementCounter();
    for (let i = 0; i < cycles; i++) {
      await sleep(20);
      acquire.start();
      const lease = await broker.acquire({ type: shape });
      acquire.stop();
      release.start();
      await lease.release();
      await sleep(30);
      release.stop();
    }
    const a = acquire.snapshot(cycles).perCycle;
    const r = release.snapshot(cycles).perCycle;
    return {
      cycles,
      acquire: { statements: a.statements, commits: a.transactions },
      release: { statements: r.statements, commits: r.transactions },
      total: { statements: round(a.statements + r.statements), commits: round(a.transactions + r.transactions) },
    };
  } finally {
    await broker.close();
  }
}
