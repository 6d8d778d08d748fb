//! TLS for both listeners, with rustls: a certificate and key from PEM
//! files, and optionally a CA whose certificates clients must present
//! (mutual TLS): a client without one is refused during the handshake.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Where the server's TLS material lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// With it, clients must present a certificate this CA signed (PEM).
    pub client_ca: Option<PathBuf>,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

fn read_certs(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError(format!("{}: {e}", path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{}: no certificate", path.display())));
    }
    Ok(certs)
}

impl TlsFiles {
    /// The rustls configuration, speaking HTTP/2 and HTTP/1.1 (gRPC-Web
    /// and the dashboard's browsers).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = read_certs(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| TlsError(format!("{}: {e}", self.key.display())))?;
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?;
        let builder = match &self.client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in read_certs(ca)? {
                    roots
                        .add(cert)
                        .map_err(|e| TlsError(format!("{}: {e}", ca.display())))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError(e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| TlsError(format!("{}: {e}", self.cert.display())))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
