//! The fleet registry's connection and shared rules (issue 37), through the real binary and a
//! real PostgreSQL the harness starts itself (`common::pg`): TLS to the registry
//! (`sslmode=verify-full` with a CA made here by rcgen; a wrong CA or host name refused naming
//! the fix), and the overrides and host rules shared by scope (worker / project / fleet),
//! written only by the operator's role and revoked on every worker within a second.

mod common;

use common::fleet::{self, ok, refused};
use common::pg::{self, Cluster};
use common::{final_result, submit, Daemon, Env};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A migrated registry of this test's own, reached through `url_for(role, db)` as its owner
/// (`postgres`): (db, operator role, workers).
fn registry_with(
    c: &Cluster,
    url_for: &dyn Fn(&str, &str) -> String,
    tag: &str,
    workers: &[&str],
) -> (String, String, Vec<String>) {
    let r = fleet::registry_via(c, &|db| url_for("postgres", db), tag, workers);
    (r.db, r.operator, r.workers)
}

fn registry(c: &Cluster, tag: &str, workers: &[&str]) -> (String, String, Vec<String>) {
    registry_with(c, &|r, d| c.url_as(r, d), tag, workers)
}

fn setup_ws(env: &Env) {
    std::fs::write(env.workspace.join("a.txt"), "one\n").unwrap();
}

fn read(env: &Env, rel: &str) -> Option<String> {
    std::fs::read_to_string(env.workspace.join(rel)).ok()
}

fn wait_published(url: &str, id: &str) -> String {
    let mut cl = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(r) = cl
            .query_opt("SELECT worker FROM validations WHERE id = $1", &[&id])
            .unwrap()
        {
            return r.get(0);
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(30)),
            "validation {id} never reached the registry"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_worker(env: &Env, url: &str) -> Daemon {
    env.start(&[("BRAINLOOP_REGISTRY_URL", url)])
}

// ---- TLS ----

/// A CA (made here) and a server certificate it signed for `localhost`: (CA PEM, server
/// certificate PEM, server key PEM).
fn ca_and_server(name: &str) -> (String, String, String) {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("fleet_rules {name} CA"));
    let ca = rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
    let mut lp = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    lp.distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = lp.signed_by(&key, &ca).unwrap();
    (ca.pem(), leaf.pem(), key.serialize_pem())
}

struct TlsRegistry {
    cluster: Cluster,
    ca: PathBuf,
    wrong_ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsRegistry {
    fn start() -> TlsRegistry {
        let (ca, cert, key) = ca_and_server("right");
        let (wrong, _, _) = ca_and_server("wrong");
        let dir = tempfile::tempdir().unwrap();
        let ca_path = dir.path().join("ca.pem");
        let wrong_path = dir.path().join("wrong-ca.pem");
        std::fs::write(&ca_path, ca).unwrap();
        std::fs::write(&wrong_path, wrong).unwrap();
        TlsRegistry {
            cluster: Cluster::start_tls(&cert, &key),
            ca: ca_path,
            wrong_ca: wrong_path,
            _dir: dir,
        }
    }

    /// `role`'s URL for `db` by the certificate's name (`localhost`, reached at 127.0.0.1).
    fn url(&self, role: &str, db: &str, query: &str) -> String {
        format!(
            "postgres://{role}@localhost:{}/{db}?hostaddr=127.0.0.1&{query}",
            self.cluster.port
        )
    }

    fn verify_full(&self, role: &str, db: &str) -> String {
        self.url(
            role,
            db,
            &format!("sslmode=verify-full&sslrootcert={}", self.ca.display()),
        )
    }
}

#[test]
fn verify_full_with_the_right_ca_connects_and_a_wrong_ca_or_host_name_is_refused_naming_the_fix() {
    let r = TlsRegistry::start();
    let (db, op, ws) = registry_with(&r.cluster, &|ro, d| r.verify_full(ro, d), "tls", &["w"]);
    let tmp = tempfile::tempdir().unwrap();

    // The right CA and host name: connected, over TLS as the server sees it.
    let out = ok(
        &r.verify_full(&ws[0], &db),
        tmp.path(),
        &["registry", "status"],
    );
    assert!(out.contains("connection: TLS TLSv1."), "{out}");
    let out = ok(
        &r.verify_full(&op, &db),
        tmp.path(),
        &["registry", "status", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["transport"].as_str().unwrap().starts_with("TLS"), "{v}");

    // A CA that did not sign the server's certificate: refused, naming sslrootcert.
    let wrong = r.url(
        &ws[0],
        &db,
        &format!("sslmode=verify-full&sslrootcert={}", r.wrong_ca.display()),
    );
    let e = refused(&wrong, tmp.path(), &["registry", "status"]);
    assert!(
        e.contains("not signed by a CA of sslrootcert=") && e.contains("set sslrootcert=FILE"),
        "{e}"
    );
    // verify-ca too checks the chain.
    let wrong = r.url(
        &ws[0],
        &db,
        &format!("sslmode=verify-ca&sslrootcert={}", r.wrong_ca.display()),
    );
    let e = refused(&wrong, tmp.path(), &["registry", "status"]);
    assert!(e.contains("not signed by a CA"), "{e}");
    // `require` with a root file verifies the chain, as libpq.
    let wrong = r.url(
        &ws[0],
        &db,
        &format!("sslmode=require&sslrootcert={}", r.wrong_ca.display()),
    );
    let e = refused(&wrong, tmp.path(), &["registry", "status"]);
    assert!(e.contains("not signed by a CA"), "{e}");

    // The right CA but another host name (the IP, not in the certificate): refused by
    // verify-full naming the host, accepted by verify-ca (chain only).
    let by_ip = |mode: &str| {
        format!(
            "postgres://{}@127.0.0.1:{}/{db}?sslmode={mode}&sslrootcert={}",
            ws[0],
            r.cluster.port,
            r.ca.display()
        )
    };
    let e = refused(&by_ip("verify-full"), tmp.path(), &["registry", "status"]);
    assert!(
        e.contains("not valid for the host name \"127.0.0.1\"") && e.contains("verify-full"),
        "{e}"
    );
    let out = ok(&by_ip("verify-ca"), tmp.path(), &["registry", "status"]);
    assert!(out.contains("connection: TLS"), "{out}");

    // `require` without a root file encrypts (as libpq, without authenticating the server);
    // `disable` over TCP still works where the server allows it (pg_hba `host`).
    let out = ok(
        &r.url(&ws[0], &db, "sslmode=require"),
        tmp.path(),
        &["registry", "status"],
    );
    assert!(out.contains("connection: TLS"), "{out}");
    let out = ok(
        &r.url(&ws[0], &db, "sslmode=disable"),
        tmp.path(),
        &["registry", "status"],
    );
    assert!(out.contains("connection: no TLS"), "{out}");
    // An unreadable root file names it.
    let e = refused(
        &r.url(
            &ws[0],
            &db,
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        ),
        tmp.path(),
        &["registry", "status"],
    );
    assert!(
        e.contains("cannot read sslrootcert=/nonexistent/ca.pem"),
        "{e}"
    );
}

#[test]
fn a_worker_and_the_operator_over_verify_full_share_the_queue() {
    common::require_sandbox();
    let r = TlsRegistry::start();
    let (db, op, ws) = registry_with(&r.cluster, &|ro, d| r.verify_full(ro, d), "tlsq", &["w"]);
    let env = Env::new();
    setup_ws(&env);
    let _d = start_worker(&env, &r.verify_full(&ws[0], &db));
    let operator = tempfile::tempdir().unwrap();
    let op_url = r.verify_full(&op, &db);

    let (job, st, v, e) = submit(&env, "sed -i s/one/ONE/ a.txt");
    assert_eq!(st, "pending_validation", "{v} {e}");
    let vid = v["validation_id"].as_str().unwrap().to_string();
    assert_eq!(
        wait_published(&r.cluster.admin_url(&db), &vid),
        ws[0],
        "published by the worker's role"
    );
    // The worker's connection is encrypted, as the server sees it.
    let mut admin = r.cluster.connect("postgres", &db);
    let ssl: bool = admin
        .query_one(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid
             WHERE a.usename = $1",
            &[&ws[0]],
        )
        .unwrap()
        .get::<_, Option<bool>>(0)
        .expect("the worker holds a connection");
    assert!(ssl, "the worker's registry connection is TLS");
    ok(&op_url, operator.path(), &["approve", &vid]);
    let (st, v, e) = final_result(&env, job);
    assert_eq!(st, "succeeded", "{v} {e}");
    assert_eq!(read(&env, "a.txt").as_deref(), Some("ONE\n"));
}

// ---- Overrides, learned signatures and host rules shared by scope ----

/// Starts a worker of project `project` (its `horos_name`) on the registry as `role`.
fn start_in_project(env: &Env, url: &str, project: &str) -> Daemon {
    env.start(&[
        ("BRAINLOOP_REGISTRY_URL", url),
        ("BRAINLOOP_HOROS_NAME", project),
    ])
}

static N: AtomicUsize = AtomicUsize::new(0);

/// Submits `cmd` (its `{n}` replaced by a fresh number, so that no two submissions are
/// duplicates) after writing "x" to `file` (same `{n}`): (status, result, the file's text
/// after).
fn once(env: &Env, cmd: &str, file: &str) -> (String, serde_json::Value, Option<String>) {
    let n = N.fetch_add(1, Ordering::SeqCst).to_string();
    let (cmd, file) = (cmd.replace("{n}", &n), file.replace("{n}", &n));
    std::fs::write(env.workspace.join(&file), "x\n").unwrap();
    let (_, st, v, e) = submit(env, &cmd);
    let after = read(env, &file);
    (st, serde_json::json!({"result": v, "error": e}), after)
}

/// Waits (up to 15 s) until `cmd` on `env` settles as `want` ("succeeded" unasked under a
/// learned signature, "pending_validation", "denied"); returns the last result and the file.
fn until_state(
    env: &Env,
    cmd: &str,
    file: &str,
    want: &str,
) -> (serde_json::Value, Option<String>) {
    let t0 = Instant::now();
    loop {
        let (st, v, after) = once(env, cmd, file);
        if st == want {
            return (v, after);
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(15)),
            "{cmd} is still {st} (not {want}) after {:?}: {v}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

const SED: &str = "sed -i s/x/X/ b{n}.txt";
const SED_FILE: &str = "b{n}.txt";
const REDIRECT: &str = "echo hi{n} > c{n}.txt";
const REDIRECT_FILE: &str = "c{n}.txt";
const SIG: &str = "sed -i EXPR WS_PATH";
const RM: &str = "rm d{n}.txt";
const RM_FILE: &str = "d{n}.txt";

/// The rule `id` as `url`'s role may read it (None: not visible to that role).
fn rule_as(url: &str, data: &Path, id: i64) -> Option<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(&ok(url, data, &["rules", "list", "--all", "--json"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
}

fn add_rule(url: &str, data: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["rules", "add"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(&ok(url, data, &all)).unwrap()
}

#[test]
fn rules_by_project_and_worker_apply_only_there_and_a_revocation_reaches_every_worker() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "scope", &["a", "b", "c"]);
    let envs: Vec<Env> = (0..3).map(|_| Env::new()).collect();
    // A and B work on project web, C on project batch.
    let projects = ["web", "web", "batch"];
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .zip(projects)
        .map(|((e, w), p)| {
            setup_ws(e);
            start_in_project(e, &c.url_as(w, &db), p)
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    // Before: every worker asks for the sed.
    for e in &envs {
        until_state(e, SED, SED_FILE, "pending_validation");
    }

    // The operator teaches the signature to project web: A and B run it unasked, C still asks.
    let learned = add_rule(
        &op_url,
        operator.path(),
        &[
            "signature",
            SIG,
            "--scope",
            "project:web",
            "--client",
            "local",
        ],
    );
    assert_eq!(learned["scope"], "project", "{learned}");
    assert_eq!(learned["target"], "web", "{learned}");
    assert_eq!(learned["db_role"], op.as_str(), "{learned}");
    let learned_id = learned["id"].as_i64().unwrap();
    for e in &envs[..2] {
        let (v, after) = until_state(e, SED, SED_FILE, "succeeded");
        assert_eq!(v["result"]["policy_used"], "signature_learned", "{v}");
        assert_eq!(after.as_deref(), Some("X\n"));
    }
    let (st, v, _) = once(&envs[2], SED, SED_FILE);
    assert_eq!(
        st, "pending_validation",
        "project batch never learned it: {v}"
    );

    // A `never` override for worker B alone: B denies it (the strictest override wins over
    // what its project learned), A still runs it.
    // (`override SIG VALUE --scope` is `rules add override`.)
    let out = ok(
        &op_url,
        operator.path(),
        &[
            "override",
            SIG,
            "never",
            "--scope",
            &format!("worker:{}", ws[1]),
        ],
    );
    let never_id: i64 = out
        .split("fleet:")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        out.contains(&format!(
            "[worker:{}] override never of signature `{SIG}`",
            ws[1]
        )),
        "{out}"
    );
    let (v, after) = until_state(&envs[1], SED, SED_FILE, "denied");
    assert!(v["error"].as_str().unwrap().contains(SIG), "{v}");
    assert_eq!(after.as_deref(), Some("x\n"), "nothing ran");
    let (st, v, _) = once(&envs[0], SED, SED_FILE);
    assert_eq!(st, "succeeded", "A is not B: {v}");
    // Only B's role reads B's rule; A's does not.
    assert!(rule_as(&c.url_as(&ws[1], &db), &envs[1].data, never_id).is_some());
    assert!(rule_as(&c.url_as(&ws[0], &db), &envs[0].data, never_id).is_none());
    // `signatures` on A shows the project's rule with its scope and provenance.
    let listed = ok(&c.url_as(&ws[0], &db), &envs[0].data, &["signatures"]);
    assert!(
        listed.contains(&format!(
            "fleet:{learned_id} [project:web] `{SIG}` for client local: learned_by operator:"
        )),
        "{listed}"
    );

    // Workers cannot write rules: A's credentials are refused by PostgreSQL, through the CLI
    // and directly.
    let e = refused(
        &c.url_as(&ws[0], &db),
        &envs[0].data,
        &[
            "rules",
            "add",
            "override",
            SIG,
            "--value",
            "always_allow",
            "--scope",
            "fleet",
        ],
    );
    assert!(e.contains("permission denied"), "{e}");
    let e = refused(
        &c.url_as(&ws[1], &db),
        &envs[1].data,
        &["rules", "revoke", &format!("fleet:{never_id}")],
    );
    assert!(e.contains("permission denied"), "{e}");
    let mut wa = c.connect(&ws[0], &db);
    for sql in [
        format!("UPDATE learned_rules SET revoked_at = 1, revoked_by = 'x', revoked_role = current_user WHERE id = {never_id}"),
        format!("DELETE FROM learned_rules WHERE id = {learned_id}"),
        "INSERT INTO learned_rules(kind, rule, client_id, scope, learned_by, created_at) VALUES ('signature', 'rm -rf WS_PATH', '*', 'fleet', 'w', 1)".to_string(),
        format!("INSERT INTO learned_rules(kind, rule, client_id, scope, target, value, learned_by, created_at) VALUES ('override', '{SIG}', '*', 'worker', current_user, 'always_allow', 'w', 1)"),
    ] {
        let e = wa.batch_execute(&sql).unwrap_err();
        assert!(format!("{e:?}").contains("permission denied"), "{sql}: {e:?}");
    }

    // The operator revokes the project's rule: A and B ask (B still denies: its `never`)...
    let t0 = Instant::now();
    ok(
        &op_url,
        operator.path(),
        &["rules", "revoke", &format!("fleet:{learned_id}")],
    );
    until_state(&envs[0], SED, SED_FILE, "pending_validation");
    eprintln!("revoke → A asks again: {:?}", t0.elapsed());
    let (st, v, _) = once(&envs[1], SED, SED_FILE);
    assert_eq!(st, "denied", "{v}");
    // ... and lifting B's `never` makes B ask again.
    ok(
        &op_url,
        operator.path(),
        &["rules", "revoke", &format!("fleet:{never_id}")],
    );
    until_state(&envs[1], SED, SED_FILE, "pending_validation");
    // The listing keeps both, revoked, with who revoked them.
    let r = rule_as(&op_url, operator.path(), learned_id).unwrap();
    assert!(
        r["revoked_at"].is_i64() && r["revoked_by"].as_str().unwrap().starts_with("operator:"),
        "{r}"
    );
}

#[test]
fn a_never_override_keeps_applying_while_the_registry_is_down_an_allow_does_not() {
    common::require_sandbox();
    // A cluster of its own: this test stops it.
    let c = Cluster::start();
    let (db, op, ws) = registry(&c, "down", &["a"]);
    let env = Env::new();
    setup_ws(&env);
    let _d = start_in_project(&env, &c.url_as(&ws[0], &db), "web");
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    // `always_allow` on sed for the fleet, `never` on `redirect:write WS_PATH` for project web.
    add_rule(
        &op_url,
        operator.path(),
        &["override", SIG, "--value", "always_allow"],
    );
    add_rule(
        &op_url,
        operator.path(),
        &[
            "override",
            "redirect:write WS_PATH",
            "--value",
            "never",
            "--scope",
            "project:web",
        ],
    );
    until_state(&env, SED, SED_FILE, "succeeded");
    until_state(&env, REDIRECT, REDIRECT_FILE, "denied");
    // The registry goes down: the permissive override stops applying (the sed asks), the
    // restrictive one still holds (the redirect is still denied, never run).
    c.stop();
    until_state(&env, SED, SED_FILE, "pending_validation");
    let (st, v, after) = once(&env, REDIRECT, REDIRECT_FILE);
    assert_eq!(st, "denied", "{v}");
    assert_eq!(after.as_deref(), Some("x\n"), "nothing ran");
    // Back: the permissive one applies again.
    c.resume();
    until_state(&env, SED, SED_FILE, "succeeded");
}

#[test]
fn a_never_override_holds_after_a_kill_9_restart_while_the_registry_is_down_an_allow_does_not() {
    common::require_sandbox();
    // A cluster of its own: this test stops it.
    let c = Cluster::start();
    let (db, op, ws) = registry(&c, "restart", &["a"]);
    let env = Env::new();
    setup_ws(&env);
    let url = c.url_as(&ws[0], &db);
    let d = start_in_project(&env, &url, "web");
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    // The local policy runs the sed unasked: the operator of this machine set `always_allow`
    // on its signature here (the signature is known once a sed asked).
    until_state(&env, SED, SED_FILE, "pending_validation");
    common::cli_ok(&env, &["override", SIG, "always_allow"]);
    until_state(&env, SED, SED_FILE, "succeeded");
    // The fleet forbids it (`never` for project web, stricter than the local allow) and
    // allows the rm (`always_allow`, permissive; another family than the sed's, which the
    // local allow covers).
    add_rule(
        &op_url,
        operator.path(),
        &[
            "override",
            SIG,
            "--value",
            "never",
            "--scope",
            "project:web",
        ],
    );
    add_rule(
        &op_url,
        operator.path(),
        &["override", "rm WS_PATH", "--value", "always_allow"],
    );
    until_state(&env, SED, SED_FILE, "denied");
    until_state(&env, RM, RM_FILE, "succeeded");

    // The registry goes down, then the worker is killed -9 and restarted while it is down.
    c.stop();
    d.kill9();
    let d = start_in_project(&env, &url, "web");
    // The fleet's `never` still holds (the copy saved at the last pull): nothing ran.
    let (st, v, after) = once(&env, SED, SED_FILE);
    assert_eq!(st, "denied", "the fleet forbade it before the restart: {v}");
    assert!(v["error"].as_str().unwrap_or("").contains(SIG), "{v}");
    assert_eq!(after.as_deref(), Some("x\n"), "nothing ran");
    // The permissive rule is not used from the saved copy: the rm waits for a human.
    let n = N.fetch_add(1, Ordering::SeqCst).to_string();
    let (cmd, file) = (RM.replace("{n}", &n), RM_FILE.replace("{n}", &n));
    std::fs::write(env.workspace.join(&file), "x\n").unwrap();
    let (waiting, st, v, _) = submit(&env, &cmd);
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(read(&env, &file).as_deref(), Some("x\n"), "nothing ran");
    let vid = common::vid(&v);

    // Back: the permissive rule applies again, the `never` still holds, and the request made
    // during the outage reaches the registry (nothing lost).
    c.resume();
    until_state(&env, RM, RM_FILE, "succeeded");
    let (st, v, after) = once(&env, SED, SED_FILE);
    assert_eq!(st, "denied", "{v}");
    assert_eq!(after.as_deref(), Some("x\n"));
    assert_eq!(wait_published(&c.admin_url(&db), &vid), ws[0]);
    ok(&op_url, operator.path(), &["approve", &vid]);
    let (st, v, _) = common::past(&env, waiting, &vid);
    assert_eq!(st, "succeeded", "{v}");
    assert_eq!(read(&env, &file), None, "the approved rm ran");
    drop(d);
}

/// `curl` of `url` on `env` as client `local`; the up-front prompt, if any, approved by the
/// operator through the registry: the job's state past it and its result.
fn curl_through_registry(
    env: &Env,
    pg_admin: &str,
    op_url: &str,
    operator: &Path,
    url: &str,
) -> (String, serde_json::Value) {
    // A fresh query string each time: never a duplicate of the last request.
    let n = N.fetch_add(1, Ordering::SeqCst);
    let (id, st, v, e) = submit(env, &format!("curl -sS -m 20 '{url}?n={n}'"));
    if st == "pending_validation" && v["egress_refused"].is_null() {
        let old = common::vid(&v);
        wait_published(pg_admin, &old);
        ok(op_url, operator, &["approve", &old]);
        let (st, v, _) = common::past(env, id, &old);
        return (st, v);
    }
    assert!(
        st == "succeeded" || st == "pending_validation",
        "{st} {v} {e}"
    );
    (st, v)
}

#[test]
fn a_host_rule_for_a_project_lets_its_workers_reach_the_host_and_no_other_worker() {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "hosts", &["a", "c"]);
    let envs = [Env::new(), Env::new()];
    let site = envs[0].root.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "hello-fleet\n").unwrap();
    let srv = common::http_server::Server::start(&site, envs[0].root.path().join("server.log"));
    let _a = start_in_project(&envs[0], &c.url_as(&ws[0], &db), "web");
    let _c = start_in_project(&envs[1], &c.url_as(&ws[1], &db), "batch");
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let admin = c.admin_url(&db);
    let host = format!("127.0.0.1:{}", srv.port);
    let url = format!("http://{host}/index.html");

    // Before: the proxy refuses loopback without a rule naming it, on every worker.
    let (st, v) = curl_through_registry(&envs[0], &admin, &op_url, operator.path(), &url);
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(v["egress_refused"], serde_json::json!([host]), "{v}");
    assert!(srv.requests().is_empty());

    // The operator's host rule for project web: A's commands reach it, C's still do not.
    let rule = add_rule(
        &op_url,
        operator.path(),
        &["host", &host, "--scope", "project:web", "--client", "local"],
    );
    assert_eq!(rule["kind"], "host", "{rule}");
    let t0 = Instant::now();
    loop {
        let (st, v) = curl_through_registry(&envs[0], &admin, &op_url, operator.path(), &url);
        if st == "succeeded" {
            assert_eq!(v["stdout"], "hello-fleet\n", "{v}");
            break;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(20)),
            "{v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let served = srv.requests().len();
    assert!(served >= 1);
    let (st, v) = curl_through_registry(&envs[1], &admin, &op_url, operator.path(), &url);
    assert_eq!(
        st, "pending_validation",
        "project batch has no such rule: {v}"
    );
    assert_eq!(v["egress_refused"], serde_json::json!([host]), "{v}");
    assert_eq!(
        srv.requests().len(),
        served,
        "nothing from C reached the server"
    );

    // A malformed host rule is refused before it reaches the registry.
    let e = refused(
        &op_url,
        operator.path(),
        &["rules", "add", "host", "http://x/"],
    );
    assert!(e.contains("is not a host rule"), "{e}");

    // Revoked: A is refused again.
    ok(&op_url, operator.path(), &["rules", "revoke", &host]);
    let t0 = Instant::now();
    loop {
        let (st, v) = curl_through_registry(&envs[0], &admin, &op_url, operator.path(), &url);
        if st == "pending_validation" {
            assert_eq!(v["egress_refused"], serde_json::json!([host]), "{v}");
            break;
        }
        assert!(
            t0.elapsed() < common::scaled(Duration::from_secs(20)),
            "{v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_worker_presenting_its_client_certificate_logs_in_under_cert_authentication() {
    // One CA signs the server's certificate and the worker's (CN = its login role).
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "fleet_rules cert-auth CA");
    let ca = rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>, cn: &str| {
        let mut lp = rcgen::CertificateParams::new(names).unwrap();
        lp.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = lp.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (srv_cert, srv_key) = leaf(vec!["localhost".into()], "localhost");
    let (cli_cert, cli_key) = leaf(Vec::new(), "certw");
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let ca_path = write("ca.pem", &ca.pem());
    let cert_path = write("client.pem", &cli_cert);
    let key_path = write("client.key", &cli_key);
    let cluster = Cluster::start_tls_cert_auth(&srv_cert, &srv_key, &ca.pem(), "certw");
    // a cluster of this test's own: one database
    let db = "regr_cert".to_string();
    cluster.create_db(&db);
    let tmp = tempfile::tempdir().unwrap();
    let admin = cluster.admin_url(&db);
    ok(&admin, tmp.path(), &["registry", "migrate"]);
    ok(
        &admin,
        tmp.path(),
        &["registry", "add-role", "worker", "certw"],
    );
    let base = format!(
        "postgres://certw@localhost:{}/{db}?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}",
        cluster.port,
        ca_path.display()
    );
    // With its certificate: logged in as the role the certificate names, over TLS.
    let with = format!(
        "{base}&sslcert={}&sslkey={}",
        cert_path.display(),
        key_path.display()
    );
    let out = ok(&with, tmp.path(), &["registry", "status"]);
    assert!(
        out.contains("connected as certw") && out.contains("connection: TLS"),
        "{out}"
    );
    // Without it: the server refuses the login.
    let e = refused(&base, tmp.path(), &["registry", "status"]);
    assert!(e.contains("certificate"), "{e}");
    // A certificate without its key is refused before connecting, naming both.
    let e = refused(
        &format!("{base}&sslcert={}", cert_path.display()),
        tmp.path(),
        &["registry", "status"],
    );
    assert!(e.contains("sslcert and sslkey go together"), "{e}");
}

/// Submits the sed on `env` (a fresh file), which must ask: (job id, validation id).
fn sed_asking(env: &Env, admin: &str) -> (i64, String) {
    let n = N.fetch_add(1, Ordering::SeqCst);
    std::fs::write(env.workspace.join(format!("b{n}.txt")), "x\n").unwrap();
    let (job, st, v, e) = submit(env, &format!("sed -i s/x/X/ b{n}.txt"));
    assert_eq!(st, "pending_validation", "{v} {e}");
    let vid = common::vid(&v);
    wait_published(admin, &vid);
    (job, vid)
}

#[test]
fn approve_learn_teaches_one_worker_or_one_project_and_registry_import_copies_a_workers_local_rules(
) {
    common::require_sandbox();
    let c = pg::shared();
    let (db, op, ws) = registry(c, "learnscope", &["a", "b"]);
    let envs = [Env::new(), Env::new()];
    let _daemons: Vec<Daemon> = envs
        .iter()
        .zip(&ws)
        .zip(["web", "batch"])
        .map(|((e, w), p)| {
            setup_ws(e);
            start_in_project(e, &c.url_as(w, &db), p)
        })
        .collect();
    let operator = tempfile::tempdir().unwrap();
    let op_url = c.url_as(&op, &db);
    let admin = c.admin_url(&db);
    until_state(&envs[1], SED, SED_FILE, "pending_validation");

    // A's sed, approved with --learn for worker B: A's job runs, A keeps asking, B learned it.
    let (job, vid) = sed_asking(&envs[0], &admin);
    let b_scope = format!("worker:{}", ws[1]);
    let out = ok(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--scope", &b_scope],
    );
    assert!(
        out.contains(&format!("and learn for client local on worker {}", ws[1])),
        "{out}"
    );
    let (st, v, _) = common::past(&envs[0], job, &vid);
    assert_eq!(st, "succeeded", "{v}");
    let (v, after) = until_state(&envs[1], SED, SED_FILE, "succeeded");
    assert_eq!(v["result"]["policy_used"], "signature_learned", "{v}");
    assert_eq!(after.as_deref(), Some("X\n"));
    let (st, v, _) = once(&envs[0], SED, SED_FILE);
    assert_eq!(st, "pending_validation", "A was not taught: {v}");
    let rules: serde_json::Value =
        serde_json::from_str(&ok(&op_url, operator.path(), &["rules", "list", "--json"])).unwrap();
    assert!(
        rules
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["scope"] == "worker"
                && r["target"] == ws[1].as_str()
                && r["rule"] == SIG
                && r["validation_id"] == vid.as_str()),
        "{rules}"
    );

    // Another of A's, approved with --learn for project web: A runs the sed unasked from now.
    let (job, vid) = sed_asking(&envs[0], &admin);
    let out = ok(
        &op_url,
        operator.path(),
        &["approve", &vid, "--learn", "--scope", "project:web"],
    );
    assert!(out.contains("on every worker of project web"), "{out}");
    common::past(&envs[0], job, &vid);
    let (v, _) = until_state(&envs[0], SED, SED_FILE, "succeeded");
    assert_eq!(v["result"]["policy_used"], "signature_learned", "{v}");
    let e = refused(
        &op_url,
        operator.path(),
        &["approve", "nope", "--learn", "--scope", "galaxy:far"],
    );
    assert!(e.contains("--scope"), "{e}");

    // `registry import` of B's local rules: a `never` override of a signature, a grant and a
    // host `--always-host` would remember (a NETWORK grant).
    // (B knows the redirect's signature once it saw one: it runs, covered by the sed's family.)
    once(&envs[1], REDIRECT, REDIRECT_FILE);
    common::cli_ok(&envs[1], &["override", "redirect:write WS_PATH", "never"]);
    common::cli_ok(&envs[1], &["grant", "ci", "SYSTEM_COMMAND", "cat"]);
    common::cli_ok(&envs[1], &["grant", "ci", "NETWORK", "pypi.org:443"]);
    // Not with a worker's role.
    let e = refused(
        &c.url_as(&ws[1], &db),
        &envs[1].data,
        &["registry", "import", "--worker", &ws[1]],
    );
    assert!(e.contains("permission denied"), "{e}");
    let out = ok(
        &op_url,
        &envs[1].data,
        &["registry", "import", "--worker", &ws[1]],
    );
    assert!(out.contains("3 added, 0 already there"), "{out}");
    assert!(
        out.contains(&format!(
            "[worker:{}] never of signature `redirect:write WS_PATH`",
            ws[1]
        )),
        "{out}"
    );
    let again = ok(
        &op_url,
        &envs[1].data,
        &["registry", "import", "--worker", &ws[1]],
    );
    assert!(again.contains("0 added, 3 already there"), "{again}");
    // In the registry, as B's rules: B's role reads them, A's does not.
    let grants = |url: &str, data: &Path| -> serde_json::Value {
        serde_json::from_str(&ok(url, data, &["grants", "ci", "--json"])).unwrap()
    };
    let as_b = grants(&c.url_as(&ws[1], &db), &envs[1].data);
    let shared = as_b["registry"].as_array().unwrap();
    assert_eq!(shared.len(), 2, "{as_b}");
    assert!(
        shared
            .iter()
            .all(|g| g["scope"] == "worker" && g["target"] == ws[1].as_str()),
        "{as_b}"
    );
    let as_a = grants(&c.url_as(&ws[0], &db), &envs[0].data);
    assert_eq!(as_a["registry"].as_array().unwrap().len(), 0, "{as_a}");
    // The imported grant applies on B from the registry too (its local one is dropped here to
    // show it): ci runs cat.
    common::cli_ok(&envs[1], &["revoke", "ci", "SYSTEM_COMMAND", "cat"]);
    let (_, st, v, _) = common::submit_as(&envs[1], "ci", "cat a.txt");
    assert_eq!(st, "succeeded", "{v}");
}
