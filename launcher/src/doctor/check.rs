//! A check result as data: what `ocsb doctor` prints, one line each, and what `--json` emits.

use std::fmt;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but something is missing or weaker than it could be.
    Warn,
    /// `run` would refuse to start (or would not be safe): exit status 1.
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable identifier for scripts (`userns`, `netlock-probe`, `port-web`, …).
    pub id: &'static str,
    pub status: Status,
    pub message: String,
    /// The command that fixes it; present on every `fail`, and on a `warn` when there is one.
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(id: &'static str, message: impl Into<String>) -> Check {
        Check { id, status: Status::Ok, message: message.into(), fix: None }
    }

    pub fn warn(id: &'static str, message: impl Into<String>, fix: Option<String>) -> Check {
        Check { id, status: Status::Warn, message: message.into(), fix }
    }

    pub fn fail(id: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { id, status: Status::Fail, message: message.into(), fix: Some(fix.into()) }
    }
}

/// `fail netlock-group: the group "x" (OCSB_NETLOCK_GROUP) does not exist; fix: sudo groupadd …`
impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.status.as_str(), self.id, self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

/// The exit status of `ocsb doctor`: 0 when nothing failed, 1 otherwise.
pub fn exit_code(checks: &[Check]) -> u8 {
    u8::from(checks.iter().any(|c| c.status == Status::Fail))
}

/// The text report: one line per check, then a count.
pub fn render_text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        out.push_str(&c.to_string());
        out.push('\n');
    }
    let count = |s| checks.iter().filter(|c| c.status == s).count();
    out.push_str(&format!(
        "doctor: {} ok, {} warn, {} fail\n",
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    ));
    out
}

/// `--json`: an array of `{id, status, message, fix}` (`fix` is `null` when there is none).
#[allow(clippy::expect_used, reason = "plain data: serialising it cannot fail")]
pub fn render_json(checks: &[Check]) -> String {
    serde_json::to_string_pretty(checks).expect("checks serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_json() {
        let checks = vec![
            Check::ok("git", "git version 2.39.5"),
            Check::fail("netlock-group", "the group \"x\" does not exist", "sudo groupadd --system x"),
        ];
        assert_eq!(checks[0].to_string(), "ok   git: git version 2.39.5");
        assert_eq!(
            checks[1].to_string(),
            "fail netlock-group: the group \"x\" does not exist; fix: sudo groupadd --system x"
        );
        assert_eq!(exit_code(&checks), 1);
        assert_eq!(exit_code(&checks[..1]), 0);
        let v: serde_json::Value = serde_json::from_str(&render_json(&checks)).unwrap();
        assert_eq!(
            v[0],
            serde_json::json!({"id": "git", "status": "ok", "message": "git version 2.39.5", "fix": null})
        );
        assert_eq!(v[1]["status"], "fail");
        assert!(render_text(&checks).ends_with("doctor: 1 ok, 0 warn, 1 fail\n"));
    }
}
