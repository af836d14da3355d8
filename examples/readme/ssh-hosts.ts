import { createBroker } from 'slipway';
import { sshHosts } from 'slipway/blueprints';

// Your machines, your CI's key, and the host keys you trust (here from the environment).
const env = process.env;
const builders = sshHosts({
  name: 'builders',
  config: {
    hosts: [{ host: env.BUILD_HOST ?? 'build-1.example.com', port: Number(env.BUILD_PORT ?? 22), user: env.BUILD_USER ?? 'ci', slots: 2 }],
    identityFile: env.BUILD_KEY ?? '/etc/ci/id_ed25519',
    knownHostsFile: env.BUILD_KNOWN_HOSTS ?? '/etc/ci/known_hosts',
  },
});

await using broker = await createBroker({ blueprints: [builders] });
await using lease = await broker.acquire({ type: 'host', blueprints: [builders], timeout: { minutes: 1 } });

const command = lease.interface('command');
const { stdout } = await command.run(['sh', '-c', 'echo "$(uname -s) on $(hostname)"'], { timeout: { seconds: 30 } });
console.log(`${stdout.trim()}, slot ${lease.attributes.slot}, in ${lease.interface('filesystem').path}`);
