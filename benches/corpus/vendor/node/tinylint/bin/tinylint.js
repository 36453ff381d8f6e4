#!/usr/bin/env node
// tinylint [--fix] PATH...: flags `var`, trailing whitespace, tabs and `debugger` in .js/.mjs files.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const args = process.argv.slice(2);
const fix = args.includes('--fix');
const roots = args.filter((a) => a !== '--fix');
if (roots.length === 0) roots.push('.');

function files(p) {
  const st = fs.statSync(p);
  if (st.isFile()) return /\.(c|m)?js$/.test(p) ? [p] : [];
  if (path.basename(p) === 'node_modules' || path.basename(p).startsWith('.')) return [];
  return fs.readdirSync(p).flatMap((e) => files(path.join(p, e)));
}

let problems = 0;
for (const f of roots.flatMap(files)) {
  let lines = fs.readFileSync(f, 'utf8').split('\n');
  if (fix) {
    lines = lines.map((l) => l.replace(/[ \t]+$/, '').replace(/^\t+/, (t) => '  '.repeat(t.length)));
    fs.writeFileSync(f, lines.join('\n'));
  }
  lines.forEach((l, i) => {
    const at = `${f}:${i + 1}`;
    if (/(^|[^\w.])var\s/.test(l)) { console.log(`${at}: use let or const instead of var`); problems++; }
    if (/[ \t]+$/.test(l)) { console.log(`${at}: trailing whitespace`); problems++; }
    if (/^\t/.test(l)) { console.log(`${at}: tab indentation`); problems++; }
    if (/\bdebugger\b/.test(l)) { console.log(`${at}: debugger statement`); problems++; }
  });
}
if (problems) {
  console.log(`${problems} problem(s)`);
  process.exit(1);
}
