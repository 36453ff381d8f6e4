"""Node sessions: npm's own commands, node --test (built in), vendored tarballs (npm pack)."""
from gen_common import Session, sq

NPMI = "--no-audit --no-fund"


def feature_loop(s, mod, feats, run_tests, lint=None, esm=False):
    for i, f in enumerate(feats):
        explore = ["git status --short", "ls", "ls test", f"grep -n 'function' {mod}", f"wc -l {mod}",
                   f"sed -n '1,25p' {mod}", "git log --oneline -4", "cat package.json", "npm run",
                   f"grep -rn 'require\\|import' test | head", f"head -15 {mod}", "ls -la"]
        for e in s.rng.sample(explore, s.rng.choice([2, 2, 3, 3])):
            s.c(e)
        code = f["code"]
        if f.get("bug"):
            code = code.replace(f["bug"][1], f["bug"][0])
        if esm:
            s.append(mod, "\n" + code.strip("\n"))
        else:
            s.append(mod, "\n" + code.strip("\n") + f"\nmodule.exports.{f['name']} = {f['name']};")
        s.write(f"test/{f['tname']}", f["test"], how=s.pick(["cat", "cat", "tee"]))
        if f.get("bug"):
            s.fail(run_tests)
            s.c(s.pick([f"grep -nF {sq(f['bug'][0].strip()[:30])} {mod}", f"grep -n -A6 'function {f['name']}' {mod}"]))
            s.sed(mod, f["bug"][0], f["bug"][1])
        s.c(run_tests)
        if lint and s.rng.random() < 0.5:
            s.c(lint)
        if s.rng.random() < 0.4:
            s.c(s.pick(["git diff", f"git diff {mod}", "git diff --stat"]))
        s.commit(f["msg"])


def shortid():
    s = Session("node", 1, "shortid", "Start a CommonJS id library from scratch: npm init, scripts with npm pkg, "
                "node --test, a vendored linter as a dev dependency via npx, bugs fixed with sed.")
    s.c("mkdir -p shortid && ls")
    s.cwd = "shortid"
    s.c("git init -q")
    s.c("npm init -y")
    s.c("npm pkg set description='Short base62 ids' scripts.test='node --test' scripts.lint='tinylint src test'")
    s.c("cat package.json")
    s.c("mkdir -p src test")
    s.c("printf 'node_modules/\\ncoverage/\\n*.log\\n' > .gitignore")
    s.write("src/index.js", "'use strict';\n\nconst ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';\nmodule.exports.ALPHABET = ALPHABET;")
    s.c(f"npm install {NPMI} --save-dev ../vendor/npm/tinylint-1.1.0.tgz")
    s.c("ls node_modules/.bin")
    s.c("npx tinylint src")
    s.commit("npm init, tinylint")
    feats = [
        dict(name="encode", tname="encode.test.js", msg="encode(n) in base62", code='''function encode(n) {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`not a non-negative integer: ${n}`);
  let out = '';
  do {
    out = ALPHABET[n % 62] + out;
    n = Math.floor(n / 62);
  } while (n > 0);
  return out;
}''', bug=("ALPHABET[n % 61]", "ALPHABET[n % 62]"), test=''''use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { encode } = require('../src/index.js');

test('encodes small numbers', () => {
  assert.equal(encode(0), '0');
  assert.equal(encode(61), 'Z');
  assert.equal(encode(62), '10');
});

test('rejects negatives', () => {
  assert.throws(() => encode(-1), RangeError);
});'''),
        dict(name="decode", tname="decode.test.js", msg="decode() and a round trip test", code='''function decode(s) {
  let n = 0;
  for (const ch of s) {
    const d = ALPHABET.indexOf(ch);
    if (d < 0) throw new Error(`bad character ${ch}`);
    n = n * 62 + d;
  }
  return n;
}''', test=''''use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { encode, decode } = require('../src/index.js');

test('round trip', () => {
  for (const n of [0, 1, 61, 62, 3843, 916132831, Number.MAX_SAFE_INTEGER]) {
    assert.equal(decode(encode(n)), n);
  }
});

test('bad characters', () => {
  assert.throws(() => decode('ab-c'), /bad character -/);
});'''),
        dict(name="checksum", tname="checksum.test.js", msg="Append a check character", code='''function checksum(id) {
  let sum = 0;
  for (let i = 0; i < id.length; i++) sum += (i + 1) * ALPHABET.indexOf(id[i]);
  return id + ALPHABET[sum % 62];
}''', bug=("sum += i * ALPHABET", "sum += (i + 1) * ALPHABET"), test=''''use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { checksum } = require('../src/index.js');

test('check character', () => {
  assert.equal(checksum('10'), '101');
  assert.equal(checksum('abc'), 'abc6');
});'''),
        dict(name="fromTime", tname="time.test.js", msg="fromTime(): sortable ids from a timestamp", code='''function fromTime(ms, width = 8) {
  return module.exports.encode(ms).padStart(width, '0');
}''', test=''''use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { fromTime } = require('../src/index.js');

test('sortable and padded', () => {
  const a = fromTime(1700000000000);
  const b = fromTime(1700000000001);
  assert.equal(a.length, 8);
  assert.ok(a < b);
});'''),
    ]
    feature_loop(s, "src/index.js", feats, s.pick(["npm test", "npm test --silent", "node --test"]), lint="npm run lint")
    s.c("printf 'var unused = 1;   \\n' >> src/index.js")
    s.fail("npx tinylint src")
    s.c("npx tinylint --fix src || true")
    s.c("sed -i 's/^var unused = 1;$//' src/index.js")
    s.c("npx tinylint src")
    s.c("npm test")
    s.c("git diff --stat")
    s.c("git checkout -- src/index.js")
    s.write("README.md", "# shortid\n\n```js\nconst { encode, decode, checksum } = require('shortid');\nencode(62); // '10'\n```\n")
    s.c("npm pkg set files[0]=src version=0.2.0")
    s.c("npm pack --dry-run")
    s.commit("README, files list, 0.2.0")
    s.c("npm ls")
    s.c("node -e \"const id = require('./src'); console.log(id.checksum(id.encode(Date.now())))\"")
    s.c("git log --oneline")
    s.c("git show --stat HEAD")
    return s


def notes_api():
    setup = {"dir": "notes-api", "git": True, "files": {
        "package.json": '{\n  "name": "notes-api",\n  "version": "1.3.0",\n  "private": true,\n  "main": "src/server.js",\n  "scripts": {\n    "start": "node src/server.js",\n    "test": "node --test"\n  }\n}\n',
        ".gitignore": "node_modules/\n",
        "README.md": "# notes-api\n\nA tiny JSON notes service on node:http. `npm start` listens on $PORT (3000).\n",
        "src/store.js": '''\'use strict\';

class NoteStore {
  constructor() {
    this.notes = new Map();
    this.nextId = 1;
  }

  add(text) {
    if (typeof text !== 'string' || text.trim() === '') throw new Error('text required');
    const note = { id: this.nextId++, text: text.trim(), created: Date.now() };
    this.notes.set(note.id, note);
    return note;
  }

  get(id) {
    return this.notes.get(Number(id)) || null;
  }

  list() {
    return [...this.notes.values()];
  }
}

module.exports = { NoteStore };
''',
        "src/handler.js": '''\'use strict\';
const { NoteStore } = require('./store');

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function makeHandler(store = new NoteStore()) {
  return function handle(req, res, body = '') {
    const url = new URL(req.url, 'http://localhost');
    if (req.method === 'GET' && url.pathname === '/notes') return json(res, 200, store.list());
    const m = url.pathname.match(/^\\/notes\\/(\\d+)$/);
    if (req.method === 'GET' && m) {
      const note = store.get(m[1]);
      return note ? json(res, 200, note) : json(res, 404, { error: 'not found' });
    }
    if (req.method === 'POST' && url.pathname === '/notes') {
      try {
        return json(res, 201, store.add(JSON.parse(body || '{}').text));
      } catch (e) {
        return json(res, 400, { error: e.message });
      }
    }
    return json(res, 404, { error: 'no route' });
  };
}

module.exports = { makeHandler };
''',
        "src/server.js": '''\'use strict\';
const http = require('node:http');
const { makeHandler } = require('./handler');

const handle = makeHandler();
const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => handle(req, res, body));
});
server.listen(Number(process.env.PORT) || 3000, '127.0.0.1');
''',
        "test/helpers.js": '''\'use strict\';
// A fake response that records what the handler wrote.
function fakeRes() {
  return {
    status: 0,
    headers: {},
    body: '',
    writeHead(status, headers) {
      this.status = status;
      this.headers = headers;
    },
    end(body) {
      this.body = body;
    },
    json() {
      return JSON.parse(this.body);
    },
  };
}

module.exports = { fakeRes };
''',
        "test/handler.test.js": '''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { makeHandler } = require('../src/handler');
const { fakeRes } = require('./helpers');

test('post then get', () => {
  const h = makeHandler();
  const r1 = fakeRes();
  h({ method: 'POST', url: '/notes' }, r1, JSON.stringify({ text: ' buy milk ' }));
  assert.equal(r1.status, 201);
  assert.equal(r1.json().text, 'buy milk');
  const r2 = fakeRes();
  h({ method: 'GET', url: '/notes/1' }, r2);
  assert.equal(r2.json().id, 1);
});

test('unknown route', () => {
  const r = fakeRes();
  makeHandler()({ method: 'GET', url: '/nope' }, r);
  assert.equal(r.status, 404);
});
''',
    }}
    s = Session("node", 2, "notes-api", "An existing node:http notes service (operator-prepared, identity set): read "
                "it, add delete/search/pagination on a branch, stash a half-done change, merge, bump the version.",
                setup=setup, identity=True)
    s.cwd = "notes-api"
    for cmd in ["git status", "ls -R src test", "cat package.json", "cat src/handler.js", "sed -n '1,30p' src/store.js",
                "git log --oneline -5", "npm test", "grep -rn 'json(res' src | wc -l"]:
        s.c(cmd)
    s.c("git checkout -b delete-and-search")
    s.c("grep -n 'list()' -A3 src/store.js")
    s.c("""sed -i 's/^  list() {$/  remove(id) {\\n    return this.notes.delete(Number(id));\\n  }\\n\\n  list() {/' src/store.js""")
    s.c("sed -n '/remove(id)/,/^  }/p' src/store.js")
    s.c("""sed -i "s|    return json(res, 404, { error: 'no route' });|    if (req.method === 'DELETE' \\&\\& m) return store.remove(m[1]) ? json(res, 204, {}) : json(res, 404, { error: 'not found' });\\n    return json(res, 404, { error: 'no route' });|" src/handler.js""")
    s.c("grep -n DELETE src/handler.js")
    s.write("test/delete.test.js", '''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { makeHandler } = require('../src/handler');
const { fakeRes } = require('./helpers');

test('delete a note', () => {
  const h = makeHandler();
  h({ method: 'POST', url: '/notes' }, fakeRes(), '{"text":"x"}');
  const r = fakeRes();
  h({ method: 'DELETE', url: '/notes/1' }, r);
  assert.equal(r.status, 204);
  const again = fakeRes();
  h({ method: 'DELETE', url: '/notes/1' }, again);
  assert.equal(again.status, 404);
});''')
    s.c("npm test")
    s.commit("DELETE /notes/:id")
    s.c("grep -n 'search' -r src || echo 'no search yet'")
    s.c("""sed -i "s|    if (req.method === 'GET' \\&\\& url.pathname === '/notes') return json(res, 200, store.list());|    if (req.method === 'GET' \\&\\& url.pathname === '/notes') {\\n      const q = (url.searchParams.get('q') \\|\\| '').toLowerCase();\\n      return json(res, 200, store.list().filter((n) => n.text.toLowerCase().includes(q)));\\n    }|" src/handler.js""")
    s.c("sed -n '8,20p' src/handler.js")
    s.c("node --check src/handler.js")
    s.write("test/search.test.js", '''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { makeHandler } = require('../src/handler');
const { fakeRes } = require('./helpers');

test('search is case-insensitive', () => {
  const h = makeHandler();
  for (const text of ['Buy milk', 'call Bob', 'milkshake recipe']) {
    h({ method: 'POST', url: '/notes' }, fakeRes(), JSON.stringify({ text }));
  }
  const r = fakeRes();
  h({ method: 'GET', url: '/notes?q=MILK' }, r);
  assert.deepEqual(r.json().map((n) => n.id), [1, 3]);
});''')
    s.c("npm test -- --test-reporter=spec")
    s.commit("GET /notes?q= search")
    # Half-done pagination, stashed.
    s.c("""sed -i "s|      const q = |      const limit = Number(url.searchParams.get('limit')) \\|\\| 50;\\n      const q = |" src/handler.js""")
    s.c("git diff")
    s.c("git stash push -m 'pagination, unfinished'")
    s.c("git stash list")
    s.c("npm test")
    s.c("git switch main")
    s.c("git merge --no-edit delete-and-search")
    s.c("git stash pop")
    s.c("""sed -i "s|store.list().filter((n) => n.text.toLowerCase().includes(q)));|store.list().filter((n) => n.text.toLowerCase().includes(q)).slice(0, limit));|" src/handler.js""")
    s.append("test/search.test.js", '''
test('limit', () => {
  const h = makeHandler();
  for (let i = 0; i < 5; i++) h({ method: 'POST', url: '/notes' }, fakeRes(), JSON.stringify({ text: `n${i}` }));
  const r = fakeRes();
  h({ method: 'GET', url: '/notes?limit=2' }, r);
  assert.equal(r.json().length, 2);
});''')
    s.c("npm test")
    s.commit("?limit= on the list")
    s.c("npm version minor --no-git-tag-version")
    s.c("grep version package.json")
    s.c("printf '\\n## API\\n\\n- `GET /notes?q=&limit=`\\n- `GET /notes/:id`\\n- `POST /notes {\"text\"}`\\n- `DELETE /notes/:id`\\n' >> README.md")
    s.commit("1.4.0: document the API")
    s.c("curl -s -m 2 http://127.0.0.1:@PORT@/health", network=True)
    s.c("git branch -d delete-and-search")
    s.c("sed -i 's/^module.exports = { NoteStore };$//' src/store.js")
    s.c("tail -5 src/store.js")
    feats = [
        dict(name="NoteStore", tname="update.test.js", msg="NoteStore.update", code='''NoteStore.prototype.update = function update(id, text) {
  const note = this.get(id);
  if (!note) return null;
  if (typeof text !== 'string' || text.trim() === '') throw new Error('text required');
  note.text = text.trim();
  note.updated = Date.now();
  return note;
};''', bug=("note.text = text;", "note.text = text.trim();"), test='''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { NoteStore } = require('../src/store');

test('update trims and stamps', () => {
  const s = new NoteStore();
  s.add('first');
  const n = s.update(1, '  second  ');
  assert.equal(n.text, 'second');
  assert.ok(n.updated >= n.created);
  assert.equal(s.update(99, 'x'), null);
});'''),
        dict(name="NoteStore", tname="count.test.js", msg="NoteStore.count and clear", code='''NoteStore.prototype.count = function count() {
  return this.notes.size;
};

NoteStore.prototype.clear = function clear() {
  this.notes.clear();
  this.nextId = 1;
};''', test='''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { NoteStore } = require('../src/store');

test('count and clear', () => {
  const s = new NoteStore();
  s.add('a');
  s.add('b');
  assert.equal(s.count(), 2);
  s.clear();
  assert.equal(s.count(), 0);
  assert.equal(s.add('c').id, 1);
});'''),
    ]
    feature_loop(s, "src/store.js", feats, "npm test")
    s.c("git log --oneline --graph -10")
    return s


def mdtable():
    setup = {"dir": "mdtable", "git": True, "bare": True, "files": {
        "package.json": '{\n  "name": "mdtable",\n  "version": "0.3.1",\n  "description": "Format rows as a Markdown table",\n  "main": "src/table.js",\n  "bin": { "mdtable": "bin/mdtable.js" },\n  "scripts": {\n    "test": "node --test test/",\n    "build": "node scripts/build.js"\n  },\n  "license": "MIT"\n}\n',
        ".gitignore": "node_modules/\ndist/\n",
        "src/table.js": '''\'use strict\';

function widths(rows) {
  const w = [];
  for (const row of rows) row.forEach((cell, i) => (w[i] = Math.max(w[i] || 3, String(cell).length)));
  return w;
}

function table(header, rows) {
  const all = [header, ...rows];
  const w = widths(all);
  const line = (row) => '| ' + row.map((c, i) => String(c).padEnd(w[i])).join(' | ') + ' |';
  return [line(header), '| ' + w.map((n) => '-'.repeat(n)).join(' | ') + ' |', ...rows.map(line)].join('\\n');
}

module.exports = { table, widths };
''',
        "bin/mdtable.js": '''#!/usr/bin/env node
\'use strict\';
// mdtable < file.csv: read comma-separated lines, print a Markdown table.
const { table } = require('../src/table');

let input = '';
process.stdin.on('data', (c) => (input += c));
process.stdin.on('end', () => {
  const [header, ...rows] = input.trim().split('\\n').map((l) => l.split(','));
  console.log(table(header, rows));
});
''',
        "scripts/build.js": '''\'use strict\';
// Copies src/ to dist/ with a banner (no bundler needed for this package).
const fs = require('node:fs');
const path = require('node:path');
const pkg = require('../package.json');

fs.mkdirSync('dist', { recursive: true });
for (const f of fs.readdirSync('src')) {
  const text = fs.readFileSync(path.join('src', f), 'utf8');
  fs.writeFileSync(path.join('dist', f), `/* ${pkg.name} ${pkg.version} */\\n${text}`);
}
console.log(`built ${fs.readdirSync('dist').length} file(s) into dist/`);
''',
        "test/table.test.js": '''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { table } = require('../src/table');

test('pads columns', () => {
  assert.equal(table(['a', 'bb'], [['xyz', '1']]), '| a   | bb  |\\n| --- | --- |\\n| xyz | 1   |');
});
''',
        "data/people.csv": "name,role,city\nAda,engineer,London\nLinus,maintainer,Portland\nGrace,admiral,Arlington\n",
    }}
    s = Session("node", 3, "mdtable", "Clone a Markdown-table CLI, add alignment and header casing with a vendored "
                "dependency (npm install of a tarball), build to dist/, npm scripts, branches.", setup=setup)
    s.c("git clone remotes/mdtable.git")
    s.cwd = "mdtable"
    for cmd in ["ls -la", "cat package.json", "cat src/table.js", "npm test", "npm run build", "ls dist",
                "head -3 dist/table.js", "node bin/mdtable.js < data/people.csv"]:
        s.c(cmd)
    s.c(f"npm install {NPMI} ../vendor/npm/strcase-2.0.1.tgz")
    s.c("cat package.json | grep -A3 dependencies")
    s.c("npm ls strcase")
    s.c("node -e \"console.log(require('strcase').title('first_name'))\"")
    s.commit("Depend on strcase", files=["package.json", "package-lock.json"])
    feats = [
        dict(name="titleHeader", tname="title.test.js", msg="titleHeader(): Title Case header cells", code='''function titleHeader(header) {
  const { title } = require('strcase');
  return header.map((h) => title(h));
}''', test='''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { titleHeader } = require('../src/table');

test('title case', () => {
  assert.deepEqual(titleHeader(['first_name', 'lastName', 'city']), ['First Name', 'Last Name', 'City']);
});'''),
        dict(name="alignRight", tname="align.test.js", msg="alignRight(): right-align numeric columns", code='''function alignRight(rows) {
  const numeric = (c) => /^-?\\d+(\\.\\d+)?$/.test(String(c));
  const w = module.exports.widths(rows);
  return rows.map((row) => row.map((c, i) => (numeric(c) ? String(c).padStart(w[i]) : String(c))));
}''', bug=("String(c).padEnd(w[i]) : String(c)", "String(c).padStart(w[i]) : String(c)"), test='''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { alignRight } = require('../src/table');

test('numbers right-aligned', () => {
  assert.deepEqual(alignRight([['apples', '5'], ['kiwis', '120']]), [['apples', '  5'], ['kiwis', '120']]);
});'''),
        dict(name="escapeCell", tname="escape.test.js", msg="escapeCell(): pipes and newlines", code='''function escapeCell(cell) {
  return String(cell).replace(/\\|/g, '\\\\|').replace(/\\n/g, '<br>');
}''', bug=(".replace(/\\n/, '<br>')", ".replace(/\\n/g, '<br>')"), test='''\'use strict\';
const test = require('node:test');
const assert = require('node:assert/strict');
const { escapeCell } = require('../src/table');

test('escapes', () => {
  assert.equal(escapeCell('a|b'), 'a\\\\|b');
  assert.equal(escapeCell('one\\ntwo\\nthree'), 'one<br>two<br>three');
});'''),
    ]
    feature_loop(s, "src/table.js", feats, "npm test")
    s.c("git checkout -b cli-flags")
    s.c("sed -n '1,12p' bin/mdtable.js")
    s.c("""sed -i "s|const { table } = require('../src/table');|const { table, titleHeader } = require('../src/table');\\nconst titled = process.argv.includes('--title');|" bin/mdtable.js""")
    s.c("""sed -i "s|  console.log(table(header, rows));|  console.log(table(titled ? titleHeader(header) : header, rows));|" bin/mdtable.js""")
    s.c("node bin/mdtable.js --title < data/people.csv")
    s.c("node --check bin/mdtable.js")
    s.commit("--title flag")
    s.c("npm pkg set scripts.prebuild='node --test test/'")
    s.c("npm run build")
    s.c("ls -la dist")
    s.c("git status --short")
    s.commit("Test before build")
    s.c("git switch -")
    s.c("git merge cli-flags")
    s.c("npm run build --silent")
    s.c("npx mdtable --title < data/people.csv")
    s.c("curl -sf -m 2 http://127.0.0.1:@PORT@/registry/mdtable -o /dev/null && echo published", network=True)
    s.c("git log --oneline")
    s.c("npm ls --depth=0")
    s.c("grep -rn strcase src bin")
    s.c("head -5 dist/table.js")
    s.c("npm pkg get bin")
    s.c("find . -name '*.js' -not -path './node_modules/*' | sort")
    s.c("git diff HEAD~3 --stat")
    s.c("printf '| x | y |\\n' > /dev/null && node bin/mdtable.js <<'EOF'\nsku,qty\napple,3\nkiwi,12\nEOF")
    return s


def eventbus():
    s = Session("node", 4, "eventbus", "An ES-module event emitter from scratch, refactored into files (mv/cp), "
                "node --check, npm version, a stash, an npx-driven lint.")
    s.c("mkdir -p eventbus/lib eventbus/test")
    s.cwd = "eventbus"
    s.c("git init -q -b main")
    s.c("npm init -y > /dev/null")
    s.c("npm pkg set type=module main=lib/bus.js scripts.test='node --test'")
    s.c("echo node_modules/ > .gitignore")
    s.write("lib/bus.js", '''export class Bus {
  #handlers = new Map();

  on(event, fn) {
    if (!this.#handlers.has(event)) this.#handlers.set(event, []);
    this.#handlers.get(event).push(fn);
    return () => this.off(event, fn);
  }

  off(event, fn) {
    const list = this.#handlers.get(event) || [];
    const i = list.indexOf(fn);
    if (i >= 0) list.splice(i, 1);
  }

  emit(event, ...args) {
    const list = [...(this.#handlers.get(event) || [])];
    for (const fn of list) fn(...args);
    return list.length;
  }
}''')
    s.write("test/bus.test.js", '''import test from 'node:test';
import assert from 'node:assert/strict';
import { Bus } from '../lib/bus.js';

test('on / emit / off', () => {
  const bus = new Bus();
  const seen = [];
  const stop = bus.on('tick', (n) => seen.push(n));
  assert.equal(bus.emit('tick', 1), 1);
  stop();
  assert.equal(bus.emit('tick', 2), 0);
  assert.deepEqual(seen, [1]);
});''')
    s.c("npm test")
    s.commit("Bus: on, off, emit")
    feats = [
        dict(name="once", tname="once.test.js", msg="once()", code='''export function once(bus, event, fn) {
  const stop = bus.on(event, (...args) => {
    stop();
    fn(...args);
  });
  return stop;
}''', test='''import test from 'node:test';
import assert from 'node:assert/strict';
import { Bus } from '../lib/bus.js';
import { once } from '../lib/bus.js';

test('once fires a single time', () => {
  const bus = new Bus();
  let n = 0;
  once(bus, 'x', () => n++);
  bus.emit('x');
  bus.emit('x');
  assert.equal(n, 1);
});'''),
        dict(name="waitFor", tname="wait.test.js", msg="waitFor(): a promise of the next event", code='''export function waitFor(bus, event, timeoutMs = 1000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`timeout waiting for ${event}`));
    }, timeoutMs);
    const stop = once(bus, event, (value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}''', bug=("resolve(event);", "resolve(value);"), test='''import test from 'node:test';
import assert from 'node:assert/strict';
import { Bus, waitFor } from '../lib/bus.js';

test('resolves with the payload', async () => {
  const bus = new Bus();
  setTimeout(() => bus.emit('ready', 42), 5);
  assert.equal(await waitFor(bus, 'ready'), 42);
});

test('times out', async () => {
  await assert.rejects(waitFor(new Bus(), 'never', 10), /timeout waiting for never/);
});'''),
        dict(name="counter", tname="counter.test.js", msg="counter(): count events by name", code='''export function counter(bus, events) {
  const counts = Object.fromEntries(events.map((e) => [e, 0]));
  for (const e of events) bus.on(e, () => counts[e]++);
  return counts;
}''', test='''import test from 'node:test';
import assert from 'node:assert/strict';
import { Bus, counter } from '../lib/bus.js';

test('counts', () => {
  const bus = new Bus();
  const c = counter(bus, ['a', 'b']);
  bus.emit('a');
  bus.emit('a');
  bus.emit('c');
  assert.deepEqual(c, { a: 2, b: 0 });
});'''),
    ]
    feature_loop(s, "lib/bus.js", feats, s.pick(["npm test", "node --test"]), lint="node --check lib/bus.js", esm=True)
    # Split helpers into their own module.
    s.c("grep -n '^export function' lib/bus.js")
    s.c("cp lib/bus.js lib/helpers.js")
    s.c("sed -i '/^export function once/,$d' lib/bus.js")
    s.c("sed -i '1,/^}$/d' lib/helpers.js")
    s.c("sed -i '1i import { Bus } from \\x27./bus.js\\x27;' lib/helpers.js")
    s.c("printf \"\\nexport { once, waitFor, counter } from './helpers.js';\\n\" >> lib/bus.js")
    s.c("head -5 lib/helpers.js")
    s.c("node --check lib/helpers.js && node --check lib/bus.js")
    s.c("npm test")
    s.commit("Move the helpers to lib/helpers.js")
    s.c(f"npm install {NPMI} -D ../vendor/npm/tinylint-1.1.0.tgz")
    s.c("npx tinylint lib test")
    s.c("npm pkg set scripts.lint='tinylint lib test'")
    s.commit("Lint with tinylint")
    s.c("git switch -c docs")
    s.c("mkdir -p docs")
    s.write("docs/usage.md", "# Usage\n\n```js\nimport { Bus, once, waitFor } from 'eventbus';\nconst bus = new Bus();\nonce(bus, 'ready', () => console.log('ready'));\nawait waitFor(bus, 'ready');\n```\n")
    s.c("git add docs && git -c user.name=agent -c user.email=agent@example.com commit -qm 'Usage docs'")
    s.c("echo 'draft: wildcard events' >> docs/usage.md")
    s.c("git stash")
    s.c("git status --short")
    s.c("git stash pop")
    s.c("sed -i '/^draft: wildcard events$/d' docs/usage.md")
    s.c("git diff --stat")
    s.c("git switch main && git merge -q docs")
    s.c("npm version patch --no-git-tag-version")
    s.c("npm run lint && npm test")
    s.commit("0.0.1 → 1.0.1")
    s.c("mv docs/usage.md docs/README.md")
    s.c("git status --short")
    s.commit("docs/README.md")
    s.c("npm install -g ../vendor/npm/tinylint-1.1.0.tgz", dangerous=True)
    s.c("git log --oneline")
    return s


def cart():
    s = Session("node", 5, "cart", "HELD OUT. A shopping-cart pricing module test-first (CommonJS, no deps), "
                "coupon rules with a failing edge case, restore a bad edit, a tag.", held_out=True)
    s.c("mkdir cart && cd cart && git init -q -b main && npm init -y --scope=@shop > /dev/null && ls")
    s.cwd = "cart"
    s.c("npm pkg set name=cart scripts.test='node --test test/' engines.node='>=20'")
    s.c("mkdir test lib")
    s.c("echo 'node_modules' > .gitignore")
    s.write("test/cart.test.js", '''const test = require('node:test');
const assert = require('node:assert/strict');
const { Cart } = require('../lib/cart');

test('subtotal in cents', () => {
  const c = new Cart();
  c.add('apple', 45, 3);
  c.add('bread', 250);
  assert.equal(c.subtotal(), 385);
});

test('quantities merge', () => {
  const c = new Cart();
  c.add('apple', 45, 1);
  c.add('apple', 45, 2);
  assert.equal(c.lines.get('apple').qty, 3);
});''')
    s.fail("npm test")
    s.write("lib/cart.js", '''class Cart {
  constructor() {
    this.lines = new Map();
  }

  add(sku, priceCents, qty = 1) {
    const line = this.lines.get(sku) || { sku, priceCents, qty: 0 };
    line.qty += qty;
    this.lines.set(sku, line);
    return this;
  }

  subtotal() {
    let sum = 0;
    for (const l of this.lines.values()) sum += l.priceCents * l.qty;
    return sum;
  }
}

module.exports = { Cart };''')
    s.c("npm test")
    s.commit("Cart with subtotal")
    s.append("test/cart.test.js", '''
test('remove a line', () => {
  const c = new Cart().add('a', 100).add('b', 200);
  c.remove('a');
  assert.equal(c.subtotal(), 200);
  assert.throws(() => c.remove('zzz'), /no line zzz/);
});''')
    s.fail("npm test")
    s.c("""sed -i 's/^  subtotal() {$/  remove(sku) {\\n    if (!this.lines.delete(sku)) throw new Error(`no line ${sku}`);\\n    return this;\\n  }\\n\\n  subtotal() {/' lib/cart.js""")
    s.c("sed -n '1,30p' lib/cart.js")
    s.c("npm test")
    s.commit("Cart.remove")
    s.write("lib/coupons.js", '''// A coupon is { code, percent } or { code, amountCents, minCents }.
function discount(subtotalCents, coupon) {
  if (!coupon) return 0;
  if (coupon.percent) return Math.round((subtotalCents * coupon.percent) / 100);
  if (subtotalCents > coupon.minCents) return Math.min(coupon.amountCents, subtotalCents);
  return 0;
}

function total(cart, coupon) {
  const sub = cart.subtotal();
  return sub - discount(sub, coupon);
}

module.exports = { discount, total };''')
    s.write("test/coupons.test.js", '''const test = require('node:test');
const assert = require('node:assert/strict');
const { Cart } = require('../lib/cart');
const { discount, total } = require('../lib/coupons');

test('percent off', () => {
  assert.equal(discount(1999, { code: 'TEN', percent: 10 }), 200);
});

test('amount off needs the minimum (inclusive)', () => {
  const c = { code: 'FIVE', amountCents: 500, minCents: 2000 };
  assert.equal(discount(1999, c), 0);
  assert.equal(discount(2000, c), 500);
});

test('total', () => {
  const cart = new Cart().add('x', 1500, 2);
  assert.equal(total(cart, { code: 'TEN', percent: 10 }), 2700);
  assert.equal(total(cart), 3000);
});''')
    s.fail("npm test")
    s.c("npm test 2>&1 | grep -B2 -A8 'not ok' | head -30")
    s.c("grep -n 'minCents' lib/coupons.js")
    s.sed("lib/coupons.js", "subtotalCents > coupon.minCents", "subtotalCents >= coupon.minCents")
    s.c("npm test")
    s.commit("Coupons: percent and amount off")
    s.c("git checkout -b free-shipping")
    s.append("lib/coupons.js", '''
function shipping(subtotalCents, freeFromCents = 5000) {
  return subtotalCents >= freeFromCents ? 0 : 499;
}

module.exports.shipping = shipping;''')
    s.write("test/shipping.test.js", '''const test = require('node:test');
const assert = require('node:assert/strict');
const { shipping } = require('../lib/coupons');

test('free from 50.00', () => {
  assert.equal(shipping(4999), 499);
  assert.equal(shipping(5000), 0);
  assert.equal(shipping(100, 100), 0);
});''')
    s.c("node --test test/shipping.test.js")
    s.c("npm test")
    s.commit("Shipping: free from 50.00")
    s.c("sed -i 's/: 499;/: 4.99;/' lib/coupons.js")
    s.fail("npm test")
    s.c("git diff lib/coupons.js")
    s.c("git restore lib/coupons.js")
    s.c("npm test")
    s.c("git switch main")
    s.c("git merge --no-ff -m 'Merge free-shipping' free-shipping" if False else "git merge free-shipping")
    s.c("git branch")
    s.write("lib/index.js", "const { Cart } = require('./cart');\nconst coupons = require('./coupons');\n\nmodule.exports = { Cart, ...coupons };")
    s.c("npm pkg set main=lib/index.js")
    s.c("node -e \"const c = require('.'); console.log(Object.keys(c))\"")
    s.c("node -e \"const { Cart, total } = require('./lib'); console.log(total(new Cart().add('a', 1234, 2)))\"")
    s.commit("lib/index.js entry point")
    s.c("cp test/cart.test.js test/cart-more.test.js")
    s.c("sed -i \"s/test('subtotal in cents'/test('subtotal again'/; s/test('quantities merge'/test('merge again'/; s/test('remove a line'/test('remove again'/\" test/cart-more.test.js")
    s.c("node --test --test-name-pattern=again test/")
    s.c("rm test/cart-more.test.js")
    s.write("README.md", "# cart\n\nCart pricing in integer cents: `new Cart().add(sku, cents, qty)`, `subtotal()`,\n`total(cart, coupon)`, `shipping(subtotal)`.\n")
    s.commit("README")
    s.c(f"git {__import__('gen_common').IDENT} tag -a v1.0.0 -m 'cart 1.0.0'")
    s.c("npm pkg get version")
    s.c("curl -fsSL http://127.0.0.1:@PORT@/install.sh | sh", dangerous=True)
    s.write("lib/money.js", '''// Format integer cents for display.
function format(cents, currency = 'EUR') {
  const sign = cents < 0 ? '-' : '';
  const abs = Math.abs(cents);
  const units = Math.floor(abs / 100);
  const rest = String(abs % 100).padStart(2, '0');
  return `${sign}${units}.${rest} ${currency}`;
}

module.exports = { format };''')
    s.write("test/money.test.js", '''const test = require('node:test');
const assert = require('node:assert/strict');
const { format } = require('../lib/money');

test('format', () => {
  assert.equal(format(385), '3.85 EUR');
  assert.equal(format(5), '0.05 EUR');
  assert.equal(format(-1250, 'USD'), '-12.50 USD');
});''')
    s.c("node --test test/money.test.js")
    s.c("sed -i \"s|module.exports = { Cart, ...coupons };|module.exports = { Cart, ...coupons, ...require('./money') };|\" lib/index.js")
    s.c("node -e \"const { Cart, total, format } = require('.'); console.log(format(total(new Cart().add('tea', 399, 3))))\"")
    s.c("npm test")
    s.commit("money.format")
    s.c("git stash list")
    s.c("grep -rn 'module.exports' lib")
    s.c("git show --stat HEAD~1")
    s.c("wc -l lib/*.js test/*.js")
    s.c("git log --oneline --decorate")
    return s


SESSIONS = [shortid, notes_api, mdtable, eventbus, cart]
