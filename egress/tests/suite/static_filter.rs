//! The filter as `make` builds and installs it: `ocsb-egress`, linked statically. Static glibc
//! cannot do NSS lookups (user, group and host databases, `getaddrinfo`): it would load the NSS
//! modules of the glibc it was linked with, whatever the host runs. So the filter must never
//! make one; every name it resolves goes to its own resolver, which reads `/etc/hosts` and
//! `/etc/nsswitch.conf`'s `hosts:` line as text itself. Under strace it serves a name, an IP
//! literal, a CONNECT and a denial, and loads no NSS module nor connects to an NSS daemon.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::support::client;
use crate::support::lab::{BUILTIN_PORT, Lab, RULES};

/// `target/release/static/ocsb-egress`, which `make` links (`make test` does before the tests).
fn static_filter() -> PathBuf {
    let release = std::path::Path::new(env!("CARGO_BIN_EXE_ocsb-egress")).parent().unwrap();
    let path = release.join("static/ocsb-egress");
    assert!(path.is_file(), "{} is missing: run `make build` (make test does) first", path.display());
    path
}

#[test]
fn the_static_filter_serves_without_a_single_nss_lookup() {
    let filter = static_filter();
    let mut lab = Lab::new(RULES);
    let out = tempfile::tempdir().unwrap();
    let trace = out.path().join("trace");
    lab.serve_program = ["strace", "-f", "-qq", "-e", "trace=open,openat,connect", "-o"]
        .map(Into::into)
        .into_iter()
        .chain([trace.clone().into(), filter.into(), "serve".into()])
        .collect();
    lab.start_builtin();
    let p = SocketAddr::from(([127, 0, 0, 1], BUILTIN_PORT));
    assert_eq!(lab.client(move || client::get(p, "http://pub.test.net/", "x")).unwrap().status, 200);
    assert_eq!(lab.client(move || client::get(p, "http://198.51.100.7/", "x")).unwrap().status, 200);
    assert_eq!(lab.client(move || client::get(p, "http://www.example.com/", "x")).unwrap().status, 403);
    let (first, inner) = lab.client(move || client::connect(p, "192.0.2.10:8080"));
    assert_eq!((first.unwrap().status, inner.map(|r| r.status)), (200, Some(200)));
    // Down: the filter has exited, and strace with it.
    drop(lab);

    let trace = std::fs::read_to_string(&trace).unwrap();
    // The trace works: the filter opened its access log.
    assert!(trace.contains("access.log"), "strace saw no open of the access log:\n{trace}");
    // And it connected to the origins (198.51.100.7 and the lab's DNS server) under the trace.
    assert!(trace.contains("connect(") && trace.contains("198.51.100.7"), "strace saw no connect:\n{trace}");
    // The NSS modules and databases, and the daemons NSS asks instead (nscd, systemd's user
    // database).
    for nss in ["libnss_", "/etc/passwd", "/etc/group", "/etc/gai.conf", "nscd", "/run/systemd/userdb"] {
        let hit: Vec<&str> = trace.lines().filter(|l| l.contains(nss)).collect();
        assert!(hit.is_empty(), "the static filter opened {nss}:\n{}", hit.join("\n"));
    }
}
