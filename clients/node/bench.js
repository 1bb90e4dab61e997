'use strict';
// Decisions per second and server µs per decision (INFO commandstats) through
// this package vs rate-limit-redis (express-rate-limit's Redis store), same
// server, same client (node-redis), one run; and this package's calls through
// the Functions library (FCALL) and its EVALSHA form, on the same server.
//
//   RATELIMIT_MODULE=target/release/libredis_ratelimit.so node bench.js [--seconds 3] [--inflight 64] [--keys 1000]
//
// Each case keeps `inflight` decisions in flight over one connection for
// `seconds`, on `keys` keys in turn, with a limit never reached (every call
// allowed: the common case). The server is started here on a free loopback port.
const { parseArgs } = require('node:util');
const { createClient } = require('redis');
const { RedisStore } = require('rate-limit-redis');
const { startRedis } = require('./test/helpers');
const { RateLimit, RedisRateLimitStore } = require('.');

const { values: opts } = parseArgs({
  options: {
    seconds: { type: 'string', default: '3' },
    inflight: { type: 'string', default: '64' },
    keys: { type: 'string', default: '1000' },
  },
});
const seconds = Number(opts.seconds);
const inflight = Number(opts.inflight);
const keys = Number(opts.keys);

function commandStats(info) {
  const stats = {};
  for (const m of String(info).matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    stats[m[1]] = { calls: Number(m[2]), usec: Number(m[3]) };
  }
  return stats;
}

async function run(client, name, decide, commands) {
  let next = 0;
  const key = () => `bench:${name}:${next++ % keys}`;
  for (let i = 0; i < Math.min(keys, 2000); i++) await decide(key()); // warm up
  await client.sendCommand(['CONFIG', 'RESETSTAT']);
  let done = 0;
  const until = Date.now() + seconds * 1000;
  const started = process.hrtime.bigint();
  async function worker() {
    while (Date.now() < until) {
      await decide(key());
      done++;
    }
  }
  await Promise.all(Array.from({ length: inflight }, worker));
  const elapsedS = Number(process.hrtime.bigint() - started) / 1e9;
  const stats = commandStats(await client.sendCommand(['INFO', 'commandstats']));
  const usec = commands.reduce((sum, c) => sum + (stats[c]?.usec ?? 0), 0);
  const calls = stats[commands[0]]?.calls ?? 0;
  return { name, decisionsPerS: Math.round(done / elapsedS), usPerDecision: calls ? usec / calls : NaN, commands: commands.join(' + ') };
}

function pkgVersion(name) {
  const file = require('node:path').join(__dirname, 'node_modules', name, 'package.json');
  return JSON.parse(require('node:fs').readFileSync(file, 'utf8')).version;
}

async function main() {
  const redis = await startRedis();
  const client = createClient({ socket: { host: '127.0.0.1', port: redis.port } });
  await client.connect();
  try {
    const windowMs = 60_000;
    const limit = 1e9;

    const ours = new RedisRateLimitStore({ client, prefix: 'ours:' });
    ours.init({ windowMs, limit });
    const theirs = new RedisStore({ sendCommand: (...args) => client.sendCommand(args), prefix: 'theirs:' });
    await theirs.init({ windowMs, limit });
    const rl = new RateLimit(client);

    const results = [];
    results.push(await run(client, 'redis-ratelimit RedisRateLimitStore.increment (express-rate-limit Store)', (k) => ours.increment(k), ['rl.fixedwindow']));
    // evalsha's time includes the INCR/PTTL/PEXPIRE its script calls.
    results.push(await run(client, 'rate-limit-redis RedisStore.increment (express-rate-limit Store)', (k) => theirs.increment(k), ['evalsha']));
    results.push(await run(client, 'redis-ratelimit RateLimit.gcra', (k) => rl.gcra(k, 1e6, 1e6, 60), ['rl.gcra']));
    results.push(await run(client, 'redis-ratelimit RateLimit.slidingWindow', (k) => rl.slidingWindow(k, 1e9, 60), ['rl.slidingwindow']));
    // The same calls through the Functions library and its EVALSHA form (a
    // server without the module); fcall's and evalsha's time includes the
    // commands the script calls.
    for (const [engine, command] of [['functions', 'fcall'], ['eval', 'evalsha']]) {
      const store = new RedisRateLimitStore({ client, prefix: `ours-${engine}:`, engine });
      store.init({ windowMs, limit });
      const viaLibrary = new RateLimit(client, { engine });
      results.push(await run(client, `redis-ratelimit RedisRateLimitStore.increment, engine '${engine}'`, (k) => store.increment(k), [command]));
      results.push(await run(client, `redis-ratelimit RateLimit.gcra, engine '${engine}'`, (k) => viaLibrary.gcra(k, 1e6, 1e6, 60), [command]));
    }

    const server = await client.sendCommand(['INFO', 'server']);
    const version = /redis_version:(\S+)/.exec(server)?.[1];
    console.log(`node ${process.version}, redis-server ${version}, node-redis ${pkgVersion('redis')}, ` +
      `rate-limit-redis ${pkgVersion('rate-limit-redis')}; ${seconds} s per case, ${inflight} in flight, ${keys} keys, one connection\n`);
    console.log('| client call | server command | decisions/s | server µs per decision |');
    console.log('|---|---|---:|---:|');
    for (const r of results) {
      console.log(`| ${r.name} | ${r.commands} | ${r.decisionsPerS.toLocaleString('en-US')} | ${r.usPerDecision.toFixed(2)} |`);
    }
  } finally {
    await client.close();
    await redis.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
