// Compiled (not run) by types.test.js: the declarations cover the documented API.
import { createClient, createCluster } from 'redis';
import { createCluster as createCluster4 } from 'redis4';
import Redis, { Cluster } from 'ioredis';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import express from 'express';
import { rateLimit as erl } from 'express-rate-limit';
import {
  RateLimit,
  RateLimitResult,
  rateLimit,
  concurrencyLimit,
  Lease,
  RedisRateLimitStore,
  RateLimiterRedisModule,
  RateLimiterUnion,
  RateLimiterRes,
  RateLimitUnavailableError,
  ipKeyGenerator,
  EngineName,
  LimitSpec,
} from 'redis-ratelimit-client';

const app0 = express();

async function main(): Promise<void> {
  const nodeRedis = createClient();
  const ioredis = new Redis();
  const rl = new RateLimit(nodeRedis, { timeoutMs: 200 });
  const rl2 = new RateLimit(ioredis);
  // Clusters: node-redis v5 and v4 (sendCommand(firstKey, isReadonly, args)), ioredis.
  const cluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] });
  const cluster4 = createCluster4({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] });
  const ioCluster = new Cluster([{ host: '127.0.0.1', port: 7000 }]);
  await new RateLimit(cluster).gcra('{u}:k', 4, 10, 1);
  await new RateLimit(cluster4).gcra('{u}:k', 4, 10, 1);
  await new RateLimit(ioCluster).gcra('{u}:k', 4, 10, 1);
  app0.use(rateLimit({ client: cluster, limit: { type: 'gcra', maxBurst: 4, tokensPerPeriod: 10, period: 1 } }));
  new RedisRateLimitStore({ client: cluster4, align: 'epoch' });
  new RateLimiterRedisModule({ storeClient: cluster, points: 5 });
  const fn = new RateLimit(async (args: (string | number)[]) => args.length);
  const r: RateLimitResult = await rl.gcra('k', 4, 10, 1, { tokens: 2, block: 5, name: 'api' });
  const limited: boolean = r.limited;
  const retry: number = r.retryAfterMs;
  const h: Record<string, string> = r.headers({ legacy: true });
  await rl.tokenBucket('k', 10, 1, 1);
  await rl.leakyBucket('k', 10, 1, 1);
  await rl.fixedWindow('k', 10, 60, { align: 'first' });
  await rl.slidingWindow('k', 10, 60, { buckets: 10 });
  await rl.slidingLog('k', 10, 60, { peek: true });
  await rl.limit('api-free', 'k', { refund: 1 });
  const all = await rl2.all([
    { key: 'a', type: 'gcra', maxBurst: 4, tokensPerPeriod: 10, period: 1 },
    { key: 'b', type: 'policy', name: 'daily' },
  ]);
  const which: number | undefined = all.which;

  const app = express();
  app.use(
    rateLimit({
      client: nodeRedis,
      key: (req) => ipKeyGenerator(req.ip ?? '', 48),
      failOpen: true,
      timeoutMs: 100,
      rules: [
        { name: 'login', path: '/login', method: 'POST', limit: { type: 'slidingLog', limit: 5, window: 60 } },
        { name: 'api', path: /^\/api/, limit: { type: 'policy', name: 'api-free' } },
      ],
      onUnavailable: (err: RateLimitUnavailableError) => console.warn(err.reason),
    }),
  );
  const mw = rateLimit({ client: ioredis, limit: { type: 'slidingLog', limit: 5, window: 60 }, ipv6Subnet: 64, validate: { trustProxy: false }, logger: console });
  const timeout: number = mw.limiter.timeoutMs;
  const engine: EngineName | null = mw.engine;
  const forced = new RateLimit(ioredis, { engine: 'functions', clock: 'caller', logger: console });
  const found: EngineName = await forced.ready();
  const spec: LimitSpec | undefined = await rl.policy('api-free');
  new RedisRateLimitStore({ client: ioredis, engine: 'eval' }).engine;
  new RateLimiterRedisModule({ storeClient: ioredis, engine: 'module', clock: 'server' }).engine;
  rateLimit({ client: ioredis, limit: { type: 'gcra', maxBurst: 1, tokensPerPeriod: 1, period: 1 }, engine: 'auto', clock: 'auto' });
  void [engine, found, spec];
  rateLimit({ client: ioredis, limit: { type: 'slidingLog', limit: 5, window: 60 }, ipv6Subnet: false, validate: false });
  app.use(erl({ windowMs: 60_000, limit: 100, store: new RedisRateLimitStore({ client: ioredis }) }));

  const flex = new RateLimiterRedisModule({
    storeClient: ioredis, points: 5, duration: 1, blockDuration: 60,
    insuranceLimiter: new RateLimiterMemory({ points: 5, duration: 1 }),
    inMemoryBlockOnConsumed: 5, inMemoryBlockDuration: 10,
  });
  try {
    const res: RateLimiterRes = await flex.consume('u', 1);
    console.log(res.remainingPoints, res.msBeforeNext);
  } catch (rej) {
    if (rej instanceof RateLimiterRes) console.log(rej.msBeforeNext);
  }
  await flex.reward('u', 1);
  await flex.block('u', 60);
  const got: RateLimiterRes | null = await flex.get('u');
  const deleted: boolean = await flex.delete('u');
  await new RateLimiterUnion(flex, flex).consume('u');
  // Concurrency leases (RL.CONCURRENCY).
  const lease: Lease = await rl.acquire('reports:7', { limit: 3, lease: 30, tokens: 1, autoRenew: true, onLost: (r, l) => console.log(r.limited, l.id) });
  if (lease.allowed) {
    const renewed: RateLimitResult = await lease.renew();
    const freed: RateLimitResult | null = await lease.release();
    console.log(renewed.remaining, freed?.remaining, lease.held, lease.lost, lease.leaseSeconds);
  } else {
    console.log(lease.retryAfterMs);
  }
  await rl.acquire('k', { limit: 1, lease: 0.5, id: 'job-1', autoRenew: 0.1, onRenewError: (err) => console.error(err) });
  await rl.renew('k', 'job-1', { limit: 1, lease: 0.5 });
  await rl.all([
    { key: '{t:7}:hour', type: 'slidingWindow', limit: 100, window: 3600 },
    { key: '{t:7}:running', type: 'concurrency', limit: 3, lease: 30, id: 'job-1' },
  ]);
  await rl2.release('k', 'job-1', { limit: 1, lease: 0.5, peek: true });
  app.use(concurrencyLimit({ client: nodeRedis, limit: 3, lease: 30, autoRenew: true, key: (req) => req.headers['x-tenant'] as string }));
  const conc = concurrencyLimit({ client: ioredis, limit: 2, handler: (req, res, next, l) => res.end(String(l.retryAfterMs)) });
  app.get('/report', conc, (req, res) => res.send('ok'));
  const concEngine: EngineName | null = conc.engine;
  void concEngine;
  console.log(limited, retry, h, which, got, deleted, timeout, fn);
}

void main;
