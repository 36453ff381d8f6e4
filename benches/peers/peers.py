#!/usr/bin/env python3
"""Queue benchmark against peers (run it through scripts/bench_peers.sh; prints figures, asserts
nothing).

Every system gets the same N trivial jobs, inserted one commit each by a producer, while an
observer in its own process polls the system's result storage every millisecond through its own
SQLite connection and notes when each result becomes visible. Jobs/s is N over the time from the
first insert to the last result seen; latency is (result seen) - (insert committed), both taken
from the same clock (CLOCK_REALTIME, ns). Every database a result is written to is WAL with
`synchronous = FULL`.

Systems: the raw SQLite floor (examples/sqlite_floor.rs, a minimal rusqlite polling loop: read
the new rows, write a small result row for each, one commit per poll — the group commit brainloop
also uses); brainloop (`ping` action); apalis with its SQLite backend (a `u64 -> u64` job,
pushed with apalis' own `push`); huey with SqliteHuey (a `ping(n): return n` task, enqueued with
huey's own API). A second table drains a pre-loaded backlog (--drain N, default 200,000)
with each consumer stopped while the rows are inserted: jobs/s and CPU µs per job, with a second
floor beside the raw one: the bookkeeping floor (examples/bookkeeping_floor.rs), the rows brainloop
writes per job (snapshot, transitions, result, exactly-once audit) in brainloop's own databases
by a minimal loop — what the guarantees cost, apart from brainloop's code. Then 1,000
auto-approved `true` commands through brainloop against a plain `bash -c true` loop, and the idle CPU and RSS of every daemon (its whole process tree).
"""

import argparse
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def now_ns():
    return time.time_ns()


def connect(path):
    c = sqlite3.connect(path, timeout=30, isolation_level=None)
    c.execute("PRAGMA synchronous = FULL")
    return c


# ---------------------------------------------------------------- the observer


def observe(db, mode, query, n, deadline_s, out):
    """Polls `query` every millisecond; sends {key: first time seen (ns)} through `out`.

    mode "window": the query takes the lowest id not yet seen and returns ids (rows updated in
    place); mode "append": it takes the last rowid read and returns (rowid, key)."""
    seen = {}
    lo = 1
    cursor = 0
    end = time.monotonic() + deadline_s
    c = None
    while len(seen) < n and time.monotonic() < end:
        try:
            if c is None:
                c = sqlite3.connect(db, timeout=30, isolation_level=None)
            if mode == "window":
                rows = c.execute(query, (lo,)).fetchall()
                t = now_ns()
                for (k,) in rows:
                    if k not in seen:
                        seen[k] = t
                while lo in seen:
                    lo += 1
            else:
                rows = c.execute(query, (cursor,)).fetchall()
                t = now_ns()
                for rowid, k in rows:
                    seen.setdefault(k, t)
                    cursor = max(cursor, rowid)
        except sqlite3.OperationalError:
            pass  # table not created yet, or a transient lock: try again next tick
        time.sleep(0.001)
    out.put(seen)


def measure(n, produce, db, mode, query, deadline_s):
    """Runs the producer while an observer process watches; returns the case's figures."""
    q = mp.Queue()
    obs = mp.Process(target=observe, args=(db, mode, query, n, deadline_s, q))
    obs.start()
    time.sleep(0.2)  # the observer is polling before the first insert
    t0 = now_ns()
    inserted = {}
    error = None
    try:
        inserted = produce(n)
    except Exception as e:  # a producer that dies leaves a partial row, not a missing table
        error = f"{type(e).__name__}: {e}"
        obs.terminate()
    seen = q.get() if error is None else {}
    obs.join()
    lat = sorted((seen[k] - t) / 1e6 for k, t in inserted.items() if k in seen)
    done = len(lat)
    last = max(seen.values()) if seen else now_ns()
    secs = (last - t0) / 1e9
    prod = (max(inserted.values()) - t0) / 1e9 if inserted else 0

    def pct(p):
        return lat[min(len(lat) - 1, int(round((len(lat) - 1) * p)))] if lat else float("nan")

    return {
        "done": done,
        "n": n,
        "jobs_s": done / secs if secs > 0 else 0.0,
        "p50": pct(0.5),
        "p99": pct(0.99),
        "producer_s": len(inserted) / prod if prod > 0 else 0.0,
        "error": error,
    }


# ---------------------------------------------------------------- process helpers


def tree(pid):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def cpu_ticks(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
            fields = s[s.rfind(")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def rss_kib(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def stop(proc, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(cond, what, timeout=60):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def count(db, sql, args=()):
    try:
        c = sqlite3.connect(db, timeout=30)
        try:
            return c.execute(sql, args).fetchone()[0]
        finally:
            c.close()
    except sqlite3.OperationalError:
        return 0


# ---------------------------------------------------------------- the systems


class Brainloop:
    def __init__(self, bin_path, root, name, env):
        self.data = os.path.join(root, name)
        self.ws = os.path.join(root, name + "-ws")
        os.makedirs(self.ws, exist_ok=True)
        subprocess.run([bin_path, "init", "--data-dir", self.data], check=True,
                       stdout=subprocess.DEVNULL)
        e = dict(os.environ, BRAINLOOP_LOG="warn", **env)
        self.proc = subprocess.Popen(
            [bin_path, "run", "--data-dir", self.data, "--workspace", self.ws],
            env=e, stdout=subprocess.DEVNULL)
        self.out = os.path.join(self.data, "brainloop.output.db")
        self.input = os.path.join(self.data, "brainloop.input.db")
        wait_for(lambda: count(self.out, "SELECT count(*) FROM heartbeat WHERE pid = ? AND status = 'running'",
                               (self.proc.pid,)) > 0, "brainloop's heartbeat")

    def produce_fn(self, action, params):
        return Brainloop.produce_to(self.input, action, params)

    @staticmethod
    def produce_to(input_db, action, params):
        def produce(n):
            c = connect(input_db)
            ins = {}
            for _ in range(n):
                cur = c.execute("INSERT INTO jobs(action, params) VALUES (?, ?)", (action, params))
                ins[cur.lastrowid] = now_ns()
            c.close()
            return ins
        return produce

    def run(self, n, action="ping", params="{}", deadline_s=600):
        return measure(n, self.produce_fn(action, params), self.out, "window",
                       "SELECT job_id FROM results WHERE job_id >= ? AND status = 'succeeded'",
                       deadline_s)

    def pickup(self):
        """brainloop's own claim timestamps: insert -> claim, p50 / p99 (ms)."""
        c = sqlite3.connect(os.path.join(self.data, "brainloop.lifecycle.db"))
        v = sorted(r[0] for r in c.execute(
            "SELECT claimed_at - created_at FROM queue WHERE claimed_at IS NOT NULL"))
        c.close()
        if not v:
            return float("nan"), float("nan")
        return v[int(round((len(v) - 1) * 0.5))], v[int(round((len(v) - 1) * 0.99))]


class Apalis:
    def __init__(self, bin_path, root, name, mode):
        self.bin = bin_path
        self.db = os.path.join(root, name + ".db")
        self.proc = subprocess.Popen([bin_path, "worker", "sqlite:" + self.db, mode],
                                     stdout=subprocess.DEVNULL)
        wait_for(lambda: count(self.db, "SELECT count(*) FROM Workers") > 0, "apalis' worker")

    def run(self, n, deadline_s=600):
        def produce(n):
            p = subprocess.run([self.bin, "produce", "sqlite:" + self.db, str(n)],
                               check=True, capture_output=True, text=True)
            ins = {}
            for line in p.stdout.splitlines():
                seq, t = line.split("\t")
                ins[int(seq) + 1] = int(t)  # a fresh table: the i-th push is rowid i + 1
            return ins
        return measure(n, produce, self.db, "window",
                       "SELECT rowid FROM Jobs WHERE rowid >= ? AND status = 'Done'", deadline_s)


class Huey:
    def __init__(self, venv, root, name, args, settle=True):
        self.db = os.path.join(root, name + ".db")
        env = dict(os.environ, PEERS_HUEY_DB=self.db, PYTHONPATH=HERE)
        self.log = os.path.join(root, name + ".log")
        self.proc = subprocess.Popen(
            [os.path.join(venv, "bin", "huey_consumer"), "peers_huey.huey", "-q",
             "-l", self.log] + args, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        wait_for(lambda: count(self.db, "SELECT count(*) FROM sqlite_master WHERE name = 'kv'") > 0,
                 "huey's consumer")
        if settle:
            time.sleep(1)  # its workers start after the tables

    def run(self, n, deadline_s=600):
        db = self.db

        def produce(n):
            os.environ["PEERS_HUEY_DB"] = db
            sys.path.insert(0, HERE)
            import importlib
            import peers_huey
            importlib.reload(peers_huey)  # a fresh instance on this case's database
            ins = {}
            for i in range(n):
                r = peers_huey.ping(i)
                ins[r.id] = now_ns()
            return ins
        return measure(n, produce, db, "append",
                       "SELECT rowid, key FROM kv WHERE rowid > ?", deadline_s)


def floor_dbs(d):
    """The floor's input and output databases (WAL), created empty in `d`."""
    os.makedirs(d)
    inp, out = os.path.join(d, "in.db"), os.path.join(d, "out.db")
    for path, ddl in ((inp, "CREATE TABLE jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, action TEXT, params TEXT)"),
                      (out, "CREATE TABLE results(job_id INTEGER PRIMARY KEY, status TEXT, result TEXT)")):
        c = connect(path)
        c.execute("PRAGMA journal_mode = WAL")
        c.execute(ddl)
        c.close()
    return inp, out


def floor(floor_bin, root, n):
    d = os.path.join(root, "floor")
    inp, out = floor_dbs(d)
    cons = subprocess.Popen([floor_bin, inp, out, str(n)])

    def produce(n):
        c = connect(inp)
        ins = {}
        for _ in range(n):
            cur = c.execute("INSERT INTO jobs(action, params) VALUES ('ping', '{}')")
            ins[cur.lastrowid] = now_ns()
        c.close()
        return ins
    r = measure(n, produce, out, "window", "SELECT job_id FROM results WHERE job_id >= ?", 600)
    cons.wait()
    return r


def plain_bash(n):
    t = time.monotonic()
    subprocess.run(["bash", "-c", f"for ((i = 0; i < {n}; i++)); do bash -c true; done"], check=True)
    return time.monotonic() - t


# ---------------------------------------------------------------- backlog drain


def drain(start, preload, done, n, deadline_s=1200, prime=True):
    """A backlog drain: the consumer is started once (it creates its tables) and stopped,
    `preload(n)` inserts N jobs, and it is started again; returns jobs/s from that start until
    `done()` reaches N, and the consumer's CPU time per job (µs, user + system, its whole tree).
    (Not SIGSTOP: a consumer stopped inside a write transaction would lock the producer out.)
    `prime=False` when the producer creates the tables itself (apalis' `produce` runs its setup,
    and apalis refuses a second worker of the same name while the first one's row is fresh)."""
    if prime:
        stop(start().proc)
    preload(n)
    t0 = time.monotonic()
    proc = start().proc
    end = t0 + deadline_s
    k = 0
    while k < n and time.monotonic() < end:
        # The count scans the results on the same two cores as the consumer: poll at most 10 %
        # of one core's time (the sleep is 9 times the count's own), not every 5 ms.
        q = time.monotonic()
        k = done()
        if k < n:
            time.sleep(max(0.005, 9 * (time.monotonic() - q)))
    secs = time.monotonic() - t0
    cpu = cpu_ticks(proc.pid) / CLK_TCK
    stop(proc)
    return {"done": k, "n": n, "jobs_s": k / secs if secs > 0 else 0.0,
            "cpu_us": cpu * 1e6 / max(k, 1), "cpu_s": cpu}


def bulk_insert(db, sql, n):
    c = connect(db)
    c.execute("BEGIN")
    c.executemany(sql, (() for _ in range(n)))
    c.execute("COMMIT")
    c.close()


def drain_brainloop(bin_path, root, n, name, env):
    data = os.path.join(root, name)
    return drain(lambda: Brainloop(bin_path, root, name, env),
                 lambda n: bulk_insert(os.path.join(data, "brainloop.input.db"),
                                       "INSERT INTO jobs(action, params) VALUES ('ping', '{}')", n),
                 # Done when every result AND its audit row are written (the audit rows move
                 # to metadata.db after the results: their CPU belongs to the drain too).
                 lambda: min(count(os.path.join(data, "brainloop.output.db"),
                                   "SELECT count(*) FROM results WHERE status = 'succeeded'"),
                             count(os.path.join(data, "brainloop.metadata.db"),
                                   "SELECT count(*) FROM audit")), n)


def drain_floor(floor_bin, root, n):
    """The floor's consumer exits after N results: its CPU comes from wait4's rusage."""
    d = os.path.join(root, "floor-drain")
    inp, out = floor_dbs(d)
    bulk_insert(inp, "INSERT INTO jobs(action, params) VALUES ('ping', '{}')", n)
    t0 = time.monotonic()
    cons = subprocess.Popen([floor_bin, inp, out, str(n)])
    _, _, ru = os.wait4(cons.pid, 0)
    secs = time.monotonic() - t0
    k = count(out, "SELECT count(*) FROM results")
    cpu = ru.ru_utime + ru.ru_stime
    return {"done": k, "n": n, "jobs_s": k / secs if secs > 0 else 0.0,
            "cpu_us": cpu * 1e6 / max(k, 1), "cpu_s": cpu}


def drain_bookkeeping(bookkeeping_bin, brainloop_bin, root, n):
    """brainloop's own rows for each job and nothing else (examples/bookkeeping_floor.rs) in a
    data dir made by `brainloop init`; it exits after N jobs: its CPU comes from wait4."""
    d = os.path.join(root, "bookkeeping-drain")
    subprocess.run([brainloop_bin, "init", "--data-dir", d], check=True, stdout=subprocess.DEVNULL)
    bulk_insert(os.path.join(d, "brainloop.input.db"),
                "INSERT INTO jobs(action, params) VALUES ('ping', '{}')", n)
    t0 = time.monotonic()
    cons = subprocess.Popen([bookkeeping_bin, d, str(n)])
    _, _, ru = os.wait4(cons.pid, 0)
    secs = time.monotonic() - t0
    k = min(count(os.path.join(d, "brainloop.output.db"), "SELECT count(*) FROM results"),
            count(os.path.join(d, "brainloop.metadata.db"), "SELECT count(*) FROM audit"))
    cpu = ru.ru_utime + ru.ru_stime
    return {"done": k, "n": n, "jobs_s": k / secs if secs > 0 else 0.0,
            "cpu_us": cpu * 1e6 / max(k, 1), "cpu_s": cpu}


def drain_huey(venv, root, n, name, args):
    start = lambda: Huey(venv, root, name, args, settle=False)
    db = os.path.join(root, name + ".db")

    def preload(n):
        os.environ["PEERS_HUEY_DB"] = db
        sys.path.insert(0, HERE)
        import importlib
        import peers_huey
        importlib.reload(peers_huey)
        for i in range(n):
            peers_huey.ping(i)
    return drain(start, preload, lambda: count(db, "SELECT count(*) FROM kv"), n)


def drain_apalis(apalis_bin, root, n, name, mode):
    start = lambda: Apalis(apalis_bin, root, name, mode)
    db = os.path.join(root, name + ".db")
    return drain(start,
                 lambda n: subprocess.run([apalis_bin, "produce", "sqlite:" + db, str(n)],
                                          check=True, capture_output=True),
                 lambda: count(db, "SELECT count(*) FROM Jobs WHERE status = 'Done'"), n, prime=False)


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brainloop", required=True)
    ap.add_argument("--apalis", required=True)
    ap.add_argument("--floor", required=True, help="the raw rusqlite floor (examples/sqlite_floor.rs)")
    ap.add_argument("--bookkeeping", required=True,
                    help="brainloop's rows per job and nothing else (examples/bookkeeping_floor.rs)")
    ap.add_argument("--venv", required=True)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--commands", type=int, default=1000)
    ap.add_argument("--idle", type=int, default=60)
    ap.add_argument("--drain", type=int, default=200000, help="jobs pre-loaded for the drain table (0: skip)")
    ap.add_argument("--only", default="", help="comma-separated case names (for tuning)")
    a = ap.parse_args()
    n = a.jobs
    only = set(x for x in a.only.split(",") if x)

    def want(name):
        return not only or name in only

    root = tempfile.mkdtemp(prefix="bench-peers-", dir=os.environ.get("PEERS_TMP"))
    print(f"queue benchmark against peers — {n} jobs inserted one commit each; "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}, {os.cpu_count()} cores, "
          f"{os.uname().sysname} {os.uname().release}; scratch dir {root} (removed at the end unless PEERS_KEEP=1)", flush=True)
    rows, daemons = [], []

    def add(row):
        rows.append(row)
        r = row[3]
        print(f"  {row[0]}: {r['done']}/{r['n']} done, {r['jobs_s']:.0f} jobs/s, p50 {r['p50']:.1f} ms, "
              f"p99 {r['p99']:.1f} ms{' — ' + r['error'] if r['error'] else ''}", file=sys.stderr, flush=True)

    # The producer alone, no consumer: what "end to end at the producer's rate" is measured
    # against (issue 24: brainloop ≥ 0.9× this).
    alone = None
    if want("producer") or want("brainloop-default") or want("brainloop-best"):
        d = os.path.join(root, "producer-alone")
        subprocess.run([a.brainloop, "init", "--data-dir", d], check=True, stdout=subprocess.DEVNULL)
        inp = os.path.join(d, "brainloop.input.db")
        # Under the same harness as every case (an observer polling every millisecond), here
        # watching the jobs themselves: only the consumer is missing.
        r = measure(n, Brainloop.produce_to(inp, "ping", "{}"), inp, "window",
                    "SELECT id FROM jobs WHERE id >= ?", 600)
        alone = r["producer_s"]
        print(f"  producer alone: {alone:.0f} inserts/s", file=sys.stderr, flush=True)
    if want("floor"):
        add(("raw SQLite floor (producer + minimal Rust loop)", "—",
                     "WAL, FULL", floor(a.floor, root, n)))
    bl_env = {
        "default": {},
        "best": {"BRAINLOOP_CONCURRENCY": "8", "BRAINLOOP_MAX_SLOTS_PER_CLIENT": "8"},
    }
    for mode, env in bl_env.items():
        if want("brainloop-" + mode):
            b = Brainloop(a.brainloop, root, "bl-" + mode, env)
            r = b.run(n)
            r["pickup"] = b.pickup()
            name = f"brainloop ({mode})"
            add((name, ", ".join(f"{k}={v}" for k, v in env.items()) or "none",
                         "output.db WAL, FULL", r))
            daemons.append((name, b.proc))
    for mode in ("default", "best"):
        if want("apalis-" + mode):
            p = Apalis(a.apalis, root, "apalis-" + mode, mode)
            settings = "none" if mode == "default" else "batch_size 100, concurrency 4, poll 1 ms"
            name = f"apalis-sqlite 1.0.0 ({mode})"
            add((name, settings, "WAL, FULL", p.run(n)))
            daemons.append((name, p.proc))
    huey_args = {
        "default": [],
        "best": os.environ.get("PEERS_HUEY_BEST", "-w 4 -k thread -d 0.001 -m 0.01 -b 1.05").split(),
    }
    for mode, args in huey_args.items():
        if want("huey-" + mode):
            h = Huey(a.venv, root, "huey-" + mode, args)
            name = f"huey 3.5.4 SqliteHuey ({mode})"
            add((name, " ".join(args) or "none", "WAL, FULL (fsync=True)", h.run(n)))
            daemons.append((name, h.proc))

    bash_rows = []
    if want("bash"):
        base = plain_bash(a.commands)
        bash_rows.append(("plain loop: bash -c true", base, 1.0))
        for conc in (1, 4):
            b = Brainloop(a.brainloop, root, f"bash-c{conc}", {"BRAINLOOP_CONCURRENCY": str(conc), "BRAINLOOP_MAX_SLOTS_PER_CLIENT": str(conc)})
            t = time.monotonic()
            r = b.run(a.commands, action="execute_bash", params='{"command": "true"}')
            secs = time.monotonic() - t - 0.2
            if r["done"] < a.commands:
                secs = float("nan")
            bash_rows.append((f"brainloop execute_bash, concurrency {conc}", secs, secs / base))
            stop(b.proc)

    # Backlog drain: N jobs pre-loaded while each consumer is stopped (fresh instances).
    drains = []
    if a.drain > 0:
        cases = [
            ("floor", "raw SQLite floor (minimal Rust loop)", lambda: drain_floor(a.floor, root, a.drain)),
            ("bookkeeping-floor", "bookkeeping floor (brainloop's rows, minimal Rust loop)",
             lambda: drain_bookkeeping(a.bookkeeping, a.brainloop, root, a.drain)),
            ("brainloop-default", "brainloop (default)", lambda: drain_brainloop(a.brainloop, root, a.drain, "bl-drain-default", bl_env["default"])),
            ("brainloop-best", "brainloop (best)", lambda: drain_brainloop(a.brainloop, root, a.drain, "bl-drain-best", bl_env["best"])),
            ("apalis-best", "apalis-sqlite 1.0.0 (best)", lambda: drain_apalis(a.apalis, root, a.drain, "apalis-drain", "best")),
            ("huey-best", "huey 3.5.4 SqliteHuey (best)", lambda: drain_huey(a.venv, root, a.drain, "huey-drain", huey_args["best"])),
        ]
        for key, name, fn in cases:
            if want(key) or want("drain"):
                r = fn()
                drains.append((name, r))
                print(f"  drain {name}: {r['done']}/{r['n']}, {r['jobs_s']:.0f} jobs/s, "
                      f"{r['cpu_us']:.0f} µs CPU/job", file=sys.stderr, flush=True)

    # Idle: every daemon at once, over the same window, after its run.
    idle = {}
    if daemons and a.idle > 0:
        time.sleep(2)
        c0 = {name: cpu_ticks(p.pid) for name, p in daemons}
        t = time.monotonic()
        time.sleep(a.idle)
        secs = time.monotonic() - t
        for name, p in daemons:
            idle[name] = ((cpu_ticks(p.pid) - c0[name]) / CLK_TCK, secs, rss_kib(p.pid) / 1024)
    for _, p in daemons:
        stop(p)
    if not os.environ.get("PEERS_KEEP"):
        shutil.rmtree(root, ignore_errors=True)

    # ---- the table
    floor_r = next((r for name, _, _, r in rows if name.startswith("raw")), None)
    huey_best = next((r for name, _, _, r in rows if name.startswith("huey") and "best" in name), None)
    apalis_best = next((r for name, _, _, r in rows if name.startswith("apalis") and "best" in name), None)
    print()
    if rows:
        print("| system | settings | durability | jobs/s | vs floor | p50 / p99 ms (insert → result visible) "
              "| producer inserts/s | idle CPU s / 60 s | idle RSS MiB |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for name, settings, dur, r in rows:
        i = idle.get(name)
        ratio = f"{r['jobs_s'] / floor_r['jobs_s']:.2f}" if floor_r else ""
        incomplete = "" if r["done"] == r["n"] else f" ({r['done']}/{r['n']} done)"
        if r["error"]:
            incomplete += f" (producer failed: {r['error']})"
        idle_cpu = f"{i[0] * 60 / i[1]:.2f}" if i else ""
        idle_rss = f"{i[2]:.1f}" if i else ""
        print(f"| {name} | {settings} | {dur} | {r['jobs_s']:.0f}{incomplete} | {ratio} | "
              f"{r['p50']:.1f} / {r['p99']:.1f} | {r['producer_s']:.0f} | {idle_cpu} | {idle_rss} |")
    for name, _, _, r in rows:
        if "pickup" in r:
            print(f"\n{name}: pickup (insert → claim, its own timestamps) p50 / p99 = "
                  f"{r['pickup'][0]} / {r['pickup'][1]} ms", end="")
    print()
    if alone:
        print(f"\nproducer alone (one FULL commit per job into brainloop's input.db, no consumer): "
              f"{alone:.0f} inserts/s")
    for name, _, _, r in rows:
        if name.startswith("brainloop"):
            parts = []
            if alone:
                parts.append(f"{r['jobs_s'] / alone:.2f}× the producer alone")
            if huey_best:
                parts.append(f"{r['jobs_s'] / huey_best['jobs_s']:.1f}× huey (best)")
            if apalis_best:
                parts.append(f"{r['jobs_s'] / apalis_best['jobs_s']:.2f}× apalis (best)")
            if parts:
                print(f"{name}: " + ", ".join(parts))
    if drains:
        fl = next((r for name, r in drains if name.startswith("raw")), None)
        print()
        print(f"| backlog drain ({a.drain} jobs pre-loaded) | jobs/s | vs floor | CPU µs per job | CPU s in all |")
        print("|---|---:|---:|---:|---:|")
        for name, r in drains:
            incomplete = "" if r["done"] == r["n"] else f" ({r['done']}/{r['n']} done)"
            ratio = f"{r['jobs_s'] / fl['jobs_s']:.2f}" if fl and fl["jobs_s"] else ""
            print(f"| {name} | {r['jobs_s']:.0f}{incomplete} | {ratio} | {r['cpu_us']:.0f} | {r['cpu_s']:.1f} |")
        hb = next((r for name, r in drains if name.startswith("huey")), None)
        bk = next((r for name, r in drains if name.startswith("bookkeeping")), None)
        for name, r in drains:
            if not name.startswith("brainloop"):
                continue
            parts = []
            if bk and bk["jobs_s"]:
                parts.append(f"{r['jobs_s'] / bk['jobs_s']:.2f}× the bookkeeping floor's jobs/s, "
                             f"{r['cpu_us'] / bk['cpu_us']:.2f}× its CPU per job")
            if hb and hb["jobs_s"]:
                parts.append(f"{r['jobs_s'] / hb['jobs_s']:.1f}× huey (best)")
            if parts:
                print(f"{name} drain: " + ", ".join(parts))
    if bash_rows:
        print()
        print(f"| {a.commands} auto-approved commands | total s | per command ms | vs plain loop |")
        print("|---|---:|---:|---:|")
        for name, secs, ratio in bash_rows:
            print(f"| {name} | {secs:.2f} | {secs * 1000 / a.commands:.3f} | {ratio:.2f} |")


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
