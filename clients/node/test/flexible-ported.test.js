'use strict';
// rate-limiter-flexible's own tests of penalty, reward, block, get and delete
// (animir/node-rate-limiter-flexible 11.x: test/RateLimiterMemory.test.js and
// test/RateLimiterRedis.ioredis.test.js), ported to RateLimiterRedisModule and
// run on the engine of the suite (the module, or the Functions library under
// RATELIMIT_TEST_ENGINE=functions). Their assertions read the store
// (`_memoryStorage.get`, `GET key`); here the same numbers are read with
// get(). Where this package answers differently, the test says so ({ todo }).
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const { startRedis, CLIENTS, sleep } = require('./helpers');
const { RateLimiterRedisModule } = require('..');

let redis;
let conn;
before(async () => {
  redis = await startRedis();
  conn = await CLIENTS.ioredis.connect(redis.port);
});
after(async () => {
  await conn.close();
  await redis.stop();
});

const limiter = (opts) => new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: 'ported', ...opts });
const rejection = (promise) => promise.then(() => assert.fail('must not resolve'), (rej) => rej);

describe("rate-limiter-flexible's tests: reward, block, get, delete", () => {
  test('reward points', async () => {
    const rl = limiter({ points: 1, duration: 5 });
    await rl.consume('reward1');
    await rl.reward('reward1');
    // rate-limiter-flexible: the stored count is 0. Here: nothing consumed.
    assert.strictEqual(await rl.get('reward1'), null);
    assert.strictEqual((await rl.consume('reward1')).remainingPoints, 0);
  });

  test('blocks key for block duration when consumed more than points', async () => {
    const rl = limiter({ points: 1, duration: 1, blockDuration: 2 });
    const rej = await rejection(rl.consume('block', 2));
    assert.ok(rej.msBeforeNext > 1000, JSON.stringify(rej));
  });

  test(
    'do not block key second time until block expires no matter how many points consumed',
    { todo: 'a refused consume with blockDuration re-starts the block here (BLOCK on every refusal); rate-limiter-flexible blocks once' },
    async () => {
      const rl = limiter({ points: 1, duration: 1, blockDuration: 2 });
      await rejection(rl.consume('donotblocktwice', 2));
      await sleep(1201);
      const rej = await rejection(rl.consume('donotblocktwice'));
      assert.ok(rej.msBeforeNext < 1000, JSON.stringify(rej));
    },
  );

  test('block expires in blockDuration seconds', async () => {
    const rl = limiter({ points: 1, duration: 1, blockDuration: 2 });
    await rejection(rl.consume('blockexpires', 2));
    await sleep(2010);
    const res = await rl.consume('blockexpires');
    assert.strictEqual(res.consumedPoints, 1);
  });

  test('block custom key', async () => {
    const rl = limiter({ points: 1, duration: 1 });
    await rl.block('blockcustom', 2);
    const rej = await rejection(rl.consume('blockcustom'));
    assert.ok(rej.msBeforeNext > 1000 && rej.msBeforeNext <= 2000, JSON.stringify(rej));
  });

  test('block key forever, if secDuration is 0', async () => {
    // rate-limiter-flexible: for ever (get: consumedPoints 2, msBeforeNext -1).
    // Here: the longest BLOCK, 366 days; block() resolves msBeforeNext -1 as its does.
    const rl = limiter({ points: 1, duration: 1 });
    assert.strictEqual((await rl.block('neverexpire', 0)).msBeforeNext, -1);
    await sleep(1000);
    const res = await rl.get('neverexpire');
    assert.ok(res.consumedPoints >= 1 && res.remainingPoints === 0, JSON.stringify(res));
    assert.ok(res.msBeforeNext > 365 * 86400 * 1000, JSON.stringify(res));
  });

  test('get points (get by key)', async () => {
    const rl = limiter({ points: 2, duration: 5 });
    await rl.consume('get');
    const res = await rl.get('get');
    assert.strictEqual(res.consumedPoints, 1);
    assert.strictEqual(res.remainingPoints, 1);
  });

  test('get returns NULL if key is not set', async () => {
    assert.strictEqual(await limiter({ points: 2, duration: 1 }).get('getnull'), null);
  });

  test('delete key and return true', async () => {
    const rl = limiter({ points: 2, duration: 1 });
    await rl.consume('deletetrue');
    assert.strictEqual(await rl.delete('deletetrue'), true);
  });

  test('delete returns false, if there is no key', async () => {
    assert.strictEqual(await limiter({ points: 2, duration: 1 }).delete('deletefalse'), false);
  });
});

// Issue 46: block(key, s) refuses for exactly s seconds, then the key is fresh
// (rate-limiter-flexible sets points + 1 for s seconds), on every algorithm.
describe('block(key, s): refused for s seconds, then fresh', () => {
  for (const algorithm of ['fixedWindow', 'slidingWindow', 'slidingLog', 'gcra', 'tokenBucket']) {
    test(`${algorithm}: 60 s of points, block(key, 1)`, async () => {
      const rl = limiter({ points: 3, duration: 60, algorithm, keyPrefix: `exact-${algorithm}` });
      await rl.consume('k');
      const res = await rl.block('k', 1);
      assert.deepStrictEqual([res.remainingPoints, res.msBeforeNext, res.consumedPoints], [0, 1000, 4]);
      const during = await rejection(rl.consume('k'));
      assert.ok(during.msBeforeNext > 800 && during.msBeforeNext <= 1000, JSON.stringify(during));
      await sleep(1050);
      // Fresh: every point again, not what was left of the window before the block.
      const after = await rl.consume('k', 3);
      assert.strictEqual(after.remainingPoints, 0);
    });
  }
});
