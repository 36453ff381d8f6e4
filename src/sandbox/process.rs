//! How every process of a command is started (owned by the sandbox, used by `bash::executor`
//! and the warm helpers): the fixed PATH, its own process group, killed with the worker
//! (`PR_SET_PDEATHSIG`) and when dropped, and the `sandbox-exec` helper's command line.

use nix::sys::signal::Signal;
use std::process::Stdio;

/// The only PATH commands see: system directories, never the workspace.
pub const SAFE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How every command is started: its own process group, killed with the worker
/// (`PR_SET_PDEATHSIG`) and when dropped, stdin (the spec) and output piped.
pub fn configure(cmd: &mut tokio::process::Command) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; this runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // (std already restores SIGPIPE's default disposition in the child.)
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// The sandbox helper `helper sandbox-exec`, configured as every command is (its spec goes on
/// its stdin; it needs no environment: the spec carries the command's).
pub fn helper_command(helper: &std::path::Path) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(helper);
    c.arg("sandbox-exec").current_dir("/").env_clear();
    configure(&mut c);
    c
}
