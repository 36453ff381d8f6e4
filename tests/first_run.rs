//! A newcomer's first run (issue 20, item 4): the README's own commands in an empty directory,
//! with no config, no `--data-dir`, no pre-created workspace. The default relative data dir and
//! workspace are made absolute at start, so the overlay works and a write shows its diff.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn brainloop(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::BIN)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run brainloop");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_readme_commands_work_in_an_empty_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let log = std::fs::File::create(dir.join("run.log")).unwrap();
    let mut worker = Command::new(common::BIN)
        .arg("run")
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    // `status` exits 0 once the worker is alive.
    let t0 = Instant::now();
    while !brainloop(dir, &["status"]).0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the worker never became ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        dir.join("workspace").is_dir(),
        "the default workspace is created"
    );
    let (ok, out, err) = brainloop(
        dir,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            r#"{"command":"ls"}"#,
            "--wait",
        ],
    );
    assert!(ok, "{out}{err}");
    // stdout is the result alone (`| jq` works): the command's.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["policy_used"], "sandboxed_readonly", "{v}");
    // A write runs on the overlay and asks with its diff (no `--wait`: it waits for a human).
    let (ok, out, err) = brainloop(
        dir,
        &[
            "enqueue",
            "execute_bash",
            "--params",
            r#"{"command":"echo hi > a.txt"}"#,
        ],
    );
    assert!(ok, "{out}{err}");
    let id = out.trim().to_string();
    let t0 = Instant::now();
    let shown = loop {
        let (ok, out, _) = brainloop(dir, &["show", &id]);
        if ok && out.contains("+++ b/a.txt") {
            break out;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no diff for job {id}: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(shown.contains("+hi"), "{shown}");
    assert!(
        !dir.join("workspace/a.txt").exists(),
        "nothing applied before approval"
    );
    let data = dir.join("brainloop-data").canonicalize().unwrap();
    let logged = std::fs::read_to_string(dir.join("run.log")).unwrap();
    assert!(
        logged.contains(&data.display().to_string()),
        "absolute data dir logged: {logged}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(worker.wait().unwrap().success());
}

#[test]
fn a_workspace_inside_the_data_dir_is_refused_at_start() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    std::fs::create_dir_all(dir.join("d/ws")).unwrap();
    let (ok, out, err) = brainloop(dir, &["run", "--data-dir", "d", "--workspace", "d/ws"]);
    assert!(!ok, "{out}{err}");
    assert!(err.contains("lies inside the data dir"), "{err}");
}
