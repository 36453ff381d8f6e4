//! `brainloop review` driven as a person would (issue 22): the real binary in a tmux session
//! (`send-keys`, `capture-pane`) against a real worker. It lists the pending validations with the
//! selected one's diff; `a` approves (the change set is applied), `d` denies (nothing applied),
//! `L` on a protected path is refused on screen with the reason (still pending), and `Tab` + `u`
//! undoes the applied change set. tmux missing = the test fails saying CANNOT RUN HERE.

mod common;

use common::{final_result, submit, Env, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of our own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(cmd: &str) -> Tmux {
        let v = Command::new("tmux").arg("-V").output();
        assert!(
            v.as_ref().is_ok_and(|o| o.status.success()),
            "CANNOT RUN HERE: tmux is missing ({v:?}); install tmux to test `brainloop review`"
        );
        let socket = format!("brainloop-review-test-{}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "new-session",
                "-d",
                "-s",
                "review",
                "-x",
                "180",
                "-y",
                "45",
                cmd,
            ])
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session failed");
        Tmux { socket }
    }

    fn keys(&self, k: &str) {
        let ok = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "review", k])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    fn screen(&self) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "review"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until the screen shows every one of `needles`.
    fn wait_for(&self, needles: &[&str]) -> String {
        let t0 = Instant::now();
        loop {
            let s = self.screen();
            if needles.iter().all(|n| s.contains(n)) {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the screen never showed {needles:?}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

fn pending(env: &Env, cmd: &str) -> i64 {
    let (id, st, v, err) = submit(env, cmd);
    assert_eq!(st, "pending_validation", "{cmd}: {err} {v}");
    id
}

#[test]
fn review_in_tmux_approves_denies_refuses_learning_a_protected_path_and_undoes() {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(env.workspace.join("b.txt"), "x\n").unwrap();
    let _d = env.start(&[]);
    let j1 = pending(&env, "sed -i s/one/ONE/ a.txt");
    let j2 = pending(&env, "sed -i s/x/X/ b.txt");
    let _j3 = pending(&env, "echo hi > .envrc");

    let ui = Tmux::start(&format!("{BIN} --data-dir {} review", env.data.display()));
    ui.wait_for(&["pending (3)", "sed -i s/one/ONE/ a.txt", "+ONE", "-one"]);

    ui.keys("a");
    ui.wait_for(&["approve validation", &format!("(job {j1})")]);
    assert_eq!(final_result(&env, j1).0, "succeeded");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\ntwo\n"));

    ui.wait_for(&["pending (2)", "+X"]);
    ui.keys("d");
    ui.wait_for(&["deny validation", &format!("(job {j2})")]);
    assert_eq!(final_result(&env, j2).0, "denied");
    assert_eq!(read(&env, "b.txt").as_deref(), Some("x\n"));

    ui.wait_for(&["pending (1)", "+hi"]);
    ui.keys("L");
    ui.wait_for(&["--learn refused", "protected path .envrc"]);
    assert!(read(&env, ".envrc").is_none());
    ui.wait_for(&["pending (1)"]);

    ui.keys("Tab");
    ui.wait_for(&[&format!("job {j1} [approved]")]);
    ui.keys("u");
    ui.wait_for(&[&format!("undid job {j1}: 1 path(s) restored")]);
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));

    ui.keys("q");
    let t0 = Instant::now();
    while Command::new("tmux")
        .args(["-L", &ui.socket, "has-session", "-t", "review"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "review did not quit on q"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
