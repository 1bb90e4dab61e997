'use strict';
// A tiny HTTP server limited per client: `node app.js [redisPort] [port]`.
// Each client (the X-User header, else its address) gets bursts of 5, then
// 1 request per second; `?cost=n` makes a request cost n tokens.
const http = require('node:http');
const Redis = require('ioredis');
const { RateLimiter } = require('./ratelimit');

function makeServer({ redisPort = 6379, failOpen = true } = {}) {
  const client = new Redis({
    port: redisPort,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => 200,
  });
  client.on('error', () => {}); // reported per request instead
  const limiter = new RateLimiter(client, { name: 'api', maxBurst: 4, perPeriod: 1, period: 1, failOpen });
  const server = http.createServer((req, res) => {
    const user = req.headers['x-user'] || req.socket.remoteAddress;
    const cost = Number(new URL(req.url, 'http://x').searchParams.get('cost') || 1);
    limiter.check(`rl:api:${user}`, cost).then(
      (result) => {
        res.writeHead(result.status, result.headers);
        res.end(result.allowed ? 'hello\n' : 'too many requests\n');
      },
      () => {
        res.writeHead(500);
        res.end();
      },
    );
  });
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
