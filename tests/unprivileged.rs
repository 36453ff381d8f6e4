//! Issue 20 item 3: the shipped unit runs the worker as a dedicated user, so every process-level
//! security test must also pass without root. Run as root (as CI and this machine do), this test
//! runs `scripts/unprivileged_tests.sh`: the security test binaries again as uid 65534 (no
//! writable cgroup there: the rlimit fallbacks are the active limits). Run as a non-root user,
//! the whole suite already is that run, and the test says so in its name.

use std::process::Command;

#[test]
fn the_security_tests_pass_as_uid_65534_when_run_as_root_else_this_suite_is_the_unprivileged_run() {
    if !nix::unistd::geteuid().is_root() {
        println!("not root: every test of this suite already ran unprivileged");
        return;
    }
    let repo = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg(format!("{repo}/scripts/unprivileged_tests.sh"))
        .env("CARGO", env!("CARGO"))
        .output()
        .expect("cannot run scripts/unprivileged_tests.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success(),
        "security tests failed as uid 65534:\n{text}"
    );
    // The table names every binary it ran; a run that ran nothing is a failure too.
    for t in [
        "sandbox",
        "execute_bash",
        "overlay_adversarial",
        "graded_sandbox",
        "deadlines",
        "run_on_use",
        // Issue 50's process tests (their root-only parts end in `_as_root`, apply_truth's long
        // kill -9 test in `_in_the_root_pass_only`).
        "apply_truth",
        "db_files_live",
        "fleet_decisions",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(t) && l.contains("test result: ok")),
            "{t} did not pass as uid 65534:\n{text}"
        );
    }
}
