//! Renders the squid.conf that implements the policy (squid 5, 6 and 7).
//!
//! Facts this relies on (measured on squid 5.7; the differential tests check them against a running squid):
//! * `http_access` lines are evaluated top-down and the first full match decides; the
//!   `annotate_transaction` ACL at the end of each line records which line that was, for the
//!   log (`%{egress_rule}note`) and the `X-Egress-Decision` reply header.
//! * `-n` on `dstdomain`/`dstdom_regex`/`dst` stops reverse/forward DNS, so only the final
//!   `private_dst` ACL resolves names: it matches if **any** address is private.
//! * squid 5/6 reject or warn about overlapping entries inside one ACL: every source line gets
//!   its own ACL and [`Policy::compile`] removed covered entries.
//! * squid reads `# text` after a value without complaint, so comments stand on their own lines.
//! * `via off` makes `-k parse` warn; every warning is treated as an error, so it is not used.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use super::compile::{Matcher, Policy, Rule, Source};
use super::decide::RuleKind;
use super::host::{HostPattern, IpNet};
use super::log::SQUID_LOGFORMAT;
use super::private::private_networks;
use super::text::clean;
use crate::{Error, Location, Result};

/// Files a squid image assembled from the host's package needs named explicitly (the package
/// defaults point to paths the image may not have).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFiles {
    pub error_directory: PathBuf,
    pub err_page_stylesheet: PathBuf,
    pub mime_table: PathBuf,
    pub icon_directory: PathBuf,
}

impl ImageFiles {
    /// The Debian/Ubuntu locations.
    pub fn debian() -> Self {
        ImageFiles {
            error_directory: "/usr/share/squid-langpack/templates".into(),
            err_page_stylesheet: "/etc/squid/errorpage.css".into(),
            mime_table: "/usr/share/squid/mime.conf".into(),
            icon_directory: "/usr/share/squid/icons".into(),
        }
    }
}

/// Everything about a squid instance that is not policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquidOptions {
    /// `http_port`s: 127.0.0.1 and the sandbox network's gateway.
    pub listen: Vec<SocketAddr>,
    /// Who may use the proxy (`acl clients src`); anyone else gets 403 `client`.
    pub client_networks: Vec<IpNet>,
    pub pid_file: PathBuf,
    /// Squid's own diagnostics (`/dev/stderr` in a container).
    pub cache_log: PathBuf,
    /// One line per request in [`SQUID_LOGFORMAT`] (`/dev/stdout` in a container).
    pub access_log: PathBuf,
    pub coredump_dir: PathBuf,
    /// Tests only: a hosts file that maps test names (production keeps `/etc/hosts`).
    pub hosts_file: Option<PathBuf>,
    /// Tests only (production uses `/etc/resolv.conf`).
    pub dns_nameservers: Vec<IpAddr>,
    /// squid's default is 30 s; a hanging name should fail fast.
    pub dns_timeout_secs: u32,
    pub image_files: Option<ImageFiles>,
}

impl SquidOptions {
    /// squid as a host process (tests, or a future non-Docker mode): everything in `state_dir`.
    pub fn host_process(state_dir: &Path, listen: Vec<SocketAddr>) -> Self {
        SquidOptions {
            listen,
            client_networks: loopback_clients(),
            pid_file: state_dir.join("squid.pid"),
            cache_log: state_dir.join("cache.log"),
            access_log: state_dir.join("access.log"),
            coredump_dir: state_dir.to_path_buf(),
            hosts_file: None,
            dns_nameservers: vec![],
            dns_timeout_secs: 5,
            image_files: None,
        }
    }

    /// squid in the egress container (host network, read-only rootfs): logs to stdout/stderr.
    pub fn container(listen: Vec<SocketAddr>, client_networks: Vec<IpNet>) -> Self {
        SquidOptions {
            listen,
            client_networks,
            pid_file: "/run/squid/squid.pid".into(),
            cache_log: "/dev/stderr".into(),
            access_log: "/dev/stdout".into(),
            coredump_dir: "/var/spool/squid".into(),
            hosts_file: None,
            dns_nameservers: vec![],
            dns_timeout_secs: 5,
            image_files: Some(ImageFiles::debian()),
        }
    }
}

/// 127.0.0.0/8 and ::1.
pub fn loopback_clients() -> Vec<IpNet> {
    vec![
        IpNet { addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), prefix: 8 },
        IpNet { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), prefix: 128 },
    ]
}

fn opt_err(what: &str, message: String) -> Error {
    Error::input(Location::new("<squid options>", 0, 0), format!("{what}: {message}"))
}

/// A path squid can read from an unquoted config value.
fn path(what: &str, p: &Path) -> Result<String> {
    let s = p.to_str().ok_or_else(|| opt_err(what, format!("{} is not UTF-8", p.display())))?;
    if !s.starts_with('/') {
        return Err(opt_err(what, format!("`{s}` is not an absolute path")));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control() || c == '"') || s.contains("${") {
        return Err(opt_err(
            what,
            format!("`{}` contains a space, quote or `${{`, which squid.conf cannot express", clean(s)),
        )
        .with_hint("choose a state directory without spaces (set OCSB_STATE_DIR)"));
    }
    Ok(s.to_string())
}

fn listen_addr(a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(v) => v.to_string(),
        SocketAddr::V6(v) => format!("[{}]:{}", v.ip(), v.port()),
    }
}

impl Policy {
    /// The squid.conf implementing exactly [`Policy::decide`].
    pub fn render_squid(&self, o: &SquidOptions) -> Result<String> {
        if o.listen.is_empty() {
            return Err(opt_err("listen", "no listen address".into()));
        }
        if o.client_networks.is_empty() {
            return Err(opt_err("client_networks", "no client network".into()));
        }
        let mut c = String::new();
        let w = &mut c;
        let _ = writeln!(w, "# squid.conf generated by ocsb from the egress rules; edits are overwritten.");
        let _ = writeln!(w, "# policy hash {}", self.hash());
        w.push('\n');
        for a in &o.listen {
            let _ = writeln!(w, "http_port {}", listen_addr(a));
        }
        let _ = writeln!(w, "pid_filename {}", path("pid_file", &o.pid_file)?);
        let _ = writeln!(w, "cache_log {}", path("cache_log", &o.cache_log)?);
        let _ = writeln!(w, "logformat ocsb {SQUID_LOGFORMAT}");
        let _ = writeln!(w, "access_log stdio:{} ocsb", path("access_log", &o.access_log)?);
        let _ = writeln!(w, "logfile_rotate 0");
        let _ = writeln!(w, "coredump_dir {}", path("coredump_dir", &o.coredump_dir)?);
        let _ = writeln!(w, "cache deny all");
        let _ = writeln!(w, "cache_mem 8 MB");
        let _ = writeln!(w, "netdb_filename none");
        let _ = writeln!(w, "pinger_enable off");
        if let Some(h) = &o.hosts_file {
            let _ = writeln!(w, "hosts_file {}", path("hosts_file", h)?);
        }
        if !o.dns_nameservers.is_empty() {
            let ns: Vec<String> = o.dns_nameservers.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(w, "dns_nameservers {}", ns.join(" "));
        }
        let _ = writeln!(w, "dns_timeout {} seconds", o.dns_timeout_secs.max(1));
        let _ = writeln!(w, "shutdown_lifetime 1 second");
        let _ = writeln!(w, "visible_hostname ocsb-egress");
        let _ = writeln!(w, "forwarded_for delete");
        let _ = writeln!(w, "httpd_suppress_version_string on");
        if let Some(f) = &o.image_files {
            let _ = writeln!(w, "error_directory {}", path("error_directory", &f.error_directory)?);
            let _ =
                writeln!(w, "err_page_stylesheet {}", path("err_page_stylesheet", &f.err_page_stylesheet)?);
            let _ = writeln!(w, "mime_table {}", path("mime_table", &f.mime_table)?);
            let _ = writeln!(w, "icon_directory {}", path("icon_directory", &f.icon_directory)?);
        }

        w.push_str("\n# fixed ACLs\n");
        let clients: Vec<String> = o.client_networks.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(w, "acl clients src {}", clients.join(" "));
        let _ = writeln!(w, "acl CONNECT method CONNECT");
        let _ = writeln!(w, "acl web_ports port 80 443");
        let _ = writeln!(w, "acl no_dot dstdom_regex -n ^[^.]*$");
        let private: Vec<String> = private_networks().iter().map(squid_net).collect();
        let _ = writeln!(w, "acl private_dst dst {}", private.join(" "));
        let host = self.private.host_addresses();
        if !host.is_empty() {
            // Each IPv4 address also as IPv6 carries it (NAT64, 6to4, …), as the decision judges.
            let v: Vec<String> = host
                .iter()
                .flat_map(|a| {
                    let mut nets = vec![IpNet::host(*a)];
                    if let IpAddr::V4(v4) = a {
                        nets.extend(super::private::embeddings_of(*v4));
                    }
                    nets
                })
                .map(|n| squid_net(&n))
                .collect();
            let _ = writeln!(w, "# the filter host's own addresses: the host, like loopback");
            let _ = writeln!(w, "acl host_dst dst {}", v.join(" "));
        }
        for (name, note) in [
            ("mark_client", RuleKind::Client.tag()),
            ("mark_port", RuleKind::Port.tag()),
            ("mark_nodot", RuleKind::NoDot.tag()),
            ("mark_private", RuleKind::Private.tag()),
            ("mark_default", RuleKind::Default.tag()),
        ] {
            let _ = writeln!(w, "acl {name} annotate_transaction egress_rule={note}");
        }

        let _ = writeln!(w, "acl mark_denied annotate_transaction egress_denied=1");
        let _ = writeln!(w, "acl denied_by_rule note egress_denied 1");
        let _ = writeln!(w, "acl cache_manager proto cache_object");

        // (acl definitions, http_access lines) per rule, in evaluation order. The cache manager
        // (`cache_object://`) would hand any client everyone's in-flight requests and client
        // addresses; the builtin proxy refuses the scheme as a bad request, squid refuses it
        // before the client check (no rule decides, so nothing is annotated).
        let mut access: Vec<String> =
            vec!["http_access deny cache_manager".into(), "http_access deny !clients mark_client".into()];
        if !self.connects.is_empty() {
            w.push_str("\n# connect rules\n");
        }
        for (i, r) in self.connects.iter().enumerate() {
            let n = format!("connect_{}", i + 1);
            comment(w, &r.source, &format!("connect {}:{}", super::compile::bracket(&r.host), r.port));
            let _ = writeln!(w, "acl {n}_host {}", host_acl(std::slice::from_ref(&r.host)));
            let _ = writeln!(w, "acl {n}_port port {}", r.port);
            mark(w, &n, RuleKind::Connect, &r.source);
            access.push(format!("http_access allow CONNECT {n}_host {n}_port {n}_mark"));
        }
        access.push("http_access deny !web_ports mark_port".into());
        for (group, kind, word) in
            [(&self.allows, RuleKind::Allow, "allow"), (&self.blocks, RuleKind::Block, "deny")]
        {
            if !group.is_empty() {
                let _ = writeln!(w, "\n# {} rules", kind.tag());
            }
            for (i, r) in group.iter().enumerate() {
                let n = format!("{}_{}", kind.tag(), i + 1);
                rule_acls(w, &mut access, r, &n, kind, word);
            }
        }
        access.push("http_access deny no_dot mark_nodot".into());
        access.push("http_access deny private_dst mark_private".into());
        if !self.private.host_addresses().is_empty() {
            access.push("http_access deny host_dst mark_private".into());
        }
        access.push("http_access allow all mark_default".into());

        w.push_str("\n# evaluation order: client, connect, port, allow, block, no-dot, private, default\n");
        for a in access {
            w.push_str(&a);
            // Every denial by a rule or step is marked, so that only the filter's own refusals
            // carry the decision header (an origin's 403 is not a filter block).
            if a.starts_with("http_access deny ") && a != "http_access deny cache_manager" {
                w.push_str(" mark_denied");
            }
            w.push('\n');
        }
        w.push_str("\n# tell clients (and agents) that the proxy refused, and why; an origin's copy\n");
        w.push_str("# is removed first (headers are added after the access lists are applied)\n");
        w.push_str("reply_header_access X-Egress-Decision deny all\n");
        w.push_str("reply_header_access X-Egress-Error deny all\n");
        w.push_str("reply_header_add X-Egress-Decision \"%{egress_rule}note\" denied_by_rule\n");
        Ok(c)
    }
}

/// The lines of `squid -k parse` output that make a config unacceptable: any ERROR, WARNING,
/// FATAL or "Bungled" line. squid exits 0 after dropping an invalid regex (only an ERROR says so)
/// and after overlap WARNINGs, so the exit code alone is not enough. Lines where squid echoes the
/// config (`| Processing: …`) are ignored, since a host name may contain such a word.
pub fn squid_parse_problems(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|l| !l.contains("| Processing: "))
        .filter(|l| {
            let u = l.to_ascii_uppercase();
            ["ERROR", "WARNING", "FATAL", "BUNGLED"].iter().any(|w| u.contains(w))
        })
        .map(String::from)
        .collect()
}

fn comment(w: &mut String, src: &Source, what: &str) {
    let _ = writeln!(w, "# {} ({})", clean(what), clean(&src.at.to_string()));
}

fn mark(w: &mut String, n: &str, kind: RuleKind, src: &Source) {
    // The note value is `kind:layer:line`: only [a-z0-9:-], safe unquoted in squid.conf and in a
    // header (squid note values must not contain spaces or quotes).
    let _ = writeln!(
        w,
        "acl {n}_mark annotate_transaction egress_rule={}:{}:{}",
        kind.tag(),
        src.layer.tag(),
        src.at.line
    );
}

/// An IP network as squid's `dst` parses it with the same meaning: squid reads `0.0.0.0/0` as
/// `all` (IPv6 too, with an ERROR), so it becomes two halves; IPv6 is written in plain hex
/// (squid's IPv6 scanner does not take the dotted tail some formatters print).
pub(crate) fn squid_net(n: &IpNet) -> String {
    match n.addr {
        IpAddr::V4(_) if n.prefix == 0 => "0.0.0.0/1 128.0.0.0/1".to_string(),
        IpAddr::V4(a) => format!("{a}/{}", n.prefix),
        IpAddr::V6(a) => {
            let hex: Vec<String> = a.segments().iter().map(|g| format!("{g:x}")).collect();
            format!("{}/{}", hex.join(":"), n.prefix)
        }
    }
}

/// `dstdomain -n` for names, `dst -n` for addresses.
fn host_acl(hosts: &[HostPattern]) -> String {
    if hosts.iter().all(|h| h.is_net()) {
        let v: Vec<String> = hosts
            .iter()
            .map(|h| match h {
                HostPattern::Net(n) => squid_net(n),
                _ => unreachable!(),
            })
            .collect();
        format!("dst -n {}", v.join(" "))
    } else {
        let v: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        format!("dstdomain -n {}", v.join(" "))
    }
}

fn rule_acls(w: &mut String, access: &mut Vec<String>, r: &Rule, n: &str, kind: RuleKind, word: &str) {
    match &r.matcher {
        Matcher::Hosts { names, nets } => {
            let all: Vec<String> = names.iter().chain(nets).map(|h| h.to_string()).collect();
            comment(w, &r.source, &format!("{} {}", kind.tag(), all.join(" ")));
            if !names.is_empty() {
                let _ = writeln!(w, "acl {n}_names {}", host_acl(names));
                access.push(format!("http_access {word} {n}_names {n}_mark"));
            }
            if !nets.is_empty() {
                let _ = writeln!(w, "acl {n}_nets {}", host_acl(nets));
                access.push(format!("http_access {word} {n}_nets {n}_mark"));
            }
        }
        Matcher::Regex { patterns, .. } => {
            comment(w, &r.source, &format!("{}-regex {}", kind.tag(), patterns.join(" ")));
            // `--` ends squid's ACL options, so a pattern may start with `-`.
            let _ = writeln!(w, "acl {n}_re dstdom_regex -n -i -- {}", patterns.join(" "));
            access.push(format!("http_access {word} {n}_re {n}_mark"));
        }
    }
    mark(w, n, kind, &r.source);
}
