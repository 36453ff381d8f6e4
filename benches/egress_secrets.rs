//! What secrets cost the egress proxy (issue 38): prints figures, asserts nothing (`cargo bench
//! --bench egress_secrets`). The proxy alone (no sandbox), driven over its Unix socket by this
//! process, against servers of this process on 127.0.0.1:
//!
//! - start + stop of a run's proxy: without secrets (no CA, no TLS) and with one (the run's CA
//!   made; the secret's `ca_file` read, or the system roots);
//! - one plain HTTP request: no secret; a secret bound to another host (the head is scanned for
//!   its placeholder); a secret bound to this host (the value put in, the response masked);
//! - one HTTPS request: tunnelled untouched (no secret: `CONNECT`, the client's TLS straight to
//!   the upstream) and terminated by the proxy (a secret bound there: two TLS handshakes).
//!
//! Reports p50 / p99 per row and the ratio with / without. Env: BENCH_ROUNDS (default 300).

use brainloop::egress::proxy::{Bounds, JobProxy};
use brainloop::egress::resolve::Resolver;
use brainloop::egress::rules::{HostRule, Rules};
use brainloop::egress::secrets::{RunSecrets, SecretConfig, Secrets};
use brainloop::egress::tls::RunTls;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

const PAGE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello-egress\n";

fn read_head<S: Read>(s: &mut S) {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}

/// A plain HTTP server on 127.0.0.1 answering every request with a 13-byte page.
fn serve() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            std::thread::spawn(move || {
                read_head(&mut s);
                let _ = s.write_all(PAGE);
            });
        }
    });
    port
}

/// An HTTPS server on 127.0.0.1 with its own CA; (port, the CA's PEM file).
fn serve_tls(dir: &std::path::Path) -> (u16, std::path::PathBuf) {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
    let mut lp = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    lp.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = lp.signed_by(&key, &ca).unwrap();
    let pem = dir.join("bench-ca.pem");
    std::fs::write(&pem, ca.pem()).unwrap();
    let cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap(),
    );
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let mut t =
                    rustls::StreamOwned::new(rustls::ServerConnection::new(cfg).unwrap(), s);
                read_head(&mut t);
                let _ = t.write_all(PAGE);
                t.conn.send_close_notify();
                let _ = t.flush();
            });
        }
    });
    (port, pem)
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

fn secrets(host: &str, ca_file: Option<&std::path::Path>) -> RunSecrets {
    let mut all = Secrets::new();
    all.insert(
        "BENCH_TOKEN".into(),
        SecretConfig {
            env: Some("BENCH_SECRET_VALUE".into()),
            hosts: vec![host.into()],
            header: Some("Authorization: Bearer {value}".into()),
            ca_file: ca_file.map(|p| p.to_path_buf()),
            ..SecretConfig::default()
        },
    );
    RunSecrets::load(&all, &["BENCH_TOKEN".into()]).unwrap()
}

fn start(rules: &[String], s: RunSecrets, tls: Option<Arc<RunTls>>) -> JobProxy {
    let rules = Rules {
        rules: rules
            .iter()
            .map(|r| HostRule::parse(r, "bench").unwrap())
            .collect(),
    };
    JobProxy::start_carrying(
        rules,
        s,
        tls,
        Arc::new(Resolver::default()),
        Bounds::default(),
        &std::env::temp_dir(),
    )
    .unwrap()
}

async fn http_once(p: &JobProxy, port: u16) -> f64 {
    let t = Instant::now();
    let mut s = UnixStream::connect(p.socket()).await.unwrap();
    s.write_all(format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut v = Vec::new();
    s.read_to_end(&mut v).await.unwrap();
    assert!(
        v.ends_with(b"hello-egress\n"),
        "{}",
        String::from_utf8_lossy(&v)
    );
    t.elapsed().as_secs_f64() * 1e3
}

async fn https_once(p: &JobProxy, port: u16, client: Arc<rustls::ClientConfig>) -> f64 {
    let t = Instant::now();
    let mut s = UnixStream::connect(p.socket()).await.unwrap();
    s.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut t2 = tokio_rustls::TlsConnector::from(client)
        .connect(name, s)
        .await
        .unwrap();
    t2.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut v = Vec::new();
    let _ = t2.read_to_end(&mut v).await;
    assert!(
        v.ends_with(b"hello-egress\n"),
        "{}",
        String::from_utf8_lossy(&v)
    );
    t.elapsed().as_secs_f64() * 1e3
}

fn row(name: &str, without: &mut [f64], with: &mut [f64]) {
    let (o50, o99) = (pct(without, 0.5), pct(without, 0.99));
    let (w50, w99) = (pct(with, 0.5), pct(with, 0.99));
    println!(
        "| {name} | {o50:.3} / {o99:.3} | {w50:.3} / {w99:.3} | {:.2} |",
        w50 / o50
    );
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    std::env::set_var("BENCH_SECRET_VALUE", "bench-secret-value-0123456789");
    let dir = tempfile::tempdir().unwrap();
    let port = serve();
    let (tport, ca) = serve_tls(dir.path());
    let rules = vec![format!("127.0.0.1:{port}"), format!("127.0.0.1:{tport}")];
    println!("egress proxy with and without secrets — {n} rounds per row, alternating\n");
    println!("| what | without p50 / p99 ms | with p50 / p99 ms | ratio p50 |");
    println!("|---|---|---|---|");

    // Start + stop of a run's proxy.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..n.min(100) {
        let t = Instant::now();
        start(&rules, RunSecrets::default(), None).finish().await;
        a.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let s = secrets(&format!("127.0.0.1:{tport}"), Some(&ca));
        let s2 = s.clone();
        let tls = tokio::task::spawn_blocking(move || RunTls::new(&s2).unwrap())
            .await
            .unwrap();
        start(&rules, s, Some(Arc::new(tls))).finish().await;
        b.push(t.elapsed().as_secs_f64() * 1e3);
    }
    row(
        "proxy start + stop: no secret / one secret (run CA made, its ca_file read)",
        &mut a.clone(),
        &mut b,
    );
    // The same, the upstream verified against the system roots (read once per run).
    let mut c = Vec::new();
    for _ in 0..n.min(100) {
        let t = Instant::now();
        let s = secrets("api.example.com:443", None);
        let s2 = s.clone();
        let tls = tokio::task::spawn_blocking(move || RunTls::new(&s2).unwrap())
            .await
            .unwrap();
        start(&rules, s, Some(Arc::new(tls))).finish().await;
        c.push(t.elapsed().as_secs_f64() * 1e3);
    }
    row(
        "proxy start + stop: no secret / one secret (run CA made, system roots read)",
        &mut a,
        &mut c,
    );

    // Plain HTTP.
    let none = start(&rules, RunSecrets::default(), None);
    let elsewhere = start(&rules, secrets("api.example.com:443", None), None);
    let bound = start(&rules, secrets(&format!("127.0.0.1:{port}"), None), None);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        a.push(http_once(&none, port).await);
        b.push(http_once(&elsewhere, port).await);
        c.push(http_once(&bound, port).await);
    }
    row(
        "HTTP request: no secret / a secret bound elsewhere (head scanned)",
        &mut a.clone(),
        &mut b,
    );
    row(
        "HTTP request: no secret / a secret bound there (value put in, response masked)",
        &mut a,
        &mut c,
    );

    // HTTPS: tunnelled untouched vs terminated with the run's CA.
    let s = secrets(&format!("127.0.0.1:{tport}"), Some(&ca));
    let s2 = s.clone();
    let tls = Arc::new(
        tokio::task::spawn_blocking(move || RunTls::new(&s2).unwrap())
            .await
            .unwrap(),
    );
    let run_ca = client_config(&tls.ca_pem());
    let own_ca = client_config(&std::fs::read_to_string(&ca).unwrap());
    let terminated = start(&rules, s, Some(tls));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..n {
        a.push(https_once(&none, tport, own_ca.clone()).await);
        b.push(https_once(&terminated, tport, run_ca.clone()).await);
    }
    row(
        "HTTPS request: tunnelled (no secret) / terminated (secret bound there)",
        &mut a,
        &mut b,
    );
    for p in [none, elsewhere, bound, terminated] {
        p.finish().await;
    }
}
