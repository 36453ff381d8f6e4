//! Issue 36 item 6, "applied changes can be audited", with the real binary: once a change set
//! is applied (approved by the operator, or unasked under a learned signature) and its overlay
//! swept by a restart, `show JOB` still prints its diff, who or what decided and when (local
//! time, never raw unix ms); the retention pass drops the diff after `results_days` and keeps
//! the rest; `show` of an id that names nothing exits non-zero; `history` lists the decisions
//! and applications, newest first.

mod common;

use common::{cli_ok, final_result, past, require_sandbox, submit, vid, Env};
use std::time::{Duration, Instant};

/// `YYYY-MM-DD HH:MM:SS ±HH:MM`: a local time with its offset.
fn has_local_time(s: &str) -> bool {
    s.as_bytes().windows(26).any(|w| {
        let w = std::str::from_utf8(w).unwrap_or("");
        let b = w.as_bytes();
        w.len() == 26
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b' '
            && b[13] == b':'
            && b[16] == b':'
            && b[19] == b' '
            && (b[20] == b'+' || b[20] == b'-')
            && b[23] == b':'
            && [0..4, 5..7, 8..10, 11..13, 14..16, 17..19, 21..23, 24..26]
                .iter()
                .all(|r| b[r.clone()].iter().all(u8::is_ascii_digit))
    })
}

/// A 13-digit run: a raw unix-ms timestamp shown to the operator.
fn has_raw_ms(s: &str) -> bool {
    s.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w.len() == 13 && w.bytes().all(|b| b.is_ascii_digit()))
}

#[test]
fn an_applied_change_set_keeps_its_diff_decider_and_local_time_after_the_sweep_until_retention() {
    require_sandbox();
    let env = Env::new();
    let d = env.start(&[]);
    // Approved by the operator, with --learn: the next write of the kind applies unasked.
    let (asked, st, v, _) = submit(&env, "echo hello > notes.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let asked_vid = vid(&v);
    cli_ok(&env, &["approve", &asked_vid, "--learn"]);
    let (st, v, _) = past(&env, asked, &asked_vid);
    assert_eq!(st, "succeeded", "{v}");
    let (auto, st, v, _) = submit(&env, "echo again > other.txt");
    assert_eq!(
        st, "succeeded",
        "the learned signature applies it unasked: {v}"
    );
    assert_eq!(v["policy_used"], "signature_learned", "{v}");
    // A denial is a decision too.
    let (denied, st, v, _) = submit(&env, "rm other.txt");
    assert_eq!(st, "pending_validation", "{v}");
    let denied_vid = vid(&v);
    cli_ok(&env, &["deny", &denied_vid, "--reason", "not this one"]);
    assert_eq!(final_result(&env, denied).0, "denied");

    // A restart sweeps the overlays of finished jobs (what made `show` forget the diff).
    d.sigterm();
    d.wait_exit(Duration::from_secs(60));
    let d = env.start(&[]);
    let changes = env.data.join("changes");
    for j in [asked, auto] {
        assert!(
            !changes.join(j.to_string()).exists(),
            "job {j}'s overlay is swept at start"
        );
    }

    let s = cli_ok(&env, &["show", &asked.to_string()]);
    assert!(s.contains("+hello"), "the approved diff is kept: {s}");
    assert!(s.contains("change set applied (approved)"), "{s}");
    assert!(
        s.contains("applied on the decision of operator:"),
        "who decided: {s}"
    );
    assert!(has_local_time(&s), "times in local time: {s}");
    assert!(!has_raw_ms(&s), "no raw unix ms: {s}");
    // By the validation id too.
    assert!(cli_ok(&env, &["show", &asked_vid]).contains("+hello"));

    let s = cli_ok(&env, &["show", &auto.to_string()]);
    assert!(s.contains("+again"), "the auto-applied diff is kept: {s}");
    assert!(s.contains("echo again > other.txt"), "{s}");
    assert!(
        s.contains("applied on the decision of worker: every signature learned"),
        "what decided: {s}"
    );
    assert!(has_local_time(&s) && !has_raw_ms(&s), "{s}");

    // Nothing to show is an error, not a normal-looking answer.
    for id in ["999", "0123456789abcdef0123456789abcdef", "nonsense"] {
        let (st, out, err) = env.cli(&["show", id]);
        assert!(!st.success(), "show {id} must fail: {out}{err}");
        assert!(err.contains("no "), "show {id}: {err}");
    }

    // Undo, then the history: newest first, each decision and application once.
    cli_ok(&env, &["undo", &asked.to_string()]);
    let h = cli_ok(&env, &["history"]);
    assert!(has_local_time(&h) && !has_raw_ms(&h), "{h}");
    let events: Vec<(String, String)> = h
        .lines()
        .filter(|l| has_local_time(l))
        .map(|l| {
            let mut w = l[26..].split_whitespace();
            (
                w.next().unwrap_or("").to_string(),
                w.nth(1).unwrap_or("").to_string(),
            )
        })
        .collect();
    let want = [
        ("undone", asked),
        ("deny", denied),
        ("applied", auto),
        ("applied", asked),
        ("approve", asked),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(e, j)| (e.to_string(), j.to_string()))
        .collect();
    assert_eq!(events, want, "{h}");
    assert!(h.contains("not this one") && h.contains("--learn"), "{h}");
    let j: serde_json::Value = serde_json::from_str(&cli_ok(&env, &["history", "--json"]))
        .expect("history --json is JSON");
    assert_eq!(j.as_array().map(Vec::len), Some(5), "{j}");
    assert_eq!(j[1]["validation_id"], denied_vid.as_str(), "{j}");
    assert!(j[0]["at_ms"].is_i64(), "{j}");

    // Retention: an apply older than results_days loses its diff, keeps the rest.
    d.sigterm();
    d.wait_exit(Duration::from_secs(60));
    let old = common::now_ms() - 40 * 86_400_000;
    env.db("command_security.db")
        .execute(
            "UPDATE journal SET applied_at = ?1 WHERE job_id = ?2",
            rusqlite::params![old, auto],
        )
        .unwrap();
    let _d = env.start(&[("BRAINLOOP_RETENTION_INTERVAL_MS", "200")]);
    let t0 = Instant::now();
    let s = loop {
        let s = cli_ok(&env, &["show", &auto.to_string()]);
        if !s.contains("+again") {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "retention never dropped the old diff: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(s.contains("the diff is no longer kept"), "{s}");
    assert!(
        s.contains("change set applied (signature_learned)")
            && s.contains("every signature learned"),
        "the rest of the record stays: {s}"
    );
    // The recent one keeps its diff.
    assert!(cli_ok(&env, &["show", &asked.to_string()]).contains("+hello"));
}
