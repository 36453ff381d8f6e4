#!/usr/bin/env python3
"""Lists the Rust functions longer than LIMIT lines (default 150), longest first.
Usage: scripts/long_functions.py [DIR=src] [LIMIT=150] → "lines  path:line  name".
Brace matching skips comments, strings, raw strings and char literals."""
import re, sys, os
LIMIT = int(sys.argv[2]) if len(sys.argv) > 2 else 150
root = sys.argv[1] if len(sys.argv) > 1 else "src"
FN = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')

def mask(src):
    """Replaces comments/strings/chars with spaces (keeping newlines)."""
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            depth = 0; j = i
            while j < n:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j):
                    depth -= 1; j += 2
                    if depth == 0: break
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif re.match(r'b?r#*"', src[i:i+3 + 256]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            m = re.match(r'b?r(#*)"', src[i:]); hashes = m.group(1)
            end = src.find('"' + hashes, i + m.end()); end = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r'[^\n]', ' ', src[i:end])); i = end
        elif c == '"' or (c == 'b' and src.startswith('b"', i) and (i == 0 or not (src[i-1].isalnum() or src[i-1]=='_'))):
            j = i + (2 if c == 'b' else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\.|\\x[0-9a-fA-F]{2}|\\u\{[0-9a-fA-F]+\}|[^\\'])'", src[i:i+12])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else:
                out.append(c); i += 1  # lifetime
        else:
            out.append(c); i += 1
    return ''.join(out)

res = []
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith('.rs'): continue
        p = os.path.join(d, f)
        m = mask(open(p).read())
        lines = m.split('\n')
        offs = [0]
        for l in lines: offs.append(offs[-1] + len(l) + 1)
        for ln, l in enumerate(lines):
            g = FN.match(l)
            if not g: continue
            # find body start: first '{' or ';' after the fn line at paren depth 0
            pos = offs[ln] + g.end(); depth = 0; start = None
            while pos < len(m):
                ch = m[pos]
                if ch in '([': depth += 1
                elif ch in ')]': depth -= 1
                elif ch == ';' and depth == 0: break
                elif ch == '{' and depth == 0: start = pos; break
                pos += 1
            if start is None: continue
            b = 0; pos = start
            while pos < len(m):
                if m[pos] == '{': b += 1
                elif m[pos] == '}':
                    b -= 1
                    if b == 0: break
                pos += 1
            end_ln = m.count('\n', 0, pos)
            length = end_ln - ln + 1
            if length > LIMIT:
                res.append((length, p, ln + 1, g.group(1)))
for length, p, ln, name in sorted(res, reverse=True):
    print(f"{length:5d}  {p}:{ln}  {name}")
