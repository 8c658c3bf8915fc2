/**
 * The client address of an MQTT connection. Behind a proxy that speaks the PROXY protocol
 * (--mqtt-proxy-protocol), the socket's peer is the proxy; the address its header names is
 * recorded here against the stream aedes is given, and everything that keys on the client
 * (the auth throttle, log lines) reads it through addressOfConnection.
 */
const forwardedAddresses = new WeakMap<object, string>();

export function recordForwardedAddress(connection: object, address: string): void {
  forwardedAddresses.set(connection, address);
}

/** The address the PROXY header named for this connection, else its socket's peer. */
export function addressOfConnection(connection: { remoteAddress?: string }): string | undefined {
  return forwardedAddresses.get(connection) ?? connection.remoteAddress;
}
