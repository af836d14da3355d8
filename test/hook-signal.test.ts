import { BrokerClosedError, defineBlueprint, HookTimeoutError } from '../lib/index.js';
import { guardBrokers, realBroker } from './helpers/broker.js';

guardBrokers();

describe("a hook's ctx.signal, with createBroker on the real clock", () => {
  test('aborts when the broker closes past its grace period while the hook runs, with a BrokerClosedError as its reason', async () => {
    let signal: AbortSignal | undefined;
    let reached!: () => void;
    const inHook = new Promise<void>((r) => (reached = r));
    const bp = defineBlueprint({
      type: 'slow',
      async allocateResource() {
        return { attributes: {} };
      },
      async activateLease(ctx) {
        signal = ctx.signal;
        reached();
        // Settles only when its signal aborts, as a hook that passes it on to its work does.
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      },
      async destroyResource() {},
    })({ name: 'slow' });
    const broker = await realBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'slow' });
    await inHook;
    expect(signal!.aborted).toBe(false);
    await broker.close({ grace: { milliseconds: 200 } });
    expect(signal!.aborted).toBe(true);
    expect(signal!.reason).toBeInstanceOf(BrokerClosedError);
    // The lease never became active: it waits for the next broker.
    expect(handle.id).toMatch(/^lease/);
  }, 30_000);

  // The signal is made when the hook first reads it (most hooks never do): one read at
  // the start and one read only after the timeout must both see the timeout.
  test.each([
    ['at its start', false],
    ['only after its timeout', true],
  ])('a hook that reads it %s finds it aborted at its timeout, with a HookTimeoutError as its reason', async (_, late) => {
    let signal: AbortSignal | undefined;
    let abortedAtRead: boolean | undefined;
    let done!: () => void;
    const read = new Promise<void>((r) => (done = r));
    const bp = defineBlueprint({
      type: 'slow',
      async allocateResource() {
        return { attributes: {} };
      },
      async activateLease(ctx) {
        if (!late) {
          signal = ctx.signal;
          abortedAtRead = signal.aborted;
        }
        await new Promise((resolve) => setTimeout(resolve, 600));
        if (late) {
          signal = ctx.signal;
          abortedAtRead = signal.aborted;
        }
        done();
        await new Promise(() => undefined);
      },
      async destroyResource() {},
    })({ name: 'slow', timeouts: { activateLease: { milliseconds: 300 } } });
    const broker = await realBroker({ blueprints: [bp] });
    await broker.requestLease({ type: 'slow' });
    await read;
    expect(abortedAtRead).toBe(late);
    expect(signal!.aborted).toBe(true);
    expect(signal!.reason).toBeInstanceOf(HookTimeoutError);
    expect((signal!.reason as HookTimeoutError).message).toMatch(/slow\.activateLease.*300 ms|did not finish/);
    await broker.close({ grace: { milliseconds: 100 } });
  }, 30_000);
});
