//! The sandbox's environment: nothing is inherited except an allowlist of harmless variables;
//! the seed's variables are added (proxy, ssh through the filter, Docker client config, own XDG
//! directories, the generated git config, no display). Tokens reach the command only through `extra` (`OCSB_ENV`,
//! `OCSB_ENV_FILE`), which the caller chooses.

use std::ffi::OsString;
use std::path::Path;

/// Host variables copied as they are.
pub const ALLOW: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
];
/// Host variables copied by prefix.
pub const ALLOW_PREFIX: &[&str] = &["LC_"];

pub struct EnvInputs<'a> {
    pub host: &'a [(OsString, OsString)],
    pub home: &'a Path,
    pub state_dir: &'a Path,
    /// The egress filter's port on 127.0.0.1.
    pub proxy_port: u16,
    /// `OCSB_ENV` and `OCSB_ENV_FILE` entries; applied last, so they win.
    pub extra: &'a [(String, String)],
}

/// The state subdirectories the sandbox's environment points into (created by the launcher
/// before it starts).
pub const STATE_SUBDIRS: &[&str] = &["config", "data", "cache", "state", "run", "docker", "tmp"];

/// The generated global git config, relative to the state directory (`GIT_CONFIG_GLOBAL`).
pub const GIT_CONFIG: &str = "gitconfig";

pub fn build(i: &EnvInputs<'_>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: String| {
        out.retain(|(ek, _)| ek != k);
        out.push((k.into(), v));
    };
    for (k, v) in i.host {
        // Non-UTF-8 host variables are not passed (the spec is JSON).
        let (Some(ks), Some(vs)) = (k.to_str(), v.to_str()) else { continue };
        if ALLOW.contains(&ks) || ALLOW_PREFIX.iter().any(|p| ks.starts_with(p)) {
            set(ks, vs.to_string());
        }
    }
    if !i.host.iter().any(|(k, _)| k == "PATH") {
        set("PATH", "/usr/local/bin:/usr/bin:/bin".into());
    }
    set("HOME", i.home.to_string_lossy().into_owned());
    set("OCSB_SANDBOX", "1".into());
    set("TMPDIR", "/tmp".into());
    let proxy = format!("http://127.0.0.1:{}", i.proxy_port);
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        set(k, proxy.clone());
    }
    for k in ["no_proxy", "NO_PROXY"] {
        set(k, "localhost,127.0.0.1,::1".into());
    }
    // Node's own `fetch` and `http` ignore the proxy variables unless asked (Node 22.21+, 24.5+;
    // older versions ignore this one too). Without it a Node tool's direct connection is refused
    // by the netlock with a bare `EACCES`; with it the request goes through the filter and is
    // judged by the rules like any other. Loopback stays direct (`NO_PROXY` above).
    set("NODE_USE_ENV_PROXY", "1".into());
    // ssh through the filter's CONNECT tunnel. `-F ~/.ssh/config`: in the user namespace the
    // root-owned system configs look owned by nobody and ssh refuses them.
    let ssh_config = i.home.join(".ssh/config");
    let f = if ssh_config.exists() { ssh_config.to_string_lossy().into_owned() } else { "/dev/null".into() };
    set(
        "GIT_SSH_COMMAND",
        format!(
            "ssh -F '{f}' -o ProxyCommand='ncat --proxy 127.0.0.1:{} --proxy-type http %h %p'",
            i.proxy_port
        ),
    );
    set("DOCKER_CONFIG", i.state_dir.join("docker").to_string_lossy().into_owned());
    set("XDG_CONFIG_HOME", i.state_dir.join("config").to_string_lossy().into_owned());
    set("XDG_DATA_HOME", i.state_dir.join("data").to_string_lossy().into_owned());
    set("XDG_CACHE_HOME", i.state_dir.join("cache").to_string_lossy().into_owned());
    set("XDG_STATE_HOME", i.state_dir.join("state").to_string_lossy().into_owned());
    set("XDG_RUNTIME_DIR", i.state_dir.join("run").to_string_lossy().into_owned());
    // No display: GUI programs cannot reach the desktop; xdg-open is masked in the mount plan.
    for k in ["DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "BROWSER"] {
        set(k, String::new());
    }
    // The git config the launcher generates from the user's at each start (without its
    // credentials and programs): in place of `~/.gitconfig` and `~/.config/git/config`, which
    // the sandbox does not see, and of one the agent could point anywhere.
    set("GIT_CONFIG_GLOBAL", i.state_dir.join(GIT_CONFIG).to_string_lossy().into_owned());
    for (k, v) in i.extra {
        set(k, v.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a String> {
        env.iter().find(|(ek, _)| ek == k).map(|(_, v)| v)
    }

    #[test]
    fn allowlist_seed_variables_and_extra() {
        let host: Vec<(OsString, OsString)> = [
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C.UTF-8"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("DISPLAY", ":0"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
        ]
        .iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let extra = vec![("API_TOKEN".to_string(), "t".to_string()), ("PATH".to_string(), "/x".to_string())];
        let env = build(&EnvInputs {
            host: &host,
            home: Path::new("/home/u"),
            state_dir: Path::new("/s"),
            proxy_port: 3128,
            extra: &extra,
        });
        assert_eq!(get(&env, "LC_ALL").unwrap(), "C.UTF-8");
        assert!(get(&env, "AWS_SECRET_ACCESS_KEY").is_none());
        assert!(get(&env, "DBUS_SESSION_BUS_ADDRESS").is_none());
        assert!(
            get(&env, "SSH_AUTH_SOCK").is_none(),
            "only the launcher's filtering agent, set by the start"
        );
        assert_eq!(get(&env, "GIT_CONFIG_GLOBAL").unwrap(), "/s/gitconfig");
        assert_eq!(get(&env, "DISPLAY").unwrap(), "");
        assert_eq!(get(&env, "HTTPS_PROXY").unwrap(), "http://127.0.0.1:3128");
        assert_eq!(get(&env, "NODE_USE_ENV_PROXY").unwrap(), "1");
        assert_eq!(get(&env, "XDG_CONFIG_HOME").unwrap(), "/s/config");
        assert_eq!(get(&env, "DOCKER_CONFIG").unwrap(), "/s/docker");
        assert!(get(&env, "GIT_SSH_COMMAND").unwrap().contains("--proxy 127.0.0.1:3128"));
        assert_eq!(get(&env, "API_TOKEN").unwrap(), "t");
        assert_eq!(get(&env, "PATH").unwrap(), "/x", "extra wins");
        assert_eq!(env.iter().filter(|(k, _)| k == "PATH").count(), 1);
    }
}
