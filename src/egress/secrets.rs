//! Credentials that never enter the sandbox (issue 38): the one owner of **where a secret's
//! value may go**.
//!
//! The operator configures `[secrets.NAME]`: where the value comes from (a file only the worker's
//! user may read, an environment variable of the worker, a systemd credential), the hosts it
//! belongs to (host rules, `rules::HostRule`; optionally path prefixes and methods) and how it is
//! sent (a header template such as `Authorization: Bearer {value}`, basic auth with a user name,
//! or — neither given — only the placeholder replaced where the command put it in a header,
//! including inside `Authorization: Basic`). A client may use it only once the operator granted
//! it (`brainloop grant CLIENT SECRET NAME`).
//!
//! A run of a granted client gets, in its environment, `NAME` = a random placeholder made for
//! that run ([`RunSecrets::env`]); the value stays in the worker. The egress proxy hands every
//! request head it can read (plain HTTP, and HTTPS to a bound host, which it terminates with the
//! run's CA: `egress::tls`) to [`RunSecrets::apply`]:
//!
//! - to a host, path and method a secret is bound to, its placeholder is replaced by the value
//!   in the headers (and its header added);
//! - a head (request line, headers, host, the body bytes read with it) carrying the placeholder
//!   of a secret toward anything it is not bound to is refused and recorded as an exfiltration
//!   attempt (outcome [`EXFILTRATION`]);
//! - the value coming back in a response of a bound host is masked before the command sees it
//!   (`egress::echo`), so a server that echoes headers does not hand it over.
//!
//! Through a tunnel the proxy does not open (CONNECT to an unbound host, SOCKS) the placeholder
//! is only the meaningless string it is.

use super::rules::HostRule;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The outcome recorded for a request carrying a placeholder where its secret does not go.
pub const EXFILTRATION: &str = "exfiltration";
/// Every placeholder starts with this (then 32 hex digits).
pub const PLACEHOLDER_PREFIX: &str = "BLSECRET_";

/// `[secrets.NAME]` in the configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SecretConfig {
    /// A file holding the value (one trailing newline dropped), readable by its owner only
    /// (mode 0600 or 0400).
    pub file: Option<PathBuf>,
    /// An environment variable of the worker holding the value.
    pub env: Option<String>,
    /// A systemd credential (`LoadCredential=`): `$CREDENTIALS_DIRECTORY/<credential>`.
    pub credential: Option<String>,
    /// Host rules the value belongs to (`api.example.com:443`, `*.example.com:443`,
    /// `127.0.0.1:8080`); at least one, never `*` alone.
    pub hosts: Vec<String>,
    /// Path prefixes (`/repos/acme/`); empty: any path.
    pub paths: Vec<String>,
    /// Methods (`GET`, `POST`…); empty: any.
    pub methods: Vec<String>,
    /// A header set on every request to a bound host, `{value}` standing for the value:
    /// `Authorization: Bearer {value}`, `X-Api-Key: {value}`.
    pub header: Option<String>,
    /// Basic auth: `Authorization: Basic base64(<basic_user>:<value>)` on every request to a
    /// bound host.
    pub basic_user: Option<String>,
    /// HTTPS to a bound host: the upstream's certificate is verified against this CA (PEM)
    /// instead of the system roots.
    pub ca_file: Option<PathBuf>,
}

/// `[secrets]`: by name (the environment variable the command sees).
pub type Secrets = BTreeMap<String, SecretConfig>;

/// Names a secret may not take: what the sandbox sets itself.
const RESERVED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TERM",
    "TMPDIR",
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "NO_PROXY",
];

/// Checks one `[secrets.NAME]` (at start-up); the error names the key to fix.
pub fn validate(name: &str, c: &SecretConfig) -> Result<(), String> {
    let at = format!("[secrets.{name}]");
    let valid_name = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if !valid_name {
        return Err(format!(
            "{at}: the name is the environment variable the command sees: A-Z, 0-9 and _, not starting with a digit"
        ));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED.contains(&upper.as_str())
        || crate::sandbox::PROXY_VARS
            .iter()
            .any(|v| v.eq_ignore_ascii_case(name))
        || upper.starts_with("BRAINLOOP_")
    {
        return Err(format!(
            "{at}: {name} is a variable the sandbox sets itself; choose another name"
        ));
    }
    let sources = [c.file.is_some(), c.env.is_some(), c.credential.is_some()]
        .iter()
        .filter(|b| **b)
        .count();
    if sources != 1 {
        return Err(format!(
            "{at}: give exactly one of file, env, credential (where the value comes from)"
        ));
    }
    if let Some(cred) = &c.credential {
        if cred.is_empty() || cred.contains('/') || cred.starts_with('.') {
            return Err(format!(
                "{at}: credential is a name under $CREDENTIALS_DIRECTORY (no /)"
            ));
        }
    }
    if c.hosts.is_empty() {
        return Err(format!(
            "{at}: hosts is empty: name the hosts the value belongs to (api.example.com:443)"
        ));
    }
    for h in &c.hosts {
        let r = HostRule::parse(h, "secret").map_err(|e| format!("{at} hosts: {e}"))?;
        if r.host == "*" {
            return Err(format!(
                "{at} hosts: `*` would send the value to any host; name the hosts"
            ));
        }
    }
    for p in &c.paths {
        if !p.starts_with('/') {
            return Err(format!("{at} paths: {p:?} must start with /"));
        }
    }
    for m in &c.methods {
        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "{at} methods: {m:?} is not an upper-case method (GET)"
            ));
        }
    }
    if c.header.is_some() && c.basic_user.is_some() {
        return Err(format!("{at}: give header or basic_user, not both"));
    }
    if let Some(h) = &c.header {
        let Some((n, v)) = h.split_once(':') else {
            return Err(format!(
                "{at} header: {h:?} is not `Name: template` (Authorization: Bearer {{value}})"
            ));
        };
        if n.trim().is_empty()
            || !n
                .trim()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            || !v.contains("{value}")
        {
            return Err(format!(
                "{at} header: {h:?} is not `Name: template` with {{value}} in the template"
            ));
        }
    }
    if let Some(u) = &c.basic_user {
        if u.contains(':') || u.bytes().any(|b| b < 0x20) {
            return Err(format!("{at} basic_user: no `:` nor control characters"));
        }
    }
    Ok(())
}

/// A value: never shown (its `Debug` is `<secret>`), only compared and sent.
#[derive(Clone)]
struct Value(Arc<Vec<u8>>);

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// How a bound secret is sent.
#[derive(Debug, Clone, PartialEq)]
enum Send {
    /// Header name, template (`{value}` in it).
    Header(String, String),
    Basic(String),
    /// Only the placeholder replaced where the command put it.
    Placeholder,
}

/// One secret of a run.
#[derive(Debug, Clone)]
pub struct Bound {
    pub name: String,
    placeholder: String,
    value: Value,
    pub hosts: Vec<HostRule>,
    paths: Vec<String>,
    methods: Vec<String>,
    send: Send,
    pub ca_file: Option<PathBuf>,
}

impl Bound {
    /// Whether the value goes to `host:port`.
    pub fn binds_host(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|r| r.matches(host, port))
    }

    /// Whether the value goes to `host:port`, `method`, `path`; Err(why): the host and method
    /// are bound but the path's readings disagree about its `paths` ([`path_within`]).
    fn binds(&self, host: &str, port: u16, method: &str, path: &str) -> Result<bool, String> {
        if !self.binds_host(host, port)
            || !(self.methods.is_empty() || self.methods.iter().any(|m| m == method))
        {
            return Ok(false);
        }
        path_within(&self.paths, path)
    }

    /// The hosts as written (shown to the human).
    pub fn host_texts(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.text()).collect()
    }
}

/// The secrets of one run: each with its placeholder. Empty for a run without any.
#[derive(Debug, Clone, Default)]
pub struct RunSecrets {
    pub bound: Vec<Bound>,
}

/// What [`RunSecrets::apply`] decided about a request head.
#[derive(Debug, PartialEq)]
pub enum Applied {
    /// Sent on; the names of the secrets whose value it now carries (maybe none).
    Send(Vec<String>),
    /// It carries the placeholder of this secret toward somewhere the secret does not go.
    Exfiltration(String),
    /// Secret `.0` would go to this host and method, but whether the path is within its `paths`
    /// depends on how the server reads it (`.1`: why): nothing is sent.
    AmbiguousPath(String, String),
}

/// A random placeholder: [`PLACEHOLDER_PREFIX`] + 128 random bits in hex — nothing of the
/// value, its length or its name.
fn placeholder() -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| format!("secrets: no randomness: {e}"))?;
    Ok(format!("{PLACEHOLDER_PREFIX}{}", hex::encode(b)))
}

/// Reads the value of `name` (blocking: a file). Errors name the source and the fix, never
/// the value.
fn read_value(name: &str, c: &SecretConfig) -> Result<Vec<u8>, String> {
    let at = format!("secret {name}");
    let from_file = |p: &Path, check_mode: bool| -> Result<Vec<u8>, String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(p)
            .map_err(|e| format!("{at}: cannot read {}: {e} ([secrets.{name}])", p.display()))?;
        if check_mode && meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{at}: {} may be read by others than its owner (mode {:o}): chmod 600 it",
                p.display(),
                meta.mode() & 0o777
            ));
        }
        std::fs::read(p).map_err(|e| format!("{at}: cannot read {}: {e}", p.display()))
    };
    let mut v = if let Some(f) = &c.file {
        from_file(f, true)?
    } else if let Some(e) = &c.env {
        use std::os::unix::ffi::OsStringExt;
        std::env::var_os(e)
            .ok_or_else(|| {
                format!("{at}: the worker's environment has no {e} ([secrets.{name}] env)")
            })?
            .into_vec()
    } else if let Some(cred) = &c.credential {
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| {
            format!("{at}: $CREDENTIALS_DIRECTORY is not set: load the credential in the unit (LoadCredential={cred}:/path)")
        })?;
        from_file(&Path::new(&dir).join(cred), false)?
    } else {
        return Err(format!("{at}: no source (file, env or credential)"));
    };
    while v.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        v.pop();
    }
    if v.is_empty() {
        return Err(format!("{at}: the value is empty"));
    }
    if v.iter().any(|b| *b < 0x20 && *b != b'\t' || *b == 0x7f) {
        return Err(format!(
            "{at}: the value holds a line break or a control character; it cannot go in a header"
        ));
    }
    Ok(v)
}

impl RunSecrets {
    /// The secrets `names` (a client's SECRET grants) of `config`, each with a fresh
    /// placeholder. A granted name the configuration lacks is skipped with a warning; a value
    /// that cannot be read fails the run (the error names the fix). Blocking (files).
    pub fn load(config: &Secrets, names: &[String]) -> Result<RunSecrets, String> {
        let mut bound = Vec::new();
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        for name in names {
            let Some(c) = config.get(name) else {
                tracing::warn!(secret = %name, "a SECRET grant names a secret the configuration has no [secrets.{name}] for; ignored");
                continue;
            };
            let value = read_value(name, c)?;
            let send = match (&c.header, &c.basic_user) {
                (Some(h), _) => {
                    let (n, t) = h.split_once(':').unwrap_or((h, "{value}"));
                    Send::Header(n.trim().to_string(), t.trim().to_string())
                }
                (None, Some(u)) => Send::Basic(u.clone()),
                (None, None) => Send::Placeholder,
            };
            let hosts = c
                .hosts
                .iter()
                .filter_map(|h| HostRule::parse(h, "secret").ok())
                .collect();
            bound.push(Bound {
                name: name.clone(),
                placeholder: placeholder()?,
                value: Value(Arc::new(value)),
                hosts,
                paths: c.paths.clone(),
                methods: c.methods.clone(),
                send,
                ca_file: c.ca_file.clone(),
            });
        }
        Ok(RunSecrets { bound })
    }

    pub fn is_empty(&self) -> bool {
        self.bound.is_empty()
    }

    /// What the command's environment gets: `NAME` = the placeholder.
    pub fn env(&self) -> Vec<(String, String)> {
        self.bound
            .iter()
            .map(|b| (b.name.clone(), b.placeholder.clone()))
            .collect()
    }

    /// Whether some secret goes to `host:port` (HTTPS there is terminated by the proxy).
    pub fn binds_host(&self, host: &str, port: u16) -> bool {
        self.bound.iter().any(|b| b.binds_host(host, port))
    }

    /// The secret whose placeholder `bytes` carry (plainly, or inside base64), if any.
    pub fn carried(&self, bytes: &[u8]) -> Option<&Bound> {
        self.bound.iter().find(|b| carries(bytes, &b.placeholder))
    }

    /// What to mask in what comes back from a request that carried the secrets `names`, its
    /// head as sent being `headers`: every form of their values the head carries
    /// (`egress::echo::forms`).
    pub fn mask_for(&self, names: &[String], headers: &[(String, Vec<u8>)]) -> Vec<Vec<u8>> {
        let values: Vec<&[u8]> = self
            .bound
            .iter()
            .filter(|b| names.contains(&b.name))
            .map(|b| b.value.0.as_slice())
            .collect();
        if values.is_empty() {
            return Vec::new();
        }
        super::echo::forms(&values, headers)
    }

    /// Decides about one request head going to `host:port` (see the module doc) and, where a
    /// secret goes, puts its value in `headers` (names as sent, values as bytes). `extra`: the
    /// request target and the body bytes read with the head (scanned, never changed).
    pub fn apply(
        &self,
        host: &str,
        port: u16,
        method: &str,
        path: &str,
        headers: &mut Vec<(String, Vec<u8>)>,
        extra: &[&[u8]],
    ) -> Applied {
        if self.bound.is_empty() {
            return Applied::Send(Vec::new());
        }
        let mut used = Vec::new();
        for b in &self.bound {
            let in_headers = headers
                .iter()
                .any(|(n, v)| carries(n.as_bytes(), &b.placeholder) || carries(v, &b.placeholder));
            let elsewhere = carries(host.as_bytes(), &b.placeholder)
                || extra.iter().any(|e| carries(e, &b.placeholder));
            let goes = match b.binds(host, port, method, path) {
                Ok(goes) => goes,
                // The value would be sent (its header, or the placeholder the command put in):
                // not toward a path the server may read outside the secret's paths.
                Err(why) if in_headers || elsewhere || b.send != Send::Placeholder => {
                    return Applied::AmbiguousPath(b.name.clone(), why);
                }
                Err(_) => false,
            };
            if !goes {
                if in_headers || elsewhere {
                    return Applied::Exfiltration(b.name.clone());
                }
                continue;
            }
            for (_, v) in headers.iter_mut() {
                replace_in_header(v, b.placeholder.as_bytes(), &b.value.0);
            }
            match &b.send {
                Send::Header(name, template) => {
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                    let mut v = Vec::new();
                    let mut parts = template.split("{value}");
                    v.extend_from_slice(parts.next().unwrap_or("").as_bytes());
                    for p in parts {
                        v.extend_from_slice(&b.value.0);
                        v.extend_from_slice(p.as_bytes());
                    }
                    headers.push((name.clone(), v));
                }
                Send::Basic(user) => {
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
                    let mut cred = user.as_bytes().to_vec();
                    cred.push(b':');
                    cred.extend_from_slice(&b.value.0);
                    let enc = base64::engine::general_purpose::STANDARD.encode(&cred);
                    headers.push(("Authorization".into(), format!("Basic {enc}").into_bytes()));
                }
                Send::Placeholder => {}
            }
            if matches!(b.send, Send::Header(..) | Send::Basic(_)) || in_headers {
                used.push(b.name.clone());
            }
        }
        Applied::Send(used)
    }
}

/// Whether request target `path` is beneath one of the secret's `paths` (empty: any path),
/// judged on the path as servers read it: every reading — percent-decoding applied zero, one or
/// two times (`%2e`, `%2f`, `%5c`, `%252e`…), backslashes as slashes or not, `;` parameters of a
/// segment dropped or not (`..;`), duplicate slashes merged or not — with its dot-segments
/// removed. Err(why) when the readings disagree: the path cannot be judged unambiguously.
pub fn path_within(paths: &[String], path: &str) -> Result<bool, String> {
    if paths.is_empty() {
        return Ok(true);
    }
    let raw = path.split(['?', '#']).next().unwrap_or("");
    let mut verdict = None;
    for rounds in 0..3 {
        let mut decoded = raw.as_bytes().to_vec();
        for _ in 0..rounds {
            decoded = percent_encoding::percent_decode(&decoded).collect();
        }
        for backslash in [false, true] {
            for params in [false, true] {
                for merge in [false, true] {
                    let p = reading(&decoded, backslash, params, merge);
                    let within = paths.iter().any(|pre| p.starts_with(pre.as_bytes()));
                    match verdict {
                        None => verdict = Some(within),
                        Some(v) if v != within => {
                            return Err(format!(
                                "the path {:?} is within the secret's paths for some servers and not for others (dot-segments, percent-encoding, `;` parameters, backslashes or duplicate slashes)",
                                crate::quote::prefix(raw, 200)
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    Ok(verdict.unwrap_or(false))
}

/// One reading of a (decoded) path: its segments, dot-segments removed (RFC 3986 5.2.4, `..`
/// above the root staying at the root).
fn reading(path: &[u8], backslash: bool, params: bool, merge: bool) -> Vec<u8> {
    let path: Vec<u8> = if backslash {
        path.iter()
            .map(|b| if *b == b'\\' { b'/' } else { *b })
            .collect()
    } else {
        path.to_vec()
    };
    let mut out: Vec<&[u8]> = Vec::new();
    let segs: Vec<&[u8]> = path.split(|b| *b == b'/').skip(1).collect();
    let last = segs.len().saturating_sub(1);
    for (i, seg) in segs.into_iter().enumerate() {
        let seg = if params {
            seg.split(|b| *b == b';').next().unwrap_or_default()
        } else {
            seg
        };
        match seg {
            b"." | b".." => {
                if seg == b".." {
                    out.pop();
                }
                if i == last {
                    out.push(b"");
                }
            }
            b"" if merge && i != last => {}
            s => out.push(s),
        }
    }
    let mut p = Vec::with_capacity(path.len() + 1);
    for s in out {
        p.push(b'/');
        p.extend_from_slice(s);
    }
    if p.is_empty() {
        p.push(b'/');
    }
    p
}

/// What a human is shown about a command's secrets, never a value (issue 38): each secret the
/// client is granted (`granted`) that the command would use — it names `$NAME` (`${NAME}`), or
/// a host the secret is bound to (`named`: `host:port` as `egress::named` finds them) — with
/// the hosts it goes to.
pub fn would_use(
    config: &Secrets,
    granted: &[String],
    command: &str,
    named: &[String],
) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (name, c) in config {
        if !granted.contains(name) {
            continue;
        }
        let rules: Vec<HostRule> = c
            .hosts
            .iter()
            .filter_map(|h| HostRule::parse(h, "secret").ok())
            .collect();
        let names_it = mentions(command, name);
        let to_bound = named.iter().any(|h| {
            let Some((host, port)) = h.rsplit_once(':') else {
                return false;
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            port.parse()
                .is_ok_and(|p| rules.iter().any(|r| r.matches(host, p)))
        });
        if names_it || to_bound {
            out.push((name.clone(), rules.iter().map(|r| r.text()).collect()));
        }
    }
    out
}

/// How the reason line of [`reason`] starts (`show` prints it).
pub const REASON_PREFIX: &str = "uses secret";

/// The reason line a validation shows for [`would_use`]'s answer (None: no secret).
pub fn reason(used: &[(String, Vec<String>)]) -> Option<String> {
    if used.is_empty() {
        return None;
    }
    let list: Vec<String> = used
        .iter()
        .map(|(n, h)| format!("{n} → {}", h.join(", ")))
        .collect();
    Some(format!(
        "{REASON_PREFIX}{} {} — the command sees only a per-run placeholder; the egress proxy puts the value in requests to these hosts only (elsewhere the placeholder is refused)",
        if used.len() == 1 { "" } else { "s" },
        list.join("; ")
    ))
}

/// Whether `command` names the variable `name` (`$NAME`, `${NAME}`).
fn mentions(command: &str, name: &str) -> bool {
    let b = command.as_bytes();
    let mut from = 0;
    while let Some(i) = command[from..].find(name) {
        let at = from + i;
        let end = at + name.len();
        let before = at.checked_sub(1).map(|j| b[j]);
        let after = b.get(end).copied();
        let word_end = !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        if (before == Some(b'$') && word_end)
            || (before == Some(b'{') && at >= 2 && b[at - 2] == b'$' && after == Some(b'}'))
        {
            return true;
        }
        from = end;
    }
    false
}

/// Base64 decoding that takes what a command may write: any padding, any trailing bits.
const LENIENT: [base64::engine::GeneralPurpose; 2] = {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let c = GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent);
    [
        GeneralPurpose::new(&base64::alphabet::STANDARD, c),
        GeneralPurpose::new(&base64::alphabet::URL_SAFE, c),
    ]
};

/// Whether `hay` carries `placeholder` plainly, or inside a base64 token (basic auth, a
/// command's own encoding of it).
fn carries(hay: &[u8], placeholder: &str) -> bool {
    let p = placeholder.as_bytes();
    if find(hay, p).is_some() {
        return true;
    }
    let b64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_');
    hay.split(|b| !b64(b))
        .filter(|t| t.len() >= p.len())
        .any(|t| {
            // Glued to other base64 characters, the encoding may start 1 to 3 characters in.
            (0..4).filter(|off| *off < t.len()).any(|off| {
                let s = &t[off..];
                let s = &s[..s.len() - usize::from(s.len() % 4 == 1)];
                LENIENT
                    .iter()
                    .any(|e| e.decode(s).is_ok_and(|d| find(&d, p).is_some()))
            })
        })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Replaces `from` by `to` in a header value, plainly and inside `Basic` credentials.
fn replace_in_header(v: &mut Vec<u8>, from: &[u8], to: &[u8]) {
    while let Some(i) = find(v, from) {
        v.splice(i..i + from.len(), to.iter().copied());
    }
    let lower = v.to_ascii_lowercase();
    if lower.starts_with(b"basic ") {
        let enc = String::from_utf8_lossy(&v[6..]).trim().to_string();
        if let Ok(mut d) = base64::engine::general_purpose::STANDARD.decode(enc.as_bytes()) {
            if find(&d, from).is_some() {
                while let Some(i) = find(&d, from) {
                    d.splice(i..i + from.len(), to.iter().copied());
                }
                let re = base64::engine::general_purpose::STANDARD.encode(&d);
                *v = format!("Basic {re}").into_bytes();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(header: Option<&str>, basic: Option<&str>) -> SecretConfig {
        SecretConfig {
            env: Some("BL_SECRETS_TEST_VALUE".into()),
            hosts: vec!["api.example.com:443".into(), "127.0.0.1:8080".into()],
            header: header.map(String::from),
            basic_user: basic.map(String::from),
            ..SecretConfig::default()
        }
    }

    fn run(c: SecretConfig) -> RunSecrets {
        std::env::set_var("BL_SECRETS_TEST_VALUE", "s3cr3t-canary\n");
        let mut all = Secrets::new();
        all.insert("GH_TOKEN".into(), c);
        RunSecrets::load(&all, &["GH_TOKEN".into(), "UNKNOWN".into()]).unwrap()
    }

    #[test]
    fn the_placeholder_is_replaced_for_a_bound_host_only_and_refused_elsewhere() {
        let r = run(cfg(None, None));
        let ph = r.env()[0].1.clone();
        assert!(ph.starts_with(PLACEHOLDER_PREFIX) && !ph.contains("s3cr3t"));
        let mut h = vec![("Authorization".into(), format!("Bearer {ph}").into_bytes())];
        assert_eq!(
            r.apply("127.0.0.1", 8080, "GET", "/", &mut h, &[]),
            Applied::Send(vec!["GH_TOKEN".into()])
        );
        assert_eq!(h[0].1, b"Bearer s3cr3t-canary");
        // Basic auth carrying it (git's `https://x:$TOKEN@host`).
        let b = base64::engine::general_purpose::STANDARD.encode(format!("x:{ph}"));
        let mut h = vec![("Authorization".into(), format!("Basic {b}").into_bytes())];
        r.apply("api.example.com", 443, "GET", "/", &mut h, &[]);
        let want = base64::engine::general_purpose::STANDARD.encode("x:s3cr3t-canary");
        assert_eq!(h[0].1, format!("Basic {want}").into_bytes());
        // Another host: plainly, base64'd, in the body, in the host name.
        for (host, hv, extra) in [
            ("evil.example", format!("Bearer {ph}"), String::new()),
            ("evil.example", format!("Basic {b}"), String::new()),
            ("evil.example", "x".into(), format!("token={ph}")),
            (&format!("{ph}.evil.example")[..], "x".into(), String::new()),
            ("127.0.0.1", format!("Bearer {ph}"), String::new()),
        ] {
            let port = if host == "127.0.0.1" { 8081 } else { 80 };
            let mut h = vec![("X".into(), hv.into_bytes())];
            assert_eq!(
                r.apply(host, port, "GET", "/", &mut h, &[extra.as_bytes()]),
                Applied::Exfiltration("GH_TOKEN".into()),
                "{host}"
            );
        }
        // No placeholder, unbound host: nothing added.
        let mut h = vec![];
        assert_eq!(
            r.apply("other", 80, "GET", "/", &mut h, &[]),
            Applied::Send(vec![])
        );
        assert!(h.is_empty());
    }

    #[test]
    fn a_header_or_basic_auth_is_added_for_a_bound_host() {
        let r = run(cfg(Some("Authorization: Bearer {value}"), None));
        let mut h = vec![("authorization".into(), b"Bearer nope".to_vec())];
        r.apply("api.example.com", 443, "GET", "/x", &mut h, &[]);
        assert_eq!(
            h,
            vec![("Authorization".into(), b"Bearer s3cr3t-canary".to_vec())]
        );
        let r = run(cfg(None, Some("x-access-token")));
        let mut h = vec![];
        r.apply("api.example.com", 443, "GET", "/x", &mut h, &[]);
        let want = base64::engine::general_purpose::STANDARD.encode("x-access-token:s3cr3t-canary");
        assert_eq!(h[0].1, format!("Basic {want}").into_bytes());
        let mut c = cfg(Some("X-Key: {value}"), None);
        c.paths = vec!["/api/".into()];
        c.methods = vec!["GET".into()];
        let r = run(c);
        let mut h = vec![];
        r.apply("api.example.com", 443, "POST", "/api/x", &mut h, &[]);
        assert!(h.is_empty(), "method not bound");
        r.apply("api.example.com", 443, "GET", "/other", &mut h, &[]);
        assert!(h.is_empty(), "path not bound");
        r.apply("api.example.com", 443, "GET", "/api/x", &mut h, &[]);
        assert_eq!(h.len(), 1);
        assert!(!format!("{r:?}").contains("s3cr3t"), "Debug shows no value");
    }

    #[test]
    fn a_human_is_shown_the_secrets_a_command_would_use_and_their_hosts() {
        let mut all = Secrets::new();
        all.insert("GH_TOKEN".into(), cfg(None, None));
        let g = vec!["GH_TOKEN".to_string()];
        let hosts = vec![
            "api.example.com:443".to_string(),
            "127.0.0.1:8080".to_string(),
        ];
        for cmd in [
            "curl -H \"Authorization: Bearer $GH_TOKEN\" x",
            "echo ${GH_TOKEN}",
        ] {
            assert_eq!(
                would_use(&all, &g, cmd, &[]),
                vec![("GH_TOKEN".into(), hosts.clone())]
            );
        }
        assert!(would_use(&all, &g, "echo $GH_TOKENS $XGH_TOKEN", &[]).is_empty());
        assert_eq!(
            would_use(&all, &g, "git push", &["api.example.com:443".into()]).len(),
            1
        );
        assert!(
            would_use(&all, &[], "echo $GH_TOKEN", &[]).is_empty(),
            "not granted"
        );
        let r = reason(&would_use(&all, &g, "echo $GH_TOKEN", &[])).unwrap();
        assert!(
            r.starts_with("uses secret GH_TOKEN → api.example.com:443, 127.0.0.1:8080"),
            "{r}"
        );
    }

    #[test]
    fn paths_are_judged_on_every_reading_of_the_path() {
        let api = vec!["/api/".to_string()];
        for ok in [
            "/api/x",
            "/api/x/../y",
            "/api/./x",
            "/api/x?q=/../..",
            "/api/a%2Fb",
        ] {
            assert_eq!(path_within(&api, ok), Ok(true), "{ok}");
        }
        for out in ["/x", "/apix", "/", "/API/x", "/api\\..\\x"] {
            assert_eq!(path_within(&api, out), Ok(false), "{out}");
        }
        // Plain dot-segments are judged normalised: outside, so not bound.
        assert_eq!(path_within(&api, "/api/../x"), Ok(false));
        assert_eq!(path_within(&api, "/api/x/../../y"), Ok(false));
        for amb in [
            "/api/%2e%2e/x",
            "/api/%2E%2E/x",
            "/api/..;/x",
            "/api/..%2fx",
            "/api/..\\x",
            "/api/%252e%252e/x",
            "//api/x",
            "/api/x/..//../y",
        ] {
            assert!(path_within(&api, amb).is_err(), "{amb}");
        }
        assert_eq!(path_within(&[], "/api/%2e%2e/x"), Ok(true), "no paths: any");
        let r = run({
            let mut c = cfg(Some("X-Key: {value}"), None);
            c.paths = api.clone();
            c
        });
        let mut h = vec![];
        assert!(matches!(
            r.apply("api.example.com", 443, "GET", "/api/..;/x", &mut h, &[]),
            Applied::AmbiguousPath(n, _) if n == "GH_TOKEN"
        ));
        assert!(h.is_empty());
    }

    #[test]
    fn bad_configurations_name_the_key_to_fix() {
        let ok = cfg(None, None);
        assert!(validate("GH_TOKEN", &ok).is_ok());
        assert!(validate("gh-token", &ok).unwrap_err().contains("A-Z"));
        assert!(validate("HTTPS_PROXY", &ok)
            .unwrap_err()
            .contains("sets itself"));
        let mut c = ok.clone();
        c.file = Some("/x".into());
        assert!(validate("T", &c).unwrap_err().contains("exactly one"));
        let mut c = ok.clone();
        c.hosts = vec!["*".into()];
        assert!(validate("T", &c).unwrap_err().contains("any host"));
        let mut c = ok.clone();
        c.header = Some("Authorization Bearer".into());
        assert!(validate("T", &c).is_err());
    }

    #[test]
    fn a_file_others_may_read_is_refused_without_showing_the_value() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("tok");
        std::fs::write(&f, "file-canary\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = SecretConfig {
            file: Some(f.clone()),
            hosts: vec!["a.example:443".into()],
            ..SecretConfig::default()
        };
        let mut all = Secrets::new();
        all.insert("T".into(), c);
        let e = RunSecrets::load(&all, &["T".into()]).unwrap_err();
        assert!(e.contains("chmod 600") && !e.contains("file-canary"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let r = RunSecrets::load(&all, &["T".into()]).unwrap();
        assert_eq!(r.bound[0].value.0.as_slice(), b"file-canary");
    }
}
