import type { IncomingMessage } from 'node:http';
import type { Broker } from '../broker/index.js';

/** A form body larger than this is refused: the forms send a CSRF token and a reason. */
const MAX_BODY = 16 * 1024;

/** What the author of the dashboard's commands is recorded as. */
export const AUTHOR = 'dashboard';

/** The commands the buttons write, by the kind of object and the last segment of the path; each one a public call. */
export const COMMANDS: Record<string, (broker: Broker, id: string, form: URLSearchParams) => Promise<void>> = {
  'leases/release': (broker, id) => broker.release(id, { reason: 'released from the dashboard', author: AUTHOR }),
  'resources/release': (broker, id) => broker.releaseResource(id, { reason: 'released from the dashboard', author: AUTHOR }),
  'resources/reclaim': (broker, id) => broker.reclaimResource(id, { author: AUTHOR }),
  'resources/break': (broker, id, form) => broker.breakResource(id, form.get('reason')?.trim() || 'broken from the dashboard', { author: AUTHOR }),
};

/** The urlencoded form of a POST, read up to MAX_BODY bytes; null for a larger one or a body that broke off. */
export async function readForm(req: IncomingMessage): Promise<URLSearchParams | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > MAX_BODY) return null;
      chunks.push(chunk as Buffer);
    }
  } catch {
    return null;
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}
