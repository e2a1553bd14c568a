//! The five layers, the environment, origins, defaults, path resolution, printing.

use std::path::PathBuf;

use super::{Fixture, a, where_};
use crate::Error;
use crate::settings::print::{quote, render};
use crate::settings::{CacheUse, EgressBackend, Layer, NetlockAcquire, SCHEMA, TmpMode};

#[test]
fn settings_defaults_without_any_file() {
    let f = Fixture::new();
    let st = f.load().expect("defaults load");
    assert_eq!(st.name(), "shop");
    assert_eq!(st.web_port(), 4196);
    assert_eq!(st.opencode_port(), 4197);
    assert_eq!(st.egress_port(), 3128);
    assert_eq!(st.opencode_bin(), PathBuf::from("opencode"));
    assert_eq!(st.env_file(), None);
    assert_eq!(st.kubeconfig(), None);
    assert!(
        st.env_vars().is_empty() && st.rw().is_empty() && st.hide().is_empty() && st.skill_dirs().is_empty()
    );
    assert_eq!(st.skills(), ["opencode-sandbox"]);
    assert_eq!(st.plugins(), ["skill-compact-resurrect"]);
    assert!(st.panel() && st.notifications() && st.sandbox_enabled());
    assert_eq!(st.docker(), crate::settings::DockerMode::Gateway);
    assert_eq!(st.tmp(), TmpMode::Private);
    assert!(st.tmp_private());
    assert_eq!(st.worktrees_dir(), f.home().join("src/shop-worktrees"));
    assert_eq!(st.wt_prefix(), "");
    assert_eq!(st.wt_base(), None);
    assert!(st.wt_slug_regex().is_none());
    assert_eq!(st.opencode_config(), None);
    assert_eq!(st.state_dir(), f.home().join(".local/share/opencode-sandbox/shop"));
    assert_eq!(st.netlock_group(), "opencode-sandbox");
    assert_eq!(st.docker_gw(), None);
    assert_eq!(st.egress_backend(), EgressBackend::Builtin);
    assert_eq!(st.netlock_acquire(), NetlockAcquire::Exec);
    assert_eq!(st.project_dir(), f.project());
    assert_eq!(st.home(), f.home());
    for seed in [".cache", ".npm", ".asdf", ".bundle", ".gem"] {
        assert!(st.rw_home().contains(&f.home().join(seed)), "{seed} in OCSB_RW_HOME");
    }
    for seed in
        [".gnupg", ".aws", ".kube/config", ".claude", ".docker/config.json", ".config/gh", ".Xauthority"]
    {
        assert!(st.hide_home().contains(&f.home().join(seed)), "{seed} in OCSB_HIDE_HOME");
    }
    // The default caches are the project's own, installed programs read-only.
    let usage =
        |rel: &str| st.home_dirs().into_iter().find(|(p, _)| p == &f.home().join(rel)).map(|(_, u)| u);
    assert_eq!(usage(".cache"), Some(CacheUse::Private(".cache".into())));
    assert_eq!(usage(".cargo/registry"), Some(CacheUse::Private(".cargo+registry".into())));
    assert_eq!(usage(".asdf"), Some(CacheUse::ReadOnly));
    // Nothing the host executes from is writable by default.
    for never in [".cargo/bin", ".rustup", ".local/bin", ".ssh", ".config"] {
        assert!(!st.array("OCSB_RW_HOME").iter().any(|p| p == never), "{never} must not be writable");
    }
    // Every setting is there, in table order, from the defaults layer.
    let names: Vec<_> = st.iter().map(|(n, _)| n).collect();
    assert_eq!(names, SCHEMA.iter().map(|s| s.name).collect::<Vec<_>>());
    assert!(st.iter().all(|(_, e)| e.origin.layer == Layer::Defaults));
    for extra in ["OCSB_EGRESS_BACKEND", "OCSB_DOCKER", "OCSB_NETLOCK_ACQUIRE"] {
        assert!(st.get(extra).is_some(), "{extra}");
    }
}

#[test]
fn settings_default_name_is_made_safe() {
    for (dir, name) in
        [("My Project!", "My-Project-"), ("a..b", "a.b"), ("-x", "x"), ("web.app_1", "web.app_1")]
    {
        let f = Fixture::with_project(dir);
        let st = f.load().unwrap_or_else(|e| panic!("{dir}: {e}"));
        assert_eq!(st.name(), name, "{dir}");
        assert_eq!(st.worktrees_dir(), f.home().join(format!("src/{dir}-worktrees")));
    }
    let f = Fixture::with_project("!!!");
    let e = f.load().expect_err("no usable name");
    assert!(e.to_string().contains("OCSB_NAME") && e.to_string().contains("empty"), "{e}");
}

#[test]
fn settings_layers_later_wins_and_origins() {
    let f = Fixture::new();
    f.write(Layer::User, "OCSB_NAME=base\nOCSB_WEB_PORT=4001\nOCSB_RW=(a)\nOCSB_WT_BASE=develop\n");
    f.write(Layer::Project, "# project\nOCSB_WEB_PORT=4002\nOCSB_RW+=(b)\nOCSB_WT_PREFIX=$OCSB_NAME-wt-\n");
    f.write(Layer::Local, "OCSB_WEB_PORT=4003\n");
    let st = f.load().expect("loads");
    assert_eq!(st.name(), "base");
    assert_eq!(st.web_port(), 4003);
    assert_eq!(st.rw(), vec![f.project().join("a"), f.project().join("b")]);
    assert_eq!(st.wt_prefix(), "base-wt-");
    assert_eq!(st.wt_base(), Some("develop"));
    // Origins: layer, file (relative to the project, or ~/ under HOME), line, column.
    let o = |n: &str| st.get(n).expect("set").origin.clone();
    assert_eq!(o("OCSB_NAME").layer, Layer::User);
    assert_eq!(o("OCSB_NAME").at.to_string(), "~/.config/opencode-sandbox/sandbox.conf:1:1");
    assert_eq!(o("OCSB_WEB_PORT").layer, Layer::Local);
    assert_eq!(o("OCSB_WEB_PORT").at.to_string(), ".opencode-sandbox/local/sandbox.conf:1:1");
    assert_eq!(o("OCSB_RW").layer, Layer::Project);
    assert_eq!(o("OCSB_RW").to_string(), "project .opencode-sandbox/sandbox.conf:3");
    assert_eq!(o("OCSB_PANEL").to_string(), "defaults");
    // The state directory's default follows OCSB_NAME, whichever layer set it.
    assert_eq!(st.state_dir(), f.home().join(".local/share/opencode-sandbox/base"));
}

#[test]
fn settings_state_dir_default_follows_a_later_name() {
    let f = Fixture::new();
    f.write(Layer::Local, "OCSB_NAME=other\n");
    assert_eq!(f.load().expect("ok").state_dir(), f.home().join(".local/share/opencode-sandbox/other"));
    let mut f = f;
    f.input.env.push(("OCSB_NAME".into(), "fromenv".into()));
    assert_eq!(f.load().expect("ok").state_dir(), f.home().join(".local/share/opencode-sandbox/fromenv"));
    f.write(Layer::Project, "OCSB_STATE_DIR=state\n");
    assert_eq!(f.load().expect("ok").state_dir(), f.project().join("state"));
}

#[test]
fn settings_environment_layer() {
    let mut f = Fixture::new();
    f.write(Layer::Local, "OCSB_WEB_PORT=4296\n");
    f.input.env = vec![
        ("PATH".into(), "/usr/bin".into()),
        ("OCSB_WEB_PORT".into(), "5000".into()),
        ("OCSB_ENV_FILE".into(), "tokens.env".into()),
        ("OCSB_KUBECONFIG".into(), "~/k.yaml".into()),
        ("OCSB_OPENCODE_BIN".into(), "$(id)".into()),
        // Not settings: ignored.
        ("OCSB_PROJECT_DIR".into(), "/elsewhere".into()),
        ("OCSB_NETNS_TESTS".into(), "1".into()),
        ("OCSB_SANDBOX_EARLY".into(), "{}".into()),
        ("OCSB_INTERNAL_STAGE".into(), "2".into()),
        ("OCSB_TEST_X".into(), "y".into()),
    ];
    let st = f.load().expect("loads");
    assert_eq!(st.web_port(), 5000);
    let e = st.get("OCSB_WEB_PORT").expect("set");
    assert_eq!(e.origin.layer, Layer::Environment);
    assert_eq!(e.origin.to_string(), "environment");
    // Relative paths from the environment are relative to the project; `~/` is HOME.
    assert_eq!(st.env_file(), Some(f.project().join("tokens.env")));
    assert_eq!(st.kubeconfig(), Some(f.home().join("k.yaml")));
    // Environment values are literal: nothing is expanded or run.
    assert_eq!(st.scalar("OCSB_OPENCODE_BIN"), "$(id)");
    assert_eq!(st.project_dir(), f.project());
}

#[test]
fn settings_environment_errors_name_the_variable() {
    for (k, v, needle) in [
        ("OCSB_RW", "/x", "OCSB_RW is an array setting; the environment can set only single values"),
        ("OCSB_WEBPORT", "1", "did you mean OCSB_WEB_PORT?"),
        ("OCSB_WEB_PORT", "abc", "`abc` is not a port"),
        ("OCSB_TMP", "nope", "not one of private, shared"),
    ] {
        let mut f = Fixture::new();
        f.input.env = vec![(k.into(), v.into())];
        let e = f.load().expect_err(k);
        assert!(e.to_string().starts_with(&format!("environment variable {k}: ")), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn settings_missing_files_and_unreadable_ones() {
    let f = Fixture::new();
    // `.opencode-sandbox` is a file: the layers below it do not exist.
    std::fs::write(f.project().join(".opencode-sandbox"), "not a dir").expect("write");
    f.load().expect("missing layers are fine");
    std::fs::remove_file(f.project().join(".opencode-sandbox")).expect("rm");
    // A directory where the file should be cannot be read: an I/O error naming the path.
    std::fs::create_dir_all(f.project().join(".opencode-sandbox/sandbox.conf")).expect("mkdir");
    match f.load() {
        Err(Error::Io { path, .. }) => assert!(path.ends_with(".opencode-sandbox/sandbox.conf")),
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn settings_invalid_utf8_names_line_and_column() {
    let f = Fixture::new();
    let p = f.write(Layer::Project, "");
    std::fs::write(&p, b"OCSB_NAME=a\nOCSB_WT_PREFIX=ab\xff\n").expect("write");
    let e = f.load().expect_err("not utf-8");
    assert_eq!(where_(&e).0, 2);
    assert_eq!(where_(&e).1, 18);
    assert!(
        e.to_string().starts_with(".opencode-sandbox/sandbox.conf:2:18: the file is not valid UTF-8"),
        "{e}"
    );
}

#[test]
fn settings_errors_name_the_layer_file() {
    let f = Fixture::new();
    f.write(Layer::User, "OCSB_PANEL=2\n");
    let e = f.load().expect_err("bad");
    assert!(e.to_string().starts_with("~/.config/opencode-sandbox/sandbox.conf:1:12: OCSB_PANEL"), "{e}");
    f.write(Layer::User, "");
    f.write(Layer::Local, "\nOCSB_NAME=$(id)\n");
    let e = f.load().expect_err("bad");
    assert!(
        e.to_string().starts_with(".opencode-sandbox/local/sandbox.conf:2:11: command substitution"),
        "{e}"
    );
}

#[test]
fn settings_path_resolution() {
    let f = Fixture::new();
    let st = f
        .load_project(
            "OCSB_RW=(rel ./dot/./x ~/h /abs//y ../up \"~/quoted\" \"$OCSB_PROJECT_DIR/p\")\n\
             OCSB_HIDE=(secret)\nOCSB_SKILL_DIRS=(skills)\nOCSB_ENV_FILE=~/.config/shop/agent.env\n\
             OCSB_OPENCODE_BIN=bin/opencode\nOCSB_OPENCODE_CONFIG=oc.jsonc\nOCSB_WORKTREES_DIR=../wt\n\
             OCSB_RW_HOME=(.cache .npm)\n",
        )
        .expect("loads");
    let p = f.project();
    let h = f.home();
    assert_eq!(
        st.rw(),
        vec![
            p.join("rel"),
            p.join("dot/x"),
            h.join("h"),
            PathBuf::from("/abs/y"),
            p.join("../up"),
            h.join("quoted"),
            p.join("p")
        ]
    );
    assert_eq!(st.hide(), vec![p.join("secret")]);
    assert_eq!(st.skill_dirs(), vec![p.join("skills")]);
    assert_eq!(st.env_file(), Some(h.join(".config/shop/agent.env")));
    assert_eq!(st.opencode_bin(), p.join("bin/opencode"));
    assert_eq!(st.opencode_config(), Some(p.join("oc.jsonc")));
    assert_eq!(st.worktrees_dir(), p.join("../wt"));
    assert_eq!(st.rw_home(), vec![h.join(".cache"), h.join(".npm")]);
    // The *_HOME lists keep their relative form in the value.
    assert_eq!(st.get("OCSB_RW_HOME").expect("set").value, a(&[".cache", ".npm"]));
    // An entry a layer adds is shared as asked; `OCSB_CACHES=shared` shares the defaults too.
    let st = f.load_project("OCSB_RW_HOME+=(.mytool)\n").expect("loads");
    assert!(st.home_dirs().contains(&(h.join(".mytool"), CacheUse::Shared)));
    assert!(st.home_dirs().contains(&(h.join(".npm"), CacheUse::Private(".npm".into()))));
    let st = f.load_project("OCSB_CACHES=shared\n").expect("loads");
    assert!(st.home_dirs().iter().all(|(_, u)| *u == CacheUse::Shared));
    // Non-path settings are not touched.
    let st = f.load_project("OCSB_WT_PREFIX=rel\nOCSB_SKILLS=(x)").expect("loads");
    assert_eq!(st.wt_prefix(), "rel");
    assert_eq!(st.skills(), ["x"]);
}

#[test]
fn settings_config_output_and_origins() {
    let f = Fixture::new();
    f.write(Layer::Project, "OCSB_WEB_PORT=4296\nOCSB_HIDE=('a b' \"it's\")\nOCSB_WT_PREFIX=\n");
    let mut f = f;
    f.input.env.push(("OCSB_EGRESS_PORT".into(), "3138".into()));
    let st = f.load().expect("loads");
    let plain = render(&st, false);
    let lines: Vec<&str> = plain.lines().collect();
    // One assignment per setting; long arrays take one line per element.
    assert_eq!(lines.iter().filter(|l| l.starts_with("OCSB_")).count(), SCHEMA.len());
    assert!(plain.contains("OCSB_HIDE_HOME=(\n  .gnupg\n  .password-store\n"), "{plain}");
    assert_eq!(lines[0], "OCSB_NAME=shop");
    assert!(lines.contains(&"OCSB_WEB_PORT=4296"));
    assert!(lines.contains(&"OCSB_EGRESS_PORT=3138"));
    assert!(lines.contains(&"OCSB_WT_PREFIX=''"));
    assert!(lines.contains(&"OCSB_ENV=()"));
    let p = f.project().display().to_string();
    assert!(plain.contains(&format!("OCSB_HIDE=('{p}/a b' '{p}/it'\\''s')\n")), "{plain}");
    assert!(plain.contains("'.config/Bitwarden CLI'"), "{plain}");
    let with = render(&st, true);
    assert!(with.contains("OCSB_WEB_PORT=4296  # project .opencode-sandbox/sandbox.conf:1\n"), "{with}");
    assert!(with.contains("OCSB_EGRESS_PORT=3138  # environment\n"), "{with}");
    assert!(with.contains("OCSB_PANEL=1  # defaults\n"), "{with}");
}

/// `ocsb config` output read back by the parser gives the same values.
#[test]
fn settings_config_output_round_trips() {
    let f = Fixture::new();
    f.write(
        Layer::User,
        "OCSB_ENV=(\"A=it's a \\\"test\\\"\" 'B=$HOME `x` \\' 'C=multi\nline' 'D=é€ #x')\n\
         OCSB_WT_BASE='feature/x'\nOCSB_WT_SLUG_REGEX='^(?:feat|fix)-([A-Z]+-[0-9]+)$'\n\
         OCSB_RW=('with blank' '*glob*' '~tilde' '#hash' 'a=b')\nOCSB_TMP=shared\n",
    );
    let first = f.load().expect("loads");
    let printed = render(&first, true);
    // Read the printed text back as the only layer.
    f.write(Layer::User, "");
    f.write(Layer::Project, &printed);
    let second = f.load().expect("the printed config parses");
    for ((n1, e1), (_, e2)) in first.iter().zip(second.iter()) {
        assert_eq!(e1.value, e2.value, "{n1}");
    }
    assert_eq!(second.get("OCSB_TMP").expect("set").origin.layer, Layer::Project);
}

#[test]
fn settings_quote_is_minimal_and_safe() {
    for (v, q) in [
        ("abc", "abc"),
        ("", "''"),
        ("/a/b-c_d.e:f@g%h+i,j=k", "/a/b-c_d.e:f@g%h+i,j=k"),
        ("a b", "'a b'"),
        ("it's", r"'it'\''s'"),
        ("~x", "'~x'"),
        ("#x", "'#x'"),
        ("$x", "'$x'"),
        ("é", "'é'"),
    ] {
        assert_eq!(quote(v), q, "{v:?}");
    }
}

/// Nothing in a settings file is executed: command substitutions in every layer and every
/// position are refused, and their side effect never happens.
#[test]
fn settings_nothing_is_executed() {
    let f = Fixture::new();
    let marker = f.dir.path().join("pwned");
    let m = marker.display();
    let attempts = [
        format!("OCSB_NAME=$(touch {m})"),
        format!("OCSB_NAME=`touch {m}`"),
        format!("OCSB_NAME=\"$(touch {m})\""),
        format!("OCSB_RW=($(touch {m}))"),
        format!("OCSB_NAME=${{X:-$(touch {m})}}"),
        format!("OCSB_WEB_PORT=$((1+$(touch {m})))"),
        format!("touch {m}"),
        format!("OCSB_NAME=a; touch {m}"),
        format!("OCSB_NAME=a && touch {m}"),
        format!("OCSB_NAME=a | touch {m}"),
        format!("OCSB_NAME=a > {m}"),
        format!("source {m}"),
        format!("if touch {m}; then :; fi"),
        format!("f() {{ touch {m}; }}\nf"),
        format!("OCSB_NAME=a touch {m}"),
        format!("eval 'touch {m}'"),
    ];
    for layer in [Layer::User, Layer::Project, Layer::Local] {
        for text in &attempts {
            f.write(layer, text);
            let e = f.load().expect_err(text);
            assert!(matches!(e, Error::Input { .. }), "{text}: {e}");
            assert!(!marker.exists(), "{text} ran a command");
            f.write(layer, "");
        }
    }
    let mut f = f;
    f.input.env = vec![("OCSB_OPENCODE_BIN".into(), format!("$(touch {m})"))];
    f.load().expect("the environment value is taken literally");
    assert!(!marker.exists());
}

#[test]
fn settings_load_input_from_process_collects_ocsb_variables() {
    // The test process's own environment: only OCSB_* variables are collected, and a missing or
    // relative HOME is an error rather than a guess.
    let home_ok = std::env::var_os("HOME").is_some_and(|h| PathBuf::from(h).is_absolute());
    match crate::settings::LoadInput::from_process(PathBuf::from("/p")) {
        Ok(input) => {
            assert!(home_ok);
            assert!(input.env.iter().all(|(k, _)| k.starts_with("OCSB_")));
            assert!(input.user_config_dir.ends_with("opencode-sandbox"));
            assert_eq!(input.project_dir, PathBuf::from("/p"));
        }
        Err(e) => {
            assert!(!home_ok, "{e}");
            assert!(e.to_string().contains("HOME"), "{e}");
        }
    }
}

/// The `ocsb init` template loads as is, and with every setting line uncommented.
#[test]
fn settings_template_loads_commented_and_uncommented() {
    let f = Fixture::new();
    let t = crate::settings::print::template();
    f.load_project(&t).expect("the template loads");
    for spec in SCHEMA {
        assert!(t.contains(&format!("\n#{}", spec.name)), "{} is in the template", spec.name);
    }
    let uncommented = t.replace("\n#OCSB_", "\nOCSB_");
    let st = f.load_project(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
    assert_eq!(st.name(), "my-project");
    assert_eq!(st.web_port(), 4196);
    assert_eq!(st.array("OCSB_HIDE_HOME").len(), crate::settings::HIDE_HOME.len() + 1);
    assert_eq!(st.env_vars(), vec![("SHOP_ENV".to_string(), "dev".to_string())]);
}
