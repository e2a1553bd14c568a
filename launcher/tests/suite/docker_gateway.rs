//! The Docker gateway (`OCSB_DOCKER=1`) against the real daemon, as the ordinary user types
//! `ocsb exec -- docker …` (the user is in the group `docker`, as Docker's users are). Each way
//! out is refused with its rule in the error the Docker CLI prints, and the daemon is checked
//! afterwards for what must not exist; the positive controls write the project from a
//! container and run the project's own containers.
//!
//! Containers of the machine's daemon have no network (`--network none`): that daemon runs in
//! the machine's own network namespace, and these tests send no packet there. Refused calls
//! never reach it. The test of container traffic starts a daemon of its own in its namespace.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use crate::support::sandbox::{World, has, scenario};

/// Tagged by what it holds: a new tool in the list below gets a new tag, so a machine that has
/// the old image builds the new one.
pub(crate) const IMAGE: &str = "ocsb-test-busybox:4";

/// The busybox tools the test image links.
pub(crate) const APPLETS: &str = "sh echo cat ls sleep true id touch mv mkdir nc env grep printf sed httpd";

/// Fail (never skip) unless dockerd answers; import the test image once (busybox-static).
/// Shared with the `ocsb run` tests.
pub(crate) fn require_docker() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let up = Command::new("docker").args(["version", "--format", "{{.Server.APIVersion}}"]).output();
        assert!(
            up.is_ok_and(|o| o.status.success()),
            "Docker is not answering: start dockerd (tests/install-deps.sh installs docker.io; `make test` starts it)"
        );
        let have = Command::new("docker").args(["image", "inspect", IMAGE]).output();
        if !have.is_ok_and(|o| o.status.success()) {
            assert!(std::path::Path::new("/bin/busybox").exists(), "apt-get install busybox-static");
            let script = format!(
                "set -e; d=$(mktemp -d); mkdir -p $d/bin $d/tmp; cp /bin/busybox $d/bin/; \
                 for c in {APPLETS}; do ln -s busybox $d/bin/$c; done; \
                 tar -C $d -c . | docker import - {IMAGE} >/dev/null; rm -rf $d"
            );
            let o = Command::new("sh").args(["-c", &script]).output().unwrap();
            assert!(o.status.success(), "importing {IMAGE}: {}", String::from_utf8_lossy(&o.stderr));
        }
    });
}

/// A scenario whose `D cmd` runs `ocsb exec -- sh -c cmd` as the user with the group `docker`,
/// in a project named `NAME` (its label, and its state directory's name).
pub(crate) fn docker_scenario(w: &World, body: &str) -> (String, String) {
    require_docker();
    let g = crate::support::sandbox::netlock_gid();
    let script = format!(
        r#"DG=$(getent group docker | cut -d: -f3)
        D() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid {g} --groups "$DG" -- "$OCSB" exec -- sh -c "$1" </dev/null 2>&1; }}
        # A name of its own: the tests run side by side, and the label is the project's name.
        NAME=gw$$; mkdir -p .opencode-sandbox/local; echo "OCSB_NAME=$NAME" >> .opencode-sandbox/local/sandbox.conf
        chown -R 1990 .opencode-sandbox/local
        {body}"#
    );
    scenario(w, &script)
}

/// Shell lines that start a Docker daemon of the scenario's own, in its network namespace, so
/// that containers send packets only where the test built the network: `$DD` is its directory,
/// `$DH` its `DOCKER_HOST`, and `D` talks to it. `DOCKERD_STOP` ends it. Its network flags are
/// `$DOCKERD_FLAGS` when set; by default no bridge, no firewall rules and no forwarding (nothing
/// routes out of its networks, so the gateway serves it; a new namespace inherits the machine's
/// forwarding, which the machine's own dockerd turns on).
pub(crate) const OWN_DOCKERD: &str = r#"DD=$(mktemp -d /var/tmp/ocsb-dockerd-XXXXXX); chmod 711 "$DD"; DH="unix://$DD/sock"
[ -n "${DOCKERD_FLAGS:-}" ] || echo 0 > /proc/sys/net/ipv4/ip_forward
dockerd --data-root "$DD/data" --exec-root "$DD/x" --pidfile "$DD/pid" -H "$DH" --group docker \
  ${DOCKERD_FLAGS:---iptables=false --ip6tables=false --bridge=none --ip-forward=false} --storage-driver vfs >"$DD/log" 2>&1 & DPID=$!
for i in $(seq 150); do DOCKER_HOST="$DH" docker version >/dev/null 2>&1 && break; sleep 0.2; done
im=$(mktemp -d); chmod 755 $im; mkdir -p $im/bin $im/tmp; chmod 1777 $im/tmp; cp /bin/busybox $im/bin/
for c in $APPLETS; do ln -s busybox $im/bin/$c; done
tar -C $im -c . | DOCKER_HOST="$DH" docker import - "$IMAGE" >/dev/null; rm -rf $im
D() { env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid $G --groups "$DG" -- "$OCSB" exec -- sh -c "$1" </dev/null 2>&1; }
"#;
pub(crate) const DOCKERD_STOP: &str = r#"kill "$DPID"; for i in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
# What dockerd leaves mounted (its data, the namespace file of its exec root), deepest first.
awk -v d="$DD/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do umount -l "$m"; done
rm -rf "$DD" 2>/dev/null || true
"#;

/// What the Docker CLI prints for a refusal of `rule`.
fn refused(out: &str, rule: &str, err: &str) {
    let needle = format!("refused by the Docker gateway (rule {rule})");
    assert!(out.contains(&needle), "expected {needle:?}\nstdout:\n{out}\nstderr:\n{err}");
}

/// `docker run ARGS` in the sandbox must be refused by `rule`, and no container may exist.
fn run_refused(args: &str, rule: &str) {
    let w = World::new();
    let body = format!(
        "D 'docker run --rm --network none {args} {IMAGE} true'
        echo \"containers: $(docker ps -aq --filter label=dev.ocsb.project=$NAME | wc -l)\""
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, rule, &err);
    has(&out, "containers: 0", &err);
}

#[test]
fn a_bind_of_the_root_is_refused() {
    run_refused("-v /:/host", "bind");
}

#[test]
fn privileged_is_refused() {
    run_refused("--privileged", "privileged");
}

#[test]
fn the_host_pid_namespace_is_refused() {
    run_refused("--pid host", "host-namespace");
}

#[test]
fn the_host_network_is_refused() {
    let w = World::new();
    let (out, err) = docker_scenario(&w, &format!("D 'docker run --rm --network host {IMAGE} true'"));
    refused(&out, "network", &err);
}

#[test]
fn an_added_capability_is_refused() {
    run_refused("--cap-add SYS_ADMIN", "capabilities");
}

#[test]
fn a_device_is_refused() {
    run_refused("--device /dev/null", "devices");
}

#[test]
fn seccomp_unconfined_is_refused() {
    run_refused("--security-opt seccomp=unconfined", "security-opt");
}

#[test]
fn a_bind_of_the_ssh_keys_is_refused() {
    let w = World::new();
    let body = format!("D 'docker run --rm --network none -v $HOME/.ssh:/k:ro {IMAGE} cat /k/id_ed25519'");
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "bind", &err);
    assert!(!out.contains("PRIVATE KEY"), "{out}");
}

#[test]
fn a_bind_of_the_docker_socket_is_refused() {
    run_refused("-v /var/run/docker.sock:/var/run/docker.sock", "bind");
}

#[test]
fn a_body_with_an_unknown_field_is_refused() {
    let w = World::new();
    let body = format!(
        "D 'curl -s --unix-socket /run/docker.sock -H Content-Type:application/json \
         -d \"{{\\\"Image\\\":\\\"{IMAGE}\\\",\\\"HostConfig\\\":{{\\\"Future\\\":1}}}}\" http://docker/v1.41/containers/create'"
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "unknown-field", &err);
    assert!(out.contains("HostConfig.Future"), "{out}");
}

#[test]
fn a_container_the_project_did_not_make_is_out_of_reach() {
    let w = World::new();
    let body = format!(
        "C=$(docker create --network none {IMAGE} sleep 30)
        D \"docker start $C; docker exec $C true; docker rm -f $C; docker logs $C\"
        echo \"still there: $(docker inspect -f '{{{{.Id}}}}' $C | cut -c1-12) running: $(docker inspect -f '{{{{.State.Running}}}}' $C)\"
        docker rm -f $C >/dev/null"
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "ownership", &err);
    assert_eq!(out.matches("(rule ownership)").count(), 4, "start, exec, rm and logs: {out}");
    assert!(out.contains("running: false"), "the host's container was not started: {out}");
}

/// A user who may not open the daemon's socket (not in the group `docker`, as `X` runs): the
/// start says Docker will not work and why, once; inside, the Docker CLI prints the gateway's
/// answer with the cause and the fix, for its ping and version (which it sends before any
/// rule would judge it) and with a fixed API version alike, never an API version refusal or a
/// bare `EOF`. The log has it too. The control: the same commands in the group `docker`.
#[test]
fn a_user_without_access_to_the_daemon_is_told_the_cause_and_the_fix() {
    let w = World::new();
    let body = "X 'docker version; echo rc=$?; DOCKER_API_VERSION=1.41 docker ps; echo rc=$?' 2>&1
        echo \"log: $(grep -c 'FAIL GET /.*cannot reach the Docker daemon' \"$HOME/.local/share/opencode-sandbox/$NAME/egress/docker.log\")\"
        D 'docker version --format \"server {{.Server.APIVersion}}\"; docker ps >/dev/null && echo ps-ok'";
    let (out, err) = docker_scenario(&w, body);
    let fix = "cannot reach the Docker daemon at /run/docker.sock: permission denied; add yourself to the \
               group docker (sudo usermod -aG docker $USER, then log in again) or set OCSB_DOCKER=0";
    let said = format!("Error response from daemon: ocsb: the Docker gateway {fix}");
    assert_eq!(out.matches(&said).count(), 2, "docker version and docker ps: {out}\n{err}");
    assert_eq!(
        out.matches(&format!(
            "ocsb: warning: Docker will not work in the sandbox: {}",
            fix.replacen("; ", "; fix: ", 1)
        ))
        .count(),
        1,
        "said once at the start: {out}"
    );
    for wrong in ["api-version", "EOF", "rc=0"] {
        assert!(!out.contains(wrong), "{wrong}: {out}");
    }
    let logged = out.lines().find_map(|l| l.strip_prefix("log: ")?.trim().parse::<u32>().ok());
    assert!(logged.is_some_and(|n| n >= 2), "the gateway's log names the cause: {out}");
    assert!(out.contains("server 1.") && out.contains("ps-ok"), "in the group docker it works: {out}\n{err}");
}

#[test]
fn the_projects_containers_write_the_project_and_are_its_own() {
    let w = World::new();
    let body = format!(
        "D 'docker run --rm --network none -v \"$PWD\":/src {IMAGE} sh -c \"echo from-container > /src/written\"; \
            echo rc=$?; docker run -d --name keep-$$ --network none {IMAGE} sleep 30 >/dev/null; \
            docker exec keep-$$ echo exec-ok; docker ps --format \"{{{{.Names}}}}\"; docker rm -f keep-$$ >/dev/null; echo done'
        echo \"host sees: $(cat written)\"
        echo \"left: $(docker ps -aq --filter label=dev.ocsb.project=$NAME | wc -l)\"
        echo \"denied: $(grep -c DENY \"$HOME/.local/share/opencode-sandbox/$NAME/egress/docker.log\" 2>/dev/null || echo 0)\""
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "rc=0", &err);
    has(&out, "host sees: from-container", &err);
    has(&out, "exec-ok", &err);
    has(&out, "done", &err);
    has(&out, "left: 0", &err);
    has(&out, "denied: 0", &err);
}

#[test]
fn the_checkout_rule_holds_in_a_container_too() {
    let w = World::new();
    let body = format!(
        "D 'docker run --rm --network none -v \"$PWD\":/src {IMAGE} sh -c \"echo evil > /src/.git/hooks/pre-commit; echo hook=\\$?\"'
        echo \"hook on the host: $(cat .git/hooks/pre-commit 2>/dev/null | head -c 20)\"
        cat \"$HOME/.local/share/opencode-sandbox/$NAME/egress/docker.log\""
    );
    let (out, err) = docker_scenario(&w, &body);
    assert!(out.contains("hook=1") || out.contains("Read-only file system"), "{out}\n{err}");
    assert!(!out.contains("hook on the host: evil"), "a container wrote a git hook: {out}");
}

/// A repository nested in the project (here `vendor/lib`, the user's own, there before the
/// start) has its git metadata read-only in the sandbox, and so in its containers: the gateway
/// judges binds by the sandbox's plan with the nested repositories in it. Without them a
/// container could add `core.fsmonitor` to the nested config, which git on the host runs.
/// The control: the nested checkout's own files stay writable.
#[test]
fn a_nested_repositorys_metadata_is_read_only_in_a_container_too() {
    let w = World::new();
    let body = format!(
        "mkdir -p vendor/lib; chown -R 1990 vendor
        (cd vendor/lib && U git init -q . && U git commit -q --allow-empty -m v)
        # Kept outside the project: root's own file there would be swept as a container's.
        CB=$(mktemp); cp vendor/lib/.git/config \"$CB\"
        D 'docker run --rm --network none -v \"$PWD\":/src {IMAGE} sh -c \"echo evil >> /src/vendor/lib/.git/config; echo config=\\$?; echo ok > /src/vendor/lib/file; echo file=\\$?\"'
        cmp -s \"$CB\" vendor/lib/.git/config && echo config-unchanged; rm -f \"$CB\"
        echo \"host file: $(cat vendor/lib/file)\""
    );
    let (out, err) = docker_scenario(&w, &body);
    assert!(
        out.contains("config=") && !out.contains("config=0"),
        "a container wrote the nested config: {out}\n{err}"
    );
    has(&out, "config-unchanged", &err);
    has(&out, "file=0", &err);
    has(&out, "host file: ok", &err);
}

/// The directories the sandbox pins (`.git`, the way to a hidden file) are mount points in a
/// container too: a container that could move `.git` aside would leave the next container's
/// read-only `.git/hooks` bound on a directory of its own making, and the real hooks writable.
#[test]
fn a_container_cannot_move_what_the_sandbox_pinned() {
    let w = World::new();
    let body = format!(
        "echo 'OCSB_HIDE=(secrets/deploy/key .vscode/token)' >> .opencode-sandbox/local/sandbox.conf
        mkdir -p secrets/deploy .vscode; echo KEY > secrets/deploy/key; echo TOKEN > .vscode/token
        chown -R 1990 .opencode-sandbox/local secrets .vscode
        D 'docker run --rm --network none -v \"$PWD\":/src {IMAGE} sh -c \"echo key=\\$(cat /src/secrets/deploy/key) token=\\$(cat /src/.vscode/token); echo x > /src/.vscode/t; echo vscode=\\$?; mv /src/.git /src/g; echo git=\\$?; mv /src/secrets /src/s; echo secrets=\\$?; mv /src/secrets/deploy /src/secrets/d; echo deploy=\\$?; echo ok > /src/out; echo write=\\$?; mkdir /src/tools; mv /src/tools /src/t; echo control=\\$?\"'
        echo \"host: $(ls -d .git secrets/deploy g s secrets/d 2>/dev/null | tr '\\n' ' ')out=$(cat out) t=$(ls -d t)\""
    );
    let (out, err) = docker_scenario(&w, &body);
    for moved in ["git=", "secrets=", "deploy="] {
        assert!(out.contains(moved) && !out.contains(&format!("{moved}0")), "{moved}: {out}\n{err}");
    }
    has(&out, "key= token=", &err); // still hidden alongside the pins
    assert!(out.contains("vscode=") && !out.contains("vscode=0"), ".vscode is read-only: {out}");
    has(&out, "write=0", &err);
    has(&out, "control=0", &err); // an ordinary directory moves
    has(&out, "host: .git secrets/deploy out=ok t=t", &err);
}

/// What a container runs to show its way out: busybox's `nc` through the proxy the gateway
/// set (its wget crashes when statically linked), to the allowed and the blocked origin, and
/// once directly. `$HOLD` seconds of open input after each request (squid drops a request
/// whose end of input comes with it; the builtin filter does not, so it gets none).
pub(crate) const NET_SH: &str = r#"env | grep ^http_proxy=
p=${http_proxy#http://}
get() { { printf 'GET http://%s/hello.txt HTTP/1.0\r\n\r\n' "$1"; sleep "${HOLD:-0}"; } | nc -w 10 "${p%:*}" "${p##*:}"; }
get 192.0.2.1 | sed 's/^/allowed:/'
get 192.0.2.2 | sed 's/^/denied:/'
echo | nc -w 5 192.0.2.1 80; echo direct=$?
"#;

/// Shell lines for a world namespace with the allowed origin (192.0.2.1) and the blocked one
/// (192.0.2.2, by `block 192.0.2.2` in the project's rules), each serving `hello.txt`; `$OL` is
/// their log; a Docker daemon of the scenario's own, with forwarding off as Docker's iptables
/// rules would keep an internal network's packets in (this daemon runs without them, so no
/// rules go into any namespace but the test's). `end_container_world` counts the origin's
/// requests and takes it all down.
fn container_world() -> String {
    format!(
        r#"{ORIGIN_NS}ip -n "$ON" addr add 192.0.2.2/24 dev ot$$
        SRV=$(mktemp -d); echo origin-ok > "$SRV/hello.txt"; chmod -R a+rX "$SRV"; OL=$(mktemp)
        O python3 -m http.server 80 --bind 0.0.0.0 --directory "$SRV" >"$OL" 2>&1 &
        APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        echo 0 > /proc/sys/net/ipv4/ip_forward
        printf 'block 192.0.2.2\n' > .opencode-sandbox/local/egress.conf; chown -R 1990 .opencode-sandbox/local
        "#,
        ORIGIN_NS = crate::support::sandbox::ORIGIN_NS,
    )
}

fn end_container_world() -> String {
    format!(
        "echo \"origin saw $(grep -c 'GET /hello.txt' \"$OL\")\"\n{DOCKERD_STOP}ip netns pids \"$ON\" | xargs -r kill; ip netns del \"$ON\"\n"
    )
}

/// The container got the allowed origin's answer and the filter's refusal of the blocked one by
/// its rule, the blocked origin never answered, the direct connection failed, and (host side)
/// the origin saw the one request the filter let through.
fn reached_only_through_the_filter(out: &str, err: &str) {
    has(out, "allowed:origin-ok", err);
    assert!(
        out.lines().any(|l| l.to_ascii_lowercase().starts_with("denied:x-egress-decision: block:local:1")),
        "the filter's refusal: {out}\n{err}"
    );
    assert!(!out.contains("denied:origin-ok"), "the blocked origin answered: {out}\n{err}");
    assert!(
        out.contains("direct=") && !out.contains("direct=0"),
        "a direct connection went out: {out}\n{err}"
    );
    has(out, "origin saw 1", err);
}

/// A container reaches the world only through the filter, judged by the project's rules: an
/// allowed origin answers, a blocked one gets the filter's 403 (logged with the container's
/// address and the rule), and a direct connection has no route. Its own daemon, in the
/// scenario's namespace, with the world on documentation addresses.
#[test]
fn a_container_reaches_the_world_only_through_the_filter() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let body = format!(
        r#"{world}G=1990
        # The isolated mode: the launcher runs as the user (here no setgid shim gives only the
        # sandbox the netlock group, as an installed system does).
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D 'docker run --rm -v "$PWD":/src {IMAGE} sh /src/net.sh; touch phase1; while [ ! -e phase2 ]; do sleep 0.2; done' & DJ=$!
        for i in $(seq 300); do [ -e phase1 ] && break; sleep 0.2; done
        # While the session still holds its lease: the project's network goes, and another
        # network (someone else's) gets the same subnet. Its containers must not reach the
        # listener lent for the old one.
        N=$(DOCKER_HOST="$DH" docker network ls -q --filter label=dev.ocsb.project=$NAME)
        SUB=$(DOCKER_HOST="$DH" docker network inspect -f '{{{{range .IPAM.Config}}}}{{{{.Subnet}}}}{{{{end}}}}' $N)
        GWA=$(DOCKER_HOST="$DH" docker network inspect -f '{{{{range .IPAM.Config}}}}{{{{.Gateway}}}}{{{{end}}}}' $N)
        DOCKER_HOST="$DH" docker network rm $N >/dev/null
        DOCKER_HOST="$DH" docker network create --internal --subnet "$SUB" other >/dev/null
        DOCKER_HOST="$DH" docker run --rm --network other {IMAGE} sh -c "printf 'GET http://192.0.2.1/hello.txt HTTP/1.0\r\n\r\n' | nc -w 5 $GWA 3128; echo other=\$?" 2>&1 | sed 's/^/other: /'
        touch phase2; wait $DJ
        sed 's/^/log: /' "$HOME/.local/share/opencode-sandbox/$NAME/egress/access.log"
        {end}"#,
        world = container_world(),
        end = end_container_world(),
    );
    let (out, err) = docker_scenario(&w, &body);
    reached_only_through_the_filter(&out, &err);
    assert!(out.lines().any(|l| l.starts_with("denied:HTTP/1.0 403")), "the filter's 403: {out}\n{err}");
    assert!(out.lines().any(|l| l.starts_with("http_proxy=http://") && l.ends_with(":3128")), "{out}");
    // Another network on the same subnet after the project's was removed: nothing answers.
    has(&out, "other: other=1", &err);
    assert!(!out.contains("other: HTTP/"), "a stale lease served another network: {out}");
    // Host side: the filter logged both requests, with the container's own address and the
    // deciding rule.
    let log: Vec<&str> = out.lines().filter(|l| l.starts_with("log: ")).collect();
    let from_container = |l: &&str| l.split_whitespace().nth(2).is_some_and(|c| c.starts_with("172."));
    assert!(
        log.iter().any(|l| from_container(l)
            && l.contains("rule=default")
            && l.contains("http://192.0.2.1/hello.txt")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| from_container(l) && l.contains("rule=block:") && l.contains("192.0.2.2")),
        "{log:#?}"
    );
}

/// Shell lines for an installation as the packages lay it out (`<prefix>/bin/ocsb`, and the
/// set-gid shim `<prefix>/libexec/ocsb/ocsb-netlock-exec` of the netlock group `g`), so that only
/// the sandbox runs as that group; `N` runs that `ocsb` as the user in the group `docker`.
/// The caller removes `$PFX`.
pub(crate) fn installed(g: u32) -> String {
    let shim =
        crate::support::sandbox::shell_quote(&crate::support::sandbox::shim_binary().display().to_string());
    format!(
        r#"PFX=$(mktemp -d /var/tmp/ocsb-pfx-XXXXXX); mkdir -p "$PFX/bin" "$PFX/libexec/ocsb"
        cp "$OCSB" "$PFX/bin/ocsb"; cp {shim} "$PFX/libexec/ocsb/ocsb-netlock-exec"; chmod -R a+rX "$PFX"
        chown root:{g} "$PFX/libexec/ocsb/ocsb-netlock-exec"; chmod 2755 "$PFX/libexec/ocsb/ocsb-netlock-exec"
        N() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid 1990 --groups "$DG" -- "$PFX/bin/ocsb" "$@" </dev/null 2>&1; }}
"#
    )
}

/// The netlock mode, as an installed system runs it: the launcher as the user's own group, and
/// the setgid shim giving only the sandbox the netlock group. The container reaches the allowed
/// origin through the filter (lent its network's listener, as in the isolated mode), gets the
/// filter's 403 for the blocked one, and its direct connection fails.
#[test]
fn a_container_reaches_the_world_only_through_the_filter_in_the_netlock_mode() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let g = crate::support::sandbox::netlock_gid();
    let body = format!(
        r#"{world}
        {installed}        N egress up >/dev/null
        N exec -- sh -c 'echo "sandbox gid $(id -g)"; docker run --rm -v "$PWD":/src {IMAGE} sh /src/net.sh'
        N egress down >/dev/null; rm -rf "$PFX"
        {end}"#,
        world = container_world(),
        end = end_container_world(),
        installed = installed(g),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, &format!("sandbox gid {g}"), &err);
    reached_only_through_the_filter(&out, &err);
}

/// A container made in one session and started in a later one reaches the filter again: the
/// lease on its network ended with the first session's gateway, and `start` through the next
/// one makes the filter reachable there again.
#[test]
fn a_container_started_in_a_later_session_reaches_the_filter_again() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let body = format!(
        r#"{world}G=1990
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D "docker create --name k-$NAME -v \"\$PWD\":/src {IMAGE} sh /src/net.sh >/dev/null && echo made"
        D "docker start -a k-$NAME"
        DOCKER_HOST="$DH" docker rm -f "k-$NAME" >/dev/null
        {end}"#,
        world = container_world(),
        end = end_container_world(),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "made", &err);
    reached_only_through_the_filter(&out, &err);
}

/// With the squid backend the gateway relays the network's listener to squid (squid takes no
/// lent socket): the container reaches the allowed origin and gets squid's 403 for the blocked
/// one, by the same rules, and its direct connection fails.
#[test]
fn a_container_reaches_the_world_through_squid_too() {
    let w = World::new();
    std::fs::write(w.proj.join("net.sh"), NET_SH).unwrap();
    let body = format!(
        r#"{world}G=1990
        printf 'OCSB_NETWORK=isolated\nOCSB_EGRESS_BACKEND=squid\n' >> .opencode-sandbox/local/sandbox.conf
        E() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid 1990 --groups "$DG" -- "$OCSB" egress "$@" </dev/null 2>&1; }}
        E up | tail -2
        D 'docker run --rm -e HOLD=2 -v "$PWD":/src {IMAGE} sh /src/net.sh'
        E logs --no-follow | sed 's/^/log: /'
        E down >/dev/null
        {end}"#,
        world = container_world(),
        end = end_container_world(),
    );
    let (out, err) = docker_scenario(&w, &body);
    reached_only_through_the_filter(&out, &err);
    assert!(out.lines().any(|l| l.starts_with("denied:HTTP/1.1 403")), "squid's 403: {out}\n{err}");
    let log: Vec<&str> = out.lines().filter(|l| l.starts_with("log: ")).collect();
    assert!(log.iter().any(|l| l.contains("block:") && l.contains("192.0.2.2")), "{log:#?}\n{err}");
}

/// A port a container publishes is forwarded by the gateway (Docker forwards none from an
/// internal network) on the host's loopback, and an isolated sandbox reaches it through
/// `OCSB_FORWARD_PORTS`; a port not declared there is refused.
#[test]
fn a_published_port_is_reached_through_the_forwards() {
    let w = World::new();
    std::fs::write(w.proj.join("hello.txt"), "from-web\n").unwrap();
    let body = format!(
        r#"G={g}; APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        D() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid 1990 --groups "$DG" -- "$OCSB" exec -- sh -c "$1" </dev/null 2>&1; }}
        printf 'OCSB_NETWORK=isolated\nOCSB_FORWARD_PORTS=(18080)\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local hello.txt
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D 'docker run -d --name web-$NAME -p 18080:80 -v "$PWD":/www {IMAGE} httpd -f -p 80 -h /www >/dev/null
           for i in $(seq 50); do curl -s --noproxy "*" -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.1; done
           echo "forwarded: $(curl -s --noproxy "*" --max-time 5 http://127.0.0.1:18080/hello.txt)"
           docker run --rm -p 18081:80 {IMAGE} true
           docker rm -f web-$NAME >/dev/null'
        {DOCKERD_STOP}"#,
        g = crate::support::sandbox::netlock_gid(),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "forwarded: from-web", &err);
    // A port the user did not declare for the sandbox is not published at all.
    refused(&out, "ports", &err);
    assert!(out.contains("publishing on 18081: not a port declared for the sandbox"), "{out}");
}

/// `docker events` shows the project's own objects only: a container another user made is not
/// named, one of the project's is.
#[test]
fn events_show_only_the_projects_objects() {
    let w = World::new();
    let body = format!(
        "C=$(docker create --name outside-$NAME --network none {IMAGE} true)
        D \"docker create --name mine-$NAME --network none {IMAGE} true >/dev/null; \
           sleep 1; docker events --since 0 --until \\$(date +%s) --format '{{{{.Actor.Attributes.name}}}}' | sort -u | sed 's/^/event: /'; \
           docker rm mine-$NAME >/dev/null\"
        docker rm -f $C >/dev/null"
    );
    let (out, err) = docker_scenario(&w, &body);
    assert!(out.lines().any(|l| l.starts_with("event: mine-gw")), "the project's own event: {out}\n{err}");
    assert!(!out.contains("outside-"), "another's container was named: {out}");
}

/// A container gets the sandbox's process limit when it asks for none, and cannot ask for more.
/// The Docker CLI (a Go client, as Compose v2 is) sends list filters as objects; the project's
/// label joins them in the same form, so a filtered list works and still shows only the
/// project's. Before, the label went in as a list and the daemon refused the whole call.
#[test]
fn filtered_lists_work_and_show_only_the_projects() {
    let w = World::new();
    let body = format!(
        "H=$(docker create --network none --name f-$NAME-host {IMAGE} true)
        D \"docker create --network none --name f-$NAME {IMAGE} true >/dev/null
            docker ps -a --filter name=f-$NAME --format 'listed {{{{.Names}}}}'
            echo created: \\$(docker ps -aq --filter status=created | wc -l)\"
        docker rm -f f-$NAME $H >/dev/null"
    );
    let (out, err) = docker_scenario(&w, &body);
    let listed: Vec<&str> = out.lines().filter(|l| l.starts_with("listed ")).collect();
    assert_eq!(listed.len(), 1, "only the project's container: {out}\n{err}");
    assert!(!listed[0].ends_with("-host") && listed[0].starts_with("listed f-gw"), "{out}");
    has(&out, "created: 1", &err);
}

/// Bodies that would choose for the daemon what the gateway checked: a form body on a build
/// (the daemon reads its `networkmode` and `remote` over the query's) and an endpoint's
/// `NetworkID` (the daemon joins that network, whatever the endpoint's key says). The `remote`
/// is on loopback: this is the machine's daemon, and a regression must send no packet out.
#[test]
fn a_form_body_and_an_endpoints_network_id_are_refused() {
    let w = World::new();
    let body = format!(
        r#"D "curl -s --unix-socket /run/docker.sock -X POST -H 'Content-Type: application/x-www-form-urlencoded' \
              --data 'networkmode=host&remote=http://127.0.0.1:9/Dockerfile' 'http://d/v1.41/build?networkmode=ocsb-$NAME'; echo
            curl -s --unix-socket /run/docker.sock -X POST -H 'Content-Type: application/json' \
              --data '{{\"Image\":\"{IMAGE}\",\"HostConfig\":{{\"NetworkMode\":\"ocsb-$NAME\"}},\"NetworkingConfig\":{{\"EndpointsConfig\":{{\"ocsb-$NAME\":{{\"NetworkID\":\"bridge\"}}}}}}}}' \
              'http://d/v1.41/containers/create?name=nid-$NAME'; echo"
        echo "containers: $(docker ps -aq --filter name=nid-$NAME | wc -l)""#
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "request", &err);
    assert!(out.contains("a form body"), "{out}");
    refused(&out, "network", &err);
    assert!(out.contains("NetworkID` is the daemon's to choose"), "{out}");
    has(&out, "containers: 0", &err);
}

/// `network disconnect` names a container in its body: it must be the project's, as for
/// `connect`.
#[test]
fn a_foreign_container_is_not_disconnected() {
    let w = World::new();
    let body = format!(
        r#"G=1990; APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        C=$(DOCKER_HOST="$DH" docker create --network none {IMAGE} true)
        D "docker network create n-$NAME >/dev/null; docker network disconnect n-$NAME $C"
        DOCKER_HOST="$DH" docker rm -f "$C" >/dev/null; DOCKER_HOST="$DH" docker network rm "n-$NAME" >/dev/null
        {DOCKERD_STOP}"#
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "ownership", &err);
}

/// A network is pinned by the id the gateway checked: a container made on the project's network
/// `p`, whose network is then removed and replaced by someone else's network of that name (not
/// internal), does not start on the impostor. The daemon would look the name up again at start.
#[test]
fn a_container_does_not_join_a_network_that_took_its_networks_name() {
    let w = World::new();
    let body = format!(
        r#"G=1990; APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        D "docker network create p-$NAME >/dev/null && docker create --name c-$NAME --network p-$NAME {IMAGE} sleep 30 >/dev/null && docker network rm p-$NAME >/dev/null && echo made"
        # The same through `network connect` of a stopped container, which keeps the endpoint.
        D "docker network create q-$NAME >/dev/null && docker create --name d-$NAME {IMAGE} sleep 30 >/dev/null && docker network connect q-$NAME d-$NAME && docker network rm q-$NAME >/dev/null && echo connected"
        DOCKER_HOST="$DH" docker network create "p-$NAME" >/dev/null; DOCKER_HOST="$DH" docker network create "q-$NAME" >/dev/null
        D "docker start c-$NAME >/dev/null 2>&1; echo start=\$?; docker start d-$NAME >/dev/null 2>&1; echo start=\$?"
        echo "running: $(DOCKER_HOST="$DH" docker inspect -f '{{{{.State.Running}}}}' "c-$NAME" "d-$NAME" | sort -u)"
        echo "on the impostor: $(DOCKER_HOST="$DH" docker network inspect -f '{{{{len .Containers}}}}' "p-$NAME" "q-$NAME" | sort -u)"
        DOCKER_HOST="$DH" docker rm -f "c-$NAME" "d-$NAME" >/dev/null; DOCKER_HOST="$DH" docker network rm "p-$NAME" "q-$NAME" >/dev/null
        {DOCKERD_STOP}"#
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "made", &err);
    has(&out, "connected", &err);
    assert!(!out.lines().any(|l| l == "start=0"), "{out}\n{err}");
    assert_eq!(out.lines().filter(|l| l.starts_with("start=")).count(), 2, "{out}\n{err}");
    has(&out, "running: false", &err);
    has(&out, "on the impostor: 0", &err);
}

#[test]
fn a_container_gets_a_process_limit() {
    let w = World::new();
    let body = format!(
        "D \"docker create --name pl-$NAME --network none {IMAGE} true >/dev/null; \
            docker run --rm --network none --pids-limit 100000 {IMAGE} true\"
        echo \"pids $(docker inspect -f '{{{{.HostConfig.PidsLimit}}}}' pl-$NAME)\"; docker rm pl-$NAME >/dev/null"
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "pids 4096", &err); // what the daemon holds
    refused(&out, "resources", &err);
}

#[test]
fn refusals_are_logged_on_the_host() {
    let w = World::new();
    let body = format!(
        "D 'docker run --rm --privileged {IMAGE} true' >/dev/null
        cat \"$HOME/.local/share/opencode-sandbox/$NAME/egress/docker.log\""
    );
    let (out, err) = docker_scenario(&w, &body);
    assert!(
        out.lines().any(|l| l.contains("DENY POST") && l.contains("/containers/create rule=privileged")),
        "{out}\n{err}"
    );
}

/// A sandbox reaches its own gateway only: another sandbox with the host's `/tmp` and no
/// `$XDG_RUNTIME_DIR` (the scenario clears the environment) finds no gateway socket to act
/// through as another sandbox, in `/tmp` or in the home. Before, the socket lived in a
/// directory of `/tmp`. (Not `/var/tmp`: there the suite keeps other tests' homes, of the same
/// test user, which no real home is.)
#[test]
fn another_sandbox_cannot_reach_a_gateway() {
    let w = World::new();
    let body = r#"echo 'OCSB_TMP=shared' >> .opencode-sandbox/local/sandbox.conf
        EG="$HOME/.local/share/opencode-sandbox/$NAME/egress"
        # What a killed launcher leaves: a socket nothing answers on.
        mkdir -p "$EG"; chown -R 1990 "$HOME/.local"; chmod 700 "$EG"
        python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$EG/docker-1-stale.sock"
        chown 1990 "$EG/docker-1-stale.sock"
        D 'sleep 8' & A=$!
        live() { ls "$EG" | grep -v stale | grep -c '^docker-.*[.]sock$'; }
        for i in $(seq 50); do [ "$(live)" -gt 0 ] && break; sleep 0.2; done
        echo "host sockets: $(live)"
        D 'docker version --format "own {{.Server.APIVersion}}"
           for s in $(find /tmp "$HOME" -type s 2>/dev/null); do
             v=$(docker -H "unix://$s" version --format "{{.Server.APIVersion}}" 2>/dev/null)
             echo "socket $s"; [ -n "$v" ] && echo "reached $s"; done'
        wait $A
        [ -e "$EG/docker-1-stale.sock" ] || echo "stale socket removed"
        echo "left: $(ls "$EG" | grep -c '^docker-.*[.]sock$')""#;
    let (out, err) = docker_scenario(&w, body);
    has(&out, "stale socket removed", &err);
    has(&out, "left: 0", &err);
    assert!(out.lines().any(|l| l.starts_with("own 1.")), "the sandbox's own gateway answers: {out}\n{err}");
    assert!(!out.lines().any(|l| l.starts_with("host sockets: 0")), "{out}\n{err}");
    assert!(out.contains("host sockets: "), "{out}\n{err}");
    assert!(!out.contains("reached "), "another gateway answered: {out}\n{err}");
}

#[test]
fn a_hidden_file_stays_hidden_in_a_container() {
    let w = World::new();
    let body = format!(
        "echo 'OCSB_HIDE=(secret.env)' >> .opencode-sandbox/local/sandbox.conf
        echo TOPSECRET > secret.env; chown -R 1990 .opencode-sandbox/local secret.env
        D 'echo sandbox sees: $(cat secret.env); docker run --rm --network none -v \"$PWD\":/src {IMAGE} sh -c \"echo container sees: \\$(cat /src/secret.env); echo x > /src/secret.env; echo write=\\$?\"'
        echo \"host file: $(cat secret.env)\""
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "sandbox sees:", &err); // the positive control of the setting: hidden in the sandbox
    has(&out, "container sees:", &err);
    assert!(!out.contains("sees: TOPSECRET"), "{out}");
    assert!(!out.contains("write=0"), "{out}");
    has(&out, "host file: TOPSECRET", &err);
}

#[test]
fn a_sessions_containers_are_kept_and_listed_or_removed_when_it_ends() {
    let w = World::new();
    let body = format!(
        "D \"docker run -d --name keep-$NAME --network none {IMAGE} sleep 60 >/dev/null\"
        echo \"kept: $(docker ps -aq --filter label=dev.ocsb.project=$NAME | wc -l)\"
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"$HOME\" setpriv --reuid 1990 --regid 1990 --groups \"$DG\" -- \"$OCSB\" docker ls
        echo OCSB_DOCKER_CLEANUP=1 >> .opencode-sandbox/local/sandbox.conf
        D \"docker run -d --name gone-$NAME --network none {IMAGE} sleep 60 >/dev/null\"
        echo \"after cleanup: $(docker ps -a --filter label=dev.ocsb.project=$NAME --format '{{{{.Names}}}}' | tr '\\n' ' ')\"
        docker rm -f keep-$NAME >/dev/null"
    );
    let (out, err) = docker_scenario(&w, &body);
    assert!(out.contains("are kept; `ocsb docker ls` lists the project's"), "{out}\n{err}");
    has(&out, "kept: 1", &err);
    // Kept, and stopped: nothing the session started runs on after it.
    assert!(out.contains("ocsb: docker: stopped keep-gw"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("container") && l.contains("keep-gw") && l.contains("exited")),
        "{out}"
    );
    assert!(out.contains("removed the 1 container(s) and 0 network(s) this session made"), "{out}");
    // Only the session's own: the first session's container stays.
    assert!(out.lines().any(|l| l.starts_with("after cleanup: keep-gw") && !l.contains("gone-")), "{out}");
}

/// Shell lines that lay out `<dir>/sub/.git` as a repository whose `core.fsmonitor` touches
/// `marker`: what a container plants for the user's next `git status` to run.
fn fsmonitor_repo(dir: &str, marker: &Path) -> String {
    format!(
        "mkdir -p {dir}/sub/.git/objects {dir}/sub/.git/refs\n\
         echo 'ref: refs/heads/main' > {dir}/sub/.git/HEAD\n\
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = touch {}; false\\n' > {dir}/sub/.git/config\n",
        marker.display()
    )
}

/// Shell lines for the host after the session: whether a repository is planted in `sub`, then
/// the user's `git status` there, and whether it ran the planted command (`marker`).
fn git_status_in_sub(marker: &Path) -> String {
    format!(
        "echo \"planted repo on the host: $(test -e sub/.git && echo yes || echo no)\"
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=\"$HOME\" setpriv --reuid 1990 --regid 1990 --clear-groups -- git -C sub status >/dev/null 2>&1
        echo \"fsmonitor ran: $(test -e {} && echo yes || echo no)\"",
        marker.display()
    )
}

/// A container the agent leaves running with the project bound writable is stopped (kept) when
/// the session ends, before the launcher's look at the checkouts: what it plants in its grace
/// period (a repository whose `core.fsmonitor` runs a command) is found and moved aside, and
/// the user's `git status` there afterwards runs nothing. Without the stop, the look came
/// first and found nothing, and the container planted after it. A container with only a
/// volume is stopped too (one with the project open could hand it a descriptor over a socket
/// in the volume); restart policies that would have the daemon start either again are refused.
#[test]
fn a_container_that_writes_the_project_does_not_outlive_its_session() {
    let w = World::new();
    let pwned = w.home.join("PWNED-late");
    std::fs::write(w.proj.join("plant.sh"), format!("sleep 2\n{}sleep 60\n", fsmonitor_repo("/src", &pwned)))
        .unwrap();
    let body = format!(
        "mkdir -p sub && chown 1990 sub plant.sh
        D \"docker run -d --name w-$NAME --user 1990:1990 --network none -v $PWD:/src {IMAGE} sh /src/plant.sh >/dev/null
           docker run -d --name v-$NAME --network none -v data-$NAME:/d {IMAGE} sleep 60 >/dev/null
           docker run -d --name r-$NAME --restart on-failure --network none {IMAGE} true\"
        echo \"writer running: $(docker inspect -f '{{{{.State.Running}}}}' w-$NAME)\"
        echo \"volume-only running: $(docker inspect -f '{{{{.State.Running}}}}' v-$NAME)\"
        echo \"restart-on-failure made: $(docker ps -aq --filter name=r-$NAME | wc -l)\"
        sleep 3
        {host_check}
        docker rm -f w-$NAME v-$NAME >/dev/null; docker volume rm data-$NAME >/dev/null",
        host_check = git_status_in_sub(&pwned)
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "restart", &err);
    has(&out, "restart-on-failure made: 0", &err);
    let stopped = out.lines().find(|l| l.starts_with("ocsb: docker: stopped ")).unwrap_or_default();
    assert!(
        stopped.contains("w-gw") && stopped.contains("v-gw"),
        "the session says what it stopped: {out}\n{err}"
    );
    has(&out, "writer running: false", &err);
    has(&out, "volume-only running: false", &err);
    // The plant came in the grace period, so the look after the stop found it.
    assert!(out.contains("sub/.git") && out.contains("appeared while the sandbox ran"), "{out}\n{err}");
    has(&out, "planted repo on the host: no", &err);
    has(&out, "fsmonitor ran: no", &err);
}

/// The class behind stopping every container, not only those with a writable bind: a container
/// with only a volume is handed an open descriptor of the project, over a socket in that
/// volume, by one that has the project bound, and keeps it after that one stops. It is
/// stopped with the session too, before it plants (eight seconds after it got the
/// descriptor), so the user's `git status` afterwards runs nothing.
#[test]
fn a_container_handed_the_project_over_a_volume_is_stopped_too() {
    let w = World::new();
    let pwned = w.home.join("PWNED-relay");
    let tool = w.proj.join("fdpass");
    let cc = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&tool)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/fdpass.c"))
        .output()
        .unwrap();
    assert!(cc.status.success(), "cc -static fdpass.c: {}", String::from_utf8_lossy(&cc.stderr));
    std::fs::write(
        w.proj.join("keep.sh"),
        format!("cd /proc/self/fd/3 || exit 1\nsleep 8\n{}sleep 60\n", fsmonitor_repo(".", &pwned)),
    )
    .unwrap();
    let body = format!(
        "mkdir -p sub && chown 1990 sub fdpass keep.sh
        D \"docker run -d --name w-$NAME --user 1990:1990 --network none -v $PWD:/src -v fv-$NAME:/v {IMAGE} \
              sh -c 'cp /src/fdpass /src/keep.sh /v/; while [ ! -S /v/s ]; do sleep 0.1; done; /v/fdpass dir /v/s /src; sleep 60' >/dev/null
           docker run -d --name k-$NAME --user 1990:1990 --network none -v fv-$NAME:/v {IMAGE} \
              sh -c 'while [ ! -f /v/keep.sh ]; do sleep 0.1; done; exec /v/fdpass get /v/s sh /v/keep.sh' >/dev/null
           sleep 2; echo relayed\"
        echo \"keeper mounts: $(docker inspect -f '{{{{range .Mounts}}}}{{{{.Type}}}} {{{{end}}}}' k-$NAME)\"
        echo \"keeper running: $(docker inspect -f '{{{{.State.Running}}}}' k-$NAME)\"
        sleep 10
        {host_check}
        docker rm -f w-$NAME k-$NAME >/dev/null; docker volume rm fv-$NAME >/dev/null",
        host_check = git_status_in_sub(&pwned)
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "relayed", &err);
    has(&out, "keeper mounts: volume", &err);
    has(&out, "keeper running: false", &err);
    has(&out, "planted repo on the host: no", &err);
    has(&out, "fsmonitor ran: no", &err);
}

/// The command line of a Docker watcher of the scenario's launchers, for `pgrep -f`.
const WATCHER: &str = "^ocsb __docker-watch [0-9]+ $HOME/";

/// Shell functions of the killed-launcher tests: `K CMD` runs `ocsb exec -- sh -c CMD` as the
/// user in the background (`$!` is the launcher), `running NAME` is a container's state, and
/// `up NAME` waits until it runs.
fn killable() -> String {
    let g = crate::support::sandbox::netlock_gid();
    format!(
        r#"K() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid {g} --groups "$DG" -- "$OCSB" exec -- sh -c "$1" </dev/null >/dev/null 2>&1 & }}
        running() {{ docker inspect -f '{{{{.State.Running}}}}' $1 2>/dev/null; }}
        up() {{ for i in $(seq 300); do [ "$(running $1)" = true ] && return; sleep 0.1; done; }}
        "#
    )
}

/// Shell lines of two sessions of the project, each in a launcher of its own, both running
/// when they end: `$KILLED`'s container `o-$NAME` plants in `sub`, 6 s after it starts unless
/// it is stopped first, a repository whose `core.fsmonitor` makes `marker`; `$LIVE`'s runs
/// `l-$NAME`.
fn two_sessions(w: &World, marker: &Path) -> String {
    // The plant comes 6 s after the test lays `go`, right before it kills the launcher: the
    // window is the stop's to meet, however slowly the machine started the containers.
    let plant = format!(
        "trap 'exit 0' TERM\nwhile [ ! -e /src/go ]; do sleep 0.1 & wait $!; done\nsleep 6 & wait $!\n{}sleep 60 & wait $!\n",
        fsmonitor_repo("/src", marker)
    );
    std::fs::write(w.proj.join("plant.sh"), plant).unwrap();
    format!(
        r#"{killable}mkdir -p sub && chown 1990 sub plant.sh
        K "docker run -d --name o-$NAME --user 1990:1990 --network none -v $PWD:/src {IMAGE} sh /src/plant.sh; sleep 60"; KILLED=$!
        K "docker run -d --name l-$NAME --network none {IMAGE} sleep 60; sleep 60"; LIVE=$!
        up o-$NAME; up l-$NAME
        "#,
        killable = killable()
    )
}

/// A launcher that dies (SIGKILL) makes no end, and its containers ran on: one with the
/// project bound planted a repository whose `core.fsmonitor` runs a command seconds later, and
/// the user's `git status` ran it. Each session now writes down what it sets running and holds
/// that journal locked while its launcher lives; the next start stops what a dead launcher's
/// journal lists, before its check. A container of a session that is still running is left
/// alone. The launcher's watcher is killed with it here (a killed process group, a reboot), as
/// it would stop the container first.
#[test]
fn containers_of_a_killed_launcher_are_stopped_by_the_next_start() {
    let w = World::new();
    let pwned = w.home.join("PWNED-orphan");
    let body = format!(
        "{sessions}touch go; pkill -KILL -f \"{WATCHER}\"; kill -KILL $KILLED; sleep 0.5
        echo \"orphan after the kill: $(running o-$NAME)\"
        D 'echo next-started'
        echo \"orphan after the next start: $(running o-$NAME)\"
        echo \"live session's container: $(running l-$NAME)\"
        kill -TERM $LIVE; sleep 7
        {host_check}
        docker rm -f o-$NAME l-$NAME >/dev/null",
        sessions = two_sessions(&w, &pwned),
        host_check = git_status_in_sub(&pwned)
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "orphan after the kill: true", &err);
    assert!(
        out.lines()
            .any(|l| l.starts_with("ocsb: docker: stopped o-gw") && l.contains("whose launcher ended")),
        "the next start says what it stopped:\n{out}\n{err}"
    );
    has(&out, "next-started", &err);
    has(&out, "orphan after the next start: false", &err);
    has(&out, "live session's container: true", &err);
    has(&out, "planted repo on the host: no", &err);
    has(&out, "fsmonitor ran: no", &err);
}

/// A launcher killed with `SIGKILL` has its containers stopped by its watcher at once, with no
/// start of the project: before, they ran until the next one, and a container that planted a
/// repository with `core.fsmonitor` in that time had the user's `git status` run it. A live
/// session's container runs on, and the watcher says what it stopped in the project's
/// `docker.log`. A session that sets no container running starts no watcher.
#[test]
fn a_killed_launchers_containers_are_stopped_at_once_by_its_watcher() {
    let w = World::new();
    let pwned = w.home.join("PWNED-watched");
    let body = format!(
        "{sessions}K 'docker version >/dev/null 2>&1; docker ps >/dev/null 2>&1; sleep 4'; QUIET=$!; sleep 1.5
        echo \"watchers: $(pgrep -c -f \"{WATCHER}\")\"
        PIPE=$(readlink /proc/$(pgrep -f \"^ocsb __docker-watch $KILLED $HOME/\")/fd/0)
        # The fewest of a few looks: a child the launcher is starting holds a copy until its exec.
        ends() {{ ls -l /proc/[0-9]*/fd/ 2>/dev/null | grep -c -F \" -> $PIPE\"; }}
        echo \"ends of its pipe: $( (ends; sleep 0.2; ends; sleep 0.2; ends) | sort -n | head -1)\"
        touch go; kill -KILL $KILLED
        for i in $(seq 150); do [ \"$(running o-$NAME)\" = false ] && break; sleep 0.1; done
        echo \"orphan after the kill: $(running o-$NAME)\"
        echo \"live session's container: $(running l-$NAME)\"
        sleep 7
        {host_check}
        L=$(find \"$HOME\" -name docker.log | head -1)
        grep -c \"stopped o-$NAME (kept, not removed): left running by session\" \"$L\" | sed 's/^/logged: /'
        J=$(find \"$HOME\" -type d -name docker-sessions | head -1); echo \"journals: $(ls \"$J\" | wc -l)\"
        kill -TERM $LIVE; wait $LIVE
        for i in $(seq 50); do pgrep -f \"{WATCHER}\" >/dev/null || break; sleep 0.1; done
        echo \"watchers left: $(pgrep -c -f \"{WATCHER}\")\"
        docker rm -f o-$NAME l-$NAME >/dev/null",
        sessions = two_sessions(&w, &pwned),
        host_check = git_status_in_sub(&pwned)
    );
    let (out, err) = docker_scenario(&w, &body);
    // The two sessions that set a container running, not the third, which only asked the
    // daemon what runs: a watcher starts before a session's first container does.
    has(&out, "watchers: 2", &err);
    // The launcher's and the watcher's alone: no child of the launcher (the sandbox, the
    // filter, git) holds the writing end, which would keep the watcher from waking.
    has(&out, "ends of its pipe: 2", &err);
    has(&out, "orphan after the kill: false", &err);
    has(&out, "live session's container: true", &err);
    has(&out, "planted repo on the host: no", &err);
    has(&out, "fsmonitor ran: no", &err);
    has(&out, "logged: 1", &err);
    has(&out, "journals: 1", &err); // the live session's
    has(&out, "watchers left: 0", &err);
}

/// A start made right after a kill, while the watcher is still stopping a container that
/// ignores `SIGTERM` (a process 1 with no handler; the daemon kills it after the grace
/// period), waits for that stop: it took the journal the watcher held for a live session's,
/// and checked the checkouts while the container ran on.
#[test]
fn a_start_right_after_a_kill_waits_for_the_watchers_stops() {
    let w = World::new();
    let body = format!(
        "{killable}K \"docker run -d --name o-$NAME --network none {IMAGE} sleep 300; sleep 60\"; KILLED=$!
        up o-$NAME; kill -KILL $KILLED; sleep 0.3
        AT=$(D 'echo sandbox-at $(date +%s%N)' | sed -n 's/^sandbox-at //p')
        F=$(docker inspect -f '{{{{.State.FinishedAt}}}}' o-$NAME)
        echo \"the sandbox ran: $([ -n \"$AT\" ] && echo yes)\"
        echo \"the container stopped first: $([ $(date -d \"$F\" +%s%N) -le \"$AT\" ] && echo yes || echo no)\"
        docker rm -f o-$NAME >/dev/null",
        killable = killable()
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "the sandbox ran: yes", &err);
    has(&out, "the container stopped first: yes", &err);
}

/// The journal names the daemon its session used, and the next start asks that one whatever
/// its own settings: a start with `OCSB_DOCKER=0`, then one that would reach another daemon,
/// each took the dead session's container for gone and dropped the journal, and the container
/// ran on. A journal whose daemon does not answer refuses the start until it does.
#[test]
fn a_killed_launchers_containers_are_stopped_on_the_daemon_they_ran_on() {
    let w = World::new();
    let body = format!(
        r#"G={g}; APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        N() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" "$@" setpriv --reuid 1990 --regid $G --groups "$DG" -- "$OCSB" exec -- sh -c 'echo next-started' </dev/null 2>&1; }}
        K() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid $G --groups "$DG" -- "$OCSB" exec -- sh -c "$1" </dev/null >/dev/null 2>&1 & }}
        running() {{ DOCKER_HOST=$DH docker inspect -f '{{{{.State.Running}}}}' $1 2>/dev/null; }}
        up() {{ for i in $(seq 300); do [ "$(running $1)" = true ] && return; sleep 0.1; done; }}
        K "docker run -d --name o-$NAME --network none {IMAGE} sleep 300; sleep 60"; KILLED=$!
        up o-$NAME; pkill -KILL -f "{WATCHER}"; kill -KILL $KILLED; sleep 0.5
        J=$(find "$HOME" -type d -name docker-sessions | head -1); echo "journals: $(ls "$J" | wc -l)"
        mv "$DD/sock" "$DD/away"
        N OCSB_DOCKER=0 DOCKER_HOST=unix:///var/run/docker.sock | grep -c 'could not be stopped' | sed 's/^/refused while its daemon is away: /'
        mv "$DD/away" "$DD/sock"
        N OCSB_DOCKER=0 | grep -E 'next-started|stopped o-'
        echo "running after the start: $(running o-$NAME)"
        echo "journals left: $(ls "$J" | wc -l)"
        DOCKER_HOST=$DH docker rm -f o-$NAME >/dev/null
        {DOCKERD_STOP}"#,
        g = crate::support::sandbox::netlock_gid(),
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "journals: 1", &err);
    has(&out, "refused while its daemon is away: 1", &err);
    assert!(out.lines().any(|l| l.starts_with("ocsb: docker: stopped o-gw")), "{out}\n{err}");
    has(&out, "next-started", &err);
    has(&out, "running after the start: false", &err);
    has(&out, "journals left: 0", &err);
}

/// A second request hidden in an escaped path (`%0D%0A`) never reaches the daemon: the path is
/// forwarded as it came, and one with escapes is refused.
#[test]
fn a_request_smuggled_in_the_path_is_refused() {
    let w = World::new();
    let script = w.root.join("bin/smuggle.py");
    std::fs::write(
        &script,
        format!(
            r#"import socket, urllib.parse
body = '{{"Image":"{IMAGE}","Labels":{{"atk":"smuggled"}},"HostConfig":{{"Privileged":true,"NetworkMode":"none"}}}}'
inner = "x HTTP/1.1\r\nHost: d\r\n\r\nPOST /v1.41/containers/create HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%sGET /images/y" % (len(body), body)
path = "/images/" + urllib.parse.quote(inner, safe="") + "/json"
s = socket.socket(socket.AF_UNIX); s.connect("/run/docker.sock")
s.sendall(("GET %s HTTP/1.1\r\nHost: d\r\n\r\n" % path).encode())
data = b""
while b"\r\n" not in data:
    chunk = s.recv(4096)
    if not chunk: break
    data += chunk
print("answer:", data.decode(errors="replace").split("\r\n")[0])
"#
        ),
    )
    .unwrap();
    let body = format!(
        "D 'python3 {}'
        sleep 0.5; echo \"smuggled: $(docker ps -aq --filter label=atk=smuggled | wc -l)\"",
        script.display()
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "answer: HTTP/1.1 400 Bad Request", &err);
    has(&out, "smuggled: 0", &err);
}

/// A link in the project that leads elsewhere, or any subdirectory, is not bound: the agent
/// could point it at `/` between the check and the daemon's mount at `start`.
#[test]
fn a_link_in_the_project_is_not_bound() {
    let w = World::new();
    let body = format!(
        "D 'mkdir -p sub; ln -s sub lnk; docker create --network none -v \"$PWD/lnk\":/h {IMAGE} cat /h/etc/shadow'
        echo \"created: $(docker ps -aq --filter label=dev.ocsb.project=$NAME | wc -l)\""
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "bind", &err);
    assert!(out.contains("a subdirectory"), "{out}");
    has(&out, "created: 0", &err);
}

/// Docker Compose (v1, `docker-compose`, the one Debian 12 packages: v2 is not packaged here)
/// brings a small project up through the gateway, as the user runs it (their own group: the
/// netlock group would lock the gateway's relay to the container, which a user's launcher
/// never runs as): a service with a bind of the project, a named volume and a port published
/// on 127.0.0.1, reached from the isolated sandbox through `OCSB_FORWARD_PORTS`; `down -v`
/// removes the container, the network and the volume.
#[test]
fn compose_brings_a_project_up_through_the_gateway() {
    testkit::host::require_all(&[("docker-compose", "docker-compose")]);
    let w = World::new();
    std::fs::write(w.proj.join("hello.txt"), "from-compose\n").unwrap();
    std::fs::write(
        w.proj.join("docker-compose.yml"),
        format!(
            "services:\n  web:\n    image: {IMAGE}\n    command: httpd -f -p 80 -h /www\n    volumes:\n      - .:/www\n      - data:/data\n    ports:\n      - \"127.0.0.1:18080:80\"\nvolumes:\n  data: {{}}\n"
        ),
    )
    .unwrap();
    let body = format!(
        r#"G=1990; APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        printf 'OCSB_NETWORK=isolated\nOCSB_FORWARD_PORTS=(18080)\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local hello.txt docker-compose.yml
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        D 'docker-compose -p web up -d 2>&1 | tail -3
           for i in $(seq 50); do curl -s --noproxy "*" -o /dev/null http://127.0.0.1:18080/ && break; sleep 0.1; done
           echo "compose: $(curl -s --noproxy "*" --max-time 5 http://127.0.0.1:18080/hello.txt)"
           echo "volume: $(docker volume ls -q | grep -c web_data)"
           docker-compose -p web down -v 2>&1 | tail -3'
        echo "left: $(DOCKER_HOST="$DH" docker ps -aq | wc -l) containers, $(DOCKER_HOST="$DH" docker volume ls -q | wc -l) volumes"
        {DOCKERD_STOP}"#
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "compose: from-compose", &err);
    has(&out, "volume: 1", &err);
    has(&out, "left: 0 containers, 0 volumes", &err);
}

/// A network of the project's name that the gateway did not make (here by root, as another
/// Docker user could) is not joined: it is neither labelled as the project's nor internal, and
/// containers on it could route out. After it is removed, the gateway makes its own.
#[test]
fn a_network_of_the_projects_name_made_by_another_is_not_joined() {
    let w = World::new();
    let g = crate::support::sandbox::netlock_gid();
    let body = format!(
        r#"G={g}; APPLETS="{APPLETS}"; IMAGE={IMAGE}
        {OWN_DOCKERD}
        DOCKER_HOST="$DH" docker network create "ocsb-$NAME" >/dev/null
        D 'docker create --name n1-$NAME {IMAGE} true'
        echo "made: $(DOCKER_HOST="$DH" docker ps -aq | wc -l)"
        DOCKER_HOST="$DH" docker network rm "ocsb-$NAME" >/dev/null
        D 'docker create --name n2-$NAME {IMAGE} true >/dev/null && echo created'
        echo "internal: $(DOCKER_HOST="$DH" docker network inspect -f '{{{{.Internal}}}}' "ocsb-$NAME")"
        DOCKER_HOST="$DH" docker rm -f "n2-$NAME" >/dev/null; DOCKER_HOST="$DH" docker network rm "ocsb-$NAME" >/dev/null
        {DOCKERD_STOP}"#
    );
    let (out, err) = docker_scenario(&w, &body);
    refused(&out, "ownership", &err);
    assert!(out.contains("exists that ocsb did not make for project"), "{out}");
    has(&out, "made: 0", &err);
    has(&out, "created", &err);
    has(&out, "internal: true", &err);
}
