//! The harness of the sandbox suites (`sandbox_*`, `git_guard`, `launcher_trust`). Every sandbox
//! runs as the ordinary user `ocsb-test` (uid 1990) inside a network namespace the test creates (`unshare --net`), through the hidden
//! `ocsb __sandbox-run SPEC.json CMD…`, so the policy is explicit and settings play no part.
//! Tests need root (to create the namespace and switch user), `setpriv` and `unshare`
//! (util-linux), `python3` (the probe), and the user `ocsb-test`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

pub const UID: u32 = testkit::host::TEST_UID;
pub const PROBE: &str = include_str!("probe.py");

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Fail (never skip) with a message naming what is missing.
pub fn require_host() {
    testkit::host::require_root(
        "the sandbox tests create network namespaces and switch to the user ocsb-test",
    );
    testkit::host::test_user();
    testkit::host::require_all(&[
        ("setpriv", "util-linux"),
        ("unshare", "util-linux"),
        ("python3", "python3"),
        ("ip", "iproute2"),
    ]);
}

/// A test world: home, project, state under /var/tmp (not /tmp: the sandbox has its own /tmp),
/// owned by ocsb-test; the binary and the probe copied where ocsb-test can read them.
pub struct World {
    pub root: PathBuf,
    pub home: PathBuf,
    pub proj: PathBuf,
    pub state: PathBuf,
    pub bin: PathBuf,
    pub probe: PathBuf,
    /// The spec's `network`: the host's (the default) or a namespace of its own.
    pub network: Value,
}

impl World {
    pub fn new() -> World {
        require_host();
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let root = PathBuf::from(format!("/var/tmp/ocsb-sbx-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        let proj = home.join("proj");
        let state = home.join(".local/share/opencode-sandbox/proj");
        for d in [&proj.join(".git/hooks"), &state, &home.join(".ssh"), &root.join("bin")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(proj.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(proj.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
        std::fs::write(home.join(".ssh/id_ed25519.pub"), "ssh-ed25519 AAAA\n").unwrap();
        std::fs::write(home.join(".ssh/config"), "Host *\n").unwrap();
        std::fs::write(home.join(".bashrc"), "# rc\n").unwrap();
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/credentials"), "SECRET\n").unwrap();
        std::fs::create_dir_all(home.join(".cache")).unwrap();
        let bin = root.join("bin/ocsb");
        std::fs::copy(env!("CARGO_BIN_EXE_ocsb"), &bin).unwrap();
        let probe = root.join("bin/probe.py");
        std::fs::write(&probe, PROBE).unwrap();
        run_ok(Command::new("chown").arg("-R").arg(format!("{UID}:{UID}")).arg(&home));
        run_ok(Command::new("chmod").arg("-R").arg("a+rX").arg(&root));
        World { root, home, proj, state, bin, probe, network: json!("Host") }
    }

    /// The same world whose sandboxes get a network namespace of their own
    /// (`OCSB_NETWORK=isolated`): `__sandbox-run` serves it with the rules of the project, and
    /// relays the filter's port (3128) to the host's loopback, as `ocsb exec` does.
    pub fn isolated() -> World {
        let mut w = World::new();
        w.network = json!({"Isolated": {"forward": [3128]}});
        w
    }

    pub fn is_isolated(&self) -> bool {
        self.network != json!("Host")
    }

    /// The default spec: the seed's policy with hidden `~/.aws`, writable `~/.cache`, and of
    /// the rest of the home `~/.bashrc` alone (read-only, as a shell startup file is).
    pub fn spec(&self) -> Value {
        json!({
            "project_dir": self.proj, "state_dir": self.state, "home": self.home,
            "home_ro": [self.home.join(".bashrc")],
            "worktrees_dir": null, "rw": [], "rw_home": [self.home.join(".cache")],
            "hide": [], "hide_home": [self.home.join(".aws")], "tmp": "Private",
            "docker_socket": null, "ssh_agent": null,
            "env": [["PATH", "/usr/local/bin:/usr/bin:/bin"], ["HOME", self.home], ["LANG", "C.UTF-8"]],
            "argv": ["true"], "cwd": null, "namespaces": true, "netlock": "Off", "tcp": null,
            "limits": {"nproc": 4096, "shm_bytes": 16777216}, "tty": "Never",
            "network": self.network
        })
    }

    pub fn write_spec(&self, spec: &Value) -> PathBuf {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let p = self.root.join(format!("spec-{n}.json"));
        std::fs::write(&p, serde_json::to_vec_pretty(spec).unwrap()).unwrap();
        p
    }

    /// The shell words that run CMD in the sandbox as ocsb-test (inside the caller's netns).
    pub fn sandbox_words(&self, spec: &Value, cmd: &[&str]) -> Vec<String> {
        let spec = self.write_spec(spec);
        // An isolated sandbox is served with the project's settings, found from the user's
        // home as `ocsb` finds them: the test user's, not the test process's.
        let mut v: Vec<String> = Vec::new();
        if self.is_isolated() {
            let home = format!("HOME={}", self.home.display());
            v.extend(["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", &home].map(String::from));
        }
        v.extend(as_test_user());
        v.extend([self.bin.display().to_string(), "__sandbox-run".into(), spec.display().to_string()]);
        v.extend(cmd.iter().map(|s| s.to_string()));
        v
    }

    /// Run CMD in the sandbox, in a fresh network namespace with only `lo` (up).
    pub fn run(&self, spec: &Value, cmd: &[&str]) -> Output {
        let words = self.sandbox_words(spec, cmd);
        self.netns_script(&format!("exec {}", shell_join(&words)))
    }

    /// Run a probe in the sandbox with the default spec; returns its one-line verdict.
    pub fn probe(&self, args: &[&str]) -> String {
        self.probe_with(&self.spec(), args)
    }

    pub fn probe_with(&self, spec: &Value, args: &[&str]) -> String {
        let probe = self.probe.display().to_string();
        let mut cmd = vec!["python3", probe.as_str()];
        cmd.extend_from_slice(args);
        verdict(&self.run(spec, &cmd))
    }

    /// The positive control: the same probe as the same user, same kind of namespace, no sandbox.
    pub fn probe_outside(&self, args: &[&str]) -> String {
        let mut words: Vec<String> = vec![
            "env".into(),
            "-i".into(),
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            format!("HOME={}", self.home.display()),
        ];
        words.extend(as_test_user());
        words.extend(["python3".into(), self.probe.display().to_string()]);
        words.extend(args.iter().map(|s| s.to_string()));
        verdict(&self.netns_script(&format!(
            "cd {} && exec {}",
            shell_quote(&self.proj.display().to_string()),
            shell_join(&words)
        )))
    }

    /// Run a bash script as root inside a fresh network namespace (loopback up). `$SB` expands
    /// to the words that start a sandbox with the default spec (append the command).
    pub fn netns_script(&self, script: &str) -> Output {
        let sb = shell_join(&self.sandbox_words(&self.spec(), &[]));
        let full = format!(
            "set -e; export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; \
             ip link set lo up; SB={}; {script}",
            shell_quote(&sb)
        );
        Command::new("unshare")
            .args(["--net", "--", "bash", "-c", &full])
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .output()
            .expect("run unshare (util-linux)")
    }
}

/// Shell lines for a scenario: a named namespace `$ON` joined to the scenario's by a veth, with
/// 192.0.2.1 on its side (192.0.2.254 on this side), and `O cmd…` to run a command there. The
/// scenario deletes it with `ip netns del "$ON"` (in its EXIT trap). *Why*: the egress filter
/// judges its own host's addresses as private, so an origin must not sit on the scenario's `lo`.
/// A scenario's first line for a test of the netlock mode, which is no longer the default: the
/// project's local settings name it.
pub const NETLOCK_MODE: &str = "mkdir -p .opencode-sandbox/local; echo OCSB_NETWORK=netlock >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local\n";

pub const ORIGIN_NS: &str = r#"ON=ocsb-orig-$$; ip netns add "$ON"
ip link add oh$$ type veth peer name ot$$ netns "$ON"
ip addr add 192.0.2.254/24 dev oh$$; ip link set oh$$ up
ip -n "$ON" link set lo up; ip -n "$ON" addr add 192.0.2.1/24 dev ot$$; ip -n "$ON" link set ot$$ up
O() { ip netns exec "$ON" "$@"; }
"#;

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub fn verdict(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().rev().find(|l| l.starts_with("OK") || l.starts_with("ERR")).map(str::to_string);
    line.unwrap_or_else(|| {
        panic!(
            "no probe verdict (status {:?})\nstdout:\n{}\nstderr:\n{}",
            o.status,
            out,
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

pub fn run_ok(c: &mut Command) {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
}

pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn shell_join(words: &[String]) -> String {
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| format!("<{e}>"))
}

use testkit::host::as_test_user;

// ---- `ocsb` as the user types it, with the netlock in the test's namespace ----------------

pub use testkit::host::netlock_gid;

/// Run `body` (bash) in a fresh netns with the lock loaded. `U` runs a command as ocsb-test with
/// the netlock gid; `OCSB` is the binary; `P` the project (a git repository with one commit,
/// the user's identity in its own config, since the home's `~/.gitconfig` is not in the
/// sandbox, and `ocsb init` done); `PROBE` writes a file and prints `OK` or `ERR <errno>`; `$HOME` is the
/// test user's home, where every marker would land.
pub fn scenario(w: &World, body: &str) -> (String, String) {
    let g = netlock_gid();
    let table = format!(
        "table inet ocsb_netlock {{\n chain output {{\n  type filter hook output priority filter; policy accept;\n  \
         meta skgid {g} jump locked\n }}\n chain locked {{\n  ip daddr 127.0.0.0/8 accept\n  ip6 daddr ::1 accept\n  \
         reject with icmpx admin-prohibited\n }}\n}}\n"
    );
    let script = format!(
        "printf '%s' {table} | nft -f -; \
         export HOME={home} OCSB={ocsb} P={proj} PROBE={probe}; cd \"$P\"; \
         U() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"$HOME\" GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.invalid \
           GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.invalid \
           setpriv --reuid 1990 --regid {g} --clear-groups -- \"$@\"; }}; \
         X() {{ U \"$OCSB\" exec -- sh -c \"$1\" </dev/null; }}; \
         printf '[user]\n\tname = a\n\temail = a@example.invalid\n' > \"$HOME/.gitconfig\"; chown 1990 \"$HOME/.gitconfig\"; \
         rm -rf .git; U git init -q -b main .; U git config user.name a; U git config user.email a@example.invalid; \
         U git commit -q --allow-empty -m init; U \"$OCSB\" init >/dev/null; \
         U git add -A; U git commit -q -m ocsb; \
         trap 'U \"$OCSB\" egress down >/dev/null 2>&1 </dev/null || true' EXIT; \
         set +e; {body}",
        table = shell_quote(&table),
        home = shell_quote(&w.home.display().to_string()),
        ocsb = shell_quote(&w.bin.display().to_string()),
        proj = shell_quote(&w.proj.display().to_string()),
        probe = shell_quote(&w.probe.display().to_string()),
    );
    let o = w.netns_script(&script);
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

pub fn has(out: &str, line: &str, err: &str) {
    assert!(
        out.lines().any(|l| l.trim() == line),
        "expected the line {line:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
}

pub fn no_markers(w: &World, out: &str, err: &str) {
    let pwned: Vec<_> = std::fs::read_dir(&w.home)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("PWNED"))
        .map(|e| e.file_name())
        .collect();
    assert!(pwned.is_empty(), "host git ran planted code: {pwned:?}\nstdout:\n{out}\nstderr:\n{err}");
}

/// The set-gid shim `ocsb-netlock-exec` of this build (crate `ocsb-netlock-helper`).
pub fn shim_binary() -> PathBuf {
    workspace_binary("ocsb-netlock-helper", "ocsb-netlock-exec")
}

/// The builtin filter program `ocsb-egress` of this build (crate `ocsb-egress`).
pub fn filter_binary() -> PathBuf {
    workspace_binary("ocsb-egress", "ocsb-egress")
}

/// A program of another crate of the workspace, next to this test's `ocsb`; built (in the same
/// profile) when `cargo test -p ocsb` did not build it.
fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_ocsb")).parent().unwrap().to_path_buf();
    let path = dir.join(bin);
    if !path.exists() {
        let target = dir.parent().unwrap();
        // The same profile as this test's binaries (target/<profile>/).
        let release = dir.file_name().is_some_and(|n| n == "release");
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", package, "--bin", bin])
            .args(release.then_some("--release"))
            .env("CARGO_TARGET_DIR", target)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(st.success(), "could not build {bin} (crate {package})");
    }
    path
}
