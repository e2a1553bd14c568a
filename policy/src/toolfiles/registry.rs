//! The registry's data: every tool file, one entry each.

use super::{ToolFile, Trigger};

const fn at_any(
    name: &'static str,
    dir: bool,
    tool: &'static str,
    trigger: Trigger,
    why: &'static str,
) -> ToolFile {
    ToolFile { name, entry: name, parent: None, dir, tool, trigger, why }
}

const fn under(
    name: &'static str,
    parent: &'static str,
    entry: &'static str,
    dir: bool,
    tool: &'static str,
    trigger: Trigger,
    why: &'static str,
) -> ToolFile {
    ToolFile { name, entry, parent: Some(parent), dir, tool, trigger, why }
}

use Trigger::{Cd, Command, Git, Open};

/// Every tool file; see the module's documentation for what is in and what is left out.
pub const REGISTRY: &[ToolFile] = &[
    at_any(".envrc", false, "direnv", Cd, "runs it as a bash script when you cd into the directory"),
    at_any("rust-toolchain", false, "rustup", Cd, "a prompt's `cargo`/`rustc` call installs and runs the toolchain it names, or one at a path it gives"),
    at_any("rust-toolchain.toml", false, "rustup", Cd, "a prompt's `cargo`/`rustc` call installs and runs the toolchain it names, or one at a path it gives"),
    at_any(".tool-versions", false, "asdf, mise", Cd, "the shims a prompt runs take the tool versions and plugins it names"),
    at_any("mise.toml", false, "mise", Cd, "mise's shell hook sets its env and runs its hooks when you cd into the directory"),
    at_any(".mise.toml", false, "mise", Cd, "mise's shell hook sets its env and runs its hooks when you cd into the directory"),
    under(".config/mise.toml", ".config", "mise.toml", false, "mise", Cd, "mise's shell hook sets its env and runs its hooks when you cd into the directory"),
    at_any(".vscode", true, "VS Code", Open, "tasks that run on folder open, launch configurations, interpreter and tool paths"),
    at_any(".idea", true, "JetBrains IDEs", Open, "run configurations, startup tasks and tool paths"),
    at_any(".helix", true, "helix", Open, "language servers and formatters it starts, by command"),
    at_any(".zed", true, "zed", Open, "language servers, tasks and formatters it runs, by command"),
    at_any(".devcontainer", true, "dev containers", Open, "initializeCommand runs on the host"),
    at_any(".devcontainer.json", false, "dev containers", Open, "initializeCommand runs on the host"),
    at_any(".gitmodules", false, "git", Git, "submodule URLs and paths that `git submodule update` and clones follow"),
    at_any(".pre-commit-config.yaml", false, "pre-commit", Git, "commands the pre-commit hook runs on `git commit`"),
    at_any("lefthook.yml", false, "lefthook", Git, "commands the lefthook hooks run on `git commit`"),
    at_any(".lefthook.yml", false, "lefthook", Git, "commands the lefthook hooks run on `git commit`"),
    at_any("lefthook.yaml", false, "lefthook", Git, "commands the lefthook hooks run on `git commit`"),
    at_any("lefthook-local.yml", false, "lefthook", Git, "commands the lefthook hooks run on `git commit` (usually git-ignored)"),
    at_any(".lefthook-local.yml", false, "lefthook", Git, "commands the lefthook hooks run on `git commit` (usually git-ignored)"),
    under(".cargo/config.toml", ".cargo", "config.toml", false, "cargo", Command, "any cargo command reads it: build.rustc-wrapper, target runners and aliases run programs it names"),
    under(".cargo/config", ".cargo", "config", false, "cargo", Command, "any cargo command reads it: build.rustc-wrapper, target runners and aliases run programs it names"),
    at_any(".npmrc", false, "npm", Command, "any npm command reads it: node-options and script-shell run what it says"),
    at_any(".yarnrc.yml", false, "yarn", Command, "any yarn command, even `yarn --version`, runs the yarnPath script it names"),
    at_any(".yarnrc", false, "yarn", Command, "any yarn 1 command runs the yarn-path script it names"),
];
