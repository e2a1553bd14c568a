//! What the policy needs of the sandbox's user and its limits: who a container with a host
//! directory runs as, and what no container may exceed.

use std::collections::BTreeMap;

use nix::sys::resource::{Resource, getrlimit};
use ocsb_policy::docker::limits::{FALLBACK_MEMORY, Limits, ULIMIT_NAMES};

/// The user the sandbox runs as (the launcher's real ids), and the primary group of that user
/// in the user database when the launcher runs with another (a setgid helper's group).
pub fn ids() -> (u32, u32, Vec<u32>) {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid().as_raw();
    let primary = nix::unistd::User::from_uid(uid).ok().flatten().map(|u| u.gid.as_raw());
    (uid.as_raw(), gid, primary.filter(|g| *g != gid).into_iter().collect())
}

/// The sandbox's own limits: half the host's memory, its `/dev/shm`, its process limit, no
/// core dumps, and for every other rlimit the hard limit the sandbox inherits from the user.
pub fn limits() -> Limits {
    let own = ocsb_sandbox::Limits::default();
    let mut rlimits = BTreeMap::new();
    for name in ULIMIT_NAMES {
        let max = match *name {
            // The sandbox sets these itself.
            "nproc" => own.nproc,
            "core" => 0,
            n => resource(n).and_then(|r| getrlimit(r).ok()).map_or(0, |(_, hard)| hard),
        };
        // RLIM_INFINITY is u64::MAX on Linux.
        rlimits.insert(name.to_string(), max);
    }
    Limits {
        memory: half_the_memory().unwrap_or(FALLBACK_MEMORY),
        shm: i64::try_from(own.shm_bytes).unwrap_or(i64::MAX),
        rlimits,
    }
}

fn resource(name: &str) -> Option<Resource> {
    Some(match name {
        "cpu" => Resource::RLIMIT_CPU,
        "data" => Resource::RLIMIT_DATA,
        "fsize" => Resource::RLIMIT_FSIZE,
        "locks" => Resource::RLIMIT_LOCKS,
        "memlock" => Resource::RLIMIT_MEMLOCK,
        "msgqueue" => Resource::RLIMIT_MSGQUEUE,
        "nice" => Resource::RLIMIT_NICE,
        "nofile" => Resource::RLIMIT_NOFILE,
        "rss" => Resource::RLIMIT_RSS,
        "rtprio" => Resource::RLIMIT_RTPRIO,
        "rttime" => Resource::RLIMIT_RTTIME,
        "sigpending" => Resource::RLIMIT_SIGPENDING,
        "stack" => Resource::RLIMIT_STACK,
        _ => return None,
    })
}

/// Half the host's memory (`MemTotal`): a container may not take more, so the user's own work
/// keeps the other half. `None` when `/proc/meminfo` cannot be read.
fn half_the_memory() -> Option<i64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: i64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    // Whole MiB, so that the limit reads as Docker's flags do.
    Some((kib * 1024 / 2) >> 20 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandboxs_limits_are_read() {
        let l = limits();
        assert!(l.memory >= 1 << 20 && l.memory % (1 << 20) == 0, "{}", l.memory);
        assert_eq!(l.rlimits["core"], 0);
        assert_eq!(l.rlimits["nproc"], ocsb_sandbox::Limits::default().nproc);
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(l.rlimits["nofile"], hard);
        assert_eq!(l.rlimits.len(), ULIMIT_NAMES.len());
        let (uid, gid, _) = ids();
        assert_eq!((uid, gid), (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()));
    }
}
