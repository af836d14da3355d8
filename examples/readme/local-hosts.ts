import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';

const local = localHosts({ name: 'local', config: { slots: 2, root: join(tmpdir(), 'ci') } });

await using broker = await createBroker({ blueprints: [local] });
await using lease = await broker.acquire({ type: 'host', owner: 'build-44', timeout: { seconds: 30 } });

const command = lease.interface('command');
await command.run(['git', 'init', '--quiet', 'app']);    // in the lease's own directory
const status = await command.run(['git', 'status', '--short'], { cwd: 'app', env: { GIT_PAGER: 'cat' }, timeout: { minutes: 1 } });
console.log(status.exitCode, lease.attributes.slot, lease.interface('filesystem').path);
