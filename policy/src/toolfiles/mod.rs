//! The tool files: entries of a writable tree that a program on the host reads or runs by
//! itself, without the user asking for that file, when the user enters the directory, opens it
//! in an editor or runs a command there (even a read-only one).
//!
//! The agent may write the project; the user runs the project's code knowingly (`make`,
//! `npm test`). What the user does *not* choose to run is what `cd` has direnv or mise run, what
//! an IDE runs when it opens the folder, what `git commit` has pre-commit run, or what
//! `yarn --version` has yarn run. Every such entry is one [`ToolFile`] of [`REGISTRY`], matched at
//! any depth (tools look in every directory from the one the user is in upwards, and editors in
//! every folder the user opens). The sandbox keeps the existing ones read-only, moves a new one
//! aside or reports it, and the import gate holds commits that touch one.
//!
//! `OCSB_RW_TOOL_FILES` takes the registry's [`ToolFile::name`]s: those the user lets the agent
//! write are neither protected, nor moved aside, nor reported, nor held.
//!
//! This module is pure: it matches names and parses text it is given.

pub mod envrc;
mod registry;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

pub use registry::REGISTRY;

/// When a host tool acts on the file without the user asking for that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Trigger {
    /// Entering the directory or one below it (a shell hook or prompt: direnv, rustup proxies
    /// run by prompts, asdf, mise). A new one is moved aside at once.
    Cd,
    /// Opening the directory in an editor or IDE (VS Code, JetBrains, helix, zed, dev containers,
    /// vim/neovim exrc, emacs dir-locals). A new one is reported (and listed by `ocsb audit`).
    Open,
    /// A git command or a git hook the user's repository runs (pre-commit, lefthook,
    /// `.gitmodules`). Reported.
    Git,
    /// Any command of a tool run in the directory, even a read-only one (`yarn --version` runs
    /// `yarnPath`; npm reads `.npmrc`'s `node-options`; cargo reads `.cargo/config.toml`).
    /// Reported.
    Command,
}

impl Trigger {
    /// Whether a new entry is moved aside at once (rather than reported). *Why* only `Cd`:
    /// entering a directory is what the user does without thinking, often before they could
    /// read a report (a prompt runs the tool as the shell draws it), so the file must be gone
    /// before then. The others wait for an act of the user's (opening an editor, committing,
    /// running a command) that a report on the terminal comes before; moving those aside would
    /// break the agent's legitimate edits of project settings.
    pub fn moves_aside(self) -> bool {
        matches!(self, Trigger::Cd)
    }

    /// When the tool acts, in the user's words (the README table and messages say it).
    pub fn when(self) -> &'static str {
        match self {
            Trigger::Cd => "you cd into the directory",
            Trigger::Open => "you open the directory in the editor",
            Trigger::Git => "you run git (commit, checkout, submodule update)",
            Trigger::Command => "you run the tool there (any of its commands)",
        }
    }
}

/// One entry of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolFile {
    /// How the registry names it, and what `OCSB_RW_TOOL_FILES` takes: `.envrc`,
    /// `rust-toolchain.toml`, `.helix`, `.config/mise.toml`, `mise.*.toml`.
    pub name: &'static str,
    /// The entry's name (last component), with at most one `*` standing for any bytes
    /// (`mise.*.toml`, `*.code-workspace`), compared without regard to ASCII case (a
    /// case-folding directory answers `.ENVRC` for `.envrc`).
    pub entry: &'static str,
    /// The name of the directory it must be in, when the tool looks only there
    /// (`.config` for `.config/mise.toml`); `None`: any directory.
    pub parent: Option<&'static str>,
    /// A directory (`.vscode`, `.helix`), protected whole.
    pub dir: bool,
    pub tool: &'static str,
    pub trigger: Trigger,
    /// What the tool does with it, for the user (the README table and messages say it).
    pub why: &'static str,
}

impl ToolFile {
    /// Whether a directory entry named `name` in a directory named `parent` is this entry.
    fn matches(&self, parent: Option<&[u8]>, name: &[u8]) -> bool {
        if !glob_eq(self.entry.as_bytes(), name) {
            return false;
        }
        match self.parent {
            None => true,
            Some(p) => parent.is_some_and(|q| q.eq_ignore_ascii_case(p.as_bytes())),
        }
    }
}

/// `pattern` (at most one `*`, any bytes) against `name`, without regard to ASCII case.
fn glob_eq(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.iter().position(|&b| b == b'*') {
        None => pattern.eq_ignore_ascii_case(name),
        Some(star) => {
            let (head, tail) = (&pattern[..star], &pattern[star + 1..]);
            name.len() >= head.len() + tail.len()
                && name[..head.len()].eq_ignore_ascii_case(head)
                && name[name.len() - tail.len()..].eq_ignore_ascii_case(tail)
        }
    }
}

/// The first entry that matches, unless the user named one of those that match in
/// `OCSB_RW_TOOL_FILES`. *Why* any of them: entries overlap (`lefthook.yml` and `lefthook.*`,
/// `mise.toml` and `.config/mise.toml`), and the user who names one means the file, not the
/// pattern; holding it by another entry of the same tool would make the setting a lie.
fn lookup_bytes(parent: Option<&[u8]>, name: &[u8], rw: &[String]) -> Option<&'static ToolFile> {
    let mut found = None;
    for t in REGISTRY.iter().filter(|t| t.matches(parent, name)) {
        if rw.iter().any(|r| r == t.name) {
            return None;
        }
        found = found.or(Some(t));
    }
    found
}

/// The registry entry a directory entry named `name` in a directory named `parent` (its last
/// component) is, if any, leaving out those `rw` (OCSB_RW_TOOL_FILES values) names.
pub fn lookup(parent: Option<&OsStr>, name: &OsStr, rw: &[String]) -> Option<&'static ToolFile> {
    lookup_bytes(parent.map(OsStr::as_bytes), name.as_bytes(), rw)
}

/// Whether a path relative to a checkout (as git lists it: bytes, `/`-separated) is or lies
/// inside a registry entry (any component chain matches), for the import gate.
///
/// Every component is tried, not only the last: `a/.vscode/tasks.json` lies in `.vscode`, and
/// `a/.envrc/x` makes `.envrc` a directory (nothing a tool runs, but a commit that turns it
/// into a file later touches it again, so holding it costs nothing). Empty components (`a//b`)
/// and a leading `/` are skipped, as git never lists them.
pub fn in_registry(path: &[u8], rw: &[String]) -> Option<&'static ToolFile> {
    let mut parent: Option<&[u8]> = None;
    for part in path.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        if let Some(t) = lookup_bytes(parent, part, rw) {
            return Some(t);
        }
        parent = Some(part);
    }
    None
}

/// Whether `name` is a registry name (for the settings' validation of OCSB_RW_TOOL_FILES).
pub fn is_name(name: &str) -> bool {
    REGISTRY.iter().any(|t| t.name == name)
}

/// The registry's names, in its order, for messages that list them.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|t| t.name).collect()
}

/// The README's table (markdown): name, tool, when it acts, what it does. The README holds it
/// between `<!-- tool-files:begin -->` and `<!-- tool-files:end -->`; a unit test in
/// `policy` fails when they differ and prints the table to paste.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| Name (`OCSB_RW_TOOL_FILES`) | Tool | Acts when | What it does |\n|---|---|---|---|\n",
    );
    for t in REGISTRY {
        let kind = if t.dir { " (directory)" } else { "" };
        s.push_str(&format!(
            "| `{}`{kind} | {} | {} | {} |\n",
            t.name,
            t.tool,
            t.trigger.when(),
            t.why.replace('|', "\\|")
        ));
    }
    s
}

#[cfg(test)]
mod tests;
