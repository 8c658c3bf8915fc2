// Stands in for the `debug` package in the bundle and the executable (scripts/bundle-options.mjs).
// mqtt-packet calls its debug loggers several times per MQTT packet, each call asking whether
// DEBUG enables it, a visible share of the broker's CPU under QoS 1 load (BENCHMARKS.md, "Design decisions"). telemetryd
// logs through pino, so these loggers are never switched on: each is a no-op.
'use strict';
function createDebug(namespace) {
  const log = () => {};
  log.namespace = String(namespace ?? '');
  log.enabled = false;
  log.log = () => {};
  log.extend = (sub) => createDebug(`${log.namespace}:${sub}`);
  log.destroy = () => true;
  return log;
}
createDebug.enable = () => {};
createDebug.disable = () => '';
createDebug.enabled = () => false;
createDebug.formatters = {};
createDebug.debug = createDebug;
createDebug.default = createDebug;
module.exports = createDebug;
