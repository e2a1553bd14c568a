//! `egress verify` in the lab: it catches a broken rule (naming the expectation's file:line and
//! the rule that decided instead) and a filter that can be bypassed; with a netlock-like
//! nftables rule in the filter namespace (never in the host's) the bypass check passes.

use std::ffi::OsString;

use crate::support::lab::{BUILTIN_PORT, Lab};
use crate::support::topology::sh;
use ocsb_egress::verify::{VerifyOptions, run};

const BROKEN: &str = "\
allow jira.example.com
block .example.com
block-regex ^prdo-
expect-pass http://jira.example.com/
expect-pass http://pub.test.net/
expect-block http://www.example.com/
expect-block https://www.example.com/
expect-block http://prod-db.test.net/
expect-block http://pub.test.net/forged
";

#[test]
fn verify_catches_a_broken_rule_and_a_bypass() {
    let mut lab = Lab::new(BROKEN);
    lab.start_builtin();
    let inst = lab.instance();
    let mut opts = VerifyOptions::new(format!("127.0.0.1:{BUILTIN_PORT}").parse().unwrap());
    opts.wrap = vec!["ip".into(), "netns".into(), "exec".into(), OsString::from(lab.topo.filter.name())];
    opts.max_time = 10;

    let report = run(&inst.load_policy().unwrap(), &opts).unwrap();
    let failed: Vec<_> = report.checks.iter().filter(|c| !c.ok).collect();
    assert_eq!(failed.len(), 3, "{report:#?}");
    // The origin's own 403, with a forged decision header, is not a block by the filter.
    let forged = failed.iter().find(|c| c.url.ends_with("/forged")).expect("the origin's 403 is no block");
    assert!(forged.observed.contains("the server itself answered 403"), "{forged:?}");
    let typo = failed
        .iter()
        .find(|c| c.url == "http://prod-db.test.net/")
        .expect("the broken block-regex is reported");
    assert_eq!(typo.kind, "expect-block");
    assert!(typo.at.as_deref().unwrap().ends_with("egress.conf:8"), "{typo:?}");
    assert!(typo.observed.contains("passed"), "{typo:?}");
    assert!(
        typo.why.as_deref().unwrap().contains("default"),
        "the report must say which rule decided: {typo:?}"
    );
    let direct = failed.iter().find(|c| c.kind == "direct-blocked").expect("the bypass is reported");
    assert!(direct.why.as_deref().unwrap().contains("netlock"), "{direct:?}");
    let err = report.into_result().unwrap_err().to_string();
    assert!(err.contains("prod-db.test.net") && err.contains("egress.conf:8"), "{err}");

    // Fix the rule, and lock uid 1990 to loopback in the filter namespace (what the netlock does
    // for its group on a real host). curl then runs as that uid.
    lab.write_rules(
        &BROKEN.replace("^prdo-", "^prod-").replace("expect-block http://pub.test.net/forged\n", ""),
    );
    ocsb_egress::up(&inst, &inst.load_policy().unwrap(), ocsb_egress::lifecycle::stderr_progress()).unwrap();
    let ns = lab.topo.filter.name();
    // One ruleset, loaded atomically in the filter namespace only.
    let table = "table inet lock { chain out { type filter hook output priority 0; policy accept; \
                 meta skuid 1990 ip daddr != 127.0.0.0/8 reject; }; }";
    sh(&["ip", "netns", "exec", ns, "nft", table]);
    opts.wrap.extend(["setpriv", "--reuid=1990", "--regid=1990", "--clear-groups"].map(OsString::from));
    let report = run(&inst.load_policy().unwrap(), &opts).unwrap();
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.checks.len(), 6);
}
