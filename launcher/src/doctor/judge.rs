//! Facts → checks. Pure: no file, process or socket is touched here, so each verdict is tested
//! from hand-written facts. Every `fail` carries the command that fixes it.

use std::path::PathBuf;

use ocsb_policy::settings::{DockerMode, NetlockAcquire, NetworkMode};

use super::check::Check;
use super::facts::{
    DockerDaemonFacts, EgressFacts, Facts, HelperFacts, KernelFacts, NetlockFacts, OpencodeFacts, PortFacts,
    ProbeFacts, ProjectFacts,
};

/// Where a fix should put a personal setting: the project's local layer inside a project, the
/// user layer outside one.
fn settings_file(project: &ProjectFacts) -> &'static str {
    match project {
        ProjectFacts::Inside { .. } => ".opencode-sandbox/local/sandbox.conf",
        _ => "~/.config/opencode-sandbox/sandbox.conf",
    }
}

pub fn judge(f: &Facts) -> Vec<Check> {
    let mut out = Vec::new();
    out.extend(project(&f.project));
    out.push(home(&f.home));
    out.push(userns(&f.kernel, f.sandbox_enabled, &f.netlock.shim.prefix));
    let isolated = f.network == NetworkMode::Isolated;
    out.push(landlock(f.kernel.landlock_abi, f.sandbox_enabled, isolated));
    out.push(seccomp(f.kernel.seccomp, f.sandbox_enabled));
    out.push(network(f));
    if isolated && f.netlock.gid.is_none() {
        out.push(Check::ok(
            "netlock",
            "not installed; not needed in the isolated network mode, the default (where it is installed, the sandbox also runs as its group)",
        ));
    } else {
        let mut lock = vec![netlock_group(&f.netlock), netlock_shim(&f.netlock)];
        lock.extend(netlock_group_files(&f.netlock));
        lock.extend([netlock_helper(&f.netlock), netlock_probe(&f.netlock)]);
        if !isolated && f.netlock.gid.is_none() {
            // The netlock needs root once; the isolated mode needs nothing.
            for c in &mut lock {
                if let Some(fix) = c.fix.as_mut() {
                    fix.push_str("; or, without root, set OCSB_NETWORK=isolated (the default mode: its own network namespace)");
                }
            }
        }
        out.extend(lock);
    }
    out.push(loopback(f));
    out.push(egress(&f.egress));
    out.push(docker_access(f.docker, &f.docker_daemon, settings_file(&f.project)));
    out.extend(f.docker_firewall.as_ref().map(docker_firewall));
    out.push(opencode(&f.opencode, settings_file(&f.project)));
    for p in &f.ports {
        out.push(port(p, settings_file(&f.project)));
    }
    out.push(dbus_proxy(f));
    out.push(git(&f.git));
    out.extend(tools(f));
    out
}

fn project(p: &ProjectFacts) -> Vec<Check> {
    match p {
        ProjectFacts::Inside { dir, rules } => {
            let mut v = vec![Check::ok("project", format!("{} (settings loaded)", dir.display()))];
            v.push(match rules {
                Ok(n) => Check::ok("egress-rules", format!("{n} rule layers compile")),
                Err(e) => Check::fail(
                    "egress-rules",
                    one_line(e),
                    "edit the file and line named in the message, then `ocsb egress render`",
                ),
            });
            v
        }
        ProjectFacts::Outside { dir } => vec![Check::ok(
            "project",
            format!(
                "none at {} (no .opencode-sandbox/ here or above): host checks only; `ocsb init` in a repository makes one",
                dir.display()
            ),
        )],
        ProjectFacts::BadSettings { error } => vec![Check::fail(
            "settings",
            format!("{} (the checks below use the defaults)", one_line(error)),
            "edit the file and line named in the message, then `ocsb config`",
        )],
    }
}

/// What the sandbox's home holds: never a failure (the allowlist is the setting's own), said so
/// the user sees what the agent can read of their home, and where each entry came from.
fn home(held: &[(String, &str, &str)]) -> Check {
    let entries: Vec<String> =
        held.iter().map(|(rel, access, source)| format!("~/{rel} ({access}, {source})")).collect();
    let held = if entries.is_empty() { "nothing".to_string() } else { entries.join(", ") };
    Check::ok(
        "home",
        format!(
            "the sandbox's home holds only: {held}; the rest of ~ is absent (`ocsb config` says where each comes from; allow more with OCSB_HOME)"
        ),
    )
}

/// Error texts of the launcher are `what\n  fix: …`; a check line holds one line.
fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

/// A missing kernel feature fails only when the sandbox is on; with `OCSB_SANDBOX=0` it is
/// reported, not required.
fn required(id: &'static str, enabled: bool, message: String, fix: String) -> Check {
    if enabled {
        Check::fail(id, message, fix)
    } else {
        Check::warn(id, format!("{message} (not needed now: OCSB_SANDBOX=0)"), Some(fix))
    }
}

/// The AppArmor profile the package and `make install` write for `<prefix>/bin/ocsb`: `ocsb` for
/// /usr, `ocsb-<prefix>` otherwise (packaging/install.sh names it the same way).
fn apparmor_profile(prefix: &std::path::Path) -> String {
    let p = prefix.to_string_lossy();
    let p = p.trim_end_matches('/');
    if p == "/usr" { "ocsb".into() } else { format!("ocsb-{}", p.trim_start_matches('/').replace('/', "-")) }
}

fn userns(k: &KernelFacts, enabled: bool, prefix: &std::path::Path) -> Check {
    let mut seen = Vec::new();
    for (name, v) in [
        ("kernel.unprivileged_userns_clone", &k.userns_clone),
        ("user.max_user_namespaces", &k.max_user_namespaces),
        ("kernel.apparmor_restrict_unprivileged_userns", &k.apparmor_restrict),
    ] {
        if let Some(v) = v {
            seen.push(format!("{name}={v}"));
        }
    }
    let sysctls = if seen.is_empty() { String::new() } else { format!(" ({})", seen.join(", ")) };
    // Root is not bound by unprivileged_userns_clone or AppArmor's restriction, so as root a
    // working unshare says little: the sysctls decide what an ordinary user would get.
    let restricted =
        k.as_root && (k.userns_clone.as_deref() == Some("0") || k.apparmor_restrict.as_deref() == Some("1"));
    let live = if restricted {
        Err("checked as root; ordinary users are restricted by the sysctls".to_string())
    } else {
        k.userns.clone()
    };
    match &live {
        Ok(()) => Check::ok("userns", format!("unprivileged user namespaces work{sysctls}")),
        Err(e) => {
            // The first sysctl that explains the refusal decides the fix.
            let apparmor;
            let fix = if k.userns_clone.as_deref() == Some("0") {
                "sudo sysctl -w kernel.unprivileged_userns_clone=1 && echo kernel.unprivileged_userns_clone=1 | sudo tee /etc/sysctl.d/50-ocsb-userns.conf"
            } else if k.max_user_namespaces.as_deref() == Some("0") {
                "sudo sysctl -w user.max_user_namespaces=15000 && echo user.max_user_namespaces=15000 | sudo tee /etc/sysctl.d/50-ocsb-userns.conf"
            } else if k.apparmor_restrict.as_deref() == Some("1") {
                // The profile lets ocsb alone create user namespaces; the machine-wide
                // restriction stays on for every other program.
                let name = apparmor_profile(prefix);
                apparmor = format!(
                    "load ocsb's AppArmor profile, which lets {bin} (and no other program) create user namespaces: `sudo apparmor_parser -r /etc/apparmor.d/{name}`; if that file is missing, reinstall ocsb (the package, or `sudo make install PREFIX={p}` in the source tree: both write it where apparmor_parser is AppArmor >= 4); an ocsb run from another path is not covered",
                    bin = prefix.join("bin/ocsb").display(),
                    p = prefix.display(),
                );
                &apparmor
            } else {
                "inside a container: run it with user namespaces allowed (e.g. `docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined …`)"
            };
            required(
                "userns",
                enabled,
                format!(
                    "the sandbox cannot be created (the seed's `bubblewrap cannot create a sandbox`): unprivileged user namespaces are refused ({e}){sysctls}"
                ),
                fix.to_string(),
            )
        }
    }
}

/// Landlock off, in the isolated mode (which runs on any landlock ABI, Linux >= 5.13).
const LANDLOCK_FIX: &str = "enable landlock: add `lsm=landlock,…` (keep the current list from /sys/kernel/security/lsm) to GRUB_CMDLINE_LINUX in /etc/default/grub, then `sudo update-grub` and reboot";

/// Which network mode, and what it guarantees.
fn network(f: &Facts) -> Check {
    match (f.network, &f.isolated_net) {
        (NetworkMode::Netlock, _) => Check::ok(
            "network",
            "netlock (OCSB_NETWORK): the host's network, every socket of the sandbox locked to loopback and DNS by the netlock group; proxy-unaware tools cannot connect",
        ),
        (NetworkMode::Isolated, Ok(())) => Check::ok(
            "network",
            "isolated (OCSB_NETWORK): the sandbox's own network namespace; the filter's port and OCSB_FORWARD_PORTS are relayed in, every other TCP connection and every DNS query goes through the egress rules",
        ),
        (NetworkMode::Isolated, Err((what, fix))) => required(
            "network",
            f.sandbox_enabled,
            format!("OCSB_NETWORK=isolated cannot build its network here: {what}"),
            fix.clone(),
        ),
    }
}

/// Where landlock falls short of the netlock mode's floor, the fix names the isolated mode (whose
/// floor is ABI 1) before a kernel ([`ocsb_sandbox::landlock::floor_fix`], the text `run` and
/// `exec` print too).
fn landlock(abi: i64, enabled: bool, isolated: bool) -> Check {
    match abi {
        n if isolated && (1..6).contains(&n) => Check::warn(
            "landlock",
            format!(
                "ABI {n}: enough for OCSB_NETWORK=isolated; not enforced on this kernel: {}",
                ocsb_sandbox::landlock::missing_rights(n).join("; ")
            ),
            Some("Linux >= 6.12 enforces them all".into()),
        ),
        n if n >= 6 => Check::ok(
            "landlock",
            format!("ABI {n} (>= 6: filesystem rights and abstract-unix/signal scopes)"),
        ),
        0 => required(
            "landlock",
            enabled,
            "landlock is not available (disabled or kernel too old; need ABI >= 6)".into(),
            if isolated { LANDLOCK_FIX.into() } else { ocsb_sandbox::landlock::floor_fix(0, false) },
        ),
        n => required(
            "landlock",
            enabled,
            format!(
                "ABI {n} is too old for the netlock mode: the abstract-unix socket scope needs ABI >= 6 (Linux 6.12)"
            ),
            ocsb_sandbox::landlock::floor_fix(n, false),
        ),
    }
}

fn seccomp(present: bool, enabled: bool) -> Check {
    if present {
        Check::ok("seccomp", "seccomp filters available")
    } else {
        required(
            "seccomp",
            enabled,
            "seccomp is not available (kernel built without CONFIG_SECCOMP_FILTER)".into(),
            "use a distribution kernel (CONFIG_SECCOMP=y, CONFIG_SECCOMP_FILTER=y)".into(),
        )
    }
}

fn install_fix(n: &NetlockFacts) -> String {
    format!(
        "sudo make install PREFIX={} (in the ocsb source tree), or install the ocsb package",
        n.shim.prefix.display()
    )
}

/// The set-gid shim is safe only because the group grants nothing: a file of the group in a
/// system tree is writable (or usable) by every sandbox.
fn netlock_group_files(n: &NetlockFacts) -> Option<Check> {
    let trees = super::observe::GROUP_SCAN.join(" ");
    let files = match n.group_files.as_ref()? {
        Ok(f) => f,
        Err(why) => {
            return Some(Check::warn(
                "netlock-group-files",
                format!("the search for files of the group {} in {trees} is incomplete ({why})", n.group),
                Some(format!("sudo find {trees} -xdev -group {} (only the shim may be listed)", n.group)),
            ));
        }
    };
    Some(if files.is_empty() {
        Check::ok(
            "netlock-group-files",
            format!(
                "the group {} owns nothing in {trees} but the shim (directories you cannot read are not \
                 searched; `make install` searches as root)",
                n.group
            ),
        )
    } else {
        let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        Check::fail(
            "netlock-group-files",
            format!(
                "the group {} owns {}: every sandbox runs as that group and can use them",
                n.group,
                list.join(", ")
            ),
            format!("sudo chgrp root {} (the group must own nothing but the shim)", list.join(" ")),
        )
    })
}

fn netlock_group(n: &NetlockFacts) -> Check {
    let Some(gid) = n.gid else {
        let fix = if n.group == "opencode-sandbox" {
            install_fix(n)
        } else {
            format!(
                "sudo groupadd --system {} (or remove OCSB_NETLOCK_GROUP to use opencode-sandbox)",
                n.group
            )
        };
        return Check::fail(
            "netlock-group",
            format!("the group {:?} (OCSB_NETLOCK_GROUP) does not exist", n.group),
            fix,
        );
    };
    match n.acquire {
        NetlockAcquire::Exec => Check::ok(
            "netlock-group",
            format!("group {} exists (gid {gid}); {} gets it through the setgid shim", n.group, n.user),
        ),
        NetlockAcquire::Sg if n.member => Check::ok(
            "netlock-group",
            format!("group {} exists (gid {gid}); {} is a member (for sg)", n.group, n.user),
        ),
        NetlockAcquire::Sg => Check::fail(
            "netlock-group",
            format!("{} is not a member of the group {} (OCSB_NETLOCK_ACQUIRE=sg needs it)", n.user, n.group),
            format!("sudo usermod -aG {} {}", n.group, n.user),
        ),
    }
}

fn netlock_shim(n: &NetlockFacts) -> Check {
    let s = &n.shim;
    if n.acquire == NetlockAcquire::Sg {
        return Check::ok("netlock-shim", "not used (OCSB_NETLOCK_ACQUIRE=sg)");
    }
    let path = s.path.display();
    let Some((uid, gid, mode)) = s.meta else {
        return Check::fail("netlock-shim", format!("the setgid shim {path} is missing"), install_fix(n));
    };
    let group_ok = n.gid == Some(gid);
    if uid == 0 && mode == 0o2755 && group_ok {
        return Check::ok("netlock-shim", format!("{path} is 2755 root:{}", n.group));
    }
    let owner = s.group_name.clone().unwrap_or_else(|| gid.to_string());
    Check::fail(
        "netlock-shim",
        format!("{path} is {mode:04o} uid {uid}:{owner}, needs 2755 root:{}", n.group),
        // chown first: it clears the set-gid bit, which chmod then sets.
        format!("sudo chown root:{} {path} && sudo chmod 2755 {path}", n.group),
    )
}

fn netlock_helper(n: &NetlockFacts) -> Check {
    let start = if n.shim.unit_installed {
        "sudo systemctl enable --now ocsb-netlock.service".to_string()
    } else if n.shim.helper_installed {
        format!(
            "sudo {}/libexec/ocsb/ocsb-netlock-helper daemon & (no systemd unit installed)",
            n.shim.prefix.display()
        )
    } else {
        install_fix(n)
    };
    match &n.helper {
        HelperFacts::NoStatusFile => Check::fail(
            "netlock-helper",
            "the netlock helper is not running (no /run/ocsb-netlock/status.json)".to_string(),
            start,
        ),
        HelperFacts::Unreadable(e) => {
            Check::fail("netlock-helper", format!("cannot read /run/ocsb-netlock/status.json: {e}"), start)
        }
        HelperFacts::Status { state, pid, alive, gid, error } => {
            let pid_text = pid.map(|p| format!("pid {p}")).unwrap_or_else(|| "no pid".into());
            if !alive {
                return Check::fail(
                    "netlock-helper",
                    format!(
                        "the netlock helper is not running (status file names {pid_text}, which is gone; last state {state})"
                    ),
                    start,
                );
            }
            match state.as_str() {
                "enforcing" => match (gid, n.gid) {
                    (Some(h), Some(g)) if *h != g => Check::fail(
                        "netlock-helper",
                        format!("the helper locks gid {h}, but the group {} is gid {g}", n.group),
                        "set `group` in /etc/ocsb/netlock.toml to the netlock group, then `sudo systemctl restart ocsb-netlock.service`",
                    ),
                    _ => Check::ok("netlock-helper", format!("running ({pid_text}), table enforcing")),
                },
                "removed" => Check::fail(
                    "netlock-helper",
                    format!("running ({pid_text}) but the lock was removed (`ocsb netlock teardown`)"),
                    "ocsb netlock setup",
                ),
                "error" => Check::fail(
                    "netlock-helper",
                    format!("the helper reports an error: {}", error.as_deref().unwrap_or("(no message)")),
                    "journalctl -u ocsb-netlock.service; then sudo systemctl restart ocsb-netlock.service",
                ),
                s if s.starts_with("stopped") => {
                    Check::fail("netlock-helper", format!("the netlock helper is {s}"), start)
                }
                other => Check::warn(
                    "netlock-helper",
                    format!("running ({pid_text}), state {other:?}"),
                    Some("ocsb netlock status".into()),
                ),
            }
        }
    }
}

fn netlock_probe(n: &NetlockFacts) -> Check {
    match &n.probe {
        ProbeFacts::Locked { gid } => Check::ok(
            "netlock-probe",
            format!(
                "a datagram sent as group {} (gid {gid}) was rejected (EPERM); the probe is bound to lo",
                n.group
            ),
        ),
        ProbeFacts::Open { gid } => Check::fail(
            "netlock-probe",
            format!(
                "netlock is NOT working: a datagram sent as group {} (gid {gid}) was not rejected",
                n.group
            ),
            "ocsb netlock setup && ocsb netlock verify",
        ),
        ProbeFacts::NotRun => Check::fail(
            "netlock-probe",
            "not run: the netlock group cannot be obtained (see netlock-group and netlock-shim); sandboxes refuse to start",
            match (n.gid, n.acquire) {
                (Some(_), NetlockAcquire::Exec) => install_fix(n),
                _ => netlock_group(n).fix.unwrap_or_else(|| install_fix(n)),
            },
        ),
        ProbeFacts::Error { what, fix } => Check::fail("netlock-probe", one_line(what), one_line(fix)),
    }
}

fn egress(e: &EgressFacts) -> Check {
    match e {
        EgressFacts::Builtin => {
            Check::ok("egress", "backend builtin (the proxy runs in ocsb; needs nothing else)")
        }
        EgressFacts::Squid { endpoint, docker: Err(why), .. } => Check::fail(
            "egress",
            format!("backend squid: Docker is not reachable at {endpoint}: {why}"),
            "sudo systemctl start docker (and join the group docker), or set OCSB_EGRESS_BACKEND=builtin",
        ),
        EgressFacts::SquidUnchecked { endpoint } => Check::warn(
            "egress",
            format!("backend squid: DOCKER_HOST={endpoint} is not a unix socket; doctor does not check it"),
            Some("docker version && docker image inspect opencode-sandbox-egress".into()),
        ),
        EgressFacts::Squid { docker: Ok(v), image: Some(true), .. } => {
            Check::ok("egress", format!("backend squid: Docker {v}, image opencode-sandbox-egress present"))
        }
        EgressFacts::Squid { docker: Ok(v), .. } => Check::warn(
            "egress",
            format!(
                "backend squid: Docker {v}, image opencode-sandbox-egress not built yet (the first `ocsb egress up` builds it)"
            ),
            Some("ocsb egress up".into()),
        ),
    }
}

/// What the sandbox can reach on the host's loopback (landlock TCP rules, ABI 4).
fn loopback(f: &Facts) -> Check {
    let declared = if f.loopback_ports.is_empty() {
        "no OCSB_LOOPBACK_PORTS".to_string()
    } else {
        let p: Vec<String> = f.loopback_ports.iter().map(u16::to_string).collect();
        format!("OCSB_LOOPBACK_PORTS {}", p.join(" "))
    };
    if f.network == NetworkMode::Isolated {
        let fwd: Vec<String> = f.loopback_ports.iter().map(u16::to_string).collect();
        let fwd = if fwd.is_empty() { "none".to_string() } else { fwd.join(" ") };
        Check::ok(
            "loopback",
            format!(
                "the sandbox's own loopback; of the host's, only the filter's port and the forwarded ports ({fwd})"
            ),
        )
    } else if !f.sandbox_enabled {
        Check::warn(
            "loopback",
            "OCSB_SANDBOX=0: no landlock, so every TCP service on this machine's loopback (databases, sshd) is reachable",
            Some(format!("echo OCSB_SANDBOX=1 >> {}", settings_file(&f.project))),
        )
    } else if f.kernel.landlock_abi < 4 {
        Check::warn(
            "loopback",
            format!(
                "landlock ABI {} has no TCP rules: every TCP service on this machine's loopback is reachable",
                f.kernel.landlock_abi
            ),
            Some(ocsb_sandbox::landlock::floor_fix(f.kernel.landlock_abi, false)),
        )
    } else {
        Check::ok(
            "loopback",
            format!(
                "the agent connects on loopback only to the filter, DNS, OpenCode, {declared} and the ephemeral range"
            ),
        )
    }
}

/// Whether the daemon keeps the project's containers in: the gateway's own verdict before it
/// starts one.
fn docker_firewall(net: &ocsb_policy::docker::firewall::DaemonNet) -> Check {
    use ocsb_policy::docker::firewall::Iptables;
    const ID: &str = "docker-firewall";
    match (net.verdict(), &net.iptables) {
        (Err(r), _) => Check::fail(
            ID,
            format!("{}; the gateway starts no container with a network", r.what),
            r.allow.unwrap_or_default(),
        ),
        (Ok(()), Iptables::On) => Check::ok(
            ID,
            "the Docker daemon writes its firewall rules: its internal networks have no route out",
        ),
        (Ok(()), Iptables::Off(by)) => Check::ok(
            ID,
            format!(
                "the Docker daemon runs with {by}, and IP forwarding is off: nothing routes out of its networks"
            ),
        ),
        (Ok(()), Iptables::Unknown(_) | Iptables::Unreadable(_)) if net.forwarding == Some(false) => {
            Check::ok(
                ID,
                "IP forwarding is off where the Docker daemon runs: nothing routes out of its networks",
            )
        }
        (Ok(()), Iptables::Unknown(why) | Iptables::Unreadable(why)) => Check::warn(
            ID,
            format!(
                "cannot tell whether the Docker daemon keeps containers in (its internal networks have no \
                 route out only by its firewall rules): {why}"
            ),
            Some("make sure that daemon runs with iptables enabled (the default)".into()),
        ),
    }
}

fn docker_access(mode: DockerMode, daemon: &DockerDaemonFacts, file: &str) -> Check {
    const GATEWAY: &str = "OCSB_DOCKER=1: Docker through the gateway (no privileged containers or host \
        namespaces, binds only of what the sandbox may write, the project's own containers, networks and volumes)";
    match mode {
        DockerMode::Raw => Check::warn(
            "docker-access",
            "OCSB_DOCKER=raw: the agent has the host's Docker socket, and that is a way out of the sandbox: \
             `docker run -v /:/host` is root on this machine, and containers' traffic goes around the netlock \
             and the filter (dockerd makes their sockets as root, on the forward path)",
            Some(format!("echo OCSB_DOCKER=1 >> {file}")),
        ),
        DockerMode::Gateway => match daemon {
            DockerDaemonFacts::Answered { socket } => {
                Check::ok("docker-access", format!("{GATEWAY}; the daemon at {} answers", socket.display()))
            }
            // Not a failure: the sandbox works without Docker; the start says the same.
            DockerDaemonFacts::Unreachable(why) => Check::warn(
                "docker-access",
                format!("OCSB_DOCKER=1: Docker will not work in the sandbox: the gateway {}", why.what()),
                Some(why.fix()),
            ),
            DockerDaemonFacts::NoSocket { docker_host: Some(host) } => Check::warn(
                "docker-access",
                format!(
                    "OCSB_DOCKER=1: DOCKER_HOST={host} is not a unix socket, the only kind the gateway \
                     forwards to: the sandbox gets no Docker"
                ),
                Some("set DOCKER_HOST=unix:///PATH/TO/docker.sock, or OCSB_DOCKER=0".into()),
            ),
            DockerDaemonFacts::NoSocket { docker_host: None } | DockerDaemonFacts::NotAsked => Check::ok(
                "docker-access",
                "OCSB_DOCKER=1: no Docker daemon here (no /run/docker.sock): the sandbox gets no Docker",
            ),
        },
        DockerMode::Off => Check::ok("docker-access", "OCSB_DOCKER=0: no Docker socket in the sandbox"),
    }
}

fn opencode(o: &OpencodeFacts, file: &str) -> Check {
    let Some(path) = &o.found else {
        let wher =
            if o.setting.contains('/') { "does not exist or is not executable" } else { "is not in PATH" };
        return Check::fail(
            "opencode",
            format!("opencode not found: OCSB_OPENCODE_BIN={} {wher}", o.setting),
            format!("npm i -g opencode-ai, or set OCSB_OPENCODE_BIN=/path/to/opencode in {file}"),
        );
    };
    match &o.version {
        Ok(v) => Check::ok("opencode", format!("{} {v}", path.display())),
        Err(e) => Check::fail(
            "opencode",
            format!("{} does not run: {e}", path.display()),
            "npm i -g opencode-ai (reinstall), or point OCSB_OPENCODE_BIN at a working binary",
        ),
    }
}

fn port(p: &PortFacts, file: &str) -> Check {
    match &p.free {
        Ok(()) => Check::ok(p.id, format!("127.0.0.1:{} ({}) is free", p.port, p.setting)),
        Err(e) => Check::fail(
            p.id,
            format!(
                "port {} ({}) is busy on 127.0.0.1: {e}; another project or an old instance (or this project's `ocsb run`) holds it",
                p.port, p.setting
            ),
            format!(
                "ss -ltnp 'sport = :{}' shows who; or set another {} in {file}",
                p.port,
                setting_to_change(p.setting)
            ),
        ),
    }
}

/// OpenCode's port is the web port + 1: to move it, move the web port.
fn setting_to_change(setting: &str) -> &str {
    if setting.contains("+ 1") { "OCSB_WEB_PORT" } else { setting }
}

fn dbus_proxy(f: &Facts) -> Check {
    match (&f.dbus_proxy, f.notifications) {
        (Some(p), _) => Check::ok("xdg-dbus-proxy", format!("{} (desktop notifications)", p.display())),
        (None, false) => Check::ok("xdg-dbus-proxy", "not installed; not needed (OCSB_NOTIFICATIONS=0)"),
        (None, true) => Check::warn(
            "xdg-dbus-proxy",
            "not installed: no desktop notifications from the sandbox (optional)",
            Some("sudo apt-get install xdg-dbus-proxy".into()),
        ),
    }
}

fn git(g: &Result<String, String>) -> Check {
    match g {
        Ok(v) => Check::ok("git", v.clone()),
        Err(e) => Check::fail("git", format!("git not usable: {e}"), "sudo apt-get install git"),
    }
}

/// The other host programs: curl runs the `expect-pass`/`expect-block` self-tests, ncat carries
/// git over SSH through the filter (GIT_SSH_COMMAND's ProxyCommand), sg is how the sandbox gets
/// the netlock group with `OCSB_NETLOCK_ACQUIRE=sg`.
fn tools(f: &Facts) -> Vec<Check> {
    let found = |id: &'static str, p: &PathBuf, why: &str| Check::ok(id, format!("{} ({why})", p.display()));
    let mut out = vec![
        match &f.curl {
            Some(p) => found("curl", p, "self-tests"),
            None => Check::fail(
                "curl",
                "no root-owned curl in /usr/bin, /bin or /usr/local/bin: `run` and `egress verify` use it for the expect-pass/expect-block self-tests (never a curl from PATH)",
                "sudo apt-get install curl",
            ),
        },
        match &f.ncat {
            Some(p) => found("ncat", p, "git over SSH through the filter"),
            None => Check::warn(
                "ncat",
                "ncat not found: git over SSH from the sandbox (GIT_SSH_COMMAND's ProxyCommand) will fail",
                Some("sudo apt-get install ncat".into()),
            ),
        },
        // OpenCode's grep, glob and skill tools run ripgrep; without one on PATH OpenCode
        // downloads it from github.com into its cache on first use (through the filter).
        match &f.rg {
            Some(p) => found("ripgrep", p, "OpenCode's grep, glob and skill tools"),
            None => Check::warn(
                "ripgrep",
                "rg not found: OpenCode downloads ripgrep from github.com on first use; where the egress rules do not allow github.com its grep, glob and skill tools fail",
                Some("sudo apt-get install ripgrep".into()),
            ),
        },
    ];
    if f.netlock.acquire == NetlockAcquire::Sg {
        out.push(match &f.sg {
            Some(p) => found("sg", p, "OCSB_NETLOCK_ACQUIRE=sg"),
            None => Check::fail(
                "sg",
                "sg not found: OCSB_NETLOCK_ACQUIRE=sg needs it",
                "sudo apt-get install login (or unset OCSB_NETLOCK_ACQUIRE)",
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::check::Status;
    use crate::doctor::facts::ShimFacts;

    fn healthy() -> Facts {
        Facts {
            project: ProjectFacts::Inside { dir: "/p".into(), rules: Ok(4) },
            sandbox_enabled: true,
            kernel: KernelFacts {
                userns: Ok(()),
                as_root: false,
                userns_clone: None,
                max_user_namespaces: Some("63000".into()),
                apparmor_restrict: None,
                landlock_abi: 7,
                seccomp: true,
            },
            netlock: NetlockFacts {
                group: "opencode-sandbox".into(),
                gid: Some(995),
                user: "me".into(),
                member: false,
                acquire: NetlockAcquire::Exec,
                shim: ShimFacts {
                    path: "/usr/local/libexec/ocsb/ocsb-netlock-exec".into(),
                    meta: Some((0, 995, 0o2755)),
                    group_name: Some("opencode-sandbox".into()),
                    helper_installed: true,
                    unit_installed: true,
                    prefix: "/usr/local".into(),
                },
                group_files: Some(Ok(vec![])),
                helper: HelperFacts::Status {
                    state: "enforcing".into(),
                    pid: Some(42),
                    alive: true,
                    gid: Some(995),
                    error: None,
                },
                probe: ProbeFacts::Locked { gid: 995 },
            },
            egress: EgressFacts::Builtin,
            loopback_ports: vec![],
            network: NetworkMode::Netlock,
            isolated_net: Ok(()),
            docker: DockerMode::Off,
            docker_daemon: DockerDaemonFacts::NotAsked,
            docker_firewall: None,
            opencode: OpencodeFacts {
                setting: "opencode".into(),
                found: Some("/usr/bin/opencode".into()),
                version: Ok("1.18.33".into()),
            },
            ports: vec![PortFacts { id: "port-web", setting: "OCSB_WEB_PORT", port: 4196, free: Ok(()) }],
            notifications: true,
            dbus_proxy: Some(PathBuf::from("/usr/bin/xdg-dbus-proxy")),
            git: Ok("git version 2.39.5".into()),
            curl: Some("/usr/bin/curl".into()),
            ncat: Some("/usr/bin/ncat".into()),
            rg: Some("/usr/bin/rg".into()),
            sg: None,
            home: vec![(".cargo/bin".into(), "ro", "default")],
        }
    }

    fn find(checks: &[Check], id: &str) -> Check {
        checks.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no check {id}")).clone()
    }

    #[test]
    fn the_home_is_listed_with_where_each_entry_comes_from() {
        let mut f = healthy();
        f.home.push((".cache".into(), "own", "OCSB_RW_HOME"));
        let c = judge(&f).into_iter().find(|c| c.id == "home").unwrap();
        assert_eq!(c.status, Status::Ok);
        assert!(
            c.message.contains("~/.cargo/bin (ro, default), ~/.cache (own, OCSB_RW_HOME)")
                && c.message.contains("the rest of ~ is absent"),
            "{}",
            c.message
        );
        f.home.clear();
        let c = judge(&f).into_iter().find(|c| c.id == "home").unwrap();
        assert!(c.message.contains("holds only: nothing"), "{}", c.message);
    }
    #[test]
    fn a_healthy_machine_is_all_ok() {
        let c = judge(&healthy());
        assert!(c.iter().all(|c| c.status == Status::Ok), "{c:#?}");
    }

    #[test]
    fn every_fail_has_a_fix() {
        let mut f = healthy();
        f.kernel = KernelFacts { userns: Err("EPERM".into()), ..f.kernel.clone() };
        f.netlock.gid = None;
        f.netlock.shim.meta = None;
        f.netlock.helper = HelperFacts::NoStatusFile;
        f.netlock.probe = ProbeFacts::Open { gid: 1 };
        f.opencode.found = None;
        f.git = Err("not found".into());
        f.curl = None;
        f.netlock.acquire = NetlockAcquire::Sg;
        for c in judge(&f) {
            if c.status == Status::Fail {
                assert!(c.fix.as_deref().is_some_and(|s| !s.is_empty()), "{c:?}");
            }
        }
    }

    #[test]
    fn without_the_netlock_the_isolated_mode_is_recommended_and_needs_nothing() {
        let mut f = healthy();
        f.netlock.gid = None;
        f.netlock.shim.meta = None;
        f.netlock.helper = HelperFacts::NoStatusFile;
        let c = judge(&f);
        let group = find(&c, "netlock-group");
        assert_eq!(group.status, Status::Fail);
        assert!(group.fix.unwrap().contains("OCSB_NETWORK=isolated"));
        f.network = NetworkMode::Isolated;
        f.kernel.landlock_abi = 4; // Ubuntu 24.04's stock kernel
        let c = judge(&f);
        assert!(c.iter().all(|c| c.status != Status::Fail), "{c:#?}");
        assert!(find(&c, "network").message.starts_with("isolated"));
        let ll = find(&c, "landlock");
        assert_eq!(ll.status, Status::Warn);
        assert!(ll.message.contains("ioctl on devices") && !ll.message.contains("truncate"), "{ll}");
        f.isolated_net = Err((
            "isolated network: load the nftables table: Operation not supported".into(),
            "modprobe".into(),
        ));
        assert_eq!(find(&judge(&f), "network").status, Status::Fail);
    }

    #[test]
    fn userns_fix_follows_the_sysctl() {
        let mut k = KernelFacts { userns: Err("unshare: EPERM".into()), ..healthy().kernel };
        k.apparmor_restrict = Some("1".into());
        let usr = std::path::Path::new("/usr");
        let c = userns(&k, true, usr);
        assert_eq!(c.status, Status::Fail);
        assert!(c.message.starts_with("the sandbox cannot be created"), "{c}");
        // Ubuntu's restriction: the profile ocsb ships, never the machine-wide switch.
        let fix = c.fix.unwrap();
        assert!(fix.starts_with("load ocsb's AppArmor profile"), "{fix}");
        assert!(
            fix.contains("`sudo apparmor_parser -r /etc/apparmor.d/ocsb`") && fix.contains("/usr/bin/ocsb"),
            "{fix}"
        );
        assert!(!fix.contains("apparmor_restrict_unprivileged_userns=0"), "{fix}");
        let fix = userns(&k, true, std::path::Path::new("/usr/local")).fix.unwrap();
        assert!(fix.contains("/etc/apparmor.d/ocsb-usr-local") && fix.contains("PREFIX=/usr/local"), "{fix}");
        k.userns_clone = Some("0".into());
        assert!(userns(&k, true, usr).fix.unwrap().contains("kernel.unprivileged_userns_clone=1"));
        assert_eq!(userns(&k, false, usr).status, Status::Warn);
        // As root the live test passes, but the sysctl still restricts ordinary users.
        let root = KernelFacts { userns: Ok(()), as_root: true, ..k };
        assert_eq!(userns(&root, true, usr).status, Status::Fail);
        let root = KernelFacts { userns_clone: None, apparmor_restrict: None, ..root };
        assert_eq!(userns(&root, true, usr).status, Status::Ok);
    }

    #[test]
    fn an_old_landlock_names_the_isolated_mode_before_a_kernel() {
        for abi in 1..6 {
            let c = landlock(abi, true, false);
            assert_eq!(c.status, Status::Fail);
            let fix = c.fix.unwrap();
            let iso = fix.find("OCSB_NETWORK=isolated").expect("names the isolated mode");
            assert!(iso < fix.find("Linux >= 6.12").unwrap(), "{fix}");
            assert!(!fix.contains("OCSB_SANDBOX"), "{fix}");
        }
        // Landlock off: enabled first (the isolated mode needs ABI 1 too), then the mode.
        let fix = landlock(0, true, false).fix.unwrap();
        assert!(fix.find("lsm=").unwrap() < fix.find("OCSB_NETWORK=isolated").unwrap(), "{fix}");
        // In the isolated mode itself, ABI 1 to 5 is a warning, not a fix to switch modes.
        assert_eq!(landlock(3, true, true).status, Status::Warn);
        assert!(!landlock(0, true, true).fix.unwrap().contains("OCSB_NETWORK=isolated"));
        // The loopback check on such a kernel says the same.
        let mut f = healthy();
        f.kernel.landlock_abi = 3;
        let lo = find(&judge(&f), "loopback");
        assert!(lo.fix.as_deref().unwrap().contains("OCSB_NETWORK=isolated"), "{lo}");
    }

    #[test]
    fn landlock_needs_abi_6() {
        assert_eq!(landlock(6, true, false).status, Status::Ok);
        assert_eq!(landlock(5, true, false).status, Status::Fail);
        assert_eq!(landlock(0, false, false).status, Status::Warn);
    }

    #[test]
    fn shim_mode_and_group() {
        let mut f = healthy();
        f.netlock.shim.meta = Some((0, 0, 0o755));
        f.netlock.shim.group_name = Some("root".into());
        let c = netlock_shim(&f.netlock);
        assert_eq!(
            c.to_string(),
            "fail netlock-shim: /usr/local/libexec/ocsb/ocsb-netlock-exec is 0755 uid 0:root, needs 2755 root:opencode-sandbox; \
             fix: sudo chown root:opencode-sandbox /usr/local/libexec/ocsb/ocsb-netlock-exec && sudo chmod 2755 /usr/local/libexec/ocsb/ocsb-netlock-exec"
        );
        f.netlock.acquire = NetlockAcquire::Sg;
        assert_eq!(netlock_shim(&f.netlock).status, Status::Ok);
        assert_eq!(netlock_group(&f.netlock).fix.as_deref(), Some("sudo usermod -aG opencode-sandbox me"));
    }

    #[test]
    fn helper_states() {
        let mut n = healthy().netlock;
        let st = |state: &str, alive| HelperFacts::Status {
            state: state.into(),
            pid: Some(42),
            alive,
            gid: Some(995),
            error: Some("boom".into()),
        };
        n.helper = st("enforcing", false);
        assert_eq!(netlock_helper(&n).status, Status::Fail);
        n.helper = st("removed", true);
        assert_eq!(netlock_helper(&n).fix.as_deref(), Some("ocsb netlock setup"));
        n.helper = st("error", true);
        assert!(netlock_helper(&n).message.contains("boom"));
        n.helper = HelperFacts::Status {
            state: "enforcing".into(),
            pid: Some(1),
            alive: true,
            gid: Some(7),
            error: None,
        };
        assert!(netlock_helper(&n).message.contains("locks gid 7"));
        n.shim.unit_installed = false;
        n.shim.helper_installed = false;
        n.helper = HelperFacts::NoStatusFile;
        assert_eq!(
            netlock_helper(&n).fix.as_deref(),
            Some(
                "sudo make install PREFIX=/usr/local (in the ocsb source tree), or install the ocsb package"
            )
        );
    }

    #[test]
    fn outside_a_project_nothing_project_related_fails() {
        let mut f = healthy();
        f.project = ProjectFacts::Outside { dir: "/".into() };
        let c = judge(&f);
        assert!(c.iter().all(|c| c.status == Status::Ok), "{c:#?}");
        assert!(!c.iter().any(|c| c.id == "egress-rules"));
        f.docker = DockerMode::Raw;
        let raw = find(&judge(&f), "docker-access");
        assert_eq!(raw.status, Status::Warn, "{raw:?}");
        assert!(raw.message.contains("way out"), "{raw:?}");
        assert_eq!(raw.fix.as_deref(), Some("echo OCSB_DOCKER=1 >> ~/.config/opencode-sandbox/sandbox.conf"));
        f.docker = DockerMode::Gateway;
        assert_eq!(find(&judge(&f), "docker-access").status, Status::Ok);
    }

    /// A daemon the user cannot reach is not "Docker through the gateway": it warns with the
    /// cause and its fix (the sandbox still works without Docker).
    #[test]
    fn a_daemon_the_user_cannot_reach_warns_with_the_cause_and_the_fix() {
        use ocsb_docker_gw::reach::{Cause, Unreachable};
        let mut f = healthy();
        f.docker = DockerMode::Gateway;
        f.docker_daemon = DockerDaemonFacts::Unreachable(Unreachable {
            socket: "/var/run/docker.sock".into(),
            cause: Cause::Denied { group: Some("docker".into()) },
        });
        assert_eq!(
            find(&judge(&f), "docker-access").to_string(),
            "warn docker-access: OCSB_DOCKER=1: Docker will not work in the sandbox: the gateway cannot reach \
             the Docker daemon at /var/run/docker.sock: permission denied; fix: add yourself to the group \
             docker (sudo usermod -aG docker $USER, then log in again) or set OCSB_DOCKER=0"
        );
        f.docker_daemon = DockerDaemonFacts::Answered { socket: "/run/docker.sock".into() };
        let ok = find(&judge(&f), "docker-access");
        assert!(
            ok.status == Status::Ok && ok.message.ends_with("the daemon at /run/docker.sock answers"),
            "{ok:?}"
        );
        f.docker_daemon = DockerDaemonFacts::NoSocket { docker_host: Some("tcp://d:2375".into()) };
        assert_eq!(find(&judge(&f), "docker-access").status, Status::Warn);
        f.docker = DockerMode::Off;
        assert_eq!(find(&judge(&f), "docker-access").status, Status::Ok);
    }

    /// A daemon without firewall rules that forwards fails, with the gateway's own words.
    #[test]
    fn a_daemon_that_lets_containers_out_fails() {
        use ocsb_policy::docker::firewall::{DaemonNet, Iptables};
        let mut f = healthy();
        assert!(judge(&f).iter().all(|c| c.id != "docker-firewall"), "no daemon, no check");
        let net = |iptables, forwarding| Some(DaemonNet { iptables, forwarding });
        f.docker_firewall = net(Iptables::Off("--iptables=false".into()), Some(true));
        let c = find(&judge(&f), "docker-firewall");
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.message.starts_with("the Docker daemon runs with --iptables=false and IP forwarding on"),
            "{c}"
        );
        assert!(c.to_string().contains("fix: start dockerd with iptables enabled"), "{c}");
        f.docker_firewall = net(Iptables::Off("--iptables=false".into()), Some(false));
        assert_eq!(find(&judge(&f), "docker-firewall").status, Status::Ok);
        f.docker_firewall = net(Iptables::On, Some(true));
        assert_eq!(find(&judge(&f), "docker-firewall").status, Status::Ok);
        f.docker_firewall = net(Iptables::Unknown("a daemon in a VM".into()), Some(true));
        assert_eq!(find(&judge(&f), "docker-firewall").status, Status::Warn);
    }

    #[test]
    fn tools_curl_fails_ncat_warns_sg_only_when_used() {
        let mut f = healthy();
        assert!(!judge(&f).iter().any(|c| c.id == "sg"));
        assert_eq!(find(&judge(&f), "ripgrep").status, Status::Ok);
        f.curl = None;
        f.ncat = None;
        f.rg = None;
        f.netlock.acquire = NetlockAcquire::Sg;
        let c = judge(&f);
        assert_eq!(find(&c, "curl").status, Status::Fail);
        assert_eq!(find(&c, "ncat").status, Status::Warn);
        assert_eq!(find(&c, "ripgrep").status, Status::Warn);
        assert_eq!(
            find(&c, "sg").fix.as_deref(),
            Some("sudo apt-get install login (or unset OCSB_NETLOCK_ACQUIRE)")
        );
    }

    #[test]
    fn busy_port_names_the_setting_to_change() {
        let p = PortFacts {
            id: "port-opencode",
            setting: "OCSB_WEB_PORT + 1",
            port: 4197,
            free: Err("in use".into()),
        };
        let c = port(&p, ".opencode-sandbox/local/sandbox.conf");
        assert!(c.message.starts_with("port 4197 (OCSB_WEB_PORT + 1) is busy"), "{c}");
        assert!(
            c.fix.unwrap().ends_with("set another OCSB_WEB_PORT in .opencode-sandbox/local/sandbox.conf")
        );
    }

    #[test]
    fn a_file_of_the_netlock_group_fails_with_the_path() {
        let mut f = healthy();
        f.netlock.group_files = Some(Ok(vec!["/opt/tool/cache".into()]));
        let c = netlock_group_files(&f.netlock).unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(c.message.contains("owns /opt/tool/cache"), "{c}");
        assert_eq!(
            c.fix.as_deref(),
            Some("sudo chgrp root /opt/tool/cache (the group must own nothing but the shim)")
        );
        f.netlock.group_files = Some(Err("stopped after 2000000 entries in /usr/x".into()));
        let c = netlock_group_files(&f.netlock).unwrap();
        assert_eq!(c.status, Status::Warn, "an incomplete search claims nothing: {c}");
        f.netlock.group_files = None;
        assert!(netlock_group_files(&f.netlock).is_none(), "no group: nothing to check");
    }

    #[test]
    fn loopback_says_what_is_reachable() {
        let mut f = healthy();
        f.loopback_ports = vec![5432];
        let c = loopback(&f);
        assert_eq!(c.status, Status::Ok);
        assert!(c.message.contains("OCSB_LOOPBACK_PORTS 5432"), "{c}");
        f.kernel.landlock_abi = 3;
        assert_eq!(loopback(&f).status, Status::Warn);
        f.kernel.landlock_abi = 7;
        f.sandbox_enabled = false;
        assert!(loopback(&f).message.starts_with("OCSB_SANDBOX=0: no landlock"));
    }
}
