/**
 * Quickstart: a broker on the embedded database (nothing to install), the local machine
 * with two slots, and three leases asked for at once. Two run at once, the third waits
 * for a free slot. Each runs real commands in its own scratch directory.
 *
 *   npm run example
 */
import { createBroker, type Lease } from 'slipway';
import { localHosts } from 'slipway/blueprints';

const broker = await createBroker({
  blueprints: [localHosts({ name: 'local', config: { slots: 2 } })],
});

const started = Date.now();
const elapsed = () => `+${String(Date.now() - started).padStart(5)} ms`;
const short = (id: string) => id.slice(-6);

const timeline: string[] = [];
broker.on('lease', (e) => timeline.push(`${elapsed()}  lease …${short(e.id)}  ${e.from ?? '(new)'} → ${e.to}`));

/** One build step: write a file in the lease's directory, read it back, list the directory. */
async function build(name: string, lease: Lease): Promise<string> {
  const command = lease.interface('command');
  const write = await command.run([process.execPath, '-e', `require('fs').writeFileSync('greeting.txt', 'hello from ${name}\\n')`]);
  if (write.exitCode !== 0) throw new Error(`${name}: writing failed: ${write.stderr}`);
  const read = await command.run([process.execPath, '-e', "process.stdout.write(require('fs').readFileSync('greeting.txt', 'utf8'))"]);
  const list = await command.run(['ls', '-1']);
  // Give the slot to the waiting lease a little later, so the timeline shows it waiting.
  await command.run([process.execPath, '-e', 'setTimeout(() => {}, 300)']);
  return `${name} (slot ${lease.attributes.slot}, ${lease.interface('filesystem').path}): ${read.stdout.trim()} | ls: ${list.stdout.trim()}`;
}

const results = await Promise.all(
  ['job-a', 'job-b', 'job-c'].map(async (name) => {
    const lease = await broker.acquire({ type: 'host', owner: name, timeout: { seconds: 30 } });
    try {
      return await build(name, lease);
    } finally {
      await lease.release();
    }
  }),
);

console.log('Results');
for (const line of results) console.log(`  ${line}`);

console.log('\nLease timeline');
for (const line of timeline) console.log(`  ${line}`);

console.log('\nLogs');
for (const entry of await broker.logs()) {
  if (entry.type === 'status.changed') continue;
  const about = entry.lease ? `lease …${short(entry.lease)}` : entry.resource ? `resource …${short(entry.resource)}` : 'broker';
  const times = entry.count > 1 ? ` (×${entry.count})` : '';
  console.log(`  ${entry.at.toFormat('HH:mm:ss.SSS')}  ${about.padEnd(16)} ${entry.message}${times}`);
}

await broker.close();
