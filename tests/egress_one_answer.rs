//! One answer for network (issue 36, item 3), through the real daemon and CLI: the first prompt
//! about a network command names the hosts it names and their addresses; approving it allows
//! them for the command (a name: public addresses only; an address: that address), so the
//! command runs after ONE answer; a name resolving to a loopback address still needs the
//! operator's `--allow-private-hosts`, and the prompt prints that exact command;
//! `approve --always-host` remembers a host for the client (a NETWORK grant, listed by
//! `grants`, revoked by `revoke`). Local listeners only (127.0.0.1); nothing leaves the machine.

mod common;

use common::http_server::Server;
use common::{cli_ok, job, past, settled, vid, Env};
use serde_json::{json, Value};

/// A client with no NETWORK grant that may run curl (the MCP default plus `curl`).
const CLIENT: &str = "agent";

fn setup(hosts: Option<&str>) -> (Env, common::Daemon, Server, tempfile::NamedTempFile) {
    common::require_sandbox();
    let env = Env::new();
    let site = env.root.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "hello-egress\n").unwrap();
    let server = Server::start(&site, env.root.path().join("server.log"));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), hosts.unwrap_or("")).unwrap();
    let config = env.root.path().join("brainloop.toml");
    std::fs::write(
        &config,
        format!(
            "[egress]\nhosts_file = {:?}\n",
            file.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let d = env.start(&[("BRAINLOOP_CONFIG", config.to_str().unwrap())]);
    cli_ok(&env, &["grant", CLIENT, "SYSTEM_COMMAND", "curl"]);
    (env, d, server, file)
}

fn reasons(v: &Value) -> Vec<String> {
    serde_json::from_value(v["reasons"].clone()).unwrap()
}

/// Submits `cmd` for the client; it must ask up front (not a host request). (job, validation)
fn asks_up_front(env: &Env, cmd: &str) -> (i64, Value) {
    let id = job(env, CLIENT, "execute_bash", &json!({ "command": cmd }));
    let (st, v, e) = settled(env, id);
    assert_eq!(st, "pending_validation", "{cmd}: {e} {v}");
    assert!(v["egress_refused"].is_null(), "asked after a run: {v}");
    (id, v)
}

/// The `brainloop approve …` command a reason line prints, as argv (without `brainloop`).
fn command_in(line: &str) -> Vec<String> {
    line[line.find("brainloop approve").unwrap()..]
        .split(" (")
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Before issue 36 the first prompt named no host: approving it ran the command, the proxy
/// refused the host, and a second prompt asked about it. Now the first prompt names it with its
/// address and class; the loopback address needs the operator's flag, which the prompt prints,
/// and that one answer runs the command through to the listener. A plain approve does not
/// reach it (asked again after the run).
#[test]
fn the_first_prompt_names_the_host_and_its_address_and_one_answer_reaches_it() {
    let (env, _d, srv, _f) = setup(None);
    let host = format!("127.0.0.1:{}", srv.port);
    let (id, v) = asks_up_front(&env, &format!("curl -sS -m 20 http://{host}/index.html"));
    let first = vid(&v);
    assert_eq!(v["egress_named"], json!([host]), "{v}");
    assert_eq!(
        v["egress_resolved"][0]["addresses"][0],
        json!(["127.0.0.1", "loopback"]),
        "{v}"
    );
    let r = reasons(&v);
    assert!(
        r[0].starts_with(&format!("the command names {host}")),
        "{r:?}"
    );
    let flag = format!("brainloop approve {first} --allow-private-hosts");
    assert!(
        r.iter().any(
            |l| l.starts_with(&format!("{host} is 127.0.0.1 (loopback) — NOT PUBLIC"))
                && l.ends_with(&flag)
        ),
        "{r:?}"
    );
    // Every surface shows the hosts of the first prompt.
    let listed = cli_ok(&env, &["validations"]);
    assert!(
        listed.contains(&format!("the command names {host}")),
        "{listed}"
    );
    let shown = cli_ok(&env, &["show", &first]);
    assert!(shown.contains(&format!("wants hosts: {host}")), "{shown}");
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    // One answer: the exact command the prompt printed.
    let line = r
        .iter()
        .find(|l| l.starts_with("to run it and let the hosts above reach"))
        .unwrap_or_else(|| panic!("no flag line: {r:?}"));
    let args = command_in(line);
    assert_eq!(args, ["approve", &first, "--allow-private-hosts"], "{line}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli_ok(&env, &args);
    assert!(
        out.contains(&format!("through the egress proxy: {host}")),
        "{out}"
    );
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(st, "succeeded", "a second answer was needed: {e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    assert_eq!(v["egress"][0]["rule"], host, "{v}");
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
    let asked: i64 = env
        .output()
        .query_row(
            "SELECT count(*) FROM validations WHERE job_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(asked, 1, "one prompt for the job");
    // The approval is the command's, with the validation that allowed it.
    let row: (String, String) = env
        .db("command_security.db")
        .query_row(
            "SELECT rule, validation_id FROM egress_hosts WHERE client_id = ?1",
            [CLIENT],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(row, (host.clone(), first));
    // A plain approve of the same kind of prompt does not allow the loopback address.
    let (id, v) = asks_up_front(
        &env,
        &format!("curl -sS -m 20 http://{host}/index.html?plain"),
    );
    let first = vid(&v);
    let out = cli_ok(&env, &["approve", &first]);
    assert!(
        out.contains("not allowed (NOT PUBLIC") && out.contains(&host),
        "{out}"
    );
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(
        st, "pending_validation",
        "a plain approve reached loopback: {e} {v}"
    );
    assert_eq!(v["egress_refused"], json!([host]), "{v}");
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
}

/// A name that resolves to 127.0.0.1: the first prompt says so and prints the exact flag; a
/// plain approve does not reach the loopback listener (asked about again after the run); the
/// printed command reaches it in one answer, the name allowed the loopback class only.
#[test]
fn a_name_resolving_to_loopback_needs_the_printed_flag_which_reaches_it_in_one_answer() {
    let (env, _d, srv, _f) = setup(Some("127.0.0.1 svc.internal.test\n"));
    let p = srv.port;
    let name = format!("svc.internal.test:{p}");
    let (id, v) = asks_up_front(
        &env,
        &format!("curl -sS -m 20 http://{name}/index.html?plain"),
    );
    let first = vid(&v);
    let r = reasons(&v);
    let flag = format!("brainloop approve {first} --allow-private-hosts");
    assert!(
        r.iter().any(|l| l.starts_with(&format!(
            "{name} resolves to 127.0.0.1 (loopback) — NOT PUBLIC"
        )) && l.contains(&flag)),
        "{r:?}"
    );
    cli_ok(&env, &["approve", &first]);
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(
        st, "pending_validation",
        "a plain approve reached loopback: {e} {v}"
    );
    assert_eq!(v["egress_refused"], json!([name]), "{v}");
    assert!(srv.requests().is_empty(), "{:?}", srv.requests());
    // The exact command the first prompt printed: one answer, the listener reached.
    let (id, v) = asks_up_front(&env, &format!("curl -sS -m 20 http://{name}/index.html"));
    let first = vid(&v);
    let line = reasons(&v)
        .into_iter()
        .find(|l| l.starts_with("to run it and let the hosts above reach"))
        .unwrap_or_else(|| panic!("no flag line: {v}"));
    let args = command_in(&line);
    assert_eq!(args, ["approve", &first, "--allow-private-hosts"], "{line}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli_ok(&env, &args);
    assert!(out.contains(&format!("{name}+loopback")), "{out}");
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "hello-egress\n", "{v}");
    assert_eq!(v["egress"][0]["rule"], format!("{name}+loopback"), "{v}");
    assert_eq!(srv.requests().len(), 1, "{:?}", srv.requests());
}

/// `approve --always-host`: the host becomes the client's NETWORK grant — a later command that
/// does not name it (its URL built at run time) reaches it after its own approve, with no host
/// prompt; `grants` lists it; after `revoke`, the next such command is refused and asked about.
#[test]
fn always_host_remembers_the_host_for_the_client_until_revoked() {
    let (env, _d, srv, _f) = setup(None);
    let host = format!("127.0.0.1:{}", srv.port);
    let (st, _, err) = env.cli(&["deny", "x", "--always-host"]);
    assert!(!st.success() && err.contains("--always-host"), "{err}");
    let (id, v) = asks_up_front(&env, &format!("curl -sS -m 20 http://{host}/index.html"));
    let first = vid(&v);
    let remember = format!("brainloop approve {first} --always-host --allow-private-hosts");
    let line = reasons(&v)
        .into_iter()
        .find(|l| l.contains(&remember))
        .unwrap_or_else(|| panic!("no `{remember}`: {v}"));
    // Loopback: not without the flag, and nothing decided.
    let (st, _, err) = env.cli(&["approve", &first, "--always-host"]);
    assert!(
        !st.success() && err.contains("--allow-private-hosts"),
        "{err}"
    );
    assert_eq!(settled(&env, id).0, "pending_validation");
    let args = command_in(&line);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli_ok(&env, &args);
    assert!(
        out.contains(&format!("remembered for client {CLIENT}: NETWORK {host}")),
        "{out}"
    );
    let (st, v, e) = past(&env, id, &first);
    assert_eq!(st, "succeeded", "{e} {v}");
    let grants = cli_ok(&env, &["grants", CLIENT]);
    assert!(
        grants.contains("NETWORK") && grants.contains(&host),
        "{grants}"
    );
    // A command whose URL is built at run time names no host: its grant lets it through.
    cli_ok(&env, &["grant", CLIENT, "SYSTEM_COMMAND", "printf"]);
    cli_ok(&env, &["grant", CLIENT, "SYSTEM_COMMAND", "xargs"]);
    let dynamic = |tag: &str| {
        format!(
            "printf 'http://127.0.0.1:%s/index.html?{tag}' {} | xargs curl -sS -m 20",
            srv.port
        )
    };
    let (id, v) = asks_up_front(&env, &dynamic("a"));
    assert!(v["egress_named"].is_null(), "{v}");
    let old = vid(&v);
    cli_ok(&env, &["approve", &old]);
    let (st, v, e) = past(&env, id, &old);
    assert_eq!(st, "succeeded", "the remembered host was not used: {e} {v}");
    assert_eq!(v["egress"][0]["rule"], host, "{v}");
    assert_eq!(srv.requests().len(), 2, "{:?}", srv.requests());
    // Revoked: forgotten.
    cli_ok(&env, &["revoke", CLIENT, "NETWORK", &host]);
    let grants = cli_ok(&env, &["grants", CLIENT]);
    assert!(!grants.contains(&host), "{grants}");
    let (id, v) = asks_up_front(&env, &dynamic("b"));
    let old = vid(&v);
    cli_ok(&env, &["approve", &old]);
    let (st, v, e) = past(&env, id, &old);
    assert_eq!(st, "pending_validation", "{e} {v}");
    assert_eq!(v["egress_refused"], json!([host]), "{v}");
    assert_eq!(srv.requests().len(), 2, "{:?}", srv.requests());
}
