//! Enforcement: builds the table of `netlock.nft` with nftnl and sends it through one netlink socket in
//! one atomic batch. Every rule carries its nft line as a comment here, in the order of the contract.
//!
//! nftnl cannot set table flags, so the finished batch is copied into owned buffers and patched in
//! safe code (`NFTA_TABLE_FLAGS` of each NEWTABLE). The same pass gives every message a sequence
//! number unique to this socket, so a late ACK of an earlier batch is never taken for this one.
// The one `expect` is on a constant: a comment under the kernel's limit.
#![allow(clippy::expect_used)]

use std::ffi::CStr;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{Context, Result, anyhow};
use nftnl::expr::{IcmpCode, RejectionType, Verdict};
use nftnl::nftnl_sys::libc;
use nftnl::set::Set;
use nftnl::{Batch, Chain, FinalizedBatch, Hook, MsgType, Policy, ProtoFamily, Rule, Table, nft_expr};
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recvfrom, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;

use crate::model::Model;

/// `NFT_TABLE_F_OWNER | NFT_TABLE_F_PERSIST` (linux/netfilter/nf_tables.h): while our socket is
/// open nobody else may change or delete the table and `nft flush ruleset` skips it; when the
/// socket closes (crash, SIGKILL, upgrade) the table stays and enforces until adopted.
pub const OWNED: u32 = 0x2 | PERSIST;
/// `NFT_TABLE_F_PERSIST`: stays set on an orphaned table (the kernel clears OWNER).
pub const PERSIST: u32 = 0x4;
const NEWTABLE: u16 = 10 << 8; // NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE
const NEWGEN: u16 = 10 << 8 | 15;
const GETGEN: u16 = 10 << 8 | 16;
const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
const NFTA_GEN_ID: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_ACK: u16 = 4;
/// `model::TABLE` as netlink takes it.
const TABLE: &CStr = c"ocsb_netlock";
const PROBE_TABLE: &CStr = c"ocsb_netlock_probe";
/// `NF_IP_PRI_RAW`: before conntrack and the output NAT hook (-100).
const PRIORITY_RAW: i32 = -300;
/// How long the kernel may take to answer: a stuck netlink socket must not hang the daemon
/// (the watchdog would restart it, but an error says why).
const RECV_TIMEOUT: TimeVal = TimeVal::new(5, 0);

/// One netlink socket. With owner flags, the socket that last applied the table owns it.
pub struct Nl {
    sock: OwnedFd,
    next_seq: u32,
}

impl Nl {
    pub fn open() -> Result<Nl> {
        let (family, flags) = (AddressFamily::Netlink, SockFlag::SOCK_CLOEXEC);
        let sock = socket(family, SockType::Raw, flags, SockProtocol::NetlinkNetFilter)
            .context("cannot open a netfilter netlink socket")?;
        bind(sock.as_raw_fd(), &NetlinkAddr::new(0, 0)).context("cannot bind the netlink socket")?;
        setsockopt(&sock, sockopt::ReceiveTimeout, &RECV_TIMEOUT).context("SO_RCVTIMEO")?;
        Ok(Nl { sock, next_seq: 0 })
    }

    /// Creates or atomically replaces the table. `flags` is `OWNED` or 0.
    pub fn apply(&mut self, model: &Model, flags: u32) -> Result<()> {
        self.send_adopting(|| build(model), flags, "apply")
    }

    /// Adopts the table if it is orphaned and deletes it; creating it first makes a second
    /// `remove` succeed too (idempotent).
    pub fn remove(&mut self, flags: u32) -> Result<()> {
        self.send_adopting(|| add_del(TABLE), flags, "remove")
    }

    /// A plain table of our name (made by `nft -f` or an older helper) cannot gain the owner flag
    /// in place: on `EOPNOTSUPP` the batch goes again with its first NEWTABLE plain, and the
    /// DELTABLE after it removes that table inside the same transaction.
    fn send_adopting(&mut self, batch: impl Fn() -> FinalizedBatch, flags: u32, what: &str) -> Result<()> {
        match self.send(batch(), &[flags]) {
            Err(e) if flags != 0 && e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                self.send(batch(), &[0, flags])
            }
            r => r,
        }
        .map_err(|e| explain(e, what))
    }

    /// The table flags to use, `OWNED` or 0: owner|persist when the config allows (`model` is
    /// `None` for `remove`, which adopts whatever the config says) and the kernel takes them.
    /// The feature probe adds and deletes a probe table in one batch, so nothing remains.
    pub fn flags_for(&mut self, model: Option<&Model>) -> Result<u32> {
        if model.is_some_and(|m| !m.owner_flags) {
            return Ok(0);
        }
        match self.send(add_del(PROBE_TABLE), &[OWNED]) {
            Ok(()) => Ok(OWNED),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => Ok(0),
            Err(e) => Err(explain(e, "probe table flags")),
        }
    }

    /// The ruleset's generation id (`NFT_MSG_GETGEN`): it changes with every committed change to
    /// any table, which is how the watcher notices an edit of ours where no owner flag forbids it.
    pub fn generation(&mut self) -> Result<u32> {
        let seq = self.bump();
        // nlmsghdr (length, type, NLM_F_REQUEST, seq, port id 0) and an AF_UNSPEC nfgenmsg.
        let head = [20u32.to_ne_bytes(), [0; 4], seq.to_ne_bytes(), [0; 4], [0; 4]];
        let mut req = head.concat();
        req[4..8].copy_from_slice(&[GETGEN.to_ne_bytes(), 1u16.to_ne_bytes()].concat());
        let id = self.ask(&req, seq, "read the generation", |ty, payload| {
            (ty == NEWGEN).then(|| attr(payload, NFTA_GEN_ID).and_then(|v| v.try_into().ok()))
        })?;
        id.map(u32::from_be_bytes).context("NEWGEN without a generation id")
    }

    /// The flags of our table, or `None` when it does not exist (a GETTABLE dump).
    pub fn table(&mut self) -> Result<Option<u32>> {
        let seq = self.bump();
        let mut found = None;
        self.ask(&nftnl::table::get_tables_nlmsg(seq), seq, "list tables", |ty, payload| match ty {
            NLMSG_DONE => Some(found.take()),
            NEWTABLE if payload.first() == Some(&(libc::NFPROTO_INET as u8)) => {
                if attr(payload, NFTA_TABLE_NAME) == Some(TABLE.to_bytes_with_nul()) {
                    let flags = attr(payload, NFTA_TABLE_FLAGS).and_then(|f| f.try_into().ok());
                    found = Some(flags.map_or(0, u32::from_be_bytes));
                }
                None
            }
            _ => None,
        })
    }

    /// Sends the request `req` (sequence number `seq`) and hands each answer to `each` until it
    /// has the result (`f`); an error answer ends it with `what` failed.
    fn ask<T>(
        &mut self,
        req: &[u8],
        seq: u32,
        what: &str,
        mut f: impl FnMut(u16, &[u8]) -> Option<T>,
    ) -> Result<T> {
        self.send_raw(req).context("netlink send")?;
        self.answers(&[seq], |ty, _, payload| f(ty, payload)).map_err(|e| explain(e, what))
    }

    /// Reads answers to the messages `seqs` until `f` returns a value; an error answer to any
    /// of them ends it. Answers to other sequence numbers (a late ACK) are skipped.
    fn answers<T>(&mut self, seqs: &[u32], mut f: impl FnMut(u16, u32, &[u8]) -> Option<T>) -> io::Result<T> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // `EAGAIN` after RECV_TIMEOUT. Only the kernel (port id 0) answers; a datagram from
            // another netlink socket of this namespace is not an answer.
            let (n, from) = recvfrom::<NetlinkAddr>(self.sock.as_raw_fd(), &mut buf)?;
            if from.is_none_or(|a| a.pid() != 0) {
                continue;
            }
            for (off, ty, len) in records(&buf[..n], 16) {
                let (seq, payload) = (u32_at(&buf, off + 8), &buf[off + 16..off + len]);
                if !seqs.contains(&seq) {
                    continue;
                }
                if ty == NLMSG_ERROR && error_code(payload) != 0 {
                    return Err(io::Error::from_raw_os_error(error_code(payload)));
                }
                if let Some(v) = f(ty, seq, payload) {
                    return Ok(v);
                }
            }
        }
    }

    /// One datagram to the kernel (port id 0), sent whole.
    fn send_raw(&self, data: &[u8]) -> io::Result<()> {
        let n = sendto(self.sock.as_raw_fd(), data, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
        if n < data.len() { Err(io::Error::other("netlink: short send")) } else { Ok(()) }
    }

    /// The next sequence number: never 0, which the kernel's own messages carry.
    fn bump(&mut self) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        self.next_seq
    }

    /// Copies the batch, renumbers it, patches table flags (the i-th NEWTABLE gets `flags[i]`,
    /// the last one repeated), sends it and waits for every ACK.
    fn send(&mut self, batch: FinalizedBatch, flags: &[u32]) -> io::Result<()> {
        let (mut tables, mut all, mut acks) = (0, Vec::new(), Vec::new());
        for page in batch.iter() {
            let mut page = page.to_vec();
            for (off, ty, len) in records(&page, 16) {
                let seq = self.bump();
                page[off + 8..off + 12].copy_from_slice(&seq.to_ne_bytes());
                all.push(seq);
                if u16::from_ne_bytes([page[off + 6], page[off + 7]]) & NLM_F_ACK != 0 {
                    acks.push(seq);
                }
                if ty == NEWTABLE {
                    let f = flags.get(tables).or(flags.last()).copied().unwrap_or(0);
                    patch_table_flags(&mut page[off + 16..off + len], f);
                    tables += 1;
                }
            }
            self.send_raw(&page)?;
        }
        // An error may answer any message of the batch (batch begin has no ACK flag on older
        // kernels); an ACK only the ones that asked for it.
        while !acks.is_empty() {
            let seq = self.answers(&all, |ty, seq, _| (ty == NLMSG_ERROR).then_some(seq))?;
            acks.retain(|s| *s != seq);
        }
        Ok(())
    }
}

/// Builds: NEWTABLE, DELTABLE, NEWTABLE, sets, elements, chains, rules. The first NEWTABLE
/// creates the table if absent (or adopts an orphaned one), so the DELTABLE cannot fail; the
/// whole replacement is one transaction.
fn build(model: &Model) -> FinalizedBatch {
    let table = Table::new(TABLE, ProtoFamily::Inet);
    let mut b = Batch::new();
    b.add(&table, MsgType::Add);
    b.add(&table, MsgType::Del);
    b.add(&table, MsgType::Add);

    let mut dns4 = Set::<Ipv4Addr>::new_named(c"dns4", 1, &table, ProtoFamily::Inet);
    model.dns4.iter().for_each(|a| dns4.add(a));
    let mut dns6 = Set::<Ipv6Addr>::new_named(c"dns6", 2, &table, ProtoFamily::Inet);
    model.dns6.iter().for_each(|a| dns6.add(a));
    b.add(&dns4, MsgType::Add);
    b.add_iter(dns4.elems_iter(), MsgType::Add);
    b.add(&dns6, MsgType::Add);
    b.add_iter(dns6.elems_iter(), MsgType::Add);

    // chain output { type filter hook output priority filter; ... }: after output NAT;
    // chain prenat { type filter hook output priority raw; ... }: before it.
    let (mut output, mut prenat) = (Chain::new(c"output", &table), Chain::new(c"prenat", &table));
    for (chain, priority) in [(&mut output, 0), (&mut prenat, PRIORITY_RAW)] {
        chain.set_hook(Hook::Out, priority);
        chain.set_type(nftnl::ChainType::Filter);
        chain.set_policy(Policy::Accept);
        b.add(&*chain, MsgType::Add);
    }
    // chain locked (regular chain)
    let locked = Chain::new(c"locked", &table);
    b.add(&locked, MsgType::Add);
    let mut rule = |chain: &Chain, fill: &dyn Fn(&mut Rule)| {
        let mut r = Rule::new(chain);
        fill(&mut r);
        b.add(&r, MsgType::Add);
    };

    // meta skgid G jump locked, in both base chains
    for chain in [&output, &prenat] {
        rule(chain, &|r| {
            r.add_expr(&nft_expr!(meta skgid));
            r.add_expr(&nft_expr!(cmp == model.gid));
            r.add_expr(&Verdict::Jump { chain: c"locked".into() });
        });
    }
    let (udp, tcp) = (libc::IPPROTO_UDP as u8, libc::IPPROTO_TCP as u8);
    // dns = "none": {udp,tcp} dport 53 reject with icmpx admin-prohibited, before loopback
    for l4 in [udp, tcp].into_iter().filter(|_| model.no_dns) {
        rule(&locked, &|r| {
            port_53(r, l4);
            r.add_expr(&Verdict::Reject(RejectionType::Icmp(IcmpCode::AdminProhibited)));
        });
    }
    // ip daddr 127.0.0.0/8 accept
    rule(&locked, &|r| {
        daddr(r, false);
        r.add_expr(&nft_expr!(bitwise mask Ipv4Addr::new(255, 0, 0, 0), xor 0u32));
        r.add_expr(&nft_expr!(cmp == Ipv4Addr::new(127, 0, 0, 0)));
        r.add_expr(&nft_expr!(verdict accept));
    });
    // ip6 daddr ::1 accept
    rule(&locked, &|r| {
        daddr(r, true);
        r.add_expr(&nft_expr!(cmp == Ipv6Addr::LOCALHOST));
        r.add_expr(&nft_expr!(verdict accept));
    });
    // ip daddr @dns4 {udp,tcp} dport 53 accept; ip6 daddr @dns6 {udp,tcp} dport 53 accept
    for v6 in [false, true] {
        for l4 in [udp, tcp] {
            rule(&locked, &|r| {
                daddr(r, v6);
                if v6 {
                    r.add_expr(&nft_expr!(lookup & dns6));
                } else {
                    r.add_expr(&nft_expr!(lookup & dns4));
                }
                port_53(r, l4);
                r.add_expr(&nft_expr!(verdict accept));
            });
        }
    }
    // counter reject with icmpx admin-prohibited comment "ocsb-netlock v1"
    rule(&locked, &|r| {
        r.add_expr(&nft_expr!(counter));
        r.add_expr(&Verdict::Reject(RejectionType::Icmp(IcmpCode::AdminProhibited)));
        r.set_comment(c"ocsb-netlock v1").expect("static comment fits");
    });
    b.finalize()
}

/// `meta nfproto ipv4|ipv6` and then the destination address loaded for the next expression.
fn daddr(r: &mut Rule, v6: bool) {
    r.add_expr(&nft_expr!(meta nfproto));
    if v6 {
        r.add_expr(&nft_expr!(cmp == libc::NFPROTO_IPV6 as u8));
        r.add_expr(&nft_expr!(payload ipv6 daddr));
    } else {
        r.add_expr(&nft_expr!(cmp == libc::NFPROTO_IPV4 as u8));
        r.add_expr(&nft_expr!(payload ipv4 daddr));
    }
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
fn add_del(name: &CStr) -> FinalizedBatch {
    let table = Table::new(name, ProtoFamily::Inet);
    let mut b = Batch::new();
    b.add(&table, MsgType::Add);
    b.add(&table, MsgType::Del);
    b.finalize()
}

fn u32_at(buf: &[u8], off: usize) -> u32 {
    buf.get(off..off + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_ne_bytes)
}

/// The records of a netlink buffer as (offset, type, length): messages when `head` is 16 (u32
/// length, u16 type), attributes when it is 4 (u16 length, u16 type without the nested and
/// byte-order bits). A torn or garbage record ends the walk.
fn records(buf: &[u8], head: usize) -> Vec<(usize, u16, usize)> {
    let (mut out, mut off) = (Vec::new(), 0);
    while off + head <= buf.len() {
        let (len, ty) = if head == 16 {
            (u32_at(buf, off) as usize, u16::from_ne_bytes([buf[off + 4], buf[off + 5]]))
        } else {
            let len = u16::from_ne_bytes([buf[off], buf[off + 1]]) as usize;
            (len, u16::from_ne_bytes([buf[off + 2], buf[off + 3]]) & 0x3fff)
        };
        if len < head || off + len > buf.len() {
            break;
        }
        out.push((off, ty, len));
        off += (len + 3) & !3;
    }
    out
}

/// The value of attribute `ty` in a message payload that starts with the 4-byte nfgenmsg.
fn attr(payload: &[u8], ty: u16) -> Option<&[u8]> {
    let attrs = payload.get(4..).unwrap_or_default();
    records(attrs, 4).into_iter().find(|a| a.1 == ty).map(|(off, _, len)| &attrs[off + 4..off + len])
}

/// Sets `NFTA_TABLE_FLAGS` (big-endian u32; nftnl always emits it) in a NEWTABLE payload that
/// starts with the 4-byte nfgenmsg.
fn patch_table_flags(payload: &mut [u8], flags: u32) {
    for (off, ty, len) in records(payload.get(4..).unwrap_or_default(), 4) {
        if ty == NFTA_TABLE_FLAGS && len == 8 {
            payload[4 + off + 4..4 + off + 8].copy_from_slice(&flags.to_be_bytes());
        }
    }
}

fn error_code(payload: &[u8]) -> i32 {
    (u32_at(payload, 0) as i32).wrapping_neg()
}

fn explain(e: io::Error, what: &str) -> anyhow::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) => {
            "\nhint: the caller lacks CAP_NET_ADMIN, or the table is owned by the running ocsb-netlock-helper daemon (use `systemctl reload ocsb-netlock` or `ocsb netlock setup`)"
        }
        Some(libc::ENOENT | libc::EOPNOTSUPP) => "\nhint: the kernel lacks nf_tables support needed here",
        _ => "",
    };
    anyhow!("nftables {what} failed: {e}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr_bytes(ty: u16, val: &[u8]) -> Vec<u8> {
        let mut v = ((4 + val.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(val);
        v.resize((v.len() + 3) & !3, 0);
        v
    }

    #[test]
    fn the_table_is_the_one_of_the_contract() {
        assert_eq!(TABLE.to_str(), Ok(crate::model::TABLE));
    }

    #[test]
    fn patches_only_the_flags_attribute() {
        let mut payload = vec![1, 0, 0, 0]; // nfgenmsg
        payload.extend(attr_bytes(NFTA_TABLE_NAME, b"ocsb_netlock\0"));
        payload.extend(attr_bytes(NFTA_TABLE_FLAGS, &0u32.to_be_bytes()));
        let before = payload.clone();
        patch_table_flags(&mut payload, OWNED);
        assert_eq!(attr(&payload, NFTA_TABLE_NAME), Some(&b"ocsb_netlock\0"[..]));
        assert_eq!(attr(&payload, NFTA_TABLE_FLAGS), Some(&6u32.to_be_bytes()[..]));
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
        let m = records(&buf, 16);
        assert_eq!(m, [(0, NLMSG_ERROR, 20), (20, NLMSG_ERROR, 20)]);
        assert_eq!((u32_at(&buf, 8), error_code(&buf[16..20])), (7, 0));
        assert_eq!((u32_at(&buf, 28), error_code(&buf[36..40])), (8, libc::EPERM));
    }
}
