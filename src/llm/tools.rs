//! Tool calling: accumulating streamed `delta.tool_calls` pieces into complete calls.
//!
//! OpenAI-compatible servers (Cerebras included) stream a tool call as pieces keyed by `index`:
//! the first piece carries `id`, `type` and `function.name`, later ones append to
//! `function.arguments` (a JSON text split anywhere, even inside a string or a UTF-8
//! character's escape). Some servers send the whole call in one piece, some omit `index` (one
//! call at a time: a piece with a new `id` starts a new call). A call that never got a name is
//! malformed; one without an id gets `call_<index>`.

use super::wire::{FunctionCall, ToolCall, ToolCallDelta};
use super::LlmError;

/// Upper bound of all arguments of one answer (bytes), like the text content's cap.
pub const MAX_ARGUMENT_BYTES: usize = super::sse::MAX_CONTENT_BYTES;

#[derive(Debug, Default, Clone)]
struct Partial {
    index: usize,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Collects the tool-call pieces of one streamed answer.
#[derive(Debug, Default, Clone)]
pub struct Accumulator {
    calls: Vec<Partial>,
    bytes: usize,
}

impl Accumulator {
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Adds one piece.
    pub fn push(&mut self, d: &ToolCallDelta) -> Result<(), LlmError> {
        let pos = match d.index {
            Some(i) => match self.calls.iter().position(|c| c.index == i) {
                Some(p) => p,
                None => self.start(i),
            },
            None => {
                let new_id = d.id.as_deref().filter(|id| !id.is_empty());
                match self.calls.last() {
                    Some(last) if new_id.is_none() || new_id == last.id.as_deref() => {
                        self.calls.len() - 1
                    }
                    _ => {
                        let i = self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0);
                        self.start(i)
                    }
                }
            }
        };
        let c = &mut self.calls[pos];
        if let Some(id) = d.id.as_deref().filter(|id| !id.is_empty()) {
            c.id = Some(id.to_string());
        }
        if let Some(f) = &d.function {
            if let Some(n) = &f.name {
                // Names arrive whole in practice; a server splitting them is appended to.
                c.name.push_str(n);
                self.bytes += n.len();
            }
            if let Some(a) = &f.arguments {
                c.arguments.push_str(a);
                self.bytes += a.len();
            }
        }
        if self.bytes > MAX_ARGUMENT_BYTES {
            return Err(LlmError::Malformed(format!(
                "the tool calls exceed {MAX_ARGUMENT_BYTES} bytes"
            )));
        }
        Ok(())
    }

    fn start(&mut self, index: usize) -> usize {
        self.calls.push(Partial {
            index,
            ..Partial::default()
        });
        self.calls.len() - 1
    }

    /// The complete calls, in index order.
    pub fn finish(mut self) -> Result<Vec<ToolCall>, LlmError> {
        self.calls.sort_by_key(|c| c.index);
        self.calls
            .into_iter()
            .map(|c| {
                if c.name.trim().is_empty() {
                    return Err(LlmError::Malformed(format!(
                        "tool call {} has no function name",
                        c.index
                    )));
                }
                Ok(ToolCall {
                    id: c.id.unwrap_or_else(|| format!("call_{}", c.index)),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: c.name.trim().to_string(),
                        arguments: c.arguments,
                    },
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::wire::FunctionDelta;

    fn d(
        index: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        args: Option<&str>,
    ) -> ToolCallDelta {
        ToolCallDelta {
            index,
            id: id.map(str::to_string),
            function: Some(FunctionDelta {
                name: name.map(str::to_string),
                arguments: args.map(str::to_string),
            }),
        }
    }

    #[test]
    fn pieces_by_index_accumulate_into_complete_calls() {
        let mut a = Accumulator::default();
        a.push(&d(Some(0), Some("call_a"), Some("run_command"), Some("")))
            .unwrap();
        a.push(&d(Some(0), None, None, Some("{\"comm"))).unwrap();
        a.push(&d(
            Some(1),
            Some("call_b"),
            Some("read_file"),
            Some("{\"path\":"),
        ))
        .unwrap();
        a.push(&d(Some(0), None, None, Some("and\": \"ls é\"}")))
            .unwrap();
        a.push(&d(Some(1), None, None, Some(" \"x\"}"))).unwrap();
        let calls = a.finish().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "call_a");
        assert_eq!(calls[0].function.name, "run_command");
        assert_eq!(calls[0].function.arguments, "{\"command\": \"ls é\"}");
        let v: serde_json::Value = serde_json::from_str(&calls[0].function.arguments).unwrap();
        assert_eq!(v["command"], "ls é");
        assert_eq!(calls[1].function.name, "read_file");
        assert_eq!(calls[1].function.arguments, "{\"path\": \"x\"}");
    }

    #[test]
    fn out_of_order_indexes_end_sorted_and_ids_are_supplied() {
        let mut a = Accumulator::default();
        a.push(&d(Some(2), None, Some("finish"), Some("{}")))
            .unwrap();
        a.push(&d(Some(0), Some("x"), Some("read_file"), Some("{}")))
            .unwrap();
        let calls = a.finish().unwrap();
        assert_eq!(calls[0].id, "x");
        assert_eq!(calls[1].id, "call_2");
        assert_eq!(calls[1].function.name, "finish");
    }

    #[test]
    fn without_index_a_new_id_starts_a_new_call() {
        let mut a = Accumulator::default();
        a.push(&d(
            None,
            Some("one"),
            Some("run_command"),
            Some("{\"command\":"),
        ))
        .unwrap();
        a.push(&d(None, None, None, Some("\"ls\"}"))).unwrap();
        a.push(&d(
            None,
            Some("two"),
            Some("finish"),
            Some("{\"summary\":\"ok\"}"),
        ))
        .unwrap();
        let calls = a.finish().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].function.arguments, "{\"command\":\"ls\"}");
        assert_eq!(calls[1].id, "two");
    }

    #[test]
    fn a_nameless_call_is_malformed_and_runaway_arguments_are_cut() {
        let mut a = Accumulator::default();
        a.push(&d(Some(0), Some("x"), None, Some("{}"))).unwrap();
        assert!(matches!(a.finish(), Err(LlmError::Malformed(_))));
        let mut a = Accumulator::default();
        let big = "x".repeat(MAX_ARGUMENT_BYTES / 2 + 1);
        a.push(&d(Some(0), Some("x"), Some("f"), Some(&big)))
            .unwrap();
        assert!(a.push(&d(Some(0), None, None, Some(&big))).is_err());
    }
}
