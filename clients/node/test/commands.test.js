'use strict';
// One method per command, typed results and headers, through each client library.
const { test, describe, before, beforeEach, after } = require('node:test');
const assert = require('node:assert');
const { startRedis, CLIENTS, TEST_ENGINE, awayFromWindowEnd } = require('./helpers');
const { RateLimit, RateLimitResult, RateLimitUnavailableError } = require('..');

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`commands through ${clientName}`, () => {
    let conn;
    let rl;
    const k = (name) => `t:${clientName}:${name}`;
    before(async () => {
      conn = await lib.connect(redis.port);
      rl = new RateLimit(conn.client);
    });
    after(async () => {
      await conn.close();
    });
    // Its counts in 60 s fixed windows stay inside one window.
    beforeEach(() => awayFromWindowEnd(redis.port, 60));

    test('gcra: a typed result, then limited with retryAfterMs', async () => {
      const first = await rl.gcra(k('gcra'), 4, 10, 1);
      assert.ok(first instanceof RateLimitResult);
      assert.deepStrictEqual({ ...first }, { limited: false, limit: 5, remaining: 4, retryAfterMs: -1, resetAfterMs: 100 });
      assert.strictEqual(first.allowed, true);
      const burst = await rl.gcra(k('gcra'), 4, 10, 1, { tokens: 4 });
      assert.strictEqual(burst.remaining, 0);
      const refused = await rl.gcra(k('gcra'), 4, 10, 1);
      assert.strictEqual(refused.limited, true);
      assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 100, `retryAfterMs ${refused.retryAfterMs}`);
    });

    test('headers(): RateLimit-Policy, RateLimit, Retry-After only when limited', async () => {
      const ok = await rl.gcra(k('h'), 4, 10, 1, { name: 'api' });
      assert.deepStrictEqual(ok.headers(), { 'RateLimit-Policy': '"api";q=5;w=1', RateLimit: '"api";r=4;t=1' });
      await rl.gcra(k('h'), 4, 10, 1, { tokens: 4 });
      const no = await rl.gcra(k('h'), 4, 10, 1, { name: 'api' });
      const h = no.headers({ legacy: true });
      assert.strictEqual(h['Retry-After'], '1');
      assert.strictEqual(h.RateLimit, '"api";r=0;t=1');
      assert.strictEqual(h['X-RateLimit-Limit'], '5');
      // A cost above the limit can never pass: no Retry-After.
      const never = await rl.gcra(k('h2'), 4, 10, 1, { tokens: 6 });
      assert.strictEqual(never.limited, true);
      assert.strictEqual(never.retryAfterMs, -1);
      assert.strictEqual(never.headers()['Retry-After'], undefined);
    });

    test('tokenBucket, leakyBucket, fixedWindow, slidingWindow, slidingLog', async () => {
      const tb = await rl.tokenBucket(k('tb'), 10, 1, 1);
      assert.deepStrictEqual([tb.limited, tb.limit, tb.remaining], [false, 10, 9]);
      assert.strictEqual(tb.headers()['RateLimit-Policy'], '"tokenBucket";q=10;w=10');
      const lb = await rl.leakyBucket(k('lb'), 5, 1, 1);
      assert.deepStrictEqual([lb.limited, lb.limit, lb.retryAfterMs], [false, 5, 0]);
      const lb2 = await rl.leakyBucket(k('lb'), 5, 1, 1);
      assert.ok(lb2.retryAfterMs > 0, 'a leaky bucket delays the second request');
      for (const [name, call] of [
        ['fixedWindow', (o) => rl.fixedWindow(k('fw'), 3, 60, o)],
        ['fixedWindow first', (o) => rl.fixedWindow(k('fwf'), 3, 60, { align: 'first', ...o })],
        ['slidingWindow', (o) => rl.slidingWindow(k('sw'), 3, 60, o)],
        ['slidingWindow buckets', (o) => rl.slidingWindow(k('swb'), 3, 60, { buckets: 10, ...o })],
        ['slidingLog', (o) => rl.slidingLog(k('sl'), 3, 60, o)],
      ]) {
        const got = [];
        for (let i = 0; i < 4; i++) got.push((await call()).limited);
        assert.deepStrictEqual(got, [false, false, false, true], name);
        const r = await call({ peek: true });
        assert.strictEqual(r.limited, true, `${name} peek`);
        assert.ok(r.retryAfterMs > 0 && r.retryAfterMs <= 120000, `${name} retryAfterMs ${r.retryAfterMs}`);
        assert.strictEqual(r.headers()['RateLimit-Policy'], `"${name.split(' ')[0]}";q=3;w=60`);
      }
    });

    test('refund, peek and block', async () => {
      await rl.fixedWindow(k('r'), 3, 60, { tokens: 3 });
      assert.strictEqual((await rl.fixedWindow(k('r'), 3, 60, { peek: true })).limited, true);
      const back = await rl.fixedWindow(k('r'), 3, 60, { refund: 2 });
      assert.deepStrictEqual([back.limited, back.remaining], [false, 2]);
      await rl.gcra(k('b'), 0, 1, 1);
      const blocked = await rl.gcra(k('b'), 0, 1, 1, { block: 30 });
      assert.strictEqual(blocked.limited, true);
      assert.ok(blocked.retryAfterMs >= 30000, `blocked for ${blocked.retryAfterMs} ms`);
      const during = await rl.gcra(k('b'), 0, 1, 1);
      assert.ok(during.limited && during.retryAfterMs > 29000, `still blocked: ${during.retryAfterMs} ms`);
    });

    test('all(): all or nothing, `which` is the binding limit', async () => {
      const limits = [
        { key: k('all:sec'), type: 'gcra', maxBurst: 9, tokensPerPeriod: 10, period: 1 },
        { key: k('all:min'), type: 'fixedWindow', limit: 2, window: 60, label: 'per-minute' },
      ];
      const a = await rl.all(limits);
      assert.deepStrictEqual([a.limited, a.which, a.remaining], [false, 1, 1]);
      assert.strictEqual(a.whichKey, k('all:min'));
      await rl.all(limits);
      const no = await rl.all(limits);
      assert.deepStrictEqual([no.limited, no.which], [true, 1]);
      assert.strictEqual(no.headers()['RateLimit-Policy'], '"per-minute";q=2;w=60');
      // Nothing was taken from the per-second limit by the refusal.
      assert.strictEqual((await rl.gcra(k('all:sec'), 9, 10, 1, { peek: true })).remaining, 7);
      await assert.rejects(rl.all([{ key: 'x', type: 'leakyBucket', capacity: 1, leakTokens: 1, leakPeriod: 1 }]), TypeError);
    });

    test('limit(policy, key): RL.LIMIT, with the window from RL.POLICY GET', { skip: TEST_ENGINE !== 'module' && 'policies are module data' }, async () => {
      await rl.command('RL.POLICY', 'SET', `p-${clientName.replace(/\W/g, '')}`, 'SLIDINGWINDOW', 2, 10);
      const policy = `p-${clientName.replace(/\W/g, '')}`;
      const r = await rl.limit(policy, k('pol'));
      assert.deepStrictEqual([r.limited, r.limit, r.remaining], [false, 2, 1]);
      assert.strictEqual(r.headers()['RateLimit-Policy'], `"${policy}";q=2;w=10`);
      await rl.limit(policy, k('pol'));
      assert.strictEqual((await rl.limit(policy, k('pol'))).limited, true);
      await assert.rejects(rl.limit('no-such-policy', k('pol')), /unknown policy/);
    });

    test('a bad call rejects with the server error, not as unavailable', async () => {
      const err = await rl.gcra(k('bad'), 4, 10, 0).then(() => null, (e) => e);
      assert.ok(err && /period must be/.test(err.message), String(err));
      assert.ok(!(err instanceof RateLimitUnavailableError));
    });
  });
}

test('a server without the module: RateLimitUnavailableError reason no-module', async () => {
  const plain = await startRedis({ withModule: false, scripts: false });
  try {
    for (const lib of Object.values(CLIENTS)) {
      const conn = await lib.connect(plain.port);
      const err = await new RateLimit(conn.client).gcra('k', 1, 1, 1).then(() => null, (e) => e);
      assert.ok(err instanceof RateLimitUnavailableError, String(err));
      assert.strictEqual(err.reason, 'no-module');
      await conn.close();
    }
  } finally {
    await plain.stop();
  }
});

test('a function as the client (engine forced to the module: no detection sent)', async () => {
  const seen = [];
  const rl = new RateLimit(
    async (args) => {
      seen.push(args);
      return [0, 5, 4, -1, 100];
    },
    { engine: 'module' },
  );
  assert.strictEqual(rl.engine, 'module');
  const r = await rl.gcra('k', 4, 10, 1, { tokens: 2, block: 5 });
  assert.deepStrictEqual(seen, [['RL.GCRA', 'k', 4, 10, 1, 'TOKENS', 2, 'BLOCK', 5]]);
  assert.strictEqual(r.remaining, 4);
});

test('a function as the client, engine auto: COMMAND INFO rl.gcra first, once', async () => {
  const seen = [];
  const rl = new RateLimit(async (args) => {
    seen.push(args);
    return args[0] === 'COMMAND' ? [['rl.gcra', -5]] : [0, 5, 4, -1, 100];
  });
  assert.strictEqual(rl.engine, null);
  await Promise.all([rl.gcra('k', 4, 10, 1), rl.gcra('k', 4, 10, 1)]);
  assert.strictEqual(rl.engine, 'module');
  assert.deepStrictEqual(seen.map((a) => a[0]), ['COMMAND', 'RL.GCRA', 'RL.GCRA']);
});
