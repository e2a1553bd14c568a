//! The sandbox's home holds only what is allowed. A battery of credential, token and history
//! files across ecosystems is planted in the test user's home, each with a unique value; inside
//! `ocsb exec` (both network modes) and `ocsb shell`, a `grep -r` over the whole home finds none
//! of the values, and none of the paths exists. A file the host writes in `~` after the start
//! is absent too. Positive controls: a program in `~/.cargo/bin` runs, `ssh -G` reads
//! `~/.ssh/config`, a path of `OCSB_HOME` is readable, a shell startup file is read, the private
//! cache is writable. The other agents' sockets (gpg-agent, git's credential cache, password
//! managers, the keyring, the session bus) are made listening on the host and cannot be
//! connected to from inside, also with `OCSB_CACHES=shared`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::sandbox::{NETLOCK_MODE, World, scenario, shell_quote};

/// Credential, token and history locations, relative to the home: each gets a file holding a
/// unique value. None is in the home's allowlist; several sit beside an allowed entry
/// (`.cargo/credentials.toml` next to `.cargo/bin`, `fish_variables` next to `config.fish`),
/// and some inside one (npm's global config in a Node version of `~/.nvm`, conda's `.condarc`).
pub const CANARIES: &[&str] = &[
    // package registries
    ".npmrc",
    ".pypirc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".config/uv/uv.toml",
    ".local/share/uv/credentials/credentials.toml",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".nuget/NuGet/NuGet.Config",
    ".config/NuGet/NuGet.Config",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".yarnrc.yml",
    ".yarnrc",
    ".config/pypoetry/auth.toml",
    ".bundle/config",
    ".condarc",
    ".pub-cache/credentials.json",
    // container tools
    ".config/containers/auth.json",
    ".docker/config.json",
    ".docker/ca.pem",
    ".docker/cert.pem",
    ".docker/key.pem",
    ".docker/contexts/meta/0123abcd/meta.json",
    ".dockercfg",
    // clouds
    ".aws/credentials",
    ".aws/sso/cache/token.json",
    ".azure/msal_token_cache.json",
    ".config/gcloud/application_default_credentials.json",
    ".oci/config",
    ".config/doctl/config.yaml",
    ".config/hcloud/cli.toml",
    ".config/linode-cli",
    ".vultr-cli.yaml",
    ".config/scw/config.yaml",
    ".bluemix/config.json",
    ".aliyun/config.json",
    ".s3cfg",
    ".boto",
    ".config/rclone/rclone.conf",
    // Kubernetes tools
    ".kube/config",
    ".kube/cache/oidc-login/token",
    ".minikube/profiles/minikube/client.key",
    ".talos/config",
    ".config/helm/registry/config.json",
    ".local/share/helm/repository-creds.yaml",
    ".config/k9s/config.yaml",
    ".kind/kubeconfig",
    // CI/CD and PaaS
    ".config/gh/hosts.yml",
    ".config/glab-cli/config.yml",
    ".netrc",
    ".fly/config.yml",
    ".local/share/com.vercel.cli/auth.json",
    ".config/netlify/config.json",
    ".railway/config.json",
    ".render/config.yaml",
    ".circleci/cli.yml",
    ".travis/config.yml",
    ".terraform.d/credentials.tfrc.json",
    ".pulumi/credentials.json",
    ".doppler/.doppler.yaml",
    ".vault-token",
    // AI tools
    ".claude/.credentials.json",
    ".claude.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".cursor/mcp.json",
    ".config/github-copilot/apps.json",
    ".aider.conf.yml",
    ".config/openai/auth.json",
    ".local/share/opencode/auth.json",
    ".config/opencode/opencode.json",
    // chat and mail
    ".config/Slack/Cookies",
    ".config/discord/Local Storage/leveldb/000003.log",
    ".config/Signal/config.json",
    ".config/Element/Local Storage/leveldb/000003.log",
    ".thunderbird/abcd.default/logins.json",
    ".mutt/muttrc",
    ".muttrc",
    ".msmtprc",
    ".fetchmailrc",
    // browsers
    ".mozilla/firefox/abcd.default/cookies.sqlite",
    ".config/google-chrome/Default/Cookies",
    ".config/chromium/Default/Login Data",
    ".config/BraveSoftware/Brave-Browser/Default/Cookies",
    // shell and REPL histories
    ".bash_history",
    ".zsh_history",
    ".histfile",
    ".zhistory",
    ".local/share/fish/fish_history",
    ".local/share/atuin/history.db",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".lesshst",
    ".viminfo",
    ".config/fish/fish_variables",
    // password stores and keys
    ".password-store/mail.gpg",
    ".local/share/keyrings/login.keyring",
    "Passwords.kdbx",
    ".config/Bitwarden/data.json",
    ".config/1Password/settings/settings.json",
    ".gnupg/private-keys-v1.d/0123ABCD.key",
    ".git-credentials",
    ".config/git/credentials",
    ".config/git/config",
    ".gitconfig",
    ".pgpass",
    ".my.cnf",
    ".ssh/id_rsa",
    ".Xauthority",
    ".cache/huggingface/token",
    // inside the default toolchain directories (each of them allowed)
    ".nvm/versions/node/v20.1.0/etc/npmrc",
    ".npm-global/etc/npmrc",
    ".local/etc/npmrc",
    ".pyenv/versions/3.12.1/pip.conf",
    "miniconda3/pip.conf",
    "miniconda3/.condarc",
    "miniconda3/envs/ml/conda-meta/state",
    ".local/share/pipx/venvs/black/pipx_metadata.json",
    ".sdkman/candidates/maven/3.9.6/conf/settings.xml",
    // beside a path the test allows with OCSB_HOME
    "notes/private.txt",
];

/// The value planted at `CANARIES[i]`: unique per location and per run.
pub fn canary_value(tag: &str, i: usize) -> String {
    format!("OCSBCANARY{i}x{tag}")
}

/// Plant every canary in `home` as the test user, each file holding its value (appended to a
/// file that exists; a git config holds it as a token in `http.extraHeader` and `url.insteadOf`, as a user would have it).
pub fn plant(home: &Path, tag: &str) {
    for (i, rel) in CANARIES.iter().enumerate() {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let v = canary_value(tag, i);
        let text = if rel.ends_with("git/config") || rel.ends_with(".gitconfig") {
            format!(
                "[user]\n\tname = a\n\temail = a@example.invalid\n[http]\n\textraHeader = Authorization: Bearer {v}\n\
                 [url \"https://{v}@example.invalid/\"]\n\tinsteadOf = https://example.invalid/\n"
            )
        } else {
            format!("token = {v}\n")
        };
        // Appended: a file the test's world wrote keeps its own content.
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    }
    chown_home(home);
}

fn chown_home(home: &Path) {
    let st = std::process::Command::new("chown").arg("-R").arg("1990:1990").arg(home).status().unwrap();
    assert!(st.success());
}

/// The shell lines that print `LEAK <value>` for each canary value found by content anywhere
/// under `~` (read as the sandbox reads it), `PRESENT <path>` for each canary path that
/// exists with content (a hidden name inside an allowed directory is an empty mask), and `SCANNED <n>` with the number of files grep read (so an empty result means
/// something).
pub fn look_inside(tag: &str) -> String {
    let paths: Vec<String> = CANARIES.iter().map(|p| shell_quote(p)).collect();
    format!(
        "grep -rsao 'OCSBCANARY[0-9]*x{tag}' \"$HOME\" | sed 's/^.*:/LEAK /'; \
         for p in {paths}; do test -s \"$HOME/$p\" && echo \"PRESENT $p\"; done; \
         echo \"SCANNED $(find \"$HOME\" -type f 2>/dev/null | wc -l)\"; echo look-done",
        paths = paths.join(" ")
    )
}

/// Fails with the leaks `out` reports, and unless the look ran to the end over some files.
pub fn assert_nothing_found(out: &str, err: &str, what: &str) {
    let leaks: Vec<&str> =
        out.lines().filter(|l| l.starts_with("LEAK ") || l.starts_with("PRESENT ")).collect();
    assert!(
        leaks.is_empty(),
        "{what}: credentials readable inside: {leaks:#?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    let scanned = out
        .lines()
        .filter_map(|l| l.strip_prefix("SCANNED "))
        .filter_map(|n| n.trim().parse::<usize>().ok())
        .next_back();
    assert!(
        out.contains("look-done") && scanned.is_some_and(|n| n > 0),
        "{what}: the look did not run over the home\nstdout:\n{out}\nstderr:\n{err}"
    );
}

/// The world of these tests: the canaries, a toolchain program, ssh's config, a startup file,
/// and a path allowed with `OCSB_HOME` beside a canary.
fn world(tag: &str) -> World {
    let w = World::new();
    plant(&w.home, tag);
    std::fs::create_dir_all(w.home.join(".cargo/bin")).unwrap();
    let bin = w.home.join(".cargo/bin/hello-tool");
    std::fs::write(&bin, "#!/bin/sh\necho toolchain-ok\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(w.home.join(".ssh/config"), "Host canary-host\n  User ssh-config-ok\n").unwrap();
    std::fs::write(w.home.join(".bashrc"), "export RC_MARK=bashrc-ok\n").unwrap();
    std::fs::write(w.home.join("notes/allowed.txt"), "allowed-ok\n").unwrap();
    // Beside the toolchains' credential files: what the toolchain itself needs stays.
    std::fs::create_dir_all(w.home.join(".nvm/versions/node/v20.1.0/bin")).unwrap();
    std::fs::write(w.home.join(".nvm/versions/node/v20.1.0/bin/tool.txt"), "nvm-toolchain-ok\n").unwrap();
    std::fs::write(w.home.join("miniconda3/envs/ml/conda-meta/history"), "conda-env-ok\n").unwrap();
    chown_home(&w.home);
    w
}

/// The project's local settings: `OCSB_HOME` names the allowed note, and `extra` more lines.
/// First, the `.gitconfig` canary again: the scenario wrote the host git's identity over it.
fn settings_lines(tag: &str, extra: &str) -> String {
    let i = CANARIES.iter().position(|p| *p == ".gitconfig").unwrap();
    format!(
        "printf '[http]\\n\\textraHeader = Authorization: Bearer {v}\\n' >> \"$HOME/.gitconfig\"; \
         mkdir -p .opencode-sandbox/local; printf 'OCSB_HOME=(notes/allowed.txt)\\nOCSB_DOCKER=0\\n{extra}' >> .opencode-sandbox/local/sandbox.conf; \
         chown -R 1990 .opencode-sandbox/local\n",
        v = canary_value(tag, i)
    )
}

/// What the positive controls print inside.
const CONTROLS: &str = "~/.cargo/bin/hello-tool; ssh -F ~/.ssh/config -G canary-host | grep '^user '; \
     cat ~/notes/allowed.txt; grep -h RC_MARK ~/.bashrc; \
     cat ~/.nvm/versions/node/v20.1.0/bin/tool.txt ~/miniconda3/envs/ml/conda-meta/history; \
     mkdir -p ~/.npm && touch ~/.npm/written && echo cache-writable; \
     touch ~/planted 2>/dev/null || echo home-read-only";

fn controls_pass(out: &str, err: &str) {
    for want in [
        "toolchain-ok",
        "user ssh-config-ok",
        "allowed-ok",
        "export RC_MARK=bashrc-ok",
        "nvm-toolchain-ok",
        "conda-env-ok",
        "cache-writable",
        "home-read-only",
    ] {
        assert!(
            out.lines().any(|l| l.trim() == want),
            "control {want:?} failed\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
}

fn exec_sees_no_credential(netlock: bool) {
    let tag = format!("e{}{}", std::process::id(), u8::from(netlock));
    let w = world(&tag);
    let mode = if netlock { NETLOCK_MODE } else { "" };
    let body = format!(
        "{mode}{settings}\
         X {look} > look.out 2>&1; cat look.out; rm -f look.out\n\
         X {controls}\n",
        settings = settings_lines(&tag, ""),
        look = shell_quote(&look_inside(&tag)),
        controls = shell_quote(CONTROLS),
    );
    let (out, err) = scenario(&w, &body);
    assert_nothing_found(&out, &err, if netlock { "exec (netlock)" } else { "exec (isolated)" });
    controls_pass(&out, &err);
    assert!(!w.home.join("planted").exists());
    // Host side: every canary is still there, unread and unchanged, so the look could have
    // found them (the same grep as the user, outside the sandbox, finds every one).
    let o = std::process::Command::new("setpriv")
        .args(["--reuid", "1990", "--regid", "1990", "--clear-groups", "grep", "-rsaoh"])
        .arg(format!("OCSBCANARY[0-9]*x{tag}"))
        .arg(&w.home)
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&o.stdout).lines().collect::<std::collections::BTreeSet<_>>().len();
    assert_eq!(found, CANARIES.len(), "the canaries are readable outside the sandbox");
    assert!(CANARIES.len() >= 80);
}

#[test]
fn exec_sees_no_credential_of_the_home_isolated() {
    exec_sees_no_credential(false);
}

#[test]
fn exec_sees_no_credential_of_the_home_netlock() {
    exec_sees_no_credential(true);
}

/// `ocsb shell`: an interactive bash (it reads `~/.bashrc`) fed on its standard input.
#[test]
fn shell_sees_no_credential_of_the_home() {
    let tag = format!("s{}", std::process::id());
    let w = world(&tag);
    let script = format!("echo mark=[$RC_MARK]\n{}\n{}\nexit\n", look_inside(&tag), CONTROLS);
    let script_file = w.root.join("shell-input");
    std::fs::write(&script_file, script).unwrap();
    let body = format!(
        "{settings}\
         U env SHELL=/bin/bash \"$OCSB\" shell < {input} > shell.out 2>&1; cat shell.out; rm -f shell.out\n",
        settings = settings_lines(&tag, ""),
        input = shell_quote(&script_file.display().to_string()),
    );
    let (out, err) = scenario(&w, &body);
    assert_nothing_found(&out, &err, "shell");
    assert!(out.contains("mark=[bashrc-ok]"), "the interactive shell read ~/.bashrc\n{out}\n{err}");
    controls_pass(&out, &err);
}

/// Links in the home. `~/.config -> <outside>/config` and `~/.kube -> dotfiles/kube`, both
/// allowed with `OCSB_HOME`: the hidden names beneath (`~/.config/gh`, `~/.kube/config`) are
/// covered under the home's names and at the targets. `~/.docker -> <outside>/docker` and
/// `~/.netrc -> <outside>/netrc`, not allowed, and `~/.pass -> <outside>/pass` with only
/// `~/.pass/ok.txt` allowed: their targets are unreadable through the root too, the allowed
/// part readable at both its names. Controls: the rest of `.config` and `.kube` and a file
/// beside the targets are readable, and every secret is readable by the user outside.
fn links_in_the_home(netlock: bool) {
    let tag = format!("y{}{}", std::process::id(), u8::from(netlock));
    let w = World::new();
    let out = w.root.join("outside");
    let secret = |n: usize| canary_value(&tag, 7000 + n);
    let files: Vec<(std::path::PathBuf, String)> = vec![
        (out.join("config/gh/hosts.yml"), secret(1)),
        (w.home.join("dotfiles/kube/config"), secret(2)),
        (out.join("docker/config.json"), secret(3)),
        (out.join("netrc"), secret(4)),
        (out.join("pass/mail.gpg"), secret(5)),
        (out.join("config/nvim/init.lua"), "nvim-ok".to_string()),
        (w.home.join("dotfiles/kube/kubectl-ok"), "kube-ok".to_string()),
        (out.join("pass/ok.txt"), "pass-ok".to_string()),
        (out.join("beside.txt"), "beside-ok".to_string()),
    ];
    for (p, v) in &files {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{v}\n")).unwrap();
    }
    for (link, target) in [
        (".config", out.join("config")),
        (".kube", "dotfiles/kube".into()),
        (".docker", out.join("docker")),
        (".netrc", out.join("netrc")),
        (".pass", out.join("pass")),
    ] {
        let _ = std::fs::remove_dir_all(w.home.join(link));
        std::os::unix::fs::symlink(target, w.home.join(link)).unwrap();
    }
    std::fs::set_permissions(&w.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_home(&w.home);
    chown_home(&out);
    let o = out.display().to_string();
    let inside = format!(
        "grep -rsaoh 'OCSBCANARY[0-9]*x{tag}' \"$HOME/\" {o}/ | sed 's/^/LEAK /'; \
         cat ~/.config/gh/hosts.yml {o}/config/gh/hosts.yml ~/.kube/config \"$HOME/dotfiles/kube/config\" \
         {o}/docker/config.json {o}/netrc {o}/pass/mail.gpg 2>/dev/null | sed 's/^/READ /'; \
         cat ~/.config/nvim/init.lua {o}/config/nvim/init.lua ~/.kube/kubectl-ok ~/.pass/ok.txt {o}/pass/ok.txt \
         {o}/beside.txt; echo look-done"
    );
    let body = format!(
        "{mode}{settings}X {inside} > links.out 2>&1; cat links.out; rm -f links.out\n",
        mode = if netlock { NETLOCK_MODE } else { "" },
        settings = settings_lines(&tag, "OCSB_HOME+=(.config .kube .pass/ok.txt)\\n"),
        inside = shell_quote(&inside),
    );
    let (stdout, err) = scenario(&w, &body);
    assert!(stdout.contains("look-done"), "{stdout}\n{err}");
    let leaks: Vec<&str> =
        stdout.lines().filter(|l| l.starts_with("LEAK ") || l.starts_with("READ ")).collect();
    assert!(leaks.is_empty(), "readable inside: {leaks:#?}\n{stdout}\n{err}");
    for n in 1..=5 {
        assert!(!stdout.contains(&secret(n)), "secret {n} readable inside\n{stdout}\n{err}");
    }
    for (want, count) in [("nvim-ok", 2), ("kube-ok", 1), ("pass-ok", 2), ("beside-ok", 1)] {
        assert_eq!(
            stdout.lines().filter(|l| l.trim() == want).count(),
            count,
            "control {want}\n{stdout}\n{err}"
        );
    }
    // Host side: the user reads every secret outside the sandbox.
    for (p, v) in &files {
        let o = std::process::Command::new("setpriv")
            .args(["--reuid", "1990", "--regid", "1990", "--clear-groups", "cat"])
            .arg(p)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), v, "{}", p.display());
    }
}

#[test]
fn links_in_the_home_hide_what_they_lead_to_isolated() {
    links_in_the_home(false);
}

#[test]
fn links_in_the_home_hide_what_they_lead_to_netlock() {
    links_in_the_home(true);
}

/// A name the host creates in `~` (or deeper) while the sandbox runs is absent inside.
#[test]
fn a_file_made_in_the_home_after_the_start_is_absent() {
    let tag = format!("l{}", std::process::id());
    let w = world(&tag);
    let inside = format!(
        "touch started; for i in $(seq 600); do test -e go && break; sleep 0.1; done; \
         test -e go && echo saw-go; cat ~/late.txt ~/.config/late/token ~/.cargo/late 2>&1; {}",
        look_inside(&tag)
    );
    let late = |n: usize| canary_value(&tag, 9000 + n);
    let body = format!(
        "{settings}\
         X {inside} > late.out 2>&1 &\nXP=$!\n\
         for i in $(seq 1200); do test -e started && break; sleep 0.1; done\n\
         test -e started && echo sandbox-started\n\
         echo {a} > \"$HOME/late.txt\"; mkdir -p \"$HOME/.config/late\"; echo {b} > \"$HOME/.config/late/token\"; \
         echo {c} > \"$HOME/.cargo/late\"; chown -R 1990 \"$HOME/late.txt\" \"$HOME/.config/late\" \"$HOME/.cargo/late\"; touch go\n\
         wait $XP; cat late.out; rm -f late.out started go\n",
        settings = settings_lines(&tag, ""),
        inside = shell_quote(&inside),
        a = late(1),
        b = late(2),
        c = late(3),
    );
    let (out, err) = scenario(&w, &body);
    assert!(out.contains("sandbox-started") && out.contains("saw-go"), "{out}\n{err}");
    for n in 1..=3 {
        assert!(!out.contains(&late(n)), "a file made after the start is visible:\n{out}\n{err}");
    }
    assert!(w.home.join("late.txt").exists() && w.home.join(".cargo/late").exists(), "host side: made");
    assert_nothing_found(&out, &err, "late");
}

/// Where other agents listen, as the test user's programs would (the home's and the user's
/// runtime directory `/run/user/1990`).
const AGENT_SOCKETS: &[&str] = &[
    "~/.gnupg/S.gpg-agent",
    "~/.gnupg/S.gpg-agent.ssh",
    "~/.gnupg/S.gpg-agent.extra",
    "~/.cache/git/credential/socket",
    "~/.git-credential-cache/socket",
    "~/.1password/agent.sock",
    "~/.bitwarden-ssh-agent.sock",
    "~/.ssh/agent.sock",
    "/run/user/1990/gnupg/S.gpg-agent",
    "/run/user/1990/keyring/control",
    "/run/user/1990/keyring/ssh",
    "/run/user/1990/bus",
    "/run/user/1990/org.keepassxc.KeePassXC.BrowserServer",
    "/run/user/1990/app/org.keepassxc.KeePassXC/org.keepassxc.KeePassXC.BrowserServer",
    "/run/user/1990/bitwarden-ssh-agent.sock",
];

/// A small Python program: listen on every path given (made by the test user), print
/// `LISTENING`, and answer every connection with `SECRET`.
const LISTENER: &str = r#"
import os, socket, sys, select
socks = []
for p in sys.argv[1:]:
    os.makedirs(os.path.dirname(p), mode=0o700, exist_ok=True)
    try: os.unlink(p)
    except FileNotFoundError: pass
    s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(8); socks.append(s)
print("LISTENING", flush=True)
while True:
    r, _, _ = select.select(socks, [], [])
    for s in r:
        c, _ = s.accept(); c.sendall(b"SECRET\n"); c.close()
"#;

/// Inside: try each path; print `CONNECTED <path>` where a connection was made.
const CONNECT: &str = r#"
import os, socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX); s.settimeout(3)
    try:
        s.connect(p); print("CONNECTED", p, s.recv(16))
    except OSError as e:
        print("refused", p, e.errno)
print("connect-done")
"#;

/// The socket tests take turns: each makes (and removes) the test user's `/run/user/1990`.
static RUN_USER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn agent_sockets_are_out_of_reach(caches: &str, netlock: bool) {
    let _turn = RUN_USER.lock().unwrap_or_else(|p| p.into_inner());
    let tag = format!("k{}", std::process::id());
    let w = world(&tag);
    std::fs::write(w.home.join(".cache/visible-from-host"), "shared-cache-ok\n").unwrap();
    chown_home(&w.home);
    let listener = w.root.join("listener.py");
    let connect = w.root.join("connect.py");
    std::fs::write(&listener, LISTENER).unwrap();
    std::fs::write(&connect, CONNECT).unwrap();
    std::fs::set_permissions(&w.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = w.home.display().to_string();
    let paths: Vec<String> = AGENT_SOCKETS.iter().map(|p| p.replacen('~', &home, 1)).collect();
    let quoted: Vec<String> = paths.iter().map(|p| shell_quote(p)).collect();
    let inside_paths: Vec<String> = AGENT_SOCKETS.iter().map(|p| p.replacen('~', "$HOME", 1)).collect();
    let inside = format!(
        "python3 {} {}; ls -a /run/user 2>&1; ls -a \"$XDG_RUNTIME_DIR\"; cat ~/.cache/visible-from-host 2>&1",
        shell_quote(&connect.display().to_string()),
        inside_paths.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(" ")
    );
    let body = format!(
        "{mode}{settings}\
         made_run=; if ! test -e /run/user/1990; then made_run=1; mkdir -p /run/user/1990; chown 1990:1990 /run/user/1990; chmod 700 /run/user/1990; fi\n\
         LF={listener}; U python3 \"$LF\" {paths} > listen.out 2>&1 &\nLP=$!\n\
         trap 'kill $LP 2>/dev/null; pkill -f -- \"$LF\"; wait $LP 2>/dev/null; test -n \"$made_run\" && rm -rf /run/user/1990; U \"$OCSB\" egress down >/dev/null 2>&1 </dev/null || true' EXIT\n\
         for i in $(seq 100); do grep -q LISTENING listen.out && break; sleep 0.1; done; cat listen.out\n\
         U python3 {connect} {paths} | sed 's/^/HOST /'\n\
         X {inside} > sock.out 2>&1; cat sock.out; rm -f sock.out listen.out\n",
        mode = if netlock { NETLOCK_MODE } else { "" },
        settings = settings_lines(&tag, caches),
        listener = shell_quote(&listener.display().to_string()),
        connect = shell_quote(&connect.display().to_string()),
        paths = quoted.join(" "),
        inside = shell_quote(&inside),
    );
    let (out, err) = scenario(&w, &body);
    // Host side: every socket listens and answers the user outside the sandbox.
    assert!(out.contains("LISTENING"), "{out}\n{err}");
    for p in &paths {
        assert!(
            out.contains(&format!("HOST CONNECTED {p} b'SECRET\\n'")),
            "{p} does not answer outside\n{out}\n{err}"
        );
    }
    let inside_lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("HOST ")).collect();
    let connected: Vec<&&str> = inside_lines.iter().filter(|l| l.starts_with("CONNECTED")).collect();
    assert!(connected.is_empty(), "agents reachable from inside: {connected:#?}\n{out}\n{err}");
    assert!(inside_lines.contains(&"connect-done"), "{out}\n{err}");
    assert!(
        out.contains("cannot access '/run/user'"),
        "no runtime directory of the user inside\n{out}\n{err}"
    );
    let shared = caches.contains("shared");
    assert_eq!(
        inside_lines.contains(&"shared-cache-ok"),
        shared,
        "~/.cache is the host's with OCSB_CACHES=shared, the project's own otherwise\n{out}\n{err}"
    );
}

#[test]
fn other_agents_sockets_are_out_of_reach() {
    agent_sockets_are_out_of_reach("", false);
}

#[test]
fn other_agents_sockets_are_out_of_reach_netlock() {
    agent_sockets_are_out_of_reach("", true);
}

/// With `OCSB_CACHES=shared` the host's `~/.cache` is bound writable: git's credential cache
/// socket in it is still covered.
#[test]
fn other_agents_sockets_are_out_of_reach_with_shared_caches() {
    agent_sockets_are_out_of_reach("OCSB_CACHES=shared\\n", false);
}

/// With `OCSB_CACHES=shared`, `~/.cache/git` a link (to `~/.cache/elsewhere`, where git's
/// credential cache daemon would then make its socket, uncovered): the start is refused and
/// says why. Control: with the link replaced by a directory the same command runs.
#[test]
fn a_link_on_the_way_to_the_credential_cache_is_refused_with_shared_caches() {
    let tag = format!("g{}", std::process::id());
    let w = world(&tag);
    std::fs::create_dir_all(w.home.join(".cache/elsewhere")).unwrap();
    std::os::unix::fs::symlink("elsewhere", w.home.join(".cache/git")).unwrap();
    chown_home(&w.home);
    let body = format!(
        "{settings}set +e\n\
         X 'echo ran-with-link' > first.out 2>&1; echo \"first rc=$?\"; cat first.out\n\
         rm \"$HOME/.cache/git\"\n\
         X 'echo ran-with-dir; ls -ld ~/.cache/git/credential' > second.out 2>&1; echo \"second rc=$?\"; cat second.out\n\
         rm -f first.out second.out\n",
        settings = settings_lines(&tag, "OCSB_CACHES=shared\\n"),
    );
    let (out, err) = scenario(&w, &body);
    assert!(!out.contains("ran-with-link") && !out.contains("first rc=0"), "{out}\n{err}");
    assert!(out.contains("credential cache"), "the refusal says why\n{out}\n{err}");
    assert!(out.contains("second rc=0") && out.contains("ran-with-dir"), "{out}\n{err}");
    // Host side: the launcher made the socket's directory for the user alone.
    let meta = std::fs::symlink_metadata(w.home.join(".cache/git/credential")).unwrap();
    assert!(meta.is_dir() && meta.permissions().mode() & 0o777 == 0o700, "{meta:?}");
}
