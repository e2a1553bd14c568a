//! A tiny authoritative UDP DNS responder for the world namespace: A/AAAA answers from a fixed
//! map, NXDOMAIN for unknown names, a rebinding name whose A answer alternates per query, and a
//! slow name whose answer comes late.

use std::collections::HashMap;
use std::net::{IpAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub enum Answer {
    /// Fixed addresses (A and AAAA answered from the matching family).
    Fixed(Vec<IpAddr>),
    /// Each A query gets the next address of the list, round robin.
    Alternate(Vec<IpAddr>),
    /// Answer after this delay.
    Slow(Duration, Vec<IpAddr>),
}

#[derive(Default)]
pub struct Zone {
    pub names: HashMap<String, Answer>,
    /// A queries seen per name.
    pub queries: HashMap<String, usize>,
    /// Every question seen (name, query type), answered or not.
    pub asked: Vec<(String, u16)>,
    /// A name server that is gone (off the VPN, a captive network): every query is dropped.
    pub drop_all: bool,
}

pub type SharedZone = Arc<Mutex<Zone>>;

fn parse_name(buf: &[u8], mut i: usize) -> Option<(String, usize)> {
    let mut labels = Vec::new();
    loop {
        let len = *buf.get(i)? as usize;
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(buf.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    Some((labels.join("."), i))
}

/// Serve forever on `sock` (call from a thread that is inside the world namespace).
pub fn serve(sock: UdpSocket, zone: SharedZone) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf) else { continue };
        let q = buf[..n].to_vec();
        let Some((name, end)) = parse_name(&q, 12) else { continue };
        if q.len() < end + 4 {
            continue;
        }
        let qtype = u16::from_be_bytes([q[end], q[end + 1]]);
        let answer = {
            let mut z = zone.lock().unwrap();
            z.asked.push((name.clone(), qtype));
            if z.drop_all {
                continue;
            }
            if qtype == 1 {
                *z.queries.entry(name.clone()).or_default() += 1;
            }
            let count = z.queries.get(&name).copied().unwrap_or(0);
            z.names.get(&name).cloned().map(|a| (a, count))
        };
        let sock2 = sock.try_clone().unwrap();
        let slow = matches!(answer, Some((Answer::Slow(..), _)));
        let respond = move || {
            let sock = sock2;
            // A fixed answer may be cached for a minute (as real zones allow); a rebinding name
            // says TTL 0, which a resolver must not cache.
            let (rcode, addrs, delay, ttl) = match answer {
                None => (3u16, vec![], None, 0u32),
                Some((Answer::Fixed(a), _)) => (0, a, None, 60),
                Some((Answer::Alternate(a), count)) => {
                    let pick = a[(count.max(1) - 1) % a.len()];
                    (0, vec![pick], None, 0)
                }
                Some((Answer::Slow(d, a), _)) => (0, a, Some(d), 0),
            };
            if let Some(d) = delay {
                std::thread::sleep(d);
            }
            let addrs: Vec<IpAddr> = addrs
                .into_iter()
                .filter(|a| matches!((a, qtype), (IpAddr::V4(_), 1) | (IpAddr::V6(_), 28)))
                .collect();
            let mut r = Vec::with_capacity(512);
            r.extend_from_slice(&q[0..2]);
            r.extend_from_slice(&(0x8400u16 | 0x0100 | 0x0080 | rcode).to_be_bytes());
            r.extend_from_slice(&1u16.to_be_bytes());
            r.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
            r.extend_from_slice(&[0, 0, 0, 0]);
            r.extend_from_slice(&q[12..end + 4]);
            for a in addrs {
                r.extend_from_slice(&[0xc0, 0x0c]);
                match a {
                    IpAddr::V4(v4) => {
                        r.extend_from_slice(&[0, 1, 0, 1]);
                        r.extend_from_slice(&ttl.to_be_bytes());
                        r.extend_from_slice(&[0, 4]);
                        r.extend_from_slice(&v4.octets());
                    }
                    IpAddr::V6(v6) => {
                        r.extend_from_slice(&[0, 28, 0, 1]);
                        r.extend_from_slice(&ttl.to_be_bytes());
                        r.extend_from_slice(&[0, 16]);
                        r.extend_from_slice(&v6.octets());
                    }
                }
            }
            let _ = sock.send_to(&r, from);
        };
        // Answer inline (fast, like a caching resolver); only the slow name gets a thread.
        if slow {
            std::thread::spawn(respond);
        } else {
            respond();
        }
    }
}
