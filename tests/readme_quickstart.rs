//! Issue 36, "Done when": the README's quick start, run literally in an empty home directory by
//! a new login user, reaches a job result, a command that asks, approve, undo and an MCP
//! client's first call, without reading any other file.
//!
//! The test extracts the README's own fenced blocks from "## Two commands" to "## Where to go
//! next" and runs every `sh` block, in order, as that user (`runuser -l`: a login shell, its
//! environment cleared) in `~/brainloop-try`, with the binary under test — never a second build:
//! the README's `cargo install` is what puts it in `~/.cargo/bin`, so the test copies the binary
//! there and the user's `~/.profile` puts that directory on `PATH`, as rustup's installer
//! does. The `json` block is the MCP client's configuration: its command and args are started as
//! the user by rmcp's client (the one `tests/mcp_e2e.rs` uses), which makes the call the README
//! names, before and after the README's `grant` line. What the test substitutes, and only that:
//! the validation id the README's reader copies from `validations` (a 32-hex id in a command),
//! and `/home/you` (the README's name for the reader's home). Each command's expected landmark
//! must be in the README's own output block that follows it and in what the command printed.
//!
//! As root the test creates the user (useradd, removed at the end); as any other user it runs as
//! itself with a fresh `HOME` — its name says both.

mod common;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const README: &str = include_str!("../README.md");
const LONG: Duration = Duration::from_secs(120);
/// The README's install line, which the test does itself with the binary under test.
const INSTALL: &str = "cargo install --locked --profile dist --path . && ";

/// A fenced block of the README: its language and text.
#[derive(Debug, Clone)]
struct Block {
    lang: String,
    text: String,
}

/// The fenced blocks between "## Two commands" and "## Where to go next".
fn quick_start_blocks() -> (String, Vec<Block>) {
    let start = README
        .find("## Two commands")
        .expect("the README has a `## Two commands` section");
    let end = README[start..]
        .find("## Where to go next")
        .map(|e| start + e)
        .expect("the README has a `## Where to go next` section");
    let part = &README[start..end];
    let mut blocks = Vec::new();
    let mut cur: Option<Block> = None;
    for line in part.lines() {
        match (&mut cur, line.strip_prefix("```")) {
            (None, Some(lang)) => {
                cur = Some(Block {
                    lang: lang.trim().to_string(),
                    text: String::new(),
                })
            }
            (Some(_), Some("")) => blocks.push(cur.take().unwrap()),
            (Some(b), _) => {
                b.text.push_str(line);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(cur.is_none(), "an unclosed code block in the README");
    (part.to_string(), blocks)
}

/// What a command of the README must print (a text also in the README's output block after it,
/// when there is one), whether it must succeed, and whether it may be run again until it does
/// ("a moment later": read-only commands only).
struct Expect {
    command: &'static str,
    landmark: &'static str,
    success: bool,
    retry: bool,
}

const STEPS: &[Expect] = &[
    Expect {
        command: "brainloop status",
        landmark: "running",
        success: true,
        retry: true,
    },
    Expect {
        command: "brainloop enqueue ping --wait",
        landmark: "\"pong\": true",
        success: true,
        retry: false,
    },
    Expect {
        command: "\"ls -la\"}' --wait",
        landmark: "\"policy_used\": \"sandboxed_readonly\"",
        success: true,
        retry: false,
    },
    Expect {
        command: "brainloop check -- 'echo hello > notes.txt'",
        landmark: "NEEDS VALIDATION",
        success: true,
        retry: false,
    },
    Expect {
        command:
            "brainloop enqueue execute_bash --params '{\"command\": \"echo hello > notes.txt\"}'",
        // The job id the later `show 3` and `undo 3` use: the README's exact output.
        landmark: "3\n",
        success: true,
        retry: false,
    },
    Expect {
        command: "brainloop validations",
        landmark: "[pending]",
        success: true,
        retry: true,
    },
    Expect {
        command: "brainloop show 3",
        landmark: "+hello",
        success: true,
        retry: false,
    },
    Expect {
        command: "brainloop approve ",
        landmark: "approve validation",
        success: true,
        retry: false,
    },
    Expect {
        command: "cat workspace/notes.txt",
        landmark: "hello",
        success: true,
        retry: true,
    },
    Expect {
        command: "brainloop undo 3",
        landmark: "undid job 3",
        success: true,
        retry: false,
    },
    Expect {
        command: "\"rm -rf /\"}' --wait",
        landmark: "\"status\": \"blocked\"",
        success: false,
        retry: false,
    },
    Expect {
        command: "brainloop grant me SYSTEM_COMMAND '*'",
        landmark: "granted me SYSTEM_COMMAND",
        success: true,
        retry: false,
    },
];

/// The reader: a login user created for the test (as root), or the current user with a fresh
/// home. Removed, with everything the test started, when dropped.
struct Reader {
    name: Option<String>,
    home: PathBuf,
    worker: Option<Child>,
    worker_pid: Option<i32>,
    root: tempfile::TempDir,
}

impl Reader {
    fn new() -> Reader {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let name = if nix::unistd::geteuid().is_root() {
            std::fs::set_permissions(
                root.path(),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
            let name = format!("blreadme{}", std::process::id());
            let out = Command::new("useradd")
                .args(["--create-home", "--shell", "/bin/bash", "--user-group"])
                .arg("--home-dir")
                .arg(&home)
                .arg(&name)
                .output()
                .expect("CANNOT RUN HERE: useradd is missing");
            assert!(
                out.status.success(),
                "useradd {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(name)
        } else {
            std::fs::create_dir_all(&home).unwrap();
            None
        };
        let r = Reader {
            name,
            home,
            worker: None,
            worker_pid: None,
            root,
        };
        // What rustup's installer adds to the login profiles, so `cargo install` binaries are
        // found: `.profile`, and the bash ones that would shadow it when the skeleton has them.
        for name in [".profile", ".bash_profile", ".bash_login"] {
            let profile = r.home.join(name);
            if name != ".profile" && !profile.exists() {
                continue;
            }
            let mut text = std::fs::read_to_string(&profile).unwrap_or_default();
            text.push_str("\nexport PATH=\"$HOME/.cargo/bin:$PATH\"\n");
            std::fs::write(&profile, text).unwrap();
            r.chown(&profile);
        }
        r
    }

    fn chown(&self, p: &Path) {
        if let Some(n) = &self.name {
            let st = Command::new("chown")
                .arg("-R")
                .arg(format!("{n}:{n}"))
                .arg(p)
                .status()
                .unwrap();
            assert!(st.success(), "chown {}", p.display());
        }
    }

    /// What the README's `cargo install` leaves: the binary in `~/.cargo/bin` (the one
    /// under test, copied; no second build).
    fn install(&self) {
        let bin = self.home.join(".cargo/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(common::BIN, bin.join("brainloop")).unwrap();
        self.chown(&self.home.join(".cargo"));
    }

    /// `script` in a login shell of the reader.
    fn login_shell(&self, script: &str) -> Command {
        match &self.name {
            Some(n) => {
                let mut c = Command::new("runuser");
                c.args(["-l", n, "-c", script]);
                c
            }
            None => {
                let mut c = Command::new("bash");
                c.args(["-l", "-c", script])
                    .env_clear()
                    .env("HOME", &self.home)
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                    .env("LANG", "C.UTF-8");
                c
            }
        }
    }

    /// `block` run in `~/brainloop-try` (the README's "second shell in the same directory").
    fn run(&self, block: &str) -> Output {
        self.login_shell(&format!("cd ~/brainloop-try && {block}"))
            .stdin(Stdio::null())
            .output()
            .expect("run a README block")
    }

    fn try_dir(&self) -> PathBuf {
        self.home.join("brainloop-try")
    }

    /// The worker's pid, from its lock file.
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.try_dir().join("brainloop-data/brainloop.lock"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(pid) = self.worker_pid {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if let Some(mut w) = self.worker.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if let Some(n) = &self.name {
            let _ = Command::new("userdel").args(["-r", n]).output();
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A 32-hex-digit word: a validation id.
fn is_validation_id(w: &str) -> bool {
    w.len() == 32
        && w.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The README's call, through the MCP server its `json` block configures: (is_error, content).
async fn mcp_call(
    service: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    args: &Value,
) -> (bool, Value) {
    let Value::Object(m) = args.clone() else {
        panic!("the README's call is not a JSON object: {args}")
    };
    let call = service.call_tool(CallToolRequestParams::new("brainloop").with_arguments(m));
    let r: CallToolResult = tokio::time::timeout(LONG, call)
        .await
        .expect("the MCP call answered in time")
        .expect("tools/call");
    let body = r.structured_content.clone().expect("structured content");
    (r.is_error == Some(true), body)
}

// Long because it is the README's walkthrough in order: the worker's start, each command of the
// README with its expectation, the MCP client's calls around the grant, and the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_quick_start_runs_literally_as_a_new_login_user_created_when_root_else_as_the_current_user(
) {
    common::require_sandbox();
    let (part, blocks) = quick_start_blocks();
    let mut reader = Reader::new();

    // "## Two commands": install, then the daemon in the foreground of the first shell.
    let first = blocks
        .first()
        .filter(|b| b.lang == "sh")
        .expect("the quick start opens with an sh block");
    let mut lines = first.text.lines();
    let start = lines.next().unwrap_or_default();
    let daemon = start
        .strip_prefix(INSTALL)
        .unwrap_or_else(|| panic!("the first command is not `{INSTALL}…`: {start}"));
    assert!(daemon.ends_with("brainloop run"), "{daemon}");
    // The second line is the test suite this test is part of.
    for l in lines {
        assert!(
            l.starts_with("cargo test"),
            "an unknown line in the first block: {l}"
        );
    }
    reader.install();
    let log = std::fs::File::create(reader.root.path().join("worker.log")).unwrap();
    let worker = reader
        .login_shell(daemon)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the worker");
    reader.worker = Some(worker);
    assert!(
        part.contains("cd ~/brainloop-try"),
        "the README says where the second shell goes"
    );

    // The walkthrough, block by block.
    let mut steps = STEPS.iter();
    let mut validation_id: Option<String> = None;
    let mut mcp: Option<rmcp::service::RunningService<rmcp::RoleClient, ()>> = None;
    let mcp_args: Value = {
        let call = r#"{"action": "execute_bash", "params": {"command": "ls"}}"#;
        assert!(
            part.contains(call),
            "the README names the MCP client's first call"
        );
        serde_json::from_str(call).unwrap()
    };
    let mut i = 1;
    while i < blocks.len() {
        let b = &blocks[i];
        let shown = blocks.get(i + 1).filter(|n| n.lang == "text");
        i += if shown.is_some() { 2 } else { 1 };
        match b.lang.as_str() {
            "sh" => {}
            "json" => {
                // The MCP client's configuration: start its server as the reader, call.
                let cfg: Value = serde_json::from_str(&b.text).expect("the README's json block");
                let home = reader.home.display().to_string();
                let server = &cfg["mcpServers"]["brainloop"];
                let cmd = server["command"]
                    .as_str()
                    .expect("mcpServers.brainloop.command")
                    .replace("/home/you", &home);
                let args: Vec<String> = server["args"]
                    .as_array()
                    .expect("mcpServers.brainloop.args")
                    .iter()
                    .map(|a| a.as_str().unwrap_or_default().replace("/home/you", &home))
                    .collect();
                let mut c = match &reader.name {
                    Some(n) => {
                        let mut c = tokio::process::Command::new("runuser");
                        c.args(["-u", n, "--"]).arg(&cmd);
                        c
                    }
                    None => tokio::process::Command::new(&cmd),
                };
                c.args(&args).current_dir("/");
                let (transport, _) = TokioChildProcess::builder(c)
                    .stderr(std::fs::File::create(reader.root.path().join("mcp.log")).unwrap())
                    .spawn()
                    .expect("start the MCP server the README configures");
                let service = ().serve(transport).await.expect("MCP initialize");
                let (is_error, body) = mcp_call(&service, &mcp_args).await;
                println!("MCP {cmd} {args:?}: {mcp_args} → {body}");
                // A new client runs almost nothing: refused, naming the grant.
                assert!(is_error, "{body}");
                assert_eq!(body["status"], "denied", "{body}");
                let err = body["error"].as_str().unwrap_or_default();
                let landmark = "lacks SYSTEM_COMMAND for ls";
                assert!(err.contains(landmark), "{body}");
                assert!(err.contains("brainloop grant me SYSTEM_COMMAND"), "{body}");
                let readme_says = shown.map(|s| s.text.as_str()).unwrap_or_default();
                assert!(
                    readme_says.contains(landmark),
                    "the README shows the refusal"
                );
                mcp = Some(service);
                continue;
            }
            other => panic!(
                "an unexpected `{other}` block in the quick start:\n{}",
                b.text
            ),
        }
        // A command: substitute the validation id the reader copies, run it as the reader.
        let block = b
            .text
            .split(' ')
            .map(|w| match (&validation_id, is_validation_id(w.trim())) {
                (Some(v), true) => format!("{v}{}", &w[w.trim_end().len()..]),
                _ => w.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ");
        let step = steps
            .next()
            .unwrap_or_else(|| panic!("a README command this test does not know: {block}"));
        assert!(
            b.text.contains(step.command),
            "README command `{}` where `{}` was expected: change STEPS with the README",
            b.text.trim(),
            step.command
        );
        if let Some(s) = shown {
            assert!(
                s.text.contains(step.landmark),
                "the README's output of `{}` does not show `{}`",
                b.text.trim(),
                step.landmark
            );
        }
        let t0 = Instant::now();
        let out = loop {
            let out = reader.run(block.trim_end());
            let t = text(&out);
            let good = out.status.success() == step.success
                && if step.landmark == "3\n" {
                    String::from_utf8_lossy(&out.stdout) == "3\n"
                } else {
                    t.contains(step.landmark)
                };
            if good {
                break out;
            }
            assert!(
                step.retry && t0.elapsed() < LONG,
                "`{}` as the reader printed (exit {:?}), not `{}`:\n{t}\nworker log:\n{}",
                block.trim(),
                out.status.code(),
                step.landmark,
                std::fs::read_to_string(reader.root.path().join("worker.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        println!("$ {}\n{}", block.trim(), text(&out));
        if block.contains("--wait") {
            // Issue 56: the result JSON alone on stdout (`| jq` works), the id on stderr.
            let json: Result<Value, _> = serde_json::from_slice(&out.stdout);
            assert!(
                json.is_ok(),
                "`{}`'s stdout is not one JSON document: {}",
                block.trim(),
                String::from_utf8_lossy(&out.stdout)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains(" queued"),
                "`{}` does not name its job on stderr",
                block.trim()
            );
        }
        if reader.worker_pid.is_none() {
            reader.worker_pid = reader.pid();
        }
        if step.command == "brainloop validations" {
            validation_id = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .find(|w| is_validation_id(w))
                .map(str::to_string);
            assert!(validation_id.is_some(), "{}", text(&out));
        }
        if step.command.starts_with("brainloop undo") {
            assert!(
                !reader.try_dir().join("workspace/notes.txt").exists(),
                "undo removed notes.txt"
            );
        }
        if step.command.starts_with("brainloop grant") {
            // After the grant: the same call runs.
            let service = mcp.as_ref().expect("the MCP block comes before the grant");
            let (is_error, body) = mcp_call(service, &mcp_args).await;
            assert!(!is_error, "{body}");
            assert_eq!(body["status"], "succeeded", "{body}");
            assert_eq!(
                body["result"]["policy_used"], "sandboxed_readonly",
                "{body}"
            );
        }
    }
    assert!(
        steps.next().is_none(),
        "the README lost a command this test expects"
    );
    if let Some(s) = mcp.take() {
        let _ = s.cancel().await;
    }

    // "Stop": Ctrl-C in the first shell; the worker exits 0 and `status` says stopped (exit 3).
    let pid = reader.worker_pid.expect("the worker's pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut worker = reader.worker.take().unwrap();
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = worker.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < LONG, "the worker did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(100));
    };
    reader.worker_pid = None;
    assert!(
        st.success(),
        "the first shell's `brainloop run` exit: {st:?}"
    );
    let out = reader.run("brainloop status");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("stopped"), "{}", text(&out));
}
