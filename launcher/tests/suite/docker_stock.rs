//! The Docker gateway in front of a daemon as users run it: Docker's defaults (docker0 exists,
//! Docker writes its iptables rules), and a daemon started with `--iptables=false` that
//! forwards. Each daemon is the test's own, in the scenario's network namespace, so its bridges
//! and its rules stay there; the world is a namespace on documentation addresses joined by a
//! veth, with an allowed origin (192.0.2.1) and a blocked one (192.0.2.2).
//!
//! As the ordinary user, `ocsb exec -- docker …`: on the stock daemon a container (and a build's
//! `RUN` step) reaches the allowed origin through the filter on its own network, whatever proxy
//! the client named (docker0's, as the Docker client config used to), gets the filter's 403 for
//! the blocked one, and has no route of its own. On the daemon without rules, the gateway
//! starts nothing with a network and says why; the controls (root, outside the gateway, a
//! container given a default route) show that the stock daemon's rules keep such a container
//! in and that the other daemon lets it out.

use crate::suite::docker_gateway::{APPLETS, DOCKERD_STOP, NET_SH, OWN_DOCKERD, docker_scenario};
use crate::support::sandbox::{World, has};

/// The test image of these daemons: the gateway tests' tools, and `ip` for the controls.
const IMAGE: &str = "ocsb-test-busybox:stock";

/// The message of a refused start on a daemon without rules that forwards.
const REFUSED: &str = "ocsb: refused by the Docker gateway (rule daemon-firewall): the Docker daemon runs with \
    --iptables=false and IP forwarding on: containers on internal networks could reach any host directly, \
    around the filter; to allow it: start dockerd with iptables enabled (the default: remove --iptables=false \
    or \"iptables\": false from /etc/docker/daemon.json), or set OCSB_DOCKER=0";

/// Shell lines for the world, and a daemon with `flags` (its network flags) in the scenario's
/// namespace; the project's rules block 192.0.2.2. `$OL` is the origins' log.
fn world(flags: &str) -> String {
    format!(
        r#"{ORIGIN_NS}ip -n "$ON" addr add 192.0.2.2/24 dev ot$$
        # The world routes Docker's addresses back (as a network whose router is this host
        # does): only the daemon's rules, or their absence, decide what leaves a bridge.
        ip -n "$ON" route add 172.16.0.0/12 via 192.0.2.254
        SRV=$(mktemp -d); echo origin-ok > "$SRV/hello.txt"; chmod -R a+rX "$SRV"; OL=$(mktemp)
        O python3 -m http.server 80 --bind 0.0.0.0 --directory "$SRV" >"$OL" 2>&1 &
        APPLETS="{APPLETS} ip head"; IMAGE={IMAGE}; DOCKERD_FLAGS="{flags}"
        {OWN_DOCKERD}
        echo "forward=$(cat /proc/sys/net/ipv4/ip_forward) docker0=$(ip -4 -o addr show docker0 | awk '{{print $4}}')"
        printf 'block 192.0.2.2\n' > .opencode-sandbox/local/egress.conf; chown -R 1990 .opencode-sandbox/local
        # The build's context: the test's script, run by a RUN step.
        mkdir ctx; cp net.sh ctx/; printf 'FROM {IMAGE}\nCOPY net.sh /net.sh\nRUN sh /net.sh\n' > ctx/Dockerfile; chown -R 1990 ctx
        "#,
        ORIGIN_NS = crate::support::sandbox::ORIGIN_NS,
    )
}

/// Shell lines, as root and outside the gateway: a container on the internal network `$1`
/// with a default route (given one with `NET_ADMIN` where it has none) asks the origin for
/// `/leak.txt` directly.
const LEAK: &str = r#"leak() {
  GWA=$(DOCKER_HOST="$DH" docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$1")
  DOCKER_HOST="$DH" docker run --rm --network "$1" --cap-add NET_ADMIN "$IMAGE" sh -c \
    "ip route add default via $GWA 2>/dev/null; ip route | sed 's/^/route: /'
     printf 'GET /leak.txt HTTP/1.0\r\n\r\n' | nc -w 5 192.0.2.1 80 | head -1 | sed 's/^/leak:/'; echo leak-tried"
}
"#;

/// `ocsb doctor`'s line on the daemon's firewall, as the user in the group `docker`.
const DOCTOR: &str = r#"env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid 1990 --groups "$DG" -- "$OCSB" doctor </dev/null 2>&1 | grep docker-firewall | sed 's/^/doctor: /'
"#;

fn end() -> String {
    format!(
        "echo \"origin saw $(grep -c 'GET /hello.txt' \"$OL\") leak saw $(grep -c 'GET /leak.txt' \"$OL\")\"\n\
         {DOCKERD_STOP}ip netns pids \"$ON\" | xargs -r kill; ip netns del \"$ON\"\n"
    )
}

/// The run's (or with `prefix`, the build's) lines: the allowed origin's answer through the
/// filter at `proxy`, the filter's refusal of the blocked one by its rule, no direct route.
fn through_the_filter(out: &str, err: &str, prefix: &str, proxy: &str) {
    // The classic builder resets the terminal's colours after a step's stderr.
    let plain = out.replace("\u{1b}[0m", "");
    let lines: Vec<&str> = plain.lines().filter_map(|l| l.strip_prefix(prefix)).collect();
    assert!(lines.contains(&format!("http_proxy={proxy}").as_str()), "{prefix}proxy {proxy}: {out}\n{err}");
    assert!(lines.contains(&"allowed:origin-ok"), "{prefix}allowed: {out}\n{err}");
    assert!(
        lines.iter().any(|l| l.to_ascii_lowercase().starts_with("denied:x-egress-decision: block:local:1")),
        "{prefix}the filter's refusal by its rule: {out}\n{err}"
    );
    assert!(!lines.contains(&"denied:origin-ok"), "{prefix}the blocked origin answered: {out}\n{err}");
    let direct = lines.iter().find_map(|l| l.strip_prefix("direct=")).unwrap_or("missing");
    assert!(
        direct != "0" && direct != "missing",
        "{prefix}a direct connection went out ({direct}): {out}\n{err}"
    );
}

/// The gateway address of the project's network, as the scenario printed it.
fn network_gateway(out: &str) -> String {
    let gw = out.lines().find_map(|l| l.strip_prefix("network-gateway=")).unwrap_or_default().to_string();
    assert!(gw.parse::<std::net::Ipv4Addr>().is_ok(), "no gateway address of the project's network: {out}");
    assert_ne!(gw, "172.17.0.1", "the project's network is not docker0: {out}");
    gw
}

/// Docker's defaults: the container and the build's `RUN` step, both handed docker0's address
/// as their proxy by the client, reach the allowed origin through the filter on their own
/// network (isolated mode), and nothing else; the daemon's rules keep a container with a route
/// of its own in (control); `ocsb doctor` says the daemon keeps containers in.
#[test]
fn a_stock_daemons_containers_and_builds_reach_the_world_only_through_the_filter() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let docker0 = "http://172.17.0.1:3128";
    let body = format!(
        r#"{world}G=1990
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D 'docker run --rm -e HTTP_PROXY={docker0} -e http_proxy={docker0} -e HTTPS_PROXY={docker0} -e NO_PROXY=db -v "$PWD":/src {IMAGE} sh /src/net.sh'
        D 'cd ctx && DOCKER_BUILDKIT=0 docker build --no-cache --build-arg HTTP_PROXY={docker0} --build-arg http_proxy={docker0} -t built-$$ . 2>&1 | sed "s/^/build /"'
        N=$(DOCKER_HOST="$DH" docker network ls -q --filter label=dev.ocsb.project=$NAME)
        echo "network-gateway=$(DOCKER_HOST="$DH" docker network inspect -f '{{{{range .IPAM.Config}}}}{{{{.Gateway}}}}{{{{end}}}}' $N)"
        {LEAK}leak "$N"
        {DOCTOR}{end}"#,
        world = world("--ip-forward=true"),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "forward=1 docker0=172.17.0.1/16", &err);
    let proxy = format!("http://{}:3128", network_gateway(&out));
    through_the_filter(&out, &err, "", &proxy);
    through_the_filter(&out, &err, "build ", &proxy);
    assert!(!out.contains("http_proxy=http://172.17.0.1"), "docker0's address was handed on: {out}");
    has(&out, "leak-tried", &err);
    assert!(
        out.lines().any(|l| l.starts_with("route: default via")),
        "the control has a route: {out}\n{err}"
    );
    assert!(!out.contains("leak:HTTP"), "the stock daemon's rules let a routed container out: {out}\n{err}");
    has(&out, "origin saw 2 leak saw 0", &err);
    assert!(
        out.lines().any(|l| l.starts_with("doctor: ok")
            && l.contains("docker-firewall: the Docker daemon writes its firewall rules")),
        "{out}\n{err}"
    );
}

/// Docker's defaults in the netlock mode, as an installed system runs it (the setgid shim gives
/// only the sandbox the netlock group): the container, handed docker0's address by the client,
/// reaches the allowed origin through the filter on its own network, and nothing else.
#[test]
fn a_stock_daemons_containers_reach_the_world_only_through_the_filter_in_the_netlock_mode() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let g = crate::support::sandbox::netlock_gid();
    let docker0 = "http://172.17.0.1:3128";
    let body = format!(
        r#"{world}
        {installed}        N egress up >/dev/null
        N exec -- sh -c 'echo "sandbox gid $(id -g)"; docker run --rm -e HTTP_PROXY={docker0} -e http_proxy={docker0} -v "$PWD":/src {IMAGE} sh /src/net.sh'
        N egress down >/dev/null; rm -rf "$PFX"
        NET=$(DOCKER_HOST="$DH" docker network ls -q --filter label=dev.ocsb.project=$NAME)
        echo "network-gateway=$(DOCKER_HOST="$DH" docker network inspect -f '{{{{range .IPAM.Config}}}}{{{{.Gateway}}}}{{{{end}}}}' $NET)"
        {end}"#,
        world = world("--ip-forward=true"),
        end = end(),
        installed = crate::suite::docker_gateway::installed(g),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "forward=1 docker0=172.17.0.1/16", &err);
    has(&out, &format!("sandbox gid {g}"), &err);
    let proxy = format!("http://{}:3128", network_gateway(&out));
    through_the_filter(&out, &err, "", &proxy);
    has(&out, "origin saw 1 leak saw 0", &err);
}

/// A daemon without firewall rules (`--iptables=false`) that forwards (its default): the
/// gateway starts no container with a network and builds nothing, with the cause and the fix,
/// and no packet of the project's reaches the world; a container without a network still
/// runs. The control shows what the refusal prevents: on this daemon a container on an
/// internal network that has a route reaches the origin directly. `ocsb doctor` fails with the
/// same words.
#[test]
fn a_daemon_without_firewall_rules_that_forwards_is_refused() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let body = format!(
        r#"{world}G=1990
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D 'docker run --rm -v "$PWD":/src {IMAGE} sh /src/net.sh; echo run=$?
           cd ctx && DOCKER_BUILDKIT=0 docker build --no-cache -t built-$$ . 2>&1 | sed "s/^/build /"
           docker run --rm --network none {IMAGE} echo none-ok'
        echo "containers: $(DOCKER_HOST="$DH" docker ps -aq --filter label=dev.ocsb.project=$NAME | wc -l)"
        echo "networks: $(DOCKER_HOST="$DH" docker network ls -q --filter label=dev.ocsb.project=$NAME | wc -l)"
        DOCKER_HOST="$DH" docker network create --internal leaky >/dev/null
        {LEAK}leak leaky
        {DOCTOR}{end}"#,
        world = world("--iptables=false --ip6tables=false"),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "forward=1 docker0=172.17.0.1/16", &err);
    // `docker run` and `docker build` print the gateway's answer.
    assert_eq!(
        out.matches(REFUSED).count(),
        2,
        "the run and the build are refused with the cause: {out}\n{err}"
    );
    assert!(out.lines().any(|l| l.starts_with("run=") && l != "run=0"), "{out}");
    assert!(!out.contains("origin-ok"), "{out}");
    has(&out, "none-ok", &err);
    has(&out, "containers: 0", &err);
    has(&out, "networks: 0", &err);
    // The control: this daemon lets a container with a route out.
    assert!(
        out.lines().any(|l| l.starts_with("leak:HTTP/1.0 404")),
        "the control did not leak: {out}\n{err}"
    );
    has(&out, "origin saw 0 leak saw 1", &err);
    let doctor = out.lines().find(|l| l.starts_with("doctor: ")).unwrap_or_default();
    assert!(
        doctor.starts_with(
            "doctor: fail docker-firewall: the Docker daemon runs with --iptables=false and IP forwarding on"
        ) && doctor.contains("fix: start dockerd with iptables enabled")
            && doctor.ends_with("or set OCSB_DOCKER=0"),
        "{out}\n{err}"
    );
}

/// The agent cannot talk the gateway out of its refusal with a look-alike: a program named
/// `dockerd` in the sandbox whose command line names the daemon's data directory and no
/// `--iptables=false` (plus one whose configuration file is a FIFO, which would hold a reader).
/// The real daemon is restarted after the look-alikes started, so they come first in `/proc`,
/// where a first-match search would take them for the daemon. Still refused, and the origin
/// sees nothing.
#[test]
fn a_look_alike_dockerd_in_the_sandbox_does_not_lift_the_refusal() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let body = format!(
        r#"{world}G=1990
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D 'R=$(docker info -f "{{{{.DockerRootDir}}}}"); mkdir -p fk; cp /bin/bash fk/dockerd; mkfifo fk/fifo
           ./fk/dockerd -c "sleep 120; :" x --data-root "$R" &
           ./fk/dockerd -c "sleep 120; :" x --data-root="$R" --config-file fk/fifo &
           touch fake-up; for i in $(seq 600); do [ -e daemon-restarted ] && break; sleep 0.1; done
           echo "look-alikes: $(pgrep -c -x dockerd)"
           docker run --rm -v "$PWD":/src {IMAGE} sh /src/net.sh; echo run=$?' > "$P/d.out" &
        DJ=$!
        for i in $(seq 300); do [ -e fake-up ] && break; sleep 0.1; done
        # The daemon again, after the look-alikes: it now has the highest pid of them all.
        kill "$DPID"; for i in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
        dockerd --data-root "$DD/data" --exec-root "$DD/x" --pidfile "$DD/pid" -H "$DH" --group docker \
          $DOCKERD_FLAGS --storage-driver vfs >>"$DD/log" 2>&1 & DPID=$!
        for i in $(seq 150); do DOCKER_HOST="$DH" docker version >/dev/null 2>&1 && break; sleep 0.2; done
        echo "daemon pid $DPID, look-alikes $(pgrep -d, -x -u 1990 dockerd)"
        touch daemon-restarted; wait $DJ; cat "$P/d.out"
        {end}"#,
        world = world("--iptables=false --ip6tables=false"),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "forward=1 docker0=172.17.0.1/16", &err);
    // The look-alikes ran, with lower pids than the daemon.
    let pids = out.lines().find_map(|l| l.strip_prefix("daemon pid ")).unwrap_or_default();
    let (daemon, fakes) = pids.split_once(", look-alikes ").unwrap_or_default();
    let daemon: u32 = daemon.parse().unwrap_or(0);
    let fakes: Vec<u32> = fakes.split(',').filter_map(|p| p.trim().parse().ok()).collect();
    assert!(
        fakes.len() == 2 && fakes.iter().all(|f| *f < daemon),
        "look-alikes before the daemon: {out}\n{err}"
    );
    assert!(out.contains(REFUSED), "the look-alikes lifted the refusal: {out}\n{err}");
    assert!(out.lines().any(|l| l.starts_with("run=") && l != "run=0"), "{out}\n{err}");
    assert!(!out.contains("origin-ok"), "{out}\n{err}");
    has(&out, "origin saw 0 leak saw 0", &err);
}
