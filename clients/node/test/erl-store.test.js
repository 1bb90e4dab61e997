'use strict';
// express-rate-limit with RedisRateLimitStore against a real server.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const express = require('express');
const { rateLimit: erl } = require('express-rate-limit');
const { startRedis, CLIENTS, request, listen, freePort, commandCalls } = require('./helpers');
const { RedisRateLimitStore } = require('..');

let redis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

const quiet = { validate: false };

function app(limiter, handler = (req, res) => res.send('ok')) {
  const a = express();
  a.use(limiter);
  a.get('/', handler);
  a.get('/fail', (req, res) => res.status(500).send('failed'));
  return a;
}

for (const [clientName, lib] of Object.entries(CLIENTS)) {
  describe(`express-rate-limit Store through ${clientName}`, () => {
    let conn;
    before(async () => {
      conn = await lib.connect(redis.port);
    });
    after(async () => {
      await conn.close();
    });

    test('limit 5: five 200s, then 429s; draft-8 headers from totalHits/resetTime', async () => {
      const store = new RedisRateLimitStore({ client: conn.client, prefix: `erl:${clientName}:a:` });
      const server = await listen(app(erl({ windowMs: 60_000, limit: 5, standardHeaders: 'draft-8', legacyHeaders: false, store, ...quiet })));
      try {
        const statuses = [];
        let last;
        for (let i = 0; i < 8; i++) {
          last = await request(server.port);
          statuses.push(last.status);
        }
        assert.deepStrictEqual(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
        assert.match(last.headers.ratelimit, /^"5-in-1min"; r=0; t=\d+$/);
        const t = Number(/t=(\d+)/.exec(last.headers.ratelimit)[1]);
        assert.ok(t >= 1 && t <= 60, `t=${t}`);
        // The module counted the 5 admitted hits only.
        const got = (await store.get('::ffff:127.0.0.1')) ?? (await store.get('127.0.0.1'));
        assert.ok(got, 'get() finds the client');
        assert.strictEqual(got.totalHits, 5);
        assert.ok(got.resetTime instanceof Date);
      } finally {
        await server.close();
      }
    });

    test('20 concurrent requests: exactly `limit` admitted', async () => {
      const store = new RedisRateLimitStore({ client: conn.client, prefix: `erl:${clientName}:c:` });
      const server = await listen(app(erl({ windowMs: 60_000, limit: 7, store, ...quiet })));
      try {
        const replies = await Promise.all(Array.from({ length: 20 }, () => request(server.port)));
        assert.strictEqual(replies.filter((r) => r.status === 200).length, 7);
        assert.strictEqual(replies.filter((r) => r.status === 429).length, 13);
      } finally {
        await server.close();
      }
    });

    test('skipFailedRequests: failed requests are given back, refusals give nothing back', async () => {
      const store = new RedisRateLimitStore({ client: conn.client, prefix: `erl:${clientName}:s:` });
      const server = await listen(app(erl({ windowMs: 60_000, limit: 2, skipFailedRequests: true, store, ...quiet })));
      try {
        // Failed requests (500) are not counted.
        for (let i = 0; i < 3; i++) assert.strictEqual((await request(server.port, { path: '/fail' })).status, 500);
        assert.strictEqual((await request(server.port)).status, 200);
        assert.strictEqual((await request(server.port)).status, 200);
        // The 429s are "failed" too: their decrement must not give a token back.
        for (let i = 0; i < 3; i++) assert.strictEqual((await request(server.port)).status, 429);
        await new Promise((r) => setTimeout(r, 50)); // decrements run on 'finish'
        assert.strictEqual((await request(server.port)).status, 429);
      } finally {
        await server.close();
      }
    });

    test('resetKey and decrement', async () => {
      const store = new RedisRateLimitStore({ client: conn.client, prefix: `erl:${clientName}:k:` });
      store.init({ windowMs: 10_000, limit: 3 });
      assert.deepStrictEqual((await store.increment('u')).totalHits, 1);
      assert.deepStrictEqual((await store.increment('u')).totalHits, 2);
      await store.decrement('u');
      assert.strictEqual((await store.get('u')).totalHits, 1);
      await store.increment('u');
      await store.increment('u');
      const over = await store.increment('u');
      assert.strictEqual(over.totalHits, 4);
      assert.ok(over.resetTime.getTime() - Date.now() <= 10_000);
      await store.resetKey('u');
      assert.strictEqual(await store.get('u'), undefined);
      assert.strictEqual((await store.increment('u')).totalHits, 1);
    });

    test('a limit function: the store counts every hit (countDenied mode)', async () => {
      const store = new RedisRateLimitStore({ client: conn.client, prefix: `erl:${clientName}:f:` });
      const server = await listen(app(erl({ windowMs: 60_000, limit: () => 2, store, ...quiet })));
      try {
        const statuses = [];
        for (let i = 0; i < 4; i++) statuses.push((await request(server.port)).status);
        assert.deepStrictEqual(statuses, [200, 200, 429, 429]);
        const got = (await store.get('::ffff:127.0.0.1')) ?? (await store.get('127.0.0.1'));
        assert.strictEqual(got.totalHits, 4);
      } finally {
        await server.close();
      }
    });

    test('one command per request: RL.FIXEDWINDOW', async () => {
      const store = new RedisRateLimitStore({ client: conn.client, prefix: `erl:${clientName}:n:` });
      const server = await listen(app(erl({ windowMs: 60_000, limit: 100, store, ...quiet })));
      try {
        const before = await commandCalls(conn.client, 'RL.FIXEDWINDOW');
        for (let i = 0; i < 5; i++) await request(server.port);
        assert.strictEqual(await commandCalls(conn.client, 'RL.FIXEDWINDOW'), before + 5);
      } finally {
        await server.close();
      }
    });
  });
}

test('passOnStoreError: Redis refused or without the module → requests pass, never a 500', async () => {
  const plain = await startRedis({ withModule: false, scripts: false });
  const { createClient } = require('redis');
  const noModule = createClient({ socket: { host: '127.0.0.1', port: plain.port } });
  await noModule.connect();
  const refusedPort = await freePort();
  const Redis = require('ioredis');
  const refused = new Redis({ host: '127.0.0.1', port: refusedPort, maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  refused.on('error', () => {});
  try {
    for (const client of [noModule, refused]) {
      const store = new RedisRateLimitStore({ client, timeoutMs: 200 });
      const server = await listen(app(erl({ windowMs: 60_000, limit: 1, store, passOnStoreError: true, ...quiet })));
      try {
        for (let i = 0; i < 3; i++) assert.strictEqual((await request(server.port)).status, 200);
      } finally {
        await server.close();
      }
    }
  } finally {
    refused.disconnect();
    await noModule.close();
    await plain.stop();
  }
});
