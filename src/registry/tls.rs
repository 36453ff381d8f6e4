//! TLS to the fleet registry: **what `sslmode` promises, and nothing less**. It owns the reading
//! of libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey` from `[registry] url` (the
//! `postgres` client rejects all but `disable|prefer|require`, so they are taken out of the URL
//! here) and the rustls configuration each mode gets:
//!
//! | `sslmode` | encrypted | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (libpq's default, and absent) | if the server offers it | not checked (as libpq) |
//! | `require` | always | not checked, unless `sslrootcert` is given: then as `verify-ca` (as libpq) |
//! | `verify-ca` | always | signed by a root of `sslrootcert` (or the system's) |
//! | `verify-full` | always | signed by such a root **and** valid for the URL's host name |
//!
//! `sslrootcert=FILE` (PEM) names the roots; absent or `system`, the system's roots
//! (`rustls-native-certs`). `sslcert` + `sslkey` (PEM) present a client certificate (the
//! server's `cert` authentication). A refused handshake is explained with the fix
//! ([`explain`]): the wrong CA names `sslrootcert`, the wrong host names the certificate's
//! names and `verify-ca`.

use anyhow::{bail, Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS settings of a registry URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: Mode,
    /// `sslrootcert`: None or `system` = the system's roots.
    pub rootcert: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

const KEYS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Takes the TLS parameters out of `url` (the URL form `postgres://…?k=v&…` or the key=value
/// form `host=… sslmode=…`): the URL the `postgres` client parses, and the settings.
pub fn split(url: &str) -> Result<(String, Tls)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let rest = if url.contains("://") {
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut kept = Vec::new();
        for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if KEYS.contains(&k) {
                found.push((k.to_string(), pct_decode(v)));
            } else {
                kept.push(kv);
            }
        }
        if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        }
    } else {
        let mut kept = Vec::new();
        for kv in url.split_whitespace() {
            match kv.split_once('=') {
                Some((k, v)) if KEYS.contains(&k.trim()) => {
                    found.push((k.trim().to_string(), v.trim_matches('\'').to_string()))
                }
                _ => kept.push(kv),
            }
        }
        kept.join(" ")
    };
    let mut t = Tls {
        mode: Mode::Prefer,
        rootcert: None,
        cert: None,
        key: None,
    };
    for (k, v) in found {
        match k.as_str() {
            "sslmode" => {
                t.mode = match v.as_str() {
                    "disable" => Mode::Disable,
                    "allow" | "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => bail!(
                        "[registry] url: sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                    ),
                }
            }
            "sslrootcert" => t.rootcert = (!v.is_empty() && v != "system").then(|| v.into()),
            "sslcert" => t.cert = (!v.is_empty()).then(|| v.into()),
            "sslkey" => t.key = (!v.is_empty()).then(|| v.into()),
            _ => {}
        }
    }
    // libpq: `require` with a root certificate file verifies as `verify-ca`.
    if t.mode == Mode::Require && t.rootcert.is_some() {
        t.mode = Mode::VerifyCa;
    }
    if t.cert.is_some() != t.key.is_some() {
        bail!("[registry] url: sslcert and sslkey go together (the client certificate and its key, PEM)");
    }
    Ok((rest, t))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn roots(rootcert: Option<&PathBuf>) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    match rootcert {
        Some(f) => {
            let certs = CertificateDer::pem_file_iter(f).with_context(|| {
                format!(
                    "[registry] url: cannot read sslrootcert={}: give the PEM file of the CA that signed the registry's certificate",
                    f.display()
                )
            })?;
            for c in certs {
                let c =
                    c.with_context(|| format!("[registry] url: sslrootcert={}", f.display()))?;
                roots
                    .add(c)
                    .with_context(|| format!("[registry] url: sslrootcert={}", f.display()))?;
            }
            if roots.is_empty() {
                bail!(
                    "[registry] url: sslrootcert={} holds no certificate (PEM `BEGIN CERTIFICATE` expected)",
                    f.display()
                );
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                bail!("[registry] url: no system root certificates found: set sslrootcert=FILE to the registry's CA");
            }
        }
    }
    Ok(roots)
}

/// Checks the chain but not the host name (`verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The web-PKI verifier checks the chain first and the name last: a name error means
        // the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(m, c, d)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(m, c, d)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Encrypts without authenticating the server (`prefer`, `require` without `sslrootcert`, as
/// libpq): the handshake's signatures are still checked.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls client configuration for `t` (not for `disable`).
pub fn client_config(t: &Tls) -> Result<rustls::ClientConfig> {
    let p = provider();
    let builder = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_safe_default_protocol_versions()
        .context("registry TLS: protocol versions")?;
    let verifier: Arc<dyn ServerCertVerifier> = match t.mode {
        Mode::Disable | Mode::Prefer | Mode::Require => Arc::new(Unverified(p.clone())),
        Mode::VerifyCa | Mode::VerifyFull => {
            let v = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(t.rootcert.as_ref())?),
                p.clone(),
            )
            .build()
            .context("registry TLS: the certificate verifier")?;
            if t.mode == Mode::VerifyFull {
                v
            } else {
                Arc::new(ChainOnly(v))
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    Ok(match (&t.cert, &t.key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .with_context(|| {
                    format!("[registry] url: cannot read sslcert={}", cert.display())
                })?;
            let key = PrivateKeyDer::from_pem_file(key)
                .with_context(|| format!("[registry] url: cannot read sslkey={}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .context("[registry] url: sslcert and sslkey do not make a client certificate")?
        }
        _ => builder.with_no_client_auth(),
    })
}

/// The fix for a refused handshake, if the error chain holds a certificate error.
pub fn explain(e: &(dyn std::error::Error + 'static), t: &Tls, host: &str) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let rustls_err = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(ce)) = rustls_err {
            let roots = match &t.rootcert {
                Some(f) => format!("sslrootcert={}", f.display()),
                None => "the system's roots (no sslrootcert)".to_string(),
            };
            return Some(match ce {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                    "the registry's certificate is not signed by a CA of {roots} ({ce:?}): set sslrootcert=FILE to the CA that signed the server's certificate"
                ),
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                    "the registry's certificate is not valid for the host name {host:?} (sslmode=verify-full; {ce:?}): connect by a name the certificate carries (hostaddr=IP keeps the name while choosing the address), or reissue the certificate for {host:?}"
                ),
                CertificateError::Expired | CertificateError::ExpiredContext { .. } | CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => format!(
                    "the registry's certificate is outside its validity period ({ce:?}): renew it (or check this machine's clock)"
                ),
                other => format!("the registry's certificate is refused ({other:?}) with sslmode={}", t.mode.name()),
            });
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_parameters_leave_the_url_and_require_with_a_root_verifies_the_chain() {
        let (u, t) = split("postgres://w@db:5432/reg?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x").unwrap();
        assert_eq!(u, "postgres://w@db:5432/reg?application_name=x");
        assert_eq!(t.mode, Mode::VerifyFull);
        assert_eq!(t.rootcert, Some(PathBuf::from("/etc/ca.pem")));
        let (u, t) = split("postgres://w@db/reg").unwrap();
        assert_eq!((u.as_str(), t.mode), ("postgres://w@db/reg", Mode::Prefer));
        let (_, t) = split("postgres://w@db/reg?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert_eq!(t.mode, Mode::VerifyCa);
        let (_, t) = split("postgres://w@db/reg?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(t.rootcert, None);
        let (u, t) = split("host=db user=w sslmode=verify-ca").unwrap();
        assert_eq!((u.as_str(), t.mode), ("host=db user=w", Mode::VerifyCa));
        assert!(split("postgres://w@db/reg?sslmode=verify").is_err());
        assert!(split("postgres://w@db/reg?sslmode=require&sslcert=/c.pem").is_err());
    }
}
