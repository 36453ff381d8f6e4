//! Issue 19 item 4: what a confined command learns from `/proc` about the worker and the host.
//!
//! The real worker runs an agent's `execute_bash` (default client `local`, no human): once in
//! the readonly set (runs at once) and once on the overlay (runs at once, its change set then
//! waits for a human; the output is in the pending result). The command reads PID 1's
//! `cmdline`, `environ`, `mountinfo`, its own `mountinfo` and descriptors, and a descriptor the
//! worker inherited from its parent.
//!
//! Sensitive, so never in the output: the sandbox spec (its JSON: the command's rules, every
//! path it may read or write, the environment), the data dir's path (where the databases, the
//! change sets and the journal live: the overlay's upper layer is under it), and any
//! descriptor the worker inherited (a canary file opened by this test without close-on-exec).
//! Not hidden (stated in docs/security.md): the mount points of the host's file systems in
//! `mountinfo`, and the workspace path (the command's own working dir).

mod common;

use common::{require_sandbox, submit, Env};
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use std::os::fd::AsRawFd;

fn probe(fd: i32) -> String {
    format!(
        "cat /proc/1/cmdline | tr '\\0' ' '; echo; \
         for f in /proc/$$/fd/*; do echo \"fd $f -> $(readlink $f)\"; done; \
         cat /dev/fd/{fd} /proc/$$/fd/{fd}; \
         cat /proc/1/environ | tr '\\0' ' '; echo; \
         grep -h overlay /proc/self/mountinfo; \
         cat /proc/1/mountinfo /proc/self/mountinfo"
    )
}

fn assert_nothing_sensitive(what: &str, out: &str, data_dir: &str, canary: &str) {
    // The one part of the data dir an overlay run sees, by design (issue 35): its client's
    // runner cache (`bash::runners`), mounted alone. Any other mention of the data dir — the
    // dir itself, a database, another client's cache dir listed — still fails.
    let cache = format!("{data_dir}/runner-cache/");
    let mut rest = String::new();
    for (i, part) in out.split(&cache).enumerate() {
        if i == 0 {
            rest.push_str(part);
        } else {
            // the 16-hex directory name of this client's cache, then what follows it
            let after = part.get(16..).unwrap_or("");
            assert!(
                part.len() >= 16 && part[..16].chars().all(|c| c.is_ascii_hexdigit()),
                "{what}: a runner-cache path that is not one client's dir: {part:.80}"
            );
            rest.push_str(after);
        }
    }
    let out = rest.as_str();
    for leak in [
        "--spec",
        "\"set\":",
        "\"read\":[",
        "\"env\":[",
        "GIT_CONFIG_KEY",
        data_dir,
        canary,
        "FD-CANARY-CONTENT",
    ] {
        assert!(
            !out.contains(leak),
            "{what}: the command saw {leak:?}:\n{out}"
        );
    }
}

#[test]
fn the_spec_the_data_dir_and_inherited_descriptors_stay_out_of_the_sandbox() {
    require_sandbox();
    let env = Env::new();
    let canary = env.root.path().join("fd-canary-secret.txt");
    std::fs::write(&canary, "FD-CANARY-CONTENT").unwrap();
    let file = std::fs::File::open(&canary).unwrap();
    // Inherited by the worker (spawned below), as from a careless parent.
    fcntl(&file, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
    let fd = file.as_raw_fd();
    let _d = env.start(&[]);
    let data_dir = env.data.canonicalize().unwrap().display().to_string();
    let canary = canary.display().to_string();

    // Readonly set: runs at once.
    let (id, status, result, error) = submit(&env, &probe(fd));
    assert_eq!(status, "succeeded", "job {id}: {error} {result}");
    let out = format!("{}{}", result["stdout"], result["stderr"]);
    assert!(
        out.contains("sandbox-exec"),
        "the probe read /proc/1/cmdline: {out}"
    );
    assert!(out.contains(" / / "), "the probe read a mountinfo: {out}");
    assert_nothing_sensitive("readonly set", &out, &data_dir, &canary);

    // Overlay: the upper layer lives under the data dir.
    let (id, status, result, error) = submit(&env, &format!("echo x > o.txt; {}", probe(fd)));
    assert_eq!(status, "pending_validation", "job {id}: {error} {result}");
    let out = format!("{}{}", result["stdout"], result["stderr"]);
    assert!(
        out.contains("upperdir="),
        "the probe saw the overlay mount: {out}"
    );
    assert_nothing_sensitive("overlay run", &out, &data_dir, &canary);
    drop(file);
}
