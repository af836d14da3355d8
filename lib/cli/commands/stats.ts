import type { Command } from 'commander';
import type { ConnectionFlags } from '../connection.js';
import { parseCliDuration } from '../durations.js';
import { durationText, json, table, type Paint } from '../format.js';
import type { Io } from '../io.js';
import { subcommand, withBroker, type JsonFlag } from './shared.js';

/** "pending 3 min, released 2 h!" with the ages past the threshold marked (red on a terminal). */
function oldest(ages: Partial<Record<string, number>>, stuckMs: number, p: Paint, stuck: string[], label: string): string {
  const parts = Object.entries(ages)
    .filter((entry): entry is [string, number] => typeof entry[1] === 'number')
    .map(([state, ms]) => {
      const text = `${state} ${durationText(ms)}`;
      if (ms < stuckMs) return text;
      stuck.push(`${label} ${state} for ${durationText(ms)}`);
      return p.red(`${text} (stuck)`);
    });
  return parts.join(', ') || '-';
}

export function registerStats(program: Command, io: Io): void {
  subcommand(program, 'stats', 'counts per blueprint and per type, with the oldest age in each transitional state; stuck ones are marked', [
    'slipway stats --stuck-after 15m --database $URL',
  ])
    .option('--stuck-after <duration>', 'an object in a transitional state longer than this is marked stuck', '10m')
    .action(async (flags: ConnectionFlags & JsonFlag & { stuckAfter: string }) => {
      const stuckMs = parseCliDuration(flags.stuckAfter, '--stuck-after').toMillis();
      const stats = await withBroker(flags, (broker) => broker.stats());
      const p = io.paint;
      const stuck: string[] = [];
      const blueprintRows = Object.entries(stats.blueprints).map(([name, b]) => [
        b.draining ? `${name} ${p.yellow('(draining)')}` : name,
        b.type,
        String(b.live),
        String(b.resources.active),
        String(b.allocating),
        String(b.deletionLane),
        String(b.destroying),
        oldest(b.oldestAgeMs, stuckMs, p, stuck, `blueprint ${name}:`),
        b.failures ? p.red(`${b.failures.streak} in a row: ${b.failures.lastError}`) : '-',
      ]);
      const typeRows = Object.entries(stats.types).map(([type, t]) => [
        type,
        String(t.leases.active),
        t.waitingForAuthorization ? `${t.waiting} (${t.waitingForAuthorization} for authorization)` : String(t.waiting),
        String(t.live),
        String(t.deletionLane),
        oldest(t.oldestAgeMs, stuckMs, p, stuck, `type ${type} leases:`),
      ]);
      if (flags.json) return io.out(json({ ...stats, stuck }));
      io.out(
        [
          p.bold('resources by blueprint'),
          blueprintRows.length ? table(['BLUEPRINT', 'TYPE', 'LIVE', 'ACTIVE', 'ALLOCATING', 'DELETION LANE', 'DESTROYING', 'OLDEST', 'FAILURES'], blueprintRows, p) : 'none',
          '',
          p.bold('leases by type'),
          typeRows.length ? table(['TYPE', 'ACTIVE', 'WAITING', 'LIVE', 'DELETION LANE', 'OLDEST'], typeRows, p) : 'none',
          ...(stuck.length ? ['', p.red(`stuck longer than ${flags.stuckAfter}: ${stuck.join('; ')}`)] : []),
        ].join('\n'),
      );
    });
}
