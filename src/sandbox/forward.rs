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

use super::EgressSpec;
use nix::sys::signal::Signal;
use nix::unistd::{fork, ForkResult};

/// Brings `lo` up, binds the listener, forks the forwarder. Called in PID 1, single-threaded.
pub fn start(e: &EgressSpec) -> Result<(), String> {
    lo_up()?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", e.port))
        .map_err(|err| format!("egress: listen on 127.0.0.1:{}: {err}", e.port))?;
    // SAFETY: PID 1 is single-threaded here (no runtime has been started in this process).
    match unsafe { fork() } {
        Err(err) => Err(format!("egress: fork the forwarder: {err}")),
        Ok(ForkResult::Child) => {
            let code = match forwarder(listener, &e.socket) {
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

fn forwarder(listener: std::net::TcpListener, socket: &std::path::Path) -> Result<(), String> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("pdeathsig: {e}"))?;
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("nonblocking: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let socket = socket.to_path_buf();
    rt.block_on(async move {
        let l =
            tokio::net::TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
        loop {
            let Ok((mut tcp, _)) = l.accept().await else {
                tokio::task::yield_now().await;
                continue;
            };
            let path = socket.clone();
            tokio::spawn(async move {
                if let Ok(mut up) = tokio::net::UnixStream::connect(&path).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut up).await;
                }
            });
        }
    })
}
