'use strict';
// The engines (issue 31): the module when the server has it, else the
// Functions library (loaded or replaced by the client), else EVALSHA; the
// `engine` field; recovery after FUNCTION FLUSH / SCRIPT FLUSH; the caller's
// clock where a server refuses TIME in scripts; a 3-primary cluster; the
// library read from functions/ratelimit.lua (no copy in the checkout).
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const express = require('express');
const { rateLimit: erl } = require('express-rate-limit');
const { startRedis, startCluster, redisCli, CLIENTS, request, listen, awayFromWindowEnd } = require('./helpers');
const { RateLimit, RateLimitUnavailableError, rateLimit, RedisRateLimitStore, RateLimiterRedisModule } = require('..');
const { LIBRARY_CODE, LIBRARY_PATH, LIBRARY_VERSION, EVAL_SHA } = require('../lib/engine');
const { specFromPolicyWords } = require('../lib/ratelimit');

const REPO_LIBRARY = path.join(__dirname, '..', '..', '..', 'functions', 'ratelimit.lua');

// The package commits no copy: in a checkout it reads the repository's file
// (npm pack's prepack script copies it into the tarball: scripts/check-node-artifacts.sh).
test('in a checkout the client reads functions/ratelimit.lua itself', () => {
  assert.strictEqual(LIBRARY_PATH, REPO_LIBRARY);
  assert.ok(!fs.existsSync(path.join(__dirname, '..', 'lib', 'ratelimit.lua')), 'a copy of the library is left in clients/node/lib');
  assert.match(LIBRARY_CODE, /^#!lua name=ratelimit\n/);
  assert.ok(Number.isInteger(LIBRARY_VERSION) && LIBRARY_VERSION >= 1);
});

/** A logger that keeps its warnings. */
function recordingLogger() {
  const warnings = [];
  return { warnings, logger: { warn: (m) => warnings.push(String(m)), error: () => {}, info: () => {} } };
}

const libraryNames = async (port) => (await redisCli(port, 'FUNCTION', 'LIST')).map((lib) => lib[1]);

describe('engine choice and the engine field', () => {
  let plain;
  let withModule;
  before(async () => {
    plain = await startRedis({ withModule: false });
    withModule = await startRedis({ withModule: true });
  });
  after(async () => {
    await plain.stop();
    await withModule.stop();
  });

  for (const [clientName, lib] of Object.entries(CLIENTS)) {
    test(`${clientName}: the module where the server has it, and no library loaded`, async () => {
      await redisCli(withModule.port, 'FUNCTION', 'FLUSH');
      const conn = await lib.connect(withModule.port);
      try {
        const rl = new RateLimit(conn.client);
        assert.strictEqual(rl.engine, null);
        assert.deepStrictEqual([(await rl.gcra(`m:${clientName}`, 1, 1, 10)).remaining], [1]);
        assert.strictEqual(rl.engine, 'module');
        assert.deepStrictEqual(await libraryNames(withModule.port), []);
      } finally {
        await conn.close();
      }
    });

    test(`${clientName}: without the module, the Functions library, loaded by the client`, async () => {
      await redisCli(plain.port, 'FUNCTION', 'FLUSH');
      const conn = await lib.connect(plain.port);
      try {
        const rl = new RateLimit(conn.client);
        assert.strictEqual(await rl.ready(), 'functions');
        assert.strictEqual(rl.engine, 'functions');
        assert.deepStrictEqual(await libraryNames(plain.port), ['ratelimit']);
        assert.strictEqual(Number(await redisCli(plain.port, 'FCALL_RO', 'rl_version', 0)), LIBRARY_VERSION);
        const k = `f:${clientName}`;
        const decisions = [];
        for (let i = 0; i < 3; i++) decisions.push((await rl.gcra(k, 1, 1, 10)).limited);
        assert.deepStrictEqual(decisions, [false, false, true]);
        const all = await rl.all([
          { key: `{${k}}a`, type: 'gcra', maxBurst: 0, tokensPerPeriod: 1, period: 10 },
          { key: `{${k}}b`, type: 'fixedWindow', limit: 5, window: 10 },
        ]);
        assert.deepStrictEqual([all.limited, all.which], [false, 0]);
        assert.strictEqual((await rl.all([{ key: `{${k}}a`, type: 'gcra', maxBurst: 0, tokensPerPeriod: 1, period: 10 }])).limited, true);
      } finally {
        await conn.close();
      }
    });

    test(`${clientName}: engine 'eval' forced: EVALSHA of the same code, no library loaded`, async () => {
      await redisCli(plain.port, 'FUNCTION', 'FLUSH');
      await redisCli(plain.port, 'SCRIPT', 'FLUSH');
      const conn = await lib.connect(plain.port);
      try {
        const rl = new RateLimit(conn.client, { engine: 'eval' });
        assert.strictEqual(rl.engine, 'eval');
        const k = `e:${clientName}`;
        await awayFromWindowEnd(plain.port, 10, 1); // three calls in one 10 s window
        const decisions = [];
        for (let i = 0; i < 3; i++) decisions.push((await rl.fixedWindow(k, 2, 10)).limited);
        assert.deepStrictEqual(decisions, [false, false, true]);
        assert.deepStrictEqual(await libraryNames(plain.port), []);
        assert.deepStrictEqual((await redisCli(plain.port, 'SCRIPT', 'EXISTS', EVAL_SHA)).map(Number), [1]);
      } finally {
        await conn.close();
      }
    });

    test(`${clientName}: engine 'functions' forced on a server with the module: the same keys, one limiter`, async () => {
      const conn = await lib.connect(withModule.port);
      try {
        const viaModule = new RateLimit(conn.client, { engine: 'module' });
        const viaLibrary = new RateLimit(conn.client, { engine: 'functions' });
        const k = `x:${clientName}`;
        const decisions = [];
        for (let i = 0; i < 4; i++) decisions.push((await (i % 2 ? viaLibrary : viaModule).slidingLog(k, 3, 10)).limited);
        assert.deepStrictEqual(decisions, [false, false, false, true]);
        assert.strictEqual(viaLibrary.engine, 'functions');
        assert.strictEqual(viaModule.engine, 'module');
      } finally {
        await conn.close();
      }
    });
  }

  test('the entry points report the engine: middleware, Store, RateLimiterRedisModule', async () => {
    const conn = await CLIENTS.ioredis.connect(plain.port);
    try {
      const middleware = rateLimit({ client: conn.client, limit: { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 1 } });
      const store = new RedisRateLimitStore({ client: conn.client, engine: 'eval' });
      const flexible = new RateLimiterRedisModule({ storeClient: conn.client, points: 2, duration: 1 });
      assert.deepStrictEqual([middleware.engine, store.engine, flexible.engine], [null, 'eval', null]);
      await middleware.limiter.ready();
      await flexible.consume('u');
      assert.deepStrictEqual([middleware.engine, store.engine, flexible.engine], ['functions', 'eval', 'functions']);
    } finally {
      await conn.close();
    }
  });

  test("an older library on the server is replaced; a newer one is left alone", async () => {
    const older = LIBRARY_CODE.replace(/^local VERSION = \d+$/m, `local VERSION = ${LIBRARY_VERSION - 1}`);
    const newer = LIBRARY_CODE.replace(/^local VERSION = \d+$/m, 'local VERSION = 999999');
    const conn = await CLIENTS['node-redis'].connect(plain.port);
    try {
      await redisCli(plain.port, 'FUNCTION', 'LOAD', 'REPLACE', older);
      await new RateLimit(conn.client).gcra('v', 1, 1, 1);
      assert.strictEqual(Number(await redisCli(plain.port, 'FCALL_RO', 'rl_version', 0)), LIBRARY_VERSION);
      await redisCli(plain.port, 'FUNCTION', 'LOAD', 'REPLACE', newer);
      const rl = new RateLimit(conn.client);
      await rl.gcra('v', 1, 1, 1);
      assert.strictEqual(rl.engine, 'functions');
      assert.strictEqual(Number(await redisCli(plain.port, 'FCALL_RO', 'rl_version', 0)), 999999);
    } finally {
      await redisCli(plain.port, 'FUNCTION', 'FLUSH');
      await conn.close();
    }
  });

  test('FUNCTION refused (ACL): the EVALSHA path; no engine at all: unavailable, reason no-module', async () => {
    await redisCli(plain.port, 'FUNCTION', 'FLUSH');
    await redisCli(plain.port, 'ACL', 'SETUSER', 'nofunction', 'on', '>pw', '~*', '+@all', '-function');
    const Redis = require('ioredis');
    const c = new Redis({ host: '127.0.0.1', port: plain.port, username: 'nofunction', password: 'pw', lazyConnect: true });
    c.on('error', () => {});
    await c.connect();
    const none = await startRedis({ withModule: false, scripts: false });
    const conn = await CLIENTS['node-redis'].connect(none.port);
    try {
      const rl = new RateLimit(c);
      assert.strictEqual((await rl.gcra('acl', 1, 1, 10)).remaining, 1);
      assert.strictEqual(rl.engine, 'eval');
      const err = await new RateLimit(conn.client).gcra('k', 1, 1, 1).then(() => null, (e) => e);
      assert.ok(err instanceof RateLimitUnavailableError, String(err));
      assert.strictEqual(err.reason, 'no-module');
      // A forced 'functions' says why it cannot.
      await assert.rejects(new RateLimit(c, { engine: 'functions' }).gcra('acl', 1, 1, 10), /function/i);
    } finally {
      c.disconnect();
      await conn.close();
      await none.stop();
    }
  });

  test('the engine settled on: logger.info once; a fall back to EVALSHA: one warning with why and the remedy', async () => {
    const record = () => {
      const lines = [];
      return { lines, logger: { info: (m) => lines.push(['info', String(m)]), warn: (m) => lines.push(['warn', String(m)]), error: () => {} } };
    };
    const engineLines = (lines) => lines.filter(([, m]) => m.includes("engine '"));
    for (const [port, engine] of [[withModule.port, 'module'], [plain.port, 'functions']]) {
      const conn = await CLIENTS.ioredis.connect(port);
      try {
        const { lines, logger } = record();
        const rl = new RateLimit(conn.client, { logger });
        for (let i = 0; i < 3; i++) await rl.gcra(`log:${engine}`, 9, 1, 1);
        const got = engineLines(lines);
        assert.strictEqual(got.length, 1, JSON.stringify(lines));
        assert.strictEqual(got[0][0], 'info');
        assert.match(got[0][1], new RegExp(`engine '${engine}'`));
      } finally {
        await conn.close();
      }
    }
    await redisCli(plain.port, 'FUNCTION', 'FLUSH');
    await redisCli(plain.port, 'ACL', 'SETUSER', 'nofunction2', 'on', '>pw', '~*', '+@all', '-function');
    const Redis = require('ioredis');
    const c = new Redis({ host: '127.0.0.1', port: plain.port, username: 'nofunction2', password: 'pw', lazyConnect: true });
    c.on('error', () => {});
    await c.connect();
    const warned = [];
    const realWarn = console.warn;
    try {
      const { lines, logger } = record();
      const rl = new RateLimit(c, { logger });
      for (let i = 0; i < 5; i++) await rl.gcra('fallback', 9, 1, 1);
      assert.strictEqual(rl.engine, 'eval');
      const got = engineLines(lines);
      assert.strictEqual(got.length, 1, JSON.stringify(lines));
      assert.strictEqual(got[0][0], 'warn');
      assert.match(got[0][1], /refused FUNCTION or FCALL \(.*no permissions to run the 'function/);
      assert.match(got[0][1], /EVALSHA, about 5x/);
      assert.match(got[0][1], /an administrator loads the library once.*FCALL/);
      // Without a logger: the warning goes to console.warn, the info line nowhere.
      console.warn = (m) => warned.push(String(m));
      const quiet = new RateLimit(c);
      await quiet.gcra('fallback', 9, 1, 1);
      await quiet.gcra('fallback', 9, 1, 1);
      const plainConn = await CLIENTS.ioredis.connect(plain.port);
      try {
        await new RateLimit(plainConn.client).gcra('quiet', 9, 1, 1);
      } finally {
        await plainConn.close();
      }
      console.warn = realWarn;
      assert.strictEqual(warned.length, 1, JSON.stringify(warned));
      assert.match(warned[0], /engine 'eval'/);
      // The remedy works: once an administrator loaded it, the same user calls it by FCALL.
      await redisCli(plain.port, 'FUNCTION', 'LOAD', 'REPLACE', LIBRARY_CODE);
      const { lines: after, logger: afterLogger } = record();
      const remedied = new RateLimit(c, { logger: afterLogger });
      await remedied.gcra('fallback', 9, 1, 1);
      assert.strictEqual(remedied.engine, 'functions');
      assert.deepStrictEqual(engineLines(after).map(([level]) => level), ['info']);
    } finally {
      console.warn = realWarn;
      c.disconnect();
    }
  });

  test('policies are module data: a clear error through the library', async () => {
    const conn = await CLIENTS.ioredis.connect(plain.port);
    try {
      const rl = new RateLimit(conn.client);
      await assert.rejects(rl.limit('p', 'k'), (e) => e instanceof TypeError && /RL\.LIMIT needs the redis-ratelimit module/.test(e.message));
      await assert.rejects(rl.policy('p'), (e) => e instanceof TypeError && /RL\.POLICY needs the redis-ratelimit module/.test(e.message));
    } finally {
      await conn.close();
    }
  });

  test('bad engine or clock options are refused', () => {
    assert.throws(() => new RateLimit(async () => 1, { engine: 'lua' }), /engine must be/);
    assert.throws(() => new RateLimit(async () => 1, { clock: 'local' }), /clock must be/);
  });
});

test("RL.POLICY GET's unknown algorithm: a clear TypeError, not undefined (issue 35)", () => {
  assert.deepStrictEqual(specFromPolicyWords(['GCRA', '4', '10', '1']), { type: 'gcra', maxBurst: '4', tokensPerPeriod: '10', period: '1' });
  assert.strictEqual(specFromPolicyWords(null), undefined);
  for (const words of [['QUANTUMBUCKET', '1', '2', '3'], [], ['FIXEDWINDOW', '5']]) {
    assert.throws(
      () => specFromPolicyWords(words),
      (e) => e instanceof TypeError && /an algorithm this client does not know/.test(e.message) && /upgrade redis-ratelimit-client/.test(e.message),
      JSON.stringify(words),
    );
  }
});

/** A reply error as ioredis gives it. */
const replyError = (message) => Object.assign(new Error(message), { name: 'ReplyError' });

/** A function client answering each command word from its queue in `replies` (the last reply repeats; an Error rejects), recording what it sent. */
function scriptedClient(replies) {
  const sent = [];
  const client = async (args) => {
    sent.push(String(args[0]));
    const queue = replies[String(args[0])];
    const reply = queue.length > 1 ? queue.shift() : queue[0];
    if (reply instanceof Error) throw reply;
    return reply;
  };
  return { client, sent };
}

const DECISION = [0, 2, 1, -1, 1000];

test('a Redis 6.2-like server (no FCALL_RO): EVALSHA, then EVAL on NOSCRIPT', async () => {
  const { client, sent } = scriptedClient({
    COMMAND: [[null]],
    FCALL_RO: [replyError("ERR unknown command 'FCALL_RO', with args beginning with: 'rl_version' '0'")],
    EVALSHA: [replyError('NOSCRIPT No matching script. Please use EVAL.'), DECISION],
    EVAL: [DECISION],
  });
  const rl = new RateLimit(client);
  assert.strictEqual((await rl.gcra('k', 1, 1, 1)).remaining, 1);
  assert.strictEqual((await rl.gcra('k', 1, 1, 1)).remaining, 1);
  assert.strictEqual(rl.engine, 'eval');
  assert.deepStrictEqual(sent, ['COMMAND', 'FCALL_RO', 'EVALSHA', 'EVAL', 'EVALSHA']);
});

test('a server that cannot answer now (LOADING) is asked again on the next call, not taken for one without the module', async () => {
  const { client, sent } = scriptedClient({
    COMMAND: [replyError('LOADING Redis is loading the dataset in memory'), [['rl.gcra']]],
    'RL.GCRA': [DECISION],
  });
  const rl = new RateLimit(client);
  const err = await rl.gcra('k', 1, 1, 1).then(() => null, (e) => e);
  assert.ok(err instanceof RateLimitUnavailableError && err.reason === 'server', String(err));
  assert.strictEqual(rl.engine, null);
  assert.strictEqual((await rl.gcra('k', 1, 1, 1)).remaining, 1);
  assert.strictEqual(rl.engine, 'module');
  assert.deepStrictEqual(sent, ['COMMAND', 'COMMAND', 'RL.GCRA']);
});

// ---------------------------------------------------------------- recovery

function app(middleware) {
  const a = express();
  a.use(middleware);
  a.get('/', (req, res) => res.send('ok'));
  return a;
}

/**
 * 2 × 20 concurrent requests with `flush` between the waves: exactly `limit`
 * admitted, the rest refused, none failed (fail open would admit more; the
 * Store without passOnStoreError would answer 500).
 */
async function twoWaves(port, flush, limit = 25) {
  const wave = () => Promise.all(Array.from({ length: 20 }, () => request(port)));
  const statuses = (await wave()).map((r) => r.status);
  await flush();
  statuses.push(...(await wave()).map((r) => r.status));
  assert.strictEqual(statuses.filter((s) => s === 200).length, limit, statuses.join(' '));
  assert.strictEqual(statuses.filter((s) => s === 429).length, 40 - limit, statuses.join(' '));
}

describe('recovery: the library or the script gone mid-run costs no request', () => {
  let plain;
  before(async () => {
    plain = await startRedis({ withModule: false });
  });
  after(async () => {
    await plain.stop();
  });

  for (const [clientName, lib] of Object.entries(CLIENTS)) {
    for (const [engine, flush] of [
      ['functions', ['FUNCTION', 'FLUSH']],
      ['eval', ['SCRIPT', 'FLUSH']],
    ]) {
      test(`${clientName}, ${engine}: ${flush.join(' ')} between two waves (middleware and Store)`, async () => {
        const conn = await lib.connect(plain.port);
        const unavailable = [];
        const middleware = rateLimit({
          client: conn.client,
          engine,
          key: () => 'crowd',
          prefix: `rec:${clientName}:${engine}:`,
          limit: { type: 'slidingLog', limit: 25, window: 60 },
          onUnavailable: (err) => unavailable.push(err),
        });
        const store = new RedisRateLimitStore({ client: conn.client, engine, prefix: `rec-erl:${clientName}:${engine}:` });
        const servers = [await listen(app(middleware)), await listen(app(erl({ windowMs: 60_000, limit: 25, store, validate: false })))];
        try {
          for (const server of servers) await twoWaves(server.port, () => redisCli(plain.port, ...flush));
          assert.deepStrictEqual(unavailable, []);
          assert.deepStrictEqual([middleware.engine, store.engine], [engine, engine]);
          if (engine === 'functions') assert.deepStrictEqual(await libraryNames(plain.port), ['ratelimit']);
        } finally {
          for (const s of servers) await s.close();
          await conn.close();
        }
      });
    }
  }
});

test('a restart without the library, then without the module: the next call finds the engine and succeeds', async () => {
  const first = await startRedis({ withModule: true });
  const port = first.port;
  const Redis = require('ioredis');
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => 20 });
  c.on('error', () => {});
  await c.connect();
  const until = async (predicate) => {
    for (let i = 0; i < 250 && !predicate(); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(predicate(), 'ioredis did not reconnect');
  };
  let server = first;
  try {
    const rl = new RateLimit(c, { timeoutMs: 1000 });
    assert.strictEqual((await rl.gcra('r', 2, 1, 60)).remaining, 2);
    assert.strictEqual(rl.engine, 'module');
    // The same port, no module: the module's command is unknown there.
    await server.stop();
    await until(() => c.status !== 'ready');
    server = await startRedis({ withModule: false, port });
    await until(() => c.status === 'ready');
    assert.strictEqual((await rl.gcra('r', 2, 1, 60)).remaining, 2);
    assert.strictEqual(rl.engine, 'functions');
    // Again, and the library is gone with the data.
    await server.stop();
    await until(() => c.status !== 'ready');
    server = await startRedis({ withModule: false, port });
    await until(() => c.status === 'ready');
    assert.strictEqual((await rl.gcra('r', 2, 1, 60)).remaining, 2);
    assert.strictEqual(rl.engine, 'functions');
    assert.deepStrictEqual(await libraryNames(port), ['ratelimit']);
  } finally {
    c.disconnect();
    await server.stop();
  }
});

// ---------------------------------------------------------------- the caller's clock

describe("the caller's clock where a server refuses TIME in scripts", () => {
  let plain;
  before(async () => {
    plain = await startRedis({ withModule: false });
    // A user who may not run TIME: its scripts' redis.call('TIME') is refused,
    // as ElastiCache Serverless refuses TIME in every script.
    await redisCli(plain.port, 'ACL', 'SETUSER', 'notime', 'on', '>pw', '~*', '+@all', '-time');
  });
  after(async () => {
    await plain.stop();
  });

  async function asNoTime() {
    const Redis = require('ioredis');
    const c = new Redis({ host: '127.0.0.1', port: plain.port, username: 'notime', password: 'pw', lazyConnect: true });
    c.on('error', () => {});
    await c.connect();
    return c;
  }

  for (const engine of ['functions', 'eval']) {
    test(`${engine}: the call is retried with NOW, logged once, and every later call carries NOW`, async () => {
      const c = await asNoTime();
      try {
        const { warnings, logger } = recordingLogger();
        const rl = new RateLimit(c, { engine, logger });
        const k = `t:${engine}`;
        const decisions = [];
        for (let i = 0; i < 4; i++) decisions.push((await rl.gcra(k, 2, 1, 60)).limited);
        assert.deepStrictEqual(decisions, [false, false, false, true]);
        assert.strictEqual(warnings.length, 1, warnings.join('\n'));
        assert.match(warnings[0], /refuses TIME inside scripts.*NOW/);
        // The server's clock alone ('server') cannot decide for this user.
        const strict = new RateLimit(c, { engine, clock: 'server' });
        // Redis 7.0: "can't run this command"; Valkey 8.0: "no permissions to run the 'time' command".
        await assert.rejects(strict.gcra(`${k}:strict`, 2, 1, 60), /can't run this command|no permissions to run the 'time' command/);
      } finally {
        c.disconnect();
      }
    });
  }

  test("clock 'caller' sends NOW <unix_µs> last, from `now`; 'server' and 'auto' do not", async () => {
    const sent = [];
    const client = async (args) => {
      sent.push(args.map(String));
      return [0, 2, 1, -1, 1000];
    };
    await new RateLimit(client, { engine: 'functions', clock: 'caller', now: () => 1_700_000_000_123_456 }).gcra('k', 1, 1, 1);
    await new RateLimit(client, { engine: 'eval', clock: 'caller', now: () => 1_700_000_000_123_456 }).fixedWindow('k', 1, 1);
    await new RateLimit(client, { engine: 'functions' }).gcra('k', 1, 1, 1);
    const calls = sent.filter((a) => a[0] === 'FCALL' || a[0] === 'EVALSHA');
    assert.deepStrictEqual(calls[0], ['FCALL', 'rl_gcra', '1', 'k', '1', '1', '1', 'NOW', '1700000000123456']);
    assert.deepStrictEqual(calls[1], ['EVALSHA', EVAL_SHA, '1', 'k', 'rl_fixedwindow', '1', '1', 'NOW', '1700000000123456']);
    assert.deepStrictEqual(calls[2], ['FCALL', 'rl_gcra', '1', 'k', '1', '1', '1']);
  });
});

// ---------------------------------------------------------------- Redis Cluster

describe('a Redis Cluster of three primaries without the module', () => {
  let cluster;
  before(async () => {
    cluster = await startCluster({ withModule: false });
  });
  after(async () => {
    await cluster.stop();
  });

  const clusterClients = {
    'node-redis cluster': async (ports) => {
      const { createCluster } = require('redis');
      const c = createCluster({ rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => c.close() };
    },
    'node-redis v4 cluster': async (ports) => {
      const { createCluster } = require('redis4');
      const c = createCluster({ rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => c.quit() };
    },
    'ioredis Cluster': async (ports) => {
      const Redis = require('ioredis');
      const c = new Redis.Cluster(ports.map((port) => ({ host: '127.0.0.1', port })));
      c.on('error', () => {});
      return { client: c, close: () => c.disconnect() };
    },
  };
  // Keys on every node: twelve single keys spread by their hash slots.
  const keys = Array.from({ length: 12 }, (_, i) => `user:${i}`);

  for (const [clientName, connect] of Object.entries(clusterClients)) {
    test(`${clientName}: the library on every primary, decisions on every node, reloaded where flushed`, async () => {
      for (const port of cluster.ports) await redisCli(port, 'FUNCTION', 'FLUSH');
      const conn = await connect(cluster.ports);
      try {
        const rl = new RateLimit(conn.client, { timeoutMs: 2000 });
        const prefix = clientName.replace(/\W/g, '');
        const first = await Promise.all(keys.map((k) => rl.gcra(`${prefix}:${k}`, 1, 1, 60)));
        assert.deepStrictEqual(first.map((r) => r.remaining), keys.map(() => 1));
        assert.strictEqual(rl.engine, 'functions');
        for (const port of cluster.ports) assert.deepStrictEqual(await libraryNames(port), ['ratelimit'], `node ${port}`);
        // One node loses its library (a new node, a flush): the next call there reloads it.
        await redisCli(cluster.ports[1], 'FUNCTION', 'FLUSH');
        const second = await Promise.all(keys.map((k) => rl.gcra(`${prefix}:${k}`, 1, 1, 60)));
        assert.deepStrictEqual(second.map((r) => r.remaining), keys.map(() => 0));
        assert.deepStrictEqual(await libraryNames(cluster.ports[1]), ['ratelimit']);
        // RL.ALL across keys of one hash slot.
        const all = await rl.all([
          { key: `{${prefix}}:sec`, type: 'gcra', maxBurst: 0, tokensPerPeriod: 1, period: 60 },
          { key: `{${prefix}}:min`, type: 'slidingWindow', limit: 5, window: 60 },
        ]);
        assert.deepStrictEqual([all.limited, all.which], [false, 0]);
        // The EVALSHA path routes by key too, and recovers from SCRIPT FLUSH.
        const viaEval = new RateLimit(conn.client, { engine: 'eval', timeoutMs: 2000 });
        const e1 = await Promise.all(keys.map((k) => viaEval.fixedWindow(`${prefix}:e:${k}`, 2, 60)));
        for (const port of cluster.ports) await redisCli(port, 'SCRIPT', 'FLUSH');
        const e2 = await Promise.all(keys.map((k) => viaEval.fixedWindow(`${prefix}:e:${k}`, 2, 60)));
        assert.deepStrictEqual([e1.map((r) => r.remaining), e2.map((r) => r.remaining)], [keys.map(() => 1), keys.map(() => 0)]);
      } finally {
        await conn.close();
      }
    });
  }
});
