//! The foundation commands, run as the real binary against real repositories in temp dirs:
//! `init`, `config`, `egress render`, `egress explain`, `completions`, and the exit codes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Repo {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    dir: PathBuf,
}

impl Repo {
    /// A fresh git repository `proj` with an empty HOME beside it, so no user layer leaks in.
    fn new() -> Repo {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let dir = tmp.path().join("proj");
        fs::create_dir_all(&home).unwrap();
        fs::create_dir_all(&dir).unwrap();
        let st = Command::new("git").args(["init", "-q"]).arg(&dir).status().expect("git is installed");
        assert!(st.success());
        Repo { _tmp: tmp, home, dir }
    }

    fn ocsb(&self, args: &[&str]) -> Output {
        self.ocsb_env(args, &[])
    }

    fn ocsb_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ocsb"));
        c.args(args).current_dir(&self.dir).env_clear().env("HOME", &self.home).env("PATH", "/usr/bin:/bin");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    fn write(&self, rel: &str, body: &str) {
        let p = self.dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn init_creates_every_file_and_is_idempotent() {
    let r = Repo::new();
    let o = r.ocsb(&["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        ".opencode-sandbox/sandbox.conf",
        ".opencode-sandbox/egress.conf",
        ".opencode-sandbox/.gitignore",
        ".opencode-sandbox/hooks/wt-post-add.example",
        ".opencode-sandbox/hooks/wt-pre-rm.example",
        ".cc-safety-net/policy.json",
    ] {
        assert!(r.dir.join(f).is_file(), "{f} missing");
        assert!(stdout(&o).contains(&format!("created {f}")), "{f} not reported: {}", stdout(&o));
    }
    assert!(r.dir.join(".opencode-sandbox/local").is_dir());
    assert_eq!(mode(&r.dir.join(".opencode-sandbox/hooks/wt-post-add.example")), 0o755);
    let policy: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(r.dir.join(".cc-safety-net/policy.json")).unwrap()).unwrap();
    assert_eq!(policy["version"], 1);

    // git ignores local/ through the .gitignore inside .opencode-sandbox/.
    r.write(".opencode-sandbox/local/sandbox.conf", "OCSB_WEB_PORT=5000\n");
    let ignored = Command::new("git")
        .args(["check-ignore", "-q", ".opencode-sandbox/local/sandbox.conf"])
        .current_dir(&r.dir)
        .status()
        .unwrap();
    assert!(ignored.success(), "local/ must be git-ignored");

    // The templates load: init followed by config and render works without edits.
    assert!(r.ocsb(&["config"]).status.success());
    assert!(r.ocsb(&["egress", "render"]).status.success());

    // A second run keeps every file, including one the user changed.
    r.write(".opencode-sandbox/egress.conf", "block .example.com\n");
    let o = r.ocsb(&["init"]);
    assert!(o.status.success());
    assert!(!stdout(&o).contains("created"), "{}", stdout(&o));
    assert_eq!(
        fs::read_to_string(r.dir.join(".opencode-sandbox/egress.conf")).unwrap(),
        "block .example.com\n"
    );
}

#[test]
#[cfg_attr(not(feature = "host-tests"), ignore = "needs cc-safety-net from npm: --features host-tests")]
fn the_safety_net_policy_template_is_one_cc_safety_net_accepts() {
    let r = Repo::new();
    assert!(r.ocsb(&["init"]).status.success());
    let o = Command::new("cc-safety-net")
        .args(["policy", "check", ".cc-safety-net/policy.json"])
        .current_dir(&r.dir)
        .env("HOME", &r.home)
        .output()
        .expect("cc-safety-net is needed: npm install -g cc-safety-net@2.4.5 (make test does it)");
    let out = format!("{}{}", stdout(&o), stderr(&o));
    assert!(o.status.success(), "{out}");
    assert!(out.contains("Scope: project"), "not read as the project's policy: {out}");
    assert!(!out.contains("unknown field"), "{out}");
}

#[test]
fn init_never_follows_or_replaces_an_existing_symlink() {
    let r = Repo::new();
    fs::create_dir_all(r.dir.join(".opencode-sandbox")).unwrap();
    let outside = r.home.join("victim");
    std::os::unix::fs::symlink(&outside, r.dir.join(".opencode-sandbox/sandbox.conf")).unwrap();
    let o = r.ocsb(&["init"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!outside.exists(), "init wrote through a dangling symlink");
    assert!(stdout(&o).contains("kept    .opencode-sandbox/sandbox.conf"));
}

#[test]
fn init_outside_a_git_repository_fails_clearly() {
    let r = Repo::new();
    let bare = r.home.join("not-a-repo");
    fs::create_dir_all(&bare).unwrap();
    let o = r.ocsb(&["-C", bare.to_str().unwrap(), "init"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not inside a git repository"), "{}", stderr(&o));
    assert!(stderr(&o).contains("git init"), "the message says how to fix it");
    assert!(!bare.join(".opencode-sandbox").exists());
}

#[test]
fn config_applies_the_five_layers_in_order_and_reports_origins() {
    let r = Repo::new();
    fs::create_dir_all(r.home.join(".config/opencode-sandbox")).unwrap();
    fs::write(
        r.home.join(".config/opencode-sandbox/sandbox.conf"),
        "OCSB_WEB_PORT=4300\nOCSB_EGRESS_PORT=3200\n",
    )
    .unwrap();
    r.write(
        ".opencode-sandbox/sandbox.conf",
        "OCSB_NAME=shop\nOCSB_EGRESS_PORT=3138\nOCSB_HIDE=(../secrets)\n",
    );
    r.write(".opencode-sandbox/local/sandbox.conf", "OCSB_HIDE+=(\"my notes\")\n");
    let o = r.ocsb_env(&["config", "--origin"], &[("OCSB_WEB_PORT", "4296")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name}: {out}"))
            .to_string()
    };
    assert!(line("OCSB_NAME").starts_with("OCSB_NAME=shop"), "{out}");
    assert!(line("OCSB_NAME").contains(".opencode-sandbox/sandbox.conf:1"), "{out}");
    assert!(line("OCSB_WEB_PORT").starts_with("OCSB_WEB_PORT=4296"), "env wins: {out}");
    assert!(line("OCSB_EGRESS_PORT").starts_with("OCSB_EGRESS_PORT=3138"), "project beats user: {out}");
    // The state dir default follows the name set by the project.
    assert!(line("OCSB_STATE_DIR").contains("/.local/share/opencode-sandbox/shop"), "{out}");
    let hide = out.split("OCSB_HIDE=(").nth(1).expect("OCSB_HIDE printed");
    let hide = &hide[..hide.find(')').unwrap()];
    assert!(hide.contains("secrets") && hide.contains("my notes"), "append across layers: {hide}");
}

#[test]
fn config_output_is_itself_a_valid_settings_file() {
    let r = Repo::new();
    r.write(".opencode-sandbox/sandbox.conf", "OCSB_ENV=(\"A=b c\" 'D=$x' \"E=it's\")\nOCSB_WT_PREFIX=wt-\n");
    let o = r.ocsb(&["config"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first = stdout(&o);
    assert!(first.contains("OCSB_WT_PREFIX=wt-"), "{first}");
    // Feed the output back as the project layer: the effective values must not change.
    r.write(".opencode-sandbox/sandbox.conf", &first);
    let o = r.ocsb(&["config"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), first);
}

#[test]
fn bad_settings_exit_3_name_the_line_and_run_nothing() {
    let r = Repo::new();
    let marker = r.home.join("ran");
    let cases = [
        (format!("OCSB_NAME=$(touch {})\n", marker.display()), ":1:"),
        (format!("# ok\nOCSB_NAME=`touch {}`\n", marker.display()), ":2:"),
        ("OCSB_NAME=x\nif true; then OCSB_NAME=y; fi\n".to_string(), ":2:"),
        (format!("source {}\n", marker.display()), ":1:"),
        ("OCSB_NO_SUCH_SETTING=1\n".to_string(), ":1:"),
    ];
    for (body, at) in cases {
        r.write(".opencode-sandbox/sandbox.conf", &body);
        let o = r.ocsb(&["config"]);
        assert_eq!(o.status.code(), Some(3), "{body}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!(".opencode-sandbox/sandbox.conf{at}")), "{body}: {err}");
        assert!(stdout(&o).is_empty(), "nothing half-printed for {body}");
    }
    assert!(!marker.exists(), "a settings file ran a command");
}

#[test]
fn bad_environment_values_are_refused() {
    let r = Repo::new();
    let o = r.ocsb_env(&["config"], &[("OCSB_WEB_PORT", "99999")]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("OCSB_WEB_PORT"), "{}", stderr(&o));
}

const SEED_RULES: &str = "\
allow jira.example.com gitlab.example.com
allow-regex ^[a-z0-9-]+\\.staging\\.example\\.com$
block .example.com
block-regex ^prod-
connect git.example.com:2222 10.0.0.5:6443
expect-block https://prod.example.com/
expect-pass https://gitlab.example.com/
";

fn explain(r: &Repo, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["egress", "explain", "--json"];
    a.extend_from_slice(args);
    let o = r.ocsb(&a);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn explain_gives_verdict_rule_and_source_for_the_seed_examples() {
    let r = Repo::new();
    r.write(".opencode-sandbox/egress.conf", SEED_RULES);
    let p = ".opencode-sandbox/egress.conf";
    let cases: &[(&[&str], &str, &str, Option<String>)] = &[
        (&["https://jira.example.com/"], "allow", "allow", Some(format!("{p}:1"))),
        (&["https://a.staging.example.com/"], "allow", "allow", Some(format!("{p}:2"))),
        (&["https://www.example.com/"], "deny", "block", Some(format!("{p}:3"))),
        (&["http://EXAMPLE.COM./x"], "deny", "block", Some(format!("{p}:3"))),
        (&["https://prod-api.other.org/"], "deny", "block", Some(format!("{p}:4"))),
        (&["--connect", "git.example.com:2222"], "allow", "connect", Some(format!("{p}:5"))),
        (&["--connect", "10.0.0.5:6443"], "allow", "connect", Some(format!("{p}:5"))),
        (&["--connect", "git.example.com:2223"], "deny", "port", None),
        // A client sends CONNECT for https://, so the connect rule decides (the seed's example);
        // the same URL as http:// is a GET to a non-web port.
        (&["https://10.0.0.5:6443/version"], "allow", "connect", Some(format!("{p}:5"))),
        (&["http://10.0.0.5:6443/version"], "deny", "port", None),
        (&["https://git.example.com:2222/"], "allow", "connect", Some(format!("{p}:5"))),
        // IPv6 forms that carry a private IPv4 address, and the site-local range.
        (&["https://[::10.9.9.9]/"], "deny", "private", None),
        (&["https://nat64.example.org/", "--resolve", "64:ff9b::a9fe:a9fe"], "deny", "private", None),
        (&["https://sixtofour.example.org/", "--resolve", "2002:a09:909::1"], "deny", "private", None),
        (&["https://old.example.org/", "--resolve", "fec0::1"], "deny", "private", None),
        (&["https://public64.example.org/", "--resolve", "64:ff9b::c633:6407"], "allow", "default", None),
        (&["https://jira.example.com:8443/"], "deny", "port", None),
        (&["http://intranet/"], "deny", "no-dot", None),
        (&["http://2130706433/"], "deny", "private", None),
        (&["http://0x7f.1/"], "deny", "private", None),
        (&["http://[::ffff:127.0.0.1]/"], "deny", "private", None),
        (&["https://public.example.org/", "--resolve", "192.0.2.7"], "allow", "default", None),
        (
            &["https://rebind.example.org/", "--resolve", "192.0.2.7", "--resolve", "10.1.2.3"],
            "deny",
            "private",
            None,
        ),
    ];
    let v = explain(&r, &["https://10.0.0.5:6443/version"]);
    assert_eq!(v["request"], "CONNECT 10.0.0.5:6443", "{v}");
    let v = explain(&r, &["http://jira.example.com/x"]);
    assert_eq!(v["request"], "GET jira.example.com:80", "{v}");
    for (args, verdict, rule, source) in cases {
        let v = explain(&r, args);
        assert_eq!(v["verdict"], *verdict, "{args:?}: {v}");
        assert_eq!(v["rule"], *rule, "{args:?}: {v}");
        match source {
            Some(s) => assert_eq!(v["source"], s.as_str(), "{args:?}: {v}"),
            None => assert!(v["source"].is_null(), "{args:?}: {v}"),
        }
    }
}

#[test]
fn explain_first_word_is_the_verdict_and_layers_are_read_like_run() {
    let r = Repo::new();
    r.write(".opencode-sandbox/egress.conf", "block .example.com\n");
    let o = r.ocsb(&["egress", "explain", "https://jira.example.com/"]);
    assert!(stdout(&o).starts_with("deny "), "{}", stdout(&o));
    // The personal layer adds an allow, which wins over the project's block.
    r.write(".opencode-sandbox/local/egress.conf", "\n\nallow jira.example.com\n");
    let o = r.ocsb(&["egress", "explain", "https://jira.example.com/"]);
    assert_eq!(stdout(&o).lines().next().unwrap(), "allow allow .opencode-sandbox/local/egress.conf:3");
    // The user layer is read too.
    fs::create_dir_all(r.home.join(".config/opencode-sandbox")).unwrap();
    fs::write(r.home.join(".config/opencode-sandbox/egress.conf"), "block-regex ^evil\n").unwrap();
    let o = r.ocsb(&["egress", "explain", "https://evil.org/"]);
    assert!(stdout(&o).starts_with("deny block "), "{}", stdout(&o));
    assert!(stdout(&o).contains(".config/opencode-sandbox/egress.conf:1"), "{}", stdout(&o));
}

#[test]
fn bad_rules_exit_3_with_file_and_line() {
    let r = Repo::new();
    for (body, line) in [
        ("allow ok.example.com\nblock-regex \\d+\n", 2),
        ("connect git.example.com\n", 1),
        ("\n\nconnect git.example.com:70000\n", 3),
        ("allow bad_host!.com\n", 1),
        ("permit example.com\n", 1),
    ] {
        r.write(".opencode-sandbox/egress.conf", body);
        for cmd in [&["egress", "render"][..], &["egress", "explain", "https://x.org/"][..]] {
            let o = r.ocsb(cmd);
            assert_eq!(o.status.code(), Some(3), "{body:?} {cmd:?}: {}", stderr(&o));
            assert!(
                stderr(&o).contains(&format!(".opencode-sandbox/egress.conf:{line}")),
                "{body:?}: {}",
                stderr(&o)
            );
            assert!(stdout(&o).is_empty(), "nothing half-rendered");
        }
    }
}

#[test]
#[cfg_attr(not(feature = "host-tests"), ignore = "needs Debian's squid: --features host-tests")]
fn render_passes_real_squid_parse() {
    let squid = Path::new("/usr/sbin/squid");
    assert!(squid.exists(), "squid is needed for this test: apt-get install squid (make test does it)");
    let r = Repo::new();
    r.write(".opencode-sandbox/egress.conf", SEED_RULES);
    let o = r.ocsb(&["egress", "render", "--format", "squid"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The squid backend, chosen by setting, renders the same file.
    let by_setting = r.ocsb_env(&["egress", "render"], &[("OCSB_EGRESS_BACKEND", "squid")]);
    assert_eq!(stdout(&by_setting), stdout(&o));
    assert!(stdout(&o).contains("http_access deny no_dot"), "{}", stdout(&o));
    let conf = r.home.join("squid.conf");
    fs::write(&conf, stdout(&o)).unwrap();
    let p = Command::new(squid).args(["-k", "parse", "-f"]).arg(&conf).output().unwrap();
    let diag = format!("{}{}", String::from_utf8_lossy(&p.stdout), String::from_utf8_lossy(&p.stderr));
    assert!(p.status.success(), "squid -k parse failed:\n{diag}");
    let bad: Vec<&str> = diag.lines().filter(|l| l.contains("ERROR") || l.contains("WARNING")).collect();
    assert!(bad.is_empty(), "squid -k parse diagnostics:\n{}", bad.join("\n"));
}

#[test]
fn render_for_the_builtin_backend_prints_the_normalised_rules() {
    let r = Repo::new();
    r.write(
        ".opencode-sandbox/egress.conf",
        "block .EXAMPLE.com.\nallow Jira.Example.com\nblock example.com\n",
    );
    let o = r.ocsb(&["egress", "render"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("block .example.com"), "{out}");
    assert!(out.contains("allow jira.example.com"), "{out}");
    assert!(!out.contains("http_access"), "the builtin backend gets rules, not squid.conf: {out}");
}

#[test]
fn completions_cover_every_subcommand() {
    let r = Repo::new();
    for shell in ["bash", "zsh", "fish"] {
        let o = r.ocsb(&["completions", shell]);
        assert!(o.status.success());
        let out = stdout(&o);
        for sub in ["init", "config", "egress", "explain", "render"] {
            assert!(out.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let o = r.ocsb(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "bad command line is exit 2");
}

#[test]
fn every_subcommand_has_help_with_the_exit_codes() {
    let r = Repo::new();
    for args in
        [&["--help"][..], &["init", "--help"], &["config", "--help"], &["egress", "explain", "--help"]]
    {
        let o = r.ocsb(args);
        assert!(o.status.success());
        assert!(stdout(&o).contains("Exit status:"), "{args:?}");
    }
}

#[test]
fn a_widening_project_file_is_shown_and_can_be_accepted() {
    let r = Repo::new();
    r.write(".opencode-sandbox/sandbox.conf", "OCSB_TMP=shared\nOCSB_RW=(~/notes)\n");
    let o = r.ocsb(&["config"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("widens the sandbox"), "{err}");
    assert!(err.contains("OCSB_TMP shared (was private)"), "{err}");
    assert!(err.contains("OCSB_RW + "), "{err}");
    // stdout stays a clean settings file.
    assert!(!stdout(&o).contains("widens"));

    let o = r.ocsb(&["config", "--trust"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("accepted for this project"), "{}", stdout(&o));
    let record = r.home.join(".local/share/opencode-sandbox/proj.trusted-settings");
    let text = fs::read_to_string(&record).expect("trust record beside the state dir");
    assert!(text.contains("OCSB_TMP shared"), "{text}");
    assert!(!r.home.join(".local/share/opencode-sandbox/proj").exists(), "not inside the state dir");

    // Settings in the user's own local layer are not the project's: nothing to accept.
    r.write(".opencode-sandbox/sandbox.conf", "OCSB_NAME=proj\n");
    r.write(".opencode-sandbox/local/sandbox.conf", "OCSB_TMP=shared\n");
    let o = r.ocsb(&["config"]);
    assert!(!stderr(&o).contains("widens"), "{}", stderr(&o));
}
