//! An apply that tells the truth (issue 50, findings 1 and 2), through the real daemon: an apply
//! that stops on an I/O error half-way (the workspace's file system full) ends with a result
//! naming what landed, what did not and why, a journal row `undo` takes the landed part back
//! with; an apply cut by kill -9 at random points leaves no temp file in the workspace after the
//! restart, and its undo restores the workspace. And one decision per validation (finding 4,
//! locally): of two `approve` / `deny` at once, the first committed stands and the other CLI
//! exits non-zero naming who decided what. Temp dirs only; the disk-full test mounts a 1 MiB
//! tmpfs as root.

mod common;

use common::{cli_ok, settled, submit, Env};
use std::path::Path;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(120);

/// The worker's temp files (`.brainloop-*`) anywhere under `dir`.
fn temp_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".brainloop-") {
                out.push(e.path().display().to_string());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    out
}

/// The journal row of job `id`: (state, applied_paths, undone_at).
fn journal(env: &Env, id: i64) -> Option<(String, Option<String>, Option<i64>)> {
    use rusqlite::OptionalExtension;
    env.db("command_security.db")
        .query_row(
            "SELECT state, applied_paths, undone_at FROM journal WHERE job_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .unwrap()
}

fn paths(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list of paths: {v}"))
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect()
}

/// A tmpfs mounted at the workspace for the test's life (unmounted on drop).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        assert!(
            nix::unistd::geteuid().is_root(),
            "CANNOT RUN HERE: mounting a small tmpfs as the workspace needs root"
        );
        let st = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "CANNOT RUN HERE: mount -t tmpfs failed");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn an_apply_stopped_by_a_full_disk_names_what_landed_and_undo_takes_it_back_as_root() {
    common::require_sandbox();
    let env = Env::new();
    let _fs = Tmpfs::mount(&env.workspace, "1m");
    let d = env.start(&[]);
    // Three files of 400 kB: the first two fit the 1 MiB workspace, the third does not.
    let cmd = "head -c 400000 /dev/zero > a1 && head -c 400000 /dev/zero > a2 && head -c 400000 /dev/zero > a3";
    let (id, st, v, err) = submit(&env, cmd);
    assert_eq!(st, "pending_validation", "{err} {v}");
    cli_ok(&env, &["approve", &common::vid(&v)]);
    let (st, v, err) = common::final_result(&env, id);
    assert_eq!(st, "failed", "{err} {v}");
    assert_eq!(v["status"], "apply_failed", "not a conflict: {v}");
    assert_eq!(paths(&v["applied"]), ["a1", "a2"], "{v}");
    assert_eq!(paths(&v["not_applied"]), ["a3"], "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("No space left") && e.contains("a3") && e.contains("brainloop undo"),
        "the error says why, where, and how to take it back: {e}"
    );
    assert_eq!(v["undo"], format!("brainloop undo {id}"), "{v}");
    assert!(env.workspace.join("a1").exists() && env.workspace.join("a2").exists());
    assert!(!env.workspace.join("a3").exists());
    assert_eq!(temp_files(&env.workspace), Vec::<String>::new());
    let (state, applied, undone) = journal(&env, id).expect("a journal row for the applied part");
    assert_eq!(state, "partial");
    assert_eq!(applied.as_deref(), Some(r#"["a1","a2"]"#));
    assert_eq!(undone, None);
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(
        shown.contains("change set partly applied") && shown.contains("a1, a2"),
        "{shown}"
    );
    let out = cli_ok(&env, &["undo", &id.to_string()]);
    assert!(out.contains("2 path(s) restored"), "{out}");
    let left: Vec<_> = std::fs::read_dir(&env.workspace)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the workspace is as before: {left:?}");
    assert!(journal(&env, id).unwrap().2.is_some(), "marked undone");
    d.kill9();
}

/// A small xorshift generator seeded from the clock (printed, to replay a failure).
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("APPLY_TRUTH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| common::now_ms() as u64 | 1);
        eprintln!("APPLY_TRUTH_SEED={seed}");
        Rng(seed)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The state of job `id`'s apply in `db::applies`, if it started.
fn apply_state(env: &Env, id: i64) -> Option<String> {
    use rusqlite::OptionalExtension;
    env.lifecycle()
        .query_row(
            "SELECT state FROM applies WHERE job_id = ?1 ORDER BY rowid DESC LIMIT 1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
}

#[test]
fn kill_9_at_random_points_of_a_10k_file_apply_leaves_no_temp_file_and_undo_restores_in_the_root_pass_only(
) {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("keep.txt"), "mine\n").unwrap();
    let src = env.workspace.join("src");
    std::fs::create_dir(&src).unwrap();
    for i in 1..=9_999 {
        std::fs::write(src.join(format!("f{i}")), format!("{i}\n")).unwrap();
    }
    let mut rng = Rng::new();
    // Never learned (five approvals would teach `cp -r` and apply it unasked).
    let never_learn = [("BRAINLOOP_SIGNATURE_APPROVALS", "1000")];
    let mut d = env.start(&never_learn);
    // One directory and 9,999 files in it: 10,000 paths, the change set's cap.
    let cmd = "cp -r src d";
    let (mut mid_apply, mut temps_at_kill) = (0, 0);
    // The same command asked again within 2 s is a duplicate warning, not a new request.
    let mut asked = Instant::now() - Duration::from_secs(3);
    for round in 0..10 {
        if let Some(left) = Duration::from_millis(2_100).checked_sub(asked.elapsed()) {
            std::thread::sleep(left);
        }
        asked = Instant::now();
        let (id, st, v, err) = submit(&env, cmd);
        assert_eq!(
            st, "pending_validation",
            "round {round}: {err} {}",
            v["policy_used"]
        );
        cli_ok(&env, &["approve", &common::vid(&v)]);
        let t0 = Instant::now();
        while apply_state(&env, id).is_none() {
            assert!(t0.elapsed() < LONG, "round {round}: the apply never began");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(rng.below(600)));
        d.kill9();
        let landed = std::fs::read_dir(env.workspace.join("d")).map_or(0, |r| r.count());
        let temps = temp_files(&env.workspace).len();
        mid_apply += usize::from(landed < 9_999 || temps > 0);
        temps_at_kill += usize::from(temps > 0);
        let t0 = Instant::now();
        d = env.start_within(&[], &never_learn, Duration::from_secs(120));
        eprintln!(
            "round {round}: killed with {landed} of 9,999 files and {temps} temp file(s) in the workspace; ready again in {:?}",
            t0.elapsed()
        );
        let (st, v, err) = settled(&env, id);
        assert_eq!(
            st, "succeeded",
            "round {round}: {err} {} {}",
            v["status"], v["recovered"]
        );
        assert_eq!(
            temp_files(&env.workspace),
            Vec::<String>::new(),
            "round {round}: the restart removed the temp files"
        );
        let n = std::fs::read_dir(env.workspace.join("d")).unwrap().count();
        assert_eq!(n, 9_999, "round {round}: applied whole");
        assert_eq!(journal(&env, id).unwrap().0, "applied", "round {round}");
        let out = cli_ok(&env, &["undo", &id.to_string()]);
        assert!(
            out.contains("10000 path(s) restored"),
            "round {round}: {out}"
        );
        assert!(!env.workspace.join("d").exists(), "round {round}");
        assert_eq!(
            std::fs::read_to_string(env.workspace.join("keep.txt")).unwrap(),
            "mine\n"
        );
        assert_eq!(temp_files(&env.workspace), Vec::<String>::new());
    }
    eprintln!(
        "10 kills during a 10,000-path apply: {mid_apply} landed mid-apply, {temps_at_kill} left a temp file at the kill; every one recovered and undone"
    );
    assert!(
        mid_apply >= 3,
        "too few kills landed inside the apply ({mid_apply} of 10) for the test to mean anything"
    );
    d.kill9();
}

/// Runs `brainloop approve ID` and `brainloop deny ID` at the same moment; their
/// (exit success, stdout + stderr), approve first.
fn approve_and_deny_at_once(env: &Env, vid: &str) -> [(bool, String); 2] {
    let spawn = |verb: &str| {
        std::process::Command::new(common::BIN)
            .args([verb, vid])
            .env("BRAINLOOP_DATA_DIR", &env.data)
            .env("BRAINLOOP_TEST_ACTIONS", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("approve"), spawn("deny"));
    [a, b].map(|c| {
        let o = c.wait_with_output().unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    })
}

#[test]
fn of_two_decisions_at_once_the_first_stands_and_the_second_cli_is_refused() {
    common::require_sandbox();
    let env = Env::new();
    // Never learned: the approvals of these edits would teach `> f` and apply it unasked.
    let d = env.start(&[("BRAINLOOP_SIGNATURE_APPROVALS", "1000")]);
    let mut outcomes = Vec::new();
    for round in 0..6 {
        // Half the rounds with the worker stopped, so both decisions wait unconsumed.
        let stopped = round % 2 == 1;
        let (id, st, v, err) = submit(&env, &format!("echo {round} > f{round}"));
        assert_eq!(st, "pending_validation", "{err} {v}");
        let vid = common::vid(&v);
        if stopped {
            d.signal(nix::sys::signal::Signal::SIGSTOP);
        }
        let [a, b] = approve_and_deny_at_once(&env, &vid);
        if stopped {
            d.signal(nix::sys::signal::Signal::SIGCONT);
        }
        assert!(
            a.0 != b.0,
            "round {round}: exactly one decision is accepted: approve {a:?}, deny {b:?}"
        );
        let (won, lost) = if a.0 {
            ("approve", &b.1)
        } else {
            ("deny", &a.1)
        };
        // Refused before (`was already decided: …`) or after the worker took the first
        // (`is already approved: …`): either way naming the decision that stood.
        assert!(
            lost.contains(&format!("validation {vid} "))
                && lost.contains(&format!(": {won} by "))
                && (lost.contains("already decided") || lost.contains("is already ")),
            "round {round}: the second CLI says who decided what: {lost}"
        );
        let rows: i64 = env
            .db("command_security.db")
            .query_row(
                "SELECT count(*) FROM approvals WHERE validation_id = ?1",
                [&vid],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 1, "round {round}: one decision row");
        let (st, v, err) = common::final_result(&env, id);
        let expect = if won == "approve" {
            "succeeded"
        } else {
            "denied"
        };
        assert_eq!(
            st, expect,
            "round {round}: the job follows the decision that stood: {err} {v}"
        );
        let shown = cli_ok(&env, &["show", &vid]);
        assert!(
            shown.contains(&format!(": {won}")) && shown.contains("decided by"),
            "round {round}: show names the decision acted on: {shown}"
        );
        // A third decision after the fact is refused the same way.
        let (st3, out3, err3) = env.cli(&["deny", &vid]);
        assert!(!st3.success(), "round {round}: {out3}{err3}");
        outcomes.push(won);
    }
    eprintln!("decisions that stood: {outcomes:?}");
    d.kill9();
}
