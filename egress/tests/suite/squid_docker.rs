//! The squid backend against a real Docker engine: image assembled from the host's squid and
//! imported (with progress), container created with host network, reload through
//! `squid -k parse` + `-k reconfigure`, logs, status, down.
//!
//! squid runs in the HOST network namespace here (host network), so this test sends it only
//! loopback traffic: denials decided before any DNS lookup, and a `connect` rule to a loopback
//! origin. Its DNS server is set to 127.0.0.1 so even a stray lookup stays on loopback.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::client;
use ocsb_egress::squid::ImageSource;
use ocsb_egress::{Backend, Instance, SquidOverrides};
use ocsb_egress::{GatewaySetting, UpAction};

fn require_docker() {
    let ok = std::process::Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || std::path::Path::new("/var/run/docker.sock").exists(),
        "Docker is not answering: start dockerd (apt-get install docker.io; `dockerd &` or `systemctl start docker`)"
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if let Err(e) = rt.block_on(ocsb_egress::squid::connect()) {
        panic!("start dockerd: {e}");
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn squid_container_lifecycle() {
    require_docker();
    assert!(std::path::Path::new("/usr/sbin/squid").exists(), "squid is missing: apt-get install squid");
    // A loopback origin in the host namespace (loopback is allowed by the network rule).
    let origin = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_port = origin.local_addr().unwrap().port();
    let seen: crate::support::origin::SharedSeen = Default::default();
    drop(origin);
    crate::support::origin::serve_all(vec![SocketAddr::from(([127, 0, 0, 1], origin_port))], seen.clone());

    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join(".opencode-sandbox")).unwrap();
    let rules = format!("block .example.com\nconnect 127.0.0.1:{origin_port}\n");
    std::fs::write(project.join(".opencode-sandbox/egress.conf"), &rules).unwrap();
    let port = free_port();
    let inst = Instance {
        name: format!("test-{}", std::process::id()),
        backend: Backend::Squid,
        state_dir: tmp.path().join("state"),
        user_config_dir: tmp.path().join("uc"),
        project_dir: project.clone(),
        port,
        docker_gw: GatewaySetting::Disabled,
        serve_command: vec![],
        image_source: ImageSource::HostSquid,
        squid_overrides: SquidOverrides {
            dns_nameservers: vec!["127.0.0.1".parse().unwrap()],
            hosts_file: None,
        },
    };
    let _ = ocsb_egress::down(&inst);
    // Remove the container however the test ends, so a failure leaves nothing running.
    struct Down<'a>(&'a Instance);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = ocsb_egress::down(self.0);
        }
    }
    let _down = Down(&inst);

    // Re-import the image when it is ours (shows the progress path); leave foreign images alone.
    let had_image = std::process::Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{index .Config.Labels \"dev.opencode-sandbox.image-recipe\"}}",
            "opencode-sandbox-egress:latest",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if had_image.starts_with("host-squid") {
        let _ = std::process::Command::new("docker").args(["rmi", "opencode-sandbox-egress:latest"]).output();
    }

    let messages = Arc::new(Mutex::new(Vec::<String>::new()));
    let m = messages.clone();
    let progress: ocsb_egress::squid::Progress =
        Arc::new(move |s: &str| m.lock().unwrap().push(s.to_string()));
    let t0 = Instant::now();
    let r = ocsb_egress::up(&inst, &inst.load_policy().unwrap(), progress.clone())
        .unwrap_or_else(|e| panic!("egress up (squid): {e}"));
    eprintln!("squid up took {:?}", t0.elapsed());
    assert_eq!(r.action, UpAction::Started);
    let msgs = messages.lock().unwrap().join("\n");
    if had_image.is_empty() || had_image.starts_with("host-squid") {
        assert!(msgs.contains("importing") && msgs.contains("sent"), "no import progress shown:\n{msgs}");
    }
    let proxy: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));

    let st = ocsb_egress::status(&inst).unwrap();
    assert!(st.running, "{st:?}");
    assert_eq!(st.config, "current", "{st:?}");
    assert_eq!(st.health.as_deref(), Some("healthy"));

    // squid answers hosts-file names from the host's own `/etc/hosts` (bound read-only, so a
    // reload reads the file as it is now): the container's file is the host's.
    let name = ocsb_egress::squid::container_name(&inst.name);
    let archive =
        std::process::Command::new("docker").args(["cp", &format!("{name}:/etc/hosts"), "-"]).output();
    let archive = archive.unwrap();
    assert!(archive.status.success(), "docker cp: {}", String::from_utf8_lossy(&archive.stderr));
    let mut tar = tar::Archive::new(archive.stdout.as_slice());
    let mut entry = tar.entries().unwrap().next().expect("docker cp gave an empty archive").unwrap();
    let mut seen = String::new();
    std::io::Read::read_to_string(&mut entry, &mut seen).unwrap();
    assert_eq!(seen, std::fs::read_to_string("/etc/hosts").unwrap(), "the container's /etc/hosts");
    let mounts = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{range .Mounts}}{{.Source}}:{{.Destination}}:{{.RW}} {{end}}", &name])
        .output()
        .unwrap();
    let mounts = String::from_utf8_lossy(&mounts.stdout);
    assert!(mounts.split_whitespace().any(|m| m == "/etc/hosts:/etc/hosts:false"), "{mounts}");

    let denied = client::connect(proxy, "www.example.com:443").0.unwrap();
    assert_eq!(denied.status, 403);
    let get = client::get(proxy, "http://www.example.com/", "www.example.com").unwrap();
    assert_eq!(get.status, 403);
    assert!(get.header("x-squid-error").is_some_and(|v| v.starts_with("ERR_ACCESS_DENIED")), "{get:?}");
    let (first, inner) = client::connect(proxy, &format!("127.0.0.1:{origin_port}"));
    assert_eq!(first.unwrap().status, 200);
    assert_eq!(inner.unwrap().status, 200);

    // Reload: a new rule applies without a restart.
    std::fs::write(project.join(".opencode-sandbox/egress.conf"), format!("{rules}block .example.org\n"))
        .unwrap();
    assert_eq!(ocsb_egress::status(&inst).unwrap().config, "stale");
    let id_before = ocsb_egress::status(&inst).unwrap().process;
    let r = ocsb_egress::up(&inst, &inst.load_policy().unwrap(), progress.clone()).unwrap();
    assert_eq!(r.action, UpAction::Reloaded);
    let t = Instant::now();
    loop {
        // `squid -k reconfigure` closes and reopens its listening socket: a refused connection
        // in that window means "not yet", not a failure.
        if std::net::TcpStream::connect_timeout(&proxy, Duration::from_millis(500)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(2), "squid did not accept again after the reload");
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let s = client::connect(proxy, "www.example.org:443").0.map(|r| r.status);
        if s == Some(403) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(2), "reload did not apply: {s:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = ocsb_egress::status(&inst).unwrap();
    assert_eq!(st.config, "current");
    assert_eq!(st.process, id_before, "reload restarted the container");

    // Logs (container stdout) in the shared format, with the deciding rules.
    let mut out = Vec::new();
    ocsb_egress::logs(&inst, &ocsb_egress::LogsOptions { json: true, ..Default::default() }, &mut out)
        .unwrap();
    let rules_seen: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["rule"].as_str().unwrap().to_string())
        .collect();
    for want in ["block:project:1", "connect:project:2", "block:project:3"] {
        assert!(rules_seen.iter().any(|r| r == want), "{want} not in the logs: {rules_seen:?}");
    }

    // `squid -k parse` output with ERROR/WARNING fails validation even with exit code 0.
    let squid_dir = inst.paths().squid_dir();
    let good = std::fs::read_to_string(squid_dir.join("squid.conf")).unwrap();
    std::fs::write(
        squid_dir.join("broken.conf"),
        format!("{good}\nacl bad dstdom_regex -n -i ^[a-\nhttp_access deny bad\n"),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let name = ocsb_egress::squid::container_name(&inst.name);
    let verdict = rt.block_on(async {
        let d = ocsb_egress::squid::connect().await.unwrap();
        let (code, out) = ocsb_egress::squid::container::exec(
            &d,
            &name,
            &["-k", "parse", "-f", "/etc/opencode-sandbox-egress/broken.conf"],
        )
        .await
        .unwrap();
        ocsb_egress::squid::container::parse_ok(code, &out)
    });
    let err = verdict.expect_err("a config with an invalid regex must fail validation").to_string();
    assert!(err.contains("ERROR") || err.contains("WARNING"), "{err}");

    assert!(ocsb_egress::down(&inst).unwrap());
    assert!(!ocsb_egress::status(&inst).unwrap().running);
    assert!(!ocsb_egress::down(&inst).unwrap());
}

#[test]
fn squid_backend_without_docker_says_so() {
    // A socket path where no engine listens: the error must name Docker and the way out.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("docker.sock");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err =
        rt.block_on(ocsb_egress::squid::container::connect_with(Some(&sock))).expect_err("no engine there");
    let msg = err.to_string();
    assert!(msg.contains("Docker") && msg.contains("OCSB_EGRESS_BACKEND=builtin"), "{msg}");
}
