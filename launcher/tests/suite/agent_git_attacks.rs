//! Attacks on the agent's own repository, the import gate and the live watch, made from inside
//! `ocsb exec` as an agent would, each with a check on the host: a marker in the host home
//! (something of the agent's ran as the user), the user's refs and HEAD, the user's tree, and the
//! time the session takes to end. A test that fails names an attack the design does not stop.
//!
//! As the ordinary user `ocsb-test`, in a network namespace the test creates, with real git on
//! both sides (the harness of `agent_git`).

use super::agent_git::both_modes;
use crate::support::sandbox::{World, has, no_markers, scenario};

/// The user's `core.hooksPath` is `tools/hooks` (in the tree, not yet made). The agent commits
/// `tools` as a symbolic link to `x` and the hook as `x/hooks/pre-commit`: no path of the
/// commit is under `tools/hooks` as written, yet once checked out git runs
/// `tools/hooks/pre-commit` through the link. The commit must be held (a link over a parent of
/// a held path holds like the path itself); on the host, `stash`/`checkout .`/`commit` run
/// nothing of the agent's. Positive control: an ordinary commit made before it in the same session
/// is imported.
#[test]
fn a_link_over_a_parent_of_the_hooks_path_is_held() {
    both_modes(
        r##"U git config core.hooksPath tools/hooks
        X 'echo ok > ok.txt && git add ok.txt && git commit -q -m plain && echo plain-committed && sleep 1.5
             blob=$(printf "#!/bin/sh\ntouch $HOME/PWNED_linked_hook\nexit 0\n" | git hash-object -w --stdin)
             link=$(printf x | git hash-object -w --stdin)
             git update-index --add --cacheinfo 120000,$link,tools && git update-index --add --cacheinfo 100755,$blob,x/hooks/pre-commit && git commit -q -m linkhook && echo link-committed' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        echo "main $(U git log -1 --format=%s main)"
        echo "plain $(U git log --format=%s main | grep -c '^plain$')"
        U git status >/dev/null 2>&1; U git stash -q 2>/dev/null; U git stash pop -q 2>/dev/null; U git checkout -q . 2>/dev/null
        ls -la tools x/hooks >&2 2>&1
        echo z > z.txt; chown 1990 z.txt; U git add z.txt; U git commit -q -m host
        test -e "$HOME/PWNED_linked_hook" && echo host-ran-the-agents-hook
        echo "held $(U git for-each-ref refs/ocsb/held | wc -l)""##,
        |w, out, err| {
            no_markers(w, out, err);
            for l in ["plain-committed", "link-committed", "exec 0", "main plain", "held 1"] {
                has(out, l, err);
            }
        },
    );
}

/// A tag on a tree (lightweight and annotated) brings content no commit carries: `rev-list`
/// lists no commit for it, so nothing of it is judged. A tree holding `.gitmodules` and a
/// `.git` directory spelled for NTFS must not become one of the user's tags unjudged; a tag on
/// an ordinary commit made in the same session (the control) is imported.
#[test]
fn a_tag_on_a_tree_is_judged_like_a_commit() {
    both_modes(
        r##"X 'gm=$(printf "[submodule \"s\"]\n\tpath = s\n\turl = ./s\n" | git hash-object -w --stdin)
             t=$(printf "100644 blob %s\t.gitmodules\n" $gm | git mktree)
             git tag treetag $t && git tag -a -m ann anntree $t && echo tree-tags-made
             git commit -q --allow-empty -m tagged && git tag good && echo good-tag-made' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        echo "good $(U git log -1 --format=%s good 2>/dev/null)"
        U git rev-parse -q --verify refs/tags/treetag >/dev/null && echo treetag-imported || echo treetag-not-imported
        U git rev-parse -q --verify refs/tags/anntree >/dev/null && echo anntree-imported || echo anntree-not-imported"##,
        |w, out, err| {
            for l in [
                "tree-tags-made",
                "good-tag-made",
                "exec 0",
                "good tagged",
                "treetag-not-imported",
                "anntree-not-imported",
            ] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// The agent points its HEAD at a tag it made (`git symbolic-ref HEAD refs/tags/v9`). The
/// user's HEAD follows only branches: were it to follow, the user's next commit on the host
/// would move the tag. Control: the commit itself reaches `main`.
#[test]
fn the_users_head_never_follows_the_agent_onto_a_tag() {
    both_modes(
        r##"X 'echo a > a.txt && git add a.txt && git commit -q -m agent && git tag v9 && git symbolic-ref HEAD refs/tags/v9 && echo head-on-tag && sleep 2' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        echo "main $(U git log -1 --format=%s main)"
        echo "head $(U git symbolic-ref HEAD)"
        U git commit -q --allow-empty -m host-after
        echo "v9 $(U git log -1 --format=%s v9)""##,
        |w, out, err| {
            for l in ["head-on-tag", "exec 0", "main agent", "head refs/heads/main", "v9 agent"] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// Many refs: the agent makes 3000 tags on one commit (one `update-ref --stdin`, then
/// `pack-refs`: seconds inside). Each is judged and written by git runs of its own in the user's
/// repository, at the session's end too, which waits. The session must end within 30 s of the
/// agent's command; the real bound the agent has is a 64 MiB `packed-refs` (about a million
/// refs). Control: the commit reaches `main`.
#[test]
fn many_refs_do_not_hold_the_session_open() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r##"X 'echo a > a.txt && git add a.txt && git commit -q -m agent && c=$(git rev-parse HEAD)
             for i in $(seq 1 3000); do echo "create refs/tags/spam$i $c"; done | git update-ref --stdin && git pack-refs --all && echo spammed
             date +%s > .t0' 2>exec.err
        echo "exec $?"; date +%s > .t1; tail -3 exec.err >&2
        python3 -c "d=int(open('.t1').read())-int(open('.t0').read()); print('end-s', d); print('within-30s', d < 30)"
        echo "main $(U git log -1 --format=%s main)"
        echo "user-tags $(U git for-each-ref refs/tags | wc -l)""##,
    );
    eprintln!("{out}");
    for l in ["spammed", "exec 0", "main agent", "within-30s True"] {
        has(&out, l, &err);
    }
    no_markers(&w, &out, &err);
}

/// Odd files in the agent's git directory: a FIFO as a pack, as `packed-refs` and as a branch.
/// The gate opens what the agent wrote without blocking and refuses what is no regular file:
/// the session ends at once (within 20 s), nothing runs on the host, the user's repository stays
/// sound. (Stopped today; kept so it stays so.)
#[test]
fn fifos_in_the_agents_git_directory_do_not_hang_the_gate() {
    both_modes(
        r##"X 'echo a > a.txt && git add a.txt && git commit -q -m agent-fifo && mkdir -p .git/objects/pack && mkfifo .git/objects/pack/pack-0000000000000000000000000000000000000000.pack && mkfifo .git/refs/heads/fifo && rm -f .git/packed-refs && mkfifo .git/packed-refs && echo fifos-made
             date +%s > .t0' 2>exec.err
        echo "exec $?"; date +%s > .t1; cat exec.err >&2
        python3 -c "d=int(open('.t1').read())-int(open('.t0').read()); print('end-s', d); print('within-20s', d < 20)"
        echo "main-after-fifos $(U git log -1 --format=%s main)"
        U git fsck --no-dangling >/dev/null 2>&1 && echo user-repo-sound"##,
        |w, out, err| {
            for l in ["fifos-made", "exec 0", "within-20s True", "user-repo-sound"] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// A directory made unreadable (`mkdir -m 0`) cannot be watched by its owner's inotify either,
/// until it is made readable again; the agent then makes a repository in it. The live watch
/// still moves it aside within about a second, while the session runs: a `git status` on the
/// host there (a shell prompt) runs nothing of it. (Stopped today.)
#[test]
fn a_repository_in_a_directory_made_unreadable_first_is_still_moved_aside() {
    both_modes(
        r##"X 'mkdir -m 0 blind && sleep 0.5 && chmod 755 blind && cd blind; git init -q . 2>/dev/null; git config core.fsmonitor "touch $HOME/PWNED_blind; false" 2>/dev/null; touch ../.planted; sleep 4' 2>exec.err &
        pid=$!
        for i in $(seq 1 500); do test -f .planted && break; sleep 0.01; done; sleep 1.5
        test -e blind/.git && echo during-present || echo during-gone
        U git -C blind status >/dev/null 2>&1
        wait $pid; echo "exec $?"; cat exec.err >&2
        grep -q 'blind/.git appeared while the sandbox ran' exec.err && echo said"##,
        |w, out, err| {
            for l in ["during-gone", "exec 0", "said"] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// The agent deletes the user's branch and tag inside (`git branch -D`, `git tag -d`, and a
/// branch removed from `packed-refs` by hand): a deletion is never carried to the host. (Stopped
/// today.) Control: a commit of the same session reaches `main`.
#[test]
fn deleting_branches_and_tags_inside_deletes_nothing_of_the_users() {
    both_modes(
        r##"U git branch keep; U git branch keep2; U git tag t1
        X 'git branch -q -D keep && git tag -d t1 >/dev/null && grep -v keep2 .git/packed-refs > .git/p && mv .git/p .git/packed-refs && git rev-parse -q --verify keep2 >/dev/null || echo deleted-inside
             echo a > a.txt && git add a.txt && git commit -q -m agent' 2>exec.err
        echo "exec $?"; cat exec.err >&2
        echo "main $(U git log -1 --format=%s main)"
        for r in refs/heads/keep refs/heads/keep2 refs/tags/t1; do U git rev-parse -q --verify $r >/dev/null && echo "kept $r"; done"##,
        |w, out, err| {
            for l in [
                "deleted-inside",
                "exec 0",
                "main agent",
                "kept refs/heads/keep",
                "kept refs/heads/keep2",
                "kept refs/tags/t1",
            ] {
                has(out, l, err);
            }
            no_markers(w, out, err);
        },
    );
}

/// inotify's limits are the user's, across user namespaces: the agent, with watches of its own
/// (128 instances on the same ~1600 files), uses up `fs.inotify.max_user_watches`, and the
/// launcher's watch can add no watch for a new directory. A repository made in a directory
/// made then must still be moved aside while the session runs (the host's `git status` there
/// runs nothing). The exhaustion lasts about four seconds (other tests as ocsb-test may see
/// their watch refused meanwhile).
#[test]
fn a_repository_made_while_the_agent_holds_all_inotify_watches_is_still_moved_aside() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r##"cat > .exhaust.py <<'EOF'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
paths = []
for top in ("/usr/share", "/usr/lib"):
    for d, subdirs, files in os.walk(top):
        paths.append(d)
        if len(paths) >= 3000:
            break
    if len(paths) >= 3000:
        break
fds, n, full = [], 0, False
while not full:
    fd = libc.inotify_init1(0)
    if fd < 0:
        print("instances-out", ctypes.get_errno()); break
    fds.append(fd)
    for p in paths:
        if libc.inotify_add_watch(fd, p.encode(), 0x100) < 0:
            if ctypes.get_errno() == 28:
                full = True; break
        else:
            n += 1
print("agent-watches", n, "full", full, flush=True)
open(sys.argv[1], "w").close()
time.sleep(float(sys.argv[2]))
EOF
        chown 1990 .exhaust.py
        X 'python3 .exhaust.py .full 5 & sleep 0.2; for i in $(seq 1 300); do test -f .full && break; sleep 0.05; done
             mkdir -p deep && sleep 0.3 && git init -q deep/r && git -C deep/r config core.fsmonitor "touch $HOME/PWNED_exhausted; false" && touch .planted; wait' 2>exec.err &
        pid=$!
        for i in $(seq 1 1500); do test -f .planted && break; sleep 0.01; done; sleep 1.5
        test -e deep/r/.git && echo during-present || echo during-gone
        U git -C deep/r status >/dev/null 2>&1
        wait $pid; echo "exec $?"; cat exec.err >&2"##,
    );
    eprintln!("{out}");
    no_markers(&w, &out, &err);
    for l in ["during-gone", "exec 0"] {
        has(&out, l, &err);
    }
}
