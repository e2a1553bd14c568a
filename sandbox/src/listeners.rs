//! The TCP listeners of an isolated sandbox's network namespace, as the kernel reports them
//! (`sock_diag`, what `ss -ltn` asks), so the launcher can publish a server the agent starts
//! without asking the agent anything: the sandbox cannot lie about what it listens on, and a
//! listener it closes is gone from the next answer.
//!
//! The netlink socket is made by stage 2 *inside* the namespace and handed over with the
//! others ([`crate::netns::Role::Diag`]): a `sock_diag` socket answers for the namespace it was
//! made in, whoever holds it. *Why not `/proc/<pid>/net/tcp`*: that needs a process of the
//! namespace to stay alive and readable, and its text grows with every connection.
//!
//! The layouts are `linux/inet_diag.h`'s: `inet_diag_req_v2` (56 bytes) asks, each
//! `inet_diag_msg` (72 bytes) answers.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};

use crate::netlink::Socket;

/// `SOCK_DIAG_BY_FAMILY`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `TCP_LISTEN`, as a bit of `idiag_states`.
const TCP_LISTEN: u32 = 1 << 10;
const IPPROTO_TCP: u8 = 6;
/// The least an `inet_diag_msg` holds.
const MSG_LEN: usize = 72;

/// One listening socket inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listening {
    /// Where it listens (`0.0.0.0`, `::`, `127.0.0.1`, `::1`, … and the port).
    pub addr: SocketAddr,
    /// Its inode: `socket:[inode]` in the owner's `/proc/<pid>/fd`.
    pub inode: u64,
}

/// The namespace's `sock_diag` socket.
pub struct Listeners(Socket);

impl Listeners {
    /// Stage 2, inside the namespace.
    pub fn open() -> io::Result<OwnedFd> {
        let s = Socket::sock_diag()?;
        let fd = s.fd().try_clone()?;
        Ok(fd)
    }

    /// The launcher's end, from the socket stage 2 handed over; refused unless it is a netlink
    /// `sock_diag` socket (a process that is not stage 2 cannot hand one over, but the check
    /// costs nothing).
    pub fn from_handed(fd: OwnedFd) -> io::Result<Listeners> {
        if !is_sock_diag(&fd) {
            return Err(io::Error::other("not a sock_diag socket"));
        }
        Ok(Listeners(Socket::from_fd(fd)))
    }

    /// The inode of the namespace the socket lists (`net:[inode]` in `/proc/<pid>/ns/net` of
    /// its processes).
    pub fn namespace(&self) -> io::Result<u64> {
        let ns = crate::sys::socket_netns(self.0.fd().as_fd())?;
        Ok(nix::sys::stat::fstat(&ns)?.st_ino)
    }

    /// Every TCP socket listening inside, IPv4 and IPv6, ordered.
    pub fn list(&mut self) -> io::Result<Vec<Listening>> {
        let mut out = Vec::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            for msg in self.0.dump(SOCK_DIAG_BY_FAMILY, &request(family))? {
                out.extend(parse(&msg));
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// `inet_diag_req_v2` for the TCP listeners of `family`: every field but the family, the
/// protocol and the states is zero (no extension asked, any address).
fn request(family: u8) -> [u8; 56] {
    let mut r = [0u8; 56];
    r[0] = family;
    r[1] = IPPROTO_TCP;
    r[4..8].copy_from_slice(&TCP_LISTEN.to_ne_bytes());
    r
}

/// One `inet_diag_msg`: family at 0, the source port (big-endian) at 4, the source address at
/// 8 (16 bytes; IPv4 in the first four), the inode at 68.
fn parse(msg: &[u8]) -> Option<Listening> {
    if msg.len() < MSG_LEN {
        return None;
    }
    let port = u16::from_be_bytes([msg[4], msg[5]]);
    let mut a = [0u8; 16];
    a.copy_from_slice(&msg[8..24]);
    let ip = match i32::from(msg[0]) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(a)),
        _ => return None,
    };
    let inode = u32::from_ne_bytes([msg[68], msg[69], msg[70], msg[71]]);
    Some(Listening { addr: SocketAddr::new(ip, port), inode: u64::from(inode) })
}

pub(crate) fn is_sock_diag(fd: &OwnedFd) -> bool {
    let int = |opt| crate::sys::socket_int_option(fd.as_fd(), opt).ok();
    int(libc::SO_DOMAIN) == Some(libc::AF_NETLINK) && int(libc::SO_PROTOCOL) == Some(libc::NETLINK_SOCK_DIAG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_listeners_of_this_namespace_are_listed_and_other_sockets_are_not() {
        let l4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let p4 = l4.local_addr().unwrap();
        let l6 = TcpListener::bind("[::1]:0").ok();
        // A connected socket is not a listener.
        let client = std::net::TcpStream::connect(p4).unwrap();
        let mut diag = Listeners::from_handed(Listeners::open().unwrap()).unwrap();
        let seen = diag.list().unwrap();
        assert!(seen.iter().any(|l| l.addr == p4), "{p4} not in {seen:?}");
        if let Some(l6) = &l6 {
            let p6 = l6.local_addr().unwrap();
            assert!(seen.iter().any(|l| l.addr == p6), "{p6} not in {seen:?}");
        }
        let local = client.local_addr().unwrap();
        assert!(!seen.iter().any(|l| l.addr == local), "a connection listed as a listener");
        // The inode is the one the descriptor shows.
        let link = std::fs::read_link(format!("/proc/self/fd/{}", l4.as_raw_fd())).unwrap();
        let ours = seen.iter().find(|l| l.addr == p4).unwrap();
        assert_eq!(link.to_string_lossy(), format!("socket:[{}]", ours.inode));
        // This process's own namespace.
        let ns = std::fs::read_link("/proc/self/ns/net").unwrap();
        assert_eq!(ns.to_string_lossy(), format!("net:[{}]", diag.namespace().unwrap()));
        // Closed: gone from the next answer.
        drop(l4);
        assert!(!diag.list().unwrap().iter().any(|l| l.addr == p4));
    }

    #[test]
    fn only_a_sock_diag_socket_is_taken() {
        let tcp = OwnedFd::from(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        assert!(Listeners::from_handed(tcp).is_err());
        let route = Socket::route().unwrap().fd().try_clone().unwrap();
        assert!(Listeners::from_handed(route).is_err());
    }

    #[test]
    fn a_short_or_foreign_message_is_skipped() {
        assert_eq!(parse(&[0u8; 10]), None);
        let mut m = [0u8; MSG_LEN];
        m[0] = 99;
        assert_eq!(parse(&m), None);
        m[0] = libc::AF_INET as u8;
        m[4..6].copy_from_slice(&3000u16.to_be_bytes());
        m[8..12].copy_from_slice(&[127, 0, 0, 1]);
        m[68..72].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(parse(&m), Some(Listening { addr: "127.0.0.1:3000".parse().unwrap(), inode: 7 }));
    }
}
