//! A container's configuration (`POST /containers/create`), checked and completed before the
//! daemon sees it. Every field is one the gateway knows: a field it does not know is refused
//! unless it holds its zero value (the Docker CLI sends many fields empty), so a new option of
//! a newer Docker is closed until it is looked at.
//!
//! Completed: the project's label, the project's network (for the default `bridge`),
//! published ports bound to 127.0.0.1 when no address was given, the resource caps
//! ([`super::limits`]) and the user and capabilities ([`super::user`]).

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::{Context, Refusal, Verdict};

/// What the gateway must check with the daemon before forwarding the configuration.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Needs {
    /// Containers the configuration names (`--volumes-from`, `--network container:X`, …):
    /// each must be the project's own.
    pub containers: Vec<String>,
    /// Named volumes it mounts: each must be the project's own, or is made for it (labelled).
    pub volumes: Vec<String>,
    /// Networks it joins besides the project's: each must be the project's own.
    pub networks: Vec<String>,
    /// Hidden host paths inside a bind, with where they appear in the container: the gateway
    /// covers each (an empty read-only file or directory), as the sandbox does.
    pub masks: Vec<(PathBuf, String)>,
    /// Read-only host paths inside a bind, with where they appear: bound again read-only
    /// there, so a container cannot change what the sandbox may not (a hook in `.git/hooks`).
    pub read_only: Vec<(PathBuf, String)>,
    /// Directories inside a bind that the sandbox has bound onto themselves (`.git`, the way to
    /// every protected or hidden path), with where they appear: bound again, writable as they
    /// are, so that no container can rename one. *Why*: the daemon mounts the masks and the
    /// read-only binds above by path when each container starts; a container that moved `.git`
    /// aside would leave the next container's read-only `.git/hooks` bound on a directory of its
    /// making, and the real one writable.
    pub pins: Vec<(PathBuf, String)>,
}

/// Docker's default capabilities: adding one of these changes nothing; any other is a power
/// the default container does not have (SYS_ADMIN mounts, NET_ADMIN, SYS_PTRACE, …).
const DEFAULT_CAPS: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The top-level fields of a configuration the gateway knows, and where they are checked.
const CONFIG_FIELDS: &[&str] = &[
    "Hostname",
    "Domainname",
    "User",
    "AttachStdin",
    "AttachStdout",
    "AttachStderr",
    "ExposedPorts",
    "Tty",
    "OpenStdin",
    "StdinOnce",
    "Env",
    "Cmd",
    "Healthcheck",
    "ArgsEscaped",
    "Image",
    "Volumes",
    "WorkingDir",
    "Entrypoint",
    "NetworkDisabled",
    "MacAddress",
    "OnBuild",
    "Labels",
    "StopSignal",
    "StopTimeout",
    "Shell",
    "HostConfig",
    "NetworkingConfig",
];

/// Checks `body` (the JSON of `POST /containers/create`) and completes it in place. `canonical`
/// resolves a bind's source on the host (symlinks included), `None` when it does not exist.
pub fn container(
    body: &mut Value,
    ctx: &Context,
    canonical: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Verdict<Needs> {
    let cfg =
        body.as_object_mut().ok_or_else(|| Refusal::new("body", "the configuration is not a JSON object"))?;
    unknown(cfg, CONFIG_FIELDS, "")?;
    let mut needs = Needs::default();
    let labels = cfg.entry("Labels").or_insert_with(|| Value::Object(Map::new()));
    if labels.is_null() {
        *labels = Value::Object(Map::new());
    }
    let labels = labels.as_object_mut().ok_or_else(|| Refusal::new("body", "`Labels` is not an object"))?;
    for (k, v) in ctx.labels() {
        labels.insert(k, Value::String(v));
    }

    let host = cfg.entry("HostConfig").or_insert_with(|| Value::Object(Map::new()));
    if host.is_null() {
        *host = Value::Object(Map::new());
    }
    let host = host.as_object_mut().ok_or_else(|| Refusal::new("body", "`HostConfig` is not an object"))?;
    host_config(host, ctx, canonical, &mut needs)?;
    let default_network = host.get("NetworkMode").and_then(Value::as_str).unwrap_or_default().to_string();
    networking(cfg.get_mut("NetworkingConfig"), ctx, &default_network, &mut needs)?;
    super::user::container(cfg, ctx)?;
    Ok(needs)
}

/// Checks the configuration of `POST /containers/{id}/exec`: no privileged exec (it would have
/// every capability in the container), no other user in a container with a host directory
/// (`container`: the daemon's inspection of it, `None` when unknown), and every field one the
/// gateway knows.
pub fn exec(body: &Value, container: Option<&Value>) -> Verdict<()> {
    let o = body
        .as_object()
        .ok_or_else(|| Refusal::new("body", "the exec configuration is not a JSON object"))?;
    let known = [
        "AttachStdin",
        "AttachStdout",
        "AttachStderr",
        "DetachKeys",
        "Tty",
        "ConsoleSize",
        "Env",
        "Cmd",
        "Privileged",
        "User",
        "WorkingDir",
    ];
    unknown(o, &known, "")?;
    if o.get("Privileged").is_some_and(truthy) {
        return Err(Refusal::new("privileged", "a privileged exec has every capability in the container"));
    }
    super::user::exec(body, container)
}

fn host_config(
    h: &mut Map<String, Value>,
    ctx: &Context,
    canonical: &dyn Fn(&Path) -> Option<PathBuf>,
    needs: &mut Needs,
) -> Verdict<()> {
    let known: Vec<&str> = super::limits::FREE
        .iter()
        .chain(super::limits::CHECKED)
        .copied()
        .chain([
            "RestartPolicy",
            "GroupAdd",
            "Privileged",
            "PidMode",
            "IpcMode",
            "UTSMode",
            "UsernsMode",
            "NetworkMode",
            "Devices",
            "DeviceRequests",
            "DeviceCgroupRules",
            "CapAdd",
            "CapDrop",
            "Capabilities",
            "SecurityOpt",
            "Sysctls",
            "VolumesFrom",
            "Binds",
            "Mounts",
            "VolumeDriver",
            "PortBindings",
            "PublishAllPorts",
            "Runtime",
            "CgroupParent",
            "CgroupnsMode",
            "StorageOpt",
            "MaskedPaths",
            "ReadonlyPaths",
            "Annotations",
            "Links",
            "Cgroup",
            "LogConfig",
        ])
        .collect();
    unknown(h, &known, "HostConfig.")?;

    super::limits::host(h, &ctx.limits)?;

    if h.get("Privileged").is_some_and(truthy) {
        return Err(Refusal::new(
            "privileged",
            "--privileged gives the container every device and capability of the host",
        ));
    }
    for (field, flag) in
        [("PidMode", "--pid"), ("IpcMode", "--ipc"), ("UTSMode", "--uts"), ("UsernsMode", "--userns")]
    {
        let mode = h.get(field).and_then(Value::as_str).unwrap_or_default();
        if mode == "host" {
            return Err(Refusal::new(
                "host-namespace",
                format!("{flag} host shares a namespace of the host"),
            ));
        }
        if let Some(c) = mode.strip_prefix("container:") {
            needs.containers.push(c.trim_start_matches('/').to_string());
        }
    }
    if h.get("CgroupnsMode").and_then(Value::as_str) == Some("host") {
        return Err(Refusal::new("host-namespace", "--cgroupns host shares the host's cgroup namespace"));
    }
    for field in ["Devices", "DeviceRequests", "DeviceCgroupRules"] {
        if h.get(field).is_some_and(truthy) {
            return Err(Refusal::new("devices", format!("`{field}`: a device of the host in the container")));
        }
    }
    if h.get("Capabilities").is_some_and(truthy) {
        return Err(Refusal::new("capabilities", "`Capabilities` replaces the default set"));
    }
    for cap in strings(h.get("CapAdd")) {
        let name = cap.trim_start_matches("CAP_").to_ascii_uppercase();
        if !DEFAULT_CAPS.contains(&name.as_str()) {
            return Err(Refusal::new(
                "capabilities",
                format!("--cap-add {cap}: beyond Docker's default capabilities"),
            ));
        }
    }
    for opt in strings(h.get("SecurityOpt")) {
        let o = opt.replace('=', ":").to_ascii_lowercase();
        let off = o.starts_with("seccomp:unconfined")
            || o.starts_with("apparmor:unconfined")
            || o.starts_with("label:disable")
            || o.starts_with("systempaths:unconfined")
            || o.starts_with("no-new-privileges:false")
            || (o.starts_with("seccomp:") && o != "seccomp:default")
            || (o.starts_with("apparmor:") && o != "apparmor:docker-default");
        let known = o.starts_with("no-new-privileges")
            || o.starts_with("label:")
            || o.starts_with("seccomp:")
            || o.starts_with("apparmor:");
        if off || !known {
            return Err(Refusal::new("security-opt", format!("--security-opt {opt} turns a protection off")));
        }
    }
    // Set at all (even empty), these replace Docker's own lists of masked and read-only paths
    // in /proc and /sys: `systempaths=unconfined` by another name.
    for field in ["MaskedPaths", "ReadonlyPaths"] {
        if h.get(field).is_some_and(|v| !v.is_null()) {
            return Err(Refusal::new(
                "security-opt",
                format!("`{field}` replaces the paths Docker masks in /proc and /sys"),
            ));
        }
    }
    if h.get("Annotations").is_some_and(truthy) {
        return Err(Refusal::new("runtime", "runtime annotations are not served"));
    }
    if h.get("Cgroup").is_some_and(truthy) {
        return Err(Refusal::new("host-namespace", "`Cgroup` joins another cgroup"));
    }
    for link in strings(h.get("Links")) {
        // `--link` hands the other container's environment over: it must be the project's.
        needs.containers.push(link.split(':').next().unwrap_or_default().trim_start_matches('/').to_string());
    }
    for (field, keys) in
        [("LogConfig", &["Type", "Config"][..]), ("RestartPolicy", &["Name", "MaximumRetryCount"][..])]
    {
        if let Some(o) = h.get(field).and_then(Value::as_object) {
            unknown(o, keys, &format!("HostConfig.{field}."))?;
        }
    }
    if let Some(log) = h.get("LogConfig").filter(|v| truthy(v)) {
        // Other log drivers (syslog, gelf, fluentd, splunk, …) send from the host, around the filter.
        let ty = log.get("Type").and_then(Value::as_str).unwrap_or_default();
        if !matches!(ty, "" | "json-file" | "local" | "none") {
            return Err(Refusal::new(
                "log-driver",
                format!("log driver {ty}: it sends from the host, outside the filter"),
            )
            .allow("the default json-file or local driver"));
        }
        let opts = log.get("Config").and_then(Value::as_object);
        let known = ["max-size", "max-file", "compress", "mode", "max-buffer-size", "labels", "env", "tag"];
        if let Some(k) = opts.and_then(|o| o.keys().find(|k| !known.contains(&k.as_str()))) {
            return Err(Refusal::new("log-driver", format!("log option {k} is not served")));
        }
    }
    if h.get("Sysctls").is_some_and(truthy) {
        return Err(Refusal::new("sysctls", "--sysctl changes the kernel's settings for the container"));
    }
    for field in ["Runtime", "CgroupParent", "VolumeDriver", "StorageOpt"] {
        let v = h.get(field);
        if v.is_some_and(truthy) && !(field == "Runtime" && v.and_then(Value::as_str) == Some("runc")) {
            return Err(Refusal::new("runtime", format!("`{field}` is not served")));
        }
    }
    for from in strings(h.get("VolumesFrom")) {
        needs.containers.push(from.split(':').next().unwrap_or_default().trim_start_matches('/').to_string());
    }
    let mut binds = Vec::new();
    for bind in strings(h.get("Binds")) {
        binds.push(binds_entry(&bind, ctx, canonical, needs)?);
    }
    if !binds.is_empty() {
        h.insert("Binds".into(), Value::from(binds));
    }
    if let Some(mounts) = h.get_mut("Mounts").filter(|v| truthy(v)) {
        for m in mounts.as_array_mut().ok_or_else(|| Refusal::new("body", "`Mounts` is not a list"))? {
            mount(m, ctx, canonical, needs)?;
        }
    }
    // The session stops, when it ends, every container it made or set running (nothing may
    // change the project after the launcher's look at it). `always` and `on-failure` would have
    // the daemon start such a container again when the daemon restarts, with no session around
    // it; `unless-stopped` keeps one stopped.
    let restart =
        h.get("RestartPolicy").and_then(|r| r.get("Name")).and_then(Value::as_str).unwrap_or_default();
    if !matches!(restart, "" | "no" | "unless-stopped") {
        return Err(Refusal::new(
            "restart",
            format!(
                "restart policy `{restart}`: the daemon would start the container again after its \
                 session stopped it, with no session around it"
            ),
        )
        .allow(
            "--restart unless-stopped (it restarts on failure and stays stopped once its session stops it)",
        ));
    }
    if h.get("PublishAllPorts").is_some_and(truthy) {
        return Err(Refusal::new("ports", "-P publishes on every address of the host")
            .allow("publish each port on loopback: -p 127.0.0.1:PORT:PORT"));
    }
    if let Some(ports) = h.get_mut("PortBindings").and_then(Value::as_object_mut) {
        for list in ports.values_mut() {
            for b in list.as_array_mut().into_iter().flatten() {
                let Some(b) = b.as_object_mut() else { continue };
                unknown(b, &["HostIp", "HostPort"], "HostConfig.PortBindings[].")?;
                let ip = b.get("HostIp").and_then(Value::as_str).unwrap_or_default().to_string();
                match ip.as_str() {
                    "" => {
                        b.insert("HostIp".into(), Value::String("127.0.0.1".into()));
                    }
                    "127.0.0.1" | "::1" => {}
                    other => {
                        return Err(Refusal::new(
                            "ports",
                            format!("publishing on {other}: reachable from other machines"),
                        )
                        .allow("publish on 127.0.0.1"));
                    }
                }
                // The gateway forwards published ports itself, on the host's loopback: only
                // the ports the user declared for the sandbox, so a container cannot take a
                // port another service (another project's filter) would bind.
                let port = b.get("HostPort").and_then(Value::as_str).and_then(|p| p.parse::<u16>().ok());
                if !port.is_some_and(|p| ctx.ports.contains(&p)) {
                    let shown = port.map_or_else(|| "a port Docker picks".to_string(), |p| p.to_string());
                    return Err(Refusal::new("ports", format!("publishing on {shown}: not a port declared for the sandbox"))
                        .allow("give the host port (-p 18080:80) and add it to OCSB_FORWARD_PORTS (or OCSB_LOOPBACK_PORTS) in the project's sandbox.conf"));
                }
            }
        }
    }
    let mode = h.get("NetworkMode").and_then(Value::as_str).unwrap_or_default().to_string();
    match mode.as_str() {
        "" | "default" | "bridge" => {
            h.insert("NetworkMode".into(), Value::String(ctx.network.clone()));
        }
        "none" => {}
        "host" => {
            return Err(Refusal::new(
                "network",
                "--network host puts the container on the host's network, outside the filter",
            ));
        }
        m if m.starts_with("container:") => {
            needs.containers.push(m["container:".len()..].trim_start_matches('/').to_string())
        }
        m if m == ctx.network => {}
        m => needs.networks.push(m.to_string()),
    }
    Ok(())
}

fn networking(v: Option<&mut Value>, ctx: &Context, default: &str, needs: &mut Needs) -> Verdict<()> {
    if let Some(o) = v.as_deref().and_then(Value::as_object) {
        unknown(o, &["EndpointsConfig"], "NetworkingConfig.")?;
    }
    let Some(endpoints) = v.and_then(|v| v.get_mut("EndpointsConfig")).and_then(Value::as_object_mut) else {
        return Ok(());
    };
    // `bridge` and `default` (the endpoint the CLI names when no network is given; newer
    // CLIs say `default`) are the project's network.
    for key in ["bridge", "default"] {
        if let Some(e) = endpoints.remove(key) {
            endpoints.entry(ctx.network.clone()).or_insert(e);
        }
    }
    for (name, e) in endpoints.iter() {
        if name == "host" {
            return Err(Refusal::new("network", "the host network is outside the filter"));
        }
        if name != &ctx.network && name != default && !needs.networks.contains(name) {
            needs.networks.push(name.clone());
        }
        endpoint(e, &format!("NetworkingConfig.EndpointsConfig.{name}."), needs)?;
    }
    Ok(())
}

/// `POST /networks/{id}/connect`: the container and its endpoint on the network. Returns the
/// containers it names (the one connected, and any it links to): each must be the project's.
pub fn connect(body: &Value) -> Verdict<Needs> {
    let mut needs = member(body, &["Container", "EndpointConfig"])?;
    endpoint(&body["EndpointConfig"], "EndpointConfig.", &mut needs)?;
    Ok(needs)
}

/// `POST /networks/{id}/disconnect`: the container named must be the project's (the network
/// is checked by the path).
pub fn disconnect(body: &Value) -> Verdict<Needs> {
    member(body, &["Container", "Force"])
}

/// The body of a `connect` or `disconnect` (its `fields`), and the container it names.
fn member(body: &Value, fields: &[&str]) -> Verdict<Needs> {
    if let Some(o) = body.as_object() {
        unknown(o, fields, "")?;
    }
    let container = body.get("Container").and_then(Value::as_str).unwrap_or_default();
    Ok(Needs { containers: vec![container.trim_start_matches('/').to_string()], ..Needs::default() })
}

/// Names every container the configuration refers to by resource (`container:` modes,
/// `--volumes-from`, a `network connect`'s container) by the full id the gateway checked
/// (`ids`: name → id). The daemon looks a name up again when it acts on it, so a name swapped
/// between the check and the call could otherwise lead to another container. Links are left
/// as named: on the project's networks (user-defined, as every network a container of the
/// project is on) a link is only a name in that network's DNS, where only the project's
/// containers are, and a full id would not resolve there.
pub fn pin_containers(body: &mut Value, ids: &std::collections::HashMap<String, String>) {
    let id_of = |name: &str| ids.get(name.trim_start_matches('/')).cloned();
    if let Some(Value::String(c)) = body.get_mut("Container")
        && let Some(id) = id_of(c)
    {
        *c = id;
    }
    let Some(h) = body.get_mut("HostConfig").and_then(Value::as_object_mut) else { return };
    for field in ["NetworkMode", "PidMode", "IpcMode"] {
        if let Some(Value::String(m)) = h.get_mut(field)
            && let Some(id) = m.strip_prefix("container:").and_then(id_of)
        {
            *m = format!("container:{id}");
        }
    }
    for item in h.get_mut("VolumesFrom").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Value::String(s) = item {
            let (name, mode) = s.split_once(':').map_or((s.as_str(), None), |(n, m)| (n, Some(m)));
            if let Some(id) = id_of(name) {
                *s = mode.map_or(id.clone(), |m| format!("{id}:{m}"));
            }
        }
    }
}

/// The fields of an endpoint (API 1.47).
const ENDPOINT_FIELDS: &[&str] = &[
    "IPAMConfig",
    "Links",
    "Aliases",
    "MacAddress",
    "DriverOpts",
    "GwPriority",
    "NetworkID",
    "EndpointID",
    "Gateway",
    "IPAddress",
    "IPPrefixLen",
    "IPv6Gateway",
    "GlobalIPv6Address",
    "GlobalIPv6PrefixLen",
    "DNSNames",
];

/// One endpoint of a container on a network (`NetworkingConfig.EndpointsConfig.<net>`, or a
/// `network connect`'s `EndpointConfig`). Its addresses are Docker's to choose, as a network's
/// are; driver options are not served; a link hands the other container's environment over,
/// so it must be the project's, as with `HostConfig.Links`.
pub fn endpoint(e: &Value, at: &str, needs: &mut Needs) -> Verdict<()> {
    let Some(o) = e.as_object() else { return Ok(()) };
    unknown(o, ENDPOINT_FIELDS, at)?;
    // `NetworkID` chooses the network the daemon joins, whatever the key says (the gateway
    // sets it to the network it checked); the others are the daemon's to fill in.
    let chosen = ["NetworkID", "EndpointID", "Gateway", "IPAddress", "IPPrefixLen", "IPv6Gateway"]
        .into_iter()
        .chain(["GlobalIPv6Address", "GlobalIPv6PrefixLen"])
        .find(|f| o.get(*f).is_some_and(truthy));
    if let Some(field) = chosen {
        return Err(Refusal::new("network", format!("`{at}{field}` is the daemon's to choose")));
    }
    if o.get("IPAMConfig").is_some_and(truthy) {
        return Err(Refusal::new("network", format!("`{at}IPAMConfig`: addresses of the agent's choosing"))
            .allow("let Docker choose the container's address (no --ip)"));
    }
    if o.get("DriverOpts").is_some_and(truthy) {
        return Err(Refusal::new("network", "network driver options are not served"));
    }
    for link in strings(o.get("Links")) {
        needs.containers.push(link.split(':').next().unwrap_or_default().trim_start_matches('/').to_string());
    }
    Ok(())
}

/// `SRC:DST[:OPTS]` of `-v`: a host path (a bind) or a volume's name. The entry as forwarded:
/// a bind's source is replaced by the path that was checked.
fn binds_entry(
    bind: &str,
    ctx: &Context,
    canonical: &dyn Fn(&Path) -> Option<PathBuf>,
    needs: &mut Needs,
) -> Verdict<String> {
    let mut parts = bind.splitn(3, ':');
    let src = parts.next().unwrap_or_default();
    let dst = parts.next().unwrap_or_default();
    let opts = parts.next();
    if !src.starts_with('/') {
        if !src.is_empty() {
            needs.volumes.push(src.to_string());
        }
        return Ok(bind.to_string());
    }
    let real = bind_source(Path::new(src), dst, ctx, canonical, needs)?;
    if opts.unwrap_or_default().split(',').any(|o| matches!(o, "shared" | "rshared" | "slave" | "rslave")) {
        return Err(Refusal::new("bind", format!("-v {bind}: mount propagation reaches back to the host")));
    }
    Ok(match opts {
        Some(o) => format!("{}:{dst}:{o}", real.display()),
        None => format!("{}:{dst}", real.display()),
    })
}

/// One entry of `--mount`; a bind's source is replaced by the path that was checked.
fn mount(
    m: &mut Value,
    ctx: &Context,
    canonical: &dyn Fn(&Path) -> Option<PathBuf>,
    needs: &mut Needs,
) -> Verdict<()> {
    let o = m.as_object_mut().ok_or_else(|| Refusal::new("body", "a mount is not an object"))?;
    unknown(
        o,
        &[
            "Type",
            "Source",
            "Target",
            "ReadOnly",
            "Consistency",
            "BindOptions",
            "VolumeOptions",
            "TmpfsOptions",
        ],
        "Mounts[].",
    )?;
    let src = o.get("Source").and_then(Value::as_str).unwrap_or_default().to_string();
    let dst = o.get("Target").and_then(Value::as_str).unwrap_or_default().to_string();
    match o.get("Type").and_then(Value::as_str).unwrap_or_default() {
        "bind" => {
            let real = bind_source(Path::new(&src), &dst, ctx, canonical, needs)?;
            let prop = o
                .get("BindOptions")
                .and_then(|b| b.get("Propagation"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if matches!(prop, "shared" | "rshared" | "slave" | "rslave") {
                return Err(Refusal::new(
                    "bind",
                    format!("--mount {src}: mount propagation reaches back to the host"),
                ));
            }
            o.insert("Source".into(), Value::String(real.to_string_lossy().into_owned()));
        }
        "volume" => {
            if o.get("VolumeOptions").and_then(|v| v.get("DriverConfig")).is_some_and(truthy) {
                return Err(Refusal::new("volume", "a volume driver's options can bind any host path"));
            }
            if !src.is_empty() {
                needs.volumes.push(src);
            }
        }
        "tmpfs" => {}
        other => return Err(Refusal::new("mount", format!("--mount type={other} is not served"))),
    }
    Ok(())
}

/// A bind's source must be a whole directory the sandbox may write — the project, a worktree,
/// an `OCSB_RW` entry, the state directory: one that is not inside another — and not hidden.
/// The container then sees what the agent can already change, and nothing else of the host.
/// *Why whole*: the agent could swap a part of a deeper path for a symbolic link between the
/// check and the daemon's mount, while the parents of these directories are out of its reach.
/// Hidden paths inside (a project's `.env` under `OCSB_HIDE`) are covered in the container at
/// `dst`, and what the sandbox sees read-only inside stays read-only. Returns the checked path.
fn bind_source(
    src: &Path,
    dst: &str,
    ctx: &Context,
    canonical: &dyn Fn(&Path) -> Option<PathBuf>,
    needs: &mut Needs,
) -> Verdict<PathBuf> {
    let refuse = |why: &str| {
        Refusal::new("bind", format!("-v {}: {why}", src.display()))
            .allow("bind the whole project (-v \"$PWD\":/src from its top) and use the subdirectory inside, or add the directory to OCSB_RW")
    };
    if src.components().any(|c| c == Component::ParentDir) || !src.is_absolute() || !dst.starts_with('/') {
        return Err(refuse("not a plain absolute path"));
    }
    let Some(real) = canonical(src) else { return Err(refuse("does not exist")) };
    if ctx.hidden.iter().any(|h| real.starts_with(h)) {
        return Err(Refusal::new("bind", format!("-v {}: hidden from the sandbox", src.display())));
    }
    if !ctx.writable.iter().any(|w| real.starts_with(w)) {
        return Err(refuse("outside what the sandbox may write"));
    }
    let top = |w: &PathBuf| !ctx.writable.iter().any(|o| o != w && w.starts_with(o));
    if !ctx.writable.iter().any(|w| real == *w && top(w)) {
        return Err(refuse(
            "a subdirectory: the agent could swap a part of its path for a link before the mount",
        ));
    }
    let inside = |p: &PathBuf| {
        (p.clone(), Path::new(dst).join(p.strip_prefix(&real).unwrap_or(p)).to_string_lossy().into_owned())
    };
    needs.masks.extend(ctx.hidden.iter().filter(|h| h.starts_with(&real)).map(inside));
    needs.read_only.extend(ctx.read_only.iter().filter(|r| r.starts_with(&real) && **r != real).map(inside));
    // A pin at or under what is hidden or read-only would uncover it, or double its mount.
    let covered = |w: &PathBuf| ctx.hidden.iter().chain(&ctx.read_only).any(|r| w.starts_with(r));
    needs.pins.extend(
        ctx.writable.iter().filter(|w| w.starts_with(&real) && **w != real && !covered(w)).map(inside),
    );
    Ok(real)
}

/// Refuses a field not in `known` that holds anything but its zero value, and any spelling
/// of a known field in another case. *Why the case*: the daemon's decoder matches field names
/// regardless of case and the last one wins, so `"networkmode": ""` after the gateway's
/// `"NetworkMode"` would undo what the gateway set.
pub(crate) fn unknown(o: &Map<String, Value>, known: &[&str], at: &str) -> Verdict<()> {
    for (k, v) in o {
        if known.contains(&k.as_str()) {
            continue;
        }
        if let Some(field) = known.iter().find(|f| f.eq_ignore_ascii_case(k)) {
            return Err(Refusal::new(
                "unknown-field",
                format!("`{at}{k}`: the field is spelled `{at}{field}`"),
            ));
        }
        if truthy(v) {
            return Err(Refusal::new(
                "unknown-field",
                format!("`{at}{k}` is a field the gateway does not know"),
            ));
        }
    }
    Ok(())
}

/// Not the zero value: null, false, 0, "", [] and {} are all "not set".
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The strings of a JSON array (a missing field or another type: none).
pub(super) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array).into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::{PROJECT_LABEL, SESSION_LABEL};
    use super::*;
    use serde_json::json;

    fn ctx() -> Context {
        Context {
            project: "shop".into(),
            session: "s1".into(),
            network: "ocsb-shop".into(),
            writable: vec!["/home/u/shop".into(), "/home/u/.cache".into(), "/home/u/shop/.git".into()],
            hidden: vec!["/home/u/shop/.env.secret".into(), "/home/u/.ssh".into()],
            read_only: vec!["/home/u/shop/.git/hooks".into()],
            ports: vec![8080],
            uid: 1990,
            gid: 1990,
            ..Context::default()
        }
    }

    fn fs(p: &Path) -> Option<PathBuf> {
        // A link in the project that leads out, and a missing path.
        match p.to_str()? {
            "/home/u/shop/out" => Some("/etc".into()),
            "/home/u/shop/missing" => None,
            s => Some(PathBuf::from(s)),
        }
    }

    fn check(body: Value) -> Verdict<(Value, Needs)> {
        let mut b = body;
        container(&mut b, &ctx(), &fs).map(|n| (b, n))
    }

    fn refused(body: Value) -> Refusal {
        check(body).expect_err("refused")
    }

    #[test]
    fn endpoints_are_checked_field_by_field() {
        // Compose v2's endpoint for its default network passes.
        let compose = json!({"Image": "x", "HostConfig": {"NetworkMode": "ocsb-shop"}, "NetworkingConfig": {"EndpointsConfig": {
            "ocsb-shop": {"Aliases": ["shop-web-1", "web"], "IPAMConfig": null, "DriverOpts": null, "MacAddress": "", "DNSNames": null}}}});
        assert!(check(compose).is_ok());
        let on = |e: Value| json!({"Image": "x", "NetworkingConfig": {"EndpointsConfig": {"ocsb-shop": e}}});
        let r = refused(on(json!({"Future": 1})));
        assert_eq!(
            (r.rule, r.what.contains("EndpointsConfig.ocsb-shop.Future")),
            ("unknown-field", true),
            "{}",
            r.what
        );
        assert_eq!(refused(on(json!({"IPAMConfig": {"IPv4Address": "172.18.0.9"}}))).rule, "network");
        assert_eq!(refused(on(json!({"DriverOpts": {"com.docker.network.x": "1"}}))).rule, "network");
        let (_, needs) = check(on(json!({"Links": ["/db:db"]}))).unwrap();
        assert_eq!(needs.containers, ["db"]);
        // `network connect`: the container and whatever it links to must be the project's.
        // An endpoint's `NetworkID` would take the container to another network than its key.
        let r = refused(on(json!({"NetworkID": "bridge"})));
        assert_eq!((r.rule, r.what.contains("NetworkID")), ("network", true), "{}", r.what);
        assert_eq!(
            connect(&json!({"Container": "w", "EndpointConfig": {"NetworkID": "x"}})).unwrap_err().rule,
            "network"
        );
        let mut c = json!({"Container": "/web", "EndpointConfig": {"Links": ["cache:c"]}});
        let n = connect(&c).unwrap();
        let ids = std::collections::HashMap::from([
            ("web".to_string(), "1d".to_string()),
            ("cache".into(), "2d".into()),
        ]);
        pin_containers(&mut c, &ids);
        // Links stay names: on the project's networks they are names in its DNS.
        assert_eq!(c, json!({"Container": "1d", "EndpointConfig": {"Links": ["cache:c"]}}));
        let mut b = json!({"HostConfig": {"NetworkMode": "container:web", "PidMode": "container:/cache",
            "VolumesFrom": ["web:ro", "/cache"], "Links": ["/web:w"]}});
        pin_containers(&mut b, &ids);
        assert_eq!(
            b["HostConfig"],
            json!({"NetworkMode": "container:1d", "PidMode": "container:2d",
            "VolumesFrom": ["1d:ro", "2d"], "Links": ["/web:w"]})
        );
        assert_eq!(n.containers, ["web", "cache"]);
        assert_eq!(connect(&json!({"Container": "web", "Force": true})).unwrap_err().rule, "unknown-field");
        assert_eq!(disconnect(&json!({"Container": "/web", "Force": true})).unwrap().containers, ["web"]);
        assert_eq!(
            disconnect(&json!({"Container": "web", "Endpoint": 1})).unwrap_err().rule,
            "unknown-field"
        );
    }

    #[test]
    fn a_plain_run_is_completed_with_label_network_and_loopback_ports() {
        let (b, needs) = check(json!({
            "Image": "busybox", "Cmd": ["true"], "Env": [], "Labels": null,
            "HostConfig": {"Binds": ["/home/u/shop:/src", "cache:/c"], "NetworkMode": "default",
                           "PortBindings": {"80/tcp": [{"HostIp": "", "HostPort": "8080"}]},
                           "Privileged": false, "CapAdd": null, "Devices": [], "Sysctls": {}},
            "NetworkingConfig": {"EndpointsConfig": {"bridge": {}}}
        }))
        .unwrap();
        let (newer, _) = check(json!({"Image": "busybox", "HostConfig": {"NetworkMode": "default"},
            "NetworkingConfig": {"EndpointsConfig": {"default": {}}}}))
        .unwrap();
        assert_eq!(newer["NetworkingConfig"]["EndpointsConfig"], json!({"ocsb-shop": {}}), "Docker 28's CLI");
        assert_eq!(b["Labels"][PROJECT_LABEL], "shop");
        assert_eq!(b["Labels"][SESSION_LABEL], "s1");
        assert_eq!(b["HostConfig"]["NetworkMode"], "ocsb-shop");
        assert_eq!(b["HostConfig"]["PortBindings"]["80/tcp"][0]["HostIp"], "127.0.0.1");
        assert_eq!(b["HostConfig"]["PidsLimit"], 4096, "a process limit when the client sets none");
        assert!(b["NetworkingConfig"]["EndpointsConfig"].get("ocsb-shop").is_some());
        assert_eq!(needs.volumes, ["cache"]);
        assert!(needs.containers.is_empty() && needs.networks.is_empty());
        // The hidden file inside the project is covered where the container sees it.
        assert_eq!(
            needs.masks,
            [(PathBuf::from("/home/u/shop/.env.secret"), "/src/.env.secret".to_string())]
        );
        // What the sandbox sees read-only is read-only there, and `.git` (a mount point in the
        // sandbox) is one in the container too, so no container can rename it.
        assert_eq!(
            needs.read_only,
            [(PathBuf::from("/home/u/shop/.git/hooks"), "/src/.git/hooks".to_string())]
        );
        assert_eq!(needs.pins, [(PathBuf::from("/home/u/shop/.git"), "/src/.git".to_string())]);
    }

    #[test]
    fn only_restart_policies_that_stay_stopped_are_served() {
        let with = |policy: Value| json!({"Image": "x", "HostConfig": {"RestartPolicy": policy, "Binds": ["cache:/c"]}});
        for name in ["always", "on-failure"] {
            let r = refused(with(json!({"Name": name, "MaximumRetryCount": 0})));
            assert_eq!(r.rule, "restart", "{name}");
            assert!(r.what.contains(name), "{}", r.what);
        }
        for name in ["", "no", "unless-stopped"] {
            assert!(check(with(json!({"Name": name, "MaximumRetryCount": 0}))).is_ok(), "{name}");
        }
        assert!(check(json!({"Image": "x"})).is_ok(), "none set");
    }

    #[test]
    fn each_way_out_is_refused_by_its_rule() {
        let host = |h: Value| json!({"Image": "x", "HostConfig": h});
        for (body, rule, text) in [
            (host(json!({"Binds": ["/:/host"]})), "bind", "outside"),
            (host(json!({"Binds": ["/home/u/.ssh:/k:ro"]})), "bind", "hidden"),
            (host(json!({"Binds": ["/var/run/docker.sock:/var/run/docker.sock"]})), "bind", "outside"),
            (host(json!({"Binds": ["/home/u/shop/out:/x"]})), "bind", "outside"),
            (host(json!({"Binds": ["/home/u/shop/src:/x"]})), "bind", "subdirectory"),
            (host(json!({"Binds": ["/home/u/.cache/pip:/x"]})), "bind", "subdirectory"),
            (host(json!({"MaskedPaths": []})), "security-opt", "MaskedPaths"),
            (host(json!({"ReadonlyPaths": []})), "security-opt", "ReadonlyPaths"),
            (
                host(
                    json!({"LogConfig": {"Type": "syslog", "Config": {"syslog-address": "tcp://10.0.0.1:514"}}}),
                ),
                "log-driver",
                "syslog",
            ),
            (
                host(json!({"LogConfig": {"Type": "json-file", "Config": {"path": "/etc/x"}}})),
                "log-driver",
                "path",
            ),
            (host(json!({"Annotations": {"run.oci.x": "1"}})), "runtime", "annotations"),
            (host(json!({"Cgroup": "container:x"})), "host-namespace", "Cgroup"),
            (host(json!({"privileged": true})), "unknown-field", "HostConfig.privileged"),
            (host(json!({"networkmode": ""})), "unknown-field", "spelled `HostConfig.NetworkMode`"),
            (host(json!({"mounts": null})), "unknown-field", "HostConfig.Mounts"),
            (json!({"Image": "x", "labels": null}), "unknown-field", "Labels"),
            (
                host(json!({"PortBindings": {"80/tcp": [{"hostip": "0.0.0.0", "HostPort": "80"}]}})),
                "unknown-field",
                "HostIp",
            ),
            (host(json!({"LogConfig": {"type": "syslog"}})), "unknown-field", "LogConfig.Type"),
            (
                json!({"Image": "x", "NetworkingConfig": {"endpointsconfig": {"host": {}}}}),
                "unknown-field",
                "EndpointsConfig",
            ),
            (json!({"Image": "x", "hostconfig": {"Privileged": true}}), "unknown-field", "hostconfig"),
            (host(json!({"Binds": ["/home/u/shop/missing:/x"]})), "bind", "does not exist"),
            (host(json!({"Binds": ["/home/u/shop/../.ssh:/x"]})), "bind", "plain"),
            (host(json!({"Binds": ["/home/u/shop/.env.secret:/x"]})), "bind", "hidden"),
            (host(json!({"Binds": ["/home/u/shop:x"]})), "bind", "plain"),
            (host(json!({"Binds": ["/home/u/shop:/x:rshared"]})), "bind", "propagation"),
            (host(json!({"Mounts": [{"Type": "bind", "Source": "/", "Target": "/h"}]})), "bind", "outside"),
            (
                host(
                    json!({"Mounts": [{"Type": "volume", "Source": "v", "Target": "/h", "VolumeOptions": {"DriverConfig": {"Name": "local", "Options": {"o": "bind", "device": "/"}}}}]}),
                ),
                "volume",
                "driver",
            ),
            (host(json!({"Mounts": [{"Type": "npipe", "Source": "x", "Target": "/h"}]})), "mount", "npipe"),
            (host(json!({"Privileged": true})), "privileged", "--privileged"),
            (host(json!({"PidMode": "host"})), "host-namespace", "--pid host"),
            (host(json!({"IpcMode": "host"})), "host-namespace", "--ipc"),
            (host(json!({"UTSMode": "host"})), "host-namespace", "--uts"),
            (host(json!({"UsernsMode": "host"})), "host-namespace", "--userns"),
            (host(json!({"CgroupnsMode": "host"})), "host-namespace", "cgroup"),
            (host(json!({"NetworkMode": "host"})), "network", "--network host"),
            (
                host(json!({"PortBindings": {"80/tcp": [{"HostPort": "3128"}]}})),
                "ports",
                "not a port declared",
            ),
            (host(json!({"PortBindings": {"80/tcp": [{"HostPort": ""}]}})), "ports", "a port Docker picks"),
            (host(json!({"OomScoreAdj": -500})), "resources", "oom-score-adj"),
            (host(json!({"PidsLimit": 100000})), "resources", "pids-limit"),
            (host(json!({"CapAdd": ["SYS_ADMIN"]})), "capabilities", "SYS_ADMIN"),
            (host(json!({"CapAdd": ["CAP_NET_ADMIN"]})), "capabilities", "NET_ADMIN"),
            (host(json!({"Capabilities": ["CAP_SYS_ADMIN"]})), "capabilities", "replaces"),
            (host(json!({"Devices": [{"PathOnHost": "/dev/sda"}]})), "devices", "Devices"),
            (host(json!({"DeviceRequests": [{"Count": -1}]})), "devices", "DeviceRequests"),
            (host(json!({"DeviceCgroupRules": ["c 1:3 rwm"]})), "devices", "DeviceCgroupRules"),
            (host(json!({"SecurityOpt": ["seccomp=unconfined"]})), "security-opt", "seccomp"),
            (host(json!({"SecurityOpt": ["apparmor:unconfined"]})), "security-opt", "apparmor"),
            (host(json!({"SecurityOpt": ["label=disable"]})), "security-opt", "label"),
            (host(json!({"SecurityOpt": ["no-new-privileges=false"]})), "security-opt", "no-new"),
            (host(json!({"SecurityOpt": ["systempaths=unconfined"]})), "security-opt", "systempaths"),
            (
                host(json!({"SecurityOpt": ["seccomp={\"defaultAction\":\"SCMP_ACT_ALLOW\"}"]})),
                "security-opt",
                "seccomp",
            ),
            (host(json!({"Sysctls": {"net.ipv4.ip_forward": "1"}})), "sysctls", "--sysctl"),
            (host(json!({"Runtime": "kata"})), "runtime", "Runtime"),
            (host(json!({"CgroupParent": "/"})), "runtime", "CgroupParent"),
            (host(json!({"PublishAllPorts": true})), "ports", "-P"),
            (
                host(json!({"PortBindings": {"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": "80"}]}})),
                "ports",
                "0.0.0.0",
            ),
            (host(json!({"NewThing": {"a": 1}})), "unknown-field", "HostConfig.NewThing"),
            (json!({"Image": "x", "Platform2": "y"}), "unknown-field", "Platform2"),
            (json!(["not", "an", "object"]), "body", "object"),
        ] {
            let r = refused(body.clone());
            assert_eq!(r.rule, rule, "{body}");
            assert!(r.what.contains(text), "{body}: {}", r.what);
        }
    }

    #[test]
    fn an_exec_is_plain() {
        assert!(exec(&json!({"Cmd": ["sh"], "AttachStdout": true, "Privileged": false}), None).is_ok());
        assert_eq!(exec(&json!({"Cmd": ["sh"], "Privileged": true}), None).unwrap_err().rule, "privileged");
        assert_eq!(
            exec(&json!({"Cmd": ["sh"], "privileged": true}), None).unwrap_err().rule,
            "unknown-field"
        );
    }

    #[test]
    fn what_names_other_objects_is_left_for_the_ownership_check() {
        let (_, needs) = check(json!({"Image": "x", "HostConfig": {
            "VolumesFrom": ["db:ro"], "PidMode": "container:web", "NetworkMode": "other", "Links": ["/cache:c"],
            "Mounts": [{"Type": "volume", "Source": "data", "Target": "/d"}]
        }}))
        .unwrap();
        assert_eq!(needs.containers, ["web", "cache", "db"]);
        assert_eq!(needs.networks, ["other"]);
        assert_eq!(needs.volumes, ["data"]);
        // Zero values of unknown fields are what the CLI sends: not refused.
        assert!(check(json!({"Image": "x", "Future": null, "HostConfig": {"Later": false}})).is_ok());
        // Defaults and a read-only bind of the cache pass.
        assert!(check(json!({"Image": "x", "HostConfig": {"CapAdd": ["NET_BIND_SERVICE"], "SecurityOpt": ["no-new-privileges"], "Binds": ["/home/u/.cache:/p:ro"], "LogConfig": {"Type": "json-file", "Config": {"max-size": "10m"}}, "MaskedPaths": null}})).is_ok());
    }
}
