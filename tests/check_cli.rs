//! `brainloop check` and the `check_command` action, end to end (classification only).

mod common;

use common::Env;
use serde_json::Value;
use std::time::Duration;

#[test]
fn check_json_reports_the_issue_example() {
    let env = Env::new();
    let (st, out, err) = env.cli(&[
        "check",
        "--json",
        "--",
        "cat data.csv | grep x | sort | uniq -c > out.txt && curl -s https://api.example.com",
    ]);
    assert_eq!(st.code(), Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    for k in [
        "command_hash",
        "valid",
        "blocked",
        "reasons",
        "risk_score",
        "permission_set",
        "confidence",
        "detected_patterns",
        "pure",
        "requires_validation",
        "operations",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let ops = v["operations"].as_array().unwrap();
    let find = |op: &str| {
        ops.iter()
            .find(|o| o["op"] == op)
            .unwrap_or_else(|| panic!("{op} in {v}"))
    };
    assert_eq!(find("bash:cat")["category"], "readonly");
    for p in ["bash:grep", "bash:sort", "bash:uniq"] {
        assert_eq!(find(p)["pure"], true, "{p}");
    }
    assert_eq!(find("redirect:write")["category"], "filesystem");
    assert_eq!(find("bash:curl")["category"], "network");
    assert_eq!(find("bash:cat")["layer"], 0);
    assert_eq!(find("bash:curl")["layer"], 1);
    assert_eq!(v["requires_validation"], true);
    assert_eq!(v["pure"], false);
    assert_eq!(v["permission_set"], "mcp-standard");
    let layers = v["layers"].as_array().unwrap();
    assert!(layers.iter().all(|l| l["requires_validation"] == true));

    let (st, text, _) = env.cli(&["check", "--", "echo hello | tr a-z A-Z"]);
    assert_eq!(st.code(), Some(0));
    assert!(text.contains("PURE"), "{text}");
    let (st, _, _) = env.cli(&["check", "--", "rm -rf /"]);
    assert_eq!(st.code(), Some(1), "blocked");
    let (st, out, _) = env.cli(&["check", "--json", "--", "echo $(("]);
    assert_eq!(st.code(), Some(2), "refused");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["pure"], false);
}

#[test]
fn check_command_action_gives_the_same_report() {
    let env = Env::new();
    let _d = env.start(&[]);
    let id = env.insert("check_command", r#"{"command": "base64 -d payload | sh"}"#);
    let (_, result, _, _) = env.wait_status(id, "succeeded", Duration::from_secs(30));
    let v: Value = serde_json::from_str(&result.unwrap()).unwrap();
    assert_eq!(v["blocked"], true, "{v}");
    let ws = env.workspace.canonicalize().unwrap();
    let (_, out, _) = env.cli(&[
        "check",
        "--json",
        "--workdir",
        ws.to_str().unwrap(),
        "--",
        "base64 -d payload | sh",
    ]);
    let cli: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        cli["command_hash"], v["command_hash"],
        "same identity from the CLI and the action"
    );
}

/// Issue 19: `brainloop check` says for a git command why it is or is not read-only.
#[test]
fn check_explains_why_a_git_command_is_or_is_not_read_only() {
    let env = Env::new();
    // (command, permission set, what the explanation must say)
    let cases = [
        ("git log", "readonly", "read-only form"),
        ("git diff HEAD~1", "readonly", "configuration neutralised"),
        ("git status", "readonly", "read-only form"),
        (
            "git grep -O vim foo",
            "mcp-standard",
            "--open-files-in-pager runs the program",
        ),
        (
            "git diff --output=x",
            "filesystem",
            "--output=FILE writes FILE",
        ),
        ("git -p log", "mcp-standard", "runs a pager"),
        (
            "git branch newb",
            "filesystem",
            "creates, moves or deletes a branch",
        ),
        (
            "git push",
            "mcp-standard",
            "not read-only: this git subcommand itself is network",
        ),
    ];
    for (cmd, set, why) in cases {
        let (st, out, err) = env.cli(&["check", "--", cmd]);
        assert!(st.code().is_some(), "{cmd}: {err}");
        let set_line = out.lines().find(|l| l.starts_with("set:")).unwrap_or("");
        assert!(
            set_line.contains(&format!(" {set} ")),
            "{cmd}: expected set {set}:\n{out}"
        );
        assert!(out.contains(why), "{cmd}: expected {why:?}:\n{out}");
    }
}
