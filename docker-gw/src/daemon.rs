//! The gateway's own calls to the real daemon: who owns an object, and making the project's
//! network and volumes.

use std::io::{self, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ocsb_policy::docker::route::Owned;
use ocsb_policy::docker::{Context, PROJECT_LABEL, SESSION_LABEL};
use serde_json::{Value, json};

use super::http::{self, Framing};

/// How long one of the gateway's own calls may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Daemon {
    pub socket: PathBuf,
}

impl Daemon {
    /// One call with `Connection: close`; the status and the whole body.
    pub fn call(&self, method: &str, target: &str, body: Option<&Value>) -> io::Result<(u16, Value)> {
        let mut s = UnixStream::connect(&self.socket)?;
        s.set_read_timeout(Some(CALL_TIMEOUT))?;
        s.set_write_timeout(Some(CALL_TIMEOUT))?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            s,
            "{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut r = BufReader::new(s);
        let head =
            http::read_response(&mut r).map_err(|_| io::Error::other("the daemon's answer has no status"))?;
        let (status, framing) = (head.status, head.framing());
        let bytes = match framing {
            Framing::None => {
                let mut b = Vec::new();
                r.take(http::MAX_JSON as u64).read_to_end(&mut b)?;
                b
            }
            f => http::read_body(&mut r, f, http::MAX_JSON)?,
        };
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    /// The full id of `obj` (a volume's name) if it exists and carries the project's label. An
    /// exec instance is the project's when its container is. *Why the id*: the daemon looks a
    /// name up again when it acts on it (exact id, name, id prefix), so the gateway forwards the
    /// id it checked, and a name swapped meanwhile cannot lead to another object.
    pub fn owned_id(&self, ctx: &Context, obj: &Owned) -> io::Result<Option<String>> {
        let (target, labels, id): (String, &[&str], &str) = match obj {
            Owned::Container(id) => (format!("/containers/{}/json", seg(id)), &["Config", "Labels"], "Id"),
            Owned::Network(id) => (format!("/networks/{}", seg(id)), &["Labels"], "Id"),
            Owned::Volume(name) => (format!("/volumes/{}", seg(name)), &["Labels"], "Name"),
            Owned::Exec(id) => {
                let (code, v) = self.call("GET", &format!("/exec/{}/json", seg(id)), None)?;
                let Some(container) = v.get("ContainerID").and_then(Value::as_str).filter(|_| code == 200)
                else {
                    return Ok(None);
                };
                let ours = self.owned_id(ctx, &Owned::Container(container.to_string()))?.is_some();
                return Ok(v["ID"].as_str().filter(|_| ours).map(str::to_string));
            }
        };
        let (code, v) = self.call("GET", &target, None)?;
        let label = labels.iter().fold(&v, |v, k| &v[*k]).get(PROJECT_LABEL).and_then(Value::as_str);
        let ours = code == 200 && label == Some(ctx.project.as_str());
        Ok(v[id].as_str().filter(|i| ours && !i.is_empty()).map(str::to_string))
    }

    /// Whether an object of that kind and name exists at all.
    pub fn exists(&self, obj: &Owned) -> io::Result<bool> {
        let target = match obj {
            Owned::Volume(n) => format!("/volumes/{}", seg(n)),
            Owned::Network(n) => format!("/networks/{}", seg(n)),
            Owned::Container(n) => format!("/containers/{}/json", seg(n)),
            Owned::Exec(n) => format!("/exec/{}/json", seg(n)),
        };
        Ok(self.call("GET", &target, None)?.0 == 200)
    }

    /// The project's internal network, made when it is missing. One that exists must be the
    /// project's and internal: a network of that name made by someone else (another Docker
    /// user, a container of the host) could route out, and containers would join it.
    pub fn ensure_network(&self, ctx: &Context) -> io::Result<()> {
        let body =
            json!({"Name": ctx.network, "Internal": true, "Labels": ctx.labels(), "CheckDuplicate": true});
        if !self.exists(&Owned::Network(ctx.network.clone()))? {
            match self.call("POST", "/networks/create", Some(&body))? {
                (201, _) => return Ok(()),
                (409, _) => {} // made meanwhile: checked below like any other
                (code, v) => {
                    return Err(io::Error::other(format!("creating network {}: {code} {v}", ctx.network)));
                }
            }
        }
        if self.project_network(ctx, &ctx.network)?.is_some() {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "a network named {0} exists that ocsb did not make for project {1} (label {PROJECT_LABEL}={1}, internal); \
                 containers will not join it: remove it outside the sandbox with `docker network rm {0}`",
                ctx.network, ctx.project
            ),
        ))
    }

    /// The full id of the network `name` resolves to now (the daemon's way: exact id, name, id
    /// prefix), if it is the project's and internal.
    pub fn project_network(&self, ctx: &Context, name: &str) -> io::Result<Option<String>> {
        let (code, v) = self.call("GET", &format!("/networks/{}", seg(name)), None)?;
        let ours = v["Labels"].get(PROJECT_LABEL).and_then(Value::as_str) == Some(ctx.project.as_str());
        let id = v["Id"].as_str().filter(|id| !id.is_empty()).map(str::to_string);
        Ok(id.filter(|_| code == 200 && ours && v["Internal"] == json!(true)))
    }

    /// A network's id and IPv4 gateway (the address of its bridge on the host), if it has one.
    pub fn bridge_of(&self, network: &str) -> io::Result<Option<(String, std::net::Ipv4Addr)>> {
        let (code, v) = self.call("GET", &format!("/networks/{}", seg(network)), None)?;
        if code != 200 {
            return Err(io::Error::other(format!("inspecting network {network}: {code} {v}")));
        }
        let id = v["Id"].as_str().unwrap_or_default().to_string();
        let configs = v["IPAM"]["Config"].as_array().cloned().unwrap_or_default();
        Ok(configs.iter().find_map(|c| c["Gateway"].as_str()?.parse().ok()).map(|gw| (id, gw)))
    }

    /// A named volume the agent mounts but has not made: made now, labelled.
    pub fn ensure_volume(&self, ctx: &Context, name: &str) -> io::Result<()> {
        let body = json!({"Name": name, "Labels": ctx.labels()});
        match self.call("POST", "/volumes/create", Some(&body))? {
            (201, _) => Ok(()),
            (code, v) => Err(io::Error::other(format!("creating volume {name}: {code} {v}"))),
        }
    }
}

/// A container or network the gateway let the agent make: its id and name.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Made {
    pub id: String,
    pub name: String,
    /// A container's state (`running`, `exited`, …), a network's driver.
    pub state: String,
    pub session: String,
}

impl Daemon {
    /// The containers and networks labelled `key=value` (all states).
    pub fn labelled(&self, key: &str, value: &str) -> io::Result<(Vec<Made>, Vec<Made>)> {
        let filters = json!({"label": [format!("{key}={value}")]}).to_string();
        let q = seg(&filters);
        let (_, containers) = self.call("GET", &format!("/containers/json?all=1&filters={q}"), None)?;
        let (_, networks) = self.call("GET", &format!("/networks?filters={q}"), None)?;
        let made = |v: &Value, name: &dyn Fn(&Value) -> String, state: &str, labels: &str| Made {
            // The full id: the daemon takes a name before an id prefix, so a short id could
            // name another container.
            id: v["Id"].as_str().unwrap_or_default().to_string(),
            name: name(v),
            state: v[state].as_str().unwrap_or_default().to_string(),
            session: v[labels][SESSION_LABEL].as_str().unwrap_or_default().to_string(),
        };
        let cname =
            |v: &Value| v["Names"][0].as_str().unwrap_or_default().trim_start_matches('/').to_string();
        let nname = |v: &Value| v["Name"].as_str().unwrap_or_default().to_string();
        let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
        Ok((
            list(&containers).iter().map(|c| made(c, &cname, "State", "Labels")).collect(),
            list(&networks).iter().map(|n| made(n, &nname, "Driver", "Labels")).collect(),
        ))
    }

    /// Removes a container (forced: it may run) or a network.
    pub fn remove(&self, container: bool, id: &str) -> io::Result<u16> {
        let target = if container {
            format!("/containers/{}?force=1", seg(id))
        } else {
            format!("/networks/{}", seg(id))
        };
        Ok(self.call("DELETE", &target, None)?.0)
    }
}

/// An id, a name or a query value as one percent-encoded segment (nothing that would change
/// the path or the query).
pub(super) fn seg(s: &str) -> String {
    ocsb_policy::http::encode(s, ocsb_policy::http::SEGMENT)
}

/// Where the gateway finds the real daemon: `DOCKER_HOST` when it is a unix socket, else the
/// default socket.
pub fn upstream() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()) {
        Some(h) => h.strip_prefix("unix://").map(PathBuf::from),
        None => ["/run/docker.sock", "/var/run/docker.sock"].iter().map(PathBuf::from).find(|p| p.exists()),
    }
    .filter(|p: &PathBuf| Path::new(p).is_absolute())
}
