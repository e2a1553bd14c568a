//! Published ports, forwarded by the gateway.
//!
//! Docker publishes no port of a container on an internal network (no `docker-proxy` is
//! started for it), and every container of the gateway is on one. So when a container of the
//! project starts, the gateway listens on `127.0.0.1:<host port>` for each port it publishes
//! (the policy allows loopback only) and relays each connection to the container's address on
//! its network. The sandbox reaches these ports as it reaches any port of the host's loopback
//! (`OCSB_LOOPBACK_PORTS`, or `OCSB_FORWARD_PORTS` in isolated mode). They close when the
//! session ends.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// Connections relayed at once per published port.
const MAX_RELAYS: usize = 64;

/// The ports published so far in this session: host port → where it leads.
#[derive(Default)]
pub(super) struct Ports {
    open: Mutex<HashMap<u16, Arc<Mutex<SocketAddr>>>>,
}

impl Ports {
    /// Forwards the ports the container inspected as `v` publishes, now that it has started, where they are among
    /// `allowed` (the ports declared for the sandbox: a container made in an earlier session,
    /// under other settings, is held to today's). What cannot be forwarded is returned as notes
    /// for the log.
    pub fn publish(&self, v: &Value, allowed: &[u16]) -> Vec<String> {
        let container = v["Id"].as_str().unwrap_or_default().get(..12).unwrap_or_default();
        let Some(ip) = address(v) else { return vec![format!("container {container} has no IPv4 address")] };
        let mut notes = Vec::new();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        for (host, port) in published(v) {
            if !allowed.contains(&host) {
                notes.push(format!(
                    "not publishing 127.0.0.1:{host}: not declared for the sandbox (OCSB_FORWARD_PORTS)"
                ));
                continue;
            }
            let to = SocketAddr::from((ip, port));
            if let Some(target) = open.get(&host) {
                // The same port again (a restart, or the next container on it): it leads here now.
                *target.lock().unwrap_or_else(|p| p.into_inner()) = to;
                continue;
            }
            match TcpListener::bind((Ipv4Addr::LOCALHOST, host)) {
                Ok(l) => {
                    let target = Arc::new(Mutex::new(to));
                    open.insert(host, target.clone());
                    std::thread::spawn(move || serve_to(l, &target));
                }
                Err(e) => notes.push(format!("cannot publish 127.0.0.1:{host}: {e}")),
            }
        }
        notes
    }
}

/// The container's IPv4 address on its (first) network.
fn address(v: &Value) -> Option<Ipv4Addr> {
    v["NetworkSettings"]["Networks"].as_object()?.values().find_map(|n| n["IPAddress"].as_str()?.parse().ok())
}

/// `(host port, container port)` of each TCP port the container publishes.
fn published(v: &Value) -> Vec<(u16, u16)> {
    let Some(bindings) = v["HostConfig"]["PortBindings"].as_object() else { return Vec::new() };
    let mut out = Vec::new();
    for (spec, list) in bindings {
        let (port, proto) = spec.split_once('/').unwrap_or((spec, "tcp"));
        let Ok(port) = port.parse::<u16>() else { continue };
        if proto != "tcp" {
            continue;
        }
        for b in list.as_array().into_iter().flatten() {
            if let Some(host) = b["HostPort"].as_str().and_then(|p| p.parse::<u16>().ok()).filter(|p| *p != 0)
            {
                out.push((host, port));
            }
        }
    }
    out
}

/// Relays every connection `listener` accepts to `to`, until the listener is shut down.
pub(super) fn serve(listener: TcpListener, to: SocketAddr) {
    serve_to(listener, &Mutex::new(to));
}

/// Relays every connection to the current `target` (a container started again may have
/// another address), until the listener is shut down.
fn serve_to(listener: TcpListener, target: &Mutex<SocketAddr>) {
    let busy = Arc::new(AtomicUsize::new(0));
    for client in listener.incoming() {
        let client = match client {
            Ok(c) => c,
            // `shutdown` of the listener: its network is gone.
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => return,
            // Out of descriptors or memory: wait a moment rather than spin.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if busy.load(Ordering::SeqCst) >= MAX_RELAYS {
            continue; // dropped: the client sees the connection close
        }
        let to = *target.lock().unwrap_or_else(|p| p.into_inner());
        busy.fetch_add(1, Ordering::SeqCst);
        let busy = busy.clone();
        let spawned = std::thread::Builder::new().name("ocsb-docker-port".into()).spawn(move || {
            let _ = relay(client, to);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            continue;
        }
    }
}

/// Both directions until each side ends; a half-close is passed on.
fn relay(client: TcpStream, to: SocketAddr) -> io::Result<()> {
    let server = TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
    let (mut c_in, mut s_out) = (client.try_clone()?, server.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = io::copy(&mut c_in, &mut s_out);
        let _ = s_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut s_in, mut c_out) = (server, client);
    let _ = io::copy(&mut s_in, &mut c_out);
    let _ = c_out.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn published_tcp_ports_and_the_address_are_read_from_the_inspection() {
        let v = json!({
            "HostConfig": {"PortBindings": {"80/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18080"}],
                                            "53/udp": [{"HostPort": "5353"}], "81/tcp": [{"HostPort": ""}]}},
            "NetworkSettings": {"Networks": {"ocsb-shop": {"IPAddress": "172.18.0.2"}}}
        });
        assert_eq!(published(&v), [(18080, 80)]);
        assert_eq!(address(&v), Some(Ipv4Addr::new(172, 18, 0, 2)));
    }
}
