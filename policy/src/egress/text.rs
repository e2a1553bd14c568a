//! The normalised policy as text (what `ocsb egress render` prints for the built-in backend).
//!
//! The output is itself valid rule language (fixed steps and provenance are comments), so it can
//! be diffed, and compiling it again gives the same decisions.

use std::fmt::Write as _;

use super::compile::{Matcher, Policy, Rule, bracket};
use super::parse::ExpectKind;
use super::private::private_networks;
use super::squid::squid_net;

/// Replaces anything that could end a comment line (file names come from the user).
pub(crate) fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

fn rule_lines(out: &mut String, rules: &[Rule], word: &str) {
    for r in rules {
        let (kw, values) = match &r.matcher {
            Matcher::Hosts { names, nets } => {
                (word.to_string(), names.iter().chain(nets).map(|h| h.to_string()).collect::<Vec<_>>())
            }
            Matcher::Regex { patterns, .. } => (format!("{word}-regex"), patterns.clone()),
        };
        let _ = writeln!(out, "{kw} {}  # {}", values.join(" "), clean(&r.source.at.to_string()));
    }
}

impl Policy {
    /// The normalised rules in evaluation order, one source line per line, with `# file:line`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        out.push_str("# ocsb egress policy (normalised). Order of evaluation:\n");
        out.push_str("# connect -> other ports denied -> allow -> block -> no-dot denied -> private denied -> allowed\n");
        out.push_str("\n# 1. connect: CONNECT tunnels to these host:port pairs are allowed\n");
        for c in &self.connects {
            let _ = writeln!(
                out,
                "connect {}:{}  # {}",
                bracket(&c.host),
                c.port,
                clean(&c.source.at.to_string())
            );
        }
        out.push_str("\n# 2. ports other than 80 and 443 are denied\n");
        out.push_str("\n# 3. allow (the first matching line decides)\n");
        rule_lines(&mut out, &self.allows, "allow");
        out.push_str("\n# 4. block\n");
        rule_lines(&mut out, &self.blocks, "block");
        out.push_str("\n# 5. names without a dot are denied (also IPv6 literals)\n");
        let nets: Vec<String> = private_networks().iter().map(squid_net).collect();
        let _ = writeln!(
            out,
            "\n# 6. denied if the literal or any resolved address is the filter host's own or in: {}",
            nets.join(" ")
        );
        out.push_str("\n# 7. everything else is allowed\n");
        if !self.expects.is_empty() {
            out.push_str("\n# self-tests\n");
            for e in &self.expects {
                let kw = match e.kind {
                    ExpectKind::Pass => "expect-pass",
                    ExpectKind::Block => "expect-block",
                };
                let mut words = vec![e.url.clone()];
                words.extend(e.curl_args.iter().cloned());
                let _ = writeln!(out, "{kw} {}  # {}", words.join(" "), clean(&e.at.to_string()));
            }
        }
        if !self.dropped.is_empty() {
            out.push_str("\n# dropped by normalisation (covered by another rule)\n");
            for d in &self.dropped {
                let _ = writeln!(
                    out,
                    "# {} {} ({}) is covered by {} ({})",
                    d.kind,
                    d.value,
                    clean(&d.at.to_string()),
                    d.covered_by,
                    clean(&d.covered_at.to_string())
                );
            }
        }
        out
    }

    /// The normalised policy as JSON (`connects`, `allows`, `blocks`, `expects`, `dropped`).
    #[allow(clippy::expect_used, reason = "plain data: serialising it cannot fail")]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the policy serialises")
    }
}
