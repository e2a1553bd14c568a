//! The broker's connection to a provider: TCP from the launcher (outside the sandbox, so the
//! provider's host need not be allowed for the agent), TLS with the system's trust store for
//! `https://` base URLs, HTTP/1.1 on top.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::keys::BaseUrl;
use crate::error::{Error, Result};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The TLS client: the system's roots (`SSL_CERT_FILE`/`SSL_CERT_DIR` override them, as for
/// OpenSSL), HTTP/1.1 by ALPN.
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(Error::failed(
            "the model-key broker found no trusted TLS certificates on this system",
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

/// A fresh HTTP/1.1 connection to `base`, its driver spawned on the runtime.
pub async fn connect(
    base: &BaseUrl,
    tls: &Arc<rustls::ClientConfig>,
) -> std::result::Result<SendRequest<http_body_util::Full<bytes::Bytes>>, BoxError> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((base.host.as_str(), base.port)))
        .await
        .map_err(|_| {
            format!("no connection to {}:{} within {} s", base.host, base.port, CONNECT_TIMEOUT.as_secs())
        })??;
    let _ = tcp.set_nodelay(true);
    if base.tls {
        let name = rustls::pki_types::ServerName::try_from(base.host.clone())?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp).await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    } else {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }
}

/// The reply's body, for the caller to stream.
pub type Reply = hyper::Response<Incoming>;
