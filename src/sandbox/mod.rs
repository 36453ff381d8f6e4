//! Runtime enforcement (DESIGN §5.11, seed 000's "double security"): every command runs confined
//! according to its permission set, whatever the classifier said.
//!
//! What each set reaches is a row of the profile table (`crate::permset::PROFILES`, rendered in
//! docs/permission-sets.md); [`spec_for`] turns the row into the paths, network and environment
//! of one command.
//!
//! The worker is multi-threaded, and `unshare(CLONE_NEWUSER)` refuses multi-threaded callers, so
//! confinement happens in a small single-threaded helper, `brainloop sandbox-exec`, which the
//! executor spawns with a [`Spec`] computed in advance (`exec.rs`). Mechanisms, one file each:
//! user + mount + PID (+ network) namespaces and a fresh /proc (`exec.rs`), Landlock file, TCP
//! and signal rules (`landlock.rs`), a seccomp filter for what Landlock cannot express
//! (`seccomp.rs`), a per-job cgroup for processes and memory (`cgroup.rs`), rlimits, and
//! `no_new_privs`. `detect.rs` probes all of it at start-up.
//!
//! Graded confinement (issue 20): the Landlock rules are built for the kernel's ABI (1 → 6), and
//! `guarantees.rs` states per set which guarantees hold at that level and which mechanism
//! provides each. A command is refused only when a guarantee of its set does not hold here
//! ([`prepare`] names it); with `[sandbox] required = false` it runs with every mechanism that
//! works (`Spec::best_effort`), and unconfined only when none does.

pub mod bpf;
pub mod cgroup;
pub mod deadline;
pub mod detect;
pub mod exec;
pub mod forward;
pub mod guarantees;
pub mod landlock;
pub mod marks;
pub mod neutral;
pub mod process;
pub mod seccomp;
pub mod warm;

use crate::permset::{PermissionSet, Profile, Workspace};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Resource limits applied to the command tree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Processes and threads in the job's cgroup (`pids.max`).
    pub max_processes: u64,
    /// Memory of the job's cgroup (bytes).
    pub max_memory_bytes: u64,
    pub max_open_files: u64,
    pub max_file_size_bytes: u64,
    pub max_cpu_seconds: u64,
    /// Fallbacks when no job cgroup can be created (on by default, issue 20; `0` turns one
    /// off): RLIMIT_NPROC (default `max_processes`) counts the processes of the user inside the
    /// job's user namespace and does not bind a worker running as root; RLIMIT_AS (default
    /// 16 GiB: address space, not memory — a JVM reserves a quarter of the host's memory for its
    /// heap and V8 reserves gigabytes for WebAssembly, so a tighter default breaks them) bounds
    /// each process, not the tree.
    pub rlimit_nproc_fallback: Option<u64>,
    pub rlimit_as_fallback: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_processes: 256,
            max_memory_bytes: 1 << 30,
            max_open_files: 1024,
            max_file_size_bytes: 1 << 30,
            max_cpu_seconds: 300,
            rlimit_nproc_fallback: Some(256),
            rlimit_as_fallback: Some(16 << 30),
        }
    }
}

/// Sandbox configuration (`[sandbox]`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Fail closed: when the sandbox cannot be enforced, commands are refused (not run unconfined).
    pub required: bool,
    /// Extra directories mcp-standard commands may read (the workspace always; never the data dir).
    pub readable_roots: Vec<PathBuf>,
    /// Toolchains outside the fixed PATH (a rustup toolchain, a Go install): readable by overlay
    /// runs, never writable, their `bin/` appended to PATH (`bash::runners`; never the data dir).
    pub toolchains: Vec<PathBuf>,
    pub limits: Limits,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            required: true,
            readable_roots: Vec::new(),
            toolchains: Vec::new(),
            limits: Limits::default(),
        }
    }
}

/// Everything the helper needs, computed by the worker before spawning it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    pub set: PermissionSet,
    pub command: String,
    /// The command's stdin is what follows the spec on the helper's stdin (operator hooks get
    /// their JSON this way); otherwise `/dev/null`.
    #[serde(default)]
    pub stdin: bool,
    pub workdir: PathBuf,
    pub env: Vec<(String, String)>,
    /// Read (and execute) beneath these.
    pub read: Vec<PathBuf>,
    /// Read and write beneath these.
    pub write: Vec<PathBuf>,
    /// Device files readable and writable (/dev/null...).
    pub devices: Vec<PathBuf>,
    pub network: bool,
    /// The job's private temporary directory (TMPDIR and HOME), writable.
    pub tmp_dir: Option<PathBuf>,
    pub limits: Limits,
    /// `cgroup.procs` files the helper joins before anything else.
    pub cgroup_procs: Vec<PathBuf>,
    /// Run on a copy-on-write view of the workspace (DESIGN §5.12): the helper mounts an
    /// overlay (lower = the workspace, upper/work under the data dir) on the workspace path
    /// inside the command's mount namespace; the real workspace is never written.
    #[serde(default)]
    pub overlay: Option<OverlaySpec>,
    /// Directories the helper bind-mounts over themselves `nosuid,nodev` in the command's mount
    /// namespace (the workspace when the set sees it, the private tmp): a setuid file there
    /// never runs with privileges inside the sandbox ("No privilege bits").
    #[serde(default)]
    pub nosuid: Vec<PathBuf>,
    /// The Landlock ABI to build the rules for (the helper never goes above the kernel's);
    /// `None`: the kernel's.
    #[serde(default)]
    pub landlock_abi: Option<i64>,
    /// `[sandbox] required = false`: apply every mechanism that works and skip the ones that
    /// fail (no namespaces, no Landlock, no seccomp) instead of refusing to run.
    #[serde(default)]
    pub best_effort: bool,
    /// Shared directories where host processes leave sockets and scratch files (`/tmp`,
    /// `/run`, …, [`HIDDEN_DIRS`] and the runtime dir): the helper mounts an empty tmpfs over
    /// each in the command's mount namespace, then binds back the paths of the spec beneath
    /// them (workspace, private tmp, readable roots, working dir), so the command sees its own
    /// files there and no host socket.
    #[serde(default)]
    pub hide: Vec<PathBuf>,
    /// The way out of the command's network namespace (issue 23): the worker's egress proxy
    /// socket, reached through a forwarder on 127.0.0.1:`port` inside it. Required for the
    /// network sets; an overlay run gets one too (it reaches only human-approved hosts).
    #[serde(default)]
    pub egress: Option<EgressSpec>,
    /// The command's deadline, absolute on `CLOCK_MONOTONIC` in nanoseconds (`deadline.rs`):
    /// the helper kills the command then, whether or not the worker runs. Set by the executor
    /// when it hands the spec over; `None` (a spec built by hand): no deadline of the helper.
    #[serde(default)]
    pub deadline_ns: Option<u64>,
    /// Where the helper appends its timing marks (`marks.rs`), when the log asks for them: a
    /// file under the data dir the worker created for this run; never open in the command.
    #[serde(default)]
    pub marks: Option<PathBuf>,
    /// The warm helper reserved for this spec (`warm.rs`), if any; worker-side only.
    #[serde(skip)]
    pub warm: Option<u64>,
}

/// The socket families a command of `spec` may create (the seccomp allowlist): its set's
/// ([`crate::permset::Profile::socket_families`]), plus `AF_INET`/`AF_INET6` when the egress
/// forwarder on 127.0.0.1 is its way out (an overlay run that reaches approved hosts).
pub fn socket_families(spec: &Spec) -> Vec<crate::permset::SocketFamily> {
    use crate::permset::SocketFamily;
    let mut f = spec.set.socket_families().to_vec();
    if spec.egress.is_some() {
        f.extend([SocketFamily::Inet, SocketFamily::Inet6]);
    }
    f.sort();
    f.dedup();
    f
}

/// Where the command's network namespace leads (see `forward.rs`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EgressSpec {
    /// The worker's proxy socket for this job (outside every path the command sees).
    pub socket: PathBuf,
    /// The forwarder's port on 127.0.0.1 inside the namespace.
    pub port: u16,
    /// Connections the forwarder holds at once; past it one is closed at once (0: 256).
    #[serde(default)]
    pub max_connections: usize,
    /// Once the proxy has ended its side of a connection, the time the command's side gets
    /// to end too (ms; 0: 10 s). A connection the proxy closed without a byte is closed at once.
    #[serde(default)]
    pub linger_ms: u64,
}

/// The proxy variables a command sees (both cases: curl reads only the lowercase `http_proxy`).
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

impl Spec {
    /// Routes the command's network through the egress proxy at `socket`: its own network
    /// namespace, the forwarder on 127.0.0.1:`port` (holding `max_connections` at most, see
    /// [`EgressSpec`]), and the proxy variables.
    pub fn route_through(
        &mut self,
        socket: &Path,
        port: u16,
        max_connections: usize,
        linger: std::time::Duration,
    ) {
        self.egress = Some(EgressSpec {
            socket: socket.to_path_buf(),
            port,
            max_connections,
            linger_ms: linger.as_millis() as u64,
        });
        let drop = |k: &str| PROXY_VARS.contains(&k) || k.eq_ignore_ascii_case("no_proxy");
        self.env.retain(|(k, _)| !drop(k));
        for k in PROXY_VARS {
            let scheme = if k.eq_ignore_ascii_case("all_proxy") {
                "socks5h"
            } else {
                "http"
            };
            self.env
                .push((k.to_string(), format!("{scheme}://127.0.0.1:{port}")));
        }
    }
}

/// Where the overlay of one job lives (both under the data dir, never visible to the command).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OverlaySpec {
    /// The workspace (lower layer and mount point).
    pub workspace: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// Caps on the upper layer ("Bounded overlays"): the helper sets RLIMIT_FSIZE to at most
    /// `max_bytes + 1`, measures the upper layer every [`OVERLAY_POLL_MS`] while the command
    /// runs and once after it exited, and over either cap kills the sandbox, writes
    /// `over_cap_file` and exits with [`OVER_CAP`]. `None`: no cap.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    #[serde(default)]
    pub max_entries: Option<u64>,
    /// Where the helper records which cap was exceeded (`bytes LIMIT MEASURED`,
    /// `entries LIMIT MEASURED` or `unmeasured`); never visible to the command.
    #[serde(default)]
    pub over_cap_file: Option<PathBuf>,
}

/// Exit code of the helper when it stopped an overlay run over its cap (the record in
/// `OverlaySpec::over_cap_file` is what the worker trusts: a command can exit 122 too).
pub const OVER_CAP: i32 = 122;
/// How often the helper measures an overlay's upper layer while the command runs. A polling
/// design overshoots: between two measurements a command can write as fast as the disk allows
/// (each file stays under RLIMIT_FSIZE = the byte cap + 1); what is *kept* is bounded exactly,
/// because the helper measures once more after the command exits.
pub const OVERLAY_POLL_MS: u64 = 100;

/// System directories every set reads (programs, libraries).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// The /etc entries programs need — not /etc itself (/etc/shadow, /etc/sudoers stay out).
pub const ETC_ENTRIES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/bash.bashrc",
    "/etc/inputrc",
    "/etc/profile",
    "/etc/environment",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/default/locale",
    "/etc/mime.types",
    "/etc/magic",
    "/etc/gitconfig",
    "/etc/terminfo",
    "/etc/python3",
    "/etc/alternatives",
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/papersize",
    "/etc/mailcap",
    "/etc/xdg",
    "/etc/npmrc",
    "/etc/pip.conf",
];
/// Devices every set may use.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];
/// Read-only extras: the sandbox's own /proc, CPU topology (nproc), DNS stub for network sets.
pub const PROC_AND_SYS: &[&str] = &["/proc", "/sys/devices/system/cpu"];
pub const NETWORK_EXTRAS: &[&str] = &["/run/systemd/resolve", "/run/resolvconf"];
/// Shared directories hidden behind an empty tmpfs in every set (issue 19: host UNIX sockets
/// such as `/run/docker.sock`, `/tmp/*.sock`, the D-Bus system bus live here). Symlinks among
/// them (`/var/run` → `/run`) are skipped by the helper; the worker's `XDG_RUNTIME_DIR` is
/// added when set.
pub const HIDDEN_DIRS: &[&str] = &["/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm"];

/// The system configuration the program entries say their programs read at start-up
/// (`system_config`: python's `/etc/python3.*`, wget's `/etc/wgetrc` …), as the paths that
/// exist: a `*`-ended prefix names the entries of its directory that begin with it. Read in
/// every set, as [`ETC_ENTRIES`] are.
fn system_config() -> Vec<PathBuf> {
    let Ok(table) = crate::programs::table() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for pattern in table.system_config() {
        match pattern.strip_suffix('*') {
            None => out.extend(existing(&[pattern])),
            Some(prefix) => out.extend(with_prefix(Path::new(prefix))),
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The entries of `prefix`'s directory whose names begin with its last component.
fn with_prefix(prefix: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(start)) = (prefix.parent(), prefix.file_name()) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let start = start.as_encoded_bytes();
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().as_encoded_bytes().starts_with(start))
        .map(|e| e.path())
        .collect()
}

fn existing(paths: &[&str]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}

/// The confinement of `set` for one command, from its row of the profile table.
#[allow(clippy::too_many_arguments)]
pub fn spec_for(
    set: PermissionSet,
    command: &str,
    workdir: &Path,
    workspace: &Path,
    readable_roots: &[PathBuf],
    tmp_dir: Option<PathBuf>,
    env: Vec<(String, String)>,
    limits: &Limits,
) -> Spec {
    let p = set.profile();
    // The private temporary directory is allowed by path and announced through TMPDIR and HOME
    // (not mounted over /tmp: the workspace itself may live under /tmp).
    let tmp_dir = if p.private_tmp { tmp_dir } else { None };
    let (read, write) = roots(p, workspace, readable_roots, tmp_dir.as_deref());
    // The working dir must be usable: the requested one for sets that see the workspace, else
    // the private tmp (or / when there is none).
    let ws_visible = p.workspace != Workspace::None;
    let workdir = if ws_visible {
        workdir.to_path_buf()
    } else if let Some(t) = &tmp_dir {
        t.clone()
    } else {
        PathBuf::from("/")
    };
    let env = command_env(p, env, &workdir, tmp_dir.as_deref());
    let mut nosuid = Vec::new();
    if ws_visible && workspace.is_dir() {
        nosuid.push(workspace.to_path_buf());
    }
    if let Some(t) = &tmp_dir {
        nosuid.push(t.clone());
    }
    Spec {
        set,
        command: command.to_string(),
        stdin: false,
        nosuid,
        hide: hidden_dirs(),
        workdir,
        env,
        read,
        write,
        devices: existing(DEVICES),
        network: p.network,
        tmp_dir,
        limits: limits.clone(),
        cgroup_procs: Vec::new(),
        overlay: None,
        landlock_abi: None,
        best_effort: false,
        egress: None,
        deadline_ns: None,
        marks: None,
        warm: None,
    }
}

/// What a command of profile `p` may read and write (the private tmp, when it has one, is
/// writable).
fn roots(
    p: &Profile,
    workspace: &Path,
    readable_roots: &[PathBuf],
    tmp_dir: Option<&Path>,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut read = existing(SYSTEM_DIRS);
    read.extend(existing(ETC_ENTRIES));
    read.extend(system_config());
    read.extend(existing(PROC_AND_SYS));
    let mut write = Vec::new();
    match p.workspace {
        Workspace::None => {}
        Workspace::Read => read.push(workspace.to_path_buf()),
        Workspace::Write => write.push(workspace.to_path_buf()),
    }
    if p.readable_roots {
        read.extend(readable_roots.iter().filter(|p| p.exists()).cloned());
    }
    if p.network {
        read.extend(existing(NETWORK_EXTRAS));
    }
    if let Some(t) = tmp_dir {
        write.push(t.to_path_buf());
    }
    (read, write)
}

/// The command's environment: git's and less's configuration neutralised for the sets that run
/// without a human (with the repository's driver names when the workspace is visible), HOME
/// and TMPDIR at the private tmp, or HOME at the working dir when there is none.
fn command_env(
    p: &Profile,
    mut env: Vec<(String, String)>,
    workdir: &Path,
    tmp_dir: Option<&Path>,
) -> Vec<(String, String)> {
    if p.neutralised {
        let ws_visible = p.workspace != Workspace::None;
        neutral::neutralise(&mut env, ws_visible.then_some(workdir));
    }
    env.retain(|(k, _)| k != "HOME" && k != "TMPDIR");
    match tmp_dir {
        Some(t) => {
            env.push(("HOME".into(), t.display().to_string()));
            env.push(("TMPDIR".into(), t.display().to_string()));
        }
        None => env.push(("HOME".into(), workdir.display().to_string())),
    }
    env
}

/// [`HIDDEN_DIRS`] and the worker's runtime dir, when set.
fn hidden_dirs() -> Vec<PathBuf> {
    let mut hide: Vec<PathBuf> = HIDDEN_DIRS.iter().map(PathBuf::from).collect();
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if rt.is_absolute() && !hide.contains(&rt) {
            hide.push(rt);
        }
    }
    hide
}

/// The name prefix of this instance's private tmp dirs: `brainloop-job-<8 hex of the data dir>-`.
/// Tagged by data dir so that the start-up sweep of one instance never touches another's.
pub fn tmp_prefix(data_dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    let h = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    format!("brainloop-job-{}-", hex::encode(&h[..4]))
}

/// Removes the private tmp dirs a previous run of this instance left behind (a crash skips the
/// per-job cleanup). Call at start-up, under the instance lock and before any job runs: no dir
/// with this instance's prefix can then be in use. Returns how many were removed.
pub fn sweep_private_tmp(data_dir: &Path) -> usize {
    sweep_private_tmp_in(&std::env::temp_dir(), data_dir)
}

fn sweep_private_tmp_in(tmp: &Path, data_dir: &Path) -> usize {
    let prefix = tmp_prefix(data_dir);
    let Ok(rd) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let ours = e
            .file_name()
            .to_str()
            .is_some_and(|f| f.starts_with(&prefix));
        // Only real directories (never follow a symlink planted under that name).
        if ours
            && e.file_type().is_ok_and(|t| t.is_dir())
            && std::fs::remove_dir_all(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// The exit code the helper uses when it could not set the sandbox up (nothing ran).
pub const SETUP_FAILED: i32 = 125;
/// Prefix of the helper's own error messages on stderr.
pub const ERROR_PREFIX: &str = "brainloop sandbox-exec:";

/// The confinement of one job, ready to hand to the executor, and what to clean up after it.
#[derive(Debug)]
pub struct Prepared {
    /// (helper binary, spec), or `None` to run unconfined.
    pub sandbox: Option<(PathBuf, Spec)>,
    /// What the result's `sandbox` field says.
    pub label: String,
    cgroup: Option<cgroup::JobCgroup>,
    tmp_dir: Option<PathBuf>,
    /// The warm helper reserved for the command (`warm.rs`).
    warm: Option<u64>,
}

impl Prepared {
    /// Removes the job's cgroup and private tmp dir (and kills its warm helper if the command
    /// never ran).
    pub fn finish(self) {
        if let Some(id) = self.warm {
            warm::discard(id);
        }
        if let Some(c) = &self.cgroup {
            c.remove();
        }
        if let Some(t) = &self.tmp_dir {
            let _ = std::fs::remove_dir_all(t);
        }
    }

    /// [`finish`](Self::finish) on the blocking pool, not awaited (a cgroup removal may wait for
    /// exiting processes): the command's result does not wait for its clean-up. Inline when
    /// there is no runtime.
    pub fn finish_in_background(self) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || self.finish())),
            Err(_) => self.finish(),
        }
    }
}

/// Prepares the sandbox of one command in `set`, or explains why it cannot run (always for a
/// set the table does not confine, whatever `required` says). Fail closed
/// (when `required`): refused when a guarantee `set` states does not hold on this kernel (the
/// error names it, see `guarantees.rs`). With `required = false` the command runs with every
/// mechanism that works (best effort; the label says what is missing), and unconfined only when
/// none works.
#[allow(clippy::too_many_arguments)]
pub fn prepare(
    level: &detect::Level,
    cfg: &SandboxConfig,
    set: PermissionSet,
    command: &str,
    workdir: &Path,
    workspace: &Path,
    env: Vec<(String, String)>,
    data_dir: &Path,
    job_id: i64,
) -> Result<Prepared, String> {
    if !set.profile().confined {
        return Err(format!(
            "the {set} set has no confinement: the sandbox never runs a command in it"
        ));
    }
    let mechs = level.mechanisms();
    let unmet = if level.enforcing || !level.namespaces {
        guarantees::unmet(set, &mechs)
    } else {
        // The probe failed for a reason the table does not model (helper missing, setup error).
        Some(format!(
            "the sandbox cannot be enforced here ({})",
            level.label()
        ))
    };
    let best_effort = unmet.is_some();
    if let Some(why) = &unmet {
        if cfg.required {
            return Err(format!(
                "{why}; commands of this set are refused (fail closed). Run `brainloop sandbox` for what this machine guarantees; upgrade the kernel, or set [sandbox] required = false to run them with every mechanism that works"
            ));
        }
        if !level.namespaces && mechs.landlock_abi < 1 && !mechs.seccomp {
            return Ok(Prepared {
                sandbox: None,
                label: format!("none ({why})"),
                cgroup: None,
                tmp_dir: None,
                warm: None,
            });
        }
    }
    let helper = helper_exe().map_err(|e| format!("cannot find the sandbox helper: {e}"))?;
    let tmp_dir = if set.private_tmp() {
        let template =
            std::env::temp_dir().join(format!("{}{job_id}-XXXXXX", tmp_prefix(data_dir)));
        Some(
            nix::unistd::mkdtemp(&template)
                .map_err(|e| format!("cannot create the private tmp dir: {e}"))?,
        )
    } else {
        None
    };
    // A warm helper (strict specs only) comes with its job cgroup, created ahead.
    let reserved = if best_effort {
        None
    } else {
        warm::reserve(&helper, &cfg.limits)
    };
    tracing::debug!(warm = reserved.is_some(), "sandbox helper");
    let (cg, warm) = match reserved {
        Some(r) => (r.cgroup, Some(r.id)),
        None => (
            cgroup::JobCgroup::create(
                &format!("brainloop-{}-{job_id}", std::process::id()),
                &cfg.limits,
            ),
            None,
        ),
    };
    let mut spec = spec_for(
        set,
        command,
        workdir,
        workspace,
        &cfg.readable_roots,
        tmp_dir.clone(),
        env,
        &cfg.limits,
    );
    if let Some(c) = &cg {
        spec.cgroup_procs = c.procs_files();
    }
    spec.landlock_abi = Some(level.landlock_abi);
    spec.best_effort = best_effort;
    spec.warm = warm;
    let label = match &unmet {
        Some(why) => format!(
            "{} (best effort, [sandbox] required = false: {}; {why})",
            set.as_str(),
            level.label()
        ),
        None => format!("{} ({})", set.as_str(), level.label()),
    };
    Ok(Prepared {
        label,
        sandbox: Some((helper, spec)),
        cgroup: cg,
        tmp_dir,
        warm,
    })
}

/// The sandbox helper is the running executable itself, started through `/proc/self/exe`
/// (issue 21): a package upgrade that replaces or deletes the binary's path under a running
/// worker must not break the next command. Falls back to the path where /proc is missing.
pub fn helper_exe() -> std::io::Result<PathBuf> {
    let me = PathBuf::from("/proc/self/exe");
    if me.exists() {
        Ok(me)
    } else {
        std::env::current_exe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_removes_only_this_instances_leftover_tmp_dirs() {
        let t = tempfile::tempdir().unwrap();
        let (tmp, mine, other) = (
            t.path().join("tmp"),
            t.path().join("data-a"),
            t.path().join("data-b"),
        );
        for d in [&tmp, &mine, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        let (pa, pb) = (tmp_prefix(&mine), tmp_prefix(&other));
        assert_ne!(pa, pb);
        std::fs::create_dir_all(tmp.join(format!("{pa}7-abc/deep"))).unwrap();
        std::fs::write(tmp.join(format!("{pa}7-abc/deep/f")), "x").unwrap();
        std::fs::create_dir_all(tmp.join(format!("{pa}8-def"))).unwrap();
        std::fs::create_dir_all(tmp.join(format!("{pb}7-abc"))).unwrap();
        std::fs::create_dir_all(tmp.join("unrelated")).unwrap();
        // A symlink under our prefix pointing elsewhere: removed as a name at most, never
        // followed.
        let victim = t.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("keep"), "k").unwrap();
        std::os::unix::fs::symlink(&victim, tmp.join(format!("{pa}9-lnk"))).unwrap();
        assert_eq!(sweep_private_tmp_in(&tmp, &mine), 2);
        let left: std::collections::BTreeSet<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            left,
            [
                format!("{pa}9-lnk"),
                format!("{pb}7-abc"),
                "unrelated".into()
            ]
            .into_iter()
            .collect()
        );
        assert!(victim.join("keep").exists());
    }
}
