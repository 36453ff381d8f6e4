//! `read_config` digest: parses TOML, YAML, JSON, INI and .env with their real parsers into one
//! tree, masks the values of secret-looking keys (and values that look like well-known token
//! formats, Cerebras `csk-…` keys included), and summarises the structure. Under a
//! secret-named key every leaf is masked, however deep (`api_keys: [..]`,
//! `credentials: {value: ..}`). `.env` files are read line by line without interpolation: a
//! reader shows the file, never the worker's environment (`X=${CEREBRAS_API_KEY}` stays
//! literal; issue 19 item 3).

use regex::Regex;
use serde_json::{json, Map, Value};
use std::path::Path;
use std::sync::LazyLock;

pub const MASK: &str = "********";

pub fn format_of(path: &Path) -> Option<&'static str> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    if name == ".env" || name.starts_with(".env.") || name.ends_with(".env") {
        return Some("env");
    }
    match path
        .extension()?
        .to_string_lossy()
        .to_ascii_lowercase()
        .as_str()
    {
        "toml" => Some("toml"),
        "yaml" | "yml" => Some("yaml"),
        "json" => Some("json"),
        "ini" | "cfg" | "conf" => Some("ini"),
        _ => None,
    }
}

// Constant patterns, checked by the tests below; `None` would only mean "match nothing".
static SECRET_KEY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)(pass(word|wd|phrase)?|secret|token|api[_-]?key|apikey|private[_-]?key|credential|auth|access[_-]?key|session|cookie|signature|dsn|connection[_-]?string|salt)").ok()
});
static SECRET_VALUE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(sk-[A-Za-z0-9_-]{16,}|csk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----)|://[^/\s:@]+:[^/\s@]+@").ok()
});

pub fn is_secret_key(k: &str) -> bool {
    SECRET_KEY.as_ref().is_some_and(|r| r.is_match(k))
}

fn is_secret_value(v: &str) -> bool {
    SECRET_VALUE.as_ref().is_some_and(|r| r.is_match(v))
}

/// Masks secrets in place; returns the dotted paths of masked entries.
fn mask(v: &mut Value, path: &str, masked: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if is_secret_key(k) {
                    mask_all(child, &p, masked);
                } else {
                    mask(child, &p, masked);
                }
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter_mut().enumerate() {
                mask(child, &format!("{path}[{i}]"), masked);
            }
        }
        Value::String(s) if is_secret_value(s) => {
            *s = MASK.to_string();
            masked.push(path.to_string());
        }
        _ => {}
    }
}

/// Masks every leaf beneath a secret-named key (lists and objects included); empty containers
/// and nulls stay as they are (nothing to hide).
fn mask_all(v: &mut Value, path: &str, masked: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                mask_all(child, &format!("{path}.{k}"), masked);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter_mut().enumerate() {
                mask_all(child, &format!("{path}[{i}]"), masked);
            }
        }
        Value::Null => {}
        leaf => {
            *leaf = json!(MASK);
            masked.push(path.to_string());
        }
    }
}

/// Parses a `.env` file literally: `KEY=VALUE` lines (optional `export `), `#` comments,
/// single quotes verbatim, double quotes with `\n`, `\"`, `\\` escapes (may span lines),
/// unquoted values up to a ` #` comment. No `${VAR}` / `$VAR` expansion, ever.
fn parse_env(text: &str) -> Result<Map<String, Value>, String> {
    let mut m = Map::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, raw)) = lines.next() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((k, rest)) = line.split_once('=') else {
            return Err(format!("invalid .env: line {}: no `=`", n + 1));
        };
        let k = k.trim();
        if k.is_empty()
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        {
            return Err(format!("invalid .env: line {}: bad key {k:?}", n + 1));
        }
        let rest = rest.trim_start();
        let value = if let Some(body) = rest.strip_prefix('\'') {
            let mut acc = body.to_string();
            loop {
                if let Some(end) = acc.find('\'') {
                    acc.truncate(end);
                    break acc;
                }
                match lines.next() {
                    Some((_, l)) => {
                        acc.push('\n');
                        acc.push_str(l);
                    }
                    None => return Err(format!("invalid .env: line {}: unclosed '", n + 1)),
                }
            }
        } else if let Some(body) = rest.strip_prefix('"') {
            let mut out = String::new();
            let mut cur = body.to_string();
            'outer: loop {
                let mut chars = cur.chars();
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break 'outer out,
                        '\\' => match chars.next() {
                            Some('n') => out.push('\n'),
                            Some('t') => out.push('\t'),
                            Some(o) => out.push(o),
                            None => out.push('\\'),
                        },
                        o => out.push(o),
                    }
                }
                match lines.next() {
                    Some((_, l)) => {
                        out.push('\n');
                        cur = l.to_string();
                    }
                    None => return Err(format!("invalid .env: line {}: unclosed \"", n + 1)),
                }
            }
        } else {
            let v = match rest.find(" #") {
                Some(i) => &rest[..i],
                None => rest,
            };
            v.trim_end().to_string()
        };
        m.insert(k.to_string(), json!(value));
    }
    Ok(m)
}

fn parse(format: &str, text: &str) -> Result<Value, String> {
    match format {
        "toml" => toml::from_str::<toml::Value>(text)
            .map_err(|e| format!("invalid TOML: {e}"))
            .and_then(|v| serde_json::to_value(v).map_err(|e| e.to_string())),
        "yaml" => serde_yaml_ng::from_str::<Value>(text).map_err(|e| format!("invalid YAML: {e}")),
        "json" => serde_json::from_str::<Value>(text).map_err(|e| format!("invalid JSON: {e}")),
        "ini" => {
            let ini = ini::Ini::load_from_str(text).map_err(|e| format!("invalid INI: {e}"))?;
            let mut root = Map::new();
            for (section, props) in ini.iter() {
                let mut m = Map::new();
                for (k, v) in props.iter() {
                    m.insert(k.to_string(), json!(v));
                }
                match section {
                    Some(s) => {
                        root.insert(s.to_string(), Value::Object(m));
                    }
                    None => root.extend(m),
                }
            }
            Ok(Value::Object(root))
        }
        "env" => parse_env(text).map(Value::Object),
        other => Err(format!(
            "unsupported config format {other:?} (toml, yaml, json, ini, env)"
        )),
    }
}

fn count_keys(v: &Value) -> usize {
    match v {
        Value::Object(m) => m.len() + m.values().map(count_keys).sum::<usize>(),
        Value::Array(a) => a.iter().map(count_keys).sum(),
        _ => 0,
    }
}

pub fn digest(format: &str, text: &str) -> Result<Value, String> {
    let mut v = parse(format, text)?;
    let mut masked = Vec::new();
    mask(&mut v, "", &mut masked);
    let top: Vec<String> = v
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut values = v;
    let rendered = values.to_string();
    let truncated = rendered.len() > 64 * 1024;
    if truncated {
        values = Value::Null;
    }
    Ok(json!({
        "top_level_keys": top,
        "key_count": count_keys(&values).max(top.len()),
        "masked_keys": masked,
        "values": values,
        "values_truncated": truncated,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patterns_compile() {
        assert!(SECRET_KEY.is_some() && SECRET_VALUE.is_some());
    }

    #[test]
    fn secrets_are_masked_in_every_format() {
        let cases = [
            (
                "env",
                "API_KEY=abc123\nDEBUG=true\nDATABASE_PASSWORD=\"hunter2\"\n",
            ),
            (
                "toml",
                "debug = true\n[db]\npassword = \"hunter2\"\napi_key = \"abc123\"\n",
            ),
            (
                "yaml",
                "debug: true\ndb:\n  password: hunter2\n  api_key: abc123\n",
            ),
            (
                "json",
                "{\"debug\": true, \"db\": {\"password\": \"hunter2\", \"api_key\": \"abc123\"}}",
            ),
            (
                "ini",
                "debug = true\n[db]\npassword = hunter2\napi_key = abc123\n",
            ),
        ];
        for (fmt, text) in cases {
            let d = digest(fmt, text).unwrap();
            let s = d.to_string();
            assert!(
                !s.contains("hunter2") && !s.contains("abc123"),
                "{fmt}: {s}"
            );
            assert!(s.contains(MASK), "{fmt}");
            assert!(!d["masked_keys"].as_array().unwrap().is_empty());
            assert!(s.contains("debug") || s.contains("DEBUG"), "{fmt}: {s}");
        }
    }

    #[test]
    fn env_files_are_never_interpolated() {
        // SAFETY of the assertion: whatever the worker's environment holds, the digest shows
        // the file's text. A variable set in this test process is the canary.
        std::env::set_var("BL_TEST_CANARY_SECRET", "WORKER-ENV-LEAK");
        let text = "A=${BL_TEST_CANARY_SECRET}\nB=$BL_TEST_CANARY_SECRET\nC=\"x ${BL_TEST_CANARY_SECRET} y\"\nD='$HOME'\nexport E=plain # comment\nF=\"two\nlines\"\n";
        let d = digest("env", text).unwrap();
        let s = d.to_string();
        assert!(!s.contains("WORKER-ENV-LEAK"), "{s}");
        let v = &d["values"];
        assert_eq!(v["A"], "${BL_TEST_CANARY_SECRET}");
        assert_eq!(v["B"], "$BL_TEST_CANARY_SECRET");
        assert_eq!(v["C"], "x ${BL_TEST_CANARY_SECRET} y");
        assert_eq!(v["D"], "$HOME");
        assert_eq!(v["E"], "plain");
        assert_eq!(v["F"], "two\nlines");
        assert!(digest("env", "just words\n").is_err());
        assert!(digest("env", "X=\"unclosed\n").is_err());
    }

    #[test]
    fn secret_keys_mask_lists_and_objects_recursively() {
        // (format, text, secrets that must not appear, a plain value that must)
        let cases: &[(&str, &str, &[&str], &str)] = &[
            (
                "yaml",
                "api_keys: [k-one, k-two]\nname: app\n",
                &["k-one", "k-two"],
                "app",
            ),
            (
                "json",
                r#"{"credentials": {"value": "v-1", "nested": {"deep": ["d-2", 7]}}, "name": "app"}"#,
                &["v-1", "d-2"],
                "app",
            ),
            (
                "toml",
                "name = \"app\"\n[[tokens]]\nvalue = \"t-1\"\n[[tokens]]\nvalue = \"t-2\"\n",
                &["t-1", "t-2"],
                "app",
            ),
        ];
        for (fmt, text, secrets, plain) in cases {
            let d = digest(fmt, text).unwrap();
            let s = d["values"].to_string();
            for sec in *secrets {
                assert!(!s.contains(sec), "{fmt}: {sec} shown: {s}");
            }
            assert!(s.contains(plain), "{fmt}: {s}");
        }
        let d = digest("json", r#"{"credentials": {"value": "v-1", "n": 7}}"#).unwrap();
        assert_eq!(
            d["masked_keys"],
            json!(["credentials.n", "credentials.value"])
        );
    }

    #[test]
    fn cerebras_keys_are_secrets_under_any_key() {
        let key = "csk-abcdefghijklmnopqrstuvwxyz012345";
        for (fmt, text) in [
            ("env", format!("MODEL_CFG={key}\n")),
            ("json", format!(r#"{{"note": "{key}"}}"#)),
        ] {
            let d = digest(fmt, &text).unwrap();
            assert!(!d.to_string().contains(key), "{fmt}: {d}");
        }
    }

    #[test]
    fn token_shaped_values_are_masked_under_innocent_keys() {
        let d = digest("json", r#"{"note": "ghp_abcdefghijklmnopqrstuvwxyz0123", "url": "postgres://u:pw@host/db", "ok": "plain"}"#).unwrap();
        assert_eq!(d["values"]["note"], MASK);
        assert_eq!(d["values"]["url"], MASK);
        assert_eq!(d["values"]["ok"], "plain");
    }

    #[test]
    fn formats_by_name_and_errors() {
        assert_eq!(format_of(Path::new("/a/.env")), Some("env"));
        assert_eq!(format_of(Path::new("/a/.env.local")), Some("env"));
        assert_eq!(format_of(Path::new("/a/x.yml")), Some("yaml"));
        assert_eq!(format_of(Path::new("/a/x.rs")), None);
        assert!(digest("json", "{nope")
            .unwrap_err()
            .contains("invalid JSON"));
    }
}
