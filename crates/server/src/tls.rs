//! TLS for both front ends (rustls): the server configuration built from the `tls-*` settings,
//! the acceptor new connections on `tls-port` and `memcached-tls-port` take, and its reload.
//!
//! The settings are redis-server's: `tls-cert-file` and `tls-key-file` (PEM; the certificate file
//! may hold the chain), `tls-ca-cert-file` (PEM CA certificates that client certificates are
//! verified against), `tls-auth-clients` (`yes`: a client certificate is required, `optional`: one
//! is verified when given, `no`: none is asked for) and `tls-protocols` (`TLSv1.2`, `TLSv1.3`).
//! A file that cannot be read or parsed, a key that does not match the certificate, or a CA file
//! with no certificate makes [`build`] fail with a message naming the file and the reason: the
//! server refuses to start with it, and `CONFIG SET` refuses it and keeps the configuration in
//! force.
//!
//! Reload: [`TlsState`] holds the configuration in force behind a lock that is only taken to clone
//! an `Arc` (when a connection is accepted) or to swap it (CONFIG SET); connections already open
//! keep the configuration they were accepted with, new ones get the new certificate.
//!
//! A connection's byte stream is either a plain `TcpStream` or a rustls stream over one; both are
//! a [`ClientStream`], which the RESP and memcached connection loops are generic over.
//!
//! May import: `state` (the live settings, for a reload); nothing about commands or protocols.

use parking_lot::RwLock;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// How long a client has to complete the TLS handshake before the connection is dropped (an
/// idle or slow peer must not hold a connection slot open).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection's byte stream, plain or TLS: what the connection loops read and write, plus the
/// TCP socket under it (for `TCP_NODELAY` and to notice a peer that hung up).
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The TCP socket under the stream.
    fn tcp(&self) -> &TcpStream;
}

impl ClientStream for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

/// The socket under a TLS connection, read through a buffer: rustls asks for at most 4 KiB of
/// ciphertext at a time, so a pipelined batch of 16 KiB records would otherwise cost a read
/// system call per 4 KiB (this way, one per [`TLS_READ_BUFFER`]). Writes go straight through.
pub type TlsSocket = tokio::io::BufReader<TcpStream>;

/// The read buffer under a TLS connection: two full TLS records.
pub const TLS_READ_BUFFER: usize = 2 * (16 * 1024 + 256);

/// A TLS connection's stream.
pub type TlsStream = tokio_rustls::server::TlsStream<TlsSocket>;

impl ClientStream for TlsStream {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0.get_ref()
    }
}

/// The TLS settings a server configuration is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: String,
    pub key_file: String,
    pub ca_cert_file: String,
    /// `yes`, `optional` or `no`.
    pub auth_clients: String,
    /// `TLSv1.2` and/or `TLSv1.3`.
    pub protocols: Vec<String>,
}

impl TlsFiles {
    /// The TLS settings of a configuration.
    pub fn of_config(config: &crate::config::Config) -> TlsFiles {
        TlsFiles {
            cert_file: config.tls_cert_file.clone(),
            key_file: config.tls_key_file.clone(),
            ca_cert_file: config.tls_ca_cert_file.clone(),
            auth_clients: config.tls_auth_clients.clone(),
            protocols: config.tls_protocols.clone(),
        }
    }

    /// The TLS settings in force now (CONFIG SET may have changed them).
    pub fn of_live(live: &crate::state::LiveSettings) -> TlsFiles {
        TlsFiles {
            cert_file: live.tls_cert_file.lock().clone(),
            key_file: live.tls_key_file.lock().clone(),
            ca_cert_file: live.tls_ca_cert_file.lock().clone(),
            auth_clients: live.tls_auth_clients.lock().clone(),
            protocols: live.tls_protocols.lock().clone(),
        }
    }
}

/// The rustls crypto provider (ring).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Read every certificate of a PEM file (`setting` names the setting in errors).
fn read_certs(setting: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_file(setting, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{setting} {path}: not a valid PEM certificate file ({e})"))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting} {path}: no certificate found (expected a PEM \"BEGIN CERTIFICATE\" block)"
        ));
    }
    Ok(certs)
}

fn read_file(setting: &str, path: &str) -> Result<Vec<u8>, String> {
    if path.is_empty() {
        return Err(format!("{setting} must be set to use TLS"));
    }
    std::fs::read(Path::new(path)).map_err(|e| format!("{setting} {path}: cannot read it ({e})"))
}

/// Build a server configuration from the settings; the error names the file (or setting) at fault
/// and why.
pub fn build(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    for p in &files.protocols {
        let v = match p.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &rustls::version::TLS12,
            "tlsv1.3" => &rustls::version::TLS13,
            _ => {
                return Err(format!(
                    "tls-protocols: {p} is not supported (TLSv1.2 and TLSv1.3 are)"
                ))
            }
        };
        if !versions.iter().any(|known| std::ptr::eq(*known, v)) {
            versions.push(v);
        }
    }
    if versions.is_empty() {
        return Err("tls-protocols names no protocol (TLSv1.2, TLSv1.3)".into());
    }
    let certs = read_certs("tls-cert-file", &files.cert_file)?;
    let key_bytes = read_file("tls-key-file", &files.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
        format!(
            "tls-key-file {}: no usable private key ({e}; expected a PEM PKCS#8, PKCS#1 or SEC1 key)",
            files.key_file
        )
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls-protocols: {e}"))?;
    let builder = match files.auth_clients.as_str() {
        "no" => builder.with_no_client_auth(),
        mode => {
            if files.ca_cert_file.is_empty() {
                return Err(format!(
                    "tls-ca-cert-file must be set when tls-auth-clients is {mode} (client \
                     certificates are verified against it); set tls-auth-clients no to accept \
                     clients without certificates"
                ));
            }
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs("tls-ca-cert-file", &files.ca_cert_file)? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "tls-ca-cert-file {}: not a usable CA certificate ({e})",
                        files.ca_cert_file
                    )
                })?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.into(),
                provider(),
            );
            let verifier = if mode == "optional" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("tls-ca-cert-file {}: {e}", files.ca_cert_file))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
            "tls-key-file {}: the private key does not match the public key of tls-cert-file {}",
            files.key_file, files.cert_file
        ),
        e => format!(
            "tls-cert-file {} / tls-key-file {}: {e}",
            files.cert_file, files.key_file
        ),
    })?;
    // Redis over TLS is not HTTP: no ALPN is negotiated. One ticket is enough for a resumption.
    config.send_tls13_tickets = 1;
    Ok(Arc::new(config))
}

/// The TLS configuration in force (None when no TLS port is configured).
#[derive(Default)]
pub struct TlsState {
    /// Taken only to clone the `Arc` (accept) or replace it (reload); never held across `.await`.
    config: RwLock<Option<Arc<rustls::ServerConfig>>>,
}

impl TlsState {
    /// A state serving `config`.
    pub fn new(config: Option<Arc<rustls::ServerConfig>>) -> TlsState {
        TlsState {
            config: RwLock::new(config),
        }
    }

    /// The acceptor for a connection accepted now.
    pub fn acceptor(&self) -> Option<tokio_rustls::TlsAcceptor> {
        self.config
            .read()
            .clone()
            .map(tokio_rustls::TlsAcceptor::from)
    }

    /// Whether TLS is in use (a TLS port is open).
    pub fn enabled(&self) -> bool {
        self.config.read().is_some()
    }

    /// Rebuild the configuration from the live settings and put it in force for new connections
    /// (CONFIG SET of a `tls-*` setting). Nothing changes when TLS is off or the build fails.
    pub fn reload(&self, live: &crate::state::LiveSettings) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        let config = build(&TlsFiles::of_live(live))?;
        *self.config.write() = Some(config);
        tracing::info!("TLS configuration reloaded");
        Ok(())
    }
}
