// Bare aedes baseline (BENCHMARKS.md, "What it measures"): accepts any client, acknowledges QoS 1 publishes (PUBACK)
// and stores nothing. Prints its port on stdout, then serves until killed.

import { createServer } from 'node:net';
import { Aedes } from 'aedes';

const broker = await Aedes.createBroker();
const server = createServer(broker.handle);
server.listen(0, '127.0.0.1', () => console.log(`PORT ${server.address().port}`));
