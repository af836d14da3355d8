export { createBroker, internals } from './create-broker.js';
export type { BrokerOptions } from './options.js';
export type { Broker, BrokerStats, BlueprintStats, TypeStats, PageQuery, LeaseQuery, ResourceQuery, AuthorizationQuery, DrainResult } from './types.js';
export { ANY_HINT } from './events.js';
