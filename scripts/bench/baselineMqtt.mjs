// Bare aedes baseline (BENCHMARKS.md, "What it measures"): accepts any client, acknowledges QoS 1 publishes (PUBACK)
// and stores nothing. Plain TCP, or with `--tls <cert.pem> <key.pem>` TLS as telemetryd's MQTT
// listener sets it up (the idle-sessions figure). Prints its port on stdout, then serves until killed.

import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import tls from 'node:tls';
import { Aedes } from 'aedes';

const broker = await Aedes.createBroker();
const tlsAt = process.argv.indexOf('--tls');
const server =
  tlsAt >= 0
    ? tls.createServer(
        { cert: readFileSync(process.argv[tlsAt + 1]), key: readFileSync(process.argv[tlsAt + 2]), minVersion: 'TLSv1.2' },
        broker.handle,
      )
    : createServer(broker.handle);
server.listen(0, '127.0.0.1', () => console.log(`PORT ${server.address().port}`));
