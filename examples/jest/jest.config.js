// Run with: NODE_OPTIONS=--experimental-vm-modules npx jest (slipway is ESM only)
/** @type {import('jest').Config} */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true }] },
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' }, // './ci-job.js' in TypeScript is ./ci-job.ts
  testTimeout: 30_000, // an embedded database takes seconds to start on a busy machine
};
