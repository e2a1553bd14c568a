//! Pulls through the Docker gateway, on a stock daemon of the test's own (default bridge,
//! iptables on, in the scenario's network namespace, `--insecure-registry` for the world's
//! plain-HTTP registries). The world namespace serves two real registries (Debian's
//! `docker-registry`): an allowed one (192.0.2.1) holding an image pushed as root, and one the
//! project's rules block (192.0.2.2); a web server that is no registry (192.0.2.3) answers
//! with a page; a service listens on the scenario's loopback, where the daemon lives.
//!
//! As the ordinary user, `ocsb exec -- docker …`: the allowed pull works; the blocked registry
//! and the loopback service are refused with the deciding rule and log no request; no page
//! any of them sends reaches the agent. Root's pulls outside the gateway are the controls:
//! they reach the blocked registry and the loopback service, and the daemon quotes the page.

use crate::suite::docker_gateway::{APPLETS, DOCKERD_STOP, OWN_DOCKERD, docker_scenario};
use crate::support::sandbox::{World, has};

/// The test image of this daemon.
const IMAGE: &str = "ocsb-test-busybox:pull";

/// What Python's web server says in its 404 page: the body the daemon quotes in its error.
const PAGE: &str = "File not found";

/// The world: the registries and the web server, the loopback service, the daemon, the image
/// pushed to the allowed registry. `$RL1`, `$RL2`, `$WL`, `$LL` are their logs.
fn world() -> String {
    format!(
        r#"{ORIGIN_NS}ip -n "$ON" addr add 192.0.2.2/24 dev ot$$; ip -n "$ON" addr add 192.0.2.3/24 dev ot$$
        ip -n "$ON" route add 172.16.0.0/12 via 192.0.2.254
        REG=$(mktemp -d)
        for i in 1 2; do
          printf 'version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 192.0.2.%s:80\n' "$REG/data$i" "$i" > "$REG/config$i.yml"
          O docker-registry serve "$REG/config$i.yml" >"$REG/log$i" 2>&1 &
        done
        RL1="$REG/log1"; RL2="$REG/log2"
        WEB=$(mktemp -d); WL=$(mktemp); O python3 -m http.server 80 --bind 192.0.2.3 --directory "$WEB" >"$WL" 2>&1 &
        LOOP=$(mktemp -d); LL=$(mktemp); python3 -m http.server 8099 --bind 127.0.0.1 --directory "$LOOP" >"$LL" 2>&1 &
        for i in $(seq 100); do
          [ "$(O ss -Hltn | grep -c -e '192.0.2.1:80 ' -e '192.0.2.2:80 ' -e '192.0.2.3:80 ')" = 3 ] && ss -Hltn | grep -q '127.0.0.1:8099 ' && break; sleep 0.1
        done
        APPLETS="{APPLETS}"; IMAGE={IMAGE}; DOCKERD_FLAGS="--ip-forward=true --insecure-registry 192.0.2.0/24"; G=1990
        {OWN_DOCKERD}
        R() {{ DOCKER_HOST="$DH" docker "$@" 2>&1; }}
        R tag {IMAGE} 192.0.2.1:80/ocsb/pulled:1 >/dev/null; R push 192.0.2.1:80/ocsb/pulled:1 >/dev/null && echo pushed
        R rmi 192.0.2.1:80/ocsb/pulled:1 >/dev/null
        printf 'block 192.0.2.2\n' > .opencode-sandbox/local/egress.conf
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        "#,
        ORIGIN_NS = crate::support::sandbox::ORIGIN_NS,
    )
}

/// Lines that count the requests each service logged, as `saw NAME N`.
const COUNT: &str = r#"saw() { echo "saw $1 $(grep -c "$2" "$3")"; }
"#;

fn end() -> String {
    format!(
        "{DOCKERD_STOP}ip netns pids \"$ON\" | xargs -r kill; ip netns del \"$ON\"\n\
         jobs -p | xargs -r kill; rm -rf \"$REG\" \"$WEB\" \"$LOOP\" \"$WL\" \"$LL\"\n"
    )
}

/// The lines of `out` between `start` and `stop` markers.
fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = format!("== {name}\n");
    let from =
        out.find(&start).map(|i| i + start.len()).unwrap_or_else(|| panic!("no section {name}: {out}"));
    let rest = &out[from..];
    &rest[..rest.find("\n== ").map(|i| i + 1).unwrap_or(rest.len())]
}

#[test]
fn pulls_reach_only_registries_the_egress_rules_allow_and_no_reply_reaches_the_agent() {
    let w = World::new();
    let body = format!(
        r#"{world}{COUNT}
        echo "== allowed"
        B=$(grep -c '/v2/ocsb/pulled/manifests/1' "$RL1")
        D 'docker pull 192.0.2.1:80/ocsb/pulled:1 && docker image inspect -f "image {{{{.RepoTags}}}}" 192.0.2.1:80/ocsb/pulled:1'
        echo "registry1 manifest requests: $(( $(grep -c '/v2/ocsb/pulled/manifests/1' "$RL1") - B ))"
        echo "== missing-tag"
        D 'docker pull 192.0.2.1:80/ocsb/pulled:nope; echo "exit=$?"'
        echo "== blocked"
        D 'docker pull 192.0.2.2:80/ocsb/pulled:1; echo "exit=$?"; docker run --rm 192.0.2.2:80/ocsb/pulled:1 true; echo "run-exit=$?"'
        saw registry2 '/v2/' "$RL2"
        echo "== loopback"
        D 'docker pull 127.0.0.1:8099/x/y:z; echo "exit=$?"; docker pull 127.0.0.1/x/y:z; echo "exit=$?"'
        saw loopback '/v2/' "$LL"
        echo "== web"
        D 'docker pull 192.0.2.3:80/x/y:z; echo "exit=$?"'
        saw web '/v2/' "$WL"
        echo "== plugin"
        D 'docker plugin install --grant-all-permissions 192.0.2.1:80/ocsb/plugin:1; echo "exit=$?"'
        echo "== logs"
        A=$(find "$HOME" -path '*/egress/access.log' | head -1); DL=$(find "$HOME" -path '*/egress/docker.log' | head -1)
        grep ' docker-pull ' "$A"
        echo "docker.log holds the page: $(grep -c '{PAGE}' "$DL")"
        echo "== control"
        R pull 192.0.2.2:80/ocsb/pulled:1 >/dev/null; saw registry2 '/v2/' "$RL2"
        R pull 127.0.0.1:8099/x/y:z; saw loopback '/v2/' "$LL"
        echo "== end"
        {end}"#,
        world = world(),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    let ctx = format!("\nstdout:\n{out}\nstderr:\n{err}");
    has(&out, "pushed", &err);

    // The positive control: the allowed registry serves the pull.
    let allowed = section(&out, "allowed");
    assert!(
        allowed.contains("Status: Downloaded newer image for 192.0.2.1:80/ocsb/pulled:1"),
        "the allowed pull: {ctx}"
    );
    assert!(
        allowed.lines().any(|l| l.starts_with("image [") && l.contains("192.0.2.1:80/ocsb/pulled:1")),
        "{ctx}"
    );
    assert!(
        allowed
            .lines()
            .any(|l| l.starts_with("registry1 manifest requests: ") && l != "registry1 manifest requests: 0"),
        "{ctx}"
    );

    // A failed pull from an allowed registry: the fixed message, not the registry's reply.
    let missing = section(&out, "missing-tag");
    assert!(missing.contains("ocsb: the pull of 192.0.2.1:80/ocsb/pulled:nope failed"), "{ctx}");
    assert!(!missing.contains("manifest unknown") && !missing.contains("MANIFEST_UNKNOWN"), "{ctx}");
    assert!(!missing.contains("exit=0"), "{ctx}");

    // The blocked registry: refused by the rule that blocks it, for a pull and for the pull
    // `docker run` makes of a missing image; it saw no request.
    let blocked = section(&out, "blocked");
    let rule = "(rule egress): the pull of 192.0.2.2:80/ocsb/pulled:1 makes the Docker daemon connect to \
                192.0.2.2:80, which the egress rules deny (block .opencode-sandbox/local/egress.conf:1)";
    assert_eq!(blocked.matches(rule).count(), 2, "{ctx}");
    has(blocked, "saw registry2 0", &err);

    // The loopback service of the daemon's namespace: refused (the port rule; a private
    // address on 443/80), and it saw no request.
    let loopback = section(&out, "loopback");
    assert!(loopback.contains("connect to 127.0.0.1:8099, which the egress rules deny (port)"), "{ctx}");
    assert!(loopback.contains("connect to 127.0.0.1:443, which the egress rules deny (private)"), "{ctx}");
    has(loopback, "saw loopback 0", &err);
    assert!(!loopback.contains(PAGE), "{ctx}");

    // A host the rules allow that answers with a page: reached, and the page stays out.
    let web = section(&out, "web");
    assert!(web.contains("ocsb: the pull of 192.0.2.3:80/x/y:z failed"), "{ctx}");
    assert!(!web.contains(PAGE) && !web.contains("DOCTYPE"), "{ctx}");
    assert!(web.lines().any(|l| l.starts_with("saw web ") && l != "saw web 0"), "{ctx}");

    assert!(section(&out, "plugin").contains("(rule endpoint)"), "plugins are refused: {ctx}");

    // Each decision in the filter's log, in its format.
    let logs = section(&out, "logs");
    assert!(logs.contains("docker-pull NONE_NONE/000 rule=default CONNECT 192.0.2.1:80 peer=-"), "{ctx}");
    assert!(
        logs.contains("docker-pull TCP_DENIED/403 rule=block:local:1 CONNECT 192.0.2.2:80 peer=-"),
        "{ctx}"
    );
    assert!(logs.contains("docker-pull TCP_DENIED/403 rule=port CONNECT 127.0.0.1:8099 peer=-"), "{ctx}");
    assert!(logs.contains("docker-pull TCP_DENIED/403 rule=private CONNECT 127.0.0.1:443 peer=-"), "{ctx}");
    // The daemon's message, page and all, is the user's to read.
    assert!(!logs.contains("docker.log holds the page: 0"), "{ctx}");

    // The controls: outside the gateway the daemon reaches both, and quotes the page.
    let control = section(&out, "control");
    assert!(control.lines().any(|l| l.starts_with("saw registry2 ") && l != "saw registry2 0"), "{ctx}");
    assert!(control.lines().any(|l| l.starts_with("saw loopback ") && l != "saw loopback 0"), "{ctx}");
    assert!(control.contains(PAGE), "the daemon quotes the loopback service's page: {ctx}");
}
