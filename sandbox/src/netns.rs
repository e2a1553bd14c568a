//! The isolated network (`OCSB_NETWORK=isolated`): the sandbox gets a network namespace of its
//! own, owned by its user namespace (so building it needs no host privilege), holding only
//! `lo`. Nothing in it reaches the host's network or the host's loopback except through the
//! sockets stage 2 makes inside and hands to the launcher, which serves them outside:
//!
//! - a listener on `127.0.0.1:P` for each forwarded port (the filter's port first: the proxy
//!   variables stay what they are in netlock mode), relayed to the host's `127.0.0.1:P`;
//! - the transparent listener on port [`TRANSPARENT_PORT`]: every other TCP connection is
//!   redirected there by the namespace's own nftables table, and the launcher judges it by the
//!   egress rules (the original destination is the socket's `SO_ORIGINAL_DST`);
//! - the DNS stub's sockets on port 53: every UDP query, to any server, is redirected there;
//! - a `sock_diag` socket, with which the launcher sees what listens inside (to publish a
//!   server the agent starts on the host's loopback);
//! - the socket factory: on the launcher's request stage 2 makes an unconnected TCP socket
//!   inside and passes it out, so the launcher can connect *into* the namespace (OpenCode's
//!   port, for the web front). A socket belongs to the namespace it was made in.
//!
//! Everything else leaving `lo` is rejected by the table (`EPERM` for UDP, ICMP, raw). The
//! command holds no capability over the namespace, so it cannot change the table or routes.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, SockaddrStorage,
    recvmsg, sendmsg, socket, sockopt,
};
use serde::{Deserialize, Serialize};

use super::error::{Error, Result};
use super::netlink::{self, Attrs, Request, nft};
use super::sys;

/// The port inside where redirected connections arrive. Privileged, so nothing in the sandbox
/// (which holds no capability) can bind it first.
pub const TRANSPARENT_PORT: u16 = 1;
/// The DNS stub's port inside.
pub const DNS_PORT: u16 = 53;
/// How long the launcher waits for stage 2's sockets.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(20);

/// What stage 2 is asked to build; part of its request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NetRequest {
    /// The launcher's unix socket (in a private directory) that receives the sockets.
    pub channel: PathBuf,
    /// The host loopback ports relayed to the same port inside.
    pub forward: Vec<u16>,
}

/// What a socket handed out is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A listener on `127.0.0.1:port` inside, relayed to the host's `127.0.0.1:port`.
    Forward(u16),
    /// A listener that receives every other TCP connection (IPv4 or IPv6).
    Transparent,
    /// The DNS stub's UDP socket (IPv4 or IPv6).
    Dns,
    /// The DNS stub's TCP listener (IPv4 or IPv6): a truncated answer is asked again over TCP.
    DnsTcp,
    /// A `sock_diag` netlink socket of the namespace: the launcher lists the TCP listeners
    /// inside with it, to publish them ([`crate::listeners`]).
    Diag,
}

/// The namespace's nftables table, as `nft list table inet ocsb_isolated` prints it: the
/// contract `table_requests` implements (a test diffs the kernel's table against it). The
/// DNS redirect comes before the loopback exception, so a
/// resolver on the host's loopback (systemd-resolved's 127.0.0.53) is asked through the stub
/// too; `ct status dnat` lets the redirected connections (and their replies) through the
/// filter chain, which rejects everything else that is not loopback.
pub const TABLE: &str = "table inet ocsb_isolated {
  chain nat {
    type nat hook output priority -100; policy accept;
    udp dport 53 redirect to :53
    tcp dport 53 redirect to :53
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    meta l4proto tcp redirect to :1
  }
  chain filter {
    type filter hook output priority 0; policy accept;
    ct status dnat accept
    ip daddr 127.0.0.0/8 accept
    ip6 daddr ::1 accept
    reject with icmpx admin-prohibited
  }
}
";

fn fail(what: &str, e: impl std::fmt::Display) -> Error {
    Error::refused(
        format!("isolated network: {what}: {e}"),
        "OCSB_NETWORK=isolated needs a kernel with nf_tables, nf_nat and nft_redir, nft_reject_inet \
         and nft_ct (loaded, or loadable on the host: `sudo modprobe nft_redir nft_reject_inet nft_ct`); \
         or set OCSB_NETWORK=netlock",
    )
}

const TABLE_NAME: &str = "ocsb_isolated";

/// [`TABLE`] as netlink messages, one rule per line of it, in its order.
fn table_requests() -> Vec<Request> {
    use nft::*;
    const UDP: u8 = 17;
    const TCP: u8 = 6;
    const IPV4: u8 = 2; // NFPROTO_IPV4
    const IPV6: u8 = 10; // NFPROTO_IPV6
    let port = |p: u16| p.to_be_bytes();
    let l4proto = |p: u8| [meta(META_L4PROTO), cmp(CMP_EQ, &[p])];
    let dport = |p: u16| [payload(TRANSPORT_HEADER, 2, 2), cmp(CMP_EQ, &port(p))];
    let redirect_to = |p: u16| [immediate(&port(p)), redirect()];
    // `ip daddr 127.0.0.0/8`: the first byte of the IPv4 destination.
    let ip_loopback =
        || [meta(META_NFPROTO), cmp(CMP_EQ, &[IPV4]), payload(NETWORK_HEADER, 16, 1), cmp(CMP_EQ, &[127])];
    let ip6_loopback = || {
        [
            meta(META_NFPROTO),
            cmp(CMP_EQ, &[IPV6]),
            payload(NETWORK_HEADER, 24, 16),
            cmp(CMP_EQ, &Ipv6Addr::LOCALHOST.octets()),
        ]
    };
    let rule = |chain: &str, parts: &[&[Expr]]| -> Request {
        let exprs: Vec<Expr> = parts.iter().flat_map(|p| p.iter().cloned()).collect();
        nft::rule(TABLE_NAME, chain, &exprs)
    };
    vec![
        table(TABLE_NAME),
        chain(TABLE_NAME, "nat", "nat", HOOK_OUTPUT, -100),
        // udp dport 53 redirect to :53
        rule("nat", &[&l4proto(UDP), &dport(DNS_PORT), &redirect_to(DNS_PORT)]),
        // tcp dport 53 redirect to :53
        rule("nat", &[&l4proto(TCP), &dport(DNS_PORT), &redirect_to(DNS_PORT)]),
        // ip daddr 127.0.0.0/8 accept
        rule("nat", &[&ip_loopback(), &[accept()]]),
        // ip6 daddr ::1 accept
        rule("nat", &[&ip6_loopback(), &[accept()]]),
        // meta l4proto tcp redirect to :1
        rule("nat", &[&l4proto(TCP), &redirect_to(TRANSPARENT_PORT)]),
        chain(TABLE_NAME, "filter", "filter", HOOK_OUTPUT, 0),
        // ct status dnat accept
        rule(
            "filter",
            &[&[
                ct_status(),
                bitwise(&CT_STATUS_DNAT.to_ne_bytes(), &[0; 4]),
                cmp(CMP_NEQ, &[0; 4]),
                accept(),
            ]],
        ),
        // ip daddr 127.0.0.0/8 accept
        rule("filter", &[&ip_loopback(), &[accept()]]),
        // ip6 daddr ::1 accept
        rule("filter", &[&ip6_loopback(), &[accept()]]),
        // reject with icmpx admin-prohibited
        rule("filter", &[&[reject_icmpx(ICMPX_ADMIN_PROHIBITED)]]),
    ]
}

/// `ip link set lo up`: in a new namespace `lo` is always interface 1.
fn lo_up() -> Request {
    const RTM_NEWLINK: u16 = 16;
    const IFF_UP: u32 = 1;
    // ifinfomsg: family, pad, type, index, flags, change.
    let mut header = vec![0u8, 0, 0, 0];
    header.extend_from_slice(&1i32.to_ne_bytes());
    header.extend_from_slice(&IFF_UP.to_ne_bytes());
    header.extend_from_slice(&IFF_UP.to_ne_bytes());
    Request { kind: RTM_NEWLINK, flags: 0, header, attrs: Attrs::new() }
}

/// `ip route add default dev lo src <src>`. *Why `src`*: without it a datagram to a remote
/// address leaves from 0.0.0.0, and no reply (the DNS stub's, a reset) finds its way back.
fn default_route(src: IpAddr) -> Request {
    const RTM_NEWROUTE: u16 = 24;
    const RT_TABLE_MAIN: u8 = 254;
    const RTPROT_BOOT: u8 = 3;
    const RT_SCOPE_LINK: u8 = 253;
    const RTN_UNICAST: u8 = 1;
    const RTA_OIF: u16 = 4;
    const RTA_PREFSRC: u16 = 7;
    let (family, src) = match src {
        IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
    };
    // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    let mut header = vec![family, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_LINK, RTN_UNICAST];
    header.extend_from_slice(&0u32.to_ne_bytes());
    let attrs = Attrs::new().ne32(RTA_OIF, 1).bytes(RTA_PREFSRC, &src);
    Request { kind: RTM_NEWROUTE, flags: netlink::CREATE, header, attrs }
}

/// Stage 2, right after `unshare` (it holds every capability over the new namespaces): `lo` up,
/// default routes through `lo` (so that a connection to any address is routed, and then
/// redirected by the table rather than failing with `ENETUNREACH`), and the table. Needs
/// nothing of the request, so stage 2 does it while the launcher is still checking.
pub fn configure() -> Result<()> {
    let mut route = netlink::Socket::route().map_err(|e| fail("open a netlink socket", e))?;
    route.request(&lo_up()).map_err(|e| fail("set lo up", e))?;
    route
        .request(&default_route(Ipv4Addr::LOCALHOST.into()))
        .map_err(|e| fail("add the default route", e))?;
    // Without IPv6 (disabled on the host) nothing is routed over it: closed, not open.
    let _ = route.request(&default_route(Ipv6Addr::LOCALHOST.into()));
    let mut nf = netlink::Socket::netfilter().map_err(|e| fail("open a netfilter netlink socket", e))?;
    let (begin, end) = nft::batch_markers();
    nf.batch(&begin, &table_requests(), &end).map_err(|e| fail("load the nftables table", e))?;
    Ok(())
}

/// Whether an isolated sandbox's network can be built here: a user and network namespace of
/// this process's own, configured as stage 2 configures it ([`configure`]). For `ocsb doctor`,
/// in a process of its own that has one thread (`unshare` of a user namespace needs that) and
/// exits after.
pub fn probe() -> Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER | nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| {
            Error::kernel("unshare a user and network namespace", e.into(), super::error::USERNS_FIX)
        })?;
    configure()
}

/// Then, with the request: the sockets, and the hand-over. Returns the channel, kept open for
/// the socket factory.
pub fn hand_out(req: &NetRequest) -> Result<UnixStream> {
    let mut sockets: Vec<(Role, OwnedFd)> = Vec::new();
    for &port in &req.forward {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map_err(|e| fail(&format!("listen on {port}"), e))?;
        sockets.push((Role::Forward(port), l.into()));
    }
    let t4 = TcpListener::bind((Ipv4Addr::LOCALHOST, TRANSPARENT_PORT)).map_err(|e| fail("listen", e))?;
    sockets.push((Role::Transparent, t4.into()));
    let d4 = UdpSocket::bind((Ipv4Addr::LOCALHOST, DNS_PORT)).map_err(|e| fail("bind the DNS port", e))?;
    sockets.push((Role::Dns, d4.into()));
    let dt4 =
        TcpListener::bind((Ipv4Addr::LOCALHOST, DNS_PORT)).map_err(|e| fail("listen on the DNS port", e))?;
    sockets.push((Role::DnsTcp, dt4.into()));
    if let Ok(t6) = TcpListener::bind((Ipv6Addr::LOCALHOST, TRANSPARENT_PORT)) {
        sockets.push((Role::Transparent, t6.into()));
    }
    if let Ok(d6) = UdpSocket::bind((Ipv6Addr::LOCALHOST, DNS_PORT)) {
        sockets.push((Role::Dns, d6.into()));
    }
    if let Ok(dt6) = TcpListener::bind((Ipv6Addr::LOCALHOST, DNS_PORT)) {
        sockets.push((Role::DnsTcp, dt6.into()));
    }
    let diag = crate::listeners::Listeners::open().map_err(|e| fail("open a sock_diag socket", e))?;
    sockets.push((Role::Diag, diag));
    let chan = UnixStream::connect(&req.channel).map_err(|e| fail("connect to the launcher", e))?;
    let roles = serde_json::to_vec(&sockets.iter().map(|s| s.0).collect::<Vec<_>>())
        .map_err(|e| fail("encode", e))?;
    let fds: Vec<RawFd> = sockets.iter().map(|s| s.1.as_raw_fd()).collect();
    send_fds(&chan, &roles, &fds).map_err(|e| fail("hand the sockets to the launcher", e))?;
    Ok(chan)
}

/// The socket factory, in stage 2's supervisor: answers one request on the channel (a byte:
/// `4` or `6`) with an unconnected TCP socket of this namespace. `false` when the launcher
/// closed the channel.
pub fn serve_factory(chan: &UnixStream) -> bool {
    let mut b = [0u8; 1];
    match (&*chan).read(&mut b) {
        Ok(1) => {}
        _ => return false,
    }
    let family = if b[0] == b'6' { AddressFamily::Inet6 } else { AddressFamily::Inet };
    match socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None) {
        Ok(fd) => send_fds(chan, b"s", &[fd.as_raw_fd()]).is_ok(),
        Err(_) => send_fds(chan, b"e", &[]).is_ok(),
    }
}

fn send_fds(chan: &UnixStream, data: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let len = (data.len() as u32).to_le_bytes();
    let iov = [IoSlice::new(&len), IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(chan.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)?;
    Ok(())
}

/// One message: its data and the descriptors that came with it (owned from here on).
fn recv_fds(chan: &UnixStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut len = [0u8; 4];
    let mut data = vec![0u8; 64 * 1024];
    let mut space = nix::cmsg_space!([RawFd; 64]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut len), IoSliceMut::new(&mut data)];
        let msg = recvmsg::<()>(chan.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut fds = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                fds.extend(raw.into_iter().map(sys::adopt_received_fd));
            }
        }
        (msg.bytes, fds)
    };
    let want = u32::from_le_bytes(len) as usize;
    if n < 4 || n - 4 != want {
        return Err(std::io::Error::other("short message on the sandbox channel"));
    }
    data.truncate(want);
    Ok((data, fds))
}

/// The launcher's end: a unix socket in a fresh private directory, where stage 2 connects once
/// its sockets exist. *Why it is guarded*: any process of the user that finds it could hand
/// over sockets of its own (another sandbox, with `OCSB_TMP=shared`, can watch `/tmp`), and
/// the launcher would relay the host's loopback to them. So the directory is in
/// `$XDG_RUNTIME_DIR` when there is one (no sandbox sees `/run`), the peer must be stage 2
/// itself (its pid, from the kernel), the socket is gone as soon as stage 2 is connected, and
/// every descriptor handed over must be what was asked for.
pub struct Channel {
    dir: PathBuf,
    listener: Option<UnixListener>,
    forward: Vec<u16>,
}

/// `$XDG_RUNTIME_DIR` when it is a directory of this user's that nobody else may enter.
fn runtime_dir() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let d = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    let m = std::fs::symlink_metadata(&d).ok()?;
    let private = m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0;
    (d.is_absolute() && private).then_some(d)
}

/// A fresh directory only this user may enter, for a socket the launcher serves to one
/// sandbox: in `$XDG_RUNTIME_DIR` when it is private (no sandbox sees `/run`), else in the
/// temporary directory. `tag` starts its name.
pub fn private_dir(tag: &str) -> Result<PathBuf> {
    let base = runtime_dir().unwrap_or_else(std::env::temp_dir);
    let dir = (0..16)
        .map(|i| base.join(format!("{tag}-{}-{i}-{:x}", std::process::id(), rand_u32())))
        .find_map(|d| std::fs::DirBuilder::new().mode(0o700).create(&d).ok().map(|()| d))
        .ok_or_else(|| Error::io("create", &base, std::io::Error::other("no fresh directory name")))?;
    // A directory that was there already would have failed `create`; the mode is checked
    // anyway (a umask cannot widen it, but a shared /tmp deserves the look).
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| Error::io("inspect", &dir, e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(Error::refused(format!("{} is not private", dir.display()), "check /tmp"));
    }
    Ok(dir)
}

/// Whether `pid` is `ancestor` or a descendant of it (a few generations: `sg` may fork).
fn descends_from(pid: i32, ancestor: u32) -> bool {
    let mut p = pid;
    for _ in 0..4 {
        if p as u32 == ancestor {
            return true;
        }
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // `pid (comm) state ppid …`: the command name may hold spaces and parentheses.
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        match after.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

impl Channel {
    /// `forward`: the ports stage 2 is asked to listen on (the hand-over is checked against it).
    pub fn bind(forward: &[u16]) -> Result<Channel> {
        let io = |what: &'static str, p: &Path, e| Error::io(what, p, e);
        let dir = private_dir("ocsb-net")?;
        let sock = dir.join("s");
        let listener = UnixListener::bind(&sock).map_err(|e| io("listen on", &sock, e))?;
        Ok(Channel { dir, listener: Some(listener), forward: forward.to_vec() })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("s")
    }

    /// Removes the socket and its directory: nothing can connect any more.
    fn close(&mut self) {
        self.listener = None;
        let _ = std::fs::remove_file(self.path());
        let _ = std::fs::remove_dir(&self.dir);
    }

    /// Waits for the sockets of stage 2, whose pid is `child`; `None` when it exited first (a
    /// sandbox that failed to build: its status and message are what the caller reports).
    /// `alive` says whether it still runs. Other peers are turned away.
    pub fn receive(&mut self, child: u32, alive: &mut dyn FnMut() -> bool) -> Result<Option<Inside>> {
        let deadline = Instant::now() + HANDOVER_TIMEOUT;
        let late =
            || Error::refused("the sandbox did not hand over its network sockets in time", "report this");
        let listener = self.listener.as_ref().ok_or_else(late)?;
        listener.set_nonblocking(true).map_err(|e| Error::io("configure", self.path(), e))?;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => {
                    let cred = nix::sys::socket::getsockopt(&s, sockopt::PeerCredentials);
                    if cred.is_ok_and(|c| {
                        c.uid() == nix::unistd::geteuid().as_raw() && descends_from(c.pid(), child)
                    }) {
                        break s;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !alive() {
                        return Ok(None);
                    }
                    if Instant::now() > deadline {
                        return Err(late());
                    }
                    // Woken by the connection (the sockets are what the sandbox's start waits
                    // on when its command is short); `alive` is asked again at least every 20 ms.
                    let mut pfd = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut pfd, PollTimeout::from(20u8));
                }
                Err(e) => return Err(Error::io("accept on", self.path(), e)),
            }
        };
        self.close();
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let cfg = |e| Error::io("configure", self.path(), e);
        stream.set_nonblocking(false).map_err(cfg)?;
        stream.set_read_timeout(Some(left)).map_err(cfg)?;
        let (roles, fds) = recv_fds(&stream).map_err(|e| Error::io("receive from", self.path(), e))?;
        stream.set_read_timeout(None).map_err(cfg)?;
        let roles: Vec<Role> = serde_json::from_slice(&roles)
            .map_err(|e| Error::refused(format!("bad hand-over from stage 2: {e}"), "report this"))?;
        let sockets: Vec<(Role, OwnedFd)> = roles.into_iter().zip(fds).collect();
        check_handover(&sockets, &self.forward)?;
        Ok(Some(Inside { sockets, factory: Factory(Mutex::new(stream)) }))
    }
}

/// Every descriptor is the socket its role says, bound where stage 2 was asked to listen, and
/// nothing is missing or twice.
fn check_handover(sockets: &[(Role, OwnedFd)], forward: &[u16]) -> Result<()> {
    let bad = |why: String| Error::refused(format!("bad hand-over from stage 2: {why}"), "report this");
    let mut seen: Vec<(Role, bool)> = Vec::new();
    for (role, fd) in sockets {
        let (ty, port) = match role {
            Role::Diag if seen.contains(&(Role::Diag, false)) || !crate::listeners::is_sock_diag(fd) => {
                return Err(bad("Diag is not the socket asked for".into()));
            }
            Role::Diag => {
                seen.push((Role::Diag, false));
                continue;
            }
            Role::Forward(p) if forward.contains(p) => (SockType::Stream, *p),
            Role::Forward(p) => return Err(bad(format!("port {p} was not asked for"))),
            Role::Transparent => (SockType::Stream, TRANSPARENT_PORT),
            Role::Dns => (SockType::Datagram, DNS_PORT),
            Role::DnsTcp => (SockType::Stream, DNS_PORT),
        };
        let addr: Option<SockaddrStorage> = nix::sys::socket::getsockname(fd.as_raw_fd()).ok();
        let local = addr.and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from((v4.ip(), v4.port())))
                .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::from((v6.ip(), v6.port()))))
        });
        let got_ty = nix::sys::socket::getsockopt(fd, sockopt::SockType).ok();
        let listening =
            ty != SockType::Stream || nix::sys::socket::getsockopt(fd, sockopt::AcceptConn).unwrap_or(false);
        let ok = local.is_some_and(|l| l.ip().is_loopback() && l.port() == port)
            && got_ty == Some(ty)
            && listening;
        let v6 = local.is_some_and(|l| l.is_ipv6());
        if !ok || seen.contains(&(*role, v6)) {
            return Err(bad(format!("{role:?} is not the socket asked for")));
        }
        seen.push((*role, v6));
    }
    let has = |r: Role| seen.iter().any(|(s, v6)| *s == r && !v6);
    let all = [Role::Transparent, Role::Dns, Role::DnsTcp, Role::Diag].into_iter().all(has);
    if !(all && forward.iter().all(|p| has(Role::Forward(*p)))) {
        return Err(bad("a socket is missing".into()));
    }
    Ok(())
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.close();
    }
}

fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    u32::from_ne_bytes(b) ^ std::process::id().rotate_left(16)
}

/// What the launcher serves: the sockets made inside, and the factory.
pub struct Inside {
    pub sockets: Vec<(Role, OwnedFd)>,
    pub factory: Factory,
}

/// Makes TCP connections *into* the namespace (see the module comment).
pub struct Factory(Mutex<UnixStream>);

impl Factory {
    /// A connection to `127.0.0.1:port` inside the sandbox's namespace.
    pub fn connect(&self, port: u16) -> std::io::Result<TcpStream> {
        self.connect_to(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// A connection to `to` inside the sandbox's namespace (a loopback address: the namespace
    /// has no other).
    pub fn connect_to(&self, to: SocketAddr) -> std::io::Result<TcpStream> {
        let fd = {
            let chan = self.0.lock().unwrap_or_else(|p| p.into_inner());
            (&*chan).write_all(if to.is_ipv6() { b"6" } else { b"4" })?;
            let (data, mut fds) = recv_fds(&chan)?;
            match (data.as_slice(), fds.pop()) {
                (b"s", Some(fd)) => fd,
                _ => return Err(std::io::Error::other("the sandbox could not make a socket")),
            }
        };
        connect_within(&fd, to, CONNECT_IN_WITHIN)?;
        Ok(TcpStream::from(fd))
    }
}

/// How long a connection into the namespace may take to be accepted. *Why a bound*: a
/// listener of the agent's whose queue is full drops the handshake, and the kernel would
/// retry it for minutes, each wait holding one of the relay's threads.
pub const CONNECT_IN_WITHIN: Duration = Duration::from_secs(5);

/// Connects `fd` to `to`, waiting at most `within`; the descriptor is blocking again after.
fn connect_within(fd: &OwnedFd, to: SocketAddr, within: Duration) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    match nix::sys::socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(to)) {
        Ok(()) => {}
        Err(nix::errno::Errno::EINPROGRESS) => {
            let ms = u16::try_from(within.as_millis()).unwrap_or(u16::MAX);
            let mut pfd = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
            if poll(&mut pfd, PollTimeout::from(ms))? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{to} inside the sandbox did not accept within {}s", within.as_secs()),
                ));
            }
            let err = sys::socket_int_option(fd.as_fd(), libc::SO_ERROR)?;
            if err != 0 {
                return Err(std::io::Error::from_raw_os_error(err));
            }
        }
        Err(e) => return Err(e.into()),
    }
    fcntl(fd, FcntlArg::F_SETFL(flags))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection into the namespace that the listener never takes (its queue is full: the
    /// kernel drops the handshake) ends after the bound, not minutes later; one it takes is
    /// made, and blocking again.
    #[test]
    fn a_connection_in_that_is_not_accepted_ends_at_the_bound() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        let fresh = || socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
        let ok = fresh();
        connect_within(&ok, to, Duration::from_secs(5)).unwrap();
        let flags = nix::fcntl::fcntl(&ok, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert_eq!(flags & libc::O_NONBLOCK, 0, "blocking again");
        // Fill the accept queue (never accepted), then one more waits for nothing.
        let mut held = Vec::new();
        let mut timed_out = None;
        for _ in 0..4096 {
            let fd = fresh();
            let t = Instant::now();
            match connect_within(&fd, to, Duration::from_millis(300)) {
                Ok(()) => held.push(fd),
                Err(e) => {
                    timed_out = Some((e.kind(), t.elapsed()));
                    break;
                }
            }
        }
        let (kind, took) = timed_out.expect("the accept queue never filled");
        assert_eq!(kind, std::io::ErrorKind::TimedOut);
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    /// The namespace [`configure`] builds is the one `ip` and `nft` build from [`TABLE`]: in a
    /// user and network namespace of its own (`unshare -Urn`), this test runs again as a child,
    /// configures, dumps the kernel's table, routes and `lo`, then builds them again with the
    /// tools and dumps them again.
    #[cfg(feature = "host-tests")]
    #[test]
    fn the_namespace_is_the_one_the_tools_build_from_the_contract() {
        const CHILD: &str = "OCSB_TEST_NETNS_OUT";
        let name = "netns::tests::the_namespace_is_the_one_the_tools_build_from_the_contract";
        let run = |args: &[&str], input: &str| -> String {
            let mut c = std::process::Command::new(args[0]);
            c.args(&args[1..]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            let o = child.wait_with_output().unwrap();
            assert!(o.status.success(), "{args:?}");
            String::from_utf8(o.stdout).unwrap()
        };
        let dump = || {
            [
                run(&["nft", "list", "ruleset"], ""),
                run(&["ip", "-4", "route", "show", "table", "all"], ""),
                run(&["ip", "-6", "route", "show", "table", "all"], ""),
                run(&["ip", "-o", "link", "show", "lo"], ""),
            ]
            .join("--\n")
        };
        if let Some(out) = std::env::var_os(CHILD) {
            configure().unwrap();
            let ours = dump();
            run(&["nft", "flush", "ruleset"], "");
            run(&["ip", "link", "set", "lo", "down"], "");
            run(&["ip", "-6", "route", "flush", "table", "all"], "");
            run(&["ip", "link", "set", "lo", "up"], "");
            run(&["ip", "route", "add", "default", "dev", "lo", "src", "127.0.0.1"], "");
            run(&["ip", "-6", "route", "add", "default", "dev", "lo", "src", "::1"], "");
            run(&["nft", "-f", "-"], TABLE);
            std::fs::write(out, format!("{ours}==\n{}", dump())).unwrap();
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("dumps");
        let exe = std::env::current_exe().unwrap();
        let o = std::process::Command::new("unshare")
            .arg("-Urn")
            .arg(exe)
            .args(["--exact", name, "--test-threads=1"])
            .env(CHILD, &out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let (ours, tools) = text.split_once("==\n").unwrap();
        assert_eq!(ours, tools, "configure() built another namespace than ip and nft build");
        for line in [
            "udp dport 53 redirect to :53",
            "meta l4proto tcp redirect to :1",
            "ct status dnat accept",
            "reject with icmpx admin-prohibited",
            "default dev lo scope link src 127.0.0.1",
            "LOWER_UP",
        ] {
            assert!(ours.contains(line), "{line} missing:\n{ours}");
        }
    }

    #[test]
    fn a_peer_that_is_not_stage_2_is_turned_away() {
        let mut chan = Channel::bind(&[3128]).unwrap();
        let path = chan.path();
        // A process of this user (this very test) that is not the sandbox's stage 2 connects
        // first and hands over a listener of its own as the filter's port.
        let rogue = std::thread::spawn(move || {
            let s = UnixStream::connect(&path).unwrap();
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
            let roles = serde_json::to_vec(&[Role::Forward(3128)]).unwrap();
            let _ = send_fds(&s, &roles, &[l.as_raw_fd()]);
            std::thread::sleep(Duration::from_millis(300));
        });
        let mut polls = 0;
        // Stage 2 (a pid that is not ours) never comes; the rogue is not taken meanwhile.
        let got = chan.receive(u32::MAX, &mut || {
            polls += 1;
            polls < 40
        });
        assert!(matches!(got, Ok(None)), "the rogue's sockets were taken");
        rogue.join().unwrap();
    }

    #[test]
    fn the_hand_over_must_be_what_was_asked_for() {
        let l = |port| TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(OwnedFd::from);
        let any = l(0).unwrap();
        let port = nix::sys::socket::getsockname::<SockaddrStorage>(any.as_raw_fd())
            .unwrap()
            .as_sockaddr_in()
            .unwrap()
            .port();
        // Bound elsewhere than the role says: refused.
        let wrong = [(Role::Forward(port + 1), any.try_clone().unwrap())];
        assert!(check_handover(&wrong, &[port + 1]).is_err());
        // A port that was not asked for: refused.
        let unasked = [(Role::Forward(port), any.try_clone().unwrap())];
        assert!(check_handover(&unasked, &[]).is_err());
        // The right forward, but the transparent and DNS sockets missing: refused.
        assert!(check_handover(&unasked, &[port]).is_err());
        // A UDP socket posing as a TCP listener: refused.
        let udp = OwnedFd::from(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
        assert!(check_handover(&[(Role::Transparent, udp)], &[]).is_err());
        assert!(descends_from(std::process::id() as i32, std::process::id()));
        assert!(!descends_from(std::process::id() as i32, u32::MAX));
    }
}
