//! The squid container `opencode-sandbox-egress-<name>` through the Docker Engine API (bollard).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HealthConfig, HealthStatusEnum, HostConfig, HostConfigLogConfig, Mount, MountType,
    RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters as q;
use futures_util::StreamExt;

use super::image::{self, CONF, CONF_DIR, SQUID_BIN};
use crate::error::{Error, Result};

pub fn container_name(instance: &str) -> String {
    format!("opencode-sandbox-egress-{instance}")
}

/// Connect to the local engine and agree on an API version (Debian 12's engine speaks 1.41;
/// bollard defaults to 1.53). *Why the ping*: a missing daemon must be reported as such here,
/// not as an obscure failure halfway through `up`.
pub async fn connect() -> Result<Docker> {
    connect_with(None).await
}

/// [`connect`] to an explicit unix socket (`None` = `DOCKER_HOST` or the default socket).
pub async fn connect_with(unix_socket: Option<&Path>) -> Result<Docker> {
    let hint = "start Docker (`sudo systemctl start docker`, or `dockerd &`), check that you may use /var/run/docker.sock (group docker), or use OCSB_EGRESS_BACKEND=builtin";
    let d = match unix_socket {
        None => Docker::connect_with_local_defaults(),
        Some(p) => Docker::connect_with_unix(&p.to_string_lossy(), 120, bollard::API_DEFAULT_VERSION),
    }
    .map_err(|e| Error::docker(format!("Docker is not available: {e}"), hint))?;
    let d = d.negotiate_version().await.map_err(|e| {
        Error::docker(format!("Docker is not answering (the squid backend needs it): {e}"), hint)
    })?;
    d.ping().await.map_err(|e| {
        Error::docker(format!("Docker is not answering (the squid backend needs it): {e}"), hint)
    })?;
    Ok(d)
}

/// Run squid in the container (`exec`) and collect its exit code and output.
pub async fn exec(docker: &Docker, name: &str, args: &[&str]) -> Result<(i64, String)> {
    let mut cmd = vec![SQUID_BIN.to_string()];
    cmd.extend(args.iter().map(|s| s.to_string()));
    let cfg = bollard::models::ExecConfig {
        cmd: Some(cmd),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let dockerr = |e: bollard::errors::Error| {
        Error::docker(
            format!("docker exec in {name} failed: {e}"),
            "check `docker ps`; `ocsb egress down` then `up` recreates the container",
        )
    };
    let created = docker.create_exec(name, cfg).await.map_err(dockerr)?;
    let mut output = String::new();
    if let bollard::exec::StartExecResults::Attached { output: mut o, .. } =
        docker.start_exec(&created.id, None).await.map_err(dockerr)?
    {
        while let Some(Ok(chunk)) = o.next().await {
            output.push_str(&chunk.to_string());
        }
    }
    let code = docker.inspect_exec(&created.id).await.map_err(dockerr)?.exit_code.unwrap_or(-1);
    Ok((code, output))
}

/// `squid -k parse` is not enough on its own: an invalid regex only logs `ERROR:` and drops the
/// rule with exit code 0 (research §0.6). Any `ERROR`/`WARNING`/`FATAL` line fails validation.
pub fn parse_ok(code: i64, output: &str) -> Result<()> {
    let bad: Vec<&str> = output
        .lines()
        .filter(|l| {
            l.contains("ERROR")
                || l.contains("WARNING")
                || l.contains("FATAL")
                || l.contains("Warning: empty ACL")
        })
        .collect();
    if code != 0 || !bad.is_empty() {
        let text = if bad.is_empty() { output.trim().to_string() } else { bad.join("\n") };
        return Err(Error::SquidConfig { output: format!("squid -k parse (exit {code}):\n{text}") });
    }
    Ok(())
}

pub struct ContainerState {
    pub running: bool,
    pub health: Option<String>,
    pub labels: HashMap<String, String>,
    pub id: String,
}

pub async fn inspect(docker: &Docker, name: &str) -> Option<ContainerState> {
    let c = docker.inspect_container(name, None::<q::InspectContainerOptions>).await.ok()?;
    let state = c.state.unwrap_or_default();
    Some(ContainerState {
        running: state.running.unwrap_or(false),
        health: state.health.and_then(|h| h.status).map(|s| s.to_string()),
        labels: c.config.and_then(|c| c.labels).unwrap_or_default(),
        id: c.id.unwrap_or_default(),
    })
}

/// Validate a configuration file that is in the bound directory, in a throwaway container from
/// the same image (used before the first start, when there is no running squid to exec in).
pub async fn parse_in_throwaway(docker: &Docker, conf_dir: &Path, file_in_dir: &str) -> Result<()> {
    let name = format!("opencode-sandbox-egress-parse-{}", std::process::id());
    let _ = docker
        .remove_container(&name, Some(q::RemoveContainerOptionsBuilder::default().force(true).build()))
        .await;
    let body = ContainerCreateBody {
        image: Some(image::image_ref()),
        entrypoint: Some(vec![SQUID_BIN.into()]),
        cmd: Some(vec!["-k".into(), "parse".into(), "-f".into(), format!("{CONF_DIR}/{file_in_dir}")]),
        user: Some("13:13".into()),
        labels: Some(HashMap::from([("dev.opencode-sandbox.component".into(), "egress".into())])),
        host_config: Some(HostConfig {
            // The same network as the real container: with "none" squid warns about the
            // missing IPv6 loopback (BCP 177), which would fail the strict check.
            network_mode: Some("host".into()),
            mounts: Some(vec![bind_mount(conf_dir)]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let dockerr = |e: bollard::errors::Error| {
        Error::docker(format!("cannot run `squid -k parse` in a container: {e}"), "check `docker info`")
    };
    docker
        .create_container(Some(q::CreateContainerOptionsBuilder::default().name(&name).build()), body)
        .await
        .map_err(dockerr)?;
    let result = async {
        docker.start_container(&name, None::<q::StartContainerOptions>).await.map_err(dockerr)?;
        let mut w = docker.wait_container(&name, None::<q::WaitContainerOptions>);
        let mut code = 0i64;
        while let Some(r) = w.next().await {
            match r {
                Ok(x) => code = x.status_code,
                Err(bollard::errors::Error::DockerContainerWaitError { code: c, .. }) => code = c,
                Err(e) => return Err(dockerr(e)),
            }
        }
        let mut logs =
            docker.logs(&name, Some(q::LogsOptionsBuilder::default().stdout(true).stderr(true).build()));
        let mut out = String::new();
        while let Some(Ok(l)) = logs.next().await {
            out.push_str(&l.to_string());
        }
        parse_ok(code, &out)
    }
    .await;
    let _ = docker
        .remove_container(&name, Some(q::RemoveContainerOptionsBuilder::default().force(true).build()))
        .await;
    result
}

fn bind_mount(conf_dir: &Path) -> Mount {
    Mount {
        typ: Some(MountType::BIND),
        source: Some(conf_dir.to_string_lossy().into_owned()),
        target: Some(CONF_DIR.into()),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The host's `/etc/hosts`, read-only, as the container's. *Why*: squid answers a name the
/// hosts file lists from it alone (an internal host, a VPN's name), as every program on the
/// host does; Docker's own copy for a host-network container is taken once, when the container
/// is created, while squid reads the file again with each reload of the rules. None where the
/// host has no hosts file (squid then asks the name servers for every name).
fn hosts_mount() -> Option<Mount> {
    std::path::Path::new(HOSTS).is_file().then(|| Mount {
        typ: Some(MountType::BIND),
        source: Some(HOSTS.into()),
        target: Some(HOSTS.into()),
        read_only: Some(true),
        ..Default::default()
    })
}

const HOSTS: &str = "/etc/hosts";

/// Create and start the container, then wait until squid answers its health check.
pub async fn create_and_start(
    docker: &Docker,
    name: &str,
    conf_dir: &Path,
    labels: HashMap<String, String>,
) -> Result<()> {
    let tmpfs = |size: &str| format!("rw,nosuid,nodev,noexec,size={size},uid=13,gid=13,mode=0755");
    let body = ContainerCreateBody {
        image: Some(image::image_ref()),
        entrypoint: Some(vec![SQUID_BIN.into(), "-N".into(), "-f".into(), CONF.into()]),
        user: Some("13:13".into()),
        labels: Some(labels),
        stop_timeout: Some(5),
        healthcheck: Some(HealthConfig {
            test: Some(vec![
                "CMD".into(),
                SQUID_BIN.into(),
                "-k".into(),
                "check".into(),
                "-f".into(),
                CONF.into(),
            ]),
            interval: Some(2_000_000_000),
            timeout: Some(2_000_000_000),
            retries: Some(3),
            start_period: Some(1_000_000_000),
            ..Default::default()
        }),
        host_config: Some(HostConfig {
            // Host network: squid listens on 127.0.0.1 and the docker0 gateway of the host.
            network_mode: Some("host".into()),
            // docker-init as PID 1: squid's `-k` commands refuse to signal PID 1.
            init: Some(true),
            mounts: Some([bind_mount(conf_dir)].into_iter().chain(hosts_mount()).collect()),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([
                ("/run/squid".to_string(), tmpfs("1m")),
                ("/var/spool/squid".to_string(), tmpfs("16m")),
                ("/var/log/squid".to_string(), tmpfs("16m")),
                ("/tmp".to_string(), "rw,nosuid,nodev,noexec,size=16m,mode=1777".to_string()),
            ])),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                maximum_retry_count: None,
            }),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".into()),
                config: Some(HashMap::from([("max-size".to_string(), "10m".to_string())])),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let dockerr = |e: bollard::errors::Error| {
        Error::docker(
            format!("cannot start the squid container {name}: {e}"),
            "see `docker logs` of the container; `ocsb egress down` removes it",
        )
    };
    docker
        .create_container(Some(q::CreateContainerOptionsBuilder::default().name(name).build()), body)
        .await
        .map_err(dockerr)?;
    docker.start_container(name, None::<q::StartContainerOptions>).await.map_err(dockerr)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = inspect(docker, name).await;
        match st {
            Some(s) if s.health.as_deref() == Some(HealthStatusEnum::HEALTHY.as_ref()) => return Ok(()),
            Some(s) if !s.running => break,
            None => break,
            _ if Instant::now() > deadline => break,
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    let tail = logs_tail(docker, name, 20).await;
    Err(Error::docker(
        format!("the squid container {name} did not become healthy; its last log lines:\n{tail}"),
        "fix the cause above (a busy port: set another OCSB_EGRESS_PORT), then `ocsb egress up` again",
    ))
}

pub async fn logs_tail(docker: &Docker, name: &str, n: usize) -> String {
    let mut s = docker.logs(
        name,
        Some(q::LogsOptionsBuilder::default().stdout(true).stderr(true).tail(&n.to_string()).build()),
    );
    let mut out = String::new();
    while let Some(Ok(l)) = s.next().await {
        out.push_str(&l.to_string());
    }
    out
}

pub async fn remove(docker: &Docker, name: &str) -> Result<bool> {
    let Some(st) = inspect(docker, name).await else { return Ok(false) };
    if st.labels.get("dev.opencode-sandbox.component").map(String::as_str) != Some("egress") {
        return Err(Error::state(
            format!("a container named {name} exists but was not created by ocsb (no egress label)"),
            "remove or rename it yourself (`docker rm -f`), or set another OCSB_NAME",
        ));
    }
    let _ = docker.stop_container(name, Some(q::StopContainerOptionsBuilder::default().t(5).build())).await;
    docker
        .remove_container(name, Some(q::RemoveContainerOptionsBuilder::default().force(true).build()))
        .await
        .map_err(|e| Error::docker(format!("cannot remove {name}: {e}"), "try `docker rm -f` yourself"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_output_with_error_or_warning_fails_even_with_exit_0() {
        assert!(parse_ok(0, "2026/12/01 00:00:00| Processing Configuration File: /x (depth 0)\n").is_ok());
        let e = parse_ok(0, "2026/12/01| ERROR: invalid regular expression: '^[a-'\n").unwrap_err();
        assert!(e.to_string().contains("invalid regular expression"));
        assert!(
            parse_ok(0, "2026/12/01| WARNING: (B) '.example.com' is a subdomain of 'jira.example.com'\n")
                .is_err()
        );
        assert!(parse_ok(1, "FATAL: Bungled squid.conf line 3").is_err());
    }
}
