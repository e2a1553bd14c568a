//! Rendered configs go through the real `squid -k parse`, which must be silent: rc 0 and no
//! ERROR/WARNING line (squid drops a bad regex with only an ERROR and rc 0).

use std::path::Path;

use crate::support::{SEED_RULES, compile, squid_parse_clean};
use ocsb_policy::egress::{SquidOptions, loopback_clients, validate_regex};
use proptest::prelude::*;

fn host_options(dir: &Path) -> SquidOptions {
    SquidOptions::host_process(dir, vec!["127.0.0.1:3128".parse().unwrap()])
}

#[test]
fn egress_squid_parse_seed_host_variant() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = host_options(dir.path());
    o.hosts_file = Some(dir.path().join("hosts"));
    o.dns_nameservers = vec!["127.0.0.1".parse().unwrap()];
    std::fs::write(dir.path().join("hosts"), "127.0.0.3 git.example.com\n").unwrap();
    squid_parse_clean(&compile(SEED_RULES).render_squid(&o).unwrap());
}

#[test]
fn egress_squid_parse_seed_container_variant() {
    let mut clients = loopback_clients();
    clients.push(ocsb_policy::egress::IpNet::parse("172.17.0.0/16").unwrap());
    let o = SquidOptions::container(
        vec!["127.0.0.1:3128".parse().unwrap(), "172.17.0.1:3128".parse().unwrap()],
        clients,
    );
    squid_parse_clean(&compile(SEED_RULES).render_squid(&o).unwrap());
}

/// Overlaps that squid 5/6 turn into WARNINGs or FATALs when they share an ACL, a regex that
/// starts with `-` (squid would read it as an option without `--`), empty policies, IPv6.
#[test]
fn egress_squid_parse_overlaps_and_edges() {
    let dir = tempfile::tempdir().unwrap();
    for rules in [
        "",
        "block jira.example.com .example.com example.com\nblock .example.com www.example.com\n",
        "allow example.com .example.com\nallow .example.com\nblock example.com\n",
        "allow 10.0.0.0/8 10.0.0.5 10.1.0.0/16\nblock 10.0.0.0/8\nblock 10.2.0.0/16\n",
        "allow ::1 fe80::/10 fe80::1 [2001:db8::1] ::ffff:10.0.0.1\n",
        "block-regex -prod ^a ^a (x|y)z{1,3}$ [[:digit:]]+\\.example\\.com\n",
        "connect h.test:22 H.test.:22 .h.test:22 [fd00::5]:22 10.0.0.5:22 10.0.0.5:23\n",
        "allow wiki intranet\nblock x.test 192.168.0.0/16 ::/96 2001:db8::/32 0.0.0.0/0 ::102:304\n",
    ] {
        let conf = compile(rules).render_squid(&host_options(dir.path())).unwrap();
        squid_parse_clean(&conf);
    }
}

/// The checker itself must see what squid complains about (else the tests above prove nothing).
#[test]
fn egress_squid_parse_checker_catches_problems() {
    let dir = tempfile::tempdir().unwrap();
    let good = compile("block .example.com\n").render_squid(&host_options(dir.path())).unwrap();
    for (bad, why) in [
        (
            good.replace("dstdomain -n .example.com", "dstdomain -n .example.com jira.example.com"),
            "overlap warning",
        ),
        (
            good.replace("dstdomain -n .example.com", "dstdomain -n jira.example.com .example.com"),
            "overlap fatal",
        ),
        (good.replace("acl no_dot dstdom_regex -n ^[^.]*$", "acl no_dot dstdom_regex -n ^[a-"), "bad regex"),
        (format!("via off\n{good}"), "via off"),
    ] {
        let r = std::panic::catch_unwind(|| squid_parse_clean(&bad));
        assert!(r.is_err(), "the checker accepted a config with a {why}");
    }
}

// ---- property: every valid rule set renders to a config squid parses clean ----

fn label() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "example", "com", "test", "x-y", "git", "prod", "s3", "Corp"])
        .prop_map(String::from)
}

fn name() -> impl Strategy<Value = String> {
    (prop::collection::vec(label(), 1..4), any::<bool>(), any::<bool>()).prop_map(
        |(labels, dot, trailing)| {
            let mut n = labels.join(".");
            if dot {
                n.insert(0, '.');
            }
            if trailing {
                n.push('.');
            }
            n
        },
    )
}

fn net() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            prop::sample::select(vec![[10u8, 0, 0, 0], [10, 1, 2, 3], [192, 168, 1, 0], [198, 51, 100, 7]]),
            0u8..=32
        )
            .prop_map(|(a, p)| {
                let bits = u32::from_be_bytes(a) & if p == 0 { 0 } else { u32::MAX << (32 - p) };
                let a = std::net::Ipv4Addr::from(bits);
                if p == 32 { a.to_string() } else { format!("{a}/{p}") }
            }),
        prop::sample::select(vec![
            "::1",
            "fe80::/10",
            "fe80::1",
            "[2001:db8::5]",
            "fd00::/8",
            "::ffff:10.1.2.3"
        ])
        .prop_map(String::from),
    ]
}

fn regex() -> impl Strategy<Value = String> {
    let atom = prop::sample::select(vec![
        "a",
        "b",
        "prod",
        "-",
        "_",
        ".",
        ".*",
        "\\.",
        "[a-z0-9-]",
        "[^.]",
        "[[:digit:]]",
        "(a|b)",
        "(x|y\\.z)",
        "\\-",
    ]);
    let quant = prop::sample::select(vec!["", "", "*", "+", "?", "{2}", "{1,}", "{0,3}"]);
    (any::<bool>(), prop::collection::vec((atom, quant), 1..5), any::<bool>())
        .prop_map(|(hat, parts, dollar)| {
            let mut s = String::new();
            if hat {
                s.push('^');
            }
            for (a, q) in parts {
                s.push_str(a);
                s.push_str(q);
            }
            if dollar {
                s.push('$');
            }
            s
        })
        .prop_filter("in the subset", |s| validate_regex(s).is_ok())
}

fn line() -> impl Strategy<Value = String> {
    let hosts =
        || prop::collection::vec(prop_oneof![3 => name(), 1 => net()], 1..5).prop_map(|v| v.join(" "));
    prop_oneof![
        hosts().prop_map(|v| format!("allow {v}")),
        hosts().prop_map(|v| format!("block {v}")),
        prop::collection::vec(regex(), 1..3).prop_map(|v| format!("allow-regex {}", v.join(" "))),
        prop::collection::vec(regex(), 1..3).prop_map(|v| format!("block-regex {}", v.join(" "))),
        Just("block-regex .*".to_string()),
        prop::collection::vec(
            (
                prop_oneof![
                    name(),
                    prop::sample::select(vec!["10.0.0.5".to_string(), "[fd00::5]".to_string()])
                ],
                1u16..=65535
            ),
            1..3
        )
        .prop_map(|v| format!(
            "connect {}",
            v.iter().map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>().join(" ")
        )),
        Just("expect-pass https://gitlab.example.com/ -k".to_string()),
        Just("# a comment".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn egress_squid_parse_never_fails_for_valid_rules(lines in prop::collection::vec(line(), 0..12)) {
        let text = lines.join("\n");
        let policy = compile(&text);
        let dir = tempfile::tempdir().unwrap();
        let conf = policy.render_squid(&host_options(dir.path())).unwrap();
        squid_parse_clean(&conf);
    }
}
