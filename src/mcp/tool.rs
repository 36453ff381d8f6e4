//! The MCP tools, `brainloop` and the read-only `brainloop_read` (issue 55), and their input
//! schemas, generated from the action registry at start-up: `{action, params}`, both required,
//! `action` a plain inline `enum` of every visible action (so the enum can never miss one —
//! ORIGIN.md's bug), `params` an object whose schema is given by `get_schema`. Seed 001's
//! "progressive disclosure": details on demand. `brainloop_read` also declares its
//! `outputSchema`, [`output_schema`]: the reply envelope every call returns ([`super::reply`]).

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
        .with_raw_output_schema(Arc::new(output_schema()))
}

/// The structured content of every reply ([`super::reply::Reply`]), whatever the action: its
/// fixed envelope. The `result` inside is the action's own (`get_schema` names the params, not
/// the result), so it stays any JSON value. Clients validate each non-error result against it.
pub fn output_schema() -> JsonObject {
    let schema = json!({
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "description": "succeeded, or how the call or its job stands or ended: pending_validation, queued, running, failed, denied, blocked, expired, cancelled, ..."
            },
            "job_id": {"type": "integer", "description": "The job the call queued (absent when the front-end answered itself)."},
            "result": {"description": "The action's result (any JSON; null when there is none)."},
            "error": {"type": ["string", "null"], "description": "Why the call did not succeed (null when it did)."},
            "validation_id": {"type": "string", "description": "pending_validation: the validation an operator approves outside MCP."},
            "message": {"type": "string", "description": "pending_validation: how the job gets approved, and how to poll it."},
            "poll": {
                "type": "object",
                "description": "The call that polls the job: action get_result with its job id.",
                "properties": {
                    "action": {"const": "get_result"},
                    "params": {
                        "type": "object",
                        "properties": {"job_id": {"type": "integer"}},
                        "required": ["job_id"]
                    }
                },
                "required": ["action", "params"]
            },
            "queued": {"type": "boolean", "description": "false: refused before anything was queued."}
        },
        "required": ["status", "result", "error"],
        "additionalProperties": false
    });
    match schema {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
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

    /// Every kind of reply validates against the read tool's output schema, and a reply that
    /// drifted from the envelope would not.
    #[test]
    fn every_reply_fits_the_output_schema() {
        use super::super::reply::Reply;
        let v = jsonschema::validator_for(&Value::Object(output_schema())).unwrap();
        for r in [
            Reply::answered(json!([{"name": "x"}])),
            Reply::refused("denied", "no"),
            Reply::finished(3, "succeeded", Some(json!({"stdout": "hi"})), None),
            Reply::finished(3, "failed", None, Some("boom".into())),
            Reply::pending(4, Some(json!({"validation_id": "v-1"}))),
            Reply::still_open(5, Some("running"), "stopped waiting"),
            Reply::still_open(5, None, "cancelled by the client"),
        ] {
            let body = r.into_result().structured_content.unwrap();
            assert!(v.is_valid(&body), "{body}");
        }
        assert!(
            !v.is_valid(&json!({"status": "succeeded", "result": 1, "error": null, "extra": 1}))
        );
        assert!(!v.is_valid(&json!({"status": "succeeded", "result": 1})));
    }
}
