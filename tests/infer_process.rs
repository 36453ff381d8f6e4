//! Process-level: `brainloop infer-permissions` on fixtures (file, stdin, --lang ts, unreadable
//! input) and `infer_permissions` jobs through the real worker, the second identical job being
//! served from lifecycle.db `inferred_permissions`.

mod common;

use common::Env;
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const SEED_000: &str = r#"const users = await mcp.db.query({ sql: "SELECT * FROM users" });
const active = users.filter((u) => u.active);
const totalAge = active.reduce((s, u) => s + u.age, 0);
const avgAge = totalAge / active.length;
const rounded = Math.round(avgAge);
await mcp.slack.send({ message: `Average age: ${rounded}` });
"#;

#[test]
fn cli_prints_the_report_of_a_file_or_stdin() {
    let env = Env::new();
    let file = env.root.path().join("agent.ts");
    std::fs::write(
        &file,
        "const r: Response = await fetch(\"https://api.example.com\");\n",
    )
    .unwrap();
    let (st, out, err) = env.cli(&["infer-permissions", "--lang", "ts", file.to_str().unwrap()]);
    assert!(st.success(), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["permission_set"], "network-api");
    assert_eq!(v["confidence"], 0.9);
    assert_eq!(v["detected_patterns"], serde_json::json!(["fetch"]));
    assert_eq!(v["language"], "ts");

    let mut child = Command::new(common::BIN)
        .args(["infer-permissions", "-"])
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(SEED_000.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let validate: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| {
            l["validate"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
        })
        .collect();
    assert_eq!(validate, ["db:query", "slack:send"]);
    assert_eq!(v["tasks"][1]["logical_tools"].as_array().unwrap().len(), 5);
    assert!(!env.data.exists(), "infer-permissions touches no database");
}

#[test]
fn cli_exit_codes() {
    let env = Env::new();
    let (st, _, err) = env.cli(&["infer-permissions", "/nonexistent/agent.js"]);
    assert_eq!(st.code(), Some(2), "{err}");
    assert!(err.contains("cannot read"), "{err}");
    let bad = env.root.path().join("bad.js");
    std::fs::write(&bad, "const = ;").unwrap();
    let (st, out, _) = env.cli(&["infer-permissions", bad.to_str().unwrap()]);
    assert_eq!(st.code(), Some(0), "unparseable code is still a report");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["confidence"], 0.0);
    assert!(v["error"].as_str().unwrap().contains("cannot parse"));
    let (st, _, _) = env.cli(&[
        "infer-permissions",
        "--lang",
        "cobol",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(st.code(), Some(2));
    // An operator mapping is merged over the defaults.
    let mapping = env.root.path().join("mcp.toml");
    std::fs::write(&mapping, "[tools.frob]\npermission_set = \"readonly\"\n").unwrap();
    let code = env.root.path().join("frob.js");
    std::fs::write(&code, "await mcp.frob.get({});").unwrap();
    let (st, out, err) = env.cli(&[
        "infer-permissions",
        "--mapping",
        mapping.to_str().unwrap(),
        code.to_str().unwrap(),
    ]);
    assert!(st.success(), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["permission_set"], "readonly");
    std::fs::write(&mapping, "[tools.frob]\npermission_set = \"trusted\"\n").unwrap();
    let (st, _, err) = env.cli(&[
        "infer-permissions",
        "--mapping",
        mapping.to_str().unwrap(),
        code.to_str().unwrap(),
    ]);
    assert_eq!(st.code(), Some(1));
    assert!(err.contains("never inferred"), "{err}");
}

#[test]
fn the_action_stores_its_answer_and_serves_the_twin_from_the_row() {
    let env = Env::new();
    let d = env.start(&[]);
    let params = serde_json::json!({"code": SEED_000, "language": "js"}).to_string();
    let first = env.insert("infer_permissions", &params);
    let (_, result, _, _) = env.wait_status(first, "succeeded", Duration::from_secs(20));
    let a: Value = serde_json::from_str(&result.unwrap()).unwrap();
    assert_eq!(a["cached"], false);
    assert_eq!(a["permission_set"], "mcp-standard");
    assert_eq!(a["confidence"], 0.7);
    let second = env.insert("infer_permissions", &params);
    let (_, result, _, _) = env.wait_status(second, "succeeded", Duration::from_secs(20));
    let b: Value = serde_json::from_str(&result.unwrap()).unwrap();
    assert_eq!(b["cached"], true);
    assert_eq!(a["tasks"], b["tasks"]);
    assert_eq!(a["code_hash"], b["code_hash"]);
    let (rows, hits, set, conf): (i64, i64, String, f64) = env
        .lifecycle()
        .query_row(
            "SELECT count(*), sum(hits), max(permission_set), max(confidence) FROM inferred_permissions",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (rows, hits, set.as_str(), conf),
        (1, 1, "mcp-standard", 0.7)
    );
    // Same code as TypeScript is another key.
    let ts = serde_json::json!({"code": SEED_000, "language": "ts"}).to_string();
    let third = env.insert("infer_permissions", &ts);
    let (_, result, _, _) = env.wait_status(third, "succeeded", Duration::from_secs(20));
    let c: Value = serde_json::from_str(&result.unwrap()).unwrap();
    assert_eq!(c["cached"], false);
    // Bad params fail with the schema named.
    let bad = env.insert("infer_permissions", r#"{"code": 1}"#);
    let (_, _, err, _) = env.wait_status(bad, "failed", Duration::from_secs(20));
    assert!(err.unwrap().contains("infer_permissions"));
    assert!(!d.log_text().contains("ERROR"), "{}", d.log_text());
    d.sigterm();
    d.wait_exit(Duration::from_secs(30));
}
