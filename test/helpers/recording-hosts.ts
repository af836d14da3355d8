import { localHosts } from '../../blueprints/index.js';
import { defineBlueprint, type CommandInterface } from '../../lib/index.js';

/** localHosts whose command interface records every argv before it runs: proof of what ran, or that nothing did. */
export function recordingHosts(options: { name: string; root: string; slots?: number }) {
  const base = localHosts({ name: options.name, config: { root: options.root, slots: options.slots ?? 8 } });
  const commands: string[][] = [];
  const impl = base.implementation;
  const blueprint = defineBlueprint({
    ...impl,
    interfaces: {
      ...impl.interfaces,
      command: (ctx): CommandInterface => {
        const inner = impl.interfaces!.command!(ctx as never) as CommandInterface;
        return {
          run: (argv, o) => {
            commands.push([...argv]);
            return inner.run(argv, o);
          },
        };
      },
    },
  })({ name: options.name, config: base.config, limits: { maxResources: 1, maxLeasesPerResource: options.slots ?? 8 } });
  return { blueprint, commands };
}
