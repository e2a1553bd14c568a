//! `ocsb doctor` on real machine states: each check made to fail in turn (missing group, stopped
//! helper, no Docker, no opencode, busy port, lock not applied), a fully working state, and
//! outside a project.
//!
//! Every run happens in a network namespace the test creates (the netlock probe sends one
//! datagram bound to `lo`; here it cannot even reach the host's loopback) and in a private mount
//! namespace whose `/run` is an overlay, so the test decides whether a netlock helper status file
//! exists without touching the host's. The states with a working lock run the real helper daemon
//! there (its table lands in the test's namespace only) and the real setgid shim from a temp
//! prefix. Needs root (CI runs the suite as root), `ip` (iproute2), `unshare` and `setpriv`
//! (util-linux), git, opencode (`npm i -g opencode-ai`), a Docker engine, the group
//! `opencode-sandbox`, the user `ocsb-test` (uid 1990, not in that group), and the netlock
//! binaries built beside `ocsb` (`cargo build -p ocsb-netlock-helper`, same target dir).

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use testkit::Netns;

const OCSB: &str = env!("CARGO_BIN_EXE_ocsb");
const GROUP: &str = "opencode-sandbox";

fn require_opencode() {
    assert!(
        Command::new("sh").args(["-c", "command -v opencode"]).output().unwrap().status.success(),
        "opencode is not installed: `npm i -g opencode-ai` (the test setup installs it)"
    );
}

fn require_root_and_tools() {
    testkit::host::require_root("the doctor tests create network namespaces");
    testkit::host::require_all(&[
        ("ip", "iproute2"),
        ("unshare", "util-linux"),
        ("nft", "nftables"),
        ("git", "git"),
    ]);
}

use testkit::host::group_gid;

/// Listen on 127.0.0.1:`port` inside `ns` (from a thread that joins it), so doctor running there
/// finds the port busy.
fn hold_port(ns: &Netns, port: u16) -> TcpListener {
    ns.run(move || TcpListener::bind(("127.0.0.1", port)).unwrap())
}

/// A temp HOME, a working directory, and a namespace to run doctor in.
struct Lab {
    tmp: tempfile::TempDir,
    ns: Netns,
    /// Shell run before doctor, inside the namespaces (after the /run overlay is mounted).
    setup: String,
    /// Shell run after doctor.
    teardown: String,
    /// PATH for doctor itself.
    path: String,
    /// Words put before doctor's command line (e.g. `setpriv` to run it as the test user).
    runner: String,
}

impl Lab {
    fn new() -> Lab {
        require_root_and_tools();
        let tmp = tempfile::tempdir().unwrap();
        for d in ["home", "work", "run-up", "run-work", "real-run"] {
            fs::create_dir_all(tmp.path().join(d)).unwrap();
        }
        Lab {
            tmp,
            ns: Netns::new("dr"),
            setup: String::new(),
            teardown: String::new(),
            path: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
            runner: String::new(),
        }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn write(&self, rel: &str, body: &str) {
        let p = self.p(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }

    /// Run doctor as the ordinary test user `ocsb-test` (uid 1990) with its own groups, HOME and
    /// working directory readable to it.
    fn as_test_user(&mut self) {
        let u = testkit::host::test_user();
        for d in [self.tmp.path(), &self.p("home"), &self.p("work")] {
            fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        }
        // `opencode --version` writes below HOME (~/.local/share/opencode).
        nix::unistd::chown(&self.p("home"), Some(u.uid), Some(u.gid)).unwrap();
        self.runner = "setpriv --reuid 1990 --regid 1990 --init-groups".into();
    }

    /// Runs `<ocsb> doctor ARGS` with a clean environment plus `env`, in `cwd`.
    fn doctor_with(&self, ocsb: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let script = format!(
            "mount --bind /run {real}\n\
             mount -t overlay overlay -o lowerdir=/run,upperdir={up},workdir={work} /run\n{setup}\n\
             set +e; PATH=\"$DOCTOR_PATH\" {runner} \"$@\"; rc=$?; set -e\n{teardown}\nexit $rc",
            real = self.p("real-run").display(),
            up = self.p("run-up").display(),
            work = self.p("run-work").display(),
            setup = self.setup,
            teardown = self.teardown,
            runner = self.runner,
        );
        let mut c = self.ns.exec(&["unshare", "-m", "--propagation", "private", "sh", "-ec", &script, "sh"]);
        c.arg(ocsb)
            .arg("doctor")
            .args(args)
            .current_dir(cwd)
            .env_clear()
            .env("HOME", self.p("home"))
            .env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into()))
            .env("DOCTOR_PATH", &self.path)
            // Unix sockets do not connect through the /run overlay: the host's /run is bound
            // beside it, and Docker is reached there.
            .env("DOCKER_HOST", format!("unix://{}", self.docker_socket().display()));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// The host's Docker socket as seen inside the lab's mount namespace.
    fn docker_socket(&self) -> PathBuf {
        let real = fs::canonicalize("/var/run/docker.sock").unwrap_or_else(|_| "/run/docker.sock".into());
        match real.strip_prefix("/run") {
            Ok(rest) => self.p("real-run").join(rest),
            Err(_) => real,
        }
    }

    fn doctor(&self, env: &[(&str, &str)]) -> Output {
        self.doctor_with(Path::new(OCSB), &self.p("work"), &[], env)
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The line of check `id` (after the status column: `ok   `, `warn `, `fail `).
fn line<'a>(out: &'a str, id: &str) -> &'a str {
    let head = format!("{id}: ");
    out.lines()
        .find(|l| l.get(5..).is_some_and(|r| r.starts_with(&head)))
        .unwrap_or_else(|| panic!("no {id} line in:\n{out}"))
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        stdout(o),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What the netlock-helper line's fix says on this machine for an absent helper (it depends on
/// whether the unit and the helper are installed beside the binary that runs doctor).
fn helper_start_fix(prefix: &Path) -> String {
    let unit = ["/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"]
        .iter()
        .any(|d| Path::new(d).join("ocsb-netlock.service").exists());
    if unit {
        "sudo systemctl enable --now ocsb-netlock.service".into()
    } else if prefix.join("libexec/ocsb/ocsb-netlock-helper").exists() {
        format!(
            "sudo {}/libexec/ocsb/ocsb-netlock-helper daemon & (no systemd unit installed)",
            prefix.display()
        )
    } else {
        format!(
            "sudo make install PREFIX={} (in the ocsb source tree), or install the ocsb package",
            prefix.display()
        )
    }
}

fn target_prefix() -> PathBuf {
    Path::new(OCSB).parent().unwrap().parent().unwrap().to_path_buf()
}

#[test]
fn missing_group() {
    let lab = Lab::new();
    lab.write(
        "home/.config/opencode-sandbox/sandbox.conf",
        "OCSB_NETWORK=netlock\nOCSB_NETLOCK_GROUP=ocsb-no-such-group\n",
    );
    let o = lab.doctor(&[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "netlock-group"),
        "fail netlock-group: the group \"ocsb-no-such-group\" (OCSB_NETLOCK_GROUP) does not exist; \
         fix: sudo groupadd --system ocsb-no-such-group (or remove OCSB_NETLOCK_GROUP to use opencode-sandbox); \
         or, without root, set OCSB_NETWORK=isolated (the default mode: its own network namespace)"
    );
    assert!(line(&out, "netlock-probe").starts_with("fail netlock-probe: not run:"), "{out}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("netlock-group"), "{}", show(&o));
}

/// The set-gid shim grants nothing only while the group owns nothing: a file of the group in a
/// system tree (here in a private /srv) is named, with the fix; without it the check passes.
#[test]
fn a_file_of_the_netlock_group_in_a_system_tree_fails() {
    let mut lab = Lab::new();
    group_gid(GROUP);
    let o = lab.doctor(&[]);
    assert!(
        line(&stdout(&o), "netlock-group-files").starts_with("ok   netlock-group-files: "),
        "{}",
        show(&o)
    );
    lab.setup = format!(
        "mount -t tmpfs tmpfs /srv; mkdir /srv/tool; touch /srv/tool/cache; chgrp {GROUP} /srv/tool/cache"
    );
    let o = lab.doctor(&[]);
    assert_eq!(
        line(&stdout(&o), "netlock-group-files"),
        format!(
            "fail netlock-group-files: the group {GROUP} owns /srv/tool/cache: every sandbox runs as that group \
             and can use them; fix: sudo chgrp root /srv/tool/cache (the group must own nothing but the shim)"
        ),
        "{}",
        show(&o)
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn no_helper_status_file() {
    let lab = Lab::new();
    group_gid(GROUP);
    let o = lab.doctor(&[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "netlock-helper"),
        format!(
            "fail netlock-helper: the netlock helper is not running (no /run/ocsb-netlock/status.json); fix: {}",
            helper_start_fix(&target_prefix())
        )
    );
}

#[test]
fn no_docker_for_the_squid_backend() {
    let lab = Lab::new();
    // A socket file nobody listens on: what a stopped dockerd leaves behind.
    let dead = lab.p("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let host = format!("unix://{}", dead.display());
    let o = lab.doctor(&[("OCSB_EGRESS_BACKEND", "squid"), ("DOCKER_HOST", &host)]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "egress"),
        format!(
            "fail egress: backend squid: Docker is not reachable at {host}: {}: Connection refused (os error 111); \
             fix: sudo systemctl start docker (and join the group docker), or set OCSB_EGRESS_BACKEND=builtin",
            dead.display()
        )
    );
    // The builtin backend needs nothing.
    let o = lab.doctor(&[("DOCKER_HOST", &host)]);
    assert_eq!(
        line(&stdout(&o), "egress"),
        "ok   egress: backend builtin (the proxy runs in ocsb; needs nothing else)"
    );
}

/// With `OCSB_DOCKER=1` (the default) doctor pings the daemon the gateway forwards to, as the
/// user: one who may not open its socket (`ocsb-test`, not in the group `docker`) is told that
/// Docker will not work in the sandbox, why, and the fix, as the sandbox's start and the
/// gateway say it; a stopped daemon likewise. Root reaches it.
#[test]
fn docker_access_pings_the_daemon_as_the_user() {
    let mut lab = Lab::new();
    let socket = lab.docker_socket();
    assert!(
        Path::new("/var/run/docker.sock").exists(),
        "no Docker engine at /var/run/docker.sock: install docker.io and start dockerd (tests/install-deps.sh does)"
    );
    let o = lab.doctor(&[]);
    let out = stdout(&o);
    let l = line(&out, "docker-access");
    assert!(
        l.starts_with("ok   docker-access: OCSB_DOCKER=1: Docker through the gateway (")
            && l.ends_with(&format!("; the daemon at {} answers", socket.display())),
        "{}",
        show(&o)
    );
    let dead = lab.p("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let o = lab.doctor(&[("DOCKER_HOST", &format!("unix://{}", dead.display()))]);
    assert_eq!(
        line(&stdout(&o), "docker-access"),
        format!(
            "warn docker-access: OCSB_DOCKER=1: Docker will not work in the sandbox: the gateway cannot reach \
             the Docker daemon at {}: no daemon is listening there; fix: start the Docker daemon \
             (sudo systemctl start docker) or set OCSB_DOCKER=0",
            dead.display()
        )
    );
    lab.as_test_user();
    let o = lab.doctor(&[]);
    let out = stdout(&o);
    assert_eq!(
        line(&out, "docker-access"),
        format!(
            "warn docker-access: OCSB_DOCKER=1: Docker will not work in the sandbox: the gateway cannot reach \
             the Docker daemon at {}: permission denied; fix: add yourself to the group docker \
             (sudo usermod -aG docker $USER, then log in again) or set OCSB_DOCKER=0",
            socket.display()
        ),
        "{}",
        show(&o)
    );
    let o = lab.doctor(&[("OCSB_DOCKER", "0")]);
    assert_eq!(
        line(&stdout(&o), "docker-access"),
        "ok   docker-access: OCSB_DOCKER=0: no Docker socket in the sandbox"
    );
}

#[test]
fn squid_backend_with_a_real_docker() {
    let lab = Lab::new();
    assert!(
        Path::new("/var/run/docker.sock").exists(),
        "no Docker engine at /var/run/docker.sock: install docker.io and start dockerd (tests/install-deps.sh does)"
    );
    let o = lab.doctor(&[("OCSB_EGRESS_BACKEND", "squid")]);
    let out = stdout(&o);
    let l = line(&out, "egress");
    assert!(
        l.starts_with("ok   egress: backend squid: Docker ")
            || l.starts_with("warn egress: backend squid: Docker "),
        "{out}"
    );
    let present = Command::new("docker")
        .args(["image", "inspect", "opencode-sandbox-egress:latest"])
        .output()
        .unwrap()
        .status
        .success();
    assert_eq!(l.ends_with("image opencode-sandbox-egress present"), present, "{l}");
}

#[test]
fn no_opencode() {
    let lab = Lab::new();
    let o = lab.doctor(&[("OCSB_OPENCODE_BIN", "/nonexistent")]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "opencode"),
        "fail opencode: opencode not found: OCSB_OPENCODE_BIN=/nonexistent does not exist or is not executable; \
         fix: npm i -g opencode-ai, or set OCSB_OPENCODE_BIN=/path/to/opencode in ~/.config/opencode-sandbox/sandbox.conf"
    );

    // A PATH that holds git but no opencode.
    let mut lab = lab;
    let bin = lab.p("bin");
    fs::create_dir_all(&bin).unwrap();
    let git = String::from_utf8(Command::new("sh").args(["-c", "command -v git"]).output().unwrap().stdout)
        .unwrap();
    std::os::unix::fs::symlink(git.trim(), bin.join("git")).unwrap();
    lab.path = format!("{}:/nonexistent-dir", bin.display());
    let o = lab.doctor(&[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "opencode"),
        "fail opencode: opencode not found: OCSB_OPENCODE_BIN=opencode is not in PATH; \
         fix: npm i -g opencode-ai, or set OCSB_OPENCODE_BIN=/path/to/opencode in ~/.config/opencode-sandbox/sandbox.conf"
    );
    assert!(line(&out, "git").starts_with("ok   git: git version "), "{out}");
}

#[test]
fn busy_ports() {
    let lab = Lab::new();
    let _web = hold_port(&lab.ns, 4196);
    let _egress = hold_port(&lab.ns, 3138);
    let o = lab.doctor(&[("OCSB_EGRESS_PORT", "3138")]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "port-web"),
        "fail port-web: port 4196 (OCSB_WEB_PORT) is busy on 127.0.0.1: Address already in use (os error 98); \
         another project or an old instance (or this project's `ocsb run`) holds it; \
         fix: ss -ltnp 'sport = :4196' shows who; or set another OCSB_WEB_PORT in ~/.config/opencode-sandbox/sandbox.conf"
    );
    assert_eq!(line(&out, "port-opencode"), "ok   port-opencode: 127.0.0.1:4197 (OCSB_WEB_PORT + 1) is free");
    assert!(
        line(&out, "port-egress").starts_with("fail port-egress: port 3138 (OCSB_EGRESS_PORT) is busy"),
        "{out}"
    );

    // OpenCode's own port (web + 1), inside a project: the fix names the web port and the local layer.
    let lab = Lab::new();
    let _oc = hold_port(&lab.ns, 4297);
    let proj = lab.p("proj");
    fs::create_dir_all(proj.join(".opencode-sandbox")).unwrap();
    lab.write("proj/.opencode-sandbox/sandbox.conf", "OCSB_WEB_PORT=4296\n");
    let o = lab.doctor_with(Path::new(OCSB), &proj, &[], &[]);
    let out = stdout(&o);
    assert_eq!(
        line(&out, "port-opencode"),
        "fail port-opencode: port 4297 (OCSB_WEB_PORT + 1) is busy on 127.0.0.1: Address already in use (os error 98); \
         another project or an old instance (or this project's `ocsb run`) holds it; \
         fix: ss -ltnp 'sport = :4297' shows who; or set another OCSB_WEB_PORT in .opencode-sandbox/local/sandbox.conf"
    );
}

#[test]
fn outside_a_project_only_the_host_is_checked() {
    let lab = Lab::new();
    for cwd in [lab.p("work"), PathBuf::from("/")] {
        let o = lab.doctor_with(Path::new(OCSB), &cwd, &["--json"], &[]);
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
        let checks = v.as_array().unwrap();
        let ids: Vec<&str> = checks.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids[0], "project", "{ids:?}");
        assert_eq!(checks[0]["status"], "ok");
        assert!(
            checks[0]["message"].as_str().unwrap().starts_with(&format!("none at {}", cwd.display())),
            "{v:#}"
        );
        assert!(!ids.contains(&"egress-rules") && !ids.contains(&"settings"), "{ids:?}");
        for c in checks {
            assert!(["ok", "warn", "fail"].contains(&c["status"].as_str().unwrap()), "{c}");
            assert_eq!(c["fix"].is_null(), c["status"] == "ok", "{c}");
        }
        // Whatever fails here is about the host (the netlock is not installed beside the test
        // binary; the machine's dockerd runs without firewall rules), never about the missing
        // project.
        let host_ids = ["netlock-shim", "netlock-helper", "netlock-probe", "docker-firewall"];
        for c in checks.iter().filter(|c| c["status"] == "fail") {
            assert!(
                host_ids.contains(&c["id"].as_str().unwrap()),
                "unexpected failure outside a project: {c}"
            );
        }
    }
}

#[test]
fn inside_a_project_settings_and_rules_are_checked() {
    let lab = Lab::new();
    let proj = lab.p("proj");
    let st = Command::new("git").args(["init", "-q"]).arg(&proj).status().unwrap();
    assert!(st.success());
    lab.write("proj/.opencode-sandbox/egress.conf", "allow example.com\n");
    let o = lab.doctor_with(Path::new(OCSB), &proj.join(".opencode-sandbox"), &[], &[]);
    let out = stdout(&o);
    assert_eq!(line(&out, "project"), format!("ok   project: {} (settings loaded)", proj.display()));
    assert!(line(&out, "egress-rules").starts_with("ok   egress-rules: "), "{out}");

    lab.write("proj/.opencode-sandbox/egress.conf", "allow example.com\nfrobnicate x\n");
    let o = lab.doctor_with(Path::new(OCSB), &proj, &[], &[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1));
    let l = line(&out, "egress-rules");
    assert!(l.starts_with("fail egress-rules: ") && l.contains(".opencode-sandbox/egress.conf:2"), "{l}");

    lab.write("proj/.opencode-sandbox/sandbox.conf", "OCSB_WEB_PORT=notaport\n");
    let o = lab.doctor_with(Path::new(OCSB), &proj, &[], &[]);
    let out = stdout(&o);
    let l = line(&out, "settings");
    assert!(l.starts_with("fail settings: ") && l.contains("sandbox.conf:1"), "{l}");
    assert!(l.contains("(the checks below use the defaults)"), "{l}");
    assert!(line(&out, "port-web").contains("4196"), "{out}");
}

/// An installation in a temp prefix: `bin/ocsb` (this build) and the real setgid shim
/// `libexec/ocsb/ocsb-netlock-exec` (2755 root:opencode-sandbox), which execs `bin/ocsb`.
fn install_prefix(lab: &Lab) -> (PathBuf, PathBuf) {
    let gid = group_gid(GROUP);
    let built = Path::new(OCSB).parent().unwrap();
    let (shim, helper) = (built.join("ocsb-netlock-exec"), built.join("ocsb-netlock-helper"));
    assert!(
        shim.exists() && helper.exists(),
        "the netlock binaries are not built beside {OCSB}: run `cargo build -p ocsb-netlock-helper` (same target dir)"
    );
    let prefix = lab.p("prefix");
    fs::create_dir_all(prefix.join("bin")).unwrap();
    fs::create_dir_all(prefix.join("libexec/ocsb")).unwrap();
    fs::copy(OCSB, prefix.join("bin/ocsb")).unwrap();
    let dst = prefix.join("libexec/ocsb/ocsb-netlock-exec");
    fs::copy(&shim, &dst).unwrap();
    nix::unistd::chown(&dst, Some(0.into()), Some(gid.into())).unwrap();
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o2755)).unwrap();
    for d in
        [lab.tmp.path(), &prefix, &prefix.join("bin"), &prefix.join("libexec"), &prefix.join("libexec/ocsb")]
    {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    (prefix, helper)
}

/// Start the real helper daemon in the lab's namespaces (its table lands in the lab's network
/// namespace, its status file in the lab's /run) and wait until it enforces. It stays off the
/// system bus.
fn start_helper(lab: &mut Lab, helper: &Path) {
    lab.setup = format!(
        "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent {h} daemon 2>{log} & D=$!\n\
         i=0; until grep -q '\"enforcing\"' /run/ocsb-netlock/status.json 2>/dev/null; do\n\
           i=$((i+1)); if [ $i -gt 150 ]; then echo 'helper did not start' >&2; cat {log} >&2; exit 99; fi; sleep 0.1; done",
        h = helper.display(),
        log = lab.p("daemon.log").display(),
    );
    lab.teardown = "kill $D; wait $D || true".into();
}

#[test]
fn all_ok_with_the_lock_the_helper_and_the_shim() {
    require_opencode();
    let mut lab = Lab::new();
    let (prefix, helper) = install_prefix(&lab);
    start_helper(&mut lab, &helper);
    let ocsb = prefix.join("bin/ocsb");
    let o = lab.doctor_with(&ocsb, &lab.p("work"), &[], &[("OCSB_DOCKER", "0"), ("OCSB_NOTIFICATIONS", "0")]);
    let out = stdout(&o);
    eprintln!("{out}");
    for l in out.lines().filter(|l| !l.starts_with("doctor: ")) {
        assert!(l.starts_with("ok   "), "not ok: {l}\n{}", show(&o));
    }
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        line(&out, "netlock-probe")
            .starts_with("ok   netlock-probe: a datagram sent as group opencode-sandbox"),
        "{out}"
    );
    assert!(line(&out, "netlock-helper").starts_with("ok   netlock-helper: running (pid "), "{out}");
    assert_eq!(
        line(&out, "netlock-shim"),
        format!(
            "ok   netlock-shim: {}/libexec/ocsb/ocsb-netlock-exec is 2755 root:opencode-sandbox",
            prefix.display()
        )
    );
}

#[test]
fn stopped_helper_and_missing_lock() {
    let mut lab = Lab::new();
    let (prefix, helper) = install_prefix(&lab);
    let ocsb = prefix.join("bin/ocsb");

    // The daemon ran and was stopped: its status file remains, its pid is gone.
    start_helper(&mut lab, &helper);
    lab.setup.push_str("\nkill $D; wait $D || true");
    lab.teardown.clear();
    let o = lab.doctor_with(&ocsb, &lab.p("work"), &[], &[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let l = line(&out, "netlock-helper");
    assert!(
        l.starts_with("fail netlock-helper: the netlock helper is not running (status file names pid "),
        "{l}"
    );
    assert!(
        l.ends_with(&format!(
            ", which is gone; last state stopped (table left enforcing)); fix: {}",
            helper_start_fix(&prefix)
        )),
        "{l}"
    );
    // The table outlives the daemon: the lock still works.
    assert!(line(&out, "netlock-probe").starts_with("ok   netlock-probe: "), "{out}");

    // No helper ever ran in this namespace: no table, so the probe is not rejected.
    let mut lab = Lab::new();
    let (prefix, _) = install_prefix(&lab);
    lab.setup.clear();
    let o = lab.doctor_with(&prefix.join("bin/ocsb"), &lab.p("work"), &[], &[]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let gid = group_gid(GROUP);
    assert_eq!(
        line(&out, "netlock-probe"),
        format!(
            "fail netlock-probe: netlock is NOT working: a datagram sent as group opencode-sandbox (gid {gid}) was not rejected; \
             fix: ocsb netlock setup && ocsb netlock verify"
        )
    );
}

#[test]
fn all_ok_as_an_ordinary_user_through_the_shim() {
    require_opencode();
    let mut lab = Lab::new();
    let (prefix, helper) = install_prefix(&lab);
    start_helper(&mut lab, &helper);
    lab.as_test_user();
    let o = lab.doctor_with(
        &prefix.join("bin/ocsb"),
        &lab.p("work"),
        &[],
        &[("OCSB_DOCKER", "0"), ("OCSB_NOTIFICATIONS", "0")],
    );
    let out = stdout(&o);
    for l in out.lines().filter(|l| !l.starts_with("doctor: ")) {
        assert!(l.starts_with("ok   "), "not ok: {l}\n{}", show(&o));
    }
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        line(&out, "netlock-group"),
        format!(
            "ok   netlock-group: group opencode-sandbox exists (gid {}); ocsb-test gets it through the setgid shim",
            group_gid(GROUP)
        )
    );
    // Isolated: the doctor builds the sandbox's network namespace as stage 2 does, as the user.
    let o = lab.doctor_with(
        &prefix.join("bin/ocsb"),
        &lab.p("work"),
        &[],
        &[("OCSB_DOCKER", "0"), ("OCSB_NOTIFICATIONS", "0"), ("OCSB_NETWORK", "isolated")],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(line(&out, "network").starts_with("ok   network: isolated (OCSB_NETWORK): "), "{}", show(&o));
}

#[test]
fn sg_needs_membership() {
    let mut lab = Lab::new();
    let (prefix, _) = install_prefix(&lab);
    lab.as_test_user();
    let member = nix::unistd::Group::from_name(GROUP).unwrap().unwrap().mem.iter().any(|m| m == "ocsb-test");
    assert!(
        !member,
        "ocsb-test must not be a member of {GROUP} for this test (`gpasswd -d ocsb-test {GROUP}`)"
    );
    let o = lab.doctor_with(&prefix.join("bin/ocsb"), &lab.p("work"), &[], &[("OCSB_NETLOCK_ACQUIRE", "sg")]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert_eq!(
        line(&out, "netlock-group"),
        "fail netlock-group: ocsb-test is not a member of the group opencode-sandbox (OCSB_NETLOCK_ACQUIRE=sg needs it); \
         fix: sudo usermod -aG opencode-sandbox ocsb-test"
    );
    assert_eq!(line(&out, "netlock-shim"), "ok   netlock-shim: not used (OCSB_NETLOCK_ACQUIRE=sg)");
    assert!(
        line(&out, "netlock-probe").ends_with("fix: sudo usermod -aG opencode-sandbox ocsb-test"),
        "{out}"
    );
}
