'use strict';
// rate-limit-redis's own store tests, ported to RedisRateLimitStore against a
// real server. Source: express-rate-limit/rate-limit-redis, test/store-test.ts
// (MIT, © 2023 Wyatt Johnson, Nathan Friedly, Vedant K), at commit 570da54.
//
// What changed in the port: the server is a real redis-server with the module
// (not ioredis-mock), so time is real and windows are short; the key holds the
// module's `F<window start µs>:<count>` rather than a bare count, so the count
// is read through the store (`get`) and the window through PTTL; the tests of
// rate-limit-redis's own options (resetExpiryOnChange, sendCommand binding, its
// Lua script's PTTL-0 edge) have no counterpart here. Added: resetTime is the
// first hit + windowMs (express-rate-limit's MemoryStore and rate-limit-redis),
// and `align: 'epoch'` keeps windows on the clock.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const { startRedis, CLIENTS, raw, sleep } = require('./helpers');
const { RedisRateLimitStore } = require('..');

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

/**
 * The PTTL of a key, in ms. A window that starts at a µs instant expires at
 * that instant + windowMs rounded up to a ms (PXAT): up to 1 ms more than
 * windowMs with the Functions library, or with the module on Redis 7.2+ (on
 * 7.0 the module reads the server's clock in ms).
 */
const pttl = async (client, key) => Number(await raw(client)('PTTL', key));

/** Waits until Date.now() is away from a multiple of `windowMs` (so that clock windows and first-hit windows differ). */
async function awayFromBoundary(windowMs) {
  while (Date.now() % windowMs < windowMs * 0.1 || Date.now() % windowMs > windowMs * 0.9) await sleep(windowMs / 20);
}

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`rate-limit-redis's store tests through ${clientName}`, () => {
    let conn;
    let n = 0;
    // A prefix per test: the tests share one server.
    const prefix = () => `rlr:${clientName}:${n++}:`;
    before(async () => {
      conn = await lib.connect(redis.port);
    });
    after(async () => {
      await conn.close();
    });

    async function store(windowMs, options = {}) {
      const s = new RedisRateLimitStore({ client: conn.client, prefix: prefix(), ...options });
      s.init({ windowMs, limit: 100 });
      return s;
    }

    test('supports custom prefixes', async () => {
      const s = new RedisRateLimitStore({ client: conn.client, prefix: `test-${clientName}-` });
      s.init({ windowMs: 10_000, limit: 100 });
      await s.increment('store');
      // The key is the prefix + the client's key, and expires windowMs after the hit.
      const ms = await pttl(conn.client, `test-${clientName}-store`);
      assert.ok(ms > 9_900 && ms <= 10_001, `PTTL ${ms}`);
      assert.strictEqual((await s.get('store')).totalHits, 1);
    });

    test('sets the value to 1 on first call to `increment`', async () => {
      const s = await store(10_000);
      const { totalHits } = await s.increment('test-store');
      assert.strictEqual(totalHits, 1);
      assert.strictEqual((await s.get('test-store')).totalHits, 1);
      const ms = await pttl(conn.client, `${s.prefix}test-store`);
      assert.ok(ms > 9_900 && ms <= 10_001, `PTTL ${ms}`);
    });

    test('increments the key for the store when `increment` is called', async () => {
      const s = await store(10_000);
      await s.increment('test-store');
      const { totalHits } = await s.increment('test-store');
      assert.strictEqual(totalHits, 2);
      assert.strictEqual((await s.get('test-store')).totalHits, 2);
      const ms = await pttl(conn.client, `${s.prefix}test-store`);
      assert.ok(ms > 9_800 && ms <= 10_001, `PTTL ${ms}`);
    });

    test('decrements the key for the store when `decrement` is called', async () => {
      const s = await store(10_000);
      await s.increment('test-store'); // 1
      await s.increment('test-store'); // 2
      await s.decrement('test-store'); // 1
      const { totalHits } = await s.increment('test-store'); // 2
      assert.strictEqual(totalHits, 2);
      assert.strictEqual((await s.get('test-store')).totalHits, 2);
    });

    test('resets the count for a key in the store when `resetKey` is called', async () => {
      const s = await store(10_000);
      await s.increment('test-store');
      await s.increment('test-store');
      await s.resetKey('test-store');
      const { totalHits } = await s.increment('test-store');
      assert.strictEqual(totalHits, 1);
      const ms = await pttl(conn.client, `${s.prefix}test-store`);
      assert.ok(ms > 9_900 && ms <= 10_001, `PTTL ${ms}`);
    });

    test('fetches the count for a key in the store when `get` is called', async () => {
      const s = await store(10_000);
      await s.increment('test-store');
      await s.increment('test-store');
      const info = await s.get('test-store');
      assert.strictEqual(info.totalHits, 2);
      assert.ok(info.resetTime instanceof Date);
    });

    test('resets the count for all the keys in the store when the timeout is reached', async () => {
      const s = await store(50);
      await s.increment('test-store-one');
      await s.increment('test-store-two');
      await sleep(60);
      assert.strictEqual(Number(await raw(conn.client)('EXISTS', `${s.prefix}test-store-one`, `${s.prefix}test-store-two`)), 0);
    });

    test('starts new window with count 1 when TTL expired', async () => {
      const s = await store(50);
      assert.strictEqual((await s.increment('test-expired-window')).totalHits, 1);
      await sleep(60);
      const afterExpiry = await s.increment('test-expired-window');
      assert.strictEqual(afterExpiry.totalHits, 1);
      const ms = await pttl(conn.client, `${s.prefix}test-expired-window`);
      assert.ok(ms > 0 && ms <= 51, `PTTL ${ms}`);
    });

    test('resetTime is the first hit + windowMs, for every hit of the window', async () => {
      const windowMs = 2_000;
      const s = await store(windowMs);
      await awayFromBoundary(windowMs);
      const before = Date.now();
      const first = await s.increment('u');
      const afterFirst = Date.now();
      assert.ok(
        first.resetTime.getTime() >= before + windowMs - 2 && first.resetTime.getTime() <= afterFirst + windowMs + 2,
        `resetTime ${first.resetTime.getTime() - before} ms after the first hit (windowMs ${windowMs})`,
      );
      await sleep(100);
      const second = await s.increment('u');
      // Within the two calls' latencies (a window restarted by the second hit would end 100 ms later).
      assert.ok(Math.abs(second.resetTime.getTime() - first.resetTime.getTime()) <= 25, 'the same window end');
    });

    test("align: 'epoch' keeps windows on the clock", async () => {
      const windowMs = 2_000;
      const s = await store(windowMs, { align: 'epoch' });
      await awayFromBoundary(windowMs);
      const before = Date.now();
      const { resetTime } = await s.increment('u');
      const roundTrip = Date.now() - before;
      // The next multiple of windowMs (resetTime is the client's clock + the reply's reset_after).
      const boundary = Math.ceil(before / windowMs) * windowMs;
      const off = resetTime.getTime() - boundary;
      assert.ok(off >= -2 && off <= roundTrip + 2, `resetTime is ${off} ms off the window's end on the clock (round trip ${roundTrip} ms)`);
      assert.throws(() => new RedisRateLimitStore({ client: conn.client, align: 'sometimes' }), /align/);
    });
  });
}
