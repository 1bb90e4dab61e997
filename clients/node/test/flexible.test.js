'use strict';
// The rate-limiter-flexible-style API against a real server.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const { startRedis, CLIENTS, freePort, commandCalls, sleep, raw } = require('./helpers');
const { RateLimiterMemory } = require('rate-limiter-flexible');
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
    });

    test('RateLimiterUnion of default limiters (windows from the first consume): all or nothing, never a TypeError', async () => {
      const small = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('us'), points: 2, duration: 60 });
      const big = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('ub'), points: 5, duration: 60 });
      const union = new RateLimiterUnion(small, big);
      const first = await union.consume('u');
      // The binding limiter: the fewest points left.
      assert.deepStrictEqual(Object.keys(first), [prefix('us')]);
      assert.strictEqual(first[prefix('us')].remainingPoints, 1);
      await union.consume('u');
      const rejected = await union.consume('u').then(() => null, (r) => r);
      assert.ok(rejected && rejected[prefix('us')] instanceof RateLimiterRes, `rejected with ${rejected}`);
      assert.ok(rejected[prefix('us')].msBeforeNext > 59000, `msBeforeNext ${rejected[prefix('us')].msBeforeNext}`);
      // The refused consume took nothing from the other limiter: 3 of 5 left.
      assert.strictEqual((await big.get('u')).remainingPoints, 3);
      assert.strictEqual((await small.get('u')).remainingPoints, 0);
      // The windows start at the first consume: each key expires a minute after it.
      const ttl = Number(await raw(conn.client)('PTTL', big.getKey('u')));
      // (+1 ms: an expiry at a µs instant rounded up to a ms, on servers with a µs clock.)
      assert.ok(ttl > 59000 && ttl <= 60001, `PTTL ${ttl}`);
    });

    test('inMemoryBlockOnConsumed: a key that consumed that many is refused from memory, without a Redis call', async () => {
      const rl = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: prefix('m'), points: 2, duration: 60, inMemoryBlockOnConsumed: 2 });
      await rl.consume('u');
      await rl.consume('u'); // 2 consumed: blocked in memory until the window ends
      const calls = await commandCalls(conn.client, 'RL.FIXEDWINDOW');
      for (let i = 0; i < 3; i++) {
        const r = await rl.consume('u').then(() => null, (e) => e);
        assert.ok(r instanceof RateLimiterRes, String(r));
        assert.strictEqual(r.remainingPoints, 0);
        assert.ok(r.msBeforeNext > 59000 && r.msBeforeNext <= 60000, `msBeforeNext ${r.msBeforeNext}`);
      }
      assert.strictEqual(await commandCalls(conn.client, 'RL.FIXEDWINDOW'), calls, 'a blocked key reached Redis');
      assert.ok(rl.getInMemoryBlockMsBeforeExpire(rl.getKey('u')) > 59000);
      // delete() also lifts the in-memory block.
      await rl.delete('u');
      assert.strictEqual((await rl.consume('u')).remainingPoints, 1);

      // With inMemoryBlockDuration: a refusal blocks for that long (gcra: the bucket alone would pass sooner).
      const timed = new RateLimiterRedisModule({
        storeClient: conn.client, keyPrefix: prefix('md'), points: 1, duration: 0.2, algorithm: 'gcra', inMemoryBlockOnConsumed: 1, inMemoryBlockDuration: 5,
      });
      await timed.consume('v');
      const refused = await timed.consume('v').then(() => null, (e) => e);
      assert.strictEqual(refused.msBeforeNext, 5000);
      await sleep(250); // the limiter itself would allow again
      const blocked = await timed.consume('v').then(() => null, (e) => e);
      assert.ok(blocked instanceof RateLimiterRes && blocked.msBeforeNext > 4000, String(blocked));

      assert.throws(() => new RateLimiterRedisModule({ storeClient: conn.client, points: 5, inMemoryBlockOnConsumed: 4 }), /inMemoryBlockOnConsumed/);
      assert.throws(() => new RateLimiterRedisModule({ storeClient: conn.client, inMemoryBlockDuration: 4 }), /inMemoryBlockOnConsumed/);
    });
  });
}

test('insuranceLimiter: when Redis cannot decide, rate-limiter-flexible\'s RateLimiterMemory decides instead', async () => {
  const Redis = require('ioredis');
  const c = new Redis({ host: '127.0.0.1', port: await freePort(), maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  c.on('error', () => {});
  try {
    const insurance = new RateLimiterMemory({ points: 2, duration: 10 });
    const rl = new RateLimiterRedisModule({ storeClient: c, points: 10, duration: 10, blockDuration: 30, insuranceLimiter: insurance });
    assert.strictEqual(insurance.blockDuration, 30, 'the insurance limiter takes the blockDuration');
    assert.strictEqual((await rl.consume('u')).remainingPoints, 1);
    assert.strictEqual((await rl.consume('u')).remainingPoints, 0);
    const refused = await rl.consume('u').then(() => null, (e) => e);
    assert.ok(refused && refused.remainingPoints === 0 && refused.msBeforeNext > 29000, `refused with ${refused}`);
    assert.strictEqual((await rl.get('u')).consumedPoints, 3);
    assert.strictEqual(await rl.delete('u'), true);
    assert.strictEqual(await rl.get('u'), null);
    // A union whose limiters all have one: each insurance limiter is consumed.
    const other = new RateLimiterRedisModule({ storeClient: c, keyPrefix: 'o', points: 10, duration: 10, insuranceLimiter: new RateLimiterMemory({ points: 1, duration: 10 }) });
    const union = new RateLimiterUnion(rl, other);
    assert.deepStrictEqual(Object.keys(await union.consume('w')).sort(), ['o', 'rlflx']);
    const unionRefused = await union.consume('w').then(() => null, (e) => e);
    assert.deepStrictEqual(Object.keys(unionRefused), ['o']);
  } finally {
    c.disconnect();
  }
});

test('a store error rejects with an Error, not a RateLimiterRes', async () => {
  const Redis = require('ioredis');
  const c = new Redis({ host: '127.0.0.1', port: await freePort(), maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  c.on('error', () => {});
  try {
    const rl = new RateLimiterRedisModule({ storeClient: c, timeoutMs: 200 });
    const err = await rl.consume('u').then(() => null, (e) => e);
    assert.ok(err instanceof Error && !(err instanceof RateLimiterRes), String(err));
    // A union of limiters without insurance: the same Error.
    const union = new RateLimiterUnion(rl, new RateLimiterRedisModule({ storeClient: c, keyPrefix: 'x' }));
    const unionErr = await union.consume('u').then(() => null, (e) => e);
    assert.ok(unionErr instanceof Error && !(unionErr instanceof RateLimiterRes), String(unionErr));
  } finally {
    c.disconnect();
  }
});
