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

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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
