"""Shared machinery of the corpus generator (benches/corpus/generate.py).

A session is a list of records; the first is a header, the others commands:
  {"session": ..., "kind": ..., "held_out": bool, "story": ..., "setup": {...} | null}
  {"cmd": "...", "cwd": "proj"}   + optional "expect": "fail", "dangerous": true,
                                    "network": true, "runnable": false
`cwd` is relative to the kind's workspace ("" = the workspace itself). `@PORT@` in a command is
the port of the bench's local HTTP server on 127.0.0.1.
"""
import json
import random
import re

IDENT = "-c user.name=agent -c user.email=agent@example.com"


def sed_escape(s):
    """Escape a literal string for the left side of a sed s/// with / as the delimiter."""
    return re.sub(r"([\\/.*\[\]^$&])", r"\\\1", s)


def sed_repl(s):
    return re.sub(r"([\\/&])", r"\\\1", s)


def sq(s):
    """Single-quote for the shell."""
    return "'" + s.replace("'", "'\"'\"'") + "'"


class Session:
    def __init__(self, kind, idx, slug, story, held_out=False, setup=None, seed=None, identity=False):
        self.kind = kind
        self.name = f"{kind}-{idx:02d}-{slug}"
        self.story = story
        self.held_out = held_out
        self.setup = setup
        self.rng = random.Random(seed if seed is not None else self.name)
        self.cwd = ""
        # identity: the repository has user.name configured (operator-prepared); otherwise the
        # agent commits with `git -c user.name=... -c user.email=...`.
        self.identity = identity
        self.records = []
        self.commits = 0

    def c(self, cmd, **flags):
        rec = {"cmd": cmd, "cwd": flags.pop("cwd", self.cwd)}
        for k, v in flags.items():
            if v or (k == "runnable" and v is False):
                rec[k] = v
        self.records.append(rec)

    def fail(self, cmd, **flags):
        self.c(cmd, expect="fail", **flags)

    def pick(self, options, k=1):
        return self.rng.sample(options, k) if k > 1 else self.rng.choice(options)

    def write(self, path, text, how=None):
        """Write a whole file with a heredoc (cat > f <<'EOF')."""
        how = how or "cat"
        if not text.endswith("\n"):
            text += "\n"
        if how == "tee":
            self.c(f"tee {path} > /dev/null <<'EOF'\n{text}EOF")
        else:
            self.c(f"cat > {path} <<'EOF'\n{text}EOF")

    def append(self, path, text):
        if not text.endswith("\n"):
            text += "\n"
        self.c(f"cat >> {path} <<'EOF'\n{text}EOF")

    def sed(self, path, old, new, expect=None):
        cmd = f"sed -i 's/{sed_escape(old)}/{sed_repl(new)}/' {path}"
        if "'" in old or "'" in new:
            dq = lambda x: re.sub(r'([\\"$`])', r"\\\1", x)
            cmd = f"sed -i \"s/{dq(sed_escape(old))}/{dq(sed_repl(new))}/\" {path}"
        self.c(cmd, expect=expect)

    def commit(self, msg, files=None, am=False):
        self.commits += 1
        r = self.rng.random()
        if files is None:
            add = self.pick(["git add -A", "git add .", "git add -A"])
        else:
            add = "git add " + " ".join(files)
        if self.rng.random() < 0.35:
            self.c(self.pick(["git status --short", "git diff --stat", "git status", "git diff --cached --stat" if False else "git diff --stat"]))
        qmsg = sq(msg)
        if self.identity:
            if r < 0.15 and files is None and am:
                self.c(f"git commit -am {qmsg}" if self.rng.random() < 0.5 else f"git commit -qam {qmsg}")
                return
            self.c(add)
            form = self.pick([f"git commit -m {qmsg}", f"git commit -q -m {qmsg}", f"git commit -qm {qmsg}", f"git commit -m {qmsg}"])
            self.c(form)
        else:
            self.c(add)
            if r < 0.75:
                self.c(f"git {IDENT} commit -qm {qmsg}")
            else:
                self.c(f"git {IDENT} commit -m {qmsg}")
        if self.rng.random() < 0.3:
            self.c(self.pick(["git log --oneline -3", "git log --oneline -5", "git log -1 --stat", "git show --stat HEAD"]))

    def dump(self, path):
        header = {
            "session": self.name,
            "kind": self.kind,
            "held_out": self.held_out,
            "story": self.story,
            "setup": self.setup,
        }
        with open(path, "w") as f:
            f.write(json.dumps(header) + "\n")
            for r in self.records:
                f.write(json.dumps(r) + "\n")
        return len(self.records)
