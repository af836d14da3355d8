/**
 * Guesses which slot index a lease should try to lock.
 *
 * The slot lock alone makes a slot exclusive; this is only a guess that avoids
 * conflicts, because `acquireLease` runs before the lock is taken and the blueprint cannot
 * see which slots are held. A conflict costs the lease a pass (it waits for the next wake
 * or recheck), so the guess matters for latency, never for correctness.
 *
 * - First try: the lowest index this process has not handed to another live lease.
 *   Within one process that is exact, so leases never collide there.
 * - Each further try of the same lease on the same resource moves one index on, through
 *   every index. The memory may be wrong (another process holds slots, this process
 *   restarted, a lease was destroyed elsewhere); cycling through all indices still
 *   reaches a free slot, which exists because `canAcquireLease` saw `leaseCount < slots`.
 */
export class SlotPicker {
  /** resource id → slot index → the lease this process last handed it to. */
  private readonly handedOut = new Map<string, Map<number, string>>();
  /** `${resource id} ${lease id}` → how many times that lease tried that resource. */
  private readonly tries = new Map<string, number>();

  pick(resourceId: string, leaseId: string, slots: number): number {
    let slotsOfResource = this.handedOut.get(resourceId);
    if (!slotsOfResource) this.handedOut.set(resourceId, (slotsOfResource = new Map()));
    // Being asked again means the last guess for this lease did not stick.
    for (const [index, holder] of slotsOfResource) if (holder === leaseId) slotsOfResource.delete(index);

    const tryKey = `${resourceId} ${leaseId}`;
    const attempt = this.tries.get(tryKey) ?? 0;
    // Only a lease that never gets the resource (released while waiting) leaves its
    // count behind; a cap keeps such leftovers from growing without bound.
    if (this.tries.size >= 10_000) this.tries.clear();
    this.tries.set(tryKey, attempt + 1);

    const all = Array.from({ length: slots }, (_, i) => i);
    const order = [...all.filter((i) => !slotsOfResource.has(i)), ...all.filter((i) => slotsOfResource.has(i))];
    const index = order[attempt % slots]!;
    slotsOfResource.set(index, leaseId);
    return index;
  }

  /** The lease got its slot (or is gone): stop counting its tries. */
  settled(resourceId: string, leaseId: string): void {
    this.tries.delete(`${resourceId} ${leaseId}`);
  }

  /** The lease is destroyed: its slot is free again. */
  freed(resourceId: string, leaseId: string): void {
    this.settled(resourceId, leaseId);
    const slotsOfResource = this.handedOut.get(resourceId);
    if (!slotsOfResource) return;
    for (const [index, holder] of slotsOfResource) if (holder === leaseId) slotsOfResource.delete(index);
  }

  forgetResource(resourceId: string): void {
    this.handedOut.delete(resourceId);
  }
}
