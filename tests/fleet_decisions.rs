//! The fleet registry under faults (issue 50), through the real binary and a real PostgreSQL
//! the harness starts (`common::pg`). One decision per validation (finding 4): two operators'
//! `approve` and `deny` of one validation at the same moment — the worker stopped, so neither is
//! taken yet — end with exactly one decision row; the other CLI exits non-zero saying who
//! decided what and when, and the job follows the decision that stood. A registry migrated past
//! the worker (finding 12), one that hangs (finding 5: its backend, then the whole server,
//! SIGSTOPped) and one restored from an older `pg_dump` (finding 3).

mod common;

use common::fleet;
use common::pg;
use common::{final_result, submit, Daemon, Env, BIN};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_operators_deciding_at_once_leave_one_decision_and_the_second_is_told_who_decided() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "onedecision", &["a"]);
    let env = Env::new();
    // Never learned: five approvals of `echo N > fN` would teach its signature, and a later
    // round would apply unasked (the race decides how many approvals win).
    let d = env.start(&[
        ("BRAINLOOP_REGISTRY_URL", &c.url_as(&r.workers[0], &r.db)),
        ("BRAINLOOP_SIGNATURE_APPROVALS", "1000"),
    ]);
    let op_url = c.url_as(&r.operator, &r.db);
    let operator = tempfile::tempdir().unwrap();
    let mut reg = c.connect("postgres", &r.db);
    let mut stood = Vec::new();
    for round in 0..8 {
        let (id, st, v, err) = submit(&env, &format!("echo {round} > f{round}"));
        assert_eq!(st, "pending_validation", "{err} {v}");
        let vid = common::vid(&v);
        let t0 = Instant::now();
        while reg
            .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&vid])
            .unwrap()
            .is_none()
        {
            assert!(t0.elapsed() < Duration::from_secs(30), "never published");
            std::thread::sleep(Duration::from_millis(20));
        }
        d.signal(nix::sys::signal::Signal::SIGSTOP);
        let spawn = |verb: &str| {
            Command::new(BIN)
                .args([verb, &vid])
                .env("BRAINLOOP_DATA_DIR", operator.path())
                .env("BRAINLOOP_REGISTRY_URL", &op_url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn("approve"), spawn("deny"));
        let [a, b] = [a, b].map(|ch| {
            let o = ch.wait_with_output().unwrap();
            (
                o.status.success(),
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                ),
            )
        });
        let rows: i64 = reg
            .query_one(
                "SELECT count(*) FROM decisions WHERE validation_id = $1",
                &[&vid],
            )
            .unwrap()
            .get(0);
        d.signal(nix::sys::signal::Signal::SIGCONT);
        assert_eq!(rows, 1, "round {round}: one decision row ({a:?} {b:?})");
        assert!(
            a.0 != b.0,
            "round {round}: exactly one CLI succeeds: approve {a:?}, deny {b:?}"
        );
        let (won, lost) = if a.0 {
            ("approve", &b.1)
        } else {
            ("deny", &a.1)
        };
        assert!(
            lost.contains("already decided")
                && lost.contains(&format!(": {won} by "))
                && lost.contains("the first decision stands"),
            "round {round}: the refused CLI names the decision that stood: {lost}"
        );
        let (st, v, err) = final_result(&env, id);
        let expect = if won == "approve" {
            "succeeded"
        } else {
            "denied"
        };
        assert_eq!(st, expect, "round {round}: {err} {v}");
        stood.push(won);
    }
    eprintln!("decisions that stood: {stood:?}");
    d.kill9();
}

/// Issue 50, finding 12: a worker connected before the registry was migrated past its version
/// stops writing it at its next pass and says why (`status` exit 4), and writes again once the
/// registry is back at its version.
#[test]
fn a_registry_migrated_past_the_workers_version_mid_connection_stops_its_writes() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "newer", &["a"]);
    let env = Env::new();
    let d = env.start(&[("BRAINLOOP_REGISTRY_URL", &c.url_as(&r.workers[0], &r.db))]);
    let mut owner = c.connect("postgres", &r.db);
    let published = |owner: &mut postgres::Client, vid: &str| {
        owner
            .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&vid])
            .unwrap()
            .is_some()
    };
    let (_, st, v, err) = submit(&env, "echo a > a");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let first = common::vid(&v);
    let t0 = Instant::now();
    while !published(&mut owner, &first) {
        assert!(t0.elapsed() < Duration::from_secs(30), "never published");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A newer binary's migration, committed while the worker is connected.
    let next: i64 = owner
        .query_one("SELECT max(version) + 1 FROM registry_migrations", &[])
        .unwrap()
        .get(0);
    owner
        .execute(
            "INSERT INTO registry_migrations(version, applied_at) VALUES ($1, 0)",
            &[&next],
        )
        .unwrap();
    let t0 = Instant::now();
    loop {
        let out = Command::new(BIN)
            .args(["status", "--json", "--data-dir"])
            .arg(&env.data)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.code() == Some(4) && text.contains(&format!("schema version {next}")) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "status never said the registry is newer: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, st, v, err) = submit(&env, "echo b > b");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let second = common::vid(&v);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !published(&mut owner, &second),
        "the worker wrote a registry newer than its schema"
    );
    owner
        .execute(
            "DELETE FROM registry_migrations WHERE version = $1",
            &[&next],
        )
        .unwrap();
    let t0 = Instant::now();
    while !published(&mut owner, &second) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never published once the registry was back at its version"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.kill9();
}

/// `brainloop status --json` of `env`: (exit code, stdout).
fn status(env: &Env) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(["status", "--json", "--data-dir"])
        .arg(&env.data)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Polls `status` until `want` holds of (exit code, text), for up to 30 s; the last text.
fn status_until(env: &Env, what: &str, want: impl Fn(Option<i32>, &str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let (code, text) = status(env);
        if want(code, &text) {
            return text;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "status never showed {what}: exit {code:?} {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the registry `db` shows validation `vid` (the worker published it).
fn wait_published(reg: &mut postgres::Client, vid: &str, what: &str) {
    let t0 = Instant::now();
    while reg
        .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&vid])
        .map(|r| r.is_none())
        .unwrap_or(true)
    {
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "{what}: validation {vid} never reached the operator's queue"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A worker with a short registry deadline and poll (the URL is its worker role's).
fn start_fleet_worker(env: &Env, url: &str) -> Daemon {
    let cfg = env.root.path().join("fleet.toml");
    std::fs::write(&cfg, "[registry]\npoll_ms = 200\npass_timeout_ms = 1500\n").unwrap();
    env.start(&[
        ("BRAINLOOP_CONFIG", cfg.to_str().unwrap()),
        ("BRAINLOOP_REGISTRY_URL", url),
    ])
}

/// Issue 50, finding 5: a registry that hangs is noticed. The worker's own backend stopped
/// (SIGSTOP): the pass past `[registry] pass_timeout_ms` is given up, the worker reconnects and
/// its new request reaches the operator's queue while that backend is still stopped. The whole
/// server stopped: `status` exits 4 naming the deadline for as long as it lasts, and once it
/// resumes the request made meanwhile reaches the queue, the operator's approve runs it and
/// `status` is clean again.
#[test]
fn a_registry_that_hangs_is_a_problem_and_the_worker_reconnects() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    common::require_sandbox();
    // A server of its own: the test stops all of it.
    let c = pg::Cluster::start();
    let r = fleet::registry(&c, "hang", &["a"]);
    let env = Env::new();
    let d = start_fleet_worker(&env, &c.url_as(&r.workers[0], &r.db));
    let mut admin = c.connect("postgres", &r.db);
    let (_, st, v, err) = submit(&env, "echo 0 > f0");
    assert_eq!(st, "pending_validation", "{err} {v}");
    wait_published(&mut admin, &common::vid(&v), "before any fault");

    // The worker's backend stopped: no error ever reaches the bridge.
    let backends = |admin: &mut postgres::Client| -> Vec<i32> {
        admin
            .query(
                "SELECT pid FROM pg_stat_activity WHERE usename = $1",
                &[&r.workers[0]],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let stopped = backends(&mut admin);
    assert!(!stopped.is_empty(), "the worker has a backend");
    for p in &stopped {
        kill(Pid::from_raw(*p), Signal::SIGSTOP).unwrap();
    }
    let (_, st, v, err) = submit(&env, "echo 1 > f1");
    assert_eq!(st, "pending_validation", "{err} {v}");
    wait_published(&mut admin, &common::vid(&v), "the worker's backend stopped");
    let now = backends(&mut admin);
    assert!(
        now.iter().any(|p| !stopped.contains(p)),
        "the worker reconnected on a new backend: {stopped:?} → {now:?}"
    );
    for p in &stopped {
        kill(Pid::from_raw(*p), Signal::SIGCONT).unwrap();
    }
    drop(admin);
    assert!(
        d.log_text().contains("pass_timeout_ms"),
        "the log names the deadline:\n{}",
        d.log_text()
    );

    // The whole server stopped: a new connection hangs too.
    let server = c.pids();
    assert!(server.len() > 1, "postmaster and children: {server:?}");
    for p in &server {
        kill(Pid::from_raw(*p), Signal::SIGSTOP).unwrap();
    }
    let (job, st, v, err) = submit(&env, "echo 2 > f2");
    let held = status_until(&env, "the hung registry (exit 4)", |code, t| {
        code == Some(4) && t.contains("pass_timeout_ms")
    });
    // Still a problem a while later: it lasts as long as the hang.
    std::thread::sleep(Duration::from_millis(2500));
    let (code, later) = status(&env);
    for p in &server {
        // a child that had exited is reaped by the postmaster once it runs again: gone is fine
        match kill(Pid::from_raw(*p), Signal::SIGCONT) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => panic!("SIGCONT {p}: {e}"),
        }
    }
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert!(held.contains("registry"), "{held}");
    assert_eq!(code, Some(4), "still hung, still a problem: {later}");
    let vid = common::vid(&v);
    let mut admin = c.connect("postgres", &r.db);
    wait_published(&mut admin, &vid, "the server resumed");
    status_until(&env, "a clean status once resumed", |code, _| {
        code == Some(0)
    });
    let operator = tempfile::tempdir().unwrap();
    fleet::ok(
        &c.url_as(&r.operator, &r.db),
        operator.path(),
        &["approve", &vid],
    );
    let (st, v, err) = final_result(&env, job);
    assert_eq!(st, "succeeded", "{err} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("f2")).unwrap(),
        "2\n"
    );
    d.kill9();
}

/// Submits `cmd` until it runs unasked under the learned signature (up to 15 s).
fn runs_unasked(env: &Env, cmd: &str, file: &str) {
    let t0 = Instant::now();
    loop {
        std::fs::write(env.workspace.join(file), "x\n").unwrap();
        let (_, st, v, e) = submit(env, cmd);
        if st == "succeeded" {
            assert_eq!(v["policy_used"], "signature_learned", "{v}");
            return;
        }
        assert_eq!(st, "pending_validation", "{v} {e}");
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "{cmd} never ran unasked: {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `cmd` asks (and changes nothing): its validation id.
fn asks(env: &Env, cmd: &str, file: &str) -> String {
    std::fs::write(env.workspace.join(file), "x\n").unwrap();
    let (_, st, v, e) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd} must ask: {v} {e}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join(file)).unwrap(),
        "x\n",
        "{cmd} changed {file} unasked"
    );
    common::vid(&v)
}

/// Issue 50, finding 3: a registry restored from a `pg_dump` taken before a revoke is noticed.
/// The revoked signature's command does not run unasked after the restore — nor after a restart
/// of the worker —, the validation published after the dump comes back to the operator's
/// queue, `status` exits 4 naming `accept-restore`; after the operator's `registry
/// accept-restore` the registry's rules apply again (the restored one included, as the docs
/// say) and the operator's approve of the re-published request runs it.
#[test]
fn a_registry_restored_from_an_older_dump_is_noticed_until_the_operator_accepts() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "restore", &["a"]);
    let url = c.url_as(&r.workers[0], &r.db);
    let op_url = c.url_as(&r.operator, &r.db);
    let operator = tempfile::tempdir().unwrap();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
    let d = start_fleet_worker(&env, &url);
    let mut owner = c.connect("postgres", &r.db);
    // The operator teaches the fleet `sed -i EXPR WS_PATH`.
    let (job, st, v, err) = submit(&env, "sed -i s/one/ONE/ a.txt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = common::vid(&v);
    wait_published(&mut owner, &vid, "the first request");
    fleet::ok(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--scope", "fleet"],
    );
    assert_eq!(final_result(&env, job).0, "succeeded");
    runs_unasked(&env, "sed -i s/x/X/ b.txt", "b.txt");

    // The backup, then the revoke: the worker asks again.
    let dump = env.root.path().join("registry.dump");
    c.dump(&r.db, &dump);
    fleet::ok(
        &op_url,
        operator.path(),
        &["signatures", "--revoke", "sed -i EXPR WS_PATH"],
    );
    let t0 = Instant::now();
    let after_dump = loop {
        std::fs::write(env.workspace.join("b.txt"), "x\n").unwrap();
        let (_, st, v, e) = submit(&env, "sed -i s/x/X/ b.txt");
        if st == "pending_validation" {
            break common::vid(&v);
        }
        assert_eq!(st, "succeeded", "{v} {e}");
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "the revoke never reached the worker"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    wait_published(&mut owner, &after_dump, "published after the dump");
    drop(owner);

    // The restore: the revoked rule is back in the registry, the request is gone from it.
    c.restore(&r.db, &dump);
    let text = status_until(&env, "the restore (exit 4)", |code, t| {
        code == Some(4) && t.contains("accept-restore") && t.contains("went back in time")
    });
    assert!(text.contains("registry-restored"), "{text}");
    let mut owner = c.connect("postgres", &r.db);
    let revoked: Option<i64> = owner
        .query_one(
            "SELECT revoked_at FROM learned_rules WHERE rule = 'sed -i EXPR WS_PATH'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(revoked.is_none(), "the dump predates the revoke");
    wait_published(&mut owner, &after_dump, "the restored registry");
    // The revoked signature's command asks, however many passes later.
    // (Another file each time: the same command twice within 2 s is a duplicate warning.)
    for i in 0..3 {
        asks(
            &env,
            &format!("sed -i s/x/X/ c{i}.txt"),
            &format!("c{i}.txt"),
        );
        std::thread::sleep(Duration::from_millis(300 * i));
    }
    // A restart does not forget it.
    d.kill9();
    let d = start_fleet_worker(&env, &url);
    asks(&env, "sed -i s/x/X/ c3.txt", "c3.txt");
    status_until(&env, "the restore after a restart", |code, t| {
        code == Some(4) && t.contains("accept-restore")
    });
    asks(&env, "sed -i s/x/X/ c4.txt", "c4.txt");

    // The operator accepts: the registry's rules apply again, the re-published request runs.
    let out = fleet::ok(&op_url, operator.path(), &["registry", "accept-restore"]);
    assert!(out.contains("new epoch"), "{out}");
    status_until(&env, "a clean status once accepted", |code, _| {
        code == Some(0)
    });
    runs_unasked(&env, "sed -i s/x/X/ c.txt", "c.txt");
    fleet::ok(&op_url, operator.path(), &["approve", &after_dump]);
    let t0 = Instant::now();
    while std::fs::read_to_string(env.workspace.join("b.txt")).unwrap() != "X\n" {
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "the approve of the re-published request never ran it"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d.kill9();
}
