//! `ocsb init`: add `.opencode-sandbox/` and `.cc-safety-net/policy.json` to a repository.
//!
//! Idempotent and never destructive: every file is created with `O_CREAT|O_EXCL`, so a file (or
//! a symlink) that is already there is kept as it is, without a check-then-write race.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::project::{self, PROJECT_CONF_DIR};

struct Template {
    path: &'static str,
    body: fn() -> String,
    mode: u32,
}

const TEMPLATES: &[Template] = &[
    // Generated from the settings schema, so every setting is listed with its real default.
    Template { path: "sandbox.conf", body: ocsb_policy::settings::print::template, mode: 0o644 },
    Template { path: "egress.conf", body: || include_str!("../templates/egress.conf").into(), mode: 0o644 },
    Template { path: ".gitignore", body: || include_str!("../templates/gitignore").into(), mode: 0o644 },
    Template {
        path: "hooks/wt-post-add.example",
        body: || include_str!("../templates/wt-post-add.example").into(),
        mode: 0o755,
    },
    Template {
        path: "hooks/wt-pre-rm.example",
        body: || include_str!("../templates/wt-pre-rm.example").into(),
        mode: 0o755,
    },
];

const SAFETY_NET_POLICY: &str = include_str!("../templates/policy.json");

/// What `init` did with one file.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Created(PathBuf),
    Kept(PathBuf),
}

/// Create the project files under the git work tree that contains `start`.
pub fn run(start: &Path) -> Result<Vec<Outcome>> {
    let root = project::git_toplevel(start).ok_or_else(|| {
        Error::failed(
            format!("{} is not inside a git repository", start.display()),
            "run `git init` first, or cd into your repository (ocsb init adds files meant to be committed)",
        )
    })?;
    let conf = root.join(PROJECT_CONF_DIR);
    for dir in [conf.clone(), conf.join("hooks"), conf.join("local"), root.join(".cc-safety-net")] {
        make_dir(&dir)?;
    }
    let mut outcomes = Vec::new();
    for t in TEMPLATES {
        outcomes.push(create_file(&conf.join(t.path), &(t.body)(), t.mode)?);
    }
    outcomes.push(create_file(&root.join(".cc-safety-net/policy.json"), SAFETY_NET_POLICY, 0o644)?);
    Ok(outcomes)
}

fn make_dir(dir: &Path) -> Result<()> {
    match fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(Error::failed(
            format!("{} exists and is not a directory", dir.display()),
            "move that file away, then run `ocsb init` again",
        )),
        Err(e) => Err(Error::io("create directory", dir, e)),
    }
}

fn create_file(path: &Path, body: &str, mode: u32) -> Result<Outcome> {
    match OpenOptions::new().write(true).create_new(true).mode(mode).open(path) {
        Ok(mut f) => {
            f.write_all(body.as_bytes()).map_err(|e| Error::io("write", path, e))?;
            Ok(Outcome::Created(path.to_path_buf()))
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(Outcome::Kept(path.to_path_buf())),
        Err(e) => Err(Error::io("create", path, e)),
    }
}

/// Print what happened, relative to the repository, and the next steps.
pub fn report(outcomes: &[Outcome], root: &Path) {
    for o in outcomes {
        let (word, p) = match o {
            Outcome::Created(p) => ("created", p),
            Outcome::Kept(p) => ("kept   ", p),
        };
        println!("{word} {}", p.strip_prefix(root).unwrap_or(p).display());
    }
    println!("{}", next_steps(&keys_file_shown()));
}

/// The steps after `init`, up to a working agent: the rules, a model, the run, and how the user
/// reaches a dev server the agent starts.
fn next_steps(keys_file: &str) -> String {
    format!(
        "\nNext:\n\
         \x20 1. allow the hosts your project needs in .opencode-sandbox/egress.conf\n\
         \x20 2. a model: one line `anthropic <your key>` (or openai, openrouter) in {keys_file};\n\
         \x20    the key stays outside the sandbox (another provider: `<id> <key> <base URL>`, and the\n\
         \x20    provider in the project's opencode.json)\n\
         \x20 3. commit .opencode-sandbox/ and .cc-safety-net/, then `ocsb run`\n\
         A dev server the agent starts (say on port 3000) is published at http://127.0.0.1:3000/\n\
         while it listens; `ocsb run` prints each one (OCSB_PUBLISH limits them)."
    )
}

/// The default key file the broker reads (`<XDG_CONFIG_HOME>/opencode-sandbox/provider-keys`),
/// with `~` for the home directory.
fn keys_file_shown() -> String {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    let Some(file) =
        config.map(|c| c.join("opencode-sandbox").join(ocsb_policy::settings::PROVIDER_KEYS_FILE))
    else {
        return "~/.config/opencode-sandbox/provider-keys".into();
    };
    match home.as_deref().and_then(|h| file.strip_prefix(h).ok()) {
        Some(rel) => format!("~/{}", rel.display()),
        None => file.display().to_string(),
    }
}
