//! Networks, volumes, builds and pulls the agent asks for.

use serde_json::{Map, Value};

use super::create::{truthy, unknown as known};
use super::{Context, Refusal, Verdict};

/// `POST /networks/create`: made internal (no route out of the host: the filter, reached at
/// the network's gateway address, is the way out) and labelled. Only the `bridge` driver.
pub fn network(body: &mut Value, ctx: &Context) -> Verdict<()> {
    let o = object(body)?;
    known(
        o,
        &[
            "Name",
            "CheckDuplicate",
            "Driver",
            "Scope",
            "Internal",
            "Attachable",
            "Ingress",
            "IPAM",
            "EnableIPv6",
            "EnableIPv4",
            "Options",
            "Labels",
            "ConfigOnly",
            "ConfigFrom",
        ],
        "",
    )?;
    let driver = o.get("Driver").and_then(Value::as_str).unwrap_or_default();
    if !matches!(driver, "" | "bridge") {
        return Err(Refusal::new(
            "network",
            format!("network driver {driver}: only bridge networks are served"),
        ));
    }
    if o.get("Options").is_some_and(truthy)
        || o.get("ConfigFrom").is_some_and(truthy)
        || o.get("Ingress").is_some_and(truthy)
    {
        return Err(Refusal::new("network", "network driver options are not served"));
    }
    // Addresses are Docker's to choose from its pools, which keep clear of the host's routes:
    // a subnet or gateway of the agent's could take the LAN's router address onto a bridge of
    // this host, and the filter would serve that network's clients there.
    if let Some(ipam) = o.get("IPAM").and_then(Value::as_object) {
        known(ipam, &["Driver", "Config", "Options"], "IPAM.")?;
        let driver = ipam.get("Driver").and_then(Value::as_str).unwrap_or_default();
        let configs = ipam.get("Config").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        // Any field of a pool set, in whatever case it is spelled, is an address chosen.
        let chosen = |c: &Value| c.as_object().map_or(truthy(c), |m| m.values().any(truthy));
        if !matches!(driver, "" | "default")
            || ipam.get("Options").is_some_and(truthy)
            || configs.iter().any(chosen)
        {
            return Err(Refusal::new(
                "network",
                "addresses of the agent's choosing (--subnet, --gateway, --ip-range, IPAM drivers)",
            )
            .allow("let Docker choose the network's addresses (no --subnet or --gateway)"));
        }
    }
    // `ocsb-<name>` is the network of project `name`: another project's agent taking it first
    // would make that project's gateway refuse its own network. A second network of a name
    // already taken would make the name ambiguous.
    let name = o.get("Name").and_then(Value::as_str).unwrap_or_default();
    if name.to_ascii_lowercase().starts_with("ocsb-") && name != ctx.network {
        return Err(Refusal::new("network", format!("{name}: names ocsb-* are the projects' own networks")));
    }
    o.insert("CheckDuplicate".into(), Value::Bool(true));
    o.insert("Internal".into(), Value::Bool(true));
    label(o, ctx);
    Ok(())
}

/// `POST /volumes/create`: labelled, the `local` driver without options (`o=bind` with a
/// `device` would be a bind of any host path).
pub fn volume(body: &mut Value, ctx: &Context) -> Verdict<()> {
    let o = object(body)?;
    known(o, &["Name", "Driver", "DriverOpts", "Labels", "ClusterVolumeSpec"], "")?;
    let driver = o.get("Driver").and_then(Value::as_str).unwrap_or_default();
    if !matches!(driver, "" | "local") || o.get("DriverOpts").is_some_and(truthy) {
        return Err(Refusal::new("volume", "volume drivers and their options can bind any host path")
            .allow("a plain named volume: docker volume create NAME"));
    }
    label(o, ctx);
    Ok(())
}

/// The query of `POST /build`: the classic builder, its `RUN` steps on the project's network
/// (so through the filter), and no context the daemon would fetch itself.
pub fn build(query: &mut Vec<(String, String)>, ctx: &Context) -> Verdict<()> {
    super::dockerfile::query(query)?;
    for (k, v) in query.iter() {
        match k.as_str() {
            "remote" if !v.is_empty() => {
                return Err(Refusal::new(
                    "build",
                    "a remote build context is fetched by the daemon, outside the filter",
                )
                .allow("clone or download it in the sandbox and build from a directory"));
            }
            "version" if v == "2" => {
                return Err(
                    Refusal::new("build", "BuildKit is not served").allow("DOCKER_BUILDKIT=0 docker build …")
                );
            }
            "session" | "buildid" | "outputs" if !v.is_empty() => {
                return Err(
                    Refusal::new("build", "BuildKit is not served").allow("DOCKER_BUILDKIT=0 docker build …")
                );
            }
            "cgroupparent" if !v.is_empty() => {
                return Err(Refusal::new(
                    "runtime",
                    "a build in another cgroup escapes the limits the daemon sets",
                ));
            }
            "networkmode"
                if !matches!(v.as_str(), "" | "default" | "bridge" | "none") && v != &ctx.network =>
            {
                return Err(Refusal::new("network", format!("a build on network {v}: outside the filter")));
            }
            _ => {}
        }
    }
    query.retain(|(k, _)| k != "networkmode");
    query.push(("networkmode".into(), ctx.network.clone()));
    Ok(())
}

/// The query of `POST /images/create`: a pull by name (the daemon fetches it), or an import of
/// the request's body; never an import the daemon would fetch from a URL, nor one that plants
/// `ONBUILD` triggers (`--change 'ONBUILD ADD http://…'`): a later build from that image would
/// run them unseen, and the gateway reads only the Dockerfile it is given.
pub fn pull(query: &[(String, String)]) -> Verdict<()> {
    // The daemon reads all `changes` as one Dockerfile (with continuations): any mention is refused.
    // Go lower-cases `İ` to `i` and the Kelvin sign to `k`.
    let fold = |v: &str| -> String {
        v.chars()
            .map(|c| match c {
                '\u{130}' => 'i',
                '\u{212a}' => 'k',
                c => c.to_ascii_lowercase(),
            })
            .collect()
    };
    if query.iter().any(|(k, v)| k == "changes" && fold(v).contains("onbuild")) {
        return Err(Refusal::new("build", "an ONBUILD trigger runs in a later build, unseen by the gateway")
            .allow("import without --change 'ONBUILD …'"));
    }
    match query.iter().find(|(k, _)| k == "fromSrc") {
        Some((_, src)) if src != "-" => {
            Err(Refusal::new("pull", "an import from a URL is fetched by the daemon, outside the filter")
                .allow("download the file in the sandbox and import it: docker import FILE"))
        }
        _ => Ok(()),
    }
}

fn object(body: &mut Value) -> Verdict<&mut Map<String, Value>> {
    body.as_object_mut().ok_or_else(|| Refusal::new("body", "the body is not a JSON object"))
}

fn label(o: &mut Map<String, Value>, ctx: &Context) {
    let labels = o.entry("Labels").or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(l) = labels.as_object_mut() {
        for (k, v) in ctx.labels() {
            l.insert(k, Value::String(v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::PROJECT_LABEL;
    use super::*;
    use serde_json::json;

    fn ctx() -> Context {
        Context { project: "shop".into(), network: "ocsb-shop".into(), ..Context::default() }
    }

    #[test]
    fn networks_become_internal_and_labelled() {
        let mut b = json!({"Name": "shop_default", "Driver": "bridge", "Labels": {"com.docker.compose.project": "shop"}});
        network(&mut b, &ctx()).unwrap();
        assert_eq!(b["Internal"], true);
        assert_eq!(b["Labels"][PROJECT_LABEL], "shop");
        assert_eq!(b["Labels"]["com.docker.compose.project"], "shop");
        assert_eq!(b["CheckDuplicate"], true);
        // Another project's network name is not the agent's to take; its own is.
        assert_eq!(network(&mut json!({"Name": "OCSB-other"}), &ctx()).unwrap_err().rule, "network");
        assert!(network(&mut json!({"Name": "ocsb-shop"}), &ctx()).is_ok());
        assert_eq!(
            network(&mut json!({"Name": "n", "Driver": "macvlan"}), &ctx()).unwrap_err().rule,
            "network"
        );
        assert_eq!(
            network(&mut json!({"Name": "n", "Options": {"com.docker.network.bridge.name": "eth0"}}), &ctx())
                .unwrap_err()
                .rule,
            "network"
        );
        assert_eq!(
            network(&mut json!({"Name": "n", "Peer": "x"}), &ctx()).unwrap_err().rule,
            "unknown-field"
        );
        for ipam in [
            json!({"Config": [{"Subnet": "192.168.1.0/24", "Gateway": "192.168.1.1"}]}),
            json!({"Config": [{"subnet": "10.0.0.0/8"}]}),
            json!({"Driver": "other"}),
            json!({"config": [{"Subnet": "10.0.0.0/8"}]}),
        ] {
            let e = network(&mut json!({"Name": "n", "IPAM": ipam}), &ctx()).unwrap_err();
            assert!(matches!(e.rule, "network" | "unknown-field"), "{ipam}: {e:?}");
        }
        // What Compose and the CLI send when no address is chosen passes.
        let mut b =
            json!({"Name": "n", "IPAM": {"Driver": "default", "Config": [{"Subnet": ""}], "Options": null}});
        network(&mut b, &ctx()).unwrap();
        assert_eq!(
            network(&mut json!({"Name": "n", "Peer": "x"}), &ctx()).unwrap_err().rule,
            "unknown-field"
        );
    }

    #[test]
    fn volumes_are_plain_and_labelled() {
        let mut b = json!({"Name": "data"});
        volume(&mut b, &ctx()).unwrap();
        assert_eq!(b["Labels"][PROJECT_LABEL], "shop");
        let bind = json!({"Name": "v", "Driver": "local", "DriverOpts": {"type": "none", "o": "bind", "device": "/"}});
        assert_eq!(volume(&mut bind.clone(), &ctx()).unwrap_err().rule, "volume");
        assert_eq!(volume(&mut json!({"Name": "v", "Driver": "nfs"}), &ctx()).unwrap_err().rule, "volume");
    }

    #[test]
    fn builds_run_on_the_projects_network_with_a_local_context() {
        let mut q = vec![("t".to_string(), "app".to_string()), ("networkmode".into(), "default".into())];
        build(&mut q, &ctx()).unwrap();
        assert_eq!(q, [("t".to_string(), "app".to_string()), ("networkmode".into(), "ocsb-shop".into())]);
        for (k, v, rule) in [
            ("remote", "https://x/y.git", "build"),
            ("version", "2", "build"),
            ("session", "s1", "build"),
            ("networkmode", "host", "network"),
            ("cgroupparent", "/system.slice", "runtime"),
        ] {
            let mut q = vec![(k.to_string(), v.to_string())];
            assert_eq!(build(&mut q, &ctx()).unwrap_err().rule, rule, "{k}={v}");
        }
        assert!(pull(&[("fromImage".into(), "busybox".into())]).is_ok());
        assert!(pull(&[("fromSrc".into(), "-".into())]).is_ok());
        assert_eq!(pull(&[("fromSrc".into(), "http://10.0.0.1/x.tar".into())]).unwrap_err().rule, "pull");
        for change in [
            "ONBUILD ADD http://192.0.2.2/x /x",
            "LABEL a=b\\\n onBuild RUN x",
            "onbuild",
            "ONBU\u{130}LD RUN x",
        ] {
            let q = [("fromSrc".to_string(), "-".to_string()), ("changes".into(), change.into())];
            assert_eq!(pull(&q).unwrap_err().rule, "build", "{change}");
        }
        assert!(pull(&[("fromSrc".into(), "-".into()), ("changes".into(), "CMD [\"sh\"]".into())]).is_ok());
        let mut q = vec![("pull".to_string(), "1".to_string())];
        assert_eq!(build(&mut q, &ctx()).unwrap_err().rule, "build");
    }
}
