//! Post-processing of model output: reasoning blocks split off the answer
//! ([`split_reasoning`], applied by `sse` to every reply, so no action ever sees them), code
//! fences stripped (code and SQL generation), JSON found in a reply (digests and explore), with
//! seed 001's fallback `{summary, source_type}` when the model returned no JSON.

use serde_json::{json, Value};

/// Splits `<think>…</think>` blocks (`reasoning_format: raw`, Qwen's default) out of a reply:
/// (the answer, the reasoning). Every block anywhere in the text is taken out; an opening tag
/// never closed (the model stopped while thinking) makes the rest reasoning; a closing tag with
/// no opening one (templates that open the block in the prompt) makes what precedes it
/// reasoning.
pub fn split_reasoning(s: &str) -> (String, String) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let mut answer = String::new();
    let mut reasoning: Vec<&str> = Vec::new();
    let mut rest = s;
    if let Some(c) = rest.find(CLOSE) {
        if !rest[..c].contains(OPEN) {
            reasoning.push(rest[..c].trim());
            rest = &rest[c + CLOSE.len()..];
        }
    }
    while let Some(o) = rest.find(OPEN) {
        answer.push_str(&rest[..o]);
        let inner = &rest[o + OPEN.len()..];
        match inner.find(CLOSE) {
            Some(c) => {
                reasoning.push(inner[..c].trim());
                rest = &inner[c + CLOSE.len()..];
            }
            None => {
                reasoning.push(inner.trim());
                rest = "";
            }
        }
    }
    answer.push_str(rest);
    if reasoning.is_empty() {
        return (s.to_string(), String::new());
    }
    let reasoning: Vec<&str> = reasoning.into_iter().filter(|r| !r.is_empty()).collect();
    (answer.trim_start().to_string(), reasoning.join("\n\n"))
}

/// Drops a leading `<think>…</think>` block some reasoning models put in the content.
pub fn without_reasoning(s: &str) -> &str {
    let t = s.trim_start();
    if let Some(rest) = t.strip_prefix("<think>") {
        if let Some(end) = rest.find("</think>") {
            return &rest[end + "</think>".len()..];
        }
    }
    s
}

fn fence_blocks(s: &str) -> Vec<(usize, usize, String)> {
    // (start line, end line, body) of each ``` … ``` block at line starts.
    let lines: Vec<&str> = s.lines().collect();
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("```") {
            match open {
                None => open = Some(i),
                Some(o) => {
                    out.push((o, i, lines[o + 1..i].join("\n")));
                    open = None;
                }
            }
        }
    }
    out
}

/// The code in a reply: the reply itself when it is not fenced; the inside of the fence when
/// the whole reply is one fenced block (or a block surrounded by prose, unless `keep_inner`
/// says fences are legitimate content, as in Markdown). A trailing newline is kept/added.
pub fn strip_code_fences(reply: &str, keep_inner: bool) -> String {
    let s = without_reasoning(reply).trim();
    let blocks = fence_blocks(s);
    let body = if s.starts_with("```") {
        match blocks.first() {
            // One block spanning the whole reply (what models usually send).
            Some((0, end, body)) if *end == s.lines().count() - 1 => body.clone(),
            // Opened but never closed: drop the opening line.
            None => s.lines().skip(1).collect::<Vec<_>>().join("\n"),
            _ if keep_inner => s.to_string(),
            Some((_, _, body)) => body.clone(),
        }
    } else if !keep_inner && blocks.len() == 1 {
        blocks[0].2.clone()
    } else {
        s.to_string()
    };
    let mut body = body.trim_matches('\n').to_string();
    body.push('\n');
    body
}

/// The first JSON object in a reply, if any.
pub fn extract_json(reply: &str) -> Option<Value> {
    let s = without_reasoning(reply).trim();
    let unfenced = strip_code_fences(s, false);
    for cand in [s, unfenced.trim()] {
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(cand) {
            return Some(v);
        }
        if let (Some(a), Some(b)) = (cand.find('{'), cand.rfind('}')) {
            if a < b {
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&cand[a..=b]) {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// A digest: the reply's JSON object, or `{summary, source_type}` (seed 001's fallback).
pub fn digest_or_fallback(reply: &str, source_type: &str) -> Value {
    extract_json(reply).unwrap_or_else(
        || json!({"summary": without_reasoning(reply).trim(), "source_type": source_type}),
    )
}

/// Rough token count of a text (≈ 3 characters per token, rounded up; deliberately generous).
pub fn estimate_tokens(s: &str) -> u64 {
    (s.chars().count() as u64).div_ceil(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences() {
        assert_eq!(
            strip_code_fences("```python\nprint(1)\n```", false),
            "print(1)\n"
        );
        assert_eq!(strip_code_fences("print(1)", false), "print(1)\n");
        assert_eq!(
            strip_code_fences("Here you go:\n```sql\nSELECT 1;\n```\nEnjoy.", false),
            "SELECT 1;\n"
        );
        assert_eq!(
            strip_code_fences("```\nunterminated", false),
            "unterminated\n"
        );
        let md = "# Title\n\n```sh\nls\n```\n";
        assert_eq!(strip_code_fences(md, true), md);
        assert_eq!(
            strip_code_fences("<think>hmm</think>\n```rs\nfn main() {}\n```", false),
            "fn main() {}\n"
        );
    }

    #[test]
    fn think_blocks_are_split_off_wherever_they_are() {
        assert_eq!(
            split_reasoning("<think>plan</think>\nSELECT 1;"),
            ("SELECT 1;".to_string(), "plan".to_string())
        );
        assert_eq!(
            split_reasoning("a <think>x</think>b<think>y</think>c"),
            ("a bc".to_string(), "x\n\ny".to_string())
        );
        assert_eq!(
            split_reasoning("<think>never closed"),
            (String::new(), "never closed".to_string())
        );
        assert_eq!(
            split_reasoning("opened by the template</think>answer"),
            ("answer".to_string(), "opened by the template".to_string())
        );
        assert_eq!(
            split_reasoning("no tags"),
            ("no tags".to_string(), String::new())
        );
    }

    #[test]
    fn json_and_fallback() {
        assert_eq!(extract_json("{\"a\":1}").unwrap()["a"], 1);
        assert_eq!(extract_json("```json\n{\"a\":2}\n```").unwrap()["a"], 2);
        assert_eq!(extract_json("Result: {\"a\":3} done").unwrap()["a"], 3);
        assert!(extract_json("no json here").is_none());
        let d = digest_or_fallback("just prose", "code");
        assert_eq!(d, json!({"summary": "just prose", "source_type": "code"}));
    }
}
