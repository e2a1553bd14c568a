//! The test lab: world + filter namespaces, DNS, origins, a project with rules, and the two
//! filters (builtin through the lifecycle API, squid as the host's binary) inside `filter`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ocsb_egress::GatewaySetting;
use ocsb_egress::squid::ImageSource;
use ocsb_egress::{Backend, Instance, SquidOverrides};

use super::dns::{self, Answer, SharedZone, Zone};
use super::origin::{self, SharedSeen};
use super::topology::{DNS_ADDR, FILTER_ADDR, Topology, ip};

pub const BUILTIN_PORT: u16 = 3128;
pub const SQUID_PORT: u16 = 3129;

pub const RULES: &str = "\
allow jira.example.com internal.corp.test
allow-regex ^[a-z0-9-]+\\.staging\\.example\\.com$
block .example.com
block-regex ^prod-
connect git.example.com:2222 127.0.0.5:6443 192.0.2.10:8080
connect 203.0.113.9:7000
";

/// An origin that accepts and then neither reads, writes nor closes (a tunnel's quiet far end).
pub const SILENT_ORIGIN: &str = "203.0.113.9:7000";

pub struct Lab {
    pub topo: Topology,
    pub zone: SharedZone,
    pub world_seen: SharedSeen,
    pub filter_seen: SharedSeen,
    pub tmp: tempfile::TempDir,
    pub project: PathBuf,
    pub user_config: PathBuf,
    pub squid: Option<Child>,
    pub squid_dir: PathBuf,
    pub builtin_started: bool,
    /// The program that serves, up to its options: this crate's `ocsb-egress serve` unless set
    /// (the benchmark runs `ocsb egress serve`, as users do).
    pub serve_program: Vec<OsString>,
    /// Extra `serve` options (small limits), given before the lifecycle's own arguments.
    pub serve_extra: Vec<OsString>,
    /// squid reads the namespace's `/etc/hosts`, as in production, instead of an empty one.
    pub squid_system_hosts: bool,
}

pub fn zone_map() -> HashMap<String, Answer> {
    let f = |a: &[&str]| Answer::Fixed(a.iter().map(|s| ip(s)).collect());
    HashMap::from([
        ("pub.test.net".into(), f(&["198.51.100.7"])),
        ("www.example.com".into(), f(&["192.0.2.10"])),
        ("www.example.org".into(), f(&["192.0.2.10"])),
        ("jira.example.com".into(), f(&["192.0.2.10"])),
        ("api.staging.example.com".into(), f(&["192.0.2.10"])),
        ("git.example.com".into(), f(&["192.0.2.10"])),
        ("prod-db.test.net".into(), f(&["203.0.113.9"])),
        ("prod-api.test.net".into(), f(&["203.0.113.9"])),
        ("private.test.net".into(), f(&["10.0.0.5"])),
        ("loop.test.net".into(), f(&["127.0.0.2"])),
        ("mixed.test.net".into(), f(&["198.51.100.7", "127.0.0.2"])),
        ("internal.corp.test".into(), f(&["127.0.0.6"])),
        ("rb.test.net".into(), Answer::Alternate(vec![ip("198.51.100.7"), ip("127.0.0.2")])),
        ("rb2.test.net".into(), Answer::Alternate(vec![ip("198.51.100.7"), ip("127.0.0.2")])),
        ("slow.test.net".into(), Answer::Slow(Duration::from_secs(8), vec![ip("198.51.100.7")])),
        // The filter's own (non-loopback) address, and IPv6 forms that embed a private IPv4.
        ("self.test.net".into(), f(&[FILTER_ADDR])),
        ("nat64.test.net".into(), f(&["64:ff9b::a09:909"])),
        ("meta64.test.net".into(), f(&["64:ff9b::a9fe:a9fe"])),
        ("compat.test.net".into(), f(&["::a09:909"])),
        ("sixtofour.test.net".into(), f(&["2002:a09:909::1"])),
        ("sitelocal.test.net".into(), f(&["fec0::1"])),
    ])
}

impl Lab {
    pub fn new(rules: &str) -> Lab {
        let topo = Topology::new();
        let zone: SharedZone = Arc::new(Mutex::new(Zone { names: zone_map(), ..Zone::default() }));
        let z = zone.clone();
        let dns_sock = topo.world.run(|| UdpSocket::bind((DNS_ADDR, 53)).expect("bind dns"));
        std::thread::spawn(move || dns::serve(dns_sock, z));
        let world_seen: SharedSeen = Default::default();
        let ws = world_seen.clone();
        topo.world.run(move || {
            let binds =
                [80u16, 443, 2222, 6443, 8080].iter().map(|p| SocketAddr::new(ip("0.0.0.0"), *p)).collect();
            origin::serve_all(binds, ws)
        });
        topo.world.run(|| {
            let l = std::net::TcpListener::bind(SILENT_ORIGIN).expect("bind the silent origin");
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for s in l.incoming().flatten() {
                    held.push(s);
                }
            });
        });
        let filter_seen: SharedSeen = Default::default();
        let fs = filter_seen.clone();
        topo.filter.run(move || {
            origin::serve_all(
                vec![
                    "127.0.0.6:80".parse().unwrap(),
                    "127.0.0.2:80".parse().unwrap(),
                    "127.0.0.2:443".parse().unwrap(),
                    "127.0.0.5:6443".parse().unwrap(),
                    SocketAddr::new(ip(FILTER_ADDR), 80),
                ],
                fs,
            )
        });
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        let user_config = tmp.path().join("userconf");
        std::fs::create_dir_all(project.join(".opencode-sandbox/local")).unwrap();
        std::fs::create_dir_all(&user_config).unwrap();
        let squid_dir = tmp.path().join("squid");
        std::fs::create_dir_all(&squid_dir).unwrap();
        let lab = Lab {
            topo,
            zone,
            world_seen,
            filter_seen,
            tmp,
            project,
            user_config,
            squid: None,
            squid_dir,
            builtin_started: false,
            serve_program: vec![env!("CARGO_BIN_EXE_ocsb-egress").into(), "serve".into()],
            serve_extra: Vec::new(),
            squid_system_hosts: false,
        };
        lab.write_rules(rules);
        lab
    }

    pub fn write_rules(&self, rules: &str) {
        let p = self.project.join(".opencode-sandbox/egress.conf");
        let tmp = p.with_extension("tmp");
        std::fs::write(&tmp, rules).unwrap();
        std::fs::rename(tmp, p).unwrap();
    }

    pub fn state_dir(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    pub fn instance(&self) -> Instance {
        Instance {
            name: "lab".into(),
            backend: Backend::Builtin,
            state_dir: self.state_dir(),
            user_config_dir: self.user_config.clone(),
            project_dir: self.project.clone(),
            port: BUILTIN_PORT,
            // The filter's veth address stands in for the docker0 gateway: the world namespace
            // is "the network behind it" (192.0.2.0/24) and, on its other addresses, beyond it.
            docker_gw: GatewaySetting::Address(ip(FILTER_ADDR)),
            serve_command: vec![
                "ip".into(),
                "netns".into(),
                "exec".into(),
                OsString::from(self.topo.filter.name()),
            ]
            .into_iter()
            .chain(self.serve_program.iter().cloned())
            .chain(self.serve_extra.iter().cloned())
            .collect(),
            image_source: ImageSource::HostSquid,
            squid_overrides: SquidOverrides::default(),
        }
    }

    pub fn start_builtin(&mut self) {
        let inst = self.instance();
        let policy = inst.load_policy().expect("the lab's rules compile");
        let r = ocsb_egress::up(&inst, &policy, ocsb_egress::lifecycle::stderr_progress())
            .expect("egress up (builtin)");
        assert_eq!(r.action, ocsb_egress::UpAction::Started);
        self.builtin_started = true;
    }

    pub fn builtin_log(&self) -> PathBuf {
        self.state_dir().join("egress/access.log")
    }

    /// The host's squid binary with the rendered config, inside the filter namespace.
    pub fn start_squid(&mut self) {
        assert!(Path::new("/usr/sbin/squid").exists(), "squid is missing: apt-get install squid");
        let policy = self.instance().load_policy().unwrap();
        let hosts = self.squid_dir.join("hosts");
        std::fs::write(&hosts, "").unwrap();
        let ov = SquidOverrides {
            dns_nameservers: vec![ip(DNS_ADDR)],
            hosts_file: (!self.squid_system_hosts).then(|| hosts.to_string_lossy().into()),
        };
        // Rendered inside the filter namespace: its addresses are the ones squid must refuse.
        let dir = self.squid_dir.clone();
        let conf = self.topo.filter.run(move || {
            ocsb_egress::render::squid_conf_host_process(
                &policy,
                &dir,
                vec![
                    SocketAddr::new(ip("127.0.0.1"), SQUID_PORT),
                    SocketAddr::new(ip(FILTER_ADDR), SQUID_PORT),
                ],
                &ov,
            )
            .unwrap()
        });
        let conf_path = self.squid_dir.join("squid.conf");
        std::fs::write(&conf_path, conf).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&self.squid_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        // squid started as root switches to its `proxy` user; run it as that user from the
        // start so it never holds root in the namespace.
        let child = self
            .topo
            .filter
            .exec(&["setpriv"])
            .args(["--reuid=13", "--regid=13", "--clear-groups", "/usr/sbin/squid", "-N", "-n"])
            // A service name of its own: squid names its /dev/shm segments after it, and a
            // leftover `squid-cf__*` of another squid would make this one refuse to start.
            .arg(squid_service())
            .arg("-f")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start squid");
        self.squid = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        let addr: SocketAddr = SocketAddr::new(ip("127.0.0.1"), SQUID_PORT);
        loop {
            let up = self
                .topo
                .filter
                .run(move || std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok());
            if up {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "squid did not start: {}",
                std::fs::read_to_string(self.squid_dir.join("cache.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn squid_log(&self) -> PathBuf {
        self.squid_dir.join("access.log")
    }

    /// Run a client function inside the filter namespace.
    pub fn client<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.topo.filter.run(f)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Ok(err) = std::fs::read_to_string(self.state_dir().join("egress/serve.err"))
            && !err.trim().is_empty()
        {
            eprintln!("serve.err of the builtin filter:\n{err}");
        }
        if self.builtin_started {
            let _ = ocsb_egress::down(&self.instance());
        }
        if let Some(mut c) = self.squid.take() {
            let _ = c.kill();
            let _ = c.wait();
            // SIGKILL leaves squid's shared memory segments behind: remove this service's.
            if let Ok(entries) = std::fs::read_dir("/dev/shm") {
                let prefix = format!("{}-", squid_service());
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&prefix) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }
}

/// squid's service name (`-n`) for this test process: unique, alphanumeric as squid requires.
fn squid_service() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    thread_local!(static MINE: u32 = N.fetch_add(1, Ordering::Relaxed));
    MINE.with(|n| format!("ocsblab{}x{n}", std::process::id()))
}

/// The next access-log line after `skip` lines (diagnostic `#` lines and squid noise skipped).
pub fn wait_log_line_any(
    path: &Path,
    skip: usize,
    timeout: Duration,
) -> Option<(ocsb_policy::egress::LogLine, usize)> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // Readiness probes (connect + close without a request) log as NONE_NONE/000: skip them.
        let lines: Vec<ocsb_policy::egress::LogLine> = text
            .lines()
            .filter_map(ocsb_policy::egress::LogLine::parse)
            .filter(|l| !(l.status == 0 && l.method == "-"))
            .collect();
        if lines.len() > skip {
            return Some((lines[skip].clone(), skip + 1));
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}
