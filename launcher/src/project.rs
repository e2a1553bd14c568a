//! Where the project is, and the inputs every command reads from it: the settings layers and the
//! egress rule layers, loaded exactly as `run` loads them.

use std::path::{Path, PathBuf};

use ocsb_policy::egress::{self, Policy};
use ocsb_policy::settings::{self, LoadInput, Settings, Widening};

use crate::error::{Error, Result};
use crate::install::Installation;

/// `canonicalize` of many paths that share their directories, each directory resolved once
/// (the hidden names are a hundred paths of the home; resolving each whole took a system call
/// per component of each). The result is the same: the real path, or the path as written when
/// it does not exist.
#[derive(Default)]
struct ResolvedDirs(std::collections::HashMap<PathBuf, Option<PathBuf>>);

impl ResolvedDirs {
    fn canonical(&mut self, p: PathBuf) -> PathBuf {
        let whole = |p: PathBuf| p.canonicalize().unwrap_or(p);
        let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else { return whole(p) };
        // `.aws/` and `.aws/.` name what `.aws` leads to: `lstat` follows a link there.
        let bytes = p.as_os_str().as_encoded_bytes();
        if !p.is_absolute() || bytes.ends_with(b"/") || bytes.ends_with(b"/.") {
            return whole(p);
        }
        match p.symlink_metadata() {
            Err(_) => p,
            // Its target is resolved as a whole, as `canonicalize` would.
            Ok(m) if m.file_type().is_symlink() => whole(p),
            Ok(_) => {
                let real = self.0.entry(dir.to_path_buf()).or_insert_with(|| dir.canonicalize().ok());
                match real {
                    Some(d) => d.join(name),
                    None => p,
                }
            }
        }
    }
}

/// The per-project directory inside a repository.
pub const PROJECT_CONF_DIR: &str = ".opencode-sandbox";

/// The user's home, from `$HOME` (the launcher never runs as another user, so no passwd lookup).
pub fn home_dir() -> Result<PathBuf> {
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() && Path::new(&h).is_absolute() => Ok(PathBuf::from(h)),
        _ => Err(Error::failed(
            "HOME is not set to an absolute path",
            "run ocsb from a normal login session, or export HOME=/home/<you>",
        )),
    }
}

/// `~/.config/opencode-sandbox`, honouring `XDG_CONFIG_HOME` when it is absolute.
pub fn user_config_dir(home: &Path) -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    base.join("opencode-sandbox")
}

/// The git work tree that contains `dir`, found by walking up to a `.git` entry (a directory, or
/// a file as in worktrees and submodules). No `git` process is run.
pub fn git_toplevel(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| d.join(".git").exists()).map(Path::to_path_buf)
}

/// The project directory for commands that work on a project: `-C DIR` if given, else the
/// enclosing git work tree, else the nearest ancestor holding `.opencode-sandbox/`, else the
/// current directory. Inside a work tree the project is always its top: the agent can create a
/// `.opencode-sandbox/` in any subdirectory, and one there must not become a project whose
/// `local/` layer (trusted, never committed) it wrote.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    let cwd = std::env::current_dir().map_err(|e| Error::io("read the current directory", ".", e))?;
    let start = match explicit {
        Some(p) => {
            let p = cwd.join(p);
            return p.canonicalize().map_err(|e| Error::io("open the project directory", p, e));
        }
        None => cwd,
    };
    if let Some(top) = git_toplevel(&start) {
        return Ok(top);
    }
    Ok(start.ancestors().find(|d| d.join(PROJECT_CONF_DIR).is_dir()).unwrap_or(&start).to_path_buf())
}

/// For a directory inside a linked worktree: the same directory in the main checkout, whose
/// settings, rules, hooks and trust apply. The main checkout is found from the worktree's
/// `.git` file and the back-pointer in the main `.git`, which no sandbox can write (see
/// `sandbox::checkouts::linked_main`), never from `git worktree list`.
pub fn main_of_worktree(dir: &Path) -> Result<Option<PathBuf>> {
    let Some(top) = git_toplevel(dir) else { return Ok(None) };
    let main = ocsb_sandbox::checkouts::linked_main(&top).map_err(|why| {
        Error::failed(
            format!("refusing to use {} as a worktree: {why}", top.display()),
            "a sandbox may have rewritten its git pointers: run `ocsb audit` in the main checkout, \
             and `git worktree repair` there once you have checked the files",
        )
    })?;
    Ok(main.map(|m| match dir.strip_prefix(&top) {
        Ok(rel) if !rel.as_os_str().is_empty() => m.join(rel),
        _ => m,
    }))
}

/// The process environment as UTF-8 pairs. Variables outside the settings namespace that are
/// not UTF-8 are skipped (they cannot be settings); an `OCSB_*` one is an error, because
/// dropping it would silently ignore what the user asked for.
fn environment() -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (k, v) in std::env::vars_os() {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => out.push((k, v)),
            (Ok(k), Err(_)) if k.starts_with("OCSB_") => {
                return Err(Error::failed(
                    format!("environment variable {k} is not valid UTF-8"),
                    format!("unset {k} or give it a UTF-8 value"),
                ));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// One line per widening: `OCSB_RW + /srv/data  (makes a host path writable for the agent)`.
pub fn render_widenings(w: &[Widening]) -> String {
    w.iter().map(|w| format!("{} {}  ({})\n", w.name, w.change, w.why)).collect()
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect::<String>().trim_end().to_string()
}

/// Everything a command needs to know about the project it runs in.
pub struct Project {
    /// Where the settings, rules, hooks and trust come from: the project in the main checkout.
    pub dir: PathBuf,
    /// Where the session works (the sandbox's project directory): `dir`, or the same directory
    /// in the linked worktree `ocsb` was started in.
    pub checkout: PathBuf,
    pub home: PathBuf,
    pub user_config_dir: PathBuf,
    pub settings: Settings,
    input: LoadInput,
}

impl Project {
    /// Locate the project and load its five settings layers.
    pub fn load(explicit: Option<&Path>) -> Result<Project> {
        let checkout = locate(explicit)?;
        let dir = main_of_worktree(&checkout)?.unwrap_or_else(|| checkout.clone());
        let home = home_dir()?;
        let user_config_dir = user_config_dir(&home);
        let input = LoadInput {
            home: home.clone(),
            project_dir: dir.clone(),
            user_config_dir: user_config_dir.clone(),
            env: environment()?,
        };
        let settings = Settings::load(&input)?;
        Ok(Project { dir, checkout, home, user_config_dir, settings, input })
    }

    /// How the committed `.opencode-sandbox/sandbox.conf` widens the sandbox (see
    /// `ocsb_policy::settings::project_widenings` for why this is checked).
    pub fn widenings(&self) -> Result<Vec<Widening>> {
        Ok(settings::project_widenings(&self.input)?)
    }

    /// Where the widenings the user accepted for this project are recorded:
    /// `<state dir>.trusted-settings`, beside the state directory rather than in it, because the
    /// state directory is writable inside the sandbox and the agent must not accept for you.
    fn trust_file(&self) -> PathBuf {
        let state = self.settings.state_dir();
        let name = state.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        let mut file = name;
        file.push(".trusted-settings");
        state.with_file_name(file)
    }

    /// Refuse to start when the project layer widens the sandbox in a way the user has not
    /// accepted with `ocsb config --trust`. A cloned repository must not be able to turn the
    /// sandbox off, or un-hide a credential, without the user seeing it.
    pub fn require_trusted(&self) -> Result<()> {
        let w = self.widenings()?;
        if w.is_empty() {
            return Ok(());
        }
        let wanted = render_widenings(&w);
        let accepted = std::fs::read_to_string(self.trust_file()).unwrap_or_default();
        if accepted == wanted {
            return Ok(());
        }
        Err(Error::failed(
            format!(
                "{} widens the sandbox, and you have not accepted that for this project:\n{}",
                settings::project_file(&self.input).display(),
                indent(&wanted)
            ),
            "review those lines; if they are what you want, run `ocsb config --trust` (or move them \
             to .opencode-sandbox/local/sandbox.conf, which only you write)",
        ))
    }

    /// Record the current widenings as accepted (`ocsb config --trust`). Returns them.
    pub fn trust(&self) -> Result<Vec<Widening>> {
        let w = self.widenings()?;
        let path = self.trust_file();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        std::fs::write(&path, render_widenings(&w)).map_err(|e| Error::io("write", &path, e))?;
        Ok(w)
    }

    /// Refuse writable roots that would hand the agent far more than a project: `/`, the home
    /// directory or one of its ancestors, a directory that holds the state directory (the
    /// launcher's private files and every other project's state) or a hidden path of the home
    /// (`~/.ssh`, `OCSB_HIDE_HOME`). Outside a repository the current directory becomes the
    /// project, so `cd ~ && ocsb exec` would otherwise make the whole home writable. Nor a
    /// directory that holds ocsb's own programs (`ocsb`'s `bin`, `libexec/ocsb`): the user runs
    /// `ocsb` next on the host, and the launcher starts the filter from there (`OCSB_RW_HOME=.cargo`
    /// holds `~/.cargo/bin/ocsb` after a `cargo install`).
    pub fn check_writable_roots(&self) -> Result<()> {
        self.check_writable_roots_against(&Installation::current()?.program_dirs())
    }

    /// [`Project::check_writable_roots`] for an installation whose program directories are
    /// `programs`.
    fn check_writable_roots_against(&self, programs: &[PathBuf]) -> Result<()> {
        let s = &self.settings;
        // Both sides through symlinks (`/home -> var/home`), or a spelling would slip past.
        let canon = |p: PathBuf| p.canonicalize().unwrap_or(p);
        let home = canon(self.home.clone());
        let state_root = canon(self.home.join(".local/share/opencode-sandbox"));
        let state = canon(s.state_dir());
        // Your own settings layer, and the other configuration the host runs from (a dotfiles
        // repository at ~/.config must not become the project).
        let config = canon(self.user_config_dir.clone());
        let programs: Vec<PathBuf> = programs.iter().cloned().map(canon).collect();
        // A hundred names, nearly all in the home: each directory resolved once.
        let mut dirs = ResolvedDirs::default();
        let mut hidden: Vec<PathBuf> = s.hide_home().into_iter().map(|p| dirs.canonical(p)).collect();
        hidden.push(canon(self.home.join(".ssh")));
        let mut roots = vec![(self.checkout.clone(), "the project directory")];
        roots.extend(s.rw().into_iter().map(|p| (p, "an OCSB_RW entry")));
        roots.push((s.worktrees_dir(), "OCSB_WORKTREES_DIR"));
        // `OCSB_RW_HOME` entries may hold hidden paths (hidden wins over writable there, as
        // `.cache/huggingface/token` in `.cache`), but never the home, the state or your settings.
        roots.extend(s.rw_home().into_iter().map(|p| (p, "an OCSB_RW_HOME entry")));
        if s.tmp() == settings::TmpMode::Shared {
            roots.push((PathBuf::from("/tmp"), "OCSB_TMP=shared (the host's /tmp)"));
        }
        // The state directory is writable too: checked for ocsb's programs only (the load
        // refuses `/` and the home for it; containing itself is what it is for).
        roots.push((s.state_dir(), "OCSB_STATE_DIR"));
        for (root, what) in roots {
            let root = root.canonicalize().unwrap_or(root);
            let state_dir = what == "OCSB_STATE_DIR";
            let why = if state_dir {
                None
            } else if root == Path::new("/") {
                Some("it is the root directory".to_string())
            } else if home.starts_with(&root) {
                Some(if root == home {
                    "it is your home directory".into()
                } else {
                    "it contains your home directory".into()
                })
            } else if state.starts_with(&root) || state_root.starts_with(&root) {
                Some("it contains ocsb's state directory".into())
            } else if config.starts_with(&root) {
                Some(format!("it contains your own settings ({})", config.display()))
            } else {
                None
            };
            // The plan checks the same rule again on the paths it mounts.
            let program = ocsb_sandbox::plan::exposes_program(&root, root.is_dir(), &programs);
            if let (None, Some(dir)) = (&why, program) {
                return Err(Error::failed(
                    format!(
                        "refusing to make {} writable for the agent as {what}: {} ocsb's own programs ({}), \
                         which run on the host",
                        root.display(),
                        if dir.starts_with(&root) { "it contains" } else { "it is inside" },
                        dir.display()
                    ),
                    "give a narrower path (the toolchain's cache, e.g. `.cargo/registry`), or install ocsb where \
                     the sandbox cannot write (`sudo make install` puts it in /usr/local)",
                ));
            }
            let why = why.or_else(|| {
                (what != "an OCSB_RW_HOME entry" && !state_dir)
                    .then(|| hidden.iter().find(|h| h.starts_with(&root)))
                    .flatten()
                    .map(|h| format!("it contains the hidden path {}", h.display()))
            });
            if let Some(why) = why {
                return Err(Error::failed(
                    format!("refusing to make {} writable for the agent as {what}: {why}", root.display()),
                    "cd into a repository (or a directory where you ran `ocsb init`) and start ocsb there, \
                     or give a narrower path",
                ));
            }
        }
        Ok(())
    }

    /// The four egress rule layers, compiled. Fails on the first bad line, naming it.
    pub fn egress_policy(&self) -> Result<Policy> {
        let layers = egress::load_layers(&self.user_config_dir, &self.dir)?;
        Ok(Policy::compile(&layers)?)
    }

    /// A project in `tmp/proj` with `project_conf` as its committed settings, and a home in
    /// `tmp/home` (no environment layer).
    #[cfg(test)]
    pub(crate) fn in_temp(tmp: &Path, project_conf: &str) -> Project {
        let home = tmp.join("home");
        let dir = tmp.join("proj");
        std::fs::create_dir_all(dir.join(PROJECT_CONF_DIR)).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(dir.join(PROJECT_CONF_DIR).join("sandbox.conf"), project_conf).unwrap();
        let input = LoadInput {
            home: home.clone(),
            project_dir: dir.clone(),
            user_config_dir: home.join(".cfg"),
            env: vec![],
        };
        let settings = Settings::load(&input).unwrap();
        Project {
            checkout: dir.clone(),
            dir,
            home: home.clone(),
            user_config_dir: home.join(".cfg"),
            settings,
            input,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(tmp: &Path, project_conf: &str) -> Project {
        Project::in_temp(tmp, project_conf)
    }

    #[test]
    fn directories_resolved_once_give_what_canonicalize_gives() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("var/home/u");
        std::fs::create_dir_all(real.join(".config/gh")).unwrap();
        std::fs::write(real.join(".netrc"), "").unwrap();
        std::fs::create_dir_all(t.path().join("elsewhere")).unwrap();
        symlink("var/home", t.path().join("home")).unwrap();
        symlink("../../../elsewhere", real.join(".aws")).unwrap();
        symlink("nowhere", real.join(".dangling")).unwrap();
        symlink(".config", real.join(".cfg")).unwrap();
        let home = t.path().join("home/u");
        let mut dirs = ResolvedDirs::default();
        for rel in [
            ".netrc",
            ".config/gh",
            ".config",
            ".aws",
            ".aws/x",
            ".dangling",
            ".missing",
            ".missing/deeper",
            ".cfg/gh",
            ".config/../.netrc",
            ".config/gh/..",
            ".",
            ".aws/",
            ".aws/.",
            ".cfg/",
            ".config/gh/",
            ".netrc/",
        ] {
            let p = home.join(rel);
            let want = p.canonicalize().unwrap_or_else(|_| p.clone());
            assert_eq!(dirs.canonical(p.clone()), want, "{}", p.display());
        }
        assert_eq!(dirs.canonical("rel/x".into()), PathBuf::from("rel/x"));
    }

    #[test]
    fn start_is_refused_until_the_user_accepts_the_widening_and_again_when_it_changes() {
        let t = tempfile::tempdir().unwrap();
        let p = project(t.path(), "OCSB_SANDBOX=0\n");
        let e = p.require_trusted().unwrap_err().to_string();
        assert!(e.contains("OCSB_SANDBOX 0 (was 1)"), "{e}");
        assert!(e.contains("ocsb config --trust"), "{e}");
        p.trust().unwrap();
        p.require_trusted().unwrap();

        // The file changes: the old acceptance does not cover the new widening.
        let p = project(t.path(), "OCSB_SANDBOX=0\nOCSB_HIDE_HOME=()\n");
        let e = p.require_trusted().unwrap_err().to_string();
        assert!(e.contains("OCSB_HIDE_HOME - .gnupg"), "{e}");
    }

    #[test]
    fn home_root_and_directories_holding_state_or_hidden_paths_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let mut p = project(t.path(), "");
        p.check_writable_roots().unwrap();
        std::fs::create_dir_all(t.path().join("home/.ssh")).unwrap();
        for (dir, why) in [
            (t.path().join("home"), "your home directory"),
            (t.path().to_path_buf(), "contains your home directory"),
            (PathBuf::from("/"), "the root directory"),
            (t.path().join("home/.local"), "contains ocsb's state directory"),
        ] {
            p.checkout = dir.clone();
            let e = p.check_writable_roots().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("cd into a repository"), "{}: {e}", dir.display());
        }
        let mut p2 = project(t.path(), "OCSB_HIDE_HOME+=(.config/gh)\n");
        p2.checkout = t.path().join("home/.config");
        let e = p2.check_writable_roots().unwrap_err().to_string();
        assert!(e.contains("hidden path"), "{e}");
        // A directory holding your own settings layer (a dotfiles repository at ~/.config).
        let mut p4 = project(t.path(), "");
        p4.user_config_dir = t.path().join("home/.config/opencode-sandbox");
        p4.checkout = t.path().join("home/.config");
        std::fs::create_dir_all(&p4.checkout).unwrap();
        let e = p4.check_writable_roots().unwrap_err().to_string();
        assert!(e.contains("your own settings"), "{e}");
        // The same rule for OCSB_WORKTREES_DIR.
        let p3 = project(t.path(), "OCSB_WORKTREES_DIR=~/.local\n");
        let e = p3.check_writable_roots().unwrap_err().to_string();
        assert!(e.contains("OCSB_WORKTREES_DIR") && e.contains("state directory"), "{e}");
    }

    /// A user install (`~/.local/bin/ocsb` and `~/.local/libexec/ocsb/`, or `~/.cargo/bin`):
    /// a writable root holding either directory is refused, wherever it comes from; a narrower
    /// one beside them is not.
    #[test]
    fn directories_holding_ocsbs_programs_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let tools = t.path().join("home/tools");
        let install = Installation { exe: tools.join("bin/ocsb") };
        let programs = install.program_dirs();
        for dir in [&programs[0], &programs[1], &tools.join("cache")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for conf in [
            "OCSB_RW_HOME+=(tools)\n".to_string(),
            "OCSB_RW_HOME+=(tools/bin)\n".into(),
            format!("OCSB_RW+=({})\n", programs[1].display()),
            format!("OCSB_RW+=({})\n", t.path().join("home/tools/libexec").display()),
            // A single file bound writable inside a program directory.
            format!("OCSB_RW+=({})\n", programs[1].join("ocsb-egress").display()),
            // The state directory is bound writable as well.
            format!("OCSB_STATE_DIR={}\n", tools.display()),
        ] {
            let e = project(t.path(), &conf).check_writable_roots_against(&programs).unwrap_err().to_string();
            assert!(e.contains("ocsb's own programs") && e.contains("narrower path"), "{conf}: {e}");
        }
        // The host's /tmp, shared, is a writable root like any other.
        let tmp_install = Installation { exe: PathBuf::from("/tmp/ocsb-build/bin/ocsb") };
        // (A home out of /tmp: one in it is refused for that.)
        let v = tempfile::tempdir_in("/var/tmp").unwrap();
        let shared = project(v.path(), "OCSB_TMP=shared\n");
        let e = shared.check_writable_roots_against(&tmp_install.program_dirs()).unwrap_err().to_string();
        assert!(e.contains("as OCSB_TMP=shared (the host's /tmp): it contains ocsb's own programs"), "{e}");
        let elsewhere = Installation { exe: v.path().join("bin/ocsb") };
        shared.check_writable_roots_against(&elsewhere.program_dirs()).unwrap();
        let in_tmp = tempfile::tempdir_in("/tmp").unwrap();
        let e = project(in_tmp.path(), "OCSB_TMP=shared\n")
            .check_writable_roots_against(&elsewhere.program_dirs());
        assert!(e.unwrap_err().to_string().contains("it contains your home directory"));
        let mut p = project(t.path(), "OCSB_RW_HOME+=(tools/cache)\n");
        p.check_writable_roots_against(&programs).unwrap();
        // A directory below a program directory holds none of its entries.
        let deeper = programs[0].join("scripts");
        std::fs::create_dir_all(&deeper).unwrap();
        project(t.path(), &format!("OCSB_RW+=({})\n", deeper.display()))
            .check_writable_roots_against(&programs)
            .unwrap();
        p.checkout = tools.clone();
        let e = p.check_writable_roots_against(&programs).unwrap_err().to_string();
        assert!(e.contains("as the project directory: it contains ocsb's own programs"), "{e}");
    }

    #[test]
    fn a_narrowing_project_file_needs_no_acceptance() {
        let t = tempfile::tempdir().unwrap();
        let p = project(t.path(), "OCSB_DOCKER=0\nOCSB_HIDE+=(../secrets)\n");
        p.require_trusted().unwrap();
    }
}
