//! Clients, grants, audit and the reader actions, through the real worker binary.

mod common;

use common::{job, run, settled as outcome, Env};
use serde_json::Value;
use sha2::{Digest, Sha256};

#[test]
fn grant_and_revoke_take_effect_on_the_next_job_and_every_call_is_audited() {
    let env = Env::new();
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("doc.md"), "# Outside\n\ntext\n").unwrap();
    let _d = env.start(&[]);
    let p = serde_json::json!({"path": outside.join("doc.md")});

    let (st, _, err) = run(&env, "agent", "read_markdown", p.clone());
    assert_eq!(st, "denied");
    assert!(
        err.contains("FILE_READ") && err.contains("brainloop grant agent FILE_READ"),
        "{err}"
    );

    let pattern = format!("{}/**", outside.display());
    let (ok, out, err) = env.cli(&["grant", "agent", "FILE_READ", &pattern]);
    assert!(ok.success(), "{out}{err}");
    let (_, listing, _) = env.cli(&["grants", "agent"]);
    assert!(
        listing.contains(&pattern) && listing.contains("operator"),
        "{listing}"
    );
    let (st, v, err) = run(&env, "agent", "read_markdown", p.clone());
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["digest"]["title"], "Outside");

    let (ok, _, _) = env.cli(&["revoke", "agent", "FILE_READ", &pattern]);
    assert!(ok.success());
    let (st, _, _) = run(&env, "agent", "read_markdown", p.clone());
    assert_eq!(st, "denied", "revoke applies to the next job");
    // Revoking a default grant is refused with the fix named.
    let (ok, _, err) = env.cli(&["revoke", "agent", "FILE_READ", "{workspace}/**"]);
    assert!(!ok.success() && err.contains("config file"), "{err}");

    // One audit row per call, refusals included, with the params hash and permission set.
    let m = env.metadata();
    let rows: Vec<(String, String, Option<String>)> = {
        let mut s = m
            .prepare("SELECT status, params_hash, permission_set FROM audit WHERE client_id = 'agent' ORDER BY id")
            .unwrap();
        let r = s
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap();
        r.map(Result::unwrap).collect()
    };
    let statuses: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(statuses, vec!["denied", "succeeded", "denied"]);
    let want = hex::encode(Sha256::digest(p.to_string().as_bytes()));
    assert!(rows
        .iter()
        .all(|r| r.1 == want && r.2.as_deref() == Some("readonly")));
}

#[test]
fn traversal_and_symlink_escapes_are_refused_and_the_secret_never_leaks() {
    let env = Env::new();
    let ws = &env.workspace;
    std::fs::write(env.root.path().join("secret.md"), "# TOPSECRET\n").unwrap();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("docs/ok.md"), "# Fine\n").unwrap();
    std::os::unix::fs::symlink(env.root.path().join("secret.md"), ws.join("docs/abs.md")).unwrap();
    std::os::unix::fs::symlink("../../secret.md", ws.join("docs/rel.md")).unwrap();
    std::os::unix::fs::symlink(env.root.path(), ws.join("up")).unwrap();
    let _d = env.start(&[]);
    let secret = env.root.path().join("secret.md");
    let attempts = [
        "../secret.md".to_string(),
        "docs/../../secret.md".to_string(),
        secret.display().to_string(),
        "docs/abs.md".into(),
        "docs/rel.md".into(),
        "up/secret.md".into(),
        format!("{}/docs/../../secret.md", ws.display()),
        "/proc/self/environ".into(),
        "/etc/passwd".into(),
    ];
    for a in &attempts {
        let (st, v, err) = run(
            &env,
            "local",
            "read_markdown",
            serde_json::json!({"path": a}),
        );
        assert_eq!(st, "denied", "{a}: {err} {v}");
        assert!(!v.to_string().contains("TOPSECRET") && !err.contains("TOPSECRET"));
    }
    let (st, v, _) = run(
        &env,
        "local",
        "read_markdown",
        serde_json::json!({"file_path": "docs/ok.md"}),
    );
    assert_eq!(st, "succeeded");
    assert_eq!(v["digest"]["title"], "Fine");
}

#[test]
fn a_symlink_swapped_in_after_the_check_never_redirects_the_read() {
    let env = Env::new();
    let ws = env.workspace.clone();
    std::fs::write(env.root.path().join("secret.md"), "# TOPSECRET\n").unwrap();
    std::fs::write(ws.join("plain.md"), "# Plain\n").unwrap();
    std::os::unix::fs::symlink(env.root.path().join("secret.md"), ws.join("evil.md")).unwrap();
    let _d = env.start(&[("BRAINLOOP_CONCURRENCY", "4")]);
    // Race: swap target.md between a regular file and a symlink to the secret, atomically, as
    // fast as possible, while jobs read it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let ws2 = ws.clone();
    let swapper = std::thread::spawn(move || {
        let mut flips = 0u64;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let tmp = ws2.join(".tmp-link");
            let _ = std::fs::remove_file(&tmp);
            if flips % 2 == 0 {
                std::os::unix::fs::symlink(ws2.join("evil.md"), &tmp).unwrap();
            } else {
                std::fs::copy(ws2.join("plain.md"), &tmp).unwrap();
            }
            std::fs::rename(&tmp, ws2.join("target.md")).unwrap();
            flips += 1;
        }
        flips
    });
    let ids: Vec<i64> = (0..300)
        .map(|i| {
            // Distinct params defeat the cache, so every job really opens the file.
            job(
                &env,
                "local",
                "read_markdown",
                &serde_json::json!({"path": "target.md", "file_path": format!("{i}")}),
            )
        })
        .collect();
    let mut seen = std::collections::HashMap::new();
    for id in ids {
        let (st, v, err) = outcome(&env, id);
        assert!(
            !v.to_string().contains("TOPSECRET") && !err.contains("TOPSECRET"),
            "leak in job {id}"
        );
        *seen.entry(st).or_insert(0) += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = swapper.join().unwrap();
    assert!(flips > 100, "the race ran ({flips} swaps)");
    assert!(
        seen.get("succeeded").copied().unwrap_or(0) + seen.get("denied").copied().unwrap_or(0) > 0,
        "{seen:?}"
    );
}

#[test]
fn minimal_clients_request_permissions_and_the_operator_decides() {
    let env = Env::new();
    let outside = env.root.path().join("shared");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("a.md"), "# A\n").unwrap();
    std::fs::write(env.workspace.join("w.md"), "# W\n").unwrap();
    let _d = env.start(&[]);
    // The minimal default reads the workspace and nothing else.
    let (st, _, _) = run(
        &env,
        "stranger",
        "read_markdown",
        serde_json::json!({"path": "w.md"}),
    );
    assert_eq!(st, "succeeded");
    let target = serde_json::json!({"path": outside.join("a.md")});
    let (st, _, err) = run(&env, "stranger", "read_markdown", target.clone());
    assert_eq!(st, "denied", "{err}");
    let pattern = format!("{}/*.md", outside.display());
    let (st, v, err) = run(
        &env,
        "stranger",
        "request_permission",
        serde_json::json!({"permission": "FILE_READ", "pattern": pattern, "justification": "need the shared notes"}),
    );
    assert_eq!(st, "succeeded", "{err}");
    let rid = v["request_id"].as_i64().unwrap();
    // Filing a request grants nothing.
    let (st, _, _) = run(&env, "stranger", "read_markdown", target.clone());
    assert_eq!(st, "denied");
    let (_, listing, _) = env.cli(&["requests"]);
    assert!(
        listing.contains("stranger") && listing.contains("need the shared notes"),
        "{listing}"
    );
    let (ok, out, err) = env.cli(&["requests", "grant", &rid.to_string()]);
    assert!(ok.success(), "{out}{err}");
    let (st, _, err) = run(&env, "stranger", "read_markdown", target);
    assert_eq!(st, "succeeded", "{err}");
    let (ok, _, err) = env.cli(&["requests", "grant", &rid.to_string()]);
    assert!(!ok.success() && err.contains("already granted"), "{err}");
}

#[test]
fn get_result_serves_a_clients_own_jobs_only() {
    let env = Env::new();
    let _d = env.start(&[]);
    let mine = job(&env, "alice", "list_actions", &serde_json::json!({}));
    outcome(&env, mine);
    let (st, v, _) = run(
        &env,
        "alice",
        "get_result",
        serde_json::json!({"job_id": mine}),
    );
    assert_eq!(st, "succeeded");
    assert_eq!(v["status"], "succeeded");
    assert_eq!(v["final"], true);
    assert!(v["result"]["actions"].is_array());
    let (st, v, err) = run(
        &env,
        "mallory",
        "get_result",
        serde_json::json!({"job_id": mine}),
    );
    assert_eq!(st, "failed");
    assert!(
        err.contains("no job") && !v.to_string().contains("actions"),
        "{err}"
    );
    // Same answer for a job that does not exist at all.
    let (_, _, err2) = run(
        &env,
        "mallory",
        "get_result",
        serde_json::json!({"job_id": 999999}),
    );
    assert_eq!(
        err.replace(&mine.to_string(), "N"),
        err2.replace("999999", "N")
    );
}

#[test]
fn every_reader_on_its_fixtures_with_secrets_masked_and_the_cache_used() {
    let env = Env::new();
    let ws = &env.workspace;
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/code");
    for f in [
        "sample.rs",
        "sample.go",
        "sample.py",
        "sample.ts",
        "sample.sql",
    ] {
        std::fs::copy(fixtures.join(f), ws.join(f)).unwrap();
    }
    std::fs::write(
        ws.join(".env"),
        "DATABASE_URL=postgres://app:pw123@db/app\nAPI_TOKEN=tok_abcdef\nLOG_LEVEL=debug\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("conf.yaml"),
        "server:\n  port: 8080\n  secret_key: s3cr3t\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("README.md"),
        "# Project\n\nSee [docs](https://docs.example).\n\n```sh\nmake\n```\n",
    )
    .unwrap();
    let db = ws.join("app.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT); INSERT INTO users(email) VALUES ('a@x'), ('b@x');")
        .unwrap();
    let _d = env.start(&[]);

    let (st, v, err) = run(
        &env,
        "local",
        "read_config",
        serde_json::json!({"path": ".env"}),
    );
    assert_eq!(st, "succeeded", "{err}");
    let s = v.to_string();
    assert!(!s.contains("pw123") && !s.contains("tok_abcdef"), "{s}");
    assert_eq!(v["digest"]["values"]["LOG_LEVEL"], "debug");
    assert_eq!(v["format"], "env");
    let (_, v, _) = run(
        &env,
        "local",
        "read_config",
        serde_json::json!({"path": "conf.yaml"}),
    );
    assert!(
        !v.to_string().contains("s3cr3t") && v["digest"]["values"]["server"]["port"] == 8080,
        "{v}"
    );

    let (_, v, _) = run(
        &env,
        "local",
        "read_code",
        serde_json::json!({"path": "sample.rs"}),
    );
    assert_eq!(v["format"], "rust");
    assert!(
        v["digest"]["tests"].to_string().contains("parses_numbers"),
        "{v}"
    );
    for f in ["sample.go", "sample.py", "sample.ts", "sample.sql"] {
        let (st, v, err) = run(
            &env,
            "local",
            "read_code",
            serde_json::json!({"file_path": f}),
        );
        assert_eq!(st, "succeeded", "{f}: {err}");
        assert!(
            !v["digest"]["functions"].as_array().unwrap().is_empty()
                || !v["digest"]["types"].as_array().unwrap().is_empty(),
            "{f}: {v}"
        );
    }

    let (st, v, err) = run(
        &env,
        "local",
        "read_sqlite",
        serde_json::json!({"db_path": "app.db", "max_sample_rows": 1}),
    );
    assert_eq!(st, "succeeded", "{err}");
    assert_eq!(v["digest"]["tables"][0]["name"], "users");
    assert_eq!(v["digest"]["tables"][0]["row_count"], 2);
    assert_eq!(
        v["digest"]["tables"][0]["sample_rows"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // brainloop's own databases are never readable, whatever the grants.
    let (ok, _, _) = env.cli(&[
        "grant",
        "local",
        "FILE_READ",
        &format!("{}/**", env.data.display()),
    ]);
    assert!(ok.success());
    let (st, _, err) = run(
        &env,
        "local",
        "read_sqlite",
        serde_json::json!({"path": env.data.join("brainloop.output.db")}),
    );
    assert_eq!(st, "denied", "{err}");

    // The cache: same file + same params → hit; the file changes → miss.
    let (_, v1, _) = run(
        &env,
        "local",
        "read_markdown",
        serde_json::json!({"path": "README.md"}),
    );
    let (_, v2, _) = run(
        &env,
        "local",
        "read_markdown",
        serde_json::json!({"path": "README.md"}),
    );
    assert_eq!(
        (v1["cached"].clone(), v2["cached"].clone()),
        (Value::Bool(false), Value::Bool(true))
    );
    assert_eq!(v2["digest"]["links"][0]["url"], "https://docs.example");
    std::fs::write(ws.join("README.md"), "# Changed\n").unwrap();
    let (_, v3, _) = run(
        &env,
        "local",
        "read_markdown",
        serde_json::json!({"path": "README.md"}),
    );
    assert_eq!(v3["cached"], false);
    assert_eq!(v3["digest"]["title"], "Changed");
}
