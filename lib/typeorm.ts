/**
 * `slipway/typeorm`: slipway's tables and migrations for an app that uses TypeORM. Give
 * the broker the app's DataSource with `createBroker({ database: { dataSource } })`.
 */
export { slipwayEntities } from './store/entities.js';
export type {
  AuthorizationRow,
  BlueprintFailureRow,
  BlueprintStateRow,
  CommandRow,
  LeaseRow,
  LogRow,
  MigrationRow,
  ResourceRow,
  SlipwayEntities,
  SlotLockRow,
  WorkItemRow,
} from './store/entities.js';
export { slipwayMigrations } from './store/typeorm-migrations.js';
