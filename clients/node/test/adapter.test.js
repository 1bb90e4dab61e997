'use strict';
// The adapter without a server: which method each client kind is sent through,
// the timeout, and how errors are sorted.
const { test } = require('node:test');
const assert = require('node:assert');
const { senderFor, withTimeout, classify, RateLimitUnavailableError } = require('../lib/client');

test('ioredis: call(command, ...args) with strings', async () => {
  const seen = [];
  const send = senderFor({ call: (...a) => (seen.push(a), Promise.resolve(1)) });
  await send(['RL.GCRA', 'k', 4, 10, 0.5]);
  assert.deepStrictEqual(seen, [['RL.GCRA', 'k', '4', '10', '0.5']]);
});

test('node-redis: sendCommand(args); a cluster client gets the first key (RL.ALL: the third word)', async () => {
  const seen = [];
  await senderFor({ isOpen: true, sendCommand: (a) => (seen.push(a), Promise.resolve(1)) })(['RL.GCRA', 'k', 1, 1, 1]);
  assert.deepStrictEqual(seen, [['RL.GCRA', 'k', '1', '1', '1']]);
  const cluster = [];
  const sendCluster = senderFor({ isOpen: true, masters: [], sendCommand: (...a) => (cluster.push(a), Promise.resolve(1)) });
  await sendCluster(['RL.ALL', 2, '{u}:a', '{u}:b', 'GCRA', 1, 1, 1, 'SLIDINGLOG', 1, 1]);
  await sendCluster(['RL.GCRA', 'k', 1, 1, 1]);
  assert.deepStrictEqual(cluster.map((c) => c[0]), ['{u}:a', 'k']);
});

test('the timeout rejects with reason timeout', async () => {
  const send = withTimeout(() => new Promise(() => {}), 30);
  const err = await send(['RL.GCRA']).then(() => null, (e) => e);
  assert.ok(err instanceof RateLimitUnavailableError);
  assert.strictEqual(err.reason, 'timeout');
});

test('errors: unknown command → no-module, LOADING → server, a socket error → connection, other replies pass through', () => {
  const reply = (name, message) => Object.assign(new Error(message), { name });
  assert.strictEqual(classify(reply('ReplyError', "ERR unknown command 'RL.GCRA', with args beginning with: ")).reason, 'no-module');
  assert.strictEqual(classify(reply('ErrorReply', 'LOADING Redis is loading the dataset in memory')).reason, 'server');
  assert.strictEqual(classify(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })).reason, 'connection');
  const wrongType = reply('ReplyError', 'WRONGTYPE Operation against a key holding the wrong kind of value');
  assert.strictEqual(classify(wrongType), wrongType);
});

test('a disconnected client is not sent to (it would queue the command): reason connection, at once', async () => {
  let sent = 0;
  const io = { status: 'reconnecting', call: () => (sent++, new Promise(() => {})) };
  const nodeRedis = { isOpen: true, isReady: false, sendCommand: () => (sent++, new Promise(() => {})) };
  for (const client of [io, nodeRedis]) {
    const err = await withTimeout(senderFor(client), 60_000)(['RL.GCRA', 'k', 1, 1, 1]).then(() => null, (e) => e);
    assert.ok(err instanceof RateLimitUnavailableError, String(err));
    assert.strictEqual(err.reason, 'connection');
  }
  assert.strictEqual(sent, 0);
  // Connected, or about to connect (ioredis lazyConnect 'wait', 'connecting'): sent.
  for (const status of ['ready', 'wait', 'connecting', 'connect']) {
    await senderFor({ status, call: () => (sent++, Promise.resolve(1)) })(['PING']);
  }
  await senderFor({ isOpen: true, isReady: true, sendCommand: () => (sent++, Promise.resolve(1)) })(['PING']);
  assert.strictEqual(sent, 5);
});
