//! What the committed project layer does to the sandbox's isolation.
//!
//! `.opencode-sandbox/sandbox.conf` is written by whoever can push to the repository. The agent
//! cannot change it from inside (it is read-only there), but a cloned repository, a merged pull
//! request or an agent working in a checkout outside the sandbox can. A line such as
//! `OCSB_SANDBOX=0`, `OCSB_RW=(~)` or `OCSB_ENV_FILE=~/.aws/credentials` in that file would widen
//! the sandbox for everyone who runs it, silently. So the launcher compares the effective settings
//! with what they would be *without* the project layer and shows every setting that the project
//! layer makes less isolated; the user's own layers (user, local, environment) are trusted as
//! they are.
//!
//! The comparison is by value, not by origin: an array that the project layer extends and a later
//! layer extends again still shows the project's additions.

use std::path::PathBuf;

use super::load::{self, LayerText};
use super::{Layer, LoadInput, Settings, Value, layer_files};
use crate::Result;

/// One way the project layer widens the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widening {
    pub name: &'static str,
    /// What changed: `0 (was 1)`, `+ /home/u/x`, `- .aws`.
    pub change: String,
    /// Why that matters, in a few words.
    pub why: &'static str,
}

/// Settings whose change makes the sandbox less isolated, and how to compare them.
enum Rule {
    /// A switch that is wider at this value.
    Becomes(&'static str),
    /// A scalar that the project layer itself set to something else (derived defaults, such as
    /// the state directory following `OCSB_NAME`, do not count).
    Changed,
    /// An array whose added elements are wider.
    Added,
    /// An array whose removed elements are wider (hidden paths).
    Removed,
    /// An array where empty means "all": wider when it becomes empty, or gains an element.
    Narrows,
}

const WATCHED: &[(&str, Rule, &str)] = &[
    ("OCSB_SANDBOX", Rule::Becomes("0"), "turns the namespace sandbox off"),
    ("OCSB_TMP", Rule::Becomes("shared"), "the host's /tmp holds sockets that lead out of the sandbox"),
    ("OCSB_DOCKER", Rule::Becomes("1"), "gives the agent Docker (through the gateway)"),
    (
        "OCSB_DOCKER",
        Rule::Becomes("raw"),
        "the raw Docker socket is root on this machine and goes around the filter",
    ),
    ("OCSB_RW", Rule::Added, "makes a host path writable for the agent"),
    ("OCSB_RW_HOME", Rule::Added, "makes a directory in your home writable for the agent"),
    (
        "OCSB_CACHES",
        Rule::Becomes("shared"),
        "the agent writes into caches your own builds and tools run code from",
    ),
    ("OCSB_LOOPBACK_PORTS", Rule::Added, "lets the agent connect to a service on your machine's loopback"),
    ("OCSB_FORWARD_PORTS", Rule::Added, "lets the agent connect to a service on your machine's loopback"),
    ("OCSB_HIDE", Rule::Removed, "un-hides a path"),
    ("OCSB_HIDE_HOME", Rule::Removed, "un-hides a credential or profile in your home"),
    ("OCSB_HOME", Rule::Added, "shows a path of your home to the agent"),
    ("OCSB_STATE_DIR", Rule::Changed, "moves a writable directory, which may be another project's state"),
    (
        "OCSB_OPENCODE_BIN",
        Rule::Changed,
        "names a program that ocsb runs on the host (doctor) and as the agent",
    ),
    ("OCSB_WORKTREES_DIR", Rule::Changed, "moves a writable directory"),
    ("OCSB_ENV_FILE", Rule::Changed, "passes a host file's contents to the agent"),
    ("OCSB_KUBECONFIG", Rule::Changed, "passes a kubeconfig (credentials) to the agent"),
    ("OCSB_SKILL_DIRS", Rule::Added, "mounts a host directory into the sandbox"),
    ("OCSB_PLUGINS", Rule::Added, "loads a plugin file into the agent"),
    ("OCSB_NETLOCK_GROUP", Rule::Changed, "runs the agent under another network lock group"),
    ("OCSB_NETLOCK_ACQUIRE", Rule::Changed, "changes how the network lock is acquired"),
    ("OCSB_DOCKER_GW", Rule::Changed, "makes the filter listen on another address"),
    ("OCSB_RW_TOOL_FILES", Rule::Added, "lets the agent write a file that a host tool runs or obeys"),
    ("OCSB_PROVIDER_KEYS", Rule::Changed, "sends your model-provider keys to the addresses that file names"),
    ("OCSB_SPEND_LIMIT", Rule::Changed, "changes how much the agent may spend on model requests"),
    ("OCSB_SSH_KEYS", Rule::Narrows, "lets the agent sign with more of your ssh-agent's keys"),
];

/// The ways `.opencode-sandbox/sandbox.conf` widens the sandbox compared with the other layers
/// alone. Empty when the project has no settings file or it only narrows.
pub fn project_widenings(input: &LoadInput) -> Result<Vec<Widening>> {
    let texts = load::read_layers(input)?;
    if !texts.iter().any(|t| t.layer == Layer::Project) {
        return Ok(Vec::new());
    }
    let with = load::load_texts(input, &texts)?;
    let without: Vec<LayerText> = texts.into_iter().filter(|t| t.layer != Layer::Project).collect();
    // Without the project layer a later layer may fail (it may expand a variable only the project
    // set): then compare against the package defaults and the environment alone.
    let base = match load::load_texts(input, &without) {
        Ok(s) => s,
        Err(_) => load::load_texts(input, &[])?,
    };
    Ok(compare(&base, &with))
}

fn compare(base: &Settings, with: &Settings) -> Vec<Widening> {
    let mut out = Vec::new();
    for (name, rule, why) in WATCHED {
        let (Some(old), Some(new)) = (base.get(name), with.get(name)) else { continue };
        match (rule, &old.value, &new.value) {
            (Rule::Becomes(wide), Value::Scalar(o), Value::Scalar(n)) if n == wide && o != n => {
                out.push(Widening { name, change: format!("{n} (was {o})"), why });
            }
            (Rule::Changed, Value::Scalar(o), Value::Scalar(n))
                if o != n && new.origin.layer == Layer::Project =>
            {
                let was = if o.is_empty() { "unset".to_string() } else { o.clone() };
                out.push(Widening { name, change: format!("{} (was {was})", show(n)), why });
            }
            (Rule::Added, Value::Array(o), Value::Array(n)) => {
                for e in n.iter().filter(|e| !o.contains(e)) {
                    out.push(Widening { name, change: format!("+ {e}"), why });
                }
            }
            (Rule::Narrows, Value::Array(o), Value::Array(n)) if n.is_empty() && !o.is_empty() => {
                out.push(Widening { name, change: "() = all (was a list)".into(), why });
            }
            (Rule::Narrows, Value::Array(o), Value::Array(n)) if !o.is_empty() => {
                for e in n.iter().filter(|e| !o.contains(e)) {
                    out.push(Widening { name, change: format!("+ {e}"), why });
                }
            }
            (Rule::Removed, Value::Array(o), Value::Array(n)) => {
                for e in o.iter().filter(|e| !n.contains(e)) {
                    out.push(Widening { name, change: format!("- {e}"), why });
                }
            }
            _ => {}
        }
    }
    out
}

fn show(v: &str) -> String {
    if v.is_empty() { "unset".to_string() } else { v.to_string() }
}

/// The project file these widenings come from, for messages.
pub fn project_file(input: &LoadInput) -> PathBuf {
    layer_files(input)[1].1.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn input(tmp: &std::path::Path) -> LoadInput {
        let home = tmp.join("home");
        let project_dir = tmp.join("proj");
        fs::create_dir_all(project_dir.join(".opencode-sandbox/local")).unwrap();
        fs::create_dir_all(&home).unwrap();
        LoadInput { user_config_dir: home.join(".config/opencode-sandbox"), home, project_dir, env: vec![] }
    }

    fn write(input: &LoadInput, rel: &str, text: &str) {
        fs::write(input.project_dir.join(".opencode-sandbox").join(rel), text).unwrap();
    }

    #[test]
    fn no_project_file_means_nothing_to_report() {
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        assert!(project_widenings(&i).unwrap().is_empty());
    }

    #[test]
    fn narrowing_and_neutral_settings_are_not_reported() {
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        write(
            &i,
            "sandbox.conf",
            "OCSB_NAME=shop\nOCSB_WEB_PORT=4296\nOCSB_HIDE=(../secrets)\nOCSB_DOCKER=0\n",
        );
        assert_eq!(project_widenings(&i).unwrap(), vec![]);
    }

    #[test]
    fn every_widening_kind_is_reported() {
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        write(
            &i,
            "sandbox.conf",
            "OCSB_SANDBOX=0\nOCSB_TMP=shared\nOCSB_RW=(~/notes)\nOCSB_HIDE_HOME=(.gnupg)\n\
             OCSB_ENV_FILE=~/.aws/credentials\nOCSB_RW_TOOL_FILES=(.envrc)\nOCSB_CACHES=shared\n\
             OCSB_LOOPBACK_PORTS=(5432)\n",
        );
        let w = project_widenings(&i).unwrap();
        let names: Vec<&str> = w.iter().map(|w| w.name).collect();
        for n in [
            "OCSB_SANDBOX",
            "OCSB_TMP",
            "OCSB_RW",
            "OCSB_HIDE_HOME",
            "OCSB_ENV_FILE",
            "OCSB_RW_TOOL_FILES",
            "OCSB_CACHES",
            "OCSB_LOOPBACK_PORTS",
        ] {
            assert!(names.contains(&n), "{n} missing from {w:?}");
        }
        let rw = w.iter().find(|w| w.name == "OCSB_RW").unwrap();
        assert!(rw.change.starts_with("+ ") && rw.change.ends_with("/home/notes"), "{rw:?}");
        assert!(w.iter().any(|w| w.name == "OCSB_HIDE_HOME" && w.change == "- .aws"), "{w:?}");
        assert!(!w.iter().any(|w| w.name == "OCSB_HIDE_HOME" && w.change == "- .gnupg"));
        let sb = w.iter().find(|w| w.name == "OCSB_SANDBOX").unwrap();
        assert_eq!(sb.change, "0 (was 1)");
    }

    #[test]
    fn ssh_keys_widen_only_when_the_list_grows_or_empties() {
        let (a, b) = ("SHA256:".to_string() + &"A".repeat(43), "SHA256:".to_string() + &"B".repeat(42) + "A");
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        write(&i, "sandbox.conf", &format!("OCSB_SSH_KEYS=({a})\n"));
        assert_eq!(project_widenings(&i).unwrap(), vec![], "all keys narrowed to one");
        fs::create_dir_all(&i.user_config_dir).unwrap();
        fs::write(i.user_config_dir.join("sandbox.conf"), format!("OCSB_SSH_KEYS=({a})\n")).unwrap();
        write(&i, "sandbox.conf", "OCSB_SSH_KEYS=()\n");
        let w = project_widenings(&i).unwrap();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].change, "() = all (was a list)");
        write(&i, "sandbox.conf", &format!("OCSB_SSH_KEYS+=({b})\n"));
        let w = project_widenings(&i).unwrap();
        assert_eq!(w.iter().map(|w| w.change.clone()).collect::<Vec<_>>(), vec![format!("+ {b}")]);
    }

    #[test]
    fn project_additions_show_even_when_a_later_layer_appends_too() {
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        write(&i, "sandbox.conf", "OCSB_RW=(/srv/data)\n");
        write(&i, "local/sandbox.conf", "OCSB_RW+=(/srv/mine)\n");
        let w = project_widenings(&i).unwrap();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].change, "+ /srv/data");
    }

    #[test]
    fn rw_tool_files_take_only_names_of_the_rule() {
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        write(&i, "local/sandbox.conf", "OCSB_RW_TOOL_FILES=(.vscode .bashrc)\n");
        let e = crate::settings::Settings::load(&i).unwrap_err().to_string();
        assert!(
            e.contains("local/sandbox.conf:1") && e.contains("`.bashrc` is not a protected tool file"),
            "{e}"
        );
    }

    #[test]
    fn what_the_users_own_layers_widen_is_trusted() {
        let t = tempfile::tempdir().unwrap();
        let i = input(t.path());
        write(&i, "sandbox.conf", "OCSB_NAME=shop\n");
        write(&i, "local/sandbox.conf", "OCSB_TMP=shared\nOCSB_RW=(/srv/mine)\n");
        assert!(project_widenings(&i).unwrap().is_empty());
    }
}

#[cfg(test)]
mod home_tests {
    use super::*;

    /// A path of the home the project's file shows to the agent needs the user's trust; the
    /// user's own layers do not.
    #[test]
    fn ocsb_home_added_by_the_project_widens() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let project_dir = t.path().join("proj");
        std::fs::create_dir_all(project_dir.join(".opencode-sandbox/local")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let i = LoadInput {
            user_config_dir: home.join(".config/opencode-sandbox"),
            home,
            project_dir,
            env: vec![],
        };
        let dot = i.project_dir.join(".opencode-sandbox");
        std::fs::write(dot.join("local/sandbox.conf"), "OCSB_HOME+=(.config/nvim)\n").unwrap();
        assert!(project_widenings(&i).unwrap().is_empty(), "the local layer is the user's");
        std::fs::write(dot.join("sandbox.conf"), "OCSB_HOME+=(.aws)\n").unwrap();
        let w = project_widenings(&i).unwrap();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].name, w[0].change.as_str()), ("OCSB_HOME", "+ .aws"));
    }
}
