//! Test world for the netlock: two network namespaces made by the test (never the machine's own),
//! joined by a veth on documentation addresses, a "world" with TCP/UDP servers, and the helper run
//! in a private mount namespace whose /etc and /run are overlays, so the helper reads the test's
//! /etc/ocsb/netlock.toml and /etc/resolv.conf through its real, compiled-in paths.
//!
//! Addresses: lock side 198.51.100.1 / 2001:db8:1::1; world 198.51.100.2 / 2001:db8:1::2, DNS
//! server 198.51.100.53 / 2001:db8:1::53, another port-53 server 198.51.100.54 / 2001:db8:1::54.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub const HELPER: &str = env!("CARGO_BIN_EXE_ocsb-netlock-helper");
pub const SHIM: &str = env!("CARGO_BIN_EXE_ocsb-netlock-exec");
pub use testkit::host::{NETLOCK_GROUP as GROUP, TEST_UID, TEST_USER};
pub use testkit::proc::wait_for;
pub use testkit::{Netns, Proc};
pub const WORLD4: &str = "198.51.100.2";
pub const WORLD6: &str = "2001:db8:1::2";
pub const DNS4: &str = "198.51.100.53";
pub const DNS6: &str = "2001:db8:1::53";
pub const OTHER53_4: &str = "198.51.100.54";
pub const OTHER53_6: &str = "2001:db8:1::54";
pub const RESOLV: &str = "nameserver 198.51.100.53\nnameserver 2001:db8:1::53\noptions edns0\n";

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!("ocsbnl-{tag}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst))
}

/// Fails (never skips) with the package or setup step that is missing.
pub fn preflight() -> u32 {
    testkit::host::require_root("netlock tests create namespaces");
    for (tool, pkg) in [
        ("/usr/sbin/ip", "iproute2"),
        ("/usr/sbin/nft", "nftables"),
        ("/usr/bin/setpriv", "util-linux"),
        ("/usr/bin/unshare", "util-linux"),
        ("/usr/bin/python3", "python3"),
    ] {
        assert!(
            Path::new(tool).exists(),
            "{tool} missing: install the Debian package `{pkg}` (tests/install-deps.sh)"
        );
    }
    testkit::host::test_user();
    let group = nix::unistd::Group::from_name(GROUP).ok().flatten();
    let gid = group.map(|g| g.gid.as_raw()).unwrap_or_else(|| {
        panic!("group {GROUP} missing: run tests/install-deps.sh (groupadd --system {GROUP})")
    });
    assert!(
        gid > 0 && gid < 1000,
        "group {GROUP} must be a system group (gid {gid}); recreate with groupadd --system"
    );
    gid
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

pub fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub struct TempDir(pub PathBuf);
impl TempDir {
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(unique("t"));
        fs::create_dir_all(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// TCP and UDP servers (world.py) in `ns` on every address, on `ports`, once they are ready.
fn servers(ns: &Netns, ports: &[&str]) -> Proc {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/world.py");
    let mut child =
        ns.exec(&[&["/usr/bin/python3", script][..], ports].concat()).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "servers on {ports:?} did not start");
    Proc(child)
}

pub struct World {
    pub dir: TempDir,
    pub lock: Netns,
    /// The other end of the veth (its servers die with it).
    pub _world: Netns,
    pub gid: u32,
    _servers: Proc,
}

impl World {
    pub fn new() -> World {
        World::with_config(&format!("group = \"{GROUP}\"\ndns = \"resolv-conf\"\n"))
    }

    pub fn with_config(config: &str) -> World {
        let gid = preflight();
        let dir = TempDir::new();
        let d = &dir.0;
        for sub in ["etc/ocsb", "dns", "run/up", "run/work", "prefix/libexec/ocsb", "prefix/bin"] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        fs::write(d.join("etc/ocsb/netlock.toml"), config).unwrap();
        fs::write(d.join("dns/resolv.conf"), RESOLV).unwrap();
        // Like systemd-resolved: /etc/resolv.conf is a symlink whose target is replaced by rename.
        symlink(d.join("dns/resolv.conf"), d.join("etc/resolv.conf")).unwrap();
        let shim = d.join("prefix/libexec/ocsb/ocsb-netlock-exec");
        fs::copy(SHIM, &shim).unwrap();
        nix::unistd::chown(&shim, Some(0.into()), Some(gid.into())).unwrap();
        fs::set_permissions(&shim, fs::Permissions::from_mode(0o2755)).unwrap();
        fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/probe.py"), d.join("prefix/bin/ocsb"))
            .unwrap();
        for p in ["prefix", "prefix/libexec", "prefix/libexec/ocsb", "prefix/bin", "dns"] {
            fs::set_permissions(d.join(p), fs::Permissions::from_mode(0o755)).unwrap();
        }

        let lock = Netns::new("nl-l");
        let world = Netns::new("nl-w");
        lock.veth("v0", &world, "v1");
        ok(&mut lock.exec(&[
            "sh",
            "-ec",
            "ip addr add 198.51.100.1/24 dev v0
             ip -6 addr add 2001:db8:1::1/64 dev v0 nodad
             ip route add default via 198.51.100.2
             ip -6 route add default via 2001:db8:1::2",
        ]));
        ok(&mut world.exec(&[
            "sh",
            "-ec",
            "for a in 198.51.100.2 198.51.100.53 198.51.100.54; do ip addr add $a/24 dev v1; done
             for a in 2001:db8:1::2 2001:db8:1::53 2001:db8:1::54; do ip -6 addr add $a/64 dev v1 nodad; done",
        ]));
        let servers = servers(&world, &["53", "8080", "9"]);
        let w = World { dir, lock, _world: world, gid, _servers: servers };
        // Control: without any lock the world answers (otherwise every "blocked" below is vacuous).
        assert_eq!(w.probe_root(&["tcp", WORLD4, "8080"]), "ok");
        w
    }

    /// TCP and UDP servers (world.py) on every address of the lock side itself, on `port`:
    /// a local service for the NAT and loopback-DNS tests.
    pub fn local_servers(&self, port: &str) -> Proc {
        servers(&self.lock, &[port])
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.0.join(p)
    }

    /// The helper with the test's /etc (config + resolv.conf) and a private /run, in the lock netns.
    pub fn helper(&self, args: &[&str]) -> Command {
        self.helper_as(args, "")
    }

    /// As the unit runs it: system user ocsb-netlock with nothing but CAP_NET_ADMIN.
    pub fn helper_as_service(&self, args: &[&str]) -> Command {
        let status_dir = self.path("run/up/ocsb-netlock");
        fs::create_dir_all(&status_dir).unwrap();
        let user = nix::unistd::User::from_name("ocsb-netlock").ok().flatten().expect(
            "system user ocsb-netlock missing: run tests/install-deps.sh (useradd --system ocsb-netlock, as sysusers.d/ocsb.conf)",
        );
        nix::unistd::chown(&status_dir, Some(user.uid), Some(user.gid)).unwrap();
        self.helper_as(
            args,
            "setpriv --reuid=ocsb-netlock --regid=ocsb-netlock --clear-groups --inh-caps=-all,+net_admin \
             --ambient-caps=-all,+net_admin --bounding-set=-all,+net_admin",
        )
    }

    fn helper_as(&self, args: &[&str], prefix: &str) -> Command {
        let d = self.dir.0.display();
        let script = format!(
            "mount -t overlay overlay -o lowerdir={d}/etc:/etc /etc
             mount -t overlay overlay -o lowerdir=/run,upperdir={d}/run/up,workdir={d}/run/work /run
             exec {prefix} \"$@\""
        );
        let mut c = self.lock.exec(&[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-ec",
            &script,
            "sh",
            HELPER,
        ]);
        c.args(args);
        c
    }

    pub fn as_user(&self, args: &[&str]) -> Command {
        let mut c = self.lock.exec(&["setpriv", "--reuid", "1990", "--regid", "1990", "--init-groups"]);
        c.args(args);
        c
    }

    pub fn shim_path(&self) -> String {
        self.path("prefix/libexec/ocsb/ocsb-netlock-exec").display().to_string()
    }

    /// Runs the probe through the real setgid shim as the test user; returns its one line.
    pub fn probe(&self, args: &[&str]) -> String {
        let shim = self.shim_path();
        let mut a = vec![shim.as_str()];
        a.extend_from_slice(args);
        ok(&mut self.as_user(&a)).trim().to_string()
    }

    /// The same probe without the shim, as root (gid 0): the control.
    pub fn probe_root(&self, args: &[&str]) -> String {
        let mut a = vec!["/usr/bin/python3", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/probe.py")];
        a.extend_from_slice(args);
        ok(&mut self.lock.exec(&a)).trim().to_string()
    }

    /// The probe as the test user without the shim, with the given primary gid and group options.
    pub fn probe_user_plain(&self, regid: &str, extra: &[&str], args: &[&str]) -> String {
        let mut a: Vec<&str> = vec!["setpriv", "--reuid", "1990", "--regid", regid];
        a.extend_from_slice(extra);
        a.extend_from_slice(&[
            "/usr/bin/python3",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/probe.py"),
        ]);
        a.extend_from_slice(args);
        ok(&mut self.lock.exec(&a)).trim().to_string()
    }

    pub fn nft_list(&self) -> Option<String> {
        let out = run(&mut self.lock.exec(&["nft", "-s", "list", "table", "inet", "ocsb_netlock"]));
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Replaces the resolv.conf target by rename, as resolved and NetworkManager do.
    pub fn set_resolv(&self, text: &str) {
        let tmp = self.path("dns/.resolv.conf.new");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, self.path("dns/resolv.conf")).unwrap();
    }

    pub fn status(&self) -> serde_json::Value {
        let text = fs::read_to_string(self.path("run/up/ocsb-netlock/status.json")).expect("status file");
        serde_json::from_str(&text).unwrap()
    }

    /// Starts the daemon with a NOTIFY_SOCKET of the test's own and waits for READY=1. No system
    /// bus (the D-Bus tests use `daemon_on_bus`).
    pub fn daemon(&self) -> Proc {
        self.daemon_on_bus(&format!("unix:path={}", self.path("no-bus").display()))
    }

    pub fn daemon_on_bus(&self, bus: &str) -> Proc {
        self.start_daemon(self.helper(&["daemon"]), bus)
    }

    pub fn start_daemon(&self, mut cmd: Command, bus: &str) -> Proc {
        let sock_path = self.path(&unique("notify"));
        let sock = UnixDatagram::bind(&sock_path).unwrap();
        fs::set_permissions(&sock_path, fs::Permissions::from_mode(0o777)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let child = cmd
            .env("NOTIFY_SOCKET", &sock_path)
            .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
            .stderr(fs::File::create(self.path(&unique("daemon-log"))).unwrap())
            .spawn()
            .unwrap();
        let proc = Proc(child);
        let mut buf = [0u8; 512];
        // A signal to this test process (another test's child exiting) interrupts the wait; only
        // the deadline ends it.
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let n = loop {
            match sock.recv(&mut buf) {
                Err(e)
                    if e.kind() == std::io::ErrorKind::Interrupted
                        && std::time::Instant::now() < deadline => {}
                r => break r.expect("daemon sent no sd_notify message within 15 s"),
            }
        };
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(msg.contains("READY=1"), "unexpected notify message {msg:?}");
        let _ = fs::remove_file(&sock_path);
        proc
    }
}
