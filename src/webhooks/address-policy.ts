import { lookup as dnsLookup, type LookupAddress } from 'node:dns'
import { BlockList, isIP, type LookupFunction } from 'node:net'

/**
 * Addresses a webhook may not reach unless the operator allows private ones (docs/webhooks.md,
 * "SSRF"): this host, its networks, and cloud metadata — anything not on the public internet.
 */
const ranges: Array<[string, number, 'ipv4' | 'ipv6', string]> = [
  ['0.0.0.0', 8, 'ipv4', 'this network'],
  ['10.0.0.0', 8, 'ipv4', 'private'],
  ['100.64.0.0', 10, 'ipv4', 'carrier-grade NAT'],
  ['127.0.0.0', 8, 'ipv4', 'loopback'],
  ['169.254.0.0', 16, 'ipv4', 'link-local (cloud metadata)'],
  ['172.16.0.0', 12, 'ipv4', 'private'],
  ['192.0.0.0', 24, 'ipv4', 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'ipv4', 'documentation'],
  ['192.88.99.0', 24, 'ipv4', '6to4 relay'],
  ['192.168.0.0', 16, 'ipv4', 'private'],
  ['198.18.0.0', 15, 'ipv4', 'benchmarking'],
  ['198.51.100.0', 24, 'ipv4', 'documentation'],
  ['203.0.113.0', 24, 'ipv4', 'documentation'],
  ['224.0.0.0', 4, 'ipv4', 'multicast'],
  ['240.0.0.0', 4, 'ipv4', 'reserved'],
  ['::', 128, 'ipv6', 'unspecified'],
  ['::1', 128, 'ipv6', 'loopback'],
  // ::a.b.c.d and ::ffff:0:a.b.c.d carry an IPv4 address that some stacks still reach.
  ['::', 96, 'ipv6', 'IPv4-compatible'],
  ['::ffff:0:0:0', 96, 'ipv6', 'IPv4-translated'],
  ['64:ff9b::', 96, 'ipv6', 'NAT64'],
  ['64:ff9b:1::', 48, 'ipv6', 'NAT64'],
  ['100::', 64, 'ipv6', 'discard'],
  ['2001::', 32, 'ipv6', 'Teredo'],
  ['2001:db8::', 32, 'ipv6', 'documentation'],
  ['2002::', 16, 'ipv6', '6to4'],
  ['fc00::', 7, 'ipv6', 'unique local (cloud metadata)'],
  ['fe80::', 10, 'ipv6', 'link-local'],
  ['fec0::', 10, 'ipv6', 'site-local'],
  ['ff00::', 8, 'ipv6', 'multicast'],
]

const lists = ranges.map(([network, prefix, type, reason]) => {
  const list = new BlockList()
  list.addSubnet(network, prefix, type)
  return { list, reason }
})

/** Why `address` (an IP) is not a public one, or null when it is. IPv4-mapped IPv6 counts as its IPv4. */
export function nonPublicReason(address: string): string | null {
  const family = isIP(address)
  if (family === 0) return 'not an IP address'
  // BlockList matches an IPv4-mapped IPv6 address (::ffff:127.0.0.1) against the IPv4 ranges too.
  for (const { list, reason } of lists)
    if (list.check(address, family === 4 ? 'ipv4' : 'ipv6')) return `${reason} address ${address}`
  return null
}

/** A URL's host as an IP literal (without IPv6 brackets), or null for a name. */
export function ipLiteral(url: URL): string | null {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1')
  return isIP(host) === 0 ? null : host
}

/**
 * `lookup` for node:http(s) that refuses a name resolving to any non-public address: the check is on
 * the addresses the connection will use, made at connect time, so a name that resolves differently
 * later (DNS rebinding) is caught then. Any bad address refuses the whole name.
 */
export function publicOnlyLookup(): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0)
      const refused = addresses.map((entry) => nonPublicReason(entry.address)).find((reason) => reason !== null)
      if (refused) {
        const denied = Object.assign(
          new Error(`${hostname} resolves to a ${refused}; webhooks may only reach public addresses`),
          { code: 'WEBHOOK_ADDRESS_NOT_ALLOWED' },
        )
        return callback(denied, '', 0)
      }
      if (options.all)
        return (callback as unknown as (error: null, addresses: LookupAddress[]) => void)(null, addresses)
      const first = addresses[0]
      if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 0)
      callback(null, first.address, first.family)
    })
  }
}
