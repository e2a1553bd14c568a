//! Network namespaces the tests create. The network rule of the suites: no test sends a packet
//! from the machine's own namespace to a non-loopback address, nor installs nftables rules
//! there; everything that does runs in a [`Netns`]. Dropping one kills every process still in it
//! and deletes it, so a failed test leaves neither namespaces nor servers behind.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Runs `argv`; fails the test with its stderr if it fails.
pub fn run_ok(argv: &[&str]) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e} (install iproute2)"));
    assert!(out.status.success(), "{argv:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A named network namespace (`ip netns add`) with `lo` up. Creating one needs root.
pub struct Netns {
    name: String,
}

impl Netns {
    /// A new namespace named `ocsb-<tag>-<pid>-<n>`.
    pub fn new(tag: &str) -> Netns {
        crate::host::require_root("the test creates network namespaces");
        let name = format!("ocsb-{tag}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst));
        // A leftover of an earlier run with the same pid, if any.
        let _ = Command::new("ip").args(["netns", "del", &name]).stderr(Stdio::null()).status();
        run_ok(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        run_ok(&["ip", "-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file (`/var/run/netns/<name>`).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/var/run/netns/{}", self.name))
    }

    /// `ip netns exec <name>`: the rest of the command line runs in the namespace (`ip` also
    /// bind-mounts `/etc/netns/<name>/resolv.conf` over /etc/resolv.conf when it exists).
    pub fn cmd(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]);
        c
    }

    /// `argv` run in the namespace (not started yet).
    pub fn exec(&self, argv: &[&str]) -> Command {
        let mut c = self.cmd();
        c.args(argv);
        c
    }

    /// Runs a shell script in the namespace; fails the test if it fails.
    pub fn sh(&self, script: &str) {
        let st = self.exec(&["sh", "-c", script]).status().expect("ip netns exec (iproute2)");
        assert!(st.success(), "in {}: `{script}` failed", self.name);
    }

    /// Moves the calling thread (only) into the namespace: what it connects to and starts
    /// afterwards is there. Threads of the test harness are not reused by another test.
    pub fn enter(&self) {
        let f = File::open(self.path()).expect("open netns");
        nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns (needs root)");
    }

    /// Runs `f` on a new thread that has entered the namespace; the rest of the test process
    /// stays where it is.
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

    /// [`Netns::spawn`] and wait for the result.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.spawn(f).join().expect("thread in namespace panicked")
    }

    /// A veth pair: `here` in this namespace, `there` in `other`, both up (no addresses).
    pub fn veth(&self, here: &str, other: &Netns, there: &str) {
        run_ok(&[
            "ip",
            "link",
            "add",
            here,
            "netns",
            &self.name,
            "type",
            "veth",
            "peer",
            "name",
            there,
            "netns",
            &other.name,
        ]);
        run_ok(&["ip", "-n", &self.name, "link", "set", here, "up"]);
        run_ok(&["ip", "-n", &other.name, "link", "set", there, "up"]);
    }

    /// A second namespace for origin servers, joined to this one by a veth pair: `addrs` (/24
    /// documentation addresses) on its side, `.254` of the same /24 on this side. *Why not on
    /// this namespace's own loopback*: the egress filter judges the addresses of the host it
    /// runs on as private, so origins must live on another "host". Dropped with the result.
    pub fn origins(&self, tag: &str, addrs: &[&str]) -> Netns {
        let other = Netns::new(tag);
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let (here, there) = (
            format!("ov{}h{n}", std::process::id() % 100_000),
            format!("ov{}t{n}", std::process::id() % 100_000),
        );
        self.veth(&here, &other, &there);
        let net = addrs.first().and_then(|a| a.rsplit_once('.')).map(|(p, _)| p).unwrap_or("192.0.2");
        run_ok(&["ip", "-n", &self.name, "addr", "add", &format!("{net}.254/24"), "dev", &here]);
        for a in addrs {
            run_ok(&["ip", "-n", &other.name, "addr", "add", &format!("{a}/24"), "dev", &there]);
        }
        other
    }

    /// The processes whose network namespace this is (`ip netns pids`), never this test process.
    pub fn pids(&self) -> Vec<i32> {
        let own = std::process::id() as i32;
        let out = Command::new("ip").args(["netns", "pids", &self.name]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        text.split_whitespace().filter_map(|p| p.parse().ok()).filter(|&p| p != own).collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Kill what still runs there, until nothing is listed: a killed child that its handle
        // has not reaped yet is a zombie, which has left the namespace and is not listed.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.name));
    }
}
