'use strict';
// The adapter: one `send(args)` over node-redis (`redis` v4/v5), ioredis, or a
// function, with a per-command timeout and errors sorted into "the limiter is
// unavailable" (fail open or closed) and "the call is wrong" (a bug to see).

/**
 * Thrown (or passed to `next`) when the limiter cannot decide: Redis is down
 * or hung past the timeout, or the server has no ratelimit module.
 * `reason` is 'timeout' | 'connection' | 'no-module' | 'server'.
 */
class RateLimitUnavailableError extends Error {
  constructor(message, reason, cause) {
    super(message);
    this.name = 'RateLimitUnavailableError';
    this.reason = reason;
    if (cause !== undefined) this.cause = cause;
  }
}

// Server replies that mean "cannot decide now", not "the call is wrong".
const UNAVAILABLE_REPLIES = [
  [/^ERR unknown command/i, 'no-module'],
  [/^(LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|BUSY|READONLY|NOREPLICAS|OOM)\b/, 'server'],
];

function isReplyError(err) {
  // ioredis: ReplyError; node-redis v4/v5: ErrorReply (and SimpleError in v5).
  return (
    err != null &&
    (err.name === 'ReplyError' || err.name === 'ErrorReply' || err.name === 'SimpleError' ||
      err.constructor?.name === 'ErrorReply' || err.constructor?.name === 'SimpleError')
  );
}

/** Sorts an error from the client: a RateLimitUnavailableError, or the error itself (a bad call). */
function classify(err) {
  // A TypeError is this package's word for a wrong call (or a policy the Functions library cannot run).
  if (err instanceof RateLimitUnavailableError || err instanceof TypeError) return err;
  const message = String(err && err.message);
  if (isReplyError(err)) {
    for (const [re, reason] of UNAVAILABLE_REPLIES) {
      if (re.test(message)) return new RateLimitUnavailableError(message, reason, err);
    }
    return err;
  }
  return new RateLimitUnavailableError(`Redis unavailable: ${message}`, 'connection', err);
}

/**
 * Why a client library would hold a command in its offline queue now, or null
 * when it is connected. A command sent then would wait for a reconnection that
 * may never come (node-redis and ioredis queue commands while disconnected), so
 * a refused or lost connection would cost the whole timeout and read as
 * 'timeout'. Instead such a command is not sent: it fails at once with reason
 * 'connection'.
 * - ioredis (`Redis`, `Cluster`): `status` 'reconnecting', 'close' or 'end'
 *   (the status between attempts after a failure); 'wait' (lazyConnect: the
 *   first command connects), 'connecting', 'connect' and 'ready' send;
 * - node-redis client: `isReady` false (not connected, or reconnecting;
 *   connect() must have been awaited). A node-redis cluster has no such flag:
 *   its commands are bounded by the timeout only.
 */
const IOREDIS_DOWN = new Set(['reconnecting', 'close', 'end']);

function offlineReason(client) {
  if (typeof client.status === 'string' && typeof client.call === 'function') {
    return IOREDIS_DOWN.has(client.status) ? `ioredis status '${client.status}'` : null;
  }
  if (client.isReady === false) return client.isOpen ? 'node-redis is reconnecting' : 'node-redis client is not open';
  return null;
}

/** Wraps `send` so that nothing is queued in a disconnected client's offline queue. */
function unqueued(client, send) {
  return (args) => {
    const why = offlineReason(client);
    if (why !== null) {
      return Promise.reject(new RateLimitUnavailableError(`Redis not connected (${why}): ${args[0]} not sent`, 'connection'));
    }
    return send(args);
  };
}

/**
 * Makes `send(args: (string|number)[]) => Promise<reply>` from a client. This
 * is the one place where a command leaves for the server:
 * - ioredis (`Redis`, `Cluster`): `client.call(command, ...args)`;
 * - node-redis v4/v5 (`createClient`): `client.sendCommand(args)`;
 * - node-redis cluster (`createCluster`): `client.sendCommand(firstKey, false, args)`
 *   (the first key routes it: the second word, or RL.ALL's third);
 * - a function `(args) => Promise<reply>`: used as is.
 * A disconnected ioredis or node-redis client fails at once (see offlineReason).
 */
function senderFor(client) {
  if (typeof client === 'function') return client;
  if (client == null) throw new TypeError('redis-ratelimit-client: a client (node-redis, ioredis or a function) is required');
  if (typeof client.call === 'function' && !('isOpen' in client)) {
    // ioredis
    return unqueued(client, (args) => client.call(...args.map(String)));
  }
  if (typeof client.sendCommand === 'function') {
    if (typeof client.getSlotMaster === 'function' || typeof client.getMasters === 'function' || 'masters' in client) {
      return (args) => client.sendCommand(String(firstKeyOf(args)), false, args.map(String));
    }
    return unqueued(client, (args) => client.sendCommand(args.map(String)));
  }
  throw new TypeError('redis-ratelimit-client: unsupported client: give a node-redis or ioredis client, or a function (args) => Promise');
}

/**
 * The first key of a command: RL.ALL numkeys key …: the third word; FCALL,
 * EVALSHA, EVAL (name or script, numkeys, key …): the fourth, when numkeys > 0;
 * COMMAND, FUNCTION: none (any node); else the second.
 */
const SCRIPT_CALLS = new Set(['FCALL', 'FCALL_RO', 'EVAL', 'EVALSHA', 'EVAL_RO', 'EVALSHA_RO']);
const KEYLESS = new Set(['COMMAND', 'FUNCTION', 'SCRIPT', 'PING']);
function firstKeyOf(args) {
  const command = String(args[0]).toUpperCase();
  if (command === 'RL.ALL') return args[2];
  if (SCRIPT_CALLS.has(command)) return Number(args[2]) > 0 ? args[3] : undefined;
  if (KEYLESS.has(command)) return undefined;
  return args[1];
}

/**
 * For a cluster client, `async () => send[]`: a sender for each primary (to
 * load the Functions library on every one); null for a single server or a
 * function.
 * - ioredis `Cluster`: `nodes('master')` (after the cluster is ready);
 * - node-redis cluster (v4, v5): `masters` and `nodeClient(master)`.
 */
function primariesOf(client) {
  if (typeof client === 'function' || client == null) return null;
  if (typeof client.call === 'function' && !('isOpen' in client)) {
    if (typeof client.nodes !== 'function' || !client.isCluster) return null;
    return async () => {
      if (client.nodes('master').length === 0) await client.call('PING');
      return client.nodes('master').map((node) => (args) => node.call(...args.map(String)));
    };
  }
  if (typeof client.sendCommand === 'function' && typeof client.nodeClient === 'function') {
    return async () => {
      const masters = client.masters ?? client.getMasters();
      return Promise.all(
        masters.map(async (master) => {
          const node = await client.nodeClient(master);
          return (args) => node.sendCommand(args.map(String));
        }),
      );
    };
  }
  return null;
}

/** `send` with a timeout (ms; 0 or Infinity: none) and classified errors. */
function withTimeout(send, timeoutMs) {
  if (!(timeoutMs > 0) || timeoutMs === Infinity) {
    return (args) => {
      let p;
      try {
        p = Promise.resolve(send(args));
      } catch (err) {
        return Promise.reject(classify(err));
      }
      return p.catch((err) => Promise.reject(classify(err)));
    };
  }
  return (args) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new RateLimitUnavailableError(`Redis did not answer ${args[0]} within ${timeoutMs} ms`, 'timeout'));
      }, timeoutMs);
      let p;
      try {
        p = Promise.resolve(send(args));
      } catch (err) {
        p = Promise.reject(err);
      }
      p.then(
        (reply) => {
          clearTimeout(timer);
          resolve(reply);
        },
        (err) => {
          clearTimeout(timer);
          reject(classify(err));
        },
      );
    });
}

module.exports = { RateLimitUnavailableError, senderFor, primariesOf, firstKeyOf, withTimeout, classify, isReplyError, offlineReason };
