/** @type {import('jest').Config} */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: {
    '^(\\.{1,2}/.*)\\.js$': '$1',
    // The examples import the package by name, as a user does (tsconfig.json `paths`, for jest).
    '^slipway$': '<rootDir>/lib/index.ts',
    '^slipway/blueprints$': '<rootDir>/blueprints/index.ts',
    '^slipway/testing$': '<rootDir>/lib/testing/index.ts',
    '^slipway/typeorm$': '<rootDir>/lib/typeorm.ts',
    '^slipway/metrics$': '<rootDir>/lib/metrics.ts',
    '^slipway/tracing$': '<rootDir>/lib/tracing.ts',
    '^slipway/dashboard$': '<rootDir>/lib/dashboard/index.ts',
  },
  transform: { '^.+\\.ts$': ['ts-jest', { useESM: true }] },
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  testTimeout: 60000,
};
