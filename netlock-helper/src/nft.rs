//! Enforcement: builds the table of `netlock.nft` with nftnl and sends it through one netlink socket in
//! one atomic batch. Every rule carries its nft line as a comment here, in the order of the contract.
//!
//! nftnl cannot set table flags, so the finished batch is copied into owned buffers and patched in
//! safe code (`NFTA_TABLE_FLAGS` of each NEWTABLE). The same pass gives every message a sequence
//! number unique to this socket, so a late ACK of an earlier batch is never taken for this one.

use std::ffi::CString;
use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{Context, Result, anyhow};
use nftnl::expr::{IcmpCode, RejectionType, Verdict};
use nftnl::nftnl_sys::libc;
use nftnl::set::Set;
use nftnl::{Batch, Chain, Hook, MsgType, Policy, ProtoFamily, Rule, Table, nft_expr};
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, sendto, setsockopt,
    socket, sockopt,
};
use nix::sys::time::TimeVal;

use crate::model::{Model, TABLE};

/// `NFT_TABLE_F_OWNER | NFT_TABLE_F_PERSIST` (linux/netfilter/nf_tables.h): while our socket is
/// open nobody else may change or delete the table and `nft flush ruleset` skips it; when the
/// socket closes (crash, SIGKILL, upgrade) the table stays and enforces until adopted.
pub const OWNED: u32 = 0x2 | PERSIST;
/// `NFT_TABLE_F_PERSIST`: stays set on an orphaned table (the kernel clears OWNER).
pub const PERSIST: u32 = 0x4;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NEWTABLE: u16 = NFNL_SUBSYS_NFTABLES << 8; // NFT_MSG_NEWTABLE = 0
const NFTA_TABLE_NAME: u16 = 1;
const NEWGEN: u16 = NFNL_SUBSYS_NFTABLES << 8 | 15; // NFT_MSG_NEWGEN
const GETGEN: u16 = NFNL_SUBSYS_NFTABLES << 8 | 16; // NFT_MSG_GETGEN
const NFTA_GEN_ID: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_ACK: u16 = 4;
const PROBE_TABLE: &str = "ocsb_netlock_probe";
/// `NF_IP_PRI_RAW`: before conntrack and the output NAT hook (-100).
const PRIORITY_RAW: i32 = -300;

/// One netlink socket. With owner flags, the socket that last applied the table owns it.
pub struct Nl {
    sock: OwnedFd,
    next_seq: u32,
}

/// How long the kernel may take to answer: a stuck netlink socket must not hang the daemon
/// (the watchdog would restart it, but an error says why).
const RECV_TIMEOUT: TimeVal = TimeVal::new(5, 0);

/// A table as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableInfo {
    pub flags: u32,
}

impl Nl {
    pub fn open() -> Result<Nl> {
        let sock = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkNetFilter,
        )
        .context("cannot open a netfilter netlink socket")?;
        bind(sock.as_raw_fd(), &NetlinkAddr::new(0, 0)).context("cannot bind the netlink socket")?;
        setsockopt(&sock, sockopt::ReceiveTimeout, &RECV_TIMEOUT).context("SO_RCVTIMEO")?;
        Ok(Nl { sock, next_seq: 1 })
    }

    /// Creates or atomically replaces the table. `flags` is `OWNED` or 0.
    pub fn apply(&mut self, model: &Model, flags: u32) -> Result<()> {
        // A plain table (made by `nft -f` or an older helper) cannot gain the owner flag in
        // place; the second attempt deletes it inside the same atomic batch instead.
        match self.send(build(model), &[flags, flags]) {
            Err(e) if flags != 0 && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.send(build(model), &[0, flags])
            }
            r => r,
        }
        .map_err(|e| explain(e, "apply"))
    }

    /// Adopts the table if it is orphaned and deletes it; creating it first makes a second
    /// `remove` succeed too (idempotent).
    pub fn remove(&mut self, flags: u32) -> Result<()> {
        match self.send(add_del(TABLE), &[flags]) {
            Err(e) if flags != 0 && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.send(add_del(TABLE), &[0])
            }
            r => r,
        }
        .map_err(|e| explain(e, "remove"))
    }

    /// Feature probe: does the kernel take `owner|persist`? Adds and deletes a probe table in one
    /// batch, so nothing remains either way.
    pub fn supports_owner(&mut self) -> Result<bool> {
        match self.send(add_del(PROBE_TABLE), &[OWNED]) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => Ok(false),
            Err(e) => Err(explain(e, "probe table flags")),
        }
    }

    /// Whether the table is made with `owner|persist`: the kernel has them and the config allows.
    pub fn use_owner(&mut self, model: &Model) -> Result<bool> {
        Ok(model.owner_flags && self.supports_owner()?)
    }

    /// The ruleset's generation id (`NFT_MSG_GETGEN`): it changes with every committed change to
    /// any table, which is how the watcher notices an edit of ours where no owner flag forbids it.
    pub fn generation(&mut self) -> Result<u32> {
        let seq = self.bump();
        let mut req = Vec::with_capacity(20);
        req.extend_from_slice(&20u32.to_ne_bytes());
        req.extend_from_slice(&GETGEN.to_ne_bytes());
        req.extend_from_slice(&1u16.to_ne_bytes()); // NLM_F_REQUEST
        req.extend_from_slice(&seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
        req.extend_from_slice(&[0, 0, 0, 0]); // nfgenmsg: AF_UNSPEC, version 0, res_id 0
        let id = self.ask(&req, seq, "read the generation", |ty, payload| {
            (ty == NEWGEN).then(|| attr(payload, NFTA_GEN_ID).and_then(|v| v.try_into().ok()))
        })?;
        id.map(u32::from_be_bytes).context("NEWGEN without a generation id")
    }

    /// Looks the table up (a GETTABLE dump, parsed here).
    pub fn table(&mut self) -> Result<Option<TableInfo>> {
        let seq = self.bump();
        let mut found = None;
        let name = format!("{TABLE}\0");
        self.ask(&nftnl::table::get_tables_nlmsg(seq), seq, "list tables", |ty, payload| match ty {
            NLMSG_DONE => Some(found.take()),
            NEWTABLE if payload.first() == Some(&(libc::NFPROTO_INET as u8)) => {
                if attr(payload, NFTA_TABLE_NAME) == Some(name.as_bytes()) {
                    let flags = attr(payload, NFTA_TABLE_FLAGS).and_then(|f| f.try_into().ok());
                    found = Some(TableInfo { flags: flags.map(u32::from_be_bytes).unwrap_or(0) });
                }
                None
            }
            _ => None,
        })
    }

    /// Sends the request `req` (sequence number `seq`) and hands each answer to it to `each`
    /// until `each` has the result; an error answer ends it with `what` failed.
    fn ask<T>(
        &mut self,
        req: &[u8],
        seq: u32,
        what: &str,
        mut each: impl FnMut(u16, &[u8]) -> Option<T>,
    ) -> Result<T> {
        self.send_raw(req).context("netlink send")?;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.recv_raw(&mut buf).context("netlink recv")?;
            for (ty, hseq, payload) in messages(&buf[..n]) {
                if hseq != seq {
                    continue;
                }
                if ty == NLMSG_ERROR && error_code(payload) != 0 {
                    return Err(explain(io::Error::from_raw_os_error(error_code(payload)), what));
                }
                if let Some(v) = each(ty, payload) {
                    return Ok(v);
                }
            }
        }
    }

    /// One datagram to the kernel (port id 0), sent whole.
    fn send_raw(&self, data: &[u8]) -> io::Result<()> {
        let n = sendto(self.sock.as_raw_fd(), data, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
        if n < data.len() {
            return Err(io::Error::other("netlink: short send"));
        }
        Ok(())
    }

    /// One datagram from the kernel; `EAGAIN` after [`RECV_TIMEOUT`].
    fn recv_raw(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(recv(self.sock.as_raw_fd(), buf, MsgFlags::empty())?)
    }

    fn bump(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        s
    }

    /// Copies the batch, renumbers it, patches table flags (the i-th NEWTABLE gets `flags[i]`),
    /// sends it and waits for every ACK.
    fn send(&mut self, batch: nftnl::FinalizedBatch, flags: &[u32]) -> io::Result<()> {
        let mut tables = 0;
        let mut pages: Vec<Vec<u8>> = batch.iter().map(<[u8]>::to_vec).collect();
        let mut expected = Vec::new();
        let mut ours = Vec::new();
        for page in &mut pages {
            let mut off = 0;
            while off + 16 <= page.len() {
                let len = u32::from_ne_bytes(page[off..off + 4].try_into().unwrap_or_default()) as usize;
                if len < 16 || off + len > page.len() {
                    break;
                }
                let ty = u16::from_ne_bytes([page[off + 4], page[off + 5]]);
                let nl_flags = u16::from_ne_bytes([page[off + 6], page[off + 7]]);
                let seq = self.bump();
                page[off + 8..off + 12].copy_from_slice(&seq.to_ne_bytes());
                ours.push(seq);
                if nl_flags & NLM_F_ACK != 0 {
                    expected.push(seq);
                }
                if ty == NEWTABLE {
                    let f = flags.get(tables).or(flags.last()).copied().unwrap_or(0);
                    patch_table_flags(&mut page[off + 16..off + len], f);
                    tables += 1;
                }
                off += align4(len);
            }
        }
        for page in &pages {
            self.send_raw(page)?;
        }
        let mut buf = vec![0u8; 64 * 1024];
        while !expected.is_empty() {
            let n = self.recv_raw(&mut buf)?;
            for (ty, seq, payload) in messages(&buf[..n]) {
                // An error may answer any message of this batch (batch begin has no ACK flag on
                // older kernels); an ACK only the ones that asked for it.
                if ty != NLMSG_ERROR || !ours.contains(&seq) {
                    continue;
                }
                let err = error_code(payload);
                if err != 0 {
                    return Err(io::Error::from_raw_os_error(err));
                }
                expected.retain(|s| *s != seq);
            }
        }
        Ok(())
    }
}

/// Builds: NEWTABLE(first_flags), DELTABLE, NEWTABLE(flags), sets, elements, chains, rules.
/// The first NEWTABLE creates the table if absent (or adopts an orphaned one), so the DELTABLE
/// cannot fail; the whole replacement is one transaction.
fn build(model: &Model) -> nftnl::FinalizedBatch {
    let table = Table::new(c_name(TABLE), ProtoFamily::Inet);
    let mut b = Batch::new();
    b.add(&table, MsgType::Add);
    b.add(&table, MsgType::Del);
    b.add(&table, MsgType::Add);

    let mut dns4 = Set::<std::net::Ipv4Addr>::new_named(c"dns4", 1, &table, ProtoFamily::Inet);
    for a in &model.dns4 {
        dns4.add(a);
    }
    let mut dns6 = Set::<Ipv6Addr>::new_named(c"dns6", 2, &table, ProtoFamily::Inet);
    for a in &model.dns6 {
        dns6.add(a);
    }
    b.add(&dns4, MsgType::Add);
    b.add_iter(dns4.elems_iter(), MsgType::Add);
    b.add(&dns6, MsgType::Add);
    b.add_iter(dns6.elems_iter(), MsgType::Add);

    // chain output { type filter hook output priority filter; ... }: after output NAT;
    // chain prenat { type filter hook output priority raw; ... }: before it.
    let mut output = Chain::new(c"output", &table);
    output.set_hook(Hook::Out, 0);
    let mut prenat = Chain::new(c"prenat", &table);
    prenat.set_hook(Hook::Out, PRIORITY_RAW);
    for chain in [&mut output, &mut prenat] {
        chain.set_type(nftnl::ChainType::Filter);
        chain.set_policy(Policy::Accept);
    }
    b.add(&output, MsgType::Add);
    b.add(&prenat, MsgType::Add);
    // chain locked (regular chain)
    let locked = Chain::new(c"locked", &table);
    b.add(&locked, MsgType::Add);

    // meta skgid G jump locked, in both base chains
    for chain in [&output, &prenat] {
        let mut r = Rule::new(chain);
        r.add_expr(&nft_expr!(meta skgid));
        r.add_expr(&nft_expr!(cmp == model.gid));
        r.add_expr(&Verdict::Jump { chain: c_name("locked") });
        b.add(&r, MsgType::Add);
    }

    // dns = "none": {udp,tcp} dport 53 reject with icmpx admin-prohibited, before loopback
    if model.no_dns {
        for l4 in [libc::IPPROTO_UDP as u8, libc::IPPROTO_TCP as u8] {
            let mut r = Rule::new(&locked);
            port_53(&mut r, l4);
            r.add_expr(&Verdict::Reject(RejectionType::Icmp(IcmpCode::AdminProhibited)));
            b.add(&r, MsgType::Add);
        }
    }

    // ip daddr 127.0.0.0/8 accept
    let mut r = Rule::new(&locked);
    r.add_expr(&nft_expr!(meta nfproto));
    r.add_expr(&nft_expr!(cmp == libc::NFPROTO_IPV4 as u8));
    r.add_expr(&nft_expr!(payload ipv4 daddr));
    r.add_expr(&nft_expr!(bitwise mask std::net::Ipv4Addr::new(255, 0, 0, 0), xor 0u32));
    r.add_expr(&nft_expr!(cmp == std::net::Ipv4Addr::new(127, 0, 0, 0)));
    r.add_expr(&nft_expr!(verdict accept));
    b.add(&r, MsgType::Add);

    // ip6 daddr ::1 accept
    let mut r = Rule::new(&locked);
    r.add_expr(&nft_expr!(meta nfproto));
    r.add_expr(&nft_expr!(cmp == libc::NFPROTO_IPV6 as u8));
    r.add_expr(&nft_expr!(payload ipv6 daddr));
    r.add_expr(&nft_expr!(cmp == Ipv6Addr::LOCALHOST));
    r.add_expr(&nft_expr!(verdict accept));
    b.add(&r, MsgType::Add);

    // ip daddr @dns4 {udp,tcp} dport 53 accept; ip6 daddr @dns6 {udp,tcp} dport 53 accept
    for v6 in [false, true] {
        for l4 in [libc::IPPROTO_UDP as u8, libc::IPPROTO_TCP as u8] {
            let mut r = Rule::new(&locked);
            r.add_expr(&nft_expr!(meta nfproto));
            if v6 {
                r.add_expr(&nft_expr!(cmp == libc::NFPROTO_IPV6 as u8));
                r.add_expr(&nft_expr!(payload ipv6 daddr));
                r.add_expr(&nft_expr!(lookup & dns6));
            } else {
                r.add_expr(&nft_expr!(cmp == libc::NFPROTO_IPV4 as u8));
                r.add_expr(&nft_expr!(payload ipv4 daddr));
                r.add_expr(&nft_expr!(lookup & dns4));
            }
            port_53(&mut r, l4);
            r.add_expr(&nft_expr!(verdict accept));
            b.add(&r, MsgType::Add);
        }
    }

    // counter reject with icmpx admin-prohibited comment "ocsb-netlock v1"
    let mut r = Rule::new(&locked);
    r.add_expr(&nft_expr!(counter));
    r.add_expr(&Verdict::Reject(RejectionType::Icmp(IcmpCode::AdminProhibited)));
    r.set_comment(c"ocsb-netlock v1").expect("static comment fits");
    b.add(&r, MsgType::Add);
    b.finalize()
}

/// `udp dport 53` or `tcp dport 53` (`l4` is the protocol number).
fn port_53(r: &mut Rule, l4: u8) {
    r.add_expr(&nft_expr!(meta l4proto));
    r.add_expr(&nft_expr!(cmp == l4));
    if l4 == libc::IPPROTO_UDP as u8 {
        r.add_expr(&nft_expr!(payload udp dport));
    } else {
        r.add_expr(&nft_expr!(payload tcp dport));
    }
    r.add_expr(&nft_expr!(cmp == 53u16.to_be()));
}

/// NEWTABLE + DELTABLE of one table: adopt-or-create, then delete.
fn add_del(name: &str) -> nftnl::FinalizedBatch {
    let table = Table::new(c_name(name), ProtoFamily::Inet);
    let mut b = Batch::new();
    b.add(&table, MsgType::Add);
    b.add(&table, MsgType::Del);
    b.finalize()
}

fn c_name(s: &str) -> CString {
    CString::new(s).expect("static name without NUL")
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Netlink messages in a buffer: (type, seq, payload after the 16-byte header).
fn messages(buf: &[u8]) -> Vec<(u16, u32, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap_or_default()) as usize;
        if len < 16 || off + len > buf.len() {
            break;
        }
        let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        let seq = u32::from_ne_bytes(buf[off + 8..off + 12].try_into().unwrap_or_default());
        out.push((ty, seq, &buf[off + 16..off + len]));
        off += align4(len);
    }
    out
}

/// Netlink attributes (type without the nested/byteorder bits, value).
fn attributes(buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= buf.len() {
        let len = u16::from_ne_bytes([buf[off], buf[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([buf[off + 2], buf[off + 3]]) & 0x3fff;
        if len < 4 || off + len > buf.len() {
            break;
        }
        out.push((ty, &buf[off + 4..off + len]));
        off += align4(len);
    }
    out
}

/// The value of attribute `ty` in a message payload that starts with the 4-byte nfgenmsg.
fn attr(payload: &[u8], ty: u16) -> Option<&[u8]> {
    attributes(payload.get(4..).unwrap_or_default()).into_iter().find(|(t, _)| *t == ty).map(|a| a.1)
}

/// Sets `NFTA_TABLE_FLAGS` (big-endian u32; nftnl always emits it) in a NEWTABLE payload that
/// starts with the 4-byte nfgenmsg.
fn patch_table_flags(payload: &mut [u8], flags: u32) {
    let mut off = 4;
    while off + 4 <= payload.len() {
        let len = u16::from_ne_bytes([payload[off], payload[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([payload[off + 2], payload[off + 3]]) & 0x3fff;
        if len < 4 || off + len > payload.len() {
            return;
        }
        if ty == NFTA_TABLE_FLAGS && len == 8 {
            payload[off + 4..off + 8].copy_from_slice(&flags.to_be_bytes());
        }
        off += align4(len);
    }
}

fn error_code(payload: &[u8]) -> i32 {
    payload.get(..4).and_then(|b| b.try_into().ok()).map(i32::from_ne_bytes).map_or(0, |e| -e)
}

fn explain(e: io::Error, what: &str) -> anyhow::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => {
            "the caller lacks CAP_NET_ADMIN, or the table is owned by the running \
             ocsb-netlock-helper daemon (use `systemctl reload ocsb-netlock` or `ocsb netlock setup`)"
        }
        Some(libc::ENOENT | libc::EOPNOTSUPP) => "the kernel lacks nf_tables support needed here",
        _ => "",
    };
    if hint.is_empty() {
        anyhow!("nftables {what} failed: {e}")
    } else {
        anyhow!("nftables {what} failed: {e}\nhint: {hint}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, val: &[u8]) -> Vec<u8> {
        let mut v = ((4 + val.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(val);
        v.resize(align4(v.len()), 0);
        v
    }

    #[test]
    fn patches_only_the_flags_attribute() {
        let mut payload = vec![1, 0, 0, 0]; // nfgenmsg
        payload.extend(attr(NFTA_TABLE_NAME, b"ocsb_netlock\0"));
        payload.extend(attr(NFTA_TABLE_FLAGS, &0u32.to_be_bytes()));
        let before = payload.clone();
        patch_table_flags(&mut payload, OWNED);
        let attrs = attributes(&payload[4..]);
        assert_eq!(attrs[0], (NFTA_TABLE_NAME, &b"ocsb_netlock\0"[..]));
        assert_eq!(attrs[1], (NFTA_TABLE_FLAGS, &6u32.to_be_bytes()[..]));
        assert_eq!(payload.len(), before.len());
        // Truncated or garbage input is left alone, never panics.
        let mut junk = vec![0, 0, 0, 0, 255, 255, 2, 0];
        patch_table_flags(&mut junk, OWNED);
        assert_eq!(junk, [0, 0, 0, 0, 255, 255, 2, 0]);
    }

    #[test]
    fn splits_messages_and_reads_errors() {
        let mut buf = Vec::new();
        for (ty, seq, err) in [(NLMSG_ERROR, 7u32, 0i32), (NLMSG_ERROR, 8, -libc::EPERM)] {
            buf.extend_from_slice(&20u32.to_ne_bytes());
            buf.extend_from_slice(&ty.to_ne_bytes());
            buf.extend_from_slice(&0u16.to_ne_bytes());
            buf.extend_from_slice(&seq.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&err.to_ne_bytes());
        }
        buf.extend_from_slice(&[1, 2, 3]); // a torn tail is ignored
        let m = messages(&buf);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].1, error_code(m[0].2)), (7, 0));
        assert_eq!((m[1].1, error_code(m[1].2)), (8, libc::EPERM));
    }
}
