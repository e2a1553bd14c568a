//! The TLS client the launcher's own outbound connections use (the key broker's to a model
//! provider, the Docker gateway's pulls): the system's trust store, HTTP/1.1 by ALPN.

use std::sync::Arc;

use crate::error::{Error, Result};

/// The TLS client: the system's roots (`SSL_CERT_FILE`/`SSL_CERT_DIR` override them, as for
/// OpenSSL), HTTP/1.1 by ALPN.
pub fn client_config() -> Result<Arc<rustls::ClientConfig>> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(Error::failed(
            "found no trusted TLS certificates on this system",
            "install the ca-certificates package (or point SSL_CERT_FILE at a PEM bundle)",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::failed(format!("TLS setup: {e}"), "report this"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}
