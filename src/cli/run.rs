//! `brainloop run`: checks the configuration, migrates, takes the instance lock, then runs the
//! supervisor on a tokio runtime until SIGTERM/SIGINT.

use crate::actions::Registry;
use crate::config::Config;
use crate::db::{migrate, Stores};
use crate::lockfile::InstanceLock;
use crate::shutdown::Shutdown;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Default working directory of commands [env: BRAINLOOP_WORKSPACE] [default: ./workspace,
    /// created at the first start]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Create/upgrade the databases and exit (same as `brainloop init`).
    #[arg(long)]
    pub init_only: bool,
    /// Print the effective configuration as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Create the workspace when it does not exist (without it, a missing workspace other than
    /// the default ./workspace is refused at start).
    #[arg(long)]
    pub create: bool,
}

pub fn run(mut config: Config, args: &RunArgs) -> Result<i32> {
    if args.print_config {
        // The derived per-client share is shown as the value it takes.
        let effective = Config {
            max_slots_per_client: Some(config.slots_per_client()),
            ..config
        };
        print!("{}", toml::to_string_pretty(&effective)?);
        return Ok(0);
    }
    if args.init_only {
        return super::init::run(&config);
    }
    crate::memory::limit_arenas(); // before any thread (r2d2, notify, tokio) starts
    settle_dirs(&mut config, args.create)?;
    check_data_dir_outside_workspace(&config.data_dir, &config.workspace)?;
    let lock = Arc::new(InstanceLock::acquire(&config.data_dir)?);
    let lock_watch = watch_lock_file(Arc::clone(&lock), config.heartbeat_interval_ms);
    migrate::migrate_all(&config.data_dir)?;
    check_consistent(&config)?;
    // The worker holds secrets (API keys) in memory: forbid core dumps and ptrace by peers, and
    // make /proc/<pid>/environ unreadable to other processes of the same user.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot mark the worker non-dumpable");
    }
    check_readable_roots(&config.data_dir, &config.sandbox.readable_roots)?;
    check_toolchains(
        &config.data_dir,
        &config.workspace,
        &config.sandbox.toolchains,
    )?;
    let helper = crate::sandbox::helper_exe()
        .context("cannot find the brainloop binary for the sandbox helper")?;
    let sandbox = crate::sandbox::detect::probe(&helper).with_limits(&config.sandbox.limits);
    if let Some(abi) = crate::sandbox::landlock::overridden() {
        tracing::warn!(
            abi,
            "BRAINLOOP_TEST_LANDLOCK_ABI lowers the Landlock level (tests only)"
        );
    }
    if sandbox.enforcing {
        tracing::info!(level = %sandbox.status_line(), "sandbox enforcing (graded: `brainloop sandbox` shows the guarantees per set)");
    } else if config.sandbox.required {
        tracing::error!(level = %sandbox.status_line(), "sandbox NOT available: commands will be refused (fail closed); set [sandbox] required = false to run them with every mechanism that works");
    } else {
        tracing::warn!(level = %sandbox.status_line(), "sandbox NOT fully available: commands run best effort with every mechanism that works ([sandbox] required = false)");
    }
    let sandbox = Arc::new(sandbox);
    let config = Arc::new(config);
    let registry = Arc::new(Registry::new(&config)?);
    let stores = Stores::open(&config.data_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("brainloop")
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async {
        let shutdown = Shutdown::new();
        shutdown
            .listen_for_signals()
            .context("cannot install signal handlers")?;
        let r = crate::supervisor::run(config, stores, registry, sandbox, shutdown.clone()).await;
        // Idle warm sandbox helpers and their cgroups go with the worker, and the egress
        // proxies' socket directory: within what is left of the shutdown budget.
        let end = shutdown.phase_end(crate::shutdown::EXIT_SHARE, std::time::Duration::ZERO);
        if tokio::time::timeout_at(end.into(), crate::sandbox::warm::drain())
            .await
            .is_err()
        {
            tracing::warn!("idle sandbox helpers not reaped within the shutdown budget");
        }
        crate::egress::sockdir::remove();
        r
    });
    // Jobs abandoned after cancellation, and calls still waiting on a locked database, may
    // still hold blocking threads; do not wait for them beyond the budget.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    lock_watch.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(lock);
    result.map(|_| 0)
}

/// Makes the data dir and the workspace absolute (a relative path would mean something else to
/// the sandbox helper and the overlay), creates the default workspace on a first run, and refuses
/// a workspace inside the data dir (every read and write there is refused job by job). Another
/// missing workspace is refused (a typo would start a worker whose every command fails), or
/// created with `--create`.
fn settle_dirs(config: &mut Config, create: bool) -> Result<()> {
    let default = config.workspace == Path::new(crate::config::DEFAULT_WORKSPACE);
    let missing = !config.workspace.exists();
    if missing && !default && !create {
        // Before anything is created: a typo leaves no data dir behind.
        bail!(
            "the workspace {} does not exist: every command would fail in it. Check the path \
             (--workspace / BRAINLOOP_WORKSPACE / workspace in the configuration), create it, \
             or pass --create to let `brainloop run` create it",
            absolute(&config.workspace)?.display()
        );
    }
    migrate::ensure_data_dir(&config.data_dir)?;
    config.data_dir = config
        .data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve data dir {}", config.data_dir.display()))?;
    if missing {
        std::fs::create_dir_all(&config.workspace).with_context(|| {
            format!("cannot create the workspace {}", config.workspace.display())
        })?;
        tracing::info!(
            workspace = %config.workspace.display(),
            "created the workspace (commands work there; --workspace / BRAINLOOP_WORKSPACE chooses another)"
        );
    }
    config.workspace = absolute(&config.workspace)?;
    if config.workspace.starts_with(&config.data_dir) {
        bail!(
            "the workspace {} lies inside the data dir {}: commands could never read or write it. \
             Choose a workspace outside it (--workspace / BRAINLOOP_WORKSPACE)",
            config.workspace.display(),
            config.data_dir.display()
        );
    }
    tracing::info!(data_dir = %config.data_dir.display(), workspace = %config.workspace.display(), "directories");
    Ok(())
}

/// `p` as the worker sees it: canonical when it exists, else absolute. Every command resolves
/// the workspace so (`{workspace}` in a grant must expand to an absolute path).
pub(super) fn absolute(p: &Path) -> Result<PathBuf> {
    match p.canonicalize() {
        Ok(p) => Ok(p),
        Err(_) => std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display())),
    }
}

/// Re-verifies `brainloop.lock` every heartbeat period on its own thread and puts it back if it
/// was deleted or replaced (the data-dir lock keeps guarding the worker meanwhile). Returns the
/// stop flag.
fn watch_lock_file(lock: Arc<InstanceLock>, period_ms: u64) -> Arc<std::sync::atomic::AtomicBool> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let period = std::time::Duration::from_millis(period_ms.max(100));
    let spawned = std::thread::Builder::new()
        .name("lock-watch".into())
        .spawn(move || {
            let mut warned = false;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(period);
                match lock.reverify() {
                    Ok(true) => tracing::warn!(path = %lock.path.display(), "the lock file was deleted or replaced; put it back with this worker's pid (the lock on the data directory kept any second worker out)"),
                    Ok(false) => warned = false,
                    Err(e) if !warned => {
                        warned = true;
                        tracing::warn!(error = format!("{e:#}"), "cannot re-verify the lock file");
                    }
                    Err(_) => {}
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the lock-file watcher");
    }
    stop
}

/// Issue 21: the five files must still belong together (identity, no lost results, input not
/// rolled back); otherwise refuse, naming the `brainloop repair` flag that accepts the loss.
fn check_consistent(config: &Config) -> Result<()> {
    let problems = crate::db::identity::check(&config.data_dir, config.retention.results_days)
        .context("cannot check that the data dir's databases belong together")?;
    if problems.is_empty() {
        return Ok(());
    }
    bail!(
        "{}",
        crate::db::identity::refusal(&config.data_dir, &problems)
    )
}

/// DESIGN §2: the data dir must never be reachable by sandboxed commands, which may see the
/// workspace. Refuse to start if it lies inside it.
pub fn check_data_dir_outside_workspace(data_dir: &Path, workspace: &Path) -> Result<()> {
    let data = data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve data dir {}", data_dir.display()))?;
    let Ok(ws) = workspace.canonicalize() else {
        tracing::warn!(workspace = %workspace.display(), "workspace does not exist (yet); commands will need it");
        return Ok(());
    };
    if data.starts_with(&ws) {
        bail!(
            "the data dir {} lies inside the workspace {}: sandboxed commands could read or change the worker's databases. \
             Move it outside (--data-dir / BRAINLOOP_DATA_DIR) or choose another workspace (--workspace / BRAINLOOP_WORKSPACE)",
            data.display(),
            ws.display()
        );
    }
    Ok(())
}

/// DESIGN §2: no readable root of the sandbox may contain the data dir.
pub fn check_readable_roots(data_dir: &Path, roots: &[PathBuf]) -> Result<()> {
    let data = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    for r in roots {
        let root = r.canonicalize().unwrap_or_else(|_| r.clone());
        if data.starts_with(&root) {
            bail!(
                "[sandbox] readable_roots contains {} which holds the data dir {}: sandboxed commands could read the worker's databases. Remove it or move the data dir",
                root.display(),
                data.display()
            );
        }
    }
    Ok(())
}

/// `[sandbox] toolchains` (issue 35): their `bin/` joins the PATH of overlay runs, so none may
/// hold the data dir (DESIGN §2) nor lie in the workspace, which the agent writes (programs never
/// resolve from the workspace, DESIGN §5.2).
pub fn check_toolchains(data_dir: &Path, workspace: &Path, toolchains: &[PathBuf]) -> Result<()> {
    let ws = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    for t in toolchains {
        let root = t.canonicalize().unwrap_or_else(|_| t.clone());
        if !root.is_absolute() || root.starts_with(&ws) || ws.starts_with(&root) {
            bail!(
                "[sandbox] toolchains contains {}, which is relative or overlaps the workspace {}: the agent could put programs on the PATH. List toolchains outside the workspace by absolute path",
                root.display(),
                ws.display()
            );
        }
        let data = data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf());
        if data.starts_with(&root) {
            bail!(
                "[sandbox] toolchains contains {} which holds the data dir {}: sandboxed commands could read the worker's databases. Remove it or move the data dir",
                root.display(),
                data.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchains_never_overlap_the_workspace_or_the_data_dir() {
        let d = tempfile::tempdir().unwrap();
        let (ws, data, tc) = (
            d.path().join("ws"),
            d.path().join("data"),
            d.path().join("tc"),
        );
        for p in [&ws, &data, &tc] {
            std::fs::create_dir_all(p).unwrap();
        }
        assert!(check_toolchains(&data, &ws, std::slice::from_ref(&tc)).is_ok());
        assert!(check_toolchains(&data, &ws, &[ws.join("bin")]).is_err());
        assert!(check_toolchains(&data, &ws, &[d.path().to_path_buf()]).is_err());
        assert!(check_toolchains(&data, &ws, &[PathBuf::from("rel")]).is_err());
        let far = tempfile::tempdir().unwrap();
        let far_data = far.path().join("data");
        assert!(check_toolchains(&far_data, &ws, &[far.path().to_path_buf()]).is_err());
    }

    #[test]
    fn a_data_dir_inside_the_workspace_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        let inside = ws.path().join("sub/data");
        std::fs::create_dir_all(&inside).unwrap();
        let err = check_data_dir_outside_workspace(&inside, ws.path()).unwrap_err();
        assert!(err.to_string().contains("inside the workspace"), "{err}");
        // Through a symlink too.
        let other = tempfile::tempdir().unwrap();
        let link = other.path().join("link");
        std::os::unix::fs::symlink(&inside, &link).unwrap();
        assert!(check_data_dir_outside_workspace(&link, ws.path()).is_err());
        // The workspace itself counts as inside.
        assert!(check_data_dir_outside_workspace(ws.path(), ws.path()).is_err());
        check_data_dir_outside_workspace(other.path(), ws.path()).unwrap();
    }
}
