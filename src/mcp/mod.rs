//! `brainloop mcp`: the MCP front-end (issue 11, DESIGN §1 "one executor"). A thin stdio
//! server that never executes an action: it answers `list_actions` / `get_schema` itself, turns
//! every other call of its tools into a job in input.db for the operator's `--client`, and
//! waits for that job's result in output.db — or, for a client that declared the Tasks
//! extension, answers with the task the job is and serves `tasks/get` / `tasks/cancel` from the
//! databases (issue 55).
//!
//! | file | concern |
//! |---|---|
//! | `tool.rs` | the `brainloop` and `brainloop_read` tools and their input schemas, generated from the registry |
//! | `task.rs` | a job as an MCP task: its id, `tasks/get` from the databases, `tasks/cancel` as a withdrawal |
//! | `server.rs` | the rmcp `ServerHandler` (initialize, tools/list, tools/call, cancellation) |
//! | `call.rs` | one call: argument checks, force_execute grant, direct answers, queue + wait |
//! | `queue.rs` | inserting the job, reading its result row and the heartbeat |
//! | `watch.rs` | waking waiters when output.db changes (inotify + `PRAGMA data_version`) |
//! | `liveness.rs` | is the worker running (heartbeat age, state) |
//! | `audit.rs` | the front-end's own audit rows (a second writer of metadata.db) |
//! | `reply.rs` | JSON text + structured content, `isError` |
//! | `lines.rs` | stdin/stdout line by line: a parse error for a line that is not JSON (rate-limited) |
//! | `refuse.rs` | a front-end that cannot start answers `initialize` with why, not a closed pipe |

mod audit;
mod call;
mod lines;
mod liveness;
mod queue;
mod refuse;
mod reply;
mod server;
mod task;
mod tool;
mod watch;

pub use liveness::Liveness;
pub use refuse::refuse_on_stdio;
pub use tool::{input_schema, READ_ACTIONS, READ_TOOL_NAME, TOOL_NAME};

use crate::actions::Registry;
use crate::config::Config;
use anyhow::{bail, Context, Result};
use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;

/// What the operator chose on the command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// The client identity every job is inserted with.
    pub client: String,
    /// How long a call waits for its job's final result.
    pub timeout: Duration,
    /// Serve seed 001's exact shape: the one `brainloop` tool, no `brainloop_read`.
    pub one_tool: bool,
}

/// Checks a `--client` name: non-empty, at most 128 characters, no control characters.
pub fn check_client_name(name: &str) -> Result<()> {
    if name.trim().is_empty() {
        bail!("--client must name the client (a key of [clients] in the configuration, or any name for the minimal default grants)");
    }
    if name.chars().count() > 128 || name.chars().any(char::is_control) {
        bail!("--client {name:?}: at most 128 characters, no control characters");
    }
    Ok(())
}

/// Serves MCP on stdin/stdout until the client closes the connection. A failure before the
/// handshake is [`StartError`]: the caller answers the client with it ([`refuse_on_stdio`]).
pub async fn serve(config: Arc<Config>, opts: Options) -> Result<()> {
    let frontend = frontend(&config, &opts).map_err(|e| anyhow::Error::new(StartError(e)))?;
    tracing::info!(client = %opts.client, data_dir = %config.data_dir.display(), "MCP front-end on stdio");
    let (from_client, to_client, writer) = lines::stdio();
    let service = server::Server::new(frontend, opts.one_tool)
        .serve((from_client, to_client))
        .await
        .context("MCP initialization failed")?;
    let reason = service.waiting().await.context("MCP service failed")?;
    tracing::info!(?reason, "MCP client disconnected");
    // rmcp has closed its side: let the writer pass on the last answers.
    if tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .is_err()
    {
        tracing::warn!("stdout did not drain within 2 s");
    }
    Ok(())
}

/// The front-end could not start (before any byte of the protocol was read).
#[derive(Debug)]
pub struct StartError(pub anyhow::Error);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for StartError {}

/// Everything a call needs, opened once.
fn frontend(config: &Arc<Config>, opts: &Options) -> Result<Arc<call::Frontend>> {
    check_client_name(&opts.client)?;
    if opts.client == "local" {
        tracing::warn!(
            "--client local gives MCP callers the local producer's broad default grants"
        );
    }
    let registry = Arc::new(Registry::new(config)?);
    let queue = queue::Queue::open(&config.data_dir)?;
    let watch = watch::OutputWatch::start(&config.data_dir)?;
    tracing::debug!(watching = watch.is_watching(), "output.db watch");
    let auditor = audit::Auditor::new(&config.data_dir);
    Ok(Arc::new(call::Frontend {
        config: Arc::clone(config),
        registry,
        client: opts.client.clone(),
        timeout: opts.timeout,
        queue,
        watch,
        auditor,
    }))
}
