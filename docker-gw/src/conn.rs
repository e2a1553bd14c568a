//! One client connection of the gateway: one request, judged by the policy, completed, and
//! forwarded to the daemon with `Connection: close`; the answer streams back as it comes. A
//! call that attaches (exec start, attach) becomes a raw stream both ways after the answer.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use ocsb_policy::docker::route::{Call, Owned, route};
use ocsb_policy::docker::{Refusal, create, objects, proxy};
use serde_json::{Value, json};

use super::Shared;
use super::http::{self, Framing, Head};

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The framing the gateway sets itself, dropped with the hop-by-hop headers
/// ([`ocsb_policy::http::hop_by_hop`]).
const FRAMING: &str = "content-length";

/// What goes to the daemon once the call passed.
struct Forward {
    /// The body as the gateway completed it; `None`: the client's, copied as it is framed.
    body: Option<Vec<u8>>,
    /// The connection becomes a raw stream both ways (attach, exec start).
    stream: bool,
}

pub(super) fn serve(client: UnixStream, gw: &Shared) {
    if let Err(e) = handle(client, gw) {
        gw.note(&format!("connection ended: {e}"));
    }
}

fn handle(client: UnixStream, gw: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    let mut r = BufReader::new(client.try_clone()?);
    let mut w = client;
    let mut head = match http::read_head(&mut r) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(()),
        Err(e) => {
            return http::answer(&mut w, 400, "Bad Request", &Refusal::new("request", e.to_string()).body());
        }
    };
    // The daemon first, before any rule: a client whose ping fails falls back to its newest
    // API version, which a rule then refuses, and the cause would never reach the user.
    let mut up = match super::reach::connect(&gw.daemon.socket) {
        Ok(up) => up,
        Err(why) => return unreachable(&mut w, gw, &head, &why),
    };
    let framing = match head.framing() {
        Ok(f) => f,
        Err(e) => return refuse(&mut w, gw, &head, Refusal::new("request", e.to_string())),
    };
    let mut fwd = match judge(&mut head, framing, &mut r, gw) {
        Ok(f) => f,
        Err(refusal) => return refuse(&mut w, gw, &head, refusal),
    };
    // A pull is the gateway's own, through the filter ([`super::pull`]): nothing goes to the
    // daemon but the archive it loads.
    if let Some(image) = super::pull::pulled(&head) {
        drop(up);
        return match super::pull::serve(gw, &head, &image, &mut w) {
            Ok(served) => served,
            Err(refusal) => refuse(&mut w, gw, &head, refusal),
        };
    }
    let sets_running = sets_running(&head);
    // A build's context goes on as chunks, its Dockerfile judged before the last ([`super::build`]).
    let build = route(&head.method, &head.path) == Ok(Call::Build);
    if sets_running.is_some() && fwd.body.is_none() {
        // Read whole now, under the head's timeout: the call is recorded next, and the
        // session's end waits for recorded calls, so none may wait on the client.
        fwd.body = match http::read_body(&mut r, framing, http::MAX_JSON) {
            Ok(b) => Some(b),
            Err(e) => return refuse(&mut w, gw, &head, Refusal::new("request", e.to_string())),
        };
    }
    w.set_read_timeout(None)?;
    let started = starts(&head);
    if let Some(id) = &started
        && let Err(refusal) = reach_filter(gw, id)
    {
        return refuse(&mut w, gw, &head, refusal);
    }
    // Recorded, and in flight until the daemon has answered, so that the session's end stops
    // the container ([`super::ending`]).
    let running = match &sets_running {
        Some(id) => match gw.started.record(id) {
            Ok(call) => Some(call),
            Err(why) => return refuse(&mut w, gw, &head, Refusal::new("session", why)),
        },
        None => None,
    };
    let mut out = format!("{} {} HTTP/1.1\r\n", head.method, head.target());
    let dropped = ocsb_policy::http::hop_by_hop(head.headers_named("connection"));
    for (k, v) in &head.headers {
        if !ocsb_policy::http::is_dropped(&dropped, k) && !k.eq_ignore_ascii_case(FRAMING) {
            out += &format!("{k}: {v}\r\n");
        }
    }
    let upgrade = fwd.stream && head.header("upgrade").is_some();
    out += if upgrade { "Connection: Upgrade\r\nUpgrade: tcp\r\n" } else { "Connection: close\r\n" };
    match (&fwd.body, if build { Framing::Chunked } else { framing }) {
        (Some(b), _) => out += &format!("Content-Length: {}\r\n", b.len()),
        (None, Framing::Length(n)) => out += &format!("Content-Length: {n}\r\n"),
        (None, Framing::Chunked) => out += "Transfer-Encoding: chunked\r\n",
        (None, Framing::None) => {}
    }
    out += "\r\n";
    up.write_all(out.as_bytes())?;
    match &fwd.body {
        Some(b) => up.write_all(b)?,
        None if build => {
            if let Err(refusal) = super::build::forward(&mut r, framing, &mut up, gw, &head.query) {
                let _ = up.shutdown(std::net::Shutdown::Both);
                return refuse(&mut w, gw, &head, refusal);
            }
        }
        None => http::copy_body(&mut r, &mut up, framing, None)?,
    }
    if fwd.stream {
        // The container's stdin: whatever the client sends from now on (the reader may hold
        // some of it already).
        let mut up_in = up.try_clone()?;
        std::thread::spawn(move || {
            let _ = io::copy(&mut r, &mut up_in);
            let _ = up_in.shutdown(std::net::Shutdown::Write);
        });
    }
    io::copy(&mut up, &mut w)?;
    drop(running);
    let _ = w.shutdown(std::net::Shutdown::Both);
    // Docker forwards no port from an internal network: the gateway does, once the container
    // has its address.
    if let Some(v) = started.and_then(|id| inspect(gw, &id)) {
        for n in gw.ports.publish(&v, &gw.ctx.ports) {
            gw.note(&n);
        }
    }
    Ok(())
}

/// The container a `start` or `restart` call is about (the policy let it through, so it is
/// the project's).
fn starts(head: &Head) -> Option<String> {
    on_container(head, &["start", "restart"])
}

/// The container a call sets running: [`starts`], and `unpause`.
fn sets_running(head: &Head) -> Option<String> {
    on_container(head, &["start", "restart", "unpause"])
}

/// The container of a `POST /containers/ID/VERB` call with one of `verbs`.
fn on_container(head: &Head, verbs: &[&str]) -> Option<String> {
    let path = head.path.split('?').next().unwrap_or_default();
    let verb = path.rsplit('/').next().unwrap_or_default();
    if head.method != "POST" || !verbs.contains(&verb) {
        return None;
    }
    match route(&head.method, &head.path) {
        Ok(Call::On(Owned::Container(id))) => Some(id),
        _ => None,
    }
}

/// Before a container starts: every network it will join must be pinned by id (as the gateway
/// pins them at create and connect) and be the project's and internal. Then the
/// filter is made reachable on each (one made in an earlier session lost it when that
/// session's gateway ended), before the container's first connection.
fn reach_filter(gw: &Shared, id: &str) -> Result<(), Refusal> {
    // Unchecked is not started: the container was the project's a moment ago, so a failed
    // inspection is the daemon's trouble, and the call can be made again.
    let Some(v) = inspect(gw, id) else {
        return Err(Refusal::new(
            "daemon",
            format!("the gateway could not inspect container {id} before its start"),
        )
        .allow("try again; `docker version` shows whether the daemon answers"));
    };
    let networks = v["NetworkSettings"]["Networks"].as_object().cloned().unwrap_or_default();
    let mut ids = Vec::new();
    for (name, ep) in networks.iter().filter(|(n, _)| *n != "none") {
        // The gateway pins every endpoint it lets through; one without an id would be looked
        // up by name now, and that name may have changed hands since the check.
        let Some(pinned) = ep["NetworkID"].as_str().filter(|n| !n.is_empty()) else {
            return Err(Refusal::new(
                "network",
                format!("its network {name} is named, not pinned by id (made by an older ocsb)"),
            )
            .allow("remove the container and create it again"));
        };
        ids.push(project_network(gw, pinned)?);
    }
    if !ids.is_empty() {
        super::firewall::check(&gw.daemon)?;
    }
    for network in ids {
        let _ = proxy_for(gw, &network);
    }
    Ok(())
}

fn inspect(gw: &Shared, id: &str) -> Option<Value> {
    match gw.daemon.call("GET", &format!("/containers/{}/json", super::daemon::seg(id)), None) {
        Ok((200, v)) => Some(v),
        Ok((code, _)) => {
            gw.note(&format!("container {id}: inspect answered {code}"));
            None
        }
        Err(e) => {
            gw.note(&format!("container {id}: {e}"));
            None
        }
    }
}

/// The policy's verdict on one call, with what the gateway must check with the daemon.
fn judge(head: &mut Head, framing: Framing, r: &mut impl BufRead, gw: &Shared) -> Result<Forward, Refusal> {
    let ctx = &gw.ctx;
    let call = route(&head.method, &head.path)?;
    if let Some((_, v)) =
        head.headers.iter().find(|(k, v)| k.eq_ignore_ascii_case("content-type") && !passed_content_type(v))
    {
        return Err(Refusal::new(
            "request",
            format!(
                "Content-Type {v:?}: the gateway passes JSON, tar and plain bodies only (the daemon reads a form body's fields over the query the gateway checked)"
            ),
        ));
    }
    let plain = Forward { body: None, stream: false };
    let daemon_err =
        |e: io::Error| Refusal::new("daemon", format!("the gateway could not ask the daemon: {e}"));
    // A network of the project's name that is not the project's is refused as not its own.
    let network_err = |e: io::Error| match e.kind() {
        io::ErrorKind::PermissionDenied => Refusal::new("ownership", e.to_string()),
        _ => daemon_err(e),
    };
    let owned = |obj: &Owned| -> Result<String, Refusal> {
        if let Some(id) = gw.daemon.owned_id(ctx, obj).map_err(daemon_err)? {
            Ok(id)
        } else if !gw.daemon.exists(obj).map_err(daemon_err)? {
            // Answered as the daemon would (404): Compose asks for its network and volumes by
            // name and makes them when they are not there.
            Err(Refusal::new(NOT_FOUND, format!("no such {}", describe(obj))))
        } else {
            Err(Refusal::new("ownership", format!("{} is not one this project made", describe(obj))))
        }
    };
    let mut json_body = || -> Result<Value, Refusal> {
        let bytes =
            http::read_body(r, framing, http::MAX_JSON).map_err(|e| Refusal::new("body", e.to_string()))?;
        if bytes.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&bytes).map_err(|e| Refusal::new("body", format!("the body is not JSON: {e}")))
    };
    match call {
        Call::Plain => Ok(plain),
        Call::Pull => {
            objects::pull(&head.query)?;
            // Read here so that a reference the daemon would read otherwise is refused.
            ocsb_policy::docker::registry::pull_reference(&head.query)?;
            Ok(plain)
        }
        Call::On(obj) => {
            let id = owned(&obj)?;
            if head.method == "PUT" && head.path.ends_with("/archive") {
                ocsb_policy::docker::user::archive(inspect(gw, &id).as_ref())?;
            }
            pin_path(head, &obj, &id);
            Ok(plain)
        }
        Call::Stream(obj) => {
            let id = owned(&obj)?;
            pin_path(head, &obj, &id);
            Ok(Forward { body: None, stream: true })
        }
        Call::Exec(obj) => {
            let id = owned(&obj)?;
            pin_path(head, &obj, &id);
            let v = json_body()?;
            create::exec(&v, inspect(gw, &id).as_ref())?;
            Ok(Forward { body: Some(v.to_string().into_bytes()), stream: false })
        }
        Call::List => {
            add_label_filter(&mut head.query, ctx);
            Ok(plain)
        }
        Call::Build => {
            objects::build(&mut head.query, ctx)?;
            super::firewall::check(&gw.daemon)?;
            gw.daemon.ensure_network(ctx).map_err(network_err)?;
            if let Some(url) = proxy_for(gw, &ctx.network) {
                proxy::set_build_args(&mut head.query, &url);
            }
            Ok(plain)
        }
        Call::CreateNetwork | Call::CreateVolume => {
            let mut v = json_body()?;
            if call == Call::CreateNetwork {
                objects::network(&mut v, ctx)?;
            } else {
                objects::volume(&mut v, ctx)?;
            }
            Ok(Forward { body: Some(v.to_string().into_bytes()), stream: false })
        }
        Call::Connect { network } => {
            owned(&Owned::Network(network.clone()))?;
            super::firewall::check(&gw.daemon)?;
            let mut v = json_body()?;
            let mut ids = std::collections::HashMap::new();
            for c in create::connect(&v)?.containers {
                let id = owned(&Owned::Container(c.clone()))?;
                ids.insert(c, id);
            }
            // The network the daemon joins is the one checked, named by its full id in the
            // path and in the endpoint: a stopped container keeps the endpoint, and the daemon
            // looks a name up again when it starts.
            let id = project_network(gw, &network)?;
            pin_path(head, &Owned::Network(network), &id);
            create::pin_containers(&mut v, &ids);
            v["EndpointConfig"]["NetworkID"] = Value::String(id);
            Ok(Forward { body: Some(v.to_string().into_bytes()), stream: false })
        }
        Call::Disconnect { network } => {
            let id = owned(&Owned::Network(network.clone()))?;
            let mut v = json_body()?;
            let mut ids = std::collections::HashMap::new();
            for c in create::disconnect(&v)?.containers {
                let cid = owned(&Owned::Container(c.clone()))?;
                ids.insert(c, cid);
            }
            pin_path(head, &Owned::Network(network), &id);
            create::pin_containers(&mut v, &ids);
            Ok(Forward { body: Some(v.to_string().into_bytes()), stream: false })
        }
        Call::CreateContainer => {
            let mut v = json_body()?;
            let canonical = |p: &Path| std::fs::canonicalize(p).ok();
            let needs = create::container(&mut v, ctx, &canonical)?;
            let mut ids = std::collections::HashMap::new();
            for c in &needs.containers {
                ids.insert(c.clone(), owned(&Owned::Container(c.clone()))?);
            }
            create::pin_containers(&mut v, &ids);
            for n in &needs.networks {
                owned(&Owned::Network(n.clone()))?;
            }
            for vol in &needs.volumes {
                let obj = Owned::Volume(vol.clone());
                if gw.daemon.exists(&obj).map_err(daemon_err)? {
                    owned(&obj)?;
                } else {
                    gw.daemon.ensure_volume(ctx, vol).map_err(daemon_err)?;
                }
            }
            cover(&mut v, &needs, gw);
            let joins = networks_joined(&v);
            if !joins.is_empty() {
                super::firewall::check(&gw.daemon)?;
            }
            if joins.contains(&ctx.network) {
                gw.daemon.ensure_network(ctx).map_err(network_err)?;
            }
            for name in &joins {
                let id = project_network(gw, name)?;
                v["NetworkingConfig"]["EndpointsConfig"][name.as_str()]["NetworkID"] = Value::String(id);
            }
            let network = v["HostConfig"]["NetworkMode"].as_str().unwrap_or_default().to_string();
            if !matches!(network.as_str(), "" | "none")
                && !network.starts_with("container:")
                && let Some(url) = proxy_for(gw, &network)
            {
                proxy::set_env(&mut v, &url);
            }
            Ok(Forward { body: Some(v.to_string().into_bytes()), stream: false })
        }
    }
}

/// Whether a `Content-Type` is one the gateway passes: JSON, tar, plain text or bytes, in
/// ASCII. *Why a list*: the daemon's form parsing reads an `application/x-www-form-urlencoded`
/// (or multipart) body's fields over the query (`networkmode=host` on a build, `fromSrc=URL`
/// on an import), and it compares the media type after a Unicode lower-casing (`applİcation`
/// is `application` to it); anything not on the list is refused.
fn passed_content_type(value: &str) -> bool {
    let media = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    value.is_ascii()
        && matches!(
            media.as_str(),
            "application/json"
                | "application/x-tar"
                | "application/tar"
                | "text/plain"
                | "application/octet-stream"
        )
}

/// The path with the object the policy checked named by its full id (`/containers/<id>/…`).
fn pin_path(head: &mut Head, obj: &Owned, id: &str) {
    let (kind, given) = match obj {
        Owned::Container(c) => ("containers", c),
        Owned::Network(n) => ("networks", n),
        Owned::Exec(e) => ("exec", e),
        Owned::Volume(_) => return, // names are exact
    };
    let mut parts: Vec<String> = head.path.split('/').map(str::to_string).collect();
    if let Some(i) = parts.windows(2).position(|w| w[0] == kind && &w[1] == given) {
        parts[i + 1] = id.to_string();
        head.path = parts.join("/");
    }
}

/// The networks a container configuration joins by name: its `NetworkMode` and its endpoints'
/// keys, without the modes that are not networks of the daemon's making (`none`, `container:`).
fn networks_joined(v: &Value) -> Vec<String> {
    let mode = v["HostConfig"]["NetworkMode"].as_str().map(str::to_string);
    let endpoints: Option<Vec<String>> =
        v["NetworkingConfig"]["EndpointsConfig"].as_object().map(|e| e.keys().cloned().collect());
    let mut all: Vec<String> = Vec::new();
    for n in mode.into_iter().chain(endpoints.unwrap_or_default()) {
        if !n.is_empty() && n != "none" && !n.starts_with("container:") && !all.contains(&n) {
            all.push(n);
        }
    }
    all
}

/// The full id of the project's network `name` (internal, labelled as the project's). *Why*:
/// the daemon resolves a network's name again when it uses it (exact id, then name, then id
/// prefix): a name checked now could lead to another network by then, if the agent removes
/// its network and another takes the name, or names a prefix of a foreign network's id. An
/// endpoint's `NetworkID`, and a path's full id, pin the network that was checked.
fn project_network(gw: &Shared, name: &str) -> Result<String, Refusal> {
    let id = gw.daemon.project_network(&gw.ctx, name).map_err(|e| {
        Refusal::new("daemon", format!("the gateway could not ask the daemon about network {name}: {e}"))
    })?;
    id.ok_or_else(|| Refusal::new("ownership", format!("network {name} is not one this project made")))
}

/// The filter's address on `network`, made reachable there; `None` (and a note in the log)
/// when it cannot be: the container then reaches nothing, as before.
fn proxy_for(gw: &Shared, network: &str) -> Option<String> {
    gw.egress
        .proxy_for(&gw.daemon, network)
        .map_err(|e| gw.note(&format!("no filter on network {network}: {e}")))
        .ok()
}

/// Covers each hidden path inside a bind where the container sees it (a directory with an
/// empty read-only tmpfs, a file with the gateway's empty read-only file), binds each
/// read-only path again read-only, and each pinned directory onto itself. The daemon mounts
/// them shallowest first.
fn cover(v: &mut Value, needs: &create::Needs, gw: &Shared) {
    if needs.masks.is_empty() && needs.read_only.is_empty() && needs.pins.is_empty() {
        return;
    }
    let host = &mut v["HostConfig"];
    if !host["Mounts"].is_array() {
        host["Mounts"] = json!([]);
    }
    let Some(mounts) = host["Mounts"].as_array_mut() else { return };
    for (hidden, target) in &needs.masks {
        mounts.push(if hidden.is_dir() {
            json!({"Type": "tmpfs", "Target": target, "ReadOnly": true, "TmpfsOptions": {"SizeBytes": 4096, "Mode": 0o555}})
        } else {
            json!({"Type": "bind", "Source": gw.empty_file, "Target": target, "ReadOnly": true})
        });
    }
    for (src, target) in &needs.read_only {
        mounts.push(json!({"Type": "bind", "Source": src, "Target": target, "ReadOnly": true}));
    }
    for (src, target) in &needs.pins {
        mounts.push(json!({"Type": "bind", "Source": src, "Target": target}));
    }
}

/// Lists show the project's objects only: its label joins the client's `filters`. Every term
/// is written in the object form (`{"name": {"web": true}}`), which every served API version
/// reads. *Why*: the daemon reads the whole argument in one form, and the label added as a
/// list beside the Go client's objects made it refuse the call (`docker network ls -f name=…`,
/// Compose v2's lookup of its network). A term of neither form is dropped: the label still
/// keeps the list to the project's.
fn add_label_filter(query: &mut Vec<(String, String)>, ctx: &ocsb_policy::docker::Context) {
    let label = format!("{}={}", ocsb_policy::docker::PROJECT_LABEL, ctx.project);
    let given =
        query.iter().find(|(k, _)| k == "filters").and_then(|(_, v)| serde_json::from_str::<Value>(v).ok());
    let mut filters = serde_json::Map::new();
    for (term, values) in given.as_ref().and_then(Value::as_object).into_iter().flatten() {
        let set: serde_json::Map<String, Value> = match values {
            Value::Array(a) => {
                a.iter().filter_map(Value::as_str).map(|s| (s.to_string(), json!(true))).collect()
            }
            Value::Object(o) => o.clone(),
            _ => continue,
        };
        filters.insert(term.clone(), Value::Object(set));
    }
    match filters.entry("label").or_insert_with(|| json!({})) {
        Value::Object(o) => drop(o.insert(label, json!(true))),
        other => *other = json!({ label: true }),
    }
    query.retain(|(k, _)| k != "filters");
    query.push(("filters".into(), Value::Object(filters).to_string()));
}

fn describe(obj: &Owned) -> String {
    match obj {
        Owned::Container(c) => format!("container {c}"),
        Owned::Exec(e) => format!("exec instance {e}"),
        Owned::Network(n) => format!("network {n}"),
        Owned::Volume(v) => format!("volume {v}"),
    }
}

/// The rule of a call on an object that does not exist.
const NOT_FOUND: &str = "not-found";

/// Answers a call when the daemon cannot be reached, with the cause and its fix (`502`, in
/// the body the Docker CLI prints), and logs it.
fn unreachable(
    w: &mut UnixStream,
    gw: &Shared,
    head: &Head,
    why: &super::reach::Unreachable,
) -> io::Result<()> {
    gw.log(&format!("FAIL {} {} {}", head.method, head.path, why.what()));
    http::answer(w, 502, "Bad Gateway", &why.body())
}

fn refuse(w: &mut UnixStream, gw: &Shared, head: &Head, r: Refusal) -> io::Result<()> {
    gw.log(&format!("DENY {} {} rule={} {}", head.method, head.path, r.rule, r.what));
    let answered = if r.rule == NOT_FOUND {
        http::answer(w, 404, "Not Found", &r.body())
    } else {
        http::answer(w, 403, "Forbidden", &r.body())
    };
    drain(w);
    answered
}

/// How much of a refused request's body is read and dropped, and for how long.
const DRAIN_MAX: u64 = 256 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Reads what the client still sends after its refusal, up to a bound, before the connection
/// closes. *Why*: a client still writing its body (an import's archive) when the refusal comes
/// gets `EPIPE` from a connection closed with its body unread, and prints that instead of the
/// refusal.
fn drain(w: &UnixStream) {
    let _ = w.shutdown(std::net::Shutdown::Write);
    let _ = w.set_read_timeout(Some(DRAIN_TIME));
    let started = std::time::Instant::now();
    let mut rest = io::Read::take(w, DRAIN_MAX);
    let mut buf = [0u8; 64 << 10];
    while started.elapsed() < DRAIN_TIME && matches!(io::Read::read(&mut rest, &mut buf), Ok(n) if n > 0) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filters(given: Option<&str>) -> Value {
        let ctx = ocsb_policy::docker::Context { project: "shop".into(), ..Default::default() };
        let mut q: Vec<(String, String)> =
            given.map(|g| ("filters".to_string(), g.to_string())).into_iter().collect();
        q.push(("all".into(), "1".into()));
        add_label_filter(&mut q, &ctx);
        assert_eq!(q.iter().filter(|(k, _)| k == "filters").count(), 1);
        serde_json::from_str(&q.iter().find(|(k, _)| k == "filters").unwrap().1).unwrap()
    }

    #[test]
    fn only_json_tar_and_plain_bodies_pass() {
        // docker-py sends its build context as `application/tar`.
        for ok in
            ["application/json", "Application/JSON; charset=utf-8", "application/x-tar", "application/tar"]
        {
            assert!(passed_content_type(ok), "{ok}");
        }
        for refused in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "appl\u{130}cation/x-www-form-urlencoded",
            "application/json\u{130}",
            "",
        ] {
            assert!(!passed_content_type(refused), "{refused}");
        }
    }

    #[test]
    fn paths_name_the_checked_object_by_id() {
        let mut head = Head {
            method: "POST".into(),
            path: "/v1.41/containers/web/start".into(),
            query: Vec::new(),
            headers: Vec::new(),
        };
        pin_path(&mut head, &Owned::Container("web".into()), "abc123");
        assert_eq!(head.path, "/v1.41/containers/abc123/start");
        head.path = "/networks/n/connect".into();
        pin_path(&mut head, &Owned::Network("n".into()), "f00");
        assert_eq!(head.path, "/networks/f00/connect");
    }

    #[test]
    fn the_label_joins_the_filters_in_one_form() {
        let label = json!({"dev.ocsb.project=shop": true});
        // The Go client's objects (Compose v2's network lookup): the label joins as one more.
        assert_eq!(
            filters(Some(r#"{"name":{"shop_default":true}}"#)),
            json!({"name": {"shop_default": true}, "label": label})
        );
        // docker-py's lists become objects, and a label of the client's stays beside the project's.
        assert_eq!(
            filters(Some(r#"{"label":["a=b"],"status":["exited"]}"#)),
            json!({"label": {"a=b": true, "dev.ocsb.project=shop": true}, "status": {"exited": true}})
        );
        assert_eq!(filters(None), json!({"label": label}));
        assert_eq!(filters(Some("not json")), json!({"label": label}));
        assert_eq!(filters(Some(r#"{"name":"x","label":7}"#)), json!({"label": label}));
    }
}
