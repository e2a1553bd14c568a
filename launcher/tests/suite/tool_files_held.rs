//! How the tool files the user already has are held, end to end: what a rename of a directory
//! above one leaves open (the live watch catches the new file at the old path), and how many
//! the sandbox holds (each is a bind mount: a dependency tree can ship thousands of editor
//! settings, held up to a bound, the start refused beyond it, never left unprotected).
//!
//! As the ordinary user `ocsb-test` in network namespaces the harness creates, in both network
//! modes ([`both_modes`]); a marker `PWNED_*` in the home would say a host tool ran the agent's
//! code.

use super::agent_git::both_modes;
use crate::support::sandbox::{World, has, no_markers};

/// The user's `a/b/c/.envrc` (allowed) loads `a/b/c/.env`; both are read-only inside. The agent
/// renames `a` away (allowed: only the files themselves are mount points), makes `a/b/c` again,
/// copies the allowed `.envrc` there (same path, same text: direnv would take it as allowed)
/// and writes a `.env` exporting an fsmonitor. Both new files are moved aside within a second
/// (measured from inside), so `cd a/b/c` with direnv's hook and the prompt's `git status` on
/// the host run nothing; the user's own files, renamed with their directory, are unchanged (the
/// look after the session moves them aside at their new place: tool files where there were
/// none). The control: the same made by the user on the host runs.
#[test]
fn a_rename_above_a_held_file_and_a_new_one_at_its_path_are_caught() {
    let body = r##"U mkdir -p a/b/c; U sh -c 'echo dotenv > a/b/c/.envrc; echo FOO=user > a/b/c/.env'
        U direnv allow a/b/c 2>/dev/null
        D() { U bash -c 'cd "$1" && eval "$(direnv export bash 2>/dev/null)"; git status >/dev/null 2>&1; echo "FOO=$FOO"' _ "$1"; }
        echo "before $(D "$P/a/b/c")"
        X 'python3 '"$PROBE"' write a/b/c/.env | tail -1 | sed "s/^/env-write /"
           mv a a2 && echo renamed
           mkdir -p a/b/c && cp a2/b/c/.envrc a/b/c/.envrc
           printf "GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_VALUE_0=\"touch $HOME/PWNED_rename; false\"\n" > a/b/c/.env
           t0=$(date +%s%N); gone=
           while [ $(( $(date +%s%N) - t0 )) -lt 3000000000 ]; do
             if [ ! -e a/b/c/.env ] && [ ! -e a/b/c/.envrc ]; then gone=$(( ($(date +%s%N) - t0) / 1000000 )); break; fi; sleep 0.01; done
           echo "moved-ms ${gone:-never}"; [ -n "$gone" ] && [ "$gone" -lt 1000 ] && echo within-1s
           sleep 0.3' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        ls -d a/b/c/.env.ocsb-planted-* >/dev/null 2>&1 && echo env-moved
        ls -d a/b/c/.envrc.ocsb-planted-* >/dev/null 2>&1 && echo envrc-moved
        echo "after $(D "$P/a/b/c")"
        echo "user-kept $(cat a2/b/c/.env.ocsb-planted-*)"
        U sh -c 'echo dotenv > a/b/c/.envrc; printf "GIT_CONFIG_COUNT=1\nGIT_CONFIG_KEY_0=core.fsmonitor\nGIT_CONFIG_VALUE_0=\"touch $HOME/CONTROL_rename; false\"\n" > a/b/c/.env'
        D "$P/a/b/c" >/dev/null; test -e "$HOME/CONTROL_rename" && echo control"##;
    both_modes(body, |w: &World, out, err| {
        for l in [
            "before FOO=user",
            "env-write ERR EROFS",
            "renamed",
            "within-1s",
            "exec 0",
            "env-moved",
            "envrc-moved",
            "after FOO=",
            "user-kept FOO=user",
            "control",
        ] {
            has(out, l, err);
        }
        no_markers(w, out, err);
    });
}

/// A dependency tree with 1,000 packages that ship a `.vscode`: the start holds each read-only
/// (a write fails), and says what the start costs (printed, against the same tree with the name
/// left writable). Beyond the bound (4,096) the start is refused, naming `OCSB_RW_TOOL_FILES`,
/// and `ocsb audit` names it; with the name left writable it starts.
#[test]
fn thousands_of_tool_files_are_held_up_to_a_bound_and_refused_beyond() {
    let body = r##"U sh -c 'for i in $(seq 1 1000); do mkdir -p node_modules/p$i/.vscode; done'
        X 'python3 '"$PROBE"' write node_modules/p500/.vscode/tasks.json | tail -1 | sed "s/^/deep-write /"'
        ms() { s=$(date +%s%N); X true >/dev/null 2>&1; echo $(( ($(date +%s%N) - s) / 1000000 )); }
        held=$(for i in 1 2 3; do ms; done | sort -n | head -1)
        rw() { mkdir -p .opencode-sandbox/local; echo 'OCSB_RW_TOOL_FILES=(.vscode)' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local; }
        rw
        free=$(for i in 1 2 3; do ms; done | sort -n | head -1)
        echo "start-ms held-1000 $held writable $free" >&2
        X 'python3 '"$PROBE"' write node_modules/p500/.vscode/tasks.json | tail -1 | sed "s/^/rw-write /"'
        sed -i '/OCSB_RW_TOOL_FILES/d' .opencode-sandbox/local/sandbox.conf
        U sh -c 'for i in $(seq 1001 4097); do mkdir -p node_modules/p$i/.vscode; done'
        X true 2>over.err; echo "over $?"; cat over.err >&2
        grep -qE "[0-9]{4} tool files in the writable trees" over.err && grep -q OCSB_RW_TOOL_FILES over.err && echo over-named
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; grep -qE "[0-9]{4} tool files" audit.out && echo audit-names
        rw; X 'echo started'"##;
    both_modes(body, |w: &World, out, err| {
        for l in [
            "deep-write ERR EROFS",
            "rw-write OK",
            "over 1",
            "over-named",
            "audit 1",
            "audit-names",
            "started",
        ] {
            has(out, l, err);
        }
        no_markers(w, out, err);
    });
}
