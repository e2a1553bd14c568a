//! Opening the web UI in the user's browser. This runs in the launcher, outside the sandbox
//! (inside, `xdg-open` is masked and there is no display). No display is not an error.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// Try to open `url` with `xdg-open` from `PATH`; returns a line for the user saying what
/// happened.
pub fn open(url: &str) -> String {
    let has_display =
        ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
    open_with(url, has_display, OsStr::new("xdg-open"))
}

/// `open` with its inputs explicit. The opener is not waited for (a browser may keep running);
/// a thread reaps it.
fn open_with(url: &str, has_display: bool, opener: &OsStr) -> String {
    if !has_display {
        return format!("no display: open {url} in your browser");
    }
    match Command::new(opener)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            format!("opening {url} in your browser")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("{} is not installed: open {url} in your browser", opener.to_string_lossy())
        }
        Err(e) => format!("could not start {}: {e}: open {url} in your browser", opener.to_string_lossy()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn no_display_and_missing_opener_are_not_errors() {
        let d = tempfile::tempdir().unwrap();
        let opener = d.path().join("xdg-open");
        let out = d.path().join("opened");
        // Written aside and renamed: the test waits for the file to exist, and `>` would make it
        // exist before `echo` filled it.
        std::fs::write(
            &opener,
            format!("#!/bin/sh\necho \"$@\" > {0}.tmp && mv {0}.tmp {0}\n", out.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();

        let line = open_with("http://127.0.0.1:4196/", false, opener.as_os_str());
        assert_eq!(line, "no display: open http://127.0.0.1:4196/ in your browser");
        assert!(!out.exists(), "nothing is started without a display");

        let missing = d.path().join("nope");
        let line = open_with("http://127.0.0.1:4196/", true, missing.as_os_str());
        assert!(
            line.ends_with("nope is not installed: open http://127.0.0.1:4196/ in your browser"),
            "{line}"
        );

        // Another test thread may fork while the script's write descriptor is still open, and
        // its child holds that descriptor until it execs: exec then fails with "Text file busy"
        // for a moment. That is the test's race, not the opener's.
        let mut line = String::new();
        for _ in 0..100 {
            line = open_with("http://127.0.0.1:4196/", true, opener.as_os_str());
            if !line.contains("busy") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(line, "opening http://127.0.0.1:4196/ in your browser");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !out.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "http://127.0.0.1:4196/\n");
    }
}
