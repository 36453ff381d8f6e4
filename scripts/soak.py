#!/usr/bin/env python3
"""Bounded soak of the brainloop worker under faults (issue 13, "Soak and faults").

Python standard library only (sqlite3, subprocess, signal); no network; nothing destructive:
everything lives in a fresh temp dir (data dir, workspace, the worker's TMPDIR) that is removed
at the end unless --keep or a violation.

What runs, for --minutes N:
  * the worker (`brainloop run`, real release binary) on a throwaway data dir and workspace,
    client `soak` configured with grants for the workspace;
  * a producer (thread) inserting a mix at a steady rate, one commit per job: pure commands
    (echo / ls / wc), readers (read_config / read_markdown), writes that ask for validation
    (`echo run >> side/c<token>`: a side-effect counter per job), malformed rows (unknown
    action, bad JSON, wrong param types, missing params, params not an object, huge params);
  * an approver, a SECOND process (this script, `approver` mode) that reads pending validations
    with `brainloop validations --json` and answers `brainloop approve` / `brainloop deny`
    (the decision is a seeded function of the job id, so the checker knows what to expect);
  * chaos (main thread): the worker is killed with SIGKILL or SIGTERM at seeded random points,
    then restarted; every signal time and restart is recorded.

At the end (producer stopped, worker restarted, queue drained, approver stopped, worker stopped
with SIGTERM) it checks, and exits 1 on any violation:
  * every produced job has exactly one result row, final, with the status its kind implies;
    write jobs: approved => succeeded and the counter file has exactly 1 line, denied => denied
    and no file; no job has a command execution recorded after its final result;
  * no process left behind: nothing in /proc whose cmdline, environment, cwd or exe names the
    soak's temp dir (the worker's TMPDIR is inside it, so sandboxed commands match too);
  * files bounded: max size of each -wal seen by the sampler <= --max-wal-mb; the worker's
    databases <= 16 MiB + --max-kib-per-job per job;
  * heartbeat gaps: while a worker incarnation was up (its first heartbeat .. the signal), no gap
    between consecutive heartbeats (or to the signal) above 2 heartbeat periods.
With --data-dir-faults (issue 21), while the worker is stopped a database is deleted, truncated,
rolled back to an earlier copy or loses its -wal (output, lifecycle, metadata, command_security);
`brainloop repair` must name the flags that accept it (violation if a deletion goes undetected),
then runs with them. While it runs, brainloop.lock is deleted and a second worker started: it
must be refused. Jobs whose result was lost end `interrupted` with the repair named (accepted);
a write job still never runs twice nor unapproved.
It prints the counts (jobs by kind and final status, kills by signal, restarts, max WAL sizes,
max heartbeat gap while up, leftovers) and writes them as JSON to <tmp>/summary.json.
"""

import argparse
import re
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

FINAL = {
    "succeeded", "failed", "denied", "blocked", "duplicate_warning", "expired",
    "cancelled", "interrupted",
}
NON_FINAL = {"queued", "running", "pending_validation"}


def now_ms():
    return int(time.time() * 1000)


IGNORE_PCT = 5
VALIDATION_TTL_MS = 30000


def decision(seed, job_id, approve_pct):
    """The approver's answer for a job: a seeded function of the job id (stable across re-asks)."""
    h = hashlib.sha256(f"{seed}:{job_id}".encode()).digest()
    v = h[0] * 100 // 256
    # the top IGNORE_PCT are never answered: they must end `expired` (validation_ttl_ms)
    return "approve" if v < approve_pct else "ignore" if v >= 100 - IGNORE_PCT else "deny"


# ---------------------------------------------------------------- the approver (second process)


def approver_main(a):
    log = open(a.log, "a", buffering=1)
    answered = set()
    while not os.path.exists(a.stop_file):
        try:
            out = subprocess.run(
                [a.bin, "--config", a.config, "validations", "--json"],
                capture_output=True, text=True, timeout=60,
            )
            pending = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []
        except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            log.write(json.dumps({"t": now_ms(), "error": f"validations: {e}"}) + "\n")
            pending = []
        for v in pending:
            if v.get("status") != "pending" or v["id"] in answered:
                continue
            d = decision(a.seed, v["job_id"], a.approve_pct)
            if d == "ignore":
                continue
            try:
                r = subprocess.run(
                    [a.bin, "--config", a.config, d, v["id"]],
                    capture_output=True, text=True, timeout=60,
                )
                rc, err = r.returncode, r.stderr.strip()[-300:]
            except subprocess.TimeoutExpired:
                rc, err = -1, "timeout"
            answered.add(v["id"])
            log.write(json.dumps({
                "t": now_ms(), "validation": v["id"], "job_id": v["job_id"],
                "decision": d, "rc": rc, "stderr": err if rc else "",
            }) + "\n")
        time.sleep(a.period)
    log.close()


# ---------------------------------------------------------------- the soak


class Producer(threading.Thread):
    """Inserts one job per tick (one commit each) and remembers what it inserted."""

    def __init__(self, input_db, rate, rng, stop):
        super().__init__(daemon=True)
        self.input_db, self.rate, self.rng, self.stop = input_db, rate, rng, stop
        self.jobs = {}  # id -> dict(kind, token, ...)
        self.errors = []

    def pick(self, token):
        r = self.rng.random() * 100
        c = "soak"
        if r < 10:
            return "pure_echo", "execute_bash", json.dumps({"command": f"echo soak-{token}"}), c
        if r < 14:
            # long enough for kills to land while it runs
            return "pure_slow", "execute_bash", json.dumps(
                {"command": f"sleep {0.5 + token % 5 * 0.5}; echo soak-{token}"}), c
        if r < 24:
            return "pure_ls", "execute_bash", json.dumps({"command": "ls files side"}), c
        if r < 34:
            return "pure_wc", "execute_bash", json.dumps({"command": "wc -l files/a.txt"}), c
        if r < 44:
            return "read_config", "read_config", json.dumps({"path": "conf/app.toml"}), c
        if r < 54:
            return "read_markdown", "read_markdown", json.dumps({"path": "docs/readme.md"}), c
        if r < 78:
            # half of them sleep first: a kill then lands in the overlay run
            pre = f"sleep 0.{token % 10}; " if token % 2 else ""
            return "write", "execute_bash", json.dumps(
                {"command": f"{pre}echo run >> side/c{token}"}), c
        if r < 83:
            return "bad_action", f"no_such_action_{token % 7}", "{}", c
        if r < 88:
            return "bad_json", "execute_bash", '{"command": "echo x", ' + "\x00" * (token % 3), c
        if r < 92:
            return "bad_type", "execute_bash", json.dumps({"command": token}), c
        if r < 95:
            return "bad_missing", "read_config", json.dumps({"nopath": "x"}), c
        if r < 98:
            return "bad_not_object", "execute_bash", json.dumps(["echo", "x"]), c
        if r < 99:
            return "bad_huge", "execute_bash", json.dumps(
                {"command": "echo " + "y" * (1024 * 1024 + 512)}), c
        return "bad_timeout_type", "execute_bash", json.dumps(
            {"command": "echo hi", "timeout_ms": "soon"}), c

    def run(self):
        conn = sqlite3.connect(self.input_db, timeout=30, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        token, t_next = 0, time.monotonic()
        while not self.stop.is_set():
            token += 1
            kind, action, params, client = self.pick(token)
            try:
                conn.execute("BEGIN IMMEDIATE")
                cur = conn.execute(
                    "INSERT INTO jobs(action, params, client_id) VALUES (?, ?, ?)",
                    (action, params, client),
                )
                conn.execute("COMMIT")
                self.jobs[cur.lastrowid] = {"kind": kind, "token": token, "t": now_ms()}
            except sqlite3.Error as e:
                self.errors.append(f"insert {token}: {e}")
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            t_next += 1.0 / self.rate
            delay = t_next - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)
            else:
                t_next = time.monotonic()  # fell behind: do not burst
        conn.close()


class Sampler(threading.Thread):
    """Samples the data dir's file sizes every second; keeps the maximum of each file."""

    def __init__(self, data, stop):
        super().__init__(daemon=True)
        self.data, self.stop = data, stop
        self.max = {}

    def sample(self):
        try:
            names = os.listdir(self.data)
        except OSError:
            return
        for n in names:
            if ".db" not in n:
                continue
            try:
                s = os.path.getsize(os.path.join(self.data, n))
            except OSError:
                continue
            self.max[n] = max(self.max.get(n, 0), s)

    def run(self):
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(1.0)


def scan_leftovers(root, exclude):
    """Processes whose cmdline, environment, cwd or exe names `root` (besides `exclude`)."""
    rb = root.encode()
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in exclude:
            continue
        hit = False
        for f in ("cmdline", "environ"):
            try:
                with open(f"/proc/{p}/{f}", "rb") as fh:
                    if rb in fh.read():
                        hit = True
            except OSError:
                pass
        for link in ("cwd", "exe"):
            try:
                if os.readlink(f"/proc/{p}/{link}").startswith(root):
                    hit = True
            except OSError:
                pass
        if hit:
            try:
                with open(f"/proc/{p}/stat") as fh:
                    stat = fh.read()
                if stat[stat.rfind(")") + 2] == "Z":
                    continue  # a zombie holds nothing
                with open(f"/proc/{p}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                continue
            found.append((int(p), cmd))
    return found


class Worker:
    """One incarnation of `brainloop run`."""

    def __init__(self, bin_, config, env, log_path):
        self.log = open(log_path, "ab")
        self.log.write(f"\n==== start {now_ms()} ====\n".encode())
        self.log.flush()
        self.started = now_ms()
        self.proc = subprocess.Popen(
            [bin_, "--config", config, "run"], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
        )
        self.signal_at = None
        self.signal = None
        self.exit_code = None
        self.exited_at = None

    def kill(self, how, term_timeout, then_after=0.0):
        """`how`: SIGKILL, SIGTERM, SIGTERM+SIGKILL (a kill during the drain) or SIGTERMx2 (a
        second signal cutting the drain short), the second signal `then_after` s after the first."""
        self.signal_at = now_ms()
        self.signal = how
        first = signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM
        try:
            self.proc.send_signal(first)
        except ProcessLookupError:
            pass
        if how in ("SIGTERM+SIGKILL", "SIGTERMx2"):
            try:
                self.proc.wait(timeout=then_after)
            except subprocess.TimeoutExpired:
                try:
                    self.proc.send_signal(signal.SIGKILL if how == "SIGTERM+SIGKILL" else signal.SIGTERM)
                except ProcessLookupError:
                    pass
        try:
            self.exit_code = self.proc.wait(timeout=term_timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = ("hung", self.proc.wait())
        self.exited_at = now_ms()
        self.log.close()


def write_config(path, root, data, ws, hb_ms, retention_ms):
    with open(path, "w") as f:
        f.write(f'''# brainloop soak configuration (generated)
data_dir = "{data}"
workspace = "{ws}"
heartbeat_interval_ms = {hb_ms}
dead_after_ms = {max(hb_ms * 3, 30000)}
concurrency = 4
max_slots_per_client = 4
max_attempts = 3
# keep every write asking a human: the soak exercises the validation path, not learning
signature_approvals = 1000000
# the approver leaves a few validations unanswered: they expire
validation_ttl_ms = {VALIDATION_TTL_MS}

[retention]
interval_ms = {retention_ms}

[clients.soak]
file_read = ["{{workspace}}/**"]
file_write = ["{{workspace}}/**"]
system_command = ["echo", "ls", "wc", "sleep"]
''')


def workspace_fixtures(ws):
    os.makedirs(os.path.join(ws, "conf"))
    os.makedirs(os.path.join(ws, "docs"))
    os.makedirs(os.path.join(ws, "files"))
    os.makedirs(os.path.join(ws, "side"))
    with open(os.path.join(ws, "conf/app.toml"), "w") as f:
        f.write('name = "soak"\n[server]\nport = 8080\nhosts = ["a", "b"]\n')
    with open(os.path.join(ws, "docs/readme.md"), "w") as f:
        f.write("# Soak\n\nA document.\n\n## Section\n\n- one\n- two\n")
    with open(os.path.join(ws, "files/a.txt"), "w") as f:
        f.write("one\ntwo\nthree\n")


def db_rows(path, sql, args=()):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


DATA_DIR_FAULTS = ("delete_output", "truncate_output", "rollback_output", "drop_output_wal",
                   "delete_lifecycle", "delete_metadata", "delete_security", "delete_output_and_lifecycle")


def remove_db(data, name):
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(os.path.join(data, name + suffix))
        except FileNotFoundError:
            pass


def snapshot_output(data, dest):
    """A copy of output.db (+ -wal) taken while the worker is stopped (a "backup")."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for suffix in ("", "-wal"):
        src = os.path.join(data, "brainloop.output.db" + suffix)
        if os.path.exists(src):
            shutil.copy2(src, os.path.join(dest, "brainloop.output.db" + suffix))


def apply_data_dir_fault(fault, data, snap):
    """Issue 21: replace / delete / truncate / roll back a file while the worker is stopped."""
    out = "brainloop.output.db"
    if fault == "delete_output":
        remove_db(data, out)
    elif fault == "truncate_output":
        open(os.path.join(data, out), "w").close()
        for suffix in ("-wal", "-shm"):
            remove_db_file = os.path.join(data, out + suffix)
            if os.path.exists(remove_db_file):
                os.remove(remove_db_file)
    elif fault == "rollback_output":
        if not os.path.exists(os.path.join(snap, out)):
            return False
        remove_db(data, out)
        for n in os.listdir(snap):
            shutil.copy2(os.path.join(snap, n), os.path.join(data, n))
    elif fault == "drop_output_wal":
        for suffix in ("-wal", "-shm"):
            f = os.path.join(data, out + suffix)
            if os.path.exists(f):
                os.remove(f)
    elif fault == "delete_lifecycle":
        remove_db(data, "brainloop.lifecycle.db")
    elif fault == "delete_metadata":
        remove_db(data, "brainloop.metadata.db")
    elif fault == "delete_security":
        remove_db(data, "command_security.db")
    elif fault == "delete_output_and_lifecycle":
        remove_db(data, out)
        remove_db(data, "brainloop.lifecycle.db")
    return True


def repair_after_fault(bin_, config, env):
    """Runs `brainloop repair` with exactly the flags its refusal names; returns (flags, error)."""
    probe = subprocess.run([bin_, "--config", config, "repair"], env=env,
                           capture_output=True, text=True, timeout=120)
    if probe.returncode == 0:
        return [], None
    flags = sorted(set(re.findall(r"--accept-[a-z-]+", probe.stderr)))
    if not flags:
        return [], f"repair refused without naming a flag: {probe.stderr[-500:]}"
    fix = subprocess.run([bin_, "--config", config, "repair", *flags], env=env,
                         capture_output=True, text=True, timeout=300)
    if fix.returncode != 0:
        return flags, f"repair {' '.join(flags)} failed: {fix.stderr[-500:]}"
    return flags, None


def second_worker_refused(bin_, config, env, data):
    """Deletes brainloop.lock under the live worker and starts a second one: it must be refused."""
    try:
        os.remove(os.path.join(data, "brainloop.lock"))
    except FileNotFoundError:
        pass
    try:
        r = subprocess.run([bin_, "--config", config, "run"], env=env, capture_output=True,
                           text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "a second worker started after brainloop.lock was deleted (still running after 20 s)"
    if r.returncode == 0 or "already running" not in r.stderr:
        return f"second worker: exit {r.returncode}: {r.stderr[-300:]}"
    return None


def soak_main(a):
    rng = random.Random(a.seed)
    root = os.path.realpath(tempfile.mkdtemp(prefix="brainloop-soak-"))
    data, ws, tmp = (os.path.join(root, d) for d in ("data", "ws", "tmp"))
    os.makedirs(ws)
    os.makedirs(tmp)
    config = os.path.join(root, "soak.toml")
    write_config(config, root, data, ws, a.heartbeat_ms, a.retention_ms)
    workspace_fixtures(ws)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CEREBRAS_API_KEY", "CREDENTIALS_DIRECTORY", "BRAINLOOP_LLM_BASE_URL")
           and not k.startswith("BRAINLOOP_")}
    env.update({"TMPDIR": tmp, "BRAINLOOP_LOG": "info"})
    subprocess.run([a.bin, "--config", config, "init"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    print(f"soak: {a.minutes} min, seed {a.seed}, {a.rate} jobs/s, heartbeat {a.heartbeat_ms} ms, "
          f"dir {root}", flush=True)

    stop = threading.Event()
    producer = Producer(os.path.join(data, "brainloop.input.db"), a.rate, random.Random(a.seed + 1), stop)
    sampler = Sampler(data, threading.Event())
    stop_file = os.path.join(root, "approver.stop")
    approvals_log = os.path.join(root, "approvals.jsonl")
    approver = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "approver", "--bin", a.bin, "--config", config,
         "--seed", str(a.seed), "--approve-pct", str(a.approve_pct), "--log", approvals_log,
         "--stop-file", stop_file],
        env=env, stdin=subprocess.DEVNULL,
    )
    worker_log = os.path.join(root, "worker.log")
    term_timeout = 60
    workers = []
    violations = []
    post_kill_lingering = 0

    faults, repairs, lock_faults, last_output_fault = {}, [], 0, 0
    snap_dir = os.path.join(root, "output-backup")
    w = Worker(a.bin, config, env, worker_log)
    workers.append(w)
    producer.start()
    sampler.start()
    t_end = time.monotonic() + a.minutes * 60
    while time.monotonic() < t_end:
        if rng.random() < 0.25:
            up = rng.uniform(0.05, 3.0)  # early: start-up, recovery, catching up
        else:
            up = rng.uniform(a.min_up, a.max_up)
        up = min(up, max(0.0, t_end - time.monotonic()))
        time.sleep(up)
        if time.monotonic() >= t_end:
            break
        if a.data_dir_faults and w.proc.poll() is None and rng.random() < 0.3:
            lock_faults += 1
            err = second_worker_refused(a.bin, config, env, data)
            if err:
                violations.append(err)
        r = rng.random()
        sig = ("SIGKILL" if r < 0.4 else "SIGTERM" if r < 0.8
               else "SIGTERM+SIGKILL" if r < 0.9 else "SIGTERMx2")
        then_after = rng.uniform(0.0, 1.5)
        if w.proc.poll() is not None:
            violations.append(f"worker pid {w.proc.pid} exited on its own with {w.proc.returncode}")
            w.signal_at, w.exit_code, w.exited_at = now_ms(), w.proc.returncode, now_ms()
        else:
            w.kill(sig, term_timeout, then_after)
            if isinstance(w.exit_code, tuple):
                violations.append(f"worker pid {w.proc.pid} did not exit {term_timeout}s after SIGTERM")
        # Whatever the worker ran must die with it (PDEATHSIG, PID namespace).
        t0 = time.monotonic()
        left = scan_leftovers(root, {os.getpid(), approver.pid})
        while left and time.monotonic() - t0 < 5:
            time.sleep(0.1)
            left = scan_leftovers(root, {os.getpid(), approver.pid})
        if left:
            post_kill_lingering += len(left)
            print(f"  lingering 5 s after {sig}: {left}", flush=True)
        time.sleep(rng.uniform(0.2, 4.0))
        if a.data_dir_faults:
            if rng.random() < 0.35:
                fault = rng.choice(DATA_DIR_FAULTS)
                if apply_data_dir_fault(fault, data, snap_dir):
                    faults[fault] = faults.get(fault, 0) + 1
                    last_output_fault = len(workers)
                    flags, err = repair_after_fault(a.bin, config, env)
                    repairs.append({"fault": fault, "flags": flags})
                    print(f"  fault {fault} -> repair {' '.join(flags) or '(nothing to accept)'}",
                          flush=True)
                    if err:
                        violations.append(f"after {fault}: {err}")
                    # A rollback or a dropped -wal may lose nothing (no commit since); a deleted
                    # or truncated file always must be detected.
                    if fault.startswith(("delete", "truncate")) and not flags:
                        violations.append(f"{fault} was not detected (repair found nothing)")
            elif rng.random() < 0.3:
                snapshot_output(data, snap_dir)
        w = Worker(a.bin, config, env, worker_log)
        workers.append(w)
        print(f"  t+{(now_ms() - workers[0].started) / 1000:.0f}s {sig} "
              f"-> exit {workers[-2].exit_code}; restart #{len(workers) - 1}; "
              f"{len(producer.jobs)} jobs", flush=True)

    # Drain: no more inserts, no more faults; the approver keeps answering.
    stop.set()
    producer.join()
    produced = dict(producer.jobs)
    out_db = os.path.join(data, "brainloop.output.db")
    t0 = time.monotonic()
    final_ids = set()
    while time.monotonic() - t0 < a.drain_timeout:
        rows = db_rows(out_db, "SELECT job_id, status FROM results")
        final_ids = {j for j, s in rows if s in FINAL}
        if all(j in final_ids for j in produced):
            break
        if w.proc.poll() is not None:
            violations.append(f"worker pid {w.proc.pid} exited during the drain: {w.proc.returncode}")
            break
        time.sleep(0.5)
    drain_s = time.monotonic() - t0
    with open(stop_file, "w"):
        pass
    approver.wait(timeout=120)
    w.kill("SIGTERM", term_timeout)
    if w.exit_code != 0:
        violations.append(f"final SIGTERM: worker exit {w.exit_code}, expected 0")
    sampler.stop.set()
    sampler.join()
    sampler.sample()

    # ------------------------------------------------------------ checks
    results = {j: (s, r, e, att, fin) for j, s, r, e, att, fin in db_rows(
        out_db, "SELECT job_id, status, result, error, attempts, finished_at FROM results")}
    approvals = []
    with open(approvals_log) as f:
        for line in f:
            approvals.append(json.loads(line))
    approver_errors = [x for x in approvals if x.get("rc", 0) != 0 or "error" in x]

    by_kind = {}
    max_attempts_seen = 0
    for jid, job in sorted(produced.items()):
        kind = job["kind"]
        r = results.get(jid)
        status = r[0] if r else "MISSING"
        by_kind.setdefault(kind, {}).setdefault(status, 0)
        by_kind[kind][status] += 1
        if r is None:
            violations.append(f"job {jid} ({kind}): no result row")
            continue
        _, result, error, attempts, _ = r
        max_attempts_seen = max(max_attempts_seen, attempts)
        if status not in FINAL:
            violations.append(f"job {jid} ({kind}): not final after the drain: {status}")
            continue
        if status == "interrupted" and attempts >= 3:
            continue  # cut off by crashes max_attempts times: a legitimate final state
        lost = a.data_dir_faults and status == "interrupted" and "repair" in (error or "")
        if lost and kind != "write":
            continue  # its result or claim was lost with a file; accepted by `brainloop repair`
        if kind.startswith("pure") or kind.startswith("read"):
            if status != "succeeded":
                violations.append(f"job {jid} ({kind}): {status}: {error}")
            elif kind in ("pure_echo", "pure_slow") and f"soak-{job['token']}" not in (result or ""):
                violations.append(f"job {jid}: echo output lacks its token: {result[:200]}")
        elif kind == "write":
            want = decision(a.seed, jid, a.approve_pct)
            counter = os.path.join(ws, "side", f"c{job['token']}")
            lines = open(counter).read().count("run\n") if os.path.exists(counter) else 0
            exp_status, exp_lines = {"approve": ("succeeded", 1), "deny": ("denied", 0),
                                     "ignore": ("expired", 0)}[want]
            if a.data_dir_faults and (lost or (want == "approve" and status == "expired")):
                # A lost result / approval (accepted by repair): never twice, never unapproved.
                exp_status, exp_lines = status, min(lines, 1) if want == "approve" else 0
            if status != exp_status or lines != exp_lines:
                violations.append(
                    f"write job {jid} (decision {want}): status {status}, counter {lines} "
                    f"(want {exp_status}, {exp_lines}); error: {error}")
        elif kind.startswith("bad"):
            if status != "failed":
                violations.append(f"malformed job {jid} ({kind}): {status} (want failed)")
    extra = [j for j in results if j > 0 and j not in produced]
    if extra:
        violations.append(f"results for jobs never produced: {extra[:10]}")
    # Counter files must all belong to write jobs (nothing ran twice into another name).
    write_tokens = {f"c{j['token']}" for j in produced.values() if j["kind"] == "write"}
    stray = [n for n in os.listdir(os.path.join(ws, "side")) if n not in write_tokens]
    if stray:
        violations.append(f"unexpected files in side/: {stray[:10]}")

    # No command execution after its job's final result (a final job never runs again).
    sec_db = os.path.join(data, "command_security.db")
    late = db_rows(sec_db, "SELECT job_id, executed_at FROM executions WHERE job_id IS NOT NULL")
    executions_per_job = {}
    for jid, at in late:
        executions_per_job[jid] = executions_per_job.get(jid, 0) + 1
        r = results.get(jid)
        if r and r[0] in FINAL and r[4] is not None and at > r[4]:
            violations.append(f"job {jid}: command executed at {at}, after its final result at {r[4]}")
    rerun = sum(1 for n in executions_per_job.values() if n > 1)
    pending_left = db_rows(out_db, "SELECT count(*) FROM validations WHERE status = 'pending'")[0][0]
    reasked = db_rows(out_db, "SELECT count(*) FROM (SELECT job_id FROM validations "
                               "GROUP BY job_id HAVING count(*) > 1)")[0][0]
    if pending_left:
        violations.append(f"{pending_left} validations still pending after the drain")

    # Heartbeats: within each incarnation's up interval (first heartbeat .. signal), gaps <= 2 periods.
    hb = db_rows(out_db, "SELECT pid, timestamp, status FROM heartbeat ORDER BY timestamp, rowid")
    limit = 2 * a.heartbeat_ms
    max_gap_up, max_startup, hb_in_down = 0, 0, 0
    for i, wk in enumerate(workers):
        if a.data_dir_faults and i < last_output_fault:
            continue  # its heartbeat rows may have gone with a deleted / rolled-back output.db
        mine = [t for pid, t, st in hb if pid == wk.proc.pid and wk.started - 1000 <= t <= wk.signal_at]
        if not mine:
            continue
        max_startup = max(max_startup, mine[0] - wk.started)
        points = mine + [wk.signal_at]
        for t1, t2 in zip(points, points[1:]):
            gap = t2 - t1
            max_gap_up = max(max_gap_up, gap)
            if gap > limit:
                violations.append(f"heartbeat gap {gap} ms while worker pid {wk.proc.pid} was up "
                                  f"(at {t1}, limit {limit})")
    # No heartbeat from a worker that was supposed to be gone (a zombie worker).
    for wk in workers:
        hb_in_down += sum(1 for pid, t, st in hb if pid == wk.proc.pid and t > wk.exited_at + 50)
    if hb_in_down:
        violations.append(f"{hb_in_down} heartbeat rows written after their worker exited")
    down = [(workers[i].signal_at, workers[i + 1].started) for i in range(len(workers) - 1)]

    # Files bounded.
    wal_max = {n: s for n, s in sampler.max.items() if n.endswith("-wal")}
    for n, s in wal_max.items():
        if s > a.max_wal_mb * 1024 * 1024:
            violations.append(f"{n} reached {s} bytes (> {a.max_wal_mb} MiB)")
    worker_dbs = ["brainloop.output.db", "brainloop.lifecycle.db", "brainloop.metadata.db",
                  "command_security.db"]
    db_bytes = sum(os.path.getsize(os.path.join(data, n)) for n in worker_dbs)
    db_limit = 16 * 1024 * 1024 + a.max_kib_per_job * 1024 * max(1, len(produced))
    if db_bytes > db_limit:
        violations.append(f"worker databases {db_bytes} bytes > {db_limit}")

    def du(p):
        total = 0
        for dp, _, fs in os.walk(p):
            for fn in fs:
                try:
                    total += os.lstat(os.path.join(dp, fn)).st_size
                except OSError:
                    pass
        return total

    # What the worker's start-up reaping killed (commands a killed worker left running).
    reaped = 0
    with open(worker_log, errors="replace") as f:
        for line in f:
            if "killed commands left running by the previous run" in line and "processes=" in line:
                reaped += int(line.rsplit("processes=", 1)[1].split()[0])
    changes_left = len(os.listdir(os.path.join(data, "changes"))) if os.path.isdir(
        os.path.join(data, "changes")) else 0
    tmp_left = len(os.listdir(tmp))

    # Processes left behind.
    left = scan_leftovers(root, {os.getpid()})
    if left:
        violations.append(f"processes left behind: {left}")

    kills = {"SIGKILL": 0, "SIGTERM": 0, "SIGTERM+SIGKILL": 0, "SIGTERMx2": 0}
    term_exit_codes = {}
    for wk in workers[:-1]:
        if wk.signal is not None:
            kills[wk.signal] += 1
            if wk.signal in ("SIGTERM", "SIGTERMx2"):
                term_exit_codes[str(wk.exit_code)] = term_exit_codes.get(str(wk.exit_code), 0) + 1
    decisions = {"approve": 0, "deny": 0}
    for x in approvals:
        if "decision" in x and x.get("rc") == 0:
            decisions[x["decision"]] += 1

    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "minutes": a.minutes, "seed": a.seed, "rate_per_s": a.rate,
        "heartbeat_ms": a.heartbeat_ms,
        "jobs": len(produced), "producer_errors": len(producer.errors),
        "jobs_by_kind_and_status": by_kind,
        "kills": kills, "sigterm_exit_codes": term_exit_codes,
        "restarts": len(workers) - 1,
        "down_intervals": len(down),
        "down_total_s": round(sum(b - a_ for a_, b in down) / 1000, 1),
        "max_startup_to_first_heartbeat_ms": max_startup,
        "max_heartbeat_gap_while_up_ms": max_gap_up,
        "heartbeat_rows": len(hb),
        "approvals_answered": decisions, "approver_errors": len(approver_errors),
        "jobs_with_commands_run_more_than_once": rerun,
        "jobs_asked_again_after_a_restart": reasked,
        "max_attempts_seen": max_attempts_seen,
        "max_file_bytes": dict(sorted(sampler.max.items())),
        "worker_db_bytes_end": db_bytes,
        "data_dir_bytes_end": du(data),
        "journal_bytes_end": du(os.path.join(data, "journal")),
        "changes_dirs_left": changes_left,
        "private_tmp_dirs_left": tmp_left,
        "processes_lingering_5s_after_a_kill": post_kill_lingering,
        "processes_reaped_by_the_worker_at_start_up": reaped,
        "processes_left_at_end": len(left),
        "final_drain_s": round(drain_s, 1),
        "data_dir_faults": faults, "lock_deleted_second_worker_refused": lock_faults,
        "repairs": len(repairs),
        "violations": len(violations),
    }
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump({**summary, "violation_list": violations,
                   "down": down, "approver_error_list": approver_errors[:50]}, f, indent=1)

    print()
    print(f"soak finished {summary['date']}: {len(produced)} jobs in {a.minutes} min "
          f"(seed {a.seed}), {len(workers) - 1} restarts")
    print("jobs by kind and final status:")
    for kind in sorted(by_kind):
        print(f"  {kind:<18} " + ", ".join(f"{s} {n}" for s, n in sorted(by_kind[kind].items())))
    for k in ("kills", "sigterm_exit_codes", "down_total_s", "max_startup_to_first_heartbeat_ms",
              "max_heartbeat_gap_while_up_ms", "approvals_answered", "approver_errors",
              "jobs_with_commands_run_more_than_once", "jobs_asked_again_after_a_restart",
              "max_attempts_seen", "max_file_bytes",
              "worker_db_bytes_end", "data_dir_bytes_end", "journal_bytes_end",
              "changes_dirs_left", "private_tmp_dirs_left",
              "processes_lingering_5s_after_a_kill", "processes_reaped_by_the_worker_at_start_up",
              "processes_left_at_end", "final_drain_s",
              "data_dir_faults", "lock_deleted_second_worker_refused", "repairs",
              "producer_errors"):
        print(f"{k}: {summary[k]}")
    if violations:
        print(f"\nVIOLATIONS ({len(violations)}):")
        for v in violations[:50]:
            print(f"  {v}")
        print(f"kept for inspection: {root} (worker.log, approvals.jsonl, summary.json)")
        return 1
    print("\nno violations")
    if a.keep:
        print(f"kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode")
    ap = sub.add_parser("approver", help="(internal) the second process answering validations")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--approve-pct", type=int, default=75)
    ap.add_argument("--log", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--period", type=float, default=0.3)
    p.add_argument("--bin", default="target/release/brainloop")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=4.0, help="jobs inserted per second")
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--retention-ms", type=int, default=60000, help="retention pass + checkpoint period")
    p.add_argument("--min-up", type=float, default=5.0)
    p.add_argument("--max-up", type=float, default=45.0)
    p.add_argument("--approve-pct", type=int, default=75)
    p.add_argument("--drain-timeout", type=float, default=300)
    p.add_argument("--max-wal-mb", type=float, default=64)
    p.add_argument("--max-kib-per-job", type=float, default=64)
    p.add_argument("--keep", action="store_true", help="keep the temp dir even without violations")
    p.add_argument("--data-dir-faults", action="store_true",
                   help="issue 21: while stopped, delete / truncate / roll back a database (then "
                        "`brainloop repair` with the flags the refusal names); while running, "
                        "delete brainloop.lock and start a second worker (must be refused)")
    a = p.parse_args()
    if a.mode == "approver":
        approver_main(a)
        return 0
    a.bin = os.path.realpath(a.bin)
    return soak_main(a)


if __name__ == "__main__":
    sys.exit(main())
