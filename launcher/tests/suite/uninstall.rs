//! `packaging/uninstall.sh` removes exactly what the installers put: stage a real install into a
//! temp DESTDIR (`make install`, which runs `packaging/install.sh`), add a file that belongs to
//! someone else, uninstall, and compare. Needs root (the shim is chowned to the netlock group),
//! `make`, the group `opencode-sandbox`, and the netlock binaries built beside `ocsb`
//! (`cargo build -p ocsb-netlock-helper`, same target dir).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const OCSB: &str = env!("CARGO_BIN_EXE_ocsb");
const PREFIX: &str = "/usr/local";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn built() -> PathBuf {
    Path::new(OCSB).parent().unwrap().to_path_buf()
}

fn preflight() {
    assert!(nix::unistd::geteuid().is_root(), "the uninstall test chowns the staged shim: run it as root");
    assert!(
        Command::new("sh").args(["-c", "command -v make"]).output().unwrap().status.success(),
        "`make` is missing: install the Debian package make"
    );
    assert!(
        nix::unistd::Group::from_name("opencode-sandbox").unwrap().is_some(),
        "group opencode-sandbox is missing: `groupadd --system opencode-sandbox` (tests/install-deps.sh creates it)"
    );
    for b in ["ocsb-netlock-exec", "ocsb-netlock-helper"] {
        assert!(
            built().join(b).exists(),
            "{b} is not built beside {OCSB}: run `cargo build -p ocsb-netlock-helper` (same target dir)"
        );
    }
}

fn run(c: &mut Command) -> Output {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{c:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Every file and symlink under `root`, relative to it.
fn files(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out
}

fn uninstall(dest: &Path) -> Output {
    run(Command::new("sh")
        .arg(repo().join("packaging/uninstall.sh"))
        .env("DESTDIR", dest)
        .env("PREFIX", PREFIX)
        .current_dir("/"))
}

#[test]
fn uninstall_removes_exactly_what_install_put() {
    preflight();
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("stage");
    // The man pages `make` generates beside the binaries.
    run(Command::new(built().join("ocsb-xtask")).arg("gen").arg("--out").arg(built()));
    // What `make install` does, without building: no cargo on PATH, the binaries already built.
    run(Command::new("make")
        .arg("-C")
        .arg(repo())
        .arg("install")
        .arg(format!("DESTDIR={}", dest.display()))
        .arg(format!("PREFIX={PREFIX}"))
        .arg("CARGO=/nonexistent/cargo")
        .arg(format!("RELEASE={}", built().display())));
    let installed = files(&dest);
    for must in [
        "usr/local/bin/ocsb",
        "usr/local/libexec/ocsb/ocsb-netlock-exec",
        "usr/local/libexec/ocsb/ocsb-netlock-helper",
        "etc/ocsb/netlock.toml",
    ] {
        assert!(installed.contains(must), "install did not put {must}: {installed:#?}");
    }
    // Someone else's file in the same directories must survive, and so must an admin's edits.
    fs::write(dest.join("usr/local/bin/other-tool"), "#!/bin/sh\n").unwrap();
    let conf = dest.join("etc/ocsb/netlock.toml");
    let mut edited = fs::read_to_string(&conf).unwrap();
    edited.push_str("# edited by the admin\n");
    fs::write(&conf, edited).unwrap();

    let o = uninstall(&dest);
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(said.contains("kept") && said.contains("etc/ocsb/netlock.toml"), "{said}");

    let left = files(&dest);
    let expected: BTreeSet<String> =
        ["etc/ocsb/netlock.toml", "usr/local/bin/other-tool"].map(String::from).into();
    assert_eq!(left, expected, "installed: {installed:#?}");
    assert!(!dest.join("usr/local/libexec/ocsb").exists(), "the empty libexec/ocsb directory is left");
    assert!(!dest.join("usr/local/share/doc/ocsb").exists(), "the empty share/doc/ocsb directory is left");

    // A second run finds nothing to do and still succeeds.
    uninstall(&dest);
    assert_eq!(files(&dest), expected);
}

#[test]
fn uninstall_refuses_without_root_or_destdir() {
    let o = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "sh"])
        .arg(repo().join("packaging/uninstall.sh"))
        .env_remove("DESTDIR")
        .current_dir("/")
        .output()
        .expect("setpriv (util-linux) is missing");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("run as root"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
