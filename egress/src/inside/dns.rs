//! The DNS stub of the isolated network. Every query the sandbox sends to port 53 of any server,
//! over UDP or TCP, is redirected here; a name is looked up (outside, by the launcher) only when the rules could
//! allow a connection to it ([`Policy::lookup`]), and then only for A and AAAA.
//!
//! *Rebinding*: an answer holds only addresses that passed the same private-address check the
//! filter makes, and the answer is never what gets dialled: a redirected connection reaches
//! the filter by *name* (see `transparent`), and the filter connects to the address it checked
//! itself. An address the stub gave out only helps map a connection back to its name.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_resolver::proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, AAAA};
use hickory_resolver::proto::rr::{RData, Record, RecordType};
use ocsb_policy::egress::{Step, Verdict, finish_lookup};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::State;

/// The TTL of the stub's answers: short, so that a changed record is asked for again soon.
const ANSWER_TTL: u32 = 10;
/// Queries answered at once; more are dropped (the client asks again), so a flood of queries
/// for slow names cannot pile up lookups in the launcher.
const MAX_PENDING: usize = 256;

/// Connections over TCP served at once, and queries and time each may take: TCP is for the few
/// answers that do not fit a datagram, so a handful of clients is plenty, and idle ones must not
/// hold the launcher's connection slots.
pub(super) const TCP_CONNECTIONS: usize = 64;
const TCP_QUERIES: usize = 64;
const TCP_LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

/// The lookups in flight, over UDP and TCP together.
pub(super) fn lookups() -> Arc<tokio::sync::Semaphore> {
    Arc::new(tokio::sync::Semaphore::new(MAX_PENDING))
}

pub(super) async fn serve(sock: UdpSocket, st: Arc<State>) {
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf).await else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = st.lookups.clone().try_acquire_owned() else { continue };
        let (query, sock, st) = (buf[..n].to_vec(), sock.clone(), st.clone());
        tokio::spawn(async move {
            if let Some(reply) = answer(&st, &query).await.and_then(|(m, edns)| fit(m, edns)) {
                let _ = sock.send_to(&reply, from).await;
            }
            drop(slot);
        });
    }
}

/// How long a DNS-over-TCP connection may stay without a whole query before it is closed.
const TCP_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// One DNS-over-TCP connection: each message is prefixed with its length (two bytes), answered
/// in turn, with no truncation (a client asks over TCP for what did not fit a datagram).
pub(super) async fn serve_tcp(c: TcpStream, st: Arc<State>) {
    let _ = tokio::time::timeout(TCP_LIFETIME, serve_tcp_queries(c, st)).await;
}

async fn serve_tcp_queries(mut c: TcpStream, st: Arc<State>) {
    for _ in 0..TCP_QUERIES {
        let query = tokio::time::timeout(TCP_IDLE, async {
            let n = c.read_u16().await? as u64;
            // Grown as the bytes arrive: a length prefix alone reserves nothing.
            let mut q = Vec::new();
            (&mut c).take(n).read_to_end(&mut q).await?;
            if (q.len() as u64) < n {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            Ok::<_, std::io::Error>(q)
        });
        let Ok(Ok(query)) = query.await else { return };
        let Ok(_lookup) = st.lookups.clone().acquire_owned().await else { return };
        let Some(bytes) = answer(&st, &query).await.and_then(|(m, _)| m.to_vec().ok()) else { return };
        let Ok(len) = u16::try_from(bytes.len()) else { return };
        if c.write_all(&[&len.to_be_bytes()[..], &bytes].concat()).await.is_err() {
            return;
        }
    }
}

/// The reply to one query message, and whether the query had EDNS (`None`: not a query, no
/// reply).
async fn answer(st: &State, raw: &[u8]) -> Option<(Message, bool)> {
    let req = Message::from_vec(raw).ok()?;
    let edns = req.edns.is_some();
    respond(st, req).await.map(|m| (m, edns))
}

async fn respond(st: &State, req: Message) -> Option<Message> {
    if req.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
    resp.metadata.recursion_desired = req.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.queries = req.queries.clone();
    let query = match (req.metadata.op_code, req.queries.as_slice()) {
        (OpCode::Query, [q]) => q,
        (OpCode::Query, _) => return Some(with_code(resp, ResponseCode::FormErr)),
        _ => return Some(with_code(resp, ResponseCode::NotImp)),
    };
    let name = query.name().to_ascii().to_ascii_lowercase();
    let name = name.trim_end_matches('.');
    let step = match st.policy.lookup(name) {
        Ok(s) => s,
        Err(_) => return Some(with_code(resp, ResponseCode::Refused)),
    };
    if let Step::Decided(d) = &step
        && d.verdict == Verdict::Deny
    {
        st.log_refused_name(name, d);
        return Some(with_code(resp, ResponseCode::Refused));
    }
    let qtype = query.query_type();
    if !matches!(qtype, RecordType::A | RecordType::AAAA) {
        // Nothing but addresses is asked for: no TXT, MX or SRV records, so no data out
        // through the answers of a zone the rules allow.
        return Some(resp);
    }
    let addrs = st.resolver.resolve(name).await;
    let d = finish_lookup(step, &addrs);
    if d.verdict == Verdict::Deny {
        st.log_refused_name(name, &d);
        return Some(with_code(resp, ResponseCode::Refused));
    }
    for ip in addrs {
        let rdata = match (qtype, ip) {
            (RecordType::A, IpAddr::V4(v4)) => RData::A(A(v4)),
            (RecordType::AAAA, IpAddr::V6(v6)) => RData::AAAA(AAAA(v6)),
            _ => continue,
        };
        st.remember(ip, name);
        resp.answers.push(Record::from_rdata(query.name().clone(), ANSWER_TTL, rdata));
    }
    Some(resp)
}

/// The reply's bytes; one too large for a client without EDNS (512 bytes) goes without its
/// answers and with the truncation bit, as a name server does.
fn fit(mut m: Message, edns: bool) -> Option<Vec<u8>> {
    let bytes = m.to_vec().ok()?;
    if bytes.len() <= 512 || edns {
        return Some(bytes);
    }
    m.answers.clear();
    m.metadata.truncation = true;
    m.to_vec().ok()
}

fn with_code(mut m: Message, code: ResponseCode) -> Message {
    m.metadata.response_code = code;
    m
}
