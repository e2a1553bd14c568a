//! Who listens on a loopback port. OpenCode's per-run secret goes to the port OpenCode was told
//! to use; between the launcher's "port is free" check and OpenCode's bind, another local user
//! could bind it first and receive every proxied request with the secret. So before sending,
//! the launcher asks the kernel (`/proc/net/tcp`, `/proc/net/tcp6`) who owns the listener, and,
//! once connected, who owns the other end of that very connection (a listener checked before
//! connecting could be replaced in between).

use std::net::{IpAddr, SocketAddr};

/// One listening socket: address, port, owner uid.
#[derive(Debug, PartialEq, Eq)]
struct Listener {
    addr: IpAddr,
    port: u16,
    uid: u32,
}

fn parse_addr(hex: &str, v6: bool) -> Option<(IpAddr, u16)> {
    let (ip, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = if v6 {
        // Four 32-bit words, each printed in host byte order.
        let mut b = [0u8; 16];
        for i in 0..4 {
            let w = u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok()?;
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
        IpAddr::from(b)
    } else {
        IpAddr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes())
    };
    Some((ip, port))
}

/// One line of a `/proc/net/tcp[6]` table: local and remote address, state, owner uid.
/// IPv4-mapped IPv6 addresses are given as IPv4 (a dual-stack listener accepts IPv4 too).
struct Socket {
    local: SocketAddr,
    remote: SocketAddr,
    state: String,
    uid: u32,
}

fn sockets(table: &str, v6: bool) -> Vec<Socket> {
    let addr = |hex: &str| parse_addr(hex, v6).map(|(ip, port)| SocketAddr::new(ip.to_canonical(), port));
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, remote) = (addr(f.get(1)?)?, addr(f.get(2)?)?);
            Some(Socket { local, remote, state: f.get(3)?.to_string(), uid: f.get(7)?.parse().ok()? })
        })
        .collect()
}

/// The listening sockets among `all`.
fn listeners(all: Vec<Socket>) -> Vec<Listener> {
    all.into_iter()
        .filter(|s| s.state == "0A")
        .map(|s| Listener { addr: s.local.ip(), port: s.local.port(), uid: s.uid })
        .collect()
}

fn tables() -> Vec<Socket> {
    let mut all = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        if let Ok(t) = std::fs::read_to_string(file) {
            all.extend(sockets(&t, v6));
        }
    }
    all
}

/// The owner of the other end of our connection `local` → `peer`: the socket the listener's
/// owner accepted it on. Checked after connecting, it is the end that will read what we send,
/// whoever held the port a moment before.
fn peer_owner(all: &[Socket], local: SocketAddr, peer: SocketAddr) -> Option<u32> {
    // 01 ESTABLISHED; 03 SYN_RECV, where a listener with TCP_DEFER_ACCEPT (OpenCode's server)
    // keeps the connection until data arrives; the kernel lists the listener's owner for it.
    all.iter()
        .find(|s| (s.state == "01" || s.state == "03") && s.local == peer && s.remote == local)
        .map(|s| s.uid)
}

/// Refuse to send a secret over the connection `local` → `peer` unless its other end is this
/// user's. The kernel lists the accepted end once the handshake is through, which on loopback
/// can trail `connect()` by a moment: a few short retries.
pub fn check_peer(local: SocketAddr, peer: SocketAddr) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    let (local, peer) = (
        SocketAddr::new(local.ip().to_canonical(), local.port()),
        SocketAddr::new(peer.ip().to_canonical(), peer.port()),
    );
    for _ in 0..20 {
        match peer_owner(&tables(), local, peer) {
            Some(uid) if uid == me => return Ok(()),
            Some(uid) => return Err(format!("{peer} is answered by a socket of uid {uid}, not yours")),
            None => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
    Err(format!("the other end of the connection to {peer} is not listed by the kernel"))
}

/// Whether every listener that a connection to `to` could reach belongs to `uid`, and one does.
fn only_ours(all: &[Listener], to: SocketAddr, uid: u32) -> Result<(), String> {
    let reach: Vec<&Listener> = all
        .iter()
        .filter(|l| l.port == to.port() && (l.addr == to.ip() || l.addr.is_unspecified()))
        .collect();
    if let Some(l) = reach.iter().find(|l| l.uid != uid) {
        return Err(format!("{}:{} is held by uid {}, not by you", l.addr, l.port, l.uid));
    }
    if reach.is_empty() {
        return Err(format!("nothing listens on {to}"));
    }
    Ok(())
}

/// Refuse to send a secret to `to` unless only this user's sockets listen there.
pub fn check_ours(to: SocketAddr) -> Result<(), String> {
    only_ours(&listeners(tables()), to, nix::unistd::geteuid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1065 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1990        0 111 1
   1: 00000000:1066 00000000:0000 0A 00000000:00000000 00:00000000 00000000    65534     0 112 1
   2: 0100007F:1067 0100007F:9999 01 00000000:00000000 00:00000000 00000000  1990        0 113 1
";

    #[test]
    fn listeners_and_owners_are_read_from_the_table() {
        let l = listeners(sockets(TCP, false));
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!(l[0], Listener { addr: "127.0.0.1".parse().unwrap(), port: 4197, uid: 1990 });
        assert!(only_ours(&l, "127.0.0.1:4197".parse().unwrap(), 1990).is_ok());
        let e = only_ours(&l, "127.0.0.1:4198".parse().unwrap(), 1990).unwrap_err();
        assert!(e.contains("uid 65534"), "a wildcard listener of another user counts: {e}");
        assert!(
            only_ours(&l, "127.0.0.1:4199".parse().unwrap(), 1990).unwrap_err().contains("nothing listens")
        );
    }

    #[test]
    fn the_other_end_of_a_connection_is_found_by_both_addresses() {
        let all = sockets(TCP, false);
        let (peer, local) = ("127.0.0.1:4199".parse().unwrap(), "127.0.0.1:39321".parse().unwrap());
        assert_eq!(peer_owner(&all, local, peer), Some(1990));
        assert_eq!(peer_owner(&all, "127.0.0.1:1".parse().unwrap(), peer), None, "another connection");
        let mapped = "h\n 0: 0000000000000000FFFF00000100007F:1067 0000000000000000FFFF00000100007F:9999 01 0 0 0 65534 0 1 1\n";
        assert_eq!(peer_owner(&sockets(mapped, true), local, peer), Some(65534), "a dual-stack socket");
        let deferred = "h\n 0: 0100007F:1067 0100007F:9999 03 0 0 0 1990 0 0 1\n";
        assert_eq!(
            peer_owner(&sockets(deferred, false), local, peer),
            Some(1990),
            "SYN_RECV (deferred accept)"
        );
        let closing = "h\n 0: 0100007F:1067 0100007F:9999 06 0 0 0 1990 0 0 1\n";
        assert_eq!(peer_owner(&sockets(closing, false), local, peer), None, "TIME_WAIT is no peer");
    }

    #[test]
    fn ipv6_addresses_parse() {
        let t = "h\n 0: 00000000000000000000000001000000:1065 00000000000000000000000000000000:0000 0A 0 0 0 1990 0 1 1\n";
        let l = listeners(sockets(t, true));
        assert_eq!(l[0].addr, "::1".parse::<IpAddr>().unwrap());
    }
}
