//! HTTP requests the gateway makes for a pull, each connection through the project's filter.
//!
//! *Why through the filter*: a registry answers with a token service to ask and with redirects
//! for its blobs, to hosts that are known only then. Each hop here is a new connection to the
//! filter on the host's loopback — a `CONNECT host:port` for HTTPS, an absolute-form request
//! for plain HTTP — so the filter judges it by the project's rules, dials the address it judged
//! (no second lookup), and logs it, exactly as for the agent's own traffic. A refusal carries
//! the filter's `X-Egress-Decision`, which names the rule.
//!
//! What a remote side answers is never handed on as it is: callers get a status, the headers,
//! and a body they read within a bound; an error says what failed in the gateway's words.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use url::Url;

use ocsb_policy::docker::distribution::MAX_REDIRECTS;

/// How long a connection to the filter, and the remote side's answer to a request, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a body may stall between two pieces.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest answer head the filter may send to a `CONNECT`.
const MAX_CONNECT_HEAD: usize = 16 << 10;

/// Why a request failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The filter refused the connection to `authority`; `decision` is its rule annotation.
    Refused { authority: String, decision: String },
    /// Anything else, in words safe to show the agent (no remote body).
    Failed(String),
}

impl Failure {
    fn failed(what: impl Into<String>) -> Failure {
        Failure::Failed(what.into())
    }
}

/// An answer: the URL it came from (after redirects), its status and headers, and its body.
pub(super) struct Answer {
    pub url: Url,
    pub status: u16,
    pub headers: HeaderMap,
    body: Incoming,
}

impl Answer {
    pub fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The whole body, refused past `max` bytes.
    pub async fn bytes(mut self, max: usize) -> Result<Vec<u8>, Failure> {
        let mut out = Vec::new();
        while let Some(piece) = self.next().await? {
            if out.len() + piece.len() > max {
                return Err(Failure::failed(format!(
                    "{} answered more than {max} bytes",
                    host_of(&self.url)
                )));
            }
            out.extend_from_slice(&piece);
        }
        Ok(out)
    }

    /// The body's next piece, `None` at its end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, Failure> {
        loop {
            let frame = tokio::time::timeout(IDLE_TIMEOUT, self.body.frame())
                .await
                .map_err(|_| Failure::failed(format!("{} stopped sending", host_of(&self.url))))?;
            match frame {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(Failure::failed(format!("reading from {}: {e}", host_of(&self.url))));
                }
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

/// `host:port` of a URL, as the filter logs a connection to it.
pub(super) fn host_of(url: &Url) -> String {
    let port = url.port_or_known_default().unwrap_or(0);
    match url.host() {
        Some(url::Host::Ipv6(a)) => format!("[{a}]:{port}"),
        Some(h) => format!("{h}:{port}"),
        None => String::new(),
    }
}

/// Requests through the filter listening on `filter` (the host's loopback).
pub(super) struct Via {
    pub filter: SocketAddr,
    pub tls: Arc<rustls::ClientConfig>,
}

impl Via {
    /// A `GET` of `url`, following up to [`MAX_REDIRECTS`] redirects, each through the filter.
    /// `authorization` goes to `url`'s own host only: a redirect elsewhere (a CDN's signed URL)
    /// is asked without it, as Docker does.
    pub async fn get(
        &self,
        url: Url,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<Answer, Failure> {
        let origin = host_of(&url);
        let mut at = url;
        for _ in 0..=MAX_REDIRECTS {
            let auth = authorization.filter(|_| host_of(&at) == origin);
            let answer = self.once(&at, accept, auth).await?;
            if !matches!(answer.status, 301 | 302 | 303 | 307 | 308) {
                return Ok(answer);
            }
            let location = answer
                .header(header::LOCATION)
                .ok_or_else(|| Failure::failed(format!("{} redirected nowhere", host_of(&at))))?;
            let next = at.join(location).map_err(|_| {
                Failure::failed(format!("{} redirected to something not a URL", host_of(&at)))
            })?;
            if !matches!(next.scheme(), "http" | "https") || next.host().is_none() {
                return Err(Failure::failed(format!(
                    "{} redirected to a URL that is not http(s)",
                    host_of(&at)
                )));
            }
            at = next;
        }
        Err(Failure::failed(format!("more than {MAX_REDIRECTS} redirects from {origin}")))
    }

    /// One request, on a connection of its own.
    async fn once(&self, url: &Url, accept: Option<&str>, auth: Option<&str>) -> Result<Answer, Failure> {
        let authority = host_of(url);
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(self.filter))
            .await
            .map_err(|_| Failure::failed("the filter did not accept a connection in time"))?
            .map_err(|e| Failure::failed(format!("cannot reach the filter at {}: {e}", self.filter)))?;
        let _ = tcp.set_nodelay(true);
        // Origin form inside a tunnel; absolute form to the filter as a plain proxy.
        let target = if url.scheme() == "https" { origin_form(url) } else { url.as_str().to_string() };
        let mut req = hyper::Request::get(target)
            .header(header::HOST, value(&authority)?)
            .header(header::USER_AGENT, HeaderValue::from_static("ocsb-docker-gateway"));
        if let Some(a) = accept {
            req = req.header(header::ACCEPT, value(a)?);
        }
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, value(a)?);
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(|e| Failure::failed(format!("request to {authority}: {e}")))?;
        let answer = if url.scheme() == "https" {
            let mut tcp = tcp;
            tunnel(&mut tcp, &authority).await?;
            let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|_| Failure::failed(format!("{host} is not a TLS server name")))?;
            let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| Failure::failed(format!("TLS with {authority}: {e}")))?;
            send(tls, req, &authority).await?
        } else {
            let answer = send(tcp, req, &authority).await?;
            // The filter's own refusal of a plain request names its rule.
            if let Some(d) = answer.headers().get("x-egress-decision").and_then(|v| v.to_str().ok())
                && answer.status().as_u16() == 403
            {
                return Err(Failure::Refused { authority, decision: d.to_string() });
            }
            answer
        };
        let (parts, body) = answer.into_parts();
        Ok(Answer { url: url.clone(), status: parts.status.as_u16(), headers: parts.headers, body })
    }
}

fn value(v: &str) -> Result<HeaderValue, Failure> {
    HeaderValue::from_str(v).map_err(|_| Failure::failed("a header value the registry named is not valid"))
}

/// `/path?query` of a URL.
fn origin_form(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

/// Asks the filter for a tunnel to `authority`; `Refused` with its decision when it says no.
async fn tunnel(tcp: &mut TcpStream, authority: &str) -> Result<(), Failure> {
    tcp.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| Failure::failed(format!("the filter: {e}")))?;
    let head = tokio::time::timeout(ANSWER_TIMEOUT, read_head(tcp))
        .await
        .map_err(|_| Failure::failed(format!("the filter did not answer the connection to {authority}")))??;
    let head = super::http::parse_response(&head)
        .map_err(|e| Failure::failed(format!("the filter's answer to the connection to {authority}: {e}")))?;
    if head.status == 200 {
        return Ok(());
    }
    let status = head.status;
    let decision = head.header("x-egress-decision").map(str::to_string);
    Err(match decision {
        Some(decision) => Failure::Refused { authority: authority.to_string(), decision },
        None => {
            Failure::failed(format!("the filter could not connect to {authority} (it answered {status})"))
        }
    })
}

/// The answer head up to its blank line, read byte by byte so that nothing of the tunnel after
/// it is taken.
async fn read_head(s: &mut (impl AsyncRead + Unpin)) -> Result<Vec<u8>, Failure> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let b = s.read_u8().await.map_err(|e| Failure::failed(format!("the filter's answer: {e}")))?;
        head.push(b);
        if head.len() > MAX_CONNECT_HEAD {
            return Err(Failure::failed("the filter's answer head is too long"));
        }
    }
    Ok(head)
}

/// One HTTP/1.1 request on `io`.
async fn send(
    io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    req: hyper::Request<Empty<Bytes>>,
    authority: &str,
) -> Result<hyper::Response<Incoming>, Failure> {
    let broken = |e: hyper::Error| Failure::failed(format!("HTTP with {authority}: {e}"));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(broken)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tokio::time::timeout(ANSWER_TIMEOUT, sender.send_request(req))
        .await
        .map_err(|_| Failure::failed(format!("{authority} did not answer in time")))?
        .map_err(broken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_named_as_the_filter_logs_them() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert_eq!(host_of(&u("https://ghcr.io/v2/")), "ghcr.io:443");
        assert_eq!(host_of(&u("http://192.0.2.1/v2/")), "192.0.2.1:80");
        assert_eq!(host_of(&u("http://[::1]:5000/v2/")), "[::1]:5000");
        assert_eq!(origin_form(&u("https://a.test/t?service=x&scope=y")), "/t?service=x&scope=y");
    }

    /// The filter's refusal of a tunnel names its rule; a tunnel it opens leaves the bytes
    /// after its answer head unread.
    #[test]
    fn a_refused_tunnel_names_the_rule() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let at = l.local_addr().unwrap();
            tokio::spawn(async move {
                for answer in [
                    "HTTP/1.1 403 Forbidden\r\nX-Egress-Decision: block:project:1\r\nContent-Length: 0\r\n\r\n",
                    "HTTP/1.1 200 Connection established\r\n\r\nrest",
                    "HTTP/1.1 502 Bad Gateway\r\n\r\n",
                ] {
                    let (mut s, _) = l.accept().await.unwrap();
                    let mut buf = [0u8; 256];
                    let _ = s.read(&mut buf).await;
                    s.write_all(answer.as_bytes()).await.unwrap();
                }
            });
            let mut c = TcpStream::connect(at).await.unwrap();
            match tunnel(&mut c, "192.0.2.2:443").await {
                Err(Failure::Refused { authority, decision }) => {
                    assert_eq!((authority.as_str(), decision.as_str()), ("192.0.2.2:443", "block:project:1"))
                }
                other => panic!("{other:?}"),
            }
            let mut c = TcpStream::connect(at).await.unwrap();
            tunnel(&mut c, "192.0.2.1:443").await.unwrap();
            let mut rest = [0u8; 4];
            c.read_exact(&mut rest).await.unwrap();
            assert_eq!(&rest, b"rest");
            let mut c = TcpStream::connect(at).await.unwrap();
            assert!(matches!(tunnel(&mut c, "x:443").await, Err(Failure::Failed(m)) if m.contains("502")));
        });
    }
}
