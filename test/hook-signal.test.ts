import { BrokerClosedError, defineBlueprint } from '../lib/index.js';
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
});
