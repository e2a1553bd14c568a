//! The workspace's `rust-version` must be true. Only one toolchain can be installed on the test
//! machines, so an older compiler cannot be run; what is checked instead: the standard library
//! APIs the code uses (clippy's `incompatible_msrv`, on in `make lint`), the language features
//! that need a newer compiler than the dependencies do (let-chains: 1.88; `File::try_lock`:
//! 1.89), and that no dependency asks for a newer compiler than the workspace says.

#[cfg(test)]
mod tests {
    use std::process::Command;

    fn version(v: &str) -> (u32, u32) {
        let mut it = v.split('.').map(|p| p.parse().unwrap_or(0));
        (it.next().unwrap_or(0), it.next().unwrap_or(0))
    }

    #[test]
    fn rust_version_covers_the_code_and_every_dependency() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let manifest = std::fs::read_to_string(format!("{root}/Cargo.toml")).unwrap();
        let declared = manifest
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = \"")?.strip_suffix('"'))
            .expect("rust-version in [workspace.package]");
        // let-chains (`if let … && …`) and `File::try_lock` are used: 1.89 at the least.
        assert!(version(declared) >= (1, 89), "rust-version {declared} is older than the code needs");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--locked", "--manifest-path"])
            .arg(format!("{root}/Cargo.toml"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let newer: Vec<String> = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let rv = p["rust_version"].as_str()?;
                (version(rv) > version(declared))
                    .then(|| format!("{} {} needs {rv}", p["name"], p["version"]))
            })
            .collect();
        assert!(newer.is_empty(), "rust-version {declared} is older than: {newer:?}");
    }
}
