//! The agent's tools — `run_command {command}`, `read_file {path}`, `write_file {path,
//! content}`, `finish {summary}` — as API tool definitions, and the strict parsing of what the
//! model proposes: a native tool call (arguments JSON checked against the tool's fields), or,
//! in the strict-JSON fallback, an answer that must be exactly one JSON object
//! `{"tool": NAME, "arguments": {...}}` (one surrounding code fence tolerated, nothing else).
//! There is no field through which the model could ask to skip validation (no
//! `force_execute`): unknown fields are refused.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// One step the model proposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case")]
pub enum Tool {
    RunCommand { command: String },
    ReadFile { path: String },
    WriteFile { path: String, content: String },
    Finish { summary: String },
}

/// (field, description)
type Field = (&'static str, &'static str);
/// (name, description, fields)
type ToolDef = (&'static str, &'static str, &'static [Field]);

const TOOLS: &[ToolDef] = &[
    (
        "run_command",
        "Run one shell command in the session's working directory. It passes brainloop's command-security policy: pure commands run at once, blocked ones never, others wait for a human. Returns exit code, stdout and stderr (capped).",
        &[("command", "the shell command")],
    ),
    (
        "read_file",
        "Read a text file (absolute, or relative to the working directory) under the client's read grants. Returns its content (capped).",
        &[("path", "the file to read")],
    ),
    (
        "write_file",
        "Write (create or replace) a text file under the client's write grants. A human may have to approve the write first.",
        &[("path", "the file to write"), ("content", "the complete new content")],
    ),
    (
        "finish",
        "End the session: the goal is reached, or cannot be reached. Give a short summary of what was done.",
        &[("summary", "what was done and the outcome")],
    ),
];

fn parameters(fields: &[Field]) -> Value {
    let props: Map<String, Value> = fields
        .iter()
        .map(|(n, d)| (n.to_string(), json!({"type": "string", "description": d})))
        .collect();
    let required: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// The `tools` of a request (strict schemas, as Cerebras wants them).
pub fn definitions() -> Vec<Value> {
    TOOLS
        .iter()
        .map(|(name, desc, fields)| {
            json!({"type": "function", "function": {
                "name": name, "description": desc, "strict": true, "parameters": parameters(fields)
            }})
        })
        .collect()
}

/// The tools described in text, for the strict-JSON fallback prompt.
pub fn described() -> String {
    TOOLS
        .iter()
        .map(|(name, desc, fields)| {
            let args: Vec<String> = fields
                .iter()
                .map(|(n, _)| format!("\"{n}\": string"))
                .collect();
            format!("- {name} {{{}}}: {desc}", args.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tool `name` with `arguments`, checked strictly: an object with exactly the tool's
/// fields, each a non-empty string (`content` may be empty).
pub fn parse_call(name: &str, arguments: &Value) -> Result<Tool, String> {
    let Some((_, _, fields)) = TOOLS.iter().find(|(n, _, _)| *n == name) else {
        return Err(format!(
            "unknown tool {name:?}; the tools are run_command, read_file, write_file, finish"
        ));
    };
    let Value::Object(obj) = arguments else {
        return Err(format!("the arguments of {name} must be a JSON object"));
    };
    if let Some(extra) = obj.keys().find(|k| !fields.iter().any(|(f, _)| f == k)) {
        return Err(format!("{name} has no argument {extra:?}"));
    }
    let get = |f: &str| -> Result<String, String> {
        match obj.get(f) {
            Some(Value::String(s)) if !s.is_empty() || f == "content" => Ok(s.clone()),
            Some(Value::String(_)) => Err(format!("{name}: {f} is empty")),
            Some(_) => Err(format!("{name}: {f} must be a string")),
            None => Err(format!("{name}: missing argument {f}")),
        }
    };
    Ok(match name {
        "run_command" => Tool::RunCommand {
            command: get("command")?,
        },
        "read_file" => Tool::ReadFile { path: get("path")? },
        "write_file" => Tool::WriteFile {
            path: get("path")?,
            content: get("content")?,
        },
        _ => Tool::Finish {
            summary: get("summary")?,
        },
    })
}

/// A native tool call: its arguments are a JSON text.
pub fn parse_native(name: &str, arguments: &str) -> Result<Tool, String> {
    let args: Value = if arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(arguments)
            .map_err(|e| format!("the arguments of {name} are not valid JSON ({e})"))?
    };
    parse_call(name, &args)
}

/// A strict-JSON answer: exactly one object `{"tool": NAME, "arguments": {...}}`.
pub fn parse_strict(answer: &str) -> Result<Tool, String> {
    let mut t = answer.trim();
    if let Some(rest) = t.strip_prefix("```") {
        // One fence around the object, nothing outside it.
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric());
        t = rest
            .trim()
            .strip_suffix("```")
            .ok_or("an unclosed code fence")?
            .trim();
    }
    let v: Value = serde_json::from_str(t).map_err(|e| {
        format!("the answer is not exactly one JSON object ({e}); answer with {{\"tool\": NAME, \"arguments\": {{...}}}} and nothing else")
    })?;
    let Value::Object(obj) = &v else {
        return Err(
            "the answer must be a JSON object {\"tool\": NAME, \"arguments\": {...}}".into(),
        );
    };
    if let Some(extra) = obj.keys().find(|k| *k != "tool" && *k != "arguments") {
        return Err(format!(
            "unexpected key {extra:?}: only \"tool\" and \"arguments\""
        ));
    }
    let name = obj
        .get("tool")
        .and_then(Value::as_str)
        .ok_or("missing \"tool\" (a string)")?;
    parse_call(name, obj.get("arguments").unwrap_or(&Value::Null))
}

impl Tool {
    pub fn name(&self) -> &'static str {
        match self {
            Tool::RunCommand { .. } => "run_command",
            Tool::ReadFile { .. } => "read_file",
            Tool::WriteFile { .. } => "write_file",
            Tool::Finish { .. } => "finish",
        }
    }

    /// The arguments as the model gave them (for the fallback transcript and the result).
    pub fn arguments(&self) -> Value {
        match self {
            Tool::RunCommand { command } => json!({"command": command}),
            Tool::ReadFile { path } => json!({"path": path}),
            Tool::WriteFile { path, content } => json!({"path": path, "content": content}),
            Tool::Finish { summary } => json!({"summary": summary}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_strict_function_schemas() {
        let d = definitions();
        assert_eq!(d.len(), 4);
        let run = &d[0]["function"];
        assert_eq!(run["name"], "run_command");
        assert_eq!(run["parameters"]["required"], json!(["command"]));
        assert_eq!(run["parameters"]["additionalProperties"], false);
    }

    #[test]
    fn native_calls_parse_strictly() {
        assert_eq!(
            parse_native("run_command", r#"{"command": "ls"}"#).unwrap(),
            Tool::RunCommand {
                command: "ls".into()
            }
        );
        assert!(
            parse_native("run_command", r#"{"command": "ls", "force_execute": true}"#)
                .unwrap_err()
                .contains("force_execute")
        );
        assert!(parse_native("run_command", r#"{"command": 3}"#).is_err());
        assert!(parse_native("run_command", r#"{"command": "#).is_err());
        assert!(parse_native("sudo", "{}")
            .unwrap_err()
            .contains("unknown tool"));
        assert_eq!(
            parse_native("write_file", r#"{"path": "a", "content": ""}"#).unwrap(),
            Tool::WriteFile {
                path: "a".into(),
                content: String::new()
            }
        );
    }

    #[test]
    fn strict_json_answers_are_exactly_one_object() {
        assert_eq!(
            parse_strict(r#" {"tool": "finish", "arguments": {"summary": "done"}} "#).unwrap(),
            Tool::Finish {
                summary: "done".into()
            }
        );
        assert!(parse_strict(
            "```json\n{\"tool\": \"read_file\", \"arguments\": {\"path\": \"x\"}}\n```"
        )
        .is_ok());
        for bad in [
            "I will run ls",
            r#"Sure: {"tool": "finish", "arguments": {"summary": "x"}}"#,
            r#"{"tool": "finish", "arguments": {"summary": "x"}} {"tool": "finish"}"#,
            r#"{"tool": "finish", "arguments": {"summary": "x"}, "approve": true}"#,
            r#"[{"tool": "finish"}]"#,
            r#"{"tool": "finish"}"#,
            "```json\n{\"tool\": \"finish\", \"arguments\": {\"summary\": \"x\"}}",
        ] {
            assert!(parse_strict(bad).is_err(), "accepted {bad:?}");
        }
    }
}
