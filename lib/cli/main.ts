#!/usr/bin/env node
/** The `slipway` bin. */
import { main } from './program.js';

process.exitCode = await main(process.argv.slice(2));
// Exit now: a pool or timer the library left would otherwise keep a finished command alive.
process.exit();
