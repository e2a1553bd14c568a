//! The facts the checkout rule (`ocsb_policy::guard`) is applied to: which writable trees are
//! checkouts, where their git directories are, and which files git reads as config for them.
//!
//! Discovery reads pointer files itself, as git reads them. The git it runs (`git config
//! --list`) may be in a repository the agent made (a nested one, found by the walk before it
//! is moved aside), so it is [`git`]: it reads config and can run nothing of the repository's,
//! and is killed when it hangs.

use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use ocsb_policy::guard::{Checkout, Entry, GitDirs, Lookup};

use super::spec::SandboxSpec;

/// Variables that make git use another repository, work tree or index than the one `-C` names
/// (`git rev-parse --local-env-vars` without the `-c` config ones, which are the user's own).
pub const GIT_REPO_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_GRAFT_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
];

/// The host filesystem through `lstat` (the sandbox plan's view of it).
pub use super::plan::RealFs as HostLookup;

/// Read a small text file without following a final symlink.
pub fn read_small(p: &Path) -> Option<String> {
    read_limited(p, 64 * 1024)
}

/// Read up to `limit` bytes of a text file the agent may have written or replaced: without
/// following a final symlink, and without blocking on a planted FIFO (`O_NONBLOCK` fails its
/// open); `None` for anything but a regular file of UTF-8.
pub fn read_limited(p: &Path, limit: u64) -> Option<String> {
    String::from_utf8(read_bytes(p, limit)?).ok()
}

/// [`read_limited`], as bytes: what git reads, whatever the encoding.
pub fn read_bytes(p: &Path, limit: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut b = Vec::new();
    f.take(limit).read_to_end(&mut b).ok()?;
    Some(b)
}

/// `a/b/../c` → `a/c`, without touching the filesystem.
pub fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The directory a `.git` file (`gitdir: <path>`) points at, read exactly as git reads it (as
/// bytes, whatever their encoding): the prefix `gitdir: ` with one space, the trailing newlines
/// and carriage returns of the file cut off, the path up to its first NUL taken as it is (extra
/// spaces are part of it), relative to the file's directory, and resolved through symlinks like
/// git's `real_path` (a lexical `..` would name another place than git). `None` for what git
/// would not take either, or an inner newline.
pub fn pointer_target(dot_git: &Path) -> Option<PathBuf> {
    let bytes = read_bytes(dot_git, 64 * 1024)?;
    let target = git_path(bytes.strip_prefix(b"gitdir: ")?)?;
    let joined = dot_git.parent()?.join(target);
    Some(joined.canonicalize().unwrap_or_else(|_| lexical(&joined)))
}

/// A path as git reads it from a one-line file (`.git`, `commondir`): trailing newlines and
/// carriage returns cut off, then up to the first NUL. `None` when empty, or for an inner
/// newline (git would take it; the check does not pretend to know such a path).
fn git_path(bytes: &[u8]) -> Option<&std::ffi::OsStr> {
    use std::os::unix::ffi::OsStrExt;
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let path = bytes[..end].split(|b| *b == 0).next().unwrap_or_default();
    (!path.is_empty() && !path.contains(&b'\n')).then(|| std::ffi::OsStr::from_bytes(path))
}

/// Where the checkout at `root` keeps its git data, or `None` when it is not a repository.
pub fn git_dirs(root: &Path) -> Option<GitDirs> {
    let dot = root.join(".git");
    match HostLookup.entry(&dot) {
        // A symlinked `.git` is kept as it is: the plan refuses to protect through a link.
        Entry::Dir | Entry::Symlink => Some(GitDirs { gitdir: dot.clone(), common: dot }),
        Entry::File => {
            let gitdir = pointer_target(&dot)?;
            // Resolved through symlinks as git's `real_path` does: a lexical `..` after a link
            // the agent made would name another directory than the one git reads config from.
            let common = match read_bytes(&gitdir.join("commondir"), 64 * 1024).as_deref().and_then(git_path)
            {
                Some(c) => {
                    let joined = gitdir.join(c);
                    joined.canonicalize().unwrap_or_else(|_| lexical(&joined))
                }
                None => gitdir.clone(),
            };
            Some(GitDirs { gitdir, common })
        }
        _ => None,
    }
}

/// The main checkout of the linked worktree at `root` (`ocsb wt`, a session started in a
/// worktree), from the worktree's `.git` file and the `gitdir` file it points at, which must
/// name each other, in `<main>/.git/worktrees/` of a real `.git` directory. Neither is writable
/// from inside a sandbox (the `.git` file is replaced by the agent's own pointer there, the
/// user's git directories are read-only); the agreement guards against a pointer the user's
/// own tools left broken. `None` when `root` is not a linked worktree.
pub fn linked_main(root: &Path) -> Result<Option<PathBuf>, String> {
    let dot = root.join(".git");
    if HostLookup.entry(&dot) != Entry::File {
        return Ok(None);
    }
    let Some(gitdir) = pointer_target(&dot) else {
        return Err(format!("{} is not a valid `gitdir:` pointer", dot.display()));
    };
    let Some(wt) = gitdir.parent().filter(|p| p.file_name().is_some_and(|n| n == "worktrees")) else {
        // A submodule checkout (its git directory is in `modules/`): a project of its own.
        if gitdir.components().any(|c| c.as_os_str() == "modules") {
            return Ok(None);
        }
        return Err(format!(
            "{} points at {}, which is neither a worktree's nor a submodule's git directory",
            dot.display(),
            gitdir.display()
        ));
    };
    let common = wt.parent().unwrap_or(Path::new("/")).to_path_buf();
    let back = read_small(&gitdir.join("gitdir")).map(|s| PathBuf::from(s.trim_end_matches('\n')));
    if back.as_deref() != Some(dot.as_path()) {
        return Err(format!(
            "{} names {}, whose `gitdir` file does not name it back",
            dot.display(),
            gitdir.display()
        ));
    }
    if common.file_name().is_none_or(|n| n != ".git") || HostLookup.entry(&common) != Entry::Dir {
        return Err(format!("{} is not the .git directory of a main checkout", common.display()));
    }
    Ok(common.parent().map(Path::to_path_buf))
}

/// A git command for the user's own repository (`ocsb wt`): the user's config, nothing of the
/// environment that would point git at another repository, and no fsmonitor.
pub fn user_git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(["-c", "core.fsmonitor=false"]).stdin(Stdio::null());
    for v in GIT_REPO_ENV {
        cmd.env_remove(v);
    }
    cmd
}

/// A git command for the launcher's look, which runs git on repositories the sandbox may have
/// made or changed: it reads their config and index and must run nothing of theirs. On top of
/// [`user_git`]: no hooks (an empty hooks path), no pager, and no transport at all — a
/// repository that names a promisor remote makes git fetch missing objects while it lists a
/// sparse index, and a local remote's `uploadpack` is a command. `GIT_ALLOW_PROTOCOL` set
/// empty refuses every transport whatever the repository's `protocol.*.allow` says;
/// `GIT_NO_LAZY_FETCH` stops the fetch itself on git 2.44 and later.
pub fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--no-pager").arg("-C").arg(dir);
    cmd.args(["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]).stdin(Stdio::null());
    for v in GIT_REPO_ENV {
        cmd.env_remove(v);
    }
    cmd.env("GIT_ALLOW_PROTOCOL", "").env("GIT_NO_LAZY_FETCH", "1").env("GIT_TERMINAL_PROMPT", "0");
    cmd
}

/// How long one of the look's git runs may take.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long all the git runs of one look may take together: each is bounded, and the agent
/// can make as many repositories and worktrees as it likes.
pub const LOOK_BUDGET: Duration = Duration::from_secs(60);

/// When the git runs of the look in progress must have ended.
static LOOK_UNTIL: Mutex<Option<Instant>> = Mutex::new(None);

/// Starts a look's budget ([`LOOK_BUDGET`]) for the git runs that follow, until the returned
/// guard is dropped.
pub fn begin_look() -> LookBudget {
    *LOOK_UNTIL.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + LOOK_BUDGET);
    LookBudget
}

/// A look's budget in force; see [`begin_look`].
pub struct LookBudget;

impl Drop for LookBudget {
    fn drop(&mut self) {
        *LOOK_UNTIL.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The time a git run may take: `limit`, or less when the look's budget ends sooner; `None`
/// once it has ended (the run is not made, and what it would have checked is unchecked).
pub fn time_left(limit: Duration) -> Option<Duration> {
    match *LOOK_UNTIL.lock().unwrap_or_else(|p| p.into_inner()) {
        None => Some(limit),
        Some(until) => {
            until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()).map(|d| d.min(limit))
        }
    }
}

/// Kills a child still running after its time. *Why*: git waits for ever on a FIFO put where
/// it reads (an index, a config include), and the look must end.
pub struct Watchdog {
    done: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    /// Watches `child` for `limit`.
    pub fn start(child: Arc<Mutex<Child>>, limit: Duration) -> Watchdog {
        let (done, finished) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let late = finished.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout);
            if late {
                // Reaped only after this thread is joined: the pid is still the child's.
                let _ = child.lock().unwrap_or_else(|p| p.into_inner()).kill();
            }
            late
        });
        Watchdog { done, thread }
    }

    /// Ends the watch; whether the child had to be killed. Reap the child after this.
    pub fn finish(self) -> bool {
        let _ = self.done.send(());
        self.thread.join().unwrap_or(true)
    }
}

/// `cmd`'s stdout (at most `max` bytes) and exit status, or `None` when it cannot start, was
/// killed after [`GIT_TIMEOUT`], or the look's budget has ended ([`time_left`]).
pub fn output_within(mut cmd: Command, max: u64) -> Option<(std::process::ExitStatus, Vec<u8>)> {
    use std::io::Read;
    let limit = time_left(GIT_TIMEOUT)?;
    let mut child = cmd.stdout(Stdio::piped()).spawn().ok()?;
    let stdout = child.stdout.take()?;
    let child = Arc::new(Mutex::new(child));
    let watch = Watchdog::start(child.clone(), limit);
    let mut out = Vec::new();
    let read = stdout.take(max).read_to_end(&mut out);
    let late = watch.finish();
    let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
    if read.is_err() || out.len() as u64 >= max {
        let _ = child.kill();
    }
    let status = child.wait().ok()?;
    (!late).then_some((status, out))
}

/// What git's config says for `root`.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConfigFacts {
    /// `core.hooksPath`, absolute: every value the listing gives (not only the one git obeys
    /// now), then the value each conditional include that git did not read sets.
    pub hooks_paths: Vec<PathBuf>,
    /// Every config file read, and every include target.
    pub files: Vec<PathBuf>,
    /// The targets of `includeIf.*.path` whose condition does not hold now: no file of the
    /// listing came from them.
    pub unread_conditional: Vec<PathBuf>,
    /// The repository's own entries (scopes `local` and `worktree`) as `git config --list
    /// --show-scope --null` gives them: what the agent's repository's config is made from
    /// ([`crate::gate::agent_config`]), remembered with the rest. (No `serde(default)`: a
    /// record kept before it existed is no record, and is made again.)
    pub repository: Vec<u8>,
    /// The user's global entries (scope `global`, includes followed) in the same form: what the
    /// sandbox's generated git config is made from, remembered with the rest ([`global_config`]).
    pub global: Vec<u8>,
}

/// A listing made with `--show-scope --show-origin --null` as [`parse_config_list`] reads one
/// made without the scope, then the repository's own entries and the global ones, each as
/// `--show-scope` alone gives them.
fn split_scopes(out: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let (mut origins, mut repository, mut global) = (Vec::new(), Vec::new(), Vec::new());
    let mut fields = out.split(|b| *b == 0);
    while let (Some(scope), Some(origin), Some(kv)) = (fields.next(), fields.next(), fields.next()) {
        for f in [origin, kv] {
            origins.extend_from_slice(f);
            origins.push(0);
        }
        let to = match scope {
            b"local" | b"worktree" => &mut repository,
            b"global" => &mut global,
            _ => continue,
        };
        for f in [scope, kv] {
            to.extend_from_slice(f);
            to.push(0);
        }
    }
    (origins, repository, global)
}

/// The user's global git config as git lists it in the checkout at `root` (`git config --list
/// --show-scope --null`, includes followed, the global scope alone), from the look's remembered
/// answer ([`crate::configmemo`]): no git run while the files git read stand. `None` when `root`
/// is no repository, or git gave no listing there (a listing of a repository names at least its
/// `config`): the caller asks git itself, and says why that failed.
pub fn global_config(root: &Path, home: &Path) -> Option<Vec<u8>> {
    let git = git_dirs(root)?;
    let facts = crate::configmemo::facts(root, home, &git, || config_facts(root, home));
    (!facts.files.is_empty()).then_some(facts.global)
}

/// `core.hooksPath` and every config file (with include targets) git reads for `root`. When git
/// is missing or cannot read the config, nothing is added: the fixed names of the rule are held
/// all the same, and a host without a working git has no git to obey a hooks path or include.
///
/// A conditional include whose condition does not hold now is read on its own as well: the
/// agent can make it hold (`onbranch:` follows the branch it checks out), and a hooks path it
/// sets must be held before that, not after.
pub fn config_facts(root: &Path, home: &Path) -> ConfigFacts {
    let mut cmd = git(root);
    cmd.args(["config", "--null", "--show-scope", "--show-origin", "--list"]).stderr(Stdio::null());
    let mut facts = match output_within(cmd, MAX_CONFIG_LIST) {
        Some((status, out)) if status.success() => {
            let (origins, repository, global) = split_scopes(&out);
            ConfigFacts { repository, global, ..parse_config_list(&origins, root, home) }
        }
        _ => return ConfigFacts::default(),
    };
    let mut asked = Vec::new();
    while let Some(target) = facts.unread_conditional.pop() {
        if asked.contains(&target)
            || asked.len() >= MAX_CONDITIONAL
            || HostLookup.entry(&target) != Entry::File
        {
            continue;
        }
        asked.push(target.clone());
        let mut cmd = git(root);
        cmd.args(["config", "--null", "--show-origin", "--list", "--includes", "--file"]);
        cmd.arg(&target).stderr(Stdio::null());
        let Some((status, out)) = output_within(cmd, MAX_CONFIG_LIST) else { continue };
        if !status.success() {
            continue;
        }
        let more = parse_config_list(&out, root, home);
        for h in more.hooks_paths {
            if !facts.hooks_paths.contains(&h) {
                facts.hooks_paths.push(h);
            }
        }
        for f in more.files {
            if !facts.files.contains(&f) {
                facts.files.push(f);
            }
        }
        facts.unread_conditional.extend(more.unread_conditional);
    }
    facts
}

/// The most of `git config --list` the look reads (an include of a huge file is cut off).
const MAX_CONFIG_LIST: u64 = 64 << 20;

/// Conditional includes read on their own per checkout.
const MAX_CONDITIONAL: usize = 16;

/// Where a path in git's config leads: `~/` and `~user/` expanded as git expands them,
/// relative to `base` otherwise, `..` taken lexically. Also returns each directory that a `..`
/// of the value steps out of (one the value itself named, not `base` or above): the kernel
/// follows a link there before the `..` applies, so each must stay the directory it is for the
/// lexical answer to be the file git reads. `None` where git cannot expand it either (a user
/// with no entry).
fn expand(v: &str, base: &Path, home: &Path) -> Option<(PathBuf, Vec<PathBuf>)> {
    let (start, rest) = match v.strip_prefix('~') {
        Some(r) => {
            let (user, r) = r.split_once('/').unwrap_or((r, ""));
            let dir = if user.is_empty() {
                home.to_path_buf()
            } else {
                nix::unistd::User::from_name(user).ok()??.dir
            };
            (dir, r)
        }
        None => (base.to_path_buf(), v),
    };
    let mut out = lexical(&start);
    let (mut through, mut named) = (Vec::new(), 0usize);
    for c in Path::new(rest).components() {
        match c {
            Component::RootDir => (out, named) = (PathBuf::from("/"), 0),
            Component::ParentDir => {
                if named > 0 {
                    through.push(out.clone());
                    named -= 1;
                }
                out.pop();
            }
            Component::Normal(n) => {
                out.push(n);
                named += 1;
            }
            Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some((out, through))
}

/// How git runs a config value that names a program.
#[derive(Debug, PartialEq, Eq)]
enum Runs {
    /// Through `sh -c`, from the top of the work tree: every word of it can name a program.
    Shell,
    /// Executed directly: the whole value is the program's path.
    Exec,
}

/// Whether git runs the value of `key` as a program, and how. *Why*: the agent can write the
/// work tree, and the user's own git runs these on the host (`git status` runs
/// `core.fsmonitor`, checkouts run filters, diffs run textconv, `gc --auto` runs
/// `gc.recentObjectsHook`). Keys of unknown sections that end like a command key count too:
/// holding a file git would not run costs the agent a write, missing one costs the host.
fn runs(key: &str, value: &str) -> Option<Runs> {
    let last = key.rsplit('.').next().unwrap_or(key);
    let section = key.split('.').next().unwrap_or(key);
    let bang = value.trim_start().starts_with('!');
    let shell = match (section, last) {
        ("core", "askpass" | "gitproxy") => return Some(Runs::Exec),
        ("difftool" | "mergetool" | "man" | "browser", "path") => return Some(Runs::Exec),
        ("lfs", "path") => return Some(Runs::Exec),
        // A submodule's `path` is a directory of the tree; its `update` runs only as `!cmd`.
        ("submodule", _) => last == "update" && bang,
        ("alias", _) => bang,
        // `helper = store` runs `git credential-store`: only `!cmd` or an absolute path runs
        // a program by its path.
        ("credential", "helper") => bang || value.trim_start().starts_with('/'),
        ("sendemail", "smtpserver") => value.trim_start().starts_with('/'),
        ("pager", _) => true,
        ("instaweb", "httpd") | ("svn", "authorsprog") => true,
        _ => {
            last.ends_with("cmd")
                || last.ends_with("command")
                || last.ends_with("hook")
                || matches!(
                    last,
                    "fsmonitor"
                        | "sshcommand"
                        | "editor"
                        | "pager"
                        | "external"
                        | "textconv"
                        | "clean"
                        | "smudge"
                        | "process"
                        | "driver"
                        | "program"
                        | "helper"
                        | "uploadpack"
                        | "receivepack"
                        | "tunnel"
                        | "difffilter"
                )
        }
    };
    shell.then_some(Runs::Shell)
}

/// The paths of programs a config value has git run: for a command git runs through the
/// shell, every word that holds a `/` (`./tools/x.sh`, `sh scripts/y`, `a | ./b`), but for
/// assignments (`FOO=a/b`), options (`--out=x/y`) and words whose value the shell makes
/// (`$HOME/x`, backticks); for a program git executes directly, the whole value. Words the
/// shell would join are read as it reads them (quotes, backslashes); operators split them.
fn program_paths(key: &str, value: &str) -> Vec<String> {
    let Some(how) = runs(key, value) else { return Vec::new() };
    let value = value.trim();
    if how == Runs::Exec {
        return if value.contains('/') { vec![value.to_string()] } else { Vec::new() };
    }
    let mut words: Vec<(String, bool)> = Vec::new();
    let (mut word, mut made, mut quote) = (String::new(), false, None::<char>);
    let mut chars = value.trim_start_matches('!').chars();
    let end = |word: &mut String, made: &mut bool, words: &mut Vec<(String, bool)>| {
        if !word.is_empty() {
            words.push((std::mem::take(word), *made));
        }
        *made = false;
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => word.extend(chars.next()),
            (Some(_), c) => {
                made |= c == '$' || c == '`';
                word.push(c);
            }
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => word.extend(chars.next()),
            (None, c) if c.is_whitespace() || ";|&()<>{}".contains(c) => {
                end(&mut word, &mut made, &mut words)
            }
            (None, c) => {
                made |= c == '$' || c == '`';
                word.push(c);
            }
        }
    }
    end(&mut word, &mut made, &mut words);
    let assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
    };
    words
        .into_iter()
        .filter(|(w, made)| !made && w.contains('/') && !w.starts_with('-') && !assignment(w))
        .map(|(w, _)| w)
        .collect()
}

/// Parse `git config --null --show-origin --list` (`file:<path>` NUL `key` LF `value` NUL …).
pub fn parse_config_list(out: &[u8], root: &Path, home: &Path) -> ConfigFacts {
    let text = String::from_utf8_lossy(out);
    let mut fields = text.split('\0');
    let mut hooks: Vec<PathBuf> = Vec::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let (mut origins, mut conditional) = (Vec::new(), Vec::new());
    while let (Some(origin), Some(kv)) = (fields.next(), fields.next()) {
        let Some((file, _)) = origin.strip_prefix("file:").and_then(|f| expand(f, root, home)) else {
            continue;
        };
        if !files.contains(&file) {
            files.push(file.clone());
        }
        if !origins.contains(&file) {
            origins.push(file.clone());
        }
        let (key, value) = kv.split_once('\n').unwrap_or((kv, ""));
        let key = key.to_ascii_lowercase();
        // Every value, not the last only: a later one from a conditional include hides an
        // earlier one only while its condition holds, and the agent can make it stop holding.
        let (lead, include) = if key == "core.hookspath" {
            ((!value.is_empty()).then(|| expand(value, root, home)).flatten(), false)
        } else if key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path")) {
            (expand(value, file.parent().unwrap_or(Path::new("/")), home), true)
        } else {
            // The programs it runs are held as config files are: their names are what git runs.
            for program in program_paths(&key, value) {
                let Some((target, through)) = expand(&program, root, home) else { continue };
                for t in through.into_iter().chain([target]) {
                    if !files.contains(&t) {
                        files.push(t);
                    }
                }
            }
            (None, false)
        };
        let Some((target, through)) = lead else { continue };
        // The directories a `..` steps out of are held as the files are.
        for t in through {
            if !files.contains(&t) {
                files.push(t);
            }
        }
        if !include {
            if !hooks.contains(&target) {
                hooks.push(target);
            }
            continue;
        }
        if key.starts_with("includeif.") {
            conditional.push(target.clone());
        }
        if !files.contains(&target) {
            files.push(target);
        }
    }
    let unread_conditional = conditional.into_iter().filter(|t| !origins.contains(t)).collect();
    ConfigFacts { hooks_paths: hooks, files, unread_conditional, repository: Vec::new(), global: Vec::new() }
}

/// The checkout at `root`, with everything discovery knows about it.
pub fn checkout(root: &Path, home: &Path, project: bool) -> Checkout {
    let git = git_dirs(root);
    let facts = match &git {
        Some(g) => super::configmemo::facts(root, home, g, || config_facts(root, home)),
        None => ConfigFacts::default(),
    };
    let mut hook_targets = Vec::new();
    let hook_dirs = git.iter().map(|g| g.common.join("hooks")).chain(facts.hooks_paths.iter().cloned());
    for dir in hook_dirs {
        for n in HostLookup.names(&dir) {
            let p = dir.join(n);
            if HostLookup.entry(&p) == Entry::Symlink
                && let Ok(t) = p.canonicalize()
            {
                hook_targets.push(t);
            }
        }
    }
    Checkout {
        root: root.to_path_buf(),
        git,
        project,
        hooks_paths: facts.hooks_paths,
        config_files: facts.files,
        hook_targets,
    }
}

/// The writable checkouts of a sandbox: the project, every checkout directly in
/// the worktrees directory, every `OCSB_RW` root that is a repository, and the nested
/// repositories the launcher's walk found.
pub fn of_spec(spec: &SandboxSpec) -> Vec<Checkout> {
    of_roots(&roots_of_spec(spec), &spec.home)
}

/// The roots of [`of_spec`]'s checkouts, canonical and each once, with whether it is the
/// project. Found from the filesystem alone: no git runs.
pub fn roots_of_spec(spec: &SandboxSpec) -> Vec<(PathBuf, bool)> {
    let mut roots: Vec<(PathBuf, bool)> = vec![(canonical(&spec.project_dir), true)];
    if let Some(w) = &spec.worktrees_dir {
        for n in HostLookup.names(w) {
            let p = w.join(n);
            if HostLookup.entry(&p) == Entry::Dir && HostLookup.entry(&p.join(".git")) != Entry::Missing {
                roots.push((canonical(&p), false));
            }
        }
    }
    for r in &spec.rw {
        if HostLookup.entry(&r.join(".git")) != Entry::Missing {
            roots.push((canonical(r), false));
        }
    }
    for n in &spec.nested_repos {
        roots.push((n.clone(), false));
    }
    let mut seen = std::collections::BTreeSet::new();
    roots.retain(|(r, _)| seen.insert(r.clone()));
    roots
}

/// [`of_spec`], taking each checkout found in `known` (a look at the same home moments
/// before: the audit's) rather than asking git again. *Why*: each checkout is a `git config`
/// run, and a start looked at the same checkouts a few milliseconds earlier.
pub fn of_spec_known(spec: &SandboxSpec, known: &[Checkout]) -> Vec<Checkout> {
    roots_of_spec(spec)
        .iter()
        .map(|(r, project)| match known.iter().find(|c| c.root == *r && c.project == *project) {
            Some(c) => c.clone(),
            None => checkout(r, &spec.home, *project),
        })
        .collect()
}

/// The checkouts at `roots` (from [`roots_of_spec`]).
pub fn of_roots(roots: &[(PathBuf, bool)], home: &Path) -> Vec<Checkout> {
    roots.iter().map(|(r, project)| checkout(r, home, *project)).collect()
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_looks_git_runs_share_one_budget() {
        assert_eq!(time_left(GIT_TIMEOUT), Some(GIT_TIMEOUT), "no look: each run its own limit");
        {
            let _budget = begin_look();
            let left = time_left(Duration::from_secs(600)).unwrap();
            assert!(left <= LOOK_BUDGET && left > LOOK_BUDGET - Duration::from_secs(5), "{left:?}");
            *LOOK_UNTIL.lock().unwrap() = Some(Instant::now());
            assert_eq!(time_left(GIT_TIMEOUT), None, "spent: no more runs");
        }
        assert_eq!(time_left(GIT_TIMEOUT), Some(GIT_TIMEOUT), "the look ended");
    }

    /// A listing's scopes: the repository's own entries and the global ones apart, the
    /// system's and the command line's in neither.
    #[test]
    fn a_listing_is_split_by_scope() {
        let out = b"system\0file:/etc/gitconfig\0core.pager\nless\0\
global\0file:/h/.gitconfig\0user.name\nAda\0\
global\0file:/h/inc\0pull.rebase\ntrue\0\
local\0file:.git/config\0core.bare\nfalse\0\
command\0command line:\0core.hookspath\n/dev/null\0";
        let (origins, repository, global) = split_scopes(out);
        assert_eq!(global, b"global\0user.name\nAda\0global\0pull.rebase\ntrue\0");
        assert_eq!(repository, b"local\0core.bare\nfalse\0");
        assert_eq!(origins.split(|b| *b == 0).filter(|f| f.starts_with(b"file:")).count(), 4);
        let (entries, _) = ocsb_policy::gitconfig::parse_list(&global);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].key, "pull.rebase");
    }

    /// A `.git` file read as git reads it: bytes of any encoding, the path cut at its first NUL
    /// and the file's trailing newlines and carriage returns dropped.
    #[test]
    fn a_gitdir_pointer_is_read_as_git_reads_it() {
        use std::os::unix::ffi::OsStrExt;
        let t = tempfile::tempdir().unwrap();
        let r = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join("admin/y")).unwrap();
        let dot = r.join(".git");
        let target = r.join("admin/y");
        let cases: [(&[u8], Option<&Path>); 6] = [
            (b"gitdir: admin/y\n", Some(&target)),
            (b"gitdir: admin/y\0\xff\n", Some(&target)),
            (b"gitdir: admin/y\r\n\r\n", Some(&target)),
            (b"gitdir:admin/y\n", None),
            (b"gitdir: \n", None),
            (b"gitdir: admin/\ny\n", None),
        ];
        for (text, want) in cases {
            std::fs::write(&dot, text).unwrap();
            assert_eq!(pointer_target(&dot).as_deref(), want, "{:?}", std::ffi::OsStr::from_bytes(text));
        }
        // Not UTF-8 and not cut by a NUL: the path git takes, byte for byte.
        std::fs::write(&dot, b"gitdir: adm\xffin\n").unwrap();
        assert_eq!(pointer_target(&dot), Some(r.join(std::ffi::OsStr::from_bytes(b"adm\xffin"))));
    }

    #[test]
    fn config_list_gives_hooks_path_and_include_targets() {
        let out = b"file:/home/u/.gitconfig\0user.name\nU\0file:.git/config\0core.hookspath\n.husky/_\0\
file:.git/config\0include.path\n../tools/git.inc\0file:.git/config\0includeif.gitdir:~/w/.path\n~/w.inc\0";
        let facts = parse_config_list(out, Path::new("/p"), Path::new("/home/u"));
        assert_eq!(facts.hooks_paths, [PathBuf::from("/p/.husky/_")]);
        assert_eq!(facts.unread_conditional, [PathBuf::from("/home/u/w.inc")], "no key came from it");
        // Every hooks path, in order; a `..` after a directory the value names holds that
        // directory; `~user/` is that user's home; a user with no entry leads nowhere.
        let out =
            b"file:.git/config\0core.hookspath\ntools/hooks\0file:/p/hooks.inc\0core.hookspath\n.husky/_\0\
file:.git/config\0include.path\n../cfg/sub/../x.inc\0file:.git/config\0include.path\n~root/r.inc\0\
file:.git/config\0include.path\n~no-such-user-ocsb/n.inc\0";
        let more = parse_config_list(out, Path::new("/p"), Path::new("/home/u"));
        assert_eq!(more.hooks_paths, [PathBuf::from("/p/tools/hooks"), PathBuf::from("/p/.husky/_")]);
        // Programs a value runs by a path are held as config files; those found on `PATH`,
        // and values that run nothing, are not.
        let out =
            b"file:.git/config\0core.fsmonitor\ntools/fsmonitor\0file:.git/config\0core.fsmonitor\ntrue\0\
file:.git/config\0filter.nb.clean\n'./scripts/clean.sh' --x\0file:.git/config\0alias.t\n!../out/t.sh\0\
file:.git/config\0alias.s\nstatus -s\0file:.git/config\0diff.x.textconv\nhexdump -C\0\
file:.git/config\0user.email\na/b@c\0file:.git/config\0credential.helper\n/home/u/bin/cred\0\
file:.git/config\0submodule.lib/x.path\nlib/x\0file:.git/config\0remote.o.uploadpack\nbin/up\0\
file:.git/config\0credential.helper\nstore/x\0file:.git/config\0gc.recentobjectshook\nFOO=a/b sh t/gc.sh --o=x/y $HOME/z|./p\0\
file:.git/config\0core.askpass\ntools/my pass\0";
        let runs = parse_config_list(out, Path::new("/p/w"), Path::new("/home/u"));
        assert_eq!(
            runs.files,
            vec![
                PathBuf::from("/p/w/.git/config"),
                PathBuf::from("/p/w/tools/fsmonitor"),
                PathBuf::from("/p/w/scripts/clean.sh"),
                PathBuf::from("/p/out/t.sh"),
                PathBuf::from("/home/u/bin/cred"),
                PathBuf::from("/p/w/bin/up"),
                PathBuf::from("/p/w/t/gc.sh"),
                PathBuf::from("/p/w/p"),
                PathBuf::from("/p/w/tools/my pass"),
            ]
        );
        let words = |k: &str, v: &str| program_paths(k, v);
        assert_eq!(
            words("filter.x.clean", r#"'./my tools/x.sh' "a\"b/c" d\ e/f"#),
            ["./my tools/x.sh", "a\"b/c", "d e/f"]
        );
        assert_eq!(words("alias.f", "!f() { ./x.sh; }; f"), ["./x.sh"]);
        assert!(words("user.name", "a/b").is_empty() && words("credential.helper", "cache/x").is_empty());
        let root_home = nix::unistd::User::from_name("root").unwrap().unwrap().dir;
        assert_eq!(
            more.files,
            vec![
                PathBuf::from("/p/.git/config"),
                PathBuf::from("/p/hooks.inc"),
                PathBuf::from("/p/cfg/sub"),
                PathBuf::from("/p/cfg/x.inc"),
                root_home.join("r.inc"),
            ]
        );
        assert_eq!(
            facts.files,
            vec![
                PathBuf::from("/home/u/.gitconfig"),
                PathBuf::from("/p/.git/config"),
                PathBuf::from("/p/tools/git.inc"),
                PathBuf::from("/home/u/w.inc"),
            ]
        );
    }

    #[test]
    fn pointers_and_linked_worktrees_are_resolved_from_both_ends() {
        let t = tempfile::tempdir().unwrap();
        let main = t.path().join("p");
        let admin = main.join(".git/worktrees/feat");
        let wt = t.path().join("w/feat");
        std::fs::create_dir_all(&admin).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        let main = main.canonicalize().unwrap();
        let admin = admin.canonicalize().unwrap();
        let wt = wt.canonicalize().unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
        std::fs::write(admin.join("commondir"), "../..\n").unwrap();
        std::fs::write(admin.join("gitdir"), format!("{}\n", wt.join(".git").display())).unwrap();
        let g = git_dirs(&wt).unwrap();
        assert_eq!(g.gitdir, admin);
        assert_eq!(g.common, main.join(".git"));
        assert_eq!(linked_main(&wt).unwrap(), Some(main.clone()));
        assert_eq!(linked_main(&main).unwrap(), None);

        // The back-pointer names another place: refused.
        std::fs::write(admin.join("gitdir"), "/elsewhere/.git\n").unwrap();
        assert!(linked_main(&wt).unwrap_err().contains("does not name it back"));
        std::fs::write(admin.join("gitdir"), format!("{}\n", wt.join(".git").display())).unwrap();
        // A pointer into an agent directory: refused; into a superproject's modules/: its own project.
        std::fs::write(wt.join(".git"), "gitdir: .evil\n").unwrap();
        assert!(linked_main(&wt).unwrap_err().contains("neither"));
        std::fs::write(wt.join(".git"), "gitdir: ../../p/.git/modules/feat\n").unwrap();
        assert_eq!(linked_main(&wt).unwrap(), None);
        // Two spaces: git takes " /p/…" relative to the worktree, so must we.
        std::fs::write(wt.join(".git"), format!("gitdir:  {}\n", admin.display())).unwrap();
        assert!(linked_main(&wt).is_err(), "an extra space names another directory");
    }
}
