//! Who listens on a loopback port. OpenCode's per-run secret goes to the port OpenCode was told
//! to use; between the launcher's "port is free" check and OpenCode's bind, another local user
//! could bind it first and receive every proxied request with the secret. So before sending,
//! the launcher asks the kernel (`/proc/net/tcp`, `/proc/net/tcp6`) who owns the listener.

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

/// The listening sockets in a `/proc/net/tcp[6]` table.
fn listeners(table: &str, v6: bool) -> Vec<Listener> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(3) != Some(&"0A") {
                return None;
            }
            let (addr, port) = parse_addr(f.get(1)?, v6)?;
            Some(Listener { addr, port, uid: f.get(7)?.parse().ok()? })
        })
        .collect()
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
    let mut all = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        if let Ok(t) = std::fs::read_to_string(file) {
            all.extend(listeners(&t, v6));
        }
    }
    only_ours(&all, to, nix::unistd::geteuid().as_raw())
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
        let l = listeners(TCP, false);
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
    fn ipv6_addresses_parse() {
        let t = "h\n 0: 00000000000000000000000001000000:1065 00000000000000000000000000000000:0000 0A 0 0 0 1990 0 1 1\n";
        let l = listeners(t, true);
        assert_eq!(l[0].addr, "::1".parse::<IpAddr>().unwrap());
    }
}
