//! `ocsb` started inside one of its own sandboxes (the agent following the skill, or a user in
//! `ocsb shell`). The host commands cannot work there: the settings, hooks and git metadata
//! they write are read-only, and sandboxes do not nest. Saying so at once, with the command
//! to hand to the user, beats the read-only error the first write would give.

use crate::cli::{Command, EgressCommand, SandboxCommand};
use crate::error::{Error, Result};
use crate::session::PROJECT_VAR;

/// Commands that only read the project's files, and the launcher's own internal entry points
/// (the sandbox runs those itself).
fn works_inside(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Config(_)
            | Command::Egress(EgressCommand::Render(_) | EgressCommand::Explain(_))
            | Command::Sandbox(SandboxCommand::Status)
            | Command::Completions { .. }
            | Command::SandboxRun { .. }
            | Command::NetlockProbe
            | Command::IsolatedProbe
            | Command::DockerWatch { .. }
            | Command::OpencodeConfig { .. }
            | Command::WebFront(_)
    )
}

/// Refuse a host command inside a sandbox, naming what to ask the user for.
pub fn refuse(cmd: &Command) -> Result<()> {
    let Some(project) = std::env::var_os(PROJECT_VAR).filter(|p| !p.is_empty()) else { return Ok(()) };
    if works_inside(cmd) {
        return Ok(());
    }
    let project = std::path::Path::new(&project).display().to_string();
    // *Why only worktrees get their command line echoed*: it is what the skill sends the agent
    // here for. Any other line (`audit --accept`, `netlock teardown`, `egress up` after the agent
    // edited rules) would reach the user as ocsb's own advice, in the agent's words.
    let fix = if matches!(cmd, Command::Wt(_)) {
        let args: Vec<String> = std::env::args_os().skip(1).map(|a| quote(&a.to_string_lossy())).collect();
        format!("ask the user to run on the host, in {project}: ocsb {}", args.join(" "))
    } else {
        "this command is the user's, on the host; tell the user what you need and why".to_string()
    };
    Err(Error::failed(
        format!("ocsb runs on the host, not inside its sandbox (this is the sandbox of {project})"),
        fix,
    ))
}

/// A word as a POSIX shell reads it back.
fn quote(w: &str) -> String {
    let plain = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain { w.to_string() } else { format!("'{}'", w.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(quote("wt"), "wt");
        assert_eq!(quote("feature/x-1"), "feature/x-1");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
