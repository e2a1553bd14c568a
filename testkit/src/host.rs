//! The machine a host test needs: root, the tools it runs (each with the Debian package that
//! brings it), the ordinary test user `ocsb-test` (uid 1990, as tests/install-deps.sh creates it)
//! and the netlock group `opencode-sandbox`.

use std::path::PathBuf;
use std::process::Command;

/// The ordinary user every sandbox and lock test runs as.
pub const TEST_USER: &str = "ocsb-test";
pub const TEST_UID: u32 = 1990;
/// The group the netlock locks (a system group).
pub const NETLOCK_GROUP: &str = "opencode-sandbox";

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Fails the test unless it runs as root; `why` says what needs it.
pub fn require_root(why: &str) {
    assert!(is_root(), "{why}: run the test as root (CI does; `cargo test --features host-tests` as root)");
}

/// The path of `tool` on PATH; fails the test naming `package` if there is none.
pub fn require(tool: &str, package: &str) -> PathBuf {
    let out = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().expect("sh");
    assert!(out.status.success(), "`{tool}` is missing: install {package}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Each `(tool, Debian package)` must be on PATH.
pub fn require_all(tools: &[(&str, &str)]) {
    for (tool, package) in tools {
        require(tool, &format!("the Debian package {package}"));
    }
}

/// The test user, created as tests/install-deps.sh does if it is missing (root only); fails if
/// the name or the uid belongs to someone else.
pub fn test_user() -> nix::unistd::User {
    if nix::unistd::User::from_name(TEST_USER).ok().flatten().is_none() && is_root() {
        let uid = TEST_UID.to_string();
        let _ = Command::new("useradd")
            .args(["--create-home", "--uid", &uid, "--shell", "/bin/sh", TEST_USER])
            .status();
    }
    let user = nix::unistd::User::from_name(TEST_USER).ok().flatten().unwrap_or_else(|| {
        panic!(
            "user {TEST_USER} (uid {TEST_UID}) is missing: `useradd --create-home --uid {TEST_UID} {TEST_USER}` \
             (tests/install-deps.sh creates it)"
        )
    });
    assert_eq!(user.uid.as_raw(), TEST_UID, "user {TEST_USER} must have uid {TEST_UID}");
    user
}

/// `setpriv …`: the words that run the rest of a command line as the test user with its own gid
/// and no supplementary groups (element 0 is the program).
pub fn as_test_user() -> Vec<String> {
    let uid = TEST_UID.to_string();
    ["setpriv", "--reuid", &uid, "--regid", &uid, "--clear-groups", "--"].map(String::from).to_vec()
}

/// The gid of a group; fails naming the command that creates it.
pub fn group_gid(name: &str) -> u32 {
    nix::unistd::Group::from_name(name)
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!("group {name} is missing: `groupadd --system {name}` (tests/install-deps.sh creates it)")
        })
        .gid
        .as_raw()
}

/// The gid of the netlock group.
pub fn netlock_gid() -> u32 {
    group_gid(NETLOCK_GROUP)
}

/// Runs a shell command (as the test process, where it is); fails the test if it fails.
pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "`{cmd}` failed");
}
