import { BlockList, isIPv4 } from 'node:net';
import type { ServerConfig } from '../config.js';

/**
 * fastify's trustProxy as a function of (address, hop): which hops of a request's path may be
 * believed when they name the next one in X-Forwarded-For (docs/operations.md, "Behind a
 * proxy"). fastify walks from the socket's peer (hop 0) towards the client and takes the first
 * address this refuses as request.ip, so a client can prepend whatever it likes to the header:
 * only what trusted proxies appended counts.
 */
export function proxyTrust(setting: ServerConfig['trustProxy']): false | ((address: string, hop: number) => boolean) {
  if (setting === false) return false;
  if (setting === 'private') {
    // One proxy in front, on this machine or the local network: the usual self-hosted haproxy
    // or nginx. Its own peer is the client, whatever that client's address.
    return (address, hop) => hop === 0 && PRIVATE_NETWORKS.check(...typed(address));
  }
  const proxies = new BlockList();
  for (const entry of setting) {
    const [address, prefix] = entry.split('/') as [string, string | undefined];
    const type = isIPv4(address) ? 'ipv4' : 'ipv6';
    if (prefix === undefined) proxies.addAddress(address, type);
    else proxies.addSubnet(address, Number(prefix), type);
  }
  return (address) => proxies.check(...typed(address));
}

/** Loopback and private ranges (RFC 1918, RFC 4193 unique local). */
const PRIVATE_NETWORKS = new BlockList();
PRIVATE_NETWORKS.addSubnet('127.0.0.0', 8, 'ipv4');
PRIVATE_NETWORKS.addSubnet('10.0.0.0', 8, 'ipv4');
PRIVATE_NETWORKS.addSubnet('172.16.0.0', 12, 'ipv4');
PRIVATE_NETWORKS.addSubnet('192.168.0.0', 16, 'ipv4');
PRIVATE_NETWORKS.addAddress('::1', 'ipv6');
PRIVATE_NETWORKS.addSubnet('fc00::', 7, 'ipv6');

/** An address and its family for BlockList.check; IPv4-mapped IPv6 (a dual-stack socket) as IPv4. */
function typed(address: string): [string, 'ipv4' | 'ipv6'] {
  const unmapped = address.toLowerCase().startsWith('::ffff:') ? address.slice(7) : address;
  if (isIPv4(unmapped)) return [unmapped, 'ipv4'];
  return [address, 'ipv6'];
}
