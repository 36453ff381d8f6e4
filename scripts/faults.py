#!/usr/bin/env python3
"""Fault-injection pass over the real brainloop worker (issue 34, "Under faults").

Python standard library only; nothing beyond 127.0.0.1; every scenario runs the real release
binary on its own throwaway dir under $TMPDIR/brainloop-faults-* (data dir, workspace, the
worker's TMPDIR), removed afterwards unless --keep or a FAIL. One scenario after another, each
prints one table row (figures and a verdict: pass, or FAIL with what broke); the end prints a
markdown table ready for docs/reliability.md, with the date, the commit and the machine load.

Scenarios (`--only NAME[,NAME]`; `--quick` shrinks every size for a smoke run):
  locked        exclusive locks held by a separate connection on output / lifecycle / metadata /
                command_security, one after another, while jobs flow: jobs lost, run twice,
                max queue-to-result latency, worker still up.
  disk_full     the data dir on a small tmpfs (root only, else "skipped: needs root"), filled up
                while jobs flow and are inserted; status while full; space freed: nothing lost.
  hung_model    a mock Cerebras server on 127.0.0.1 that accepts and never answers: the LLM job
                must end by its deadline (llm.request_timeout_ms).
  sigstop       the worker SIGSTOPped longer than a command's timeout: is the command killed at
                its deadline while the worker is stopped; does a command that exited first
                report its real exit (item 2).
  immutable     output.db (and its -wal) made immutable (chattr +i as root, else chmod 0444):
                `status` exit code and what it names (item 4).
  clock         wall-clock steps under libfaketime (monotonic left alone): status's heartbeat
                age, a 10-minute approval after a forward step, `not_before` after a backward
                step, status after the stop (item 4).
  kill_apply    kill -9 the moment an approved change lands in the workspace, restart, deny
                any re-ask: the result and the workspace must agree (item 1).
  sigterm       SIGTERM with the maximum drain window, every database locked, long commands:
                exit time (< 60 s), nothing run twice after restart (item 3).
  producers     concurrent producers inserting while the worker drains, with a `status --json`
                loop: SQLITE_BUSY seen by producers, one final result per job, false problems.
  backlog       a backlog of pings inserted while stopped: drain time, peak RSS (VmHWM).
"""

import argparse
import http.server
import json
import multiprocessing
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

FINAL = {"succeeded", "failed", "denied", "blocked", "duplicate_warning", "expired",
         "cancelled", "interrupted"}
WORKER_DBS = ("brainloop.output.db", "brainloop.lifecycle.db", "brainloop.metadata.db",
              "command_security.db")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def now_ms():
    return int(time.time() * 1000)


def is_root():
    return os.geteuid() == 0


# ---------------------------------------------------------------- one throwaway installation


class Setup:
    """A data dir + workspace + config + worker for one scenario."""

    def __init__(self, a, name, extra_config="", data_dir=None, env_extra=None, concurrency=4):
        self.a = a
        self.name = name
        self.root = os.path.realpath(tempfile.mkdtemp(prefix=f"brainloop-faults-{name}-"))
        self.data = data_dir or os.path.join(self.root, "data")
        self.ws = os.path.join(self.root, "ws")
        self.tmp = os.path.join(self.root, "tmp")
        for d in (self.ws, self.tmp, os.path.join(self.ws, "src"), os.path.join(self.ws, "side"),
                  os.path.join(self.ws, "out")):
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(self.ws, "src/app.py"), "w") as f:
            f.write("print('hello')\n")
        self.config = os.path.join(self.root, "brainloop.toml")
        with open(self.config, "w") as f:
            f.write(f'''# brainloop fault-injection configuration (generated)
data_dir = "{self.data}"
workspace = "{self.ws}"
heartbeat_interval_ms = 1000
dead_after_ms = 5000
concurrency = {concurrency}
max_slots_per_client = {concurrency}
test_actions = true
signature_approvals = 1000000
retention = {{ interval_ms = 600000 }}
{extra_config}
[clients.faults]
file_read = ["{{workspace}}/**"]
file_write = ["{{workspace}}/out/**"]
file_write_auto = ["{{workspace}}/side/**"]
system_command = ["echo", "sleep", "cat", "ls", "true"]
llm = true
''')
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("CEREBRAS_API_KEY", "CREDENTIALS_DIRECTORY")
                    and not k.startswith("BRAINLOOP_") and not k.startswith("FAKETIME")
                    and k != "LD_PRELOAD"}
        self.env.update({"TMPDIR": self.tmp, "BRAINLOOP_LOG": "info"})
        self.env.update(env_extra or {})
        self.log_path = os.path.join(self.root, "worker.log")
        self.proc = None
        self.failed = False
        r = self.cli(["init"])
        if r.returncode != 0:
            raise RuntimeError(f"init failed: {r.stderr[-400:]}")
        self.input_db = os.path.join(self.data, "brainloop.input.db")
        self.output_db = os.path.join(self.data, "brainloop.output.db")

    def cli(self, args, timeout=60, env=None):
        return subprocess.run([self.a.bin, "--config", self.config, *args], env=env or self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, env_extra=None):
        env = dict(self.env)
        env.update(env_extra or {})
        log = open(self.log_path, "ab")
        log.write(f"\n==== start {now_ms()} ====\n".encode())
        log.flush()
        self.proc = subprocess.Popen([self.a.bin, "--config", self.config, "run"], env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=log)
        log.close()
        self.wait_heartbeat()
        return self.proc

    def wait_heartbeat(self, timeout=30):
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited at start: {self.proc.returncode}; "
                                   f"log {self.log_path}")
            try:
                n = rows(self.output_db, "SELECT count(*) FROM heartbeat WHERE pid = ?",
                         (self.proc.pid,))[0][0]
                if n:
                    return
            except sqlite3.Error:
                pass
            time.sleep(0.1)
        raise RuntimeError("no heartbeat within 30 s")

    def stop(self, sig=signal.SIGTERM, timeout=90):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return ("hung", self.proc.wait())

    def insert(self, action, params, conn=None, not_before=None):
        own = conn is None
        c = conn or connect(self.input_db)
        try:
            cur = c.execute("INSERT INTO jobs(action, params, client_id, not_before) "
                            "VALUES (?, ?, 'faults', ?)",
                            (action, json.dumps(params), not_before))
            return cur.lastrowid
        finally:
            if own:
                c.close()

    def results(self, ids=None):
        got = {j: (s, r, e, st, fin) for j, s, r, e, st, fin in rows(
            self.output_db,
            "SELECT job_id, status, result, error, started_at, finished_at FROM results")}
        return got if ids is None else {j: got.get(j) for j in ids}

    def wait_final(self, ids, timeout):
        """Waits until every id has a final result; returns the seconds it took (or None)."""
        ids = set(ids)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                final = {j for j, s in rows(self.output_db, "SELECT job_id, status FROM results")
                         if s in FINAL}
            except sqlite3.Error:
                final = set()
            if ids <= final:
                return time.monotonic() - t0
            time.sleep(0.2)
        return None

    def status(self, env=None):
        r = self.cli(["status", "--json"], env=env)
        try:
            j = json.loads(r.stdout) if r.stdout.strip() else {}
        except json.JSONDecodeError:
            j = {}
        return r.returncode, j, r.stderr.strip()

    def executions(self):
        per = {}
        for (jid,) in rows(os.path.join(self.data, "command_security.db"),
                           "SELECT job_id FROM executions WHERE job_id IS NOT NULL"):
            per[jid] = per.get(jid, 0) + 1
        return per

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        if self.failed or self.a.keep:
            print(f"    kept: {self.root}", flush=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def connect(path, timeout=30):
    c = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    return c


def rows(path, sql, args=()):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def not_ok_text(res):
    """'failed×3 (first error)' for the results that did not succeed."""
    bad = [r for r in res.values() if r and r[0] != "succeeded"]
    if not bad:
        return "0"
    by = {}
    for r in bad:
        by[r[0]] = by.get(r[0], 0) + 1
    first = next((r[2] for r in bad if r[2]), "") or ""
    return (", ".join(f"{k}×{n}" for k, n in sorted(by.items()))
            + (f" ({first[:80]})" if first else ""))


def problems_text(j):
    p = j.get("problems") or []
    return "; ".join(x if isinstance(x, str) else
                     f"{x.get('cause', '?')}: {x.get('detail', '')}" if isinstance(x, dict) else
                     json.dumps(x) for x in p)


def proc_alive_with(needle, exact=False):
    """Pids whose cmdline contains (or, `exact`, is) `needle` (not zombies)."""
    found = []
    nb = needle.encode()
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").strip()
            if (cmd != nb) if exact else (nb not in cmd):
                continue
            with open(f"/proc/{p}/stat") as fh:
                st = fh.read()
            if st[st.rfind(")") + 2] == "Z":
                continue
            found.append(int(p))
        except OSError:
            pass
    return found


class PidWatcher(threading.Thread):
    """Samples /proc every 50 ms: the distinct pids whose cmdline holds each needle (how many
    times a command really ran, whatever the databases recorded)."""

    def __init__(self, needles):
        super().__init__(daemon=True)
        self.seen = {n: set() for n in needles}
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            for n in self.seen:
                self.seen[n].update(proc_alive_with(n, exact=True))
            self.halt.wait(0.05)

    def counts(self):
        self.halt.set()
        self.join()
        return [len(v) for v in self.seen.values()]


class Locker:
    """Holds an exclusive lock on a database from a separate connection."""

    def __init__(self, path):
        self.c = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.c.execute("BEGIN EXCLUSIVE")

    def release(self):
        try:
            self.c.execute("ROLLBACK")
        finally:
            self.c.close()


# ---------------------------------------------------------------- scenarios
# Each returns a dict: figures (str), verdict ("pass" / "FAIL: ..." / "skipped: ..."), raw.


def sc_locked(a):
    hold = 3 if a.quick else 8
    s = Setup(a, "locked")
    try:
        s.start()
        stop = threading.Event()
        ids, errs = [], []

        def produce():
            c = connect(s.input_db)
            k = 0
            while not stop.is_set():
                k += 1
                try:
                    if k % 10 == 0:
                        ids.append(s.insert("execute_bash", {"command": f"echo locked-{k}"}, c))
                    else:
                        ids.append(s.insert("ping", {"echo": str(k)}, c))
                except sqlite3.Error as e:
                    errs.append(str(e))
                stop.wait(0.05)
            c.close()

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        time.sleep(2)
        for db in WORKER_DBS:
            lk = Locker(os.path.join(s.data, db))
            time.sleep(hold)
            lk.release()
            time.sleep(1)
        stop.set()
        t.join()
        drained = s.wait_final(ids, 120)
        alive = s.proc.poll() is None
        res = s.results(ids)
        lost = [j for j, r in res.items() if r is None or r[0] not in FINAL]
        not_ok = {j: r[0] for j, r in res.items() if r and r[0] != "succeeded"}
        created = dict(rows(s.input_db, "SELECT id, created_at FROM jobs"))
        lat = [r[4] - created[j] for j, r in res.items() if r and r[4] is not None]
        twice = sum(1 for n in s.executions().values() if n > 1)
        figures = (f"{len(ids)} jobs, 4 dbs locked {hold} s each: lost {len(lost)}, "
                   f"run twice {twice}, not succeeded {not_ok_text(res)}, "
                   f"max latency {max(lat) / 1000 if lat else 0:.1f} s, worker up {alive}")
        broke = []
        if lost:
            broke.append(f"{len(lost)} jobs without a final result")
        if twice:
            broke.append(f"{twice} run twice")
        if not_ok:
            broke.append(f"{len(not_ok)} not succeeded ({sorted(set(not_ok.values()))})")
        if not alive:
            broke.append(f"worker exited {s.proc.returncode}")
        if drained is None:
            broke.append("not drained in 120 s")
        return done(s, figures, broke)
    finally:
        s.close()


def sc_disk_full(a):
    if not is_root():
        return {"figures": "-", "verdict": "skipped: needs root (mount -t tmpfs)"}
    mnt = tempfile.mkdtemp(prefix="brainloop-faults-tmpfs-")
    size_mb = 16
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        return {"figures": "-", "verdict": f"skipped: mount tmpfs failed: {r.stderr.strip()}"}
    s = None
    try:
        s = Setup(a, "disk_full", data_dir=os.path.join(mnt, "data"))
        s.start()
        conn = connect(s.input_db)
        ids, refused = [], 0
        for k in range(50):
            ids.append(s.insert("execute_bash", {"command": f"echo before-{k}"}, conn))
        s.wait_final(ids, 60)
        code0, j0, err0 = s.status()  # writes work here: no "disk full" yet
        free0 = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        # fill the file system up
        fill = os.path.join(mnt, "filler")
        with open(fill, "wb", buffering=0) as f:  # unbuffered: close() has nothing left to flush
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        full_s = 6 if a.quick else 15
        t_end = time.monotonic() + full_s
        k = 0
        status_codes, status_problem = {}, ""
        while time.monotonic() < t_end:
            k += 1
            try:
                ids.append(s.insert("ping", {"echo": f"full-{k}"}, conn))
            except sqlite3.Error:
                refused += 1
            if k % 20 == 0:
                code, j, err = s.status()
                status_codes[code] = status_codes.get(code, 0) + 1
                status_problem = status_problem or problems_text(j) or err[-160:]
            time.sleep(0.05)
        alive_full = s.proc.poll() is None
        os.remove(fill)
        for k in range(20):
            ids.append(s.insert("execute_bash", {"command": f"echo after-{k}"}, conn))
        conn.close()
        if s.proc.poll() is not None:
            s.start()  # the worker died of the full disk: restart to see what is recovered
        drained = s.wait_final(ids, 120)
        res = s.results(ids)
        lost = [j for j, r in res.items() if r is None or r[0] not in FINAL]
        not_ok = {j: r[0] for j, r in res.items() if r and r[0] != "succeeded"}
        twice = sum(1 for n in s.executions().values() if n > 1)
        figures = (f"tmpfs {size_mb} MiB, {free0 / 2**20:.1f} MiB free, writes working: status exit "
                   f"{code0} ({problems_text(j0)[:70] or 'no problem'}); filled {full_s} s: "
                   f"{len(ids)} jobs accepted, "
                   f"{refused} inserts refused (producer saw the error), lost {len(lost)}, "
                   f"not succeeded {not_ok_text(res)}, run twice {twice}, worker up while full "
                   f"{alive_full}, status exits {status_codes} "
                   f"({status_problem[:100] or 'no problem named'})")
        broke = []
        if lost:
            broke.append(f"{len(lost)} jobs without a final result")
        if twice:
            broke.append(f"{twice} run twice")
        if 4 not in status_codes:
            broke.append("status never exit 4 while the disk was full")
        if code0 != 0:
            broke.append(f"status exit {code0} while writes still worked")
        if drained is None:
            broke.append("not drained in 120 s")
        return done(s, figures, broke)
    finally:
        if s is not None:
            if s.failed and os.path.isdir(s.data):
                shutil.copytree(s.data, os.path.join(s.root, "data-copy"), dirs_exist_ok=True)
            s.close()
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        try:
            os.rmdir(mnt)
        except OSError:
            pass


class HangHandler(http.server.BaseHTTPRequestHandler):
    """Accepts a request, reads it, and never answers (holds the connection open)."""
    hold = threading.Event()

    def do_GET(self):
        self.hang()

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        self.rfile.read(n)
        self.hang()

    def hang(self):
        self.server.requests += 1
        self.hold.wait(600)

    def log_message(self, *args):
        pass


def sc_hung_model(a):
    deadline_ms = 8000 if a.quick else 15000
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HangHandler)
    srv.daemon_threads = True
    srv.requests = 0
    HangHandler.hold.clear()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    s = Setup(a, "hung_model", env_extra={
        "BRAINLOOP_LLM_BASE_URL": base, "CEREBRAS_API_KEY": "test",
        "BRAINLOOP_LLM_CHECK_MODELS": "false",
        "BRAINLOOP_LLM_REQUEST_TIMEOUT_MS": str(deadline_ms),
        "BRAINLOOP_LLM_RETRY_BASE_MS": "100"})
    try:
        s.start()
        t0 = time.monotonic()
        jid = s.insert("audit_code", {"path": "src/app.py"})
        took = s.wait_final([jid], deadline_ms / 1000 + 60)
        res = s.results([jid])[jid]
        code, j, _ = s.status()
        figures = (f"request_timeout_ms {deadline_ms}: job ended after "
                   f"{'%.1f s' % took if took is not None else 'NOT within deadline + 60 s'}"
                   f" ({res[0] if res else 'no result'}: {(res[2] or '')[:90] if res else ''}), "
                   f"{srv.requests} requests hung, worker up {s.proc.poll() is None}")
        broke = []
        if took is None or took > deadline_ms / 1000 + 5:
            broke.append("the LLM job outlived its deadline by > 5 s")
        if res and res[0] == "succeeded":
            broke.append("succeeded without an answer")
        _ = t0
        return done(s, figures, broke)
    finally:
        HangHandler.hold.set()
        srv.shutdown()
        s.close()


def sc_sigstop(a):
    stop_s = 12 if a.quick else 30
    s = Setup(a, "sigstop")
    try:
        s.start()
        marker = "31.7"  # a unique sleep length to find the command in /proc
        ja = s.insert("execute_bash", {"command": f"sleep {marker}; echo late", "timeout_ms": 5000})
        jb = s.insert("execute_bash", {"command": "sleep 2; echo ok", "timeout_ms": 5000})
        t0 = time.monotonic()
        while not proc_alive_with(f"sleep {marker}") and time.monotonic() - t0 < 20:
            time.sleep(0.05)
        seen_running = bool(proc_alive_with(f"sleep {marker}"))
        started = time.monotonic()
        time.sleep(0.5)
        os.kill(s.proc.pid, signal.SIGSTOP)
        # deadline of A: 5 s after its start; look at 5 s + 3 s slack whether it still runs
        time.sleep(max(0.0, started + 8 - time.monotonic()))
        a_alive_past_deadline = bool(proc_alive_with(f"sleep {marker}"))
        a_killed_at = None
        while time.monotonic() - started < stop_s:
            if a_killed_at is None and not proc_alive_with(f"sleep {marker}"):
                a_killed_at = time.monotonic() - started
            time.sleep(0.2)
        os.kill(s.proc.pid, signal.SIGCONT)
        if a_killed_at is None and not proc_alive_with(f"sleep {marker}"):
            a_killed_at = time.monotonic() - started
        s.wait_final([ja, jb], 90)
        if a_killed_at is None:
            a_killed_at = time.monotonic() - started
        res = s.results([ja, jb])
        ra, rb = res[ja], res[jb]
        b_text = (f"{rb[0]}" + (" (stdout ok)" if rb[0] == "succeeded" else
                                f": {(rb[2] or '')[:60]}")) if rb else "no result"
        a_text = f"{ra[0]}: {(ra[2] or '')[:50]}" if ra else "no result"
        figures = (f"stopped {stop_s} s; `sleep 31.7` timeout 5 s: still running at 8 s "
                   f"{a_alive_past_deadline}, gone after {a_killed_at:.1f} s, {a_text}; "
                   f"`sleep 2; echo ok` (timeout 5 s) -> {b_text}")
        broke = []
        if not seen_running:
            broke.append("the 5 s command was never seen running (cannot judge)")
        if a_alive_past_deadline:
            broke.append("the 5 s command ran on while the worker was stopped")
        if not rb or rb[0] != "succeeded" or "ok" not in (rb[1] or ""):
            broke.append("a command that exited 0 first was not reported succeeded")
        return done(s, figures, broke)
    finally:
        if s.proc is not None and s.proc.poll() is None:
            os.kill(s.proc.pid, signal.SIGCONT)  # never leave it stopped
        s.close()


def sc_immutable(a):
    s = Setup(a, "immutable")
    how = "chattr +i" if is_root() and shutil.which("chattr") else "chmod 0444"
    files = [s.output_db, s.output_db + "-wal"]
    try:
        s.start()
        ids = [s.insert("ping", {})]
        s.wait_final(ids, 30)
        locked = []
        for f in files:
            if not os.path.exists(f):
                continue
            if how.startswith("chattr"):
                r = subprocess.run(["chattr", "+i", f], capture_output=True, text=True)
                if r.returncode != 0:
                    how = "chmod 0444"
                    os.chmod(f, 0o444)
            else:
                os.chmod(f, 0o444)
            locked.append(f)
        for k in range(5):
            ids.append(s.insert("execute_bash", {"command": f"echo imm-{k}"}))
        time.sleep(6)
        code, j, err = s.status()
        say = problems_text(j) or err[-200:]
        alive = s.proc.poll() is None
        for f in locked:
            if how.startswith("chattr"):
                subprocess.run(["chattr", "-i", f], capture_output=True)
            os.chmod(f, 0o644)
        if s.proc.poll() is not None:
            s.start()
        drained = s.wait_final(ids, 90)
        res = s.results(ids)
        lost = [j for j, r in res.items() if r is None or r[0] not in FINAL]
        figures = (f"{how} output.db + -wal: status exit {code}, state {j.get('state')}, "
                   f"problems: {say[:120] or 'none'}; worker up {alive}; "
                   f"after restoring: lost {len(lost)}")
        broke = []
        if code != 4:
            broke.append(f"status exit {code} (want 4)")
        if "output" not in say:
            broke.append("status does not name output.db")
        if lost or drained is None:
            broke.append(f"{len(lost)} jobs without a final result")
        return done(s, figures, broke)
    finally:
        for f in files:
            if os.path.exists(f) and is_root() and shutil.which("chattr"):
                subprocess.run(["chattr", "-i", f], capture_output=True)
        s.close()


def sc_clock(a):
    if not os.path.exists(FAKETIME_LIB):
        return {"figures": "-", "verdict": "FAIL: CANNOT RUN HERE: apt-get install faketime"}
    s = Setup(a, "clock", extra_config="validation_ttl_ms = 600000\n")
    stamp = os.path.join(s.root, "faketime")

    def step(offset_s):
        with open(stamp + ".new", "w") as f:
            f.write(f"{offset_s:+d}\n")
        os.replace(stamp + ".new", stamp)

    step(0)
    try:
        s.start({"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": stamp,
                 "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
        w = s.insert("execute_bash", {"command": "echo x > out/clock.txt"})
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            r = s.results([w])[w]
            if r and r[0] == "pending_validation":
                break
            time.sleep(0.2)
        # forward step of 2 h
        step(7200)
        time.sleep(4)
        code_f, jf, _ = s.status()
        age_f = jf.get("heartbeat_age_ms")
        rw = s.results([w])[w]
        approval_after_forward = rw[0] if rw else "no result"
        # A job due 4 s from now on the worker's (stepped) clock — as a producer on the same
        # machine would write it — armed before the backward step, which must not delay it.
        nb = s.insert("ping", {"echo": "not_before"}, not_before=now_ms() + 7200 * 1000 + 4000)
        t_nb = time.monotonic()
        time.sleep(1)
        # backward step to 1 h behind the real clock (3 h back)
        step(-3600)
        time.sleep(2)
        code_b, jb, _ = s.status()
        age_b = jb.get("heartbeat_age_ms")
        waited = s.wait_final([nb], 20 if a.quick else 30)
        waited = None if waited is None else time.monotonic() - t_nb
        rc = s.stop()
        code_d, jd, _ = s.status()
        age_d = jd.get("heartbeat_age_ms")

        def secs(x):
            return "?" if x is None else f"{x / 1000:+.0f} s"

        def named(j):  # a step detected and named is a true answer too
            return "clock" in (problems_text(j) + " " + str(j.get("state"))).lower()
        figures = (f"+2 h step: status exit {code_f} age {secs(age_f)}"
                   f"{' (clock step named)' if named(jf) else ''}, 10-min approval "
                   f"{approval_after_forward}; -3 h step: exit {code_b} age {secs(age_b)}"
                   f"{' (clock step named)' if named(jb) else ''}, "
                   f"not_before +4 s job (armed before the step) "
                   f"{'ran after %.1f s' % waited if waited is not None else 'NOT run in 20-30 s'}; "
                   f"stopped (exit {rc}): status exit {code_d} state {jd.get('state')} "
                   f"age {secs(age_d)}")
        broke = []
        if (age_f is None or not -2000 <= age_f <= 5000) and not named(jf):
            broke.append(f"heartbeat age {secs(age_f)} after the forward step, no clock step named")
        if approval_after_forward != "pending_validation":
            broke.append(f"the 10-min approval {approval_after_forward} after a 2 h forward step")
        if (age_b is None or not -2000 <= age_b <= 5000) and not named(jb):
            broke.append(f"heartbeat age {secs(age_b)} after the backward step, no clock step named")
        if waited is None or waited > 12:
            broke.append("not_before job waited the backward step")
        if code_d != 3 or (age_d is not None and age_d < 0 and not named(jd)):
            broke.append(f"after stop: exit {code_d}, age {secs(age_d)}")
        return done(s, figures, broke)
    finally:
        s.close()


def sc_kill_apply(a):
    tries = 2 if a.quick else 4
    knob = dict(kv.split("=", 1) for kv in a.apply_knob) if a.apply_knob else {}
    s = Setup(a, "kill_apply")
    contradictions, reasked, landed_before_kill, outcomes = 0, 0, 0, {}
    try:
        for k in range(tries):
            s.start(knob)
            path = os.path.join(s.ws, "out", f"k{k}.txt")
            jid = s.insert("execute_bash", {"command": f"echo applied-{k} > out/k{k}.txt"})
            vid = wait_pending(s, jid, None)
            if vid is None:
                outcomes["never asked"] = outcomes.get("never asked", 0) + 1
                s.stop()
                continue
            r = s.cli(["approve", vid])
            # kill -9 the moment the approved file lands (or 3 s after approve)
            t0 = time.monotonic()
            while not os.path.exists(path) and time.monotonic() - t0 < 3:
                pass
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGKILL)
            s.proc.wait()
            landed_before_kill += os.path.exists(path)
            _ = r
            s.start()
            # a re-ask after the restart is denied (a human who does not know it was applied)
            vid2 = wait_pending(s, jid, vid, timeout=15)
            if vid2:
                reasked += 1
                s.cli(["deny", vid2])
            s.wait_final([jid], 60)
            res = s.results([jid])[jid]
            st = res[0] if res else "no result"
            outcomes[st] = outcomes.get(st, 0) + 1
            present = os.path.exists(path)
            if (st == "succeeded") != present:
                contradictions += 1
            s.stop()
        figures = (f"{tries} tries{' with ' + ','.join(a.apply_knob) if a.apply_knob else ''}: "
                   f"file in workspace at the kill {landed_before_kill}, re-asked after restart "
                   f"{reasked} (denied), final {outcomes}, result contradicts workspace "
                   f"{contradictions}")
        broke = []
        if contradictions:
            broke.append(f"{contradictions} of {tries} results contradict the workspace")
        return done(s, figures, broke)
    finally:
        s.close()


def wait_pending(s, jid, old, timeout=30):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = s.results([jid])[jid]
        if r and r[0] == "pending_validation":
            try:
                v = json.loads(r[1] or "{}").get("validation_id")
            except json.JSONDecodeError:
                v = None
            if v and v != old:
                return v
        if r and r[0] in FINAL:
            return None
        time.sleep(0.05)
    return None


def sc_sigterm(a):
    # The largest drain window the configuration accepts: drain + cancel grace <= 45 s since the
    # one shutdown budget (b5fa884 accepted 45 s + 5 s; the 'before' figures used that).
    drain = 10000 if a.quick else 40000
    s = Setup(a, "sigterm", extra_config=f"drain_window_ms = {drain}\ncancel_grace_ms = 5000\n",
              concurrency=6)
    try:
        s.start()
        longs = [s.insert("execute_bash", {"command": f"sleep 100; echo long-{k}",
                                           "timeout_ms": 120000}) for k in range(2)]
        watch = PidWatcher([f"sleep 6.0{k}" for k in range(4)])
        watch.start()
        shorts = [s.insert("execute_bash", {"command": f"sleep 6.0{k}; echo run >> side/c{k}",
                                            "timeout_ms": 120000}) for k in range(2)]
        pures = [s.insert("execute_bash", {"command": f"sleep 6.0{k + 2}; echo pure-{k}",
                                           "timeout_ms": 120000}) for k in range(2)]
        t0 = time.monotonic()
        while (len(proc_alive_with("sleep 100")) < 2 or len(proc_alive_with("sleep 6.0")) < 4) \
                and time.monotonic() - t0 < 20:
            time.sleep(0.1)
        time.sleep(0.5)
        lockers = [Locker(os.path.join(s.data, db))
                   for db in WORKER_DBS + ("brainloop.input.db",)]
        time.sleep(3)  # the worker is now blocked on a lock (heartbeat, claims) when SIGTERM lands
        t_sig = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        try:
            rc = s.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            rc = ("not exited in 90 s", s.proc.wait())
        exit_s = time.monotonic() - t_sig
        logged = "?"
        with open(s.log_path, errors="replace") as f:
            for line in f:
                if "worker stopped" in line and "elapsed_ms=" in line:
                    logged = line.rsplit("elapsed_ms=", 1)[1].split()[0]
        for lk in lockers:
            lk.release()
        s.start()
        # the short writes ask (overlay): approve each ask; a second ask = the command ran again
        for j in shorts:
            old = None
            t0 = time.monotonic()
            while time.monotonic() - t0 < 60:
                vid = wait_pending(s, j, old, timeout=60 - (time.monotonic() - t0))
                if vid is None:
                    break
                s.cli(["approve", vid])
                old = vid
        s.wait_final(shorts + pures, 60)
        res = s.results(longs + shorts + pures)
        asks = dict(rows(s.output_db, "SELECT job_id, count(*) FROM validations GROUP BY job_id"))
        runs = dict(zip(shorts + pures, watch.counts()))
        lines = []
        for k in range(2):
            p = os.path.join(s.ws, "side", f"c{k}")
            lines.append(open(p).read().count("run\n") if os.path.exists(p) else 0)
        statuses = [res[j][0] if res[j] else "none" for j in shorts]
        # A pure command's result is its output: run once. A write's is its change set: asked
        # once and applied once (effect lines); a write whose request the locked databases kept
        # from being recorded during the drain is requeued and runs again in a fresh overlay
        # (never applied; `ask::cannot_ask`): counted in `run … times`, not a failure.
        twice = [j for j in pures if runs.get(j, 0) > 1] + [j for j in shorts if asks.get(j, 0) > 1]
        s.stop(signal.SIGKILL)  # the long commands re-run after the restart: not waited for
        figures = (f"drain_window_ms {drain}, 5 dbs locked, 2×`sleep 100` + 2 writes "
                   f"`sleep 6; echo >>` + 2 pure `sleep 6; echo` (finish in the drain), locked 3 s before SIGTERM: exit {rc} "
                   f"after {exit_s:.1f} s (logged elapsed_ms {logged}); after restart the writes: {statuses}, asked "
                   f"{[asks.get(j, 0) for j in shorts]} times, run "
                   f"{[runs.get(j, 0) for j in shorts]} times, effect lines {lines}; the pure: "
                   f"{[res[j][0] if res[j] else 'none' for j in pures]}, run "
                   f"{[runs.get(j, 0) for j in pures]} times")
        broke = []
        if exit_s >= 60 or not isinstance(rc, int):
            broke.append(f"exit after {exit_s:.1f} s (>= 60 s)")
        if twice:
            broke.append(f"{len(twice)} finished commands ran (or asked) again after the restart")
        if any(n != 1 for n in lines) or any(st != "succeeded" for st in statuses):
            broke.append(f"writes not applied exactly once: {statuses}, effect lines {lines}")
        return done(s, figures, broke)
    finally:
        s.close()


def producer_proc(input_db, n, q):
    c = sqlite3.connect(input_db, timeout=30, isolation_level=None)
    c.execute("PRAGMA synchronous=NORMAL")
    busy, ids = 0, []
    for k in range(n):
        while True:
            try:
                cur = c.execute("INSERT INTO jobs(action, params, client_id) "
                                "VALUES ('ping', '{}', 'faults')")
                ids.append(cur.lastrowid)
                break
            except sqlite3.OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    busy += 1
                    continue
                raise
    c.close()
    q.put((busy, ids))


def sc_producers(a):
    per = 2000 if a.quick else 40000
    s = Setup(a, "producers")
    try:
        s.start()
        stop = threading.Event()
        status_calls, false_problems, examples = [0], [0], {}

        def status_loop():
            while not stop.is_set():
                code, j, err = s.status()
                status_calls[0] += 1
                if code != 0 or j.get("problems"):
                    false_problems[0] += 1
                    causes = [x.get("cause", "?") if isinstance(x, dict) else str(x)[:40]
                              for x in j.get("problems") or []] or [f"exit {code}: {err[:60]}"]
                    for c in causes:
                        examples[c] = examples.get(c, 0) + 1
                time.sleep(0.2)

        st = threading.Thread(target=status_loop, daemon=True)
        st.start()
        q = multiprocessing.Queue()
        t0 = time.monotonic()
        ps = [multiprocessing.Process(target=producer_proc, args=(s.input_db, per, q))
              for _ in range(4)]
        for p in ps:
            p.start()
        got = [q.get() for _ in ps]
        for p in ps:
            p.join()
        insert_s = time.monotonic() - t0
        ids = [i for _, l in got for i in l]
        busy = sum(b for b, _ in got)
        drained = s.wait_final(ids, 600)
        total_s = time.monotonic() - t0
        stop.set()
        st.join()
        n_res = rows(s.output_db, "SELECT count(*) FROM results WHERE status = 'succeeded'")[0][0]
        res = s.results(ids)
        missing = sum(1 for r in res.values() if r is None or r[0] not in FINAL)
        figures = (f"4×{per:,} inserts in {insert_s:.1f} s, SQLITE_BUSY seen {busy}; all final "
                   f"after {total_s:.1f} s, missing {missing}, succeeded {n_res:,}; "
                   f"`status --json` ×{status_calls[0]}: false problems {false_problems[0]}"
                   f"{' (' + ', '.join(f'{c} ×{n}' for c, n in examples.items()) + ')' if examples else ''}")
        broke = []
        if missing or drained is None:
            broke.append(f"{missing} jobs without a final result")
        if len(set(ids)) != len(ids):
            broke.append("duplicate job ids")
        if false_problems[0]:
            broke.append(f"{false_problems[0]} of {status_calls[0]} status calls report a problem")
        return done(s, figures, broke)
    finally:
        s.close()


def sc_backlog(a):
    n = 20000 if a.quick else 200000
    s = Setup(a, "backlog")
    try:
        c = connect(s.input_db)
        c.execute("BEGIN")
        c.executemany("INSERT INTO jobs(action, params, client_id) VALUES ('ping', '{}', 'faults')",
                      (() for _ in range(n)))
        c.execute("COMMIT")
        c.close()
        t0 = time.monotonic()
        s.start()
        peak = [0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    with open(f"/proc/{s.proc.pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM:"):
                                peak[0] = max(peak[0], int(line.split()[1]))
                except OSError:
                    pass
                stop.wait(0.2)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        done_s = None
        while time.monotonic() - t0 < 900:
            cnt = rows(s.output_db, "SELECT count(*) FROM results WHERE status = 'succeeded'")[0][0]
            if cnt >= n:
                done_s = time.monotonic() - t0
                break
            time.sleep(0.2)
        stop.set()
        th.join()
        figures = (f"{n:,} pings inserted while stopped: drained in "
                   f"{'%.1f s' % done_s if done_s else 'NOT in 900 s'} from the start, "
                   f"peak RSS {peak[0] / 1024:.1f} MiB")
        broke = [] if done_s else ["not drained"]
        return done(s, figures, broke)
    finally:
        s.close()


def done(s, figures, broke):
    if broke:
        s.failed = True
        return {"figures": figures, "verdict": "FAIL: " + "; ".join(broke)}
    return {"figures": figures, "verdict": "pass"}


SCENARIOS = [
    ("locked", sc_locked), ("disk_full", sc_disk_full), ("hung_model", sc_hung_model),
    ("sigstop", sc_sigstop), ("immutable", sc_immutable), ("clock", sc_clock),
    ("kill_apply", sc_kill_apply), ("sigterm", sc_sigterm), ("producers", sc_producers),
    ("backlog", sc_backlog),
]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default="target/release/brainloop")
    p.add_argument("--only", default="", help="comma-separated scenario names "
                   f"({', '.join(n for n, _ in SCENARIOS)})")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--keep", action="store_true", help="keep every temp dir")
    p.add_argument("--apply-knob", action="append", default=[], metavar="VAR=VALUE",
                   help="kill_apply: extra environment for the worker (a BRAINLOOP_TEST_* knob "
                        "that crashes inside the apply window)")
    p.add_argument("--commit", default="?")
    p.add_argument("--parse-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    a.bin = os.path.realpath(a.bin)
    names = [n for n in a.only.split(",") if n]
    unknown = set(names) - {n for n, _ in SCENARIOS}
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    if a.parse_only:
        return 0
    chosen = [(n, f) for n, f in SCENARIOS if not names or n in names]
    load0 = os.getloadavg()
    t_start = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = []
    for name, fn in chosen:
        t0 = time.monotonic()
        print(f"== {name} ...", flush=True)
        try:
            r = fn(a)
        except Exception as e:  # a scenario that could not run is a FAIL, visibly
            r = {"figures": "-", "verdict": f"FAIL: scenario error: {type(e).__name__}: {e}"}
        r["s"] = time.monotonic() - t0
        out.append((name, r))
        print(f"| {name} | {r['figures']} | {r['verdict']} | {r['s']:.0f} s |", flush=True)
    load1 = os.getloadavg()
    print()
    print(f"Fault injection, {started}, binary of commit `{a.commit}`"
          f"{' (--quick)' if a.quick else ''}, {os.cpu_count()} cores, load average "
          f"{load0[0]:.1f} at the start / {load1[0]:.1f} at the end, "
          f"{(time.monotonic() - t_start) / 60:.1f} min in all:")
    print()
    print("| scenario | figures | verdict | time |")
    print("|---|---|---|---|")
    for name, r in out:
        print(f"| {name} | {r['figures'].replace('|', '/')} | {r['verdict'].replace('|', '/')} "
              f"| {r['s']:.0f} s |")
    return 1 if any(r["verdict"].startswith("FAIL") for _, r in out) else 0


if __name__ == "__main__":
    sys.exit(main())
