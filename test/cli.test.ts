/**
 * The `slipway` bin, built (dist/lib/cli/main.js) and run as a subprocess against this
 * run's tier: `--data-dir` on the embedded tier, `--database` with a fresh schema on the
 * postgres tier. The config module is test/fixtures/cli/slipway.config.js, which imports
 * the package by name as a user's would. test/package.test.ts runs the packed bin.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DateTime } from 'luxon';
import { AUTHORIZATION_STATES, createBroker, LEASE_STATUSES, RESOURCE_STATUSES, type Broker } from '../lib/index.js';
import { localHosts } from '../blueprints/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { buildBin, cli, cliDatabase, cliJson, CONFIG, oneCleanLine, Running } from './helpers/cli.js';
import { repoRoot } from './helpers/readme-samples.js';
import { tier } from './helpers/tier.js';

const root = mkdtempSync(join(tmpdir(), 'slipway-cli-hosts-'));
const env = { SLIPWAY_CLI_TEST_ROOT: root };
const running: Running[] = [];
const start = (args: string[]) => {
  const r = Running.bin(args, env);
  running.push(r);
  return r;
};

beforeAll(buildBin, 120_000);
afterEach(() => {
  for (const r of running.splice(0)) r.kill();
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The config fixture's blueprints, for a broker of the test itself that sets up state. */
function fixtureBlueprints() {
  return [
    localHosts({ name: 'local', config: { slots: 8, root } }),
    fakeBlueprint({ name: 'slow', type: 'slow-host', delays: { allocateResource: 700, activateResource: 700 }, child: { type: 'host' } }),
  ];
}

const jsonLines = (text: string) => text.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line));

describe(`slipway on the ${tier} tier`, () => {
  let db: ReturnType<typeof cliDatabase>;
  let flags: string[];
  const withConfig = () => [...flags, '--config', CONFIG];

  beforeAll(() => {
    db = cliDatabase('bin');
    flags = db.flags;
  });

  test('every command has --help with an example; --version is the package version', async () => {
    const commands = ['migrate', 'worker', 'lease', 'release-lease', 'release-resource', 'reclaim', 'break', 'update-lease', 'leases', 'resources', 'show', 'logs', 'stats', 'authorizations', 'authorize', 'decline', 'drain', 'resume', 'gc', 'dashboard'];
    const helps = await Promise.all(commands.map((command) => cli([command, '--help'])));
    helps.forEach((help, i) => expect([commands[i], help.code, help.stdout]).toEqual([commands[i], 0, expect.stringMatching(new RegExp(`Usage: slipway ${commands[i]}[\\s\\S]*Examples?:\\n  \\$ slipway ${commands[i]} `))]));
    // The status lists are written out in the help (it answers without loading the library): the library's own.
    expect(helps[commands.indexOf('leases')]!.stdout.replace(/\s+/g, ' ')).toContain(`(${LEASE_STATUSES.join(', ')}) or all`);
    expect(helps[commands.indexOf('resources')]!.stdout.replace(/\s+/g, ' ')).toContain(`(${RESOURCE_STATUSES.join(', ')}) or all`);
    expect(helps[commands.indexOf('authorizations')]!.stdout.replace(/\s+/g, ' ')).toContain(`(${AUTHORIZATION_STATES.join(', ')})`);
    expect((await cli(['deauthorize', '--help'])).stdout).toMatch(/^Usage: slipway decline\|deauthorize /);
    const version = await cli(['--version']);
    expect(version.stdout.trim()).toBe(JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')).version);
  }, 120_000);

  test('migrate applies the migrations and prints the version; a second run has nothing to do', async () => {
    const first = await cliJson(['migrate', ...flags]);
    expect(first).toEqual({ schema: expect.any(String), version: 7, applied: [1, 2, 3, 4, 5, 6, 7] });
    const second = await cli(['migrate', ...flags]);
    expect(second).toMatchObject({ code: 0, stderr: '' });
    expect(second.stdout).toMatch(/ is up to date: version 7 \(PoolPolicies\)\n$/);
  }, 180_000);

  test('lease -- argv runs the command on the lease, streams its output, releases it and exits with its exit code', async () => {
    const attributes = join(root, 'attributes.json');
    writeFileSync(attributes, JSON.stringify({ job: 'job-7' }));
    const result = await cli(['lease', '--type', 'host', '--ttl', '10m', '--owner', 'ci-7', '--attributes', `@${attributes}`, ...withConfig(), '--', 'sh', '-c', 'echo out; echo err >&2; exit 3'], { env });
    expect(result.code).toBe(3);
    expect(result.stdout).toBe('out\n');
    // Off a terminal: plain progress lines, no spinner, no colour.
    expect(result.stderr).toMatch(/^lease (lease_\w+) requested: host\n\d\d:\d\d:\d\d Lease queued for type "host" by ci-7\.\n/);
    expect(result.stderr).toMatch(/Lease is active on resource res_\w+\.\n[\s\S]*\berr\n[\s\S]*lease lease_\w+ destroyed\n$/);
    expect(result.stderr).not.toMatch(/\x1b|⠋|waited/);
    const id = /lease (lease_\w+) requested/.exec(result.stderr)![1];
    const [lease] = (await cliJson<any[]>(['leases', '--status', 'all', '--owner', 'ci-7', ...flags])).filter((l) => l.id === id);
    expect(lease).toMatchObject({ id, status: 'destroyed', owner: 'ci-7', type: 'host', attributes: { job: 'job-7', slot: expect.any(Number) } });
    expect(DateTime.fromISO(lease.createdAt).isValid).toBe(true);
  }, 120_000);

  (tier === 'postgres' ? test : test.skip)('lease with workers: false shows the lines a worker in another process wrote, before the lease is active', async () => {
    // The requesting process hears no log line of the worker's: they are read from the database.
    const worker = start(['worker', ...withConfig()]);
    await worker.waitFor(/slipway worker: blueprints/);
    const requester = join(repoRoot, 'test/fixtures/cli/requester.config.js');
    const result = await cli(['lease', '--type', 'host', '--ttl', '10m', '--owner', 'ci-remote', ...flags, '--config', requester, '--', 'true'], { env });
    expect(result.code).toBe(0);
    expect(result.stderr).toMatch(/\d\d:\d\d:\d\d Lease acquired on resource res_\w+ \(blueprint local\)\.\n[\s\S]*\d\d:\d\d:\d\d Lease is active on resource res_\w+\.\nlease lease_\w+ is active on resource /);
  }, 120_000);

  test('lease --keep-alive renews a short ttl while the command runs past it', async () => {
    const result = await cli(['lease', '--type', 'host', '--ttl', '2s', '--keep-alive', '--owner', 'ci-ka', ...withConfig(), '--', 'sh', '-c', 'sleep 5; echo done'], { env });
    expect(result).toMatchObject({ code: 0, stdout: 'done\n' });
    expect(result.stderr).not.toMatch(/expired/);
    const id = /lease (lease_\w+) requested/.exec(result.stderr)![1];
    const shown = await cliJson(['show', id!, ...flags]);
    expect(shown.logs.map((l: { type: string }) => l.type)).toContain('lease.extended');
    expect(shown.logs.find((l: { type: string }) => l.type === 'lease.extended').count).toBeGreaterThanOrEqual(5);
  }, 120_000);

  test('lease --count 2 holds two leases until SIGINT, then releases both; all or none when one is not active in time', async () => {
    const holder = start(['lease', '--type', 'host', '--ttl', '10m', '--count', '2', '--owner', 'ci-count', '--json', ...withConfig()]);
    await holder.waitFor(/holding 2 leases: Ctrl-C releases them/);
    const leases = JSON.parse(holder.stdout) as Array<{ id: string }>;
    expect(leases).toHaveLength(2);
    expect(new Set(leases.map((l) => l.id)).size).toBe(2);
    for (const lease of leases) expect(lease).toMatchObject({ status: 'active', owner: 'ci-count', type: 'host' });
    holder.proc.kill('SIGINT');
    const exit = await holder.exited;
    expect(exit.code).toBe(0);
    for (const lease of leases) expect(exit.stderr).toMatch(new RegExp(`lease ${lease.id} destroyed`));

    // One of them never has room: neither is kept.
    const both = await cli(['lease', '--type', 'full-host', '--count', '2', '--timeout', '300ms', '--owner', 'ci-none', ...withConfig()], { env });
    expect(both.code).toBe(1);
    expect(both.stderr).toMatch(/\nslipway: lease lease_\w+ was not active within 300ms; released\n$/);
    const ids = [...both.stderr.matchAll(/lease (lease_\w+) requested/g)].map((m) => m[1]);
    expect(ids).toHaveLength(2);
    for (const id of ids) expect((await cliJson(['show', id!, ...flags])).lease.status).toBe('destroyed');
  });

  test('lease that times out releases the lease and exits 1 with the reason as its last line', async () => {
    const result = await cli(['lease', '--type', 'slow-host', '--timeout', '100ms', ...withConfig()], { env });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/\nslipway: lease lease_\w+ was not active within 100ms; released\n$/);
    expect(result.stderr).not.toMatch(/\n\s+at /);
  });

  test('lease holds until SIGINT, then releases; show prints its timeline, its resource and the child lease', async () => {
    const until = DateTime.utc().plus({ hours: 1 }).startOf('second');
    const holder = start(['lease', '--type', 'slow-host', '--until', until.toISO()!, '--attributes', '{"job":"j1"}', '--owner', 'ci-8', '--json', ...withConfig()]);
    await holder.waitFor(/Ctrl-C releases it/);
    const lease = JSON.parse(holder.stdout);
    expect(lease).toMatchObject({ type: 'slow-host', status: 'active', owner: 'ci-8', attributes: { job: 'j1' }, resource: { blueprint: 'slow' } });
    expect(DateTime.fromISO(lease.expiresAt).toMillis()).toBe(until.toMillis());
    expect(holder.stderr).toMatch(/Allocating a new resource for lease/);
    holder.proc.kill('SIGINT');
    const exit = await holder.exited;
    expect(exit.code).toBe(0);
    expect(exit.stderr).toMatch(new RegExp(`lease ${lease.id} destroyed\\n$`));

    const shown = await cliJson(['show', lease.id, ...flags]);
    expect(shown.kind).toBe('lease');
    expect(shown.timeline.map((s: { to: string }) => s.to)).toEqual(expect.arrayContaining(['active', 'released', 'destroyed']));
    expect(shown.resource).toMatchObject({ id: lease.resource.id, blueprint: 'slow', status: 'active' });
    expect(shown.children).toEqual([expect.objectContaining({ type: 'host', parentResourceId: lease.resource.id })]);
    const text = await cli(['show', lease.id, ...flags]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^lease: +${lease.id} \\(slow-host\\)\\nstatus: +destroyed since [^\\n]+\\nowner: +ci-8\\n`));
    expect(text.stdout).toMatch(/\ntimeline:\n {2}\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ {2}created\n[\s\S]* active → released\n[\s\S]* released → destroyed\n/);
    expect(text.stdout).toMatch(new RegExp(`children: +${shown.children[0].id} \\(host, active\\)`));
    expect(text.stdout).toMatch(/\nlogs:\n[\s\S]*Lease released by holder\./);
  });

  describe('state left by a broker: lists, write commands, then a worker that carries them out', () => {
    const ids: Record<string, string> = {};

    beforeAll(async () => {
      const broker: Broker = await createBroker({ database: db.options, blueprints: fixtureBlueprints() });
      try {
        for (const [name, owner] of [['a1', 'team-a'], ['a2', 'team-a'], ['b', 'team-b']] as const) {
          ids[name] = (await broker.acquire({ type: 'host', owner, ttl: { hours: 1 }, blueprints: ['local'], timeout: { seconds: 30 } })).id;
        }
        const slow = await broker.acquire({ type: 'slow-host', owner: 'team-c', ttl: { hours: 1 }, timeout: { seconds: 30 } });
        ids.slow = slow.id;
        ids.slowResource = slow.resource.id;
        ids.local = (await broker.leases.get(ids.a1))!.resourceId!;
      } finally {
        await broker.close();
      }
    }, 60_000);

    test('leases and resources: tables with age and owner, filters, --json with ISO times', async () => {
      const leases = await cliJson<any[]>(['leases', ...flags]);
      expect(leases.filter((l) => l.status === 'active').map((l) => l.id)).toEqual(expect.arrayContaining([ids.a1, ids.a2, ids.b, ids.slow]));
      expect(leases.every((l) => l.status !== 'destroyed')).toBe(true);
      const teamA = await cli(['leases', '--owner', 'team-a', ...flags]);
      expect(teamA.code).toBe(0);
      const rows = teamA.stdout.trim().split('\n');
      expect(rows[0]).toMatch(/^ID +TYPE +STATUS +OWNER +RESOURCE +CREATED +IN STATUS SINCE +EXPIRES$/);
      expect(rows.slice(1).map((r) => r.split(/\s+/)[0]).sort()).toEqual([ids.a1, ids.a2].sort());
      expect(rows[1]).toMatch(/ active +team-a +res_\w+ +(just now|\d+ s ago|\d+ min ago) .*in 59 min$/);
      expect((await cliJson<any[]>(['leases', '--type', 'slow-host', '--status', 'active', ...flags])).map((l) => l.id)).toEqual([ids.slow]);

      const resources = await cli(['resources', '--blueprint', 'local', ...flags]);
      const localRow = resources.stdout.split('\n').find((row) => row.startsWith(ids.local))!;
      expect(localRow).toMatch(/^res_\w+ +host +local +active +\d+ +.*team-a, team-b/);
      const json = await cliJson<any[]>(['resources', ...flags]);
      expect(json.find((r) => r.id === ids.local).leases.map((l: { owner: string }) => l.owner)).toEqual(expect.arrayContaining([`resource:${ids.slowResource}`, 'team-a', 'team-a', 'team-b']));
      expect(json.find((r) => r.id === ids.slowResource)).toMatchObject({ blueprint: 'slow', status: 'active', leases: [{ id: ids.slow, owner: 'team-c' }] });
      // Colour only on a terminal: piped, without NO_COLOR, there is none.
      expect((await cli(['leases', ...flags], { env: { NO_COLOR: '' } })).stdout).not.toMatch(/\x1b/);
    });

    test('write commands print what was asked; the objects change only once a worker consumes them', async () => {
      expect(await cli(['release-lease', ids.a1, ...flags])).toMatchObject({ code: 0, stdout: `release of lease ${ids.a1} requested\n`, stderr: '' });
      expect(await cliJson(['release-lease', '--all', '--owner', 'team-b', ...flags])).toEqual({ released: [ids.b] });
      expect(await cli(['break', ids.slowResource, '--reason', 'disk failed', ...flags])).toMatchObject({ code: 0, stdout: `break of resource ${ids.slowResource} requested: disk failed\n` });
      expect(await cliJson(['reclaim', ids.local, ...flags])).toEqual({ reclaim: ids.local });
      expect((await cliJson(['show', ids.a1, ...flags])).lease.status).toBe('active');
      // No worker runs: the renewal is written, and applied when one does.
      const renewal = await cli(['update-lease', ids.a2, '--ttl', '3h', '--wait', '300ms', ...flags]);
      expect(renewal).toMatchObject({ code: 0, stderr: '' });
      expect(renewal.stdout).toMatch(new RegExp(`^renewal of lease ${ids.a2} to \\S+ requested; no worker applied it within 300ms \\(is a \`slipway worker\` running\\?\\)\n$`));
      ids.renewedTo = /to (\S+) requested/.exec(renewal.stdout)![1]!;
      expect((await cliJson(['show', ids.a2, ...flags])).lease.expiresAt).not.toBe(ids.renewedTo);
    }, 120_000);

    test('worker carries them out, printing one line per transition; the first SIGTERM drains and exits 0', async () => {
      const follow = tier === 'postgres' ? start(['logs', '--follow', '--lease', ids.a1, '--interval', '200ms', ...flags]) : null;
      if (follow) await follow.waitFor(/Lease is active on resource/);
      const worker = start(['worker', ...withConfig()]);
      await worker.waitFor(new RegExp(`lease ${ids.a1} released → destroyed`));
      await worker.waitFor(new RegExp(`lease ${ids.b} released → destroyed`));
      await worker.waitFor(new RegExp(`resource ${ids.slowResource} broken → destroyed`));
      expect(worker.stdout).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (lease|resource) \w+ \w+ → \w+\n/);
      if (tier === 'embedded') {
        // One process at a time on a data directory: the error says which holds it.
        const locked = await cli(['leases', ...flags]);
        expect(locked.code).toBe(1);
        expect(locked.stderr).toMatch(new RegExp(`^slipway: .* is in use by process ${worker.proc.pid} on .*: an embedded data directory is open in one process at a time`));
        expect(oneCleanLine(locked.stderr)).toBe(true);
      }
      if (tier === 'postgres') {
        // With a worker running (another process on the database), the renewal is applied and reported so.
        const until = DateTime.utc().plus({ hours: 5 }).startOf('second').toISO()!;
        expect(await cliJson(['update-lease', ids.a2, '--until', until, ...flags])).toEqual({ lease: ids.a2, expiresAt: DateTime.fromISO(until).toUTC().toISO(), applied: true });
        ids.renewedTo = until;
        const text = await cli(['update-lease', ids.a2, '--until', until, ...flags]);
        expect(text.stdout).toMatch(new RegExp(`^lease ${ids.a2} now expires at \\S+ \\(in 4 h\\)\n$`));
      }
      if (follow) {
        // Lines written by the worker, another process: seen by the follower's poll.
        await follow.waitFor(/Lease released by slipway-cli\.[\s\S]*Lease destroyed\./, 15_000);
        follow.proc.kill('SIGINT');
        expect((await follow.exited).code).toBe(0);
      }
      worker.proc.kill('SIGTERM');
      const exit = await worker.exited;
      expect(exit.code).toBe(0);
      expect(exit.stderr).toMatch(/SIGTERM: draining[\s\S]*slipway worker: stopped\n$/);

      const live = await cliJson<any[]>(['leases', ...flags]);
      expect(live.map((l) => l.id)).toEqual(expect.arrayContaining([ids.a2]));
      // The worker applied the renewal written before it started.
      expect(DateTime.fromISO(live.find((l) => l.id === ids.a2).expiresAt).toMillis()).toBe(DateTime.fromISO(ids.renewedTo!).toMillis());
      expect(live.map((l) => l.id)).not.toEqual(expect.arrayContaining([ids.a1]));
      const slow = await cliJson(['show', ids.slowResource, ...flags]);
      expect(slow.resource).toMatchObject({ status: 'destroyed', brokenReason: 'disk failed' });
      expect((await cliJson(['show', ids.slow, ...flags])).lease.status).toBe('destroyed');
      const logs = jsonLines((await cli(['logs', '--lease', ids.b, '--json', ...flags])).stdout);
      expect(logs.find((l) => l.type === 'lease.released')).toMatchObject({ data: { author: 'slipway-cli' }, message: 'Lease released by slipway-cli.' });
      expect(DateTime.fromISO(logs[0].at).isValid).toBe(true);
      const text = await cli(['logs', '--blueprint', 'slow', ...flags]);
      expect(text.stdout).toMatch(new RegExp(`\\d\\d:\\d\\d:\\d\\dZ ${ids.slowResource} +Resource broke: disk failed\\.`));
    }, 60_000);

    test('worker: a hook in flight finishes during the drain; a second signal stops at once', async () => {
      // Two leases waiting for the worker: a drain-host resource serves one lease at a time, so each gets its own build.
      const requester = await createBroker({ database: db.options, workers: false, blueprints: [fakeBlueprint({ name: 'drain', type: 'drain-host' })] });
      try {
        for (let i = 0; i < 2; i++) await requester.requestLease({ type: 'drain-host', ttl: { hours: 1 } });
      } finally {
        await requester.close();
      }

      const worker = start(['worker', '--json', ...withConfig()]);
      await worker.waitFor(/fixture: allocateResource of (res_\w+) started/);
      const resource = /allocateResource of (res_\w+)/.exec(worker.stderr)![1];
      worker.proc.kill('SIGTERM');
      const exit = await worker.exited;
      expect(exit.code).toBe(0);
      const events = jsonLines(exit.stdout);
      expect(events.find((e) => e.kind === 'resource' && e.id === resource)).toEqual({ at: expect.stringMatching(/Z$/), kind: 'resource', id: resource, from: null, to: 'pending' });
      const logs = jsonLines((await cli(['logs', '--resource', resource, '--json', ...flags])).stdout).map((l) => l.type);
      // The hook ran to its end within the grace, and its outcome was recorded.
      expect(exit.stderr).toContain(`fixture: allocateResource of ${resource} finished`);
      expect(logs).toContain('resource.allocated');

      const again = start(['worker', ...withConfig()]);
      const inFlight = /fixture: (allocate|activate)Resource of (res_\w+) started/;
      await again.waitFor(inFlight);
      const [, hook, of] = inFlight.exec(again.stderr)!;
      again.proc.kill('SIGTERM');
      await again.waitFor(/draining/);
      again.proc.kill('SIGTERM');
      const second = await again.exited;
      expect(second.code).toBe(143);
      expect(second.stderr).toMatch(/SIGTERM: stopping at once\n$/);
      // At once, not after the hook's 4 s: the hook in flight never wrote its end. (A bound on
      // the time, 2.5 s, failed on a loaded CI machine at 2.7 s, with the hook 4 s long.)
      expect(second.stderr).not.toContain(`fixture: ${hook}Resource of ${of} finished`);
    }, 60_000);

    test('stats: counts per blueprint and type, a transitional state held too long marked stuck', async () => {
      const stats = await cliJson(['stats', '--stuck-after', '500ms', ...flags]);
      expect(stats.blueprints.local).toMatchObject({ type: 'host', live: 1 });
      expect(stats.blueprints.drain).toMatchObject({ type: 'drain-host' });
      expect(stats.blueprints.drain.allocating).toBeGreaterThanOrEqual(1);
      expect(stats.types.host.leases.active).toBeGreaterThanOrEqual(1);
      // A drained build left a drain-host lease waiting and its resource pending: one of them is past 500 ms.
      expect(stats.stuck).toEqual(expect.arrayContaining([expect.stringMatching(/^(blueprint drain|type drain-host leases): pending for \d+ m?s$/)]));
      const text = await cli(['stats', '--stuck-after', '500ms', ...flags]);
      expect(text.stdout).toMatch(/^resources by blueprint\nBLUEPRINT +TYPE +LIVE +ACTIVE +ALLOCATING +DELETION LANE +DESTROYING +OLDEST +FAILURES\n/);
      expect(text.stdout).toMatch(/\ndrain +drain-host +\d+ +\d+ +[1-9] +0 +0 +/);
      expect(text.stdout).toMatch(/\nleases by type\nTYPE +ACTIVE +WAITING +LIVE +DELETION LANE +OLDEST\n/);
      expect(text.stdout).toMatch(/ pending \d+ m?s \(stuck\)/);
      expect(text.stdout).toMatch(/\nstuck longer than 500ms: (blueprint drain|type drain-host leases): pending for \d+ m?s/);
    });

    test('release-resource --all --blueprint, and gc of everything destroyed', async () => {
      // The drained builds left one or two drain resources (one is built at a time).
      const { released } = await cliJson(['release-resource', '--all', '--blueprint', 'drain', ...flags]);
      expect(released.length).toBeGreaterThanOrEqual(1);
      for (const id of released) expect(id).toMatch(/^res_/);
      const gc = await cliJson(['gc', '--older-than', '0s', ...flags]);
      expect(gc.leases).toBeGreaterThanOrEqual(4);
      expect(gc.resources).toBeGreaterThanOrEqual(1);
      expect(gc.logs).toBeGreaterThan(10);
      expect(await cliJson(['leases', '--status', 'destroyed', ...flags])).toEqual([]);
      expect((await cli(['gc', ...flags])).stdout).toMatch(/^deleted 0 leases, 0 resources, 0 logs, \d+ commands older than 7d\n$/);
    });
  });

  test('lease on a terminal: a spinner with status and time waited, the log lines above it; Ctrl-C releases the lease, which is destroyed', async () => {
    const pty = Running.onTerminal(['lease', '--type', 'slow-host', '--ttl', '5m', ...withConfig()], { ...env, NO_COLOR: '' });
    running.push(pty);
    await pty.waitFor(/holding it: Ctrl-C releases it/);
    pty.proc.stdin!.write('\x03');
    const exit = await pty.exited;
    expect(exit.code).toBe(0);
    const screen = exit.stdout;
    expect(screen).toMatch(/\r\x1b\[2K\x1b\[33m[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]\x1b\[39m lease lease_\w+ (requested|pending|acquired) · waited \ds/);
    // Each log line clears the spinner line, is printed, and the spinner is drawn again below it.
    expect(screen).toMatch(/\r\x1b\[2K\d\d:\d\d:\d\d Lease queued for type "slow-host" by [^\r\n]+\.\r?\n\r\x1b\[2K\x1b\[33m[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]/);
    expect(screen).toMatch(/\d\d:\d\d:\d\d Lease is active on resource res_\w+\./);
    const id = /lease (lease_\w+) is active/.exec(screen)![1];
    expect(screen).toMatch(new RegExp(`releasing lease ${id}[\\s\\S]*lease ${id} destroyed`));
    expect((await cliJson(['show', id, ...flags])).lease.status).toBe('destroyed');
  }, 60_000);

  test('lease on a terminal, Ctrl-C while it waits: the pending lease is released and destroyed, exit 130; NO_COLOR keeps a terminal plain', async () => {
    // full-host: its blueprint never has room, so the lease is still waiting when Ctrl-C comes.
    const pty = Running.onTerminal(['lease', '--type', 'full-host', '--ttl', '5m', ...withConfig()], { ...env, NO_COLOR: '1' });
    running.push(pty);
    await pty.waitFor(/Waiting for resources from full/);
    pty.proc.stdin!.write('\x03');
    const exit = await pty.exited;
    expect(exit.code).toBe(130);
    // The spinner is there (a terminal), its colour is not (NO_COLOR).
    expect(exit.stdout).toMatch(/\r\x1b\[2K[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] lease lease_\w+ /);
    expect(exit.stdout).not.toMatch(/\x1b\[\d+m/);
    const id = /lease (lease_\w+) (requested|pending)/.exec(exit.stdout)![1];
    expect(exit.stdout).toMatch(new RegExp(`releasing lease ${id}[\\s\\S]*lease ${id} destroyed`));
    const shown = await cliJson(['show', id, ...flags]);
    expect(shown.lease).toMatchObject({ status: 'destroyed', resourceId: null });
    expect(shown.timeline.map((s: { to: string }) => s.to)).toEqual(['released', 'destroyed']);
  }, 60_000);

  test('a corpus of bad invocations: each exits 2 (usage) or 1 (failure) with one line on stderr and no stack trace', async () => {
    const corpus = JSON.parse(readFileSync(join(repoRoot, 'test/fixtures/cli/bad-invocations.json'), 'utf8')) as {
      cases: Array<{ why: string; args: string[]; exit: number; stderr: string; opensDatabase: boolean }>;
    };
    expect(corpus.cases.length).toBeGreaterThanOrEqual(30);
    const missing = join(root, 'missing');
    const expand = (args: string[]) =>
      args.flatMap((a) =>
        a === '$DB'
          ? flags
          : [a.replace('$CONFIG', CONFIG).replace('$MISSING', missing).replace('$TS_CONFIG', join(repoRoot, 'test/fixtures/cli/slipway.config.ts')).replace('$NO_BLUEPRINTS', join(repoRoot, 'test/fixtures/cli/no-blueprints.config.js'))],
      );
    const check = async (c: (typeof corpus.cases)[number]) => {
      const result = await cli(expand(c.args), { env });
      return { why: c.why, code: result.code, oneLine: oneCleanLine(result.stderr), matches: new RegExp(c.stderr).test(result.stderr) ? true : result.stderr, stdout: result.stdout };
    };
    const expected = (c: (typeof corpus.cases)[number]) => ({ why: c.why, code: c.exit, oneLine: true, matches: true, stdout: '' });
    // Those that do not open the database run four at a time; the others one by one (a data directory has one opener).
    const quick = corpus.cases.filter((c) => !c.opensDatabase);
    for (let i = 0; i < quick.length; i += 4) {
      const batch = quick.slice(i, i + 4);
      expect(await Promise.all(batch.map(check))).toEqual(batch.map(expected));
    }
    for (const c of corpus.cases.filter((c) => c.opensDatabase)) expect(await check(c)).toEqual(expected(c));

    const debug = await cli(['show', 'nope', '--debug', ...flags]);
    expect(debug.code).toBe(1);
    expect(debug.stderr).toMatch(/^slipway: no lease or resource has the id nope\nCliFailure: no lease or resource has the id nope\n\s+at /);
    // 55 runs of the bin, 10 of them opening the database one after the other: minutes on a loaded 2-core machine.
  }, 300_000);

  test('dashboard: prints its URL, serves the pools page (to the token, when one is set), and stops cleanly on SIGINT', async () => {
    const token = 'cli-dashboard-token-0123456789';
    const URL_LINE = /^(http:\/\/127\.0\.0\.1:\d+\/)$/m;
    const open = start(['dashboard', '--port', '0', ...withConfig()]);
    await open.waitFor(URL_LINE);
    const second = start(['dashboard', '--port', '0', ...withConfig()]);
    let served = open;
    let headers: Record<string, string> = {};
    if (tier === 'embedded') {
      // One opener per data directory: the second dashboard says who holds it.
      const refused = await second.exited;
      expect([refused.code, refused.stderr]).toEqual([1, expect.stringMatching(/is in use by process \d+/)]);
    } else {
      second.kill();
      const guarded = Running.bin(['dashboard', '--port', '0', ...withConfig()], { ...env, SLIPWAY_DASHBOARD_TOKEN: token });
      running.push(guarded);
      await guarded.waitFor(URL_LINE);
      const url = URL_LINE.exec(guarded.stdout)![1]!;
      expect((await fetch(url, { redirect: 'manual' })).status).toBe(303);
      served = guarded;
      headers = { authorization: `Bearer ${token}` };
    }
    const url = URL_LINE.exec(served.stdout)![1]!;
    const page = await fetch(url, { headers });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('<h2>Resources by blueprint</h2>');
    // The config's blueprints: their limits are known here.
    expect(html).toMatch(/data-blueprint="local"[\s\S]*?\d+ at once/);
    expect((await fetch(`${url}leases`, { headers })).status).toBe(200);
    for (const r of served === open ? [open] : [served, open]) {
      r.proc.kill('SIGINT');
      const exit = await r.exited;
      expect([exit.code, exit.stderr]).toEqual([0, expect.stringMatching(/SIGINT: stopping\nslipway dashboard: stopped\n$/)]);
    }
  }, 120_000);

  test('authorizations, authorize, decline: an operator sees the requests of waiting leases and decides; the waiting lease goes on', async () => {
    const gated = () => fakeBlueprint({ name: 'gated', type: 'gated-host', requireAuthorization: true });
    // A broker of the test's own records two leases, which its allocator finds unauthorized; it closes (one opener per data directory).
    const requester = await createBroker({ database: db.options, blueprints: [gated()] });
    const [waiting, refused] = [await requester.requestLease({ type: 'gated-host', owner: 'build/5' }), await requester.requestLease({ type: 'gated-host', owner: 'intruder' })];
    const deadline = Date.now() + 20_000;
    while ((await requester.authorizations.list({ state: 'requested' })).length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await requester.close();

    expect(await cliJson(['authorizations', '--state', 'requested', ...flags])).toEqual([
      { blueprint: 'gated', owner: 'build/5', state: 'requested', createdAt: expect.stringMatching(/Z$/), changedAt: expect.stringMatching(/Z$/), changedBy: null },
      { blueprint: 'gated', owner: 'intruder', state: 'requested', createdAt: expect.stringMatching(/Z$/), changedAt: expect.stringMatching(/Z$/), changedBy: null },
    ]);
    const stats = await cliJson(['stats', ...flags]);
    expect(stats.types['gated-host']).toMatchObject({ waiting: 2, waitingForAuthorization: 2 });
    expect((await cli(['stats', ...flags])).stdout).toMatch(/\ngated-host +0 +2 \(2 for authorization\) /);

    expect(await cli(['authorize', 'gated', 'build/*', '--author', 'ops', ...flags])).toMatchObject({ code: 0, stdout: 'owner build/* authorized on blueprint gated\n', stderr: '' });
    expect(await cli(['authorize', 'gated', 'build/*', ...flags])).toMatchObject({ code: 0, stdout: 'owner build/* was already authorized on blueprint gated\n' });
    expect(await cliJson(['deauthorize', 'gated', 'intruder', '--author', 'ops', ...flags])).toMatchObject({ blueprint: 'gated', owner: 'intruder', state: 'declined', changedBy: 'ops' });
    const text = await cli(['authorizations', '--blueprint', 'gated', '--owner', 'build/5', ...flags]);
    expect(text.stdout).toMatch(/^BLUEPRINT +OWNER +STATE +CHANGED +BY\ngated +build\/\* +authorized +\d+ m?s ago +ops\ngated +build\/5 +requested +.* -\n$/);

    // A worker carries out what was decided while none ran: the authorized lease becomes active, the declined one breaks.
    const worker = await createBroker({ database: db.options, blueprints: [gated()] });
    try {
      const lease = await (await worker.requestLease({ type: 'gated-host', owner: 'build/6' })).whenActive({ timeout: { seconds: 20 } });
      await lease.release();
      const deadline = Date.now() + 20_000;
      while ((await worker.leases.get(waiting.id))!.status !== 'active' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect((await worker.leases.get(waiting.id))!.status).toBe('active');
      while ((await worker.leases.get(refused.id))!.status !== 'destroyed' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(await worker.leases.get(refused.id)).toMatchObject({ status: 'destroyed', brokenReason: 'owner intruder is declined on blueprint gated' });
      await worker.release(waiting.id);
    } finally {
      await worker.close();
    }
  }, 60_000);

  test('drain and resume: an operator drains a blueprint; a worker broker releases its idle resource and serves no lease until resume', async () => {
    const hosts = () => fakeBlueprint({ name: 'hosts', type: 'host', exclusive: true });
    // One resource, idle, recorded by a broker of the test's own (closed: one opener per data directory).
    const builder = await createBroker({ database: db.options, blueprints: [hosts()] });
    const built = await builder.acquire({ type: 'host' });
    await built.release();
    await builder.close();

    expect(await cli(['drain', 'hsots', ...flags])).toMatchObject({ code: 1, stdout: '', stderr: expect.stringMatching(/^slipway: no resource of blueprint "hsots" was ever recorded in this database: check the name, or give --force/) });
    expect(await cli(['drain', 'hosts', '--author', 'ops', ...flags])).toMatchObject({
      code: 0,
      stderr: '',
      stdout: 'blueprint hosts is draining: it serves no new lease; 1 idle resource will be released now, leased ones when their leases end (slipway stats shows what is left)\n',
    });
    expect(await cli(['drain', 'hosts', ...flags])).toMatchObject({ code: 0, stdout: 'blueprint hosts was already draining\n' });
    expect((await cliJson(['stats', ...flags])).blueprints.hosts).toMatchObject({ draining: true });
    expect((await cli(['stats', ...flags])).stdout).toMatch(/\nhosts \(draining\) +host /);

    // A worker carries it out: the idle resource goes, a new lease waits.
    const worker = await createBroker({ database: db.options, blueprints: [hosts()] });
    try {
      const deadline = Date.now() + 20_000;
      while ((await worker.resources.get(built.resource.id))!.status !== 'destroyed' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect((await worker.resources.get(built.resource.id))!.status).toBe('destroyed');
      const waiting = await worker.requestLease({ type: 'host' });
      await new Promise((r) => setTimeout(r, 300));
      expect(await waiting.status()).toBe('pending');
      await worker.close();
      expect(await cliJson(['resume', 'hosts', '--author', 'ops', ...flags])).toEqual({ blueprint: 'hosts', draining: false, changed: true, idleResources: [] });
      const again = await createBroker({ database: db.options, blueprints: [hosts()] });
      try {
        const lease = await again.leases.get(waiting.id);
        expect(lease?.status).not.toBe('destroyed');
        const deadline2 = Date.now() + 20_000;
        while ((await again.leases.get(waiting.id))!.status !== 'active' && Date.now() < deadline2) await new Promise((r) => setTimeout(r, 20));
        expect((await again.leases.get(waiting.id))!.status).toBe('active');
        await again.release(waiting.id);
      } finally {
        await again.close();
      }
    } finally {
      await worker.close();
    }
  }, 90_000);
});
