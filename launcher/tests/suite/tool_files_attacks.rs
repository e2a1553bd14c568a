//! Attacks on the tool files' registry and its enforcement, made as the agent would make them
//! from inside `ocsb exec`, each checked on the host with what the tool's trigger does: direnv's
//! hook on `cd` then the prompt's `git status`, `rustc --version` through a rustup proxy with a
//! rustup home of the test's own. A marker `PWNED_*` in the host home says the agent's code ran;
//! `CONTROL_*` markers show that the same change made by the user on the host does run (the
//! trigger works, so the check could fail).
//!
//! Some of these are holes while the enforcement misses them (the test fails until it is
//! mended); the others check that an attack is stopped. Each test's comment says which it was
//! when written.
//!
//! As the ordinary user `ocsb-test` in network namespaces the harness creates, in both network
//! modes ([`both_modes`]).

use super::agent_git::both_modes;
use super::tool_files::{expect, rustup_lines};
use crate::support::sandbox::{World, no_markers};

/// Shell lines: `M PATH…` prints `moved PATH` (a `PATH.ocsb-planted-*` took its place),
/// `in-place PATH` or `gone PATH`; `D DIR` is `cd DIR` with direnv's hook, then the prompt's
/// `git status`, as the user.
const CHECKS: &str = r#"M() { for f in "$@"; do
          if test -e "$f" || test -L "$f"; then echo "in-place $f"
          elif ls -d "$f".ocsb-planted-* >/dev/null 2>&1; then echo "moved $f"; else echo "gone $f"; fi; done; }
        D() { U bash -c 'cd "$1" && eval "$(direnv export bash 2>/dev/null)"; git status >/dev/null 2>&1; true' _ "$1"; }
        MK() { for m in "$@"; do test -e "$HOME/PWNED_$m" && echo "ran $m"; test -e "$HOME/CONTROL_$m" && echo "control $m"; done; true; }
        "#;

/// Found open by the attack, now stopped: an allowed `.envrc` (three directories down) that loads files by ways
/// the parser does not read as paths, each a common spelling: `eval "$(cat tools/env.sh)"` (a
/// command substitution in quotes), `export PATH="$PWD/bin2:$PATH"` (`$PWD` after `PATH=`),
/// `sh setup.sh` (a script run by a name without `/`), `source_up .localenv` (found in any
/// directory above, not only `..`), `dotenv_if_exists "$(pwd)/conf/app.env"`. The agent
/// rewrites the existing ones and creates the missing ones; on the host `cd` with direnv's
/// hook and the prompt's `git status` must run none of it (`ran *` lines, `PWNED_*`
/// markers). The controls: the same changes made by the user on the host run.
#[test]
fn envrc_loads_the_parser_misses_run_nothing_of_the_agents() {
    let body = format!(
        r##"{CHECKS}mkdir -p a/b/c/tools
        cat > a/b/c/.envrc <<'EOF'
eval "$(cat tools/env.sh)"
export PATH="$PWD/bin2:$PATH"
sh setup.sh
source_up .localenv
dotenv_if_exists "$(pwd)/conf/app.env"
EOF
        echo 'export E1=user' > a/b/c/tools/env.sh; echo true > a/b/c/setup.sh; chown -R 1990 a
        U direnv allow a/b/c 2>/dev/null
        D "$P/a/b/c"; echo "before $(ls "$HOME" | grep -c -e PWNED -e CONTROL)"
        X 'cd a/b/c
           echo "touch $HOME/PWNED_eval" > tools/env.sh
           mkdir -p bin2 && printf "#!/bin/sh\ntouch $HOME/PWNED_path\nexec /usr/bin/git \"\$@\"\n" > bin2/git && chmod +x bin2/git
           echo "touch $HOME/PWNED_sh" > setup.sh
           echo "touch $HOME/PWNED_up" > ../../../.localenv
           mkdir -p conf && printf "GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_VALUE_0=\"touch $HOME/PWNED_dotenv; false\"\n" > conf/app.env
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        D "$P/a/b/c"
        MK eval path sh up dotenv
        U sh -c 'cd a/b/c; rm -rf bin2 conf ../../../.localenv
           echo "touch $HOME/CONTROL_eval" > tools/env.sh
           mkdir -p bin2 && printf "#!/bin/sh\ntouch $HOME/CONTROL_path\nexec /usr/bin/git \"\$@\"\n" > bin2/git && chmod +x bin2/git
           echo "touch $HOME/CONTROL_sh" > setup.sh
           echo "touch $HOME/CONTROL_up" > ../../../.localenv
           mkdir -p conf && printf "GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_VALUE_0=\"touch $HOME/CONTROL_dotenv; false\"\n" > conf/app.env'
        D "$P/a/b/c"
        MK eval path sh up dotenv"##
    );
    both_modes(&body, |w: &World, out, err| {
        // No `exec 0`: a session refused over an `.envrc` it cannot read whole is a fix too.
        let mut want = vec!["before 0".to_string()];
        let ms = ["eval", "path", "sh", "up", "dotenv"];
        want.extend(ms.iter().map(|m| format!("control {m}")));
        let never: Vec<String> = ms.iter().map(|m| format!("ran {m}")).collect();
        let never: Vec<&str> = never.iter().map(String::as_str).collect();
        expect(out, err, &want, &never);
        no_markers(w, out, err);
    });
}

/// STOPPED (no mise on the test machine: checked by where the files are, not by mise): mise
/// reads more files than its top-level names, each a config whose `[env]`,
/// `[hooks]` and `tools` (`path:` versions) act on `cd` through mise's shell hook, and trusted
/// by path (a file the user trusted and the agent edits is honoured): `mise.local.toml`,
/// `.mise.local.toml`, `mise.<env>.toml`, `.config/mise/config.toml`,
/// `.config/mise/conf.d/*.toml`, `.mise/config.toml`, `mise/config.toml`. The user's existing
/// `mise.local.toml` and `.config/mise/config.toml` three down must be read-only inside; new
/// ones must be moved aside within the session (looked at while it runs): the file itself, or
/// the whole directory mise reads it from (`.config/mise`, `.mise`), whose content then goes
/// with it.
#[test]
fn mise_config_files_outside_the_registry_are_held_and_moved_aside() {
    let body = format!(
        r##"{CHECKS}U mkdir -p d/e/f/.config/mise l/m/n
        U sh -c 'echo "[env]" > d/e/f/mise.local.toml; echo "[env]" > d/e/f/.config/mise/config.toml'
        X 'python3 '"$PROBE"' write d/e/f/mise.local.toml | tail -1 | sed "s/^/def-local-write /"
           python3 '"$PROBE"' write d/e/f/.config/mise/config.toml | tail -1 | sed "s/^/def-config-write /"
           cd l/m/n; mkdir -p .config/mise/conf.d .mise mise
           for f in mise.local.toml .mise.local.toml mise.dev.toml .config/mise/config.toml .config/mise/conf.d/x.toml .mise/config.toml mise/config.toml; do
             printf "[hooks]\nenter = \"touch $HOME/PWNED_mise\"\n" > $f; done
           touch ../../../.planted; sleep 3' 2>exec.err &
        pid=$!
        for i in $(seq 1 500); do test -e .planted && break; sleep 0.01; done; sleep 1
        cd l/m/n; M mise.local.toml .mise.local.toml mise.dev.toml .config/mise/config.toml .config/mise/conf.d/x.toml .mise/config.toml mise/config.toml
        ls -d .config/mise.ocsb-planted-* >/dev/null 2>&1 && echo "dir-moved .config/mise"
        ls -d .mise.ocsb-planted-* >/dev/null 2>&1 && echo "dir-moved .mise"; cd "$P"
        wait $pid; echo "exec $?"; cat exec.err >&2"##
    );
    both_modes(&body, |w: &World, out, err| {
        let mut want: Vec<String> =
            ["exec 0", "def-local-write ERR EROFS", "def-config-write ERR EROFS"].map(String::from).to_vec();
        for f in ["mise.local.toml", ".mise.local.toml", "mise.dev.toml", "mise/config.toml"] {
            want.push(format!("moved {f}"));
        }
        // Moved with their directory.
        for f in [".config/mise/config.toml", ".config/mise/conf.d/x.toml", ".mise/config.toml"] {
            want.push(format!("gone {f}"));
        }
        want.extend(["dir-moved .config/mise", "dir-moved .mise"].map(String::from));
        expect(out, err, &want, &[]);
        no_markers(w, out, err);
    });
}

/// Found open by the attack, now stopped: the agent uses up the user's inotify watches (`fs.inotify.max_user_watches`,
/// charged to the same uid as the launcher's watch) with instances of its own, then makes
/// `z/y/x/rust-toolchain.toml` naming its toolchain. The watch cannot watch the new
/// directories (it says so on the terminal), so the plant stays while the session runs: one
/// second after it, `rustc --version` there on the host must run nothing of the agent's.
#[test]
fn exhausting_inotify_watches_does_not_let_a_plant_stay() {
    let body = format!(
        r##"{rust}{CHECKS}cat > ex.py <<'EOF'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("w", exist_ok=True)
paths = []
for i in range(2500):
    p = "w/%d" % i
    open(p, "w").close()
    paths.append(p.encode())
fds, full = [], False
for k in range(126):
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
    for p in paths:
        if libc.inotify_add_watch(fd, p, 0x4) < 0:
            full = True
            break
    if full:
        break
print("exhausted", full, flush=True)
os.makedirs("z/y/x")
time.sleep(0.3)
open("z/y/x/rust-toolchain.toml", "w").write('[toolchain]\npath = "%s/tc"\n' % os.getcwd())
open(".planted", "w").close()
time.sleep(4)
EOF
        chown 1990 ex.py
        X 'mkdir -p tc/bin; printf "#!/bin/sh\ntouch $HOME/PWNED_rustc_inotify\necho agent-rustc\n" > tc/bin/rustc; chmod +x tc/bin/rustc
           python3 ex.py' >exec.out 2>exec.err &
        pid=$!
        for i in $(seq 1 1500); do test -e .planted && break; sleep 0.01; done; sleep 1
        M z/y/x/rust-toolchain.toml
        echo "during $(R z/y/x)"
        wait $pid; echo "exec $?"; cat exec.out; cat exec.err >&2"##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        // A session ended when its watch goes blind is a fix too: then the look after it moves
        // the plant aside.
        expect(out, err, &["exhausted True"], &["during agent-rustc", "in-place z/y/x/rust-toolchain.toml"]);
        no_markers(w, out, err);
    });
}

/// Stopped when written: ways to put a tool file in place without creating it where the watch
/// looks, each checked one second after it while the session runs (not after it, when the
/// look after the sandbox would move it anyway):
/// - the directory of the user's held `d/e/f/rust-toolchain.toml` renamed away and a new one
///   made in its place;
/// - a tree holding `t1/a/b/rust-toolchain` made elsewhere and renamed into place (`r1`);
/// - a hard link `h/rust-toolchain.toml` to a file the agent wrote;
/// - `q/r/rust-toolchain.toml` whose directory is then made unreadable (`chmod 000`);
/// - a toolchain file ten thousand directories into a burst (`burst/9999/a/b/c`), the queue
///   likely overflowing;
/// - the directory `g/lib` of a file the user's `g/.envrc` loads (`source_env lib/env.sh`)
///   replaced by a directory renamed into its place.
///
/// On the host `rustc --version` and direnv's hook run nothing of the agent's; the user's own
/// toolchain file still answers.
#[test]
fn tool_files_put_in_place_by_renames_links_and_bursts_are_caught() {
    let body = format!(
        r##"{rust}{CHECKS}U mkdir -p d/e/f ok/bin g/lib
        U sh -c 'printf "#!/bin/sh\necho user-rustc\n" > ok/bin/rustc; chmod +x ok/bin/rustc
           printf "[toolchain]\npath = \"%s/ok\"\n" "$PWD" > d/e/f/rust-toolchain.toml
           echo "source_env lib/env.sh" > g/.envrc; echo "export G=user" > g/lib/env.sh'
        U direnv allow g 2>/dev/null
        X 'mkdir -p tc/bin; printf "#!/bin/sh\ntouch \"$HOME/PWNED_rustc\$(pwd | tr / _)\"\necho agent-rustc\n" > tc/bin/rustc; chmod +x tc/bin/rustc
           t="[toolchain]\npath = \"'"$P"'/tc\"\n"
           mv d/e/f d/e/f.old 2>/dev/null && echo def-renamed; mkdir -p d/e/f && printf "$t" > d/e/f/rust-toolchain.toml
           mkdir -p t1/a/b && printf "$t" > t1/a/b/rust-toolchain && mv t1 r1
           printf "$t" > tcfile; mkdir h; ln tcfile h/rust-toolchain.toml
           mkdir -p q/r && printf "$t" > q/r/rust-toolchain.toml && chmod 000 q/r
           mkdir burst && (cd burst && seq 1 10000 | xargs mkdir && mkdir -p 9999/a/b/c && printf "$t" > 9999/a/b/c/rust-toolchain.toml)
           mkdir g/lib2 && echo "touch $HOME/PWNED_lib" > g/lib2/env.sh && mv g/lib g/lib.old && mv g/lib2 g/lib && echo g-replaced
           touch .planted; sleep 3' >exec.out 2>exec.err &
        pid=$!
        for i in $(seq 1 1500); do test -e .planted && break; sleep 0.01; done; sleep 1
        M d/e/f/rust-toolchain.toml r1/a/b/rust-toolchain h/rust-toolchain.toml q/r/rust-toolchain.toml burst/9999/a/b/c/rust-toolchain.toml g/lib/env.sh
        for d in d/e/f r1/a/b h q/r burst/9999/a/b/c; do echo "host-$d $(R "$d")"; done
        D "$P/g"; MK lib
        wait $pid; echo "exec $?"; cat exec.out; cat exec.err >&2"##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        let mut want: Vec<String> = ["exec 0"].map(String::from).to_vec();
        for f in [
            "r1/a/b/rust-toolchain",
            "h/rust-toolchain.toml",
            "q/r/rust-toolchain.toml",
            "burst/9999/a/b/c/rust-toolchain.toml",
        ] {
            want.push(format!("moved {f}"));
        }
        // Renaming a directory that holds a held file may be refused (then nothing was
        // replaced); when it was not, what took its place must be moved aside.
        if out.lines().any(|l| l == "def-renamed") {
            want.push("moved d/e/f/rust-toolchain.toml".into());
        }
        if out.lines().any(|l| l == "g-replaced") {
            want.push("moved g/lib/env.sh".into());
        }
        let never = [
            "host-d/e/f agent-rustc",
            "host-r1/a/b agent-rustc",
            "host-h agent-rustc",
            "host-q/r agent-rustc",
            "host-burst/9999/a/b/c agent-rustc",
            "ran lib",
        ];
        expect(out, err, &want, &never);
        no_markers(w, out, err);
    });
}

/// Stopped when written: the agent cannot widen `OCSB_RW_TOOL_FILES`: the project's local
/// settings (`.opencode-sandbox/local/sandbox.conf`) and the user's
/// (`~/.config/opencode-sandbox/sandbox.conf`) cannot be written, made or renamed away inside,
/// so a `.envrc` it makes in the next session is still moved aside.
#[test]
fn the_agent_cannot_widen_ocsb_rw_tool_files() {
    let body = format!(
        r##"{CHECKS}U mkdir -p a/b/c
        X 'python3 '"$PROBE"' write .opencode-sandbox/local/sandbox.conf | tail -1 | sed "s/^/local-write /"
           mv .opencode-sandbox .ocsb-away 2>/dev/null && echo ocsb-dir-renamed
           mkdir -p "$HOME/.config/opencode-sandbox" 2>/dev/null; python3 '"$PROBE"' write "$HOME/.config/opencode-sandbox/sandbox.conf" | tail -1 | grep -q "^OK" && echo user-conf-written
           echo "OCSB_RW_TOOL_FILES=(.envrc)" >> .opencode-sandbox/local/sandbox.conf 2>/dev/null && echo local-appended
           true' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        grep -rs OCSB_RW_TOOL_FILES .opencode-sandbox "$HOME/.config/opencode-sandbox" && echo widened
        X 'echo "touch $HOME/PWNED_widen" > a/b/c/.envrc; sleep 1.2' 2>exec2.err
        echo "exec2 $?"; cat exec2.err >&2
        M a/b/c/.envrc"##
    );
    both_modes(&body, |w: &World, out, err| {
        expect(
            out,
            err,
            &["exec 0", "exec2 0", "local-write ERR EROFS", "moved a/b/c/.envrc"],
            &["ocsb-dir-renamed", "user-conf-written", "local-appended", "widened"],
        );
        no_markers(w, out, err);
    });
}

/// Found open by the attack, now stopped: the watch knows a path an `.envrc` loads by its exact spelling, so a
/// symbolic link put on the way is not seen: the user's allowed `g/.envrc` has
/// `source_env lib/env.sh` (`lib/env.sh` exists, held read-only) and `PATH_add tools/bin`
/// (`tools` missing). The agent renames `lib` away and puts a link `lib -> real` whose
/// `env.sh` is its own, and makes `tools` a link to `tr` whose `bin/git` is its own. On the
/// host `cd` with direnv's hook and the prompt's `git status` must run none of it; the same
/// made by the user on the host runs (the controls).
#[test]
fn a_link_on_the_way_to_what_an_envrc_loads_is_caught() {
    let body = format!(
        r##"{CHECKS}U mkdir -p g/lib
        U sh -c 'printf "source_env lib/env.sh\nPATH_add tools/bin\n" > g/.envrc; echo "export G=user" > g/lib/env.sh'
        U direnv allow g 2>/dev/null
        X 'cd g
           mv lib lib.old && echo lib-renamed
           mkdir real && echo "touch $HOME/PWNED_linklib" > real/env.sh && ln -s real lib
           mkdir -p tr/bin && printf "#!/bin/sh\ntouch $HOME/PWNED_linkbin\nexec /usr/bin/git \"\$@\"\n" > tr/bin/git && chmod +x tr/bin/git && ln -s tr tools
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        D "$P/g"
        MK linklib linkbin
        U sh -c 'cd g; rm -rf lib tools real tr lib.old.ocsb-planted-* 2>/dev/null
           mkdir real2 && echo "touch $HOME/CONTROL_linklib" > real2/env.sh && ln -s real2 lib
           mkdir -p tr2/bin && printf "#!/bin/sh\ntouch $HOME/CONTROL_linkbin\nexec /usr/bin/git \"\$@\"\n" > tr2/bin/git && chmod +x tr2/bin/git && ln -s tr2 tools'
        D "$P/g"
        MK linklib linkbin"##
    );
    both_modes(&body, |w: &World, out, err| {
        expect(out, err, &["control linklib", "control linkbin"], &["ran linklib", "ran linkbin"]);
        no_markers(w, out, err);
    });
}

/// Found open by the attack, now stopped: a held file is read-only through its bind only; another name of the
/// same inode is not. The agent makes `a/keep` (an innocent toolchain file, naming the user's
/// `ok` toolchain) and a hard link `a/rust-toolchain.toml` to it; the watch moves that aside, the
/// user reads it and takes it (renames it back). In the next session the file is held
/// read-only, but the agent writes `a/keep`: `rustc --version` in `a` on the host must still
/// answer with the user's toolchain. (Stopped, checked too: a link made inside to the user's
/// held `d/e/f/rust-toolchain.toml` is refused, across mounts.)
#[test]
fn a_hard_link_to_a_tool_file_the_user_took_does_not_change_it() {
    let body = format!(
        r##"{rust}{CHECKS}U mkdir -p a d/e/f ok/bin
        U sh -c 'printf "#!/bin/sh\necho user-rustc\n" > ok/bin/rustc; chmod +x ok/bin/rustc
           printf "[toolchain]\npath = \"%s/ok\"\n" "$PWD" > d/e/f/rust-toolchain.toml'
        X 'printf "[toolchain]\npath = \"'"$P"'/ok\"\n" > a/keep && ln a/keep a/rust-toolchain.toml && echo linked
           ln d/e/f/rust-toolchain.toml def-keep 2>/dev/null && echo def-linked
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        M a/rust-toolchain.toml
        U sh -c 'mv a/rust-toolchain.toml.ocsb-planted-* a/rust-toolchain.toml'
        echo "taken $(R a)"
        X 'mkdir -p tc/bin; printf "#!/bin/sh\ntouch $HOME/PWNED_hardlink\necho agent-rustc\n" > tc/bin/rustc; chmod +x tc/bin/rustc
           python3 '"$PROBE"' write a/rust-toolchain.toml | tail -1 | sed "s/^/held-write /"
           printf "[toolchain]\npath = \"'"$P"'/tc\"\n" > a/keep && echo keep-written
           sleep 1.2' 2>exec2.err
        echo "exec2 $?"; cat exec2.err >&2
        echo "host-a $(R a)""##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        expect(
            out,
            err,
            // Not `exec2 0`: a session refused over a held file with another name is a fix too.
            &["exec 0", "linked", "moved a/rust-toolchain.toml", "taken user-rustc", "host-a user-rustc"],
            &["def-linked", "host-a agent-rustc"],
        );
        no_markers(w, out, err);
    });
}

/// Found open by the attack, now stopped: an entry the registry names only under a parent of a given name
/// (`.cargo/config.toml`, whose `build.rustc-wrapper` any cargo command runs) reached through a
/// link of that name: `.cargo -> cr`, with `cr/config.toml` the agent's. The new file's
/// directory is `cr`, the link is no registry name, so nothing is said; it must be reported on
/// the terminal and listed by `ocsb audit` like a `.cargo/config.toml` made in place (the
/// control, `x/.cargo/config.toml`).
#[test]
fn a_link_named_like_a_tool_files_directory_is_reported() {
    let body = format!(
        r##"{CHECKS}X 'mkdir cr && printf "[build]\nrustc-wrapper = \"/bin/false\"\n" > cr/config.toml && ln -s cr .cargo
           mkdir -p x/.cargo && printf "[build]\nrustc-wrapper = \"/bin/false\"\n" > x/.cargo/config.toml
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        grep -qF "$P/x/.cargo" exec.err && echo said-control
        grep -E "$P/(\.cargo|cr)( |/|\)|:|$)" exec.err >/dev/null && echo said-link
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; cat audit.out >&2
        grep -E "$P/(\.cargo|cr)( |/|\)|:|$)" audit.out >/dev/null && echo audit-lists-link"##
    );
    both_modes(&body, |w: &World, out, err| {
        expect(out, err, &["exec 0", "said-control", "said-link", "audit-lists-link"], &[]);
        no_markers(w, out, err);
    });
}

/// Found open by the attack, now stopped: the watch's first walk runs in a thread of its own while the agent
/// already runs, and what that walk meets is taken for the session's starting point (left
/// alone, never acted on). The user's tree has 30,000 directories (`big/N`, a dependency tree's
/// size); the agent, as soon as it starts, makes `big/N/rust-toolchain.toml` in each. One
/// second after the last, none may be left in place, and `rustc --version` on the host in one
/// of them must run nothing of the agent's.
#[test]
fn a_plant_made_while_the_watch_starts_is_not_taken_for_the_start() {
    let body = format!(
        r##"{rust}{CHECKS}mkdir big && (cd big && seq 1 30000 | xargs mkdir); chown -R 1990 big
        cat > plant.py <<'EOF2'
import os, time
os.makedirs("tc/bin", exist_ok=True)
open("tc/bin/rustc", "w").write('#!/bin/sh\ntouch "$HOME/PWNED_rustc_start"\necho agent-rustc\n')
os.chmod("tc/bin/rustc", 0o755)
t = '[toolchain]\npath = "%s/tc"\n' % os.getcwd()
for n in os.listdir("big"):
    with open("big/%s/rust-toolchain.toml" % n, "w") as f:
        f.write(t)
open(".planted", "w").close()
time.sleep(3)
EOF2
        chown 1990 plant.py
        X 'python3 plant.py' >exec.out 2>exec.err &
        pid=$!
        for i in $(seq 1 3000); do test -e .planted && break; sleep 0.01; done; sleep 1
        n=$(find big -name rust-toolchain.toml | wc -l); echo "in-place-count $n"
        d=$(find big -name rust-toolchain.toml | head -1); test -n "$d" && echo "host-big $(R "$(dirname "$d")")"
        wait $pid; echo "exec $?"; cat exec.out; tail -5 exec.err >&2"##,
        rust = rustup_lines(),
    );
    both_modes(&body, |w: &World, out, err| {
        expect(out, err, &["in-place-count 0", "exec 0"], &["host-big agent-rustc"]);
        no_markers(w, out, err);
    });
}

/// Found open by the attack, now stopped (no such editor on the test machine: checked by what the session says,
/// as for the registry's own editor files): editor files of the same class that the registry
/// leaves out, though its own description of `Trigger::Open` names their editors: neovim's
/// `.nvim.lua` and `.nvimrc` and vim's `.exrc` (run on start with `exrc` set), emacs's
/// `.dir-locals.el` (its `eval` forms), VS Code's `*.code-workspace` (tasks, settings). Each
/// made three down must be reported on the terminal like `.vscode` (the control).
#[test]
fn editor_files_outside_the_registry_are_reported() {
    let body = format!(
        r##"{CHECKS}X 'mkdir -p a/b/c/.vscode && cd a/b/c && echo "{{}}" > .vscode/tasks.json
           echo "os.execute(\"touch $HOME/PWNED_nvim\")" > .nvim.lua
           echo "call system(\"touch $HOME/PWNED_nvimrc\")" > .nvimrc
           echo "call system(\"touch $HOME/PWNED_exrc\")" > .exrc
           echo "((nil . ((eval . (shell-command \"touch $HOME/PWNED_emacs\")))))" > .dir-locals.el
           echo "{{\"folders\": [{{\"path\": \".\"}}]}}" > p.code-workspace
           sleep 1.2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        for f in .vscode .nvim.lua .nvimrc .exrc .dir-locals.el p.code-workspace; do
          grep -qF "$P/a/b/c/$f" exec.err && echo "said $f"; done"##
    );
    both_modes(&body, |w: &World, out, err| {
        let want = [
            "exec 0",
            "said .vscode",
            "said .nvim.lua",
            "said .nvimrc",
            "said .exrc",
            "said .dir-locals.el",
            "said p.code-workspace",
        ];
        expect(out, err, &want, &[]);
        no_markers(w, out, err);
    });
}
