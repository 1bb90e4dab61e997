'use strict';
// The Express middleware against a real server: concurrency, per-route rules,
// the denial cache, fail-open/fail-closed on a hung Redis, a server without
// the module and a refused connection (never a 500).
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const express = require('express');
const { startRedis, CLIENTS, request, listen, hungServer, freePort, commandCalls, sleep } = require('./helpers');
const { rateLimit, ipKeyGenerator } = require('..');

let redis;
const cleanups = [];
before(async () => {
  redis = await startRedis();
});
after(async () => {
  for (const c of cleanups.reverse()) await c();
  await redis.stop();
});

function app(middleware) {
  const a = express();
  a.use(middleware);
  a.get('/{*any}', (req, res) => res.send('ok'));
  a.post('/{*any}', (req, res) => res.send('ok'));
  return a;
}

const user = (req) => req.get('x-user') ?? ipKeyGenerator(req.ip);

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`middleware through ${clientName}`, () => {
    let conn;
    before(async () => {
      conn = await lib.connect(redis.port);
      cleanups.push(conn.close);
    });

    test('20 concurrent clients: exactly `limit` admitted', async () => {
      const limit = 7;
      const server = await listen(
        app(rateLimit({ client: conn.client, key: user, prefix: `c:${clientName}:`, limit: { type: 'slidingLog', limit, window: 60 }, name: 'burst' })),
      );
      cleanups.push(server.close);
      const replies = await Promise.all(
        Array.from({ length: 20 }, () => request(server.port, { headers: { 'X-User': 'crowd' } })),
      );
      const statuses = replies.map((r) => r.status);
      assert.strictEqual(statuses.filter((s) => s === 200).length, limit, statuses.join(' '));
      assert.strictEqual(statuses.filter((s) => s === 429).length, 20 - limit, statuses.join(' '));
      const refused = replies.find((r) => r.status === 429);
      assert.strictEqual(refused.headers['ratelimit-policy'], `"burst";q=${limit};w=60`);
      assert.match(refused.headers.ratelimit, /^"burst";r=0;t=\d+$/);
      assert.ok(Number(refused.headers['retry-after']) >= 1);
      const admitted = replies.find((r) => r.status === 200);
      assert.match(admitted.headers.ratelimit, /^"burst";r=\d;t=\d+$/);
    });

    test('per-route rules: each route its own limit, overlapping rules decided together', async () => {
      const server = await listen(
        app(
          rateLimit({
            client: conn.client,
            key: user,
            prefix: `r:${clientName}:`,
            rules: [
              { name: 'login', path: '/login', method: 'POST', limit: { type: 'fixedWindow', limit: 2, window: 60 } },
              { name: 'api', path: '/api', limit: { type: 'gcra', maxBurst: 3, tokensPerPeriod: 1, period: 60 } },
              { name: 'all', limit: { type: 'slidingWindow', limit: 6, window: 60 } },
            ],
          }),
        ),
      );
      cleanups.push(server.close);
      const h = { 'X-User': 'dora' };
      // POST /login: rules login + all (RL.ALL); login binds at 2.
      const login = [];
      for (let i = 0; i < 3; i++) login.push(await request(server.port, { path: '/login', method: 'POST', headers: h }));
      assert.deepStrictEqual(login.map((r) => r.status), [200, 200, 429]);
      assert.strictEqual(login[2].headers['ratelimit-policy'], '"login";q=2;w=60');
      // GET /login is not POST: only `all` (2 used of 6 so far).
      const get = await request(server.port, { path: '/login', headers: h });
      assert.strictEqual(get.status, 200);
      assert.strictEqual(get.headers['ratelimit-policy'], '"all";q=6;w=60');
      assert.strictEqual(get.headers.ratelimit.split(';')[1], 'r=3');
      // /api: rules api + all; `all` has 3 left, api 4: all binds after 3.
      const api = [];
      for (let i = 0; i < 4; i++) api.push(await request(server.port, { path: '/api/items', headers: h }));
      assert.deepStrictEqual(api.map((r) => r.status), [200, 200, 200, 429]);
      assert.strictEqual(api[3].headers['ratelimit-policy'], '"all";q=6;w=60');
      // Another user is untouched.
      assert.strictEqual((await request(server.port, { path: '/api/items', headers: { 'X-User': 'eve' } })).status, 200);
    });

    test('denials are answered from the local cache until retryAfterMs', async () => {
      const server = await listen(
        app(rateLimit({ client: conn.client, key: user, prefix: `d:${clientName}:`, limit: { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 0.3 } })),
      );
      cleanups.push(server.close);
      const h = { 'X-User': 'carol' };
      assert.strictEqual((await request(server.port, { headers: h })).status, 200);
      assert.strictEqual((await request(server.port, { headers: h })).status, 200);
      assert.strictEqual((await request(server.port, { headers: h })).status, 429);
      const calls = await commandCalls(conn.client, 'RL.GCRA');
      for (let i = 0; i < 10; i++) {
        const r = await request(server.port, { headers: h });
        assert.strictEqual(r.status, 429);
        assert.strictEqual(r.headers['retry-after'], '1');
        assert.match(r.headers.ratelimit, /^"default";r=0;t=1$/);
      }
      assert.strictEqual(await commandCalls(conn.client, 'RL.GCRA'), calls, 'cached denials reached Redis');
      await sleep(350);
      assert.strictEqual((await request(server.port, { headers: h })).status, 200);
      assert.strictEqual(await commandCalls(conn.client, 'RL.GCRA'), calls + 1);
    });
  });
}

// ---------------------------------------------------------------- Redis unavailable

/** A client of `lib` aimed at `port` that may never connect (no await on connect). */
function unconnected(libName, port) {
  if (libName === 'ioredis') {
    const Redis = require('ioredis');
    const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    c.on('error', () => {});
    return { client: c, close: () => c.disconnect() };
  }
  const { createClient } = require(libName === 'node-redis v4' ? 'redis4' : 'redis');
  const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50, connectTimeout: 200 } });
  c.on('error', () => {});
  c.connect().catch(() => {});
  return {
    client: c,
    close: async () => {
      try {
        if (c.destroy) c.destroy();
        else await c.disconnect();
      } catch {
        // already closed
      }
    },
  };
}

/** Waits until the client is connected and ready (up to 2 s). */
async function ready(client) {
  for (let i = 0; i < 200; i++) {
    if (client.status === 'ready' || client.isReady === true) return;
    await sleep(10);
  }
  throw new Error('the client did not connect');
}

// Each situation: the server the client is aimed at, and the reasons the
// middleware must report (onUnavailable) for each client library.
const SITUATIONS = {
  // A connected client, then the server stops answering (SIGSTOP): only the command timeout ends the wait.
  'a hung Redis (timeout)': {
    async make() {
      const server = await startRedis();
      return {
        port: server.port,
        async connected() {
          server.proc.kill('SIGSTOP');
        },
        close: async () => {
          server.proc.kill('SIGCONT');
          await server.stop();
        },
      };
    },
    reasons: ['timeout'],
  },
  // TCP accepted, no reply ever, not even to the handshake: a node-redis client never becomes
  // ready (nothing is queued: 'connection'); ioredis sends and waits ('timeout').
  'a server that accepts and never answers': {
    async make() {
      const hung = await hungServer();
      return { port: hung.port, close: hung.close };
    },
    reasons: ['timeout', 'connection'],
  },
  'a server without the module': {
    async make() {
      const plain = await startRedis({ withModule: false, scripts: false });
      return { port: plain.port, close: plain.stop, connected: async () => {} };
    },
    reasons: ['no-module'],
  },
  // Nothing listens: the connection is refused, and the client reports it at once ('connection'),
  // not after the timeout (node-redis and ioredis would hold the command in their offline queue).
  'connection refused': {
    async make() {
      return { port: await freePort(), close: async () => {} };
    },
    reasons: ['connection'],
  },
};

for (const [situation, { make, reasons }] of Object.entries(SITUATIONS)) {
  for (const clientName of Object.keys(CLIENTS)) {
    test(`${situation} (${clientName}): fail open passes, fail closed answers 503, never 500`, { timeout: 15000 }, async () => {
      const target = await make();
      const conn = unconnected(clientName, target.port);
      const seen = [];
      try {
        if (target.connected) {
          await ready(conn.client);
          await target.connected();
        }
        const common = { client: conn.client, timeoutMs: 150, key: user, limit: { type: 'gcra', maxBurst: 0, tokensPerPeriod: 1, period: 60 } };
        const open = await listen(app(rateLimit({ ...common, onUnavailable: (err) => seen.push(err.reason) })));
        const closed = await listen(app(rateLimit({ ...common, failOpen: false })));
        try {
          for (let i = 0; i < 3; i++) {
            const started = Date.now();
            const r = await request(open.port, { headers: { 'X-User': 'x' } });
            assert.strictEqual(r.status, 200, `fail open: ${r.status} ${r.body}`);
            assert.strictEqual(r.headers.ratelimit, undefined);
            assert.ok(Date.now() - started < 2000, 'the timeout bounds the wait');
          }
          const c = await request(closed.port, { headers: { 'X-User': 'x' } });
          assert.strictEqual(c.status, 503);
          assert.strictEqual(c.headers['retry-after'], '1');
        } finally {
          await open.close();
          await closed.close();
        }
        assert.strictEqual(seen.length, 3, `reasons: ${seen.join(', ')}`);
        for (const reason of seen) assert.ok(reasons.includes(reason), `reasons: ${seen.join(', ')} (expected ${reasons.join(' or ')})`);
      } finally {
        await conn.close();
        await target.close();
      }
    });
  }
}

test('a bad rule (a server error) goes to next(err), with a clear message', async () => {
  const { createClient } = require('redis');
  const c = createClient({ socket: { host: '127.0.0.1', port: redis.port } });
  await c.connect();
  const a = express();
  a.use(rateLimit({ client: c, limit: { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 0 } }));
  a.get('/', (req, res) => res.send('ok'));
  a.use((err, req, res, next) => res.status(500).send(err.message));
  const server = await listen(a);
  try {
    const r = await request(server.port);
    assert.strictEqual(r.status, 500);
    assert.match(r.body, /period must be/);
  } finally {
    await server.close();
    await c.close();
  }
});
