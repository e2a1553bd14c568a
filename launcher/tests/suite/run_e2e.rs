//! `ocsb run --no-browser` end to end, as the ordinary user `ocsb-test`, inside a network
//! namespace this test creates (`ip netns add`): origins on documentation addresses in a second
//! namespace behind a veth (192.0.2.1 allowed, 192.0.2.2 blocked by the project's egress.conf), the
//! netlock table installed in that namespace only, the builtin egress filter, the real sandbox,
//! a real `opencode serve` and the scripted model provider. The test thread joins the namespace
//! (`setns`, this thread only) to talk to the web front. Through OpenCode's API the agent's own
//! shell must: write the project; fail to write `$HOME` and `.opencode-sandbox/`; see no private
//! ssh key and no web password; reach the allowed origin through the filter; get a 403 with the
//! deciding rule for the blocked one; fail to connect around the filter; fail `sudo`. Then a
//! second `run` is refused, and after a restart the session is still listed.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::browser::Browser;
use testkit::dbus::{FAKE_NOTIFICATIONS, FakeNotifications, dbus_python};
use testkit::host::{as_test_user as as_user, netlock_gid, require_all, sh};
use testkit::http::{b64, b64url, basic, http, try_http};
use testkit::opencode::{
    agent_runs, opencode_bin, provider_config, read_panel, session_url, shell_runs, spawn_fake_provider,
};
use testkit::proc::wait_for_path;
use testkit::{Netns, Proc};

const UID: u32 = testkit::host::TEST_UID;
const T: Duration = Duration::from_secs(30);
/// The two `ocsb run` tests take turns: each starts OpenCode and Chromium, and on two cores
/// side by side they starve each other's timing (a first `/session` answer late by seconds).
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn require_host() {
    testkit::host::require_root("this test creates a network namespace and switches to ocsb-test");
    testkit::host::test_user();
    require_all(&[
        ("ip", "iproute2"),
        ("nft", "nftables"),
        ("setpriv", "util-linux"),
        ("curl", "curl"),
        ("git", "git"),
        ("python3", "python3"),
    ]);
}

/// The test's namespace, and the origins' namespace behind a veth on documentation addresses.
fn world_netns() -> (Netns, Netns) {
    let ns = Netns::new("run");
    let origins = ns.origins("run-o", &["192.0.2.1", "192.0.2.2"]);
    (ns, origins)
}

struct World {
    root: PathBuf,
    home: PathBuf,
    proj: PathBuf,
    state: PathBuf,
    bin: PathBuf,
    web: SocketAddr,
    /// `NAME=value` added to `ocsb run`'s environment.
    launcher_env: Vec<String>,
    /// The words that run `ocsb run` as the test user (`setpriv …`): its own gid, no other group.
    user: Vec<String>,
}

impl Drop for World {
    fn drop(&mut self) {
        // Stop the filters this test started (they outlive `run` by design); their control
        // sockets are unix sockets, reachable from any network namespace.
        let projects = std::fs::read_dir(&self.home).into_iter().flatten().flatten().map(|e| e.path());
        for dir in projects.filter(|d| d.join(".opencode-sandbox").is_dir()) {
            let _ = Command::new("setpriv")
                .args(&as_user()[1..])
                .args(ocsb_as(self, &dir))
                .args(["egress", "down"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn world(provider_port: u16) -> World {
    world_at(provider_port, "", 18000)
}

/// A world under `/var/tmp/ocsb-run-e2e-<pid><tag>` whose web port is `base` + a per-process
/// offset (so two tests of one binary never share a directory or a port).
fn world_at(provider_port: u16, tag: &str, base: u16) -> World {
    let root = PathBuf::from(format!("/var/tmp/ocsb-run-e2e-{}{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    let proj = home.join("proj");
    let state = home.join(".local/share/opencode-sandbox/proj");
    for d in [
        &proj.join(".opencode-sandbox/local"),
        &home.join(".ssh"),
        &root.join("bin"),
        &root.join("www1"),
        &home.join(".cache"),
        &home.join("victim"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    sh(&format!("git init -q {}", proj.display()));
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
    std::fs::write(home.join(".ssh/id_ed25519.pub"), "ssh-ed25519 AAAA\n").unwrap();
    std::fs::create_dir_all(home.join(".kube")).unwrap();
    std::fs::write(home.join(".kube/config"), "REAL-CLUSTER-TOKEN\n").unwrap();
    std::fs::write(home.join("kube-dev.yaml"), "kind: Config (dev-cluster)\n").unwrap();
    std::fs::write(root.join("www1/index.html"), "origin-one-ok\n").unwrap();
    let oc = opencode_bin();
    let web = base + (std::process::id() % 1000) as u16 * 2;
    std::fs::write(
        proj.join(".opencode-sandbox/local/sandbox.conf"),
        format!(
            "OCSB_WEB_PORT={web}\nOCSB_EGRESS_PORT={}\nOCSB_OPENCODE_BIN={}\nOCSB_DOCKER=0\n\
             OCSB_ENV=(\"SHOP_ENV=dev\")\nOCSB_NOTIFICATIONS=1\n\
             OCSB_HIDE=({})\nOCSB_ENV_FILE={}\nOCSB_SKILLS=(opencode-sandbox extra-skill)\nOCSB_SKILL_DIRS=({})\n\
             OCSB_KUBECONFIG={}\n",
            web + 1000,
            oc.display(),
            root.join("bus").display(),
            home.join("agent.env").display(),
            home.join("my-skills").display(),
            home.join("kube-dev.yaml").display()
        ),
    )
    .unwrap();
    std::fs::write(
        proj.join(".opencode-sandbox/egress.conf"),
        // No registry in this namespace and none blocked: OpenCode's background plugin install
        // would stall the first request for about 70 s if the launcher did not seed its config dir.
        "block 192.0.2.2 models.opencode.ai\nexpect-pass http://192.0.2.1/\nexpect-block http://192.0.2.2/\n",
    )
    .unwrap();
    std::fs::write(proj.join("opencode.json"), provider_config(provider_port)).unwrap();
    // cc-safety-net (the package's global config loads it) with a project policy that adds a path.
    std::fs::create_dir_all(proj.join(".cc-safety-net")).unwrap();
    std::fs::write(
        proj.join(".cc-safety-net/policy.json"),
        "{\"version\": 1, \"secret_protection\": {\"deny_paths\": [\"notes.txt\"]}}\n",
    )
    .unwrap();
    std::fs::write(proj.join("notes.txt"), "denied-by-project-policy\n").unwrap();
    std::fs::write(proj.join("other.txt"), "readable-by-agent\n").unwrap();
    // `xdg-open` for the run that opens the browser: records the URL.
    std::fs::write(
        root.join("bin/xdg-open"),
        format!("#!/bin/sh\necho \"$@\" >> {}\n", home.join("opened").display()),
    )
    .unwrap();
    std::fs::write(home.join("agent.env"), "# tokens\nMCP_TOKEN='tok-$(not-run)'\n").unwrap();
    std::fs::create_dir_all(home.join("my-skills/extra-skill")).unwrap();
    std::fs::write(
        home.join("my-skills/extra-skill/SKILL.md"),
        "---\nname: extra-skill\ndescription: a test skill\n---\nbody\n",
    )
    .unwrap();
    // An installation as `make install` lays it out: <prefix>/bin/ocsb, the setgid shim
    // <prefix>/libexec/ocsb/ocsb-netlock-exec (2755 root:opencode-sandbox), which `run` uses to
    // give the sandbox the netlock gid (OCSB_NETLOCK_ACQUIRE=exec, the default), and the
    // filter program <prefix>/libexec/ocsb/ocsb-egress, which `run` starts.
    let bin = root.join("prefix/bin/ocsb");
    let shim = root.join("prefix/libexec/ocsb/ocsb-netlock-exec");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_ocsb"), &bin).unwrap();
    std::fs::copy(crate::support::sandbox::shim_binary(), &shim).unwrap();
    std::fs::copy(crate::support::sandbox::filter_binary(), root.join("prefix/libexec/ocsb/ocsb-egress"))
        .unwrap();
    std::fs::create_dir_all(root.join("bus")).unwrap();
    sh(&format!("chmod 755 {}", root.join("bin/xdg-open").display()));
    sh(&format!("chown -R {UID}:{UID} {} && chmod -R a+rX {}", home.display(), root.display()));
    sh(&format!("chown {UID}:{UID} {0} && chmod 700 {0}", root.join("bus").display()));
    sh(&format!("chown root:opencode-sandbox {0} && chmod 2755 {0}", shim.display()));
    World {
        root,
        home,
        proj,
        state,
        bin,
        web: SocketAddr::from(([127, 0, 0, 1], web)),
        launcher_env: Vec::new(),
        user: as_user(),
    }
}

/// `env -i HOME=… PATH=… <ocsb> -C <project>`: the installed ocsb with a clean environment.
fn ocsb_as(w: &World, project: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "env".into(),
        "-i".into(),
        format!("HOME={}", w.home.display()).into(),
        "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        w.bin.clone().into(),
        "-C".into(),
        project.into(),
    ]
}

/// Another project of the same user, made the way the README says (`git init`, `ocsb init`),
/// with its own ports in its personal settings.
/// Another project of the user's, in the netlock mode (named: it is not the default), as the
/// netlock run's later steps need.
fn other_project(w: &World, name: &str, web: u16, egress: u16) -> PathBuf {
    let dir = w.home.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    sh(&format!("git init -q {0} && chown -R {UID}:{UID} {0}", dir.display()));
    let out =
        Command::new("setpriv").args(&as_user()[1..]).args(ocsb_as(w, &dir)).arg("init").output().unwrap();
    assert!(out.status.success(), "ocsb init: {}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.join(".cc-safety-net/policy.json").is_file() && dir.join(".opencode-sandbox/local").is_dir());
    std::fs::write(
        dir.join(".opencode-sandbox/local/sandbox.conf"),
        format!(
            "OCSB_WEB_PORT={web}\nOCSB_EGRESS_PORT={egress}\nOCSB_OPENCODE_BIN={}\nOCSB_DOCKER=0\n\
             OCSB_NOTIFICATIONS=0\nOCSB_ENV=(OPENCODE_DISABLE_MODELS_FETCH=1)\nOCSB_NETWORK=netlock\n",
            opencode_bin().display()
        ),
    )
    .unwrap();
    sh(&format!("chown -R {UID}:{UID} {}", dir.display()));
    dir
}

/// `ocsb run` as ocsb-test (its own gid: the filter must not be locked; the sandbox gets the
/// netlock gid through the shim), output to `log`. `browser`: with a display and the recording
/// `xdg-open` first in `PATH`; otherwise `--no-browser`.
fn start_run(ns: &Netns, w: &World, project: &Path, log: &Path, browser: bool) -> Proc {
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = ns.cmd();
    cmd.args(&w.user)
        .args(["env", "-i"])
        .arg(format!("HOME={}", w.home.display()))
        .arg("USER=ocsb-test")
        .arg(format!("DBUS_SESSION_BUS_ADDRESS=unix:path={}", w.root.join("bus/real").display()));
    if browser {
        cmd.arg(format!("PATH={}:/usr/local/bin:/usr/bin:/bin", w.root.join("bin").display()))
            .arg("DISPLAY=:99");
    } else {
        cmd.arg("PATH=/usr/local/bin:/usr/bin:/bin");
    }
    cmd.args(&w.launcher_env);
    cmd.arg(&w.bin).arg("-C").arg(project).arg("run");
    if !browser {
        cmd.arg("--no-browser");
    }
    let child = cmd
        .current_dir(project)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Proc(child)
}

/// Ctrl-C: SIGINT to `ocsb run`, which must exit within 20 s.
fn interrupt(run: &mut Proc) {
    use nix::sys::signal::{Signal, kill};
    kill(nix::unistd::Pid::from_raw(run.0.id() as i32), Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while run.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "ocsb run did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_ready(log: &Path, run: &mut Proc) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("\nready;") {
            return;
        }
        if let Ok(Some(st)) = run.0.try_wait() {
            panic!("ocsb run exited ({st}) before it was ready:\n{text}");
        }
        assert!(Instant::now() < deadline, "ocsb run not ready within 180 s:\n{text}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn shell(w: &World, auth: &str, id: &str, cmd: &str) -> String {
    shell_runs(w.web, auth, id, cmd)
}

#[test]
fn run_puts_the_agents_shell_in_the_sandbox() {
    require_host();
    let _turn = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let gid = netlock_gid();
    let (ns, origins) = world_netns();
    let tmp = tempfile::tempdir().unwrap();
    // The model provider listens on the namespace's loopback (the lock allows 127.0.0.0/8).
    let (_provider, provider_port) = spawn_fake_provider(ns.exec(&["python3"]), tmp.path());
    let w = world(provider_port);
    let tag = format!("r{}", std::process::id());
    super::home_allowlist::plant(&w.home, &tag);
    // The netlock mode, named: it is not the default.
    let conf = w.proj.join(".opencode-sandbox/local/sandbox.conf");
    let text = std::fs::read_to_string(&conf).unwrap() + "OCSB_NETWORK=netlock\n";
    std::fs::write(&conf, text).unwrap();
    let _origin = Proc(
        origins
            .cmd()
            .args(["python3", "-m", "http.server", "--bind", "192.0.2.1", "80", "--directory"])
            .arg(w.root.join("www1"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _blocked = Proc(
        origins
            .cmd()
            .args(["python3", "-m", "http.server", "--bind", "192.0.2.2", "80"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    ns.sh("for i in $(seq 100); do curl -s -m 1 -o /dev/null http://192.0.2.1/ && curl -s -m 1 -o /dev/null http://192.0.2.2/ && exit 0; sleep 0.1; done; exit 1");
    install_netlock_table(&ns, &w, gid);

    // The user's session bus (a real dbus-daemon owned by ocsb-test). Activating a service on it
    // is what `systemd-run --user` and D-Bus activation use to leave a sandbox.
    let _bus = Proc(
        Command::new("setpriv")
            .args(&as_user()[1..])
            .args(["dbus-daemon", "--session", "--nofork"])
            .arg(format!("--address=unix:path={}", w.root.join("bus/real").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon (Debian package dbus)"),
    );
    wait_for_path(&w.root.join("bus/real"), "dbus-daemon", Duration::from_secs(5));
    const ACTIVATE: &str = "dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus.StartServiceByName string:org.freedesktop.systemd1 uint32:0 2>&1";
    let control = Command::new("setpriv")
        .args(&as_user()[1..])
        .args(["sh", "-c", ACTIVATE])
        .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={}", w.root.join("bus/real").display()))
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&control.stdout).into_owned();
    assert!(control.contains("Spawn"), "control: the real bus attempts the activation: {control}");
    // A notification daemon on that bus, recording every Notify call.
    let mut daemon = Command::new("setpriv");
    daemon
        .args(&as_user()[1..])
        .arg(dbus_python())
        .args(["-c", FAKE_NOTIFICATIONS])
        .env("DBUS_SESSION_BUS_ADDRESS", format!("unix:path={}", w.root.join("bus/real").display()));
    let notifications = FakeNotifications::spawn(daemon);

    let log = w.root.join("run.log");
    let mut run = start_run(&ns, &w, &w.proj, &log, false);
    wait_ready(&log, &mut run);
    let text = std::fs::read_to_string(&log).unwrap();
    for step in [
        "egress:",
        "netlock:    ok",
        "self-tests: passed: the filter answered all 2 expect-pass/expect-block rules as written; a direct connection around the filter was refused",
        "plugins:    cc-safety-net@2.4.5 copied into OpenCode's cache",
        "models:     models.opencode.ai is blocked by the egress rules",
        "web:",
        "first start: the password is",
    ] {
        assert!(text.contains(step), "missing `{step}` in:\n{text}");
    }
    assert!(!text.contains("browser:"), "--no-browser: {text}");
    let pw_file = w.state.join("password");
    let password = std::fs::read_to_string(&pw_file).unwrap().trim().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&pw_file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(text.contains(&password));
    // `--no-browser` prints the project's page, not OpenCode's home (an empty "Add project" view
    // in a new browser), and where the password is kept; `ocsb password` prints it again.
    let dir = b64url(&w.proj.display().to_string());
    assert!(text.contains(&format!("web:        http://{}/{dir}/session\n", w.web)), "{text}");
    let kept =
        format!("log in as opencode with the password in {} (`ocsb password` prints it)", pw_file.display());
    assert!(text.contains(&kept), "{text}");
    let out = Command::new("setpriv")
        .args(&as_user()[1..])
        .args(ocsb_as(&w, &w.proj))
        .arg("password")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ocsb password: {said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains(&format!("password: {password}\n")), "{said}");
    assert!(said.contains(&format!("file:     {}\n", pw_file.display())), "{said}");

    ns.enter();
    let auth = basic("opencode", &password);
    assert_eq!(http(w.web, "GET", "/", &[], None, T).status, 401);
    let page = http(w.web, "GET", "/", &[("Authorization", &auth)], None, T);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/__ocsb/panel.js"));
    // DNS rebinding and cross-site requests: only this front's own Host, and its own Origin on
    // requests that change state; refused before the credentials are looked at.
    let foreign = format!("attacker.example:{}", w.web.port());
    let rebound = http(w.web, "GET", "/", &[("Host", &foreign), ("Authorization", &auth)], None, T);
    assert_eq!(rebound.status, 403, "{}", rebound.body);
    assert!(rebound.body.contains("is not this front"), "{}", rebound.body);
    let cross = [("Authorization", auth.as_str()), ("Origin", "http://attacker.example")];
    assert_eq!(http(w.web, "POST", "/session", &cross, Some("{}"), T).status, 403);
    let local = format!("localhost:{}", w.web.port());
    assert_eq!(http(w.web, "GET", "/", &[("Host", &local), ("Authorization", &auth)], None, T).status, 200);
    let panel_log = std::fs::read_to_string(w.state.join("data/opencode/log/context-panel.log")).unwrap();
    assert!(
        panel_log.contains(&format!("front on http://{}/", w.web))
            && panel_log.contains("/: panel script added to the page"),
        "{panel_log}"
    );
    // OpenCode's own port: no panel, its per-run secret (not the web password).
    let oc = SocketAddr::from(([127, 0, 0, 1], w.web.port() + 1));
    let secret_file = w.state.join("opencode-password");
    assert_eq!(std::fs::metadata(&secret_file).unwrap().permissions().mode() & 0o777, 0o600);
    let secret = std::fs::read_to_string(&secret_file).unwrap().trim().to_string();
    assert!(text.contains(&format!("OpenCode without the panel: http://{oc}/")), "{text}");
    assert_eq!(http(oc, "GET", "/", &[("Authorization", &auth)], None, T).status, 401);
    let raw = http(oc, "GET", "/", &[("Authorization", &basic("opencode", &secret))], None, T);
    assert!(raw.status == 200 && !raw.body.contains("/__ocsb/panel.js"), "{}", raw.status);

    let ses = http(w.web, "POST", "/session", &[("Authorization", &auth)], Some("{}"), T).json();
    let id = ses["id"].as_str().unwrap_or_else(|| panic!("{ses}")).to_string();
    let out = shell(&w, &auth, &id, "echo agent > written-by-agent.txt && cat written-by-agent.txt && id -g");
    assert!(out.contains("agent"), "{out}");
    assert_eq!(std::fs::read_to_string(w.proj.join("written-by-agent.txt")).unwrap(), "agent\n");
    assert!(out.contains(&gid.to_string()), "the agent runs as the netlock group: {out}");
    let out = shell(
        &w,
        &auth,
        &id,
        "echo shop=[$SHOP_ENV] token=[$MCP_TOKEN] models=[$OPENCODE_DISABLE_MODELS_FETCH] proxy=[$HTTPS_PROXY]",
    );
    assert!(
        out.contains("shop=[dev] token=[] models=[1] proxy=[http://127.0.0.1:"),
        "OCSB_ENV passed, env-file tokens blanked in the agent's shell: {out}"
    );
    let skills = http(w.web, "GET", "/skill", &[("Authorization", &auth)], None, T).json();
    let names: Vec<&str> = skills.as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(
        names.contains(&"opencode-sandbox") && names.contains(&"extra-skill"),
        "OCSB_SKILLS mounted: {names:?}"
    );
    let out = shell(&w, &auth, &id, &format!("echo bus=[$DBUS_SESSION_BUS_ADDRESS]; {ACTIVATE}"));
    assert!(
        out.contains(&format!("bus=[unix:path={}/run/bus]", w.state.display()))
            && out.contains("ServiceUnknown")
            && !out.contains("Spawn"),
        "the agent's bus is the filtered proxy, which refuses activation: {out}"
    );
    let real = w.root.join("bus/real");
    let out = shell(
        &w,
        &auth,
        &id,
        &format!(
            "dbus-send --bus=unix:path={} --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus.ListNames 2>&1 || echo real-bus-unreachable",
            real.display()
        ),
    );
    assert!(out.contains("real-bus-unreachable"), "the user's real bus is hidden: {out}");
    assert!(text.contains("notify:     session bus limited to org.freedesktop.Notifications"), "{text}");
    let cfg = http(w.web, "GET", "/config", &[("Authorization", &auth)], None, T).json();
    let plugins = cfg["plugin"].to_string();
    assert!(
        plugins.contains("skill-compact-resurrect.js") && plugins.contains("ocsb-guard.js"),
        "OCSB_PLUGINS: {plugins}"
    );
    assert!(cfg["permission"]["bash"]["sudo *"] == "deny", "{}", cfg["permission"]);
    let out = shell(&w, &auth, &id, "touch $HOME/outside 2>&1");
    assert!(out.contains("Read-only file system") && !w.home.join("outside").exists(), "{out}");
    let out = shell(&w, &auth, &id, "touch .opencode-sandbox/x 2>&1");
    assert!(out.contains("Read-only file system") && !w.proj.join(".opencode-sandbox/x").exists(), "{out}");
    // OCSB_KUBECONFIG is the agent's kubeconfig (a 0600 copy); ~/.kube/config stays hidden.
    let out =
        shell(&w, &auth, &id, "echo kc=[$KUBECONFIG] $(cat $KUBECONFIG) real=[$(cat ~/.kube/config 2>&1)]");
    assert!(
        out.contains(&format!("kc=[{}/kube/config] kind: Config (dev-cluster)", w.state.display()))
            && !out.contains("REAL-CLUSTER-TOKEN"),
        "{out}"
    );
    assert_eq!(std::fs::metadata(w.state.join("kube/config")).unwrap().permissions().mode() & 0o777, 0o600);
    // Nothing of the home but what is allowed: none of the credential canaries, by content. A
    // file, because OpenCode's shell endpoint expands a command once more before running it.
    let look = w.proj.join("look-home.sh");
    std::fs::write(&look, super::home_allowlist::look_inside(&tag)).unwrap();
    let out = shell(&w, &auth, &id, &format!("sh {}", look.display()));
    super::home_allowlist::assert_nothing_found(&out, "", "run (OpenCode's shell)");
    let out =
        shell(&w, &auth, &id, "echo key=[$(cat ~/.ssh/id_ed25519 2>&1)] pub=[$(cat ~/.ssh/id_ed25519.pub)]");
    assert!(out.contains("pub=[ssh-ed25519 AAAA]") && !out.contains("PRIVATE KEY"), "{out}");
    let out = shell(&w, &auth, &id, &format!("echo pw=[$(cat {} 2>&1)]", pw_file.display()));
    assert!(!out.contains(&password), "the web password is hidden from the agent: {out}");
    let out = shell(&w, &auth, &id, "curl -sS -m 10 http://192.0.2.1/");
    assert!(out.contains("origin-one-ok"), "allowed origin through the filter: {out}");
    let out = shell(&w, &auth, &id, "curl -sS -m 10 -i http://192.0.2.2/");
    assert!(
        out.contains(" 403") && out.to_ascii_lowercase().contains("x-egress-decision: block"),
        "blocked with the rule: {out}"
    );
    let out =
        shell(&w, &auth, &id, "curl -sS -m 5 --noproxy '*' http://192.0.2.1/ 2>&1 || echo direct-failed");
    assert!(
        !out.contains("origin-one-ok") && out.contains("direct-failed"),
        "a direct connection is rejected: {out}"
    );
    let out = shell(&w, &auth, &id, "sudo -n true 2>&1 || echo sudo-failed");
    assert!(out.contains("sudo-failed"), "sudo is refused: {out}");
    let out = shell(&w, &auth, &id, &format!("echo secret=[$(cat {} 2>&1)]", secret_file.display()));
    assert!(!out.contains(&secret), "the copy of OpenCode's secret is hidden: {out}");

    // Real agent turns (the scripted model calls the bash tool). cc-safety-net runs inside
    // OpenCode in the sandbox, from the cache `run` warmed, and honours the project's
    // .cc-safety-net/policy.json: notes.txt is denied by that file only.
    let p = agent_runs(w.web, &auth, &id, "cat other.txt");
    assert_eq!(p["state"]["status"], "completed", "{p:#}");
    assert!(!p["state"]["output"].as_str().unwrap_or_default().contains("ocsb egress"), "{p:#}");
    assert!(p["state"]["output"].as_str().unwrap_or_default().contains("readable-by-agent"), "{p:#}");
    // A denied request ends the bash tool's output with the host, the rule and its file:line,
    // and what to ask the user for; the same denial again in the session is only summarised.
    let cmd = "curl -sS -m 10 -o /dev/null -w '%{http_code}\\n' http://192.0.2.2/";
    let p = agent_runs(w.web, &auth, &id, cmd);
    let out = p["state"]["output"].as_str().unwrap_or_default().to_string();
    assert!(out.contains("403"), "{p:#}");
    assert!(
        out.trim_end().ends_with(
            "ocsb egress: GET 192.0.2.2:80 was denied by block (.opencode-sandbox/egress.conf:1); ask the user \
             to add `allow 192.0.2.2` to .opencode-sandbox/local/egress.conf (an allow rule wins over every \
             block rule; ports 80 and 443 only)."
        ),
        "{out}"
    );
    let p = agent_runs(w.web, &auth, &id, &format!("{cmd}; {cmd}"));
    let out = p["state"]["output"].as_str().unwrap_or_default().to_string();
    assert!(!out.contains("was denied by"), "the advice is given once per session: {out}");
    assert!(out.contains("ocsb egress: denied again, as reported before: GET 192.0.2.2:80 (2x)."), "{out}");
    for cmd in ["cat notes.txt", "git reset --hard"] {
        let p = agent_runs(w.web, &auth, &id, cmd);
        assert_eq!(p["state"]["status"], "error", "{p:#}");
        assert!(
            p["state"]["error"].as_str().unwrap_or_default().contains("BLOCKED by CC Safety Net"),
            "{p:#}"
        );
    }
    // A finished turn is announced on the desktop, through the filtered bus.
    let note = notifications.next(Duration::from_secs(15)).expect("no desktop notification");
    assert!(
        note["app_name"] == "OpenCode"
            && note["summary"] == "OpenCode: proj"
            && note["body"].as_str().is_some_and(|b| b.ends_with(": done")),
        "{note}"
    );

    // The Tokens panel of that session, in headless Chromium (started from this thread, so in
    // the test's network namespace), through the front `run` started.
    let mut browser = Browser::open(&session_url(w.web, &w.proj.display().to_string(), &id, &password));
    let panel = read_panel(&mut browser, &|v| v["model"] == "fake/m1" && v["context"] == "1,002 / 100,000");
    assert_eq!(panel["cache_read"], "200", "{panel}");
    drop(browser);
    let panel_log = std::fs::read_to_string(w.state.join("data/opencode/log/context-panel.log")).unwrap();
    assert!(panel_log.contains("the browser loaded the panel script"), "{panel_log}");

    // The agent plants a symlink where the launcher writes on the next start.
    let out = shell(
        &w,
        &auth,
        &id,
        &format!(
            "rm -rf {0}/package && ln -s {1} {0}/package && echo planted",
            w.state.display(),
            w.home.join("victim").display()
        ),
    );
    assert!(out.contains("planted"), "{out}");

    // Several projects at once: another project with its own ports runs beside this one; one
    // that reuses this one's web or egress port is refused with the fix.
    let (web2, egress2) = (w.web.port() + 4000, w.web.port() + 5000);
    let proj2 = other_project(&w, "proj2", web2, egress2);
    let log_b = w.root.join("run-b.log");
    let mut beside = start_run(&ns, &w, &proj2, &log_b, false);
    wait_ready(&log_b, &mut beside);
    let pw2 = std::fs::read_to_string(w.home.join(".local/share/opencode-sandbox/proj2/password")).unwrap();
    let front2 = SocketAddr::from(([127, 0, 0, 1], web2));
    assert_eq!(
        http(front2, "GET", "/", &[("Authorization", &basic("opencode", pw2.trim()))], None, T).status,
        200
    );
    assert_eq!(
        http(w.web, "GET", "/", &[("Authorization", &auth)], None, T).status,
        200,
        "the first still runs"
    );
    interrupt(&mut beside);
    for (name, web, egress, setting) in [
        ("proj3", w.web.port(), egress2 + 2, "OCSB_WEB_PORT"),
        ("proj4", web2 + 2, w.web.port() + 1000, "OCSB_EGRESS_PORT"),
    ] {
        let dir = other_project(&w, name, web, egress);
        let log = w.root.join(format!("run-{name}.log"));
        let st = start_run(&ns, &w, &dir, &log, false).0.wait().unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!st.success() && text.contains("is busy") && text.contains(setting), "{name}: {text}");
    }

    // A second `run` in the same project is refused while the first runs.
    let log2 = w.root.join("run2.log");
    let mut second = start_run(&ns, &w, &w.proj, &log2, false);
    let st = second.0.wait().unwrap();
    let text2 = std::fs::read_to_string(&log2).unwrap();
    assert!(!st.success() && text2.contains("already running"), "{text2}");

    // Ctrl-C (SIGINT) stops OpenCode, the front and the bus proxy; the filter keeps running.
    interrupt(&mut run);
    assert!(!w.state.join("run/bus").exists(), "the bus proxy's socket is gone");
    assert!(std::net::TcpStream::connect(w.web).is_err(), "the front is gone");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", w.web.port() + 1000)).is_ok(),
        "the filter still runs"
    );

    // `prepare` alone: the filter runs these rules already and the self-tests passed with them,
    // this filter and this netlock, so neither is repeated, and it says so.
    let prepare = |w: &World| {
        let out = ns.cmd().args(as_user()).args(ocsb_as(w, &w.proj)).arg("prepare").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
        text
    };
    let text = prepare(&w);
    assert!(
        text.contains("rules current")
            && text.contains("self-tests: passed before with these rules")
            && !text.contains("netlock:    ok"),
        "{text}"
    );
    // A rule changed: the filter is reloaded, and the netlock check and the self-tests run again.
    let conf = w.proj.join(".opencode-sandbox/egress.conf");
    let rules = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("{rules}block 192.0.2.3\n")).unwrap();
    let text = prepare(&w);
    assert!(
        text.contains("rules reloaded")
            && text.contains("netlock:    ok")
            && text.contains("self-tests: passed: the filter answered all 2 expect-pass/expect-block rules as written; a direct connection around the filter was refused"),
        "{text}"
    );
    std::fs::write(&conf, rules).unwrap();

    // `egress verify` as the user types it: the checks run inside the sandbox, under the lock,
    // so the direct connection is blocked for them although it is not for the user.
    let verify = |w: &World, dir: &Path, ns: &Netns| {
        let out = ns.cmd().args(as_user()).args(ocsb_as(w, dir)).args(["egress", "verify"]).output().unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let (ok, text) = verify(&w, &w.proj, &ns);
    assert!(ok && text.contains("ok   direct-blocked") && !text.contains("FAIL"), "{text}");
    // The filter that `run` started is the installed filter program, not `ocsb egress serve`.
    assert_eq!(filter_programs(&w.state), [w.root.join("prefix/libexec/ocsb/ocsb-egress")]);

    // `egress suggest` proposes the line for what the agent was denied above, and writes nothing.
    let conf = w.proj.join(".opencode-sandbox/egress.conf");
    let before = std::fs::read(&conf).unwrap();
    let out =
        ns.cmd().args(as_user()).args(ocsb_as(&w, &w.proj)).args(["egress", "suggest"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("\nallow 192.0.2.2\n"), "{text}");
    assert!(text.contains("by block (.opencode-sandbox/egress.conf:1)"), "{text}");
    let out = ns
        .cmd()
        .args(as_user())
        .args(ocsb_as(&w, &w.proj))
        .args(["egress", "suggest", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|s| s["line"] == "allow 192.0.2.2" && s["count"].as_u64() >= Some(1)),
        "{v}"
    );
    assert_eq!(std::fs::read(&conf).unwrap(), before, "suggest changed a rule file");

    // A failing step stops `prepare` there and names the step, why and the fix: a self-test
    // that contradicts the rules, and (in a namespace without the lock) the netlock.
    let proj5 = other_project(&w, "proj5", web2 + 4, egress2 + 4);
    std::fs::write(
        proj5.join(".opencode-sandbox/egress.conf"),
        "block 192.0.2.2\nexpect-pass http://192.0.2.2/\n",
    )
    .unwrap();
    let out = ns.cmd().args(as_user()).args(ocsb_as(&w, &proj5)).arg("prepare").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && text.contains("netlock:    ok"), "{text}");
    assert!(
        text.contains("self-tests")
            && text.contains("egress.conf:2")
            && text.contains("fix: each line names"),
        "{text}"
    );
    let (ok, text) = verify(&w, &proj5, &ns);
    assert!(
        !ok && text.contains("FAIL expect-pass http://192.0.2.2/ (") && text.contains("egress.conf:2"),
        "{text}"
    );
    assert!(text.contains("ok   direct-blocked"), "{text}");
    assert!(text.contains("fix: each failure names") && !text.contains("message above"), "{text}");
    let bare = Netns::new("run-bare");
    let proj6 = other_project(&w, "proj6", web2 + 6, egress2 + 6);
    let out = bare.cmd().args(as_user()).args(ocsb_as(&w, &proj6)).arg("prepare").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && text.contains("egress:") && !text.contains("self-tests"), "{text}");
    assert!(text.contains("netlock") && text.contains("NOT working") && text.contains("fix:"), "{text}");
    // Without the lock the sandbox does not start, and `egress verify` says so instead of
    // counting curl's silence as a blocked connection.
    let (ok, text) = verify(&w, &proj6, &bare);
    assert!(!ok && !text.contains("ok   direct-blocked"), "{text}");
    assert!(text.contains("netlock") || text.contains("curl did not run"), "{text}");
    let _ = Command::new("setpriv")
        .args(&as_user()[1..])
        .args(ocsb_as(&w, &proj6))
        .args(["egress", "down"])
        .output();
    drop(bare);

    // Restart: the session is still there.
    let log3 = w.root.join("run3.log");
    let mut again = start_run(&ns, &w, &w.proj, &log3, true);
    wait_ready(&log3, &mut again);
    let text3 = std::fs::read_to_string(&log3).unwrap();
    assert!(!text3.contains("first start"), "the password is printed only once");
    assert!(text3.contains("(`ocsb password` prints it)"), "where it is, on every start: {text3}");
    // The planted link was replaced, not followed.
    assert!(text3.contains("package was not a directory"), "{text3}");
    assert!(std::fs::symlink_metadata(w.state.join("package")).unwrap().is_dir());
    assert_eq!(
        std::fs::read_dir(w.home.join("victim")).unwrap().count(),
        0,
        "nothing written through the link"
    );
    // The browser is opened from outside the sandbox with the front's URL.
    assert!(text3.contains(&format!("browser:    opening http://{}/", w.web)), "{text3}");
    // It is the project's latest session, not OpenCode's home (which a new browser shows as an
    // empty "Add project" view); a screenshot of what the user sees is kept in the world.
    // The opener runs after the line is printed: waited for, up to 10 s.
    let mut opened = String::new();
    for _ in 0..200 {
        opened = std::fs::read_to_string(w.home.join("opened")).unwrap_or_default();
        if !opened.trim().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let dir = b64url(&w.proj.display().to_string());
    assert_eq!(opened.trim(), format!("http://{}/{dir}/session/{id}", w.web), "the session's page");
    let mut browser =
        Browser::open(&format!("{}?auth_token={}", opened.trim(), b64(&format!("opencode:{password}"))));
    let mut body = String::new();
    for _ in 0..100 {
        body = browser.eval("document.body ? document.body.innerText : ''");
        // One of the agent turns above (the page shows the latest ones).
        if body.contains("RUN: ") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let shot = w.root.join("project-page.png");
    browser.screenshot(&shot);
    if let Some(dir) = std::env::var_os("OCSB_SCREENSHOT_DIR") {
        let _ = std::fs::copy(&shot, std::path::Path::new(&dir).join("run-e2e-project-page.png"));
    }
    drop(browser);
    assert!(body.contains("RUN: ") && !body.contains("Nothing here yet"), "{body}");
    let list = http(w.web, "GET", "/session", &[("Authorization", &auth)], None, T).json();
    assert!(
        list.as_array().unwrap().iter().any(|s| s["id"] == id.as_str()),
        "session kept across restarts: {list}"
    );
    drop(again);
}

/// `OCSB_NETWORK=isolated` end to end, as an ordinary user with no netlock group, no shim and
/// no netlock table: `run` starts, the web front and OpenCode's own port answer (bridged into
/// the sandbox's namespace), the model provider on the host's loopback is reached through the
/// model-key broker (its port relayed in; the provider's own port is not), the agent's tools
/// reach an allowed origin without any proxy settings and not a blocked one, and the Tokens
/// panel fills in headless Chromium with OpenCode's numbers and the broker's.
#[test]
fn run_works_in_an_isolated_network_without_the_netlock() {
    require_host();
    let _turn = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let gid = netlock_gid();
    let (ns, origins) = world_netns();
    let tmp = tempfile::tempdir().unwrap();
    let (_provider, provider_port) = spawn_fake_provider(ns.exec(&["python3"]), tmp.path());
    let w = world_at(provider_port, "-iso", 26000);
    // No shim installed: the isolated mode needs none.
    std::fs::remove_file(w.root.join("prefix/libexec/ocsb/ocsb-netlock-exec")).unwrap();
    let conf = w.proj.join(".opencode-sandbox/local/sandbox.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    // The provider's key in the user's key file; its port is not forwarded into the sandbox.
    let keys = w.home.join("provider-keys");
    std::fs::write(&keys, format!("fake REAL-ISO-KEY http://127.0.0.1:{provider_port}/v1\n")).unwrap();
    sh(&format!("chown {UID}:{UID} {}", keys.display()));
    text += &format!("OCSB_NETWORK=isolated\nOCSB_PROVIDER_KEYS={}\nOCSB_NOTIFICATIONS=0\n", keys.display());
    std::fs::write(&conf, text).unwrap();
    let _origin = serve_origin(&ns, &origins, &w, "0.0.0.0");

    let log = w.root.join("run.log");
    let mut run = start_run(&ns, &w, &w.proj, &log, false);
    wait_ready(&log, &mut run);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("network:    isolated") && text.contains("no netlock installed"), "{text}");
    assert!(
        text.contains(
            "self-tests: passed: the filter answered all 2 expect-pass/expect-block rules as written"
        ),
        "{text}"
    );
    let password = std::fs::read_to_string(w.state.join("password")).unwrap().trim().to_string();

    ns.enter();
    let auth = basic("opencode", &password);
    let oc = SocketAddr::from(([127, 0, 0, 1], w.web.port() + 1));
    let secret = std::fs::read_to_string(w.state.join("opencode-password")).unwrap().trim().to_string();
    let raw = http(oc, "GET", "/", &[("Authorization", &basic("opencode", &secret))], None, T);
    assert_eq!(raw.status, 200, "OpenCode's own port, bridged into the sandbox");
    let ses = http(w.web, "POST", "/session", &[("Authorization", &auth)], Some("{}"), T).json();
    let id = ses["id"].as_str().unwrap_or_else(|| panic!("{ses}")).to_string();
    let out = shell(
        &w,
        &auth,
        &id,
        "id -G; echo allowed=$(curl -s -m 10 --noproxy '*' http://192.0.2.1/); \
         curl -sS -m 10 --noproxy '*' -o /dev/null http://192.0.2.2/ 2>&1",
    );
    assert!(!out.split_whitespace().any(|g| g == gid.to_string()), "not the netlock group: {out}");
    assert!(out.contains("allowed=origin-one-ok"), "{out}");
    let access = std::fs::read_to_string(w.state.join("egress/access.log")).unwrap_or_default();
    // Refused at once: the connection is reset (OpenCode's shell reports no exit status).
    assert!(out.contains("curl: (56) Recv failure: Connection reset by peer"), "{out}\n{access}");
    assert!(access.contains("TCP_DENIED/403 rule=block:project:1 CONNECT 192.0.2.2:80"), "{access}");
    // The provider's port is not reachable from inside; a model turn through the broker is.
    let direct = shell(
        &w,
        &auth,
        &id,
        &format!(
            "curl -s -m 5 -o /dev/null -w 'code=%{{http_code}}' http://127.0.0.1:{provider_port}/v1/models"
        ),
    );
    assert!(direct.contains("code=000"), "{direct}");
    let p = agent_runs(w.web, &auth, &id, "echo turn-done");
    assert!(p["state"]["output"].as_str().unwrap_or_default().contains("turn-done"), "{p:#}");
    let seen = std::fs::read_to_string(tmp.path().join("requests.jsonl")).unwrap();
    assert!(
        seen.lines().count() >= 2 && seen.lines().all(|l| l.contains("\"_auth\": \"Bearer REAL-ISO-KEY\"")),
        "{seen}"
    );
    // A dev server the agent starts through OpenCode's shell is published on the host's
    // loopback: `run` says so, the host's browser reaches it, the panel lists it.
    std::fs::write(w.proj.join("dev.txt"), "agent-dev-server\n").unwrap();
    let started = shell(
        &w,
        &auth,
        &id,
        "setsid -f python3 -m http.server 3000 --bind 0.0.0.0 >/dev/null 2>&1; sleep 1; echo started",
    );
    assert!(started.contains("started"), "{started}");
    let dev = SocketAddr::from(([127, 0, 0, 1], 3000));
    let deadline = Instant::now() + Duration::from_secs(10);
    let got = loop {
        match try_http(dev, "GET", "/dev.txt", &[], None, T) {
            Ok(r) if r.status == 200 => break Some(r),
            _ if Instant::now() > deadline => break None,
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert_eq!(
        got.map(|r| r.body.trim().to_string()).as_deref(),
        Some("agent-dev-server"),
        "published dev server"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("ocsb: published: http://127.0.0.1:3000 (python3, pid "), "{text}");
    let mut browser = Browser::open(&session_url(w.web, &w.proj.display().to_string(), &id, &password));
    let panel = read_panel(&mut browser, &|v| {
        v["model"] == "fake/m1"
            && v["spend_run"].as_str().is_some_and(|s| s.starts_with('$') && s != "$0.0000")
            && v["published"].as_str().is_some_and(|p| p.contains("127.0.0.1:3000"))
    });
    assert!(panel["context"].as_str().is_some_and(|c| c.ends_with("/ 100,000")), "{panel}");
    assert!(panel["output"].as_str().is_some_and(|o| o != "0" && o != "–"), "{panel}");
    assert!(panel["published"].as_str().is_some_and(|p| p.contains("python3 (pid")), "{panel}");
    drop(browser);
    interrupt(&mut run);
    // Gone with the run.
    assert!(
        std::net::TcpStream::connect_timeout(&dev, Duration::from_secs(2)).is_err(),
        "3000 outlived the run"
    );
}

/// The programs of the running filter processes whose state directory is `state`.
fn filter_programs(state: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let ours =
            args.windows(2).any(|w| w[0] == b"--state-dir" && Path::new(OsStr::from_bytes(w[1])) == state);
        if ours && args.contains(&&b"serve"[..]) {
            found.extend(std::fs::read_link(e.path().join("exe")));
        }
    }
    found
}

/// The allowed origin (`www1`, on port 80 of `bind` in the origins' namespace), answering
/// 192.0.2.1 as seen from `ns` before this returns.
fn serve_origin(ns: &Netns, origins: &Netns, w: &World, bind: &str) -> Proc {
    let p = Proc(
        origins
            .cmd()
            .args(["python3", "-m", "http.server", "--bind", bind, "80", "--directory"])
            .arg(w.root.join("www1"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    ns.sh("for i in $(seq 100); do curl -s -m 1 -o /dev/null http://192.0.2.1/ && exit 0; sleep 0.1; done; exit 1");
    p
}

/// The netlock table of the main test, installed in `ns`: the netlock group reaches loopback only.
fn install_netlock_table(ns: &Netns, w: &World, gid: u32) {
    let table = format!(
        "table inet ocsb_netlock {{\n chain output {{\n  type filter hook output priority filter; policy accept;\n  meta skgid {gid} jump locked\n }}\n \
         chain locked {{\n  ip daddr 127.0.0.0/8 accept\n  ip6 daddr ::1 accept\n  reject with icmpx admin-prohibited\n }}\n}}\n"
    );
    let nft = w.root.join("netlock.nft");
    std::fs::write(&nft, table).unwrap();
    ns.sh(&format!("nft -f {}", nft.display()));
}

/// A test CA and a server certificate for `ip` signed by it, in `dir`: (ca.pem, cert.pem, key.pem).
fn test_ca(dir: &Path, ip: &str) -> (PathBuf, PathBuf, PathBuf) {
    let d = dir.display();
    sh(&format!(
        "cd {d} && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
         -out ca.pem -days 2 -subj /CN=ocsb-test-ca 2>/dev/null && \
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out leaf.csr \
         -subj /CN={ip} 2>/dev/null && \
         printf 'subjectAltName=IP:{ip}\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > leaf.ext && \
         openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 \
         -extfile leaf.ext 2>/dev/null && chmod a+r ca.pem cert.pem key.pem"
    ));
    (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"))
}

/// The model-key broker end to end, in the default network mode. The provider's real key is in
/// the user's `OCSB_PROVIDER_KEYS` file (a readable part of `~`) with the provider's HTTPS
/// address (a test CA the launcher is told to trust); a second key sits in `OCSB_ENV_FILE` as
/// `OPENAI_API_KEY`. The provider's address is blocked by the egress rules, and the project's
/// `opencode.json` names another address. The agent's shell finds neither key in any sandbox
/// process's environment, in OpenCode's config, data and cache, in the state directory as it
/// sees it, or in the key files; the provider receives the real key on every request; a
/// streamed tool call arrives intact and runs; a spend limit below one reply's cost refuses
/// the next request with a message OpenCode shows; the Tokens panel shows the spend against
/// the limit in headless Chromium; `ocsb spend --json` reports the totals.
#[test]
fn run_keeps_model_keys_outside_the_sandbox_and_caps_the_spend() {
    require_host();
    testkit::host::require_all(&[("openssl", "openssl")]);
    let _turn = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let gid = netlock_gid();
    let (ns, origins) = world_netns();
    let tmp = tempfile::tempdir().unwrap();
    sh(&format!("chmod 755 {}", tmp.path().display()));
    let (ca, cert, key) = test_ca(tmp.path(), "192.0.2.2");
    // The provider on the blocked origin, over HTTPS; OpenCode's title request answers after the
    // turn's own first request has (so the refusal below is the turn's second request).
    let tls = format!("FAKE_PROVIDER_TLS={}:{}", cert.display(), key.display());
    let provider_cmd = origins.exec(&[
        "env",
        "FAKE_PROVIDER_BIND=192.0.2.2",
        &tls,
        "FAKE_PROVIDER_TITLE_DELAY=3",
        "python3",
    ]);
    let (_provider, provider_port) = spawn_fake_provider(provider_cmd, tmp.path());
    // The project's config points elsewhere (the agent may have edited it): it never decides
    // where a key goes.
    let mut w = world_at(9, "-key", 30000);
    // OpenCode's title requests go to a cheap model: the broker reserves what a call may cost
    // while it runs, and the turn's first call must not wait on the title's reservation.
    let mut oc: serde_json::Value = serde_json::from_str(&provider_config(9)).unwrap();
    oc["provider"]["fake"]["models"]["m0"] = serde_json::json!({"name": "M0", "limit": {"context": 100000, "output": 64},
        "cost": {"input": 0.001, "output": 0.001, "cache_read": 0.001, "cache_write": 0.001}});
    oc["small_model"] = "fake/m0".into();
    std::fs::write(w.proj.join("opencode.json"), oc.to_string()).unwrap();
    // With a limit, only prices of the user's own files count: the global OpenCode config.
    let global = w.home.join(".config/opencode-sandbox/opencode.jsonc");
    std::fs::create_dir_all(global.parent().unwrap()).unwrap();
    let prices = serde_json::json!({"provider": {"fake": {"models": {
        "m1": {"cost": oc["provider"]["fake"]["models"]["m1"]["cost"]},
        "m0": {"cost": oc["provider"]["fake"]["models"]["m0"]["cost"]}}}}});
    std::fs::write(&global, format!("// the user's prices\n{prices}\n")).unwrap();
    w.launcher_env.push(format!("SSL_CERT_FILE={}", ca.display()));
    let real = format!("REAL-{}", std::process::id());
    let secret = "4f9c1e7a5b";
    let env_key = "sk-proj-ENVKEY0123456789abcdef";
    let keys_file = w.home.join(".config/opencode-sandbox/provider-keys");
    std::fs::create_dir_all(keys_file.parent().unwrap()).unwrap();
    std::fs::write(
        &keys_file,
        format!("# mine\nfake {real}-{secret} https://192.0.2.2:{provider_port}/v1\n"),
    )
    .unwrap();
    let env_file = w.home.join("agent.env");
    let mut text = std::fs::read_to_string(&env_file).unwrap();
    text += &format!("OPENAI_API_KEY={env_key}\n");
    std::fs::write(&env_file, text).unwrap();
    let conf = w.proj.join(".opencode-sandbox/local/sandbox.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text += &format!(
        "OCSB_PROVIDER_KEYS={}\nOCSB_SPEND_LIMIT=/0.50\nOCSB_NOTIFICATIONS=0\n",
        keys_file.display()
    );
    std::fs::write(&conf, text).unwrap();
    sh(&format!("chown -R {UID}:{UID} {}", w.home.display()));
    install_netlock_table(&ns, &w, gid);
    // The allowed origin of the project's expect-pass line.
    let _origin = serve_origin(&ns, &origins, &w, "192.0.2.1");

    let log = w.root.join("run.log");
    let mut run = start_run(&ns, &w, &w.proj, &log, false);
    wait_ready(&log, &mut run);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("broker:     keys of fake, openai stay outside the sandbox"), "{text}");
    assert!(text.contains("spend limit $0.50 per run"), "{text}");
    let password = std::fs::read_to_string(w.state.join("password")).unwrap().trim().to_string();

    ns.enter();
    let auth = basic("opencode", &password);
    // A session with a title: OpenCode asks the model for none, so the turn's own calls are
    // the only ones (a title call under way would hold its reservation against the limit).
    let ses =
        http(w.web, "POST", "/session", &[("Authorization", &auth)], Some(r#"{"title":"broker"}"#), T).json();
    let id = ses["id"].as_str().unwrap_or_else(|| panic!("{ses}")).to_string();
    // The searches never spell a key out (the command is stored in OpenCode's data, which is
    // searched): each is put together by the script. It is a file because OpenCode's shell
    // endpoint expands a command once more before running it.
    let state = w.state.display();
    let script = w.proj.join("check-keys.sh");
    std::fs::write(
        &script,
        format!(
            "K={real}-; K=${{K}}{secret}; E=sk-proj-ENVKEY; E=${{E}}0123456789abcdef\n\
             envs=$(for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null)\n\
             echo procs=$(ls -d /proc/[0-9]* | wc -l) placeholder=$(printf '%s\\n' \"$envs\" | grep -c ocsb-broker-)\n\
             echo mcp=$(printf '%s\\n' \"$envs\" | grep -c '^MCP_TOKEN=tok-')\n\
             echo env-hits=$(printf '%s\\n' \"$envs\" | grep -c -e \"$K\" -e \"$E\")\n\
             echo file-hits=$(grep -rla -e \"$K\" -e \"$E\" \"$XDG_CONFIG_HOME\" \"$XDG_DATA_HOME\" \"$XDG_CACHE_HOME\" {state} $HOME/.config 2>/dev/null | wc -l)\n\
             echo searched=$(grep -rla -e opencode \"$XDG_CONFIG_HOME\" {state} 2>/dev/null | wc -l) \
             binary=$(grep -rla 'SQLite format 3' \"$XDG_DATA_HOME\" 2>/dev/null | wc -l)\n\
             echo keys-file=$(cat {} 2>&1 | grep -c fake) env-file=$(cat {} 2>&1 | grep -c MCP_TOKEN)\n\
             echo ledger=$(ls -A {state}/spend 2>&1 | wc -w)\n",
            keys_file.display(),
            env_file.display()
        ),
    )
    .unwrap();
    sh(&format!("chown {UID}:{UID} {}", script.display()));
    let out = shell(&w, &auth, &id, &format!("sh {}", script.display()));
    assert!(out.contains("env-hits=0") && out.contains("file-hits=0"), "{out}");
    assert!(out.contains("keys-file=0") && out.contains("env-file=0") && out.contains("ledger=0"), "{out}");
    // Positive controls: the search saw OpenCode's environment (its placeholder is there), and
    // MCP tokens still go in through the environment.
    let placeholder: u32 =
        out.split("placeholder=").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().parse().unwrap();
    assert!(placeholder >= 1, "{out}");
    assert!(out.contains("mcp=1"), "{out}");
    let searched: u32 =
        out.split("searched=").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().parse().unwrap();
    assert!(
        searched >= 1 && !out.contains("binary=0"),
        "the search reads OpenCode's files, its database too: {out}"
    );
    // The provider's host is blocked for the sandbox.
    let direct = shell(
        &w,
        &auth,
        &id,
        &format!(
            "curl -sk -m 10 -o /dev/null -w 'code=%{{http_code}}' https://192.0.2.2:{provider_port}/v1/models"
        ),
    );
    assert!(!direct.contains("code=200"), "{direct}");
    // The agent calls the broker itself, with OpenCode's placeholder and address (both in
    // OpenCode's environment), asking the provider for an item stored in the account by id:
    // refused in the provider's shape, and nothing reaches the provider.
    let stored = w.proj.join("stored-item.sh");
    std::fs::write(
        &stored,
        "cfg=$(for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null | grep -m1 '^OPENCODE_CONFIG_CONTENT=')\n\
         url=$(printf '%s' \"$cfg\" | grep -o 'http://127.0.0.1:[0-9]*/fake' | head -n1)\n\
         key=$(printf '%s' \"$cfg\" | grep -o 'ocsb-broker-[A-Za-z0-9_-]*' | head -n1)\n\
         echo url=${url:+found} key=${key:+found}\n\
         curl -s -m 10 -H \"Authorization: Bearer $key\" -H 'content-type: application/json' \
         -d '{\"model\":\"m1\",\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_stored\"}]}' \
         -w ' code=%{http_code}' \"$url/responses\"\n",
    )
    .unwrap();
    sh(&format!("chown {UID}:{UID} {}", stored.display()));
    let out = shell(&w, &auth, &id, &format!("sh {}", stored.display()));
    assert!(out.contains("url=found key=found"), "{out}");
    assert!(
        out.contains("code=403")
            && out.contains("permission_error")
            && out.contains("`item_reference` reads an item stored in the account"),
        "{out}"
    );
    let logged = std::fs::read_to_string(tmp.path().join("requests.jsonl")).unwrap_or_default();
    assert!(!logged.contains("msg_stored"), "the provider never got it: {logged}");

    // A model turn: the streamed tool call arrives intact and runs; the reply's cost (0.922 at
    // the user's prices) is over the limit, so the turn's next request is refused.
    let p = agent_runs(w.web, &auth, &id, "echo broker-$((6*7))");
    assert!(p["state"]["output"].as_str().unwrap_or_default().contains("broker-42"), "{p:#}");
    let msgs =
        http(w.web, "GET", &format!("/session/{id}/message"), &[("Authorization", &auth)], None, T).body;
    assert!(msgs.contains("spend limit of $0.50 per run (OCSB_SPEND_LIMIT) is reached"), "{msgs}");
    let seen: Vec<serde_json::Value> = std::fs::read_to_string(tmp.path().join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!seen.is_empty());
    for r in &seen {
        assert_eq!(r["_auth"], format!("Bearer {real}-{secret}"), "the provider gets the real key");
    }
    let turn: Vec<_> = seen.iter().filter(|r| r["tools"].is_array()).collect();
    assert_eq!(turn.len(), 1, "the turn's second request never reached the provider");
    assert!(!seen.iter().any(|r| r.to_string().contains("msg_stored")), "the refused call never left");

    // The panel shows the broker's spend against the limit. (OpenCode records no tokens for a
    // turn that ended in an error; the isolated test checks its numbers after a whole turn.)
    let mut browser = Browser::open(&session_url(w.web, &w.proj.display().to_string(), &id, &password));
    let panel = read_panel(&mut browser, &|v| {
        v["spend_run"].as_str().is_some_and(|s| s.ends_with("/ $0.50") && !s.starts_with("$0.0000"))
    });
    assert!(panel["limit_note"].as_str().is_some_and(|n| n.contains("spend limit reached")), "{panel}");
    drop(browser);

    // `ocsb spend`, as the user types it.
    let out = Command::new("setpriv")
        .args(&as_user()[1..])
        .args(ocsb_as(&w, &w.proj))
        .args(["spend", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cost = v["session"]["totals"]["cost"].as_f64().unwrap();
    assert!(cost >= 0.922 - 1e-9, "{v}");
    assert!(v["today"]["cost"].as_f64().unwrap() >= cost && v["limit"]["session"] == 0.5, "{v}");
    assert_eq!(v["session"]["totals"]["output"].as_u64().unwrap() % 50, 0, "{v}");
    let ledger = std::fs::read_to_string(w.state.join("spend/ledger.jsonl")).unwrap();
    assert!(ledger.contains("\"status\":402") && !ledger.contains(&real), "{ledger}");
    interrupt(&mut run);
}

/// The real OpenCode, given the `provider` block the launcher writes for the key broker
/// (`baseURL` `http://<broker>/<id>`, the placeholder as `apiKey`), sends each built-in provider's
/// model call there, with the placeholder where that provider's key goes, on a path the broker
/// forwards (`messages`, `responses`, `chat/completions`). A recorder on the namespace's loopback
/// stands in for the broker.
#[test]
fn opencode_sends_the_known_providers_to_the_broker() {
    require_host();
    let ns = Netns::new("prov");
    let tmp = tempfile::tempdir().unwrap();
    let recorder = tmp.path().join("rec.py");
    std::fs::write(
        &recorder,
        "import json, sys\nfrom http.server import BaseHTTPRequestHandler, HTTPServer\n\
         class H(BaseHTTPRequestHandler):\n    def log_message(self, *a): pass\n\
         \x20   def do_POST(self):\n        n = int(self.headers.get('content-length', 0)); self.rfile.read(n)\n\
         \x20       with open(sys.argv[1], 'a') as f: f.write(json.dumps([self.command, self.path, \
         self.headers.get('x-api-key'), self.headers.get('authorization')]) + '\\n')\n\
         \x20       b = b'{\"error\":{\"message\":\"recorded\"}}'\n        self.send_response(400); \
         self.send_header('content-length', str(len(b))); self.end_headers(); self.wfile.write(b)\n\
         srv = HTTPServer(('127.0.0.1', 0), H); print(srv.server_address[1], flush=True); srv.serve_forever()\n",
    )
    .unwrap();
    let log = tmp.path().join("seen.jsonl");
    let mut child = ns
        .exec(&["python3", recorder.to_str().unwrap(), log.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
        .unwrap();
    let _recorder = Proc(child);
    let port: u16 = line.trim().parse().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for (id, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai", "gpt-5"),
        ("openrouter", "anthropic/claude-sonnet-4.5"),
    ] {
        let cfg = serde_json::json!({
            "provider": {id: {"options": {"baseURL": format!("http://127.0.0.1:{port}/{id}"), "apiKey": format!("ocsb-broker-{id}")}}},
            "model": format!("{id}/{model}"), "small_model": format!("{id}/{model}"),
        });
        let st = ns
            .exec(&["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin"])
            .arg(format!("HOME={}", home.display()))
            .arg(format!("OPENCODE_CONFIG_CONTENT={cfg}"))
            .args(["OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1"])
            .arg(opencode_bin())
            .args(["run", "hi"])
            .current_dir(tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!st.success(), "{id}: the recorder refuses every call");
    }
    let seen: Vec<serde_json::Value> =
        std::fs::read_to_string(&log).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let first = |id: &str| {
        seen.iter().find(|s| s[1].as_str().is_some_and(|p| p.starts_with(&format!("/{id}/")))).cloned()
    };
    assert_eq!(
        first("anthropic"),
        Some(serde_json::json!(["POST", "/anthropic/messages", "ocsb-broker-anthropic", null])),
        "{seen:?}"
    );
    assert_eq!(
        first("openai"),
        Some(serde_json::json!(["POST", "/openai/responses", null, "Bearer ocsb-broker-openai"])),
        "{seen:?}"
    );
    assert_eq!(
        first("openrouter"),
        Some(serde_json::json!([
            "POST",
            "/openrouter/chat/completions",
            null,
            "Bearer ocsb-broker-openrouter"
        ])),
        "{seen:?}"
    );
}

/// `ocsb run` gives the agent Docker through the gateway (`OCSB_DOCKER=1`, the default), as
/// `exec` does: the scripted model runs `docker` with OpenCode's bash tool in the sandbox, for a
/// user in the group `docker`. A container it runs writes the project as the user; one it
/// leaves running is the real daemon's, labelled by the gateway as the project's; a privileged
/// one is refused by the gateway's rule. Ctrl-C ends the session as it ends an `exec`: the
/// container is stopped, the gateway's socket and the session's journal are gone, and so is
/// the launcher's watcher. The machine's daemon runs in the machine's own network namespace,
/// so every container has no network (`--network none`).
#[test]
fn run_gives_the_agent_docker_through_the_gateway() {
    docker_through_run(Mode::Default);
}

/// The same in the netlock mode, named.
#[test]
fn run_gives_the_agent_docker_through_the_gateway_in_the_netlock_mode() {
    docker_through_run(Mode::Netlock);
}

#[derive(PartialEq)]
enum Mode {
    /// The default, isolated: the model provider on the host's loopback is forwarded in.
    Default,
    Netlock,
}

fn docker_through_run(mode: Mode) {
    require_host();
    super::docker_gateway::require_docker();
    let image = super::docker_gateway::IMAGE;
    let _turn = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let gid = netlock_gid();
    let (ns, origins) = world_netns();
    let tmp = tempfile::tempdir().unwrap();
    let (_provider, provider_port) = spawn_fake_provider(ns.exec(&["python3"]), tmp.path());
    let (tag, base) = if mode == Mode::Netlock { ("-docker-nl", 35000) } else { ("-docker", 34000) };
    let mut w = world_at(provider_port, tag, base);
    let conf = w.proj.join(".opencode-sandbox/local/sandbox.conf");
    // `OCSB_DOCKER` as a new user has it: unset, so the default (1).
    let text = std::fs::read_to_string(&conf).unwrap().replace("OCSB_DOCKER=0\n", "");
    let network = match mode {
        Mode::Default => format!("OCSB_FORWARD_PORTS=({provider_port})\n"),
        Mode::Netlock => "OCSB_NETWORK=netlock\n".to_string(),
    };
    std::fs::write(&conf, format!("{text}OCSB_NOTIFICATIONS=0\n{network}")).unwrap();
    let docker_gid = testkit::host::group_gid("docker").to_string();
    w.user = ["setpriv", "--reuid", "1990", "--regid", "1990", "--groups", &docker_gid, "--"]
        .map(String::from)
        .to_vec();
    install_netlock_table(&ns, &w, gid);
    let _origin = serve_origin(&ns, &origins, &w, "192.0.2.1");
    let keep = format!("ocsb-run-keep{tag}-{}", std::process::id());
    let _removed = RemovedAtEnd(keep.clone());

    let log = w.root.join("run.log");
    let mut run = start_run(&ns, &w, &w.proj, &log, false);
    wait_ready(&log, &mut run);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("Docker will not work"), "{text}");
    let password = std::fs::read_to_string(w.state.join("password")).unwrap().trim().to_string();

    ns.enter();
    let auth = basic("opencode", &password);
    let ses = http(w.web, "POST", "/session", &[("Authorization", &auth)], Some("{}"), T).json();
    let id = ses["id"].as_str().unwrap_or_else(|| panic!("{ses}")).to_string();
    let output = |p: &serde_json::Value| p["state"]["output"].as_str().unwrap_or_default().to_string();

    let p = agent_runs(
        w.web,
        &auth,
        &id,
        &format!(
            "echo \"host=$DOCKER_HOST config=$DOCKER_CONFIG\"; \
             docker run --rm --network none --user \"$(id -u)\" -v \"$PWD\":/src {image} \
             sh -c 'echo from-container-$(id -u) > /src/by-container' 2>&1; echo rc=$?"
        ),
    );
    assert!(output(&p).contains("rc=0"), "{p:#}");
    // The gateway's socket, and the Docker client's config `prepare` wrote in the state directory.
    let config = w.state.join("docker");
    assert!(
        output(&p).contains(&format!("host=unix:///run/docker.sock config={}\n", config.display())),
        "{p:#}"
    );
    assert!(config.join("config.json").is_file(), "{}", config.display());
    let written = w.proj.join("by-container");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap_or_default(),
        format!("from-container-{UID}\n"),
        "{p:#}"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), UID, "the project's file is the user's");

    let p = agent_runs(
        w.web,
        &auth,
        &id,
        &format!(
            "docker run -d --name {keep} --network none {image} sleep 300 >/dev/null 2>&1; \
             docker ps --format 'running {{{{.Names}}}}'"
        ),
    );
    assert!(output(&p).contains(&format!("running {keep}")), "{p:#}");
    // On the host, as root: the real daemon runs it, with the labels the gateway gave it.
    let inspect = || {
        let o = Command::new("docker")
            .args([
                "inspect",
                "-f",
                "{{index .Config.Labels \"dev.ocsb.project\"}} {{.State.Running}}",
                &keep,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(inspect(), "proj true");

    let p = agent_runs(
        w.web,
        &auth,
        &id,
        &format!("docker run --rm --network none --privileged {image} true 2>&1; echo rc=$?"),
    );
    let out = output(&p);
    assert!(
        out.contains("refused by the Docker gateway (rule privileged)") && !out.contains("rc=0"),
        "{p:#}"
    );
    let gw_log = std::fs::read_to_string(w.state.join("egress/docker.log")).unwrap_or_default();
    assert!(gw_log.contains("rule=privileged"), "{gw_log}");

    // Ctrl-C: the session's end stops what it left running, and the gateway goes with `run`.
    let pid = run.0.id();
    interrupt(&mut run);
    assert_eq!(inspect(), "proj false", "stopped (kept) when run ended");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("ocsb: docker: stopped "), "{text}");
    let egress = w.state.join("egress");
    let left: Vec<String> = std::fs::read_dir(&egress)
        .unwrap()
        .chain(std::fs::read_dir(egress.join("docker-sessions")).unwrap())
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| (n.starts_with("docker-") && n.ends_with(".sock")) || n.starts_with(&format!("{pid}-")))
        .collect();
    assert!(left.is_empty(), "the gateway's socket and journal are gone: {left:?}");
    let watcher = format!("__docker-watch\0{pid}\0");
    let watching = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&watcher))
        })
    };
    assert!(
        testkit::proc::wait_for(Duration::from_secs(10), || !watching()),
        "the watcher of {pid} still runs"
    );
}

/// Removes a container of the machine's daemon when the test ends, however it ends.
struct RemovedAtEnd(String);

impl Drop for RemovedAtEnd {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}
