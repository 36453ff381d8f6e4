//! Egress by host (issue 23) through the real daemon: network sets run in their own network
//! namespace whose only way out is the job's egress proxy. Local servers only (127.0.0.1: an
//! explicit host rule naming 127.0.0.1:PORT is how a command may reach them — without one the
//! proxy refuses loopback); nothing leaves the machine.

mod common;

use common::http_server::Server;
use common::{cli_ok, job, past, settled, vid, Env};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

fn setup(config: Option<&str>) -> (Env, common::Daemon, Server) {
    common::require_sandbox();
    let env = Env::new();
    let site = env.root.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "hello-egress\n").unwrap();
    make_bare_repo(&site.join("r.git"), env.root.path());
    let server = Server::start(&site, env.root.path().join("server.log"));
    let d = match config {
        Some(text) => {
            let path = env.root.path().join("brainloop.toml");
            std::fs::write(&path, text).unwrap();
            env.start(&[("BRAINLOOP_CONFIG", path.to_str().unwrap())])
        }
        None => env.start(&[]),
    };
    (env, d, server)
}

/// A bare repository with one commit on `main`, served by dumb HTTP (`update-server-info`).
fn make_bare_repo(bare: &Path, scratch: &Path) {
    let src = scratch.join("repo-src");
    let git = |dir: &Path, args: &[&str]| {
        let st = Command::new("git")
            .args([
                "-c",
                "user.email=t@t",
                "-c",
                "user.name=t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .status()
            .expect("CANNOT RUN HERE: git is needed");
        assert!(st.success(), "git {args:?}");
    };
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q"]);
    std::fs::write(src.join("f"), "x\n").unwrap();
    git(&src, &["add", "f"]);
    git(&src, &["commit", "-qm", "init"]);
    git(scratch, &["init", "-q", "--bare", bare.to_str().unwrap()]);
    git(
        &src,
        &["push", "-q", bare.to_str().unwrap(), "HEAD:refs/heads/main"],
    );
    git(bare, &["update-server-info"]);
}

/// Submits `cmd` for `local`, approves the up-front request if there is one; returns the job
/// and its state after that.
fn submit_approved(env: &Env, cmd: &str) -> (i64, String, Value, String) {
    let id = job(env, "local", "execute_bash", &json!({ "command": cmd }));
    let (st, v, e) = settled(env, id);
    if st == "pending_validation" && v["egress_refused"].is_null() {
        let old = vid(&v);
        cli_ok(env, &["approve", &old]);
        let (st, v, e) = past(env, id, &old);
        return (id, st, v, e);
    }
    (id, st, v, e)
}

fn allowed_hosts(v: &Value) -> Vec<String> {
    v["egress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["outcome"] == "allowed")
        .map(|c| format!("{}:{}", c["host"].as_str().unwrap(), c["port"]))
        .collect()
}

#[test]
fn curl_git_socks5_and_connect_reach_an_allowed_host_only_through_the_proxy() {
    let (env, _d, srv) = setup(None);
    let host = format!("127.0.0.1:{}", srv.port);
    cli_ok(&env, &["grant", "local", "NETWORK", &host]);
    let url = format!("http://{host}");
    for cmd in [
        format!("curl -sS -m 20 {url}/index.html"),
        format!("curl -sS -m 20 --proxytunnel {url}/index.html"),
        format!("curl -sS -m 20 -x socks5h://127.0.0.1:3128 {url}/index.html"),
    ] {
        let (_, st, v, e) = submit_approved(&env, &cmd);
        assert_eq!(st, "succeeded", "{cmd}: {e} {v}");
        assert_eq!(v["stdout"], "hello-egress\n", "{cmd}: {v}");
        assert_eq!(allowed_hosts(&v), vec![host.clone()], "{cmd}: {v}");
    }
    let protocols: Vec<String> = env
        .db("command_security.db")
        .prepare("SELECT protocol FROM egress_connections WHERE outcome = 'allowed' ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(protocols, ["http", "connect", "socks5"]);
    let (_, st, v, e) = submit_approved(&env, &format!("git ls-remote {url}/r.git"));
    assert_eq!(st, "succeeded", "{e} {v}");
    assert!(
        v["stdout"].as_str().unwrap().contains("refs/heads/main"),
        "{v}"
    );
    assert!(!allowed_hosts(&v).is_empty(), "{v}");
    assert!(
        srv.requests()
            .iter()
            .any(|l| l.contains("/r.git/info/refs")),
        "{:?}",
        srv.requests()
    );
    // The proxy variables are what the command sees.
    let (_, st, v, _) = submit_approved(
        &env,
        "printenv http_proxy HTTPS_PROXY ALL_PROXY; curl -sS -m 2 http://x.invalid/ || true",
    );
    assert_eq!(st, "succeeded", "{v}");
    assert_eq!(
        v["stdout"]
            .as_str()
            .unwrap()
            .lines()
            .take(3)
            .collect::<Vec<_>>(),
        [
            "http://127.0.0.1:3128",
            "http://127.0.0.1:3128",
            "socks5h://127.0.0.1:3128"
        ],
        "{v}"
    );
    let status = cli_ok(&env, &["status"]);
    assert!(status.contains("egress proxy (last hour)"), "{status}");
    assert!(
        !status.contains("egress proxy (last hour)  0 allowed"),
        "{status}"
    );
}

#[test]
fn python_urllib_on_the_overlay_asks_for_its_host_then_shows_the_download_as_a_diff() {
    let (env, _d, srv) = setup(None);
    let host = format!("127.0.0.1:{}", srv.port);
    // A download into the workspace (what `pip install --target` does): python runs on the
    // overlay at once (its writes are capturable), where it reaches only hosts a human approved
    // for it — none yet; the client's grant does not apply there.
    let cmd = format!(
        "python3 -c \"import urllib.request; d = urllib.request.urlopen('http://{host}/index.html', timeout=20).read().decode(); open('got.html', 'w').write(d); print(d)\""
    );
    cli_ok(&env, &["grant", "local", "NETWORK", &host]);
    let (id, st, v, e) = submit_approved(&env, &cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert_eq!(v["egress_refused"], json!([host]), "{v}");
    assert!(
        v.get("effects").is_none(),
        "nothing kept from the refused run: {v}"
    );
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    // Approving the host re-runs it on the overlay: the download is now a change set to approve.
    let old = vid(&v);
    cli_ok(&env, &["approve", &old]);
    let (st, v, e) = past(&env, id, &old);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert_eq!(v["effects"]["added"], 1, "{v}");
    assert!(v["diff"].as_str().unwrap().contains("+hello-egress"), "{v}");
    assert!(
        !env.workspace.join("got.html").exists(),
        "nothing applied before approval"
    );
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
    let old = vid(&v);
    cli_ok(&env, &["approve", &old]);
    let (st, v, e) = past(&env, id, &old);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("got.html")).unwrap(),
        "hello-egress\n"
    );
    // Applied, not run again.
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
}

#[test]
fn a_refused_host_fails_fast_names_the_host_and_approving_it_from_the_result_lets_the_rerun_through(
) {
    let (env, _d, srv) = setup(None);
    let host = format!("127.0.0.1:{}", srv.port);
    // `local` holds NETWORK '*': any public host, never loopback without a rule naming it.
    let cmd = format!("curl -sS -m 50 http://{host}/index.html");
    let (id, st, v, e) = submit_approved(&env, &cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert_eq!(v["egress_refused"], json!([host]), "{v}");
    // The proxy answered at once (its refusal is what curl printed), nothing reached the server.
    assert!(
        v["stdout"]
            .as_str()
            .unwrap()
            .contains(&format!("{host} refused")),
        "{v}"
    );
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    let reasons: Vec<String> = serde_json::from_value(v["reasons"].clone()).unwrap();
    let id_v = vid(&v);
    let exact = format!("brainloop approve {id_v} --host {host}");
    let line = reasons
        .iter()
        .find(|r| r.ends_with(&exact))
        .unwrap_or_else(|| panic!("no `{exact}` in {reasons:?}"));
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&format!("brainloop grant local NETWORK {host}"))),
        "{reasons:?}"
    );
    let shown = cli_ok(&env, &["show", &id_v]);
    assert!(shown.contains(&format!("wants hosts: {host}")), "{shown}");
    // Run exactly the command the result names.
    let args: Vec<&str> = line[line.find("brainloop ").unwrap()..]
        .split_whitespace()
        .skip(1)
        .collect();
    cli_ok(&env, &args);
    let (st, v, e) = past(&env, id, &id_v);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
    let shown = cli_ok(&env, &["show", &id.to_string()]);
    assert!(shown.contains(&format!("refused  {host}")), "{shown}");
    assert!(shown.contains(&format!("allowed  {host}")), "{shown}");
    // The approval is per (client, command): the same command runs with the host next time.
    let checked = Command::new(common::BIN)
        .args(["check", "--"])
        .arg(&cmd)
        .env("BRAINLOOP_DATA_DIR", &env.data)
        .env("BRAINLOOP_WORKSPACE", &env.workspace)
        .output()
        .unwrap();
    let checked = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.contains(&format!("allowed  {host}")), "{checked}");
    assert!(checked.contains(&format!("refused  {host}")), "{checked}");
    let approved: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT count(*) FROM egress_hosts WHERE client_id = 'local' AND rule = ?1",
            [&host],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(approved, 1);
}

#[test]
fn a_raw_socket_to_an_allowed_address_without_the_proxy_fails() {
    let (env, _d, srv) = setup(None);
    let host = format!("127.0.0.1:{}", srv.port);
    cli_ok(&env, &["grant", "local", "NETWORK", &host]);
    for cmd in [
        format!("curl --noproxy '*' -sS -m 10 http://{host}/index.html"),
        format!("exec 3<>/dev/tcp/127.0.0.1/{}", srv.port),
    ] {
        let (_, st, v, e) = submit_approved(&env, &cmd);
        assert_eq!(st, "failed", "{cmd}: {e} {v}");
        assert_ne!(v["stdout"], "hello-egress\n", "{v}");
    }
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
}

#[test]
fn a_name_resolving_to_a_private_address_is_refused_unless_a_rule_names_it() {
    common::require_sandbox();
    let hosts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        hosts.path(),
        "127.0.0.1 svc.internal.test other.internal.test\n",
    )
    .unwrap();
    let config = format!(
        "[egress]\nhosts_file = {:?}\n",
        hosts.path().to_str().unwrap()
    );
    let (env, _d, srv) = setup(Some(&config));
    let p = srv.port;
    cli_ok(
        &env,
        &["grant", "local", "NETWORK", &format!("*.internal.test:{p}")],
    );
    let cmd = format!("curl -sS -m 50 http://svc.internal.test:{p}/index.html");
    let (id, st, v, e) = submit_approved(&env, &cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    let name = format!("svc.internal.test:{p}");
    assert_eq!(v["egress_refused"], json!([name]), "{v}");
    let why = v["egress"][0]["reason"].as_str().unwrap();
    assert!(why.contains("resolves to 127.0.0.1"), "{why}");
    // A glob covered it (`*` or `*.internal.test:PORT`): not enough for a private address.
    assert!(
        v["egress"][0]["rule"].as_str().unwrap().contains('*'),
        "{v}"
    );
    assert!(srv.requests().is_empty());
    let old = vid(&v);
    // Named with the class it may reach (a plain name reaches public addresses only).
    let rule = format!("{name}+loopback");
    cli_ok(&env, &["approve", &old, "--host", &rule]);
    let (st, v, e) = past(&env, id, &old);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    assert_eq!(v["egress"][0]["rule"], rule, "{v}");
    // Named for that command only: another name under the glob is still refused.
    let (_, st, v, _) = submit_approved(
        &env,
        &format!("curl -sS -m 50 http://other.internal.test:{p}/"),
    );
    assert_eq!(st, "pending_validation", "{v}");
    assert_eq!(
        v["egress_refused"],
        json!([format!("other.internal.test:{p}")]),
        "{v}"
    );
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
}

/// A config whose egress resolver reads `hosts` first (the test's own names, no /etc/hosts).
fn hosts_config(hosts: &Path) -> String {
    format!("[egress]\nhosts_file = {:?}\n", hosts.to_str().unwrap())
}

/// The reasons of a pending validation, as the prompt shows them.
fn reasons(v: &Value) -> Vec<String> {
    serde_json::from_value(v["reasons"].clone()).unwrap()
}

/// Issue 33 item 4: a name that resolves to 127.0.0.1 was reached after a plain `approve` of
/// the host request (the prompt showed only the name). Now the prompt shows the address and
/// its class, a plain approve lets the name reach public addresses only, and only the
/// operator's `--allow-private-hosts` lets it reach the loopback listener.
#[test]
fn a_name_resolving_to_loopback_is_shown_as_such_and_a_plain_approve_does_not_reach_it() {
    common::require_sandbox();
    let hosts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(hosts.path(), "127.0.0.1 svc.internal.test\n").unwrap();
    let (env, _d, srv) = setup(Some(&hosts_config(hosts.path())));
    let p = srv.port;
    let name = format!("svc.internal.test:{p}");
    // `local` holds NETWORK '*': the proxy refuses the loopback address behind the name.
    let cmd = format!("curl -sS -m 50 http://{name}/index.html");
    let (id, st, v, e) = submit_approved(&env, &cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert_eq!(v["egress_refused"], json!([name]), "{v}");
    let first = vid(&v);
    // The prompt shows where the name points and of which class, on every surface.
    let shown_line = format!("{name} resolves to 127.0.0.1 (loopback)");
    assert!(
        reasons(&v).iter().any(|r| r.starts_with(&shown_line)
            && r.contains("NOT PUBLIC")
            && r.contains(&format!("brainloop approve {first} --allow-private-hosts"))),
        "{:?}",
        reasons(&v)
    );
    assert_eq!(
        v["egress_resolved"][0]["addresses"][0],
        json!(["127.0.0.1", "loopback"]),
        "{v}"
    );
    let listed = cli_ok(&env, &["validations"]);
    assert!(listed.contains(&shown_line), "{listed}");
    let shown = cli_ok(&env, &["show", &first]);
    assert!(shown.contains(&format!("  {shown_line}")), "{shown}");
    // A plain approve of the request: the name is allowed, its loopback address is not.
    cli_ok(&env, &["approve", &first]);
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(
        st, "pending_validation",
        "a plain approve reached loopback: {e} {v}"
    );
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    let refused = v["egress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["outcome"] == "refused")
        .unwrap_or_else(|| panic!("no refusal recorded: {v}"));
    assert_eq!(refused["rule"], name, "{v}");
    assert!(
        refused["reason"].as_str().unwrap().contains("(loopback)"),
        "{refused}"
    );
    // The operator's flag: the loopback class the request showed, and the listener answers.
    let second = vid(&v);
    let out = cli_ok(&env, &["approve", &second, "--allow-private-hosts"]);
    assert!(out.contains(&format!("{name}+loopback")), "{out}");
    let (st, v, e) = past(&env, id, &second);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
    let allowed = v["egress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["outcome"] == "allowed")
        .unwrap_or_else(|| panic!("nothing allowed: {v}"));
    assert_eq!(allowed["rule"], format!("{name}+loopback"), "{v}");
}

/// The class is checked on the address connected to, not the one shown: a name shown private
/// and approved with `--allow-private-hosts` (the private class) that rebinds to 127.0.0.1
/// before the re-run is refused, recorded, and asked about again, showing loopback.
#[test]
fn a_name_approved_for_the_class_it_showed_is_refused_when_it_rebinds_to_another_class() {
    common::require_sandbox();
    let hosts = tempfile::NamedTempFile::new().unwrap();
    // 10.0.0.5 is never connected to: the first run refuses it by class.
    std::fs::write(hosts.path(), "10.0.0.5 rebind.internal.test\n").unwrap();
    let (env, _d, srv) = setup(Some(&hosts_config(hosts.path())));
    let name = format!("rebind.internal.test:{}", srv.port);
    let cmd = format!("curl -sS -m 50 http://{name}/index.html");
    let (id, st, v, e) = submit_approved(&env, &cmd);
    assert_eq!(st, "pending_validation", "{e} {v}");
    let first = vid(&v);
    let shown = cli_ok(&env, &["show", &first]);
    assert!(
        shown.contains(&format!("{name} resolves to 10.0.0.5 (private)")),
        "{shown}"
    );
    // The name now points at this machine; the human approves what was shown (private).
    std::fs::write(hosts.path(), "127.0.0.1 rebind.internal.test\n").unwrap();
    let out = cli_ok(&env, &["approve", &first, "--allow-private-hosts"]);
    assert!(out.contains(&format!("{name}+private")), "{out}");
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    let c = &v["egress"][0];
    assert_eq!(
        (c["outcome"].as_str(), c["rule"].as_str()),
        (Some("refused"), Some(&*format!("{name}+private"))),
        "{v}"
    );
    assert!(
        c["reason"]
            .as_str()
            .unwrap()
            .contains("resolves to 127.0.0.1"),
        "{c}"
    );
    let listed = cli_ok(&env, &["validations"]);
    assert!(
        listed.contains(&format!("{name} resolves to 127.0.0.1 (loopback)")),
        "{listed}"
    );
}

/// `::ffff:0:127.0.0.1` (IPv4-translated) and `::127.0.0.1` (IPv4-compatible) were judged
/// public: now refused as loopback under `*`, and shown so.
#[test]
fn ipv6_spellings_of_loopback_are_refused_as_loopback_and_shown_so() {
    let (env, _d, srv) = setup(None);
    let p = srv.port;
    for host in ["::ffff:0:127.0.0.1", "::127.0.0.1"] {
        let cmd = format!("curl -sS -m 20 'http://[{host}]:{p}/index.html'");
        let (_, st, v, e) = submit_approved(&env, &cmd);
        assert_eq!(st, "pending_validation", "{host}: {e} {v}");
        let c = &v["egress"][0];
        assert_eq!(c["outcome"], "refused", "{host}: {v}");
        assert!(
            c["reason"].as_str().unwrap().contains("(loopback)"),
            "{host}: {c}"
        );
        let r = reasons(&v);
        assert!(
            // (curl writes the address in its canonical form, e.g. `::ffff:0:7f00:1`)
            r.iter().any(|l| l.starts_with('[')
                && l.contains(&format!("]:{p} is "))
                && l.contains("(loopback) — NOT PUBLIC")),
            "{host}: {r:?}"
        );
    }
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
}
