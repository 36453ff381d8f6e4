//! Change sets attacked by the command (issue 18, items 4–6), through the real daemon. The agent
//! is the attacker: what its commands write (symlinks, modes, sizes) is hostile.
//!
//! - The worker reads the workspace only beneath it: a workspace symlink to an outside directory
//!   never puts outside content in a result, in `brainloop show`, in the log or in a manifest.
//! - No privilege bits: no setuid/setgid file reaches the workspace, on the overlay or in a
//!   direct run (the worker runs as root here, so uid 0 is mapped in the sandbox).
//! - Bounded overlays: a run over `overlay_max_bytes` / `overlay_max_inodes` ends `failed` with
//!   the key named and nothing kept; a client's pending change sets share
//!   `pending_max_bytes_per_client`.
//!
//! Everything happens in temp dirs; the "secrets" are canaries.

mod common;

use common::{cli_ok, final_result, submit, Env};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn job_dir(env: &Env, id: i64) -> std::path::PathBuf {
    env.data.join("changes").join(id.to_string())
}

/// Every file (path, content) under `dir`, symlinks as their target; sorted.
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                ));
            } else if md.is_dir() {
                out.push((format!("{rel}/"), String::new()));
                todo.push(p);
            } else {
                out.push((
                    rel,
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_workspace_symlink_to_an_outside_dir_never_puts_outside_content_anywhere() {
    common::require_sandbox();
    let env = Env::new();
    let canary = format!("CANARY-{}-outside-secret", common::now_ms());
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), format!("{canary}\n")).unwrap();
    std::fs::write(outside.join("other"), format!("{canary} other\n")).unwrap();
    // Planted in the workspace (by an earlier approved command, or the operator).
    std::os::unix::fs::symlink(&outside, env.workspace.join("evil")).unwrap();
    std::fs::create_dir_all(env.workspace.join("a")).unwrap();
    std::os::unix::fs::symlink(&outside, env.workspace.join("a/evil")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), env.workspace.join("s")).unwrap();
    let outside_before = tree(&outside);
    let d = env.start(&[]);
    for cmd in [
        "rm evil && mkdir evil && echo x > evil/secret",
        "rm a/evil && mkdir a/evil && echo x > a/evil/secret && echo y > a/evil/other",
        "rm s && echo x > s",
    ] {
        let (id, st, v, err) = submit(&env, cmd);
        assert_eq!(st, "pending_validation", "`{cmd}`: {err} {v}");
        let vid = v["validation_id"].as_str().unwrap().to_string();
        let shown = cli_ok(&env, &["show", &vid]);
        let manifest = std::fs::read_to_string(job_dir(&env, id).join("manifest.json")).unwrap();
        let listing = cli_ok(&env, &["validations", "--json"]);
        for (what, text) in [
            ("pending result", v.to_string()),
            ("show", shown.clone()),
            ("manifest", manifest.clone()),
            ("validations", listing),
            ("log", d.log_text()),
        ] {
            assert!(
                !text.contains(&canary),
                "`{cmd}`: the canary is in the {what}:\n{text}"
            );
        }
        // The replaced symlink is shown as a symlink, the new file as added (not modified).
        assert!(
            shown.contains(&format!("link:{}", outside.display())),
            "`{cmd}`: {shown}"
        );
        cli_ok(&env, &["approve", &vid]);
        let (st, v, err) = final_result(&env, id);
        assert_eq!(st, "succeeded", "`{cmd}`: {err} {v}");
        assert_eq!(
            tree(&outside),
            outside_before,
            "`{cmd}` touched the outside dir"
        );
    }
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("evil/secret")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("a/evil/other")).unwrap(),
        "y\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("s")).unwrap(),
        "x\n"
    );
    assert!(!std::fs::symlink_metadata(env.workspace.join("evil"))
        .unwrap()
        .is_symlink());
    assert!(!d.log_text().contains(&canary));
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        format!("{canary}\n")
    );
}

/// Every file beneath `dir` with setuid or setgid (symlinks not followed).
fn privileged(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                todo.push(p);
            } else if md.is_file() && md.permissions().mode() & 0o6000 != 0 {
                out.push(format!("{} {:o}", p.display(), md.permissions().mode()));
            }
        }
    }
    out
}

/// Classified `filesystem`: runs on the overlay.
const SETID_FS: &str = "cp /usr/bin/id s1; chmod 4755 s1; cp /usr/bin/id s2; chmod u+s s2; \
    install -m 4755 /usr/bin/id s3; cp /usr/bin/id s4; chmod g+s s4; ls -l; true";
/// Classified `mcp-standard` (python3 -c): asked up front, then runs directly.
const SETID_PY: &str = "python3 -c 'import os; os.close(os.open(\"p1\", os.O_CREAT | os.O_WRONLY, 0o4755))'; \
    python3 -c 'import os; os.close(os.open(\"p2\", os.O_CREAT | os.O_WRONLY, 0o644)); os.chmod(\"p2\", 0o6755)'; \
    ls -l; true";

fn remove(env: &Env, names: &[&str]) {
    for f in names {
        let _ = std::fs::remove_file(env.workspace.join(f));
    }
}

#[test]
fn no_setuid_file_reaches_the_workspace_on_the_overlay_or_in_a_direct_run() {
    // As root (uid 0 mapped in the sandbox) and, through scripts/unprivileged_tests.sh, as an
    // unprivileged worker (a setuid file would then run as the worker's own user).
    common::require_sandbox();
    let env = Env::new();
    let _d = env.start(&[]);
    for (cmd, made) in [
        (SETID_FS, &["s1", "s2", "s3", "s4"][..]),
        (SETID_PY, &["p1", "p2"][..]),
    ] {
        // On the overlay, then approved (`--always`: the next run of the same text is direct).
        let (id, st, v, err) = submit(&env, cmd);
        assert_eq!(st, "pending_validation", "{err} {v}");
        assert!(v.get("effects").is_some(), "ran on the overlay: {v}");
        let vid = v["validation_id"].as_str().unwrap().to_string();
        cli_ok(&env, &["approve", "--always", &vid]);
        let (st, v, err) = final_result(&env, id);
        assert_eq!(st, "succeeded", "{err} {v}");
        assert_eq!(
            v["policy_used"], "approved",
            "applied from the overlay: {v}"
        );
        assert_eq!(
            privileged(&env.workspace),
            Vec::<String>::new(),
            "overlay run: {v}"
        );
        let refused = |v: &Value| {
            let e = v["stderr"].as_str().unwrap_or("");
            e.contains("not permitted") || e.contains("PermissionError")
        };
        assert!(refused(&v), "{v}");
        // Directly on the workspace (always_allow).
        remove(&env, made);
        let (_, st, v, err) = submit(&env, cmd);
        assert_eq!(st, "succeeded", "{err} {v}");
        assert_eq!(v["policy_used"], "always_allow", "a direct run: {v}");
        assert!(v.get("effects").is_none(), "not on the overlay: {v}");
        assert_eq!(
            privileged(&env.workspace),
            Vec::<String>::new(),
            "direct run: {v}"
        );
        assert!(refused(&v), "{v}");
    }
    // The copies themselves worked (the filter refused only the bits).
    assert!(env.workspace.join("s1").is_file() && env.workspace.join("p2").is_file());
}

#[test]
fn an_operators_setuid_file_edited_on_the_overlay_is_applied_without_the_bit() {
    common::require_sandbox();
    let env = Env::new();
    let _d = env.start(&[]);
    std::fs::write(env.workspace.join("tool"), "#!/bin/sh\necho v1\n").unwrap();
    std::fs::set_permissions(
        env.workspace.join("tool"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    let (id, st, v, err) = submit(&env, "echo v2 >> tool");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    let shown = cli_ok(&env, &["show", &vid]);
    cli_ok(&env, &["approve", &vid]);
    let (st, v, err) = final_result(&env, id);
    assert_eq!(st, "succeeded", "{err} {v}");
    let mode = std::fs::metadata(env.workspace.join("tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("tool")).unwrap(),
        "#!/bin/sh\necho v1\nv2\n"
    );
    assert_eq!(
        mode & 0o6000,
        0,
        "applied with mode {mode:o}; shown:\n{shown}"
    );
}

const MIB: u64 = 1024 * 1024;

fn caps_env() -> Vec<(&'static str, String)> {
    vec![
        ("BRAINLOOP_OVERLAY_MAX_BYTES", (8 * MIB).to_string()),
        ("BRAINLOOP_OVERLAY_MAX_INODES", "300".to_string()),
        (
            "BRAINLOOP_PENDING_MAX_BYTES_PER_CLIENT",
            (12 * MIB).to_string(),
        ),
    ]
}

fn start(env: &Env, vars: &[(&'static str, String)]) -> common::Daemon {
    let v: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.start(&v)
}

fn assert_failed_and_gone(env: &Env, id: i64, st: &str, v: &Value, err: &str, key: &str) {
    assert_eq!(st, "failed", "{err} {v}");
    assert!(
        err.contains(key) && err.contains("nothing was kept"),
        "{err}"
    );
    assert!(!job_dir(env, id).exists(), "changes/{id} left behind");
}

#[test]
fn an_overlay_run_over_its_byte_or_inode_cap_fails_and_leaves_nothing() {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("keep.txt"), "keep\n").unwrap();
    let before = tree(&env.workspace);
    let _d = start(&env, &caps_env());
    // One big file (stopped by RLIMIT_FSIZE at the cap + 1, or by the poll).
    let (id, st, v, err) = submit(&env, "head -c 300000000 /dev/zero > big");
    assert_failed_and_gone(&env, id, &st, &v, &err, "overlay_max_bytes");
    // Many files under the byte cap each, over it together (stopped by the poll).
    let (id, st, v, err) = submit(
        &env,
        "head -c 3000000 /dev/zero > b1 && sleep 0.2 && head -c 3000000 /dev/zero > b2 && sleep 0.2 && head -c 3000000 /dev/zero > b3 && sleep 0.2 && head -c 3000000 /dev/zero > b4 && sleep 0.2 && head -c 3000000 /dev/zero > b5",
    );
    assert_failed_and_gone(&env, id, &st, &v, &err, "overlay_max_bytes");
    // Sparse files count for what an apply would write.
    let (id, st, v, err) = submit(&env, "truncate -s 5M s1 && truncate -s 5M s2");
    assert_failed_and_gone(&env, id, &st, &v, &err, "overlay_max_bytes");
    // More entries than the inode cap.
    let (id, st, v, err) = submit(&env, "mkdir -p many && touch many/f{1..400}");
    assert_failed_and_gone(&env, id, &st, &v, &err, "overlay_max_inodes");
    assert_eq!(tree(&env.workspace), before, "the workspace is untouched");
    // Under the caps: pending with its diff, and the manifest records the client and size.
    let (id, st, v, err) = submit(&env, "head -c 1000000 /dev/zero > small && echo hi > t.txt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let shown = cli_ok(&env, &["show", v["validation_id"].as_str().unwrap()]);
    assert!(shown.contains("+hi"), "{shown}");
    let m: Value =
        serde_json::from_slice(&std::fs::read(job_dir(&env, id).join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m["client_id"], "local", "{m}");
    let bytes = m["upper_bytes"].as_u64().unwrap();
    assert!((1_000_000..2 * MIB).contains(&bytes), "{m}");
}

#[test]
fn a_client_over_its_pending_budget_is_refused_until_it_answers() {
    common::require_sandbox();
    let env = Env::new();
    let before = tree(&env.workspace);
    let d = start(&env, &caps_env());
    // 6 MiB pending (under the 8 MiB run cap), then a 7 MiB run: only 6 of the 12 MiB budget
    // are left, so the run is stopped and the budget key named.
    let (first, st, v, err) = submit(&env, "head -c 6000000 /dev/urandom > a.bin");
    assert_eq!(st, "pending_validation", "{err} {v}");
    let first_vid = v["validation_id"].as_str().unwrap().to_string();
    let (id, st, v, err) = submit(&env, "head -c 7000000 /dev/urandom > b.bin");
    assert_failed_and_gone(&env, id, &st, &v, &err, "pending_max_bytes_per_client");
    assert!(err.contains("answer or deny"), "{err}");
    // With a budget the pending change set already fills, nothing runs at all.
    drop(d);
    let mut vars = caps_env();
    vars[2].1 = (4 * MIB).to_string();
    let _d = start(&env, &vars);
    let (id, st, v, err) = submit(&env, "echo hi > c.txt");
    assert_eq!(st, "failed", "{err} {v}");
    assert!(
        err.contains("pending_max_bytes_per_client")
            && err.contains("answer or deny")
            && err.contains("nothing ran"),
        "{err}"
    );
    assert!(!job_dir(&env, id).exists());
    // Denying the pending validation frees the budget.
    cli_ok(&env, &["deny", &first_vid]);
    let (st, v, err) = final_result(&env, first);
    assert_eq!(st, "denied", "{err} {v}");
    assert!(!job_dir(&env, first).exists());
    let (_, st, v, err) = submit(&env, "echo hi > d.txt");
    assert_eq!(st, "pending_validation", "{err} {v}");
    assert_eq!(tree(&env.workspace), before, "nothing applied");
}
