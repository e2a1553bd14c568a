//! Which Engine API calls pass: a list of endpoints, each with what it needs. Anything not
//! listed is refused, so an endpoint added by a newer Docker is closed until it is looked at.

use super::{API_MAX, API_MIN, Refusal, Verdict};

/// An object a call acts on, which must carry the project's label (checked by the gateway
/// against the daemon before the call is forwarded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    Container(String),
    /// An exec instance, made by the gateway for one of the project's containers.
    Exec(String),
    Network(String),
    Volume(String),
}

/// What the gateway must do with a call besides forwarding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Forwarded as it is: nothing in it reaches beyond what the agent may see.
    Plain,
    /// Forwarded once the object is the project's own.
    On(Owned),
    /// The body is a container's configuration: [`super::create::container`] first.
    CreateContainer,
    /// The body is a network's: [`super::objects::network`] first.
    CreateNetwork,
    /// The body is a volume's: [`super::objects::volume`] first.
    CreateVolume,
    /// Connecting a container to a network: both must be the project's own.
    Connect { network: String },
    /// Disconnecting a container from a network: both must be the project's own.
    Disconnect { network: String },
    /// `POST /exec/{id}/start` and attach: the connection becomes a raw stream both ways.
    Stream(Owned),
    /// `POST /build`: the classic builder on the project's network ([`super::objects::build`]).
    Build,
    /// Listing containers, networks or volumes: only the project's are shown.
    List,
    /// `POST /containers/{id}/exec`: the container must be the project's, and the exec's
    /// configuration is checked ([`super::create::exec`]).
    Exec(Owned),
    /// `POST /images/create`: a pull through the daemon, or an import of the body
    /// ([`super::objects::pull`]).
    Pull,
}

/// The call for `method` on `path` (with or without the `/v1.NN` prefix). The version, if
/// given, must be one the gateway was built for.
pub fn route(method: &str, path: &str) -> Verdict<Call> {
    let path = path.split('?').next().unwrap_or_default();
    let mut parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // `v` and a digit: a version prefix (`/version` is an endpoint, not a version).
    if let Some(v) = parts
        .first()
        .and_then(|p| p.strip_prefix('v'))
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
    {
        let version = parse_version(v)
            .ok_or_else(|| Refusal::new("api-version", format!("`/{}` is not an API version", parts[0])))?;
        if version < API_MIN || version > API_MAX {
            return Err(Refusal::new(
                "api-version",
                format!(
                    "API version {}.{} (the gateway knows {}.{}–{}.{}; its policy may not know the fields of another)",
                    version.0, version.1, API_MIN.0, API_MIN.1, API_MAX.0, API_MAX.1
                ),
            )
            .allow("set DOCKER_API_VERSION=1.47 (or older) in the sandbox"));
        }
        parts.remove(0);
    }
    let id = |i: usize| parts.get(i).map(|s| s.to_string()).unwrap_or_default();
    let call = match (method, parts.as_slice()) {
        ("GET" | "HEAD", ["_ping"]) | ("GET", ["version" | "info"]) => Call::Plain,
        // Events name other projects' containers and images: only the project's are shown.
        ("GET", ["events"]) => Call::List,
        ("GET", ["containers", "json"]) => Call::List,
        ("POST", ["containers", "create"]) => Call::CreateContainer,
        ("GET", ["containers", _, "json" | "logs" | "top" | "stats" | "changes"]) => {
            Call::On(Owned::Container(id(1)))
        }
        (
            "POST",
            [
                "containers",
                _,
                "start" | "stop" | "restart" | "kill" | "wait" | "resize" | "pause" | "unpause" | "rename",
            ],
        ) => Call::On(Owned::Container(id(1))),
        ("POST", ["containers", _, "exec"]) => Call::Exec(Owned::Container(id(1))),
        ("POST", ["containers", _, "attach"]) => Call::Stream(Owned::Container(id(1))),
        ("GET" | "HEAD" | "PUT", ["containers", _, "archive"]) => Call::On(Owned::Container(id(1))),
        ("DELETE", ["containers", _]) => Call::On(Owned::Container(id(1))),
        ("POST", ["exec", _, "start"]) => Call::Stream(Owned::Exec(id(1))),
        ("POST", ["exec", _, "resize"]) | ("GET", ["exec", _, "json"]) => Call::On(Owned::Exec(id(1))),
        ("GET", ["images", "json"]) => Call::Plain,
        ("GET", ["images", .., "json" | "history"]) => Call::Plain,
        ("POST", ["images", "create"]) => Call::Pull,
        ("POST", ["build"]) => Call::Build,
        ("GET", ["networks"]) => Call::List,
        ("GET", ["networks", _]) => Call::On(Owned::Network(id(1))),
        ("POST", ["networks", "create"]) => Call::CreateNetwork,
        ("POST", ["networks", _, "connect"]) => Call::Connect { network: id(1) },
        ("POST", ["networks", _, "disconnect"]) => Call::Disconnect { network: id(1) },
        ("DELETE", ["networks", _]) => Call::On(Owned::Network(id(1))),
        ("GET", ["volumes"]) => Call::List,
        ("GET" | "DELETE", ["volumes", _]) => Call::On(Owned::Volume(id(1))),
        ("POST", ["volumes", "create"]) => Call::CreateVolume,
        _ => return Err(refuse_endpoint(method, path)),
    };
    Ok(call)
}

fn refuse_endpoint(method: &str, path: &str) -> Refusal {
    let why = match path.split('/').find(|s| !s.is_empty() && !s.starts_with('v')) {
        Some("commit") => "a commit would keep what the container holds",
        Some("plugins") => "a plugin runs as root on the host",
        Some("swarm" | "nodes" | "services" | "tasks" | "secrets" | "configs") => "swarm is not served",
        Some("session") | Some("grpc") => {
            "BuildKit sessions are not served (the classic builder is: DOCKER_BUILDKIT=0)"
        }
        Some("auth") => "registry logins stay with you, outside the sandbox",
        _ => "the gateway serves only the calls a coding agent needs",
    };
    Refusal::new("endpoint", format!("{method} {path}: {why}"))
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_endpoints_pass_with_what_they_need() {
        assert_eq!(route("GET", "/_ping"), Ok(Call::Plain));
        assert_eq!(route("GET", "/version"), Ok(Call::Plain), "docker-py asks unversioned");
        assert_eq!(route("HEAD", "/v1.41/_ping"), Ok(Call::Plain));
        assert_eq!(route("POST", "/v1.41/containers/create?name=x"), Ok(Call::CreateContainer));
        assert_eq!(
            route("POST", "/v1.41/containers/abc/start"),
            Ok(Call::On(Owned::Container("abc".into())))
        );
        assert_eq!(
            route("DELETE", "/v1.41/containers/abc?force=1"),
            Ok(Call::On(Owned::Container("abc".into())))
        );
        assert_eq!(route("POST", "/v1.41/exec/e1/start"), Ok(Call::Stream(Owned::Exec("e1".into()))));
        assert_eq!(
            route("POST", "/v1.41/containers/c/attach?stream=1"),
            Ok(Call::Stream(Owned::Container("c".into())))
        );
        assert_eq!(route("GET", "/v1.41/images/library/busybox/json"), Ok(Call::Plain));
        assert_eq!(route("POST", "/v1.41/networks/n1/connect"), Ok(Call::Connect { network: "n1".into() }));
        assert_eq!(route("POST", "/networks/n1/disconnect"), Ok(Call::Disconnect { network: "n1".into() }));
        assert_eq!(route("GET", "/v1.41/volumes"), Ok(Call::List));
        assert_eq!(route("GET", "/v1.41/events?since=1"), Ok(Call::List));
    }

    #[test]
    fn everything_else_is_refused_with_the_reason() {
        for (m, p, rule, text) in [
            ("POST", "/v1.41/commit?container=x", "endpoint", "commit"),
            ("POST", "/v1.41/plugins/pull", "endpoint", "plugin"),
            ("POST", "/v1.41/swarm/init", "endpoint", "swarm"),
            ("POST", "/session", "endpoint", "BuildKit"),
            ("POST", "/v1.41/auth", "endpoint", "logins"),
            ("GET", "/v1.41/containers/x/export", "endpoint", "needs"),
            ("POST", "/v1.41/containers/x/update", "endpoint", "needs"),
            ("POST", "/v1.99/containers/create", "api-version", "1.99"),
            ("POST", "/v1.12/containers/create", "api-version", "1.12"),
            ("GET", "/v1.x/_ping", "api-version", "v1.x"),
        ] {
            let r = route(m, p).unwrap_err();
            assert_eq!(r.rule, rule, "{m} {p}");
            assert!(r.what.contains(text), "{m} {p}: {}", r.what);
        }
    }
}
