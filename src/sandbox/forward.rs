//! The way out of a command's network namespace (issue 23): the helper's PID 1 brings `lo` up,
//! listens on 127.0.0.1:[`EgressSpec::port`] inside the namespace, and forks a forwarder that
//! copies every TCP connection made there to the worker's egress proxy socket
//! ([`EgressSpec::socket`], a path outside everything the command can see). The namespace has no
//! other interface: a tool that ignores `HTTP_PROXY`/`ALL_PROXY` has no network at all.
//!
//! The forwarder is forked before PID 1 covers `/tmp`, `/run`… (it keeps the helper's view, in
//! which the socket exists), is not dumpable (its `/proc` entries stay out of the command's
//! reach), dies with PID 1 (PDEATHSIG, and the PID namespace ends with PID 1), and is neither
//! Landlocked nor filtered: it runs no code of the command's.
//!
//! Bounded like the proxy (issue 33): at most [`EgressSpec::max_connections`] connections at once
//! (past it one is closed at once); a connection the proxy closed without answering (past its
//! cap, or no request head in time) is closed at once, one it answered and ended gets
//! [`EgressSpec::linger_ms`] for the command's side to end; accept errors pause with back-off
//! instead of spinning.

use super::EgressSpec;
use nix::sys::signal::Signal;
use nix::unistd::{fork, ForkResult};
use std::sync::Arc;
use std::time::Duration;

/// [`EgressSpec::max_connections`] when unset.
const DEFAULT_MAX: usize = 256;
/// [`EgressSpec::linger_ms`] when unset.
const DEFAULT_LINGER: Duration = Duration::from_secs(10);
/// The longest pause after an accept error (it doubles from 10 ms).
const PAUSE_MAX: Duration = Duration::from_secs(1);

/// Brings `lo` up, binds the listener, forks the forwarder. Called in PID 1, single-threaded.
pub fn start(e: &EgressSpec) -> Result<(), String> {
    lo_up()?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", e.port))
        .map_err(|err| format!("egress: listen on 127.0.0.1:{}: {err}", e.port))?;
    // SAFETY: PID 1 is single-threaded here (no runtime has been started in this process).
    match unsafe { fork() } {
        Err(err) => Err(format!("egress: fork the forwarder: {err}")),
        Ok(ForkResult::Child) => {
            let code = match forwarder(listener, e) {
                Ok(()) => 0,
                Err(err) => {
                    eprintln!("{} egress forwarder: {err}", super::ERROR_PREFIX);
                    1
                }
            };
            // SAFETY: leaving the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { .. }) => Ok(()),
    }
}

/// `ip link set lo up` in the current network namespace.
fn lo_up() -> Result<(), String> {
    // SAFETY: plain socket/ioctl calls on a zeroed `ifreq` we own; the fd is closed below.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(format!(
                "egress: socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        let mut res = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr);
        if res == 0 {
            ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            res = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr);
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if res != 0 {
            return Err(format!("egress: bring lo up: {err}"));
        }
    }
    Ok(())
}

fn forwarder(listener: std::net::TcpListener, e: &EgressSpec) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("nonblocking: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let socket = Arc::new(e.socket.clone());
    let max = if e.max_connections == 0 {
        DEFAULT_MAX
    } else {
        e.max_connections
    };
    let linger = match e.linger_ms {
        0 => DEFAULT_LINGER,
        ms => Duration::from_millis(ms),
    };
    rt.block_on(async move {
        let l =
            tokio::net::TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
        let slots = Arc::new(tokio::sync::Semaphore::new(max));
        let mut pause = Duration::ZERO;
        loop {
            let tcp = match l.accept().await {
                Ok((tcp, _)) => tcp,
                Err(_) => {
                    // Out of descriptors, most likely: wait for connections to end.
                    pause = (pause * 2).clamp(Duration::from_millis(10), PAUSE_MAX);
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            pause = Duration::ZERO;
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                continue; // past the cap: `tcp` is closed here
            };
            let path = socket.clone();
            tokio::spawn(async move {
                relay(tcp, &path, linger).await;
                drop(permit);
            });
        }
    })
}

/// Copies one connection both ways until both ended; see the module doc for when it ends.
async fn relay(tcp: tokio::net::TcpStream, path: &std::path::Path, linger: Duration) {
    use tokio::io::AsyncWriteExt;
    let Ok(up) = tokio::net::UnixStream::connect(path).await else {
        return;
    };
    let (mut tr, mut tw) = tcp.into_split();
    let (mut ur, mut uw) = up.into_split();
    let down = async {
        let n = tokio::io::copy(&mut ur, &mut tw).await.unwrap_or(0);
        let _ = tw.shutdown().await;
        n
    };
    let upward = async {
        let _ = tokio::io::copy(&mut tr, &mut uw).await;
        let _ = uw.shutdown().await;
    };
    tokio::pin!(down, upward);
    tokio::select! {
        n = &mut down => {
            // The proxy ended its side: nothing said means closed unread (its cap, or no head
            // in time), so the command's side goes at once; else it gets `linger` to end.
            if n > 0 {
                let _ = tokio::time::timeout(linger, upward).await;
            }
        }
        _ = &mut upward => {
            down.await;
        }
    }
}
