//! The one MCP tool, `brainloop`, and its input schema, generated from the action registry at
//! start-up: `{action, params}`, both required, `action` a plain inline `enum` of every visible
//! action (so the enum can never miss one — ORIGIN.md's bug), `params` an object whose schema is
//! given by `get_schema`. Seed 001's "progressive disclosure": one tool, details on demand.

use crate::actions::Registry;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};
use std::sync::Arc;

/// The tool's name.
pub const TOOL_NAME: &str = "brainloop";

/// The read tool's name (issue 55): reads that prompt nobody.
pub const READ_TOOL_NAME: &str = "brainloop_read";

/// The actions `brainloop_read` serves: each reads, sends nothing to a third party, and changes
/// nothing a human would be asked about (`read_code` only without its model digest). Actions
/// that call the LLM (`read_code` with a digest, `audit_code`, `explore`) stay on `brainloop`.
pub const READ_ACTIONS: [&str; 10] = [
    "list_actions",
    "get_schema",
    "get_result",
    "get_stats",
    "check_command",
    "infer_permissions",
    "read_sqlite",
    "read_markdown",
    "read_config",
    "read_code",
];

/// Checks a call of `brainloop_read`: one of [`READ_ACTIONS`]; `read_code` gets
/// `"digest": false` when it does not say (a read never calls the model) and is refused with
/// `"digest": true`.
pub fn read_only(action: &str, params: &mut Value) -> Result<(), String> {
    if !READ_ACTIONS.contains(&action) {
        return Err(format!(
            "{READ_TOOL_NAME} serves only reads ({}): call {TOOL_NAME} for this action (nothing was queued)",
            READ_ACTIONS.join(", ")
        ));
    }
    if action == "read_code" {
        match params.get("digest") {
            None | Some(Value::Bool(false)) => {
                if let Value::Object(m) = params {
                    m.insert("digest".into(), Value::Bool(false));
                }
            }
            Some(_) => {
                return Err(format!(
                    "read_code with a digest sends workspace text to the model: call {TOOL_NAME} for it (nothing was queued)"
                ))
            }
        }
    }
    Ok(())
}

/// The argument names the tool accepts; anything else is refused.
pub const ARGUMENTS: [&str; 2] = ["action", "params"];

/// The tool's input schema.
pub fn input_schema(registry: &Registry) -> JsonObject {
    schema_of(registry.names())
}

/// The read tool's input schema: the same shape, its enum only the reads the registry has.
pub fn read_schema(registry: &Registry) -> JsonObject {
    let names = registry.names();
    schema_of(
        READ_ACTIONS
            .into_iter()
            .filter(|a| names.contains(a))
            .collect(),
    )
}

fn schema_of(names: Vec<&str>) -> JsonObject {
    let names: Vec<Value> = names.into_iter().map(Value::from).collect();
    let schema = json!({
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": names,
                "description": "The action to run. `list_actions` lists them all with descriptions; `get_schema` {\"action_name\": NAME} gives one action's params schema."
            },
            "params": {
                "type": "object",
                "description": "The action's params (an object; {} when it takes none), as described by get_schema.",
                "additionalProperties": true
            }
        },
        "required": ["action", "params"],
        "additionalProperties": false
    });
    match schema {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// The tool as listed by `tools/list`.
pub fn tool(registry: &Registry, client: &str) -> Tool {
    let description = format!(
        "Runs brainloop actions (readers, shell commands that pass the command-security policy, \
         LLM work) through the brainloop worker, as client {client:?}. Start with \
         action=list_actions, params={{}}; use get_schema for one action's params. Other calls \
         are queued as jobs and this call returns the job's result as JSON. A command that needs \
         a human returns status pending_validation with a validation id at once: an operator \
         approves it outside MCP (`brainloop approve ID`), then poll with action=get_result, \
         params={{\"job_id\": N}}. Calls that fail, are denied or blocked come back with isError."
    );
    let annotations = ToolAnnotations::with_title("brainloop")
        .read_only(false)
        .destructive(true)
        .idempotent(false)
        .open_world(true);
    Tool::new(TOOL_NAME, description, Arc::new(input_schema(registry)))
        .with_annotations(annotations)
}

/// `brainloop_read` as listed by `tools/list`: honest read-only annotations, so clients need
/// not ask before each read or poll.
pub fn read_tool(registry: &Registry, client: &str) -> Tool {
    let description = format!(
        "Reads through brainloop, as client {client:?}, without changing anything: {}. \
         Same arguments as {TOOL_NAME} ({{action, params}}); read_code runs without its model \
         digest here. Poll a job with action=get_result, params={{\"job_id\": N}}. Anything \
         else (commands, writes, model calls) is refused: use {TOOL_NAME}.",
        READ_ACTIONS.join(", ")
    );
    let annotations = ToolAnnotations::with_title("brainloop (read-only)")
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false);
    Tool::new(READ_TOOL_NAME, description, Arc::new(read_schema(registry)))
        .with_annotations(annotations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_enum_lists_every_visible_action_inline() {
        let r = Registry::new(&Config::default()).unwrap();
        let s = input_schema(&r);
        let listed: Vec<&str> = s["properties"]["action"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(listed, r.names());
        for needed in [
            "execute_bash",
            "check_command",
            "get_result",
            "list_actions",
        ] {
            assert!(listed.contains(&needed), "{needed} missing");
        }
        assert_eq!(s["required"], json!(["action", "params"]));
        assert!(!Value::Object(s).to_string().contains("$ref"));
    }
}
