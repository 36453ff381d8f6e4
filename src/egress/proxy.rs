//! The per-job egress proxy: a Unix socket of the worker that the command's network namespace
//! reaches only through the helper's forwarder (`sandbox/forward.rs`, 127.0.0.1:[`PORT`] inside
//! the namespace). It speaks HTTP (absolute-URI requests), HTTPS (`CONNECT host:port`, no TLS
//! interception) and SOCKS5 (CONNECT, no authentication; the first byte 0x05 tells them apart),
//! decides every connection by host and port ([`Rules`]), resolves names itself, connects only
//! to an address the rules allow (the class of that very address, `rules::HostRule::reaches`),
//! and records every attempt — allowed, refused or failed, with the bytes each way.
//!
//! HTTP requests are parsed with `httparse` (hyper's parser), sent on with `Connection: close`
//! and the hop-by-hop headers removed, then the bytes are spliced: one request per connection;
//! the response's head is made to say `Connection: close` too ([`CloseHeads`], whatever the
//! upstream said), so a keep-alive client opens a new connection (and gets a new decision) per
//! request.
//!
//! Bounded (issue 33): what one run can make the worker hold is [`Bounds`] — connections open at
//! once (past the cap a connection is closed unread, counted in one record per run and one log
//! line), the time to send a request head or SOCKS greeting, accept errors (`EMFILE`…) paused
//! with back-off and logged at most once per [`ACCEPT_LOG_EVERY`] worker-wide. The record keeps
//! the first [`MAX_RECORDS`] attempts one by one, then one aggregate per host, port and outcome
//! (attempts, bytes, first and last), so every refused host is kept whatever came before.

use super::echo::Masked;
use super::resolve::Resolver;
use super::rules::{Rules, Verdict};
use super::secrets::{Applied, RunSecrets, EXFILTRATION};
use super::tls::RunTls;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The port the forwarder listens on inside the command's network namespace (its own
/// namespace: no other process shares it).
pub const PORT: u16 = 3128;
/// Largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Connection attempts recorded one by one per run; past them each attempt is added to the
/// aggregate of its host, port and outcome ([`Connection::attempts`]).
pub const MAX_RECORDS: usize = 1000;
/// Distinct (host, port, outcome) aggregates kept per run past [`MAX_RECORDS`]; past them the
/// attempts of further hosts are counted in one aggregate per outcome, host [`OTHER_HOSTS`]
/// (a bound on the worker's memory: a run naming 10,000 distinct hosts is asked about those).
pub const MAX_AGGREGATES: usize = 10_000;
/// The host of the aggregate past [`MAX_AGGREGATES`] (never a host name: not asked about).
pub const OTHER_HOSTS: &str = "(other hosts)";
/// The protocol of the record of connections closed unread past [`Bounds::max_connections`].
pub const CAP: &str = "cap";
/// The host of that record.
pub const CAP_HOST: &str = "(connection cap)";
/// Accept errors (`EMFILE`…) are logged at most once per this period, worker-wide.
pub const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);
/// The longest pause of the accept loop after an accept error (it doubles from 10 ms).
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
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
    /// The (last) attempt.
    pub at_ms: i64,
    /// Attempts this record stands for: 1, or an aggregate's count (past [`MAX_RECORDS`], or the
    /// connections closed past the cap).
    pub attempts: u64,
    /// The first attempt of an aggregate (= `at_ms` for one attempt).
    pub first_ms: i64,
}

impl Connection {
    /// A host the run tried (not the record of the cap or of hosts past [`MAX_AGGREGATES`]).
    pub fn is_host(&self) -> bool {
        self.protocol != CAP && self.host != OTHER_HOSTS
    }
}

/// What one run may make the worker hold (`[egress]` in the configuration).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Resolution and each connection attempt.
    pub connect_timeout: Duration,
    /// From accept to a complete request head (HTTP) or SOCKS request.
    pub head_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for Bounds {
    /// The configuration's defaults (`EgressConfig`).
    fn default() -> Self {
        let c = super::EgressConfig::default();
        Bounds {
            connect_timeout: Duration::from_millis(c.connect_timeout_ms),
            head_timeout: Duration::from_millis(c.head_timeout_ms),
            max_connections: c.max_connections,
        }
    }
}

struct Entry {
    conn: Mutex<Connection>,
    up: AtomicU64,
    down: AtomicU64,
}

impl Entry {
    fn new(c: Connection) -> Arc<Entry> {
        Arc::new(Entry {
            conn: Mutex::new(c),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
        })
    }
}

/// What a run's proxy saw: attempts one by one, then aggregates (in order of first attempt).
#[derive(Default)]
struct Record {
    entries: Vec<Arc<Entry>>,
    aggregates: Vec<Arc<Entry>>,
    index: HashMap<(String, u16, String), usize>,
}

impl Record {
    /// Records one attempt; returns the entry its bytes are counted in.
    fn add(&mut self, c: Connection, one_by_one: bool) -> Arc<Entry> {
        if one_by_one && self.entries.len() < MAX_RECORDS {
            let e = Entry::new(c);
            self.entries.push(e.clone());
            return e;
        }
        let host = if self.index.len() >= MAX_AGGREGATES
            && !self
                .index
                .contains_key(&(c.host.clone(), c.port, c.outcome.clone()))
        {
            OTHER_HOSTS.to_string()
        } else {
            c.host.clone()
        };
        let port = if host == OTHER_HOSTS { 0 } else { c.port };
        let key = (host, port, c.outcome.clone());
        if let Some(&i) = self.index.get(&key) {
            let e = self.aggregates[i].clone();
            {
                let mut a = lock(&e.conn);
                a.attempts += 1;
                a.at_ms = c.at_ms;
            }
            return e;
        }
        let mut c = c;
        if key.0 == OTHER_HOSTS {
            c.host = OTHER_HOSTS.to_string();
            c.port = 0;
            c.address = None;
            c.rule = None;
            c.reason = Some(format!(
                "hosts past the {MAX_AGGREGATES} distinct ones recorded for this run"
            ));
        }
        let e = Entry::new(c);
        self.index.insert(key, self.aggregates.len());
        self.aggregates.push(e.clone());
        e
    }
}

struct Shared {
    rules: Rules,
    /// The run's secrets (`super::secrets`): empty for most runs, which then pay nothing.
    secrets: RunSecrets,
    /// The run's CA and upstream TLS (`super::tls`): only a run that carries secrets has one.
    tls: Option<Arc<RunTls>>,
    resolver: Arc<Resolver>,
    connect_timeout: Duration,
    head_timeout: Duration,
    max_connections: usize,
    record: Mutex<Record>,
}

impl Shared {
    /// A connection closed unread past the cap: counted in the run's one record of it (and one
    /// log line per run).
    fn over_cap(&self) {
        let now = crate::time::now_ms();
        let first = {
            let mut r = lock(&self.record);
            let first = !r
                .index
                .contains_key(&(CAP_HOST.to_string(), 0, "refused".to_string()));
            r.add(
                Connection {
                    host: CAP_HOST.to_string(),
                    port: 0,
                    protocol: CAP.to_string(),
                    outcome: "refused".to_string(),
                    rule: None,
                    address: None,
                    reason: Some(format!(
                        "closed unread: the run had {} connections open through the egress proxy ([egress] max_connections)",
                        self.max_connections
                    )),
                    bytes_up: 0,
                    bytes_down: 0,
                    at_ms: now,
                    attempts: 1,
                    first_ms: now,
                },
                false,
            );
            first
        };
        if first {
            tracing::warn!(
                max_connections = self.max_connections,
                "egress proxy: a run reached its connection cap; further connections are closed unread (recorded once with the job)"
            );
        }
    }
}

/// A running proxy for one command.
pub struct JobProxy {
    dir: PathBuf,
    socket: PathBuf,
    bounds: Bounds,
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
    /// Listens on a fresh socket in a new 0700 directory `e-XXXXXX` under `sock_dir`, the
    /// worker's short socket directory ([`super::sockdir`]: hidden from commands by the
    /// helper's tmpfs covers, swept at start-up; the socket named with 128 random bits).
    pub fn start(
        rules: Rules,
        resolver: Arc<Resolver>,
        bounds: Bounds,
        sock_dir: &Path,
    ) -> anyhow::Result<JobProxy> {
        JobProxy::start_carrying(
            rules,
            RunSecrets::default(),
            None,
            resolver,
            bounds,
            sock_dir,
        )
    }

    /// [`JobProxy::start`] for a run that carries `secrets` (`super::secrets`), HTTPS to their
    /// hosts terminated with `tls` (`super::tls`).
    pub fn start_carrying(
        rules: Rules,
        secrets: RunSecrets,
        tls: Option<Arc<RunTls>>,
        resolver: Arc<Resolver>,
        bounds: Bounds,
        sock_dir: &Path,
    ) -> anyhow::Result<JobProxy> {
        let template = sock_dir.join("e-XXXXXX");
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
            secrets,
            tls,
            resolver,
            connect_timeout: bounds.connect_timeout,
            head_timeout: bounds.head_timeout,
            max_connections: bounds.max_connections.max(1),
            record: Mutex::new(Record::default()),
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, shared.clone(), stop.clone()));
        Ok(JobProxy {
            dir,
            socket,
            bounds,
            shared,
            stop,
            task: Some(task),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Routes `spec`'s network through this proxy. The forwarder holds at most twice the
    /// proxy's cap (the proxy closes what is past its own at once, so the forwarder's stays a
    /// backstop) and gives a connection the head timeout to end once the proxy ended its side.
    pub fn route(&self, spec: &mut crate::sandbox::Spec) {
        spec.route_through(
            &self.socket,
            PORT,
            self.bounds.max_connections.saturating_mul(2),
            self.bounds.head_timeout,
        );
    }

    /// Stops the proxy (open connections get [`GRACE`], then are cut) and returns what it saw.
    pub async fn finish(mut self) -> Vec<Connection> {
        self.stop.cancel();
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let dir = self.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        let entries: Vec<Arc<Entry>> = {
            let r = lock(&self.shared.record);
            r.entries
                .iter()
                .chain(r.aggregates.iter())
                .cloned()
                .collect()
        };
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

/// Accept errors of every proxy of the worker, for [`ACCEPT_LOG_EVERY`].
static ACCEPT_LOG: LazyLock<Mutex<crate::stats::Every>> = LazyLock::new(Default::default);

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>, stop: CancellationToken) {
    let mut conns = tokio::task::JoinSet::new();
    let slots = Arc::new(Semaphore::new(shared.max_connections));
    let mut pause = Duration::ZERO;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => match a {
                Ok((s, _)) => {
                    pause = Duration::ZERO;
                    match slots.clone().try_acquire_owned() {
                        Ok(permit) => { conns.spawn(handle(s, shared.clone(), permit)); }
                        Err(_) => {
                            drop(s);
                            shared.over_cap();
                        }
                    }
                }
                Err(e) => {
                    // Out of descriptors (or another transient error): pause, longer each
                    // time, rather than spin; say so once per period however many fail.
                    pause = (pause * 2).clamp(Duration::from_millis(10), ACCEPT_PAUSE_MAX);
                    if let Some(suppressed) = lock(&ACCEPT_LOG).due(ACCEPT_LOG_EVERY) {
                        tracing::warn!(error = %e, suppressed, pause_ms = pause.as_millis() as u64, "egress proxy: accept failed; pausing the accept loop");
                    }
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    let _ = tokio::time::timeout(GRACE, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
}

/// One connection, holding its slot (`_permit`) until it ends.
async fn handle(mut s: UnixStream, sh: Arc<Shared>, _permit: OwnedSemaphorePermit) {
    // The head (request head, or SOCKS greeting and request) by this deadline, or the
    // connection is closed unanswered.
    let by = Instant::now() + sh.head_timeout;
    let mut buf = Vec::with_capacity(4096);
    if read_more(&mut s, &mut buf, by).await.unwrap_or(0) == 0 {
        return;
    }
    if buf[0] == 0x05 {
        socks5(s, buf, &sh, by).await
    } else {
        http(s, buf, &sh, by).await
    }
}

/// Reads what is there into `buf`; an error past `by` (the head deadline).
async fn read_more<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    by: Instant,
) -> std::io::Result<usize> {
    let mut chunk = [0u8; 4096];
    let n = match tokio::time::timeout_at(by, r.read(&mut chunk)).await {
        Ok(n) => n?,
        Err(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no complete request head in time",
            ))
        }
    };
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Reads until `buf` holds a whole request head; its length, or None (the connection ended,
/// the head deadline `by` passed, or the head is over [`MAX_HEAD`]: answered 431).
async fn head_end<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
    by: Instant,
) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        if buf.len() > MAX_HEAD {
            let _ = s
                .write_all(&http_error(
                    "431 Request Header Fields Too Large",
                    "request head too large\n",
                ))
                .await;
            return None;
        }
        match read_more(s, buf, by).await {
            Ok(n) if n > 0 => {}
            _ => return None,
        }
    }
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
    let now = crate::time::now_ms();
    let entry = lock(&sh.record).add(
        Connection {
            host,
            port,
            protocol: protocol.to_string(),
            outcome: outcome.to_string(),
            rule,
            address,
            reason,
            bytes_up: 0,
            bytes_down: 0,
            at_ms: now,
            attempts: 1,
            first_ms: now,
        },
        true,
    );
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
async fn splice<C, U>(client: C, upstream: U, entry: &Entry)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    splice_masked(client, upstream, entry, None, None).await
}

/// [`splice`], what comes back to a request that carried secrets given to the command through
/// `mask` (`egress::echo`: decoded, masked, re-framed); `heads`: the response to a request the
/// proxy read and sent on ([`CloseHeads`]).
async fn splice_masked<C, U>(
    client: C,
    upstream: U,
    entry: &Entry,
    mut mask: Option<Masked>,
    mut heads: Option<CloseHeads>,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let up = pump(&mut cr, &mut uw, &entry.up, None, None);
    let down = pump(&mut ur, &mut cw, &entry.down, mask.as_mut(), heads.as_mut());
    tokio::join!(up, down);
}

async fn pump<R, W>(
    r: &mut R,
    w: &mut W,
    count: &AtomicU64,
    mut mask: Option<&mut Masked>,
    mut heads: Option<&mut CloseHeads>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    let mask_on = mask.as_ref().is_some_and(|m| !m.is_empty());
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut out = std::borrow::Cow::Borrowed(&buf[..n]);
                if let Some(h) = heads.as_deref_mut() {
                    out = h.push(&out).into();
                }
                if let Some(m) = mask.as_deref_mut().filter(|_| mask_on) {
                    out = m.push(&out).into();
                }
                if w.write_all(&out).await.is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let mut rest = heads.map(|h| h.finish()).unwrap_or_default();
    if let Some(m) = mask.filter(|_| mask_on) {
        rest = m.push(&rest);
        rest.extend(m.finish());
    }
    let _ = w.write_all(&rest).await;
    let _ = w.shutdown().await;
}

/// The response to a request the proxy read (one per connection, sent on with `Connection:
/// close`): its final head made to say `Connection: close` too (its `Connection` and
/// `Keep-Alive` lines replaced), so a client never sends a further request on a connection the
/// proxy no longer reads requests from — it opens a new one, decided anew. `1xx` heads pass
/// as they are; the body is untouched (its framing stays).
#[derive(Debug, Default)]
struct CloseHeads {
    held: Vec<u8>,
    done: bool,
}

impl CloseHeads {
    fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done {
            return chunk.to_vec();
        }
        self.held.extend_from_slice(chunk);
        let mut out = Vec::new();
        while !self.done {
            let Some(end) = self.held.windows(4).position(|w| w == b"\r\n\r\n") else {
                if self.held.len() > MAX_HEAD {
                    self.done = true;
                }
                break;
            };
            let head: Vec<u8> = self.held.drain(..end + 4).collect();
            if head.get(9) == Some(&b'1') {
                out.extend_from_slice(&head);
                continue;
            }
            for (i, line) in head[..end + 2].split_inclusive(|b| *b == b'\n').enumerate() {
                let name = line.split(|b| *b == b':').next().unwrap_or_default();
                let name = name.trim_ascii();
                if i > 0
                    && (name.eq_ignore_ascii_case(b"connection")
                        || name.eq_ignore_ascii_case(b"keep-alive"))
                {
                    continue;
                }
                out.extend_from_slice(line);
            }
            out.extend_from_slice(b"Connection: close\r\n\r\n");
            self.done = true;
        }
        if self.done {
            out.append(&mut self.held);
        }
        out
    }

    fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
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

async fn http(mut s: UnixStream, mut buf: Vec<u8>, sh: &Shared, by: Instant) {
    let Some(head_len) = head_end(&mut s, &mut buf, by).await else {
        return;
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
        if let Some(b) = sh.secrets.carried(buf[..head_len].as_ref()) {
            if !b.binds_host(&host, port) {
                let why = exfiltration(sh, &host, port, "connect", &b.name.clone());
                let _ = s
                    .write_all(&http_error(
                        "403 Forbidden",
                        &refusal_text(&host, port, &why),
                    ))
                    .await;
                return;
            }
        }
        if let Some(tls) = sh
            .tls
            .as_ref()
            .filter(|_| sh.secrets.binds_host(&host, port))
        {
            intercept(s, host, port, tls.clone(), sh, by).await;
            return;
        }
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
    let mut headers: Vec<(String, Vec<u8>)> = req
        .headers
        .iter()
        .filter(|h| !HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect();
    let at = Request {
        host: &host,
        port,
        method: &method,
        path: &path,
        protocol: "http",
    };
    let used = match secrets_or_refusal(sh, &at, &mut headers, &[target.as_bytes(), &rest]) {
        Ok(used) => used,
        Err(refusal) => {
            let _ = s.write_all(&refusal).await;
            return;
        }
    };
    let mask = masked(sh, &used, &mut headers, &method, version);
    let head = request_head(&method, &path, version, &authority, &headers);
    let (entry, res) = open(sh, &host, port, "http").await;
    match res {
        Ok(mut up) => {
            note_secrets(&entry, &used);
            let mut first = head;
            first.extend_from_slice(&rest);
            if up.write_all(&first).await.is_err() {
                return;
            }
            entry.up.fetch_add(first.len() as u64, Ordering::Relaxed);
            let heads = Some(CloseHeads::default());
            splice_masked(s, up, &entry, mask, heads).await;
        }
        Err(c) => {
            let _ = s.write_all(&closed_response(&host, port, &c)).await;
        }
    }
}

/// A `CONNECT` to a host a secret of the run is bound to: TLS terminated with the run's CA,
/// the request head read and decided like a plain one ([`RunSecrets::apply`]), then sent on
/// over TLS verified against the system roots or the secret's `ca_file`; one request per
/// connection (`Connection: close`), the value masked in what comes back. Recorded as
/// protocol `https`.
async fn intercept(
    mut s: UnixStream,
    host: String,
    port: u16,
    tls: Arc<RunTls>,
    sh: &Shared,
    by: Instant,
) {
    if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let server = match tls.server(&host) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "egress proxy: cannot make the run's certificate for a bound host");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let mut c = match tokio::time::timeout_at(by, acceptor.accept(s)).await {
        Ok(Ok(c)) => c,
        _ => return,
    };
    let mut buf = Vec::with_capacity(4096);
    let Some(head_len) = head_end(&mut c, &mut buf, by).await else {
        return;
    };
    let mut hs = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut hs);
    let (method, target, version) = match req.parse(&buf[..head_len]) {
        Ok(httparse::Status::Complete(_)) => (
            req.method.unwrap_or("").to_string(),
            req.path.unwrap_or("").to_string(),
            req.version.unwrap_or(1),
        ),
        _ => {
            let _ = c
                .write_all(&http_error("400 Bad Request", "not an HTTP request\n"))
                .await;
            return;
        }
    };
    // Origin form inside the tunnel; an absolute `https://` form keeps only its path.
    let path = match target.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        },
        None => target.clone(),
    };
    let mut headers: Vec<(String, Vec<u8>)> = req
        .headers
        .iter()
        .filter(|h| !HOP_BY_HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)))
        .map(|h| (h.name.to_string(), h.value.to_vec()))
        .collect();
    let rest = buf[head_len..].to_vec();
    let at = Request {
        host: &host,
        port,
        method: &method,
        path: &path,
        protocol: "https",
    };
    let used = match secrets_or_refusal(sh, &at, &mut headers, &[target.as_bytes(), &rest]) {
        Ok(used) => used,
        Err(refusal) => {
            let _ = c.write_all(&refusal).await;
            let _ = c.shutdown().await;
            return;
        }
    };
    let authority = match (host.contains(':'), port) {
        (true, 443) => format!("[{host}]"),
        (true, _) => format!("[{host}]:{port}"),
        (false, 443) => host.clone(),
        (false, _) => format!("{host}:{port}"),
    };
    let mask = masked(sh, &used, &mut headers, &method, version);
    let head = request_head(&method, &path, version, &authority, &headers);
    let (entry, res) = open(sh, &host, port, "https").await;
    let up = match res {
        Ok(up) => up,
        Err(cl) => {
            let _ = c.write_all(&closed_response(&host, port, &cl)).await;
            let _ = c.shutdown().await;
            return;
        }
    };
    let mut upt = match tls_upstream(sh, &tls, &host, port, up).await {
        Ok(t) => t,
        Err(why) => {
            let _ = c
                .write_all(&http_error(
                    "502 Bad Gateway",
                    &format!("brainloop egress proxy: {host}:{port}: {why}\n"),
                ))
                .await;
            let _ = c.shutdown().await;
            let mut e = lock(&entry.conn);
            e.outcome = "failed".to_string();
            e.reason = Some(why);
            return;
        }
    };
    note_secrets(&entry, &used);
    let mut first = head;
    first.extend_from_slice(&rest);
    if upt.write_all(&first).await.is_err() {
        return;
    }
    entry.up.fetch_add(first.len() as u64, Ordering::Relaxed);
    let heads = Some(CloseHeads::default());
    splice_masked(c, upt, &entry, mask, heads).await;
}

/// TLS to the upstream of an intercepted connection, verified as [`RunTls::client`] says (the
/// secret's `ca_file`, else the system roots); why not, for the record and the client.
async fn tls_upstream(
    sh: &Shared,
    tls: &RunTls,
    host: &str,
    port: u16,
    up: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let client = tls
        .client(&sh.secrets, host, port)
        .ok_or("no TLS configuration for the upstream")?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("not a TLS server name: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(client);
    match tokio::time::timeout(sh.connect_timeout, connector.connect(name, up)).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => {
            let own = sh
                .secrets
                .bound
                .iter()
                .any(|b| b.binds_host(host, port) && b.ca_file.is_some());
            Err(format!(
                "TLS with the upstream failed (verified against {}): {e}",
                if own {
                    "the secret's ca_file"
                } else {
                    "the system roots"
                }
            ))
        }
        Err(_) => Err("TLS with the upstream timed out".into()),
    }
}

/// The head sent upstream: origin-form target, `Host`, the headers, `Connection: close`.
fn request_head(
    method: &str,
    path: &str,
    version: u8,
    authority: &str,
    headers: &[(String, Vec<u8>)],
) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.{version}\r\nHost: {authority}\r\n").into_bytes();
    for (n, v) in headers {
        head.extend_from_slice(n.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    head
}

/// The response's mask for a request head that carries the secrets `used` (None: it carries
/// none): the head asks for it unencoded (`echo::identity_only`), and every form of the values
/// it carries is masked in what comes back.
fn masked(
    sh: &Shared,
    used: &[String],
    headers: &mut Vec<(String, Vec<u8>)>,
    method: &str,
    version: u8,
) -> Option<Masked> {
    if used.is_empty() {
        return None;
    }
    super::echo::identity_only(headers);
    Some(Masked::new(
        sh.secrets.mask_for(used, headers),
        method,
        version,
    ))
}

/// Says on an allowed connection's record which secrets it carried (names only).
fn note_secrets(entry: &Entry, used: &[String]) {
    if !used.is_empty() {
        lock(&entry.conn).reason = Some(format!("carried secret {}", used.join(", ")));
    }
}

/// Records a request that carried the placeholder of secret `name` where the secret does not
/// go (outcome [`EXFILTRATION`], never connected); returns why, for the refusal.
/// Where one request head goes, for the secrets' decision.
struct Request<'a> {
    host: &'a str,
    port: u16,
    method: &'a str,
    path: &'a str,
    protocol: &'a str,
}

/// The secrets' one decision on a request head (`RunSecrets::apply`): the names whose value it
/// now carries, or the 403 to answer when it carries a placeholder where its secret does not go
/// (recorded as an exfiltration attempt). Plain HTTP and terminated HTTPS share it.
fn secrets_or_refusal(
    sh: &Shared,
    at: &Request<'_>,
    headers: &mut Vec<(String, Vec<u8>)>,
    seen: &[&[u8]],
) -> Result<Vec<String>, Vec<u8>> {
    match sh
        .secrets
        .apply(at.host, at.port, at.method, at.path, headers, seen)
    {
        Applied::Send(used) => Ok(used),
        Applied::Exfiltration(name) => {
            let why = exfiltration(sh, at.host, at.port, at.protocol, &name);
            Err(http_error(
                "403 Forbidden",
                &refusal_text(at.host, at.port, &why),
            ))
        }
        Applied::AmbiguousPath(name, path) => {
            let why = format!(
                "secret {name} is bound to some paths only, and {path}: nothing sent (a path that cannot be judged unambiguously gets no secret)"
            );
            record_refusal(sh, at.host, at.port, at.protocol, &why);
            tracing::warn!(secret = %name, host = %crate::quote::prefix(at.host, 100), port = at.port, "egress proxy: a request toward a secret's host had a path that cannot be judged unambiguously; refused");
            Err(http_error(
                "403 Forbidden",
                &refusal_text(at.host, at.port, &why),
            ))
        }
    }
}

fn exfiltration(sh: &Shared, host: &str, port: u16, protocol: &str, name: &str) -> String {
    let why = format!(
        "the request carries the placeholder of secret {name}, which is not bound to it (recorded as an exfiltration attempt)"
    );
    record_refusal(sh, host, port, protocol, &why);
    tracing::warn!(secret = %name, host = %crate::quote::prefix(host, 100), port, "egress proxy: a request carried a secret's placeholder toward a host it is not bound to; refused");
    why
}

/// Records a request refused for a secret's sake (outcome [`EXFILTRATION`], stored `refused`
/// with `why`; never connected).
fn record_refusal(sh: &Shared, host: &str, port: u16, protocol: &str, why: &str) {
    let shown_host = if host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
    {
        host.to_string()
    } else {
        format!("{:?}", crate::quote::prefix(host, 100))
    };
    let now = crate::time::now_ms();
    lock(&sh.record).add(
        Connection {
            host: shown_host,
            port,
            protocol: protocol.to_string(),
            outcome: EXFILTRATION.to_string(),
            rule: None,
            address: None,
            reason: Some(why.to_string()),
            bytes_up: 0,
            bytes_down: 0,
            at_ms: now,
            attempts: 1,
            first_ms: now,
        },
        true,
    );
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

async fn need(s: &mut UnixStream, buf: &mut Vec<u8>, n: usize, by: Instant) -> bool {
    while buf.len() < n {
        if buf.len() > 600 {
            return false;
        }
        match read_more(s, buf, by).await {
            Ok(k) if k > 0 => {}
            _ => return false,
        }
    }
    true
}

async fn socks5(mut s: UnixStream, mut buf: Vec<u8>, sh: &Shared, by: Instant) {
    if !need(&mut s, &mut buf, 2, by).await {
        return;
    }
    let nm = buf[1] as usize;
    if !need(&mut s, &mut buf, 2 + nm, by).await {
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
    if !need(&mut s, &mut req, 5, by).await {
        return;
    }
    let (host, at) = match req[3] {
        1 => {
            if !need(&mut s, &mut req, 10, by).await {
                return;
            }
            (
                std::net::Ipv4Addr::new(req[4], req[5], req[6], req[7]).to_string(),
                8,
            )
        }
        4 => {
            if !need(&mut s, &mut req, 22, by).await {
                return;
            }
            let mut o = [0u8; 16];
            o.copy_from_slice(&req[4..20]);
            (std::net::Ipv6Addr::from(o).to_string(), 20)
        }
        3 => {
            let l = req[4] as usize;
            if !need(&mut s, &mut req, 5 + l + 2, by).await {
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
    if let Some(b) = sh.secrets.carried(host.as_bytes()) {
        exfiltration(sh, &host, port, "socks5", &b.name.clone());
        let _ = s.write_all(&socks_reply(2)).await;
        return;
    }
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
        proxy_with(rules, Duration::from_secs(5), 64).await
    }

    async fn proxy_with(rules: &[&str], head_timeout: Duration, max: usize) -> JobProxy {
        let rules = Rules {
            rules: rules
                .iter()
                .map(|r| HostRule::parse(r, "test").unwrap())
                .collect(),
        };
        let bounds = Bounds {
            connect_timeout: Duration::from_secs(5),
            head_timeout,
            max_connections: max,
        };
        JobProxy::start(
            rules,
            Arc::new(Resolver::default()),
            bounds,
            &std::env::temp_dir(),
        )
        .unwrap()
    }

    /// Bytes the proxy sends before it closes `s` (None: still open after 5 s).
    async fn until_closed(s: &mut UnixStream) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut v))
            .await
            .ok()
            .map(|_| v)
    }

    #[tokio::test]
    async fn a_connection_without_its_head_in_time_is_closed_unanswered() {
        let p = proxy_with(&["*"], Duration::from_millis(200), 8).await;
        let mut idle = UnixStream::connect(p.socket()).await.unwrap();
        let mut partial = UnixStream::connect(p.socket()).await.unwrap();
        partial
            .write_all(b"GET http://a.example/ HTTP/1.1\r\n")
            .await
            .unwrap();
        let mut greeting = UnixStream::connect(p.socket()).await.unwrap();
        greeting.write_all(&[5, 1, 0]).await.unwrap();
        assert_eq!(until_closed(&mut idle).await, Some(vec![]));
        assert_eq!(until_closed(&mut partial).await, Some(vec![]));
        // The greeting was answered; the request never came.
        assert_eq!(until_closed(&mut greeting).await, Some(vec![5, 0]));
        assert!(p.finish().await.is_empty(), "no host, no record");
    }

    #[tokio::test]
    async fn past_the_cap_connections_are_closed_unread_and_recorded_once() {
        let p = proxy_with(&["*"], Duration::from_secs(30), 2).await;
        let held = [
            UnixStream::connect(p.socket()).await.unwrap(),
            UnixStream::connect(p.socket()).await.unwrap(),
        ];
        for _ in 0..5 {
            let mut s = UnixStream::connect(p.socket()).await.unwrap();
            assert_eq!(until_closed(&mut s).await, Some(vec![]));
        }
        drop(held);
        // Slots come back as connections end.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut s = UnixStream::connect(p.socket()).await.unwrap();
        s.write_all(b"GET http://10.0.0.1:81/ HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let got = String::from_utf8(until_closed(&mut s).await.unwrap()).unwrap();
        assert!(got.starts_with("HTTP/1.1 403"), "{got}");
        let seen = p.finish().await;
        let caps: Vec<&Connection> = seen.iter().filter(|c| c.protocol == CAP).collect();
        assert_eq!(caps.len(), 1, "{seen:?}");
        assert_eq!((caps[0].attempts, caps[0].outcome.as_str()), (5, "refused"));
        assert!(caps[0].reason.as_deref().unwrap().contains("2 connections"));
        assert_eq!(crate::egress::refused(&seen), ["10.0.0.1:81"]);
    }

    fn attempt(host: &str, port: u16, outcome: &str, at_ms: i64) -> Connection {
        Connection {
            host: host.into(),
            port,
            protocol: "connect".into(),
            outcome: outcome.into(),
            rule: None,
            address: None,
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            at_ms,
            attempts: 1,
            first_ms: at_ms,
        }
    }

    #[test]
    fn past_the_records_attempts_aggregate_per_host_and_every_refused_host_is_kept() {
        let mut r = Record::default();
        for i in 0..MAX_RECORDS as i64 {
            r.add(attempt("a.example", 443, "allowed", i), true);
        }
        for i in 0..50 {
            let e = r.add(attempt("a.example", 443, "allowed", 5000 + i), true);
            e.down.fetch_add(10, Ordering::Relaxed);
        }
        for h in ["x.example", "y.example", "x.example"] {
            r.add(attempt(h, 443, "refused", 9000), true);
        }
        assert_eq!((r.entries.len(), r.aggregates.len()), (MAX_RECORDS, 3));
        let a = &r.aggregates[0];
        let c = lock(&a.conn).clone();
        assert_eq!((c.attempts, c.first_ms, c.at_ms), (50, 5000, 5049));
        assert_eq!(a.down.load(Ordering::Relaxed), 500);
        let all: Vec<Connection> = r
            .entries
            .iter()
            .chain(r.aggregates.iter())
            .map(|e| lock(&e.conn).clone())
            .collect();
        assert_eq!(
            crate::egress::refused(&all),
            ["x.example:443", "y.example:443"]
        );
        // Past MAX_AGGREGATES distinct hosts, one aggregate per outcome stands for the rest.
        for i in 0..MAX_AGGREGATES + 10 {
            r.add(attempt(&format!("h{i}.example"), 443, "refused", 1), true);
        }
        assert_eq!(r.aggregates.len(), MAX_AGGREGATES + 1);
        let other = lock(&r.aggregates.last().unwrap().conn).clone();
        assert_eq!((other.host.as_str(), other.attempts), (OTHER_HOSTS, 13));
        assert!(!other.is_host());
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
    fn the_final_response_head_says_connection_close_across_chunks() {
        let mut h = CloseHeads::default();
        let mut out = h.push(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nConn");
        out.extend(
            h.push(b"ection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok"),
        );
        out.extend(h.push(b"HTTP/1.1 200 OK\r\n\r\n"));
        out.extend(h.finish());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n"
        );
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
