//! A container's resources (`HostConfig` memory, processes, CPU and I/O weight, rlimits):
//! capped, not passed. A container runs outside the sandbox's own limits, in the daemon's
//! cgroup; without caps one could take the host's memory or processes from the user's other
//! work, pin memory, or raise a limit the sandbox lives under (`--ulimit memlock=-1`,
//! realtime priority).
//!
//! The caps: a memory limit and a process limit on every container (set when the client sets
//! none), `/dev/shm` and rlimits no larger than the sandbox's own, no realtime CPU time, no
//! weight above Docker's default, and no way to keep the kernel from killing a container at
//! its memory limit.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::create::unknown;
use super::{Refusal, Verdict};

/// The most processes a container may have: set when the client sets none, refused above it.
pub const MAX_PIDS: i64 = 4096;

/// A container's memory cap when the launcher could not read the host's memory: 2 GiB, what a
/// build or a test database needs and a small machine still has.
pub const FALLBACK_MEMORY: i64 = 2 << 30;

/// The sandbox's own `/dev/shm` size when the launcher gives none.
pub const FALLBACK_SHM: i64 = 1 << 30;

/// Docker's default CPU weight (`--cpu-shares`): above it a container is served ahead of the
/// host's own services when the CPU is busy.
pub const MAX_CPU_SHARES: i64 = 1024;

/// Docker's default block I/O weight (`--blkio-weight`), for the same reason.
pub const MAX_BLKIO_WEIGHT: i64 = 500;

/// What a container may have at most: the sandbox's own limits, from the launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of memory: the limit a container gets when its client sets none (or 0, Docker's
    /// "unlimited"), and the most it may ask for. The launcher sets half the host's memory.
    pub memory: i64,
    /// Bytes of `/dev/shm` (`--shm-size`): the sandbox's own.
    pub shm: i64,
    /// The sandbox's hard rlimits by Docker's names (`nofile`, `memlock`, `rtprio`, …);
    /// `u64::MAX` is unlimited. A `--ulimit` of a name not here is refused.
    pub rlimits: BTreeMap<String, u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory: FALLBACK_MEMORY, shm: FALLBACK_SHM, rlimits: BTreeMap::new() }
    }
}

/// The names `--ulimit` takes (Docker's), each an rlimit of the kernel.
pub const ULIMIT_NAMES: &[&str] = &[
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
];

/// `HostConfig` fields passed as the client sent them, each with why it gives nothing of the
/// host: they only restrict the container, or apply only to Windows containers, or act inside
/// the container alone.
pub const FREE: &[&str] = &[
    // Client-side or Windows-only: the daemon on Linux ignores them.
    "ContainerIDFile",
    "ConsoleSize",
    "Isolation",
    "CpuCount",
    "CpuPercent",
    "IOMaximumIOps",
    "IOMaximumBandwidth",
    // Removal when the container ends: nothing of the host.
    "AutoRemove",
    // Names and resolver settings inside the container: its traffic still goes through the
    // filter on its network, which resolves names itself.
    "Dns",
    "DnsOptions",
    "DnsSearch",
    "ExtraHosts",
    // Docker's small init as pid 1 of the container.
    "Init",
    // A read-only root file system and tmpfs mounts (memory of the container, counted in its
    // memory limit) are inside the container only.
    "ReadonlyRootfs",
    "Tmpfs",
    // Limits: they only take from the container.
    "NanoCpus",
    "CpuPeriod",
    "CpuQuota",
    "CpusetCpus",
    "CpusetMems",
    "BlkioDeviceReadBps",
    "BlkioDeviceWriteBps",
    "BlkioDeviceReadIOps",
    "BlkioDeviceWriteIOps",
    "MemorySwappiness",
    "KernelMemory",
    "KernelMemoryTCP",
    // A soft floor under the memory limit: the daemon refuses one above the limit, which the
    // gateway always sets.
    "MemoryReservation",
];

/// `HostConfig` fields checked here.
pub const CHECKED: &[&str] = &[
    "OomScoreAdj",
    "OomKillDisable",
    "PidsLimit",
    "Memory",
    "MemorySwap",
    "ShmSize",
    "CpuShares",
    "CpuRealtimePeriod",
    "CpuRealtimeRuntime",
    "BlkioWeight",
    "BlkioWeightDevice",
    "Ulimits",
];

/// Checks the resource fields of `h` (a container's `HostConfig`) and sets the memory and
/// process limits where the client set none.
pub fn host(h: &mut Map<String, Value>, limits: &Limits) -> Verdict<()> {
    let refuse = |what: String| Refusal::new("resources", what);
    // A negative score makes the kernel's OOM killer take the host's processes first.
    if h.get("OomScoreAdj").and_then(Value::as_i64).is_some_and(|n| n < 0) {
        return Err(refuse(
            "a negative --oom-score-adj makes the host's processes die first when memory runs out".into(),
        )
        .allow("leave --oom-score-adj at 0 or above"));
    }
    // At its limit such a container is not killed: it hangs, holding its memory, and with no
    // limit it takes the host's.
    if h.get("OomKillDisable").is_some_and(super::create::truthy) {
        return Err(refuse(
            "--oom-kill-disable: at its memory limit the container would hang holding its memory instead of being killed"
                .into(),
        )
        .allow("leave --oom-kill-disable out"));
    }

    // A container without a process limit can fork until the host's process table is full.
    match h.get("PidsLimit").and_then(Value::as_i64) {
        Some(n) if n > MAX_PIDS => {
            return Err(refuse(format!("--pids-limit {n}: more than {MAX_PIDS}"))
                .allow(format!("--pids-limit {MAX_PIDS} or less")));
        }
        Some(n) if n > 0 => {}
        _ => {
            h.insert("PidsLimit".into(), Value::from(MAX_PIDS));
        }
    }

    // Docker's 0 (or a negative value) is no limit: the container could take the host's
    // memory. The cap is set instead; more is refused.
    let memory = match int(h, "Memory")? {
        n if n > limits.memory => {
            return Err(refuse(format!(
                "--memory {}: more than a container may have ({})",
                size(n),
                size(limits.memory)
            ))
            .allow(format!("--memory {} or less", size(limits.memory))));
        }
        n if n > 0 => n,
        _ => {
            h.insert("Memory".into(), Value::from(limits.memory));
            limits.memory
        }
    };
    // -1 is unlimited swap: Docker's default instead (as much swap as memory). More than that
    // is refused: swap is the host's disk and memory too.
    match int(h, "MemorySwap")? {
        n if n < 0 => {
            h.insert("MemorySwap".into(), Value::from(0));
        }
        n if n > memory.saturating_mul(2) => {
            return Err(refuse(format!(
                "--memory-swap {}: more than twice the container's memory ({})",
                size(n),
                size(memory)
            ))
            .allow(format!("--memory-swap {} or less", size(memory.saturating_mul(2)))));
        }
        _ => {}
    }
    let shm = int(h, "ShmSize")?;
    if shm > limits.shm {
        return Err(refuse(format!(
            "--shm-size {}: more than the sandbox's own /dev/shm ({})",
            size(shm),
            size(limits.shm)
        ))
        .allow(format!("--shm-size {} or less", size(limits.shm))));
    }
    // Realtime CPU time is served before every ordinary process of the host.
    for (field, flag) in
        [("CpuRealtimeRuntime", "--cpu-rt-runtime"), ("CpuRealtimePeriod", "--cpu-rt-period")]
    {
        if int(h, field)? != 0 {
            return Err(refuse(format!("{flag}: realtime CPU time runs ahead of the host's own processes"))
                .allow(format!("leave {flag} out")));
        }
    }
    let shares = int(h, "CpuShares")?;
    if shares > MAX_CPU_SHARES {
        return Err(refuse(format!(
            "--cpu-shares {shares}: more than Docker's default weight ({MAX_CPU_SHARES}) puts the container ahead of the host's services"
        ))
        .allow(format!("--cpu-shares {MAX_CPU_SHARES} or less")));
    }
    let weights = h.get("BlkioWeightDevice").and_then(Value::as_array).cloned().unwrap_or_default();
    let device_weights = weights.iter().filter_map(|d| d.get("Weight").and_then(Value::as_i64));
    if let Some(w) =
        std::iter::once(int(h, "BlkioWeight")?).chain(device_weights).find(|w| *w > MAX_BLKIO_WEIGHT)
    {
        return Err(refuse(format!(
            "--blkio-weight {w}: more than Docker's default weight ({MAX_BLKIO_WEIGHT}) puts the container ahead of the host's services"
        ))
        .allow(format!("--blkio-weight {MAX_BLKIO_WEIGHT} or less")));
    }
    ulimits(h.get("Ulimits"), limits)
}

/// Each `--ulimit` no higher than the sandbox's own hard limit of that name (a container would
/// otherwise lock memory, raise its realtime priority or open files past what the user may).
fn ulimits(v: Option<&Value>, limits: &Limits) -> Verdict<()> {
    let Some(list) = v.filter(|v| !v.is_null()) else { return Ok(()) };
    let list = list.as_array().ok_or_else(|| Refusal::new("body", "`HostConfig.Ulimits` is not a list"))?;
    for u in list {
        let o = u.as_object().ok_or_else(|| Refusal::new("body", "a ulimit is not an object"))?;
        unknown(o, &["Name", "Soft", "Hard"], "HostConfig.Ulimits[].")?;
        let name = o.get("Name").and_then(Value::as_str).unwrap_or_default().to_ascii_lowercase();
        let Some(&max) = limits.rlimits.get(&name) else {
            return Err(Refusal::new(
                "resources",
                format!("--ulimit {name}: not a limit the gateway serves"),
            )
            .allow(format!("one of {}", ULIMIT_NAMES.join(", "))));
        };
        // Docker's -1 is unlimited.
        let value = |k: &str| o.get(k).and_then(Value::as_i64).map(|n| u64::try_from(n).unwrap_or(u64::MAX));
        for asked in [value("Soft"), value("Hard")].into_iter().flatten() {
            if asked > max {
                let shown = |n: u64| if n == u64::MAX { "unlimited".to_string() } else { n.to_string() };
                return Err(Refusal::new(
                    "resources",
                    format!("--ulimit {name}={}: above the sandbox's own ({})", shown(asked), shown(max)),
                )
                .allow(format!("--ulimit {name}={} or less", shown(max))));
            }
        }
    }
    Ok(())
}

/// An integer field: 0 when absent or null; a value of another type is refused (the daemon
/// would refuse it too, and the gateway must not pass what it did not read).
fn int(h: &Map<String, Value>, field: &str) -> Verdict<i64> {
    match h.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => {
            v.as_i64().ok_or_else(|| Refusal::new("body", format!("`HostConfig.{field}` is not an integer")))
        }
    }
}

/// Bytes as Docker's size flags take them (`8g`, `512m`), exact.
pub fn size(n: i64) -> String {
    match n {
        n if n > 0 && n % (1 << 30) == 0 => format!("{}g", n >> 30),
        n if n > 0 && n % (1 << 20) == 0 => format!("{}m", n >> 20),
        n if n > 0 && n % (1 << 10) == 0 => format!("{}k", n >> 10),
        n => format!("{n}b"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> Limits {
        Limits {
            memory: 8 << 30,
            shm: 1 << 30,
            rlimits: BTreeMap::from([
                ("nofile".to_string(), 524288),
                ("memlock".to_string(), 8 << 20),
                ("rtprio".to_string(), 0),
                ("core".to_string(), 0),
                ("stack".to_string(), u64::MAX),
            ]),
        }
    }

    fn check(h: Value) -> Verdict<Value> {
        let mut h = h;
        host(h.as_object_mut().unwrap(), &limits()).map(|()| h)
    }

    #[test]
    fn memory_and_processes_are_capped_by_default() {
        let h = check(json!({})).unwrap();
        assert_eq!((h["Memory"].as_i64(), h["PidsLimit"].as_i64()), (Some(8 << 30), Some(MAX_PIDS)));
        // Docker's "unlimited" values get the cap; unlimited swap gets Docker's default.
        let h = check(json!({"Memory": 0, "MemorySwap": -1, "PidsLimit": -1})).unwrap();
        assert_eq!(h["Memory"], json!(8i64 << 30));
        assert_eq!(h["MemorySwap"], 0);
        assert_eq!(h["PidsLimit"], MAX_PIDS);
        // What the client asks below the caps is kept.
        let h = check(
            json!({"Memory": 256 << 20, "MemorySwap": 512 << 20, "PidsLimit": 100, "ShmSize": 64 << 20}),
        )
        .unwrap();
        assert_eq!((h["Memory"].as_i64(), h["MemorySwap"].as_i64()), (Some(256 << 20), Some(512 << 20)));
        assert_eq!(h["PidsLimit"], 100);
        let h = check(json!({"Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 4096},
            {"Name": "stack", "Soft": -1, "Hard": -1}], "CpuShares": 512, "BlkioWeight": 300}))
        .unwrap();
        assert_eq!(h["Ulimits"][0]["Name"], "nofile");
    }

    #[test]
    fn each_resource_beyond_the_sandboxs_is_refused_by_its_rule() {
        for (h, text, allow) in [
            (json!({"OomKillDisable": true}), "--oom-kill-disable", "leave --oom-kill-disable out"),
            (json!({"OomScoreAdj": -1}), "--oom-score-adj", "0 or above"),
            (json!({"PidsLimit": 4097}), "--pids-limit 4097", "--pids-limit 4096 or less"),
            (
                json!({"Memory": 16i64 << 30}),
                "--memory 16g: more than a container may have (8g)",
                "--memory 8g",
            ),
            (json!({"Memory": 1 << 30, "MemorySwap": 3i64 << 30}), "--memory-swap 3g", "--memory-swap 2g"),
            (json!({"MemorySwap": 17i64 << 30}), "--memory-swap 17g", "16g"),
            (
                json!({"ShmSize": 64i64 << 30}),
                "--shm-size 64g: more than the sandbox's own /dev/shm (1g)",
                "1g",
            ),
            (
                json!({"CpuRealtimeRuntime": 950000}),
                "--cpu-rt-runtime: realtime",
                "leave --cpu-rt-runtime out",
            ),
            (json!({"CpuRealtimePeriod": 1000000}), "--cpu-rt-period", "leave"),
            (json!({"CpuShares": 262144}), "--cpu-shares 262144", "--cpu-shares 1024 or less"),
            (json!({"BlkioWeight": 1000}), "--blkio-weight 1000", "500 or less"),
            (
                json!({"BlkioWeightDevice": [{"Path": "/dev/sda", "Weight": 1000}]}),
                "--blkio-weight 1000",
                "500",
            ),
            (
                json!({"Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}]}),
                "--ulimit memlock=unlimited: above the sandbox's own (8388608)",
                "--ulimit memlock=8388608 or less",
            ),
            (
                json!({"Ulimits": [{"Name": "rtprio", "Soft": 99, "Hard": 99}]}),
                "--ulimit rtprio=99",
                "rtprio=0",
            ),
            (
                json!({"Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 1048576}]}),
                "nofile=1048576",
                "524288",
            ),
            (
                json!({"Ulimits": [{"Name": "core", "Soft": 0, "Hard": -1}]}),
                "--ulimit core=unlimited",
                "core=0",
            ),
            (
                json!({"Ulimits": [{"Name": "nice", "Soft": 0, "Hard": 0}]}),
                "--ulimit nice: not a limit",
                "nofile",
            ),
        ] {
            let r = check(h.clone()).expect_err("refused");
            assert_eq!(r.rule, "resources", "{h}");
            assert!(r.what.contains(text), "{h}: {}", r.what);
            assert!(r.allow.as_deref().is_some_and(|a| a.contains(allow)), "{h}: {:?}", r.allow);
        }
        let r =
            check(json!({"Ulimits": [{"Name": "nofile", "Soft": 1, "Hard": 2, "Extra": 1}]})).unwrap_err();
        assert_eq!(r.rule, "unknown-field");
        assert_eq!(check(json!({"Memory": "lots"})).unwrap_err().rule, "body");
    }

    #[test]
    fn every_field_is_either_free_or_checked() {
        assert!(FREE.iter().all(|f| !CHECKED.contains(f)));
        assert_eq!(size(1 << 30), "1g");
        assert_eq!(size(3 << 20), "3m");
        assert_eq!(size(1000), "1000b");
    }
}
