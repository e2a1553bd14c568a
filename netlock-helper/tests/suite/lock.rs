//! The lock matrix (who is locked, what passes: loopback and the resolv.conf DNS servers; how the
//! shim refuses a wrong use), through the real setgid shim and the real helper, as the ordinary
//! user ocsb-test, inside namespaces the test creates.

use crate::support::world::*;

#[test]
fn locked_gid_is_blocked_and_only_loopback_and_resolv_conf_dns_pass() {
    let w = World::new();
    ok(&mut w.helper(&["apply"]));

    // Controls: gid 0 and the user's own gid still reach the world.
    assert_eq!(w.probe_root(&["tcp", WORLD4, "8080"]), "ok");
    assert_eq!(w.probe_root(&["udp", WORLD6, "9"]), "ok");
    assert_eq!(w.probe_user_plain("1990", &["--init-groups"], &["tcp", WORLD4, "8080"]), "ok");

    // Through the shim: gid G everywhere, blocked with the documented errnos.
    let ids = w.probe(&["ids"]);
    let g = w.gid;
    assert!(ids.starts_with(&format!("rgid={g} egid={g} sgid={g} fsgid={g} nnp=1 ")), "{ids}");
    assert!(ids.ends_with("argv0=ocsb"), "{ids}");
    assert_eq!(w.probe(&["tcp", WORLD4, "8080"]), "EHOSTUNREACH");
    assert_eq!(w.probe(&["tcp", WORLD6, "8080"]), "EACCES");
    assert_eq!(w.probe(&["udp", WORLD4, "9"]), "EPERM");
    assert_eq!(w.probe(&["udp", WORLD6, "9"]), "EPERM");
    // The probe the launcher uses: a documentation address off-link.
    assert_eq!(w.probe(&["udp", "192.0.2.1", "9"]), "EPERM");
    // The lock side's own veth address is not loopback: blocked (no `oifname "lo"` hole).
    assert_eq!(w.probe(&["tcp", "198.51.100.1", "22"]), "EHOSTUNREACH");

    // Loopback passes.
    assert_eq!(w.probe(&["tcp-self", "127.0.0.1"]), "ok");
    assert_eq!(w.probe(&["tcp-self", "127.0.0.53"]), "ok");
    assert_eq!(w.probe(&["tcp-self", "::1"]), "ok");

    // The resolv.conf DNS servers pass on port 53, v4 and v6, UDP and TCP ...
    for dns in [DNS4, DNS6] {
        assert_eq!(w.probe(&["udp", dns, "53"]), "ok", "udp {dns}");
        assert_eq!(w.probe(&["tcp", dns, "53"]), "ok", "tcp {dns}");
        // ... but not on other ports.
        assert_ne!(w.probe(&["tcp", dns, "8080"]), "ok");
    }
    // Other port-53 targets are blocked.
    assert_eq!(w.probe(&["udp", OTHER53_4, "53"]), "EPERM");
    assert_eq!(w.probe(&["tcp", OTHER53_4, "53"]), "EHOSTUNREACH");
    assert_eq!(w.probe(&["udp", OTHER53_6, "53"]), "EPERM");
    assert_eq!(w.probe(&["tcp", OTHER53_6, "53"]), "EACCES");
}

#[test]
fn supplementary_membership_does_not_lock_and_userns_root_stays_locked() {
    let w = World::new();
    ok(&mut w.helper(&["apply"]));
    let g = w.gid.to_string();
    // G only as a supplementary group: not locked (meta skgid is the fsgid).
    assert_eq!(w.probe_user_plain("1990", &["--groups", &g], &["tcp", WORLD4, "8080"]), "ok");
    // G as primary gid without the shim (as `sg` would do): locked.
    assert_eq!(w.probe_user_plain(&g, &["--clear-groups"], &["tcp", WORLD4, "8080"]), "EHOSTUNREACH");
    // Root of a fresh user namespace (gid G mapped to 0) is still locked: the kernel gid counts.
    assert_eq!(w.probe(&["userns", WORLD4, "8080"]), "uid=0 gid=0 EHOSTUNREACH");
}

#[test]
fn the_gid_cannot_be_shed_again() {
    let w = World::new();
    ok(&mut w.helper(&["apply"]));
    // setresgid(G,G,G): the user's own gid is gone from r/e/s, and no capability brings it back.
    assert_eq!(
        w.probe(&["setegid", &TEST_UID.to_string(), WORLD4, "8080"]),
        "setegid:EPERM setgid:EPERM setregid:EPERM EHOSTUNREACH"
    );
}

#[test]
fn shim_refuses_under_no_new_privs_and_runs_nothing() {
    let w = World::new();
    let shim = w.shim_path();
    let out = run(&mut w.lock.exec(&[
        "setpriv",
        "--no-new-privs",
        "--reuid",
        "1990",
        "--regid",
        "1990",
        "--init-groups",
        &shim,
        "ids",
    ]));
    assert_eq!(out.status.code(), Some(126));
    assert!(out.stdout.is_empty(), "the stage-2 program ran: {}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("set-group-id bit did not take effect"), "{err}");
}

#[test]
fn shim_closes_inherited_fds_and_tightens_umask() {
    let w = World::new();
    let shim = w.shim_path();
    // fd 5 (a socket created before the switch would bypass the lock) must not cross over.
    let script = format!("umask 002; exec 5</etc/hostname 7</etc/hostname; exec {shim} ids");
    let out = ok(&mut w.as_user(&["sh", "-c", &script]));
    // 0,1,2 and the directory fd of the listing itself (3).
    assert!(out.contains(" fds=0,1,2,3 "), "{out}");
    // Group bits never exceed other bits and never include write: 002 → 022.
    assert!(out.contains(" umask=022 "), "{out}");
}

#[test]
fn shim_refuses_a_wrong_installation() {
    let w = World::new();
    let shim = w.shim_path();
    // Not set-gid: refuse rather than run unlocked.
    ok(std::process::Command::new("chmod").args(["0755", &shim]));
    let out = run(&mut w.as_user(&[&shim, "ids"]));
    assert_eq!(out.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&out.stderr).contains("set-group-id"), "{out:?}");
    // Set-gid to another group (here: root's group 0): refuse, never grant that group.
    ok(std::process::Command::new("chown").args(["root:root", &shim]));
    ok(std::process::Command::new("chmod").args(["2755", &shim]));
    let out = run(&mut w.as_user(&[&shim, "ids"]));
    assert_eq!(out.status.code(), Some(126));
    assert!(out.stdout.is_empty());
}

/// A NAT rule in another table (sshuttle, tor and transparent proxies install them) does not
/// move a locked connect: neither a redirect of a remote address to a local listener nor a dnat
/// of a loopback address to a remote one gets through, while root (the control) reaches both.
#[test]
fn nat_rules_elsewhere_do_not_go_around_the_lock() {
    let w = World::new();
    ok(&mut w.helper(&["apply"]));
    let _local = w.local_servers("8081");
    ok(&mut w.lock.exec(&[
        "sh",
        "-ec",
        "sysctl -qw net.ipv4.conf.all.route_localnet=1
         printf '%s\\n' 'table ip ocsb_test_nat {' \
           ' chain out {' '  type nat hook output priority -100; policy accept;' \
           '  ip daddr 203.0.113.7 tcp dport 80 redirect to :8081' \
           '  ip daddr 127.0.0.9 tcp dport 8080 dnat to 198.51.100.2:8080' ' }' \
           ' chain post {' '  type nat hook postrouting priority 100; policy accept;' \
           '  ip daddr 198.51.100.2 masquerade' ' }' '}' | nft -f -",
    ]));
    // Controls: the rules work for everyone else.
    assert_eq!(w.probe_root(&["tcp", "203.0.113.7", "80"]), "ok", "redirect to the local listener");
    assert_eq!(w.probe_root(&["tcp", "127.0.0.9", "8080"]), "ok", "loopback dnat to the world");
    // Locked: judged before NAT (the remote address) and after it (the remote target).
    assert_eq!(w.probe(&["tcp", "203.0.113.7", "80"]), "EHOSTUNREACH");
    assert_eq!(w.probe(&["tcp", "127.0.0.9", "8080"]), "EHOSTUNREACH");
    // Loopback and DNS still pass.
    assert_eq!(w.probe(&["tcp-self", "127.0.0.1"]), "ok");
    assert_eq!(w.probe(&["udp", DNS4, "53"]), "ok");
}

/// An internet socket made outside the lock and handed over on stdin, stdout or stderr would
/// connect unlocked: the shim refuses to run anything. A unix socket there is fine (the control).
#[test]
fn shim_refuses_network_sockets_on_stdio() {
    let w = World::new();
    let shim = w.shim_path();
    for fd in 0..=2 {
        let py = format!(
            "import socket, os; s = socket.create_connection(('{WORLD4}', 8080)); os.dup2(s.fileno(), {fd}); \
             os.execv('{shim}', ['{shim}', 'ids'])"
        );
        let out = run(&mut w.as_user(&["/usr/bin/python3", "-c", &py]));
        assert_eq!(out.status.code(), Some(126), "fd {fd}: {out:?}");
        if fd != 2 {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(&format!("descriptor {fd} is a network socket")), "{err}");
        }
        assert!(!String::from_utf8_lossy(&out.stdout).contains("rgid="), "fd {fd} ran: {out:?}");
    }
    // A packet socket (made by root, handed to the user) sends raw frames around the lock too;
    // an XDP socket (family 44) is one whose address `getsockname` cannot read.
    for family in
        ["socket.AF_PACKET, socket.SOCK_DGRAM", "socket.AF_NETLINK, socket.SOCK_RAW", "44, socket.SOCK_RAW"]
    {
        let py = format!(
            "import socket, os; s = socket.socket({family}); os.dup2(s.fileno(), 0); \
             os.execv('/usr/bin/setpriv', ['setpriv', '--reuid', '1990', '--regid', '1990', '--init-groups', '{shim}', 'ids'])"
        );
        let out = run(&mut w.lock.exec(&["/usr/bin/python3", "-c", &py]));
        assert_eq!(out.status.code(), Some(126), "{family}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("descriptor 0 is a network socket"), "{out:?}");
    }
    let py = format!(
        "import socket, os; a, b = socket.socketpair(); os.dup2(a.fileno(), 0); os.execv('{shim}', ['{shim}', 'ids'])"
    );
    assert!(ok(&mut w.as_user(&["/usr/bin/python3", "-c", &py])).contains("rgid="), "unix socket on stdin");
}
