//! Network namespaces for the tests (the NETWORK RULE: no test packet leaves a namespace that the
//! test created, except on the host's loopback).
//!
//! Topology: `world` holds the origin servers on documentation addresses and the DNS server;
//! `filter` runs the proxy (and its clients, on its loopback), with a default route to `world`
//! through a veth pair. Neither namespace has any other way out.

use std::fs::File;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub fn sh(cmd: &[&str]) {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (install iproute2)"));
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn require_root() {
    assert!(nix::unistd::geteuid().is_root(), "these tests create network namespaces and must run as root");
    assert!(
        Command::new("ip").arg("-V").stdout(Stdio::null()).status().is_ok_and(|s| s.success()),
        "`ip` is missing: apt-get install iproute2"
    );
}

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Self {
        let name = format!("ocsbeg-{tag}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        sh(&["ip", "netns", "add", &name]);
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Self { name }
    }
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/var/run/netns/{}", self.name))
    }
    /// Run `f` on a new thread that has entered this namespace (network namespaces are per
    /// thread, so the rest of the test process stays where it is).
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = self.path();
        std::thread::spawn(move || {
            let fd = File::open(&path).expect("open netns");
            nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
    }
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.spawn(f).join().expect("thread in namespace panicked")
    }
    /// A command that runs inside the namespace (`ip netns exec` also bind-mounts
    /// /etc/netns/<name>/resolv.conf over /etc/resolv.conf, which points at the world's DNS).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.name));
    }
}

pub const FILTER_ADDR: &str = "192.0.2.1";
pub const WORLD_ADDRS: [&str; 4] = ["192.0.2.2", "192.0.2.10", "198.51.100.7", "203.0.113.9"];
pub const DNS_ADDR: &str = "192.0.2.53";

/// The two namespaces joined by a veth pair.
pub struct Topology {
    pub world: Netns,
    pub filter: Netns,
}

impl Topology {
    pub fn new() -> Self {
        require_root();
        let world = Netns::new("w");
        let filter = Netns::new("f");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let (vf, vw) = (
            format!("oeF{}x{n}", std::process::id() % 10000),
            format!("oeW{}x{n}", std::process::id() % 10000),
        );
        sh(&[
            "ip",
            "link",
            "add",
            &vf,
            "netns",
            &filter.name,
            "type",
            "veth",
            "peer",
            "name",
            &vw,
            "netns",
            &world.name,
        ]);
        sh(&["ip", "-n", &filter.name, "addr", "add", &format!("{FILTER_ADDR}/24"), "dev", &vf]);
        sh(&["ip", "-n", &filter.name, "link", "set", &vf, "up"]);
        sh(&["ip", "-n", &world.name, "link", "set", &vw, "up"]);
        for a in WORLD_ADDRS.iter().chain([DNS_ADDR].iter()) {
            let prefix = if a.starts_with("192.0.2.") { 24 } else { 32 };
            sh(&["ip", "-n", &world.name, "addr", "add", &format!("{a}/{prefix}"), "dev", &vw]);
        }
        sh(&["ip", "-n", &filter.name, "route", "add", "default", "via", "192.0.2.2"]);
        sh(&["ip", "-n", &world.name, "route", "add", "default", "dev", &vw]);
        // The filter namespace resolves through the world's DNS server only.
        let etc = format!("/etc/netns/{}", filter.name);
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            format!("{etc}/resolv.conf"),
            format!("nameserver {DNS_ADDR}\noptions timeout:2 attempts:1\n"),
        )
        .unwrap();
        Self { world, filter }
    }
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
