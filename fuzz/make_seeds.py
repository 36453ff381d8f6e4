#!/usr/bin/env python3
"""Writes the hand-written seeds under fuzz/seeds/<target>/ (run from the repository root:
python3 fuzz/make_seeds.py [--corpus]). --corpus also adds every command of
tests/data/classify_corpus.txt (about 850 files; not committed, the minimised corpus in
fuzz/corpus/classify/ keeps those that add coverage)."""
import glob, hashlib, json, re, sys

def put(d, data):
    if isinstance(data, str):
        data = data.encode()
    h = hashlib.sha1(data).hexdigest()[:16]
    open(f'fuzz/seeds/{d}/{h}', 'wb').write(data)

# classify: the arithmetic adversarial cases (and optionally the labelled corpus)
src = open('tests/classify_arith.rs').read()
for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', src):
    s = m.group(1)
    if any(ch in s for ch in '$(['):
        s = (s.replace('{P}', "x='a[$(touch /tmp/p)]'").replace('{{', '{').replace('}}', '}')
             .replace('\\n', '\n').replace('\\"', '"'))
        put('classify', s)
if '--corpus' in sys.argv:
    for line in open('tests/data/classify_corpus.txt'):
        line = line.rstrip('\n')
        if line.strip() and not line.startswith('#'):
            parts = line.split(' | ', 4)
            if len(parts) == 5:
                put('classify', parts[4].replace('⏎', '\n'))

# params: selector byte 0 (the fuzzer mutates it) + one document per action shape
docs = [{"command": "ls -la"}, {"command": "echo hi", "timeout_ms": 1000, "force_execute": False, "workdir": "/tmp"},
        {"job_id": 1}, {"permission": "FILE_READ", "pattern": "/srv/**", "justification": "x"},
        {"code": "return [1,2].map(x => x*2)", "language": "ts", "timeout_ms": 100}, {"code": "fetch('x')"},
        {"ms": 5, "fail": True, "ignore_cancel": False}, {"path": "a.db"}, {"file_path": "README.md"},
        {"db_path": "x.db"}, {"action_name": "execute_bash"}, {},
        {"prompt": "p", "output_path": "a.py", "overwrite": True}, {"prompt": "q", "database": "app.db"},
        {"topic": "t", "sources": ["a.rs"]}, {"mode": "agent", "goal": "g"},
        {"mode": "refine", "session_id": "s", "block_id": "b", "feedback": "f"}]
for d in docs:
    put('params', bytes([0]) + json.dumps(d).encode())

# infer: the JS/TS snippets of the inference tests, as js (0) and ts (1)
for f in glob.glob('tests/infer_*.rs'):
    for m in re.finditer(r'r#"(.*?)"#', open(f).read(), re.S):
        put('infer', b'\x00' + m.group(1).encode())
        put('infer', b'\x01' + m.group(1).encode())
put('infer', b'\x01' + open('tests/fixtures/code/sample.ts', 'rb').read())
