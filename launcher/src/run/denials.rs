//! Denials reach the agent: while `run` lasts, the launcher follows the filter's access log and
//! appends each refusal to `<state>/run/egress-denials.jsonl`, with the deciding rule's
//! `file:line` and the rule line that would allow it. The `ocsb-denials` plugin inside the
//! sandbox reads the file after each bash command and ends the command's output with one line
//! per denied host, so the agent learns why its request failed and what to ask the user for.
//!
//! *Why the launcher and not the filter*: both backends write the same log, and neither may
//! write into a directory the sandbox can see; the launcher already runs outside the sandbox
//! for the whole session. The file is the agent's to read (and to spoil, which only misleads
//! the agent itself); it is opened without following links and rewritten when it grows large.

use std::io::Write;
use std::path::Path;

use ocsb_policy::egress::suggest;
use ocsb_policy::egress::{LayerText, LogLine, RuleKind, Verdict};
use ocsb_sandbox::statefs::StateDir;

use crate::project::Project;

/// Where the records go, relative to the state directory (the sandbox's `XDG_RUNTIME_DIR`).
pub const PATH: &str = "run/egress-denials.jsonl";

/// A record file past this size is emptied: the plugin only looks at the last seconds.
const MAX_BYTES: u64 = 1 << 20;

/// One refusal, as the plugin reads it.
#[derive(Debug, serde::Serialize)]
struct Record<'a> {
    /// When the filter logged it (seconds since the epoch).
    time: f64,
    /// `CONNECT host:port` or `GET host:port`.
    request: &'a str,
    /// The step or rule that denied it (`block`, `private`, …).
    rule: &'a str,
    /// `file:line` of the rule, when a rule decided.
    source: Option<&'a str>,
    /// The rule line that would allow it (`allow host`, `connect host:port`), if any.
    suggest: Option<&'a str>,
    /// Why that line, or why there is none.
    why: &'a str,
}

/// Start following the log on a thread of its own; it ends with the process. A filter whose
/// log cannot be read gives a warning, not an error: denials are then only in the 403 bodies.
pub fn start(project: &Project, state: &StateDir) -> Result<(), String> {
    let inst = crate::filter::instance(project).map_err(|e| e.to_string())?;
    let layers = ocsb_policy::egress::load_layers(&project.user_config_dir, &project.dir)
        .map_err(|e| e.to_string())?;
    state.dir(Path::new("run")).map_err(|e| e.to_string())?;
    // A fresh file each run; `append` replaces whatever a sandbox left at the name (a link, a
    // FIFO, a hard link to one of the user's files) instead of writing through it.
    state.remove(Path::new(PATH)).map_err(|e| e.to_string())?;
    let file = state.append(Path::new(PATH)).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("ocsb-denials".into())
        .spawn(move || {
            let opts =
                ocsb_egress::LogsOptions { follow: true, raw: true, tail: Some(0), ..Default::default() };
            let mut sink = Sink { layers, file, partial: Vec::new(), known: Default::default() };
            if let Err(e) = ocsb_egress::logs(&inst, &opts, &mut sink) {
                eprintln!("ocsb: warning: denials are no longer reported to the agent: {e}");
            }
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Receives the log's raw lines; writes one record per refusal.
struct Sink {
    layers: Vec<LayerText>,
    file: std::fs::File,
    partial: Vec<u8>,
    /// One suggestion per (request, rule): the agent can make denials far faster than rules
    /// compile, so each distinct one is worked out once.
    known: std::collections::HashMap<(String, String), Option<suggest::Suggestion>>,
}

/// Distinct denials remembered at most (the map is emptied when full).
const KNOWN: usize = 1024;

impl Sink {
    fn line(&mut self, text: &str) {
        let Some(l) = LogLine::parse(text) else { return };
        if l.verdict() != Verdict::Deny || l.rule_source().is_some_and(|(k, _)| k == RuleKind::Client) {
            return;
        }
        let time = l.time.parse::<f64>().unwrap_or(0.0);
        // By authority, not the whole target: the path is the agent's to vary endlessly.
        let rest = l.target.split_once("://").map_or(l.target.as_str(), |(_, r)| r);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let key = (format!("{} {authority}", l.method), l.rule.clone());
        if self.known.len() >= KNOWN {
            self.known.clear();
        }
        let layers = &self.layers;
        let found = self.known.entry(key).or_insert_with(|| {
            suggest::suggest(layers, std::slice::from_ref(&l)).ok().and_then(|v| v.into_iter().next())
        });
        let Some(s) = found.clone() else { return };
        let rec = Record {
            time,
            request: &s.request,
            rule: &s.denied_by,
            source: s.source.as_deref(),
            suggest: s.line.as_deref(),
            why: &s.why,
        };
        if self.file.metadata().is_ok_and(|m| m.len() > MAX_BYTES) {
            let _ = self.file.set_len(0);
        }
        if let Ok(mut json) = serde_json::to_vec(&rec) {
            json.push(b'\n');
            let _ = self.file.write_all(&json);
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(buf);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let rest = self.partial.split_off(i + 1);
            let line = std::mem::replace(&mut self.partial, rest);
            self.line(String::from_utf8_lossy(&line).trim_end());
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ocsb_policy::egress::EgressLayer;

    #[test]
    fn refusals_become_records_and_other_lines_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let layers = vec![LayerText::new(
            EgressLayer::Project,
            ".opencode-sandbox/egress.conf",
            "block .example.com\n",
        )];
        let mut sink = Sink { layers, file, partial: Vec::new(), known: Default::default() };
        // Written in pieces, as a follower delivers them.
        let log = "1764555600.123 127.0.0.1 TCP_DENIED/403 rule=block:project:1 CONNECT www.example.com:443 peer=-\n\
                   1764555600.200 127.0.0.1 TCP_MISS/200 rule=default GET http://pub.test.net/ peer=198.51.100.7\n\
                   1764555600.300 198.51.100.7 TCP_DENIED/403 rule=client GET http://pub.test.net/ peer=-\n";
        let (a, b) = log.split_at(40);
        sink.write_all(a.as_bytes()).unwrap();
        sink.write_all(b.as_bytes()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let recs: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(recs.len(), 1, "{text}");
        assert_eq!(recs[0]["request"], "CONNECT www.example.com:443");
        assert_eq!(recs[0]["rule"], "block");
        assert_eq!(recs[0]["source"], ".opencode-sandbox/egress.conf:1");
        assert_eq!(recs[0]["suggest"], "allow www.example.com");
        assert!((recs[0]["time"].as_f64().unwrap() - 1764555600.123).abs() < 0.001);
    }
}
