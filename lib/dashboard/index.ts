/**
 * `slipway/dashboard`: a live web view of one broker's pools, leases and resources, with
 * release, reclaim and break buttons. `createDashboard` returns a plain Node request
 * handler: mount it in `node:http`, express or fastify. See the README, "Dashboard".
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { internals, type Broker } from '../broker/index.js';
import { ValidationError } from '../errors/validation-error.js';
import { Auth } from './auth.js';
import { LiveUpdates } from './live.js';
import { checkDashboardOptions, type DashboardOptions } from './options.js';
import { Router } from './router.js';

export type { DashboardOptions } from './options.js';

/**
 * A request handler, `(req, res, next?)`. Requests outside `basePath` go to `next` when
 * given (express), else get 404. Close it (or `await using`) to end the pages' live
 * streams and stop listening to the broker; closing the broker is the caller's business.
 */
export interface Dashboard extends AsyncDisposable {
  (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): void;
  /** Ends every open event stream and stops listening; later requests get 503. Calling it again does nothing. */
  close(): Promise<void>;
}

/**
 * A dashboard of `broker`. Without `token` the pages are open to whoever reaches them and
 * there are no buttons; with it every page and every write needs it (bearer or a session
 * from the login form), and writes also need a CSRF token and a same-origin request.
 */
export function createDashboard(broker: Broker, options: DashboardOptions = {}): Dashboard {
  const inner = internals.get(broker);
  if (!inner) throw new ValidationError('broker', 'is not a broker returned by createBroker()');
  const settings = checkDashboardOptions(options);
  const live = new LiveUpdates(broker, settings.sweepInterval.toMillis());
  const router = new Router(broker, inner.runtime.blueprints, settings, new Auth(settings.token), live);
  const handler = ((req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void) => {
    router.handle(req, res, next).catch(() => {
      // A bug of the router: answer, never leave the request hanging.
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8', 'x-content-type-options': 'nosniff' });
      res.end('internal error of the dashboard');
    });
  }) as Dashboard;
  handler.close = async () => {
    router.closed = true;
    live.close();
  };
  handler[Symbol.asyncDispose] = () => handler.close();
  return handler;
}
