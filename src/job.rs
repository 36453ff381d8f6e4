//! What a handler sees of the job it runs, and how one action calls another (issue 32): the
//! job's types live here, below the action registry, so that the engines that run actions on a
//! job's behalf (`runcode`) and the subsystems a handler calls (`ask`, `egress`, `bash`) never
//! import `actions`. `Outcome` is the job's end as `output.db` stores it (`db::output`).

use crate::ask::{ApprovedRun, Asker};
use crate::clients::ClientGrants;
use crate::config::Config;
use crate::db::Stores;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use crate::db::output::Outcome;

pub type HandlerFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// The actions a job may call on its own behalf (`run_code`'s `mcp.brainloop.*` calls, a loop's
/// commands): implemented by `actions::Registry`. A call is checked exactly as a job is
/// (schema, grants, then the handler) and runs for the same job and client.
pub trait Actions: Send + Sync {
    /// Runs `action` with `params` (JSON text) in `ctx`.
    fn call(&self, ctx: JobCtx, action: &str, params: &str) -> HandlerFuture;
    /// The registered name of `name` (aliases resolved), if there is such an action.
    fn canonical(&self, name: &str) -> Option<&'static str>;
    /// The listed actions' names.
    fn names(&self) -> Vec<&'static str>;
}

/// What a handler sees of the job it runs.
#[derive(Clone)]
pub struct JobCtx {
    pub job_id: i64,
    pub client_id: String,
    pub attempt: u32,
    /// Fired when the worker must stop this job (shutdown after the drain window).
    pub cancel: CancellationToken,
    pub stores: Arc<Stores>,
    pub config: Arc<Config>,
    pub actions: Arc<dyn Actions>,
    pub stats: Arc<crate::stats::Stats>,
    /// The client's effective grants, loaded for actions that declare required grants.
    pub grants: Option<Arc<ClientGrants>>,
    /// A human approved this job's command (a consumed approval of its snapshot).
    pub approval: Option<ApprovedRun>,
    /// What the sandbox can enforce on this machine (probed at start-up).
    pub sandbox: Arc<crate::sandbox::detect::Level>,
    /// The LLM client shared by every job (calls fail with a clear error when there is no key).
    pub llm: Arc<crate::llm::Llm>,
}

impl JobCtx {
    /// Who asks a human on this job's behalf (`crate::ask`).
    pub fn asker(&self) -> Asker<'_> {
        Asker {
            stores: &self.stores,
            stats: &self.stats,
            job_id: self.job_id,
            client_id: &self.client_id,
            ttl_ms: self.config.validation_ttl_ms,
        }
    }
}
