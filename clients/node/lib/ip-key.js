'use strict';
// The client's identity from its IP address, as express-rate-limit v8's
// ip-key-generator.ts does (MIT; read for its behaviour, written anew here
// without the ip-address dependency): an IPv6 address stands for its /56
// network, since one subscriber is usually given a whole /56 (or /48, /64)
// and can rotate through its addresses at will; an IPv4 address, and an IPv4
// address written as IPv6 (`::ffff:1.2.3.4`, `::1.2.3.4`), stands for itself.

const { isIPv6 } = require('node:net');

/** The default prefix length of an IPv6 client's network (express-rate-limit v8's). */
const DEFAULT_IPV6_SUBNET = 56;

/** `ipv6Subnet` must be false (no masking) or an integer prefix length of 32..64. */
function checkIpv6Subnet(subnet) {
  if (subnet === false) return;
  if (!Number.isInteger(subnet) || subnet < 32 || subnet > 64) {
    throw new TypeError(`redis-ratelimit-client: ipv6Subnet must be false or an integer from 32 to 64 (usually 48 to 64), got ${subnet}`);
  }
}

/** The 8 16-bit words of an IPv6 address (zone removed), and whether it ended in dotted IPv4. */
function parseIpv6(ip) {
  let text = ip;
  const zone = text.indexOf('%');
  if (zone !== -1) text = text.slice(0, zone);
  let dotted = false;
  const tail = [];
  const lastColon = text.lastIndexOf(':');
  if (text.indexOf('.', lastColon) !== -1) {
    // a trailing dotted IPv4 part: two words
    const bytes = text.slice(lastColon + 1).split('.').map(Number);
    tail.push((bytes[0] << 8) | bytes[1], (bytes[2] << 8) | bytes[3]);
    text = text.slice(0, lastColon + 1);
    if (text.endsWith(':') && !text.endsWith('::')) text = text.slice(0, -1);
    dotted = true;
  }
  const hex = (part) => (part === '' ? [] : part.split(':').map((w) => parseInt(w, 16)));
  const gap = text.indexOf('::');
  let words;
  if (gap === -1) {
    words = [...hex(text), ...tail];
  } else {
    const head = hex(text.slice(0, gap));
    const rest = [...hex(text.slice(gap + 2)), ...tail];
    words = [...head, ...new Array(8 - head.length - rest.length).fill(0), ...rest];
  }
  return { words, dotted };
}

/** RFC 5952 text of 8 words: lowercase, no leading zeros, the longest run (≥ 2) of zero words as `::`. */
function formatIpv6(words) {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i += 1;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j += 1;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (ws) => ws.map((w) => w.toString(16)).join(':');
  if (best === -1) return hex(words);
  return `${hex(words.slice(0, best))}::${hex(words.slice(best + bestLen))}`;
}

/**
 * The rate-limiting key of an IP address: an IPv6 address is replaced by its
 * network of `ipv6Subnet` bits (default 56), written `<network>/<bits>`
 * (`2001:db8:abcd:1200::/56`); an IPv4-mapped or IPv4-compatible IPv6 address
 * by its IPv4 address; anything else is returned unchanged. `ipv6Subnet`
 * false: IPv6 addresses are kept whole. The same keys as express-rate-limit's
 * `ipKeyGenerator`, so a custom key function can mask the same way:
 * `key: (req) => req.get('x-api-key') ?? ipKeyGenerator(req.ip)`.
 */
function ipKeyGenerator(ip, ipv6Subnet = DEFAULT_IPV6_SUBNET) {
  if (typeof ip !== 'string' || !isIPv6(ip)) return ip;
  const { words, dotted } = parseIpv6(ip);
  const zeros = (n) => words.slice(0, n).every((w) => w === 0);
  const mapped = zeros(5) && words[5] === 0xffff;
  const compatible = dotted && zeros(6);
  if (mapped || compatible) return `${words[6] >> 8}.${words[6] & 0xff}.${words[7] >> 8}.${words[7] & 0xff}`;
  if (!ipv6Subnet) return ip;
  const masked = words.map((w, i) => {
    const bits = Math.min(16, Math.max(0, ipv6Subnet - 16 * i));
    return bits === 16 ? w : w & ((0xffff << (16 - bits)) & 0xffff);
  });
  return `${formatIpv6(masked)}/${ipv6Subnet}`;
}

module.exports = { ipKeyGenerator, checkIpv6Subnet, DEFAULT_IPV6_SUBNET };
