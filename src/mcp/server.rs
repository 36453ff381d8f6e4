//! The rmcp [`ServerHandler`]: `initialize` (protocol version negotiation is rmcp's), one tool
//! in `tools/list`, `tools/call` handed to [`Frontend::call`] with the request's cancellation
//! token (fired by `notifications/cancelled`) and, when the request carries a progress token,
//! a [`Progress`] sink (the job id after 1 s of waiting, then a beat every 10 s). Notifications are never answered (rmcp), and
//! nothing here writes to stdout: it is the protocol channel, logs go to stderr.

use super::call::{Frontend, Progress};
use super::tool::{self, TOOL_NAME};
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer};
use std::sync::Arc;

#[derive(Clone)]
pub struct Server {
    frontend: Arc<Frontend>,
    tool: Tool,
}

impl Server {
    pub fn new(frontend: Arc<Frontend>) -> Server {
        let tool = tool::tool(&frontend.registry, &frontend.client);
        Server { frontend, tool }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("brainloop", env!("CARGO_PKG_VERSION"))
                    .with_title("brainloop worker"),
            )
            .with_instructions(format!(
                "One tool, `brainloop`, with {{action, params}}. Call it with action=list_actions, \
                 params={{}} first. You act as client {:?}; commands that need a human return a \
                 validation id that an operator approves outside MCP.",
                self.frontend.client
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![self.tool.clone()]))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == TOOL_NAME).then(|| self.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != TOOL_NAME {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {:?}: the only tool is {TOOL_NAME:?}",
                    request.name
                ),
                None,
            ));
        }
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
        });
        let reply = self
            .frontend
            .call(request.arguments, context.ct, progress)
            .await;
        Ok(reply.into_result().into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let declared = context
            .peer
            .peer_info()
            .map(|i| i.client_info.name.clone())
            .unwrap_or_default();
        // The declared name is informative only: jobs always carry the operator's --client.
        tracing::info!(declared_client = %declared, client = %self.frontend.client, "MCP client initialized");
    }
}
