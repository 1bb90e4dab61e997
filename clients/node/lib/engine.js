'use strict';
// The engine a client decides with (issue 31): the module's commands when the
// server has the module, else the Functions library (functions/ratelimit.lua,
// which the package carries as lib/ratelimit.lua, byte for byte: copied in by
// `npm pack`'s prepack script), else the same code through
// EVALSHA. Every entry point sends the module's command words (RL.GCRA key …);
// this layer turns them into FCALL or EVALSHA when the module is absent, keeps
// the library loaded (after FUNCTION FLUSH, a failover, a restart, a new
// cluster node) and passes the caller's clock where the server refuses TIME in
// scripts. Contract: docs/functions.md.

const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { isReplyError } = require('./client');

/**
 * The repository's functions/ratelimit.lua when this is clients/node of a
 * checkout (npm test, `file:` dependencies), else the library the package
 * carries (lib/ratelimit.lua, copied in by the prepack script).
 */
function libraryPath() {
  const pkg = path.dirname(__dirname);
  const checkout = path.join(pkg, '..', '..', 'functions', 'ratelimit.lua');
  if (path.basename(pkg) === 'node' && path.basename(path.dirname(pkg)) === 'clients' && fs.existsSync(checkout)) return checkout;
  const packed = path.join(__dirname, 'ratelimit.lua');
  if (fs.existsSync(packed)) return packed;
  throw new Error(
    `redis-ratelimit-client: the package has no ${packed} (the Functions library): reinstall it ` +
      '(npm install redis-ratelimit-client, or npm pack in clients/node of a checkout of the repository)',
  );
}

/** The library: the file FUNCTION LOAD takes (first line `#!lua name=ratelimit`). */
const LIBRARY_PATH = libraryPath();
const LIBRARY_CODE = fs.readFileSync(LIBRARY_PATH, 'utf8');
/**
 * The EVAL form: the same file without its first line and without its fast paths (the lines from
 * `-- fast paths: begin` to `-- fast paths: end`, which the EVAL form never runs); it dispatches on
 * ARGV[1], the function name.
 */
const EVAL_BODY = evalForm(LIBRARY_CODE);
const EVAL_SHA = crypto.createHash('sha1').update(EVAL_BODY).digest('hex');
/** `code` as the EVAL form (EVAL_BODY). */
function evalForm(code) {
  const kept = [];
  let skipping = false;
  for (const line of code.slice(code.indexOf('\n') + 1).split('\n')) {
    if (line === '-- fast paths: begin') skipping = true;
    if (!skipping) kept.push(line);
    if (line === '-- fast paths: end') skipping = false;
  }
  return kept.join('\n');
}

/** The embedded copy's version (`local VERSION = n`, what `rl_version` returns). */
const LIBRARY_VERSION = (() => {
  const m = /^local VERSION = (\d+)$/m.exec(LIBRARY_CODE);
  if (!m) throw new Error(`redis-ratelimit-client: ${LIBRARY_PATH} has no 'local VERSION = n' line`);
  return Number(m[1]);
})();

/** The engines, in the order `auto` tries them. */
const ENGINES = ['module', 'functions', 'eval'];

/** What the info line says of each engine. */
const ENGINE_DESCRIPTIONS = {
  module: 'the server has the redis-ratelimit module (RL.* commands)',
  functions: `the Functions library 'ratelimit' by FCALL (loaded where it was absent or older than this package's version ${LIBRARY_VERSION})`,
  eval: "the Functions library's code by EVALSHA",
};

/** The warning of a fall back to EVALSHA, with the server's refusal. */
const evalFallbackMessage = (reason) =>
  `redis-ratelimit-client: engine 'eval': the server refused FUNCTION or FCALL (${reason}), so the library's code runs by ` +
  'EVALSHA, about 5x the instructions of FCALL. Remedy: an administrator loads the library once (make load-functions ' +
  'REDIS_URL=..., or redis-cli -x FUNCTION LOAD REPLACE < ratelimit.lua: docs/functions.md); users without FUNCTION then call it with FCALL';

/** The default logger: warnings to console.warn, nothing else. */
const DEFAULT_LOGGER = { warn: (message) => console.warn(message) };

/** The library's function for each module command it offers. */
const FUNCTION_OF = {
  'RL.GCRA': 'rl_gcra',
  'RL.TOKENBUCKET': 'rl_tokenbucket',
  'RL.LEAKYBUCKET': 'rl_leakybucket',
  'RL.FIXEDWINDOW': 'rl_fixedwindow',
  'RL.SLIDINGWINDOW': 'rl_slidingwindow',
  'RL.SLIDINGLOG': 'rl_slidinglog',
  'CL.THROTTLE': 'cl_throttle',
  'RL.CONCURRENCY': 'rl_concurrency',
  'RL.ALL': 'rl_all',
};

/**
 * A module command as a library call, `{ fname, keys, rest }`, or null for a
 * command that is not the module's (DEL, …: sent as is). Throws on a
 * module-only command (server-side policies are module data).
 */
function libraryCallOf(args) {
  const command = String(args[0]).toUpperCase();
  const fname = FUNCTION_OF[command];
  if (fname === undefined) {
    if (command.startsWith('RL.') || command.startsWith('CL.')) {
      throw new TypeError(
        `redis-ratelimit-client: ${command} needs the redis-ratelimit module: server-side policies (RL.POLICY, RL.LIMIT) ` +
          'are module data, not in the Functions library (give the limit itself, or load the module)',
      );
    }
    return null;
  }
  if (fname === 'rl_all') {
    const n = Number(args[1]);
    return { fname, keys: args.slice(2, 2 + n), rest: args.slice(2 + n) };
  }
  return { fname, keys: [args[1]], rest: args.slice(2) };
}

/** The command words of a library call through `engine` ('functions': FCALL; 'eval': EVALSHA, or EVAL with the body). */
function libraryCommand(engine, { fname, keys, rest }, nowUs, { withBody = false } = {}) {
  const now = nowUs === undefined ? [] : ['NOW', nowUs];
  if (engine === 'functions') return ['FCALL', fname, keys.length, ...keys, ...rest, ...now];
  return [withBody ? 'EVAL' : 'EVALSHA', withBody ? EVAL_BODY : EVAL_SHA, keys.length, ...keys, fname, ...rest, ...now];
}

const MODULE_COMMAND = /^(RL|CL)\./i;
const messageOf = (err) => String(err && err.message);
const FUNCTION_NOT_FOUND = /function not found/i;
const NOSCRIPT = /^NOSCRIPT\b/;
const UNKNOWN_COMMAND = /^ERR unknown command/i;
const NOT_NOW = /^(LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|BUSY|READONLY|NOREPLICAS|OOM)\b/;
// What a server answers when a script may not call TIME: ElastiCache
// Serverless ("ERR This Redis command is not allowed from script"), an ACL
// user without +time ("ERR The user executing the script can't run this
// command or subcommand"), and the wording of other Redis versions.
const TIME_REFUSED = /not allowed from scripts?|can't run this command|no permissions to run the 'time' command/i;

/** The caller's clock in µs since the Unix epoch (an integer). */
const callerClockUs = () => Date.now() * 1000;

/**
 * One client's engine. `send(args)`: the raw sender (errors as the client
 * library gives them); `primaries()`: async, the senders of every primary of
 * a cluster, or null for a single server. Options:
 * - `engine`: 'auto' (default) | 'module' | 'functions' | 'eval';
 * - `clock`: 'auto' (default: the server's TIME, the caller's where a server
 *   refuses TIME in scripts) | 'server' | 'caller' (always `NOW`);
 * - `now()`: the caller's clock in µs (default Date.now() × 1000);
 * - `logger`: `logger.info` told the engine this client settled on, once (again
 *   only if it changes); `logger.warn` (else `logger.error`) told once of a fall
 *   back to EVALSHA (why, and the remedy) and when the caller's clock takes
 *   over. Default: warnings to console.warn, no info.
 */
class Engine {
  constructor(send, { engine = 'auto', clock = 'auto', now = callerClockUs, logger, primaries = null } = {}) {
    if (engine !== 'auto' && !ENGINES.includes(engine)) {
      throw new TypeError(`redis-ratelimit-client: engine must be 'auto', 'module', 'functions' or 'eval', not ${JSON.stringify(engine)}`);
    }
    if (!['auto', 'server', 'caller'].includes(clock)) {
      throw new TypeError(`redis-ratelimit-client: clock must be 'auto', 'server' or 'caller', not ${JSON.stringify(clock)}`);
    }
    this.send = send;
    this.forced = engine === 'auto' ? null : engine;
    this.clock = clock;
    this.now = now;
    this.logger = logger ?? DEFAULT_LOGGER;
    this.primaries = primaries;
    this._announced = null; // the engine last logged
    this._fallbackReason = null; // the refusal that made the library's code run by EVALSHA
    this._warnedEval = false;
    /** The engine in use: 'module' | 'functions' | 'eval', or null before the first decision. */
    this.name = this.forced === 'module' || this.forced === 'eval' ? this.forced : null;
    this.callerClock = clock === 'caller';
    this._detecting = null;
    this._loading = null;
  }

  /** Resolves to the engine in use, finding it on the first call (and again after a failed attempt). */
  ready() {
    if (this.name !== null) return Promise.resolve(this._announce(this.name));
    if (this._detecting === null) {
      this._detecting = this._detect().then(
        (name) => {
          this.name = name;
          this._detecting = null;
          return this._announce(name);
        },
        (err) => {
          this._detecting = null;
          throw err;
        },
      );
    }
    return this._detecting;
  }

  async _detect() {
    if (this.forced === null && (await this._hasModule())) return 'module';
    try {
      await this._loadLibrary();
      return 'functions';
    } catch (err) {
      // Refused (no FUNCTION, NOPERM, a provider's list): the EVAL form; a
      // forced 'functions' reports why. A server that cannot answer now
      // (loading, a replica, busy) is asked again on the next call.
      if (this.forced === 'functions' || !isReplyError(err) || NOT_NOW.test(messageOf(err))) throw err;
      this._fallbackReason = messageOf(err);
      return 'eval';
    }
  }

  // The engine this client settled on, logged once (again only if it
  // changes): info, or one warning per client for a fall back to EVALSHA.
  _announce(name) {
    if (name === this._announced) return name;
    this._announced = name;
    try {
      if (name === 'eval' && this.forced === null) {
        if (!this._warnedEval) {
          this._warnedEval = true;
          this._warn(evalFallbackMessage(this._fallbackReason));
        }
      } else if (typeof this.logger.info === 'function') {
        this.logger.info(
          `redis-ratelimit-client: engine '${name}': ${ENGINE_DESCRIPTIONS[name]}${this.forced ? ' (forced by the engine option)' : ''}`,
        );
      }
    } catch {
      // a logger's failure must not fail the decision
    }
    return name;
  }

  _warn(message) {
    const log = typeof this.logger.warn === 'function' ? this.logger.warn : this.logger.error;
    if (typeof log === 'function') log.call(this.logger, message);
  }

  // COMMAND INFO rl.gcra: one nil for an unknown command. Allowed where MODULE
  // LIST is not; a server that refuses COMMAND too has no module for us (a
  // server that cannot answer now is asked again on the next call).
  async _hasModule() {
    let reply;
    try {
      reply = await this.send(['COMMAND', 'INFO', 'rl.gcra']);
    } catch (err) {
      if (isReplyError(err) && !NOT_NOW.test(messageOf(err))) return false;
      throw err;
    }
    return Array.isArray(reply) && reply.length > 0 && reply[0] != null;
  }

  /**
   * On every primary (or the one server): `FCALL_RO rl_version 0`; where the
   * library is absent or older than the embedded copy, FUNCTION LOAD REPLACE.
   * A newer library is left alone (same contract, later fixes).
   */
  async _loadLibrary() {
    const targets = this.primaries ? await this.primaries() : [this.send];
    await Promise.all(
      targets.map(async (send) => {
        let version = 0;
        try {
          version = Number(await send(['FCALL_RO', 'rl_version', 0]));
        } catch (err) {
          if (!(isReplyError(err) && FUNCTION_NOT_FOUND.test(messageOf(err)))) throw err;
        }
        if (!(version >= LIBRARY_VERSION)) await send(['FUNCTION', 'LOAD', 'REPLACE', LIBRARY_CODE]);
      }),
    );
  }

  // One reload at a time, shared by the calls that met "function not found".
  _reload() {
    if (this._loading === null) {
      this._loading = this._loadLibrary().finally(() => {
        this._loading = null;
      });
    }
    return this._loading;
  }

  _useCallerClock(reason) {
    if (this.callerClock) return;
    this.callerClock = true;
    try {
      this._warn(
        `redis-ratelimit-client: the server refuses TIME inside scripts (${reason}); ` +
          "the library's calls now carry this process's clock (NOW <unix_µs>): keep it NTP-synchronized",
      );
    } catch {
      // a logger's failure must not fail the decision
    }
  }

  /** Sends one command (the module's words), through the engine in use. */
  async call(args) {
    if (!MODULE_COMMAND.test(String(args[0]))) return this.send(args);
    let engine = await this.ready();
    if (engine === 'module') {
      try {
        return await this.send(args);
      } catch (err) {
        // The module went away (a failover to a server without it): find the engine again, once.
        if (this.forced !== null || !(isReplyError(err) && UNKNOWN_COMMAND.test(messageOf(err)))) throw err;
        this.name = null;
        engine = await this.ready();
        if (engine === 'module') throw err;
      }
    }
    return this._callLibrary(engine, libraryCallOf(args));
  }

  // The library call, with each recovery once: the library reloaded on
  // "function not found", the script sent whole on NOSCRIPT, the caller's
  // clock where TIME is refused.
  async _callLibrary(engine, lib) {
    let reloaded = false;
    let withBody = false;
    let timeRefused = null; // the refusal that made this call retry with NOW
    for (;;) {
      const withNow = this.callerClock || timeRefused !== null;
      try {
        const reply = await this.send(libraryCommand(engine, lib, withNow ? this.now() : undefined, { withBody }));
        if (timeRefused !== null) this._useCallerClock(timeRefused);
        return reply;
      } catch (err) {
        if (!isReplyError(err)) throw err;
        const message = messageOf(err);
        if (engine === 'functions' && !reloaded && FUNCTION_NOT_FOUND.test(message)) {
          reloaded = true;
          try {
            await this._reload();
          } catch (loadErr) {
            // FUNCTION refused now (a failover to a server that refuses it): the EVAL form.
            if (this.forced !== null || !isReplyError(loadErr)) throw loadErr;
            this._fallbackReason = messageOf(loadErr);
            this.name = engine = 'eval';
            this._announce('eval');
          }
          continue;
        }
        if (engine === 'eval' && !withBody && NOSCRIPT.test(message)) {
          withBody = true;
          continue;
        }
        if (!withNow && this.clock === 'auto' && TIME_REFUSED.test(message)) {
          timeRefused = message;
          continue;
        }
        throw err;
      }
    }
  }
}

module.exports = { Engine, ENGINES, LIBRARY_PATH, LIBRARY_CODE, LIBRARY_VERSION, EVAL_BODY, EVAL_SHA, libraryCallOf, libraryCommand, TIME_REFUSED };
