//! `OCSB_EGRESS_BUILD`: a fingerprint of the sources the filter is built from (the Rust files of
//! this crate and the policy crate, the package defaults compiled into it, both manifests and
//! the lock file). The filter reports it on its control socket and the launcher
//! starts only a filter program whose fingerprint is its own: a stale `ocsb-egress` left beside
//! a rebuilt `ocsb` would otherwise judge requests by old code, silently. A hash of the contents,
//! not a time, so that two builds of one tree agree (reproducible packages).

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            // Sources only: an editor's backup beside them changes no build.
            out.push(path);
        }
    }
}

fn main() {
    let inputs = [
        "src",
        "../policy/src",
        "defaults.conf",
        "Cargo.toml",
        "../policy/Cargo.toml",
        "../Cargo.toml",
        "../Cargo.lock",
    ]
    .map(Path::new);
    let mut all = Vec::new();
    for input in inputs {
        println!("cargo:rerun-if-changed={}", input.display());
        if input.is_dir() {
            files(input, &mut all);
        } else if input.exists() {
            all.push(input.to_path_buf());
        }
    }
    all.sort();
    // FNV-1a, 64 bits: stable across compilers, and no dependency for a build script.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for path in &all {
        let name = path.to_string_lossy().into_owned().into_bytes();
        for b in name.iter().chain(&[0]).chain(&std::fs::read(path).unwrap_or_default()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    println!(
        "cargo:rustc-env=OCSB_EGRESS_BUILD={}-{h:016x}",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
}
