import { DataSource, EntitySchema, type EntitySchemaColumnOptions, type MigrationInterface, type QueryRunner } from 'typeorm';
import { createBroker, ValidationError } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { openDatabase } from '../lib/store/open.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { slipwayEntities, slipwayMigrations, type LeaseRow } from '../lib/typeorm.js';
import { guardBrokers, track } from './helpers/broker.js';
import { freshSchema, tier, tierUrl } from './helpers/tier.js';

guardBrokers();

/** information_schema's name of each column type the entities use. */
const SQL_TYPE: Record<string, string> = {
  text: 'text',
  integer: 'integer',
  bigint: 'bigint',
  timestamptz: 'timestamp with time zone',
  boolean: 'boolean',
  jsonb: 'jsonb',
};

test('the entities hold every column of every table the migrations make, with its type and nullability', async () => {
  const schema = freshSchema('entities');
  const db = await openDatabase(tierUrl ? { url: tierUrl, schema, poolSize: 1 } : { embedded: true, schema });
  try {
    const columns = await db.query<{ table_name: string; column_name: string; data_type: string; udt_name: string; is_nullable: string }>(
      `SELECT table_name, column_name, data_type, udt_name, is_nullable FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
      [schema],
    );
    const entities = Object.values(slipwayEntities({ schema }));
    const fromSchema = columns.map((c) => `${c.table_name}.${c.column_name} ${c.data_type === 'ARRAY' ? `${c.udt_name.slice(1)}[]` : c.data_type}${c.is_nullable === 'YES' ? ' null' : ''}`);
    const fromEntities = entities.flatMap((e) =>
      (Object.values(e.options.columns) as EntitySchemaColumnOptions[]).map((c) => `${e.options.tableName}.${c.name} ${SQL_TYPE[c.type as string] ?? c.type}${c.array ? '[]' : ''}${c.nullable ? ' null' : ''}`),
    );
    expect(fromEntities.sort()).toEqual(fromSchema.sort());
    expect(new Set(entities.map((e) => e.options.schema))).toEqual(new Set([schema]));
  } finally {
    await db.close();
  }
}, 60_000);

test('slipwayEntities gives the same objects for a schema name, and names the entities of other schemas apart', () => {
  expect(slipwayEntities({ schema: 'a_one' })).toBe(slipwayEntities({ schema: 'a_one' }));
  expect(slipwayEntities().Lease.options.name).toBe('SlipwayLease');
  expect(slipwayEntities({ schema: 'a_one' }).Lease.options.name).not.toBe(slipwayEntities({ schema: 'a_two' }).Lease.options.name);
});

test('slipwayMigrations: one class per migration, named with a 13-digit timestamp that orders them', () => {
  const names = slipwayMigrations().map((M) => new M().name!);
  expect(names.length).toBeGreaterThan(0);
  for (const name of names) expect(name).toMatch(/^[A-Za-z0-9_]+\d{13}$/);
  const stamps = names.map((n) => Number(n.slice(-13)));
  expect([...stamps].sort((a, b) => a - b)).toEqual(stamps);
  expect(slipwayMigrations().map((M) => new M().name)).toEqual(names);
});

test('database.dataSource must be an initialized PostgreSQL DataSource', async () => {
  const refused = async (dataSource: unknown) => {
    const error = await createBroker({ database: { dataSource } as never }).then(
      (b) => b.close().then(() => null),
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('database.dataSource');
    return (error as Error).message;
  };
  expect(await refused({})).toMatch(/TypeORM DataSource/);
  expect(await refused(new DataSource({ type: 'postgres', url: 'postgres://nobody@127.0.0.1:1/none' }))).toMatch(/initialized/);
  expect(await refused({ options: { type: 'mysql' }, isInitialized: true, createQueryRunner() {} })).toMatch(/PostgreSQL/);
  await expect(createBroker({ database: { dataSource: {} as DataSource, url: 'postgres://x/y' } as never })).rejects.toThrow(ValidationError);
});

interface Note {
  id: number;
  leaseId: string;
  text: string;
}

const onPostgres = tier === 'postgres' ? describe : describe.skip;
if (tier !== 'postgres') {
  // eslint-disable-next-line no-console
  console.info("typeorm.test.ts: the app's own DataSource needs a Postgres server; that part runs on the postgres tier only");
}

onPostgres("an app's own TypeORM DataSource", () => {
  test('runs its migrations with slipwayMigrations, shares the DataSource with the broker, reads leases through its repository, and keeps it after close', async () => {
    const schema = freshSchema('app');
    const appSchema = `${schema}_app`.slice(0, 63);
    const Note = new EntitySchema<Note>({
      name: `Note_${schema}`,
      schema: appSchema,
      tableName: 'notes',
      columns: { id: { type: 'integer', primary: true, generated: true }, leaseId: { name: 'lease_id', type: 'text' }, text: { type: 'text' } },
    });
    class CreateNotes1690000000000 implements MigrationInterface {
      name = 'CreateNotes1690000000000';
      async up(runner: QueryRunner) {
        await runner.query(`CREATE SCHEMA "${appSchema}"`);
        await runner.query(`CREATE TABLE "${appSchema}".notes (id serial PRIMARY KEY, lease_id text NOT NULL, text text NOT NULL)`);
      }
      async down(runner: QueryRunner) {
        await runner.query(`DROP SCHEMA "${appSchema}" CASCADE`);
      }
    }
    const slipway = slipwayEntities({ schema });
    const dataSource = new DataSource({
      type: 'postgres',
      url: tierUrl!,
      entities: [Note, ...Object.values(slipway)],
      migrations: [CreateNotes1690000000000, ...slipwayMigrations({ schema })],
      migrationsTableName: `typeorm_migrations_${schema}`.slice(0, 63),
      migrationsTransactionMode: 'each',
      poolSize: 4,
    });
    await dataSource.initialize();
    try {
      const ran = await dataSource.runMigrations();
      expect(ran.map((m) => m.name)).toEqual(['CreateNotes1690000000000', ...slipwayMigrations({ schema }).map((M) => new M().name)]);
      // slipway's ledger agrees: every migration is recorded there, by the same code as migrate: true.
      const ledger = await dataSource.getRepository(slipway.Migration).find({ order: { id: 'ASC' } });
      expect(ledger.map((m) => m.id)).toEqual(slipwayMigrations({ schema }).map((_, i) => i + 1));
      // TypeORM's table agrees too: running again does nothing.
      expect(await dataSource.runMigrations()).toEqual([]);

      const broker = track(await createBroker({ database: { dataSource, schema, migrate: false }, blueprints: [fakeBlueprint({ name: 'box' })] }));
      expect(internals.get(broker)!.db.dataSource).toBe(dataSource);
      const lease = await broker.acquire({ type: 'fake', owner: 'app' });
      await dataSource.getRepository(Note).save({ leaseId: lease.id, text: 'a note beside the lease' });

      const leases = dataSource.getRepository<LeaseRow>(slipway.Lease);
      const row = await leases.findOneByOrFail({ id: lease.id });
      expect(row).toMatchObject({ id: lease.id, type: 'fake', status: 'active', owner: 'app' });
      expect(row.createdAt).toBeInstanceOf(Date);
      const joined = await dataSource
        .createQueryBuilder()
        .select('n.text', 'text')
        .addSelect('l.status', 'status')
        .from(Note, 'n')
        .innerJoin(slipway.Lease.options.name, 'l', 'l.id = n.lease_id')
        .getRawMany();
      expect(joined).toEqual([{ text: 'a note beside the lease', status: 'active' }]);

      await lease.release();
      await broker.close();
      expect(dataSource.isInitialized).toBe(true);
      expect(await dataSource.getRepository(Note).count()).toBe(1);
      expect(['released', 'destroyed']).toContain((await leases.findOneByOrFail({ id: lease.id })).status);

      // A later broker with migrate: true finds nothing to do on the ledger the classes wrote.
      const again = track(await createBroker({ database: { dataSource, schema }, blueprints: [fakeBlueprint({ name: 'box' })] }));
      await again.close();
      expect(await dataSource.getRepository(slipway.Migration).count()).toBe(ledger.length);
      expect(dataSource.isInitialized).toBe(true);
    } finally {
      await dataSource.query(`DROP SCHEMA IF EXISTS "${appSchema}" CASCADE`).catch(() => undefined);
      await dataSource.query(`DROP TABLE IF EXISTS "typeorm_migrations_${schema}"`.slice(0, 200)).catch(() => undefined);
      await dataSource.destroy();
    }
  }, 120_000);
});
