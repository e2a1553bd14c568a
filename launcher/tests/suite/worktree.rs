//! `ocsb wt add | rm | list` against real git repositories made in temporary directories, with
//! the real `git` and the built `ocsb` binary. HOME points into the temporary directory so no
//! user settings layer or git config of the machine takes part.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const OCSB: &str = env!("CARGO_BIN_EXE_ocsb");

/// A project repository with one commit, in its own temporary directory.
struct Repo {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    /// The project (main checkout).
    dir: PathBuf,
    home: PathBuf,
}

fn base_env(cmd: &mut Command, home: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null());
}

impl Repo {
    /// `sandbox_conf` is written to `.opencode-sandbox/sandbox.conf` and committed.
    fn new(sandbox_conf: &str) -> Repo {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().unwrap();
        let dir = root.join("shop");
        let home = root.join("home");
        fs::create_dir_all(dir.join(".opencode-sandbox/hooks")).unwrap();
        fs::create_dir_all(&home).unwrap();
        let repo = Repo { _tmp: tmp, root, dir, home };
        repo.git(&["init", "-q", "-b", "main"]);
        fs::write(repo.dir.join(".opencode-sandbox/sandbox.conf"), sandbox_conf).unwrap();
        fs::write(repo.dir.join("README"), "hello\n").unwrap();
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "init"]);
        repo
    }

    fn worktrees(&self) -> PathBuf {
        self.root.join("shop-worktrees")
    }

    fn git_in(&self, dir: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir).args(args);
        base_env(&mut cmd, &self.home);
        match cmd.output() {
            Ok(o) => o,
            Err(e) => panic!("cannot run git ({e}): install the Debian package `git`"),
        }
    }

    fn git(&self, args: &[&str]) -> String {
        let o = self.git_in(&self.dir, args);
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    }

    fn branch_exists(&self, b: &str) -> bool {
        self.git_in(&self.dir, &["show-ref", "--verify", "--quiet", &format!("refs/heads/{b}")])
            .status
            .success()
    }

    fn registered_worktrees(&self) -> usize {
        self.git(&["worktree", "list", "--porcelain"]).lines().filter(|l| l.starts_with("worktree ")).count()
    }

    fn hook(&self, name: &str, body: &str, mode: u32) {
        let p = self.dir.join(".opencode-sandbox/hooks").join(name);
        fs::write(&p, body).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn ocsb_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(OCSB);
        base_env(&mut cmd, &self.home);
        cmd.arg("-C").arg(&self.dir).args(args).current_dir(&self.root);
        cmd
    }

    fn ocsb(&self, args: &[&str]) -> Run {
        Run::from(self.ocsb_cmd(args).output().expect("run ocsb"))
    }

    fn ok(&self, args: &[&str]) -> Run {
        let r = self.ocsb(args);
        assert_eq!(r.code, 0, "ocsb {args:?} failed:\n{}", r.stderr);
        r
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

const SHOP_CONF: &str = "OCSB_WT_PREFIX=shop-wt-\nOCSB_WT_SLUG_REGEX='SHOP-([0-9]+)'\n";

/// A hook that records what it was given, one item per line, into `$HOOK_OUT`.
const RECORDING_HOOK: &str = r#"#!/bin/sh
{
  printf 'WT_DIR=%s\n' "$WT_DIR"
  printf 'WT_BRANCH=%s\n' "$WT_BRANCH"
  printf 'WT_SLUG=%s\n' "$WT_SLUG"
  printf 'MAIN_ROOT=%s\n' "$MAIN_ROOT"
  printf 'PWD=%s\n' "$(pwd -P)"
  printf 'GIT_DIR=%s\n' "${GIT_DIR-unset}"
  printf 'TOPLEVEL=%s\n' "$(git rev-parse --show-toplevel)"
  printf 'ARGC=%s\n' "$#"
  for a in "$@"; do printf 'ARG=%s\n' "$a"; done
} > "$HOOK_OUT"
"#;

#[test]
fn add_creates_the_worktree_and_the_hook_gets_variables_and_arguments() {
    let r = Repo::new(SHOP_CONF);
    r.hook("wt-post-add", RECORDING_HOOK, 0o755);
    let out = r.root.join("hook.out");
    let run = Run::from(
        r.ocsb_cmd(&["wt", "add", "feature-SHOP-42-cart", "--seed", "two words"])
            .env("HOOK_OUT", &out)
            // Must neither redirect ocsb's git commands nor reach the hook.
            .env("GIT_DIR", r.root.join("nowhere"))
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let wt = r.worktrees().join("shop-wt-42");
    assert_eq!(run.stdout, format!("{}\n", wt.display()), "stdout is only the path");
    assert!(wt.join("README").is_file());
    assert!(r.branch_exists("feature-SHOP-42-cart"));
    assert_eq!(
        r.git_in(&wt, &["rev-parse", "HEAD"]).stdout,
        r.git_in(&r.dir, &["rev-parse", "main"]).stdout,
        "starts from the current HEAD"
    );
    let got = fs::read_to_string(&out).expect("the hook ran");
    let want = format!(
        "WT_DIR={w}\nWT_BRANCH=feature-SHOP-42-cart\nWT_SLUG=42\nMAIN_ROOT={m}\nPWD={w}\nGIT_DIR=unset\n\
         TOPLEVEL={w}\nARGC=2\nARG=--seed\nARG=two words\n",
        w = wt.display(),
        m = r.dir.display()
    );
    assert_eq!(got, want);
}

#[test]
fn failing_post_add_hook_rolls_everything_back() {
    let r = Repo::new(SHOP_CONF);
    // The hook leaves an untracked file and an ignored-looking directory before failing.
    r.hook(
        "wt-post-add",
        "#!/bin/sh\necho partial > junk.txt\nmkdir -p node_modules/x\necho 'hook says no' >&2\nexit 3\n",
        0o755,
    );
    let run = r.ocsb(&["wt", "add", "feature-SHOP-7"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("hook says no"), "hook output is shown: {}", run.stderr);
    assert!(run.stderr.contains("wt-post-add failed"), "{}", run.stderr);
    assert!(run.stderr.contains("rolled back"), "{}", run.stderr);
    assert!(!run.stderr.contains("could NOT"), "{}", run.stderr);
    assert!(run.stdout.is_empty());
    assert!(!r.worktrees().join("shop-wt-7").exists(), "worktree directory removed");
    assert!(!r.worktrees().exists(), "the worktrees directory wt add created is removed too");
    assert!(!r.branch_exists("feature-SHOP-7"), "new branch deleted");
    assert_eq!(r.registered_worktrees(), 1, "git forgot the worktree");
}

#[test]
fn rollback_keeps_a_worktrees_directory_that_existed() {
    let r = Repo::new(SHOP_CONF);
    fs::create_dir_all(r.worktrees().join("unrelated")).unwrap();
    r.hook("wt-post-add", "#!/bin/sh\nexit 1\n", 0o755);
    assert_eq!(r.ocsb(&["wt", "add", "feature-SHOP-8"]).code, 1);
    assert!(r.worktrees().join("unrelated").is_dir());
    assert!(!r.worktrees().join("shop-wt-8").exists());
    assert!(!r.branch_exists("feature-SHOP-8"));
}

#[test]
fn interrupted_post_add_hook_still_rolls_back() {
    let r = Repo::new(SHOP_CONF);
    let started = r.root.join("started");
    r.hook("wt-post-add", "#!/bin/sh\ntouch \"$STARTED\"\nexec sleep 30\n", 0o755);
    let mut cmd = r.ocsb_cmd(&["wt", "add", "feature-SHOP-9"]);
    cmd.env("STARTED", &started).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let child = cmd.spawn().unwrap();
    let pgid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the hook never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // What the terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    let pgid = nix::unistd::Pid::from_raw(i32::try_from(pgid).unwrap());
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGINT).expect("killpg");
    let run = Run::from(child.wait_with_output().unwrap());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("rolled back"), "{}", run.stderr);
    assert!(!r.worktrees().join("shop-wt-9").exists());
    assert!(!r.branch_exists("feature-SHOP-9"));
    assert_eq!(r.registered_worktrees(), 1);
}

#[test]
fn non_executable_hook_is_an_error_before_anything_is_made() {
    let r = Repo::new(SHOP_CONF);
    r.hook("wt-post-add", "#!/bin/sh\nexit 0\n", 0o644);
    let run = r.ocsb(&["wt", "add", "feature-SHOP-5"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("not executable"), "{}", run.stderr);
    assert!(run.stderr.contains("chmod +x"), "{}", run.stderr);
    assert!(!r.worktrees().exists());
    assert!(!r.branch_exists("feature-SHOP-5"));
}

#[test]
fn bad_branch_names_are_refused_with_exit_1_and_nothing_made() {
    let r = Repo::new(SHOP_CONF);
    let cases: &[(&[&str], &str)] = &[
        (&["wt", "add", "has space"], "whitespace"),
        (&["wt", "add", "a..b"], "'..'"),
        (&["wt", "add", "../../etc"], "'..'"),
        (&["wt", "add", "-x"], "starts with '-'"),
        (&["wt", "add", "--", "--upload-pack=evil"], "starts with '-'"),
        (&["wt", "add", "x@{1}"], "'@{'"),
        (&["wt", "add", "tab\there"], "control character"),
        (&["wt", "add", "esc\u{1b}[31m"], "control character"),
        (&["wt", "add", "a~1"], "git does not accept"),
        (&["wt", "add", "x.lock"], "git does not accept"),
        (&["wt", "add", "a:b"], "git does not accept"),
        (&["wt", "add", ""], "empty"),
    ];
    for (args, why) in cases {
        let run = r.ocsb(args);
        assert_eq!(run.code, 1, "{args:?} must be refused with exit 1: {}", run.stderr);
        assert!(run.stderr.contains(why), "{args:?}: expected {why:?} in: {}", run.stderr);
        assert!(run.stderr.contains("fix:"), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.contains('\u{1b}'), "no raw escape sequences echoed: {args:?}");
    }
    assert!(!r.worktrees().exists());
    assert_eq!(r.git(&["branch", "--format=%(refname:short)"]), "main\n");
}

#[test]
fn existing_branch_and_existing_directory_are_refused() {
    let r = Repo::new(SHOP_CONF);
    r.git(&["branch", "feature-SHOP-1"]);
    let run = r.ocsb(&["wt", "add", "feature-SHOP-1"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);

    fs::create_dir_all(r.worktrees().join("shop-wt-2")).unwrap();
    fs::write(r.worktrees().join("shop-wt-2/keep"), "x").unwrap();
    let run = r.ocsb(&["wt", "add", "other-SHOP-2"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
    assert!(r.worktrees().join("shop-wt-2/keep").is_file(), "left untouched");
    assert!(!r.branch_exists("other-SHOP-2"));
}

#[test]
fn slug_falls_back_to_the_path_safe_branch_name() {
    let r = Repo::new(SHOP_CONF);
    let run = r.ok(&["wt", "add", "fix/typo"]);
    assert!(run.stderr.contains("does not match OCSB_WT_SLUG_REGEX"), "{}", run.stderr);
    assert!(r.worktrees().join("shop-wt-fix-typo").is_dir());
    // And without a regex, the whole branch name is the slug.
    let r = Repo::new("");
    r.ok(&["wt", "add", "feature/cart"]);
    assert!(r.worktrees().join("feature-cart").is_dir());
}

#[test]
fn base_setting_is_used_and_a_bad_base_makes_nothing() {
    let r = Repo::new(SHOP_CONF);
    r.git(&["branch", "release"]);
    fs::write(r.dir.join("later"), "x").unwrap();
    r.git(&["add", "later"]);
    r.git(&["commit", "-q", "-m", "later"]);
    let run =
        Run::from(r.ocsb_cmd(&["wt", "add", "b-SHOP-3"]).env("OCSB_WT_BASE", "release").output().unwrap());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let wt = r.worktrees().join("shop-wt-3");
    assert_eq!(
        r.git_in(&wt, &["rev-parse", "HEAD"]).stdout,
        r.git_in(&r.dir, &["rev-parse", "release"]).stdout
    );
    assert!(!wt.join("later").exists());

    let run = Run::from(
        r.ocsb_cmd(&["wt", "add", "b-SHOP-4"]).env("OCSB_WT_BASE", "no-such-branch").output().unwrap(),
    );
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no-such-branch"), "{}", run.stderr);
    assert!(!r.branch_exists("b-SHOP-4"));
    assert!(!r.worktrees().join("shop-wt-4").exists());
}

#[test]
fn rm_refuses_uncommitted_changes_and_force_discards_them() {
    let r = Repo::new(SHOP_CONF);
    r.ok(&["wt", "add", "feature-SHOP-42-cart"]);
    let wt = r.worktrees().join("shop-wt-42");

    // An untracked file counts.
    fs::write(wt.join("new.txt"), "x").unwrap();
    let run = r.ocsb(&["wt", "rm", "42"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("uncommitted changes"), "{}", run.stderr);
    assert!(run.stderr.contains("new.txt"), "{}", run.stderr);
    assert!(run.stderr.contains("--force"), "{}", run.stderr);
    assert!(wt.join("new.txt").is_file());

    // So does a change to a tracked file.
    fs::remove_file(wt.join("new.txt")).unwrap();
    fs::write(wt.join("README"), "changed\n").unwrap();
    let run = r.ocsb(&["wt", "rm", "42"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("README"), "{}", run.stderr);
    assert!(wt.is_dir());

    let run = r.ok(&["wt", "rm", "42", "--force"]);
    assert!(run.stderr.contains("kept"), "{}", run.stderr);
    assert!(!wt.exists());
    assert!(r.branch_exists("feature-SHOP-42-cart"), "rm keeps the branch");
    assert_eq!(r.registered_worktrees(), 1);
}

#[test]
fn rm_by_slug_runs_the_pre_rm_hook_and_a_failing_one_aborts() {
    let r = Repo::new(SHOP_CONF);
    r.ok(&["wt", "add", "feature-SHOP-42-cart"]);
    let wt = r.worktrees().join("shop-wt-42");

    r.hook("wt-pre-rm", "#!/bin/sh\necho 'stack still running' >&2\nexit 1\n", 0o755);
    let run = r.ocsb(&["wt", "rm", "42"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("wt-pre-rm failed"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing was removed"), "{}", run.stderr);
    assert!(wt.is_dir());

    r.hook("wt-pre-rm", RECORDING_HOOK, 0o755);
    let out = r.root.join("hook.out");
    let run = Run::from(r.ocsb_cmd(&["wt", "rm", "42"]).env("HOOK_OUT", &out).output().unwrap());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!wt.exists());
    let want = format!(
        "WT_DIR={w}\nWT_BRANCH=feature-SHOP-42-cart\nWT_SLUG=42\nMAIN_ROOT={m}\nPWD={w}\nGIT_DIR=unset\n\
         TOPLEVEL={w}\nARGC=0\n",
        w = wt.display(),
        m = r.dir.display()
    );
    assert_eq!(fs::read_to_string(&out).unwrap(), want);
}

#[test]
fn rm_by_directory_name_and_by_path_but_never_the_main_checkout() {
    let r = Repo::new(SHOP_CONF);
    r.ok(&["wt", "add", "a-SHOP-7"]);
    r.ok(&["wt", "add", "b-SHOP-8"]);
    r.ok(&["wt", "rm", "shop-wt-7"]);
    assert!(!r.worktrees().join("shop-wt-7").exists());
    // A relative path is relative to the current directory (here: the temporary root).
    r.ok(&["wt", "rm", "shop-worktrees/shop-wt-8"]);
    assert!(!r.worktrees().join("shop-wt-8").exists());

    let run = r.ocsb(&["wt", "rm", r.dir.to_str().unwrap()]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("main checkout"), "{}", run.stderr);
    let run = r.ocsb(&["wt", "rm", "99"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no worktree"), "{}", run.stderr);
    assert!(run.stderr.contains("ocsb wt list"), "{}", run.stderr);
}

#[test]
fn rm_of_a_worktree_whose_directory_is_gone_forgets_it() {
    let r = Repo::new(SHOP_CONF);
    r.ok(&["wt", "add", "a-SHOP-7"]);
    fs::remove_dir_all(r.worktrees().join("shop-wt-7")).unwrap();
    assert_eq!(r.registered_worktrees(), 2);
    let run = r.ocsb(&["wt", "list"]);
    assert!(run.stdout.contains("missing"), "{}", run.stdout);
    r.ok(&["wt", "rm", "7"]);
    assert_eq!(r.registered_worktrees(), 1);
}

#[test]
fn list_shows_slug_branch_state_and_path() {
    let r = Repo::new(SHOP_CONF);
    let run = r.ok(&["wt", "list"]);
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("no worktrees"), "{}", run.stderr);

    r.ok(&["wt", "add", "feature-SHOP-42-cart"]);
    r.ok(&["wt", "add", "fix/SHOP-7"]);
    fs::write(r.worktrees().join("shop-wt-7/x"), "").unwrap();
    // A worktree outside the worktrees directory is not listed.
    r.git(&["worktree", "add", "-q", "-b", "elsewhere", "--", r.root.join("elsewhere").to_str().unwrap()]);

    let run = r.ok(&["wt", "list"]);
    let rows: Vec<Vec<&str>> = run.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    let w = r.worktrees();
    assert_eq!(
        rows,
        vec![
            vec!["SLUG", "BRANCH", "STATE", "PATH"],
            vec!["42", "feature-SHOP-42-cart", "clean", w.join("shop-wt-42").to_str().unwrap()],
            vec!["7", "fix/SHOP-7", "dirty", w.join("shop-wt-7").to_str().unwrap()],
        ],
        "{}",
        run.stdout
    );
}

#[test]
fn commands_run_inside_a_worktree_act_on_the_main_checkout() {
    let r = Repo::new(SHOP_CONF);
    r.ok(&["wt", "add", "feature-SHOP-42-cart"]);
    let wt = r.worktrees().join("shop-wt-42");
    let inside = |args: &[&str]| {
        let mut cmd = Command::new(OCSB);
        base_env(&mut cmd, &r.home);
        Run::from(cmd.args(args).current_dir(&wt).output().unwrap())
    };
    let run = inside(&["wt", "add", "other-SHOP-43"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(r.worktrees().join("shop-wt-43").is_dir(), "a sibling, not a nested worktrees dir");
    let run = inside(&["wt", "list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.lines().count(), 3, "{}", run.stdout);
    let run = inside(&["wt", "rm", "43"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn outside_a_git_repository_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new(OCSB);
    base_env(&mut cmd, &home);
    cmd.env("GIT_CEILING_DIRECTORIES", tmp.path().parent().unwrap());
    let run = Run::from(cmd.arg("-C").arg(tmp.path()).args(["wt", "list"]).output().unwrap());
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("not inside a git work tree"), "{}", run.stderr);
    assert!(run.stderr.contains("fix:"), "{}", run.stderr);
}

#[test]
fn bad_worktree_settings_name_file_and_line() {
    for (conf, line) in [
        ("OCSB_WT_PREFIX=shop-wt-\nOCSB_WT_SLUG_REGEX='(A)-([0-9]+)'\n", "sandbox.conf:2"),
        ("OCSB_WT_PREFIX=../escape-\n", "sandbox.conf:1"),
        ("\n\nOCSB_WT_BASE=--upload-pack=x\n", "sandbox.conf:3"),
    ] {
        let r = Repo::new(conf);
        let run = r.ocsb(&["wt", "add", "feature-SHOP-1"]);
        assert_eq!(run.code, 3, "{conf:?}: {}", run.stderr);
        assert!(run.stderr.contains(line), "{conf:?}: expected {line} in {}", run.stderr);
        assert!(!r.worktrees().exists());
        assert!(!r.branch_exists("feature-SHOP-1"));
    }
}
