#!/usr/bin/env python3
"""Replay the corpus with plain bash (no brainloop) to check the stories hold: every command
marked `"expect": "fail"` fails and every other runnable one succeeds. A corpus author's tool;
the benchmark (benches/learn_corpus.rs) prepares workspaces the same way (keep them in step).

Usage: python3 benches/corpus/check.py [KIND ...]   (skips dangerous, network and not-runnable lines)
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ["python", "node", "rust", "go"]


def sessions(kind):
    out = []
    for path in sorted(glob.glob(os.path.join(HERE, kind, "*.jsonl"))):
        with open(path) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        out.append((lines[0], lines[1:]))
    return out


def run(cmd, cwd, env=None):
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)


def must(cmd, cwd):
    r = run(cmd, cwd)
    if r.returncode:
        sys.exit(f"setup failed: {cmd}\n{r.stdout}{r.stderr}")


def wheel_whl():
    env = os.environ.get("CORPUS_WHEEL_WHL")
    if env:
        return env
    pats = ["/usr/share/python-wheels/wheel-*.whl", "/usr/lib/python3*/ensurepip/_bundled/wheel-*.whl",
            os.path.expanduser("~/.pyenv/versions/*/lib/python3*/test/wheeldata/wheel-*.whl"),
            os.path.expanduser("~/.pyenv/versions/*/lib/python3*/test/wheel-*.whl")]
    for p in pats:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[-1]
    sys.exit("no wheel-*.whl found: set CORPUS_WHEEL_WHL")


def prepare(kind, root, heads):
    ws = os.path.join(root, "ws")
    os.makedirs(ws)
    if kind == "python":
        vend = os.path.join(ws, "vendor", "py")
        os.makedirs(vend)
        whl = wheel_whl()
        shutil.copy(whl, vend)
        must(f"python3 -m venv {root}/buildenv && {root}/buildenv/bin/pip install -q --no-index {whl}", root)
        for pkg in sorted(glob.glob(os.path.join(HERE, "vendor", "python", "*"))):
            must(f"{root}/buildenv/bin/pip wheel -q --no-deps --no-index --no-build-isolation -w {vend} {pkg}", root)
    if kind == "node":
        vend = os.path.join(ws, "vendor", "npm")
        os.makedirs(vend)
        for pkg in sorted(glob.glob(os.path.join(HERE, "vendor", "node", "*"))):
            must(f"npm pack --silent --pack-destination {vend} {pkg}", root)
    if kind == "rust":
        shutil.copytree(os.path.join(HERE, "vendor", "rust"), os.path.join(ws, "vendor", "rust"))
    for h in heads:
        st = h.get("setup")
        if not st:
            continue
        src = os.path.join(root, "src-" + st["dir"]) if st.get("bare") else os.path.join(ws, st["dir"])
        for rel, text in st["files"].items():
            p = os.path.join(src, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        must("git init -q -b main && git config user.name operator && git config user.email operator@example.com"
             " && git add -A && git commit -q -m 'Initial import'", src)
        if st.get("bare"):
            os.makedirs(os.path.join(ws, "remotes"), exist_ok=True)
            must(f"git clone -q --bare {src} {ws}/remotes/{st['dir']}.git", root)
    return ws


def serve():
    """The local HTTP server network commands reach (127.0.0.1, any path answers JSON)."""
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"ok": true, "items": [1, 2, 3]}\n'
            if self.path.endswith(".sh"):
                body = b"echo installed\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


def main():
    port = serve()
    kinds = sys.argv[1:] or KINDS
    bad = 0
    for kind in kinds:
        ss = sessions(kind)
        root = tempfile.mkdtemp(prefix=f"corpus-check-{kind}-")
        ws = prepare(kind, root, [h for h, _ in ss])
        home = os.path.join(root, "home")
        os.makedirs(home)
        real = os.path.expanduser("~")
        env = dict(os.environ, HOME=home,
                   RUSTUP_HOME=os.environ.get("RUSTUP_HOME", os.path.join(real, ".rustup")),
                   CARGO_HOME=os.environ.get("CARGO_HOME", os.path.join(real, ".cargo")), PYTHONDONTWRITEBYTECODE="1",
                   GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
        n = 0
        for h, cmds in ss:
            for c in cmds:
                if c.get("dangerous") or c.get("runnable") is False:
                    continue
                n += 1
                r = subprocess.run(["bash", "-c", c["cmd"].replace("@PORT@", str(port))], cwd=os.path.join(ws, c["cwd"]), env=env,
                                   capture_output=True, text=True, timeout=300)
                want_fail = c.get("expect") == "fail"
                if (r.returncode != 0) != want_fail:
                    bad += 1
                    print(f"{h['session']}: expected {'failure' if want_fail else 'success'}, got {r.returncode}: {c['cmd'][:200]}")
                    print("   " + (r.stdout + r.stderr)[-800:].replace("\n", "\n   "))
        print(f"{kind}: {n} commands replayed in {root}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
