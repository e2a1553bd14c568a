//! The rule for a DNS question asked inside the isolated network (`OCSB_NETWORK=isolated`),
//! before the question leaves the machine.
//!
//! *Why a rule for names at all*: a query is itself a message out. A name spelt with the data
//! (`c2VjcmV0.exfil.example`) reaches whoever serves that zone even when no connection ever
//! follows, so a name the rules would deny every connection to is never asked for.

use super::compile::Policy;
use super::decide::{Decision, Step};
use super::target::{BadTarget, Method, Target};

impl Policy {
    /// A name may be resolved when some connection to it could be allowed: a `connect` rule for
    /// it (any port), or the rules for HTTPS to it (`allow`, or the default after the
    /// private-address check, which then needs the name's addresses: [`Step::NeedsAddresses`]).
    /// Otherwise the decision that denies it (`block`, `no-dot`, `private`) is returned.
    pub fn lookup(&self, name: &str) -> Result<Step, BadTarget> {
        let https = Target::from_connect(&format!("{}:443", name.trim_end_matches('.')))?;
        // A `connect` rule names the host for its port whatever its addresses are (those rules
        // lift the private check), so the name is needed for that connection.
        if let Some(c) = self.connects.iter().find(|c| c.host.matches(&https.host)) {
            let t = Target { method: Method::Connect, port: c.port, ..https };
            return Ok(Step::Decided(self.decide(&t, &[])));
        }
        Ok(self.evaluate(&https))
    }
}

/// The answer a lookup ends with, once the addresses are known (`resolved`, A and AAAA).
pub fn finish_lookup(step: Step, resolved: &[std::net::IpAddr]) -> Decision {
    match step {
        Step::Decided(d) => d,
        Step::NeedsAddresses(p) => p.finish(resolved),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::RuleKind;

    fn policy(text: &str) -> Policy {
        let layer = crate::egress::LayerText {
            layer: crate::egress::EgressLayer::Project,
            file: "egress.conf".into(),
            text: text.into(),
        };
        Policy::compile(&[layer]).unwrap()
    }

    fn rule(p: &Policy, name: &str, resolved: &[&str]) -> RuleKind {
        let ips: Vec<std::net::IpAddr> = resolved.iter().map(|a| a.parse().unwrap()).collect();
        finish_lookup(p.lookup(name).unwrap(), &ips).rule
    }

    #[test]
    fn names_resolve_only_when_a_connection_to_them_could_be_allowed() {
        let p = policy("block .exfil.example\nconnect git.internal:22\nallow .corp.example\n");
        assert_eq!(rule(&p, "secret-data.exfil.example", &[]), RuleKind::Block);
        assert_eq!(rule(&p, "secret-data.exfil.example.", &[]), RuleKind::Block, "trailing dot");
        assert_eq!(rule(&p, "localhost", &[]), RuleKind::NoDot);
        // No HTTPS rule allows git.internal (no dot), but its `connect` rule needs the name.
        assert_eq!(rule(&p, "git.internal", &["10.0.0.7"]), RuleKind::Connect);
        assert_eq!(rule(&p, "wiki.corp.example", &["10.1.1.1"]), RuleKind::Allow);
        // The default allows public answers and refuses a name with any private one.
        assert_eq!(rule(&p, "example.org", &["93.184.215.14"]), RuleKind::Default);
        assert_eq!(rule(&p, "rebind.example.org", &["93.184.215.14", "127.0.0.1"]), RuleKind::Private);
        assert!(p.lookup("bad name").is_err());
    }
}
