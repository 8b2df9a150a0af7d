// Where a webhook may be sent (issue 5, CONTRACT §10): https only, and only to public
// addresses. Checked when an endpoint is registered or changed (422 with the reason) and again at
// every delivery, after DNS resolution; the delivery then connects to the address that passed
// the check (actors/webhook-send.ts pins it), so a name that re-resolves to 127.0.0.1 between
// the check and the connect (DNS rebinding) reaches nothing.
//
// WHATWG URL parsing already turns the other spellings of an IPv4 address (decimal
// `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`) into dotted form, so they meet the same list.
// WEBHOOK_ALLOW_PRIVATE_TARGETS=1 lifts all of it (development and tests).

import { promises as dns } from 'node:dns';
import { BlockList, isIP } from 'node:net';

export interface Address {
  address: string;
  family: 4 | 6;
}

/** Resolves a host name to every address it has (dns.lookup by default; tests inject one). */
export type Resolver = (hostname: string) => Promise<Address[]>;

const lookup: Resolver = async (hostname) => {
  const found = await dns.lookup(hostname, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
};

/** How long a resolution may take, waiting for a slot included; past it the host "does not resolve". */
export const RESOLVE_DEADLINE_MS = 3_000;
/** System lookups under way at once: each holds one of libuv's 4 threads until the OS answers. */
export const MAX_LOOKUPS = 2;

/**
 * `resolve` with a deadline, and at most `concurrency` calls under way at once. dns.lookup has no
 * deadline of its own and runs on libuv's thread pool, which the rest of the process (zlib,
 * files) shares: a tenant whose name servers stop answering would hold deliveries to every
 * tenant for the OS's timeout, and its lookups would fill the pool. A call past its deadline is
 * refused while its lookup, if one started, keeps its slot until the OS gives up on it.
 */
export function boundedResolver(resolve: Resolver, deadlineMs = RESOLVE_DEADLINE_MS, concurrency = MAX_LOOKUPS): Resolver {
  let running = 0;
  const waiting: (() => void)[] = [];
  const release = (): void => {
    running--;
    waiting.shift()?.();
  };
  return (hostname) =>
    new Promise<Address[]>((done, fail) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        const at = waiting.indexOf(start);
        if (at >= 0) waiting.splice(at, 1);
        fail(new Error(`resolving ${hostname} took over ${deadlineMs} ms`));
      }, deadlineMs);
      function start(): void {
        running++;
        resolve(hostname).then(
          (found) => {
            release();
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            done(found);
          },
          (err: unknown) => {
            release();
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            fail(err);
          },
        );
      }
      if (running < concurrency) start();
      else waiting.push(start);
    });
}

/** DNS for deliveries (the dispatcher). */
export const systemResolver: Resolver = boundedResolver(lookup);

/**
 * DNS for the registration check (the gateway), with a slot of its own: in embedded mode the
 * gateway and the dispatcher share a process, and a tenant registering names whose name servers
 * never answer would otherwise hold the slots every tenant's deliveries resolve through, and the
 * other way round. One slot, so DNS holds at most three of libuv's four threads.
 */
export const registrationResolver: Resolver = boundedResolver(lookup, RESOLVE_DEADLINE_MS, 1);

// Two lists: Node's BlockList checks an IPv4 address against IPv6 rules too (as if mapped), so
// one list holding ::ffff:0:0/96 would refuse every IPv4 address.
const blocked4 = new BlockList();
const blocked6 = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8], // RFC 1918
  ['100.64.0.0', 10], // CGNAT, RFC 6598
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata (169.254.169.254)
  ['172.16.0.0', 12], // RFC 1918
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation (TEST-NET-1)
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16], // RFC 1918
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation (TEST-NET-2)
  ['203.0.113.0', 24], // documentation (TEST-NET-3)
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  blocked4.addSubnet(net, bits, 'ipv4');
}
for (const [net, bits] of [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['::ffff:0:0', 96], // IPv4-mapped: would reach an IPv4 address past the IPv4 list
  ['::ffff:0:0:0', 96], // IPv4-translated (RFC 2765)
  ['::', 96], // IPv4-compatible (deprecated)
  ['64:ff9b::', 96], // NAT64
  ['64:ff9b:1::', 48], // NAT64, local use (RFC 8215)
  ['100::', 64], // discard
  ['2001::', 32], // Teredo
  ['2001:db8::', 32], // documentation
  ['3fff::', 20], // documentation (RFC 9637)
  ['2002::', 16], // 6to4: embeds an IPv4 address
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
] as const) {
  blocked6.addSubnet(net, bits, 'ipv6');
}

/** Why an address may not be a webhook target, or undefined when it is public. */
export function refusedAddress(address: string): string | undefined {
  const family = isIP(address);
  if (family === 0) return `${address} is not an IP address`;
  if (family === 6 ? blocked6.check(address, 'ipv6') : blocked4.check(address, 'ipv4')) return `${address} is not a public address`;
  return undefined;
}

/**
 * What a tenant is told when a target's address is refused: the same whether its host does not
 * resolve or resolves to an address that is not public, and never the address, so the guard
 * cannot be used to learn which internal names exist or where they point (CONTRACT §4: no host
 * name in a detail).
 */
export const NOT_PUBLIC = 'must resolve only to public addresses';

export class TargetRefused extends Error {
  constructor(
    message: string,
    /** The whole reason, address included: for the operator's log, never for the tenant. */
    readonly reason = message,
    /**
     * The host's name servers gave no answer (they failed, or did not answer in time), rather
     * than one that refuses the host or says it does not exist.
     */
    readonly unresolved = false,
  ) {
    super(message);
  }
}

/** The URL, parsed, when its form may be a target; throws TargetRefused with the reason otherwise. */
export function parseTarget(raw: string, allowPrivate: boolean): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TargetRefused('is not an absolute URL');
  }
  if (url.protocol !== 'https:' && !(allowPrivate && url.protocol === 'http:')) throw new TargetRefused('must use https');
  if (url.username || url.password) throw new TargetRefused('must not hold credentials');
  if (url.hash) throw new TargetRefused('must not hold a fragment');
  // Port 0 is no port: nothing can ever be delivered there.
  if (url.port === '0') throw new TargetRefused('must not name port 0');
  const host = bareHost(url);
  if (!allowPrivate && isIP(host)) {
    const why = refusedAddress(host);
    if (why) throw new TargetRefused(NOT_PUBLIC, why);
  }
  return url;
}

/** The URL's host without IPv6 brackets. */
export function bareHost(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

/**
 * The addresses to connect to for `url`: every one its host resolves to must be public (unless
 * private targets are allowed). Throws TargetRefused with the reason.
 */
export async function resolveTarget(url: URL, resolver: Resolver, allowPrivate: boolean): Promise<Address[]> {
  const host = bareHost(url);
  const family = isIP(host);
  let found: Address[];
  if (family) found = [{ address: host, family: family === 6 ? 6 : 4 }];
  else {
    try {
      found = await resolver(host);
    } catch (err) {
      // ENOTFOUND and ENODATA are answers: the name, or an address for it, does not exist.
      const code = (err as NodeJS.ErrnoException).code;
      throw new TargetRefused(NOT_PUBLIC, `the host ${host} does not resolve`, code !== 'ENOTFOUND' && code !== 'ENODATA');
    }
  }
  if (!found.length) throw new TargetRefused(NOT_PUBLIC, `the host ${host} does not resolve`);
  if (!allowPrivate) {
    for (const a of found) {
      const why = refusedAddress(a.address);
      if (why) throw new TargetRefused(NOT_PUBLIC, `${host} resolves to ${why}`);
    }
  }
  return found;
}
