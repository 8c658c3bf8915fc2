/** The device snippets (web/src/snippets.ts), without a browser. */
import { describe, expect, it } from 'vitest';
import { snippets } from '../../web/src/snippets.js';

const input = {
  deviceId: 'dev_x',
  token: 't'.repeat(32),
  publicUrl: 'http://127.0.0.1:8080',
  mqttHost: '127.0.0.1',
  mqttPort: 8883,
  fields: [],
  network: 'wifi',
  intervalSeconds: 60,
  certificatePem: null,
  selfSigned: null,
};

describe('snippets', () => {
  it('offer only HTTP while the server has MQTT over TLS off, whatever protocol the device was set to', () => {
    const shown = snippets({ ...input, protocol: 'mqtt', mqttEnabled: false });
    expect(shown.map((s) => s.id)).toEqual(['curl', 'esp32', 'python']);
    expect(shown.map((s) => s.title)).toEqual(['curl (HTTP)', 'ESP32 / Arduino (HTTP)', 'Python (HTTP)']);
    for (const s of shown) expect(s.code).not.toMatch(/mqtt|8883/i);
  });

  it('lead with MQTT for an MQTT device while the listener is on', () => {
    const shown = snippets({ ...input, protocol: 'mqtt', mqttEnabled: true });
    expect(shown.map((s) => s.id)).toEqual(['mosquitto', 'esp32', 'python', 'curl']);
    expect(shown[1]!.title).toBe('ESP32 / Arduino (MQTT)');
  });

  it('send a dotted field as the nested value the server reads, and leave out a name that runs into another field', () => {
    const fields = [{ name: 'temp' }, { name: 'env.humidity' }, { name: 'env.pressure' }, { name: 'temp.x' }];
    const shown = snippets({ ...input, fields, protocol: 'http', mqttEnabled: true });
    const curl = shown.find((s) => s.id === 'curl')!.code;
    const body = JSON.parse(curl.slice(curl.indexOf("-d '") + 4, curl.lastIndexOf("'")));
    expect(body.data).toEqual({ temp: 21.5, env: { humidity: 31.5, pressure: 41.5 } });
    const esp32 = shown.find((s) => s.id === 'esp32')!.code;
    expect(esp32).toContain('data["env"]["humidity"] = read_env_humidity();');
    expect(esp32).toContain('float read_env_humidity() { return 31.5; }');
    expect(esp32).not.toContain('temp_x');
    const python = shown.find((s) => s.id === 'python')!.code;
    expect(python).toContain(`data = ${JSON.stringify(body.data)}`);
  });
});
