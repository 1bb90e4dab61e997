'use strict';
// index.d.ts compiles against a use of the whole API (TypeScript, --strict).
const { test } = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

test('the type declarations cover the documented API', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--esModuleInterop', '--skipLibCheck',
    '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', path.join(__dirname, 'types-usage.ts')],
  { encoding: 'utf8', cwd: path.join(__dirname, '..') });
  assert.strictEqual(r.status, 0, r.stdout + r.stderr);
});
