//! `<state>/data/opencode/log/context-panel.log`: what the front did about the Tokens panel, for
//! the seed's "no Tokens panel" row: whether pages got the script tag, whether the browser
//! fetched the script, and why numbers could not be computed. It sits beside OpenCode's own logs
//! so one directory answers "why is the panel missing". The file is opened once through
//! [`ocsb_sandbox::statefs::StateDir`] (no symlink followed) and kept open for the run.

use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// `2026-12-01T04:31:26Z`.
pub(crate) fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm, proleptic Gregorian).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps() {
        assert_eq!(utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(utc(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(utc(UNIX_EPOCH + Duration::from_secs(1_796_099_486)), "2026-12-01T04:31:26Z");
    }

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
