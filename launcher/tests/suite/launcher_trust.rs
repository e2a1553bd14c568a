//! The launcher trusts nothing the agent can write: its private files in the state directory,
//! the choice of project directory, other projects' state, settings that name host programs.
//! Each attack is made as an agent would make it (as the ordinary user `ocsb-test`, through
//! `ocsb exec`, in a network namespace the test creates) and checked on the host side.

use crate::support::sandbox::{NETLOCK_MODE, World, has, run_ok, scenario};

/// A sandbox that runs before the project's first `ocsb run` cannot plant `run.lock` (a link
/// the lock's write would follow) or `password` (the agent's own web password): both exist,
/// hidden, before any sandbox starts.
#[test]
fn private_state_files_exist_before_any_sandbox_and_cannot_be_planted() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"ST="$HOME/.local/share/opencode-sandbox/proj"; echo precious > "$HOME/victim"; chown 1990 "$HOME/victim"
        X "ln -sf $HOME/victim $ST/run.lock 2>/dev/null || echo lock-refused; \
           (echo agentpw > $ST/password) 2>/dev/null || echo password-refused; \
           cat $ST/password 2>/dev/null | grep -c . || true" 2>/dev/null
        echo "victim $(cat "$HOME/victim")"
        echo "lock $(stat -c %F "$ST/run.lock")"
        echo "password $(stat -c '%a %F' "$ST/password") $(grep -c agentpw "$ST/password")""#,
    );
    has(&out, "lock-refused", &err);
    has(&out, "password-refused", &err);
    has(&out, "0", &err); // the sandbox reads an empty file where the password is
    has(&out, "victim precious", &err);
    has(&out, "lock regular empty file", &err);
    has(&out, "password 600 regular file 0", &err);
}

/// Another project's state (its web password, sessions) is not readable; this project's state
/// directory is.
#[test]
fn other_projects_state_is_hidden() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"O="$HOME/.local/share/opencode-sandbox/other"; mkdir -p "$O"; echo otherpw > "$O/password"; chown -R 1990 "$O"
        X "cat $O/password 2>&1 | head -1; ls $HOME/.local/share/opencode-sandbox/ | tr '\n' ' '; echo; \
           touch $HOME/.local/share/opencode-sandbox/proj/mine && echo own-state-writable" 2>/dev/null"#,
    );
    assert!(!out.contains("otherpw"), "another project's password leaked: {out}\n{err}");
    has(&out, "proj", &err);
    has(&out, "own-state-writable", &err);
}

/// Hiding holds while the sandbox runs: with the real default `OCSB_HIDE_HOME`, the host logs
/// in to `gh` (a hidden name missing at start), rewrites `~/.docker/config.json` and
/// `~/.zsh_history` by rename, and replaces `~/.aws` (remove and recreate) — all after the
/// sandbox started. None of it is readable inside; the files the home allows still are (a
/// startup file, and `~/.config/nvim` through `OCSB_HOME`).
#[test]
fn hidden_paths_stay_hidden_when_the_host_changes_them() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"mkdir -p .opencode-sandbox/local; echo 'OCSB_HOME=(.config/nvim)' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        mkdir -p "$HOME/.docker" "$HOME/.config/nvim"; echo old > "$HOME/.docker/config.json"; echo old > "$HOME/.zsh_history"
        echo 'set nu' > "$HOME/.config/nvim/init.vim"; echo 'alias ll=ls' > "$HOME/.bashrc"
        chown -R 1990 "$HOME/.docker" "$HOME/.config" "$HOME/.zsh_history" "$HOME/.bashrc"
        U "$OCSB" exec -- sh -c "touch $P/started; sleep 1; for f in .config/gh/hosts.yml .docker/config.json .zsh_history .aws/credentials; do \
             printf '%s=%s\n' \$f \"\$(cat $HOME/\$f 2>/dev/null | tr -d '\n')\"; done; \
           cat $HOME/.config/nvim/init.vim $HOME/.bashrc; touch $HOME/.config/gh 2>/dev/null || echo gh-not-creatable" </dev/null 2>x.err &
        i=0; while [ ! -e "$P/started" ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
        mkdir -p "$HOME/.config/gh"; echo ghtoken > "$HOME/.config/gh/hosts.yml"
        echo LOGIN > "$HOME/.docker/c.new"; mv "$HOME/.docker/c.new" "$HOME/.docker/config.json"
        echo PASTED > "$HOME/h.new"; mv "$HOME/h.new" "$HOME/.zsh_history"
        rm -rf "$HOME/.aws"; mkdir "$HOME/.aws"; echo NEWKEY > "$HOME/.aws/credentials"
        wait; cat x.err >&2; rm -f x.err
        echo "host $(cat "$HOME/.docker/config.json") $(cat "$HOME/.config/gh/hosts.yml")""#,
    );
    for line in [".config/gh/hosts.yml=", ".docker/config.json=", ".zsh_history=", ".aws/credentials="] {
        has(&out, line, &err);
    }
    for leaked in ["=ghtoken", "=LOGIN", "=PASTED", "=NEWKEY", "=old", "=SECRET"] {
        assert!(!out.contains(leaked), "{leaked} readable inside:\n{out}\n{err}");
    }
    has(&out, "set nu", &err);
    has(&out, "alias ll=ls", &err);
    has(&out, "gh-not-creatable", &err);
    has(&out, "host LOGIN ghtoken", &err);
}

/// The same through the homes people have: a hidden name that is a dotfiles link whose target
/// the host creates later, a `~/.config` with 1,200 entries and 300 long symlinks, a root-owned
/// `~/.docker` the user cannot list (left by `sudo docker login`). The sandbox starts, the late
/// secret is not readable, the entries of `~/.config` (allowed with `OCSB_HOME`) are all there.
#[test]
fn hiding_holds_in_large_and_linked_homes() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"mkdir -p .opencode-sandbox/local; echo 'OCSB_HOME=(.config)' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        mkdir -p "$HOME/.config" "$HOME/dotfiles/kube" "$HOME/.kube" "$HOME/.docker"; chmod 700 "$HOME/.docker"
        ln -s ../dotfiles/kube/config "$HOME/.kube/config"
        L=$(printf 'x%.0s' $(seq 1 200)); i=0; while [ $i -lt 1200 ]; do : > "$HOME/.config/f$i"; i=$((i+1)); done
        i=0; while [ $i -lt 300 ]; do ln -s "/$L/$i" "$HOME/.config/l$i"; i=$((i+1)); done
        chown -R 1990 "$HOME/.config" "$HOME/dotfiles" "$HOME/.kube"
        U "$OCSB" exec -- sh -c "touch $P/started; sleep 1; cat $HOME/dotfiles/kube/config 2>/dev/null || echo no-kube; \
           echo entries \$(ls -A $HOME/.config | wc -l); readlink $HOME/.config/l299 | grep -c 299" </dev/null 2>x.err &
        i=0; while [ ! -e "$P/started" ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done; echo KUBESECRET > "$HOME/dotfiles/kube/config"
        wait; cat x.err >&2; rm -f x.err
        ln -s "$HOME" "$HOME.link"; HOME="$HOME.link" X "touch $HOME.link/.cache/x 2>/dev/null; echo linked-home" 2>&1"#,
    );
    has(&out, "linked-home", &err);
    has(&out, "no-kube", &err);
    assert!(!out.contains("KUBESECRET"), "{out}\n{err}");
    has(&out, "entries 1500", &err);
    has(&out, "1", &err);
}

/// The host's loopback is not a free-for-all: a service listening there on a port nobody
/// declared (sshd, a database) is refused with `EACCES`, a port in `OCSB_LOOPBACK_PORTS` and the
/// filter are reachable, and so is every listener the sandbox made itself on port 0.
#[test]
fn host_loopback_services_need_a_declared_port() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        &format!(
            "{NETLOCK_MODE}{}",
            r#"python3 -c 'import socket, time
ls = []
for p in (2222, 2223):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", p)); s.listen(8); ls.append(s)
time.sleep(20)' ocsb-loopback-marker &
        mkdir -p .opencode-sandbox/local; echo 'OCSB_LOOPBACK_PORTS=(2223)' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        sleep 0.5
        X "python3 -c '
import socket, errno
def c(p):
    s = socket.socket()
    try: s.connect((\"127.0.0.1\", p)); return \"ok\"
    except OSError as e: return errno.errorcode[e.errno]
own = socket.socket(); own.bind((\"127.0.0.1\", 0)); own.listen(1)
fixed = socket.socket(); fixed.bind((\"127.0.0.1\", 2224)); fixed.listen(1)
print(\"undeclared\", c(2222)); print(\"declared\", c(2223)); print(\"filter\", c(3128))
print(\"own-ephemeral\", c(own.getsockname()[1])); print(\"own-fixed\", c(2224))
res, ls = {}, []
for fam, host in ((socket.AF_INET, \"127.0.0.1\"), (socket.AF_INET6, \"::1\")):
    for reuse in (0, 1):
        for bind in (0, 1):
            for i in range(40):
                l = socket.socket(fam); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
                if bind: l.bind((host, 0))
                l.listen(1); ls.append(l)
                k = socket.socket(fam)
                try: k.connect((host, l.getsockname()[1])); r = \"ok\"
                except OSError as e: r = errno.errorcode[e.errno]
                res[r] = res.get(r, 0) + 1
print(\"own-listeners\", sorted(res.items()))
'" 2>&1
        python3 -c 'import socket; s = socket.socket(); s.connect(("127.0.0.1", 2222)); print("host reaches 2222")'
        pkill -f ocsb-loopback-marker"#
        ),
    );
    has(&out, "undeclared EACCES", &err);
    has(&out, "declared ok", &err);
    has(&out, "filter ok", &err);
    has(&out, "own-ephemeral ok", &err);
    has(&out, "own-fixed EACCES", &err); // the documented limit: declare it
    // Port-0 servers of every kind: IPv4 and IPv6, with and without SO_REUSEADDR, bound or not.
    has(&out, "own-listeners [('ok', 320)]", &err);
    has(&out, "host reaches 2222", &err);
}

/// Toolchain caches hold code the host runs later (a crate's build script, a pre-commit hook
/// repository): the agent gets the project's own copy of each, warm across its sessions, and
/// the host's stays as it was. Installed programs (`.asdf`) run but cannot be changed; a
/// directory the user adds to `OCSB_RW_HOME` is writable through, as asked.
#[test]
fn toolchain_caches_do_not_carry_code_back_to_the_host() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"B=.cargo/registry/src/idx/foo-1.0/build.rs; H=.cache/pre-commit/repo1/hook.sh
        mkdir -p "$HOME/${B%/*}" "$HOME/${H%/*}" "$HOME/.asdf/shims" "$HOME/.mytool"
        echo host > "$HOME/$B"; echo hook > "$HOME/$H"; echo 0 > "$HOME/.mytool/state"
        printf '#!/bin/sh\necho host-node\n' > "$HOME/.asdf/shims/node"; chmod +x "$HOME/.asdf/shims/node"
        chown -R 1990 "$HOME/.cargo" "$HOME/.cache" "$HOME/.asdf" "$HOME/.mytool"
        mkdir -p .opencode-sandbox/local; echo 'OCSB_RW_HOME+=(.mytool)' > .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        X "cat ~/$B 2>/dev/null || echo cold; mkdir -p ~/${B%/*} ~/${H%/*} && echo PLANT > ~/$B && echo PLANT > ~/$H && echo cache-writable; \
           echo PLANT > ~/.asdf/shims/node 2>/dev/null || echo asdf-read-only; ~/.asdf/shims/node; echo 1 > ~/.mytool/state" 2>/dev/null
        X "echo second \$(cat ~/$B)" 2>/dev/null
        echo "host $(cat "$HOME/$B") $(cat "$HOME/$H") $(cat "$HOME/.mytool/state") $(grep -c PLANT "$HOME/.asdf/shims/node")"
        echo "own $(cat "$HOME/.local/share/opencode-sandbox/proj/home-caches/.cargo+registry/src/idx/foo-1.0/build.rs")""#,
    );
    has(&out, "cold", &err);
    has(&out, "cache-writable", &err);
    has(&out, "asdf-read-only", &err);
    has(&out, "host-node", &err);
    has(&out, "second PLANT", &err); // warm across the project's sessions
    has(&out, "host host hook 1 0", &err);
    has(&out, "own PLANT", &err);
}

/// A fresh home has none of the default caches (no `~/.npm`, no `~/.cargo`): the tools inside
/// still write theirs, into the project's own copy; nothing appears in the user's home, and
/// another project of the same user starts with its own, empty one.
#[test]
fn default_caches_missing_on_the_host_are_writable_inside() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"O=.local/share/opencode-sandbox; test -e "$HOME/.npm" || test -e "$HOME/.cargo" || echo fresh-home
        X "mkdir -p ~/.npm/_logs && touch ~/.npm/x && echo npm-writable; mkdir -p ~/.cargo/registry/index && \
           touch ~/.cargo/registry/index/y && echo cargo-writable; touch ~/go/pkg/mod/z && echo go-writable; \
           npm config get cache; echo npm-logs \$(ls ~/.npm/_logs | grep -c debug)" 2>npm.err; grep -h 'not written' npm.err; rm -f npm.err
        test -e "$HOME/.npm" || test -e "$HOME/.cargo" || test -e "$HOME/go" || echo host-home-untouched
        test -f "$HOME/$O/proj/home-caches/.npm/x" && test -f "$HOME/$O/proj/home-caches/.cargo+registry/index/y" && echo own-copy
        X "ls ~/.npm/x >/dev/null && echo warm" 2>/dev/null
        Q="$HOME/other"; mkdir -p "$Q/.opencode-sandbox/local"; chown -R 1990 "$Q"; cd "$Q"; U git init -q -b main .
        U git commit -q --allow-empty -m init; U "$OCSB" init >/dev/null; U git add -A; U git commit -q -m ocsb
        echo OCSB_EGRESS_PORT=3129 > .opencode-sandbox/local/sandbox.conf; chown 1990 .opencode-sandbox/local/sandbox.conf
        X "test -e ~/.npm/x || echo other-project-empty; touch ~/.npm/o && echo other-writable" 2>/dev/null
        U "$OCSB" egress down >/dev/null 2>&1 </dev/null; cd "$P""#,
    );
    for l in [
        "fresh-home",
        "npm-writable",
        "cargo-writable",
        "go-writable",
        "host-home-untouched",
        "own-copy",
        "warm",
        "other-project-empty",
        "other-writable",
    ] {
        has(&out, l, &err);
    }
    assert!(out.lines().any(|l| l.ends_with("/.npm") && l.starts_with('/')), "npm's cache is ~/.npm: {out}");
    assert!(!out.contains("not written"), "npm wrote its log: {out}");
    let logs = out.lines().find_map(|l| l.strip_prefix("npm-logs ")).unwrap_or("0");
    assert!(logs.parse::<u32>().unwrap_or(0) > 0, "npm's debug log in ~/.npm/_logs: {out}\n{err}");
}

/// `ocsb` inside its own sandbox (the agent following the skill, with the variables `ocsb run`
/// gives OpenCode): a host command says at once that it runs on the host and what to ask the
/// user for; nothing is written. `init`'s next steps name the model's key file and the dev server.
#[test]
fn ocsb_inside_the_sandbox_says_to_ask_the_user() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"U "$OCSB" init | grep -E 'provider-keys|OCSB_PUBLISH|127.0.0.1:3000' | sed 's/^ *//'
        for c in "wt add x" "wt list"; do
          X "OCSB_WEB_URL=http://127.0.0.1:4196/ OCSB_BLANK_ENV=A $OCSB $c" >inside.out 2>&1; echo "rc $?"; cat inside.out; done
        X "$OCSB audit --accept" >inside.out 2>&1; echo "accept rc $?"; sed 's/^ *//; s/^/accept: /' inside.out
        X "$OCSB sandbox status 2>&1 | grep -q 'runs on the host' || echo status-not-refused" 2>/dev/null
        U git worktree list | wc -l | sed 's/^/worktrees /'; rm -f inside.out"#,
    );
    let p = w.proj.display().to_string();
    for l in [
        "rc 1".to_string(),
        format!("ocsb: ocsb runs on the host, not inside its sandbox (this is the sandbox of {p})"),
        format!("fix: ask the user to run on the host, in {p}: ocsb wt add x"),
        format!("fix: ask the user to run on the host, in {p}: ocsb wt list"),
        "status-not-refused".to_string(),
        "worktrees 1".to_string(),
    ] {
        has(&out, &l, &err);
    }
    assert!(!out.contains("unknown setting"), "{out}");
    // Only the worktree commands the skill sends the agent to are echoed as a command for the
    // user; any other is refused without putting the agent's line in ocsb's mouth.
    has(&out, "accept rc 1", &err);
    has(
        &out,
        "accept: fix: this command is the user's, on the host; tell the user what you need and why",
        &err,
    );
    assert!(!out.contains("ocsb audit --accept"), "{out}");
    assert!(out.contains("~/.config/opencode-sandbox/provider-keys"), "init names the key file: {out}");
    assert!(out.contains("is published at http://127.0.0.1:3000/") && out.contains("OCSB_PUBLISH"), "{out}");
}

/// Outside a repository the current directory would become the project: from `~` (or above)
/// `ocsb exec` refuses and says where to go; nothing is written.
#[test]
fn home_as_the_project_is_refused() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"cd "$HOME"; rm -rf "$P/.git"; U "$OCSB" exec -- touch "$HOME/.bashrc-agent" </dev/null 2>home.err; echo "rc $?"
        grep -q 'refusing to make .* writable for the agent as the project directory: it is your home directory' home.err && echo refused
        grep -q 'cd into a repository' home.err && echo says-where
        test -e "$HOME/.bashrc-agent" || echo untouched; test -e "$HOME/.opencode-sandbox" || echo no-placeholder; rm -f home.err"#,
    );
    for l in ["rc 1", "refused", "says-where", "untouched", "no-placeholder"] {
        has(&out, l, &err);
    }
}

/// A user install in the home (`~/tools/bin/ocsb`, `~/tools/libexec/ocsb/`): a writable root
/// that holds either directory is refused, so the agent cannot replace the `ocsb` the user runs
/// next, or the filter it starts. A narrower root beside them works, and from it the programs
/// stay read-only.
#[test]
fn directories_holding_ocsbs_programs_are_never_writable() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"T="$HOME/tools"; mkdir -p "$T/bin" "$T/libexec/ocsb" "$T/cache"; cp "$OCSB" "$T/bin/ocsb"; chown -R 1990 "$T"
        before=$(sha256sum < "$T/bin/ocsb"); L=.opencode-sandbox/local/sandbox.conf; mkdir -p "${L%/*}"; chown 1990 "${L%/*}"
        for conf in 'OCSB_RW_HOME+=(tools)' "OCSB_RW+=($T/libexec/ocsb)"; do
          echo "$conf" > $L; chown 1990 $L
          U "$T/bin/ocsb" exec -- sh -c "echo PLANT > $T/bin/x && mv $T/bin/x $T/bin/ocsb; echo PLANT > $T/libexec/ocsb/ocsb-egress" </dev/null 2>rw.err; echo "rc $?"
          grep -q "it contains ocsb's own programs" rw.err && grep -q 'narrower path' rw.err && echo refused || cat rw.err >&2
        done
        echo 'OCSB_RW_HOME+=(tools/cache)' > $L
        U "$T/bin/ocsb" exec -- sh -c "echo ok > $T/cache/c && echo cache-writable; (echo PLANT > $T/bin/x && mv $T/bin/x $T/bin/ocsb) 2>/dev/null || echo bin-read-only; \
           (echo PLANT > $T/libexec/ocsb/ocsb-egress) 2>/dev/null || echo libexec-read-only" </dev/null 2>rw.err || cat rw.err >&2
        [ "$(sha256sum < "$T/bin/ocsb")" = "$before" ] && echo host-ocsb-unchanged
        test -e "$T/libexec/ocsb/ocsb-egress" || echo no-filter-planted; rm -f rw.err"#,
    );
    assert_eq!(out.lines().filter(|l| *l == "rc 1").count(), 2, "{out}\n{err}");
    assert_eq!(out.lines().filter(|l| *l == "refused").count(), 2, "{out}\n{err}");
    for l in
        ["cache-writable", "bin-read-only", "libexec-read-only", "host-ocsb-unchanged", "no-filter-planted"]
    {
        has(&out, l, &err);
    }
}

/// The plan checks the same rule on the paths it mounts: a writable entry that has become a
/// link to a directory of ocsb's programs since the launcher looked (a concurrent sandbox can
/// swap one in) is refused before anything runs, and the program is unchanged on the host;
/// a root beside the programs is mounted writable while they stay read-only.
#[test]
fn a_writable_path_swapped_for_a_link_to_ocsbs_programs_is_refused_by_the_plan() {
    let w = World::new();
    let tools = w.home.join("tools");
    for d in ["bin", "cache"] {
        std::fs::create_dir_all(tools.join(d)).unwrap();
    }
    std::fs::write(tools.join("bin/ocsb"), "original\n").unwrap();
    std::os::unix::fs::symlink(&tools, w.home.join("out")).unwrap();
    run_ok(std::process::Command::new("chown").arg("-R").arg("1990:1990").arg(&tools));
    let mut spec = w.spec();
    spec["programs"] = serde_json::json!([tools.join("bin")]);
    let plant = format!("echo PLANT > {0}/bin/ocsb && echo planted || echo bin-read-only", tools.display());
    spec["rw"] = serde_json::json!([w.home.join("out")]);
    let o = w.run(&spec, &["sh", "-c", &plant]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success() && !out.contains("planted"), "{out}\n{err}");
    assert!(err.contains("would make ocsb's own programs") && err.contains("narrower path"), "{err}");
    spec["rw"] = serde_json::json!([tools.join("cache")]);
    let both = format!("echo ok > {}/cache/c && echo cache-writable; {plant}", tools.display());
    let o = w.run(&spec, &["sh", "-c", &both]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    has(&out, "cache-writable", &err);
    has(&out, "bin-read-only", &err);
    assert_eq!(std::fs::read_to_string(tools.join("bin/ocsb")).unwrap(), "original\n");
}

/// A committed `OCSB_OPENCODE_BIN=./tool` is a widening: `ocsb config` lists it, `exec` refuses
/// until it is accepted, and `doctor` does not run the tool. A committed `OCSB_NAME=<another
/// project>` is refused (that state directory is the other project's); the same name in the
/// user's own local layer is a choice, and allowed.
#[test]
fn settings_that_name_host_programs_or_other_state_need_trust() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"printf '#!/bin/sh\ntouch %s/PWNED_doctor\necho 1.0\n' "$HOME" > tool; chmod +x tool; chown 1990 tool
        echo 'OCSB_OPENCODE_BIN=./tool' >> .opencode-sandbox/sandbox.conf
        U "$OCSB" config 2>&1 | grep -q 'OCSB_OPENCODE_BIN' && echo listed
        U "$OCSB" doctor >doctor.out 2>&1 </dev/null; grep -q 'not run: OCSB_OPENCODE_BIN comes from' doctor.out && echo doctor-did-not-run
        U "$OCSB" exec -- true </dev/null 2>/dev/null; echo "exec $?"
        sed -i '/OCSB_OPENCODE_BIN/d' .opencode-sandbox/sandbox.conf
        O="$HOME/other"; mkdir -p "$O"; chown 1990 "$O"; (cd "$O" && U git init -q . && U "$OCSB" init >/dev/null && U "$OCSB" exec -- true </dev/null >/dev/null 2>&1)
        echo 'OCSB_NAME=other' >> .opencode-sandbox/sandbox.conf
        U "$OCSB" exec -- true </dev/null 2>name.err; echo "name $?"; grep -q "belongs to the project $O" name.err && echo name-listed
        echo 'OCSB_NAME=other' > .opencode-sandbox/local/sandbox.conf; chown 1990 .opencode-sandbox/local/sandbox.conf
        U "$OCSB" exec -- true </dev/null 2>/dev/null; echo "yours $?"; (cd "$O" && U "$OCSB" egress down >/dev/null 2>&1 </dev/null)
        rm -f doctor.out name.err; test -e "$HOME/PWNED_doctor" || echo no-marker"#,
    );
    for l in ["listed", "doctor-did-not-run", "exec 1", "name 1", "name-listed", "yours 0", "no-marker"] {
        has(&out, l, &err);
    }
}

/// Inside, the processes run as the netlock group, and as the user: a set-group-id file would
/// carry that group out, a set-user-id one would make another local user who runs it the user.
/// `chmod g+s` and `u+s` are denied (EPERM), and so is creating a file with either bit; plain
/// modes still work.
#[test]
fn set_id_files_cannot_be_made_inside() {
    let w = World::new();
    for (bit, octal) in [("setgid", "2755"), ("setuid", "4755")] {
        let script = format!(
            "touch f; chmod {octal} f 2>/dev/null || echo {bit}-denied; chmod 755 f && echo plain-ok; \
             python3 -c 'import os; os.chmod(\"f\", 0o{octal})' 2>&1 | grep -c 'Operation not permitted'; \
             python3 -c '
import ctypes, errno, os, stat
def t(name, f):
    try: f(); print(name, \"made\")
    except OSError as e: print(name, errno.errorcode[e.errno])
t(\"open\", lambda: os.close(os.open(\"g1\", os.O_CREAT | os.O_WRONLY, 0o{octal})))
t(\"mknod\", lambda: os.mknod(\"g2\", stat.S_IFREG | 0o{octal}))
libc = ctypes.CDLL(None, use_errno=True)
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o{octal}, 0)
r = libc.syscall(437, -100, b\"g3\", how, 24)
print(\"openat2\", errno.errorcode[ctypes.get_errno()] if r < 0 else \"made\")
t(\"plain-open\", lambda: os.close(os.open(\"g4\", os.O_CREAT | os.O_WRONLY, 0o644)))
'"
        );
        let o = w.run(&w.spec(), &["sh", "-c", &script]);
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        has(&out, &format!("{bit}-denied"), &err);
        has(&out, "plain-ok", &err);
        has(&out, "1", &err);
        // Creating a file with the bit counts too; openat2 (its mode in a struct) falls back.
        has(&out, "open EPERM", &err);
        has(&out, "mknod EPERM", &err);
        has(&out, "openat2 ENOSYS", &err);
        has(&out, "plain-open made", &err);
        let mode = |f: &str| {
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(w.proj.join(f)).unwrap().permissions())
        };
        assert_eq!(mode("f") & 0o7777, 0o755, "host side: no set-id bit ({bit})");
        for made in ["g1", "g2", "g3"] {
            assert!(!w.proj.join(made).exists(), "{made} was created ({bit})");
        }
        assert_eq!(mode("g4") & 0o6000, 0);
        for f in ["f", "g4"] {
            std::fs::remove_file(w.proj.join(f)).unwrap();
        }
    }
}

/// With stdin not a terminal (always so for `run`), the command used to get the user's terminal
/// on stdout and stderr: it could change the terminal's modes and write the clipboard (OSC 52)
/// or the title. It now gets a pipe the launcher relays: no terminal to change, and the string
/// sequences are dropped while colours pass.
#[test]
fn the_sandbox_never_holds_the_users_terminal() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"export -f U; export SHELL=/bin/bash
        script -qec 'U "$OCSB" exec -- sh -c "printf \"A\\033]52;c;SGVsbG8=\\007B\\033[31mC\\033[0m\\n\"; \
          python3 -c \"import termios; termios.tcgetattr(1)\" 2>/dev/null && echo HAS-TTY || echo NO-TTY" </dev/null 2>/dev/null' /dev/null"#,
    );
    assert!(out.contains("AB\x1b[31mC\x1b[0m"), "text and colours pass: {out:?}\n{err}");
    assert!(!out.contains("]52;"), "the clipboard sequence is dropped: {out:?}");
    assert!(out.contains("NO-TTY") && !out.contains("HAS-TTY"), "{out:?}\n{err}");
}

/// Stage 2 gets the command's stdin over its hand-over socket, after the set-gid shim: a TCP
/// connection the user's shell made (outside the netlock) must not reach the command there,
/// as the shim refuses it on fds 0 to 2. A pipe is the control: it reaches the command (and the
/// first start's self-tests pass, so the socket meets the command's own start). A start whose
/// launcher gives up after stage 2 started (here: the checkout audit refuses a planted
/// `commondir`) leaves no stage 2 behind.
#[test]
fn stdin_that_is_a_network_socket_never_reaches_the_command() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"python3 -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 5555)); s.listen(1)
c, _ = s.accept(); c.sendall(b"FROM-TCP\n"); time.sleep(5)' ocsb-stdin-marker &
        echo FROM-PIPE | U "$OCSB" exec -- cat; echo "pipe-stdin $?"
        U python3 -c 'import socket, os, sys
s = socket.create_connection(("127.0.0.1", 5555)); os.dup2(s.fileno(), 0); os.execv(sys.argv[1], sys.argv[1:])'           "$OCSB" exec -- sh -c 'echo RAN; cat' 2>&1
        echo "tcp-stdin $?"
        # An XDP socket (made by root, handed over): one whose address cannot even be read.
        export -f U; python3 -c 'import socket, os
s = socket.socket(44, socket.SOCK_RAW); os.dup2(s.fileno(), 0)
os.execvp("bash", ["bash", "-c", "U \"$OCSB\" exec -- sh -c \"echo RAN-XDP\" 2>/dev/null; echo xdp-stdin $?"])'
        echo /elsewhere > .git/commondir
        U "$OCSB" exec -- true </dev/null >/dev/null 2>&1; echo "refused $?"
        # This world's stage 2 only (the sandbox gets the gid as the user already has it, so
        # stage 2 is this world's ocsb by its full path; other tests run beside this one).
        sleep 0.2; echo "stage2-left $(pgrep -f "^$OCSB __sandbox-init" | wc -l)"
        rm .git/commondir
        U "$OCSB" exec -- sleep 1 </dev/null >/dev/null 2>&1 & sleep 0.5
        echo "stage2-running $(pgrep -f "^$OCSB __sandbox-init" | wc -l)"; wait
        pkill -f ocsb-stdin-marker"#,
    );
    has(&out, "tcp-stdin 125", &err);
    has(&out, "xdp-stdin 125", &err);
    assert!(!out.contains("RAN-XDP"), "{out}\n{err}");
    assert!(out.contains("stdin is a network socket"), "{out}\n{err}");
    assert!(
        !out.contains("RAN") && !out.contains("FROM-TCP"),
        "the command ran with the socket: {out}\n{err}"
    );
    has(&out, "FROM-PIPE", &err);
    has(&out, "pipe-stdin 0", &err);
    has(&out, "refused 1", &err);
    has(&out, "stage2-left 0", &err);
    assert!(!out.contains("stage2-running 0"), "the count sees a running stage 2: {out}\n{err}");
}

/// The front sends OpenCode's secret only to a listener of the user's own: another local user
/// who binds OpenCode's port first (between the launcher's check and OpenCode's bind) gets a
/// refusal, never a request. With the user's own listener there, requests go through.
#[test]
fn the_front_sends_the_secret_only_to_the_users_own_listener() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"echo user-pw > "$HOME/pw"; echo upstream-secret > "$HOME/secret"; chown 1990 "$HOME/pw" "$HOME/secret"; chmod 600 "$HOME/pw" "$HOME/secret"
        cat > "$HOME/up.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open(sys.argv[1], "a").write(str(self.headers.get("Authorization")) + "\n")
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 18101), H).serve_forever()
PY
        touch "$HOME/seen"; chmod 666 "$HOME/seen"
        setpriv --reuid 65534 --regid 65534 --clear-groups -- python3 "$HOME/up.py" "$HOME/seen" & OTHER=$!
        U "$OCSB" __web-front --listen 127.0.0.1:18100 --upstream 127.0.0.1:18101 --password-file "$HOME/pw" --upstream-password-file "$HOME/secret" & FRONT=$!
        for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18100/ && break; sleep 0.1; done
        for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18101/ 2>/dev/null && break; sleep 0.1; done
        : > "$HOME/seen"
        echo "other $(curl -s -u opencode:user-pw http://127.0.0.1:18100/x)"
        echo "seen-other $(grep -c . "$HOME/seen")"
        kill $OTHER; wait $OTHER 2>/dev/null
        U python3 "$HOME/up.py" "$HOME/seen" & MINE=$!
        for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18101/ 2>/dev/null && break; sleep 0.1; done
        : > "$HOME/seen"
        echo "mine $(curl -s -u opencode:user-pw http://127.0.0.1:18100/x)"
        echo "seen-mine $(grep -c 'Basic' "$HOME/seen")"
        # `U` runs in a subshell: end the processes by what names them uniquely (this test's home).
        kill $MINE $FRONT 2>/dev/null; pkill -f -- "$HOME/up.py"; pkill -f -- "$HOME/pw"; true"#,
    );
    assert!(
        out.lines().any(|l| l.starts_with("other 502") && l.contains("held by uid 65534")),
        "{out}\n{err}"
    );
    has(&out, "seen-other 0", &err);
    has(&out, "mine ok", &err);
    has(&out, "seen-mine 1", &err);
}

/// The self-tests judge the filter by what curl sees, and a passing run is remembered: the curl
/// must be the system's (a `curl` early in `PATH` can be the agent's, from a writable cache
/// directory), and the rules the filter runs must be the ones this command compiled.
#[test]
fn self_tests_use_the_systems_curl_and_the_filters_own_rules() {
    let w = World::new();
    let (out, err) = scenario(
        &w,
        r#"mkdir -p "$HOME/evil"
        printf '#!/bin/sh\ntouch "$HOME/evil-curl-ran"\nprintf "\\n200 000\\n"\n' > "$HOME/evil/curl"
        chmod 755 "$HOME/evil/curl"; chown -R 1990 "$HOME/evil"
        printf 'block 192.0.2.2\nexpect-pass http://192.0.2.2/\n' | U tee .opencode-sandbox/egress.conf >/dev/null
        U env PATH="$HOME/evil:/usr/local/bin:/usr/bin:/bin" "$OCSB" exec -- true </dev/null 2>&1; echo "planted rc=$?"
        test -e "$HOME/evil-curl-ran" && echo "the planted curl ran"
        printf '# no expectations: the direct-connection check alone\n' | U tee .opencode-sandbox/egress.conf >/dev/null
        X true 2>&1; echo "control rc=$?"
        mkdir -p "$HOME/cfg2/opencode-sandbox"; echo 'block 192.0.2.1' > "$HOME/cfg2/opencode-sandbox/egress.conf"
        chown -R 1990 "$HOME/cfg2"
        U env XDG_CONFIG_HOME="$HOME/cfg2" "$OCSB" prepare </dev/null 2>&1; echo "other rules rc=$?""#,
    );
    assert!(out.contains("expect-pass") && out.contains("egress.conf:2"), "{out}\n{err}");
    has(&out, "planted rc=1", &err);
    assert!(!out.contains("the planted curl ran"), "{out}\n{err}");
    has(&out, "control rc=0", &err);
    assert!(out.contains("loads its rules from other files"), "{out}\n{err}");
    has(&out, "other rules rc=1", &err);
}
