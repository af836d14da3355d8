import { writeFileSync } from 'node:fs';
import { startPostgres } from './test/helpers/postgres.js';
const pg = await startPostgres({ own: true });
writeFileSync('/tmp/session/url', pg.url);
process.on('SIGTERM', async () => { await pg.stop(); process.exit(0); });
setInterval(() => undefined, 1000);
