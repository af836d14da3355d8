import { BrokerClosedError } from '../errors/broker-closed-error.js';
import { NotFoundError } from '../errors/not-found-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { checkCommandOptions, checkText } from '../model/call-arguments.js';
import { writeAgainIfUnknown } from '../store/db.js';
import type { BrokerContext } from './context.js';
import type { Broker } from './types.js';

/** Writes a command for an object's worker; resolves with the object's status as the write found it, NotFoundError when there is no such object. */
export async function writeCommand(ctx: BrokerContext, kind: 'lease' | 'resource', id: string, command: 'release' | 'reclaim' | 'break', data: Record<string, string>, author: string | null): Promise<string> {
  if (ctx.closed) throw new BrokerClosedError();
  if (typeof id !== 'string' || !id) throw new ValidationError(kind === 'lease' ? 'leaseId' : 'resourceId', 'must be a non-empty string');
  const { store } = ctx;
  // Written again after a lost outcome: if both landed, the second is consumed with
  // "no effect"; a command is never lost.
  const { status } = await writeAgainIfUnknown(() => store.single((u) => store.writeCommand(u, kind, id, command, data, author)));
  if (status === null) throw new NotFoundError(kind, id);
  return status;
}

/** The broker's command calls. Arguments are checked here, in order, before anything is read or written. */
export function commandCalls(ctx: BrokerContext): Pick<Broker, 'release' | 'releaseResource' | 'reclaimResource' | 'breakResource'> {
  return {
    async release(id, options) {
      checkText(id, 'leaseId');
      const o = checkCommandOptions(options, 'release', ['reason', 'author']);
      await writeCommand(ctx, 'lease', id, 'release', { reason: o.reason ?? 'released' }, o.author ?? null);
    },
    async releaseResource(id, options) {
      checkText(id, 'resourceId');
      const o = checkCommandOptions(options, 'releaseResource', ['reason', 'author']);
      await writeCommand(ctx, 'resource', id, 'release', { reason: o.reason ?? 'released' }, o.author ?? null);
    },
    async reclaimResource(id, options) {
      checkText(id, 'resourceId');
      const o = checkCommandOptions(options, 'reclaimResource', ['author']);
      await writeCommand(ctx, 'resource', id, 'reclaim', {}, o.author ?? null);
    },
    async breakResource(id, reason, options) {
      checkText(id, 'resourceId');
      // The reason is what the broken leases report: a missing one must not be recorded as "undefined".
      checkText(reason, 'reason');
      const o = checkCommandOptions(options, 'breakResource', ['author']);
      await writeCommand(ctx, 'resource', id, 'break', { reason }, o.author ?? null);
    },
  };
}
