//! The decision function, in two phases so that a proxy resolves DNS only when a request gets as
//! far as the private-network check (as squid does: its `dst` ACL is the only one that resolves).

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;
use serde::ser::SerializeStruct;

use super::compile::{Matcher, Policy, Rule, Source};
use super::host::IpNet;
use super::layers::EgressLayer;
use super::private::PrivateSet;
use super::target::{Host, Method, Target};
use crate::Location;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        })
    }
}

/// Which step of the evaluation order decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleKind {
    /// The client is not on a network the filter serves (checked before any rule).
    Client,
    Connect,
    Port,
    Allow,
    Block,
    NoDot,
    Private,
    Default,
}

impl RuleKind {
    /// The name used in squid annotations, logs and `X-Egress-Decision`.
    pub fn tag(self) -> &'static str {
        match self {
            RuleKind::Client => "client",
            RuleKind::Connect => "connect",
            RuleKind::Port => "port",
            RuleKind::Allow => "allow",
            RuleKind::Block => "block",
            RuleKind::NoDot => "no-dot",
            RuleKind::Private => "private",
            RuleKind::Default => "default",
        }
    }

    pub fn from_tag(s: &str) -> Option<Self> {
        use RuleKind::*;
        [Client, Connect, Port, Allow, Block, NoDot, Private, Default].into_iter().find(|k| k.tag() == s)
    }

    pub fn verdict(self) -> Verdict {
        match self {
            RuleKind::Connect | RuleKind::Allow | RuleKind::Default => Verdict::Allow,
            _ => Verdict::Deny,
        }
    }
}

impl Serialize for RuleKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.tag())
    }
}

/// The outcome for one request: verdict, deciding step and, for a rule, its `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decision {
    pub verdict: Verdict,
    pub rule: RuleKind,
    pub source: Option<Location>,
    /// The layer of `source` (for the short annotation, see [`Decision::note`]).
    pub layer: Option<EgressLayer>,
}

impl Decision {
    fn step(rule: RuleKind) -> Self {
        Decision { verdict: rule.verdict(), rule, source: None, layer: None }
    }

    fn rule(rule: RuleKind, src: &Source) -> Self {
        let at = Location::new(src.at.file.clone(), src.at.line, 0);
        Decision { verdict: rule.verdict(), rule, source: Some(at), layer: Some(src.layer) }
    }

    /// The refusal of a client outside `clients`, or `None` if it may use the filter. *Why
    /// before any rule*: a filter listening on the docker gateway is reachable from every network
    /// routed to the host; only loopback and the containers behind the gateway are its clients.
    pub fn for_client(clients: &[IpNet], client: IpAddr) -> Option<Decision> {
        (!clients.iter().any(|n| n.contains(client))).then(|| Decision::step(RuleKind::Client))
    }

    /// `block`, `allow`, `port`, …
    pub fn tag(&self) -> &'static str {
        self.rule.tag()
    }

    /// The annotation squid records and the built-in proxy must log and send in
    /// `X-Egress-Decision`: `block:project:3` for a rule, the bare tag otherwise. Only
    /// `[a-z0-9:-]`, so it is safe as a squid note value and in a header.
    pub fn note(&self) -> String {
        match (&self.layer, &self.source) {
            (Some(l), Some(at)) => format!("{}:{}:{}", self.rule.tag(), l.tag(), at.line),
            _ => self.rule.tag().to_string(),
        }
    }
}

/// `block .opencode-sandbox/egress.conf:3`, or just `private`.
impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(at) => write!(f, "{} {at}", self.rule.tag()),
            None => f.write_str(self.rule.tag()),
        }
    }
}

/// `{"verdict": "deny", "rule": "block", "source": "file:3", "note": "block:project:3"}`.
impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Decision", 4)?;
        st.serialize_field("verdict", &self.verdict)?;
        st.serialize_field("rule", &self.rule)?;
        st.serialize_field("source", &self.source.as_ref().map(|l| l.to_string()))?;
        st.serialize_field("note", &self.note())?;
        st.end()
    }
}

/// Phase one's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Decided(Decision),
    /// Only the private-network check is left; it needs the name's addresses.
    NeedsAddresses(Pending),
}

/// A request that reached the private-network check with a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    host: String,
    private: PrivateSet,
}

impl Pending {
    /// The name to resolve (A and AAAA).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Denies if **any** address is private (a name with one public and one private address must
    /// not become a way in). An empty list is a DNS failure: like squid, that falls through to
    /// the default allow, and the proxy then has no address to connect to.
    pub fn finish(self, resolved: &[IpAddr]) -> Decision {
        if resolved.iter().any(|&ip| self.private.contains(ip)) {
            Decision::step(RuleKind::Private)
        } else {
            Decision::step(RuleKind::Default)
        }
    }
}

fn rule_matches(rule: &Rule, host: &Host, acl_string: &str) -> bool {
    match &rule.matcher {
        Matcher::Hosts { names, nets } => names.iter().chain(nets).any(|h| h.matches(host)),
        Matcher::Regex { compiled, .. } => compiled.iter().any(|r| r.is_match(acl_string.as_bytes())),
    }
}

impl Policy {
    /// Phase one: everything that needs no DNS.
    pub fn evaluate(&self, t: &Target) -> Step {
        if t.method == Method::Connect
            && let Some(c) = self.connects.iter().find(|c| c.port == t.port && c.host.matches(&t.host))
        {
            return Step::Decided(Decision::rule(RuleKind::Connect, &c.source));
        }
        if t.port != 80 && t.port != 443 {
            return Step::Decided(Decision::step(RuleKind::Port));
        }
        let s = t.host.acl_string();
        if let Some(r) = self.allows.iter().find(|r| rule_matches(r, &t.host, &s)) {
            return Step::Decided(Decision::rule(RuleKind::Allow, &r.source));
        }
        if let Some(r) = self.blocks.iter().find(|r| rule_matches(r, &t.host, &s)) {
            return Step::Decided(Decision::rule(RuleKind::Block, &r.source));
        }
        if !s.contains('.') {
            return Step::Decided(Decision::step(RuleKind::NoDot));
        }
        let literal = match &t.host {
            Host::Ip(ip) => Some(*ip),
            Host::Name(_) => t.host.numeric_name(),
        };
        match (literal, &t.host) {
            (Some(ip), _) => Step::Decided(Pending { host: s, private: self.private.clone() }.finish(&[ip])),
            (None, Host::Name(n)) => {
                Step::NeedsAddresses(Pending { host: n.clone(), private: self.private.clone() })
            }
            (None, Host::Ip(_)) => unreachable!("an IP host is a literal"),
        }
    }

    /// Both phases, with the addresses the name resolves to (ignored when not needed).
    pub fn decide(&self, t: &Target, resolved: &[IpAddr]) -> Decision {
        match self.evaluate(t) {
            Step::Decided(d) => d,
            Step::NeedsAddresses(p) => p.finish(resolved),
        }
    }
}
