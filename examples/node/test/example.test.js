'use strict';
// The example against a real redis-server with the module ($RATELIMIT_MODULE).
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const Redis = require('ioredis');
const { makeServer } = require('../app');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startRedis() {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-example-'));
  const proc = spawn(process.env.REDIS_SERVER || 'redis-server',
    ['--port', String(port), '--save', '', '--dir', dir, '--loadmodule', process.env.RATELIMIT_MODULE],
    { stdio: 'ignore' });
  for (let i = 0; i < 100; i++) {
    const up = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.end(); resolve(true); });
      c.on('error', () => resolve(false));
    });
    if (up) return { proc, port };
    await sleep(50);
  }
  proc.kill();
  throw new Error('redis-server did not start');
}

function get(port, user, urlPath = '/') {
  return new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: urlPath, headers: { 'X-User': user } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers }));
    }).on('error', reject);
  });
}

let redis;
const apps = [];

async function serve(failOpen = true) {
  const app = makeServer({ redisPort: redis.port, failOpen });
  await app.client.connect();
  await new Promise((r) => app.server.listen(0, '127.0.0.1', r));
  apps.push(app);
  return app.server.address().port;
}

async function gcraCalls() {
  const c = new Redis({ port: redis.port, host: '127.0.0.1' });
  const stats = await c.info('commandstats');
  c.disconnect();
  const m = /cmdstat_rl\.gcra:calls=(\d+)/.exec(stats);
  return m ? Number(m[1]) : 0;
}

before(async () => { redis = await startRedis(); });
after(async () => {
  for (const app of apps) app.server.close();
  redis.proc.kill();
});

test('allows a burst, then answers 429 with the headers', async () => {
  const port = await serve();
  for (let i = 0; i < 5; i++) {
    const { status, headers } = await get(port, 'alice');
    assert.strictEqual(status, 200);
    assert.strictEqual(headers['ratelimit-policy'], '"api";q=5;w=5');
    assert.strictEqual(headers.ratelimit, `"api";r=${4 - i};t=${i + 1}`);
    assert.strictEqual(headers['x-ratelimit-limit'], '5');
    assert.strictEqual(headers['x-ratelimit-remaining'], String(4 - i));
    assert.strictEqual(headers['x-ratelimit-reset'], String(i + 1));
    assert.strictEqual(headers['retry-after'], undefined);
  }
  const { status, headers } = await get(port, 'alice');
  assert.strictEqual(status, 429);
  assert.strictEqual(headers['retry-after'], '1');
  // On a refusal `t` is when more quota comes, as Retry-After.
  assert.strictEqual(headers.ratelimit, '"api";r=0;t=1');
  assert.strictEqual((await get(port, 'bob')).status, 200);
});

test('refused keys are answered from the local cache', async () => {
  const port = await serve();
  for (let i = 0; i < 5; i++) await get(port, 'carol');
  assert.strictEqual((await get(port, 'carol')).status, 429);
  const before = await gcraCalls();
  for (let i = 0; i < 20; i++) {
    const { status, headers } = await get(port, 'carol');
    assert.strictEqual(status, 429);
    assert.ok(headers['retry-after']);
  }
  assert.strictEqual(await gcraCalls(), before, 'refused requests reached Redis');
  await sleep(1050);
  assert.strictEqual((await get(port, 'carol')).status, 200);
  assert.strictEqual(await gcraCalls(), before + 1);
});

test('a cost above the limit gets 429 without Retry-After', async () => {
  const port = await serve();
  const { status, headers } = await get(port, 'dave', '/?cost=6');
  assert.strictEqual(status, 429);
  assert.strictEqual(headers['retry-after'], undefined);
  assert.strictEqual(headers['x-ratelimit-limit'], '5');
  assert.strictEqual((await get(port, 'dave')).status, 200);
});

test('fails open or closed when Redis is down', async () => {
  const openPort = await serve(true);
  const closedPort = await serve(false);
  assert.strictEqual((await get(openPort, 'erin')).status, 200);
  redis.proc.kill();
  await new Promise((r) => redis.proc.once('exit', r));
  await sleep(100);
  const open = await get(openPort, 'erin');
  assert.strictEqual(open.status, 200);
  assert.strictEqual(open.headers.ratelimit, undefined);
  assert.strictEqual((await get(closedPort, 'erin')).status, 503);
});
