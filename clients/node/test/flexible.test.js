'use strict';
// The rate-limiter-flexible-style API against a real server.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const { startRedis, CLIENTS, freePort } = require('./helpers');
const { RateLimiterRedisModule, RateLimiterUnion, RateLimiterRes } = require('..');

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`rate-limiter-flexible style through ${clientName}`, () => {
    let conn;
    const prefix = (p) => `${p}-${clientName.replace(/\W/g, '')}`;
    before(async () => {
      conn = await lib.connect(redis.port);
    });
    after(async () => {
      await conn.close();
    });

    test('consume resolves until the points are spent, then rejects with a RateLimiterRes', async () => {
      const rl = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('c'), points: 3, duration: 10 });
      const first = await rl.consume('u');
      assert.ok(first instanceof RateLimiterRes);
      assert.deepStrictEqual(
        { remainingPoints: first.remainingPoints, consumedPoints: first.consumedPoints, isFirstInDuration: first.isFirstInDuration },
        { remainingPoints: 2, consumedPoints: 1, isFirstInDuration: true },
      );
      assert.ok(first.msBeforeNext > 9000 && first.msBeforeNext <= 10000, `msBeforeNext ${first.msBeforeNext}`);
      const second = await rl.consume('u', 2);
      assert.deepStrictEqual([second.remainingPoints, second.consumedPoints, second.isFirstInDuration], [0, 3, false]);
      const rejected = await rl.consume('u').then(() => null, (r) => r);
      assert.ok(rejected instanceof RateLimiterRes, `rejected with ${rejected}`);
      assert.strictEqual(rejected.remainingPoints, 0);
      assert.strictEqual(rejected.consumedPoints, 4);
      assert.ok(rejected.msBeforeNext > 9000 && rejected.msBeforeNext <= 10000);
      assert.strictEqual(JSON.parse(String(rejected)).remainingPoints, 0);
    });

    test('reward gives points back (REFUND), get and delete', async () => {
      const rl = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('r'), points: 2, duration: 10 });
      assert.strictEqual(await rl.get('u'), null);
      await rl.consume('u', 2);
      await assert.rejects(rl.consume('u'), RateLimiterRes);
      const got = await rl.get('u');
      assert.deepStrictEqual([got.consumedPoints, got.remainingPoints], [2, 0]);
      const rewarded = await rl.reward('u', 1);
      assert.strictEqual(rewarded.remainingPoints, 1);
      assert.strictEqual((await rl.consume('u')).remainingPoints, 0);
      assert.strictEqual(await rl.delete('u'), true);
      assert.strictEqual(await rl.delete('u'), false);
      assert.strictEqual((await rl.consume('u')).remainingPoints, 1);
    });

    test('blockDuration: a refused consume blocks the key; block() blocks it explicitly', async () => {
      const rl = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('b'), points: 1, duration: 1, blockDuration: 30 });
      await rl.consume('u');
      const refused = await rl.consume('u').then(() => null, (r) => r);
      assert.ok(refused.msBeforeNext >= 30000, `msBeforeNext ${refused.msBeforeNext}`);
      const during = await rl.consume('u').then(() => null, (r) => r);
      assert.ok(during.msBeforeNext > 29000 && during.msBeforeNext <= 30000, `during ${during.msBeforeNext}`);

      const plain = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('bb'), points: 5, duration: 1 });
      const b = await plain.block('v', 20);
      assert.ok(b.msBeforeNext >= 20000);
      const after = await plain.consume('v').then(() => null, (r) => r);
      assert.ok(after && after.msBeforeNext > 19000, `blocked: ${after && after.msBeforeNext}`);
    });

    test('algorithms: gcra, tokenBucket, slidingWindow, slidingLog take `points` per `duration`', async () => {
      for (const algorithm of ['gcra', 'tokenBucket', 'slidingWindow', 'slidingLog']) {
        const rl = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix(`a${algorithm}`), points: 3, duration: 10, algorithm });
        for (let i = 0; i < 3; i++) await rl.consume('u');
        await assert.rejects(rl.consume('u'), RateLimiterRes, algorithm);
      }
    });

    test('RateLimiterUnion: one RL.ALL, all or nothing, rejects with the refusing limiter', async () => {
      const perSecond = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('sec'), points: 5, duration: 1, algorithm: 'gcra' });
      const perMinute = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('min'), points: 2, duration: 60, align: 'epoch' });
      const union = new RateLimiterUnion(perSecond, perMinute);
      const ok = await union.consume('u');
      assert.deepStrictEqual(Object.keys(ok), [prefix('min')]);
      await union.consume('u');
      const rejected = await union.consume('u').then(() => null, (r) => r);
      assert.ok(rejected && rejected[prefix('min')] instanceof RateLimiterRes, `rejected with ${JSON.stringify(rejected)}`);
      // The refusal took nothing from the per-second limiter: 3 of 5 left.
      assert.strictEqual((await perSecond.get('u')).remainingPoints, 3);
      // A fixed window aligned on the first request cannot be part of RL.ALL.
      const first = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('first'), points: 2, duration: 60 });
      await assert.rejects(new RateLimiterUnion(perSecond, first).consume('u'), /aligned on the clock/);
    });
  });
}

test('a store error rejects with an Error, not a RateLimiterRes', async () => {
  const Redis = require('ioredis');
  const c = new Redis({ host: '127.0.0.1', port: await freePort(), maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  c.on('error', () => {});
  try {
    const rl = new RateLimiterRedisModule({ storeClient: c, timeoutMs: 200 });
    const err = await rl.consume('u').then(() => null, (e) => e);
    assert.ok(err instanceof Error && !(err instanceof RateLimiterRes), String(err));
  } finally {
    c.disconnect();
  }
});
