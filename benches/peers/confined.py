#!/usr/bin/env python3
"""One confined command against bubblewrap's bare start (issue 39; run it through
scripts/bench_confined.sh; prints figures, asserts nothing).

Cases, interleaved (one round = every case once, in a fresh random order), medians of N rounds:

- `bash -c 'ls -la'` in the workspace (spawn → exit, from Python);
- bwrap (Debian's package) with the confinement peers use: `--unshare-all --die-with-parent
  --ro-bind / / --dev /dev --proc /proc --bind WS WS bash -c 'ls -la'` (spawn → exit);
- brainloop `ping` job, insert committed → result visible (polled every 0.1 ms);
- brainloop `execute_bash` `ls -la` (readonly set, auto-approved because confined);
- brainloop `execute_bash` `touch f` by a client granted FORCE_EXECUTE (filesystem set, direct);
- brainloop `execute_bash` `touch g` by a client that must be asked: the overlay run up to its
  `pending_validation` (issue 39 item 3: the overlay's own cost).

The timed rounds run daemons with the timing record off (as deployed: it costs a file and a
write per mark). Then the breakdown of the command jobs, from a second pass on a daemon with
the record on (the `brainloop::timing` debug event, CLOCK_MONOTONIC marks of the worker and of
the sandbox helper, see docs/performance.md), and bwrap's equivalent steps from `strace -f -T` (time inside each
system call; strace slows every call, so these are for the split, not the total).
"""

import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time

BWRAP_ARGS = ["--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
              "--proc", "/proc"]


def med(v):
    return statistics.median(v) if v else float("nan")


def wait_for(cond, what, timeout=60):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


class Daemon:
    def __init__(self, bin_path, root, env, timing=True):
        self.data = os.path.join(root, "data")
        self.ws = os.path.join(root, "ws")
        os.makedirs(self.ws, exist_ok=True)
        for i in range(20):
            with open(os.path.join(self.ws, f"file{i}.txt"), "w") as f:
                f.write("x" * i)
        subprocess.run([bin_path, "init", "--data-dir", self.data], check=True,
                       stdout=subprocess.DEVNULL)
        cfg = os.path.join(root, "brainloop.toml")
        with open(cfg, "w") as f:
            f.write('[clients.ops]\nfile_read = ["{workspace}/**"]\nsystem_command = ["*"]\n'
                    'force_execute = true\n')
        self.log = os.path.join(root, "timing.log")
        e = dict(os.environ, BRAINLOOP_LOG="warn,brainloop::timing=debug" if timing else "warn",
                 BRAINLOOP_LOG_FORMAT="json", BRAINLOOP_LOG_FILE=self.log,
                 BRAINLOOP_CONFIG=cfg, **env)
        self.seen = {}
        self.proc = subprocess.Popen(
            [bin_path, "run", "--data-dir", self.data, "--workspace", self.ws],
            env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = os.path.join(self.data, "brainloop.output.db")
        self.inp = sqlite3.connect(os.path.join(self.data, "brainloop.input.db"), timeout=30,
                                   isolation_level=None)
        self.inp.execute("PRAGMA synchronous = FULL")
        self.out = sqlite3.connect(out, timeout=30, isolation_level=None)
        wait_for(lambda: self.out.execute(
            "SELECT count(*) FROM heartbeat WHERE pid = ? AND status = 'running'",
            (self.proc.pid,)).fetchone()[0] > 0, "brainloop's heartbeat")

    def job(self, action, params, client="local"):
        """Insert → result visible (ms), the job's id and its final status."""
        t0 = time.perf_counter_ns()
        jid = self.inp.execute("INSERT INTO jobs(action, params, client_id) VALUES (?, ?, ?)",
                               (action, json.dumps(params), client)).lastrowid
        t1 = time.perf_counter_ns()
        while True:
            r = self.out.execute("SELECT status FROM results WHERE job_id = ?", (jid,)).fetchone()
            if r and r[0] not in ("queued", "running"):
                seen = time.perf_counter_ns()
                # perf_counter is CLOCK_MONOTONIC here, the clock of the daemon's marks.
                self.seen[jid] = (t1, seen)
                return (seen - t1) / 1e6, jid, r[0]
            time.sleep(0.0001)
            if (time.perf_counter_ns() - t0) > 60e9:
                raise SystemExit(f"job {jid} ({action}) did not finish")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def spawn_ms(argv, cwd):
    t = time.perf_counter_ns()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    return (time.perf_counter_ns() - t) / 1e6


# The stages of one job, from the timing record: (label, from mark, to mark). Marks the helper
# did ahead of the job (a warm helper's cgroup, namespaces) are shown apart.
STAGES = [
    ("insert committed → handler start (claim, slot, grants, `running`)", "inserted", "start"),
    ("  insert committed → claimed (wake, claim transaction)", "inserted", "claimed"),
    ("  claimed → picked (ready queue)", "claimed", "picked"),
    ("  picked → task spawned (`running` in lifecycle.db)", "picked", "task"),
    ("  task spawned → grants loaded", "task", "grants"),
    ("  grants loaded → handler start", "grants", "start"),
    ("classification + policy", "start", "planned"),
    ("  classification (parse, rules)", "start", "classified"),
    ("  grants checked → signatures of the report", "classified", "signatures"),
    ("  what is known (registry row, promotion, requests, signatures)", "signatures", "known"),
    ("  situation + plan", "known", "planned"),
    ("sandbox prepare (tmp, warm helper, cgroup, spec)", "planned", "prepared"),
    ("egress proxy start", "prepared", "egress"),
    ("spec to the helper", "egress", "spawned"),
    ("helper: spec read", "spawned", "h_spec"),
    ("helper: nosuid binds + overlay mount", "h_spec", "h_mounts"),
    ("helper: fork PID 1", "h_mounts", "h_init"),
    ("helper: egress forwarder", "h_init", "h_forward"),
    ("helper: mount ns + covers over /tmp /run …", "h_forward", "h_hidden"),
    ("helper: fresh /proc", "h_hidden", "h_proc"),
    ("helper: fork command", "h_proc", "h_cmd"),
    ("helper: chdir, caps, no_new_privs", "h_cmd", "h_landlock0"),
    ("helper: Landlock", "h_landlock0", "h_landlock"),
    ("helper: seccomp", "h_landlock", "h_seccomp"),
    ("helper: exec prep (argv, env)", "h_seccomp", "h_exec"),
    ("exec + command + exit of PID 1", "h_exec", "h_reaped"),
    ("helper exit + namespace teardown seen", "h_reaped", "exited"),
    ("output collected", "exited", "collected"),
    ("teardown (leftovers, cgroup/tmp handed off, proxy)", "collected", "torn"),
    ("recording (registry, evidence, result built)", "torn", "end"),
    ("  of which the run's registry + evidence commit", "torn", "recorded"),
    ("handler end → result visible (result commit, audit; polled)", "end", "seen"),
]
AHEAD = [
    ("warm helper: cgroup join + rlimits (ahead)", "h_start", "h_cgroup"),
    ("warm helper: user+mount+PID+net namespaces (ahead)", "h_cgroup", "h_unshare"),
    ("warm helper: id maps + private mounts (ahead)", "h_unshare", "h_maps"),
    ("warm helper: seccomp programs + Landlock rulesets built (ahead)", "h_maps", "h_bpf"),
]


def timings(log):
    """job id → marks (ns), from the daemon's JSON log."""
    out = {}
    try:
        with open(log) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                fl = e.get("fields", {})
                if "marks" in fl and "job_id" in fl:
                    out[int(fl["job_id"])] = json.loads(fl["marks"])
    except OSError:
        pass
    return out


def breakdown(marks_list):
    rows = []
    for label, a, b in AHEAD + STAGES:
        v = [(m[b] - m[a]) / 1e6 for m in marks_list if a in m and b in m]
        if v:
            rows.append((label, med(v), len(v)))
    tot = [(m["end"] - m["start"]) / 1e6 for m in marks_list if "start" in m and "end" in m]
    return rows, med(tot)


STRACE_GROUPS = [
    ("namespaces (clone/unshare with CLONE_NEW*)", re.compile(r"^(clone3?|unshare)\(.*CLONE_NEW")),
    ("id maps, setgroups (writes to /proc/…/*_map)", None),
    ("mounts (mount, pivot_root, umount2)", re.compile(r"^(mount|pivot_root|umount2|mount_setattr|open_tree|move_mount|fsopen|fsmount|fsconfig)\(")),
    ("seccomp / landlock / prctl", re.compile(r"^(seccomp|prctl|landlock_\w+)\(")),
    ("exec (execve)", re.compile(r"^execve\(")),
    ("wait (wait4/waitid/poll/read on the child)", re.compile(r"^(wait4|waitid)\(")),
]


def strace_bwrap(bwrap, ws, runs, tmp):
    """Median per run of the time inside each group of system calls of bwrap and its children."""
    sums = {g[0]: [] for g in STRACE_GROUPS}
    sums["all other calls (blocking reads and polls included)"] = []
    total = []
    line_re = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(.*)<(\d+\.\d+)>$")
    for i in range(runs):
        out = os.path.join(tmp, f"bwrap-strace-{i}")
        t = time.perf_counter_ns()
        subprocess.run(["strace", "-f", "-T", "-o", out, bwrap, *BWRAP_ARGS, "--bind", ws, ws,
                        "bash", "-c", "ls -la"], cwd=ws, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        total.append((time.perf_counter_ns() - t) / 1e6)
        acc = {k: 0.0 for k in sums}
        seen_execve = 0
        with open(out) as f:
            for raw in f:
                m = line_re.match(raw.strip())
                if not m:
                    continue
                call, secs = m.group(1), float(m.group(2)) * 1000
                key = "all other calls (blocking reads and polls included)"
                if call.startswith("openat(") and re.search(
                        r"(uid_map|gid_map|setgroups)", call):
                    key = STRACE_GROUPS[1][0]
                else:
                    for name, rx in STRACE_GROUPS:
                        if rx is not None and rx.match(call):
                            key = name
                            break
                if key == "exec (execve)":
                    seen_execve += 1
                    if seen_execve == 1:
                        continue  # strace's own exec of bwrap
                acc[key] += secs
        os.unlink(out)
        for k, v in acc.items():
            sums[k].append(v)
    return [(k, med(v)) for k, v in sums.items()], med(total)


def command_cases(dm, seq):
    """The three command jobs on daemon `dm`: readonly `ls -la`, a forced `touch` (filesystem,
    direct) and an asked `touch` (overlay run up to its pending_validation)."""
    return {
        "readonly": lambda: dm.job("execute_bash", {"command": "ls -la"}),
        "filesystem": lambda: dm.job("execute_bash",
                                     {"command": "touch forced.txt", "force_execute": True},
                                     client="ops"),
        # A new command each time: the same one again would be a duplicate warning.
        "overlay": lambda: dm.job("execute_bash",
                                  {"command": f"touch asked{next(seq)}.txt"}),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brainloop", required=True)
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--strace-runs", type=int, default=20)
    ap.add_argument("--label", default="")
    ap.add_argument("--baseline", default="",
                    help="another brainloop binary measured in the same rounds (A/B)")
    a = ap.parse_args()
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SystemExit("bwrap is not installed (Debian: apt-get install bubblewrap)")
    ver = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix="bl-confined-")
    try:
        d = Daemon(a.brainloop, tmp, {}, timing=False)
        ws = d.ws
        seq = iter(range(1 << 30))
        base = None
        if a.baseline:
            os.makedirs(os.path.join(tmp, "baseline"))
            base = Daemon(a.baseline, os.path.join(tmp, "baseline"), {}, timing=False)
        cases = {
            "bash": lambda: spawn_ms(["bash", "-c", "ls -la"], ws),
            "bwrap": lambda: spawn_ms([bwrap, *BWRAP_ARGS, "--bind", ws, ws, "bash", "-c",
                                       "ls -la"], ws),
            "ping": lambda: d.job("ping", {}),
            **command_cases(d, seq),
        }
        if base is not None:
            cases["ping_b"] = lambda: base.job("ping", {})
            cases.update({k + "_b": f for k, f in command_cases(base, seq).items()})
        # Warm-up: the first run of each (page cache, the registry's first rows, warm helpers).
        for _ in range(5):
            for f in cases.values():
                f()
        res = {k: [] for k in cases}
        ids = {k: [] for k in cases}
        statuses = {k: set() for k in cases}
        for _ in range(a.rounds):
            order = list(cases)
            random.shuffle(order)
            for k in order:
                r = cases[k]()
                if isinstance(r, tuple):
                    ms, jid, st = r
                    ids[k].append(jid)
                    statuses[k].add(st)
                else:
                    ms = r
                res[k].append(ms)
        time.sleep(0.5)
        d.stop()
        if base is not None:
            base.stop()
        # The breakdown: the command jobs again, on a daemon that keeps the timing record.
        os.makedirs(os.path.join(tmp, "timed"))
        d = Daemon(a.brainloop, os.path.join(tmp, "timed"), {})
        cmd_cases = command_cases(d, seq)
        ids = {k: [] for k in cmd_cases}
        for i in range(5 + min(a.rounds, 100)):
            order = list(cmd_cases)
            random.shuffle(order)
            for k in order:
                _, jid, _ = cmd_cases[k]()
                if i >= 5:
                    ids[k].append(jid)
        time.sleep(0.5)
        d.stop()
        marks = timings(d.log)
        for jid, (ins, seen) in d.seen.items():
            if jid in marks:
                marks[jid]["inserted"] = ins
                marks[jid]["seen"] = seen
        m = {k: med(v) for k, v in res.items()}
        load = open("/proc/loadavg").read().split()[:3]
        print(f"\n## Confined command vs bubblewrap ({a.label or 'this build'}"
              f"{' vs ' + a.baseline if a.baseline else ''}; {a.rounds} "
              f"interleaved rounds, medians; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"{os.cpu_count()} CPUs; load {' '.join(load)}; {ver}; kernel {os.uname().release})\n")
        rows = [
            ("`bash -c 'ls -la'`", m["bash"]),
            (f"`bwrap {' '.join(BWRAP_ARGS)} --bind WS WS bash -c 'ls -la'`", m["bwrap"]),
            ("brainloop `ping` job, insert → result", m["ping"]),
            ("brainloop `execute_bash` `ls -la` (readonly, auto-approved), insert → result",
             m["readonly"]),
            ("brainloop `execute_bash` `touch` (filesystem, forced), insert → result",
             m["filesystem"]),
            ("brainloop `execute_bash` `touch` asked: overlay run → pending_validation",
             m["overlay"]),
        ]
        bw = m["bwrap"]
        if base is None:
            print("| | ms | ratio to bwrap |")
            print("|---|---:|---:|")
            for name, v in rows:
                print(f"| {name} | {v:.2f} | {v / bw:.2f} |")
            for k, name in [("readonly", "readonly"), ("filesystem", "filesystem")]:
                diff = m[k] - m["ping"]
                print(f"| **{name} command job − ping job** | **{diff:.2f}** | **{diff / bw:.2f}** |")
            extra = m["overlay"] - m["filesystem"]
            print(f"| overlay run's extra cost (asked overlay run − forced direct run) | {extra:.2f} | "
                  f"{extra / bw:.2f} |")
        else:
            print("\n| | baseline ms | baseline ratio to bwrap | this build ms | ratio to bwrap |")
            print("|---|---:|---:|---:|---:|")
            keys = ["bash", "bwrap", "ping", "readonly", "filesystem", "overlay"]
            for (name, v), k in zip(rows, keys):
                b = m.get(k + "_b", v)
                print(f"| {name} | {b:.2f} | {b / bw:.2f} | {v:.2f} | {v / bw:.2f} |")
            for k in ("readonly", "filesystem"):
                db, dn = m[k + "_b"] - m["ping_b"], m[k] - m["ping"]
                print(f"| **{k} command job − ping job** | **{db:.2f}** | **{db / bw:.2f}** | "
                      f"**{dn:.2f}** | **{dn / bw:.2f}** |")
            eb, en = m["overlay_b"] - m["filesystem_b"], m["overlay"] - m["filesystem"]
            print(f"| overlay run's extra cost (asked overlay run − forced direct run) | {eb:.2f} | "
                  f"{eb / bw:.2f} | {en:.2f} | {en / bw:.2f} |")
        print(f"\nstatuses: " + ", ".join(f"{k}: {'/'.join(sorted(v))}" for k, v in statuses.items()
                                          if v))
        for k in ("readonly", "filesystem", "overlay"):
            ml = [marks[j] for j in ids[k] if j in marks]
            rows_b, tot = breakdown(ml)
            print(f"\n### Breakdown: {k} job (daemon's timing record, a second pass with it on, {len(ml)} jobs, medians; "
                  f"handler start → end {tot:.3f} ms)\n")
            print("| stage | ms |")
            print("|---|---:|")
            for label, v, n in rows_b:
                print(f"| {label} | {v:.3f} |")
        if a.strace_runs > 0 and shutil.which("strace"):
            groups, tot = strace_bwrap(bwrap, ws, a.strace_runs, tmp)
            print(f"\n### bwrap's steps (`strace -f -T`, time inside the calls, medians of "
                  f"{a.strace_runs} runs; {tot:.2f} ms per run under strace)\n")
            print("| step | ms in calls |")
            print("|---|---:|")
            for k, v in groups:
                print(f"| {k} | {v:.3f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
