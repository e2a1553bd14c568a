//! From parsed layers to a normalised [`Policy`].
//!
//! Normalisation exists for squid: squid 5 and 6 refuse (FATAL) or warn about overlapping
//! entries inside one `dstdomain`/`dst` ACL, depending on their order, and squid 7 merges them.
//! To render one config that parses clean everywhere, every source line becomes its own ACL, and
//! no ACL holds two entries where one covers the other. Entries dropped because an earlier line
//! of the same kind already covers them keep their provenance in [`Policy::dropped`].

use std::net::IpAddr;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::host::HostPattern;
use super::layers::{EgressLayer, LayerText};
use super::parse::{Body, Expect, Word, parse_layer};
use super::private::PrivateSet;
use super::regex_subset;
use crate::{Location, Result};

/// The source of a rule: its layer (for the short squid annotation) and `file:line`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub(crate) struct Source {
    pub layer: EgressLayer,
    #[serde(serialize_with = "ser_loc")]
    pub at: Location,
}

/// Locations serialise as their display form, `file:line[:column]`.
pub(crate) fn ser_loc<S: serde::Serializer>(l: &Location, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(l)
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Matcher {
    /// Names and `.domain`s (squid `dstdomain -n`) and IP networks (squid `dst -n`).
    Hosts { names: Vec<HostPattern>, nets: Vec<HostPattern> },
    /// `dstdom_regex -n -i`.
    Regex {
        patterns: Vec<String>,
        #[serde(skip)]
        compiled: Vec<regex::bytes::Regex>,
    },
}

/// One `allow`/`allow-regex`/`block`/`block-regex` line after normalisation.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Rule {
    #[serde(flatten)]
    pub source: Source,
    pub matcher: Matcher,
}

/// One `host:port` of a `connect` line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Connect {
    #[serde(flatten)]
    pub source: Source,
    pub host: HostPattern,
    pub port: u16,
}

/// A value that normalisation removed because another rule already covers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// `allow`, `block` or `connect`.
    pub kind: &'static str,
    pub value: String,
    #[serde(serialize_with = "ser_loc")]
    pub at: Location,
    pub covered_by: String,
    #[serde(serialize_with = "ser_loc")]
    pub covered_at: Location,
}

/// The compiled egress policy of all layers.
#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    pub(crate) connects: Vec<Connect>,
    pub(crate) allows: Vec<Rule>,
    pub(crate) blocks: Vec<Rule>,
    pub(crate) expects: Vec<Expect>,
    pub(crate) dropped: Vec<Dropped>,
    /// Where "private" ends; environment, not rules: it is not in the text or the hash.
    #[serde(skip)]
    pub(crate) private: PrivateSet,
}

impl Policy {
    /// Parses and normalises the layers (in the order given). Any error in any layer fails the
    /// whole compilation: a policy is never half-applied.
    pub fn compile(layers: &[LayerText]) -> Result<Policy> {
        let mut p = Policy {
            connects: vec![],
            allows: vec![],
            blocks: vec![],
            expects: vec![],
            dropped: vec![],
            private: PrivateSet::default(),
        };
        for layer in layers {
            for d in parse_layer(layer)? {
                let source = Source { layer: d.layer, at: d.at.clone() };
                let kind = if d.block { "block" } else { "allow" };
                let group = if d.block { &mut p.blocks } else { &mut p.allows };
                match d.body {
                    Body::Expect(e) => p.expects.push(e),
                    Body::Connect(words) => add_connects(&mut p.connects, &mut p.dropped, source, words),
                    Body::Hosts(words) => add_hosts(group, &mut p.dropped, kind, source, words),
                    Body::Regexes(words) => add_regexes(group, &mut p.dropped, kind, source, words),
                }
            }
        }
        Ok(p)
    }

    /// The `expect-pass` / `expect-block` self-tests of all layers, in order.
    pub fn expects(&self) -> &[Expect] {
        &self.expects
    }

    /// Values removed by normalisation, with what covers them.
    pub fn dropped(&self) -> &[Dropped] {
        &self.dropped
    }

    /// The same policy judging the filter host's own addresses as private (see [`PrivateSet`]).
    /// *Why*: a service bound to the host's public address is the host itself; without this, an
    /// agent reaches it by the address or by any name that resolves to it.
    pub fn with_host_addresses(mut self, addrs: impl IntoIterator<Item = IpAddr>) -> Self {
        self.private = PrivateSet::with_host_addresses(addrs);
        self
    }

    /// `file:line` of the rule a log annotation (`block:project:3`) names, if it exists.
    pub fn source_of_note(&self, note: &str) -> Option<String> {
        let (kind, Some((layer, line))) = super::log::parse_note(note)? else { return None };
        let is = |s: &Source| s.layer == layer && s.at.line == line;
        let src = match kind {
            super::decide::RuleKind::Connect => self.connects.iter().map(|c| &c.source).find(|s| is(s)),
            super::decide::RuleKind::Allow => self.allows.iter().map(|r| &r.source).find(|s| is(s)),
            super::decide::RuleKind::Block => self.blocks.iter().map(|r| &r.source).find(|s| is(s)),
            _ => None,
        }?;
        Some(Location::new(src.at.file.clone(), src.at.line, 0).to_string())
    }

    /// The private set this policy enforces.
    pub fn private_set(&self) -> &PrivateSet {
        &self.private
    }

    /// A stable hash (SHA-256, hex) of the normalised policy including provenance, for "config
    /// is stale" checks: it changes exactly when [`Policy::to_text`] changes.
    pub fn hash(&self) -> String {
        let digest = Sha256::digest(self.to_text().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// `[v6]` for IPv6 values so that `host:port` stays readable.
pub(crate) fn bracket(h: &HostPattern) -> String {
    match h {
        HostPattern::Net(n) if n.addr.is_ipv6() => format!("[{h}]"),
        _ => h.to_string(),
    }
}

fn column(src: &Source, column: u32) -> Location {
    Location::new(src.at.file.clone(), src.at.line, column)
}

/// One entry per `host:port`; a pair already covered by an earlier connect rule is dropped.
fn add_connects(
    connects: &mut Vec<Connect>,
    dropped: &mut Vec<Dropped>,
    source: Source,
    words: Vec<Word<(HostPattern, u16)>>,
) {
    for w in words {
        let (host, port) = w.value;
        if let Some(prev) = connects.iter().find(|c| c.port == port && c.host.covers(&host)) {
            dropped.push(Dropped {
                kind: "connect",
                value: format!("{}:{port}", bracket(&host)),
                at: column(&source, w.column),
                covered_by: format!("{}:{}", bracket(&prev.host), prev.port),
                covered_at: prev.source.at.clone(),
            });
            continue;
        }
        connects.push(Connect { source: source.clone(), host, port });
    }
}

/// Keeps the values of one allow/block line that no earlier line of the group and no wider
/// value of the same line covers.
fn add_hosts(
    group: &mut Vec<Rule>,
    dropped: &mut Vec<Dropped>,
    kind: &'static str,
    source: Source,
    words: Vec<Word<HostPattern>>,
) {
    let values: Vec<(HostPattern, Location)> =
        words.into_iter().map(|w| (w.value, column(&source, w.column))).collect();
    let mut kept: Vec<HostPattern> = Vec::new();
    for (i, (v, at)) in values.iter().enumerate() {
        // Covered by an earlier line of the same kind (which decides first anyway)?
        let earlier = group.iter().find_map(|r| match &r.matcher {
            Matcher::Hosts { names, nets } => {
                names.iter().chain(nets).find(|e| e.covers(v)).map(|e| (e.to_string(), r.source.at.clone()))
            }
            Matcher::Regex { .. } => None,
        });
        // Covered by another value of this line (a wider one, or an equal one that comes first)?
        let candidates: Vec<&(HostPattern, Location)> = values
            .iter()
            .enumerate()
            .filter(|(j, (o, _))| *j != i && o.covers(v) && (!v.covers(o) || *j < i))
            .map(|(_, c)| c)
            .collect();
        // Report the widest cover (the one that is kept).
        let same_line = candidates
            .iter()
            .find(|(c, _)| !candidates.iter().any(|(d, _)| d.covers(c) && !c.covers(d)))
            .map(|(o, a)| (o.to_string(), a.clone()));
        match earlier.or(same_line) {
            Some((covered_by, covered_at)) => {
                dropped.push(Dropped { kind, value: v.to_string(), at: at.clone(), covered_by, covered_at })
            }
            None => kept.push(v.clone()),
        }
    }
    if !kept.is_empty() {
        let (nets, names) = kept.into_iter().partition(|h| h.is_net());
        group.push(Rule { source, matcher: Matcher::Hosts { names, nets } });
    }
}

/// Keeps the regexes of one line that are not repeated (in this line or an earlier one).
#[allow(clippy::expect_used, reason = "the parser compiled every pattern already")]
fn add_regexes(
    group: &mut Vec<Rule>,
    dropped: &mut Vec<Dropped>,
    kind: &'static str,
    source: Source,
    words: Vec<Word<String>>,
) {
    let mut patterns: Vec<String> = Vec::new();
    for w in words {
        let earlier = group.iter().find_map(|r| match &r.matcher {
            Matcher::Regex { patterns, .. } if patterns.contains(&w.value) => Some(r.source.at.clone()),
            _ => None,
        });
        let covered_at = earlier.or_else(|| patterns.contains(&w.value).then(|| column(&source, 0)));
        match covered_at {
            Some(covered_at) => dropped.push(Dropped {
                kind,
                value: w.value.clone(),
                at: column(&source, w.column),
                covered_by: w.value,
                covered_at,
            }),
            None => patterns.push(w.value),
        }
    }
    if !patterns.is_empty() {
        let compiled =
            patterns.iter().map(|s| regex_subset::compile(s).expect("validated by the parser")).collect();
        group.push(Rule { source, matcher: Matcher::Regex { patterns, compiled } });
    }
}
