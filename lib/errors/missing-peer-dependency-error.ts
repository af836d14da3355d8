import { SlipwayError } from './slipway-error.js';

/**
 * An optional part of slipway was used without the package it builds on (`slipway/metrics`
 * without `prom-client`). slipway declares such packages as optional peer dependencies, so
 * that an application that never uses the part does not install them.
 */
export class MissingPeerDependencyError extends SlipwayError {
  /** The package to install. */
  readonly packageName: string;
  constructor(packageName: string, usedBy: string, range: string, cause?: unknown) {
    super('MISSING_PEER_DEPENDENCY', `${usedBy} needs the package ${packageName} (${range}), which is not installed: npm install ${packageName}`, { cause });
    this.packageName = packageName;
  }
}
