'use strict';
// What the documentation tells a newcomer to type: the package's name in every
// require/import and install line, and express-rate-limit snippets that fail
// open (passOnStoreError) rather than answer 500 when Redis is unavailable.
const { test } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..', '..', '..');
const NAME = require('../package.json').name;

/** The Markdown pages and example sources that show the Node package. */
function pages() {
  const files = ['README.md', 'clients/node/README.md', 'examples/node/README.md', 'examples/node/app.js'];
  for (const f of fs.readdirSync(path.join(root, 'docs'))) if (f.endsWith('.md')) files.push(`docs/${f}`);
  return files.map((f) => ({ file: f, text: fs.readFileSync(path.join(root, f), 'utf8') }));
}

test(`the package is ${NAME} in package.json, every require/import and install line`, () => {
  assert.strictEqual(NAME, 'redis-ratelimit-client');
  let seen = 0;
  for (const { file, text } of pages()) {
    for (const m of text.matchAll(/(?:require\(|from\s+)'(redis-ratelimit[\w-]*)'/g)) {
      seen += 1;
      assert.strictEqual(m[1], NAME, `${file}: ${m[0]}`);
    }
    for (const m of text.matchAll(/npm install ([\w@/.-]*ratelimit[\w@/.-]*)/g)) {
      assert.ok(m[1] === NAME || m[1].endsWith('clients/node'), `${file}: ${m[0]}`);
    }
  }
  assert.ok(seen >= 5, `only ${seen} require/import lines found`);
  const readme = fs.readFileSync(path.join(root, 'clients/node/README.md'), 'utf8');
  assert.match(readme, new RegExp(`npm install ${NAME}\\n`));
});

test('every express-rate-limit snippet with the Store sets passOnStoreError', () => {
  let seen = 0;
  for (const { file, text } of pages()) {
    for (const block of text.matchAll(/```js\n([\s\S]*?)```/g)) {
      const code = block[1];
      // A rateLimit({ … }) call given the Store (express-rate-limit's options: windowMs, store).
      for (const call of code.matchAll(/rateLimit\(\{([\s\S]*?)\}\)\);?/g)) {
        if (!/store:\s*new RedisRateLimitStore/.test(call[1])) continue;
        seen += 1;
        assert.match(call[1], /passOnStoreError:\s*true/, `${file}: ${call[0]}`);
      }
    }
  }
  assert.ok(seen >= 2, `only ${seen} snippets found`);
});
