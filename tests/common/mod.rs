//! Process-level test harness: starts the real `brainloop` binary on a temp data dir, inserts
//! rows with a separate SQLite connection, signals the process, and reads the databases.
#![allow(dead_code)]

pub mod collector;
pub mod fleet;
pub mod http_server;
pub mod mock_llm;
pub mod pg;

use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

/// Liveness deadlines (not performance assertions) stretched by `BRAINLOOP_TEST_TIME_SCALE`
/// (default 1): the kernel matrix runs the tests under QEMU without KVM, several times slower.
pub fn scaled(d: Duration) -> Duration {
    let k: u32 = std::env::var("BRAINLOOP_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&k| k >= 1)
        .unwrap_or(1);
    d * k
}

pub struct Env {
    pub root: tempfile::TempDir,
    pub data: PathBuf,
    pub workspace: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let root = tempfile::tempdir().expect("tempdir");
        let data = root.path().join("data");
        let workspace = root.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        Env {
            root,
            data,
            workspace,
        }
    }

    /// `brainloop <args>` with the data dir set; returns (status, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let out = Command::new(BIN)
            .args(args)
            .env("BRAINLOOP_DATA_DIR", &self.data)
            .env("BRAINLOOP_TEST_ACTIONS", "1")
            .output()
            .expect("run brainloop");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn db(&self, file: &str) -> Connection {
        let c = Connection::open(self.data.join(file)).expect("open db");
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        c
    }
    pub fn input(&self) -> Connection {
        self.db("brainloop.input.db")
    }
    pub fn output(&self) -> Connection {
        self.db("brainloop.output.db")
    }
    pub fn lifecycle(&self) -> Connection {
        self.db("brainloop.lifecycle.db")
    }
    pub fn metadata(&self) -> Connection {
        self.db("brainloop.metadata.db")
    }

    pub fn start(&self, extra_env: &[(&str, &str)]) -> Daemon {
        self.start_as(&[], extra_env)
    }

    /// Like [`Env::start`], with the worker run through `prefix` (e.g. `setpriv --reuid=…`,
    /// which execs it: the pid stays the worker's).
    pub fn start_as(&self, prefix: &[&str], extra_env: &[(&str, &str)]) -> Daemon {
        self.start_within(prefix, extra_env, Duration::from_secs(20))
    }

    /// Like [`Env::start_as`], waiting up to `ready` (scaled) for the worker to be running: a
    /// start-up that has much to recover (a 10,000-path apply cut by kill -9) takes longer.
    pub fn start_within(
        &self,
        prefix: &[&str],
        extra_env: &[(&str, &str)],
        ready: Duration,
    ) -> Daemon {
        let log = self
            .root
            .path()
            .join(format!("worker-{}.log", crate::common::now_ms()));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = match prefix.split_first() {
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["run", "--data-dir"])
            .arg(&self.data)
            .arg("--workspace")
            .arg(&self.workspace)
            .env("BRAINLOOP_TEST_ACTIONS", "1")
            .env("BRAINLOOP_HEARTBEAT_INTERVAL_MS", "200")
            .env("BRAINLOOP_LOG", "info")
            // Never a real key: no test may send traffic beyond 127.0.0.1.
            .env_remove("CEREBRAS_API_KEY")
            .env_remove("CREDENTIALS_DIRECTORY")
            .env_remove("BRAINLOOP_LLM_BASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn brainloop run");
        let d = Daemon { child, log };
        d.wait_ready(&self.data, ready);
        d
    }

    /// Inserts a job with a separate connection (one commit); returns its id.
    pub fn insert(&self, action: &str, params: &str) -> i64 {
        self.insert_full(action, params, 0, None)
    }

    pub fn insert_full(
        &self,
        action: &str,
        params: &str,
        priority: i64,
        not_before: Option<i64>,
    ) -> i64 {
        let c = self.input();
        c.execute(
            "INSERT INTO jobs(action, params, priority, not_before) VALUES (?1, ?2, ?3, ?4)",
            params![action, params, priority, not_before],
        )
        .unwrap();
        c.last_insert_rowid()
    }

    /// Waits until `n` jobs have a final result.
    pub fn wait_final(&self, n: i64, timeout: Duration) {
        let t0 = Instant::now();
        loop {
            let done = self.final_count();
            if done >= n {
                return;
            }
            assert!(
                t0.elapsed() < timeout,
                "only {done}/{n} final results after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn final_count(&self) -> i64 {
        if !self.data.join("brainloop.output.db").exists() {
            return 0;
        }
        self.output()
            .query_row(
                "SELECT count(*) FROM results WHERE status NOT IN ('queued','running','pending_validation')",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0)
    }

    /// (status, result, error, attempts) of a job.
    pub fn result(&self, id: i64) -> Option<(String, Option<String>, Option<String>, i64)> {
        self.output()
            .query_row(
                "SELECT status, result, error, attempts FROM results WHERE job_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .unwrap()
    }

    pub fn wait_status(
        &self,
        id: i64,
        want: &str,
        timeout: Duration,
    ) -> (String, Option<String>, Option<String>, i64) {
        let t0 = Instant::now();
        loop {
            if let Some(r) = self.result(id) {
                if r.0 == want {
                    return r;
                }
            }
            assert!(
                t0.elapsed() < timeout,
                "job {id} not {want} after {timeout:?}: {:?}",
                self.result(id)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn last_heartbeat_status(&self) -> Option<String> {
        self.output()
            .query_row(
                "SELECT status FROM heartbeat ORDER BY timestamp DESC, rowid DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .unwrap()
    }
}

pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn wait_ready(&self, data: &Path, ready: Duration) {
        let t0 = Instant::now();
        loop {
            let ok = Connection::open_with_flags(
                data.join("brainloop.output.db"),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .ok()
            .and_then(|c| {
                c.query_row(
                    "SELECT 1 FROM heartbeat WHERE pid = ?1 AND status = 'running'",
                    [self.pid()],
                    |_| Ok(()),
                )
                .optional()
                .ok()
                .flatten()
            })
            .is_some();
            if ok {
                return;
            }
            assert!(
                t0.elapsed() < scaled(ready),
                "worker not ready after {:?}; log:\n{}",
                scaled(ready),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }

    pub fn sigterm(&self) {
        self.signal(nix::sys::signal::Signal::SIGTERM)
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for exit; panics with the log after `timeout`.
    pub fn wait_exit(mut self, timeout: Duration) -> (ExitStatus, Duration) {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return (st, t0.elapsed());
            }
            if t0.elapsed() > timeout {
                let _ = self.child.kill();
                panic!(
                    "worker did not exit within {timeout:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Inserts a job for `client` with JSON params; returns its id.
pub fn job(env: &Env, client: &str, action: &str, params: &serde_json::Value) -> i64 {
    let c = env.input();
    c.execute(
        "INSERT INTO jobs(action, params, client_id) VALUES (?1, ?2, ?3)",
        rusqlite::params![action, params.to_string(), client],
    )
    .unwrap();
    c.last_insert_rowid()
}

/// Waits until the job leaves queued/running (final or pending_validation):
/// (status, result JSON, error).
pub fn settled(env: &Env, id: i64) -> (String, serde_json::Value, String) {
    let t0 = Instant::now();
    loop {
        if let Some((status, result, error, _)) = env.result(id) {
            if !["queued", "running"].contains(&status.as_str()) {
                let v = result
                    .and_then(|r| serde_json::from_str(&r).ok())
                    .unwrap_or(serde_json::Value::Null);
                return (status, v, error.unwrap_or_default());
            }
        }
        assert!(
            t0.elapsed() < scaled(Duration::from_secs(60)),
            "job {id} did not settle"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Inserts a job and waits for it to settle.
pub fn run(
    env: &Env,
    client: &str,
    action: &str,
    params: serde_json::Value,
) -> (String, serde_json::Value, String) {
    let id = job(env, client, action, &params);
    settled(env, id)
}

/// Waits until the job has a final result (past `pending_validation`, which the test answers
/// meanwhile): (status, result JSON, error).
pub fn final_result(env: &Env, id: i64) -> (String, serde_json::Value, String) {
    let t0 = Instant::now();
    loop {
        let (st, v, e) = settled(env, id);
        if st != "pending_validation" {
            return (st, v, e);
        }
        assert!(
            t0.elapsed() < scaled(Duration::from_secs(60)),
            "job {id} still pending"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the worker with the config file at `config` and the LLM pointed at `mock` (a test key,
/// fast retries), plus `extra` variables.
pub fn start_with_llm(
    env: &Env,
    config: &str,
    mock: &mock_llm::MockLlm,
    extra: &[(&str, &str)],
) -> Daemon {
    let url = mock.base_url();
    let mut vars = vec![
        ("BRAINLOOP_CONFIG", config),
        ("BRAINLOOP_LLM_BASE_URL", url.as_str()),
        ("CEREBRAS_API_KEY", "test"),
        ("BRAINLOOP_LLM_RETRY_BASE_MS", "10"),
    ];
    vars.extend_from_slice(extra);
    env.start(&vars)
}

/// Submits `execute_bash {command}` as `client` and waits until it settles:
/// (job id, status, result, error).
pub fn submit_as(env: &Env, client: &str, cmd: &str) -> (i64, String, serde_json::Value, String) {
    let id = job(
        env,
        client,
        "execute_bash",
        &serde_json::json!({ "command": cmd }),
    );
    let (st, v, e) = settled(env, id);
    (id, st, v, e)
}

/// `submit_as` for the default client `local`.
pub fn submit(env: &Env, cmd: &str) -> (i64, String, serde_json::Value, String) {
    submit_as(env, "local", cmd)
}

/// Submits `cmd` as `local`: it must be applied without a human, under what was learned.
pub fn applied_unasked(env: &Env, cmd: &str) {
    let (_, st, v, err) = submit(env, cmd);
    assert_eq!(st, "succeeded", "{cmd} should apply unasked: {err} {v}");
    assert_eq!(v["policy_used"], "signature_learned", "{cmd}: {v}");
}

/// `brainloop ARGS`, which must succeed; its stdout.
pub fn cli_ok(env: &Env, args: &[&str]) -> String {
    let (st, out, err) = env.cli(args);
    assert!(st.success(), "brainloop {args:?}: {out}{err}");
    out
}

/// The sandbox must enforce here: a test that needs it fails, saying so (never a silent pass).
pub fn require_sandbox() {
    let out = Command::new(BIN)
        .args(["sandbox", "--json"])
        .output()
        .expect("run brainloop sandbox");
    assert!(
        out.status.success(),
        "CANNOT RUN HERE: the sandbox is not enforcing on this machine: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The validation id of a pending result.
pub fn vid(v: &serde_json::Value) -> String {
    v["validation_id"]
        .as_str()
        .expect("a validation id")
        .to_string()
}

/// Waits until job `id` is past validation `old` (another validation, or a final status).
pub fn past(env: &Env, id: i64, old: &str) -> (String, serde_json::Value, String) {
    let t0 = Instant::now();
    loop {
        let (st, v, e) = settled(env, id);
        if st != "pending_validation" || v["validation_id"].as_str() != Some(old) {
            return (st, v, e);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "job {id} still waits on {old}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A config with an `ops` client allowed to force_execute.
pub fn ops_config(env: &Env) -> String {
    let p = env.root.path().join("brainloop.toml");
    std::fs::write(
        &p,
        "[clients.ops]\nfile_read = [\"{workspace}/**\"]\nsystem_command = [\"*\"]\nforce_execute = true\n",
    )
    .unwrap();
    p.display().to_string()
}

/// How many validations job `id` has (asked, whatever their status).
pub fn validations_count(env: &Env, id: i64) -> i64 {
    env.output()
        .query_row(
            "SELECT count(*) FROM validations WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}
