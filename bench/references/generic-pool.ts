import genericPool from 'generic-pool';

/**
 * An in-memory pool with no persistence: generic-pool acquire/release of ready
 * objects, with as many objects as acquirers. The other end of the scale from pgbench.
 */
export interface PoolPoint {
  clients: number;
  seconds: number;
  opsPerSec: number;
}

export async function genericPoolRate(clients: number, seconds: number): Promise<PoolPoint> {
  let made = 0;
  const pool = genericPool.createPool({ create: async () => ({ id: ++made }), destroy: async () => undefined }, { min: clients, max: clients });
  // Fill the pool before the clock starts.
  const warm = await Promise.all(Array.from({ length: clients }, () => pool.acquire()));
  await Promise.all(warm.map((r) => pool.release(r)));
  let ops = 0;
  const started = performance.now();
  const stopAt = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < stopAt) {
        const r = await pool.acquire();
        await pool.release(r);
        ops++;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  await pool.drain();
  await pool.clear();
  return { clients, seconds: Math.round(elapsed * 100) / 100, opsPerSec: Math.round(ops / elapsed) };
}
