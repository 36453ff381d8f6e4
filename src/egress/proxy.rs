//! The per-job egress proxy: a Unix socket of the worker that the command's network namespace
//! reaches only through the helper's forwarder (`sandbox/forward.rs`, 127.0.0.1:[`PORT`] inside
//! the namespace). It speaks HTTP (absolute-URI requests), HTTPS (`CONNECT host:port`, no TLS
//! interception) and SOCKS5 (CONNECT, no authentication; the first byte 0x05 tells them apart),
//! decides every connection by host and port ([`Rules`]), resolves names itself, connects only
//! to an address the rules allow (the class of that very address, `rules::HostRule::reaches`),
//! and records every attempt — allowed, refused or failed, with the bytes each way.
//!
//! HTTP requests are parsed with `httparse` (hyper's parser), sent on with `Connection: close`
//! and the hop-by-hop headers removed, then the bytes are spliced: one request per connection,
//! so a keep-alive client opens a new connection (and gets a new decision) per request.

use super::resolve::Resolver;
use super::rules::{Rules, Verdict};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

/// The port the forwarder listens on inside the command's network namespace (its own
/// namespace: no other process shares it).
pub const PORT: u16 = 3128;
/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Connection attempts recorded per run at most (a command opening more is still decided, one
/// by one; the rest is not recorded).
const MAX_RECORDS: usize = 1000;
/// Time an open connection gets to end once the command has exited.
const GRACE: Duration = Duration::from_millis(500);

/// One connection attempt as recorded with the job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    /// `http`, `connect` or `socks5`.
    pub protocol: String,
    /// `allowed` (connected), `refused` (no rule, or a non-public address without an explicit
    /// rule) or `failed` (allowed, but resolution or the connection failed).
    pub outcome: String,
    pub rule: Option<String>,
    pub address: Option<String>,
    pub reason: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub at_ms: i64,
}

struct Entry {
    conn: Mutex<Connection>,
    up: AtomicU64,
    down: AtomicU64,
}

struct Shared {
    rules: Rules,
    resolver: Arc<Resolver>,
    connect_timeout: Duration,
    entries: Mutex<Vec<Arc<Entry>>>,
}

/// A running proxy for one command.
pub struct JobProxy {
    dir: PathBuf,
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for JobProxy {
    /// A proxy dropped on an early return stops too, and its directory goes.
    fn drop(&mut self) {
        self.stop.cancel();
        let dir = self.dir.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn_blocking(move || std::fs::remove_dir_all(dir));
        }
    }
}

impl JobProxy {
    /// Listens on a fresh socket in a new 0700 directory `<dir_prefix>egress-XXXXXX` under the
    /// worker's temp dir (hidden from commands by the helper's tmpfs covers; the socket named
    /// with 128 random bits). The worker passes its private-tmp prefix, so the start-up sweep
    /// (`sandbox::sweep_private_tmp`) removes what a crash left.
    pub fn start(
        rules: Rules,
        resolver: Arc<Resolver>,
        connect_timeout: Duration,
        dir_prefix: &str,
    ) -> anyhow::Result<JobProxy> {
        let template = std::env::temp_dir().join(format!("{dir_prefix}egress-XXXXXX"));
        let dir = nix::unistd::mkdtemp(&template).map_err(|e| {
            anyhow::anyhow!("egress proxy: cannot create {}: {e}", template.display())
        })?;
        let mut name = [0u8; 16];
        getrandom::fill(&mut name)
            .map_err(|e| anyhow::anyhow!("egress proxy: no randomness: {e}"))?;
        let socket = dir.join(format!("{}.sock", hex::encode(name)));
        let listener = match UnixListener::bind(&socket) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                anyhow::bail!("egress proxy: cannot listen on {}: {e}", socket.display());
            }
        };
        let shared = Arc::new(Shared {
            rules,
            resolver,
            connect_timeout,
            entries: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, shared.clone(), stop.clone()));
        Ok(JobProxy {
            dir,
            socket,
            shared,
            stop,
            task: Some(task),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stops the proxy (open connections get [`GRACE`], then are cut) and returns what it saw.
    pub async fn finish(mut self) -> Vec<Connection> {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let dir = self.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        let entries = lock(&self.shared.entries).clone();
        entries
            .iter()
            .map(|e| {
                let mut c = lock(&e.conn).clone();
                c.bytes_up = e.up.load(Ordering::Relaxed);
                c.bytes_down = e.down.load(Ordering::Relaxed);
                c
            })
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>, stop: CancellationToken) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => match a {
                Ok((s, _)) => { conns.spawn(handle(s, shared.clone())); }
                Err(e) => {
                    tracing::warn!(error = %e, "egress proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    let _ = tokio::time::timeout(GRACE, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
}

async fn handle(mut s: UnixStream, sh: Arc<Shared>) {
    let mut buf = Vec::with_capacity(4096);
    if read_more(&mut s, &mut buf).await.unwrap_or(0) == 0 {
        return;
    }
    if buf[0] == 0x05 {
        socks5(s, buf, &sh).await
    } else {
        http(s, buf, &sh).await
    }
}

async fn read_more<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 4096];
    let n = r.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Why a connection did not open.
enum Closed {
    Refused(String),
    Failed(String),
}

/// Decides, resolves and connects, recording the attempt in every case.
async fn open(
    sh: &Shared,
    host: &str,
    port: u16,
    protocol: &str,
) -> (Arc<Entry>, Result<TcpStream, Closed>) {
    let name = super::rules::normalise_host(host);
    // A name with bytes no host name has (escapes, spaces, quotes) is refused unresolved and
    // recorded quoted and cut, so nothing the command sent reaches a terminal or a shell raw.
    let plain = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    let (host, verdict) = if plain {
        let v = sh.rules.decide(&name, port);
        (name, v)
    } else {
        (
            format!("{:?}", crate::quote::prefix(&name, 100)),
            Verdict::Refused,
        )
    };
    let res = connect(sh, &host, port, &verdict).await;
    // The rule that let the connection go to the address it reached (class checked there).
    let rule = match &res {
        Ok(s) => s
            .peer_addr()
            .ok()
            .and_then(|a| verdict.rule_for(a.ip()).map(|r| r.text())),
        Err(_) => verdict.rule(),
    };
    let (outcome, address, reason) = match &res {
        Ok(s) => ("allowed", s.peer_addr().ok().map(|a| a.to_string()), None),
        Err(Closed::Refused(w)) => ("refused", None, Some(w.clone())),
        Err(Closed::Failed(w)) => ("failed", None, Some(w.clone())),
    };
    let entry = Arc::new(Entry {
        conn: Mutex::new(Connection {
            host,
            port,
            protocol: protocol.to_string(),
            outcome: outcome.to_string(),
            rule,
            address,
            reason,
            bytes_up: 0,
            bytes_down: 0,
            at_ms: crate::time::now_ms(),
        }),
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
    });
    {
        let mut entries = lock(&sh.entries);
        if entries.len() < MAX_RECORDS {
            entries.push(entry.clone());
        }
    }
    (entry, res)
}

async fn connect(sh: &Shared, host: &str, port: u16, v: &Verdict) -> Result<TcpStream, Closed> {
    if *v == Verdict::Refused {
        return Err(Closed::Refused(format!(
            "no host rule allows {host}:{port}"
        )));
    }
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout(sh.connect_timeout, sh.resolver.resolve(host, port)).await {
            Ok(Ok(a)) if !a.is_empty() => a,
            Ok(Ok(_)) => return Err(Closed::Failed(format!("{host} has no address"))),
            Ok(Err(e)) => return Err(Closed::Failed(format!("cannot resolve {host}: {e}"))),
            Err(_) => return Err(Closed::Failed(format!("resolving {host} timed out"))),
        };
    // The class is judged on the very address connected to (a name that rebinds between the
    // prompt and now is judged by where it points now): `rules::HostRule::reaches`.
    let usable: Vec<SocketAddr> = addrs
        .iter()
        .copied()
        .filter(|a| v.rule_for(a.ip()).is_some())
        .collect();
    if usable.is_empty() {
        let ip = addrs[0].ip();
        let class = super::rules::class(ip);
        let what = if host.parse::<std::net::IpAddr>().is_ok() {
            format!("{host} is a non-public address ({class})")
        } else {
            format!("{host} resolves to {ip}, a non-public address ({class})")
        };
        return Err(Closed::Refused(format!(
            "{what}; a name reaches a non-public address only under a rule naming it with that class ({host}:{port}+{class}: `brainloop approve ID --allow-private-hosts`), an IP address only under a rule naming that address"
        )));
    }
    let mut last = String::new();
    for a in usable {
        match tokio::time::timeout(sh.connect_timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = format!("connect {a}: {e}"),
            Err(_) => last = format!("connect {a}: timed out"),
        }
    }
    Err(Closed::Failed(last))
}

/// Copies both ways, counting bytes, until both directions ended.
async fn splice<C>(client: C, upstream: TcpStream, entry: &Entry)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = upstream.into_split();
    let up = pump(&mut cr, &mut uw, &entry.up);
    let down = pump(&mut ur, &mut cw, &entry.down);
    tokio::join!(up, down);
}

async fn pump<R, W>(r: &mut R, w: &mut W, count: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if w.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = w.shutdown().await;
}

// ---- HTTP ----

fn http_error(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Brainloop-Egress: {}\r\n\r\n{body}",
        body.len(),
        if status.starts_with("403") { "refused" } else { "error" }
    )
    .into_bytes()
}

fn refusal_text(host: &str, port: u16, why: &str) -> String {
    format!("brainloop egress proxy: {host}:{port} refused: {why}. The job's result names the command that allows it.\n")
}

/// `http://host[:port]/path` → (host, port, origin-form target, authority).
fn absolute(uri: &str) -> Option<(String, u16, String, String)> {
    let lower = uri.get(..7)?.to_ascii_lowercase();
    if lower != "http://" {
        return None;
    }
    let rest = &uri[7..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(end);
    if auth.is_empty() || auth.contains('@') {
        return None;
    }
    let (host, port) = split_host_port(auth, 80)?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    };
    Some((host, port, path, auth.to_string()))
}

/// `host:port`, `[v6]:port` or `host` (with `default`).
fn split_host_port(auth: &str, default: u16) -> Option<(String, u16)> {
    if let Some(r) = auth.strip_prefix('[') {
        let (h, after) = r.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        return Some((h.to_string(), port));
    }
    match auth.rsplit_once(':') {
        Some((h, _)) if h.contains(':') => None,
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((auth.to_string(), default)),
    }
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
    "host",
];

async fn http(mut s: UnixStream, mut buf: Vec<u8>, sh: &Shared) {
    let head_len = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            let _ = s
                .write_all(&http_error(
                    "431 Request Header Fields Too Large",
                    "request head too large\n",
                ))
                .await;
            return;
        }
        match read_more(&mut s, &mut buf).await {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    let (method, target, version) = match req.parse(&buf[..head_len]) {
        Ok(httparse::Status::Complete(_)) => (
            req.method.unwrap_or("").to_string(),
            req.path.unwrap_or("").to_string(),
            req.version.unwrap_or(1),
        ),
        _ => {
            let _ = s
                .write_all(&http_error("400 Bad Request", "not an HTTP request\n"))
                .await;
            return;
        }
    };
    let rest = buf[head_len..].to_vec();
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_host_port(&target, 443) else {
            let _ = s
                .write_all(&http_error("400 Bad Request", "CONNECT needs host:port\n"))
                .await;
            return;
        };
        let (entry, res) = open(sh, &host, port, "connect").await;
        match res {
            Ok(mut up) => {
                if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                if !rest.is_empty() && up.write_all(&rest).await.is_ok() {
                    entry.up.fetch_add(rest.len() as u64, Ordering::Relaxed);
                }
                splice(s, up, &entry).await;
            }
            Err(c) => {
                let _ = s.write_all(&closed_response(&host, port, &c)).await;
            }
        }
        return;
    }
    let Some((host, port, path, authority)) = absolute(&target) else {
        let _ = s
            .write_all(&http_error(
                "400 Bad Request",
                "this proxy takes absolute http:// URIs and CONNECT host:port\n",
            ))
            .await;
        return;
    };
    let mut head = format!("{method} {path} HTTP/1.{version}\r\nHost: {authority}\r\n");
    for h in req.headers.iter() {
        if HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        head.push_str(h.name);
        head.push_str(": ");
        head.push_str(&String::from_utf8_lossy(h.value));
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    let (entry, res) = open(sh, &host, port, "http").await;
    match res {
        Ok(mut up) => {
            let mut first = head.into_bytes();
            first.extend_from_slice(&rest);
            if up.write_all(&first).await.is_err() {
                return;
            }
            entry.up.fetch_add(first.len() as u64, Ordering::Relaxed);
            splice(s, up, &entry).await;
        }
        Err(c) => {
            let _ = s.write_all(&closed_response(&host, port, &c)).await;
        }
    }
}

fn closed_response(host: &str, port: u16, c: &Closed) -> Vec<u8> {
    match c {
        Closed::Refused(w) => http_error("403 Forbidden", &refusal_text(host, port, w)),
        Closed::Failed(w) => http_error(
            "502 Bad Gateway",
            &format!("brainloop egress proxy: {host}:{port}: {w}\n"),
        ),
    }
}

// ---- SOCKS5 (RFC 1928: no authentication, CONNECT) ----

async fn need(s: &mut UnixStream, buf: &mut Vec<u8>, n: usize) -> bool {
    while buf.len() < n {
        if buf.len() > 600 {
            return false;
        }
        match read_more(s, buf).await {
            Ok(k) if k > 0 => {}
            _ => return false,
        }
    }
    true
}

async fn socks5(mut s: UnixStream, mut buf: Vec<u8>, sh: &Shared) {
    if !need(&mut s, &mut buf, 2).await {
        return;
    }
    let nm = buf[1] as usize;
    if !need(&mut s, &mut buf, 2 + nm).await {
        return;
    }
    if !buf[2..2 + nm].contains(&0) {
        let _ = s.write_all(&[5, 0xff]).await;
        return;
    }
    if s.write_all(&[5, 0]).await.is_err() {
        return;
    }
    let mut req = buf.split_off(2 + nm);
    if !need(&mut s, &mut req, 5).await {
        return;
    }
    let (host, at) = match req[3] {
        1 => {
            if !need(&mut s, &mut req, 10).await {
                return;
            }
            (
                std::net::Ipv4Addr::new(req[4], req[5], req[6], req[7]).to_string(),
                8,
            )
        }
        4 => {
            if !need(&mut s, &mut req, 22).await {
                return;
            }
            let mut o = [0u8; 16];
            o.copy_from_slice(&req[4..20]);
            (std::net::Ipv6Addr::from(o).to_string(), 20)
        }
        3 => {
            let l = req[4] as usize;
            if !need(&mut s, &mut req, 5 + l + 2).await {
                return;
            }
            (String::from_utf8_lossy(&req[5..5 + l]).to_string(), 5 + l)
        }
        _ => {
            let _ = s.write_all(&socks_reply(8)).await;
            return;
        }
    };
    let port = u16::from_be_bytes([req[at], req[at + 1]]);
    if req[1] != 1 {
        let _ = s.write_all(&socks_reply(7)).await;
        return;
    }
    let rest = req.split_off(at + 2);
    let (entry, res) = open(sh, &host, port, "socks5").await;
    match res {
        Ok(mut up) => {
            if s.write_all(&socks_reply(0)).await.is_err() {
                return;
            }
            if !rest.is_empty() && up.write_all(&rest).await.is_ok() {
                entry.up.fetch_add(rest.len() as u64, Ordering::Relaxed);
            }
            splice(s, up, &entry).await;
        }
        Err(Closed::Refused(_)) => {
            let _ = s.write_all(&socks_reply(2)).await;
        }
        Err(Closed::Failed(_)) => {
            let _ = s.write_all(&socks_reply(5)).await;
        }
    }
}

fn socks_reply(code: u8) -> [u8; 10] {
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::rules::HostRule;

    /// A TCP server on 127.0.0.1 that answers each connection with `pong:` + what it read.
    async fn echo() -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    let n = s.read(&mut b).await.unwrap_or(0);
                    let _ = s.write_all(&[b"pong:", &b[..n]].concat()).await;
                });
            }
        });
        port
    }

    async fn proxy(rules: &[&str]) -> JobProxy {
        let rules = Rules {
            rules: rules
                .iter()
                .map(|r| HostRule::parse(r, "test").unwrap())
                .collect(),
        };
        JobProxy::start(
            rules,
            Arc::new(Resolver::default()),
            Duration::from_secs(5),
            "bl-test-",
        )
        .unwrap()
    }

    async fn read_all(s: &mut UnixStream) -> Vec<u8> {
        let mut v = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut v)).await;
        v
    }

    #[tokio::test]
    async fn socks5_connect_http_and_refusals_are_answered_and_recorded() {
        let port = echo().await;
        let p = proxy(&[&format!("127.0.0.1:{port}"), "*"]).await;
        // SOCKS5 by IPv4 address: allowed (explicit rule), bytes spliced and counted.
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        s.write_all(&[5, 1, 0]).await.unwrap();
        let mut hello = [0u8; 2];
        s.read_exact(&mut hello).await.unwrap();
        assert_eq!(hello, [5, 0]);
        let mut req = vec![5, 1, 0, 1, 127, 0, 0, 1];
        req.extend_from_slice(&port.to_be_bytes());
        s.write_all(&req).await.unwrap();
        let mut rep = [0u8; 10];
        s.read_exact(&mut rep).await.unwrap();
        assert_eq!(rep[1], 0, "{rep:?}");
        s.write_all(b"ping").await.unwrap();
        s.shutdown().await.unwrap();
        assert_eq!(read_all(&mut s).await, b"pong:ping");
        // SOCKS5 by name to loopback under `*` only: refused (code 2).
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        let name = b"localhost";
        let mut req = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
        req.extend_from_slice(name);
        req.extend_from_slice(&(port + 1).to_be_bytes());
        s.write_all(&req).await.unwrap();
        let got = read_all(&mut s).await;
        assert_eq!(&got[..4], &[5, 0, 5, 2], "{got:?}");
        // CONNECT to an allowed address, then an absolute-URI request with no rule.
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nhi").as_bytes())
            .await
            .unwrap();
        s.shutdown().await.unwrap();
        let got = String::from_utf8(read_all(&mut s).await).unwrap();
        assert_eq!(got, "HTTP/1.1 200 Connection established\r\n\r\npong:hi");
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        s.write_all(b"GET http://10.0.0.1:81/x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let got = String::from_utf8(read_all(&mut s).await).unwrap();
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        assert!(got.contains("10.0.0.1:81 refused"), "{got}");
        let dir = p.socket().parent().unwrap().to_path_buf();
        let seen = p.finish().await;
        assert!(!dir.exists(), "{dir:?} left behind");
        let outcomes: Vec<(&str, &str, u16)> = seen
            .iter()
            .map(|c| (c.protocol.as_str(), c.outcome.as_str(), c.port))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("socks5", "allowed", port),
                ("socks5", "refused", port + 1),
                ("connect", "allowed", port),
                ("http", "refused", 81)
            ]
        );
        assert_eq!((seen[0].bytes_up, seen[0].bytes_down), (4, 9), "{seen:?}");
    }

    #[tokio::test]
    async fn a_name_no_host_has_is_refused_unresolved_and_recorded_quoted() {
        let p = proxy(&["*"]).await;
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        s.write_all(b"CONNECT a\x1b[2Jb:443 HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let got = String::from_utf8_lossy(&read_all(&mut s).await).to_string();
        assert!(got.starts_with("HTTP/1.1 4"), "{got}");
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        let name = b"x\x1b]0;pwn\x07.example";
        let mut req = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
        req.extend_from_slice(name);
        req.extend_from_slice(&443u16.to_be_bytes());
        s.write_all(&req).await.unwrap();
        let got = read_all(&mut s).await;
        assert_eq!(&got[..4], &[5, 0, 5, 2], "{got:?}");
        let seen = p.finish().await;
        assert!(!seen.is_empty(), "{seen:?}");
        for c in &seen {
            assert_eq!(c.outcome, "refused", "{c:?}");
            assert!(!c.host.contains('\x1b') && c.address.is_none(), "{c:?}");
        }
        assert!(crate::egress::refused(&seen).is_empty(), "{seen:?}");
    }

    #[test]
    fn absolute_uris_split_into_host_port_and_origin_form() {
        assert_eq!(
            absolute("http://Example.com/a?b=1"),
            Some((
                "Example.com".into(),
                80,
                "/a?b=1".into(),
                "Example.com".into()
            ))
        );
        assert_eq!(
            absolute("http://127.0.0.1:8080"),
            Some((
                "127.0.0.1".into(),
                8080,
                "/".into(),
                "127.0.0.1:8080".into()
            ))
        );
        assert_eq!(
            absolute("http://[::1]:81/x"),
            Some(("::1".into(), 81, "/x".into(), "[::1]:81".into()))
        );
        assert_eq!(absolute("http://user@evil/"), None);
        assert_eq!(absolute("https://a/"), None);
        assert_eq!(absolute("/relative"), None);
        assert_eq!(
            split_host_port("pypi.org:443", 1),
            Some(("pypi.org".into(), 443))
        );
        assert_eq!(split_host_port("::1:443", 1), None);
    }
}
