//! Text others wrote, as the operator is shown it (issue 33). This module owns one invariant:
//! **nothing an agent, a producer or a command wrote reaches the operator's terminal as something
//! the terminal would act on.** Every human-readable surface (the CLI listings, `show`, the
//! `review` screen, errors that quote such text, the `text` of the hooks' payload) passes that text
//! through [`line`] or [`block`]; the log is formatted through [`log_fields`] (text) and
//! [`JsonLog`] (JSON), so no log line carries it raw either. `--json` output is the only
//! exact form, written by [`json`]: the exact value for a parser, every hidden character in it
//! `\uXXXX`-escaped, so it is inert on a terminal too.
//!
//! Every character of general category Cc (C0 and C1 controls, DEL), Cf (format: bidi overrides
//! and isolates U+202A–202E, U+2066–2069, marks U+200E/F, U+061C, zero-width joiners, soft
//! hyphen, tags…), Zl and Zp (U+2028, U+2029) is shown escaped and visible: `\xHH` below U+0100
//! (`\x1b` ESC, `\x0d` carriage return, `\x9b` the C1 CSI, `\x00` NUL), `\u{HHHH}` above
//! (`\u{202e}`). [`line`] escapes newline and tab too (a field that must stay on its line: a client
//! id, a justification, a host); [`block`] keeps them (stdout, stderr, a diff, a multi-line
//! command) but never a carriage return. Since no ESC, CSI or OSC introducer survives, agent text
//! can open no SGR (colour, conceal), move no cursor, erase nothing and write no clipboard; the
//! surfaces that colour (`review` through ratatui, the log's ANSI levels) set and reset their own
//! styles around it.
//!
//! Unambiguous: a run of backslashes the text itself holds right before an `x`, a `u` or an
//! escaped character is shown doubled, so `\x1b` on screen is always the ESC character and
//! `\\x1b` the four characters `\x1b`; every other backslash is shown as written (`\n` inside a
//! `printf` argument stays `\n`). The general categories come from the `unicode-general-category`
//! crate (Unicode 16), not hand-written ranges.

use serde_json::ser::{Formatter, PrettyFormatter};
use std::io;
use unicode_general_category::{get_general_category, GeneralCategory};

/// One line of others' text: every Cc, Cf, Zl, Zp character escaped, newline and tab included.
pub fn line(s: &str) -> String {
    shown(s, false)
}

/// Several lines of others' text: like [`line`], but newline and tab kept (never `\r`).
pub fn block(s: &str) -> String {
    shown(s, true)
}

/// A reason (or any other listed text) under a listing's bullet: one escaped [`line`], or — when
/// it holds several lines (a preview of generated content) — [`block`] with every line after the
/// first indented by `indent`, so it reads as one item and never as the listing's own lines.
pub fn item(s: &str, indent: &str) -> String {
    if s.contains('\n') {
        block(s.trim_end_matches('\n')).replace('\n', &format!("\n{indent}"))
    } else {
        line(s)
    }
}

/// `value` as pretty JSON, the `--json` form: the exact value for any JSON parser, and inert on a
/// terminal too. serde_json escapes only U+0000–U+001F, `"` and `\`; here every other Cc, Cf,
/// Zl, Zp character in a string (DEL, the C1 controls, bidi overrides, U+2028…) is written
/// `\uXXXX` as well (a surrogate pair above U+FFFF).
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Inert(PrettyFormatter::new()));
    value.serialize(&mut ser)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// serde_json's pretty formatter, with hidden characters escaped in strings.
struct Inert(PrettyFormatter<'static>);

impl Formatter for Inert {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if hidden(c) {
                w.write_all(&fragment.as_bytes()[start..i])?;
                for unit in c.encode_utf16(&mut [0u16; 2]) {
                    write!(w, "\\u{unit:04x}")?;
                }
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// The log's field formatter (text format), the fields of spans included: each value, and the
/// message, as tracing-subscriber writes it, through [`line`] when it holds a hidden character —
/// a `%` field or a message quoting a client id, a command or an error stays one inert line in
/// `journalctl` and on a terminal. (A string field's `Debug` form is escaped already and passes
/// unchanged.)
pub fn log_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static
{
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let v = format!("{value:?}");
        let v = if v.chars().any(hidden) { line(&v) } else { v };
        match field.name() {
            "message" => write!(w, "{v}"),
            name => write!(w, "{}={v}", name.strip_prefix("r#").unwrap_or(name)),
        }
    })
    .delimited(" ")
}

/// The log's writer for the JSON format: every hidden character but the line's end written
/// `\uXXXX` (inside a JSON string, where serde_json leaves DEL, C1, bidi characters raw).
pub struct JsonLog<M>(pub M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for JsonLog<M>
{
    type Writer = JsonLine<M::Writer>;
    fn make_writer(&'a self) -> Self::Writer {
        JsonLine(self.0.make_writer())
    }
}

/// One event of the JSON log on its way to the log's writer (see [`JsonLog`]).
pub struct JsonLine<W>(W);

impl<W: io::Write> io::Write for JsonLine<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let mut out = Vec::with_capacity(buf.len());
        let mut json = Inert(PrettyFormatter::new());
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c == '\n' || !hidden(c) {
                continue;
            }
            out.extend_from_slice(&text.as_bytes()[start..i]);
            json.write_string_fragment(&mut out, &c.to_string())?;
            start = i + c.len_utf8();
        }
        out.extend_from_slice(&text.as_bytes()[start..]);
        self.0.write_all(&out)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Whether `c` is of a category a terminal may act on or not draw: Cc, Cf, Zl, Zp.
pub fn hidden(c: char) -> bool {
    matches!(
        get_general_category(c),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

fn escaped(c: char, keep_lines: bool) -> bool {
    hidden(c) && !(keep_lines && (c == '\n' || c == '\t'))
}

fn shown(s: &str, keep_lines: bool) -> String {
    if !s.chars().any(|c| c == '\\' || escaped(c, keep_lines)) {
        return s.to_string();
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let start = i;
            while chars.get(i) == Some(&'\\') {
                i += 1;
            }
            let double = chars
                .get(i)
                .is_some_and(|&n| n == 'x' || n == 'u' || escaped(n, keep_lines));
            let n = if double { 2 * (i - start) } else { i - start };
            out.extend(std::iter::repeat_n('\\', n));
            continue;
        }
        if escaped(c, keep_lines) {
            let n = c as u32;
            if n < 0x100 {
                out.push_str(&format!("\\x{n:02x}"));
            } else {
                out.push_str(&format!("\\u{{{n:x}}}"));
            }
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text [`line`] / [`block`] stood for: the proof that the form is unambiguous.
    fn decode(s: &str) -> String {
        let chars: Vec<char> = s.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] != '\\' {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            let start = i;
            while chars.get(i) == Some(&'\\') {
                i += 1;
            }
            let run = i - start;
            let next = chars.get(i).copied();
            if !matches!(next, Some('x') | Some('u')) {
                out.extend(std::iter::repeat_n('\\', run));
                continue;
            }
            out.extend(std::iter::repeat_n('\\', run / 2));
            if run % 2 == 0 {
                continue;
            }
            let (hex, len) = if next == Some('x') {
                (chars[i + 1..i + 3].iter().collect::<String>(), 3)
            } else {
                let end = chars[i..].iter().position(|&c| c == '}').unwrap() + i;
                (chars[i + 2..end].iter().collect::<String>(), end - i + 1)
            };
            out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
            i += len;
        }
        out
    }

    #[test]
    fn every_hostile_character_is_shown_escaped() {
        let table: &[(&str, &str)] = &[
            ("\x1b]52;c;cHduZWQ=\x07", "\\x1b]52;c;cHduZWQ=\\x07"),
            ("rm -rf ~\x1b[2K\recho ok", "rm -rf ~\\x1b[2K\\x0decho ok"),
            ("\x1b[8mhidden\x1b[0m", "\\x1b[8mhidden\\x1b[0m"),
            ("a\u{202e}txt.exe", "a\\u{202e}txt.exe"),
            (
                "\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            ("a\u{2028}b\u{2029}c", "a\\u{2028}b\\u{2029}c"),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            ("nul\0del\x7f", "nul\\x00del\\x7f"),
            ("\u{9b}2J\u{9d}0;t\u{9c}", "\\x9b2J\\x9d0;t\\x9c"),
            (
                "zw\u{200b}j\u{200d}\u{feff}",
                "zw\\u{200b}j\\u{200d}\\u{feff}",
            ),
            ("soft\u{ad}hy", "soft\\xadhy"),
            ("tag\u{e0041}", "tag\\u{e0041}"),
            ("two\nlines\tand tab", "two\\x0alines\\x09and tab"),
        ];
        for (raw, want) in table {
            assert_eq!(line(raw), *want, "{raw:?}");
            assert_eq!(decode(&line(raw)), *raw);
            assert!(!line(raw).chars().any(hidden), "{raw:?}");
        }
    }

    #[test]
    fn blocks_keep_newlines_and_tabs_never_carriage_returns() {
        assert_eq!(block("a\n\tb\r\nc\x1b[1A"), "a\n\tb\\x0d\nc\\x1b[1A");
        assert_eq!(block("x\u{2028}y"), "x\\u{2028}y");
        assert_eq!(decode(&block("a\n\tb\r\nc")), "a\n\tb\r\nc");
    }

    #[test]
    fn ordinary_text_and_backslashes_stay_as_written() {
        for s in [
            "ls -la /tmp",
            "printf 'a\\nb\\t' | sed 's/\\s+//'",
            "echo C:\\\\dir",
            "naïve café — 日本語 🙂 עברית",
            "grep -E 'a\\.b' x\\",
        ] {
            assert_eq!(line(s), s);
            assert_eq!(block(s), s);
        }
    }

    #[test]
    fn backslashes_that_would_read_as_an_escape_are_doubled() {
        assert_eq!(line("printf '\\x1b'"), "printf '\\\\x1b'");
        assert_eq!(line("\\u{202e}"), "\\\\u{202e}");
        assert_eq!(line("\\\x1b"), "\\\\\\x1b");
        assert_eq!(line("a\\\nb"), "a\\\\\\x0ab");
        assert_eq!(block("a\\\nb"), "a\\\nb");
        for s in [
            "\\x1b",
            "\\\\x1b",
            "\\\x1b\\",
            "\\u{41}\\\u{202e}",
            "x\\",
            "\\\\\\u",
        ] {
            assert_eq!(decode(&line(s)), s, "{s:?} -> {:?}", line(s));
            assert_eq!(decode(&block(s)), s, "{s:?} -> {:?}", block(s));
        }
    }

    #[test]
    fn json_keeps_the_exact_value_and_writes_no_hidden_character() {
        let v = serde_json::json!({
            "a\u{202e}": ["\x1b]52;c;eA==\x07", "\u{9b}2J\x7f", "x\u{2028}y\u{e0041}", "é\\x1b"],
            "n": 1,
            "o": {},
        });
        let s = json(&v).unwrap();
        assert!(!s.chars().any(|c| hidden(c) && c != '\n'), "{s}");
        assert!(
            s.contains("\\u001b]52") && s.contains("\\u202e") && s.contains("\\udb40\\udc41"),
            "{s}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&s).unwrap(), v);
        assert_eq!(
            s,
            serde_json::to_string_pretty(&v)
                .unwrap()
                .replace('\u{202e}', "\\u202e")
                .replace('\u{9b}', "\\u009b")
                .replace('\x7f', "\\u007f")
                .replace('\u{2028}', "\\u2028")
                .replace('\u{e0041}', "\\udb40\\udc41")
        );
    }

    #[test]
    fn json_log_lines_stay_json_and_inert() {
        use std::io::Write;
        let mut out = Vec::new();
        let line = "{\"client\":\"a\u{202e}b\u{9b}c\\u001b\"}\n";
        JsonLine(&mut out).write_all(line.as_bytes()).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s, "{\"client\":\"a\\u202eb\\u009bc\\u001b\"}\n");
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["client"], "a\u{202e}b\u{9b}c\x1b");
    }

    #[test]
    fn any_string_round_trips_and_shows_no_hidden_character() {
        // Deterministic pseudo-random strings over an alphabet of the awkward characters.
        let alphabet = [
            '\\', 'x', 'u', '{', '}', '1', 'b', 'a', '\x1b', '\r', '\n', '\t', '\0', '\u{9b}',
            '\u{202e}', '\u{2028}', '\u{7f}', ' ', 'é',
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..5000 {
            let len = (seed >> 59) as usize;
            let s: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            let (l, b) = (line(&s), block(&s));
            assert_eq!(decode(&l), s, "{s:?} -> {l:?}");
            assert_eq!(decode(&b), s, "{s:?} -> {b:?}");
            assert!(!l.chars().any(hidden), "{s:?} -> {l:?}");
            assert!(
                !b.chars().any(|c| hidden(c) && c != '\n' && c != '\t'),
                "{s:?} -> {b:?}"
            );
        }
    }
}
