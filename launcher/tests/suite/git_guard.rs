//! The checkout rule end to end: an agent inside `ocsb exec` tries every way we know to make
//! host git (or a host tool) run its code, and the user then runs plain `git status`, `git
//! commit`, `git log` and `ocsb wt …` on the host. Inside, each checkout's `.git` is the
//! agent's own repository: what it writes there (config, hooks, `commondir`, an index entry
//! into `.git`, a link, a rebase's todo list) succeeds inside and never reaches the user's git
//! directory, which is checked byte for byte. What the user's git reads from the *tree* (a
//! `core.hooksPath` or include target there, a program a config value names, tool files,
//! ocsb's settings) fails with the errno it names, and what no mount can stop (a nested
//! repository, git data laid out in a writable tree) is moved aside and refused at the next
//! start. In no case does a marker appear. The positive controls show the agent still commits,
//! branches, stashes, rebases, merges, tags, changes its own config and hooks and runs `git gc
//! --auto`, in the main checkout and in a session started from a worktree, and its commits
//! reach the user's repository.
//!
//! As the ordinary user `ocsb-test`, with the netlock table in a network namespace the test
//! creates (only `lo`), like `sandbox_exec.rs`.

use crate::support::sandbox::{NETLOCK_MODE, ORIGIN_NS, World, has, no_markers, scenario, shell_quote};

/// The names git obeys in a git directory, written inside: they are the agent's own (its
/// `.git` is its repository), so each write succeeds, and the user's `.git` stays byte for byte
/// as it was (config, hooks). The names the user's git reads from the tree (a hook a link in
/// the user's hooks directory leads to, a `core.hooksPath` and an include target in the tree,
/// ocsb's settings) stay read-only. Then host git with hooks, fsmonitor and includes in play,
/// and `ocsb wt`, run nothing of the agent's.
#[test]
fn git_names_are_the_agents_own_inside_and_the_users_stay_unchanged() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"mkdir -p scripts; printf '#!/bin/sh\n' > scripts/pre-commit; chmod +x scripts/pre-commit; chown -R 1990 scripts
        U ln -s ../../scripts/pre-commit .git/hooks/pre-commit
        U git config core.hooksPath .husky/_; U git config include.path ../tools/git.inc; mkdir -p tools; chown 1990 tools
        snap() { sha256sum < .git/config; ls -lA --time-style=+%s .git/hooks | sha256sum; sha256sum < .git/HEAD; }
        snap > before.snap
        X "python3 $PROBE write $P/scripts/pre-commit" | tail -1 | sed 's/^/linked-hook /'
        X "for f in .husky/_/pre-commit .husky/pre-commit tools/git.inc .opencode-sandbox/local/sandbox.conf .cc-safety-net/policy.json; do
             echo \"\$f \$(python3 $PROBE write $P/\$f | tail -1)\"; done"
        X "mkdir -p .git/modules/x .git/worktrees/evil && echo admin-dirs-made
           for f in .git/config .git/config.worktree .git/hooks/pre-commit .git/hooks/post-checkout .git/info/attributes .git/commondir; do
             echo \"\$f \$(python3 $PROBE write $P/\$f | tail -1)\"; done"
        snap > after.snap; cmp -s before.snap after.snap && echo user-git-unchanged
        for n in commondir config.worktree modules worktrees info/attributes hooks/post-checkout; do test -e .git/$n && echo "user-has $n"; done
        U git status --short >/dev/null; U git commit -q --allow-empty -m host; echo "host-commit $?"; U git log --oneline >/dev/null
        U "$OCSB" wt add feat-a >/dev/null 2>&1; echo "wt-add $?"; U "$OCSB" wt list >/dev/null 2>&1; echo "wt-list $?""#,
    );
    for name in [
        ".husky/_/pre-commit",
        ".husky/pre-commit",
        "tools/git.inc",
        ".opencode-sandbox/local/sandbox.conf",
        ".cc-safety-net/policy.json",
    ] {
        has(&out, &format!("{name} ERR EROFS"), &err);
    }
    has(&out, "linked-hook ERR EROFS", &err);
    has(&out, "admin-dirs-made", &err);
    for name in [
        ".git/config",
        ".git/config.worktree",
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        ".git/info/attributes",
        ".git/commondir",
    ] {
        has(&out, &format!("{name} OK"), &err);
    }
    has(&out, "user-git-unchanged", &err);
    assert!(!out.contains("user-has "), "a name reached the user's .git:\n{out}\n{err}");
    for l in ["host-commit 0", "wt-add 0", "wt-list 0"] {
        has(&out, l, &err);
    }
    no_markers(&w, &out, &err);
}

/// What no mount can stop: a nested repository (with a gitlink in the agent's index so the
/// superproject's `git status` would enter it), a new `.envrc`. The launcher moves the nested
/// `.git` aside when the sandbox exits, so plain `git status` after it runs nothing; the next
/// `ocsb exec` and `ocsb wt list` refuse, naming each path; `ocsb audit --accept` (for what the
/// user vouches) lets them start again. Legacy remotes written into `.git` are the agent's
/// own: they never reach the user's `.git`.
#[test]
fn planted_repositories_and_tool_files_are_caught_and_refused() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"X 'export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.invalid GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.invalid;
             echo "echo hi" > .envrc; mkdir -p .git/remotes && echo "URL: /tmp/x" > .git/remotes/origin
             mkdir -p sub && cd sub && git init -q . && git commit -q --allow-empty -m n &&
             git config core.fsmonitor "touch $HOME/PWNED_nested; false" && cd .. &&
             git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub' 2>exec1.err
        echo "exec1 $?"; cat exec1.err >&2
        U git status >/dev/null 2>&1; U git -C sub status >/dev/null 2>&1
        X true 2>exec2.err; echo "exec2 $?"; cat exec2.err >&2
        grep -q 'refusing to start a sandbox' exec2.err && echo refused-start
        grep -q "$P/.envrc" exec2.err && echo names-envrc
        test -e .git/remotes || echo no-user-remotes
        U git ls-files -s sub | grep -q . && echo user-index-has-gitlink
        grep -q "sub/.git.ocsb-planted-" exec2.err && echo names-nested
        U "$OCSB" wt list >/dev/null 2>wt.err; echo "wt $?"; grep -q 'refusing to run git here' wt.err && echo refused-wt
        U "$OCSB" audit >/dev/null 2>&1; echo "audit $?"
        rm -rf sub/.git.ocsb-planted-*
        U "$OCSB" audit --accept >/dev/null 2>&1; echo "accept $?"
        X 'echo started' 2>/dev/null"#,
    );
    // The live watch moves `sub/.git` aside as `git init` makes it (the agent's commands there
    // may fail); the exit look finds the `.envrc`.
    has(&out, "exec2 1", &err);
    for l in
        ["refused-start", "names-envrc", "no-user-remotes", "names-nested", "wt 1", "refused-wt", "audit 1"]
    {
        has(&out, l, &err);
    }
    assert!(
        !out.contains("user-index-has-gitlink"),
        "the agent's gitlink reached the user's index:\n{out}\n{err}"
    );
    has(&out, "accept 0", &err);
    has(&out, "started", &err);
    no_markers(&w, &out, &err);
}

/// A repository the user keeps nested in the project (there before the first start) is no
/// plant: every start works, its `.git` stays where it is, inside its `.git` is the agent's own
/// (config written there never reaches the user's) and its files are writable. The launcher's
/// own read-only placeholders at its top (for ocsb's settings there) are not taken for settings
/// planted below a checkout's top.
#[test]
fn a_repository_nested_before_the_start_is_protected_not_refused() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"mkdir -p vendor/lib; chown -R 1990 vendor
        (cd vendor/lib && U git init -q . && U git commit -q --allow-empty -m v)
        sha256sum < vendor/lib/.git/config > before.sum
        X 'echo x >> vendor/lib/.git/config; echo config=$?; echo ok > vendor/lib/file; echo file=$?' 2>exec1.err
        sha256sum < vendor/lib/.git/config | cmp -s - before.sum && echo user-nested-config-unchanged
        echo "exec1 $?"; cat exec1.err >&2
        X 'echo second' 2>exec2.err; echo "exec2 $?"; cat exec2.err >&2
        test -d vendor/lib/.git && echo nested-in-place
        U "$OCSB" audit >/dev/null 2>&1; echo "audit $?""#,
    );
    for l in [
        "config=0",
        "user-nested-config-unchanged",
        "file=0",
        "exec1 0",
        "second",
        "exec2 0",
        "nested-in-place",
        "audit 0",
    ] {
        has(&out, l, &err);
    }
    no_markers(&w, &out, &err);
}

/// A launcher killed while the first sandbox since a repository was nested in the project ran
/// leaves the checkout rule's placeholders at that repository's top, and its record of the
/// run: the next start takes them for the launcher's, not for settings planted below a
/// checkout's top.
#[test]
fn a_launcher_killed_during_a_first_start_leaves_nothing_to_refuse_at_a_nested_repository() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"X true >/dev/null 2>&1; echo "first $?"
        mkdir -p vendor/lib; chown -R 1990 vendor
        (cd vendor/lib && U git init -q . && U git commit -q --allow-empty -m v)
        U "$OCSB" exec -- sleep 30 </dev/null >/dev/null 2>&1 &
        for i in $(seq 100); do pgrep -f "^$OCSB __sandbox-init" >/dev/null && [ -d vendor/lib/.cc-safety-net ] && break; sleep 0.1; done
        sleep 0.5; pkill -KILL -f "^$OCSB exec -- sleep 30"; sleep 0.5
        for i in $(seq 50); do pgrep -f "^$OCSB __sandbox-init" >/dev/null || break; sleep 0.1; done
        test -d vendor/lib/.cc-safety-net && echo placeholder-left
        ls -a "$HOME/.local/share/opencode-sandbox/.proj.audit" | grep -q '^running-' && echo marker-left
        X 'echo after' 2>exec.err; echo "exec $?"; cat exec.err >&2
        U "$OCSB" audit >/dev/null 2>&1; echo "audit $?""#,
    );
    for l in ["first 0", "placeholder-left", "marker-left", "after", "exec 0", "audit 0"] {
        has(&out, l, &err);
    }
    no_markers(&w, &out, &err);
}

/// The agent works with git: in the main checkout, and in a session started from a worktree
/// (whose settings and trust come from the main checkout: its own `.opencode-sandbox/local`
/// is read-only and ignored). It commits, branches, stashes, cherry-picks, rebases, merges,
/// tags, runs `git gc --auto`, and changes its own config and hooks (which run inside); its
/// branches and tags reach the user's repository (`git log` on the host), and the user's
/// config and hooks are unchanged. From the worktree session no git directory of the user's
/// and nothing of the main checkout is writable.
#[test]
fn the_agent_commits_in_the_main_checkout_and_in_a_worktree_session() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r##"snap() { sha256sum < "$P/.git/config"; ls -lA --time-style=+%s "$P/.git/hooks" | sha256sum; }
        snap > "$P/../before.snap"
        X 'set -e; git config alias.lg "log --oneline"; git config core.fsmonitor false;
             printf "#!/bin/sh\necho hook-ran-inside >&2\n" > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit;
             echo a > a; git add a; git commit -q -m a; git lg >/dev/null; git branch b1; git switch -q -c topic;
             echo t > t; git add t; git commit -q -m t; git switch -q main; echo s > s; git add s; git stash -q;
             git stash pop -q; git commit -q -m s; git tag v1; git cherry-pick topic >/dev/null; git switch -q topic;
             git rebase -q main; git switch -q main; git merge -q --no-edit topic; git worktree list >/dev/null;
             git gc --auto -q; echo main-ok' 2>x1.err; grep -c hook-ran-inside x1.err | sed 's/^/hook-runs /'; tail -3 x1.err >&2
        echo "log $(U git log --format=%s main | tr '\n' ' ')"
        echo "branches $(U git branch --format='%(refname:short)' | tr '\n' ' ')"
        echo "tags $(U git tag | tr '\n' ' ')"
        echo "status [$(U git status --porcelain --untracked-files=no)]"
        WT=$(U "$OCSB" wt add feat-b 2>/dev/null); echo "wt $?"
        cd "$WT"
        U "$OCSB" exec -- sh -c 'set -e; git config alias.ci commit; h=$(git rev-parse --git-path hooks); mkdir -p "$h";
             printf "#!/bin/sh\necho wt-hook-ran-inside >&2\n" > "$h/pre-commit"; chmod +x "$h/pre-commit"; echo w > w; git add w; git ci -q -m in-worktree; git switch -q -c feat-c;
             git switch -q feat-b; echo wt-ok' </dev/null 2>x2.err; grep -c wt-hook-ran-inside x2.err | sed 's/^/wt-hook-runs /'; tail -3 x2.err >&2
        for f in "$WT/.opencode-sandbox/sandbox.conf" "$WT/.git" "$P/.git/hooks/post-checkout" "$P/README-main" \
                 "$P/.git/worktrees/feat-b/gitdir" "$P/.git/worktrees/feat-b/commondir" "$P/.git/commondir" "$P/.git/config"; do
          echo "probe $(U "$OCSB" exec -- python3 "$PROBE" write "$f" </dev/null 2>/dev/null | tail -1)"; done
        snap > "$P/../after.snap"; cmp -s "$P/../before.snap" "$P/../after.snap" && echo user-git-unchanged
        # The worktree's own rules and local settings are not layers: a host-side edit (as if the
        # agent had committed it on the branch) changes nothing.
        echo 'connect 10.1.2.3:22' >> .opencode-sandbox/egress.conf; mkdir -p .opencode-sandbox/local
        echo 'OCSB_SANDBOX=0' > .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox
        echo "explain $(U "$OCSB" egress explain --connect 10.1.2.3:22 2>/dev/null | head -1 | cut -d' ' -f1)"
        echo "sandbox $(U "$OCSB" config 2>/dev/null | grep '^OCSB_SANDBOX=')"
        echo "wtlog $(U git log --format=%s -1 feat-b)"
        echo "wtbranch $(U git rev-parse -q --verify refs/heads/feat-c >/dev/null && echo feat-c)"
        echo "seccomp $(U "$OCSB" exec -- grep -c '^Seccomp:.*2' /proc/self/status </dev/null 2>/dev/null)"
        U "$OCSB" config 2>/dev/null | grep -q "^OCSB_NAME=proj" && echo name-from-main"##,
    );
    has(&out, "main-ok", &err);
    has(&out, "hook-runs 3", &err);
    has(&out, "log t s a ocsb init", &err);
    has(&out, "branches b1 main topic", &err);
    has(&out, "tags v1", &err);
    has(&out, "status []", &err);
    has(&out, "wt 0", &err);
    has(&out, "wt-ok", &err);
    has(&out, "wt-hook-runs 1", &err);
    let probes: Vec<&str> = out.lines().filter(|l| l.starts_with("probe ")).collect();
    assert_eq!(probes.len(), 8, "{out}\n{err}");
    assert!(
        probes.iter().all(|l| *l == "probe ERR EROFS" || *l == "probe ERR ENOENT"),
        "a probe wrote from the worktree session:\n{out}\n{err}"
    );
    has(&out, "user-git-unchanged", &err);
    has(&out, "explain deny", &err);
    has(&out, "sandbox OCSB_SANDBOX=1", &err);
    has(&out, "wtlog in-worktree", &err);
    has(&out, "wtbranch feat-c", &err);
    has(&out, "seccomp 1", &err);
    has(&out, "name-from-main", &err);
    no_markers(&w, &out, &err);
}

/// `git fetch` and `git push` from inside go through the filter (a smart-HTTP server on a
/// documentation address in a namespace behind the test's), and not around it.
#[test]
fn fetch_and_push_go_through_the_filter() {
    let w = World::new();
    let srv = w.root.join("srv");
    let (out, err) = scenario(
        &w,
        &format!(
            r#"{NETLOCK_MODE}{ORIGIN_NS}S={srv}; mkdir -p "$S/cgi-bin"; chown 1990 "$S"
        U git clone -q --bare "$P" "$S/repo.git"; U git -C "$S/repo.git" config http.receivepack true
        printf '#!/bin/sh\nexport GIT_PROJECT_ROOT=%s GIT_HTTP_EXPORT_ALL=1 HOME=/tmp\nexec git -c safe.directory="*" http-backend\n' "$S" > "$S/cgi-bin/git"
        chmod -R a+rwX "$S"; chmod 755 "$S/cgi-bin/git"
        (cd "$S" && exec ip netns exec "$ON" python3 -m http.server --cgi --bind 192.0.2.1 80 >/dev/null 2>&1) & SRV=$!
        trap 'kill $SRV; U "$OCSB" egress down >/dev/null 2>&1 </dev/null || true; ip netns del "$ON"' EXIT
        for i in $(seq 50); do curl -s -o /dev/null http://192.0.2.1/ && break; sleep 0.1; done
        U git remote add origin http://192.0.2.1/cgi-bin/git/repo.git
        # The filter runs as the user's own group, as it does when the shim gives only the sandbox
        # the netlock group (here every `U` command has it, so start the filter first without).
        env -i PATH=/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1 </dev/null
        X 'set -e; echo p > pushed; git add pushed; git commit -q -m pushed; git fetch -q origin;
           git push -q origin HEAD:refs/heads/from-agent; echo push-ok' 2>x.err; tail -3 x.err >&2
        X 'env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY git push -q origin HEAD:refs/heads/direct 2>&1 || echo direct-failed' 2>/dev/null
        echo "server $(git -c safe.directory='*' --git-dir "$S/repo.git" log --format=%s -1 from-agent 2>&1)"
        echo "direct $(git -c safe.directory='*' --git-dir "$S/repo.git" rev-parse -q --verify refs/heads/direct || echo none)""#,
            srv = shell_quote(&srv.display().to_string())
        ),
    );
    has(&out, "push-ok", &err);
    has(&out, "direct-failed", &err);
    has(&out, "server pushed", &err);
    has(&out, "direct none", &err);
}

/// The second round of attacks: an `.opencode-sandbox/` in a subdirectory (which would have become
/// a project with the agent's own trusted `local/` layer), a symlink in `.git` that host git
/// writes through (`COMMIT_EDITMSG -> ~/victim`), an index entry inside `.git` (which `git
/// checkout -- .` would write into `.git/hooks`), a directory laid out as a bare repository, and
/// a worktree renamed away to be replaced by the agent's own repository. The link and the index
/// entry are made in the agent's own `.git`: the user's has neither, and the user's `git
/// checkout -- .` and `git commit` write nothing through them. The others are reported and
/// refused at the next start, or refused at once.
#[test]
fn subdirectory_settings_git_symlinks_index_paths_and_worktree_swaps_are_stopped() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"echo precious > "$HOME/victim"; chown 1990 "$HOME/victim"
        WT=$(U "$OCSB" wt add feat-s 2>/dev/null)
        X "mkdir -p src/deep/.x src/.opencode-sandbox/local && echo OCSB_SANDBOX=0 > src/.opencode-sandbox/local/sandbox.conf;
           ln -s $HOME/victim .git/COMMIT_EDITMSG;
           mkdir -p lib/fake/objects lib/fake/refs && echo 'ref: refs/heads/main' > lib/fake/HEAD;
           mkdir -p .gia/hooks && printf '#!/bin/sh\ntouch $HOME/PWNED_index\n' > .gia/hooks/post-commit && chmod +x .gia/hooks/post-commit;
           git add .gia && rm -r .gia && python3 -c \"
import hashlib; b=open('.git/index','rb').read()[:-20].replace(b'.gia/',b'.git/'); open('.git/index','wb').write(b+hashlib.sha1(b).digest())\";
           mv $WT $WT.moved 2>/dev/null || echo rename-refused" 2>x.err
        cd src/deep; echo "subdir $(U "$OCSB" config 2>/dev/null | grep '^OCSB_SANDBOX=')"; cd "$P"
        test -L .git/COMMIT_EDITMSG || echo user-editmsg-no-link
        U git ls-files | grep -q '^.git/' || echo user-index-clean
        grep -q "lib/fake" x.err && echo names-bare
        grep -q "src/.opencode-sandbox" x.err && echo names-subdir-settings
        U git checkout -q -- . 2>/dev/null; U git commit -q --allow-empty -m host 2>/dev/null
        echo "victim $(cat "$HOME/victim")"; test -e .git/hooks/post-commit || echo no-hook
        X true 2>/dev/null; echo "exec $?""#,
    );
    for l in [
        "rename-refused",
        "subdir OCSB_SANDBOX=1",
        "user-editmsg-no-link",
        "user-index-clean",
        "names-bare",
        "names-subdir-settings",
        "victim precious",
        "no-hook",
        "exec 1",
    ] {
        has(&out, l, &err);
    }
    no_markers(&w, &out, &err);
}

/// A shell function for a `plant.sh` written through an unquoted here-document: `lay DATA
/// WORKTREE NAME` lays out git data at `DATA` (no `HEAD` of its own; a linked worktree's
/// directory `worktrees/y` whose pointers agree) for a worktree directory `WORKTREE`, its config
/// running `touch $HOME/PWNED_NAME` as `core.fsmonitor`. The caller writes `WORKTREE/.git`.
const LAY: &str = r#"lay() {
  mkdir -p \$1/worktrees/y \$1/objects \$1/refs/heads \$2
  echo "ref: refs/heads/main" > \$1/worktrees/y/HEAD; echo ../.. > \$1/worktrees/y/commondir
  echo "\$2/.git" > \$1/worktrees/y/gitdir
  printf "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch $HOME/PWNED_\$3; false\n" > \$1/config
}"#;

/// A linked worktree whose git data the agent laid out itself, with pointers that agree: in
/// the worktrees directory without a `HEAD` (so no repository to the walk), and as a `.git` in
/// the sandbox's own `/tmp` (which the look does not walk). The user's `git status` in such a
/// worktree obeyed that config (`core.fsmonitor`). Each is reported when the sandbox exits
/// (a worktree's git data the sandbox can write and no checkout owns) and its `.git` moved
/// aside, so that `git status` there runs nothing.
#[test]
fn a_worktree_of_git_data_the_agent_laid_out_is_planted() {
    let w = World::new();
    let tmp = w.state.join("tmp");
    let (out, err) = scenario(
        &w,
        &format!(
            r#"W="$P-worktrees"; mkdir -p "$W"; chown 1990 "$W"; T={tmp}
        cat > plant.sh <<PLANT
set -e; W="$W"
{LAY}
lay \$W/ag \$W/evil wt; echo "gitdir: \$W/ag/worktrees/y" > \$W/evil/.git
# In the sandbox's own /tmp, which is $T on the host.
lay /tmp/x/.git \$W/evil2 tmp; echo "gitdir: $T/x/.git/worktrees/y" > \$W/evil2/.git
echo planted
PLANT
        chown 1990 plant.sh
        X "sh $P/plant.sh" 2>&1
        for d in evil evil2; do (cd "$W/$d" && U git status >/dev/null 2>&1); echo "$d .git: $(test -e "$W/$d/.git" && echo present || echo moved)"; done"#,
            tmp = tmp.display()
        ),
    );
    // The live watch moves them aside as they appear (the agent's script may stop there); the
    // look at the exit, when a watch missed one, says "no checkout's .git".
    for d in ["evil", "evil2"] {
        assert!(
            out.contains(&format!("proj-worktrees/{d}/.git.ocsb-planted-"))
                && (out.contains("no checkout's .git") || out.contains("appeared while the sandbox ran")),
            "{d} reported and moved aside:\n{out}\n{err}"
        );
        has(&out, &format!("{d} .git: moved"), &err);
    }
    no_markers(&w, &out, &err);
}

/// The launcher's own look runs git (`git config --list`) on repositories the agent made, and
/// must run nothing of theirs: a sparse index whose trees are missing made git fetch them from
/// a promisor remote, and a local remote's `uploadpack` is a command. It ran on the host, from
/// the launcher, before the user ran any git. The look's git has no transport; the worktree is
/// reported as the agent's, and nothing ran.
#[test]
fn the_look_runs_nothing_of_a_repository_the_agent_made() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        &format!(
            r#"W="$P-worktrees"; mkdir -p "$W"; chown 1990 "$W"
        cat > plant.sh <<PLANT
set -e; W="$W"
{LAY}
cd /tmp && rm -rf s && git init -q -b main s && cd s && mkdir d && echo x > d/f && echo y > top && git add . && git -c user.name=a -c user.email=a@b commit -qm c
git sparse-checkout set --cone --sparse-index >/dev/null 2>&1
lay \$W/ag \$W/ev look
cp /tmp/s/.git/index \$W/ag/worktrees/y/index
printf '[core]\n\trepositoryformatversion = 0\n[remote "origin"]\n\turl = /\n\tpromisor = true\n\tuploadpack = touch $HOME/PWNED_look; false\n' > \$W/ag/config
echo "gitdir: \$W/ag/worktrees/y" > \$W/ev/.git
echo "sparse \$(git ls-files --sparse | tr '\n' ' ')"
PLANT
        chown 1990 plant.sh
        X "sh $P/plant.sh" 2>&1
        U "$OCSB" exec -- true 2>&1 | head -3"#
        ),
    );
    has(&out, "sparse d/ top", &err);
    assert!(out.contains("proj-worktrees/ev/.git.ocsb-planted-"), "reported and moved aside:\n{out}\n{err}");
    no_markers(&w, &out, &err);
}

/// Git data the agent lays out where the walk looked for other shapes, each with a
/// `core.fsmonitor` command: a worktree `.git` file git reads (a NUL, then bytes that are not
/// UTF-8) and the check could not; a worktree whose `.git` is a link to a `gitdir:` file; a
/// directory with a `HEAD` that is a link and `objects`/`refs`, and one with a `HEAD` and a
/// `commondir` (both given a work tree by their config); links from the project and the
/// worktrees directory to a repository in the sandbox's own `/tmp`, which the walk does not
/// cover. Each went unreported and the user's `git status` there ran the command. Now each is
/// reported when the sandbox exits and moved aside (for a directory laid out as a git
/// directory, its `HEAD`), the next start refuses, and nothing runs. A repository made inside
/// `.git` (with a link to it from the tree) is made in the agent's own `.git`: the user's has
/// none, and the link leads nowhere on the host.
#[test]
fn git_data_in_the_shapes_git_reads_and_the_walk_missed_is_planted() {
    let w = World::new();
    let tmp = w.state.join("tmp");
    let (out, err) = scenario(
        &w,
        &format!(
            r#"W="$P-worktrees"; mkdir -p "$W"; chown 1990 "$W"; T={tmp}
        cat > plant.sh <<PLANT
set -e; W="$W"
fsm() {{ printf "[core]\n\trepositoryformatversion = \$2\n\tbare = false\n\tworktree = .\n\tfsmonitor = touch $HOME/PWNED_\$1; false\n"; }}
{LAY}
lay \$W/a1 \$W/bytes bytes; printf 'gitdir: %s\000\377\n' "\$W/a1/worktrees/y" > \$W/bytes/.git
lay \$W/a2 \$W/linked linked; echo "gitdir: \$W/a2/worktrees/y" > \$W/linked/gf; ln -s gf \$W/linked/.git
cd $P
mkdir -p src/objects src/refs/heads; ln -s refs/heads/main src/HEAD; fsm src 0 > src/config
mkdir -p lib/.c/objects lib/.c/refs/heads; echo "ref: refs/heads/main" > lib/HEAD; echo .c > lib/commondir
fsm lib 0 > lib/config; fsm lib 0 > lib/.c/config
git init -q /tmp/x; git -C /tmp/x config core.fsmonitor "touch $HOME/PWNED_tmp; false"
ln -s $T/x $P/docs; ln -s $T/x \$W/feat-e
mkdir -p $P/.git/objects/zz; git init -q $P/.git/objects/zz; git -C $P/.git/objects/zz config core.fsmonitor "touch $HOME/PWNED_ingit; false"
ln -s .git/objects/zz $P/notes
echo planted
PLANT
        chown 1990 plant.sh
        X "sh $P/plant.sh" 2>&1
        for d in "$W/bytes" "$W/linked" "$P/src" "$P/lib" "$P/docs" "$W/feat-e" "$P/notes"; do (cd "$d" 2>/dev/null && U git status >/dev/null 2>&1); done
        test -e "$P/.git/objects/zz" || echo user-git-untouched
        U "$OCSB" exec -- true >/dev/null 2>&1; echo "next start $?""#,
            tmp = tmp.display()
        ),
    );
    has(&out, "planted", &err);
    for moved in ["proj-worktrees/bytes/.git.ocsb-planted-", "proj-worktrees/linked/.git.ocsb-planted-"] {
        assert!(out.contains(moved), "{moved}:\n{out}\n{err}");
    }
    has(&out, "user-git-untouched", &err);
    for link in ["proj/docs.ocsb-planted-", "proj-worktrees/feat-e.ocsb-planted-"] {
        assert!(out.contains(link), "{link}:\n{out}\n{err}");
    }
    for head in ["proj/src/HEAD.ocsb-planted-", "proj/lib/HEAD.ocsb-planted-"] {
        assert!(out.contains(head), "{head}:\n{out}\n{err}");
    }
    assert!(!out.contains("next start 0"), "the next start refuses while the layouts stand:\n{out}");
    no_markers(&w, &out, &err);
}

/// A `HEAD` the agent broke made the look read only the global config: the next session
/// lost the repository's `core.hooksPath`, planted a hook there and mended `HEAD`. The `HEAD`
/// the agent breaks now is its own repository's: the user's stays as it was, so the look reads
/// the user's config, the hooks path stays held in the next session, and nothing stands to
/// refuse or accept.
#[test]
fn a_head_the_agent_breaks_is_its_own_and_the_hooks_path_stays_held() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"U git config core.hooksPath .husky/_; mkdir -p .husky/_; chown -R 1990 .husky
        X 'echo garbage > .git/HEAD; echo broke=$?' 2>&1
        echo "user-head $(cat .git/HEAD)"
        U "$OCSB" audit >/dev/null 2>&1; echo "audit $?"
        X "printf '#!/bin/sh\ntouch $HOME/PWNED_husky\n' > .husky/_/pre-commit && chmod +x .husky/_/pre-commit; echo hook=\$?; echo 'ref: refs/heads/main' > .git/HEAD" 2>second.err
        echo "second $?"; cat second.err >&2
        U git commit -q --allow-empty -m host 2>&1 | tail -1; echo "host-log $(U git log -1 --format=%s)""#,
    );
    for l in ["broke=0", "user-head ref: refs/heads/main", "audit 0", "second 0", "host-log host"] {
        has(&out, l, &err);
    }
    assert!(!out.contains("hook=0"), "the hooks path was writable:\n{out}\n{err}");
    no_markers(&w, &out, &err);
}

/// Config git does not read yet but will: an include whose target's directory does not exist
/// (the agent made `cfg/` and then `cfg/extra` with `core.fsmonitor`, and the user's `git
/// status` ran it), and a conditional include on a branch the agent can switch to (it set
/// `core.hooksPath` only on `main`: the agent checked out another branch, and the next session
/// wrote a hook there and switched back). The target and the directories on the way to it are
/// now held by placeholders, and what a conditional include sets is held whatever the branch.
#[test]
fn config_git_will_read_once_it_exists_or_its_condition_holds_is_held() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"U git config include.path ../cfg/extra
        X "mkdir -p cfg; printf '[core]\n\tfsmonitor = touch $HOME/PWNED_inc\n' > cfg/extra; echo include=\$?" 2>/dev/null
        printf '[core]\n\thooksPath = .husky/_\n' > hooks.inc; chown 1990 hooks.inc; U git add hooks.inc; U git commit -qm inc
        U git config 'includeIf.onbranch:main.path' ../hooks.inc; mkdir -p .husky/_; chown -R 1990 .husky
        X "git switch -q -c other; echo switched=\$?" 2>&1
        X "mkdir -p .husky/_; printf '#!/bin/sh\ntouch $HOME/PWNED_onbranch\n' > .husky/_/pre-commit && chmod +x .husky/_/pre-commit; echo hook=\$?; git switch -q main" 2>/dev/null
        X "git commit -q --allow-empty -m inside; echo commit=\$?" 2>/dev/null
        U git status --short >/dev/null 2>&1; U git commit -q --allow-empty -m host 2>&1 | tail -1
        U "$OCSB" audit >/dev/null 2>&1; echo "audit $?""#,
    );
    for l in ["switched=0", "commit=0", "audit 0"] {
        has(&out, l, &err);
    }
    assert!(!out.contains("include=0"), "the include target could be made:\n{out}\n{err}");
    assert!(!out.contains("hook=0"), "the conditional hooks path was writable:\n{out}\n{err}");
    no_markers(&w, &out, &err);
}

/// Config values that do not lead where they seem: a `core.hooksPath` hidden by a later one
/// from a conditional include that holds now (the agent switched branches, and the hidden one,
/// never held, was the one git obeyed), and an include path with `..` after a directory the
/// agent could swap for a link (git opens the path as written, so the link decides). Every
/// hooks path of the listing is held now, and each directory a `..` steps out of is too.
#[test]
fn hooks_paths_hidden_by_a_condition_and_links_before_dotdot_are_held() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"U git config core.hooksPath tools/hooks
        printf '[core]\n\thooksPath = .husky/_\n' > hooks.inc; chown 1990 hooks.inc; mkdir -p .husky/_; chown -R 1990 .husky
        U git config 'includeIf.onbranch:main.path' ../hooks.inc
        U git config include.path ../cfg/sub/../x.inc
        X "mkdir -p tools/hooks; printf '#!/bin/sh\ntouch $HOME/PWNED_override\n' > tools/hooks/pre-commit && chmod +x tools/hooks/pre-commit; echo hook=\$?; git switch -q -c other; echo switched=\$?" 2>/dev/null
        X "mkdir -p evil; rm -rf cfg/sub; ln -s ../evil cfg/sub; echo link=\$?; printf '[core]\n\tfsmonitor = touch $HOME/PWNED_dotdot\n' > x.inc" 2>/dev/null
        U git status --short >/dev/null 2>&1; U git commit -q --allow-empty -m host 2>&1 | tail -1
        U "$OCSB" audit >/dev/null 2>&1; echo "audit $?""#,
    );
    has(&out, "switched=0", &err);
    has(&out, "audit 0", &err);
    assert!(!out.contains("hook=0"), "the hidden hooks path was writable:\n{out}\n{err}");
    assert!(!out.contains("link=0"), "the directory before `..` became a link:\n{out}\n{err}");
    no_markers(&w, &out, &err);
}

/// A program the user's config has git run by a path in the tree (`core.fsmonitor =
/// tools/fsmon.sh`, as watchman-style integrations set it): the agent rewrote the script, and
/// the user's `git status` ran it. Such programs are held read-only like the config itself;
/// programs git finds on `PATH` are not the tree's.
#[test]
fn programs_the_config_runs_from_the_tree_are_held() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"mkdir -p tools; printf '#!/bin/sh\nexit 1\n' > tools/fsmon.sh; chmod +x tools/fsmon.sh; chown -R 1990 tools
        U git config core.fsmonitor tools/fsmon.sh; U git config filter.nb.clean './tools/clean.sh --strip'
        X "printf '#!/bin/sh\ntouch $HOME/PWNED_fsmon\nexit 1\n' > tools/fsmon.sh; echo fsmon=\$?; printf '#!/bin/sh\ntouch $HOME/PWNED_clean\n' > tools/clean.sh; echo clean=\$?; echo x > tools/other; echo other=\$?" 2>/dev/null
        echo '*.txt filter=nb' > .gitattributes; echo t > a.txt; chown 1990 .gitattributes a.txt
        U git status --short >/dev/null 2>&1; U git add a.txt 2>/dev/null; echo "status done""#,
    );
    has(&out, "other=0", &err);
    has(&out, "status done", &err);
    assert!(!out.contains("fsmon=0"), "the fsmonitor script was writable:\n{out}\n{err}");
    assert!(!out.contains("clean=0"), "the filter's missing script could be made:\n{out}\n{err}");
    no_markers(&w, &out, &err);
}

/// A rebase the agent stopped, with an `exec` line git reads and a check would not (a tab after
/// `x`): the user's `git rebase --continue` ran it. The rebase is now the agent's own
/// repository's: the user's `.git` has no rebase in progress, the user's branch is not moved
/// by one in the middle, and `git rebase --continue` on the host has nothing to continue.
#[test]
fn an_unfinished_rebase_the_agent_left_stays_in_its_own_repository() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"X "GIT_SEQUENCE_EDITOR='sed -i 1ibreak' git rebase -q -i HEAD >/dev/null 2>&1; printf 'x\ttouch $HOME/PWNED_rebase\n' > .git/rebase-merge/git-rebase-todo; echo stopped" 2>&1
        for d in rebase-merge rebase-apply sequencer; do test -e .git/$d && echo "user-has $d"; done
        echo "user-head $(cat .git/HEAD)"
        U git rebase --continue >/dev/null 2>&1; echo "continue $?""#,
    );
    has(&out, "stopped", &err);
    has(&out, "user-head ref: refs/heads/main", &err);
    assert!(!out.contains("user-has "), "the rebase reached the user's .git:\n{out}\n{err}");
    assert!(!out.contains("continue 0"), "the host had a rebase to continue:\n{out}\n{err}");
    no_markers(&w, &out, &err);
}

/// Plants the check could not move aside: a nested repository (with a gitlink, so the
/// superproject's `git status` enters it) in a directory the agent made read-only, and one in a
/// directory it made unreadable. Moving the first failed in silence, and the second was only
/// "a directory the check cannot read"; the user's `git status` ran both. Now the first is
/// moved aside (the directory writable for its owner again), the unreadable directory is moved
/// aside whole, and nothing runs.
#[test]
fn plants_in_read_only_or_unreadable_directories_are_moved_aside() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"X 'set -e; export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.invalid GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.invalid; for d in sub sub2; do mkdir $d; git -C $d init -q; git -C $d config core.fsmonitor "touch $HOME/PWNED_$d; false"; git -C $d commit -q --allow-empty -m x; git add $d 2>/dev/null; done; chmod a-w sub; chmod 111 sub2; echo planted' 2>&1
        U git status >/dev/null 2>&1; echo "status $?""#,
    );
    // The live watch moves `sub/.git` aside as `git init` makes it, before the agent can make
    // its directory read-only (a directory made unreadable first: agent_git_attacks).
    assert!(out.contains("proj/sub/.git.ocsb-planted-"), "moved aside:\n{out}\n{err}");
    assert!(!out.contains("NOT moved aside"), "{out}");
    no_markers(&w, &out, &err);
}

/// The look must end: worktree git directories whose `HEAD` is a FIFO held each of the look's
/// git runs for its whole limit, one after another (four took two minutes, and the agent can
/// make any number). The look's git runs only `git config` now, all its runs share one
/// budget, and the repository the agent made in the worktrees directory is moved aside.
#[test]
fn git_directories_that_would_hold_git_do_not_hold_the_look() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"W="$P-worktrees"; mkdir -p "$W"; chown 1990 "$W"
        s=$(date +%s)
        X "set -e; git init -q $W/r; for n in 1 2 3 4; do d=$W/r/.git/worktrees/a\$n; mkdir -p \$d; echo ../../ > \$d/commondir; : > \$d/index; mkfifo \$d/HEAD; done; echo planted" 2>&1
        echo "look took $(( $(date +%s) - s ))s""#,
    );
    // The live watch moves `r/.git` aside as `git init` makes it; the rest of the script fails.
    assert!(out.contains("proj-worktrees/r/.git.ocsb-planted-"), "reported and moved aside:\n{out}\n{err}");
    assert!(!out.contains("NOT moved aside"), "inside the moved-aside .git, named where it is:\n{out}");
    let secs: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("look took ")?.strip_suffix('s')?.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(secs < 25, "the session's end waited {secs}s for git:\n{out}");
}
