// Type declarations of redis-ratelimit-client (the Node client of the redis-ratelimit module).

/** ioredis: `new Redis(…)` or `new Cluster(…)` (`call` routes by the command's key). */
export interface IoredisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
}
/** node-redis v4/v5 `createClient(…)`. */
export interface NodeRedisClientLike {
  sendCommand(args: string[]): Promise<unknown>;
}
/** node-redis v4/v5 `createCluster(…)`: sent with the command's first key, so that it routes. */
export interface NodeRedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}
/** A function sending one raw command (words as given: strings and numbers). */
export type SendCommandFunction = (args: (string | number)[]) => Promise<unknown>;

/** A node-redis (v4+) or ioredis client or cluster, or a function sending one raw command. */
export type RedisClientLike = IoredisLike | NodeRedisClientLike | NodeRedisClusterLike | SendCommandFunction;

/** Periods and windows are in seconds (fractions allowed: 0.5 is 500 ms). `label` names the limit in headers. */
export type LimitSpec =
  | { type: 'gcra'; maxBurst: number; tokensPerPeriod: number; period: number; label?: string }
  | { type: 'tokenBucket'; capacity: number; refillTokens: number; refillPeriod: number; label?: string }
  | { type: 'leakyBucket'; capacity: number; leakTokens: number; leakPeriod: number; label?: string }
  | { type: 'fixedWindow'; limit: number; window: number; align?: 'epoch' | 'first'; label?: string }
  /** A calendar window: from one local boundary of the unit to the next, in `tz` (IANA name or '+hh:mm'; UTC by default). */
  | { type: 'fixedWindow'; limit: number; window: 'day' | 'week' | 'month' | 'year'; tz?: string; label?: string }
  | { type: 'slidingWindow'; limit: number; window: number; buckets?: number; label?: string }
  | { type: 'slidingLog'; limit: number; window: number; label?: string }
  | { type: 'policy'; name: string; label?: string };

/**
 * RL.ALL limits: no leakyBucket, no align 'first', no buckets; and a
 * concurrency lease (`id`), taken only when every limit allows.
 */
export type AllLimit =
  | (LimitSpec & { key: string })
  | { key: string; type: 'concurrency'; limit: number; lease: number; id: string; label?: string };

export interface CallOptions {
  /** TOKENS n: this request's cost (default 1). */
  tokens?: number;
  /** REFUND n: give n tokens back (instead of tokens). */
  refund?: number;
  /** PEEK: answer without writing. */
  peek?: boolean;
  /** FORCE: record `tokens` whatever the limit says (past it: a debt repaid before the next admission); not with peek or refund. */
  force?: boolean;
  /** BLOCK seconds: lock the limiter out that long when it refuses (not with policies). */
  block?: number;
  /** The name in the headers (default: the label, the policy's name or the type). */
  name?: string;
}

export interface HeaderOptions {
  name?: string;
  /** Also X-RateLimit-Limit / -Remaining / -Reset. */
  legacy?: boolean;
}

export declare class RateLimitResult {
  /** true: refused, nothing was taken. */
  limited: boolean;
  /** The most tokens one request can ever take. */
  limit: number;
  /** Tokens left after this call (leaky bucket: free room in the queue). */
  remaining: number;
  /** -1 when allowed (leaky bucket: the delay before the work); when limited, ms until the same cost passes, or -1: never (cost > limit). */
  retryAfterMs: number;
  /** ms until the limiter is full again. */
  resetAfterMs: number;
  /** RL.ALL: the 0-based index of the binding limit. */
  which?: number;
  /** RL.ALL: the key of the binding limit. */
  readonly whichKey?: string;
  /** Answered from the middleware's local cache of denials. */
  cached?: boolean;
  readonly allowed: boolean;
  /** The name used in the headers. */
  name: string;
  /** The window (s) in which `limit` tokens come back: RateLimit-Policy's w. */
  windowS?: number;
  constructor(reply: unknown[], meta?: { name?: string; windowS?: number; keys?: string[] });
  /** RateLimit-Policy, RateLimit, and Retry-After when limited and retryAfterMs >= 0. */
  headers(options?: HeaderOptions): Record<string, string>;
}

/**
 * Redis is down, hung past the timeout, or has no ratelimit module. 'connection':
 * refused or lost, or the client is not connected (a command is then not queued).
 */
export declare class RateLimitUnavailableError extends Error {
  reason: 'timeout' | 'connection' | 'no-module' | 'server';
  cause?: unknown;
}

/** The engine that decides: the module's commands, the Functions library (FCALL), or the same code by EVALSHA. */
export type EngineName = 'module' | 'functions' | 'eval';

/** The options every entry point shares with RateLimit. */
export interface EngineOptions {
  /** Command timeout (default 250 ms; 0: none): a command unanswered by then rejects with RateLimitUnavailableError. */
  timeoutMs?: number;
  /** 'auto' (default): the module when the server has it, else the Functions library, else EVALSHA; or one forced. */
  engine?: 'auto' | EngineName;
  /** Whose clock the library reads: 'auto' (default: the server's; the caller's where TIME is refused in scripts), 'server', 'caller'. */
  clock?: 'auto' | 'server' | 'caller';
  /**
   * `info`: told once which engine this client settled on; `warn` (else `error`): told once of a
   * fall back to EVALSHA (why, and the remedy) and when the caller's clock takes over.
   * Default: warnings to console.warn, no info (`logger: console` shows it).
   */
  logger?: { info?(message: string): void; warn?(message: string): void; error?(message: string): void };
}

export declare class RateLimit {
  constructor(client: RedisClientLike, options?: EngineOptions & { now?: () => number });
  /** The command timeout (ms). */
  readonly timeoutMs: number;
  /** The engine deciding; null until the first decision (or ready()) has found it. */
  readonly engine: EngineName | null;
  /** Finds the engine now (loading the Functions library if needed). */
  ready(): Promise<EngineName>;
  /** RL.POLICY GET name as a spec (undefined: no such policy); rejects with a TypeError on an unknown algorithm. Module only. */
  policy(name: string): Promise<LimitSpec | undefined>;
  gcra(key: string, maxBurst: number, tokensPerPeriod: number, period: number, options?: CallOptions): Promise<RateLimitResult>;
  tokenBucket(key: string, capacity: number, refillTokens: number, refillPeriod: number, options?: CallOptions): Promise<RateLimitResult>;
  leakyBucket(key: string, capacity: number, leakTokens: number, leakPeriod: number, options?: CallOptions): Promise<RateLimitResult>;
  fixedWindow(key: string, limit: number, window: number | 'day' | 'week' | 'month' | 'year', options?: CallOptions & { align?: 'epoch' | 'first'; tz?: string }): Promise<RateLimitResult>;
  slidingWindow(key: string, limit: number, window: number, options?: CallOptions & { buckets?: number }): Promise<RateLimitResult>;
  slidingLog(key: string, limit: number, window: number, options?: CallOptions): Promise<RateLimitResult>;
  /** RL.ALL: all or nothing; `which` is the binding limit's index in `limits`. */
  all(limits: AllLimit[], options?: CallOptions): Promise<RateLimitResult>;
  /** RL.LIMIT key policy (no block option: a policy carries its own). */
  limit(policy: string, key: string, options?: Omit<CallOptions, 'block'>): Promise<RateLimitResult>;
  /** One limit given as a spec. */
  check(key: string, spec: LimitSpec, options?: CallOptions): Promise<RateLimitResult>;
  /**
   * RL.CONCURRENCY key limit lease ACQUIRE id: a slot (or `tokens` slots) under
   * a lease. Resolves to a Lease; a refusal is a Lease with `allowed` false
   * (nothing taken) and `retryAfterMs` (-1: never, tokens > limit).
   */
  acquire(key: string, options: AcquireOptions): Promise<Lease>;
  /** RL.CONCURRENCY … RENEW id: `limited` true when the lease is not held (expired or released). */
  renew(key: string, id: string, options: LeaseParams & { peek?: boolean }): Promise<RateLimitResult>;
  /** RL.CONCURRENCY … RELEASE id: what is free after it (an unknown id is no error). */
  release(key: string, id: string, options: LeaseParams & { peek?: boolean }): Promise<RateLimitResult>;
  /** TOKENS cost FORCE: a cost known after the work, recorded even past the limit (debt); null for a cost of 0. */
  charge(key: string, spec: LimitSpec, cost: number, options?: Omit<CallOptions, 'tokens' | 'force' | 'peek' | 'refund'>): Promise<RateLimitResult | null>;
  /** DEL key: true when there was a limiter. */
  reset(key: string): Promise<boolean>;
  /** Any raw command (timeout and error classification applied). */
  command(...args: (string | number)[]): Promise<unknown>;
}

/** The parameters every RL.CONCURRENCY call carries. */
export interface LeaseParams {
  /** The most slots held at once. */
  limit: number;
  /** Seconds a lease lasts from its acquire or renew (fractions allowed). */
  lease: number;
}

export interface AcquireOptions extends LeaseParams {
  /** The lease id (default: a random UUID). Acquiring a held id again renews it. */
  id?: string;
  /** Slots this lease takes (default 1). */
  tokens?: number;
  /** Answer without taking anything. */
  peek?: boolean;
  /** BLOCK seconds: lock the limiter out that long when it refuses. */
  block?: number;
  /** Renew on an unref'd timer while held: true (every lease/3) or every that many seconds. */
  autoRenew?: boolean | number;
  /** Auto-renew found the lease gone (expired or released elsewhere); the timer has stopped. */
  onLost?: (result: RateLimitResult, lease: Lease) => void;
  /** An auto-renew call failed (Redis unavailable); the next tick tries again. */
  onRenewError?: (err: unknown, lease: Lease) => void;
}

/** The result of acquire(): the decision, and the lease when allowed. */
export declare class Lease extends RateLimitResult {
  /** The limiter's key. */
  readonly key: string;
  /** The lease id. */
  readonly id: string;
  /** The slots it holds when allowed. */
  readonly tokens: number;
  /** The lease time (s). */
  readonly leaseSeconds: number;
  /** release() was called. */
  readonly released: boolean;
  /** A renew found the lease gone. */
  readonly lost: boolean;
  /** Allowed, not a PEEK, not released, not lost. */
  readonly held: boolean;
  /** RELEASE id, once: every call returns the same promise; null when nothing was held. */
  release(): Promise<RateLimitResult | null>;
  /** RENEW id: `limited` true means the lease was lost (then `lost` is true). */
  renew(): Promise<RateLimitResult>;
  /** Stops the auto-renew timer (release() does it too). */
  stopAutoRenew(): void;
}

/** Minimal request/response shapes (Express, or node:http with req.ip unset). */
export interface RequestLike {
  method?: string;
  url?: string;
  path?: string;
  ip?: string;
  socket?: { remoteAddress?: string };
  headers: Record<string, string | string[] | undefined>;
  rateLimit?: RateLimitResult;
  [k: string]: any;
}
export interface ResponseLike {
  statusCode: number;
  headersSent: boolean;
  setHeader(name: string, value: string): unknown;
  getHeader?(name: string): unknown;
  end(body?: string): unknown;
}
export type NextFunction = (err?: unknown) => void;

export interface Rule {
  /** Names the rule in keys (`${prefix}${name}:${key}`) and headers. */
  name?: string;
  /** A spec, or the rule syntax of a fixed window: '100/minute', '1000/month@Europe/Paris'. */
  limit: LimitSpec | string;
  /** A path prefix ('/api' matches '/api' and '/api/…'), RegExp, list, or predicate. */
  path?: string | RegExp | ((req: RequestLike) => boolean) | (string | RegExp)[];
  method?: string | string[];
  /** This rule's key function (default: the middleware's). */
  key?: (req: RequestLike) => string | null | undefined;
}

export interface MiddlewareOptions {
  client?: RedisClientLike;
  limiter?: RateLimit;
  rules?: Rule[];
  /** A single limit for every request (instead of rules): a spec, or the rule syntax of a fixed window ('1000/month@Europe/Paris'). */
  limit?: LimitSpec | string;
  name?: string;
  /**
   * The client's identity; null/undefined: not limited. Default: req.ip (else the
   * socket's address), an IPv6 address as its network of `ipv6Subnet` bits.
   */
  key?: (req: RequestLike) => string | null | undefined;
  /** The default key's IPv6 network: 32..64 bits (default 56), false (whole addresses), or per request. */
  ipv6Subnet?: number | false | ((req: RequestLike) => number);
  /** The default key's set-up checks (express-rate-limit v8's), each reported once to logger.error. Default true. */
  validate?: boolean | Partial<Record<'ip' | 'trustProxy' | 'xForwardedForHeader' | 'forwardedHeader' | 'keyGeneratorIpFallback' | 'default', boolean>>;
  /** Where the set-up checks are reported (default console). */
  logger?: { error(err: unknown): void; warn?(message: string): void; info?(message: string): void };
  /** 'auto' (default), or one engine forced: as RateLimit's. */
  engine?: 'auto' | EngineName;
  /** Whose clock the library reads: as RateLimit's. */
  clock?: 'auto' | 'server' | 'caller';
  cost?: number | ((req: RequestLike) => number);
  /**
   * The tokens a response cost, known when it is done (e.g. `Number(res.getHeader('x-llm-tokens'))`):
   * every rule checks before the handler (PEEK) and records that many with FORCE when the response finishes.
   */
  charge?: (req: RequestLike, res: ResponseLike) => number | Promise<number>;
  /** Redis key prefix (default 'rl:'). */
  prefix?: string;
  /** true (default): pass requests when Redis is unavailable; false: 503. */
  failOpen?: boolean;
  /** Command timeout (default 250 ms). */
  timeoutMs?: number;
  /** Denials kept locally until retryAfterMs (default 10000 entries; 0: off). */
  cacheSize?: number;
  /** Also X-RateLimit-Limit / -Remaining / -Reset (default false). */
  legacyHeaders?: boolean;
  statusCode?: number;
  message?: string;
  handler?: (req: RequestLike, res: ResponseLike, next: NextFunction, result: RateLimitResult) => unknown;
  onUnavailable?: (err: RateLimitUnavailableError, req: RequestLike) => void;
}

export interface RateLimitMiddleware {
  (req: RequestLike, res: ResponseLike, next: NextFunction): void;
  /** The RateLimit it decides with. */
  limiter: RateLimit;
  /** The engine deciding (null before the first decision). */
  readonly engine: EngineName | null;
}

export declare function rateLimit(options: MiddlewareOptions): RateLimitMiddleware;

export interface ConcurrencyLimitOptions {
  client?: RedisClientLike;
  limiter?: RateLimit;
  /** The most requests in flight per key. */
  limit: number;
  /** Seconds a slot outlives a process that died holding it (default 60). */
  lease?: number;
  /** Renew while the response is open: true (every lease/3) or seconds (default false). */
  autoRenew?: boolean | number;
  /** The client's identity (default: its IP address, IPv6 as its network); null/undefined: not limited. */
  key?: (req: RequestLike) => string | null | undefined;
  ipv6Subnet?: number | false | ((req: RequestLike) => number);
  validate?: MiddlewareOptions['validate'];
  logger?: { error(err: unknown): void; warn?(message: string): void; info?(message: string): void };
  engine?: 'auto' | EngineName;
  clock?: 'auto' | 'server' | 'caller';
  /** Slots per request (default 1). */
  cost?: number | ((req: RequestLike) => number);
  /** Redis key prefix (default 'rl:conc:'); the key is `${prefix}${name}:${key}`. */
  prefix?: string;
  /** Default 'default'. */
  name?: string;
  /** true (default): pass requests (without a slot) when Redis is unavailable; false: 503. */
  failOpen?: boolean;
  timeoutMs?: number;
  statusCode?: number;
  message?: string;
  handler?: (req: RequestLike, res: ResponseLike, next: NextFunction, lease: Lease) => unknown;
  /** Told when Redis cannot decide, or a release or renew fails (default: logger.error). */
  onUnavailable?: (err: unknown, req?: RequestLike) => void;
}

export interface ConcurrencyLimitMiddleware {
  (req: RequestLike, res: ResponseLike & { once(event: 'finish' | 'close', listener: () => void): unknown }, next: NextFunction): void;
  limiter: RateLimit;
  readonly engine: EngineName | null;
}

/** At most `limit` requests in flight per key: a slot per request, released on the response's finish or close. */
export declare function concurrencyLimit(options: ConcurrencyLimitOptions): ConcurrencyLimitMiddleware;

export interface StoreOptions extends EngineOptions {
  client?: RedisClientLike;
  limiter?: RateLimit;
  /** Redis key prefix (default 'rl:erl:'). */
  prefix?: string;
  /** Command timeout (default 250 ms). */
  timeoutMs?: number;
  /** Count every hit, refused ones too (default false). */
  countDenied?: boolean;
  /** 'first' (default): a window starts at the client's first hit (resetTime = first hit + windowMs); 'epoch': on the clock. */
  align?: 'first' | 'epoch';
}

/** An express-rate-limit Store on RL.FIXEDWINDOW. */
export declare class RedisRateLimitStore {
  constructor(options: StoreOptions);
  limiter: RateLimit;
  /** The engine deciding (null before the first call). */
  readonly engine: EngineName | null;
  prefix: string;
  align: 'first' | 'epoch';
  localKeys: boolean;
  init(options: { windowMs: number; limit?: unknown; max?: unknown; skipFailedRequests?: boolean; skipSuccessfulRequests?: boolean }): void;
  increment(key: string): Promise<{ totalHits: number; resetTime: Date | undefined }>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
  get(key: string): Promise<{ totalHits: number; resetTime: Date | undefined } | undefined>;
}

export declare class RateLimiterRes {
  remainingPoints: number;
  msBeforeNext: number;
  consumedPoints: number;
  isFirstInDuration: boolean;
  constructor(remainingPoints?: number, msBeforeNext?: number, consumedPoints?: number, isFirstInDuration?: boolean);
  toHeaders(points: number): Record<string, string>;
  toJSON(): { remainingPoints: number; msBeforeNext: number; consumedPoints: number; isFirstInDuration: boolean };
}

export interface FlexibleOptions extends EngineOptions {
  storeClient?: RedisClientLike;
  limiter?: RateLimit;
  /** Points per duration (default 4). */
  points?: number;
  /** Seconds (default 1). */
  duration?: number;
  /** Seconds a refused consume blocks the key (default 0: none). */
  blockDuration?: number;
  keyPrefix?: string;
  algorithm?: 'fixedWindow' | 'slidingWindow' | 'slidingLog' | 'gcra' | 'tokenBucket';
  /** fixedWindow: 'first' (default: from the first consume, as rate-limiter-flexible) or 'epoch'. */
  align?: 'first' | 'epoch';
  /** Command timeout (default 250 ms). */
  timeoutMs?: number;
  /** Asked instead when Redis cannot decide (e.g. rate-limiter-flexible's RateLimiterMemory). */
  insuranceLimiter?: InsuranceLimiter;
  /** Points consumed at which a key is blocked in this process (>= points; default 0: off). */
  inMemoryBlockOnConsumed?: number;
  /** Seconds of that in-memory block, counted from a refusal (default 0: until a request could pass). */
  inMemoryBlockDuration?: number;
}

/** A limiter with rate-limiter-flexible's methods (its RateLimiterMemory, for one). */
export interface InsuranceLimiter {
  blockDuration?: number;
  consume(key: string | number, points?: number, options?: object): Promise<unknown>;
  reward(key: string | number, points?: number, options?: object): Promise<unknown>;
  penalty?(key: string | number, points?: number, options?: object): Promise<unknown>;
  block(key: string | number, secDuration: number, options?: object): Promise<unknown>;
  get(key: string | number, options?: object): Promise<unknown>;
  delete(key: string | number, options?: object): Promise<boolean>;
}

export declare class RateLimiterRedisModule {
  constructor(options: FlexibleOptions);
  limiter: RateLimit;
  /** The engine deciding (null before the first call). */
  readonly engine: EngineName | null;
  points: number;
  duration: number;
  blockDuration: number;
  keyPrefix: string;
  insuranceLimiter?: InsuranceLimiter;
  inMemoryBlockOnConsumed: number;
  inMemoryBlockDuration: number;
  readonly spec: LimitSpec;
  getKey(key: string): string;
  /** ms before the key's in-memory block ends (0: none); `rlKey` is getKey(key). */
  getInMemoryBlockMsBeforeExpire(rlKey: string): number;
  deleteInMemoryBlockedAll(): void;
  /** Resolves a RateLimiterRes; rejects with a RateLimiterRes when limited, an Error when Redis fails. */
  consume(key: string, points?: number): Promise<RateLimiterRes>;
  reward(key: string, points?: number): Promise<RateLimiterRes>;
  /** FORCE: adds points whatever the limit says (past it: a debt), as rate-limiter-flexible's penalty. */
  penalty(key: string, points?: number): Promise<RateLimiterRes>;
  block(key: string, secDuration: number): Promise<RateLimiterRes>;
  get(key: string): Promise<RateLimiterRes | null>;
  delete(key: string): Promise<boolean>;
}

export declare class RateLimiterUnion {
  constructor(...limiters: RateLimiterRedisModule[]);
  /** One RL.ALL; resolves/rejects with { [keyPrefix of the binding limiter]: RateLimiterRes }. */
  consume(key: string, points?: number): Promise<Record<string, RateLimiterRes>>;
}

export declare function windowSeconds(spec: LimitSpec, limit: number): number | undefined;
/** A fixed-window spec from the rule syntax: '100/minute', '10/2 days', '1000/month@Europe/Paris' (a calendar month in that zone). */
export declare function parseLimit(text: string): LimitSpec;

/**
 * express-rate-limit v8's ipKeyGenerator: an IPv6 address as its network of
 * `ipv6Subnet` bits (default 56), `<network>/<bits>`; an IPv4(-mapped) address
 * as IPv4; anything else unchanged.
 */
export declare function ipKeyGenerator(ip: string, ipv6Subnet?: number | false): string;
