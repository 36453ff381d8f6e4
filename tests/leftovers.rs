//! Start-up reaping of commands a crashed worker left behind (`bash::leftovers`).
//!
//! Regression found by the soak (`scripts/soak.sh`): after a `kill -9` of the worker its sandbox
//! helpers are zombies until init reaps them (about a second here); a restart within that window
//! counted them as "killed commands left running by the previous run processes=8" — a false
//! alarm in the log, nothing was running. Only our own child processes are involved here.

mod common;

use brainloop::bash::leftovers::{reap_previous, record, DIR};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

fn state(pid: u32) -> char {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    s[s.rfind(')').unwrap() + 2..].chars().next().unwrap()
}

#[test]
fn zombies_are_not_counted_and_live_members_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    // A zombie leading its own process group: exits, and we do not wait for it yet.
    let mut zombie = Command::new("true").process_group(0).spawn().unwrap();
    let t0 = Instant::now();
    while state(zombie.id()) != 'Z' {
        assert!(t0.elapsed() < Duration::from_secs(10), "child never exited");
        std::thread::sleep(Duration::from_millis(5));
    }
    record(dir.path(), 1, zombie.id() as i32).unwrap();
    // A live command in its own process group.
    let mut live = Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    record(dir.path(), 2, live.id() as i32).unwrap();
    assert!(dir.path().join(DIR).join("1").exists());
    assert!(dir.path().join(DIR).join("2").exists());

    let killed = reap_previous(dir.path());

    assert_eq!(killed, 1, "only the live command counts as left running");
    let st = live.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(9),
        "the live command was killed"
    );
    zombie.wait().unwrap();
    assert!(!dir.path().join(DIR).join("1").exists(), "records removed");
    assert!(!dir.path().join(DIR).join("2").exists(), "records removed");
}

/// Private tmp dirs of jobs a killed worker was running are removed when the worker starts again
/// — its own only: another instance's (another data dir) and unrelated dirs stay.
#[test]
fn a_restart_removes_its_own_leftover_private_tmp_dirs() {
    let env = common::Env::new();
    let tmp = env.root.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // The data dir must exist for its canonical path (the tag) to be what the worker computes.
    let (st, out, err) = env.cli(&["init"]);
    assert!(st.success(), "{out}{err}");
    let mine = brainloop::sandbox::tmp_prefix(&env.data);
    let other = brainloop::sandbox::tmp_prefix(&env.root.path().join("another-data"));
    std::fs::create_dir_all(tmp.join(format!("{mine}41-aaaaaa/sub"))).unwrap();
    std::fs::create_dir_all(tmp.join(format!("{other}41-bbbbbb"))).unwrap();
    std::fs::create_dir_all(tmp.join("unrelated")).unwrap();
    let _d = env.start(&[("TMPDIR", tmp.to_str().unwrap())]);
    let names = || -> Vec<String> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let t0 = Instant::now();
    while names().iter().any(|n| n.starts_with(&mine)) {
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", names());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Wait for a job to run, so the start-up is surely over before checking what stayed.
    let id = env.insert("ping", "{}");
    env.wait_final(1, Duration::from_secs(30));
    assert!(env.result(id).is_some());
    let left = names();
    assert!(left.contains(&format!("{other}41-bbbbbb")), "{left:?}");
    assert!(left.contains(&"unrelated".to_string()), "{left:?}");
}

/// Fail closed on bookkeeping (issue 21): a command whose process group cannot be recorded is
/// stopped before it runs, and its job fails saying why.
#[test]
fn a_command_whose_process_group_cannot_be_recorded_does_not_run() {
    let env = common::Env::new();
    let _d = env.start(&[]);
    // The record's directory replaced by a file: every record fails (even as root).
    let running = env.data.join(DIR);
    let _ = std::fs::remove_dir_all(&running);
    std::fs::write(&running, "not a directory").unwrap();
    let id = common::job(
        &env,
        "local",
        "execute_bash",
        &serde_json::json!({"command": "echo RAN-ANYWAY"}),
    );
    let (st, v, e) = common::final_result(&env, id);
    assert_eq!(st, "failed", "{v}");
    assert!(
        e.contains("cannot record the command's process group"),
        "{e}"
    );
    assert!(!v.to_string().contains("RAN-ANYWAY"), "{v}");
}
