//! Files that host tools act on by themselves, at any depth, end to end with the real tools:
//! direnv's hook on `cd` (what an allowed `.envrc` loads: `.env`, `.envrc.local`, a `bin` put
//! on PATH), rustup's proxies (`rustc --version`, as shell prompts run it) obeying a
//! `rust-toolchain.toml` or `rust-toolchain` with `path = …`, editors' project settings, and
//! git through the import gate.
//!
//! Each plant is made from inside `ocsb exec`, at a checkout's top and three directories down
//! (`a/b/c`); a tool file the user had before the session sits three down too (`d/e/f`). On the
//! host the user then does what the tool's trigger does (`cd` with direnv's hook then `git
//! status`, `rustc --version` through a rustup proxy with a rustup home of the test's own, `git
//! reset --hard` onto the branch): a marker `PWNED_*` in the home would say it ran the agent's
//! code. The positive controls show each trigger works: the same plant made by the user on the
//! host creates its marker (`CONTROL_*`), and `OCSB_RW_TOOL_FILES` lets the agent edit what it
//! names. Existing files are read-only inside (the error is asserted); new ones are moved aside
//! within a second (measured) where a prompt would run them on `cd`, reported where an editor
//! would, and `ocsb audit` lists each with the tool that would act on it.
//!
//! As the ordinary user `ocsb-test` in network namespaces the harness creates, in both network
//! modes ([`both_modes`]).

use super::agent_git::both_modes;
use crate::support::sandbox::{World, no_markers, shell_quote};

/// Every line of `want` is a line of `out` and no line of `never` is: all those amiss named at
/// once (which protections hold and which do not, in one run).
pub(crate) fn expect<W: AsRef<str>>(out: &str, err: &str, want: &[W], never: &[&str]) {
    let line = |l: &str| out.lines().any(|x| x.trim() == l);
    let missing: Vec<&str> = want.iter().map(AsRef::as_ref).filter(|l| !line(l)).collect();
    let unwanted: Vec<&str> = never.iter().copied().filter(|l| line(l)).collect();
    assert!(
        missing.is_empty() && unwanted.is_empty(),
        "missing lines {missing:?}; lines that must not be there {unwanted:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
}

/// The machine's rustup, run by the tests as the proxy `rustc` (rustup acts as the tool its
/// program is named after). Fails, never skips, when there is none.
fn rustup() -> String {
    let mut dirs: Vec<std::path::PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    dirs.extend(std::env::var_os("CARGO_HOME").map(|c| std::path::PathBuf::from(c).join("bin")));
    dirs.extend(std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo/bin")));
    dirs.push("/root/.cargo/bin".into());
    let found = dirs.iter().map(|d| d.join("rustup")).find(|p| p.is_file());
    let path = found.expect("rustup not found (PATH, $CARGO_HOME/bin, ~/.cargo/bin): the tool-file tests run it as the proxy rustc");
    path.display().to_string()
}

/// Shell lines for the rustup scenarios: the proxy `$RB/rustc` (a copy of the machine's rustup,
/// readable by the test user), and `R DIR`, which runs `rustc --version` in DIR as the user with
/// a rustup home of the test's own (no toolchain, no default: only a toolchain file there names
/// one) and prints its first line.
pub(crate) fn rustup_lines() -> String {
    format!(
        r#"RB="$HOME/../rb"; RH="$HOME/../rh"; mkdir -p "$RB" "$RH/rustup" "$RH/cargo"; cp {rustup} "$RB/rustc"; chmod -R a+rx "$RB"; chown -R 1990 "$RH"
        R() {{ U env RUSTUP_HOME="$RH/rustup" CARGO_HOME="$RH/cargo" RUSTUP_AUTO_INSTALL=0 sh -c 'cd "$1" && exec "$2" --version' _ "$1" "$RB/rustc" 2>&1 | head -1; }}
        "#,
        rustup = shell_quote(&rustup()),
    )
}

/// Shell lines: `moved PATH` when PATH is gone and a `PATH.ocsb-planted-*` took its place,
/// `in-place PATH` when it is still there; `A PATH TOOL` prints `audit-lists PATH` when a line
/// of `audit.out` names PATH (or where it was moved) together with TOOL (an extended regex,
/// without regard to case).
const CHECKS: &str = r#"M() { for f in "$@"; do
          if test -e "$f" || test -L "$f"; then echo "in-place $f"
          elif ls -d "$f".ocsb-planted-* >/dev/null 2>&1; then echo "moved $f"; else echo "gone $f"; fi; done; }
        A() { grep -E "$P/${1//./\\.}(\.ocsb-planted-[0-9-]+)?( |\$)" audit.out | grep -qiE "$2" && echo "audit-lists $1"; }
        "#;

/// direnv: the user's `.envrc` at the top and at `a/b/c` (allowed with `direnv allow` before
/// the session) loads `.env` (`dotenv`), `.envrc.local` (`source_env_if_exists`) and puts
/// `bin` on PATH (`PATH_add`). Inside, the agent cannot change the `.env` the user has at the
/// top (the write fails read-only, the unlink fails) nor the user's `a/b/c/.envrc`; what it creates (`a/b/c/.env` exporting
/// `GIT_CONFIG_*` with an fsmonitor, each `.envrc.local`, each `bin/git`, a new `d/e/f/.envrc`)
/// is moved aside, and `ocsb audit` lists each with direnv. On the host, `cd` with direnv's hook
/// and the prompt's `git status` in each directory run nothing of it; the same files made by
/// the user run (the controls).
#[test]
fn direnv_loads_nothing_the_agent_wrote_at_any_depth() {
    let body = format!(
        r##"{CHECKS}U mkdir -p a/b/c d/e/f
        U sh -c 'printf "dotenv\nsource_env_if_exists .envrc.local\nPATH_add bin\n" | tee .envrc > a/b/c/.envrc; echo FOO=user > .env'
        U direnv allow . 2>/dev/null; U direnv allow a/b/c 2>/dev/null
        D() {{ U bash -c 'cd "$1" && eval "$(direnv export bash 2>/dev/null)"; git status >/dev/null 2>&1; echo "FOO=$FOO"' _ "$1"; }}
        echo "before-top $(D "$P")"
        X 'python3 '"$PROBE"' write .env | tail -1 | sed "s/^/top-env-write /"
           python3 '"$PROBE"' unlink .env | tail -1 | grep -q "^OK" && echo top-env-unlink-allowed || echo top-env-unlink-refused
           python3 '"$PROBE"' write a/b/c/.envrc | tail -1 | sed "s/^/abc-envrc-write /"
           plant() {{
             printf "GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_VALUE_0=\"touch $HOME/PWNED_env_$2; false\"\n" > $1/.env
             printf "touch $HOME/PWNED_local_$2\n" > $1/.envrc.local
             mkdir -p $1/bin; printf "#!/bin/sh\ntouch $HOME/PWNED_bin_$2\nexec /usr/bin/git \"\$@\"\n" > $1/bin/git; chmod +x $1/bin/git
           }} 2>/dev/null
           plant . top; plant a/b/c abc
           printf "touch $HOME/PWNED_envrc_def\n" > d/e/f/.envrc
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        for d in "$P" "$P/a/b/c" "$P/d/e/f"; do D "$d" >/dev/null; done
        echo "after-top $(D "$P")"
        M a/b/c/.env .envrc.local a/b/c/.envrc.local bin a/b/c/bin d/e/f/.envrc
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; cat audit.out >&2
        for f in a/b/c/.env .envrc.local a/b/c/.envrc.local bin a/b/c/bin d/e/f/.envrc; do A "$f" direnv; done
        control() {{ U sh -c "printf 'GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_VALUE_0=\"touch $HOME/CONTROL_env_$2; false\"\n' > $1/.env
             printf 'touch $HOME/CONTROL_local_$2\n' > $1/.envrc.local
             mkdir -p $1/bin; printf '#!/bin/sh\ntouch $HOME/CONTROL_bin_$2\nexec /usr/bin/git \"\$@\"\n' > $1/bin/git; chmod +x $1/bin/git"; }}
        control . top; control a/b/c abc
        U sh -c 'printf "touch $HOME/CONTROL_envrc_def\n" > d/e/f/.envrc'; U direnv allow d/e/f 2>/dev/null
        for d in "$P" "$P/a/b/c" "$P/d/e/f"; do D "$d" >/dev/null; done
        for m in env_top local_top bin_top env_abc local_abc bin_abc envrc_def; do test -e "$HOME/CONTROL_$m" && echo "control $m"; done"##
    );
    both_modes(&body, |w: &World, out, err| {
        let mut want: Vec<String> = [
            "before-top FOO=user",
            "exec 0",
            "top-env-write ERR EROFS",
            "top-env-unlink-refused",
            "abc-envrc-write ERR EROFS",
            // The user's `.env` still loads after the session.
            "after-top FOO=user",
            "audit 1",
        ]
        .map(String::from)
        .to_vec();
        for f in ["a/b/c/.env", ".envrc.local", "a/b/c/.envrc.local", "bin", "a/b/c/bin", "d/e/f/.envrc"] {
            want.extend([format!("moved {f}"), format!("audit-lists {f}")]);
        }
        for m in ["env_top", "local_top", "bin_top", "env_abc", "local_abc", "bin_abc", "envrc_def"] {
            want.push(format!("control {m}"));
        }
        expect(out, err, &want, &[]);
        no_markers(w, out, err);
    });
}

/// rustup: a `rust-toolchain.toml` with `[toolchain] path = …` (a directory the agent made in
/// the project, whose `bin/rustc` would make a marker) new at the top and at `a/b/c`, and a
/// `rust-toolchain` (the older name, same syntax) at `l/m/n`, are moved aside and listed by
/// `ocsb audit` with rustup; the user's own `d/e/f/rust-toolchain.toml` is read-only inside.
/// On the host `rustc --version` through a rustup proxy in each directory runs nothing of the
/// agent's; the user's file still works, and the same files written by the user run their
/// toolchain (the controls print its version line and make their marker).
#[test]
fn rustup_runs_no_toolchain_the_agent_named_at_any_depth() {
    let body = format!(
        r##"{rust}{CHECKS}U mkdir -p a/b/c d/e/f l/m/n ok/bin
        U sh -c 'printf "#!/bin/sh\necho user-rustc\n" > ok/bin/rustc; chmod +x ok/bin/rustc
           printf "[toolchain]\npath = \"%s/ok\"\n" "$PWD" > d/e/f/rust-toolchain.toml'
        echo "before-def $(R d/e/f)"
        X 'mkdir -p tc/bin; printf "#!/bin/sh\ntouch \"$HOME/PWNED_rustc\$(pwd | tr / _)\"\necho agent-rustc\n" > tc/bin/rustc; chmod +x tc/bin/rustc
           t="[toolchain]\npath = \"'"$P"'/tc\"\n"
           printf "$t" > rust-toolchain.toml; printf "$t" > a/b/c/rust-toolchain.toml; printf "$t" > l/m/n/rust-toolchain
           python3 '"$PROBE"' write d/e/f/rust-toolchain.toml | tail -1 | sed "s/^/def-write /"
           python3 '"$PROBE"' unlink d/e/f/rust-toolchain.toml | tail -1 | grep -q "^OK" && echo def-unlink-allowed || echo def-unlink-refused
           printf "$t" > d/e/f/rust-toolchain.toml 2>/dev/null || echo def-payload-refused
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        for d in . a/b/c l/m/n; do echo "host-$d $(R "$d")"; done
        echo "after-def $(R d/e/f)"
        M rust-toolchain.toml a/b/c/rust-toolchain.toml l/m/n/rust-toolchain
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; cat audit.out >&2
        for f in rust-toolchain.toml a/b/c/rust-toolchain.toml l/m/n/rust-toolchain; do A "$f" rustup; done
        U sh -c 'mkdir -p mine/bin; printf "#!/bin/sh\ntouch \"\$HOME/CONTROL_rustc\$(pwd | tr / _)\"\necho user-planted-rustc\n" > mine/bin/rustc; chmod +x mine/bin/rustc
           t="[toolchain]\npath = \"$PWD/mine\"\n"
           printf "$t" > rust-toolchain.toml; printf "$t" > a/b/c/rust-toolchain.toml; printf "$t" > l/m/n/rust-toolchain; printf "$t" > d/e/f/rust-toolchain.toml'
        for d in . a/b/c l/m/n d/e/f; do
          o=$(R "$d"); m="$HOME/CONTROL_rustc$(cd "$d" && pwd | tr / _)"
          test "$o" = user-planted-rustc && test -e "$m" && echo "control $d"; done"##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        let mut want: Vec<String> = [
            "before-def user-rustc",
            "exec 0",
            "def-write ERR EROFS",
            "def-unlink-refused",
            "def-payload-refused",
            "after-def user-rustc",
            "audit 1",
        ]
        .map(String::from)
        .to_vec();
        for f in ["rust-toolchain.toml", "a/b/c/rust-toolchain.toml", "l/m/n/rust-toolchain"] {
            want.extend([format!("moved {f}"), format!("audit-lists {f}")]);
        }
        for d in [".", "a/b/c", "l/m/n", "d/e/f"] {
            want.push(format!("control {d}"));
        }
        expect(out, err, &want, &["host-. agent-rustc", "host-a/b/c agent-rustc", "host-l/m/n agent-rustc"]);
        no_markers(w, out, err);
    });
}

/// A `rust-toolchain.toml` the agent makes three directories down is moved aside within a
/// second, measured on the host from the agent's own timestamp written right after it made the
/// file to the host's first sight of `rust-toolchain.toml.ocsb-planted-*`; meanwhile and after,
/// `rustc --version` there runs nothing of the agent's.
#[test]
fn a_toolchain_file_planted_inside_is_moved_aside_within_a_second() {
    let body = format!(
        r##"{rust}U mkdir -p a/b/c
        X 'mkdir -p tc/bin; printf "#!/bin/sh\ntouch $HOME/PWNED_rustc_timing\necho agent-rustc\n" > tc/bin/rustc; chmod +x tc/bin/rustc
           printf "[toolchain]\npath = \"'"$P"'/tc\"\n" > a/b/c/rust-toolchain.toml; date +%s.%N > .t0.w; mv .t0.w .t0; sleep 2' 2>exec.err &
        pid=$!
        python3 -c '
import glob, os, time
end = time.time() + 6
while not os.path.exists(".t0") and time.time() < end: time.sleep(0.002)
t1 = None
while time.time() < end:
    if glob.glob("a/b/c/rust-toolchain.toml.ocsb-planted-*"): t1 = time.time(); break
    time.sleep(0.002)
t0 = float(open(".t0").read()) if os.path.exists(".t0") else None
if t0 is None or t1 is None: print("latency-ms none"); print("within-1s False")
else: d = t1 - t0; print("latency-ms", round(d * 1000)); print("within-1s", d < 1.0)'
        echo "during $(R a/b/c)"
        wait $pid; echo "exec $?"; cat exec.err >&2
        echo "after $(R a/b/c)""##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        expect(out, err, &["within-1s True", "exec 0"], &["during agent-rustc", "after agent-rustc"]);
        no_markers(w, out, err);
    });
}

/// Editor files act when the user opens the directory, not on `cd`: a new
/// `a/b/c/.vscode/tasks.json` (a task that runs on folder open) and `.helix/languages.toml` (a
/// language server) are reported on the terminal while the session runs and listed by `ocsb
/// audit` with the editor, and stay where they are; the user's existing `d/e/f/.vscode` is
/// read-only inside (its file, a new file in it) and cannot be renamed away.
#[test]
fn editor_files_are_reported_and_existing_ones_read_only_at_any_depth() {
    let body = format!(
        r##"{CHECKS}U mkdir -p a/b/c d/e/f/.vscode; U sh -c 'echo "{{}}" > d/e/f/.vscode/settings.json'
        X 'mkdir -p a/b/c/.vscode .helix
           printf "{{\"version\": \"2.0.0\", \"tasks\": [{{\"label\": \"x\", \"type\": \"shell\", \"command\": \"touch $HOME/PWNED_vscode\", \"runOptions\": {{\"runOn\": \"folderOpen\"}}}}]}}\n" > a/b/c/.vscode/tasks.json
           printf "[language-server.x]\ncommand = \"sh\"\nargs = [\"-c\", \"touch $HOME/PWNED_helix\"]\n" > .helix/languages.toml
           python3 '"$PROBE"' write d/e/f/.vscode/settings.json | tail -1 | sed "s/^/def-settings /"
           python3 '"$PROBE"' write d/e/f/.vscode/tasks.json | tail -1 | sed "s/^/def-tasks /"
           python3 '"$PROBE"' rename d/e/f/.vscode d/e/f/vscode | tail -1 | grep -q "^OK" && echo def-rename-allowed || echo def-rename-refused
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        grep -qF "$P/a/b/c/.vscode" exec.err && echo said-vscode
        grep -qF "$P/.helix" exec.err && echo said-helix
        M a/b/c/.vscode .helix
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; cat audit.out >&2
        A a/b/c/.vscode 'vs ?code'; A .helix helix
        grep -c . d/e/f/.vscode/settings.json | sed 's/^/def-settings-lines /'"##
    );
    both_modes(&body, |w: &World, out, err| {
        let want = [
            "exec 0",
            "def-settings ERR EROFS",
            "def-tasks ERR EROFS",
            "def-rename-refused",
            "said-vscode",
            "said-helix",
            // Reported, not moved: an editor acts when the user opens the directory.
            "in-place a/b/c/.vscode",
            "in-place .helix",
            "audit 1",
            "audit-lists a/b/c/.vscode",
            "audit-lists .helix",
            "def-settings-lines 1",
        ];
        expect(out, err, &want, &[]);
        no_markers(w, out, err);
    });
}

/// `OCSB_RW_TOOL_FILES=(.envrc rust-toolchain.toml)` in the project's local settings: the agent
/// edits the user's `.envrc` and `d/e/f/rust-toolchain.toml` and makes new ones at `a/b/c`, and
/// nothing of them is moved aside, reported or listed; a name the setting leaves out
/// (`l/m/n/rust-toolchain`) is still moved aside.
#[test]
fn ocsb_rw_tool_files_lets_the_agent_edit_the_files_it_names() {
    let body = format!(
        r##"{CHECKS}mkdir -p .opencode-sandbox/local; echo 'OCSB_RW_TOOL_FILES=(.envrc rust-toolchain.toml)' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        U mkdir -p a/b/c d/e/f l/m/n
        U sh -c 'echo "export FOO=user" > .envrc; printf "[toolchain]\nchannel = \"stable\"\n" > d/e/f/rust-toolchain.toml'
        X 'echo "export BAR=agent" >> .envrc && echo top-envrc-edited
           printf "[toolchain]\nchannel = \"nightly\"\n" > d/e/f/rust-toolchain.toml && echo def-toolchain-edited
           printf "[toolchain]\nchannel = \"stable\"\n" > a/b/c/rust-toolchain.toml && echo abc-toolchain-made
           echo "export BAZ=agent" > a/b/c/.envrc && echo abc-envrc-made
           printf "[toolchain]\nchannel = \"stable\"\n" > l/m/n/rust-toolchain && echo lmn-legacy-made
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        M .envrc a/b/c/.envrc a/b/c/rust-toolchain.toml d/e/f/rust-toolchain.toml l/m/n/rust-toolchain
        grep -q BAR=agent .envrc && echo top-envrc-kept-edit
        grep -q nightly d/e/f/rust-toolchain.toml && echo def-toolchain-kept-edit
        rw="$P/(a/b/c/)?\.envrc|$P/(a/b/c|d/e/f)/rust-toolchain\.toml"; grep -qE "$rw" exec.err && echo said-rw-file
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; cat audit.out >&2
        grep -qE "$rw" audit.out && echo audit-lists-rw-file
        A l/m/n/rust-toolchain rustup"##
    );
    both_modes(&body, |w: &World, out, err| {
        let want = [
            "top-envrc-edited",
            "def-toolchain-edited",
            "abc-toolchain-made",
            "abc-envrc-made",
            "lmn-legacy-made",
            "exec 0",
            "in-place .envrc",
            "in-place a/b/c/.envrc",
            "in-place a/b/c/rust-toolchain.toml",
            "in-place d/e/f/rust-toolchain.toml",
            "top-envrc-kept-edit",
            "def-toolchain-kept-edit",
            // What the setting leaves out is still caught.
            "moved l/m/n/rust-toolchain",
            "audit 1",
            "audit-lists l/m/n/rust-toolchain",
        ];
        expect(out, err, &want, &["said-rw-file", "audit-lists-rw-file"]);
        no_markers(w, out, err);
    });
}

/// The import gate holds a commit that adds `a/b/c/rust-toolchain.toml` (staged without the
/// file in the tree, so no watch sees it): it waits under `refs/ocsb/held/…`, the user's branch
/// keeps the agent's ordinary commit before it (the control), and after `git reset --hard` onto
/// the branch `rustc --version` there runs nothing of the agent's.
#[test]
fn a_commit_adding_a_toolchain_file_below_the_top_is_held() {
    let body = format!(
        r##"{rust}U mkdir -p a/b/c
        X 'echo ok > ok.txt && git add ok.txt && git commit -q -m ordinary && echo ordinary-committed; sleep 1.5
           mkdir -p tc/bin; printf "#!/bin/sh\ntouch $HOME/PWNED_gate\necho agent-rustc\n" > tc/bin/rustc; chmod +x tc/bin/rustc
           blob=$(printf "[toolchain]\npath = \"'"$P"'/tc\"\n" | git hash-object -w --stdin)
           git update-index --add --cacheinfo 100644,$blob,a/b/c/rust-toolchain.toml && git commit -q -m toolchain && echo toolchain-committed
           sleep 1.5' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        echo "main $(U git log -1 --format=%s main)"
        U git cat-file -e main:a/b/c/rust-toolchain.toml 2>/dev/null && echo on-main || echo not-on-main
        h=$(U git for-each-ref --format='%(refname)' refs/ocsb/held/ | head -1)
        echo "held $(U git for-each-ref refs/ocsb/held/ | wc -l)"
        test -n "$h" && U git cat-file -e "$h:a/b/c/rust-toolchain.toml" 2>/dev/null && echo held-has-it
        U git reset -q --hard main; echo "host $(R a/b/c)""##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        let want = [
            "ordinary-committed",
            "toolchain-committed",
            "exec 0",
            "main ordinary",
            "not-on-main",
            "held 1",
            "held-has-it",
        ];
        expect(out, err, &want, &["host agent-rustc"]);
        no_markers(w, out, err);
    });
}
