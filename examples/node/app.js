'use strict';
// A tiny HTTP server limited per client with the redis-ratelimit-client package
// (clients/node): `node app.js [redisPort] [port]`.
// Each client (the X-User header, else its address) gets bursts of 5, then
// 1 request per second; `?cost=n` makes a request cost n tokens.
const http = require('node:http');
const Redis = require('ioredis');
const { rateLimit } = require('redis-ratelimit-client');

function makeServer({ redisPort = 6379, failOpen = true } = {}) {
  const client = new Redis({
    port: redisPort,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => 200,
  });
  client.on('error', () => {}); // an unreachable Redis is handled per request (failOpen)
  const limiter = rateLimit({
    client,
    name: 'api',
    limit: { type: 'gcra', maxBurst: 4, tokensPerPeriod: 1, period: 1 }, // RL.GCRA rl:api:<user> 4 1 1
    key: (req) => req.headers['x-user'] || req.socket.remoteAddress,
    cost: (req) => Number(new URL(req.url, 'http://x').searchParams.get('cost') || 1),
    failOpen, // false: 503 when Redis is unreachable
    legacyHeaders: true, // X-RateLimit-* besides RateLimit / RateLimit-Policy
    message: 'too many requests\n',
  });
  // The middleware is Express-style: app.use(limiter) in an Express app.
  const server = http.createServer((req, res) =>
    limiter(req, res, (err) => {
      res.writeHead(err ? 500 : 200);
      res.end(err ? '' : 'hello\n');
    }),
  );
  server.on('close', () => client.disconnect());
  return { server, client, limiter };
}

module.exports = { makeServer };

if (require.main === module) {
  const [redisPort = '6379', port = '8000'] = process.argv.slice(2);
  const { server, client } = makeServer({ redisPort: Number(redisPort) });
  client.connect().catch(() => {});
  server.listen(Number(port), '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}/`));
}
