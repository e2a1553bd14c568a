//! The one-line request log both backends write, and its parser (for `ocsb egress logs`).
//!
//! ```text
//! 1764555600.123 127.0.0.1 TCP_DENIED/403 rule=block:project:3 CONNECT www.example.com:443 peer=-
//! 1764555601.456 127.0.0.1 TCP_TUNNEL/200 rule=connect:project:5 CONNECT git.example.com:2222 peer=127.0.0.3
//! 1764555602.789 127.0.0.1 TCP_MISS/200 rule=default GET http://pub.test.net/ peer=198.51.100.7
//! ```
//! Fields: time (epoch seconds.milliseconds), client address, squid result code / HTTP status,
//! the deciding rule ([`crate::egress::Decision::note`]), method, target (URL, or `host:port` for
//! CONNECT), the server address actually connected to (`-` if none).

use std::fmt;

use serde::Serialize;

use super::decide::{RuleKind, Verdict};
use super::layers::EgressLayer;

/// squid `logformat` for [`LogLine`]; the built-in proxy prints the same fields.
pub const SQUID_LOGFORMAT: &str = "%ts.%03tu %>a %Ss/%03>Hs rule=%{egress_rule}note %rm %ru peer=%<a";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    /// `1764555600.123`.
    pub time: String,
    pub client: String,
    /// `TCP_DENIED`, `TCP_TUNNEL`, `TCP_MISS`, `NONE_NONE`, … (the built-in proxy uses the same words).
    pub result: String,
    /// HTTP status sent to the client (`000` = none).
    pub status: u16,
    /// The annotation: `block:project:3`, `port`, `default`, `client`, or `-`.
    pub rule: String,
    pub method: String,
    pub target: String,
    /// Server address connected to.
    pub peer: Option<String>,
}

impl LogLine {
    pub fn parse(line: &str) -> Option<LogLine> {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 7 {
            return None;
        }
        let (result, status) = f[2].split_once('/')?;
        let rule = f[3].strip_prefix("rule=")?;
        let peer = f[f.len() - 1].strip_prefix("peer=")?;
        Some(LogLine {
            time: f[0].to_string(),
            client: f[1].to_string(),
            result: result.to_string(),
            status: status.parse().ok()?,
            rule: rule.to_string(),
            method: f[4].to_string(),
            target: f[5..f.len() - 1].join(" "),
            peer: (peer != "-").then(|| peer.to_string()),
        })
    }

    /// The rule kind and, for a rule, its layer and line (from `kind:layer:line`).
    pub fn rule_source(&self) -> Option<(RuleKind, Option<(EgressLayer, u32)>)> {
        parse_note(&self.rule)
    }

    /// Refused by the filter (squid `TCP_DENIED`, or a deny rule).
    pub fn verdict(&self) -> Verdict {
        let denied_rule = parse_note(&self.rule).is_some_and(|(k, _)| k.verdict() == Verdict::Deny)
            || self.rule == "client";
        if self.result.starts_with("TCP_DENIED") || denied_rule { Verdict::Deny } else { Verdict::Allow }
    }
}

/// Parses an annotation such as `block:project:3` or `private`.
pub fn parse_note(note: &str) -> Option<(RuleKind, Option<(EgressLayer, u32)>)> {
    let mut it = note.split(':');
    let kind = RuleKind::from_tag(it.next()?)?;
    match (it.next(), it.next(), it.next()) {
        (None, _, _) => Some((kind, None)),
        (Some(l), Some(n), None) => Some((kind, Some((EgressLayer::from_tag(l)?, n.parse().ok()?)))),
        _ => None,
    }
}

impl fmt::Display for LogLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}/{:03} rule={} {} {} peer={}",
            self.time,
            self.client,
            self.result,
            self.status,
            self.rule,
            self.method,
            self.target,
            self.peer.as_deref().unwrap_or("-")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_log_roundtrip() {
        let s =
            "1764555600.123 127.0.0.1 TCP_DENIED/403 rule=block:project:3 CONNECT www.example.com:443 peer=-";
        let l = LogLine::parse(s).unwrap();
        assert_eq!(l.status, 403);
        assert_eq!(l.verdict(), Verdict::Deny);
        assert_eq!(l.rule_source(), Some((RuleKind::Block, Some((EgressLayer::Project, 3)))));
        assert_eq!(l.to_string(), s);
        let s =
            "1764555602.789 127.0.0.1 TCP_MISS/200 rule=default GET http://pub.test.net/ peer=198.51.100.7";
        let l = LogLine::parse(s).unwrap();
        assert_eq!(l.verdict(), Verdict::Allow);
        assert_eq!(l.peer.as_deref(), Some("198.51.100.7"));
        assert_eq!(l.to_string(), s);
        assert_eq!(parse_note("no-dot"), Some((RuleKind::NoDot, None)));
        assert_eq!(parse_note("bogus"), None);
        assert_eq!(parse_note("allow:nowhere:1"), None);
    }
}
