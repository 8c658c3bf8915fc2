/** Code snippets shown after a device is created, for its chosen connectivity (docs/dashboard.md). */
export interface SnippetInput {
  deviceId: string;
  token: string;
  publicUrl: string;
  mqttHost: string;
  mqttPort: number;
  fields: { name: string }[];
  network: string;
  protocol: string;
  /** False while the server's MQTT over TLS is off (--mqtt-port off): every snippet uses HTTP then. */
  mqttEnabled: boolean;
  intervalSeconds: number;
  /** The MQTT listener's certificate (PEM), null when MQTT over TLS is off. */
  certificatePem: string | null;
  /** True when telemetryd generated it: then it is the CA devices trust, as it is. */
  selfSigned: boolean | null;
}

interface SampleValue {
  /** The field's name split at its dots: a dotted name (`env.humidity`) is a nested value. */
  path: string[];
  value: number;
}

/**
 * An example value for each declared field, placed where the server reads it: a dotted name
 * as nesting (`{"env":{"humidity":…}}`), which is what alerts and a strict device's schema
 * check read. A name whose path runs into an earlier field's value is left out.
 */
function sample(fields: { name: string }[]): { data: Record<string, unknown>; values: SampleValue[] } {
  const data: Record<string, unknown> = {};
  const values: SampleValue[] = [];
  // *_url fields carry snapshot URLs from an upload, not sensor values: left out of the example.
  const numeric = fields.filter((f) => !f.name.endsWith('_url'));
  const list = numeric.length ? numeric : [{ name: 'temperature' }];
  list.forEach((f, i) => {
    const path = f.name.split('.');
    let node = data;
    for (const segment of path.slice(0, -1)) {
      if (!Object.hasOwn(node, segment)) node[segment] = {};
      const next = node[segment];
      if (typeof next !== 'object' || next === null) return;
      node = next as Record<string, unknown>;
    }
    const leaf = path.at(-1)!;
    if (Object.hasOwn(node, leaf)) return;
    const value = Math.round((21.5 + i * 10) * 10) / 10;
    node[leaf] = value;
    values.push({ path, value });
  });
  return { data, values };
}

export function snippets(s: SnippetInput): { id: string; title: string; code: string }[] {
  const { data, values } = sample(s.fields);
  const json = JSON.stringify(data);
  const ingestUrl = `${s.publicUrl}/api/devices/ingest`;
  const topic = `d/${s.deviceId}/t`;
  const useMqtt = s.protocol === 'mqtt' && s.mqttEnabled;
  const secureHttp = ingestUrl.startsWith('https:');

  const curl = `curl -X POST '${ingestUrl}' \\
  -H 'Content-Type: application/json' \\
  -H 'Authorization: Bearer ${s.token}' \\
  -d '${JSON.stringify({ device_id: s.deviceId, data })}'`;

  const pem = (s.certificatePem ?? '').trim();
  const caNote = s.selfSigned
    ? "the server's own (self-signed) certificate"
    : "the certificate given with --tls-cert; if a CA issued it, trust that CA's certificate instead";
  const caFile = `${s.publicUrl}/mqtt-ca.pem`;
  const mosquitto = `# ca.pem: ${caNote}
curl -fsS -o ca.pem '${caFile}'
mosquitto_pub -h ${s.mqttHost} -p ${s.mqttPort} --cafile ca.pem \\
  -i ${s.deviceId} -u ${s.deviceId} -P '${s.token}' \\
  -t ${topic} -q 1 -m '${json}'`;

  const readFn = (v: SampleValue) => `read_${v.path.join('_').replace(/[^A-Za-z0-9_]/g, '_')}`;
  // ArduinoJson creates the nested objects of doc["env"]["humidity"] on assignment.
  const cArgs = values.map((v) => `  doc${v.path.map((p) => `["${p}"]`).join('')} = ${readFn(v)}();`).join('\n');
  const readFns = values.map((v) => `float ${readFn(v)}() { return ${v.value}; }  // replace with your sensor`).join('\n');
  const netInclude =
    s.network === '4g'
      ? '// 4G: use TinyGSM (TinyGsmClient / SSLClient) in place of WiFiClientSecure.\n'
      : s.network === 'ethernet'
        ? '// Ethernet: use ETH.h (ESP32 with LAN8720) in place of WiFi.begin().\n'
        : '';
  const esp32 = useMqtt
    ? `// ESP32 (Arduino core) + PubSubClient + ArduinoJson, MQTT over TLS
${netInclude}#include <WiFi.h>
#include <WiFiClientSecure.h>
#include <PubSubClient.h>
#include <ArduinoJson.h>

const char* WIFI_SSID = "your-wifi";
const char* WIFI_PASS = "your-password";
const char* MQTT_HOST = "${s.mqttHost}";
const int   MQTT_PORT = ${s.mqttPort};
const char* DEVICE_ID = "${s.deviceId}";
const char* TOKEN     = "${s.token}";
const char* TOPIC     = "${topic}";
// ${caNote} (also at ${caFile})
const char* CA_CERT = R"(${pem || '-----BEGIN CERTIFICATE-----\n(download it from the link above)\n-----END CERTIFICATE-----'})";

WiFiClientSecure net;
PubSubClient mqtt(net);
${readFns}

void setup() {
  WiFi.begin(WIFI_SSID, WIFI_PASS);
  while (WiFi.status() != WL_CONNECTED) delay(500);
  net.setCACert(CA_CERT);
  mqtt.setServer(MQTT_HOST, MQTT_PORT);
  // Longer than the interval below: the broker closes a connection silent for 1.5 keep-alives
  // (PubSubClient's default is 15 s), and each reading's publish keeps this one open.
  mqtt.setKeepAlive(${Math.min(65_535, Math.max(60, 2 * s.intervalSeconds))});
}

void loop() {
  if (!mqtt.connected()) mqtt.connect(DEVICE_ID, DEVICE_ID, TOKEN);
  JsonDocument doc;
${cArgs}
  char payload[256];
  serializeJson(doc, payload);
  mqtt.publish(TOPIC, payload);
  mqtt.loop();
  delay(${s.intervalSeconds * 1000});
}`
    : `// ESP32 (Arduino core) + HTTPClient + ArduinoJson, HTTP ingest
${netInclude}#include <WiFi.h>
#include <HTTPClient.h>
#include <ArduinoJson.h>

const char* WIFI_SSID = "your-wifi";
const char* WIFI_PASS = "your-password";
const char* INGEST_URL = "${ingestUrl}";
const char* DEVICE_ID = "${s.deviceId}";
const char* TOKEN     = "${s.token}";
${readFns}

void setup() {
  WiFi.begin(WIFI_SSID, WIFI_PASS);
  while (WiFi.status() != WL_CONNECTED) delay(500);
}

void loop() {
  HTTPClient http;
  http.begin(INGEST_URL);${secureHttp ? '  // https: pass a WiFiClientSecure with setCACert()' : ''}
  http.addHeader("Content-Type", "application/json");
  http.addHeader("Authorization", String("Bearer ") + TOKEN);
  JsonDocument doc;
  doc["device_id"] = DEVICE_ID;
  JsonObject data = doc["data"].to<JsonObject>();
${cArgs.replace(/doc\[/g, 'data[')}
  String body;
  serializeJson(doc, body);
  int status = http.POST(body);  // 200 = stored
  http.end();
  delay(${s.intervalSeconds * 1000});
}`;

  const python = useMqtt
    ? `# pip install paho-mqtt
import json, ssl, time
import paho.mqtt.client as mqtt

DEVICE_ID = "${s.deviceId}"
TOKEN = "${s.token}"

# ${caNote} (also at ${caFile})
CA_CERT = """${pem}"""

client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=DEVICE_ID)
client.username_pw_set(DEVICE_ID, TOKEN)
client.tls_set_context(ssl.create_default_context(cadata=CA_CERT))
client.connect("${s.mqttHost}", ${s.mqttPort})
client.loop_start()
while True:
    data = ${json}
    client.publish("${topic}", json.dumps(data), qos=1).wait_for_publish()
    time.sleep(${s.intervalSeconds})`
    : `# pip install requests
import time
import requests

DEVICE_ID = "${s.deviceId}"
TOKEN = "${s.token}"

while True:
    data = ${json}
    # A reading the server did not store (200) is reported and the loop goes on: a restart
    # of the server or a dropped network must not end the script.
    try:
        r = requests.post("${ingestUrl}",
                          json={"device_id": DEVICE_ID, "data": data},
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        if r.status_code != 200:
            print("not stored:", r.status_code, r.text)
    except requests.RequestException as e:
        print("server not reached:", e)
    time.sleep(${s.intervalSeconds})`;

  const list = [
    { id: 'curl', title: 'curl (HTTP)', code: curl },
    { id: 'mosquitto', title: 'mosquitto_pub (MQTT over TLS)', code: mosquitto },
    { id: 'esp32', title: `ESP32 / Arduino (${useMqtt ? 'MQTT' : 'HTTP'})`, code: esp32 },
    { id: 'python', title: `Python (${useMqtt ? 'MQTT' : 'HTTP'})`, code: python },
  ];
  // The chosen protocol's command-line example first; no MQTT example where no listener takes it.
  if (useMqtt) return [list[1]!, list[2]!, list[3]!, list[0]!];
  return s.mqttEnabled ? list : list.filter((sn) => sn.id !== 'mosquitto');
}
