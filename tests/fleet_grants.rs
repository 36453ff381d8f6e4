//! Clients' grants shared through the fleet registry (issue 37), through the real binary and a
//! real PostgreSQL the harness starts itself (`common::pg`): `brainloop grant --scope
//! fleet|project:NAME|worker:ROLE` written only by the operator's role, used by every worker of
//! the scope from the client's next job, revoked everywhere within a second; a worker's
//! credentials cannot write one; a SECRET grant shared while the secret's value stays in each
//! worker's own configuration.

mod common;

use common::fleet::{self, ok, refused};
use common::pg;
use common::{submit_as, Daemon, Env};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn start_in_project(env: &Env, url: &str, project: &str, extra: &[(&str, &str)]) -> Daemon {
    let mut vars = vec![
        ("BRAINLOOP_REGISTRY_URL", url),
        ("BRAINLOOP_HOROS_NAME", project),
    ];
    vars.extend_from_slice(extra);
    env.start(&vars)
}

/// Waits (up to 15 s) until `cmd` of `client` on `env` settles as `want`: its result.
fn until_state(env: &Env, client: &str, cmd: &str, want: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let (_, st, v, e) = submit_as(env, client, cmd);
        if st == want {
            return serde_json::json!({"result": v, "error": e});
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "{client}: {cmd} is still {st} (not {want}) after {:?}: {v} {e}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_grant_shared_by_scope_reaches_its_workers_only_and_a_revocation_every_one_within_a_second() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "grants", &["a", "b"]);
    let (db, op, ws) = (&r.db, &r.operator, &r.workers);
    let envs = [Env::new(), Env::new()];
    // A works on project web, B on project batch.
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(ws)
        .zip(["web", "batch"])
        .map(|((e, w), p)| {
            std::fs::write(e.workspace.join("a.txt"), "one\n").unwrap();
            start_in_project(e, &c.url_as(w, db), p, &[])
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(op, db);
    // Client ci has the minimal default (read the workspace, run echo): no cat, no wc.
    for e in &envs {
        let v = until_state(e, "ci", "cat a.txt", "denied");
        assert!(
            v["error"].as_str().unwrap().contains("SYSTEM_COMMAND"),
            "{v}"
        );
    }

    // The operator grants cat to ci on the whole fleet: both workers run it.
    let out = ok(
        &op_url,
        operator.path(),
        &["grant", "ci", "SYSTEM_COMMAND", "cat", "--scope", "fleet"],
    );
    assert!(out.contains("granted fleet-grant:"), "{out}");
    assert!(out.contains("[fleet] ci SYSTEM_COMMAND cat"), "{out}");
    for e in &envs {
        let v = until_state(e, "ci", "cat a.txt", "succeeded");
        assert_eq!(v["result"]["stdout"], "one\n", "{v}");
    }
    // Granting it again changes nothing.
    let again = ok(
        &op_url,
        operator.path(),
        &["grant", "ci", "SYSTEM_COMMAND", "cat", "--scope", "fleet"],
    );
    assert!(again.contains("already granted"), "{again}");

    // wc for project web only: A runs it, B (project batch) does not.
    ok(
        &op_url,
        operator.path(),
        &[
            "grant",
            "ci",
            "SYSTEM_COMMAND",
            "wc",
            "--scope",
            "project:web",
        ],
    );
    until_state(&envs[0], "ci", "wc -l a.txt", "succeeded");
    let (_, st, v, _) = submit_as(&envs[1], "ci", "wc -l a.txt");
    assert_eq!(st, "denied", "project batch has no wc: {v}");

    // `grants` shows the shared grants with their scope and provenance, to the operator and
    // (its scopes' only) to a worker.
    let listed = ok(&op_url, operator.path(), &["grants"]);
    assert!(
        listed.contains("[project:web] ci SYSTEM_COMMAND wc: granted_by operator:"),
        "{listed}"
    );
    let as_a: serde_json::Value = serde_json::from_str(&ok(
        &c.url_as(&ws[0], db),
        &envs[0].data,
        &["grants", "ci", "--json"],
    ))
    .unwrap();
    let shared = as_a["registry"].as_array().unwrap();
    assert_eq!(shared.len(), 2, "{as_a}");
    assert!(shared.iter().all(|g| g["db_role"] == op.as_str()), "{as_a}");

    // A worker's credentials cannot grant or revoke, through the CLI or SQL.
    let e = refused(
        &c.url_as(&ws[0], db),
        &envs[0].data,
        &["grant", "ci", "SYSTEM_COMMAND", "*", "--scope", "fleet"],
    );
    assert!(e.contains("permission denied"), "{e}");
    let e = refused(
        &c.url_as(&ws[1], db),
        &envs[1].data,
        &["revoke", "ci", "SYSTEM_COMMAND", "cat", "--scope", "fleet"],
    );
    assert!(e.contains("permission denied"), "{e}");
    let mut wa = c.connect(&ws[0], db);
    for sql in [
        "INSERT INTO client_grants(client_id, permission, pattern, scope, granted_by, created_at) VALUES ('ci', 'SYSTEM_COMMAND', '*', 'fleet', 'w', 1)",
        "INSERT INTO client_grants(client_id, permission, pattern, scope, target, granted_by, created_at) VALUES ('ci', 'FORCE_EXECUTE', '*', 'worker', current_user, 'w', 1)",
        "UPDATE client_grants SET revoked_at = 1, revoked_by = 'w', revoked_role = current_user",
        "UPDATE client_grants SET pattern = '*'",
        "DELETE FROM client_grants",
    ] {
        let e = wa.batch_execute(sql).unwrap_err();
        assert!(format!("{e:?}").contains("permission denied"), "{sql}: {e:?}");
    }
    for e in &envs {
        until_state(e, "ci", "cat a.txt", "succeeded");
    }

    // The operator revokes cat: every worker refuses it again, within a second of the revoke
    // (the first job after it that the worker sees).
    let t0 = Instant::now();
    let out = ok(
        &op_url,
        operator.path(),
        &["revoke", "ci", "SYSTEM_COMMAND", "cat", "--scope", "fleet"],
    );
    assert!(out.contains("revoked fleet-grant:"), "{out}");
    for e in &envs {
        until_state(e, "ci", "cat a.txt", "denied");
    }
    eprintln!("revoke → both workers refuse: {:?}", t0.elapsed());
    // Nothing left to revoke: an error naming `grants`.
    let e = refused(
        &op_url,
        operator.path(),
        &["revoke", "ci", "SYSTEM_COMMAND", "cat", "--scope", "fleet"],
    );
    assert!(e.contains("no active grant"), "{e}");
    // A grant with --scope needs a registry.
    let (st, _, e) = envs[0].cli(&["grant", "ci", "SYSTEM_COMMAND", "cat", "--scope", "fleet"]);
    assert!(!st.success() && e.contains("[registry]"), "{e}");
}

const CANARY: &str = "canary-fleet-token-7e3a9c";

/// A tiny HTTP upstream on 127.0.0.1 keeping every request head.
fn upstream() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = Vec::new();
            let mut b = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&b[..n]),
                }
            }
            h.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf).into_owned());
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nupstream\n",
            );
        }
    });
    (port, heads)
}

#[test]
fn a_secret_grant_is_shared_and_each_worker_sends_the_value_of_its_own_configuration() {
    common::require_sandbox();
    let c = pg::shared();
    let r = fleet::registry(c, "secret", &["a"]);
    let (port, heads) = upstream();
    let env = Env::new();
    // The secret's value lives in the worker's own configuration only.
    let tok = env.root.path().join("token");
    std::fs::write(&tok, format!("{CANARY}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = env.root.path().join("brainloop.toml");
    std::fs::write(
        &config,
        format!("[secrets.GH_TOKEN]\nfile = {tok:?}\nhosts = [\"127.0.0.1:{port}\"]\n"),
    )
    .unwrap();
    let _d = start_in_project(
        &env,
        &c.url_as(&r.workers[0], &r.db),
        "web",
        &[("BRAINLOOP_CONFIG", config.to_str().unwrap())],
    );
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&r.operator, &r.db);
    let admin_url = c.admin_url(&r.db);
    let approver = Approver {
        op_url: &op_url,
        admin_url: &admin_url,
        data: operator.path(),
    };
    // The host is shared too (a NETWORK grant); a curl still asks up front, approved through the
    // registry.
    ok(
        &op_url,
        operator.path(),
        &["grant", "bob", "SYSTEM_COMMAND", "*", "--scope", "fleet"],
    );
    ok(
        &op_url,
        operator.path(),
        &[
            "grant",
            "bob",
            "NETWORK",
            &format!("127.0.0.1:{port}"),
            "--scope",
            "fleet",
        ],
    );
    let cmd = |n: u32| {
        format!(
            "printenv GH_TOKEN >/dev/null && echo placeholder || echo none; curl -sS -m 20 -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{port}/n{n}"
        )
    };
    // Without the SECRET grant: no placeholder, no value upstream.
    until_state_out(&env, "bob", &cmd, "none\nupstream\n", &approver);
    let worker_scope = format!("worker:{}", r.workers[0]);
    let out = ok(
        &op_url,
        operator.path(),
        &[
            "grant",
            "bob",
            "SECRET",
            "GH_TOKEN",
            "--scope",
            &worker_scope,
        ],
    );
    assert!(out.contains("only the grant is shared"), "{out}");
    // With it: the command sees a placeholder, the upstream gets the worker's own value.
    let v = until_state_out(&env, "bob", &cmd, "placeholder\nupstream\n", &approver);
    assert!(!v.to_string().contains(CANARY), "{v}");
    let got = heads.lock().unwrap().clone();
    assert!(
        got.iter().any(|h| h.contains(&format!("Bearer {CANARY}"))),
        "{got:?}"
    );
    // The registry holds the grant, never the value.
    let mut admin = postgres::Client::connect(&c.admin_url(&r.db), postgres::NoTls).unwrap();
    let n: i64 = admin
        .query_one(
            "SELECT count(*) FROM client_grants WHERE permission = 'SECRET' AND pattern = 'GH_TOKEN' AND revoked_at IS NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    let dump: String = admin
        .query_one(
            "SELECT coalesce(string_agg(t::text, ' '), '') FROM client_grants t",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!dump.contains(CANARY), "{dump}");
    // Revoked: no placeholder again.
    ok(
        &op_url,
        operator.path(),
        &[
            "revoke",
            "bob",
            "SECRET",
            "GH_TOKEN",
            "--scope",
            &worker_scope,
        ],
    );
    until_state_out(&env, "bob", &cmd, "none\nupstream\n", &approver);
}

/// The operator's side for [`until_state_out`]: approves through the registry what a run
/// asks up front (a curl to a host asks once per command).
struct Approver<'a> {
    op_url: &'a str,
    admin_url: &'a str,
    data: &'a std::path::Path,
}

/// Waits (up to 30 s) until `cmd(n)` of `client` succeeds with `stdout`, each up-front ask
/// approved by the operator through the registry: its result.
fn until_state_out(
    env: &Env,
    client: &str,
    cmd: &dyn Fn(u32) -> String,
    stdout: &str,
    op: &Approver<'_>,
) -> serde_json::Value {
    let t0 = Instant::now();
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    loop {
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (id, mut st, mut v, mut e) = submit_as(env, client, &cmd(n));
        if st == "pending_validation" {
            let old = common::vid(&v);
            let mut admin = postgres::Client::connect(op.admin_url, postgres::NoTls).unwrap();
            let t1 = Instant::now();
            while admin
                .query_opt("SELECT 1 FROM validations WHERE id = $1", &[&old])
                .unwrap()
                .is_none()
            {
                assert!(
                    t1.elapsed() < common::scaled(Duration::from_secs(30)),
                    "{old} never published"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            ok(op.op_url, op.data, &["approve", &old]);
            (st, v, e) = common::past(env, id, &old);
        }
        if st == "succeeded" && v["stdout"] == stdout {
            return v;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "{client}: still {st} {v} {e} (want stdout {stdout:?})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
