//! The registry's data: every tool file, one entry each.
//!
//! # What is in it
//!
//! An entry is a file or directory that a program on the user's host reads as configuration
//! that runs something, or runs itself, when the user does something ordinary in the directory
//! that is not "run this project's code":
//!
//! * **cd** ([`Trigger::Cd`]): shell hooks and prompts. direnv (`.envrc`), mise and asdf (their
//!   config and `.tool-versions`, whose `path:` versions name programs to run), rustup (a
//!   toolchain file's `path` is a toolchain to run; a prompt that shows the Rust version calls
//!   `rustc`), proto, shadowenv, autoenv and zsh-autoenv.
//! * **open** ([`Trigger::Open`]): editors, IDEs and coding agents. VS Code (and its forks) and
//!   its workspace files, dev containers (`initializeCommand` runs on the host), JetBrains,
//!   helix, zed, vim/neovim `exrc` and lazy.nvim's local spec, emacs directory locals,
//!   rust-analyzer's project config, and the project settings of Claude Code, Cursor and Gemini
//!   CLI (hooks and MCP servers they start by command).
//! * **git** ([`Trigger::Git`]): what git or a hook manager obeys on `git commit`, `checkout`,
//!   `submodule update`: `.gitmodules`, git-lfs's `.lfsconfig`, pre-commit and prek, lefthook
//!   (configs and script directories), overcommit, lazygit's per-repository config.
//! * **command** ([`Trigger::Command`]): a tool's config read by *any* of its commands, even
//!   `--version`: cargo, npm, yarn (its `yarnPath` and the release it names), and the REPLs and
//!   debuggers that load an rc file from the current directory (R, irb, pry, ghci, gdb, lldb).
//!
//! Tools that ask before obeying (direnv's `allow`, mise's `trust`, VS Code's workspace trust,
//! helix's and neovim's trust prompts, gdb's auto-load safe path, overcommit's signatures) are
//! listed all the same: the prompt is the lure. The user allowed *their* file; one the agent
//! wrote or changed asks again, and an ordinary user answers yes to their own project.
//!
//! # What is left out, and why
//!
//! * Files that only name a version (`.nvmrc`, `.node-version`, `.python-version`,
//!   `.ruby-version`, `.java-version`, `.sdkmanrc`, `go.mod`'s `toolchain`, `package.json`'s
//!   `packageManager`): the version manager installs that release from its own source, checked
//!   as it checks every release, and runs nothing of the project's.
//! * The project's own code and build files (`Makefile`, `build.rs`, `package.json` scripts,
//!   Gradle and Maven builds, `Taskfile.yml`, mise's file tasks, `.pnpmfile.cjs`): running them
//!   is what the user does knowingly (`make`, `cargo build`, `npm install`, or an IDE that
//!   builds on open), and the agent writes them by design. The same goes for the environments
//!   the project builds (`node_modules`, `.venv`).
//! * Data read only as data (`.editorconfig`, `.gitignore`, `.gitattributes`, whose filter and
//!   diff drivers only the user's own git config can define) and instructions for an agent
//!   (`AGENTS.md`, `CLAUDE.md`): no program runs from them.
//! * `.env`: direnv loads it only when the user's direnv config says `load_dotenv`, which the
//!   enforcement reads (see [`super::envrc::loads_dotenv`]); the files an `.envrc` loads are
//!   found by [`super::envrc::loads`]. Listing every `.env` here would move aside the one a
//!   project's own tests write.
//! * Files read only from the home directory (`~/.npmrc`, `~/.gemrc`, starship's config):
//!   the home is not a writable tree of the sandbox.
//! * `.git` and git hooks: the checkout rule ([`crate::guard`]) and the import gate handle
//!   them.

use super::{ToolFile, Trigger};

/// An entry matched in any directory: its name is its entry.
const fn any(
    name: &'static str,
    dir: bool,
    tool: &'static str,
    trigger: Trigger,
    why: &'static str,
) -> ToolFile {
    ToolFile { name, entry: name, parent: None, dir, tool, trigger, why }
}

/// An entry matched only in a directory named `parent`: `name` is `parent/entry`.
const fn inside(
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

const DIRENV: &str = "runs it as a bash script (once you `direnv allow` it)";
const RUSTUP: &str =
    "the `rustc`/`cargo` a prompt calls installs the toolchain it names, or runs one at a path it gives";
const MISE: &str =
    "mise's shell hook runs its env scripts, hooks and `path:` tools (once you `mise trust` it)";
const LEFTHOOK: &str = "commands the lefthook hooks run on `git commit`";
const LEFTHOOK_LOCAL: &str = "commands the lefthook hooks run on `git commit` (usually git-ignored)";
const CARGO: &str = "any cargo command reads it: rustc wrappers, runners and aliases it names run as you";
const VIM: &str = "vim/neovim with `exrc` run it when started there (neovim asks to trust it)";

/// Every tool file; see the module's documentation for what is in and what is left out.
/// One line per entry, as a table reads.
#[rustfmt::skip]
pub const REGISTRY: &[ToolFile] = &[
    // cd: shell hooks and prompts.
    any(".envrc", false, "direnv", Cd, DIRENV),
    any("rust-toolchain", false, "rustup", Cd, RUSTUP),
    any("rust-toolchain.toml", false, "rustup", Cd, RUSTUP),
    any(".tool-versions", false, "asdf, mise", Cd, "the shims a prompt runs use the versions it names; a `path:` version is a program in the tree"),
    any("mise.toml", false, "mise", Cd, MISE),
    any(".mise.toml", false, "mise", Cd, MISE),
    any("mise.*.toml", false, "mise", Cd, MISE),
    any(".mise.*.toml", false, "mise", Cd, MISE),
    any(".mise", true, "mise", Cd, MISE),
    inside("mise/config.toml", "mise", "config.toml", false, "mise", Cd, MISE),
    inside("mise/config.*.toml", "mise", "config.*.toml", false, "mise", Cd, MISE),
    inside("mise/conf.d", "mise", "conf.d", true, "mise", Cd, MISE),
    inside(".config/mise.toml", ".config", "mise.toml", false, "mise", Cd, MISE),
    inside(".config/mise.*.toml", ".config", "mise.*.toml", false, "mise", Cd, MISE),
    inside(".config/mise", ".config", "mise", true, "mise", Cd, MISE),
    any(".miserc.toml", false, "mise", Cd, "chooses which mise config files load"),
    inside(".config/miserc.toml", ".config", "miserc.toml", false, "mise", Cd, "chooses which mise config files load"),
    any(".rtx.toml", false, "mise", Cd, MISE),
    any(".rtx.*.toml", false, "mise", Cd, MISE),
    any(".prototools", false, "proto", Cd, "proto's shell hook installs the tools and plugins it names"),
    any(".shadowenv.d", true, "shadowenv", Cd, "shadowenv's shell hook runs its programs (once you `shadowenv trust` it)"),
    any(".autoenv.zsh", false, "zsh-autoenv", Cd, "zsh sources it (once you allow it)"),
    any(".autoenv_leave.zsh", false, "zsh-autoenv", Cd, "zsh sources it when you leave the directory (once you allow it)"),
    any(".env.leave", false, "autoenv", Cd, "your shell sources it when you leave the directory (once you allow it)"),
    // open: editors, IDEs, coding agents.
    any(".vscode", true, "VS Code", Open, "tasks that run on folder open, launch configurations, interpreter, tool and MCP server commands"),
    any("*.code-workspace", false, "VS Code", Open, "a workspace file: its tasks and settings run as the folder's do"),
    any(".devcontainer", true, "dev containers", Open, "initializeCommand runs on the host"),
    any(".devcontainer.json", false, "dev containers", Open, "initializeCommand runs on the host"),
    any(".idea", true, "JetBrains IDEs", Open, "run configurations, startup tasks and tool paths"),
    any(".helix", true, "helix", Open, "language servers and formatters it starts, by command (once you trust the workspace)"),
    any(".zed", true, "zed", Open, "language servers, tasks and formatters it runs, by command"),
    any(".nvim.lua", false, "neovim", Open, VIM),
    any(".nvimrc", false, "neovim", Open, VIM),
    any(".exrc", false, "vim, neovim", Open, VIM),
    any(".vimrc", false, "vim", Open, VIM),
    any(".gvimrc", false, "vim", Open, VIM),
    any(".lazy.lua", false, "lazy.nvim", Open, "a local plugin spec neovim runs when started there (once you trust it)"),
    any(".dir-locals.el", false, "emacs", Open, "directory-local variables; an `eval` one runs Lisp (once you accept it)"),
    any(".dir-locals-2.el", false, "emacs", Open, "directory-local variables; an `eval` one runs Lisp (once you accept it)"),
    any("rust-analyzer.toml", false, "rust-analyzer", Open, "its check and build-script override commands run when the editor opens the project"),
    any(".claude", true, "Claude Code", Open, "project settings: hooks and MCP servers it runs as commands"),
    any(".mcp.json", false, "Claude Code", Open, "MCP servers started by command (once you approve them)"),
    any(".cursor", true, "Cursor", Open, "MCP servers started by command, and rules the agent obeys"),
    any(".gemini", true, "Gemini CLI", Open, "project settings: MCP servers and tool discovery commands it runs"),
    // git: git itself and the hook managers.
    any(".gitmodules", false, "git", Git, "submodule URLs and paths that `git submodule update` and clones follow"),
    any(".lfsconfig", false, "git-lfs", Git, "where git-lfs fetches and pushes large files, with your credentials for that host"),
    any(".pre-commit-config.yaml", false, "pre-commit", Git, "commands the pre-commit hook runs on `git commit`"),
    any(".pre-commit-config.yml", false, "prek", Git, "commands the prek hook runs on `git commit`"),
    any("prek.toml", false, "prek", Git, "commands the prek hook runs on `git commit`"),
    any("lefthook.yml", false, "lefthook", Git, LEFTHOOK),
    any(".lefthook.yml", false, "lefthook", Git, LEFTHOOK),
    any("lefthook.yaml", false, "lefthook", Git, LEFTHOOK),
    any("lefthook-local.yml", false, "lefthook", Git, LEFTHOOK_LOCAL),
    any(".lefthook-local.yml", false, "lefthook", Git, LEFTHOOK_LOCAL),
    any("lefthook.*", false, "lefthook", Git, LEFTHOOK),
    any(".lefthook.*", false, "lefthook", Git, LEFTHOOK),
    any("lefthook-local.*", false, "lefthook", Git, LEFTHOOK_LOCAL),
    any(".lefthook-local.*", false, "lefthook", Git, LEFTHOOK_LOCAL),
    any(".lefthook", true, "lefthook", Git, "scripts the lefthook hooks run on `git commit`"),
    any(".lefthook-local", true, "lefthook", Git, "scripts the lefthook hooks run on `git commit` (usually git-ignored)"),
    any(".overcommit.yml", false, "overcommit", Git, "commands the overcommit hooks run on `git commit` (once you sign it)"),
    any(".lazygit.yml", false, "lazygit", Git, "lazygit's settings for the repositories below it: pagers and commands it runs"),
    // command: any command of the tool, even a read-only one.
    inside(".cargo/config.toml", ".cargo", "config.toml", false, "cargo", Command, CARGO),
    inside(".cargo/config", ".cargo", "config", false, "cargo", Command, CARGO),
    any(".npmrc", false, "npm, pnpm", Command, "any npm command reads it: node-options, script-shell and the git it names run as you"),
    any(".yarnrc.yml", false, "yarn", Command, "any yarn command, even `yarn --version`, runs the yarnPath script and plugins it names"),
    any(".yarnrc", false, "yarn", Command, "any yarn 1 command runs the yarn-path script it names"),
    inside(".yarn/releases", ".yarn", "releases", true, "yarn", Command, "the yarn release a yarnPath names: any yarn command runs it"),
    inside(".yarn/plugins", ".yarn", "plugins", true, "yarn", Command, "yarn plugins: any yarn command loads them"),
    any(".Rprofile", false, "R", Command, "any R session started there (RStudio's too) runs it"),
    any(".Renviron", false, "R", Command, "any R session started there reads it: R_PROFILE_USER names a script to run"),
    any(".irbrc", false, "irb", Command, "irb (and `rails console`) started there runs it"),
    any("_irbrc", false, "irb", Command, "irb (and `rails console`) started there runs it"),
    any(".pryrc", false, "pry", Command, "pry started there runs it"),
    any(".ghci", false, "ghci", Command, "ghci started there runs its commands, shell escapes included"),
    any(".gdbinit", false, "gdb", Command, "gdb started there runs it (it tells you how to allow it)"),
    any(".lldbinit", false, "lldb", Command, "lldb started there runs it (it tells you how to allow it)"),
];
