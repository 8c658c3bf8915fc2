// Idle MQTT-over-TLS sessions, run as its own process: what a gateway's devices hold open.
// argv[2] is a JSON file: {port, ca, sessions: [{id, token}], keepaliveS, batch}. Connects
// every session (`batch` at a time, so the CONNECTs do not arrive as one storm), prints
// `READY <n>` once all are connected, then holds them idle until killed.
import { readFileSync } from 'node:fs';
import mqtt from 'mqtt';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const clients = [];
const connect = (s, i) =>
  new Promise((resolve, reject) => {
    const client = mqtt.connect({
      protocol: 'mqtts',
      host: '127.0.0.1',
      port: cfg.port,
      ca: cfg.ca,
      servername: 'localhost',
      protocolVersion: 4,
      clientId: `idle-${i}`,
      username: s.id,
      password: s.token,
      keepalive: cfg.keepaliveS,
      reconnectPeriod: 0,
      connectTimeout: 30_000,
    });
    client.once('connect', () => {
      clients.push(client);
      resolve();
    });
    client.once('error', reject);
  });

for (let i = 0; i < cfg.sessions.length; i += cfg.batch) {
  await Promise.all(cfg.sessions.slice(i, i + cfg.batch).map((s, j) => connect(s, i + j)));
}
console.log(`READY ${clients.length}`);
setInterval(() => {}, 1 << 30);
