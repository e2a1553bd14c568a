//! Netlink, the kernel's own interface to routes and nftables, for the isolated network's
//! namespace ([`crate::netns::configure`]): messages are encoded here and sent from stage 2
//! itself. *Why not `ip(8)` and `nft(8)`*: running them meant three programs started with a
//! capability over the namespace, and about 5 ms of a start on a small machine; the namespace
//! needs one link change, two routes and one fixed table, which are a few hundred bytes.
//!
//! Encoding only: what goes into the namespace is [`crate::netns`]'s. The attribute numbers are
//! those of `linux/rtnetlink.h`, `linux/netfilter/nfnetlink.h` and `linux/netfilter/nf_tables.h`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send, setsockopt,
    socket, sockopt,
};
use nix::sys::time::TimeVal;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// The most messages one dump may answer with: a namespace whose sockets run past it is
/// reported as an error rather than read without end.
const DUMP_MESSAGES: usize = 65_536;
const NLA_F_NESTED: u16 = 0x8000;
/// How long the kernel may take to answer: a netlink socket that never answers must fail the
/// start with a message, not hang it.
const ANSWER_WITHIN: TimeVal = TimeVal::new(5, 0);

/// Netlink attributes (type, length, value; each padded to four bytes), nested or not.
#[derive(Default, Clone)]
pub struct Attrs(Vec<u8>);

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    pub fn bytes(mut self, kind: u16, value: &[u8]) -> Attrs {
        let len = 4 + value.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize(self.0.len().next_multiple_of(4), 0);
        self
    }

    /// A string, NUL-terminated as the kernel's `NLA_STRING` policy takes it.
    pub fn str(self, kind: u16, value: &str) -> Attrs {
        let mut v = value.as_bytes().to_vec();
        v.push(0);
        self.bytes(kind, &v)
    }

    /// Big-endian, as nf_tables reads its numbers (`nla_get_be32`).
    pub fn be32(self, kind: u16, value: u32) -> Attrs {
        self.bytes(kind, &value.to_be_bytes())
    }

    /// Host order, as rtnetlink reads its numbers.
    pub fn ne32(self, kind: u16, value: u32) -> Attrs {
        self.bytes(kind, &value.to_ne_bytes())
    }

    pub fn nested(self, kind: u16, inner: Attrs) -> Attrs {
        self.bytes(kind | NLA_F_NESTED, &inner.0)
    }
}

/// One request: its type, its flags beyond `NLM_F_REQUEST | NLM_F_ACK`, the fixed header of its
/// family (`ifinfomsg`, `rtmsg`, `nfgenmsg`) and its attributes.
pub struct Request {
    pub kind: u16,
    pub flags: u16,
    pub header: Vec<u8>,
    pub attrs: Attrs,
}

impl Request {
    fn encode(&self, seq: u32, ack: bool, out: &mut Vec<u8>) {
        let len = 16 + self.header.len() + self.attrs.0.len();
        let flags = NLM_F_REQUEST | self.flags | if ack { NLM_F_ACK } else { 0 };
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&self.kind.to_ne_bytes());
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&self.header);
        out.extend_from_slice(&self.attrs.0);
    }
}

/// `NLM_F_CREATE | NLM_F_EXCL`: a new object, an error if it exists.
pub const CREATE: u16 = NLM_F_CREATE | NLM_F_EXCL;
/// `NLM_F_CREATE | NLM_F_APPEND`: a rule after the chain's others.
pub const APPEND: u16 = NLM_F_CREATE | NLM_F_APPEND;

/// A netlink socket to the kernel.
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    pub fn route() -> io::Result<Socket> {
        Socket::open(SockProtocol::NetlinkRoute)
    }

    pub fn netfilter() -> io::Result<Socket> {
        Socket::open(SockProtocol::NetlinkNetFilter)
    }

    /// `NETLINK_SOCK_DIAG`: the sockets of the namespace the socket is made in.
    pub fn sock_diag() -> io::Result<Socket> {
        Socket::open(SockProtocol::NetlinkSockDiag)
    }

    /// A netlink socket made elsewhere (handed over; the caller checked what it is).
    pub fn from_fd(fd: OwnedFd) -> Socket {
        Socket { fd, seq: 0 }
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn open(protocol: SockProtocol) -> io::Result<Socket> {
        let fd = socket(AddressFamily::Netlink, SockType::Raw, SockFlag::SOCK_CLOEXEC, protocol)?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
        setsockopt(&fd, sockopt::ReceiveTimeout, &ANSWER_WITHIN)?;
        Ok(Socket { fd, seq: 0 })
    }

    /// Send one request and wait for the kernel's answer to it.
    pub fn request(&mut self, req: &Request) -> io::Result<()> {
        self.send_all(&[], std::slice::from_ref(req), &[])
    }

    /// Send `requests` in one nfnetlink batch (one transaction: all of them take effect or
    /// none), between `begin` and `end`, and wait until the kernel has acknowledged each.
    pub fn batch(&mut self, begin: &Request, requests: &[Request], end: &Request) -> io::Result<()> {
        self.send_all(std::slice::from_ref(begin), requests, std::slice::from_ref(end))
    }

    /// `before` and `after` are not acknowledged (the batch's markers); every request is.
    fn send_all(&mut self, before: &[Request], requests: &[Request], after: &[Request]) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut waiting = Vec::new();
        for (i, r) in before.iter().chain(requests).chain(after).enumerate() {
            self.seq = self.seq.wrapping_add(1);
            let acked = i >= before.len() && i < before.len() + requests.len();
            r.encode(self.seq, acked, &mut buf);
            if acked {
                waiting.push(self.seq);
            }
        }
        let sent = send(self.fd.as_raw_fd(), &buf, MsgFlags::empty())?;
        if sent != buf.len() {
            return Err(io::Error::other("netlink: the request was sent in part"));
        }
        let mut answer = vec![0u8; 16 * 1024];
        while !waiting.is_empty() {
            let n = recv(self.fd.as_raw_fd(), &mut answer, MsgFlags::empty())?;
            for (seq, code) in acks(&answer[..n])? {
                if code != 0 {
                    return Err(io::Error::from_raw_os_error(-code));
                }
                waiting.retain(|s| *s != seq);
            }
        }
        Ok(())
    }
}

impl Socket {
    /// A dump request (`NLM_F_DUMP`) of type `kind` with the family's fixed `header`: the
    /// payload (after the netlink header) of every message of the answer, until `NLMSG_DONE`.
    pub fn dump(&mut self, kind: u16, header: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut buf = Vec::new();
        Request { kind, flags: NLM_F_DUMP, header: header.to_vec(), attrs: Attrs::new() }
            .encode(seq, false, &mut buf);
        if send(self.fd.as_raw_fd(), &buf, MsgFlags::empty())? != buf.len() {
            return Err(io::Error::other("netlink: the request was sent in part"));
        }
        let bad = || io::Error::other("netlink: a malformed answer from the kernel");
        let mut out = Vec::new();
        let mut answer = vec![0u8; 64 * 1024];
        loop {
            let n = recv(self.fd.as_raw_fd(), &mut answer, MsgFlags::empty())?;
            let mut data = &answer[..n];
            while data.len() >= 16 {
                let word =
                    |at: usize| u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
                let len = word(0) as usize;
                if len < 16 || len > data.len() {
                    return Err(bad());
                }
                let kind = u16::from_ne_bytes([data[4], data[5]]);
                // An answer to an earlier dump (one that timed out) is not this one's.
                if word(8) == seq {
                    match kind {
                        NLMSG_DONE => return Ok(out),
                        NLMSG_ERROR if len >= 20 && word(16) != 0 => {
                            return Err(io::Error::from_raw_os_error(-(word(16) as i32)));
                        }
                        NLMSG_ERROR => {}
                        _ if out.len() >= DUMP_MESSAGES => {
                            return Err(io::Error::other("netlink: a dump without end"));
                        }
                        _ => out.push(data[16..len].to_vec()),
                    }
                }
                data = &data[len.next_multiple_of(4).min(data.len())..];
            }
        }
    }
}

/// nf_tables: the messages and expressions a fixed table needs, each expression as
/// `nft --debug=netlink` prints it. Registers: `NFT_REG_VERDICT` (0) and `NFT_REG_1` (1).
pub mod nft {
    use super::{Attrs, Request};

    /// `NFPROTO_INET`: one table for IPv4 and IPv6.
    pub const INET: u8 = 1;
    /// `NF_INET_LOCAL_OUT`.
    pub const HOOK_OUTPUT: u32 = 3;
    pub const CMP_EQ: u32 = 0;
    pub const CMP_NEQ: u32 = 1;
    /// `NFT_META_NFPROTO`, `NFT_META_L4PROTO`.
    pub const META_NFPROTO: u32 = 15;
    pub const META_L4PROTO: u32 = 16;
    /// `NFT_PAYLOAD_NETWORK_HEADER`, `NFT_PAYLOAD_TRANSPORT_HEADER`.
    pub const NETWORK_HEADER: u32 = 1;
    pub const TRANSPORT_HEADER: u32 = 2;
    /// `IPS_DST_NAT`: the connection's destination was rewritten (by a redirect).
    pub const CT_STATUS_DNAT: u32 = 1 << 5;
    /// `NFT_REJECT_ICMPX_ADMIN_PROHIBITED`.
    pub const ICMPX_ADMIN_PROHIBITED: u8 = 3;

    const SUBSYS: u16 = 10; // NFNL_SUBSYS_NFTABLES
    const NEWTABLE: u16 = SUBSYS << 8;
    const NEWCHAIN: u16 = SUBSYS << 8 | 3;
    const NEWRULE: u16 = SUBSYS << 8 | 6;
    const REG_VERDICT: u32 = 0;
    const REG_1: u32 = 1;
    const NF_ACCEPT: u32 = 1;

    /// `nfgenmsg`: family, version 0, resource id (big-endian).
    fn nfgen(family: u8, res_id: u16) -> Vec<u8> {
        let id = res_id.to_be_bytes();
        vec![family, 0, id[0], id[1]]
    }

    /// `NFNL_MSG_BATCH_BEGIN` and `NFNL_MSG_BATCH_END` for the nf_tables subsystem.
    pub fn batch_markers() -> (Request, Request) {
        let mark = |kind| Request { kind, flags: 0, header: nfgen(0, SUBSYS), attrs: Attrs::new() };
        (mark(0x10), mark(0x11))
    }

    pub fn table(name: &str) -> Request {
        Request {
            kind: NEWTABLE,
            flags: super::CREATE,
            header: nfgen(INET, 0),
            attrs: Attrs::new().str(1, name),
        }
    }

    /// A base chain: `type <kind> hook <hook> priority <priority>; policy accept;`.
    pub fn chain(table: &str, name: &str, kind: &str, hook: u32, priority: i32) -> Request {
        let hook = Attrs::new().be32(1, hook).be32(2, priority as u32);
        let attrs = Attrs::new().str(1, table).str(3, name).str(7, kind).be32(5, NF_ACCEPT).nested(4, hook);
        Request { kind: NEWCHAIN, flags: super::CREATE, header: nfgen(INET, 0), attrs }
    }

    /// A rule appended to `chain`: its expressions in order.
    pub fn rule(table: &str, chain: &str, exprs: &[Expr]) -> Request {
        let mut list = Attrs::new();
        for e in exprs {
            let elem = Attrs::new().str(1, e.name).nested(2, e.data.clone());
            list = list.nested(1, elem);
        }
        let attrs = Attrs::new().str(1, table).str(2, chain).nested(4, list);
        Request { kind: NEWRULE, flags: super::APPEND, header: nfgen(INET, 0), attrs }
    }

    /// One expression: its name and its attributes.
    #[derive(Clone)]
    pub struct Expr {
        name: &'static str,
        data: Attrs,
    }

    /// `[ meta load <key> => reg 1 ]`
    pub fn meta(key: u32) -> Expr {
        Expr { name: "meta", data: Attrs::new().be32(2, key).be32(1, REG_1) }
    }

    /// `[ payload load <len>b @ <base> header + <offset> => reg 1 ]`
    pub fn payload(base: u32, offset: u32, len: u32) -> Expr {
        Expr { name: "payload", data: Attrs::new().be32(1, REG_1).be32(2, base).be32(3, offset).be32(4, len) }
    }

    /// `[ cmp <op> reg 1 <value> ]`
    pub fn cmp(op: u32, value: &[u8]) -> Expr {
        Expr {
            name: "cmp",
            data: Attrs::new().be32(1, REG_1).be32(2, op).nested(3, Attrs::new().bytes(1, value)),
        }
    }

    /// `[ immediate reg 1 <value> ]`
    pub fn immediate(value: &[u8]) -> Expr {
        Expr { name: "immediate", data: Attrs::new().be32(1, REG_1).nested(2, Attrs::new().bytes(1, value)) }
    }

    /// `[ immediate reg 0 accept ]`
    pub fn accept() -> Expr {
        let verdict = Attrs::new().nested(2, Attrs::new().be32(1, NF_ACCEPT));
        Expr { name: "immediate", data: Attrs::new().be32(1, REG_VERDICT).nested(2, verdict) }
    }

    /// `[ redir proto_min reg 1 flags 0x2 ]`: to this host, to the port in reg 1
    /// (`NF_NAT_RANGE_PROTO_SPECIFIED`).
    pub fn redirect() -> Expr {
        Expr { name: "redir", data: Attrs::new().be32(1, REG_1).be32(3, 0x2) }
    }

    /// `[ ct load status => reg 1 ]`
    pub fn ct_status() -> Expr {
        Expr { name: "ct", data: Attrs::new().be32(1, REG_1).be32(2, 2) }
    }

    /// `[ bitwise reg 1 = ( reg 1 & <mask> ) ^ <xor> ]`
    pub fn bitwise(mask: &[u8], xor: &[u8]) -> Expr {
        let data = Attrs::new()
            .be32(1, REG_1)
            .be32(2, REG_1)
            .be32(3, mask.len() as u32)
            .nested(4, Attrs::new().bytes(1, mask))
            .nested(5, Attrs::new().bytes(1, xor));
        Expr { name: "bitwise", data }
    }

    /// `[ reject type 2 code <code> ]`: an ICMP(v6) error of the packet's family
    /// (`NFT_REJECT_ICMPX_UNREACH`).
    pub fn reject_icmpx(code: u8) -> Expr {
        Expr { name: "reject", data: Attrs::new().be32(1, 2).bytes(2, &[code]) }
    }
}

/// The `(sequence, error)` of each `NLMSG_ERROR` in a datagram (error 0 is an acknowledgement).
fn acks(mut data: &[u8]) -> io::Result<Vec<(u32, i32)>> {
    let bad = || io::Error::other("netlink: a malformed answer from the kernel");
    let mut out = Vec::new();
    while data.len() >= 16 {
        let word = |at: usize| u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let len = word(0) as usize;
        if len < 16 || len > data.len() {
            return Err(bad());
        }
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        if kind == NLMSG_ERROR {
            if len < 20 {
                return Err(bad());
            }
            out.push((word(8), word(16) as i32));
        }
        data = &data[len.next_multiple_of(4).min(data.len())..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_nested_as_netlink_lays_them_out() {
        let a = Attrs::new().str(1, "nat").be32(2, 1).nested(4, Attrs::new().be32(1, 3));
        let head = |len: u16, kind: u16| [len.to_ne_bytes(), kind.to_ne_bytes()].concat();
        let expected = [
            head(8, 1),
            b"nat\0".to_vec(), // no padding needed
            head(8, 2),
            vec![0, 0, 0, 1], // big-endian
            head(12, 4 | NLA_F_NESTED),
            head(8, 1),
            vec![0, 0, 0, 3],
        ]
        .concat();
        assert_eq!(a.0, expected);
        let odd = Attrs::new().bytes(1, &[7]);
        assert_eq!(odd.0.len(), 8, "one byte of value is padded to four");
    }

    #[test]
    fn answers_are_read_as_acknowledgements_and_errors() {
        let msg = |seq: u32, code: i32| {
            let mut m = Vec::new();
            m.extend_from_slice(&36u32.to_ne_bytes());
            m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            m.extend_from_slice(&0u16.to_ne_bytes());
            m.extend_from_slice(&seq.to_ne_bytes());
            m.extend_from_slice(&0u32.to_ne_bytes());
            m.extend_from_slice(&code.to_ne_bytes());
            m.extend_from_slice(&[0u8; 16]);
            m
        };
        let mut two = msg(3, 0);
        two.extend(msg(4, -1));
        assert_eq!(acks(&two).unwrap(), vec![(3, 0), (4, -1)]);
        let mut cut = msg(3, 0);
        cut.truncate(20);
        cut[0] = 99;
        assert!(acks(&cut).is_err(), "a length beyond the datagram is refused");
    }
}
