//! Where the builtin proxy writes its access log: one line per transaction, same format as squid.

use std::io::Write;
use std::sync::{Arc, Mutex};

use ocsb_policy::egress::LogLine;

/// A cloneable line writer. Lines are written whole under a lock so concurrent transactions
/// never interleave inside a line.
#[derive(Clone)]
pub struct Logger {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Logger {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self { out: Arc::new(Mutex::new(out)) }
    }
    pub fn stdout() -> Self {
        Self::new(Box::new(std::io::stdout()))
    }
    pub fn sink() -> Self {
        Self::new(Box::new(std::io::sink()))
    }
    pub fn log(&self, line: &LogLine) {
        let text = format!("{line}\n");
        if let Ok(mut o) = self.out.lock() {
            let _ = o.write_all(text.as_bytes());
            let _ = o.flush();
        }
    }
    /// Free-form diagnostics (start, reload, refusals without a request) go to the same stream,
    /// prefixed so the access-log parser skips them.
    pub fn note(&self, msg: &str) {
        if let Ok(mut o) = self.out.lock() {
            let _ = writeln!(o, "# ocsb-egress: {msg}");
            let _ = o.flush();
        }
    }
}
