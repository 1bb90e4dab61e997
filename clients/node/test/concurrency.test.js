'use strict';
// Concurrency limits (RL.CONCURRENCY, issue 32) against a real server, on the
// engine of the suite (the module, or the Functions library's rl_concurrency):
// acquire → a Lease with release() (once) and renew(), auto-renew, a holder
// that never releases, 50 concurrent workers never more than `limit` in
// flight, and the Express middleware releasing on finish and on close.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const express = require('express');
const { startRedis, CLIENTS, listen, request, sleep, raw, hungServer, TEST_ENGINE } = require('./helpers');
const { RateLimit, Lease, concurrencyLimit } = require('..');
const { libraryCallOf } = require('../lib/engine');

let redis;
const cleanups = [];
before(async () => {
  redis = await startRedis();
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
  await redis.stop();
});

test('RL.CONCURRENCY goes to the library as rl_concurrency (key first)', () => {
  assert.deepStrictEqual(libraryCallOf(['RL.CONCURRENCY', 'k', 3, 30, 'ACQUIRE', 'a', 'TOKENS', 2]), {
    fname: 'rl_concurrency',
    keys: ['k'],
    rest: [3, 30, 'ACQUIRE', 'a', 'TOKENS', 2],
  });
});

test('acquire() checks its options before sending anything', async () => {
  let sent = 0;
  const rl = new RateLimit(async () => {
    sent++;
    return [0, 1, 0, -1, 1000];
  }, { engine: 'module' });
  await assert.rejects(rl.acquire('k', { lease: 1 }), /needs 'limit'/);
  await assert.rejects(rl.acquire('k', { limit: 1 }), /needs 'lease'/);
  await assert.rejects(rl.acquire('k', { limit: 1, lease: 1, id: '' }), /lease id/);
  await assert.rejects(rl.acquire('k', { limit: 1, lease: 1, autoRenew: -1 }), /autoRenew/);
  await assert.rejects(rl.release('k', undefined, { limit: 1, lease: 1 }), /lease id/);
  assert.strictEqual(sent, 0);
});

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`leases through ${clientName}`, () => {
    let conn;
    let rl;
    before(async () => {
      conn = await lib.connect(redis.port);
      cleanups.push(conn.close);
      rl = new RateLimit(conn.client);
    });

    test('acquire, refusal, release (once), renew', async () => {
      const key = `lease:${clientName}`;
      const a = await rl.acquire(key, { limit: 2, lease: 30, id: 'a' });
      assert.ok(a instanceof Lease);
      assert.strictEqual(rl.engine, TEST_ENGINE);
      assert.deepStrictEqual([a.allowed, a.held, a.limit, a.remaining, a.retryAfterMs, a.id], [true, true, 2, 1, -1, 'a']);
      assert.ok(a.resetAfterMs > 29_000 && a.resetAfterMs <= 30_000, String(a.resetAfterMs));
      const b = await rl.acquire(key, { limit: 2, lease: 30 });
      assert.match(b.id, /^[0-9a-f-]{36}$/); // a random UUID
      assert.strictEqual(b.remaining, 0);
      const c = await rl.acquire(key, { limit: 2, lease: 30 });
      assert.deepStrictEqual([c.allowed, c.limited, c.held, c.remaining], [false, true, false, 0]);
      assert.ok(c.retryAfterMs > 29_000 && c.retryAfterMs <= 30_000, String(c.retryAfterMs));
      assert.strictEqual(await c.release(), null); // nothing held: nothing sent
      // Acquiring a held id again renews it: no second slot.
      assert.strictEqual((await rl.acquire(key, { limit: 2, lease: 30, id: 'a' })).remaining, 0);

      const renewed = await a.renew();
      assert.deepStrictEqual([renewed.limited, renewed.remaining], [false, 0]);
      const [r1, r2] = await Promise.all([a.release(), a.release()]);
      assert.strictEqual(r1, r2);
      assert.strictEqual(r1.remaining, 1);
      assert.strictEqual(a.release(), a.release()); // the same promise every time
      assert.deepStrictEqual([a.released, a.held], [true, false]);
      // a's slot is b's to lose: a renew of a released lease is refused.
      const late = await a.renew();
      assert.deepStrictEqual([late.limited, late.retryAfterMs], [true, -1]);
      assert.strictEqual(a.lost, false); // released, not lost
      assert.strictEqual((await b.release()).remaining, 2);
      assert.strictEqual(await raw(conn.client)('EXISTS', key), 1 - 1); // no lease left: no key
    });

    test('TOKENS, PEEK, and release/renew by id', async () => {
      const key = `tokens:${clientName}`;
      const big = await rl.acquire(key, { limit: 5, lease: 30, tokens: 3, id: 'big' });
      assert.deepStrictEqual([big.allowed, big.tokens, big.remaining], [true, 3, 2]);
      const peek = await rl.acquire(key, { limit: 5, lease: 30, tokens: 3, peek: true });
      assert.deepStrictEqual([peek.allowed, peek.held], [false, false]);
      const never = await rl.acquire(key, { limit: 5, lease: 30, tokens: 6 });
      assert.deepStrictEqual([never.limited, never.retryAfterMs], [true, -1]);
      assert.strictEqual((await rl.renew(key, 'big', { limit: 5, lease: 30 })).limited, false);
      assert.strictEqual((await rl.release(key, 'big', { limit: 5, lease: 30 })).remaining, 5);
      assert.strictEqual((await rl.release(key, 'unknown', { limit: 5, lease: 30 })).remaining, 5);
    });
  });
}

test('all(): a rate limit and a lease, all or nothing (a refused call takes no slot)', async () => {
  const conn = await CLIENTS.ioredis.connect(redis.port);
  cleanups.push(conn.close);
  const rl = new RateLimit(conn.client);
  const limits = (id) => [
    { key: '{t:7}:rate', type: 'gcra', maxBurst: 0, tokensPerPeriod: 1, period: 60 },
    { key: '{t:7}:running', type: 'concurrency', limit: 3, lease: 30, id },
  ];
  const first = await rl.all(limits('job-1'));
  assert.strictEqual(first.allowed, true);
  const second = await rl.all(limits('job-2'));
  assert.deepStrictEqual([second.limited, second.which, second.whichKey], [true, 0, '{t:7}:rate']);
  const params = { limit: 3, lease: 30 };
  assert.strictEqual((await rl.release('{t:7}:running', 'nobody', params)).remaining, 2, 'only job-1 holds a slot');
  assert.strictEqual((await rl.release('{t:7}:running', 'job-1', params)).remaining, 3);
  await assert.rejects(rl.all([{ key: 'x', type: 'concurrency', limit: 1, lease: 1 }]), /needs 'id'/);
});

for (const engine of ['functions', 'eval']) {
  test(`acquire and release through the ${engine} engine, forced`, async () => {
    const conn = await CLIENTS['node-redis'].connect(redis.port);
    cleanups.push(conn.close);
    const rl = new RateLimit(conn.client, { engine });
    const key = `forced:${engine}`;
    const a = await rl.acquire(key, { limit: 1, lease: 30 });
    assert.deepStrictEqual([rl.engine, a.allowed, a.remaining], [engine, true, 0]);
    assert.strictEqual((await rl.acquire(key, { limit: 1, lease: 30 })).limited, true);
    assert.strictEqual((await a.release()).remaining, 1);
  });
}

describe('leases in time', () => {
  let conn;
  let rl;
  before(async () => {
    conn = await CLIENTS['node-redis'].connect(redis.port);
    cleanups.push(conn.close);
    rl = new RateLimit(conn.client);
  });

  test('a holder that never releases frees its slot after the lease', async () => {
    const key = 'crashed';
    const held = await rl.acquire(key, { limit: 1, lease: 0.15 });
    assert.ok(held.allowed);
    const refused = await rl.acquire(key, { limit: 1, lease: 0.15 });
    assert.ok(refused.limited);
    assert.ok(refused.retryAfterMs >= 1 && refused.retryAfterMs <= 150, String(refused.retryAfterMs));
    await sleep(refused.retryAfterMs + 20);
    assert.ok((await rl.acquire(key, { limit: 1, lease: 0.15 })).allowed);
    const lost = await held.renew();
    assert.strictEqual(lost.limited, true);
    assert.strictEqual(held.lost, true);
  });

  test('auto-renew keeps a lease past its lease time, and stops on release', async () => {
    const key = 'long-work';
    const lease = await rl.acquire(key, { limit: 1, lease: 0.15, autoRenew: true });
    assert.ok(lease.held);
    assert.strictEqual(lease._timer.hasRef(), false, "the timer keeps no process alive");
    await sleep(500); // more than three lease times
    const other = await rl.acquire(key, { limit: 1, lease: 0.15 });
    assert.strictEqual(other.limited, true, 'the auto-renewed lease still holds the slot');
    assert.ok(lease.held);
    await lease.release();
    assert.strictEqual(lease._timer, null);
    assert.ok((await rl.acquire(key, { limit: 1, lease: 0.15, id: 'next' })).allowed);
    await rl.release(key, 'next', { limit: 1, lease: 0.15 });
  });

  test('auto-renew tells onLost when the lease is gone, and stops', async () => {
    const key = 'stolen';
    let lostWith = null;
    const lease = await rl.acquire(key, { limit: 1, lease: 0.15, autoRenew: 0.03, onLost: (r) => (lostWith = r) });
    await rl.release(key, lease.id, { limit: 1, lease: 0.15 }); // released behind its back
    for (let i = 0; i < 50 && lostWith === null; i++) await sleep(10);
    assert.ok(lostWith && lostWith.limited, 'onLost was called with the refused renew');
    assert.deepStrictEqual([lease.lost, lease.held, lease._timer], [true, false, null]);
  });

  test('50 concurrent workers: never more than `limit` in flight, and no slot lost', async () => {
    const limit = 4;
    const key = 'storm';
    const conns = await Promise.all(Array.from({ length: 5 }, () => CLIENTS.ioredis.connect(redis.port)));
    cleanups.push(...conns.map((c) => c.close));
    const limiters = conns.map((c) => new RateLimit(c.client, { timeoutMs: 5000 }));
    let inFlight = 0;
    let maxInFlight = 0;
    let violations = 0;
    let acquired = 0;
    const worker = async (w) => {
      const limiter = limiters[w % limiters.length];
      for (let i = 0; i < 30; i++) {
        const lease = await limiter.acquire(key, { limit, lease: 10 });
        if (!lease.allowed) {
          await sleep(1);
          continue;
        }
        acquired++;
        inFlight++;
        if (inFlight > limit) violations++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await sleep(Math.random() * 3);
        inFlight--; // before the slot is given back
        await lease.release();
      }
    };
    await Promise.all(Array.from({ length: 50 }, (_, w) => worker(w)));
    assert.strictEqual(violations, 0, `max in flight ${maxInFlight} > ${limit}`);
    assert.strictEqual(maxInFlight, limit, 'the limit was reached');
    assert.ok(acquired > 100, `only ${acquired} acquisitions`);
    const after = await rl.release(key, 'nobody', { limit, lease: 10 }); // an unknown id: what is free
    assert.strictEqual(after.remaining, limit, 'every slot came back');
  });
});

describe('concurrencyLimit middleware', () => {
  let conn;
  let sent; // RL.CONCURRENCY operations sent, by kind
  before(async () => {
    conn = await CLIENTS['node-redis'].connect(redis.port);
    cleanups.push(conn.close);
  });

  // A client that counts the RELEASEs it sends (through either engine: the words stay in the call).
  function countingClient() {
    sent = { ACQUIRE: 0, RELEASE: 0 };
    const send = raw(conn.client);
    return (args) => {
      for (const op of ['ACQUIRE', 'RELEASE']) if (args.includes(op)) sent[op]++;
      return send(...args);
    };
  }

  // An app whose handler holds each request until the test lets it go.
  function gatedApp(options) {
    const waiting = [];
    const a = express();
    a.use(concurrencyLimit({ client: countingClient(), key: (req) => req.get('x-user'), ...options }));
    a.get('/hold', (req, res) => {
      waiting.push(() => res.send('done'));
    });
    a.get('/fail', () => {
      throw new Error('boom');
    });
    a.get('/', (req, res) => res.send('ok'));
    a.use((err, req, res, _next) => res.status(500).send(`error: ${err.message}`));
    return { app: a, waiting };
  }

  async function free(key, limit) {
    // Releasing an id that holds nothing answers what is free, and writes nothing.
    return (await new RateLimit(conn.client).release(key, 'nobody', { limit, lease: 60 })).remaining;
  }

  async function until(cond, what) {
    for (let i = 0; i < 200; i++) {
      if (await cond()) return;
      await sleep(10);
    }
    assert.fail(`timed out waiting for ${what}`);
  }

  test('holds a slot per request, refuses with 429, releases on finish (exactly once)', async () => {
    const { app, waiting } = gatedApp({ limit: 2, name: 'fin' });
    const server = await listen(app);
    cleanups.push(server.close);
    const h = { 'X-User': 'ann' };
    const held = [request(server.port, { path: '/hold', headers: h }), request(server.port, { path: '/hold', headers: h })];
    await until(() => waiting.length === 2, 'two requests in the handler');
    assert.strictEqual(await free('rl:conc:fin:ann', 2), 0);
    const refused = await request(server.port, { headers: h });
    assert.deepStrictEqual([refused.status, refused.headers['retry-after']], [429, '1']);
    assert.strictEqual((await request(server.port, { headers: { 'X-User': 'bob' } })).status, 200); // another key
    for (const go of waiting.splice(0)) go();
    assert.deepStrictEqual((await Promise.all(held)).map((r) => r.status), [200, 200]);
    await until(async () => (await free('rl:conc:fin:ann', 2)) === 2, 'both slots back');
    assert.strictEqual((await request(server.port, { headers: h })).status, 200);
    await sleep(20); // any second release would have been sent by now
    // 5 acquisitions (one refused), 4 slots held: 4 RELEASEs, though finish and close both fired.
    assert.deepStrictEqual(sent, { ACQUIRE: 5, RELEASE: 4 });
  });

  test('releases on close when the client aborts', async () => {
    const { app, waiting } = gatedApp({ limit: 1, name: 'abort' });
    const server = await listen(app);
    cleanups.push(server.close);
    const req = http.get({ host: '127.0.0.1', port: server.port, path: '/hold', headers: { 'X-User': 'cy' }, agent: false });
    req.on('error', () => {});
    await until(() => waiting.length === 1, 'the request in the handler');
    assert.strictEqual(await free('rl:conc:abort:cy', 1), 0);
    req.destroy(); // the client goes away before any answer
    await until(async () => (await free('rl:conc:abort:cy', 1)) === 1, 'the slot back after the abort');
    waiting[0](); // the handler answers late: no second release
    await sleep(30);
    assert.deepStrictEqual(sent, { ACQUIRE: 1, RELEASE: 1 });
    assert.strictEqual((await request(server.port, { headers: { 'X-User': 'cy' } })).status, 200);
  });

  test('a custom handler refuses; errors go to next(err); the slot of a failed request comes back', async () => {
    const { app, waiting } = gatedApp({
      limit: 1,
      name: 'h',
      handler: (req, res, next, lease) => res.status(503).json({ retryAfterMs: lease.retryAfterMs, free: lease.remaining }),
    });
    const server = await listen(app);
    cleanups.push(server.close);
    const h = { 'X-User': 'dee' };
    const failed = await request(server.port, { path: '/fail', headers: h });
    assert.deepStrictEqual([failed.status, failed.body], [500, 'error: boom']);
    await until(async () => (await free('rl:conc:h:dee', 1)) === 1, 'the failed request slot back');
    const held = request(server.port, { path: '/hold', headers: h });
    await until(() => waiting.length === 1, 'the request in the handler');
    const refused = await request(server.port, { headers: h });
    assert.strictEqual(refused.status, 503);
    assert.strictEqual(JSON.parse(refused.body).free, 0);
    waiting[0]();
    assert.strictEqual((await held).status, 200);

    const throwing = express();
    throwing.use(concurrencyLimit({ client: conn.client, limit: 1, key: () => {
      throw new Error('no key');
    } }));
    throwing.use((err, req, res, _next) => res.status(500).send(`error: ${err.message}`));
    const s2 = await listen(throwing);
    cleanups.push(s2.close);
    const r = await request(s2.port);
    assert.deepStrictEqual([r.status, r.body], [500, 'error: no key']);
  });

  test('Redis unavailable: fail open (no slot), or 503 with failOpen false; onUnavailable told', async () => {
    const hung = await hungServer();
    cleanups.push(hung.close);
    const Redis = require('ioredis');
    const client = new Redis({ host: '127.0.0.1', port: hung.port, lazyConnect: true, maxRetriesPerRequest: 0 });
    client.on('error', () => {});
    cleanups.push(() => client.disconnect());
    const told = [];
    const make = (failOpen) => {
      const a = express();
      a.use(concurrencyLimit({ client, limit: 1, timeoutMs: 50, failOpen, engine: 'module', onUnavailable: (err) => told.push(err.reason) }));
      a.get('/', (req, res) => res.send(req.concurrency ? 'slot' : 'no slot'));
      return a;
    };
    const open = await listen(make(true));
    const closed = await listen(make(false));
    cleanups.push(open.close, closed.close);
    const r1 = await request(open.port);
    assert.deepStrictEqual([r1.status, r1.body], [200, 'no slot']);
    const r2 = await request(closed.port);
    assert.deepStrictEqual([r2.status, r2.headers['retry-after']], [503, '1']);
    assert.deepStrictEqual(told, ['timeout', 'timeout']);
  });
});
