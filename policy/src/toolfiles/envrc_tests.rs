use super::*;
use proptest::prelude::*;
use std::path::Path;

/// The paths `loads` finds, with `/` appended to directories.
/// What `text` loads for certain (a bare word that may name a file is in [`maybe`]).
fn found(text: &str) -> Vec<String> {
    loads(text)
        .into_iter()
        .filter(|l| !l.maybe)
        .map(|l| {
            let p = l.path.to_string_lossy().into_owned();
            if l.dir { format!("{p}/") } else { p }
        })
        .collect()
}

fn has(text: &str, want: &[&str]) {
    let got = found(text);
    for w in want {
        assert!(got.iter().any(|g| g == w), "{text:?}: {w} not found in {got:?}");
    }
}

#[test]
fn dotenv_loads_the_file_named_or_dot_env() {
    assert_eq!(found("dotenv"), [".env"]);
    assert_eq!(found("dotenv_if_exists"), [".env"]);
    assert_eq!(found("dotenv .env.local"), [".env.local"]);
    assert_eq!(found("dotenv_if_exists config/dev.env"), ["config/dev.env"]);
    assert!(found("dotenv \"$ENV_FILE\"").is_empty(), "a variable is no path this can resolve");
    let l = loads("dotenv");
    assert!(l[0].what.contains("dotenv"), "{l:?}");
}

#[test]
fn source_env_and_source_up() {
    has("source_env ../shared", &["../shared"]);
    has("source_env_if_exists .envrc.private", &[".envrc.private"]);
    assert!(found("source_up").is_empty(), "the .envrc files above are in the registry");
    assert!(found("source_up_if_exists").is_empty());
    // In any directory above, not only the first.
    let up = found("source_up .envrc.team");
    assert_eq!(up.first().map(String::as_str), Some("../.envrc.team"));
    assert!(up.contains(&"../../../.envrc.team".to_string()), "{up:?}");
    assert!(up.iter().all(|p| p.ends_with("/.envrc.team")));
}

fn maybe(text: &str) -> Vec<String> {
    loads(text).into_iter().filter(|l| l.maybe).map(|l| l.path.to_string_lossy().into_owned()).collect()
}

/// The spellings a first reading missed: a command substitution in quotes is parsed as a
/// command, `$(pwd)` is the directory, a `PATH` value's parts are directories however spelled,
/// and a bare argument of a command may name a file (held when one exists).
#[test]
fn substitutions_pwd_path_parts_and_bare_arguments() {
    assert_eq!(found(r#"eval "$(cat tools/env.sh)""#), ["tools/env.sh"]);
    assert_eq!(found(r#"eval "$(cat "$(echo x)" tools/a.sh)""#), ["tools/a.sh"]);
    assert_eq!(found(r#"dotenv_if_exists "$(pwd)/conf/app.env""#), ["conf/app.env"]);
    assert_eq!(found("dotenv_if_exists $(pwd)/conf/app.env"), ["conf/app.env"]);
    assert_eq!(found(r#"export PATH="$PWD/bin2:$PATH""#), ["bin2/"]);
    assert_eq!(found("PATH=bin3:$PATH make"), ["bin3/"]);
    assert_eq!(maybe("sh setup.sh"), ["setup.sh"]);
    assert_eq!(maybe("python3 -m tool --flag x=y"), ["tool"]);
    assert!(maybe("export A=b").is_empty(), "an assignment's value is no bare argument");
    assert!(maybe("use flake").is_empty() && maybe("dotenv").is_empty(), "directives are read as such");
}

#[test]
fn watch_file_and_watch_dir() {
    assert_eq!(found("watch_file a.nix b/c.nix"), ["a.nix", "b/c.nix"]);
    assert_eq!(found("watch_dir nix"), ["nix/"]);
}

#[test]
fn path_add_path_add_var_and_load_prefix_are_directories() {
    assert_eq!(found("PATH_add bin"), ["bin/"]);
    assert_eq!(found("PATH_add bin scripts"), ["bin/", "scripts/"]);
    assert_eq!(found("path_add PYTHONPATH lib"), ["lib/"]);
    assert_eq!(found("load_prefix vendor/local"), ["vendor/local/"]);
    assert!(loads("PATH_add bin")[0].what.contains("PATH_add"));
    assert!(found("PATH_rm bin").is_empty(), "taking a directory off PATH runs nothing");
    assert!(found("PATH_add $HOME/bin").is_empty());
}

#[test]
fn layout_keeps_its_environment_in_dot_direnv_and_node_puts_bin_on_path() {
    assert_eq!(found("layout python3"), [".direnv/"]);
    assert_eq!(found("layout_poetry"), [".direnv/"]);
    assert_eq!(found("layout node"), [".direnv/", "node_modules/.bin/"]);
}

#[test]
fn use_nix_use_flake_and_use_devenv() {
    assert_eq!(found("use nix"), ["shell.nix", "default.nix"]);
    assert_eq!(found("use_nix"), ["shell.nix", "default.nix"]);
    assert_eq!(found("use nix dev.nix"), ["dev.nix"]);
    assert_eq!(found("use nix --arg x y"), ["shell.nix", "default.nix"]);
    assert!(found("use nix -p hello").is_empty(), "packages from nixpkgs: nothing of the directory's");
    assert_eq!(found("use flake"), ["flake.nix", "flake.lock"]);
    assert_eq!(found("use flake .#dev"), ["flake.nix", "flake.lock"]);
    assert_eq!(found("use flake ./sub#dev"), ["./sub/flake.nix", "./sub/flake.lock"]);
    assert_eq!(found("use flake path:tools"), ["tools/flake.nix", "tools/flake.lock"]);
    assert!(found("use flake github:o/r").is_empty(), "a remote flake: nothing of the directory's");
    has("use devenv", &["devenv.nix", "devenv.yaml", "devenv.lock"]);
    assert!(found("use node 20").is_empty(), "a version, not a file");
}

#[test]
fn bash_source_and_dot() {
    assert_eq!(found("source scripts/env.sh"), ["scripts/env.sh"]);
    assert_eq!(found(". ./env.sh arg"), ["./env.sh"]);
    assert_eq!(found("source env.sh"), ["env.sh"], "sourced, even without a /");
}

#[test]
fn any_other_word_spelled_as_a_path_is_something_it_runs() {
    assert_eq!(found("./scripts/setup.sh"), ["./scripts/setup.sh"]);
    assert_eq!(found("bash tools/env.sh --quiet"), ["tools/env.sh"]);
    assert_eq!(found("export CONFIG=./conf/app.toml"), ["./conf/app.toml"]);
    assert_eq!(found("X=.hidden cmd"), [".hidden"]);
    assert_eq!(found("export PATH=$PWD/tools/bin:$PATH"), ["tools/bin/"]);
    assert_eq!(found("export PATH=\"${PWD}/node_modules/.bin:$PATH\""), ["node_modules/.bin/"]);
    assert_eq!(
        found("export X=$(cat ./secret/path)"),
        ["./secret/path"],
        "a command substitution is a command"
    );
    assert!(found("echo hello world").is_empty());
    assert!(found("curl https://example.com/install.sh").is_empty(), "a URL is no path");
    assert!(found("cat ~/x/y").is_empty(), "the home is not the directory");
    assert!(found("cat $HOME/x/y").is_empty());
    assert!(found("make -C . --jobs=4").is_empty());
    assert!(found("cd ..").is_empty());
}

#[test]
fn pwd_prefixes_are_the_directory() {
    assert_eq!(found("PATH_add \"$PWD/bin\""), ["bin/"]);
    assert_eq!(found("PATH_add ${PWD}/bin"), ["bin/"]);
    assert_eq!(found("source_env $PWD"), ["."]);
    assert!(found("PATH_add $OTHER/bin").is_empty());
}

#[test]
fn comments_quotes_continuations_and_separators() {
    assert!(found("# source ./evil.sh\n  # PATH_add bin").is_empty(), "comments");
    assert_eq!(found("PATH_add bin # and ./not-this"), ["bin/"]);
    assert_eq!(found("echo a#./b"), ["a#./b"], "a # inside a word is no comment");
    assert_eq!(found("PATH_add 'my bin' \"other dir\""), ["my bin/", "other dir/"]);
    assert_eq!(found("PATH_add 'it''s'"), ["its/"]);
    assert_eq!(found("PATH_add \\\n  bin"), ["bin/"], "a continued line");
    assert_eq!(
        found("dotenv .env.a && PATH_add bin; source_env ../x || watch_file f | true & layout node"),
        [".env.a", "bin/", "../x", "f", ".direnv/", "node_modules/.bin/"]
    );
    assert_eq!(found("if has nix; then\n  use flake\nfi"), ["flake.nix", "flake.lock"]);
    assert_eq!(found("{ source_env ./a; }"), ["./a"]);
    assert_eq!(found("echo \"unterminated ./x"), ["unterminated ./x"], "an open quote runs to the end");
}

#[test]
fn each_path_once_and_relative_as_written() {
    let l = loads("PATH_add bin\nPATH_add bin\nsource /opt/x.sh");
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!(l[1].path, Path::new("/opt/x.sh"), "absolute kept: the enforcement checks where it lies");
}

#[test]
fn work_is_bounded() {
    let big = "PATH_add d\n".repeat(300_000);
    let l = loads(&big);
    assert_eq!(l.len(), 1);
    let many: String = (0..10_000).map(|i| format!("source ./s{i}\n")).collect();
    assert_eq!(loads(&many).len(), MAX_LOADS);
    // A text longer than the cap is cut on a character boundary, not refused.
    let wide = "é".repeat(MAX_TEXT);
    let _ = loads(&wide);
}

#[test]
fn loads_dotenv_reads_the_global_table() {
    assert!(loads_dotenv("[global]\nload_dotenv = true\n"));
    assert!(!loads_dotenv("[global]\nload_dotenv = false\n"));
    assert!(!loads_dotenv(""));
    assert!(!loads_dotenv("[whitelist]\nprefix = [\"/home/u/src\"]\n"));
    assert!(!loads_dotenv("load_dotenv = true\n"), "outside [global] direnv ignores it");
    assert!(!loads_dotenv("[global]\nload_dotenv = \"yes\"\n"), "not a boolean: direnv refuses the file");
    assert!(
        loads_dotenv("[global\nload_dotenv = true\n"),
        "a file that is no TOML and says it: taken as loading"
    );
    assert!(!loads_dotenv("[global\nstrict_env = true\n"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes: no panic, and every path is one the text spelled.
    #[test]
    fn loads_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        for l in loads(&text) {
            prop_assert!(!l.path.as_os_str().is_empty());
        }
    }

    /// Text made of the shell's own characters, where a tokenizer goes wrong.
    #[test]
    fn loads_never_panics_on_shell_like_text(text in "[a-z_ ./$#'\"\\\\;&|(){}`~=:\n\t-]{0,300}") {
        let _ = loads(&text);
    }

    #[test]
    fn loads_dotenv_never_panics(text in "\\PC{0,200}") {
        let _ = loads_dotenv(&text);
    }
}

#[test]
fn keywords_and_prefixes_before_a_directive() {
    assert_eq!(found("if has nix; then use flake; fi"), ["flake.nix", "flake.lock"]);
    assert_eq!(found("if [ -f .env.dev ]; then dotenv .env.dev; fi"), [".env.dev"]);
    assert_eq!(found("FOO=./x PATH_add bin"), ["bin/", "./x"]);
    assert_eq!(found("command source ./lib.sh"), ["./lib.sh"]);
}
