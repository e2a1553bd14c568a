//! Names the filter namespace's `/etc/hosts` lists (an internal host, a VPN's name) are reached
//! at the hosts file's address, at once, and never asked of the name server, by both backends:
//! with a name server that drops every packet (a laptop off the VPN) and with one that answers
//! another address for them (the public resolver's answer must not be dialled).
//!
//! The hosts file is `/etc/netns/<filter>/hosts`, which `ip netns exec` binds over `/etc/hosts`
//! for the filters it starts; squid reads it as in production (no `hosts_file` of the test's).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::client;
use crate::support::lab::{BUILTIN_PORT, Lab, RULES, SQUID_PORT};
use crate::support::origin;
use crate::support::topology::{ip, sh};

/// Only in the hosts file: one name with an IPv4 address, one with an IPv6 address.
const HOSTS: &str = "\
127.0.0.1 localhost
# written by a VPN client
203.0.113.9   intranet.vpn.test   intranet   # IPv4 only
2001:db8::7   six.vpn.test                   # IPv6 only
";

/// What the lying name server answers for both names: other addresses, with origins there too,
/// so a filter that dialled them would get a 200 naming them.
const LIES: [&str; 2] = ["198.51.100.7", "2001:db8::9"];

/// The veth of namespace `ns` (each lab namespace has one).
fn veth(ns: &str) -> String {
    let out =
        std::process::Command::new("ip").args(["-n", ns, "-o", "link", "show", "type", "veth"]).output();
    let text = String::from_utf8_lossy(&out.unwrap().stdout).into_owned();
    let name = text.split(": ").nth(1).and_then(|s| s.split('@').next());
    name.unwrap_or_else(|| panic!("no veth in {ns}: {text}")).to_string()
}

/// The lab with IPv6 on its veth, origins on the hosts file's and the lies' IPv6 addresses, the
/// hosts file in place and the name server dropping (`lie == false`) or lying.
fn world(lie: bool, rules: &str) -> Lab {
    world_with(lie, rules, None)
}

/// [`world`], with the filter namespace's `/etc/nsswitch.conf` (`ip netns exec` binds it too).
fn world_with(lie: bool, rules: &str, nsswitch: Option<&str>) -> Lab {
    let mut lab = Lab::new(rules);
    let (f, w) = (lab.topo.filter.name().to_string(), lab.topo.world.name().to_string());
    if let Some(text) = nsswitch {
        std::fs::write(format!("/etc/netns/{f}/nsswitch.conf"), text).unwrap();
    }
    sh(&["ip", "-n", &f, "addr", "add", "2001:db8::1/64", "dev", &veth(&f), "nodad"]);
    for a in ["2001:db8::7", "2001:db8::9"] {
        sh(&["ip", "-n", &w, "addr", "add", &format!("{a}/64"), "dev", &veth(&w), "nodad"]);
    }
    let seen = lab.world_seen.clone();
    lab.topo.world.run(move || {
        origin::serve_all(
            vec!["[2001:db8::7]:80".parse().unwrap(), "[2001:db8::9]:80".parse().unwrap()],
            seen,
        )
    });
    std::fs::write(format!("/etc/netns/{f}/hosts"), HOSTS).unwrap();
    {
        let mut z = lab.zone.lock().unwrap();
        z.drop_all = !lie;
        let lies = crate::support::dns::Answer::Fixed(LIES.iter().map(|a| ip(a)).collect());
        for name in ["intranet.vpn.test", "six.vpn.test"] {
            z.names.insert(name.into(), lies.clone());
        }
    }
    lab.squid_system_hosts = true;
    lab.start_builtin();
    lab.start_squid();
    lab
}

/// Through the filter on `port`: each hosts-file name gets 200 within a second from the origin
/// at the hosts file's address, by GET and through a CONNECT tunnel.
fn hosts_names_reach_the_hosts_files_addresses(lab: &Lab, port: u16, backend: &str) {
    let p = SocketAddr::from(([127, 0, 0, 1], port));
    for (name, origin) in [("intranet.vpn.test", "203.0.113.9:80"), ("six.vpn.test", "[2001:db8::7]:80")] {
        let t = Instant::now();
        let url = format!("http://{name}/");
        let r = lab.client(move || client::get(p, &url, name));
        let took = t.elapsed();
        let r = r.unwrap_or_else(|| panic!("{backend}: no answer for {name}"));
        assert_eq!(r.status, 200, "{backend}: {name}: {r:?}");
        assert!(
            r.body.starts_with(&format!("origin={origin} ")),
            "{backend}: {name} dialled elsewhere: {r:?}"
        );
        assert!(took < Duration::from_secs(1), "{backend}: {name} took {took:?}");

        let t = Instant::now();
        let authority = format!("{name}:80");
        let (first, inner) = lab.client(move || client::connect(p, &authority));
        let took = t.elapsed();
        assert_eq!(first.map(|r| r.status), Some(200), "{backend}: CONNECT {name}");
        let inner = inner.unwrap_or_else(|| panic!("{backend}: nothing through the tunnel to {name}"));
        assert!(
            inner.body.starts_with(&format!("origin={origin} ")),
            "{backend}: {name} tunnelled elsewhere: {inner:?}"
        );
        assert!(took < Duration::from_secs(1), "{backend}: CONNECT {name} took {took:?}");
    }
}

fn asked(lab: &Lab, name: &str) -> usize {
    lab.zone.lock().unwrap().asked.iter().filter(|(n, _)| n == name).count()
}

fn never_asked(lab: &Lab) {
    let asked = lab.zone.lock().unwrap().asked.clone();
    let hosts: Vec<_> = asked.iter().filter(|(n, _)| n.contains("vpn.test") || n == "intranet").collect();
    assert!(hosts.is_empty(), "the name server was asked for hosts-file names: {hosts:?}");
}

#[test]
fn a_silent_name_server_holds_up_no_hosts_file_name() {
    let lab = world(false, RULES);
    hosts_names_reach_the_hosts_files_addresses(&lab, BUILTIN_PORT, "builtin");
    hosts_names_reach_the_hosts_files_addresses(&lab, SQUID_PORT, "squid");
    never_asked(&lab);
    // The name server is really gone, and the test sees what the filters ask it: a name the
    // hosts file does not list is asked, and gets no address.
    for (port, backend) in [(BUILTIN_PORT, "builtin"), (SQUID_PORT, "squid")] {
        let p = SocketAddr::from(([127, 0, 0, 1], port));
        let before = asked(&lab, "pub.test.net");
        let r = lab.client(move || client::get(p, "http://pub.test.net/", "pub.test.net")).unwrap();
        // The builtin filter's `cannot resolve`; squid's answer to a name server that never
        // answers is a read error.
        assert!(matches!(r.status, 502 | 503), "{backend}: {r:?}");
        assert!(asked(&lab, "pub.test.net") > before, "{backend} did not ask the name server");
    }
    never_asked(&lab);
}

#[test]
fn a_lying_name_server_is_never_asked_for_hosts_file_names() {
    let lab = world(true, RULES);
    hosts_names_reach_the_hosts_files_addresses(&lab, BUILTIN_PORT, "builtin");
    hosts_names_reach_the_hosts_files_addresses(&lab, SQUID_PORT, "squid");
    never_asked(&lab);
    // Names the hosts file does not list still come from the name server.
    for (port, backend) in [(BUILTIN_PORT, "builtin"), (SQUID_PORT, "squid")] {
        let p = SocketAddr::from(([127, 0, 0, 1], port));
        let r = lab.client(move || client::get(p, "http://pub.test.net/", "pub.test.net")).unwrap();
        assert_eq!(r.status, 200, "{backend}: {r:?}");
        assert!(r.body.starts_with("origin=198.51.100.7:80 "), "{backend}: {r:?}");
    }
    assert!(asked(&lab, "pub.test.net") > 0);
    never_asked(&lab);
}

/// A VPN client edits the hosts file while the filter runs: the builtin filter uses the new
/// address with the next request, still without asking the name server. (squid reads its
/// hosts file when it starts and when its configuration is reloaded.)
#[test]
fn the_builtin_filter_follows_an_edited_hosts_file() {
    let lab = world(false, RULES);
    let p = SocketAddr::from(([127, 0, 0, 1], BUILTIN_PORT));
    let hosts = format!("/etc/netns/{}/hosts", lab.topo.filter.name());
    // In place (the bind mount shows the same file): a new name, and another address.
    std::fs::write(
        &hosts,
        format!("{HOSTS}198.51.100.7 added.vpn.test\n").replace("203.0.113.9 ", "198.51.100.7"),
    )
    .unwrap();
    for name in ["intranet.vpn.test", "added.vpn.test"] {
        let url = format!("http://{name}/");
        let t = Instant::now();
        let r = lab.client(move || client::get(p, &url, name)).unwrap();
        assert_eq!(r.status, 200, "{name}: {r:?}");
        assert!(r.body.starts_with("origin=198.51.100.7:80 "), "{name}: {r:?}");
        assert!(t.elapsed() < Duration::from_secs(1), "{name} took {:?}", t.elapsed());
    }
    never_asked(&lab);
}

/// `ocsb egress verify`'s checks of hosts-file names pass with the name server gone.
#[test]
fn egress_verify_passes_for_hosts_file_names_with_a_silent_name_server() {
    let urls = ["http://intranet.vpn.test/", "http://six.vpn.test/"];
    let expect: String = urls.iter().map(|u| format!("expect-pass {u}\n")).collect();
    let lab = world(false, &format!("{RULES}{expect}"));
    let mut opts = ocsb_egress::verify::VerifyOptions::new(SocketAddr::from(([127, 0, 0, 1], BUILTIN_PORT)));
    opts.wrap = ["ip", "netns", "exec", lab.topo.filter.name()].map(Into::into).to_vec();
    opts.max_time = 10;
    let t = Instant::now();
    let report = ocsb_egress::verify::run(&lab.instance().load_policy().unwrap(), &opts).unwrap();
    for url in urls {
        let check =
            report.checks.iter().find(|c| c.url == url).unwrap_or_else(|| panic!("{url}: {report:#?}"));
        assert!(check.ok, "{check:?}");
    }
    assert!(t.elapsed() < Duration::from_secs(5), "verify took {:?}", t.elapsed());
    never_asked(&lab);
}

/// `hosts: dns files` in `/etc/nsswitch.conf`: the builtin filter asks the name server first, as
/// the system does, and dials its answer. (squid knows no nsswitch.conf: its hosts file comes
/// first whatever the line says.)
#[test]
fn the_builtin_filter_follows_nsswitch_conf_dns_first() {
    let lab = world_with(true, RULES, Some("passwd: files\nhosts: dns files\n"));
    let p = SocketAddr::from(([127, 0, 0, 1], BUILTIN_PORT));
    for name in ["intranet.vpn.test", "six.vpn.test"] {
        let url = format!("http://{name}/");
        let r = lab.client(move || client::get(p, &url, name)).unwrap();
        assert_eq!(r.status, 200, "{name}: {r:?}");
        let lied = ["origin=198.51.100.7:80 ", "origin=[2001:db8::9]:80 "];
        assert!(lied.iter().any(|o| r.body.starts_with(o)), "{name}: not the name server's answer: {r:?}");
        assert!(asked(&lab, name) > 0, "{name} was not asked of the name server");
    }
}
