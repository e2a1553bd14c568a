//! `<state>/data/opencode/log/context-panel.log`: what the front did about the Tokens panel, for
//! the seed's "no Tokens panel" row: whether pages got the script tag, whether the browser
//! fetched the script, and why numbers could not be computed. It sits beside OpenCode's own logs
//! so one directory answers "why is the panel missing". The file is opened once through
//! `ocsb_sandbox::statefs::StateDir` (no symlink followed) and kept open for the run.

use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::sync::Mutex;
use std::time::SystemTime;

use ocsb_policy::clock::utc;

/// Where the log lives, relative to the state directory.
pub const PATH: &str = "data/opencode/log/context-panel.log";

#[derive(Debug, Default)]
pub struct PanelLog {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    file: Option<File>,
    last: String,
}

impl PanelLog {
    pub fn new(file: File) -> PanelLog {
        PanelLog { inner: Mutex::new(Inner { file: Some(file), last: String::new() }) }
    }

    /// Append one line with a UTC timestamp; a line equal to the previous one is dropped (the
    /// panel polls, and one failure must not fill the disk).
    pub fn line(&self, msg: impl Display) {
        let msg = msg.to_string().replace(['\n', '\r'], " ");
        let Ok(mut inner) = self.inner.lock() else { return };
        if inner.last == msg {
            return;
        }
        let stamp = utc(SystemTime::now());
        if let Some(f) = inner.file.as_mut() {
            let _ = writeln!(f, "{stamp} {msg}");
        }
        inner.last = msg;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_lines_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        let log = PanelLog::new(File::create(&p).unwrap());
        log.line("a\nb");
        log.line("a\nb");
        log.line("c");
        log.line("a b");
        let text = std::fs::read_to_string(&p).unwrap();
        let msgs: Vec<&str> = text.lines().map(|l| l.split_once(' ').unwrap().1).collect();
        assert_eq!(msgs, ["a b", "c", "a b"]);
    }
}
