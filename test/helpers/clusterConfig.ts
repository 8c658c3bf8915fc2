/**
 * The haproxy configuration of a cluster, generated for the end-to-end tests
 * (test/helpers/cluster.ts), for `npm run bench -- --cluster N`, and shown in docs/cluster.md
 * (test/cluster/haproxyExample.test.ts keeps the three the same). Plain data in, text out: the
 * benchmark bundles it without the rest of the test helpers.
 */

/** Ports of one node as haproxy reaches them. */
export interface NodePorts {
  /** Where haproxy reaches the node; 127.0.0.1 when left out (every node on this machine). */
  host?: string;
  http: number;
  /** Plain MQTT listener (`--mqtt-plain-port`), behind the `mqtt_plain_in` frontend when there is one. */
  mqttPlain: number;
  /** MQTT over TLS (`--mqtt-port`), behind the `mqtt_in` frontend. */
  mqttTls: number;
}

export interface HaproxyConfigOptions {
  /** `bind` address of each frontend; without `mqttPlain`, no plain MQTT frontend. */
  bind: { http: string; mqttTls: string; mqttPlain?: string };
  nodes: NodePorts[];
  /** Health-check interval: `5s` in production, shorter in tests so a dead node shows quickly. */
  checkInterval: string;
}

/**
 * haproxy in front of N nodes: HTTP round robin with `/healthz` checks and X-Forwarded-For
 * (nodes run with --trust-proxy), MQTT over TLS and plain MQTT passed through as TCP with a
 * PROXY protocol v2 header (nodes run with --mqtt-proxy-protocol), balanced by least
 * connections since MQTT connections are long-lived.
 */
export function clusterHaproxyConfig(o: HaproxyConfigOptions): string {
  // Every backend is checked on the node's HTTP port: MQTT too, so a node that cannot write
  // (and so sends no PUBACK) takes no new devices.
  const servers = (port: (n: NodePorts) => number, extra: string) =>
    o.nodes.map(
      (n, i) =>
        `    server node${i + 1} ${n.host ?? '127.0.0.1'}:${port(n)} ${extra}check${port(n) === n.http ? '' : ` port ${n.http}`} inter ${o.checkInterval} fall 2 rise 2`,
    );
  // Up only while the node takes writes, into PostgreSQL: a node restarted without its
  // database URL would acknowledge readings into a SQLite file of its own.
  const healthCheck = ['    option httpchk GET /healthz', `    http-check expect rstring '"status":"ok".*"storage":"postgres"'`];
  return [
    'global',
    '    maxconn 4096',
    '',
    'defaults',
    '    timeout connect 5s',
    '    timeout client  60s',
    '    timeout server  60s',
    '',
    'frontend http_in',
    '    mode http',
    `    bind ${o.bind.http}`,
    '    option forwardfor',
    '    default_backend telemetryd_http',
    '',
    'backend telemetryd_http',
    '    mode http',
    '    balance roundrobin',
    ...healthCheck,
    // A request that found a dead node before its check did goes to another node once;
    // ingest is not idempotent, so only failed connections are retried, never sent requests.
    '    retries 2',
    '    option redispatch 1',
    ...servers((n) => n.http, ''),
    '',
    'frontend mqtt_in',
    '    mode tcp',
    `    bind ${o.bind.mqttTls}`,
    "    # Longer than the devices' MQTT keep-alive, or haproxy cuts idle connections.",
    '    timeout client 10m',
    '    default_backend telemetryd_mqtt',
    '',
    'backend telemetryd_mqtt',
    '    mode tcp',
    '    balance leastconn',
    '    timeout server 10m',
    // A dead node has the fewest connections, so leastconn sends every new device to it
    // until its check fails: a connection refused there is tried on another node.
    '    retries 2',
    '    option redispatch 1',
    ...healthCheck,
    ...servers((n) => n.mqttTls, 'send-proxy-v2 '),
    '',
    ...(o.bind.mqttPlain === undefined
      ? []
      : [
          'frontend mqtt_plain_in',
          '    mode tcp',
          `    bind ${o.bind.mqttPlain}`,
          '    timeout client 10m',
          '    default_backend telemetryd_mqtt_plain',
          '',
          'backend telemetryd_mqtt_plain',
          '    mode tcp',
          '    balance leastconn',
          '    timeout server 10m',
          '    retries 2',
          '    option redispatch 1',
          ...healthCheck,
          ...servers((n) => n.mqttPlain, 'send-proxy-v2 '),
          '',
        ]),
  ].join('\n');
}
