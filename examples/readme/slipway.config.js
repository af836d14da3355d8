// slipway.config.js: the blueprints that `slipway worker` and `slipway lease` run.
import { localHosts } from 'slipway/blueprints';

export default {
  blueprints: [localHosts({ name: 'local', config: { slots: 2 } })],
  closeGrace: { seconds: 30 }, // any createBroker option but `database`, which the flags give
};
