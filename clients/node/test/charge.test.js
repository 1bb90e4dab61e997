'use strict';
// Charging what was used (FORCE): the `force` option, charge(), the Express
// middleware's `charge(req, res)` (checked before the handler, charged when
// the response is done) and rate-limiter-flexible's penalty(). The scenario of
// a 1,000-token budget whose responses cost 600 each: check-then-charge serves
// 2 requests, not 10 (a refused charge that took nothing served them all).
const { test, describe, before, beforeEach, after } = require('node:test');
const assert = require('node:assert');
const express = require('express');
const { startRedis, CLIENTS, request, listen, sleep, awayFromWindowEnd } = require('./helpers');
const { RateLimit, rateLimit, RateLimiterRedisModule } = require('..');

const BUDGET = { type: 'fixedWindow', limit: 1000, window: 60 };

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`charging through ${clientName}`, () => {
    let conn;
    const k = (name) => `${name}:${clientName.replace(/\W/g, '')}`;
    before(async () => {
      conn = await lib.connect(redis.port);
    });
    after(async () => {
      await conn.close();
    });
    // Its counts in 60 s fixed windows stay inside one window.
    beforeEach(() => awayFromWindowEnd(redis.port, 60));

    test('charge() records past the limit; ordinary calls wait for the debt', async () => {
      const rl = new RateLimit(conn.client);
      const first = await rl.charge(k('budget'), BUDGET, 600);
      assert.deepStrictEqual([first.limited, first.remaining], [false, 400]);
      const second = await rl.charge(k('budget'), BUDGET, 600); // 200 past the limit
      assert.deepStrictEqual([second.limited, second.remaining], [true, 0]);
      assert.ok(second.retryAfterMs > 0);
      assert.strictEqual((await rl.check(k('budget'), BUDGET, { peek: true })).limited, true);
      assert.strictEqual((await rl.fixedWindow(k('budget'), 1000, 60)).limited, true);
      assert.strictEqual(await rl.charge(k('budget'), BUDGET, 0), null);
      // Without force the charge that does not fit takes nothing: the leak.
      assert.strictEqual((await rl.fixedWindow(k('leaky'), 1000, 60, { tokens: 600 })).limited, false);
      assert.strictEqual((await rl.fixedWindow(k('leaky'), 1000, 60, { tokens: 600 })).limited, true);
      assert.strictEqual((await rl.fixedWindow(k('leaky'), 1000, 60, { peek: true })).limited, false);
    });

    test('force on RL.ALL follows each limit; force with peek or refund is a TypeError', async () => {
      const rl = new RateLimit(conn.client);
      const limits = [
        { key: k('a1'), type: 'gcra', maxBurst: 9, tokensPerPeriod: 10, period: 1 },
        { key: k('a2'), type: 'fixedWindow', limit: 5, window: 60, align: 'epoch' },
      ];
      assert.strictEqual((await rl.all(limits, { tokens: 7, force: true })).limited, true);
      assert.strictEqual((await rl.fixedWindow(k('a2'), 5, 60)).limited, true);
      assert.strictEqual((await rl.gcra(k('a1'), 9, 10, 1, { tokens: 4 })).limited, true);
      await assert.rejects(rl.fixedWindow(k('x'), 5, 60, { force: true, peek: true }), TypeError);
      await assert.rejects(rl.fixedWindow(k('x'), 5, 60, { force: true, refund: 1 }), TypeError);
    });

    test('Express: charge(req, res) checks before the handler and charges the response', async () => {
      const app = express();
      app.use(
        '/llm',
        rateLimit({
          client: conn.client,
          limit: BUDGET,
          name: k('llm'),
          key: () => 'tenant',
          charge: (req, res) => Number(res.getHeader('x-llm-tokens') ?? 0),
        }),
      );
      app.get('/llm', (req, res) => {
        res.setHeader('x-llm-tokens', '600');
        res.end('a completion\n');
      });
      const server = await listen(app);
      const rl = new RateLimit(conn.client);
      const peek = async () => {
        const r = await rl.check(`rl:${k('llm')}:tenant`, BUDGET, { peek: true });
        return `${r.limited}:${r.remaining}`;
      };
      try {
        const statuses = [];
        for (let i = 0; i < 10; i++) {
          const before = await peek();
          const { status } = await request(server.port, { path: '/llm' });
          statuses.push(status);
          // The charge is sent once the response has finished: wait for it to land.
          for (let t = 0; status === 200 && t < 100 && (await peek()) === before; t++) await sleep(20);
        }
        assert.deepStrictEqual(statuses, [200, 200, 429, 429, 429, 429, 429, 429, 429, 429]);
      } finally {
        await server.close();
      }
    });

    test("rate-limiter-flexible's penalty: points added whatever the limit says", async () => {
      // rate-limiter-flexible's 'makes penalty' (its store reads 2; get() here).
      const rl = new RateLimiterRedisModule({ storeClient: conn.client, keyPrefix: k('pen'), points: 3, duration: 5 });
      await rl.consume('penalty1');
      await rl.penalty('penalty1');
      assert.strictEqual((await rl.get('penalty1')).consumedPoints, 2);
      // Past the limit: a debt, consumes refused until it is repaid.
      const res = await rl.penalty('penalty1', 5);
      assert.strictEqual(res.remainingPoints, 0);
      const rej = await rl.consume('penalty1').then(() => assert.fail('must not resolve'), (r) => r);
      assert.ok(rej.msBeforeNext > 0, JSON.stringify(rej));
    });
  });
}
