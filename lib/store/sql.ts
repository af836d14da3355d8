/**
 * The hot-path statements: claims, compare-and-set writes, slot locks and wake-ups.
 * Each is parameterized and qualified with the library's schema (`S` below). The
 * comment above each says why it is safe under concurrency.
 */

export function quoteIdent(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) throw new Error(`not a valid schema name: ${name}`);
  return `"${name}"`;
}

export function statements(schema: string) {
  const S = quoteIdent(schema);
  return {
    // CAS: the WHERE on the expected status makes a concurrent or stale writer update nothing.
    casLease: (sets: string) =>
      `UPDATE ${S}.leases SET status = $3, status_changed_at = $4${sets} WHERE id = $1 AND status = $2 RETURNING *`,
    casResource: (sets: string) =>
      `UPDATE ${S}.resources SET status = $3, status_changed_at = $4${sets} WHERE id = $1 AND status = $2 RETURNING *`,

    // SKIP LOCKED lets many workers claim at once without waiting on each other; the
    // claim expiry makes a dead worker's items claimable again. Resources go first
    // (their progress frees leases), then leases by priority, then first come first served.
    claim: `
      WITH next AS (
        SELECT object_kind, object_id FROM ${S}.work_items
        WHERE run_at IS NOT NULL AND run_at <= $1
          AND (claimed_by IS NULL OR claim_expires_at < $1)
          AND NOT (object_kind || ':' || object_id = ANY($4::text[]))
        ORDER BY (object_kind = 'resource') DESC, priority DESC, seq, run_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${S}.work_items w SET claimed_by = $3, claim_expires_at = $5
      FROM next WHERE w.object_kind = next.object_kind AND w.object_id = next.object_id
      RETURNING w.object_kind, w.object_id, w.wake_count, w.chained, w.attempts, w.claim_expires_at`,

    heartbeat: `UPDATE ${S}.work_items SET claim_expires_at = $3 WHERE object_kind || ':' || object_id = ANY($1::text[]) AND claimed_by = $2`,

    // A wake that arrived while the item was being worked bumped wake_count; finishing
    // then keeps it due instead of overwriting it with a later run_at (no lost wake-up).
    finish: `
      UPDATE ${S}.work_items SET claimed_by = NULL, claim_expires_at = NULL,
        run_at = CASE WHEN wake_count <> $4 THEN $5::timestamptz ELSE $6::timestamptz END,
        chained = CASE WHEN wake_count <> $4 THEN chained ELSE false END,
        attempts = $7
      WHERE object_kind = $1 AND object_id = $2 AND claimed_by = $3`,
    deleteWork: `DELETE FROM ${S}.work_items WHERE object_kind = $1 AND object_id = $2`,
    releaseAllClaims: `UPDATE ${S}.work_items SET claimed_by = NULL, claim_expires_at = NULL WHERE claimed_by IS NOT NULL`,
    releaseClaims: `UPDATE ${S}.work_items SET claimed_by = NULL, claim_expires_at = NULL WHERE claimed_by = $1`,
    nextDue: `SELECT min(run_at) AS at FROM ${S}.work_items WHERE run_at IS NOT NULL AND run_at > $1`,

    // One work item per object: the primary key plus ON CONFLICT turns a second insert into a wake.
    ensureWork: `
      INSERT INTO ${S}.work_items (object_kind, object_id, run_at, priority, seq)
      VALUES ($1, $2, $3, $4, $5)
      ON CONFLICT (object_kind, object_id) DO UPDATE
        SET run_at = LEAST(COALESCE(${S}.work_items.run_at, EXCLUDED.run_at), EXCLUDED.run_at),
            wake_count = ${S}.work_items.wake_count + 1`,
    wake: `
      UPDATE ${S}.work_items SET run_at = LEAST(COALESCE(run_at, $3), $3), wake_count = wake_count + 1
      WHERE object_kind = $1 AND object_id = ANY($2::text[])`,

    // The next waiting lease that is not already due gets the wake, so two freed slots
    // wake two leases; SKIP LOCKED keeps two concurrent wakers from picking the same one.
    wakeNextWaiting: `
      WITH next AS (
        SELECT w.object_kind, w.object_id FROM ${S}.work_items w
        JOIN ${S}.leases l ON l.id = w.object_id AND w.object_kind = 'lease'
        WHERE l.status = 'pending' AND l.type = ANY($1::text[])
          AND (l.blueprints IS NULL OR l.blueprints && $2::text[])
          -- A lease in the middle of a pass can take the wake too: the bumped wake_count
          -- makes it look again when the pass ends. 'chained' keeps one lease from taking two.
          AND (w.run_at IS NULL OR w.run_at > $3 OR (w.claimed_by IS NOT NULL AND NOT w.chained))
          AND ($4::bigint IS NULL OR (l.priority, -l.seq) < ($5::integer, -$4::bigint))
        ORDER BY l.priority DESC, l.seq
        LIMIT 1
        FOR UPDATE OF w SKIP LOCKED
      )
      UPDATE ${S}.work_items w SET run_at = $3, chained = true, wake_count = w.wake_count + 1
      FROM next WHERE w.object_kind = next.object_kind AND w.object_id = next.object_id
      RETURNING w.object_id`,

    // All or nothing: ON CONFLICT DO NOTHING waits on a concurrent insert of the same key
    // and then skips it; the caller compares what it got and rolls the transaction back.
    lockSlots: `
      INSERT INTO ${S}.slot_locks (key, holder_kind, holder_id, created_at)
      SELECT k, $2, $3, $4 FROM unnest($1::text[]) AS k
      ON CONFLICT (key) DO NOTHING`,
    slotHolders: `SELECT key, holder_kind, holder_id FROM ${S}.slot_locks WHERE key = ANY($1::text[])`,
    // Takes the first free capacity slot of a blueprint; the unique key makes the
    // maxResources cap exact however many allocators race.
    takeCapacitySlot: `
      INSERT INTO ${S}.slot_locks (key, holder_kind, holder_id, created_at)
      SELECT k, 'resource', $2, $3 FROM unnest($1::text[]) AS k
      WHERE NOT EXISTS (SELECT 1 FROM ${S}.slot_locks l WHERE l.key = k)
      LIMIT 1
      ON CONFLICT (key) DO NOTHING
      RETURNING key`,
    releaseSlots: `DELETE FROM ${S}.slot_locks WHERE holder_kind = $1 AND holder_id = $2`,

    // Serializes allocation decisions per blueprint for the length of one short transaction.
    allocationLock: `SELECT pg_advisory_xact_lock(hashtext($1))`,
    allocationCounts: `
      SELECT count(*) FILTER (WHERE status = 'pending')::int AS allocating,
             count(*) FILTER (WHERE status = 'active')::int AS active
      FROM ${S}.resources WHERE blueprint = $1 AND status IN ('pending', 'active')`,

    insertCommand: `
      INSERT INTO ${S}.commands (target_kind, target_id, command, data, author, created_at)
      VALUES ($1, $2, $3, $4::jsonb, $5, $6) RETURNING id`,
    unconsumedCommands: `
      SELECT * FROM ${S}.commands WHERE target_kind = $1 AND target_id = $2 AND consumed_at IS NULL ORDER BY id`,
    // consumed_at IS NULL makes consumption exactly-once even if two workers raced.
    consumeCommand: `UPDATE ${S}.commands SET consumed_at = $2, outcome = $3 WHERE id = $1 AND consumed_at IS NULL`,

    insertLog: `
      INSERT INTO ${S}.logs (type, blueprint, resource_id, lease_id, data, at, last_at)
      VALUES ($1, $2, $3, $4, $5::jsonb, $6, $6) RETURNING *`,
    bumpLog: `UPDATE ${S}.logs SET count = count + 1, last_at = $2, data = $3::jsonb WHERE id = $1 RETURNING *`,
  };
}

export type Statements = ReturnType<typeof statements>;
