//! `brainloop review` driven as a person would (issue 22): the real binary in a tmux session
//! (`send-keys`, `capture-pane`) against a real worker. It lists the pending validations with the
//! selected one's diff; `a` approves (the change set is applied), `d` denies (nothing applied),
//! `L` on a protected path is refused on screen with the reason (still pending), and `Tab` + `u`
//! undoes the applied change set. `d` asks for a confirmation (issue 36): any other key cancels,
//! `y` denies. At 80×24 (issue 36) the selected validation's diff is on screen with its command
//! and the keys. tmux missing = the test fails saying CANNOT RUN HERE.

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
        Tmux::start_sized(cmd, 180, 45)
    }

    fn start_sized(cmd: &str, width: u16, height: u16) -> Tmux {
        let v = Command::new("tmux").arg("-V").output();
        assert!(
            v.as_ref().is_ok_and(|o| o.status.success()),
            "CANNOT RUN HERE: tmux is missing ({v:?}); install tmux to test `brainloop review`"
        );
        let socket = format!(
            "brainloop-review-test-{}-{width}x{height}",
            std::process::id()
        );
        let ok = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "new-session",
                "-d",
                "-s",
                "review",
                "-x",
                &width.to_string(),
                "-y",
                &height.to_string(),
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
    // `d` asks first; another key cancels it, and nothing is decided.
    ui.keys("d");
    ui.wait_for(&[&format!("DENY job {j2}"), "y or d: deny"]);
    ui.keys("x");
    ui.wait_for(&[&format!("deny of job {j2} cancelled")]);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(common::settled(&env, j2).0, "pending_validation");
    ui.wait_for(&["pending (2)"]);
    ui.keys("d");
    ui.wait_for(&[&format!("DENY job {j2}")]);
    ui.keys("y");
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

/// Issue 36: at 80×24 the screen hid the diff behind the reasons (a 35/65 split and an 8-row
/// applied list). Now the selected validation's command and diff, the pending list and the keys
/// all show, and `d` still asks before it denies.
#[test]
fn review_at_80x24_shows_the_diff_and_the_keys_and_confirms_deny() {
    common::require_sandbox();
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(env.workspace.join("b.txt"), "x\n").unwrap();
    let _d = env.start(&[]);
    let j1 = pending(&env, "sed -i s/one/ONE/ a.txt");
    let j2 = pending(&env, "sed -i s/x/X/ b.txt");
    // An applied change set too, so the applied list takes its rows.
    let j0 = pending(&env, "echo applied > c.txt");
    let v0: String = env
        .output()
        .query_row("SELECT id FROM validations WHERE job_id = ?1", [j0], |r| {
            r.get(0)
        })
        .unwrap();
    let (st, out, err) = env.cli(&["approve", &v0]);
    assert!(st.success(), "{out}{err}");
    assert_eq!(final_result(&env, j0).0, "succeeded");

    let ui = Tmux::start_sized(
        &format!("{BIN} --data-dir {} review", env.data.display()),
        80,
        24,
    );
    let s = ui.wait_for(&[
        "pending (2)",
        "sed -i s/one/ONE/ a.txt",
        "-one",
        "+ONE",
        "d deny",
    ]);
    assert_eq!(s.lines().count().min(24), s.lines().count(), "{s}");
    assert!(
        s.contains(&format!("job {j0}")),
        "the applied list shows: {s}"
    );
    ui.keys("d");
    ui.wait_for(&[&format!("DENY job {j1}")]);
    ui.keys("Escape");
    ui.wait_for(&["cancelled"]);
    assert_eq!(common::settled(&env, j1).0, "pending_validation");
    ui.keys("d");
    ui.wait_for(&[&format!("DENY job {j1}")]);
    ui.keys("d");
    ui.wait_for(&["deny validation", &format!("(job {j1})")]);
    assert_eq!(final_result(&env, j1).0, "denied");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("one\ntwo\n"));
    ui.wait_for(&["pending (1)", "+X"]);
    assert_eq!(common::settled(&env, j2).0, "pending_validation");
    ui.keys("q");
}
