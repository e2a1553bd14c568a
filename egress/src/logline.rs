//! Presentation of the one-line access log for `egress logs`, the same for both backends (each
//! backend only knows where its lines come from).
//!
//! The format itself belongs to the policy crate ([`ocsb_policy::egress::LogLine`],
//! [`ocsb_policy::egress::SQUID_LOGFORMAT`]): squid writes it through its `logformat`, the
//! builtin proxy prints the same fields, so one parser serves both backends.

use std::io::Write;

pub use ocsb_policy::egress::LogLine;
use ocsb_policy::egress::Verdict;

/// How `egress logs` prints.
#[derive(Debug, Clone, Default)]
pub struct LogsOptions {
    pub follow: bool,
    pub json: bool,
    /// Colour denials (a terminal).
    pub color: bool,
    /// Print only the last N lines before following (`None` = all).
    pub tail: Option<usize>,
    /// The lines as the filter wrote them (for programs such as `egress suggest`).
    pub raw: bool,
}

/// JSON for `egress logs --json`: the fields plus `verdict`.
pub fn to_json(l: &LogLine) -> serde_json::Value {
    let mut v = serde_json::to_value(l).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("verdict".into(), l.verdict().to_string().into());
    }
    v
}

pub fn is_denied(l: &LogLine) -> bool {
    l.verdict() == Verdict::Deny
}

/// Human form for `egress logs`: denials are marked (and coloured on a terminal).
pub fn pretty(l: &LogLine, color: bool) -> String {
    let secs: u64 = l.time.split('.').next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let server = l.peer.as_deref().map(|ip| format!(" → {ip}")).unwrap_or_default();
    let verdict = if is_denied(l) { "DENY " } else { "allow" };
    let body = format!(
        "{h:02}:{m:02}:{s:02} {verdict} {:03} {} {} rule={}{server}",
        l.status, l.method, l.target, l.rule
    );
    if is_denied(l) && color { format!("\x1b[1;31m{body}\x1b[0m") } else { body }
}

/// Print one raw line of either backend's log: an access-log line parsed and shown as `opts`
/// asks, anything else (squid's own messages) indented, or dropped from JSON output.
pub fn emit(line: &str, opts: &LogsOptions, out: &mut dyn Write) -> std::io::Result<()> {
    if opts.raw {
        let t = line.trim_end();
        return if t.is_empty() { Ok(()) } else { writeln!(out, "{t}") };
    }
    match LogLine::parse(line) {
        Some(l) if opts.json => writeln!(out, "{}", to_json(&l)),
        Some(l) => writeln!(out, "{}", pretty(&l, opts.color)),
        None if opts.json => Ok(()),
        None => {
            let t = line.trim_end();
            if t.is_empty() { Ok(()) } else { writeln!(out, "  {t}") }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_marks_denials() {
        let l = LogLine::parse(
            "1764555600.123 127.0.0.1 TCP_DENIED/403 rule=block:project:3 CONNECT www.example.com:443 peer=-",
        )
        .unwrap();
        assert!(is_denied(&l));
        let p = pretty(&l, false);
        assert!(p.contains("DENY") && p.contains("rule=block:project:3"), "{p}");
        assert_eq!(to_json(&l)["verdict"], "deny");
        let a = LogLine::parse(
            "1764555602.789 127.0.0.1 TCP_MISS/200 rule=default GET http://pub.test.net/ peer=198.51.100.7",
        )
        .unwrap();
        assert!(pretty(&a, true).contains("→ 198.51.100.7"));
        assert!(!pretty(&a, true).contains("\x1b["));
    }
}
