'use strict';
// The middleware's default key and its failure paths, without a server (a
// function client answers): IPv6 clients keyed by their /56 network (the same
// keys as express-rate-limit v8's ipKeyGenerator), the trust-proxy and
// X-Forwarded-For set-up checks, errors from a user handler or from next()
// routed to next(err) (never an unhandled rejection), and the defaults.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const express = require('express');
const erl = require('express-rate-limit');
const { request, listen } = require('./helpers');
const { rateLimit, ipKeyGenerator, RateLimit, RedisRateLimitStore, RateLimiterRedisModule } = require('..');

/** A client that answers every command "allowed, 9 of 10 left" and records the keys it was asked about. */
function recordingClient() {
  const keys = [];
  const client = async (args) => {
    if (args[0] === 'COMMAND') return [['rl.gcra']]; // engine detection: the module
    keys.push(String(args[1]));
    return [0, 10, 9, -1, 1000];
  };
  return { client, keys };
}

/** A logger that keeps what the set-up checks report. */
function recordingLogger() {
  const errors = [];
  return { errors, logger: { error: (e) => errors.push(e), warn: () => {} } };
}

describe('ipKeyGenerator', () => {
  test("gives express-rate-limit v8's keys (its own function is the oracle)", () => {
    const ips = [
      '2001:db8:abcd:12ff:1:2:3:4', '2001:db8::1', '2001:DB8:0:0:0:0:0:1', '2001:0db8:00ab:ff00:0000:0000:0000:0001',
      '::1', '::', '1::', '::2:0:0:1', 'fe80::1%eth0', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
      '::ffff:1.2.3.4', '0:0:0:0:0:ffff:1.2.3.4', '::ffff:c0a8:1', '::1.2.3.4', '::102:304', '1:2:3:4:5:6:1.2.3.4',
      '64:ff9b::1.2.3.4', '1.2.3.4', 'not-an-ip',
    ];
    for (const subnet of [56, 32, 33, 48, 63, 64, false]) {
      for (const ip of ips) assert.strictEqual(ipKeyGenerator(ip, subnet), erl.ipKeyGenerator(ip, subnet), `${ip} /${subnet}`);
    }
    assert.strictEqual(ipKeyGenerator('2001:db8:abcd:12ff:1:2:3:4'), '2001:db8:abcd:1200::/56');
    assert.strictEqual(ipKeyGenerator('::ffff:127.0.0.1'), '127.0.0.1');
  });
});

describe('the default key', () => {
  test('IPv6 clients of one /56 share a limit; another /56 has its own (X-Forwarded-For through a trusted proxy)', async () => {
    const { client, keys } = recordingClient();
    const { errors, logger } = recordingLogger();
    const a = express();
    a.set('trust proxy', 'loopback');
    a.use(rateLimit({ client, logger, limit: { type: 'fixedWindow', limit: 10, window: 60 } }));
    a.get('/', (req, res) => res.send('ok'));
    const server = await listen(a);
    try {
      for (const ip of ['2001:db8:abcd:1200::1', '2001:db8:abcd:12ff:ffff:ffff:ffff:2', '2001:db8:abcd:1300::1', '203.0.113.7']) {
        assert.strictEqual((await request(server.port, { headers: { 'X-Forwarded-For': ip } })).status, 200);
      }
    } finally {
      await server.close();
    }
    assert.deepStrictEqual(keys, [
      'rl:default:2001:db8:abcd:1200::/56',
      'rl:default:2001:db8:abcd:1200::/56',
      'rl:default:2001:db8:abcd:1300::/56',
      'rl:default:203.0.113.7',
    ]);
    assert.deepStrictEqual(errors, [], 'a proxy trusted by address raises no set-up error');
  });

  test('ipv6Subnet: another prefix, false (whole addresses), a function; out of 32..64 is refused', async () => {
    for (const [ipv6Subnet, key] of [
      [48, 'rl:default:2001:db8:abcd::/48'],
      [false, 'rl:default:2001:db8:abcd:12ff::1'],
      [() => 64, 'rl:default:2001:db8:abcd:12ff::/64'],
    ]) {
      const { client, keys } = recordingClient();
      const mw = rateLimit({ client, ipv6Subnet, validate: false, limit: { type: 'gcra', maxBurst: 9, tokensPerPeriod: 10, period: 1 } });
      await new Promise((resolve) => mw({ ip: '2001:db8:abcd:12ff::1', method: 'GET', url: '/', headers: {} }, {}, resolve));
      assert.deepStrictEqual(keys, [key]);
    }
    for (const bad of [31, 65, 56.5, '56', true]) {
      assert.throws(() => rateLimit({ client: async () => [], ipv6Subnet: bad, limit: { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 1 } }), /ipv6Subnet/);
    }
  });

  /** Two requests through an Express app set up by `setup`; resolves the codes logged. */
  async function codesLogged(setup, headers, options = {}) {
    const { client } = recordingClient();
    const { errors, logger } = recordingLogger();
    const a = express();
    setup(a);
    a.use(rateLimit({ client, logger, limit: { type: 'fixedWindow', limit: 10, window: 60 }, ...options }));
    a.get('/', (req, res) => res.send('ok'));
    const server = await listen(a);
    try {
      for (let i = 0; i < 2; i++) assert.strictEqual((await request(server.port, { headers })).status, 200);
    } finally {
      await server.close();
    }
    return errors.map((e) => e.code);
  }

  test("set-up checks, each reported once to logger.error (express-rate-limit v8's)", async () => {
    // 'trust proxy' true: any client picks its own address with X-Forwarded-For.
    assert.deepStrictEqual(await codesLogged((a) => a.set('trust proxy', true), { 'X-Forwarded-For': '198.51.100.1' }), ['ERR_RL_PERMISSIVE_TRUST_PROXY']);
    // X-Forwarded-For arriving while 'trust proxy' is off: every client shares the proxy's address.
    assert.deepStrictEqual(await codesLogged(() => {}, { 'X-Forwarded-For': '198.51.100.1' }), ['ERR_RL_UNEXPECTED_X_FORWARDED_FOR']);
    // Forwarded (RFC 7239) is not read by Express.
    assert.deepStrictEqual(await codesLogged(() => {}, { Forwarded: 'for=198.51.100.1' }), ['ERR_RL_FORWARDED_HEADER']);
    // A right set-up: nothing.
    assert.deepStrictEqual(await codesLogged((a) => a.set('trust proxy', 1), { 'X-Forwarded-For': '198.51.100.1' }), []);
    // validate: false, or one check off.
    assert.deepStrictEqual(await codesLogged((a) => a.set('trust proxy', true), {}, { validate: false }), []);
    assert.deepStrictEqual(await codesLogged((a) => a.set('trust proxy', true), {}, { validate: { trustProxy: false } }), []);
  });

  test('a key function that reads req.ip without ipKeyGenerator is reported when the middleware is made', () => {
    const limit = { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 1 };
    const made = (options) => {
      const { errors, logger } = recordingLogger();
      rateLimit({ client: async () => [], logger, limit, ...options });
      return errors.map((e) => e.code);
    };
    assert.deepStrictEqual(made({ key: (req) => req.get('x-api-key') ?? req.ip }), ['ERR_RL_KEY_GEN_IPV6']);
    assert.deepStrictEqual(made({ rules: [{ name: 'r', limit, key: (req) => req.ip }] }), ['ERR_RL_KEY_GEN_IPV6']);
    assert.deepStrictEqual(made({ key: (req) => ipKeyGenerator(req.ip) }), []);
    assert.deepStrictEqual(made({ key: (req) => req.ip, validate: { keyGeneratorIpFallback: false } }), []);
  });
});

describe('errors after the decision go to next(err), never to an unhandled rejection', () => {
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  before(() => process.on('unhandledRejection', onUnhandled));
  after(() => process.off('unhandledRejection', onUnhandled));

  const refusing = async () => [1, 1, 0, 1000, 1000];
  const limit = { type: 'gcra', maxBurst: 0, tokensPerPeriod: 1, period: 1 };

  for (const [name, handler] of [
    ['a handler that throws', () => {
      throw new Error('handler broke');
    }],
    ['an async handler that rejects', async () => {
      throw new Error('handler broke');
    }],
  ]) {
    test(`${name}: the app's error handler answers`, async () => {
      const a = express();
      a.use(rateLimit({ client: refusing, key: () => 'k', cacheSize: 0, limit, handler }));
      a.get('/', (req, res) => res.send('ok'));
      a.use((err, req, res, next) => res.status(500).send(`caught: ${err.message}`));
      const server = await listen(a);
      try {
        const r = await request(server.port, { timeoutMs: 2000 });
        assert.strictEqual(r.status, 500);
        assert.strictEqual(r.body, 'caught: handler broke');
      } finally {
        await server.close();
      }
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepStrictEqual(unhandled, []);
    });
  }

  test('next() that throws (node:http, no framework to catch it): next(err) is called', async () => {
    const allowing = async () => [0, 10, 9, -1, 1000];
    const mw = rateLimit({ client: allowing, key: () => 'k', limit });
    const server = http.createServer((req, res) => {
      mw(req, res, (err) => {
        if (err) {
          res.statusCode = 500;
          return res.end(`caught: ${err.message}`);
        }
        throw new Error('route broke');
      });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const r = await request(server.address().port, { timeoutMs: 2000 });
      assert.strictEqual(r.status, 500);
      assert.strictEqual(r.body, 'caught: route broke');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepStrictEqual(unhandled, []);
  });
});

test('defaults: a 250 ms timeout everywhere; no X-RateLimit-* headers unless asked', async () => {
  const client = async () => [0, 10, 9, -1, 1000];
  assert.strictEqual(new RateLimit(client).timeoutMs, 250);
  assert.strictEqual(rateLimit({ client, limit: { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 1 } }).limiter.timeoutMs, 250);
  assert.strictEqual(new RedisRateLimitStore({ client }).limiter.timeoutMs, 250);
  assert.strictEqual(new RateLimiterRedisModule({ storeClient: client }).limiter.timeoutMs, 250);

  const result = await new RateLimit(client).gcra('k', 9, 10, 1);
  assert.deepStrictEqual(Object.keys(result.headers()).sort(), ['RateLimit', 'RateLimit-Policy']);
  assert.ok('X-RateLimit-Limit' in result.headers({ legacy: true }));
  const a = express();
  a.use(rateLimit({ client, key: () => 'k', limit: { type: 'gcra', maxBurst: 9, tokensPerPeriod: 10, period: 1 } }));
  a.get('/', (req, res) => res.send('ok'));
  const server = await listen(a);
  try {
    const r = await request(server.port);
    assert.ok(r.headers.ratelimit);
    assert.deepStrictEqual(Object.keys(r.headers).filter((h) => h.startsWith('x-ratelimit')), []);
  } finally {
    await server.close();
  }
});
