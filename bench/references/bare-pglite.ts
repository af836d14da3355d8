import { randomBytes } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
// Bench-only doors into the library, as the tiers' seed statements use: the PGlite assets
// every embedded broker shares, and the driver that sends a broker's named statements.
import { pgliteAssets } from '../../lib/store/embedded-assets.js';
import { pgliteDriver } from '../../lib/store/embedded-driver.js';
import { fakeBlueprint } from '../../lib/testing/index.js';
import type { BenchConfig } from '../support/config.js';
import { progress, round, sleep } from '../support/measure.js';
import { StatementCounter, type SequencedStatement } from '../support/statement-counter.js';
import type { Tier } from '../support/tiers.js';
import { fullCycle, openBroker, prewarm } from '../workloads/common.js';

/**
 * The embedded floor of a cycle: the statements one full cycle sends (captured at the
 * driver, the release's 30 ms tail included), sent again in the same order straight to
 * a PGlite with no broker, in a loop, through the library's driver (so that named
 * statements are prepared once, as the broker's are). The PGlite is a copy of the
 * broker's database taken right after the captured cycle; each round gives the lease a
 * new id (in every parameter, JSON text included) and replays the cycle on the same idle
 * resource. PGlite is one session, so the loop is sequential.
 */
export interface BarePgliteResult {
  statementsPerCycle: number;
  seconds: number;
  cycles: number;
  cyclesPerSec: number;
  /**
   * Statements of the first replayed cycle that returned another number of rows than
   * when the broker sent them: 0 when the replay did what the cycle did (a row count
   * the captured cycle read from a row that the replay cannot reproduce, an id made by a
   * sequence, makes it more than 0).
   */
  rowCountsDiffering: number;
}

type Connection = { query(q: string | { name: string; text: string; values: unknown[] }, params?: unknown[]): Promise<{ rows: unknown[] }>; release(): void };

export async function barePgliteRate(tier: Tier, config: BenchConfig): Promise<BarePgliteResult> {
  const blueprint = fakeBlueprint({ name: 'bare', exclusive: true });
  const { broker } = await openBroker(tier, 'bare', blueprint);
  let captured: SequencedStatement[];
  let leaseId: string;
  let dump: Blob;
  try {
    await prewarm(broker, 1);
    for (let i = 0; i < 5; i++) await fullCycle(broker);
    await sleep(50);
    const counter = new StatementCounter().recordSequence();
    counter.start();
    try {
      const lease = await broker.acquire({ type: 'fake' });
      leaseId = lease.id;
      await lease.release();
      await sleep(30);
    } finally {
      counter.stop();
    }
    captured = counter.sequence!;
    const session = captured.find((s) => s.session instanceof PGlite)?.session as PGlite | undefined;
    if (!session) throw new Error('bare PGlite: the captured cycle sent no statement to PGlite (is this the embedded tier?)');
    dump = (await session.dumpDataDir('none')) as Blob;
  } finally {
    await broker.close();
  }

  const pglite = await PGlite.create({ ...(await pgliteAssets()), loadDataDir: dump });
  try {
    const { Pool } = pgliteDriver(pglite);
    const conn = (await (new Pool() as unknown as { connect(): Promise<Connection> }).connect()) as Connection;
    const cycle = async () => {
      const id = `lease_${randomBytes(10).toString('hex')}`;
      const swap = (v: unknown): unknown => (typeof v === 'string' ? v.replaceAll(leaseId, id) : Array.isArray(v) ? v.map(swap) : v);
      const rows: number[] = [];
      for (const s of captured) {
        const values = s.params.map(swap);
        const r = s.named ? await conn.query({ name: 'bare', text: s.text, values }) : await conn.query(s.text, values.length ? values : undefined);
        rows.push(r.rows.length);
      }
      return rows;
    };
    const first = await cycle();
    const rowCountsDiffering = first.filter((n, i) => n !== captured[i].rows).length;
    const stopAt = performance.now() + config.throughput.seconds * 1000;
    const started = performance.now();
    let cycles = 0;
    while (performance.now() < stopAt) {
      await cycle();
      cycles++;
    }
    const seconds = (performance.now() - started) / 1000;
    conn.release();
    const result = { statementsPerCycle: captured.length, seconds: round(seconds, 2), cycles, cyclesPerSec: round(cycles / seconds, 1), rowCountsDiffering };
    progress(`bare PGlite: ${result.cyclesPerSec} cycles/s of ${result.statementsPerCycle} statements (${rowCountsDiffering} row counts differ from the broker's)`);
    return result;
  } finally {
    await pglite.close();
  }
}
