export { createBroker, internals } from './create-broker.js';
export type { BrokerOptions } from './options.js';
export type { Broker, BrokerStats, BlueprintStats, TypeStats, LeaseQuery, ResourceQuery, AuthorizationQuery } from './types.js';
