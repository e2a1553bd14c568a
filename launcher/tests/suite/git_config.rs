//! The sandbox's global git config, end to end: the user's `~/.gitconfig`,
//! `~/.config/git/config` and a file they include hold tokens (`http.extraHeader`, a
//! `url.*.insteadOf` with one, a credential helper); inside `ocsb exec`, `git config --global
//! --list` shows none of them, while the identity, an alias and a behaviour setting are the
//! user's, and `git commit` uses that identity. On the host, the generated file holds no token
//! either. Without an ssh-agent of the user's, the sandbox has none. An included file changed
//! after a start is what the next start's sandbox sees. Both network modes.
//!
//! As the ordinary user `ocsb-test`, in a network namespace the test creates.

use crate::support::sandbox::{NETLOCK_MODE, World, has, scenario};

const CONFIGS: &str = r#"cat > "$HOME/.gitconfig" <<'EOF'
[user]
	name = Ada Tester
	email = ada@example.org
[alias]
	hello = !echo alias-works
[http]
	extraHeader = Authorization: Bearer GITSECRET1
[include]
	path = ~/.gitconfig-extra
[core]
	pager = /home/evil/pager
	autocrlf = input
EOF
mkdir -p "$HOME/.config/git"
cat > "$HOME/.config/git/config" <<'EOF'
[http "https://example.org/"]
	extraHeader = Authorization: Basic GITSECRET2
[url "https://GITSECRET3@github.com/"]
	insteadOf = https://github.com/
[credential]
	helper = store --file /tmp/GITSECRET4
[init]
	defaultBranch = trunk
EOF
printf '[url "https://x:GITSECRET5@example.net/"]\n\tinsteadOf = https://example.net/\n[pull]\n\trebase = true\n' > "$HOME/.gitconfig-extra"
chown -R 1990 "$HOME/.gitconfig" "$HOME/.config" "$HOME/.gitconfig-extra"
sleep 0.2
X 'git config --global --list | sed "s/^/list /"
echo "email $(git config --global user.email)"
echo "rebase $(git config --global pull.rebase)"
git hello
echo "agent ${SSH_AUTH_SOCK:-none} $([ -e /run/ocsb/ssh-agent.sock ] && echo run-ocsb || echo no-run-ocsb)"
d=$(mktemp -d); cd "$d" && git init -q && git commit -q --allow-empty -m inside && git log -1 --format="author %an <%ae>" && git branch --show-current | sed "s/^/branch /"'
echo "state-secrets $(grep -c GITSECRET "$HOME/.local/share/opencode-sandbox/proj/gitconfig")"
echo "state-email $(git config -f "$HOME/.local/share/opencode-sandbox/proj/gitconfig" user.email)"
printf '[pull]\n\trebase = merges\n' > "$HOME/.gitconfig-extra"
X 'echo "rebase-after $(git config --global pull.rebase)"'
"#;

fn user_config_without_secrets(netlock: bool) {
    let w = World::new();
    let mode = if netlock { NETLOCK_MODE } else { "" };
    let (out, err) = scenario(&w, &format!("{mode}{CONFIGS}"));
    assert!(out.contains("list user.email=ada@example.org"), "the list is the generated one: {out}\n{err}");
    assert!(!out.contains("GITSECRET"), "no token inside: {out}\n{err}");
    assert!(!out.contains("/home/evil/pager"), "no program path inside: {out}\n{err}");
    has(&out, "email ada@example.org", &err);
    has(&out, "rebase true", &err);
    has(&out, "alias-works", &err);
    // The user has no agent here: none inside either.
    has(&out, "agent none no-run-ocsb", &err);
    has(&out, "author Ada Tester <ada@example.org>", &err);
    has(&out, "branch trunk", &err);
    has(&out, "list core.autocrlf=input", &err);
    has(&out, "state-secrets 0", &err);
    has(&out, "state-email ada@example.org", &err);
    // The listing is the look's, remembered while the files git read stand: an included file
    // changed since is read again.
    has(&out, "rebase-after merges", &err);
}

#[test]
fn the_users_git_config_reaches_the_sandbox_without_its_secrets() {
    user_config_without_secrets(false);
}

#[test]
fn netlock_the_users_git_config_reaches_the_sandbox_without_its_secrets() {
    user_config_without_secrets(true);
}
