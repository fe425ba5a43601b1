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
//! A connection's byte stream is either a plain [`Socket`] or a rustls stream over one; both are
//! a [`ClientStream`], which the RESP and memcached connection loops are generic over (as are a
//! replica's link to its primary, over tokio's `TcpStream`, plain or TLS).
//!
//! The client side (`tls-replication`: a replica's link to its primary) is built by
//! [`build_client`] from the same settings, as redis-server builds it: the primary's certificate
//! chain is verified against `tls-ca-cert-file` (the host name is not checked against the
//! certificate, as OpenSSL does not in Redis, which only sends it as SNI when it is a name, not
//! an address), and the replica presents `tls-client-cert-file`/`tls-client-key-file` when both
//! are set, else `tls-cert-file`/`tls-key-file`. It is built anew for each connection attempt,
//! so CONFIG SET of any of these settings holds for the next link.
//!
//! May import: `state` (the live settings, for a reload), `socket`; nothing about commands or
//! protocols.

use parking_lot::RwLock;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::socket::{Socket, SocketOps};

/// How long a client has to complete the TLS handshake before the connection is dropped (an
/// idle or slow peer must not hold a connection slot open).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection's byte stream, plain or TLS: what the connection loops read and write, plus the
/// TCP socket under it (for `TCP_NODELAY` and to notice a peer that hung up).
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The TCP socket under the stream.
    fn tcp(&self) -> &dyn SocketOps;
}

impl ClientStream for Socket {
    fn tcp(&self) -> &dyn SocketOps {
        self
    }
}

impl ClientStream for TcpStream {
    fn tcp(&self) -> &dyn SocketOps {
        self
    }
}

/// The socket under a TLS connection, read through a buffer: rustls asks for at most 4 KiB of
/// ciphertext at a time, so a pipelined batch of 16 KiB records would otherwise cost a read
/// system call per 4 KiB (this way, one per [`TLS_READ_BUFFER`]). Writes go straight through.
pub type TlsSocket = tokio::io::BufReader<Socket>;

/// The socket under a replica's TLS link to its primary, read through a buffer as [`TlsSocket`].
pub type TlsClientSocket = tokio::io::BufReader<TcpStream>;

/// The read buffer under a TLS connection: two full TLS records.
pub const TLS_READ_BUFFER: usize = 2 * (16 * 1024 + 256);

/// A TLS connection's stream.
pub type TlsStream = tokio_rustls::server::TlsStream<TlsSocket>;

impl ClientStream for TlsStream {
    fn tcp(&self) -> &dyn SocketOps {
        self.get_ref().0.get_ref()
    }
}

/// A replica's TLS link to its primary (see [`build_client`]).
pub type TlsClientStream = tokio_rustls::client::TlsStream<TlsClientSocket>;

impl ClientStream for TlsClientStream {
    fn tcp(&self) -> &dyn SocketOps {
        self.get_ref().0.get_ref()
    }
}

/// The TLS settings a server (and client) configuration is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: String,
    pub key_file: String,
    /// The certificate and key a replica presents to its primary (when both are set).
    pub client_cert_file: String,
    pub client_key_file: String,
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
            client_cert_file: config.tls_client_cert_file.clone(),
            client_key_file: config.tls_client_key_file.clone(),
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
            client_cert_file: live.tls_client_cert_file.lock().clone(),
            client_key_file: live.tls_client_key_file.lock().clone(),
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

/// The TLS versions `tls-protocols` names.
fn protocol_versions(
    protocols: &[String],
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    for p in protocols {
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
    Ok(versions)
}

/// The CA certificates of `tls-ca-cert-file`.
fn read_roots(ca_cert_file: &str) -> Result<Arc<rustls::RootCertStore>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs("tls-ca-cert-file", ca_cert_file)? {
        roots.add(cert).map_err(|e| {
            format!("tls-ca-cert-file {ca_cert_file}: not a usable CA certificate ({e})")
        })?;
    }
    Ok(Arc::new(roots))
}

/// Read the private key of a PEM file (`setting` names the setting in errors).
fn read_key(setting: &str, path: &str) -> Result<PrivateKeyDer<'static>, String> {
    let key_bytes = read_file(setting, path)?;
    PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
        format!(
            "{setting} {path}: no usable private key ({e}; expected a PEM PKCS#8, PKCS#1 or SEC1 key)"
        )
    })
}

/// Build a server configuration from the settings; the error names the file (or setting) at fault
/// and why.
pub fn build(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, String> {
    let versions = protocol_versions(&files.protocols)?;
    let certs = read_certs("tls-cert-file", &files.cert_file)?;
    let key = read_key("tls-key-file", &files.key_file)?;
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
            let roots = read_roots(&files.ca_cert_file)?;
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider());
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

/// Build the client configuration of a replica's link to its primary (`tls-replication`); the
/// error names the file (or setting) at fault and why.
///
/// As redis-server: the primary's certificate must chain to a CA of `tls-ca-cert-file` (and be
/// valid now, for server authentication), its host name is not compared with the certificate;
/// the replica presents `tls-client-cert-file`/`tls-client-key-file` when both are set, else
/// `tls-cert-file`/`tls-key-file` (the certificate must then allow client authentication: an
/// extendedKeyUsage with clientAuth, or none).
pub fn build_client(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, String> {
    let versions = protocol_versions(&files.protocols)?;
    if files.ca_cert_file.is_empty() {
        return Err(
            "tls-ca-cert-file must be set when tls-replication is yes (the primary's \
             certificate is verified against it)"
                .into(),
        );
    }
    let roots = read_roots(&files.ca_cert_file)?;
    let (cert_setting, key_setting, cert_file, key_file) =
        if !files.client_cert_file.is_empty() && !files.client_key_file.is_empty() {
            (
                "tls-client-cert-file",
                "tls-client-key-file",
                &files.client_cert_file,
                &files.client_key_file,
            )
        } else if !files.cert_file.is_empty() && !files.key_file.is_empty() {
            (
                "tls-cert-file",
                "tls-key-file",
                &files.cert_file,
                &files.key_file,
            )
        } else {
            return Err(
                "tls-replication needs a certificate to present to the primary: set \
                 tls-client-cert-file and tls-client-key-file, or tls-cert-file and tls-key-file"
                    .into(),
            );
        };
    let certs = read_certs(cert_setting, cert_file)?;
    let key = read_key(key_setting, key_file)?;
    let provider = provider();
    let verifier = Arc::new(ChainVerifier {
        roots,
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls-protocols: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(certs, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
                "{key_setting} {key_file}: the private key does not match the public key of \
                 {cert_setting} {cert_file}"
            ),
            e => format!("{cert_setting} {cert_file} / {key_setting} {key_file}: {e}"),
        })?;
    Ok(Arc::new(config))
}

/// The name a replica gives its primary in the handshake: a host name is sent as SNI, an address
/// is not (as Redis, which calls `SSL_set_tlsext_host_name` for names only).
pub fn server_name(host: &str) -> Result<rustls_pki_types::ServerName<'static>, String> {
    rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host} is neither a host name nor an address ({e})"))
}

/// Verifies a primary's certificate as Redis' `SSL_VERIFY_PEER` does: a chain to a trusted CA,
/// valid now, for server authentication; the name the replica connected to is not checked (a
/// Redis replica does not check it either, so certificates made for Redis replication keep
/// working, whatever address the primary is reached by).
#[derive(Debug)]
struct ChainVerifier {
    roots: Arc<rustls::RootCertStore>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for ChainVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Connect to a primary over TLS (`tls-replication`): the TCP connection, then the handshake,
/// bounded by [`HANDSHAKE_TIMEOUT`]. The error says which step failed and why.
pub async fn connect(
    config: Arc<rustls::ClientConfig>,
    host: &str,
    port: u16,
) -> Result<TlsClientStream, String> {
    let name = server_name(host)?;
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("connect to {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let socket = tokio::io::BufReader::with_capacity(TLS_READ_BUFFER, tcp);
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, socket)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(format!("TLS handshake with {host}:{port} failed: {e}")),
        Err(_) => Err(format!(
            "TLS handshake with {host}:{port} failed: no answer within {} seconds",
            HANDSHAKE_TIMEOUT.as_secs()
        )),
    }
}

/// The text of an I/O error on a replica's link, `step` saying what it was doing. A TLS alert
/// from the primary says what it most likely means: with TLS 1.3 a primary that refuses the
/// replica's certificate says so only after the handshake, at the replica's first read.
pub fn link_error(step: &str, e: &std::io::Error) -> String {
    use rustls::AlertDescription as A;
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::AlertReceived(
            alert @ (A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired
            | A::AccessDenied),
        )) => format!(
            "{step}: the primary refused this replica's TLS certificate (alert {alert:?}; it \
             verifies tls-client-cert-file, else tls-cert-file, against its tls-ca-cert-file)"
        ),
        _ => format!("{step}: {e}"),
    }
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
    /// With `tls-replication` on, the client configuration must build too (it is rebuilt for
    /// each link; this only refuses settings the next link could not use).
    pub fn reload(&self, live: &crate::state::LiveSettings) -> Result<(), String> {
        let files = TlsFiles::of_live(live);
        if live
            .tls_replication
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            build_client(&files)?;
        }
        if !self.enabled() {
            return Ok(());
        }
        let config = build(&files)?;
        *self.config.write() = Some(config);
        tracing::info!("TLS configuration reloaded");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::ServerName;

    #[test]
    fn a_replica_names_its_primary_by_host_name_only_when_it_has_one() {
        // rustls sends SNI for a DNS name, never for an address: Redis' rule.
        assert!(matches!(
            server_name("127.0.0.1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(server_name("::1"), Ok(ServerName::IpAddress(_))));
        assert!(matches!(
            server_name("primary.example"),
            Ok(ServerName::DnsName(_))
        ));
        assert!(server_name("not a host").is_err());
    }

    #[test]
    fn the_client_side_needs_a_ca_and_a_certificate_to_present() {
        let mut files = TlsFiles {
            cert_file: String::new(),
            key_file: String::new(),
            client_cert_file: String::new(),
            client_key_file: String::new(),
            ca_cert_file: String::new(),
            auth_clients: "yes".into(),
            protocols: vec!["TLSv1.2".into(), "TLSv1.3".into()],
        };
        let err = build_client(&files).unwrap_err();
        assert!(err.starts_with("tls-ca-cert-file must be set"), "{err}");
        files.ca_cert_file = "/nonexistent/ca.crt".into();
        let err = build_client(&files).unwrap_err();
        assert!(
            err.starts_with("tls-ca-cert-file /nonexistent/ca.crt: cannot read it"),
            "{err}"
        );
    }

    #[test]
    fn a_refused_certificate_is_named_in_the_link_error() {
        let refused = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA),
        );
        let text = link_error("read from the primary", &refused);
        assert!(
            text.starts_with("read from the primary: the primary refused this replica's TLS certificate (alert UnknownCA"),
            "{text}"
        );
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            link_error("read from the primary", &reset),
            format!("read from the primary: {reset}")
        );
    }
}
