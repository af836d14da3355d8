import { internals, type Broker } from '../lib/broker/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { longRuns, tier } from './helpers/tier.js';

guardBrokers();

const TABLES = ['leases', 'resources', 'commands', 'work_items', 'slot_locks', 'logs'] as const;

/** Rows per table, and those that are not history yet: leases or resources not destroyed, commands not consumed. */
async function rowCounts(broker: Broker): Promise<Record<(typeof TABLES)[number] | 'liveLeases' | 'liveResources' | 'unconsumed' | 'strayLogs' | 'maxResourceLogs', number>> {
  const { db, store } = internals.get(broker)!;
  const s = store.s;
  const [row] = await db.query(
    `SELECT ${TABLES.map((t) => `(SELECT count(*)::int FROM ${s}.${t}) AS ${t}`).join(', ')},
       (SELECT count(*)::int FROM ${s}.leases WHERE status <> 'destroyed') AS "liveLeases",
       (SELECT count(*)::int FROM ${s}.resources WHERE status <> 'destroyed') AS "liveResources",
       (SELECT count(*)::int FROM ${s}.commands WHERE consumed_at IS NULL) AS unconsumed,
       (SELECT count(*)::int FROM ${s}.logs g WHERE g.lease_id IS NOT NULL
          OR NOT EXISTS (SELECT 1 FROM ${s}.resources r WHERE r.id = g.resource_id AND r.status <> 'destroyed')) AS "strayLogs",
       (SELECT coalesce(max(n), 0)::int FROM (SELECT count(*) AS n FROM ${s}.logs GROUP BY resource_id) per) AS "maxResourceLogs"`,
  );
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as Awaited<ReturnType<typeof rowCounts>>;
}

// Growth: the history of finished work is kept only until gc, and nothing else piles up
// per cycle (commands are consumed, work items go with their object).
describe('growth over many lease cycles', () => {
  test('gc deletes only history older than the retention, never a live object or its logs', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })], retention: { hours: 1 }, gcInterval: false });
    const old = await broker.acquire({ type: 'fake' });
    await broker.release(old.id);
    await broker.runUntilIdle();
    await broker.advance({ minutes: 30 });
    const live = await broker.acquire({ type: 'fake' });
    const recent = await broker.acquire({ type: 'fake' });
    await broker.release(recent.id);
    await broker.runUntilIdle();
    expect(await broker.gc()).toEqual({ leases: 0, resources: 0, logs: 0, commands: 0 }); // nothing is an hour old yet
    await broker.advance({ minutes: 31 });
    const removed = await broker.gc();
    expect(removed.leases).toBe(1);
    expect(removed.commands).toBe(1);
    expect(removed.logs).toBeGreaterThan(0);
    expect(await broker.leases.get(old.id)).toBeNull();
    expect(await broker.logs({ lease: old.id })).toEqual([]);
    expect((await broker.leases.get(recent.id))!.status).toBe('destroyed'); // 31 minutes old: kept
    expect((await broker.leases.get(live.id))!.status).toBe('active');
    expect((await broker.logs({ lease: live.id })).length).toBeGreaterThan(0);
    // The resource is active and leased: kept, whatever its age.
    expect((await broker.resources.get(live.resource.id))!.status).toBe('active');
    await expect(broker.gc({ olderThan: 'soon' as never })).rejects.toMatchObject({ code: 'INVALID_INPUT', field: 'olderThan' });
    await live.release();
    await broker.close();
  });

  // On the postgres tier only: thousands of cycles on the single-session embedded database
  // take many minutes on a 2-core machine, and gc is the same SQL on both tiers.
  // 10,000 cycles, the issue's figure, take 2 to 5 minutes on a shared 2-core machine
  // (about 100 statements per cycle): CI runs them (SLIPWAY_TEST_LONG=1), a plain `npm test`
  // 2,000. SLIPWAY_GROWTH_CYCLES runs another number (a multiple of 10).
  const CYCLES = Number(process.env.SLIPWAY_GROWTH_CYCLES ?? (longRuns ? 10_000 : 2_000));
  (tier === 'postgres' ? test : test.skip)(`${CYCLES.toLocaleString('en')} lease cycles leave a bounded number of rows: commands consumed, work items gone, destroyed rows kept only until gc`, async () => {
    if (!(Number.isInteger(CYCLES) && CYCLES >= 10 && CYCLES % 10 === 0)) throw new Error(`SLIPWAY_GROWTH_CYCLES must be a multiple of 10 (got ${CYCLES})`);
    const bp = fakeBlueprint({ name: 'f', limits: { maxResources: 4 } });
    const broker = await testBroker({ blueprints: [bp], workers: { concurrency: 8 }, retention: { minutes: 5 }, gcInterval: false });
    const FLOWS = 8;
    const CHECKPOINT = CYCLES / 10;
    let started = 0;
    let finished = 0;
    const checkpoints: Array<{ cycles: number } & Awaited<ReturnType<typeof rowCounts>>> = [];
    const beforeGc: Array<Awaited<ReturnType<typeof rowCounts>>> = [];
    for (let done = 0; done < CYCLES; done += CHECKPOINT) {
      const target = done + CHECKPOINT;
      const runFlows = Array.from({ length: FLOWS }, () =>
        (async () => {
          while (started < target) {
            started++;
            const lease = await broker.acquire({ type: 'fake' });
            await lease.release();
            finished++;
          }
        })(),
      );
      await Promise.all(runFlows);
      // This round's cycles are history now: every lease destroyed, every command consumed,
      // no work item left for a lease (once the workers are idle); kept until gc.
      await broker.runUntilIdle();
      beforeGc.push(await rowCounts(broker));
      // Everything so far is history once the retention has passed: gc, then count.
      await broker.advance({ minutes: 6 });
      await broker.gc();
      checkpoints.push({ cycles: finished, ...(await rowCounts(broker)) });
    }
    expect(finished).toBe(CYCLES);
    for (const before of beforeGc) {
      expect(before).toMatchObject({ leases: CHECKPOINT, liveLeases: 0, commands: CHECKPOINT, unconsumed: 0, work_items: before.liveResources });
    }
    // At every checkpoint, live rows only: at most maxResources idle resources, one work item
    // and one capacity slot each, and those resources' own logs. Nothing grows with the cycles.
    for (const cp of checkpoints) {
      expect(cp).toMatchObject({ leases: 0, commands: 0, resources: cp.liveResources, work_items: cp.liveResources, slot_locks: cp.liveResources });
      expect(cp.liveResources).toBeGreaterThanOrEqual(1);
      expect(cp.liveResources).toBeLessThanOrEqual(4);
      // Logs that name a lease go with it; what is left are the live resources' own, and no
      // live resource has more of them after 10,000 cycles than any had after the first round.
      // (Totals are not compared: how many of the 4 resources are live varies by checkpoint.)
      expect(cp.strayLogs).toBe(0);
      expect(cp.maxResourceLogs).toBeLessThanOrEqual(checkpoints[0].maxResourceLogs);
    }
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  }, 3_600_000);
});
