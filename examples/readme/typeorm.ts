import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';
import { slipwayEntities, slipwayMigrations } from 'slipway/typeorm';
import { DataSource } from 'typeorm';

const slipway = slipwayEntities({ schema: 'slipway' });
const dataSource = new DataSource({
  type: 'postgres',
  url: process.env.SLIPWAY_DATABASE_URL!,
  entities: [...Object.values(slipway)],             // beside the app's own entities
  migrations: [...slipwayMigrations({ schema: 'slipway' })], // beside the app's own migrations
  migrationsTableName: 'typeorm_migrations', // not `migrations`: slipway's ledger has that name
});
await dataSource.initialize();
await dataSource.runMigrations();

{
  await using broker = await createBroker({
    database: { dataSource, schema: 'slipway', migrate: false }, // shares the app's pool
    blueprints: [localHosts({ name: 'ci-hosts', config: { slots: 2 } })],
  });
  await using lease = await broker.acquire({ type: 'host' });
  const row = await dataSource.getRepository(slipway.Lease).findOneByOrFail({ id: lease.id });
  console.log(row.status, row.resourceId);
}
// The broker is closed; the DataSource is still the app's, and still open.
await dataSource.destroy();
