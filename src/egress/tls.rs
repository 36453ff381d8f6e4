//! HTTPS to the hosts a secret is bound to (issue 38): the one owner of **which TLS the egress
//! proxy terminates, and how it trusts the upstream**.
//!
//! Only a run that carries a secret gets a certificate authority ([`RunTls::new`]): a key pair
//! made for that run, held by the worker alone, its certificate trusted inside that run only
//! (a bundle = the distribution's roots + that certificate, written in the run's private
//! temporary directory, which `SSL_CERT_FILE`, `CURL_CA_BUNDLE`, `REQUESTS_CA_BUNDLE`,
//! `GIT_SSL_CAINFO`, `PIP_CERT`, `CARGO_HTTP_CAINFO` name; `NODE_EXTRA_CA_CERTS` names the CA alone). The proxy terminates TLS
//! only for a `CONNECT` to a host a secret of the run is bound to, with a leaf certificate for
//! that host signed by the run's CA ([`RunTls::server`]); it then speaks TLS to the upstream,
//! verified against the system roots or the secret's `ca_file` ([`RunTls::client`]). Every other
//! `CONNECT` is tunnelled untouched, and a run without secrets makes no key and no certificate.

use super::secrets::RunSecrets;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where distributions keep their root bundle (the first that exists is copied into the run's).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];
/// The file names written in the run's private temporary directory.
pub const BUNDLE_FILE: &str = "brainloop-ca-bundle.pem";
pub const CA_FILE: &str = "brainloop-run-ca.pem";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The TLS side of one run that carries secrets.
pub struct RunTls {
    ca: CertifiedIssuer<'static, KeyPair>,
    /// Leaf configurations by host (made once per host per run).
    servers: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    /// Upstream configurations: `None` = the system roots, else a secret's `ca_file`.
    clients: HashMap<Option<PathBuf>, Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for RunTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunTls")
    }
}

fn tls_err(what: &str) -> impl Fn(rcgen::Error) -> String + '_ {
    move |e| format!("egress TLS: {what}: {e}")
}

impl RunTls {
    /// Makes the run's CA and the upstream configurations its secrets need (blocking: reads
    /// the system roots and the `ca_file`s). Errors name the file to fix.
    pub fn new(secrets: &RunSecrets) -> Result<RunTls, String> {
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(tls_err("CA"))?;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.distinguished_name
            .push(DnType::CommonName, "brainloop per-run egress CA");
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(tls_err("CA key"))?;
        let ca = CertifiedIssuer::self_signed(p, key).map_err(tls_err("CA"))?;
        let mut clients = HashMap::new();
        let mut files: Vec<Option<PathBuf>> =
            secrets.bound.iter().map(|b| b.ca_file.clone()).collect();
        files.sort();
        files.dedup();
        for f in files {
            let cfg = match &f {
                // The system roots are read once per worker (a change needs a restart).
                None => SYSTEM
                    .get_or_init(|| client_config(roots(None)).map(Arc::new))
                    .clone()?,
                Some(_) => Arc::new(client_config(roots(f.as_deref()))?),
            };
            clients.insert(f, cfg);
        }
        Ok(RunTls {
            ca,
            servers: Mutex::new(HashMap::new()),
            clients,
        })
    }

    /// The run CA's certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// The bundle a run trusts: the distribution's roots, then the run's CA (blocking).
    pub fn bundle(&self) -> String {
        let mut b = SYSTEM_BUNDLES
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        if !b.is_empty() && !b.ends_with('\n') {
            b.push('\n');
        }
        b.push_str(&self.ca_pem());
        b
    }

    /// Writes the bundle and the CA in `dir` (the run's private tmp) and returns the variables
    /// that make the command's TLS clients trust them.
    pub fn install(&self, dir: &Path) -> Result<Vec<(String, String)>, String> {
        let bundle = dir.join(BUNDLE_FILE);
        let ca = dir.join(CA_FILE);
        std::fs::write(&bundle, self.bundle())
            .and_then(|_| std::fs::write(&ca, self.ca_pem()))
            .map_err(|e| {
                format!(
                    "egress TLS: cannot write the run's CA bundle in {}: {e}",
                    dir.display()
                )
            })?;
        let b = bundle.display().to_string();
        Ok(vec![
            ("SSL_CERT_FILE".into(), b.clone()),
            ("CURL_CA_BUNDLE".into(), b.clone()),
            ("REQUESTS_CA_BUNDLE".into(), b.clone()),
            ("GIT_SSL_CAINFO".into(), b.clone()),
            ("PIP_CERT".into(), b.clone()),
            ("CARGO_HTTP_CAINFO".into(), b),
            ("NODE_EXTRA_CA_CERTS".into(), ca.display().to_string()),
        ])
    }

    /// The configuration the proxy presents to the command for `host` (a leaf signed by the
    /// run's CA, made once per host).
    pub fn server(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let mut cache = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(host) {
            return Ok(c.clone());
        }
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(tls_err("leaf"))?;
        p.subject_alt_names = vec![match host.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.to_string().try_into().map_err(tls_err("leaf name"))?),
        }];
        p.distinguished_name.push(DnType::CommonName, host);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().map_err(tls_err("leaf key"))?;
        let cert = p.signed_by(&key, &self.ca).map_err(tls_err("leaf"))?;
        let chain = vec![cert.der().clone()];
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("egress TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, der)
            .map_err(|e| format!("egress TLS: {e}"))?;
        let cfg = Arc::new(cfg);
        cache.insert(host.to_string(), cfg.clone());
        Ok(cfg)
    }

    /// How the proxy verifies the upstream `host:port`: the `ca_file` of the first secret bound
    /// there that names one, else the system roots.
    pub fn client(
        &self,
        secrets: &RunSecrets,
        host: &str,
        port: u16,
    ) -> Option<Arc<rustls::ClientConfig>> {
        let f = secrets
            .bound
            .iter()
            .filter(|b| b.binds_host(host, port))
            .find_map(|b| b.ca_file.clone());
        self.clients
            .get(&f)
            .or_else(|| self.clients.get(&None))
            .cloned()
    }
}

/// The upstream configuration verified against the system roots, made once per worker.
static SYSTEM: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> =
    std::sync::OnceLock::new();

fn client_config(
    roots: Result<rustls::RootCertStore, String>,
) -> Result<rustls::ClientConfig, String> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("egress TLS: {e}"))?
        .with_root_certificates(roots?)
        .with_no_client_auth())
}

/// The roots an upstream is verified against: `ca_file` (PEM) or the system's.
fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(f) => {
            let certs = CertificateDer::pem_file_iter(f)
                .map_err(|e| format!("egress TLS: cannot read ca_file {}: {e}", f.display()))?;
            for c in certs {
                let c = c.map_err(|e| format!("egress TLS: ca_file {}: {e}", f.display()))?;
                roots
                    .add(c)
                    .map_err(|e| format!("egress TLS: ca_file {}: {e}", f.display()))?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "egress TLS: ca_file {} holds no certificate",
                    f.display()
                ));
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    Ok(roots)
}
