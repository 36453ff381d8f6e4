//! `brainloop mcp --client NAME [--timeout-s N]`: the MCP front-end on stdio (see
//! [`crate::mcp`]). stdout carries only the protocol; logs go to stderr (default level warn).

use crate::config::Config;
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// The client identity of every job this server queues (its grants apply). Set by the
    /// operator in the MCP client's configuration; the name the MCP client declares is ignored.
    #[arg(long, value_name = "NAME")]
    pub client: String,
    /// How long a call waits for its job's final result before returning (the job stays queued).
    #[arg(long, default_value_t = 300, value_name = "N")]
    pub timeout_s: u64,
    /// Serve only the `brainloop` tool (seed 001's single tool), without `brainloop_read`.
    #[arg(long)]
    pub one_tool: bool,
}

pub fn run(config: Config, args: &McpArgs) -> Result<i32> {
    if let Err(e) = crate::mcp::check_client_name(&args.client) {
        return Err(refused(e));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("brainloop-mcp")
        .build()
        .context("cannot start the async runtime")?;
    let opts = crate::mcp::Options {
        client: args.client.clone(),
        timeout: Duration::from_secs(args.timeout_s.max(1)),
        one_tool: args.one_tool,
    };
    let res = runtime.block_on(crate::mcp::serve(Arc::new(config), opts));
    runtime.shutdown_timeout(Duration::from_secs(1));
    match res {
        Err(e) if e.is::<crate::mcp::StartError>() => Err(refused(e)),
        r => r.map(|_| 0),
    }
}

/// The front-end cannot start: the client's `initialize` gets the reason (not a closed pipe).
pub(super) fn refused(e: anyhow::Error) -> anyhow::Error {
    crate::mcp::refuse_on_stdio(&crate::shown::line(&format!("{e:#}")));
    e
}
