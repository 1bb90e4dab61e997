'use strict';
// npm's prepack and postpack scripts: the package carries the Functions library
// as lib/ratelimit.lua, copied from the repository's one file,
// functions/ratelimit.lua, when the tarball is made (`npm pack`, `npm publish`),
// and removed again afterwards so that a checkout never holds a second copy
// (lib/engine.js reads functions/ratelimit.lua there). Packed from an unpacked
// tarball (no repository around it), the copy it carries stays.
const fs = require('node:fs');
const path = require('node:path');

const packed = path.join(__dirname, 'lib', 'ratelimit.lua');
const source = path.join(__dirname, '..', '..', 'functions', 'ratelimit.lua');
const inCheckout = path.basename(path.dirname(__dirname)) === 'clients' && fs.existsSync(source);

if (process.argv[2] === 'copy') {
  if (inCheckout) fs.copyFileSync(source, packed);
  else if (!fs.existsSync(packed)) {
    console.error(`copy-library: neither ${source} (a checkout of the repository) nor ${packed} (an unpacked tarball)`);
    process.exit(1);
  }
} else if (process.argv[2] === 'remove') {
  if (inCheckout) fs.rmSync(packed, { force: true });
} else {
  console.error('usage: node copy-library.js copy|remove');
  process.exit(2);
}
