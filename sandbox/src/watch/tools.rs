//! The tool files' matcher: a new entry that a host tool would act on by itself
//! (`ocsb_policy::toolfiles`), at any depth of the watched trees.
//!
//! *Why live*: the start keeps the tool files that exist read-only, but no mount can stop a new
//! one (a `.envrc` three directories down, a `rust-toolchain.toml` with `path = …` where a prompt
//! runs `rustc --version`). One that a tool acts on when the user merely enters the directory
//! ([`Trigger::moves_aside`]) is moved aside at once: the prompt would run it before the user
//! could read a report. The others wait for an act of the user's (opening an editor,
//! committing), so they are reported, on the terminal and to `ocsb audit`.
//!
//! Besides the registry's names, the paths an allowed `.envrc` loads that the start found
//! missing or held ([`Tools::load`]): direnv does not ask again when they change, so a new
//! entry at such a path is moved aside. A held one that the agent moves away with a directory
//! above it is new at its old path too (the directory there is another), so it is caught the
//! same way.

use std::collections::HashMap;
use std::path::PathBuf;

use ocsb_policy::toolfiles::{self, Trigger};

use super::plant::{Action, Entry, Kind, Match, Matcher, Plant};

/// The tool files' [`Matcher`].
#[derive(Debug, Clone, Default)]
pub struct Tools {
    /// `OCSB_RW_TOOL_FILES`: names of the registry the user lets the agent make.
    rw: Vec<String>,
    /// Exact paths (spelled as the watch spells them: a root joined with names) and why.
    exact: HashMap<PathBuf, String>,
    /// The directories on the way to each of `exact` below its root, and why: a symbolic link
    /// made at one leads direnv to a file the watch never sees appear (its target's).
    ways: HashMap<PathBuf, String>,
    /// direnv's own config loads a `.env` in every directory (`load_dotenv`).
    dotenv: bool,
}

/// The name direnv's `load_dotenv` reads in every directory.
const DOTENV: &str = ".env";

impl Tools {
    pub fn new(rw: Vec<String>, dotenv: bool) -> Tools {
        Tools { rw, exact: HashMap::new(), ways: HashMap::new(), dotenv }
    }

    /// A path an `.envrc` loads: an entry made there is moved aside. `why` says which `.envrc`
    /// and what direnv does with it.
    /// `root` is the writable root it lies in: the directories between are its way.
    pub fn load(&mut self, path: PathBuf, root: &std::path::Path, why: String) {
        for dir in path.ancestors().skip(1).take_while(|d| d.starts_with(root) && *d != root) {
            self.ways.entry(dir.to_path_buf()).or_insert_with(|| format!("on the way to what {why}"));
        }
        self.exact.insert(path, why);
    }
}

impl Matcher for Tools {
    fn judge(&self, e: &Entry<'_>) -> Option<Match> {
        let here = e.dir.join(e.name);
        let (why, tool, action) = if let Some(why) = self.exact.get(&here) {
            (why.clone(), "direnv", Action::MoveAside)
        } else if let Some(why) = self.ways.get(&here).filter(|_| e.kind == Kind::Link) {
            (format!("a symbolic link {why}"), "direnv", Action::MoveAside)
        } else if let Some(t) = linked_parent(e, &self.rw) {
            (
                format!("a symbolic link named like the directory of a tool file of {}: {}", t.tool, t.why),
                t.tool,
                action_of(t.trigger),
            )
        } else if let Some(t) = toolfiles::lookup(e.dir.file_name(), e.name, &self.rw) {
            let action = if t.trigger.moves_aside() { Action::MoveAside } else { Action::Report };
            (format!("a tool file of {}: {}", t.tool, t.why), t.tool, action)
        } else if self.dotenv && e.name.as_encoded_bytes().eq_ignore_ascii_case(DOTENV.as_bytes()) {
            let why = "a tool file of direnv: your direnv config (`load_dotenv`) loads it when you cd into \
                       the directory";
            (why.to_string(), "direnv", action_of(Trigger::Cd))
        } else {
            return None;
        };
        Some(Match {
            plant: Plant::Tool { what: tool.to_string() },
            subject: e.name.to_os_string(),
            why: format!("{why} ({} in {})", e.name.to_string_lossy(), e.dir.display()),
            action,
        })
    }
}

/// A symbolic link named like the directory a registry entry must be in (`.cargo ->
/// elsewhere`, whose `config.toml` cargo then reads): the watch sees the target's entries
/// under the target's name, never under this one.
fn linked_parent(e: &Entry<'_>, rw: &[String]) -> Option<&'static toolfiles::ToolFile> {
    if e.kind != Kind::Link {
        return None;
    }
    toolfiles::REGISTRY.iter().find(|t| {
        t.parent.is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(e.name.as_encoded_bytes()))
            && !rw.iter().any(|r| r == t.name)
    })
}

fn action_of(t: Trigger) -> Action {
    if t.moves_aside() { Action::MoveAside } else { Action::Report }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::path::Path;

    fn judge(t: &Tools, dir: &str, name: &str) -> Option<Match> {
        let sib = |_: &OsStr| None;
        t.judge(&Entry { dir: Path::new(dir), name: OsStr::new(name), kind: Kind::File, sibling: &sib })
    }

    /// Every registry entry matches at any depth, in any ASCII case, as a file or directory;
    /// a tool a prompt runs on `cd` is moved aside, the rest reported; look-alikes do not match.
    #[test]
    fn registry_names_match_at_any_depth_and_cd_ones_are_moved_aside() {
        let t = Tools::new(vec![], false);
        for f in toolfiles::REGISTRY {
            let name = f.entry.replace('*', "x");
            let dir = match f.parent {
                Some(p) => format!("/p/a/b/{p}"),
                None => "/p/a/b/c".to_string(),
            };
            for name in [name.clone(), name.to_ascii_uppercase()] {
                let m = judge(&t, &dir, &name).unwrap_or_else(|| panic!("{dir}/{name}"));
                assert_eq!(m.plant, Plant::Tool { what: f.tool.to_string() }, "{name}");
                let want = if f.trigger.moves_aside() { Action::MoveAside } else { Action::Report };
                assert_eq!(m.action, want, "{name}");
                assert!(m.why.contains(f.tool) && m.why.contains(&dir), "{}", m.why);
                assert_eq!(m.subject, OsStr::new(&name));
            }
        }
        let envrc = judge(&t, "/p/a/b/c", ".envrc").unwrap();
        assert_eq!(envrc.action, Action::MoveAside);
        assert_eq!(judge(&t, "/p/.config", "mise.toml").map(|m| m.action), Some(Action::MoveAside));
        for name in [".envrc.ocsb-planted-17", "envrc", ".envrc~", "src", "main.rs", ".env", ".gitignore"] {
            assert_eq!(judge(&t, "/p/a", name), None, "{name}");
        }
        // A name with a parent of its own matches only there.
        if let Some(f) = toolfiles::REGISTRY.iter().find(|f| f.parent.is_some() && !f.entry.contains('*')) {
            let elsewhere = toolfiles::lookup(Some(OsStr::new("src")), OsStr::new(f.entry), &[]);
            assert_eq!(judge(&t, "/p/src", f.entry).is_some(), elsewhere.is_some(), "{}", f.name);
        }
    }

    /// `OCSB_RW_TOOL_FILES` names are neither moved aside nor reported.
    #[test]
    fn names_the_user_lets_the_agent_write_are_left() {
        let t = Tools::new(vec![".envrc".into(), ".vscode".into()], false);
        assert_eq!(judge(&t, "/p/a", ".envrc"), None);
        assert_eq!(judge(&t, "/p", ".vscode"), None);
        assert!(judge(&t, "/p", ".idea").is_some());
    }

    /// A path an `.envrc` loads is moved aside where it is, and only there; with direnv's
    /// `load_dotenv`, every `.env` is.
    #[test]
    fn loads_and_dotenv_are_moved_aside() {
        let mut t = Tools::new(vec![], false);
        t.load("/p/sub/.env.local".into(), Path::new("/p"), "direnv loads it".into());
        t.load("/p/node_modules/.bin".into(), Path::new("/p"), "PATH_add".into());
        let m = judge(&t, "/p/sub", ".env.local").unwrap();
        assert_eq!((m.action, m.plant), (Action::MoveAside, Plant::Tool { what: "direnv".into() }));
        assert!(m.why.starts_with("direnv loads it"), "{}", m.why);
        assert!(judge(&t, "/p/node_modules", ".bin").is_some());
        assert_eq!(judge(&t, "/p", ".env.local"), None);
        assert_eq!(judge(&t, "/p/sub", ".env"), None);
        let t = Tools::new(vec![], true);
        for dir in ["/p", "/p/a/b/c"] {
            assert_eq!(judge(&t, dir, ".env").map(|m| m.action), Some(Action::MoveAside), "{dir}");
        }
        assert_eq!(judge(&t, "/p", ".env.example"), None);
    }

    fn judge_kind(t: &Tools, dir: &str, name: &str, kind: Kind) -> Option<Match> {
        let sib = |_: &OsStr| None;
        t.judge(&Entry { dir: Path::new(dir), name: OsStr::new(name), kind, sibling: &sib })
    }

    /// A symbolic link on the way to what an `.envrc` loads, or named like the directory of a
    /// registry entry (`.cargo`), is moved aside or reported; a real directory there is not
    /// (what it holds is judged as it appears), nor a link elsewhere.
    #[test]
    fn links_on_the_way_to_loads_and_named_like_tool_directories_match() {
        let mut t = Tools::new(vec![], false);
        t.load("/p/g/lib/env.sh".into(), Path::new("/p"), "g/.envrc loads it".into());
        let m = judge_kind(&t, "/p/g", "lib", Kind::Link).unwrap();
        assert_eq!(m.action, Action::MoveAside);
        assert_eq!(judge_kind(&t, "/p/g", "lib", Kind::Dir), None);
        assert_eq!(judge_kind(&t, "/p", "g", Kind::Link).map(|m| m.action), Some(Action::MoveAside));
        assert_eq!(judge_kind(&t, "/", "p", Kind::Link), None, "the root is not on the way");
        assert_eq!(judge_kind(&t, "/p/g", "other", Kind::Link), None);
        let m = judge_kind(&t, "/p/a/b", ".cargo", Kind::Link).unwrap();
        assert_eq!((m.action, m.plant), (Action::Report, Plant::Tool { what: "cargo".into() }));
        assert_eq!(judge_kind(&t, "/p/a/b", ".cargo", Kind::Dir), None);
        let t = Tools::new(vec![".cargo/config.toml".into(), ".cargo/config".into()], false);
        assert_eq!(judge_kind(&t, "/p/a/b", ".cargo", Kind::Link), None);
    }
}
