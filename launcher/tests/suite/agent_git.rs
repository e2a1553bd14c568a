//! The agent's own repository and the import gate, end to end: inside `ocsb exec` the agent's
//! `.git` is a repository of its own (its config and hooks its to change), no file of the
//! user's git directory is writable, and its commits reach the user's branch within a second
//! through the launcher's gate — or are held back under `refs/ocsb/held/<session>/…` when the
//! user moved the branch meanwhile, or when they carry what the sandbox holds read-only in the
//! tree (a hook under `core.hooksPath`, a gitlink, ocsb's own settings).
//!
//! As the ordinary user `ocsb-test`, with the netlock table in a network namespace the test
//! creates (only `lo`), with real git on both sides; the user's git on the host runs plain
//! `git status`, `add`, `commit`, `stash`, `checkout`, `log` during and after the session, and a
//! marker in the host home says whether it ran anything of the agent's.

use crate::support::sandbox::{NETLOCK_MODE, World, has, no_markers, scenario};

/// Run `body` in the default network mode (isolated) and then with the netlock, each in a
/// world of its own, and check each run's output with `check`.
pub(crate) fn both_modes(body: &str, check: impl Fn(&World, &str, &str)) {
    for mode in ["", NETLOCK_MODE] {
        let w = World::new();
        let (out, err) = scenario(&w, &format!("{mode}{body}"));
        eprintln!("{}\n{out}", if mode.is_empty() { "isolated" } else { "netlock" });
        check(&w, &out, &err);
    }
}

/// Positive: a commit inside is on the user's branch (`git log` on the host) within one
/// second, measured; the host's `git status` is clean after it; a branch made and switched to
/// inside is followed by the host's HEAD; at the end nothing is held.
#[test]
fn a_commit_inside_reaches_the_users_branch_within_a_second() {
    both_modes(
        r##"X 'echo one > a.txt && git add a.txt && git commit -q -m inside-one && date +%s.%N > .t0 && sleep 3
             git switch -q -c feat && echo two > b.txt && git add b.txt && git commit -q -m inside-two && sleep 2' 2>exec.err &
        pid=$!
        for i in $(seq 1 100); do test -f .t0 && break; sleep 0.02; done
        for i in $(seq 1 200); do
          s=$(U git log -1 --format=%s main 2>/dev/null); test "$s" = inside-one && { date +%s.%N > .t1; break; }; sleep 0.01; done
        echo "seen $(U git log -1 --format=%s main)"
        python3 -c "import sys; d=float(open('.t1').read())-float(open('.t0').read()); print('latency-ms', round(d*1000)); print('within-1s', d < 1.0)"
        sleep 0.5; echo "status-during [$(U git status --porcelain --untracked-files=no)]"
        wait $pid; echo "exec $?"; cat exec.err >&2
        echo "head $(U git symbolic-ref HEAD)"; echo "feat $(U git log -1 --format=%s feat)"
        echo "status-after [$(U git status --porcelain --untracked-files=no)]"
        echo "held $(U git for-each-ref refs/ocsb/held | wc -l)""##,
        |w, out, err| {
            for l in [
                "seen inside-one",
                "within-1s True",
                "status-during []",
                "exec 0",
                "head refs/heads/feat",
                "feat inside-two",
                "status-after []",
                "held 0",
            ] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// The user's own git directory is not writable inside, however it is named, and the agent's
/// `.git` is its own: it changes its config and hooks, and they run inside only. Afterwards
/// every host git command of the positive list runs nothing of the agent's.
#[test]
fn the_agents_config_and_hooks_are_its_own_and_host_git_runs_none_of_them() {
    both_modes(
        r##"X 'git config core.fsmonitor "touch $HOME/PWNED_fsmonitor; false" && echo config=ok
             printf "#!/bin/sh\ntouch $HOME/PWNED_hook /tmp/hook-ran 2>/dev/null; exit 0\n" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo hook=ok
             git config alias.st "!touch $HOME/PWNED_alias" && echo alias=ok
             echo x > c.txt && git add c.txt && git commit -q -m agent && echo commit=ok
             test -e /tmp/hook-ran && echo hook-ran-inside
             python3 '"$PROBE"' write /run/ocsb/git/0-objects-0/info/x | tail -1 | sed "s/^/user-objects /"' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        U git status >/dev/null 2>&1; echo y >> c.txt; U git add c.txt; U git commit -q -m host; U git stash -q 2>/dev/null
        U git stash pop -q 2>/dev/null; U git checkout -q . ; U git log --oneline >/dev/null; U git diff >/dev/null
        U git branch -q side; U git switch -q side; U git switch -q main; U git status >/dev/null
        echo "log $(U git log --format=%s | tr '\n' ' ')"
        grep -c fsmonitor .git/config | sed 's/^/user-config-fsmonitor /'"##,
        |w, out, err| {
            for l in [
                "config=ok",
                "hook=ok",
                "alias=ok",
                "commit=ok",
                "hook-ran-inside",
                "exec 0",
                "user-objects ERR EROFS",
            ] {
                has(out, l, err);
            }
            has(out, "log host agent ocsb init", err);
            has(out, "user-config-fsmonitor 0", err);
            no_markers(w, out, err);
        },
    );
}

/// A branch the user moved while the session ran is never forced: the agent's commit is held
/// under `refs/ocsb/held/<session>/heads/main`, the terminal says so, `ocsb audit` lists it and
/// `ocsb audit --accept` puts it beside the user's branch for a merge.
#[test]
fn a_branch_the_user_moved_meanwhile_is_held_not_forced() {
    both_modes(
        r##"X 'for i in $(seq 1 200); do test -f .go && break; sleep 0.02; done
             echo a > a.txt && git add a.txt && git commit -q -m agent-late && sleep 1' 2>exec.err &
        pid=$!; sleep 1
        U git commit -q --allow-empty -m user-meanwhile; touch .go; chown 1990 .go
        wait $pid; echo "exec $?"; cat exec.err >&2
        grep -q 'held back' exec.err && echo said-held
        echo "main $(U git log -1 --format=%s main)"
        h=$(U git for-each-ref --format='%(refname)' 'refs/ocsb/held/'); echo "held-ref ${h%%/heads/main}" | grep -q '^held-ref refs/ocsb/held/' && echo held-under-session
        echo "held $(U git log -1 --format=%s "$h")"
        U "$OCSB" audit >audit.out 2>&1; echo "audit $?"; grep -q 'heads/main' audit.out && echo audit-lists
        U "$OCSB" audit --accept >accept.out 2>&1; echo "accept $?"; cat accept.out >&2
        echo "main-after $(U git log -1 --format=%s main)"
        echo "aside $(U git for-each-ref --format='%(subject)' 'refs/heads/ocsb/')"
        echo "held-after $(U git for-each-ref refs/ocsb/held | wc -l)""##,
        |w, out, err| {
            for l in [
                "exec 0",
                "said-held",
                "main user-meanwhile",
                "held-under-session",
                "held agent-late",
                "audit-lists",
                "accept 0",
                "main-after user-meanwhile",
                "aside agent-late",
                "held-after 0",
            ] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// A commit that carries what the sandbox holds read-only in the tree is held: a hook under
/// the user's `core.hooksPath` staged in the agent's index (the work tree file cannot be
/// written), and a gitlink to a nested repository of the agent's with an fsmonitor. The
/// user's `git status` at the top *during* the session, and `add`/`commit`/`stash`/`stash
/// pop`/`checkout .` after it, run nothing; the hook never reaches the user's tree.
#[test]
fn a_staged_hook_or_gitlink_is_held_and_never_reaches_the_users_tree() {
    both_modes(
        r##"U git config core.hooksPath .husky/_
        X 'blob=$(printf "#!/bin/sh\ntouch $HOME/PWNED_husky\n" | git hash-object -w --stdin)
             git update-index --add --cacheinfo 100755,$blob,.husky/pre-commit && git commit -q -m hook && echo hook-committed
             mkdir -p /tmp/n && cd /tmp/n && git init -q . && git commit -q --allow-empty -m n && git config core.fsmonitor "touch $HOME/PWNED_nested; false"
             c=$(git rev-parse HEAD) && cd '"$P"' && git update-index --add --cacheinfo 160000,$c,sub && git commit -q -m gitlink && echo gitlink-committed
             touch .inside-done; sleep 2' 2>exec.err &
        pid=$!
        for i in $(seq 1 300); do test -f .inside-done && break; sleep 0.02; done; sleep 0.6
        U git status >/dev/null 2>&1; echo "during $(U git log -1 --format=%s main)"
        wait $pid; echo "exec $?"; cat exec.err >&2
        grep -q 'changes .husky/pre-commit, which is read-only' exec.err && echo said-hook
        grep -q 'points the submodule sub at a commit' exec.err && echo said-gitlink
        echo "main $(U git log -1 --format=%s main)"
        echo readme > README; U git add README; U git commit -q -m host; echo z > z.txt; U git add z.txt
        U git stash -q; U git stash pop -q; U git checkout -q .; U git status >/dev/null 2>&1
        test -e .husky/pre-commit && echo husky-in-tree || echo husky-absent
        echo "held $(U git for-each-ref refs/ocsb/held | wc -l)""##,
        |w, out, err| {
            for l in [
                "hook-committed",
                "gitlink-committed",
                "exec 0",
                "said-hook",
                "said-gitlink",
                "main ocsb",
                "during ocsb",
                "husky-absent",
                "held 1",
            ] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// A repository the agent makes three directories down while the session runs is moved aside
/// within a second (measured), so a shell prompt's `git status` there on the host runs nothing
/// of it; the terminal says where it went and the next start refuses until `ocsb audit`.
#[test]
fn a_repository_planted_inside_is_moved_aside_within_a_second() {
    both_modes(
        r##"mkdir -p a/b/c; chown -R 1990 a
        X 'date +%s%N > .t0; cd a/b/c && git init -q . 2>/dev/null; git config core.fsmonitor "touch $HOME/PWNED_plant; false" 2>/dev/null
             echo "[core]" > ../../../x.cfg; sleep 2' 2>exec.err &
        pid=$!
        for i in $(seq 1 1000); do test -f .t0 && break; sleep 0.01; done
        for i in $(seq 1 1000); do ls -A a/b/c | grep -q ocsb-planted && { date +%s%N > .t1; break; }; sleep 0.002; done
        U git -C a/b/c status >/dev/null 2>&1
        python3 -c "d=(int(open('.t1').read())-int(open('.t0').read()))/1e9; print('moved-ms', round(d*1000)); print('within-1s', d < 1.0)"
        wait $pid; echo "exec $?"; cat exec.err >&2
        grep -q 'appeared while the sandbox ran' exec.err && echo said
        test -e a/b/c/.git && echo still-there || echo gone
        U git -C a/b/c status >/dev/null 2>&1
        X true 2>next.err; echo "next $?"; grep -q ocsb-planted next.err && echo next-names-it"##,
        |w, out, err| {
            for l in ["within-1s True", "exec 0", "said", "gone", "next 1", "next-names-it"] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// A launcher killed before its last import leaves the agent's repository behind: the next
/// start imports it with everything held (its starting values are unknown, so no branch of the
/// user's moves) and removes it, and its lock. The layout is the one a session leaves: the
/// directory, the file naming its checkout, and a lock no process holds. A second dead session
/// left only its second repository (`-1`: the first was imported before it died): it is found
/// all the same.
#[test]
fn a_dead_sessions_repository_is_imported_held_at_the_next_start() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r##"X true 2>/dev/null
        S="$HOME/.local/share/opencode-sandbox/.$(basename "$P").git"
        for d in 123-999-0 124-999-1; do
          D="$S/$d"; U git clone -q --bare "$P" "$D"
          C=$(echo "lost-$d" | U git --git-dir="$D" commit-tree "$(U git --git-dir="$D" rev-parse 'main^{tree}')" -p main)
          U git --git-dir="$D" update-ref refs/heads/main "$C"
          printf %s "$P" > "$D.root"; : > "$S/${d%-*}.lock"; chown 1990 "$D.root" "$S/${d%-*}.lock"
        done
        X true 2>x.err; echo "exec $?"; cat x.err >&2
        grep -q 'its session ended without ocsb' x.err && echo said
        echo "main $(U git log -1 --format=%s main)"
        echo "held $(U git log -1 --format=%s refs/ocsb/held/123-999/heads/main)"
        echo "held-second $(U git log -1 --format=%s refs/ocsb/held/124-999/heads/main)"
        echo "store [$(ls -A "$S" | tr '\n' ' ')]""##,
    );
    for l in ["exec 0", "said", "main ocsb", "held lost-123-999-0", "held-second lost-124-999-1", "store []"]
    {
        has(&out, l, &err);
    }
    no_markers(&w, &out, &err);
}

/// The session's git is begun while the launcher's later checks run. A start those checks
/// refuse (here: the egress rules, read after the look at the checkouts) ends it: no agent's
/// directory and no lock are left, the next start finds no dead session to import, and it
/// runs (positive control). Both network modes.
#[test]
fn a_start_refused_after_the_session_git_was_begun_leaves_nothing_behind() {
    both_modes(
        r##"X true 2>/dev/null
        S="$HOME/.local/share/opencode-sandbox/.$(basename "$P").git"
        mkdir -p .opencode-sandbox/local; printf 'frobnicate example.com\n' > .opencode-sandbox/local/egress.conf
        chown -R 1990 .opencode-sandbox/local
        X 'echo ran' >x.out 2>x.err; echo "refused $?"; cat x.err >&2
        grep -q 'egress.conf' x.err && echo said-rules
        grep -q '^ran' x.out && echo RAN
        echo "left $(ls -A "$S" | wc -l)"
        rm .opencode-sandbox/local/egress.conf
        X 'echo ran' >y.out 2>y.err; echo "again $?"; cat y.err >&2
        grep -q 'ended without ocsb' y.err && echo took-for-dead
        grep -q '^ran' y.out && echo ran-again
        echo "left-after $(ls -A "$S" | wc -l)""##,
        |w, out, err| {
            for l in ["refused 3", "said-rules", "left 0", "again 0", "ran-again", "left-after 0"] {
                has(out, l, err);
            }
            assert!(!out.lines().any(|l| l == "RAN" || l == "took-for-dead"), "{out}\n{err}");
            no_markers(w, out, err);
        },
    );
}
