/**
 * Errors that mean "the connection to the server is gone or not there yet", as
 * opposed to errors of the statement itself. Only these are retried.
 */
const NODE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
// 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now; class 08 is connection_exception.
const SQLSTATES = new Set(['57P01', '57P02', '57P03']);
const MESSAGES = [/connection terminated/i, /not queryable/i, /connection (?:is )?(?:closed|ended)/i, /terminating connection/i, /the database system is (?:starting up|shutting down|in recovery mode)/i, /server closed the connection/i];

export function isConnectionError(error: unknown): boolean {
  for (let e: any = error, depth = 0; e && depth < 4; e = e.driverError ?? e.cause, depth++) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (NODE_CODES.has(code) || SQLSTATES.has(code) || code.startsWith('08')) return true;
    if (typeof e.message === 'string' && MESSAGES.some((m) => m.test(e.message))) return true;
  }
  return false;
}

/** 40P01 deadlock_detected, 40001 serialization_failure: the server rolled the transaction back; running it again is safe. */
export function isTransientConflict(error: unknown): boolean {
  for (let e: any = error, depth = 0; e && depth < 4; e = e.driverError ?? e.cause, depth++) {
    if (e.code === '40P01' || e.code === '40001') return true;
  }
  return false;
}

/**
 * 0A000 "cached plan must not change result type": a prepared statement outlived a schema
 * change. Nothing ran; the connection then sends that statement's text instead (db.ts).
 */
export function isStalePlan(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | null;
  return e?.code === '0A000' && typeof e.message === 'string' && /cached plan/.test(e.message);
}
