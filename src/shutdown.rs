//! Shutdown signalling. The first SIGTERM/SIGINT asks the worker to stop claiming and drain;
//! a second one asks it to hurry (cancel running jobs now instead of waiting for the drain window).
//!
//! Like mini-redis, the signal is a token every long-running task watches; nothing is torn down
//! from outside.

use tokio_util::sync::CancellationToken;

#[derive(Clone, Default)]
pub struct Shutdown {
    /// Fired by the first signal: stop claiming, drain.
    pub requested: CancellationToken,
    /// Fired by a second signal: skip the rest of the drain window.
    pub hurry: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Listens for SIGTERM and SIGINT in a background task.
    pub fn listen_for_signals(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let me = self.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                seen += 1;
                if seen == 1 {
                    tracing::info!(signal = name, "shutdown requested: draining running jobs");
                    me.requested.cancel();
                } else {
                    tracing::warn!(signal = name, "second signal: cancelling running jobs now");
                    me.hurry.cancel();
                }
            }
        });
        Ok(())
    }
}
