//! `ocsb egress suggest`: rule lines that would let through what the filter denied.
//!
//! Pure: the access log's lines and the compiled policy in, suggestions out. Nothing is written
//! anywhere; the user reads the lines and pastes the ones they want (the agent must never widen
//! its own rules). Every suggestion is checked against the policy: compiled into a personal layer
//! on top of the current rules, it must allow the request it is for, or it is not offered.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::compile::Policy;
use super::decide::{RuleKind, Verdict};
use super::layers::{EgressLayer, LayerText};
use super::log::LogLine;
use super::target::{Host, Method, Target};

/// One proposed rule line and what it is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suggestion {
    /// The rule line to paste (`allow host`, `connect host:port`), or `None` when no rule can
    /// allow the request (see `why`).
    pub line: Option<String>,
    /// The denied request: `CONNECT host:port` or `GET host:port`.
    pub request: String,
    /// How many log lines it stands for.
    pub count: usize,
    /// The step or rule that denied it (`block`, `private`, `port`, `no-dot`).
    pub denied_by: String,
    /// `file:line` of the deciding rule, for a rule.
    pub source: Option<String>,
    /// Why this line (and what it opens), or why there is none.
    pub why: String,
}

/// The request of a log line, as the policy parses it.
fn target_of(l: &LogLine) -> Option<Target> {
    if l.method == "CONNECT" {
        Target::from_connect(&l.target).ok()
    } else {
        Target::from_absolute_uri(&l.method, &l.target).ok()
    }
}

fn host_word(h: &Host) -> String {
    match h {
        Host::Ip(std::net::IpAddr::V6(a)) => format!("[{a}]"),
        h => h.to_string(),
    }
}

/// Suggestions for every denied request in `lines`, one per (request, deciding rule), most
/// frequent first. Refusals of the client itself and of requests the policy cannot parse are
/// left out: no rule changes them.
pub fn suggest(layers: &[LayerText], lines: &[LogLine]) -> crate::Result<Vec<Suggestion>> {
    let policy = Policy::compile(layers)?;
    let mut seen: BTreeMap<(String, String), (usize, Target)> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.verdict() == Verdict::Deny) {
        let Some((kind, _)) = l.rule_source() else { continue };
        if kind == RuleKind::Client {
            continue;
        }
        let Some(t) = target_of(l) else { continue };
        let method = if t.method == Method::Connect { "CONNECT" } else { "GET" };
        let request = format!("{method} {}:{}", host_word(&t.host), t.port);
        seen.entry((request, l.rule.clone())).or_insert((0, t)).0 += 1;
    }
    let mut out: Vec<Suggestion> = seen
        .into_iter()
        .map(|((request, note), (count, t))| one(&policy, layers, request, &note, count, &t))
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.request.cmp(&b.request)));
    Ok(out)
}

fn one(
    policy: &Policy,
    layers: &[LayerText],
    request: String,
    note: &str,
    count: usize,
    t: &Target,
) -> Suggestion {
    let kind = super::log::parse_note(note).map(|(k, _)| k);
    let denied_by = kind.map(|k| k.tag()).unwrap_or("-").to_string();
    let source = kind.and_then(|_| policy.source_of_note(note));
    let host = host_word(&t.host);
    let web = t.port == 80 || t.port == 443;
    let (line, why) = match (t.method == Method::Connect, web) {
        (true, false) => {
            (Some(format!("connect {host}:{}", t.port)), format!("tunnels to port {} of {host} only", t.port))
        }
        (false, false) => (
            None,
            format!(
                "plain requests to port {} are refused whatever the rules say; use https:// (a CONNECT tunnel), then `connect {host}:{}` can allow it",
                t.port, t.port
            ),
        ),
        (_, true) => {
            let what = match kind {
                Some(RuleKind::Private) => {
                    "opens a private address (the host, the LAN or a metadata service) to the agent"
                }
                Some(RuleKind::NoDot) => "opens a name without a dot (a local or intranet name)",
                _ => "an allow rule wins over every block rule",
            };
            (Some(format!("allow {host}")), format!("{what}; ports 80 and 443 only"))
        }
    };
    // A rule for a name lets the name through whatever it resolves to, private addresses and
    // this host's own included: the one who pastes the line must know that.
    let why = match (&t.host, &line) {
        (Host::Name(n), Some(_)) if kind != Some(RuleKind::Private) => format!(
            "{why}; it also lifts the private-address check for {n}: whoever controls its DNS can point it at this machine or your network"
        ),
        _ => why,
    };
    // Offer the line only if it really lets the request through on top of the current rules.
    let line = line.filter(|l| allows(layers, l, t));
    Suggestion { line, request, count, denied_by, source, why }
}

/// Whether `line`, added as a personal rule after `layers`, makes the policy allow `t`.
fn allows(layers: &[LayerText], line: &str, t: &Target) -> bool {
    let mut with = layers.to_vec();
    with.push(LayerText::new(EgressLayer::Local, "<suggestion>", format!("{line}\n")));
    let Ok(p) = Policy::compile(&with) else { return false };
    // A name that needed the private check is judged with no addresses: the allow rule decides
    // before that check, so the answer does not depend on DNS.
    p.decide(t, &[]).verdict == Verdict::Allow
}

/// The suggestions as text: a comment with the count and the denying rule, then the line.
pub fn to_text(s: &[Suggestion]) -> String {
    let mut out = String::new();
    if s.is_empty() {
        out.push_str("# nothing was denied: no rule to suggest\n");
        return out;
    }
    out.push_str("# Denied requests and the rule line that would allow each. Nothing was written:\n");
    out.push_str("# paste what you want into .opencode-sandbox/local/egress.conf (yours alone) or\n");
    out.push_str("# .opencode-sandbox/egress.conf (the project's), then run `ocsb egress up`.\n");
    for x in s {
        let by = match &x.source {
            Some(src) => format!("{} ({src})", x.denied_by),
            None => x.denied_by.clone(),
        };
        let _ = writeln!(out, "\n# {} denied {}x by {by}: {}", x.request, x.count, x.why);
        match &x.line {
            Some(l) => {
                let _ = writeln!(out, "{l}");
            }
            None => out.push_str("# (no rule can allow this request)\n"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "allow jira.example.com\nblock .example.com\nconnect git.example.com:2222\n";

    fn layers() -> Vec<LayerText> {
        vec![LayerText::new(EgressLayer::Project, ".opencode-sandbox/egress.conf", RULES)]
    }

    fn log(lines: &[&str]) -> Vec<LogLine> {
        lines.iter().map(|l| LogLine::parse(l).unwrap()).collect()
    }

    #[test]
    fn each_denial_gets_a_line_that_allows_it_and_nothing_else_is_proposed() {
        let lines = log(&[
            "1.0 127.0.0.1 TCP_DENIED/403 rule=block:project:2 CONNECT www.example.com:443 peer=-",
            "1.1 127.0.0.1 TCP_DENIED/403 rule=block:project:2 CONNECT www.example.com:443 peer=-",
            "1.2 127.0.0.1 TCP_DENIED/403 rule=port CONNECT git.example.com:2223 peer=-",
            "1.3 127.0.0.1 TCP_DENIED/403 rule=port GET http://pub.test.net:8080/x peer=-",
            "1.4 127.0.0.1 TCP_DENIED/403 rule=private GET http://10.0.0.5/ peer=-",
            "1.5 127.0.0.1 TCP_DENIED/403 rule=no-dot GET http://intranet/ peer=-",
            "1.6 198.51.100.7 TCP_DENIED/403 rule=client GET http://pub.test.net/ peer=-",
            "1.7 127.0.0.1 TCP_MISS/200 rule=default GET http://pub.test.net/ peer=198.51.100.7",
        ]);
        let s = suggest(&layers(), &lines).unwrap();
        let got: Vec<(&str, Option<&str>, usize)> =
            s.iter().map(|x| (x.request.as_str(), x.line.as_deref(), x.count)).collect();
        assert_eq!(
            got,
            vec![
                ("CONNECT www.example.com:443", Some("allow www.example.com"), 2),
                ("CONNECT git.example.com:2223", Some("connect git.example.com:2223"), 1),
                ("GET 10.0.0.5:80", Some("allow 10.0.0.5"), 1),
                ("GET intranet:80", Some("allow intranet"), 1),
                ("GET pub.test.net:8080", None, 1),
            ]
        );
        assert_eq!(s[0].source.as_deref(), Some(".opencode-sandbox/egress.conf:2"));
        assert_eq!(s[0].denied_by, "block");
        assert!(s[2].why.contains("private address"), "{:?}", s[2]);
        // A line for a name says that it also lifts the private check for that name.
        assert!(s[0].why.contains("lifts the private-address check for www.example.com"), "{:?}", s[0]);
        assert!(s[1].why.contains("lifts the private-address check"), "{:?}", s[1]);
        assert!(s[4].why.contains("https://"), "{:?}", s[4]);
        let text = to_text(&s);
        assert!(text.contains("\nallow www.example.com\n") && text.contains("Nothing was written"), "{text}");
        assert!(text.contains("denied 2x by block (.opencode-sandbox/egress.conf:2)"), "{text}");
    }

    #[test]
    fn a_line_that_would_not_allow_the_request_is_not_offered() {
        // The log names a rule kind whose fix does not apply: a GET to a non-web port.
        let lines = log(&["1.0 127.0.0.1 TCP_DENIED/403 rule=port GET http://git.example.com:2222/ peer=-"]);
        let s = suggest(&layers(), &lines).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].line, None);
        assert!(suggest(&layers(), &[]).unwrap().is_empty());
        assert!(to_text(&[]).contains("nothing was denied"));
    }
}
