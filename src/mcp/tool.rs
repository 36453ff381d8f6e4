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

/// The argument names the tool accepts; anything else is refused.
pub const ARGUMENTS: [&str; 2] = ["action", "params"];

/// The tool's input schema.
pub fn input_schema(registry: &Registry) -> JsonObject {
    let names: Vec<Value> = registry.names().into_iter().map(Value::from).collect();
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
