//! What a call returns: one JSON object, sent both as the text content (JSON, never a debug
//! rendering — ORIGIN.md's `%v` bug) and as structured content, with `isError` set when the
//! call did not produce a succeeded result (failed, denied, blocked, expired, refused, timed
//! out, ...). A job waiting for a human is not an error: the reply says how it gets approved.

use rmcp::model::CallToolResult;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub body: Value,
    pub is_error: bool,
}

impl Reply {
    /// Answered by the front-end itself (list_actions, get_schema).
    pub fn answered(result: Value) -> Reply {
        Reply {
            body: json!({"status": "succeeded", "result": result, "error": null}),
            is_error: false,
        }
    }

    /// Refused before anything was queued; `status` is the audit status.
    pub fn refused(status: &str, error: impl Into<String>) -> Reply {
        Reply {
            body: json!({"status": status, "result": null, "error": error.into(), "queued": false}),
            is_error: true,
        }
    }

    /// A job's final row.
    pub fn finished(
        job_id: i64,
        status: &str,
        result: Option<Value>,
        error: Option<String>,
    ) -> Reply {
        Reply {
            body: json!({"job_id": job_id, "status": status, "result": result, "error": error}),
            is_error: status != "succeeded",
        }
    }

    /// The job waits for a human: returned at once with the validation id and the way out.
    pub fn pending(job_id: i64, result: Option<Value>) -> Reply {
        let validation_id = validation_id(result.as_ref());
        Reply {
            body: json!({
                "job_id": job_id,
                "status": "pending_validation",
                "validation_id": validation_id,
                "result": result,
                "error": null,
                "message": format!(
                    "job {job_id} waits for a human: an operator approves it on the worker's host with \
                     `brainloop approve {validation_id}` (or refuses with `brainloop deny {validation_id}`); \
                     there is no approve path over MCP. Then poll with action=get_result, params={{\"job_id\": {job_id}}}."
                ),
                "poll": {"action": "get_result", "params": {"job_id": job_id}},
            }),
            is_error: false,
        }
    }

    /// The job is queued but this call stopped waiting for it.
    pub fn still_open(job_id: i64, status: Option<&str>, why: &str) -> Reply {
        Reply {
            body: json!({
                "job_id": job_id,
                "status": status.unwrap_or("queued"),
                "result": null,
                "error": format!(
                    "{why}; job {job_id} stays in the queue and will still run: poll with action=get_result, params={{\"job_id\": {job_id}}}"
                ),
                "poll": {"action": "get_result", "params": {"job_id": job_id}},
            }),
            is_error: true,
        }
    }

    /// The reply as the `CallToolResult` JSON object (a task's `completed` payload).
    pub fn into_object(self) -> rmcp::model::JsonObject {
        match serde_json::to_value(self.into_result()) {
            Ok(Value::Object(m)) => m,
            _ => rmcp::model::JsonObject::new(),
        }
    }

    pub fn into_result(self) -> CallToolResult {
        if self.is_error {
            CallToolResult::structured_error(self.body)
        } else {
            CallToolResult::structured(self.body)
        }
    }
}

/// The validation id a `pending_validation` result names (`?` when it names none).
pub fn validation_id(result: Option<&Value>) -> String {
    result
        .and_then(|r| r.get("validation_id"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

/// What a task waiting for the operator says: the validation and the operator's command line,
/// never an offer to approve (there is no approve path over MCP).
pub fn waiting_message(job_id: i64, validation_id: &str) -> String {
    format!(
        "job {job_id} waits for the operator: validation {validation_id}; an operator approves it on \
         the worker's host with `brainloop approve {validation_id}` (or refuses with `brainloop deny \
         {validation_id}`). There is no approve path over MCP: keep polling tasks/get."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_succeeded_is_not_an_error_and_pending_says_how_to_approve() {
        for s in [
            "failed",
            "denied",
            "blocked",
            "expired",
            "duplicate_warning",
            "cancelled",
        ] {
            assert!(
                Reply::finished(1, s, None, Some("x".into())).is_error,
                "{s}"
            );
        }
        assert!(!Reply::finished(1, "succeeded", Some(json!({})), None).is_error);
        let p = Reply::pending(7, Some(json!({"validation_id": "abc"})));
        assert!(!p.is_error);
        assert_eq!(p.body["validation_id"], "abc");
        assert!(p.body["message"]
            .as_str()
            .unwrap()
            .contains("brainloop approve abc"));
        let r = p.into_result();
        assert_eq!(r.structured_content.as_ref().unwrap()["job_id"], 7);
        let text = r.content[0].as_text().unwrap().text.clone();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["job_id"], 7);
    }
}
