//! A front-end that cannot start (no data dir, a bad `--client`, a configuration error) still
//! answers its client's first request, `initialize`, with a JSON-RPC error carrying the reason
//! and the fix, then exits: the client shows that sentence instead of "Connection closed"
//! (issue 36). The reason also goes to stderr, as for any command.

use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::time::Duration;

/// JSON-RPC "internal error".
const INTERNAL_ERROR: i64 = -32603;
/// How long to wait for the client's first request before giving up quietly.
const FIRST_REQUEST: Duration = Duration::from_secs(10);

/// The error response to request `id`.
pub fn response(id: &Value, why: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": INTERNAL_ERROR,
            "message": format!("brainloop mcp cannot start: {why}"),
        },
    })
    .to_string()
}

/// Reads the client's first request from stdin (on a thread, bounded by [`FIRST_REQUEST`]) and
/// answers it with `why`. Blocking: call it outside the async runtime, before exiting.
pub fn refuse_on_stdio(why: &str) {
    let (tx, rx) = std::sync::mpsc::channel();
    // The reader may stay blocked on stdin after the timeout; the process exits right after.
    let _ = std::thread::Builder::new()
        .name("mcp-refuse".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                let Ok(line) = line else { return };
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                // Notifications carry no id and get no answer.
                if let Some(id) = msg.get("id").filter(|id| !id.is_null()) {
                    let _ = tx.send(id.clone());
                    return;
                }
            }
        });
    if let Ok(id) = rx.recv_timeout(FIRST_REQUEST) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", response(&id, why));
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_a_json_rpc_error_naming_the_reason() {
        let r: Value = serde_json::from_str(&response(&json!(0), "no data dir /x")).unwrap();
        assert_eq!(r["id"], 0);
        assert_eq!(r["error"]["code"], INTERNAL_ERROR);
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no data dir /x"));
    }
}
