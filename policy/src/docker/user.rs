//! Who a container runs as, and with which capabilities: nothing a container leaves on a host
//! path is more than the sandbox could leave there.
//!
//! *Why*: the daemon runs containers as root of the host (no user namespace), and a bind is
//! the host directory itself. With Docker's defaults a container could `chown` a program to
//! root and make it set-user-id, or `mknod` a world-writable node of the host's disk, in the
//! project, where every other local user could use it. The sandbox can do neither.
//!
//! - A container with a host directory (`-v /path:…`, `--mount type=bind`, `--volumes-from`)
//!   runs as the sandbox's user and group (`--user` may name only them), with
//!   `no-new-privileges` (no set-user-id program of the image makes it root again), no added
//!   groups, and without the capabilities that change a file's owner or mode beyond its own
//!   files. What it writes there is the user's own, as the sandbox's files are.
//! - Every container loses `MKNOD` (no device node anywhere), `SETFCAP` (no file capabilities)
//!   and `FSETID` (a set-group-id bit only for its own groups; writes clear set-user-id).
//! - A container without a host directory keeps the image's user, root included, and Docker's
//!   other default capabilities: what it changes stays in its own layers and volumes, which
//!   live in the daemon's directory no other user can reach, and images need them (`apt-get`
//!   drops to its own user with SETUID and SETGID; `dpkg` sets owners with CHOWN).

use serde_json::{Map, Value};

use super::create::{strings, truthy};
use super::{Context, Refusal, Verdict};

/// Taken from every container: device nodes, file capabilities, and set-group-id bits for
/// groups the process is not in; nothing a coding agent's container needs at run time.
pub const DROPPED: &[&str] = &["MKNOD", "SETFCAP", "FSETID"];

/// Taken as well from a container with a host directory: the powers of root over files it does
/// not own. It runs as the user, so it has none of them in effect; dropped from its bounding
/// set too, so that no program it runs can have them.
pub const DROPPED_WITH_HOST_PATHS: &[&str] = &["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"];

/// The home a container running as the user gets when nothing sets one: the image's user
/// database has no entry for the user (Docker would set `/`, where it cannot write, and
/// `npm`, `pip` and their like fail), and `/tmp` is writable in every image.
pub const HOME: &str = "/tmp";

/// Whether a container's `HostConfig` gives it a host directory: a bind (`Binds` with a path,
/// a `Mounts` entry of type `bind`) or another container's mounts (`VolumesFrom`, which may
/// hold binds).
pub fn has_host_paths(h: &Map<String, Value>) -> bool {
    let binds = h.get("Binds").and_then(Value::as_array).into_iter().flatten();
    let mounts = h.get("Mounts").and_then(Value::as_array).into_iter().flatten();
    binds.filter_map(Value::as_str).any(|b| b.starts_with('/'))
        || mounts.into_iter().any(|m| m.get("Type").and_then(Value::as_str) == Some("bind"))
        || h.get("VolumesFrom").is_some_and(truthy)
}

/// Completes a container's configuration (`cfg`, its `HostConfig` already checked): the
/// capabilities dropped, and for one with a host directory the user, groups, home and
/// `no-new-privileges`.
pub fn container(cfg: &mut Map<String, Value>, ctx: &Context) -> Verdict<()> {
    let Some(h) = cfg.get_mut("HostConfig").and_then(Value::as_object_mut) else {
        return Err(Refusal::new("body", "`HostConfig` is not an object"));
    };
    let bound = has_host_paths(h);
    let dropped: Vec<&str> =
        DROPPED.iter().chain(if bound { DROPPED_WITH_HOST_PATHS } else { &[] }).copied().collect();
    for cap in strings(h.get("CapAdd")) {
        let name = cap.trim_start_matches("CAP_").to_ascii_uppercase();
        if dropped.contains(&name.as_str()) {
            let why = if DROPPED.contains(&name.as_str()) {
                "it makes device nodes, file capabilities or set-group-id files the sandbox cannot"
            } else {
                "a container with a host directory has no power over files beyond the user's"
            };
            return Err(Refusal::new("capabilities", format!("--cap-add {cap}: {why}")));
        }
    }
    let mut drop = strings(h.get("CapDrop"));
    for cap in &dropped {
        if !drop.iter().any(|d| d.trim_start_matches("CAP_").eq_ignore_ascii_case(cap)) {
            drop.push(cap.to_string());
        }
    }
    h.insert("CapDrop".into(), Value::from(drop));
    if !bound {
        return Ok(());
    }

    let gids: Vec<u32> = std::iter::once(ctx.gid).chain(ctx.own_gids.iter().copied()).collect();
    let user_help = format!(
        "leave --user out (or --user {}:{}); for root in a container, use a volume instead of the host directory",
        ctx.uid, ctx.gid
    );
    for g in strings(h.get("GroupAdd")) {
        if !g.parse::<u32>().is_ok_and(|g| gids.contains(&g)) {
            return Err(Refusal::new(
                "user",
                format!("--group-add {g}: a container with a host directory has the user's own group only"),
            )
            .allow("leave --group-add out"));
        }
    }
    let mut opts = strings(h.get("SecurityOpt"));
    if !opts.iter().any(|o| o.to_ascii_lowercase().starts_with("no-new-privileges")) {
        opts.push("no-new-privileges".into());
    }
    h.insert("SecurityOpt".into(), Value::from(opts));

    let asked = cfg.get("User").and_then(Value::as_str).unwrap_or_default().to_string();
    let user = if asked.is_empty() {
        format!("{}:{}", ctx.uid, ctx.gid)
    } else {
        let (u, g) = asked.split_once(':').map_or((asked.as_str(), None), |(u, g)| (u, Some(g)));
        let gid = match g {
            None => Some(ctx.gid),
            Some(g) => g.parse::<u32>().ok().filter(|g| gids.contains(g)),
        };
        match (u.parse::<u32>().ok().filter(|u| *u == ctx.uid), gid) {
            (Some(uid), Some(gid)) => format!("{uid}:{gid}"),
            _ => {
                return Err(Refusal::new(
                    "user",
                    format!(
                        "--user {asked}: a container with a host directory runs as you ({}:{}), so that what it writes there is yours",
                        ctx.uid, ctx.gid
                    ),
                )
                .allow(user_help));
            }
        }
    };
    cfg.insert("User".into(), Value::String(user));
    let env = cfg.entry("Env").or_insert_with(|| Value::Array(Vec::new()));
    if env.is_null() {
        *env = Value::Array(Vec::new());
    }
    let env = env.as_array_mut().ok_or_else(|| Refusal::new("body", "`Env` is not a list"))?;
    if !env.iter().filter_map(Value::as_str).any(|e| e == "HOME" || e.starts_with("HOME=")) {
        env.push(Value::String(format!("HOME={HOME}")));
    }
    Ok(())
}

/// An exec in a container (`docker exec -u`): in one with a host directory, only as the user
/// the container runs as (root there would have the powers the container was created
/// without). `container` is the daemon's inspection of it; unknown, it is taken to have one.
pub fn exec(body: &Value, container: Option<&Value>) -> Verdict<()> {
    let asked = body.get("User").and_then(Value::as_str).unwrap_or_default();
    if asked.is_empty() {
        return Ok(());
    }
    let bound = bound(container);
    let own = container.and_then(|c| c.get("Config")?.get("User")?.as_str()).unwrap_or_default();
    if bound && asked != own {
        return Err(Refusal::new(
            "user",
            format!("exec --user {asked}: the container has a host directory and runs as {own}"),
        )
        .allow("leave --user out of docker exec"));
    }
    Ok(())
}

/// `docker cp` into a container (`PUT /containers/{id}/archive`): refused for one with a host
/// directory. *Why*: the daemon unpacks the archive itself, as root, with the owners, modes
/// and device nodes the archive names, wherever the path leads (into the bind too); the
/// container's user and capabilities play no part.
pub fn archive(container: Option<&Value>) -> Verdict<()> {
    if bound(container) {
        return Err(Refusal::new(
            "user",
            "docker cp into a container with a host directory: the daemon would unpack it as root, with the archive's owners and modes",
        )
        .allow("write the file into the project from the sandbox (the container sees it there), or copy into a container without a host directory"));
    }
    Ok(())
}

/// Whether an inspected container has a host directory; unknown, it is taken to have one.
fn bound(container: Option<&Value>) -> bool {
    container.is_none_or(|c| {
        let mounts = c.get("Mounts").and_then(Value::as_array).into_iter().flatten();
        mounts.into_iter().any(|m| m.get("Type").and_then(Value::as_str) == Some("bind"))
            || c.get("HostConfig").and_then(Value::as_object).is_some_and(has_host_paths)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Context {
        Context {
            project: "shop".into(),
            network: "ocsb-shop".into(),
            writable: vec!["/home/u/shop".into()],
            uid: 1990,
            gid: 1990,
            own_gids: vec![995],
            ..Context::default()
        }
    }

    fn check(body: Value) -> Verdict<Value> {
        let mut b = body;
        super::super::create::container(&mut b, &ctx(), &|p| Some(p.to_path_buf())).map(|_| b)
    }

    fn caps(v: &Value) -> Vec<&str> {
        v["HostConfig"]["CapDrop"].as_array().unwrap().iter().filter_map(Value::as_str).collect()
    }

    #[test]
    fn a_container_with_the_project_runs_as_the_user_without_powers_over_files() {
        for host in [
            json!({"Binds": ["/home/u/shop:/src"]}),
            json!({"Mounts": [{"Type": "bind", "Source": "/home/u/shop", "Target": "/src"}]}),
            json!({"VolumesFrom": ["web"]}),
        ] {
            let b = check(json!({"Image": "x", "HostConfig": host})).unwrap();
            assert_eq!(b["User"], "1990:1990", "{host}");
            assert_eq!(
                caps(&b),
                ["MKNOD", "SETFCAP", "FSETID", "CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"],
                "{host}"
            );
            assert_eq!(b["HostConfig"]["SecurityOpt"], json!(["no-new-privileges"]), "{host}");
            assert_eq!(b["Env"], json!(["HOME=/tmp"]), "{host}");
        }
        // The user's own ids pass (and a group of the user's own), a bare uid gets the group;
        // the client's HOME, drops and options are kept.
        let b = check(json!({"Image": "x", "User": "1990", "Env": ["HOME=/w", "A=1"],
            "HostConfig": {"Binds": ["/home/u/shop:/src"], "CapDrop": ["NET_RAW", "CAP_MKNOD"],
            "SecurityOpt": ["no-new-privileges:true"], "GroupAdd": ["995"]}}))
        .unwrap();
        assert_eq!(b["User"], "1990:1990");
        assert_eq!(b["Env"], json!(["HOME=/w", "A=1"]));
        assert_eq!(caps(&b)[..3], ["NET_RAW", "CAP_MKNOD", "SETFCAP"]);
        assert!(!caps(&b).contains(&"MKNOD"), "dropped once: {:?}", caps(&b));
        assert_eq!(b["HostConfig"]["SecurityOpt"], json!(["no-new-privileges:true"]));
        assert_eq!(
            check(json!({"Image": "x", "User": "1990:995", "HostConfig": {"Binds": ["/home/u/shop:/s"]}}))
                .unwrap()["User"],
            "1990:995"
        );
    }

    #[test]
    fn a_container_without_a_host_directory_keeps_the_images_user_and_its_defaults() {
        for b in [
            check(json!({"Image": "x"})).unwrap(),
            check(json!({"Image": "x", "User": "root", "HostConfig": {"Binds": ["cache:/c"], "CapAdd": ["CHOWN"],
                "Mounts": [{"Type": "volume", "Source": "v", "Target": "/v"}, {"Type": "tmpfs", "Target": "/t"}]}}))
            .unwrap(),
        ] {
            assert_eq!(caps(&b), ["MKNOD", "SETFCAP", "FSETID"]);
            assert!(b["HostConfig"].get("SecurityOpt").is_none());
            assert!(b["User"].is_null() || b["User"] == "root", "{b}");
            assert!(b.get("Env").is_none());
        }
    }

    #[test]
    fn what_would_leave_another_users_files_is_refused_by_its_rule() {
        let bound = |extra: Value| {
            let mut b = json!({"Image": "x", "HostConfig": {"Binds": ["/home/u/shop:/src"]}});
            for (k, v) in extra.as_object().unwrap() {
                if k == "HostConfig" {
                    for (hk, hv) in v.as_object().unwrap() {
                        b["HostConfig"][hk] = hv.clone();
                    }
                } else {
                    b[k] = v.clone();
                }
            }
            b
        };
        for (body, rule, text) in [
            (
                bound(json!({"User": "root"})),
                "user",
                "--user root: a container with a host directory runs as you (1990:1990)",
            ),
            (bound(json!({"User": "0"})), "user", "--user 0"),
            (bound(json!({"User": "0:0"})), "user", "--user 0:0"),
            (bound(json!({"User": "1990:0"})), "user", "--user 1990:0"),
            (bound(json!({"User": "1000"})), "user", "--user 1000"),
            (bound(json!({"User": "node"})), "user", "--user node"),
            (bound(json!({"HostConfig": {"GroupAdd": ["0"]}})), "user", "--group-add 0"),
            (bound(json!({"HostConfig": {"GroupAdd": ["disk"]}})), "user", "--group-add disk"),
            (bound(json!({"HostConfig": {"CapAdd": ["CHOWN"]}})), "capabilities", "--cap-add CHOWN"),
            (
                bound(json!({"HostConfig": {"CapAdd": ["CAP_DAC_OVERRIDE"]}})),
                "capabilities",
                "host directory",
            ),
            (bound(json!({"HostConfig": {"CapAdd": ["setuid"]}})), "capabilities", "setuid"),
            (json!({"Image": "x", "HostConfig": {"CapAdd": ["MKNOD"]}}), "capabilities", "device nodes"),
            (json!({"Image": "x", "HostConfig": {"CapAdd": ["SETFCAP"]}}), "capabilities", "SETFCAP"),
            (json!({"Image": "x", "HostConfig": {"CapAdd": ["CAP_FSETID"]}}), "capabilities", "FSETID"),
            (
                bound(json!({"HostConfig": {"SecurityOpt": ["no-new-privileges=false"]}})),
                "security-opt",
                "no-new",
            ),
        ] {
            let r = check(body.clone()).expect_err("refused");
            assert_eq!(r.rule, rule, "{body}");
            assert!(r.what.contains(text), "{body}: {}", r.what);
        }
        let r = check(bound(json!({"User": "root"}))).unwrap_err();
        assert!(r.allow.is_some_and(|a| a.contains("use a volume")));
    }

    #[test]
    fn an_exec_in_a_container_with_a_host_directory_runs_as_the_container() {
        let bound =
            json!({"Config": {"User": "1990:1990"}, "Mounts": [{"Type": "bind", "Source": "/home/u/shop"}]});
        let free =
            json!({"Config": {"User": ""}, "Mounts": [{"Type": "volume", "Name": "v"}], "HostConfig": {}});
        assert!(exec(&json!({"Cmd": ["sh"]}), Some(&bound)).is_ok());
        assert!(exec(&json!({"Cmd": ["sh"], "User": "1990:1990"}), Some(&bound)).is_ok());
        for u in ["root", "0", "0:0", "1990:0"] {
            let r = exec(&json!({"Cmd": ["sh"], "User": u}), Some(&bound)).unwrap_err();
            assert_eq!(r.rule, "user", "{u}");
        }
        assert_eq!(exec(&json!({"User": "root"}), None).unwrap_err().rule, "user", "unknown: refused");
        assert!(exec(&json!({"User": "root"}), Some(&free)).is_ok(), "no host directory: its own business");
        assert_eq!(archive(Some(&bound)).unwrap_err().rule, "user");
        assert_eq!(archive(None).unwrap_err().rule, "user");
        assert!(archive(Some(&free)).is_ok());
    }
}
