//! The pure model of the table: `(gid, dns4, dns6)` and its rendering from `netlock.nft`.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Serialize;

/// The audited text contract, shipped beside the source.
pub const CONTRACT: &str = include_str!("../netlock.nft");
pub const TABLE: &str = "ocsb_netlock";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Model {
    pub gid: u32,
    pub dns4: Vec<Ipv4Addr>,
    pub dns6: Vec<Ipv6Addr>,
    /// `dns = "none"`: port 53 is closed on loopback too (a local resolver such as
    /// systemd-resolved or dnsmasq forwards anything, so it is as good as a remote one).
    pub no_dns: bool,
    /// `owner_flags = false` in the config: use no `owner|persist` flags even where the kernel
    /// has them, and guard the table with the watcher alone (what kernels before 6.9 get). Not in
    /// the status file, whose `owner_flags` says what the table has.
    #[serde(skip)]
    pub owner_flags: bool,
}

impl Model {
    /// Servers are sorted and deduplicated, so equal inputs give equal models (and tables).
    pub fn new(gid: u32, servers: &[IpAddr], no_dns: bool) -> Model {
        let canonical: BTreeSet<IpAddr> = servers.iter().map(IpAddr::to_canonical).collect();
        let (mut dns4, mut dns6) = (Vec::new(), Vec::new());
        canonical.into_iter().for_each(|a| match a {
            IpAddr::V4(a) => dns4.push(a),
            IpAddr::V6(a) => dns6.push(a),
        });
        Model { gid, dns4, dns6, no_dns, owner_flags: true }
    }

    /// The text `nft -s list table inet ocsb_netlock` prints for this model. `owned` says whether
    /// the table carries the owner/persist flags. nft 1.0.x prints `flags owner` while the owner
    /// lives (and `# progname NAME` after the brace) and a bare `flags` once it is orphaned;
    /// [`normalize`] folds those version-dependent spellings, the netlink flags are checked apart.
    pub fn render(&self, owned: bool) -> String {
        let mut out = String::new();
        for line in CONTRACT.lines().skip_while(|l| l.starts_with('#')) {
            out += &match line {
                "@FLAGS@" => if owned { "\tflags owner\n\n" } else { "" }.to_string(),
                "@DNS4@" => elements(&self.dns4),
                "@DNS6@" => elements(&self.dns6),
                "@NODNS@" if self.no_dns => ["udp", "tcp"]
                    .map(|l4| format!("\t\t{l4} dport 53 reject with icmpx admin-prohibited\n"))
                    .concat(),
                "@NODNS@" => String::new(),
                _ => line.replace("@GID@", &self.gid.to_string()) + "\n",
            };
        }
        out
    }
}

fn elements<T: ToString>(set: &[T]) -> String {
    let list: Vec<String> = set.iter().map(T::to_string).collect();
    if list.is_empty() { String::new() } else { format!("\t\telements = {{ {} }}\n", list.join(", ")) }
}

/// Normalises `nft` output for comparison: element lists may be wrapped over several lines and
/// listed in kernel order, so they are joined and sorted; the owner's `# progname` comment and the
/// names on the `flags` line depend on the nft version and on whether the owner still runs, so
/// they are dropped (the flags are checked over netlink); everything else must match exactly.
pub fn normalize(text: &str) -> String {
    let (mut out, mut pending) = (String::new(), None::<String>);
    for line in text.lines() {
        let line = match pending.take() {
            Some(acc) => acc + " " + line.trim(),
            None => line.trim_end().to_string(),
        };
        let set = line.trim().strip_prefix("elements = {");
        if set.is_some_and(|l| !l.ends_with('}')) {
            pending = Some(line);
            continue;
        }
        if let Some(items) = set.and_then(|l| l.strip_suffix('}')) {
            let mut items: Vec<&str> = items.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
            items.sort();
            out += &format!("\t\telements = {{ {} }}", items.join(", "));
        } else if line.starts_with("table ") {
            out += line.split(" # ").next().unwrap_or_default().trim_end();
        } else if line.trim_start().starts_with("flags") && !line.starts_with("\t\t") {
            out += "\tflags";
        } else {
            out += &line;
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_fills_placeholders() {
        let m = Model::new(4242, &["192.0.2.53".parse().unwrap(), "2001:db8::53".parse().unwrap()], false);
        let t = m.render(true);
        assert!(t.starts_with("table inet ocsb_netlock {\n\tflags owner\n\n\tset dns4 {"), "{t}");
        assert!(t.contains("\t\telements = { 192.0.2.53 }\n"));
        assert!(t.contains("\t\telements = { 2001:db8::53 }\n"));
        assert!(t.contains("meta skgid 4242 jump locked"));
        assert!(!t.contains('@') || t.contains("@dns4"), "{t}");
        assert!(!t.contains("dport 53 reject"), "{t}");
        let e = Model::new(7, &[], true).render(false);
        assert!(!e.contains("elements") && !e.contains("flags"), "{e}");
        let locked = e.find("chain locked {").unwrap();
        let udp = e.find("\t\tudp dport 53 reject with icmpx admin-prohibited\n").unwrap();
        assert!(locked < udp && udp < e.find("ip daddr 127.0.0.0/8 accept").unwrap(), "{e}");
    }

    #[test]
    fn normalize_joins_and_sorts_elements() {
        let a = "x\n\t\telements = { 192.0.2.2,\n\t\t\t     192.0.2.1 }\ny\n";
        assert_eq!(normalize(a), "x\n\t\telements = { 192.0.2.1, 192.0.2.2 }\ny\n");
        let b = "table inet ocsb_netlock { # progname ocsb-netlock-he\n\tflags owner,persist\n";
        assert_eq!(normalize(b), "table inet ocsb_netlock {\n\tflags\n");
    }
}
