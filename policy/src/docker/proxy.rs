//! The proxy a container or a build is handed: the filter's listener on the network it joins.
//!
//! *Why the gateway decides it, and decides it alone*: a container on the project's internal
//! network reaches one address outside it, its own bridge's (where the gateway has the filter
//! listen). Any other proxy address leads nowhere or, on a stock daemon, to a listener of the
//! filter that serves another network (docker0's), which refuses the container as a foreign
//! client. The Docker client's config and the agent's `-e HTTP_PROXY=…` or `--build-arg` are
//! the agent's to write; the gateway sets the variables over them at every create and build.

use std::net::Ipv4Addr;

use serde_json::Value;

/// The variables that name the proxy, each in both cases (programs read one or the other).
const PROXY: [&str; 6] = ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"];

/// The variables of hosts reached without the proxy.
const NO_PROXY: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// What is always reached without the proxy: the container's own loopback.
const LOCAL: [&str; 2] = ["localhost", "127.0.0.1"];

/// The filter's URL for containers on a network whose bridge has the address `gateway`.
pub fn url(gateway: Ipv4Addr, port: u16) -> String {
    format!("http://{gateway}:{port}")
}

/// Whether an environment entry or build argument named `name` is one the gateway sets:
/// the proxy variables above, `NO_PROXY`, and `FTP_PROXY` (the filter serves HTTP and HTTPS;
/// an FTP proxy could only name a dead end), in any case.
fn ours(name: &str) -> bool {
    PROXY.iter().chain(&NO_PROXY).chain(&["FTP_PROXY"]).any(|v| v.eq_ignore_ascii_case(name))
}

/// The hosts reached without the proxy: the container's loopback, then the hosts the client
/// named (other containers of the project, by name: on the internal network they are reached
/// directly, and through the filter not at all). *Why kept*: a `NO_PROXY` entry can only keep
/// a connection inside the network, which the daemon's rules keep in.
fn no_proxy<'a>(given: impl Iterator<Item = &'a str>) -> String {
    let mut hosts: Vec<&str> = LOCAL.to_vec();
    for h in given.flat_map(|v| v.split(',')).map(str::trim) {
        if !h.is_empty() && h != "*" && !hosts.contains(&h) {
            hosts.push(h);
        }
    }
    hosts.join(",")
}

/// The variables that send a client through the filter at `url`, with the `NO_PROXY` hosts
/// the client gave (`given`).
fn vars<'a>(url: &str, given: impl Iterator<Item = &'a str>) -> Vec<(&'static str, String)> {
    let hosts = no_proxy(given);
    PROXY.iter().map(|k| (*k, url.to_string())).chain(NO_PROXY.iter().map(|k| (*k, hosts.clone()))).collect()
}

/// Sets a container configuration's proxy variables (its `Env`) to the filter at `url`,
/// replacing whatever the client put there.
pub fn set_env(body: &mut Value, url: &str) {
    let env: Vec<String> = body["Env"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let name = |e: &str| e.split_once('=').map_or(e, |(n, _)| n).to_string();
    let given: Vec<&str> = env
        .iter()
        .filter_map(|e| e.split_once('='))
        .filter(|(n, _)| NO_PROXY.iter().any(|v| v.eq_ignore_ascii_case(n)))
        .map(|(_, v)| v)
        .collect();
    let mut out: Vec<Value> = env.iter().filter(|e| !ours(&name(e))).cloned().map(Value::String).collect();
    out.extend(vars(url, given.into_iter()).into_iter().map(|(k, v)| Value::String(format!("{k}={v}"))));
    body["Env"] = Value::Array(out);
}

/// Sets a build's proxy arguments (the `buildargs` of `POST /build`: Docker's predefined proxy
/// arguments, which `RUN` steps get in their environment and the image does not keep) to the
/// filter at `url`, replacing what the client sent (the Docker CLI sends its config's proxies
/// there).
pub fn set_build_args(query: &mut Vec<(String, String)>, url: &str) {
    let args = query
        .iter()
        .find(|(k, _)| k == "buildargs")
        .and_then(|(_, v)| serde_json::from_str::<serde_json::Map<String, Value>>(v).ok())
        .unwrap_or_default();
    let given: Vec<&str> = args
        .iter()
        .filter(|(k, _)| NO_PROXY.iter().any(|v| v.eq_ignore_ascii_case(k)))
        .filter_map(|(_, v)| v.as_str())
        .collect();
    let set = vars(url, given.into_iter());
    let mut kept: serde_json::Map<String, Value> = args.into_iter().filter(|(k, _)| !ours(k)).collect();
    for (k, v) in set {
        kept.insert(k.to_string(), Value::String(v));
    }
    query.retain(|(k, _)| k != "buildargs");
    query.push(("buildargs".into(), Value::Object(kept).to_string()));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env(b: &Value) -> Vec<&str> {
        b["Env"].as_array().unwrap().iter().filter_map(Value::as_str).collect()
    }

    #[test]
    fn the_url_is_the_networks_own_gateway() {
        assert_eq!(url(Ipv4Addr::new(172, 18, 0, 1), 3128), "http://172.18.0.1:3128");
    }

    #[test]
    fn every_proxy_variable_is_set_over_the_clients() {
        // What the Docker CLI sends from a config naming docker0, and what an agent adds.
        let mut b = json!({"Image": "x", "Env": [
            "HTTP_PROXY=http://172.17.0.1:3128", "https_proxy=http://172.17.0.1:3128",
            "Http_Proxy=http://elsewhere:1", "FTP_PROXY=http://x:21", "ALL_PROXY=socks5://x:1080",
            "NO_PROXY=db,api,*", "no_proxy=localhost,cache", "HTTP_PROXY", "A=b"]});
        set_env(&mut b, "http://172.18.0.1:3128");
        let e = env(&b);
        for k in PROXY {
            assert_eq!(e.iter().filter(|v| v.starts_with(&format!("{k}="))).count(), 1, "{k}: {e:?}");
            assert!(e.contains(&format!("{k}=http://172.18.0.1:3128").as_str()), "{k}: {e:?}");
        }
        assert!(
            !e.iter().any(|v| v.contains("172.17.") || v.contains("elsewhere") || v.contains("socks5")),
            "{e:?}"
        );
        assert!(
            !e.iter().any(|v| v.to_ascii_lowercase().starts_with("ftp_proxy") || *v == "HTTP_PROXY"),
            "{e:?}"
        );
        // The container's own names stay reached directly; `*` (the proxy for nothing) does not.
        for k in NO_PROXY {
            assert!(e.contains(&format!("{k}=localhost,127.0.0.1,db,api,cache").as_str()), "{k}: {e:?}");
        }
        assert!(e.contains(&"A=b"), "{e:?}");
        let mut b = json!({"Image": "x", "Env": null});
        set_env(&mut b, "http://172.18.0.1:3128");
        assert_eq!(env(&b).len(), 8);
        assert!(env(&b).contains(&"no_proxy=localhost,127.0.0.1"));
    }

    #[test]
    fn a_builds_proxy_arguments_are_set_over_the_clients() {
        let mut q = vec![
            ("t".to_string(), "img".to_string()),
            (
                "buildargs".to_string(),
                r#"{"HTTP_PROXY":"http://172.17.0.1:3128","https_proxy":"http://172.17.0.1:3128","no_proxy":"db","V":"1"}"#
                    .to_string(),
            ),
        ];
        set_build_args(&mut q, "http://172.18.0.1:3128");
        assert_eq!(q.iter().filter(|(k, _)| k == "buildargs").count(), 1);
        let args: serde_json::Map<String, Value> =
            serde_json::from_str(&q.iter().find(|(k, _)| k == "buildargs").unwrap().1).unwrap();
        assert_eq!(args["HTTP_PROXY"], "http://172.18.0.1:3128");
        assert_eq!(args["https_proxy"], "http://172.18.0.1:3128");
        assert_eq!(args["NO_PROXY"], "localhost,127.0.0.1,db");
        assert_eq!(args["V"], "1");
        let mut q = vec![];
        set_build_args(&mut q, "http://172.18.0.1:3128");
        assert!(q[0].1.contains(r#""http_proxy":"http://172.18.0.1:3128""#), "{q:?}");
    }
}
