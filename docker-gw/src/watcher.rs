//! A watcher of the launcher, in a process of its own, that stops what the launcher's Docker
//! sessions left running as soon as the launcher is gone, however it went.
//!
//! *Why*: a launcher killed with `SIGKILL` (by the user, the OOM killer) makes no end, and the
//! journal of what its session set running ([`super::ending::Journal`]) is read by the
//! project's next start. Until then, a container of that session keeps running and may plant
//! in the project what the user's own git, run on the host meanwhile, executes. The watcher
//! narrows that window to the moment the daemon takes to stop them: it waits on a pipe whose
//! only writer the launcher holds, which the kernel closes when the launcher exits, then stops
//! what every journal nobody holds lists. The next start still does the same, for a watcher
//! that went with its launcher (a killed process group, session or cgroup, a reboot).
//!
//! It is started before the session's first container is set running, not with the gateway:
//! until then there is nothing of the session's to stop.
//!
//! The watcher is in a process group of its own, so the terminal's signals for the launcher's
//! job (`^C`, `^Z`) do not reach it; its output goes to the project's `docker.log`, so it never
//! touches the terminal.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::Paths;
use crate::error::{Error, Result};

/// The hidden subcommand the watcher runs as.
pub const WATCH: &str = "__docker-watch";

/// How long the watcher waits, after the pipe closed, for the launcher's journals to be let go
/// ([`super::ending::stop_after_exit`]).
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// The watched directories of this launcher, each with the pipe's writing end. Kept until the
/// process exits: dropping one would wake its watcher.
static WATCHED: Mutex<Vec<(PathBuf, std::io::PipeWriter)>> = Mutex::new(Vec::new());

/// Starts the watcher of this launcher for the gateway's directory `dir`, once per process and
/// directory: `program` (the launcher's own) run as `__docker-watch`, writing to what `log`
/// opens.
pub(super) fn ensure(dir: &Path, program: &Path, log: impl FnOnce() -> Option<std::fs::File>) -> Result<()> {
    let mut watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
    if watched.iter().any(|(d, _)| d == dir) {
        return Ok(());
    }
    // Both ends close on exec: no program but the watcher ever holds the reading end, and none
    // but this launcher the writing one, so the watcher's read ends exactly with the launcher.
    let (reader, writer) = std::io::pipe().map_err(|e| Error::io("create a pipe for", dir, e))?;
    let stderr = log().map_or_else(Stdio::null, Stdio::from);
    Command::new(program)
        .arg0("ocsb")
        .arg(WATCH)
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(reader)
        .stdout(Stdio::null())
        .stderr(stderr)
        .current_dir("/")
        .process_group(0)
        .spawn()
        .map_err(|e| Error::io("start the Docker watcher", program, e))?;
    watched.push((dir.to_path_buf(), writer));
    Ok(())
}

/// `ocsb __docker-watch PID DIR`: waits until the launcher `pid` is gone (its pipe on stdin
/// closes), then stops what the journals nobody holds list. `at` is the gateway's files, as
/// the launcher names them from `DIR`.
pub fn main(pid: u32, at: &Paths) -> Result<()> {
    // What the launcher's caller let it inherit (a pipe someone waits on to close, a job
    // server) is not kept for as long as the launcher lives and the stops take.
    ocsb_sandbox::sys::close_range(3, 0).map_err(|e| Error::io("close the descriptors of", "ocsb", e))?;
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    // Nothing is ever written: a read that returns is the end (or the pipe's failure).
    loop {
        match stdin.read(&mut buf) {
            Ok(n) if n > 0 => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    super::ending::stop_after_exit(at, pid, EXIT_WAIT)
}
