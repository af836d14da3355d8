/**
 * A stand-in for a cloud provider's SDK, so that the README's blueprint example
 * (examples/readme/blueprint.ts) runs as it is printed. A new VM answers on ssh from its
 * second check on, so the example's `RetryLater` path runs too.
 */
const vms = new Map<string, { address: string; checks: number }>();

export const cloud = {
  /** Creates the VM named `name`, or finds the one an earlier call created. */
  async createOrFind(name: string, image: string): Promise<{ address: string }> {
    let vm = vms.get(name);
    if (!vm) vms.set(name, (vm = { address: `10.0.0.${vms.size + 1}`, checks: 0 }));
    console.log(`cloud: ${name} (${image}) at ${vm.address}`);
    return vm;
  },
  async sshAnswers(address: string): Promise<boolean> {
    const vm = [...vms.values()].find((v) => v.address === address);
    return vm !== undefined && ++vm.checks > 1;
  },
  async deleteIfExists(name: string): Promise<void> {
    vms.delete(name);
  },
};
