//! `gen`: man pages (clap_mangen) and shell completions (clap_complete) into the target dir.
//!
//! Output: `<out>/man/ocsb.1.gz`, one `ocsb-<sub>[-<subsub>].1.gz` per visible subcommand,
//! `ocsb-netlock-helper.8.gz` and its `ocsb-netlock-helper-<sub>.8.gz`; `<out>/completions/{ocsb.bash,_ocsb,ocsb.fish}`. Both
//! directories are emptied first, so a removed subcommand leaves no stale page for the package
//! globs to pick up.

use std::fs;
use std::path::Path;
use std::process::Command as Process;

use clap_complete::Shell;

use crate::clis;
use crate::error::{Error, Result, io};

pub fn run(out: &Path) -> Result<()> {
    let man = out.join("man");
    let comp = out.join("completions");
    for dir in [&man, &comp] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| io("cannot empty", dir, e))?;
        }
        fs::create_dir_all(dir).map_err(|e| io("cannot create", dir, e))?;
    }

    let mut ocsb = clis::ocsb();
    ocsb.build();
    let mut pages = Vec::new();
    man_pages(&ocsb, "1", &mut pages)?;
    let mut helper = clis::netlock_helper();
    helper.build();
    // Section 8: an administrator's program. Its page names one page per subcommand, so those
    // exist too.
    man_pages(&helper, "8", &mut pages)?;
    for (name, text) in &pages {
        let path = man.join(name);
        fs::write(&path, text).map_err(|e| io("cannot write", &path, e))?;
        gzip(&path)?;
    }

    for (shell, file) in [(Shell::Bash, "ocsb.bash"), (Shell::Zsh, "_ocsb"), (Shell::Fish, "ocsb.fish")] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut clis::ocsb(), "ocsb", &mut buf);
        let path = comp.join(file);
        fs::write(&path, buf).map_err(|e| io("cannot write", &path, e))?;
    }
    println!("{} man pages in {}, completions in {}", pages.len(), man.display(), comp.display());
    Ok(())
}

/// This command's page and one per visible subcommand, recursively; clap's `help` is skipped.
fn man_pages(cmd: &clap::Command, section: &str, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    out.push((format!("{name}.{section}"), render(cmd, section)?));
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        man_pages(sub, section, out)?;
    }
    Ok(())
}

fn render(cmd: &clap::Command, section: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section(section)
        .source(format!("ocsb {}", env!("CARGO_PKG_VERSION")))
        .render(&mut buf)
        .map_err(|e| Error(format!("rendering the man page of {}: {e}", cmd.get_name())))?;
    Ok(buf)
}

/// `gzip -9n`: maximum compression and no name or timestamp, so the output is reproducible.
fn gzip(path: &Path) -> Result<()> {
    let status = Process::new("gzip")
        .args(["-9", "-n", "-f"])
        .arg(path)
        .status()
        .map_err(|e| Error(format!("cannot run gzip (install the gzip package): {e}")))?;
    if !status.success() {
        return Err(Error(format!("gzip {} failed: {status}", path.display())));
    }
    Ok(())
}
