//! The sandbox, attacked from inside (issue 6). Each test runs a command confined exactly as the
//! worker would (the real `brainloop sandbox-exec` helper, a per-job cgroup and private tmp dir)
//! against throwaway temp dirs, and checks that the escape failed and what it targeted survived.
//! When the machine supports the sandbox (the probe says enforcing), a failure here is a failure,
//! never a skip.

use brainloop::bash::executor::{execute, ExecRequest, ExecResult};
use brainloop::permset::PermissionSet;
use brainloop::sandbox::{self, cgroup::JobCgroup, detect, Limits};
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_brainloop");

struct Lab {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn lab() -> Option<Lab> {
    let level = detect::probe(Path::new(BIN));
    // Never a silent skip: a machine where the sandbox cannot enforce fails these tests, naming why.
    assert!(
        level.enforcing,
        "CANNOT RUN HERE: the sandbox is not enforcing on this machine ({}); run `brainloop sandbox`",
        level.label()
    );
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(outside.join(".ssh")).unwrap();
    std::fs::write(outside.join(".ssh/id_rsa"), "PRIVATE-KEY-SECRET").unwrap();
    std::fs::write(outside.join("shadow"), "root:SHADOW-SECRET:19000::::::").unwrap();
    std::fs::write(ws.join("a.txt"), "inside\n").unwrap();
    Some(Lab {
        _root: root,
        ws,
        outside,
    })
}

fn limits() -> Limits {
    Limits {
        max_processes: 64,
        max_memory_bytes: 256 << 20,
        // Without a writable cgroup (an unprivileged worker with no Delegate=, see
        // scripts/unprivileged_tests.sh) the memory bound is the per-process RLIMIT_AS.
        rlimit_as_fallback: Some(1 << 30),
        ..Limits::default()
    }
}

async fn confined(lab: &Lab, set: PermissionSet, cmd: &str, timeout_ms: u64) -> ExecResult {
    confined_with(lab, set, cmd, timeout_ms, &[]).await.0
}

/// `confined`, with a network set's egress proxy allowing `hosts` (issue 23: a network set runs
/// only through one); also returns what the proxy saw.
async fn confined_with(
    lab: &Lab,
    set: PermissionSet,
    cmd: &str,
    timeout_ms: u64,
    hosts: &[&str],
) -> (ExecResult, Vec<brainloop::egress::proxy::Connection>) {
    use brainloop::egress::{proxy, resolve::Resolver, rules};
    let ws = lab.ws.canonicalize().unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("bl-sbx-tmp")
        .tempdir()
        .unwrap();
    let name = format!("bl-test-{}-{}", std::process::id(), rand_suffix());
    let cg = JobCgroup::create(&name, &limits());
    let env = brainloop::bash::executor::filtered_env(|k| std::env::var(k).ok());
    let mut spec = sandbox::spec_for(
        set,
        cmd,
        &ws,
        &ws,
        &[],
        Some(tmp.path().to_path_buf()),
        env,
        &limits(),
    );
    if let Some(c) = &cg {
        spec.cgroup_procs = c.procs_files();
    }
    let proxy = set.network().then(|| {
        let rules = rules::Rules {
            rules: hosts
                .iter()
                .map(|h| rules::HostRule::parse(h, "test").unwrap())
                .collect(),
        };
        let bounds = proxy::Bounds {
            connect_timeout: Duration::from_secs(5),
            head_timeout: Duration::from_secs(10),
            max_connections: 128,
        };
        let p = proxy::JobProxy::start(
            rules,
            std::sync::Arc::new(Resolver::default()),
            bounds,
            &std::env::temp_dir(),
        )
        .unwrap();
        p.route(&mut spec);
        p
    });
    let req = ExecRequest {
        command: cmd.to_string(),
        workdir: ws,
        timeout: Duration::from_millis(timeout_ms),
        sandbox: Some((PathBuf::from(BIN), spec)),
    };
    let r = execute(&req, &CancellationToken::new()).await.unwrap();
    if let Some(c) = &cg {
        c.remove();
    }
    let seen = match proxy {
        Some(p) => p.finish().await,
        None => Vec::new(),
    };
    assert!(!r.sandbox_failed, "sandbox setup failed: {}", r.stderr);
    (r, seen)
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

fn all_output(r: &ExecResult) -> String {
    format!("{}{}", r.stdout, r.stderr)
}

#[tokio::test]
async fn writes_outside_the_workspace_fail_by_every_route() {
    let Some(lab) = lab() else { return };
    std::os::unix::fs::symlink(&lab.outside, lab.ws.join("link")).unwrap();
    let o = lab.outside.display();
    for (i, cmd) in [
        format!("echo x > {o}/direct"),
        "echo x > link/via_symlink".to_string(),
        "echo x > ../outside/via_dotdot".to_string(),
        "echo x > /proc/self/cwd/../outside/via_proc_cwd".to_string(),
        format!("cp a.txt {o}/via_cp"),
        format!("mv a.txt {o}/via_mv"),
        format!("ln a.txt {o}/via_hardlink"),
    ]
    .iter()
    .enumerate()
    {
        let r = confined(&lab, PermissionSet::McpStandard, cmd, 10_000).await;
        assert_ne!(
            r.exit_code,
            Some(0),
            "case {i} `{cmd}` succeeded: {}",
            all_output(&r)
        );
    }
    let left: Vec<_> = std::fs::read_dir(&lab.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "nothing new outside: {left:?}");
    assert!(
        lab.ws.join("a.txt").exists(),
        "mv out of the workspace failed and left the file"
    );
    // The same write inside the workspace works (the rule is not simply "deny everything").
    let r = confined(
        &lab,
        PermissionSet::Filesystem,
        "echo ok > b.txt && cat b.txt",
        10_000,
    )
    .await;
    assert_eq!(r.stdout, "ok\n");
}

#[tokio::test]
async fn secrets_outside_and_the_workers_environment_are_unreadable() {
    let Some(lab) = lab() else { return };
    std::env::set_var("BRAINLOOP_TEST_SECRET", "ENVIRON-SECRET");
    let o = lab.outside.display();
    let me = std::process::id();
    for cmd in [
        format!("cat {o}/.ssh/id_rsa"),
        format!("cat {o}/shadow"),
        "cat ../outside/shadow".to_string(),
        format!("cat /proc/{me}/environ"),
        "cat /proc/1/environ; cat /proc/*/environ".to_string(),
        "cat /etc/shadow".to_string(),
        format!("ls {o}"),
    ] {
        let r = confined(&lab, PermissionSet::McpStandard, &cmd, 10_000).await;
        let out = all_output(&r);
        for s in ["PRIVATE-KEY-SECRET", "SHADOW-SECRET", "ENVIRON-SECRET"] {
            assert!(!out.contains(s), "`{cmd}` leaked {s}: {out}");
        }
        assert!(
            r.stdout.trim().is_empty() || cmd.starts_with("cat /proc/1"),
            "`{cmd}` printed {}",
            r.stdout
        );
    }
    // Only the sandbox's own processes are visible.
    let r = confined(
        &lab,
        PermissionSet::Readonly,
        "ls /proc | grep -E '^[0-9]+$' | wc -l",
        10_000,
    )
    .await;
    let n: u32 = r.stdout.trim().parse().unwrap();
    assert!(n <= 6, "{n} processes visible");
}

#[tokio::test]
async fn no_network_sets_cannot_reach_loopback_listeners() {
    let Some(lab) = lab() else { return };
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tport = tcp.local_addr().unwrap().port();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let uport = udp.local_addr().unwrap().port();
    for set in [
        PermissionSet::Minimal,
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
    ] {
        for cmd in [
            format!("curl -s -m 2 http://127.0.0.1:{tport}/"),
            format!("echo hi > /dev/tcp/127.0.0.1/{tport}"),
            format!("python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {tport}), 2); s.send(b'hi')\""),
            format!("echo hi > /dev/udp/127.0.0.1/{uport}"),
            format!("python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', ('127.0.0.1', {uport}))\""),
        ] {
            let r = confined(&lab, set, &cmd, 10_000).await;
            assert_ne!(r.exit_code, Some(0), "{set:?}: `{cmd}` succeeded");
        }
    }
    assert!(tcp.accept().is_err(), "a TCP connection got through");
    let mut buf = [0u8; 16];
    assert!(udp.recv(&mut buf).is_err(), "a UDP datagram got through");
    // A network set reaches it only through its egress proxy, under a rule naming it (issue 23).
    let rule = format!("127.0.0.1:{tport}");
    let (r, _) = confined_with(
        &lab,
        PermissionSet::NetworkApi,
        &format!("echo hi > /dev/tcp/127.0.0.1/{tport}"),
        10_000,
        &[&rule],
    )
    .await;
    assert_ne!(r.exit_code, Some(0), "a raw connection left the namespace");
    assert!(tcp.accept().is_err(), "a raw TCP connection got through");
    let (r, seen) = confined_with(
        &lab,
        PermissionSet::NetworkApi,
        &format!("curl -s -m 3 -o /dev/null http://127.0.0.1:{tport}/via-proxy"),
        20_000,
        &[&rule],
    )
    .await;
    let t0 = std::time::Instant::now();
    let mut accepted = tcp.accept();
    while accepted.is_err() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        accepted = tcp.accept();
    }
    let (mut s, _) = accepted.unwrap_or_else(|_| {
        panic!(
            "network-api reaches the listener through the proxy: {} {seen:?}",
            all_output(&r)
        )
    });
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = [0u8; 64];
    let n = s.read(&mut got).unwrap();
    assert!(
        got[..n].starts_with(b"GET /via-proxy HTTP/1.1"),
        "{:?}",
        String::from_utf8_lossy(&got[..n])
    );
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].outcome, "allowed", "{seen:?}");
}

#[tokio::test]
async fn a_git_hook_in_a_readonly_git_status_cannot_write() {
    let Some(lab) = lab() else { return };
    let o = lab.outside.display();
    let ws = lab.ws.display();
    let setup = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "cd {ws} && git init -q && git config core.fsmonitor 'touch {o}/pwned_outside; touch {ws}/pwned_inside; false'"
        ))
        .status()
        .unwrap();
    assert!(setup.success());
    let r = confined(&lab, PermissionSet::Readonly, "git status", 20_000).await;
    assert!(
        !lab.outside.join("pwned_outside").exists(),
        "the hook wrote outside: {}",
        all_output(&r)
    );
    assert!(
        !lab.ws.join("pwned_inside").exists(),
        "the hook wrote in a readonly run"
    );
}

#[tokio::test]
async fn fork_and_memory_bombs_are_bounded_and_the_worker_is_unharmed() {
    let Some(lab) = lab() else { return };
    // A real fork bomb (the classifier would block it; here the runtime must hold on its own),
    // kept going against the cgroup's process limit. The job ends either by itself or by its
    // 10 s timeout (bash retries a failed fork with back-off, so which one depends on the
    // machine's load): what must hold is that it ends and nothing of it survives.
    let _ = confined(
        &lab,
        PermissionSet::Minimal,
        ":(){ :|:& };: ; sleep 2",
        10_000,
    )
    .await;
    std::thread::sleep(Duration::from_millis(300));
    let bombs = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.unwrap().path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(":(){ :|:& };:"))
        .count();
    assert_eq!(bombs, 0, "fork bomb processes survived");
    // Memory: 2 GiB against a 256 MiB limit.
    let r = confined(
        &lab,
        PermissionSet::Minimal,
        "python3 -c \"a = bytearray(2 * 1024**3); print('allocated')\"",
        30_000,
    )
    .await;
    assert_ne!(r.exit_code, Some(0));
    assert!(!r.stdout.contains("allocated"), "{}", all_output(&r));
    // The test process (standing in for the worker) is fine and can still run commands.
    let r = confined(&lab, PermissionSet::Minimal, "echo alive", 10_000).await;
    assert_eq!(r.stdout, "alive\n");
}

#[tokio::test]
async fn processes_namespaces_mounts_and_tracing_are_out_of_reach() {
    let Some(lab) = lab() else { return };
    let mut victim = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let vpid = victim.id();
    for cmd in [
        format!("kill -9 {vpid}"),
        "kill -9 -1; true".to_string(),
        "unshare -r true".to_string(),
        "unshare -n true".to_string(),
        "mount -t tmpfs none \"$TMPDIR\"".to_string(),
        "python3 -c \"import ctypes,sys; sys.exit(0 if ctypes.CDLL(None).ptrace(16, 1, 0, 0) == 0 else 1)\"".to_string(),
        "strace -f true".to_string(),
    ] {
        let r = confined(&lab, PermissionSet::McpStandard, &cmd, 10_000).await;
        if !cmd.starts_with("kill -9 -1") {
            assert_ne!(r.exit_code, Some(0), "`{cmd}` succeeded: {}", all_output(&r));
        }
    }
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the outside process was killed"
    );
    victim.kill().unwrap();
    let _ = victim.wait();
}

#[tokio::test]
async fn a_setsid_double_fork_dies_with_the_job_at_timeout() {
    let Some(lab) = lab() else { return };
    let marker = format!("{}.{}", 50 + rand_suffix() % 40, rand_suffix() % 1000);
    let cmd = format!("(setsid bash -c 'sleep {marker}' &) ; sleep {marker}");
    let r = confined(&lab, PermissionSet::Minimal, &cmd, 500).await;
    assert!(r.timed_out);
    std::thread::sleep(Duration::from_millis(300));
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "the escapee survived"
    );
}

#[tokio::test]
async fn each_set_can_do_what_its_row_allows() {
    let Some(lab) = lab() else { return };
    let ok = |r: &ExecResult| r.exit_code == Some(0);
    // minimal: run programs, nothing else.
    assert!(ok(&confined(
        &lab,
        PermissionSet::Minimal,
        "echo hi | tr a-z A-Z && ls /usr/bin > /dev/null",
        10_000
    )
    .await));
    assert!(!ok(&confined(
        &lab,
        PermissionSet::Minimal,
        &format!("cat {}/a.txt", lab.ws.display()),
        10_000
    )
    .await));
    // readonly: + read the workspace.
    let r = confined(&lab, PermissionSet::Readonly, "cat a.txt", 10_000).await;
    assert_eq!(r.stdout, "inside\n");
    assert!(!ok(&confined(
        &lab,
        PermissionSet::Readonly,
        "touch new.txt",
        10_000
    )
    .await));
    // filesystem: + write the workspace and a private tmp.
    assert!(ok(&confined(
        &lab,
        PermissionSet::Filesystem,
        "touch new.txt && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
        10_000
    )
    .await));
    assert!(lab.ws.join("new.txt").exists());
    // network-api: private tmp, network, not the workspace.
    assert!(ok(&confined(
        &lab,
        PermissionSet::NetworkApi,
        "echo t > \"$TMPDIR/t\"",
        10_000
    )
    .await));
    assert!(!ok(&confined(
        &lab,
        PermissionSet::NetworkApi,
        &format!("cat {}/a.txt", lab.ws.display()),
        10_000
    )
    .await));
    // mcp-standard: workspace read/write + network.
    assert!(ok(&confined(
        &lab,
        PermissionSet::McpStandard,
        "cat a.txt && touch other.txt",
        10_000
    )
    .await));
    // The job's cgroup is really joined when the machine allows one.
    if brainloop::sandbox::cgroup::flavour().is_some() {
        let r = confined(
            &lab,
            PermissionSet::Minimal,
            "cat /proc/self/cgroup",
            10_000,
        )
        .await;
        assert!(r.stdout.contains("bl-test-"), "{}", r.stdout);
    }
}

/// Every file beneath `dir` whose mode has setuid or setgid (symlinks not followed).
fn privileged_files(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                todo.push(e.path());
            } else if md.is_file() && md.permissions().mode() & 0o6000 != 0 {
                out.push(format!(
                    "{} {:o}",
                    e.path().display(),
                    md.permissions().mode()
                ));
            }
        }
    }
    out
}

/// The routes to a setuid/setgid file (issue 18 "No privilege bits"), each an independent
/// attempt; `name` is the file it would make.
pub const SETID_ATTEMPTS: &[&str] = &[
    "cp /usr/bin/id s1 && chmod 4755 s1",
    "cp /usr/bin/id s2 && chmod u+s s2",
    "cp /usr/bin/id s3 && chmod g+s s3",
    "install -m 4755 /usr/bin/id s4",
    "install -m 2755 /usr/bin/id s5",
    "python3 -c 'import os; os.close(os.open(\"s6\", os.O_CREAT | os.O_WRONLY, 0o4755))'",
    "python3 -c 'import os; os.close(os.open(\"s7\", os.O_CREAT | os.O_WRONLY, 0o644)); os.chmod(\"s7\", 0o6755)'",
    "python3 -c 'import os; fd = os.open(\"s8\", os.O_CREAT | os.O_WRONLY, 0o644); os.fchmod(fd, 0o4755)'",
    "python3 -c 'import os; os.mknod(\"s9\", 0o104755)'",
    "python3 -c 'import os; fd = os.open(\".\", os.O_TMPFILE | os.O_WRONLY, 0o4755); os.link(\"/proc/self/fd/%d\" % fd, \"s10\")'",
    "touch s11 && python3 -c 'import os; os.chmod(\"s11\", 0o4755, follow_symlinks=False)'",
];

#[tokio::test]
async fn no_set_can_make_a_setuid_or_setgid_file() {
    let Some(lab) = lab() else { return };
    for set in [PermissionSet::Filesystem, PermissionSet::McpStandard] {
        for cmd in SETID_ATTEMPTS {
            let r = confined(&lab, set, cmd, 10_000).await;
            let bad = privileged_files(&lab.ws);
            assert!(
                bad.is_empty(),
                "{set:?} `{cmd}` made {bad:?}: {}",
                all_output(&r)
            );
            // Refused by the filter, not failing for some other reason.
            let out = all_output(&r);
            assert!(
                r.exit_code != Some(0)
                    && (out.contains("not permitted") || out.contains("PermissionError")),
                "{set:?} `{cmd}`: exit {:?}, {out}",
                r.exit_code
            );
        }
        assert!(
            lab.ws.join("s1").is_file(),
            "the cp before the chmod worked"
        );
        // The private tmp dir (TMPDIR) too.
        let r = confined(
            &lab,
            set,
            "cp /usr/bin/id \"$TMPDIR/t\"; chmod 4755 \"$TMPDIR/t\"; stat -c %a \"$TMPDIR/t\"",
            10_000,
        )
        .await;
        assert!(!r.stdout.contains("4755"), "{set:?}: {}", all_output(&r));
    }
    // An ordinary chmod still works (the rule is not "no chmod").
    let r = confined(
        &lab,
        PermissionSet::Filesystem,
        "touch plain && chmod 750 plain && stat -c %a plain",
        10_000,
    )
    .await;
    assert_eq!(r.stdout.trim(), "750", "{}", all_output(&r));
}

#[tokio::test]
async fn the_workspace_is_nosuid_and_file_capabilities_cannot_be_set() {
    let Some(lab) = lab() else { return };
    for set in [
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
        PermissionSet::McpStandard,
    ] {
        let r = confined(
            &lab,
            set,
            "awk -v d=\"$PWD\" '$5 == d { print $6 }' /proc/self/mountinfo",
            10_000,
        )
        .await;
        let opts = r.stdout.trim();
        assert!(
            !opts.is_empty() && opts.lines().last().unwrap_or("").contains("nosuid"),
            "{set:?}: workspace mount options {opts:?}: {}",
            all_output(&r)
        );
    }
    // security.capability (v2, cap_setuid permitted + effective): as potent as a setuid bit.
    let r = confined(
        &lab,
        PermissionSet::Filesystem,
        "cp /usr/bin/id capped && python3 -c 'import os, struct; os.setxattr(\"capped\", \"security.capability\", struct.pack(\"<IIIII\", 0x02000001, 1 << 7, 0, 0, 0))'",
        10_000,
    )
    .await;
    assert_ne!(r.exit_code, Some(0), "setxattr worked: {}", all_output(&r));
    let p = std::ffi::CString::new(lab.ws.join("capped").display().to_string()).unwrap();
    let n = unsafe {
        libc::lgetxattr(
            p.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    assert!(n < 0, "a file capability reached the workspace");
}

/// A UNIX-socket listener in `dir` that records every connection it accepts (the canary).
struct SockCanary {
    path: PathBuf,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

fn sock_canary(dir: &Path) -> SockCanary {
    use std::os::unix::net::UnixListener;
    let path = dir.join("canary.sock");
    let l = UnixListener::bind(&path).unwrap();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = std::io::Write::write_all(&mut c, b"PONG");
        }
    });
    SockCanary { path, hits }
}

/// Issue 19 item 1: a listener on a host UNIX socket (in a temp dir under /tmp, and under
/// /run) is out of reach of every set — hidden behind the tmpfs covers, and for the sets that
/// run without a human, `socket(AF_UNIX)` itself is refused. The command's private tmp still
/// works, and `socketpair` (pipes between processes) too.
#[tokio::test]
async fn host_unix_sockets_in_tmp_and_run_are_out_of_reach() {
    let Some(lab) = lab() else { return };
    let py = Path::new("/usr/bin/python3");
    assert!(
        py.exists(),
        "this test needs /usr/bin/python3 to connect to a UNIX socket; it cannot run here"
    );
    let in_tmp = tempfile::Builder::new()
        .prefix("bl-sock")
        .tempdir_in("/tmp")
        .unwrap();
    // /run itself is root's; an unprivileged run uses the world-writable /run/lock (hidden
    // by the same private /run).
    let in_run = ["/run", "/run/lock"]
        .iter()
        .find_map(|d| {
            tempfile::Builder::new()
                .prefix("bl-sock")
                .tempdir_in(d)
                .ok()
        })
        .expect("cannot create a temp dir under /run or /run/lock (this test needs one)");
    let canaries = [sock_canary(in_tmp.path()), sock_canary(in_run.path())];
    for set in [
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
        PermissionSet::Minimal,
        PermissionSet::NetworkApi,
        PermissionSet::McpStandard,
    ] {
        for c in &canaries {
            let p = c.path.display();
            let cmd = format!(
                "/usr/bin/python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{p}'); s.sendall(b'PING'); print('GOT', s.recv(4))\"; ls -la {dir}; test -e {p} && echo VISIBLE",
                dir = c.path.parent().unwrap().display()
            );
            let r = confined(&lab, set, &cmd, 20_000).await;
            let out = all_output(&r);
            assert!(!out.contains("GOT"), "{set:?} reached {p}: {out}");
            assert!(!out.contains("VISIBLE"), "{set:?} sees {p}: {out}");
        }
    }
    for c in &canaries {
        assert_eq!(
            c.hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "a confined command connected to {}",
            c.path.display()
        );
    }
    // The sets that run without a human cannot even create one, anywhere (a socket in the
    // private tmp or the workspace is refused too) — socketpair stays.
    for set in [
        PermissionSet::Readonly,
        PermissionSet::Minimal,
        PermissionSet::Filesystem,
    ] {
        let r = confined(
            &lab,
            set,
            "/usr/bin/python3 -c \"import socket; a, b = socket.socketpair(); a.send(b'x'); print('PAIR', b.recv(1)); socket.socket(socket.AF_UNIX)\"",
            20_000,
        )
        .await;
        let out = all_output(&r);
        assert!(
            out.contains("PAIR b'x'"),
            "{set:?}: socketpair broke: {out}"
        );
        assert!(
            out.contains("PermissionError") || out.contains("Operation not permitted"),
            "{set:?}: socket(AF_UNIX) was allowed: {out}"
        );
    }
    // The private tmp still works in the sets that have one, though it lives under /tmp.
    for set in [
        PermissionSet::Filesystem,
        PermissionSet::NetworkApi,
        PermissionSet::McpStandard,
    ] {
        let r = confined(
            &lab,
            set,
            "echo kept > \"$TMPDIR/f\" && cat \"$TMPDIR/f\" && mktemp -p \"$TMPDIR\" >/dev/null && echo MKTEMP",
            20_000,
        )
        .await;
        let out = all_output(&r);
        assert!(
            r.exit_code == Some(0) && out.contains("kept") && out.contains("MKTEMP"),
            "{set:?}: private tmp broken: {out}"
        );
    }
    // And the workspace (itself under /tmp here) is still read in the read-only set.
    let r = confined(&lab, PermissionSet::Readonly, "cat a.txt", 20_000).await;
    assert_eq!(r.stdout, "inside\n", "{}", all_output(&r));
}

/// Issue 19 item 2: a workspace `.git/config` naming programs (fsmonitor, pager, textconv,
/// filters, external diff, gpg, hooks) and a workspace `.lesskey` setting LESSOPEN (HOME is
/// the workspace in the readonly set) run nothing for the read-only forms in the readonly set.
/// Canary: each program prints a RAN-* marker on stderr.
#[tokio::test]
async fn hostile_git_config_and_lesskey_run_nothing_in_the_readonly_set() {
    let Some(lab) = lab() else { return };
    let ws = &lab.ws;
    let git = |args: &[&str]| {
        let o = std::process::Command::new("git")
            .args(args)
            .current_dir(ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .expect("this test needs git; it cannot run here");
        assert!(o.status.success(), "git {args:?}: {o:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "a.txt"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "one",
    ]);
    std::fs::write(ws.join("a.txt"), "inside\nchanged\n").unwrap();
    std::fs::write(ws.join(".gitattributes"), "*.txt diff=x filter=f\n").unwrap();
    std::fs::create_dir_all(ws.join(".git/info")).unwrap();
    std::fs::write(ws.join(".git/info/attributes"), "*.txt diff=x filter=f\n").unwrap();
    std::fs::create_dir_all(ws.join("hooks")).unwrap();
    for h in ["post-index-change", "reference-transaction", "pre-auto-gc"] {
        let p = ws.join("hooks").join(h);
        std::fs::write(&p, "#!/bin/sh\necho RAN-HOOK >&2\n").unwrap();
        std::os::unix::fs::PermissionsExt::set_mode(
            &mut std::fs::metadata(&p).unwrap().permissions(),
            0o755,
        );
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let mut cfg = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.join(".git/config"))
        .unwrap();
    std::io::Write::write_all(
        &mut cfg,
        format!(
            "[core]\n\tfsmonitor = \"echo RAN-FSMONITOR >&2; false\"\n\tpager = \"echo RAN-PAGER >&2; cat\"\n\thooksPath = {}\n\tsshCommand = \"echo RAN-SSH >&2\"\n[diff \"x\"]\n\ttextconv = \"echo RAN-TEXTCONV >&2; cat\"\n\tcommand = \"echo RAN-EXTDIFF >&2\"\n[diff]\n\texternal = \"echo RAN-DIFFEXTERNAL >&2\"\n[filter \"f\"]\n\tclean = \"echo RAN-CLEAN >&2; cat\"\n\tsmudge = \"echo RAN-SMUDGE >&2; cat\"\n\tprocess = \"echo RAN-PROCESS >&2\"\n[gpg]\n\tprogram = \"echo RAN-GPG >&2\"\n[log]\n\tshowSignature = true\n[pager]\n\tlog = \"echo RAN-PAGERLOG >&2; cat\"\n\tdiff = \"echo RAN-PAGERDIFF >&2; cat\"\n",
            ws.join("hooks").display()
        )
        .as_bytes(),
    )
    .unwrap();
    drop(cfg);
    // Old mtime: git must re-read the file (the clean filter's trigger).
    std::process::Command::new("touch")
        .args(["-d", "2001-01-01", "a.txt"])
        .current_dir(ws)
        .status()
        .unwrap();
    std::fs::write(
        ws.join(".lesskey"),
        "#env\nLESSOPEN=|echo RAN-LESSOPEN >&2; cat %s\n",
    )
    .unwrap();
    for cmd in [
        "git status",
        "git diff",
        "git diff HEAD",
        "git log -p",
        "git show",
        "git blame a.txt",
        "git grep -n inside",
        "git log --stat",
        "less a.txt",
        "less -f a.txt | cat",
    ] {
        let r = confined(&lab, PermissionSet::Readonly, cmd, 20_000).await;
        let out = all_output(&r);
        assert!(
            !out.contains("RAN-"),
            "`{cmd}` ran a configured program: {out}"
        );
        assert!(
            !out.contains("Operation not permitted") || cmd.starts_with("less"),
            "`{cmd}`: {out}"
        );
    }
    // The forms still work (a diff needing a textconv of a blob needs a temp file, which the
    // readonly set has not: it fails closed, running nothing — checked above).
    let r = confined(
        &lab,
        PermissionSet::Readonly,
        "git status --short && git log --oneline",
        20_000,
    )
    .await;
    assert!(
        r.exit_code == Some(0) && r.stdout.contains("M a.txt") && r.stdout.contains("one"),
        "{}",
        all_output(&r)
    );
}

/// Issue 19 item 5: io_uring is unavailable in every set (ENOSYS for setup, enter, register):
/// its operations (open, socket…) would bypass the seccomp filter.
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn io_uring_is_refused_in_every_set() {
    let Some(lab) = lab() else { return };
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "this test needs /usr/bin/python3 to make raw syscalls; it cannot run here"
    );
    let cmd = "/usr/bin/python3 -c \"import ctypes; l = ctypes.CDLL(None, use_errno=True); print(*[(l.syscall(n, 0, 0, 0, 0, 0, 0), ctypes.get_errno()) for n in (425, 426, 427)])\"";
    for set in [
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
        PermissionSet::McpStandard,
    ] {
        let r = confined(&lab, set, cmd, 20_000).await;
        assert_eq!(
            r.stdout.trim(),
            "(-1, 38) (-1, 38) (-1, 38)",
            "{set:?}: {}",
            all_output(&r)
        );
    }
}

/// Issue 33 item 5: socket families are an allowlist per set. `AF_VSOCK` (which ignores network
/// namespaces: on a VM host it reaches the hypervisor's services), `AF_NETLINK` datagram sockets
/// and every other family get EPERM in every set — refused by the filter, whatever the kernel
/// would have said (`EAFNOSUPPORT` where a family is compiled out is not enough: the test wants
/// errno 1). INET and INET6 only in the sets whose way out is the egress forwarder, UNIX only in
/// the sets a human granted network to; `socketpair` everywhere.
#[tokio::test]
async fn socket_families_are_an_allowlist_per_set() {
    let Some(lab) = lab() else { return };
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "this test needs /usr/bin/python3 to create sockets; it cannot run here"
    );
    // Each family tried in turn: `name=ok` or `name=errno`.
    let probe = "/usr/bin/python3 -c \"
import socket, errno
fams = [('VSOCK', 40, socket.SOCK_STREAM), ('NETLINK', 16, socket.SOCK_DGRAM), ('NETLINK_RAW', 16, socket.SOCK_RAW),
        ('PACKET', 17, socket.SOCK_DGRAM), ('BLUETOOTH', 31, socket.SOCK_STREAM), ('ALG', 38, socket.SOCK_SEQPACKET),
        ('UNIX', 1, socket.SOCK_STREAM), ('INET', 2, socket.SOCK_STREAM), ('INET6', 10, socket.SOCK_STREAM),
        ('INET_RAW', 2, socket.SOCK_RAW)]
out = []
for name, fam, ty in fams:
    try:
        socket.socket(fam, ty).close(); out.append(name + '=ok')
    except OSError as e:
        out.append(name + '=' + str(e.errno))
a, b = socket.socketpair(); a.send(b'x'); out.append('PAIR=' + b.recv(1).decode())
print(' '.join(out))
\"";
    for set in [
        PermissionSet::Minimal,
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
        PermissionSet::NetworkApi,
        PermissionSet::McpStandard,
    ] {
        let r = if set.network() {
            confined_with(&lab, set, probe, 20_000, &[]).await.0
        } else {
            confined(&lab, set, probe, 20_000).await
        };
        let out = r.stdout.trim().to_string();
        let got = |name: &str| -> String {
            out.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{set:?}: no {name} in {}", all_output(&r)))
                .to_string()
        };
        for refused in [
            "VSOCK",
            "NETLINK",
            "NETLINK_RAW",
            "PACKET",
            "BLUETOOTH",
            "ALG",
            "INET_RAW",
        ] {
            assert_eq!(
                got(refused),
                "1",
                "{set:?}: {refused} was not refused with EPERM: {out}"
            );
        }
        let allowed = |f: bool| if f { "ok".to_string() } else { "1".to_string() };
        assert_eq!(got("UNIX"), allowed(set.unix_sockets()), "{set:?}: {out}");
        assert_eq!(got("INET"), allowed(set.network()), "{set:?}: {out}");
        assert_eq!(got("INET6"), allowed(set.network()), "{set:?}: {out}");
        assert_eq!(got("PAIR"), "x", "{set:?}: socketpair broke: {out}");
    }
}

/// Issue 33 item 7: x32 system call numbers (x86_64's with bit 30 set, under the same audit
/// architecture) went past the filter, which lists x86_64 numbers only. This kernel has x32
/// compiled out, so before the guard such a call returned ENOSYS; with it the process is killed
/// (SIGSYS, status 159 in bash) before the kernel looks at the number, here and on kernels that
/// run x32.
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn x32_system_call_numbers_kill_the_process_in_every_set() {
    let Some(lab) = lab() else { return };
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "this test needs /usr/bin/python3 to make raw syscalls; it cannot run here"
    );
    // getpid (39) and ptrace (101) with __X32_SYSCALL_BIT.
    let cmd = "/usr/bin/python3 -c \"import ctypes; l = ctypes.CDLL(None, use_errno=True); print('RET', l.syscall(0x40000000 | 39), l.syscall(0x40000000 | 101, 0, 0, 0, 0), ctypes.get_errno())\"; echo \"status=$?\"";
    for set in [
        PermissionSet::Minimal,
        PermissionSet::Filesystem,
        PermissionSet::McpStandard,
    ] {
        let r = if set.network() {
            confined_with(&lab, set, cmd, 20_000, &[]).await.0
        } else {
            confined(&lab, set, cmd, 20_000).await
        };
        let out = all_output(&r);
        assert!(
            !r.stdout.contains("RET"),
            "{set:?}: an x32 call returned: {out}"
        );
        assert!(
            out.contains("status=159"),
            "{set:?}: not killed by SIGSYS: {out}"
        );
    }
}

/// Issue 56: the system configuration ordinary tools read at start-up through a link into
/// /etc (Debian's `/usr/lib/python3.N/sitecustomize.py` → `/etc/python3.N/`) or from /etc
/// itself (`/etc/wgetrc`) is readable in the sets that read the system — the program entries'
/// `system_config`. Before, every python3 run printed `Error in sitecustomize … PermissionError`
/// and wget could not read `/etc/wgetrc`.
#[tokio::test]
async fn wget_and_python_read_their_system_configuration_in_every_set() {
    let Some(lab) = lab() else { return };
    let site = std::fs::read_dir("/usr/lib")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("sitecustomize.py"))
        .find(|p| std::fs::read_link(p).is_ok_and(|t| t.starts_with("/etc")));
    assert!(
        site.is_some() && Path::new("/usr/bin/python3").exists(),
        "CANNOT RUN HERE: this test needs Debian's python3 (/usr/bin/python3 with \
         /usr/lib/python3.N/sitecustomize.py linked into /etc): apt-get install python3"
    );
    assert!(
        Path::new("/usr/bin/wget").exists() && Path::new("/etc/wgetrc").exists(),
        "CANNOT RUN HERE: this test needs Debian's wget (/usr/bin/wget, /etc/wgetrc): apt-get install wget"
    );
    for set in [
        PermissionSet::Minimal,
        PermissionSet::Readonly,
        PermissionSet::Filesystem,
        PermissionSet::McpStandard,
    ] {
        let r = confined(&lab, set, "/usr/bin/python3 -c 'print(6 * 7)'", 20_000).await;
        let out = all_output(&r);
        assert!(
            r.exit_code == Some(0) && out.trim() == "42",
            "{set:?}: python3 printed more than its answer: {out}"
        );
        // No network here: what matters is that wget read its rc file before failing to connect.
        let r = confined(
            &lab,
            set,
            "/usr/bin/wget -q -t 1 -T 2 -O /dev/null http://127.0.0.1:9/ ; echo done",
            20_000,
        )
        .await;
        let out = all_output(&r);
        assert!(
            out.contains("done") && !out.contains("wgetrc"),
            "{set:?}: wget could not read its configuration: {out}"
        );
    }
}
