//! Decisions, normalisation, layers and the rendered config (golden file) of the egress policy.

use std::net::IpAddr;
use std::path::Path;

use crate::support::{SEED_RULES, compile, project};
use ocsb_policy::egress::{
    EgressLayer, ExpectKind, LayerText, Policy, RuleKind, SquidOptions, Step, Target, Verdict, load_layers,
};

fn target(line: &str) -> Target {
    let (m, t) = line.split_once(' ').unwrap();
    Target::from_request_line(m, t).unwrap_or_else(|e| panic!("{e}"))
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// The seed's examples and the known bypass spellings of a host, decided by the pure function.
#[test]
fn egress_decide_seed_examples() {
    let p = compile(SEED_RULES);
    let cases: &[(&str, &[&str], &str)] = &[
        ("GET http://jira.example.com/", &[], "allow:project:1"),
        ("GET http://gitlab.example.com/x", &[], "allow:project:1"),
        ("GET http://foo.staging.example.com/", &[], "allow:project:2"),
        ("GET http://FOO.Staging.Example.COM/", &[], "allow:project:2"),
        ("GET http://a.b.staging.example.com/", &[], "block:project:3"),
        ("GET http://www.example.com/", &[], "block:project:3"),
        ("GET http://example.com/", &[], "block:project:3"),
        ("GET http://WWW.Example.COM./", &[], "block:project:3"),
        ("CONNECT www.example.com.:443", &[], "block:project:3"),
        ("GET http://jira.example.com@www.example.com/", &[], "block:project:3"),
        ("GET http://prod-api.test.net/", &[], "block:project:4"),
        ("GET http://PROD-api.test.net/", &[], "block:project:4"),
        ("CONNECT git.example.com:2222", &[], "connect:project:5"),
        ("CONNECT git.example.com.:2222", &[], "connect:project:5"),
        ("CONNECT 10.0.0.5:6443", &[], "connect:project:5"),
        ("CONNECT 10.0.0.5.:6443", &[], "connect:project:5"),
        ("CONNECT 167772165:6443", &[], "connect:project:5"),
        ("CONNECT 10.0.0.5:6444", &[], "port"),
        ("CONNECT git.example.com:2223", &[], "port"),
        ("GET http://git.example.com:2222/", &[], "port"),
        ("GET http://git.example.com/", &[], "block:project:3"),
        ("GET http://jira.example.com:8080/", &[], "port"),
        ("CONNECT pub.test.net:8443", &[], "port"),
        ("GET ftp://pub.test.net/", &[], "port"),
        ("GET http://intranet/", &[], "no-dot"),
        ("GET http://intranet./", &[], "no-dot"),
        ("GET http://localhost./", &[], "no-dot"),
        ("GET http://[::1]/", &[], "no-dot"),
        ("GET http://[fe80::1]/", &[], "no-dot"),
        ("CONNECT [::1]:443", &[], "no-dot"),
        ("GET http://0/", &[], "no-dot"),
        ("GET http://10.0.0.5/", &[], "private"),
        ("GET http://127.0.0.2/", &[], "private"),
        ("GET http://2130706433/", &[], "private"),
        ("GET http://0x7f000001/", &[], "private"),
        ("GET http://017700000001/", &[], "private"),
        ("GET http://127.1/", &[], "private"),
        ("GET http://0x7f.1/", &[], "private"),
        ("GET http://0177.0.0.1/", &[], "private"),
        ("GET http://[::ffff:127.0.0.1]/", &[], "private"),
        ("GET http://[::ffff:7f00:2]/", &[], "private"),
        ("CONNECT 2130706433:443", &[], "private"),
        ("GET http://0.0.0.0/", &[], "private"),
        ("GET http://169.254.169.254/latest/meta-data/", &[], "private"),
        ("GET http://rebind.test.net/", &["127.0.0.2"], "private"),
        ("GET http://mixed.test.net/", &["198.51.100.7", "127.0.0.2"], "private"),
        ("GET http://v6.test.net/", &["2001:db8::1", "fd00::1"], "private"),
        ("GET http://mapped.test.net/", &["::ffff:10.1.2.3"], "private"),
        ("GET http://pub.test.net/", &["198.51.100.7"], "default"),
        ("GET http://198.51.100.7/", &[], "default"),
        ("GET http://nxdomain.test.net/", &[], "default"),
        ("CONNECT pub.test.net:443", &["198.51.100.7"], "default"),
        ("CONNECT pub.test.net", &["198.51.100.7"], "default"),
    ];
    for (line, resolved, want) in cases {
        let d = p.decide(&target(line), &ips(resolved));
        assert_eq!(d.note(), *want, "{line}");
        let deny = matches!(d.rule, RuleKind::Port | RuleKind::Block | RuleKind::NoDot | RuleKind::Private);
        assert_eq!(d.verdict, if deny { Verdict::Deny } else { Verdict::Allow }, "{line}");
    }
}

#[test]
fn egress_decision_display_and_json() {
    let p = compile(SEED_RULES);
    let d = p.decide(&target("GET http://www.example.com/"), &[]);
    assert_eq!(d.to_string(), "block .opencode-sandbox/egress.conf:3");
    assert_eq!(d.tag(), "block");
    let j: serde_json::Value = serde_json::to_value(&d).unwrap();
    assert_eq!(j["verdict"], "deny");
    assert_eq!(j["rule"], "block");
    assert_eq!(j["source"], ".opencode-sandbox/egress.conf:3");
    let d = p.decide(&target("GET http://intranet/"), &[]);
    assert_eq!(d.to_string(), "no-dot");
    let j: serde_json::Value = serde_json::to_value(&d).unwrap();
    assert_eq!(j["source"], serde_json::Value::Null);
}

/// Phase one asks for DNS only when the private check is all that is left.
#[test]
fn egress_two_phase() {
    let p = compile(SEED_RULES);
    match p.evaluate(&target("GET http://pub.test.net/")) {
        Step::NeedsAddresses(pending) => {
            assert_eq!(pending.host(), "pub.test.net");
            assert_eq!(pending.clone().finish(&ips(&["8.8.8.8"])).rule, RuleKind::Default);
            assert_eq!(pending.finish(&ips(&["8.8.8.8", "192.168.1.1"])).rule, RuleKind::Private);
        }
        other => panic!("{other:?}"),
    }
    for line in
        ["GET http://www.example.com/", "GET http://intranet/", "GET http://10.1.1.1/", "CONNECT x.test:22"]
    {
        assert!(matches!(p.evaluate(&target(line)), Step::Decided(_)), "{line}");
    }
}

#[test]
fn egress_layers_add_up_in_order() {
    let layers = [
        LayerText::package(),
        LayerText::new(
            EgressLayer::User,
            "/home/u/.config/opencode-sandbox/egress.conf",
            "block .corp.test\n",
        ),
        project("\nallow wiki.corp.test\n"),
        LayerText::new(EgressLayer::Local, ".opencode-sandbox/local/egress.conf", "\n\nallow 10.9.0.0/16\n"),
    ];
    let p = Policy::compile(&layers).unwrap();
    assert_eq!(p.decide(&target("GET http://wiki.corp.test/"), &[]).note(), "allow:project:2");
    assert_eq!(p.decide(&target("GET http://x.corp.test/"), &[]).note(), "block:user:1");
    assert_eq!(p.decide(&target("GET http://10.9.1.1/"), &[]).note(), "allow:local:3");
    assert_eq!(
        p.decide(&target("GET http://x.corp.test/"), &[]).to_string(),
        "block /home/u/.config/opencode-sandbox/egress.conf:1"
    );
}

#[test]
fn egress_load_layers_from_disk() {
    let home = tempfile::tempdir().unwrap();
    let proj = tempfile::tempdir().unwrap();
    let cfg = home.path().join("cfg");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("egress.conf"), "block .corp.test\n").unwrap();
    let l = load_layers(&cfg, proj.path()).unwrap();
    assert_eq!(l.iter().map(|l| l.layer).collect::<Vec<_>>(), [EgressLayer::Package, EgressLayer::User]);
    std::fs::create_dir_all(proj.path().join(".opencode-sandbox/local")).unwrap();
    std::fs::write(proj.path().join(".opencode-sandbox/egress.conf"), SEED_RULES).unwrap();
    std::fs::write(
        proj.path().join(".opencode-sandbox/local/egress.conf"),
        "allow ok.test\nallow bad..test\n",
    )
    .unwrap();
    let l = load_layers(&cfg, proj.path()).unwrap();
    assert_eq!(l.len(), 4);
    let e = Policy::compile(&l).unwrap_err();
    assert_eq!(e.location().unwrap().to_string(), ".opencode-sandbox/local/egress.conf:2:7");
    std::fs::write(proj.path().join(".opencode-sandbox/local/egress.conf"), b"allow a.test\n\xff\n").unwrap();
    let e = load_layers(&cfg, proj.path()).unwrap_err();
    assert_eq!(e.location().unwrap().to_string(), ".opencode-sandbox/local/egress.conf:2");
}

#[test]
fn egress_package_layer_is_clean() {
    let p = Policy::compile(&[LayerText::package()]).unwrap();
    assert!(p.expects().is_empty());
    assert_eq!(
        p.decide(&target("GET http://pub.test.net/"), &ips(&["198.51.100.7"])).rule,
        RuleKind::Default
    );
}

#[test]
fn egress_expects() {
    let p = compile(SEED_RULES);
    let e = p.expects();
    assert_eq!(e.len(), 3);
    assert_eq!(e[0].kind, ExpectKind::Block);
    assert_eq!(e[0].url, "https://prod.example.com/");
    assert_eq!(e[0].at.to_string(), ".opencode-sandbox/egress.conf:6");
    assert_eq!(e[2].curl_args, ["-k"]);
}

/// `example.com` + `.example.com` and entries under a `.parent` collapse into one entry (squid 5/6
/// refuse such an ACL), and entries already covered by an earlier line of the same kind go.
#[test]
fn egress_normalisation() {
    let p = compile(
        "block jira.example.com .Example.com example.com. EXAMPLE.com\nblock www.example.com other.test\nallow 10.0.0.0/8 10.0.0.5 10.1.0.0/16\nallow 10.2.3.4 [::ffff:10.9.9.9]\nallow-regex ^a ^a\nallow-regex ^a ^b\nconnect h.test:22 H.TEST.:22\n",
    );
    let text = p.to_text();
    assert!(text.contains("block .example.com  # .opencode-sandbox/egress.conf:1\n"), "{text}");
    assert!(text.contains("block other.test  # .opencode-sandbox/egress.conf:2\n"), "{text}");
    assert!(text.contains("allow 10.0.0.0/8  # .opencode-sandbox/egress.conf:3\n"), "{text}");
    assert!(text.contains("allow-regex ^a  # .opencode-sandbox/egress.conf:5\n"), "{text}");
    assert!(text.contains("allow-regex ^b  # .opencode-sandbox/egress.conf:6\n"), "{text}");
    assert!(text.contains("connect h.test:22  # .opencode-sandbox/egress.conf:7\n"), "{text}");
    assert!(!text.contains("\nallow 10.2.3.4"), "{text}");
    let dropped: Vec<String> =
        p.dropped().iter().map(|d| format!("{} {} {}", d.value, d.at, d.covered_by)).collect();
    assert_eq!(
        dropped,
        [
            "jira.example.com .opencode-sandbox/egress.conf:1:7 .example.com",
            "example.com .opencode-sandbox/egress.conf:1:37 .example.com",
            "example.com .opencode-sandbox/egress.conf:1:50 .example.com",
            "www.example.com .opencode-sandbox/egress.conf:2:7 .example.com",
            "10.0.0.5 .opencode-sandbox/egress.conf:3:18 10.0.0.0/8",
            "10.1.0.0/16 .opencode-sandbox/egress.conf:3:27 10.0.0.0/8",
            "10.2.3.4 .opencode-sandbox/egress.conf:4:7 10.0.0.0/8",
            "10.9.9.9 .opencode-sandbox/egress.conf:4:16 10.0.0.0/8",
            "^a .opencode-sandbox/egress.conf:5:16 ^a",
            "^a .opencode-sandbox/egress.conf:6:13 ^a",
            "h.test:22 .opencode-sandbox/egress.conf:7:19 h.test:22",
        ]
    );
    let p2 = compile("block a.example.com .example.com .com\n");
    let d: Vec<String> = p2.dropped().iter().map(|d| format!("{} by {}", d.value, d.covered_by)).collect();
    assert_eq!(d, ["a.example.com by .com", ".example.com by .com"]);
    // Decisions are unchanged by dropping covered entries.
    assert_eq!(p.decide(&target("GET http://www.example.com/"), &[]).note(), "block:project:1");
    assert_eq!(p.decide(&target("GET http://10.2.3.4/"), &[]).note(), "allow:project:3");
}

/// The normalised text is rule language again and decides the same.
#[test]
fn egress_text_roundtrip_and_hash() {
    let p = compile(SEED_RULES);
    let again = Policy::compile(&[project(&p.to_text())]).unwrap();
    for line in [
        "GET http://jira.example.com/",
        "GET http://foo.staging.example.com/",
        "GET http://www.example.com/",
        "GET http://prod-x.test/",
        "CONNECT git.example.com:2222",
        "CONNECT 10.0.0.5:6443",
        "GET http://intranet/",
    ] {
        let (a, b) = (p.decide(&target(line), &[]), again.decide(&target(line), &[]));
        assert_eq!((a.verdict, a.rule), (b.verdict, b.rule), "{line}");
    }
    assert_eq!(p.hash(), compile(SEED_RULES).hash());
    assert_eq!(p.hash().len(), 64);
    assert_ne!(p.hash(), compile(&format!("\n{SEED_RULES}")).hash(), "provenance is part of the hash");
    let j: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(j["allows"][0]["at"], ".opencode-sandbox/egress.conf:1");
    assert_eq!(j["connects"][1]["host"], "10.0.0.5");
}

fn golden_options() -> SquidOptions {
    let mut o = SquidOptions::host_process(Path::new("/state/demo"), vec!["127.0.0.1:3128".parse().unwrap()]);
    o.listen.push("172.17.0.1:3128".parse().unwrap());
    o
}

/// The rendered squid.conf of the seed's rules, compared with a reviewed golden file
/// (`UPDATE_GOLDEN=1` rewrites it).
#[test]
fn egress_render_golden() {
    let conf = compile(SEED_RULES).render_squid(&golden_options()).unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/egress_seed.squid.conf");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &conf).unwrap();
    }
    let want = std::fs::read_to_string(&golden).expect("golden file (run with UPDATE_GOLDEN=1 once)");
    assert_eq!(conf, want, "rendered squid.conf differs from {}", golden.display());
    for line in conf.lines() {
        if !line.starts_with('#') {
            assert!(!line.contains('#'), "a comment after a value is read by squid: {line}");
        }
    }
    assert!(!conf.contains("via off"));
    let lf = conf.find("logformat ocsb").unwrap();
    assert!(lf < conf.find("access_log").unwrap(), "logformat must precede access_log");
}

#[test]
fn egress_render_rejects_unsafe_paths() {
    let p = compile(SEED_RULES);
    let mut o = golden_options();
    o.access_log = "/home/a b/access.log".into();
    let e = p.render_squid(&o).unwrap_err().to_string();
    assert!(e.contains("access_log") && e.contains("space"), "{e}");
    let mut o = golden_options();
    o.pid_file = "relative/pid".into();
    assert!(p.render_squid(&o).is_err());
    let mut o = golden_options();
    o.listen.clear();
    assert!(p.render_squid(&o).is_err());
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "allow",
                "block",
                "allow-regex",
                "block-regex",
                "connect",
                "expect-pass",
                "expect-block",
                "#",
                "a.b",
                ".a.b",
                "A.B.",
                "10.0.0.0/8",
                "[::1]",
                "::1",
                "h:22",
                "[::1]:22",
                "x:0",
                "^a$",
                "a+?",
                "(?i)",
                "http://x.y/",
                "https://10.0.0.5:6443/v",
                "-k",
                "-o",
                "*.x",
                "a..b",
                "\\d",
                "[a-",
                "{",
                "é",
            ])
            .prop_map(String::from),
            "[ -~]{0,12}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// The parser never panics; whatever compiles renders, and its normalised text compiles
        /// again to the same text (modulo provenance).
        #[test]
        fn egress_parser_total_and_text_roundtrip(lines in prop::collection::vec(prop::collection::vec(word(), 0..5), 0..6)) {
            let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
            if let Ok(p) = Policy::compile(&[project(&text)]) {
                let o = SquidOptions::host_process(Path::new("/s"), vec!["127.0.0.1:3128".parse().unwrap()]);
                prop_assert!(p.render_squid(&o).is_ok());
                let again = Policy::compile(&[project(&p.to_text())]);
                prop_assert!(again.is_ok(), "normalised text does not compile: {:?}\n{}", again.err().map(|e| e.to_string()), p.to_text());
            }
        }

        #[test]
        fn egress_target_parser_total(m in "(GET|CONNECT|get)", t in "\\PC{0,40}") {
            let _ = Target::from_request_line(&m, &t);
        }
    }
}
