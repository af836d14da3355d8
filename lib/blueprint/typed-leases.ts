import type { JsonObject, LeaseSpec } from '../model/spec.js';
import type { Lease } from '../model/lease.js';
import type { Blueprint } from './contract.js';

/*
 * The types that carry a blueprint's declared attributes to the lease `acquire()` returns.
 * They live with the plugin contract, above the model: the model knows a blueprint only
 * by name and type (`BlueprintRef`).
 */

/** The lease attributes a blueprint declares (the third type parameter of `defineBlueprint`); of a union of blueprints, the union. */
export type LeaseAttributesOf<B> = B extends Blueprint<any, any, infer LeaseAttrs> ? LeaseAttrs : never;

/** The resource attributes a blueprint declares (the second type parameter of `defineBlueprint`); of a union of blueprints, the union. */
export type ResourceAttributesOf<B> = B extends Blueprint<any, infer ResourceAttrs, any> ? ResourceAttrs : never;

/**
 * A lease spec whose `blueprints` are blueprint objects (no names): the lease can only
 * come from one of them, so `acquire()` types its attributes with theirs.
 */
export type TypedLeaseSpec<LeaseAttrs extends JsonObject, B extends Blueprint<any, any, any>> = Omit<LeaseSpec<LeaseAttrs>, 'blueprints'> & {
  blueprints: readonly B[];
};

/** The requested attributes of a typed spec that gives none: only the blueprint's then, so a misspelt name is a compile error. */
export type NoAttributes = Record<never, never>;

/** The lease a `TypedLeaseSpec` resolves to: the requested attributes and those the blueprint adds, and its resource's attributes. */
export type LeaseOf<B extends Blueprint<any, any, any>, LeaseAttrs extends JsonObject = NoAttributes> = Lease<LeaseAttrs & LeaseAttributesOf<B>, ResourceAttributesOf<B>>;
