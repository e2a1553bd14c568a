//! Helpers of the egress policy suites: the seed's rule set, and (host suites) the real
//! `squid -k parse`.

#[cfg(feature = "host-tests")]
use std::path::{Path, PathBuf};
#[cfg(feature = "host-tests")]
use std::process::Command;

use ocsb_policy::egress::{EgressLayer, LayerText, Policy};

/// The rule set of the README's "Network rules" section.
pub const SEED_RULES: &str = r"allow jira.example.com gitlab.example.com # wins over block
allow-regex ^[a-z0-9-]+\.staging\.example\.com$
block .example.com # the domain and all subdomains
block-regex ^prod-
connect git.example.com:2222 10.0.0.5:6443 # tunnels: git over SSH, Kubernetes API
expect-block https://prod.example.com/ # self-tests run by `run` and `egress verify`
expect-pass https://gitlab.example.com/
expect-pass https://10.0.0.5:6443/version -k # extra curl options after the URL
";

pub fn project(text: &str) -> LayerText {
    LayerText::new(EgressLayer::Project, ".opencode-sandbox/egress.conf", text)
}

pub fn compile(text: &str) -> Policy {
    Policy::compile(&[LayerText::package(), project(text)]).unwrap_or_else(|e| panic!("{e}"))
}

/// The squid binary, or a failing test that says how to get it.
#[cfg(feature = "host-tests")]
pub fn squid_bin() -> PathBuf {
    for p in ["/usr/sbin/squid", "/usr/bin/squid"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("squid is not installed; these tests run the real squid: apt-get install squid");
}

/// Runs `squid -k parse -f <conf>` and fails on rc != 0 or any ERROR/WARNING/FATAL line
/// (squid only logs an ERROR for a bad regex and drops the rule, with rc 0).
#[cfg(feature = "host-tests")]
pub fn squid_parse_clean(conf: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("squid.conf");
    std::fs::write(&path, conf).unwrap();
    let out = Command::new(squid_bin()).args(["-k", "parse", "-f"]).arg(&path).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let bad = ocsb_policy::egress::squid_parse_problems(&text);
    assert!(
        out.status.success() && bad.is_empty(),
        "squid -k parse failed (rc {:?}):\n{}\n--- config ---\n{conf}",
        out.status.code(),
        if bad.is_empty() { text.clone() } else { bad.join("\n") }
    );
}
