'use strict';
// Calendar windows (RL.FIXEDWINDOW key limit DAY|WEEK|MONTH|YEAR [TZ zone]):
// the spec { window: 'month', tz }, the rule syntax '1000/month@Europe/Paris'
// in the Express middleware, RL.ALL. The window ends at the next local
// boundary, which resetAfterMs and Retry-After say. Fixed offsets on both
// engines; an IANA zone where the engine has it (the library refuses IANA
// zones with an error naming the module when it cannot carry their rules).
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const express = require('express');
const { startRedis, CLIENTS, request, listen, TEST_ENGINE } = require('./helpers');
const { RateLimit, rateLimit, parseLimit } = require('..');

/** ms from now to the next boundary of `unit` at a fixed offset (minutes east of UTC). */
function msToNext(unit, offsetMin) {
  const now = Date.now();
  const local = new Date(now + offsetMin * 60_000); // read with the UTC getters
  const y = local.getUTCFullYear();
  const m = local.getUTCMonth();
  const d = local.getUTCDate();
  let next;
  if (unit === 'day') next = Date.UTC(y, m, d + 1);
  else if (unit === 'week') next = Date.UTC(y, m, d + 7 - ((local.getUTCDay() + 6) % 7));
  else if (unit === 'month') next = Date.UTC(y, m + 1, 1);
  else next = Date.UTC(y + 1, 0, 1);
  return next - offsetMin * 60_000 - now;
}

let redis;
let conn;
// The module has calendar windows; the Functions library follows: where the
// engine answers a calendar unit with its error about seconds, skip.
let noCalendar = null;
before(async () => {
  redis = await startRedis();
  conn = await CLIENTS.ioredis.connect(redis.port);
  await new RateLimit(conn.client).fixedWindow('cal:probe', 1, 'day', { peek: true }).catch((err) => {
    noCalendar = `the ${TEST_ENGINE} engine has no calendar windows: ${err.message}`;
  });
});
after(async () => {
  await conn.close();
  await redis.stop();
});

describe('calendar windows', () => {
  for (const unit of ['day', 'week', 'month', 'year']) {
    test(`${unit} at +05:30 and in UTC: reset at the next local boundary`, async (t) => {
      if (noCalendar) return t.skip(noCalendar);
      const rl = new RateLimit(conn.client);
      const spec = { type: 'fixedWindow', limit: 2, window: unit, tz: '+05:30' };
      const first = await rl.check(`cal:${unit}`, spec);
      assert.strictEqual(first.remaining, 1);
      assert.ok(Math.abs(first.resetAfterMs - msToNext(unit, 330)) < 2000, `${first.resetAfterMs} vs ${msToNext(unit, 330)}`);
      await rl.check(`cal:${unit}`, spec);
      const refused = await rl.check(`cal:${unit}`, spec);
      assert.ok(refused.limited && Math.abs(refused.retryAfterMs - msToNext(unit, 330)) < 2000, JSON.stringify(refused));
      const utc = await rl.fixedWindow(`cal:${unit}:utc`, 5, unit);
      assert.ok(Math.abs(utc.resetAfterMs - msToNext(unit, 0)) < 2000, JSON.stringify(utc));
    });
  }

  test('a monthly quota in an IANA zone', async (t) => {
    if (noCalendar) return t.skip(noCalendar);
    const rl = new RateLimit(conn.client);
    const spec = parseLimit('1000/month@Europe/Paris');
    const result = await rl.check('cal:paris', spec).catch((err) => err);
    if (TEST_ENGINE !== 'module' && result instanceof Error) {
      assert.match(result.message, /module/);
      return;
    }
    assert.strictEqual(result.remaining, 999);
    assert.ok(result.resetAfterMs > 0 && result.resetAfterMs <= 32 * 86400_000, JSON.stringify(result));
  });

  test('RL.ALL takes calendar windows', async (t) => {
    if (noCalendar) return t.skip(noCalendar);
    const rl = new RateLimit(conn.client);
    const limits = [
      { key: 'cal:all:d', type: 'fixedWindow', limit: 3, window: 'day', tz: '+05:30' },
      { key: 'cal:all:y', type: 'fixedWindow', limit: 100, window: 'year' },
    ];
    assert.strictEqual((await rl.all(limits, { tokens: 3 })).limited, false);
    assert.strictEqual((await rl.all(limits)).limited, true);
  });

  test('the rule syntax', () => {
    assert.deepStrictEqual(parseLimit('1000/month@Europe/Paris'), { type: 'fixedWindow', limit: 1000, window: 'month', tz: 'Europe/Paris' });
    assert.deepStrictEqual(parseLimit('100/minute'), { type: 'fixedWindow', limit: 100, window: 60 });
    assert.deepStrictEqual(parseLimit('10 per 2 hours'), { type: 'fixedWindow', limit: 10, window: 7200 });
    for (const bad of ['10/2 months', '5/2 days@UTC', 'ten/minute', '5/fortnight']) assert.throws(() => parseLimit(bad), TypeError);
    assert.throws(() => RateLimit.commandArgs('k', { type: 'fixedWindow', limit: 5, window: 60, tz: 'UTC' }), /tz takes a calendar window/);
  });

  test("Express: limit '2/day@+05:30' refuses the third with Retry-After to local midnight", async (t) => {
    if (noCalendar) return t.skip(noCalendar);
    const app = express();
    app.use(rateLimit({ client: conn.client, limit: '2/day@+05:30', name: 'sms', key: () => 'user' }));
    app.get('/', (req, res) => res.end('ok'));
    const server = await listen(app);
    try {
      const responses = [];
      for (let i = 0; i < 3; i++) responses.push(await request(server.port));
      assert.deepStrictEqual(responses.map((r) => r.status), [200, 200, 429]);
      const retry = Number(responses[2].headers['retry-after']);
      assert.ok(Math.abs(retry * 1000 - msToNext('day', 330)) < 3000, `${retry}`);
    } finally {
      await server.close();
    }
  });
});
