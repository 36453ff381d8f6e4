//! stdin and stdout between the client and rmcp, line by line (issue 55): a line that is not
//! JSON gets a JSON-RPC parse error (`-32700`, `id: null`) instead of silence, and is not passed
//! on; every other line is passed on unchanged (rmcp answers JSON that is no message itself).
//! rmcp ignores such lines on purpose, against error storms with a peer that echoes answers back
//! as more garbage: here at most [`PARSE_ERRORS_PER_S`] are answered per second, the rest only
//! logged. One task owns stdout, so an error line never interleaves with a protocol message.

use serde::de::IgnoredAny;
use std::time::{Duration, Instant};
use tokio::io::DuplexStream;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The longest line read whole (bytes); a longer one is answered with a parse error, unread.
const MAX_LINE: usize = 64 << 20;
/// Parse errors answered per second at most.
pub const PARSE_ERRORS_PER_S: u32 = 10;
const PIPE: usize = 1 << 16;

/// The pipes rmcp serves on — (what it reads, what it writes) — and the task that writes
/// stdout, to be awaited once rmcp has closed its side (so the last answer is not lost).
pub fn stdio() -> (DuplexStream, DuplexStream, JoinHandle<()>) {
    let (rmcp_in, feed) = tokio::io::duplex(PIPE);
    let (rmcp_out, drain) = tokio::io::duplex(PIPE);
    let (err_tx, err_rx) = mpsc::channel::<String>(16);
    tokio::spawn(read_side(tokio::io::stdin(), feed, err_tx));
    let writer = tokio::spawn(write_side(drain, err_rx, tokio::io::stdout()));
    (rmcp_in, rmcp_out, writer)
}

/// What to do with one line.
#[derive(Debug, PartialEq)]
enum Verdict {
    Pass,
    /// Not JSON: the parse error's message (positions only, never the line's text).
    Unparseable(String),
}

fn verdict(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Pass;
    }
    // UTF-8 first: serde skips the bytes of an ignored string without checking them, and rmcp
    // would then drop the line in silence.
    let Ok(text) = std::str::from_utf8(line) else {
        return Verdict::Unparseable("Parse error: the line is not UTF-8".to_string());
    };
    match serde_json::from_str::<IgnoredAny>(text) {
        Ok(_) => Verdict::Pass,
        Err(e) => match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                Verdict::Unparseable(format!("Parse error: the line is not JSON ({e})"))
            }
            _ => Verdict::Pass,
        },
    }
}

/// The JSON-RPC parse error line.
fn parse_error(message: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": message}})
        .to_string()
}

/// At most [`PARSE_ERRORS_PER_S`] answers in any one-second window.
struct Budget {
    window: Instant,
    used: u32,
}

impl Budget {
    fn take(&mut self) -> bool {
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.window = Instant::now();
            self.used = 0;
        }
        self.used += 1;
        self.used <= PARSE_ERRORS_PER_S
    }
}

async fn read_side(
    input: impl AsyncRead + Unpin,
    mut feed: DuplexStream,
    errors: mpsc::Sender<String>,
) {
    let mut r = BufReader::new(input);
    let mut line = Vec::new();
    let mut budget = Budget {
        window: Instant::now(),
        used: 0,
    };
    loop {
        line.clear();
        match (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot read stdin");
                break;
            }
        }
        let verdict = if line.len() > MAX_LINE && !line.ends_with(b"\n") {
            if !skip_line(&mut r).await {
                break;
            }
            Verdict::Unparseable(format!("Parse error: a line over {MAX_LINE} bytes"))
        } else {
            verdict(&line)
        };
        match verdict {
            Verdict::Pass => {
                if feed.write_all(&line).await.is_err() {
                    break;
                }
            }
            Verdict::Unparseable(why) => {
                if budget.take() {
                    tracing::info!(%why, "unparseable line answered with a parse error");
                    if errors.send(parse_error(&why)).await.is_err() {
                        break;
                    }
                } else {
                    tracing::debug!(%why, "unparseable line (parse errors over their rate: not answered)");
                }
            }
        }
    }
}

/// Reads up to the end of an over-long line; false at end of input.
async fn skip_line(r: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> bool {
    loop {
        let (found, n) = match r.fill_buf().await {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (true, i + 1),
                None => (false, buf.len()),
            },
        };
        r.consume(n);
        if found {
            return true;
        }
    }
}

async fn write_side(
    drain: DuplexStream,
    mut errors: mpsc::Receiver<String>,
    mut out: impl AsyncWrite + Unpin,
) {
    let mut r = BufReader::new(drain);
    // A partly read protocol line stays here across the select (read_until appends).
    let mut line = Vec::new();
    let mut errors_open = true;
    loop {
        tokio::select! {
            n = r.read_until(b'\n', &mut line) => {
                match n {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                    return;
                }
                line.clear();
            }
            e = errors.recv(), if errors_open => match e {
                Some(e) => {
                    let e = format!("{e}\n");
                    if out.write_all(e.as_bytes()).await.is_err() || out.flush().await.is_err() {
                        return;
                    }
                }
                None => errors_open = false,
            },
        }
    }
    if !line.is_empty() {
        let _ = out.write_all(&line).await;
    }
    let _ = out.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lines_that_are_not_json_are_refused() {
        for ok in [
            &b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n"[..],
            b"\xEF\xBB\xBF{}\r\n",
            b"\n",
            b"   \r\n",
            b"[1, 2]\n",
            b"{\"not\": \"a message\"}\n",
        ] {
            assert_eq!(verdict(ok), Verdict::Pass, "{ok:?}");
        }
        for bad in [
            &b"not json\n"[..],
            b"{\"jsonrpc\":\n",
            b"{\"a\": \"\xff\"}\n",
            b"}\n",
        ] {
            let Verdict::Unparseable(m) = verdict(bad) else {
                panic!("{bad:?} passed")
            };
            assert!(
                m.starts_with("Parse error") && !m.contains("not json"),
                "{m}"
            );
        }
        let e: serde_json::Value = serde_json::from_str(&parse_error("Parse error: x")).unwrap();
        assert_eq!(e["error"]["code"], -32700);
        assert!(e["id"].is_null());
    }

    #[test]
    fn parse_errors_are_rate_limited() {
        let mut b = Budget {
            window: Instant::now(),
            used: 0,
        };
        let answered = (0..100).filter(|_| b.take()).count();
        assert_eq!(answered, PARSE_ERRORS_PER_S as usize);
    }

    #[tokio::test]
    async fn a_garbage_line_is_answered_and_the_rest_passes_in_order() {
        let input: &[u8] = b"{\"id\":1}\ngarbage\n{\"id\":2}\n";
        let (mut rmcp_in, feed) = tokio::io::duplex(PIPE);
        let (tx, mut rx) = mpsc::channel(4);
        read_side(input, feed, tx).await;
        let mut got = String::new();
        rmcp_in.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "{\"id\":1}\n{\"id\":2}\n");
        let e = rx.recv().await.unwrap();
        assert!(e.contains("-32700"), "{e}");
        assert!(rx.recv().await.is_none());
    }
}
