'use strict';
// Test helpers: a redis-server (with or without the module, $RATELIMIT_MODULE)
// on a free loopback port, clients of both libraries, HTTP requests.
const net = require('node:net');
const os = require('node:os');
const fs = require('node:fs');
const path = require('node:path');
const http = require('node:http');
const { spawn } = require('node:child_process');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function modulePath() {
  const m = process.env.RATELIMIT_MODULE;
  if (!m) throw new Error('set RATELIMIT_MODULE to the module (.so) to load, e.g. target/release/libredis_ratelimit.so');
  if (!fs.existsSync(m)) throw new Error(`RATELIMIT_MODULE=${m}: no such file`);
  return m;
}

/**
 * The engine the suite runs on: RATELIMIT_TEST_ENGINE=functions starts every
 * default server without the module (the clients then load the Functions
 * library); unset or 'module': with it.
 */
const TEST_ENGINE = process.env.RATELIMIT_TEST_ENGINE || 'module';
if (!['module', 'functions'].includes(TEST_ENGINE)) throw new Error(`RATELIMIT_TEST_ENGINE=${TEST_ENGINE}: expected module or functions`);

// The commands a server without any engine lacks (`scripts: false`).
const SCRIPT_COMMANDS = ['EVAL', 'EVALSHA', 'EVAL_RO', 'EVALSHA_RO', 'FCALL', 'FCALL_RO', 'FUNCTION', 'SCRIPT'];

/**
 * Starts redis-server on a free port: with the module unless `withModule` is
 * false (default: per RATELIMIT_TEST_ENGINE); `scripts: false` also renames
 * away EVAL*, FCALL* and FUNCTION (a server where no engine can run);
 * `extra`: more arguments.
 */
async function startRedis({ withModule = TEST_ENGINE === 'module', scripts = true, extra = [], port: wanted } = {}) {
  const port = wanted ?? (await freePort());
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-node-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extra];
  if (withModule) args.push('--loadmodule', modulePath());
  if (!scripts) for (const c of SCRIPT_COMMANDS) args.push('--rename-command', c, '');
  const proc = spawn(process.env.REDIS_SERVER || 'redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let exited = false;
  proc.on('exit', () => {
    exited = true;
  });
  for (let i = 0; i < 200 && !exited; i++) {
    const up = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => {
        c.end();
        resolve(true);
      });
      c.on('error', () => resolve(false));
    });
    if (up) {
      return {
        proc,
        port,
        stop: async () => {
          if (proc.exitCode === null && !exited) {
            const done = new Promise((r) => proc.once('exit', r));
            proc.kill('SIGKILL');
            await done;
          }
          fs.rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    await sleep(25);
  }
  proc.kill('SIGKILL');
  throw new Error(`redis-server did not start on port ${port}`);
}

/** A free loopback port whose cluster bus port (+10000) is free too (so ≤ 55535). */
async function freeClusterPort() {
  for (;;) {
    const port = await freePort();
    if (port > 55535) continue;
    const busFree = await new Promise((resolve) => {
      const s = net.createServer();
      s.on('error', () => resolve(false));
      s.listen(port + 10000, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (busFree) return port;
  }
}

/**
 * A Redis Cluster of three primaries on loopback (slots split evenly, joined
 * with CLUSTER MEET), without the module unless `withModule`. Resolves
 * `{ ports, stop }` once every node reports cluster_state:ok.
 */
async function startCluster({ withModule = false } = {}) {
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    const port = await freeClusterPort();
    nodes.push(
      await startRedis({
        withModule,
        port,
        extra: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '5000'],
      }),
    );
  }
  const stop = () => Promise.all(nodes.map((n) => n.stop()));
  try {
    const ranges = [[0, 5460], [5461, 10922], [10923, 16383]];
    for (let i = 0; i < 3; i++) await redisCli(nodes[i].port, 'CLUSTER', 'ADDSLOTSRANGE', ...ranges[i]);
    for (const n of nodes.slice(1)) await redisCli(nodes[0].port, 'CLUSTER', 'MEET', '127.0.0.1', n.port);
    const deadline = Date.now() + 30_000;
    for (const n of nodes) {
      for (;;) {
        const info = await redisCli(n.port, 'CLUSTER', 'INFO');
        if (info.includes('cluster_state:ok') && info.includes('cluster_known_nodes:3')) break;
        if (Date.now() > deadline) throw new Error(`cluster not ready:\n${info}`);
        await sleep(50);
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { ports: nodes.map((n) => n.port), stop };
}

/** One command on a fresh connection (ioredis), for test set-up: the reply. */
async function redisCli(port, ...args) {
  const Redis = require('ioredis');
  const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0 });
  c.on('error', () => {});
  try {
    await c.connect();
    return await c.call(...args.map(String));
  } finally {
    c.disconnect();
  }
}

/** The two client libraries, connected to `port`. */
const CLIENTS = {
  'node-redis': {
    async connect(port) {
      const { createClient } = require('redis');
      const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: false } });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => Promise.resolve().then(() => (c.isOpen ? c.close?.() ?? c.quit() : undefined)).catch(() => {}) };
    },
  },
  'node-redis v4': {
    async connect(port) {
      const { createClient } = require('redis4');
      const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: false } });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => Promise.resolve().then(() => (c.isOpen ? c.quit() : undefined)).catch(() => {}) };
    },
  },
  ioredis: {
    async connect(port) {
      const Redis = require('ioredis');
      const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
      c.on('error', () => {});
      await c.connect();
      return { client: c, close: () => c.disconnect() };
    },
  },
};

/** One HTTP request; rejects after `timeoutMs` (default 5000) without an answer. */
function request(port, { path: urlPath = '/', method = 'GET', headers = {}, timeoutMs = 5000 } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: urlPath, method, headers, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** Listens on a free loopback port; resolves { port, close }. */
function listen(app) {
  return new Promise((resolve) => {
    const server = http.createServer(app);
    server.listen(0, '127.0.0.1', () => {
      resolve({ port: server.address().port, close: () => new Promise((r) => server.close(r)) });
    });
  });
}

/** A loopback TCP server that accepts connections and never answers: a hung Redis. */
function hungServer() {
  return new Promise((resolve) => {
    const sockets = new Set();
    const server = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    });
    server.listen(0, '127.0.0.1', () =>
      resolve({
        port: server.address().port,
        close: () => {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(r));
        },
      }),
    );
  });
}

/** `(...words) => Promise<reply>`: a raw command through either library. */
function raw(client) {
  return typeof client.call === 'function' && !('isOpen' in client)
    ? (...a) => client.call(...a.map(String))
    : (...a) => client.sendCommand(a.map(String));
}

/**
 * How many times the server ran `command` (INFO commandstats). A module command
 * (RL.*) counts the engine's calls: FCALL, EVALSHA and EVAL when the suite runs
 * on the Functions library.
 */
async function commandCalls(client, command) {
  const info = String(await raw(client)('INFO', 'commandstats'));
  const calls = (name) => {
    const m = new RegExp(`cmdstat_${name.toLowerCase().replace('.', '\\.')}:calls=(\\d+)`).exec(info);
    return m ? Number(m[1]) : 0;
  };
  if (TEST_ENGINE !== 'module' && /^(RL|CL)\./i.test(command)) return calls('fcall') + calls('evalsha') + calls('eval');
  return calls(command);
}

/**
 * Waits out the end of the server's clock-aligned window of `windowS` seconds
 * when less than `marginS` of it is left (its clock: `TIME` on `port`), so that
 * a test counting over several calls in such fixed windows runs inside one.
 * Without it, such a test failed when a window ended between its calls: about
 * once in (window ÷ the test's run time) runs.
 */
async function awayFromWindowEnd(port, windowS = 60, marginS = 2) {
  const [secs, micros] = (await redisCli(port, 'TIME')).map(Number);
  const leftS = windowS - (secs % windowS) - micros / 1e6;
  if (leftS < marginS) await sleep(Math.ceil(leftS * 1000) + 10);
}

module.exports = { sleep, freePort, startRedis, startCluster, redisCli, CLIENTS, request, listen, hungServer, commandCalls, raw, awayFromWindowEnd, TEST_ENGINE };
