//! A bounded egress proxy (issue 33, item 3 and part of 7) through the real daemon: what a
//! confined command can make the worker hold (connections per run, idle connections with no
//! request head), the worker's descriptor limit, a long `$TMPDIR`, and the record of a run
//! making more than 1,000 attempts. Local servers only (127.0.0.1); nothing leaves the machine.

mod common;

use common::http_server::Server;
use common::{cli_ok, job, past, settled, vid, Env};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn site(env: &Env) -> Server {
    common::require_sandbox();
    let site = env.root.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "hello-egress\n").unwrap();
    Server::start(&site, env.root.path().join("server.log"))
}

/// Approves the up-front request of job `id` if it has one; its state after that.
fn approved(env: &Env, id: i64) -> (String, Value, String) {
    let (st, v, e) = settled(env, id);
    if st == "pending_validation" && v["egress_refused"].is_null() && v.get("effects").is_none() {
        let old = vid(&v);
        cli_ok(env, &["approve", &old]);
        return past(env, id, &old);
    }
    (st, v, e)
}

fn submit_approved(env: &Env, client: &str, cmd: &str) -> (i64, String, Value, String) {
    let id = job(env, client, "execute_bash", &json!({ "command": cmd }));
    let (st, v, e) = approved(env, id);
    (id, st, v, e)
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// (soft, hard) "Max open files" of `pid`.
fn nofile(pid: i32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_string();
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_string(), f[4].to_string())
}

/// Opens `n` connections to the forwarder and sends nothing; then waits (40 s at most) for the
/// other side to close each, and prints how many it opened and saw closed.
const IDLE_PY: &str = r#"
import socket, sys, time
n = int(sys.argv[1])
socks, err = [], None
for i in range(n):
    try:
        socks.append(socket.create_connection(("127.0.0.1", 3128), timeout=5))
    except OSError as e:
        err = repr(e)
        break
closed = 0
deadline = time.time() + 40
for s in socks:
    left = deadline - time.time()
    if left <= 0:
        break
    s.settimeout(left)
    try:
        if s.recv(1) == b"":
            closed += 1
    except socket.timeout:
        break
    except OSError:
        closed += 1
print("opened %d closed %d err %s" % (len(socks), closed, err))
"#;

/// (a) Idle connections (no request head, no SOCKS greeting) are capped per run and time out,
/// and the worker keeps serving another client. The worker runs with 1,024 descriptors at most
/// (soft = hard, so raising the soft limit changes nothing; the sandbox gives each command and
/// its forwarder 1,024 too): on the old proxy three overlay runs of 900 idle connections each
/// (about 400 each through the forwarder) exhausted it, and the other client's command failed.
#[test]
fn idle_connections_of_one_run_are_capped_and_time_out_and_another_client_still_runs() {
    let env = Env::new();
    let srv = site(&env);
    let host = format!("127.0.0.1:{}", srv.port);
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        format!(
            "concurrency = 5\n[clients.other]\nfile_read = [\"{{workspace}}/**\"]\nsystem_command = [\"*\"]\nnetwork = [\"{host}\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(env.workspace.join("idle.py"), IDLE_PY).unwrap();
    let d = env.start_as(
        &["prlimit", "--nofile=1024:1024", "--"],
        &[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())],
    );
    let pid = d.pid();
    std::thread::sleep(Duration::from_millis(500));
    let base = open_fds(pid);
    // Three hostile runs: python on the overlay (nobody looked at them), 900 idle connections each.
    let hostile: Vec<i64> = (0..3)
        .map(|i| {
            job(
                &env,
                "local",
                "execute_bash",
                &json!({ "command": format!("python3 idle.py 900 {i}") }),
            )
        })
        .collect();
    let t0 = Instant::now();
    let mut peak = base;
    while t0.elapsed() < common::scaled(Duration::from_secs(20)) {
        peak = peak.max(open_fds(pid));
        if peak >= base + 300 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1000));
    // Another client's command while the hostile runs hold what they can.
    let other = job(
        &env,
        "other",
        "execute_bash",
        &json!({ "command": format!("curl -sS -m 20 http://{host}/index.html") }),
    );
    let (st, v, e) = approved(&env, other);
    peak = peak.max(open_fds(pid));
    assert_eq!(st, "succeeded", "the other client's command: {e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    let sec = env.db("command_security.db");
    for id in hostile {
        let (st, v, e) = common::final_result(&env, id);
        peak = peak.max(open_fds(pid));
        let out = v["stdout"].as_str().unwrap_or_default().to_string();
        eprintln!(
            "worker descriptors: {base} at rest, {peak} at most; hostile run {id}: {st} {out} {e}"
        );
        // Each idle connection was closed by the other side (past the cap at once, the rest
        // after the head timeout), none stayed open until the command gave up.
        let nums: Vec<u64> = out
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(nums.len() >= 2 && nums[0] > 0, "{st} {v} {e}");
        assert_eq!(nums[0], nums[1], "idle connections left open: {out}");
        // The cap was recorded once for the run, not per connection, and not as a host to
        // approve.
        let (rows, attempts): (i64, i64) = sec
            .query_row(
                "SELECT count(*), coalesce(sum(attempts), 0) FROM egress_connections WHERE job_id = ?1 AND protocol = 'cap'",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(rows, 1, "cap records of job {id}");
        assert!(attempts >= 1, "{attempts}");
        assert!(v["egress_refused"].is_null(), "{v}");
    }
    // The worker held at most the cap per run (128 by default) plus what the rest needs.
    assert!(
        peak <= base + 3 * 128 + 80,
        "the worker held {peak} descriptors ({base} at rest)"
    );
    let log = d.log_text();
    let warnings = log.lines().filter(|l| l.contains("egress")).count();
    assert!(warnings <= 10, "{warnings} egress log lines:\n{log}");
}

/// Accept errors are paused with back-off and logged at most once per 10 s, worker-wide: eight
/// runs at the default cap (128 each) exhaust a worker of 1,024 descriptors for the head timeout
/// (the old proxy: 1,600 warnings in 30 s, 20 a second per proxy); then it serves again.
#[test]
fn accept_errors_are_logged_with_back_off_and_the_worker_recovers() {
    let env = Env::new();
    let srv = site(&env);
    let host = format!("127.0.0.1:{}", srv.port);
    let cfg = env.root.path().join("brainloop.toml");
    std::fs::write(
        &cfg,
        format!(
            "concurrency = 10\n[clients.other]\nfile_read = [\"{{workspace}}/**\"]\nsystem_command = [\"*\"]\nnetwork = [\"{host}\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(env.workspace.join("idle.py"), IDLE_PY).unwrap();
    let d = env.start_as(
        &["prlimit", "--nofile=1024:1024", "--"],
        &[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())],
    );
    let hostile: Vec<i64> = (0..8)
        .map(|i| {
            job(
                &env,
                "local",
                "execute_bash",
                &json!({ "command": format!("python3 idle.py 200 {i}") }),
            )
        })
        .collect();
    for id in hostile {
        let (st, v, e) = common::final_result(&env, id);
        eprintln!("hostile run {id}: {st} {} {e}", v["stdout"]);
    }
    let log = d.log_text();
    let failed = log.lines().filter(|l| l.contains("accept failed")).count();
    eprintln!("{failed} accept-failure lines");
    assert!(failed <= 4, "{failed} accept-failure lines:\n{log}");
    // Everything went with the runs: another client's command runs.
    let (_, st, v, e) = submit_approved(
        &env,
        "other",
        &format!("curl -sS -m 20 http://{host}/index.html"),
    );
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
}

/// (b) The worker raises its soft descriptor limit to the hard one at start-up.
#[test]
fn the_worker_raises_its_soft_descriptor_limit_to_the_hard_limit() {
    let env = Env::new();
    let d = env.start_as(&["prlimit", "--nofile=256:4096", "--"], &[]);
    assert_eq!(
        nofile(d.pid()),
        ("4096".to_string(), "4096".to_string()),
        "log:\n{}",
        d.log_text()
    );
    assert!(d.log_text().contains("4096"), "{}", d.log_text());
}

/// (c) A `$TMPDIR` of ~150 characters: the proxy's socket path no longer depends on it.
#[test]
fn network_and_overlay_commands_run_with_a_150_character_tmpdir() {
    let env = Env::new();
    let srv = site(&env);
    let mut tmp = env.root.path().join("tmp");
    while tmp.as_os_str().len() < 150 {
        tmp.push("t-long-temporary-directory");
    }
    std::fs::create_dir_all(&tmp).unwrap();
    let host = format!("127.0.0.1:{}", srv.port);
    let _d = env.start(&[("TMPDIR", tmp.to_str().unwrap())]);
    cli_ok(&env, &["grant", "local", "NETWORK", &host]);
    let (_, st, v, e) = submit_approved(
        &env,
        "local",
        &format!("curl -sS -m 20 http://{host}/index.html"),
    );
    assert_eq!(st, "succeeded", "network command: {e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    // An overlay run (it gets a proxy too): its change set waits for a human.
    let (_, st, v, e) = submit_approved(
        &env,
        "local",
        "python3 -c \"open('made.txt', 'w').write('x')\"",
    );
    assert_eq!(st, "pending_validation", "overlay command: {e} {v}");
    assert_eq!(v["effects"]["added"], 1, "{v}");
}

/// (d) A run making more than 1,000 attempts: the later refusals are recorded (and asked
/// about), and the attempts past the per-attempt records are kept as per-host aggregates.
#[test]
fn a_run_past_a_thousand_attempts_still_records_every_refused_host_and_aggregates() {
    let env = Env::new();
    let srv = site(&env);
    let host = format!("127.0.0.1:{}", srv.port);
    let _d = env.start(&[]);
    cli_ok(&env, &["grant", "local", "NETWORK", &host]);
    let cmd = format!(
        "for i in $(seq 1050); do curl -s -m 10 -o /dev/null http://{host}/index.html; done; curl -s -m 10 http://127.0.0.1:1/ http://127.0.0.1:2/ http://127.0.0.1:3/ >/dev/null; true"
    );
    let (id, st, v, e) = submit_approved(&env, "local", &cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert_eq!(
        v["egress_refused"],
        json!(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]),
        "{}",
        e
    );
    let sum = |outcome: &str, h: &str| -> (u64, u64) {
        let mut n = 0;
        let mut bytes = 0;
        for c in v["egress"].as_array().unwrap() {
            if c["outcome"] == outcome
                && format!("{}:{}", c["host"].as_str().unwrap(), c["port"]) == h
            {
                n += c["attempts"].as_u64().unwrap_or(1);
                bytes += c["bytes_down"].as_u64().unwrap();
            }
        }
        (n, bytes)
    };
    let (n, bytes) = sum("allowed", &host);
    assert_eq!(n, 1050, "attempts recorded for {host}");
    assert!(bytes >= 1050 * 13, "{bytes} bytes down");
    let records = v["egress"].as_array().unwrap().len();
    assert!(records <= 1000 + 10, "{records} records");
    // What `show` prints sums the aggregates too.
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(shown.contains("refused  127.0.0.1:3"), "{shown}");
    assert!(shown.contains("×50"), "{shown}");
}
