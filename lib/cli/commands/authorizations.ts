import { hostname, userInfo } from 'node:os';
import type { Command } from 'commander';
import { DateTime } from 'luxon';
import type { AuthorizationRecord } from '../../index.js';
import type { ConnectionFlags } from '../connection.js';
import { UsageError } from '../errors.js';
import { json, relativeTime, table, type Paint } from '../format.js';
import type { Io } from '../io.js';
import { subcommand, withBroker, type JsonFlag } from './shared.js';

// Written out for --help, which answers without loading the library; test/cli.test.ts checks it against it.
const STATE_HELP = 'requested, authorized, declined';

/** Green when authorized, red when declined, yellow while requested. */
function stateText(state: string, p: Paint): string {
  if (state === 'authorized') return p.green(state);
  if (state === 'declined') return p.red(state);
  return p.yellow(state);
}

type AuthorFlag = { author?: string };

export function registerAuthorizations(program: Command, io: Io): void {
  subcommand(program, 'authorizations', 'list the authorizations of blueprints that serve only authorized owners (requested ones await a decision)', [
    "slipway authorizations --state requested --database $URL",
    "slipway authorizations --blueprint ci-hosts --owner build/42 --database $URL",
  ])
    .option('--blueprint <name>', 'only this blueprint')
    .option('--owner <owner>', 'only the rows that cover this owner (its own and the prefixes it starts with), the deciding one first')
    .option('--state <state>', `only this state (${STATE_HELP})`)
    .action(async (flags: ConnectionFlags & JsonFlag & { blueprint?: string; owner?: string; state?: string }) => {
      if (flags.state !== undefined && !STATE_HELP.split(', ').includes(flags.state)) throw new UsageError(`--state: ${JSON.stringify(flags.state)} is not a state (known: ${STATE_HELP})`);
      const rows = await withBroker(flags, (broker) => broker.authorizations.list({ blueprint: flags.blueprint, owner: flags.owner, state: flags.state as AuthorizationRecord['state'] | undefined }));
      if (flags.json) return io.out(json(rows));
      if (rows.length === 0) return io.out('no authorizations');
      const now = DateTime.utc();
      const p = io.paint;
      io.out(
        table(
          ['BLUEPRINT', 'OWNER', 'STATE', 'CHANGED', 'BY'],
          rows.map((a) => [a.blueprint, a.owner, stateText(a.state, p), relativeTime(a.changedAt, now), a.changedBy ?? '-']),
          p,
        ),
      );
    });

  const decision = (name: string, state: 'authorized' | 'declined', description: string, example: string) =>
    subcommand(program, name, description, [example])
      .argument('<blueprint>', 'blueprint name')
      .argument('<owner>', 'an owner, or a prefix ending in /* such as "build/*"')
      .option('--author <name>', 'who decides, for the log (default: user@host)')
      .action(async (blueprint: string, owner: string, flags: ConnectionFlags & JsonFlag & AuthorFlag) => {
        const author = flags.author ?? `${userInfo().username}@${hostname()}`;
        const { before, after } = await withBroker(flags, async (broker) => {
          const covering = await broker.authorizations.list({ blueprint, owner });
          const row = state === 'authorized' ? await broker.authorizations.authorize(blueprint, owner, { author }) : await broker.authorizations.decline(blueprint, owner, { author });
          return { before: covering.find((a) => a.owner === owner)?.state ?? null, after: row };
        });
        if (flags.json) return io.out(json(after));
        const verb = state === 'authorized' ? 'authorized' : 'declined';
        io.out(before === state ? `owner ${owner} was already ${verb} on blueprint ${blueprint}` : `owner ${owner} ${verb} on blueprint ${blueprint}${before ? ` (was ${before})` : ''}`);
      });

  decision('authorize', 'authorized', 'let an owner (or every owner of a prefix) use a blueprint that requires authorization; its waiting leases go on at once', "slipway authorize ci-hosts 'build/*' --database $URL");
  decision(
    'decline',
    'declined',
    'refuse an owner (or a prefix) on a blueprint: its waiting leases break if no other blueprint may serve them; active leases stay (release-lease --owner ends them)',
    'slipway decline ci-hosts build/42 --database $URL',
  ).alias('deauthorize');
}
