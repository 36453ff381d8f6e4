//! Where a `mcp.<tool>.<op>(args)` call goes. brainloop is not an MCP client of other servers:
//! `mcp.brainloop.<action>` is the way out, and becomes that brainloop action for the same
//! client, through `actions::run` — the same schema check, grants, policy, approvals and
//! sandbox as a job. Other tools of the mapping (`db`, `slack`, ...) and unknown tools fail
//! with an error that says so (thrown in the code, which may catch it).

use crate::infer::McpPermissions;
use crate::job::Actions;

/// Actions code may not call: itself (no nesting of engines).
const REFUSED: &[&str] = &["run_code"];

/// The brainloop action a call runs, or the error thrown in the code.
pub fn route(
    actions: &dyn Actions,
    mapping: &McpPermissions,
    tool: &str,
    op: &str,
) -> Result<String, String> {
    let class = mapping.classify(tool, op);
    match class.canonical.as_deref() {
        Some("brainloop") => match actions.canonical(op) {
            Some(name) if REFUSED.contains(&name) => Err(format!(
                "mcp.{tool}.{op}: {name} cannot be called from run_code"
            )),
            Some(name) => Ok(name.to_string()),
            None => Err(format!(
                "mcp.{tool}.{op}: brainloop has no action {op:?}; available: {}",
                actions.names().iter().filter(|n| !REFUSED.contains(n)).cloned().collect::<Vec<_>>().join(", ")
            )),
        },
        Some(known) => Err(format!(
            "mcp.{tool}.{op}: brainloop has no connection to the {known} tool; code reaches the outside only through mcp.brainloop.<action> (see list_actions)"
        )),
        None => Err(format!(
            "mcp.{tool}.{op}: unknown tool {tool:?}; code reaches the outside only through mcp.brainloop.<action> (see list_actions)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's answers, as far as routing reads them.
    struct Named(&'static [&'static str]);

    impl Actions for Named {
        fn call(&self, _: crate::job::JobCtx, _: &str, _: &str) -> crate::job::HandlerFuture {
            unreachable!("routing never runs an action")
        }
        fn canonical(&self, name: &str) -> Option<&'static str> {
            self.0.iter().copied().find(|n| *n == name)
        }
        fn names(&self) -> Vec<&'static str> {
            self.0.to_vec()
        }
    }

    #[test]
    fn only_brainloop_actions_are_reachable() {
        let r = &Named(&["execute_bash", "run_code", "ping"]);
        let m = McpPermissions::defaults();
        assert_eq!(
            route(r, &m, "brainloop", "execute_bash").unwrap(),
            "execute_bash"
        );
        assert!(route(r, &m, "brainloop", "run_code")
            .unwrap_err()
            .contains("cannot be called"));
        assert!(route(r, &m, "brainloop", "nope")
            .unwrap_err()
            .contains("no action"));
        assert!(route(r, &m, "slack", "send")
            .unwrap_err()
            .contains("no connection"));
        assert!(route(r, &m, "zzz", "x")
            .unwrap_err()
            .contains("unknown tool"));
    }
}
