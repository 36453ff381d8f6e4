//! Graded confinement (issue 20, item 1): the sandbox builds its Landlock rules for the kernel's
//! ABI and refuses only a set whose stated guarantees cannot hold. This machine's kernel is
//! newer, so these tests lower the level with the test-only `BRAINLOOP_TEST_LANDLOCK_ABI=2`
//! (Debian 12's kernel 6.1): the worker and the helper build the ABI-2 ruleset, and the tests
//! check what an operator on 6.1 gets — `echo`, `ls`, an overlay write and its diff work; a write
//! outside the workspace and the network are refused; the result's `sandbox` label names the
//! level; truncating a read-only file is refused by the seccomp truncate guard. When the sandbox
//! is not enforcing here at all, each test fails (never a silent skip).

mod common;

use brainloop::bash::executor::{execute, ExecRequest};
use brainloop::permset::PermissionSet;
use brainloop::sandbox::{self};
use common::{final_result, job, settled, Env};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const ABI2: (&str, &str) = ("BRAINLOOP_TEST_LANDLOCK_ABI", "2");

fn sandbox_json(extra: &[(&str, &str)]) -> serde_json::Value {
    let out = std::process::Command::new(common::BIN)
        .args(["sandbox", "--json"])
        .envs(extra.iter().copied())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_guarantee_table_under_abi_2_runs_every_set_and_names_each_mechanism() {
    let v = sandbox_json(&[ABI2]);
    assert_eq!(v["enforcing"], true, "the sandbox must enforce here: {v}");
    assert_eq!(v["landlock_abi"], 2, "{v}");
    // On a kernel whose own ABI is 2 (Debian 12's 6.1, the kernel matrix) nothing is lowered.
    let lowered = v["landlock_kernel_abi"].as_i64().unwrap() > 2;
    assert_eq!(v["landlock_abi_overridden"], lowered, "{v}");
    let sets = v["sets"].as_array().unwrap();
    let runs = |name: &str| sets.iter().find(|s| s["set"] == name).unwrap()["runs"].clone();
    // Every set runs: the network sets' abstract sockets are kept away by their own namespace.
    for s in [
        "minimal",
        "readonly",
        "filesystem",
        "network-api",
        "mcp-standard",
    ] {
        assert_eq!(runs(s), true, "{s}: {v}");
    }
    let text = std::process::Command::new(common::BIN)
        .arg("sandbox")
        .env(ABI2.0, ABI2.1)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("seccomp truncate guard"), "{text}");
    assert!(!text.contains("REFUSED"), "{text}");
    // Each set's socket families (issue 33), in the text and the JSON.
    assert!(
        text.contains(
            "minimal: runs confined\n  socket families: none (every socket(2) refused with EPERM)"
        ),
        "{text}"
    );
    assert!(
        text.contains("network-api: runs confined\n  socket families: AF_UNIX, AF_INET, AF_INET6 (any other refused with EPERM)"),
        "{text}"
    );
    let families =
        |name: &str| sets.iter().find(|s| s["set"] == name).unwrap()["socket_families"].clone();
    assert_eq!(families("filesystem"), serde_json::json!([]), "{v}");
    assert_eq!(
        families("mcp-standard"),
        serde_json::json!(["AF_UNIX", "AF_INET", "AF_INET6"]),
        "{v}"
    );
    // The override only lowers: asking for more than the kernel has changes nothing.
    let v = sandbox_json(&[("BRAINLOOP_TEST_LANDLOCK_ABI", "99")]);
    assert_eq!(v["landlock_abi_overridden"], false, "{v}");
    assert!(v["landlock_abi"].as_i64().unwrap() <= v["landlock_kernel_abi"].as_i64().unwrap());
}

#[test]
fn at_abi_2_echo_ls_and_an_overlay_write_work_and_escapes_and_network_are_refused() {
    assert_eq!(
        sandbox_json(&[ABI2])["enforcing"],
        true,
        "the sandbox must enforce here"
    );
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "old\n").unwrap();
    let _d = env.start(&[ABI2]);
    let run = |cmd: &str| {
        let id = job(&env, "local", "execute_bash", &json!({ "command": cmd }));
        (id, settled(&env, id))
    };
    let (_, (st, v, e)) = run("echo hi");
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(v["stdout"], "hi\n", "{v}");
    let label = v["sandbox"].as_str().unwrap_or("");
    assert!(
        label.contains("landlock-v2"),
        "the label names the level: {v}"
    );
    let (_, (st, v, e)) = run("ls");
    assert_eq!(st, "succeeded", "{v} {e}");
    assert!(v["stdout"].as_str().unwrap().contains("a.txt"), "{v}");
    // An overlay write asks with its diff.
    let (_, (st, v, e)) = run("echo new > a.txt");
    assert_eq!(st, "pending_validation", "{v} {e}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    let (ok, shown, err) = env.cli(&["show", &vid]);
    assert!(ok.success(), "{err}");
    assert!(shown.contains("-old") && shown.contains("+new"), "{shown}");
    // A write outside the workspace fails in the sandbox; no network.
    let st = escapes_and_network_are_refused(&env, &run, "ABI 2");
    assert_ne!(st, "succeeded");
}

type Run<'a> = dyn Fn(&str) -> (i64, (String, serde_json::Value, String)) + 'a;

/// A write outside the workspace (denied if it asks) leaves nothing, and a listener on the
/// host's 127.0.0.1 gets no connection; returns how the escape attempt ended.
fn escapes_and_network_are_refused(env: &Env, run: &Run, what: &str) -> String {
    let outside = env.root.path().join("escaped.txt");
    let (id, (st, v, _)) = run("cd .. && touch escaped.txt");
    if st == "pending_validation" {
        env.cli(&["deny", v["validation_id"].as_str().unwrap()]);
        final_result(env, id);
    }
    assert!(
        !outside.exists(),
        "{what}: a write outside the workspace escaped ({st} {v})"
    );
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (_, (net, v, _)) = run(&format!(
        "cat < /dev/tcp/127.0.0.1/{port} && echo CONNECTED"
    ));
    assert!(
        !v["stdout"].as_str().unwrap_or("").contains("CONNECTED"),
        "{what}: network reached: {net} {v}"
    );
    l.set_nonblocking(true).unwrap();
    assert!(l.accept().is_err(), "the host listener got a connection");
    st
}

#[tokio::test]
async fn at_abi_2_the_truncate_guard_refuses_truncating_a_read_only_file() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws").canonicalize().or_else(|_| {
        std::fs::create_dir_all(root.path().join("ws")).map(|_| root.path().join("ws"))
    });
    let ws = ws.unwrap().canonicalize().unwrap();
    std::fs::write(ws.join("keep.txt"), "KEEP-CANARY\n").unwrap();
    // readonly set: the workspace is readable, not writable; truncate(2) and
    // open(O_RDONLY|O_TRUNC) are what Landlock ABI 2 cannot see.
    let cmd = "truncate -s 0 keep.txt; python3 -c \"import os; os.close(os.open('keep.txt', os.O_RDONLY|os.O_TRUNC))\" 2>&1; echo done";
    let env = brainloop::bash::executor::filtered_env(|k| std::env::var(k).ok());
    let mut spec = sandbox::spec_for(
        PermissionSet::Readonly,
        cmd,
        &ws,
        &ws,
        &[],
        None,
        env,
        &sandbox::Limits::default(),
    );
    spec.landlock_abi = Some(2);
    let req = ExecRequest {
        command: cmd.into(),
        workdir: ws.clone(),
        timeout: Duration::from_secs(30),
        sandbox: Some((PathBuf::from(common::BIN), spec)),
    };
    let r = execute(&req, &CancellationToken::new()).await.unwrap();
    assert!(!r.sandbox_failed, "sandbox setup failed: {}", r.stderr);
    assert!(r.stdout.contains("done"), "{} {}", r.stdout, r.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.join("keep.txt")).unwrap(),
        "KEEP-CANARY\n",
        "a read-only file was truncated at ABI 2: {} {}",
        r.stdout,
        r.stderr
    );
}

/// A host daemon listening on an abstract UNIX socket is out of a network-api command's reach:
/// the set has its own network namespace (its way out is the egress proxy), and at ABI ≥ 6
/// Landlock scopes those sockets too. At ABI 2 (Debian 12's kernel) the set runs all the same.
#[tokio::test]
async fn at_abi_2_a_network_set_cannot_reach_a_host_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("bl-abstract-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().canonicalize().unwrap();
    let cmd = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); \
         s.connect(b'\\0{name}'); s.send(b'ESCAPED'); print('CONNECTED')\" 2>&1; \
         python3 -c \"import socket; a, b = socket.socketpair(); a.send(b'x'); print('PAIR', b.recv(1))\""
    );
    for abi in [None, Some(2)] {
        let env = brainloop::bash::executor::filtered_env(|k| std::env::var(k).ok());
        let mut spec = sandbox::spec_for(
            PermissionSet::NetworkApi,
            &cmd,
            &ws,
            &ws,
            &[],
            None,
            env,
            &sandbox::Limits::default(),
        );
        if abi.is_some() {
            spec.landlock_abi = abi;
        }
        // A network set runs only through its egress proxy (issue 23); no host allowed here.
        let proxy = brainloop::egress::proxy::JobProxy::start(
            brainloop::egress::rules::Rules { rules: Vec::new() },
            std::sync::Arc::new(brainloop::egress::resolve::Resolver::default()),
            brainloop::egress::proxy::Bounds::default(),
            &std::env::temp_dir(),
        )
        .unwrap();
        proxy.route(&mut spec);
        let req = ExecRequest {
            command: cmd.clone(),
            workdir: ws.clone(),
            timeout: Duration::from_secs(30),
            sandbox: Some((PathBuf::from(common::BIN), spec)),
        };
        let r = execute(&req, &CancellationToken::new()).await.unwrap();
        proxy.finish().await;
        assert!(
            !r.sandbox_failed,
            "ABI {abi:?}: sandbox setup failed: {}",
            r.stderr
        );
        assert!(
            !r.stdout.contains("CONNECTED"),
            "ABI {abi:?}: a network-api command reached a host abstract socket: {}",
            r.stdout
        );
        // socketpair (pipes between processes) keeps working.
        assert!(
            r.stdout.contains("PAIR b'x'"),
            "ABI {abi:?}: {} {}",
            r.stdout,
            r.stderr
        );
        assert!(
            listener.accept().is_err(),
            "ABI {abi:?}: the host listener got a connection"
        );
    }
}

/// Issue 20 item 3: the worker as a dedicated unprivileged user (uid/gid 65534 through
/// `setpriv`, as the shipped unit's `User=brainloop`), natively and at Landlock ABI 2: no
/// writable cgroup there, so the rlimit fallbacks are the active limits and the label says so.
/// Needs root to switch user: anywhere else it fails, saying why.
#[test]
fn as_an_unprivileged_user_65534_echo_ls_overlay_work_and_escapes_are_refused() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "CANNOT RUN HERE: switching to uid 65534 with setpriv needs root (run the tests as root)"
    );
    assert!(
        std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "CANNOT RUN HERE: setpriv (util-linux) is not installed"
    );
    for abi in [None, Some("2")] {
        let env = Env::new();
        std::fs::write(env.workspace.join("a.txt"), "old\n").unwrap();
        std::fs::create_dir_all(&env.data).unwrap();
        for p in [
            env.root.path(),
            &env.workspace,
            &env.data,
            &env.workspace.join("a.txt"),
        ] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        let extra: Vec<(&str, &str)> = abi.map(|a| vec![(ABI2.0, a)]).unwrap_or_default();
        let _d = env.start_as(
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
            &extra,
        );
        let run = |cmd: &str| {
            let id = job(&env, "local", "execute_bash", &json!({ "command": cmd }));
            (id, settled(&env, id))
        };
        let (_, (st, v, e)) = run("id -u; echo hi");
        assert_eq!(st, "succeeded", "abi {abi:?}: {v} {e}");
        assert!(
            v["stdout"].as_str().unwrap().starts_with("65534\nhi"),
            "{v}"
        );
        let label = v["sandbox"].as_str().unwrap_or("").to_string();
        eprintln!("as uid 65534, override {abi:?}: sandbox label {label}");
        assert!(label.contains("+seccomp+namespaces"), "{label}");
        if abi.is_some() {
            assert!(label.contains("landlock-v2"), "{label}");
        }
        let (_, (st, v, e)) = run("ls");
        assert_eq!(st, "succeeded", "{v} {e}");
        let (_, (st, v, e)) = run("echo new > a.txt");
        assert_eq!(st, "pending_validation", "abi {abi:?}: {v} {e}");
        let (ok, shown, err) = env.cli(&["show", v["validation_id"].as_str().unwrap()]);
        assert!(ok.success() && shown.contains("+new"), "{shown}{err}");
        // No privilege bits as a dedicated user either (issue 18): refused in the sandbox, and
        // stripped at apply whatever the overlay held.
        let (id, (st, v, e)) = run("cp /bin/true t; chmod 4755 t; chmod g+s t");
        assert_eq!(st, "pending_validation", "abi {abi:?}: {v} {e}");
        env.cli(&["approve", v["validation_id"].as_str().unwrap()]);
        final_result(&env, id);
        let mode = std::fs::metadata(env.workspace.join("t"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o6000,
            0,
            "abi {abi:?}: setuid/setgid reached the workspace: {mode:o}"
        );
        escapes_and_network_are_refused(&env, &run, &format!("abi {abi:?}"));
    }
}

/// The fail-closed decision (`sandbox::prepare`): a set whose guarantee does not hold is
/// refused with the guarantee named; `required = false` runs it best effort (every mechanism
/// that works, the label says so); unconfined only when no mechanism works.
#[test]
fn a_set_missing_a_guarantee_is_refused_by_name_or_runs_best_effort_when_not_required() {
    use brainloop::sandbox::{detect, prepare, SandboxConfig};
    let mut level = detect::Level::disabled("");
    level.error = None;
    level.enforcing = true;
    level.namespaces = true;
    level.seccomp = true;
    level.landlock_abi = 2;
    let t = tempfile::tempdir().unwrap();
    let ws = t.path();
    let go = |level: &detect::Level, required: bool, set: PermissionSet| {
        let cfg = SandboxConfig {
            required,
            ..SandboxConfig::default()
        };
        prepare(level, &cfg, set, "true", ws, ws, Vec::new(), ws, 1)
    };
    // Landlock 2 without seccomp: no truncate guard and no AF_UNIX refusal.
    level.seccomp = false;
    let e = go(&level, true, PermissionSet::NetworkApi).unwrap_err();
    assert!(e.contains("no truncation of files it may only read"), "{e}");
    let p = go(&level, false, PermissionSet::NetworkApi).unwrap();
    let (_, spec) = p.sandbox.as_ref().unwrap();
    assert!(spec.best_effort && spec.landlock_abi == Some(2));
    assert!(p.label.contains("best effort"), "{}", p.label);
    p.finish();
    level.seccomp = true;
    let p = go(&level, true, PermissionSet::Filesystem).unwrap();
    let (_, spec) = p.sandbox.as_ref().unwrap();
    assert!(!spec.best_effort, "{}", p.label);
    assert!(p.label.contains("landlock-v2"), "{}", p.label);
    p.finish();
    // Landlock missing but namespaces and seccomp work: best effort, not unconfined.
    level.landlock_abi = 0;
    let e = go(&level, true, PermissionSet::Filesystem).unwrap_err();
    assert!(e.contains("no file reads outside the read roots"), "{e}");
    let p = go(&level, false, PermissionSet::Filesystem).unwrap();
    assert!(p.sandbox.is_some(), "{}", p.label);
    p.finish();
    // Nothing works at all: unconfined only then, and only when not required.
    level.enforcing = false;
    level.namespaces = false;
    level.seccomp = false;
    assert!(go(&level, true, PermissionSet::Minimal).is_err());
    let p = go(&level, false, PermissionSet::Minimal).unwrap();
    assert!(
        p.sandbox.is_none() && p.label.starts_with("none"),
        "{}",
        p.label
    );
}

/// A service cgroup as systemd's `Delegate=yes` leaves it for `User=brainloop`: created by root,
/// its directory and interface files owned by the user (cgroup v2; on a v1 host the same in the
/// `pids` and `memory` hierarchies). Returns the cgroup dirs and the `cgroup.procs` files root
/// writes the worker's pid into before switching user.
fn delegated_service_cgroup(name: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let own = |p: &std::path::Path| {
        std::os::unix::fs::chown(p, Some(65534), Some(65534))
            .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()))
    };
    let dirs: Vec<PathBuf> = if root.join("cgroup.controllers").exists() {
        std::fs::write(root.join("cgroup.subtree_control"), "+pids +memory")
            .expect("cannot enable pids and memory for the root cgroup's children");
        vec![root.join(name)]
    } else {
        vec![root.join("pids").join(name), root.join("memory").join(name)]
    };
    for d in &dirs {
        std::fs::create_dir(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        own(d);
        for f in [
            "cgroup.procs",
            "cgroup.subtree_control",
            "cgroup.threads",
            "tasks",
        ] {
            if d.join(f).exists() {
                own(&d.join(f));
            }
        }
    }
    let procs = dirs.iter().map(|d| d.join("cgroup.procs")).collect();
    (dirs, procs)
}

/// Removes the service cgroups when the test ends, passed or not.
struct CgroupGuard(Vec<PathBuf>);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        for d in &self.0 {
            remove_cgroup_tree(d);
        }
    }
}

/// Removes a cgroup tree bottom-up (children the worker left would keep it busy).
fn remove_cgroup_tree(d: &std::path::Path) {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(d);
}

/// Issue 20 item 3: with a delegated service cgroup the unprivileged worker (uid 65534) creates
/// a cgroup per job and the job's memory and process limits bind as configured — not the
/// per-process rlimit fallbacks. `brainloop sandbox`/`status` say which limits are active.
#[test]
fn as_uid_65534_with_a_delegated_cgroup_the_job_memory_and_process_limits_bind() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "CANNOT RUN HERE: delegating a cgroup and switching to uid 65534 needs root"
    );
    let env = Env::new();
    std::fs::create_dir_all(&env.data).unwrap();
    let cfg = env.root.path().join("limits.toml");
    std::fs::write(
        &cfg,
        "[sandbox.limits]\nmax_memory_bytes = 268435456\nmax_processes = 24\n",
    )
    .unwrap();
    for p in [env.root.path(), &env.workspace, &env.data, &cfg] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let name = format!("bl-svc-{}", std::process::id());
    let (dirs, procs) = delegated_service_cgroup(&name);
    let _cleanup = CgroupGuard(dirs);
    let enter: String = procs
        .iter()
        .map(|p| format!("echo $$ > {} && ", p.display()))
        .collect();
    let script = format!("{enter}exec \"$@\"");
    let d = env.start_as(
        &[
            "sh",
            "-c",
            &script,
            "sh",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &[("BRAINLOOP_CONFIG", cfg.to_str().unwrap())],
    );
    let run = |cmd: &str| {
        let id = job(&env, "local", "execute_bash", &json!({ "command": cmd }));
        let (st, v, e) = settled(&env, id);
        if st == "pending_validation" {
            env.cli(&["approve", v["validation_id"].as_str().unwrap()]);
            return final_result(&env, id);
        }
        (st, v, e)
    };
    let (st, v, e) = run("id -u; cat /proc/self/cgroup");
    assert_eq!(st, "succeeded", "{v} {e}");
    let out = v["stdout"].as_str().unwrap_or("").to_string();
    assert!(out.starts_with("65534\n"), "{out}");
    assert!(
        out.contains(&name),
        "the command is not in the service's cgroup tree: {out}"
    );
    let label = v["sandbox"].as_str().unwrap_or("");
    assert!(label.contains("+cgroup-v"), "no per-job cgroup: {label}");
    // Memory: 1 GiB against the job's 256 MiB (the rlimit fallback would allow 16 GiB).
    let (st, v, _) = run("python3 -c \"a = bytearray(1024**3); print('allocated')\"");
    assert!(
        !v["stdout"].as_str().unwrap_or("").contains("allocated"),
        "1 GiB allocated past the job's 256 MiB: {st} {v}"
    );
    // Processes: 40 background sleeps against the job's 24.
    let (_, v, _) = run("for i in $(seq 40); do sleep 2 & done 2>&1; wait; echo done");
    let all = format!("{}{}", v["stdout"], v["stderr"]);
    assert!(
        all.contains("Resource temporarily unavailable"),
        "40 processes ran past the job's 24: {v}"
    );
    let (ok, status, err) = env.cli(&["status"]);
    assert!(ok.success() || !status.is_empty(), "{err}");
    assert!(
        status.contains("per job: processes 24, memory 256 MiB"),
        "status does not say which limits are active: {status}"
    );
    drop(d);
}
