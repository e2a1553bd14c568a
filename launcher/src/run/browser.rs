//! Opening the web UI in the user's browser. This runs in the launcher, outside the sandbox
//! (inside, `xdg-open` is masked and there is no display). No display is not an error.

use std::process::{Command, Stdio};

/// Try to open `url`; returns a line for the user saying what happened.
pub fn open(url: &str) -> String {
    let has_display =
        ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
    if !has_display {
        return format!("no display: open {url} in your browser");
    }
    match Command::new("xdg-open")
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
        Err(_) => format!("xdg-open is not installed: open {url} in your browser"),
    }
}
