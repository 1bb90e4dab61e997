'use strict';
// A refused port fails within milliseconds with reason 'connection' through
// every client library, whatever the timeout: node-redis and ioredis would hold
// the command in their offline queue until the timeout (reported as 'timeout').
const { test } = require('node:test');
const assert = require('node:assert');
const { freePort, sleep } = require('./helpers');
const { RateLimit, RateLimitUnavailableError } = require('..');

const LIBRARIES = {
  'node-redis': () => require('redis').createClient,
  'node-redis v4': () => require('redis4').createClient,
};

async function refusedClient(name, port) {
  if (name === 'ioredis') {
    const Redis = require('ioredis');
    // ioredis's defaults: offline queue on, 20 retries per request.
    const c = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 50 });
    c.on('error', () => {});
    // Its first attempt has failed: between attempts it waits in 'reconnecting'.
    for (let i = 0; i < 200 && c.status !== 'reconnecting'; i++) await sleep(5);
    return { client: c, close: () => c.disconnect() };
  }
  const c = LIBRARIES[name]()({ socket: { host: '127.0.0.1', port, reconnectStrategy: () => 50 } });
  let failed = false;
  c.on('error', () => {
    failed = true;
  });
  c.connect().catch(() => {});
  for (let i = 0; i < 200 && !failed; i++) await sleep(5);
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

for (const name of ['node-redis', 'node-redis v4', 'ioredis']) {
  test(`connection refused (${name}): reason 'connection' at once, not 'timeout' after timeoutMs`, async () => {
    const { client, close } = await refusedClient(name, await freePort());
    try {
      const rl = new RateLimit(client, { timeoutMs: 5000 });
      for (let i = 0; i < 3; i++) {
        // ioredis is 'connecting' for an instant at each retry: call between two attempts.
        while (client.status !== undefined && client.status !== 'reconnecting') await sleep(1);
        const started = Date.now();
        const err = await rl.gcra('k', 1, 1, 1).then(() => null, (e) => e);
        const elapsed = Date.now() - started;
        assert.ok(err instanceof RateLimitUnavailableError, String(err));
        assert.strictEqual(err.reason, 'connection', err.message);
        assert.ok(elapsed < 1000, `${elapsed} ms`);
        await sleep(20);
      }
    } finally {
      await close();
    }
  });
}
