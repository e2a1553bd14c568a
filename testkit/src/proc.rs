//! Child processes of a test: stopped (SIGTERM, then SIGKILL after 5 s) when the handle drops,
//! so a failing assertion leaves nothing running; and polling for what a process creates.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// A child stopped when dropped: SIGTERM first (a clean stop), SIGKILL if it is still there
/// after 5 s, then reaped.
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.0.id() as i32)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` every 50 ms until it returns true or `timeout` passes; the last answer.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Waits until `path` exists (a socket a daemon creates); fails the test after `within`.
pub fn wait_for_path(path: &Path, what: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what} did not create {} within {within:?}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
