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
  if (err instanceof RateLimitUnavailableError) return err;
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
 * Makes `send(args: (string|number)[]) => Promise<reply>` from a client:
 * - ioredis (`Redis`, `Cluster`): `client.call(command, ...args)`;
 * - node-redis v4/v5 (`createClient`, `createCluster`): `client.sendCommand(args)`
 *   (for a cluster, the key's position is given so that it routes);
 * - a function `(args) => Promise<reply>`: used as is.
 */
function senderFor(client) {
  if (typeof client === 'function') return client;
  if (client == null) throw new TypeError('redis-ratelimit: a client (node-redis, ioredis or a function) is required');
  if (typeof client.call === 'function' && !('isOpen' in client)) {
    // ioredis
    return (args) => client.call(...args.map(String));
  }
  if (typeof client.sendCommand === 'function') {
    // node-redis; a cluster client takes (firstKey, isReadonly, args).
    if (typeof client.getSlotMaster === 'function' || typeof client.getMasters === 'function' || 'masters' in client) {
      // RL.ALL numkeys key …: the first key is the third word.
      return (args) => {
        const firstKey = String(args[0]).toUpperCase() === 'RL.ALL' ? args[2] : args[1];
        return client.sendCommand(String(firstKey), false, args.map(String));
      };
    }
    return (args) => client.sendCommand(args.map(String));
  }
  throw new TypeError('redis-ratelimit: unsupported client: give a node-redis or ioredis client, or a function (args) => Promise');
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

module.exports = { RateLimitUnavailableError, senderFor, withTimeout, classify, isReplyError };
