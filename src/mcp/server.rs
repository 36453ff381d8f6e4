//! The rmcp [`ServerHandler`]: `initialize` (protocol version negotiation is rmcp's; the
//! server declares the Tasks extension), the tools of `tools/list` — `brainloop` and the
//! read-only `brainloop_read`, or `brainloop` alone with `--one-tool` (seed 001's shape) —,
//! `tools/call` handed to [`Frontend::call`] with the request's cancellation token (fired by
//! `notifications/cancelled`), a [`Progress`] sink when the request carries a progress token,
//! and whether the client declared tasks (then a queued job answers as a task); `tasks/get` and
//! `tasks/cancel` ([`super::task`]). Notifications are never answered (rmcp), and nothing here
//! writes to stdout: it is the protocol channel, logs go to stderr.

use super::call::{Answer, Frontend, Mode, Progress};
use super::tool::{self, READ_TOOL_NAME};
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use std::sync::Arc;

#[derive(Clone)]
pub struct Server {
    frontend: Arc<Frontend>,
    tools: Vec<Tool>,
}

impl Server {
    pub fn new(frontend: Arc<Frontend>, one_tool: bool) -> Server {
        let mut tools = vec![tool::tool(&frontend.registry, &frontend.client)];
        if !one_tool {
            tools.push(tool::read_tool(&frontend.registry, &frontend.client));
        }
        Server { frontend, tools }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let tools = if self.tools.len() == 1 {
            "One tool, `brainloop`, with {action, params}.".to_string()
        } else {
            "Two tools with {action, params}: `brainloop_read` for reads (list_actions, get_schema, \
             get_result, ...; it changes nothing) and `brainloop` for everything."
                .to_string()
        };
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(
            Implementation::new("brainloop", env!("CARGO_PKG_VERSION"))
                .with_title("brainloop worker"),
        )
        .with_instructions(format!(
            "{tools} Call action=list_actions, params={{}} first. You act as client {:?}; \
             commands that need a human wait for a validation an operator approves outside MCP.",
            self.frontend.client
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.get_tool(&request.name).is_none() {
            let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}: the tools are {names:?}",
                    crate::shown::line(&request.name)
                ),
                None,
            ));
        }
        let mode = Mode {
            read_only: request.name == READ_TOOL_NAME,
            as_task: context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks()),
        };
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
        });
        let answer = self
            .frontend
            .call(request.arguments, mode, context.ct, progress)
            .await;
        Ok(match answer {
            Answer::Reply(reply) => reply.into_result().into(),
            Answer::Task(task) => CallToolResponse::Task(task),
        })
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.frontend.get_task(&request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.frontend.cancel_task(&request.task_id).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let declared = context
            .peer
            .peer_info()
            .map(|i| i.client_info.name.clone())
            .unwrap_or_default();
        // The declared name is informative only: jobs always carry the operator's --client.
        tracing::info!(declared_client = %crate::shown::line(&declared), client = %self.frontend.client, "MCP client initialized");
    }
}
