//! The front's connection to OpenCode: a fresh one per request, only to a listener of the
//! user's own.

use hyper::Request;
use hyper::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::config::FrontConfig;
use super::listener;
use super::reply::BoxError;

/// Send one request to OpenCode on a fresh connection; the connection task lives as long as the
/// response body (and any upgrade) needs it.
pub async fn send<B>(cfg: &FrontConfig, req: Request<B>) -> Result<Response<Incoming>, BoxError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    // The request carries OpenCode's secret: only to a listener of the user's own.
    listener::check_ours(cfg.upstream)?;
    let stream = tokio::net::TcpStream::connect(cfg.upstream).await?;
    let (local, peer) = (stream.local_addr()?, stream.peer_addr()?);
    tokio::task::spawn_blocking(move || listener::check_peer(local, peer)).await??;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(sender.send_request(req).await?)
}
