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
//!
//! The gateway pulls by itself, each connection through the project's filter. A registry front
//! (192.0.2.4) that redirects blobs elsewhere shows that each redirect hop is judged as a
//! connection of its own: to the blocked registry or the loopback service it is refused, while
//! the daemon, asked directly by root, follows it.

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

/// The lines of `out` between the `== name` marker and the next.
pub(crate) fn section<'a>(out: &'a str, name: &str) -> &'a str {
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
        sed 's/^/log: /' "$HOME/.local/share/opencode-sandbox/$NAME/egress/access.log"
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

    // The positive control: the allowed registry serves the pull. The daemon has this image
    // already (it pushed it), so only the name is new: the gateway tags what the manifest names.
    // (A pull that downloads every blob is the redirect test's.)
    let allowed = section(&out, "allowed");
    assert!(
        allowed.contains("Status: Downloaded newer image for 192.0.2.1:80/ocsb/pulled:1")
            || allowed.contains("Status: Image is up to date for 192.0.2.1:80/ocsb/pulled:1"),
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
    assert!(missing.contains("the pull of 192.0.2.1:80/ocsb/pulled:nope failed"), "{ctx}");
    assert!(!missing.contains("manifest unknown") && !missing.contains("MANIFEST_UNKNOWN"), "{ctx}");
    assert!(!missing.contains("exit=0"), "{ctx}");

    // The blocked registry: refused by the rule that blocks it, for a pull and for the pull
    // `docker run` makes of a missing image; it saw no request.
    let blocked = section(&out, "blocked");
    let rule = "(rule egress): the pull of 192.0.2.2:80/ocsb/pulled:1 connects to 192.0.2.2:80, which the \
                egress rules deny (block:local:1)";
    assert_eq!(blocked.matches(rule).count(), 2, "{ctx}");
    has(blocked, "saw registry2 0", &err);

    // The loopback service of the daemon's namespace: refused (the port rule; a private
    // address on 80, plain HTTP as the daemon counts loopback registries insecure), and it saw
    // no request.
    let loopback = section(&out, "loopback");
    assert!(loopback.contains("connects to 127.0.0.1:8099, which the egress rules deny (port)"), "{ctx}");
    assert!(loopback.contains("connects to 127.0.0.1:80, which the egress rules deny (private)"), "{ctx}");
    has(loopback, "saw loopback 0", &err);
    assert!(!loopback.contains(PAGE), "{ctx}");

    // A host the rules allow that answers with a page: reached, and the page stays out.
    let web = section(&out, "web");
    assert!(web.contains("the pull of 192.0.2.3:80/x/y:z failed"), "{ctx}");
    assert!(!web.contains(PAGE) && !web.contains("DOCTYPE"), "{ctx}");
    assert!(web.lines().any(|l| l.starts_with("saw web ") && l != "saw web 0"), "{ctx}");

    assert!(section(&out, "plugin").contains("(rule endpoint)"), "plugins are refused: {ctx}");

    // Each of the gateway's requests in the filter's log, with its rule: the gateway's pulls
    // are the filter's traffic like any other.
    let logs = section(&out, "logs");
    let logged = |rest: &str| logs.lines().any(|l| l.contains(rest));
    assert!(
        logged(" TCP_MISS/200 rule=default GET http://192.0.2.1/v2/ocsb/pulled/manifests/1 peer=192.0.2.1"),
        "{ctx}"
    );
    assert!(
        logged(" TCP_DENIED/403 rule=block:local:1 GET http://192.0.2.2/v2/ocsb/pulled/manifests/1 peer=-"),
        "{ctx}"
    );
    assert!(logged(" TCP_DENIED/403 rule=port GET http://127.0.0.1:8099/v2/x/y/manifests/z peer=-"), "{ctx}");
    assert!(logged(" TCP_DENIED/403 rule=private GET http://127.0.0.1/v2/x/y/manifests/z peer=-"), "{ctx}");

    // The controls: outside the gateway the daemon reaches both, and quotes the page.
    let control = section(&out, "control");
    assert!(control.lines().any(|l| l.starts_with("saw registry2 ") && l != "saw registry2 0"), "{ctx}");
    assert!(control.lines().any(|l| l.starts_with("saw loopback ") && l != "saw loopback 0"), "{ctx}");
    assert!(control.contains(PAGE), "the daemon quotes the loopback service's page: {ctx}");
}

/// A registry front (192.0.2.4:80, in the world): the registry API of the allowed registry for
/// any repository (every name maps to `ocsb/redir` there), but each blob a `307` to a host
/// chosen by the repository's first component. `redir-blocked` sends the pull to the registry
/// the rules block, `redir-loop` to the loopback service of the daemon's namespace, `redir-ok`
/// back to the allowed registry. Each request is one line of its log.
const FRONT: &str = r#"import http.client, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TARGETS = {"redir-blocked": "192.0.2.2", "redir-loop": "127.0.0.1:8099", "redir-ok": "192.0.2.1"}
REPO = "ocsb/redir"
HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


class Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self, what):
        print(f"front {self.command} {self.path} -> {what}", flush=True)

    def reply(self, status, headers, body):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def relay(self, path):
        try:
            c = http.client.HTTPConnection("192.0.2.1", 80, timeout=20)
            c.putrequest(self.command, path, skip_accept_encoding=True)
            for k, v in self.headers.items():
                if k.lower() not in HOP:
                    c.putheader(k, v)
            c.endheaders()
            r = c.getresponse()
            body = r.read()
            headers = [(k, v) for k, v in r.getheaders() if k.lower() not in HOP]
            length = r.getheader("Content-Length") if self.command == "HEAD" else str(len(body))
            headers.append(("Content-Length", length or "0"))
            c.close()
        except Exception as e:
            self.note(f"502 {e}")
            return self.reply(502, [("Content-Length", "0")], b"")
        self.note(f"{r.status} relayed {path}")
        self.reply(r.status, headers, body)

    def answer(self):
        path, _, query = self.path.partition("?")
        parts = path.split("/")
        if path in ("/v2", "/v2/"):
            return self.relay("/v2/")
        if len(parts) < 5 or parts[1] != "v2" or parts[-2] not in ("manifests", "blobs", "tags"):
            self.note("404")
            return self.reply(404, [("Content-Length", "0")], b"")
        kind, ref = parts[-2], parts[-1]
        if kind != "blobs":
            return self.relay(f"/v2/{REPO}/{kind}/{ref}" + (f"?{query}" if query else ""))
        target = TARGETS.get(parts[2])
        if target is None:
            self.note("404")
            return self.reply(404, [("Content-Length", "0")], b"")
        location = f"http://{target}/v2/{REPO}/blobs/{ref}"
        self.note(f"307 {location}")
        self.reply(307, [("Location", location), ("Content-Length", "0")], b"")

    do_GET = do_HEAD = answer


ThreadingHTTPServer(("192.0.2.4", 80), Front).serve_forever()
"#;

/// What the image behind the front holds in `/redir`: a container of it prints this.
const MARK: &str = "the redirected image runs";

/// The world plus the front and an image of its own (not in the daemon, so a pull fetches
/// every blob): pushed as root to both registries, outside the gateway, where no rule
/// applies; its image ID is `$RID`, its manifest's digest `$DIG`, the front's log `$FL`.
fn redirect_world() -> String {
    format!(
        r#"{world}
        ip -n "$ON" addr add 192.0.2.4/24 dev ot$$
        FR=$(mktemp -d); FL="$FR/log"
        cat > "$FR/front.py" <<'PY'
{FRONT}PY
        O python3 "$FR/front.py" >"$FL" 2>&1 &
        for i in $(seq 100); do O ss -Hltn | grep -q '192.0.2.4:80 ' && break; sleep 0.1; done
        RI=$(mktemp -d); chmod 755 "$RI"; mkdir -p "$RI/bin" "$RI/tmp"; cp /bin/busybox "$RI/bin/"
        for c in $APPLETS; do ln -s busybox "$RI/bin/$c"; done; echo '{MARK}' > "$RI/redir"
        RID=$(tar -C "$RI" -c . | DOCKER_HOST="$DH" docker import - 192.0.2.1:80/ocsb/redir:1); rm -rf "$RI"
        DIG=$(R push 192.0.2.1:80/ocsb/redir:1 | sed -n 's/.*digest: \(sha256:[0-9a-f]*\).*/\1/p')
        R tag 192.0.2.1:80/ocsb/redir:1 192.0.2.2:80/ocsb/redir:1
        R push 192.0.2.2:80/ocsb/redir:1 >/dev/null && echo "pushed twice $DIG"; echo "image $RID"
        R rmi 192.0.2.1:80/ocsb/redir:1 192.0.2.2:80/ocsb/redir:1 >/dev/null
        here() {{ echo "image here: $(R images -q --no-trunc | grep -c "$RID")"; }}
        # `n PATTERN FILE`: the lines of a log that match; `new NAME PATTERN FILE BEFORE`: how
        # many more than BEFORE.
        n() {{ grep -c -- "$1" "$2"; }}
        new() {{ echo "$1 $(( $(n "$2" "$3") - $4 ))"; }}
        "#,
        world = world(),
    )
}

/// A registry that answers a blob with a redirect sends the pull to another host: the gateway
/// judges that hop as any other connection. To the blocked registry and to the daemon's own
/// loopback it is refused, naming the host and the rule, and neither sees a request nor does
/// their reply reach the agent; back to the allowed registry it works. Root's pull outside the
/// gateway is the control: the daemon follows the same redirect to the blocked registry.
/// A pull by digest is refused (the gateway pulls by tag).
#[test]
fn a_registrys_redirect_is_judged_as_its_own_connection() {
    let w = World::new();
    let body = format!(
        r#"{world}
        echo "== redir-blocked"
        B2=$(n '/v2/' "$RL2"); BF=$(n 'GET /v2/redir-blocked/pulled/blobs/.* 307 ' "$FL")
        D 'docker pull 192.0.2.4:80/redir-blocked/pulled:1; echo "exit=$?"'
        new registry2 '/v2/' "$RL2" "$B2"; new front-redirects 'GET /v2/redir-blocked/pulled/blobs/.* 307 ' "$FL" "$BF"
        R image inspect 192.0.2.4:80/redir-blocked/pulled:1 >/dev/null 2>&1; echo "inspect=$?"; here
        echo "== redir-loop"
        BL=$(n '/v2/' "$LL"); BF=$(n 'GET /v2/redir-loop/pulled/blobs/.* 307 ' "$FL")
        D 'docker pull 192.0.2.4:80/redir-loop/pulled:1; echo "exit=$?"'
        new loopback '/v2/' "$LL" "$BL"; new front-redirects 'GET /v2/redir-loop/pulled/blobs/.* 307 ' "$FL" "$BF"
        R image inspect 192.0.2.4:80/redir-loop/pulled:1 >/dev/null 2>&1; echo "inspect=$?"; here
        echo "== digest"
        BD=$(n "/v2/ocsb/redir/manifests/$DIG" "$RL1")
        D "docker pull 192.0.2.1:80/ocsb/redir@$DIG; echo exit=\$?"
        new registry1-by-ref "/v2/ocsb/redir/manifests/$DIG" "$RL1" "$BD"; here
        echo "== redir-ok"
        B1=$(n '/v2/ocsb/redir/blobs/' "$RL1"); BF=$(n 'GET /v2/redir-ok/pulled/blobs/.* 307 ' "$FL")
        D 'docker pull 192.0.2.4:80/redir-ok/pulled:1 && docker run --rm 192.0.2.4:80/redir-ok/pulled:1 cat /redir; echo "exit=$?"'
        new registry1-blobs '/v2/ocsb/redir/blobs/' "$RL1" "$B1"; new front-redirects 'GET /v2/redir-ok/pulled/blobs/.* 307 ' "$FL" "$BF"
        here
        echo "== logs"
        sed 's/^/log: /' "$HOME/.local/share/opencode-sandbox/$NAME/egress/access.log"
        echo "== control"
        R rmi -f "$RID" >/dev/null; here
        B2=$(n '/v2/ocsb/redir/blobs/' "$RL2")
        R pull 192.0.2.4:80/redir-blocked/pulled:1 >/dev/null; echo "exit=$?"
        new registry2-blobs '/v2/ocsb/redir/blobs/' "$RL2" "$B2"
        R run --rm --network none 192.0.2.4:80/redir-blocked/pulled:1 cat /redir
        echo "== front"
        cat "$FL"
        echo "== end"
        {end}rm -rf "$FR"
        "#,
        world = redirect_world(),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    let ctx = format!("\nstdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("pushed twice sha256:") && l.len() > "pushed twice sha256:".len() + 60),
        "the world's image on both registries: {ctx}"
    );
    assert!(out.lines().any(|l| l.starts_with("image sha256:")), "the world's image: {ctx}");
    let mut failed: Vec<String> = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            failed.push(what.to_string())
        }
    };
    let denied = |s: &str| s.contains("deny") || s.contains("denied");

    // The redirect to the blocked registry: refused by its rule, the registry saw nothing,
    // and no image came in.
    let blocked = section(&out, "redir-blocked");
    check(
        blocked.contains("front-redirects ") && !blocked.contains("front-redirects 0"),
        "blocked: the front redirected the gateway's blob request",
    );
    check(!blocked.contains("exit=0"), "blocked: the pull fails");
    check(blocked.contains("192.0.2.2:80"), "blocked: the message names 192.0.2.2:80");
    check(denied(blocked), "blocked: the message says deny");
    check(
        blocked.contains("block:local:1") || blocked.contains("(block "),
        "blocked: the message names the block rule",
    );
    check(blocked.lines().any(|l| l == "registry2 0"), "blocked: registry 192.0.2.2 saw no request");
    check(!blocked.contains("inspect=0"), "blocked: no image of that name");
    check(blocked.lines().any(|l| l == "image here: 0"), "blocked: the image is not in the daemon");

    // The redirect to the daemon's loopback: refused, unseen, no page.
    let looped = section(&out, "redir-loop");
    check(
        looped.contains("front-redirects ") && !looped.contains("front-redirects 0"),
        "loop: the front redirected the gateway's blob request",
    );
    check(!looped.contains("exit=0"), "loop: the pull fails");
    check(looped.contains("127.0.0.1:8099"), "loop: the message names 127.0.0.1:8099");
    check(denied(looped), "loop: the message says deny");
    check(looped.lines().any(|l| l == "loopback 0"), "loop: the loopback service saw no request");
    check(!looped.contains(PAGE) && !looped.contains("DOCTYPE"), "loop: no page reached the agent");
    check(!looped.contains("inspect=0"), "loop: no image of that name");
    check(looped.lines().any(|l| l == "image here: 0"), "loop: the image is not in the daemon");

    // By digest: refused before any request.
    let digest = section(&out, "digest");
    check(!digest.contains("exit=0"), "digest: the pull fails");
    check(
        digest.lines().any(|l| l.contains("digest") && !l.starts_with("registry1-")),
        "digest: the message says why (a pull by digest)",
    );
    check(digest.lines().any(|l| l == "registry1-by-ref 0"), "digest: the registry saw no request for it");
    check(digest.lines().any(|l| l == "image here: 0"), "digest: the image is not in the daemon");

    // The positive control: redirected back to the allowed registry, the pull works and runs.
    let ok = section(&out, "redir-ok");
    check(ok.lines().any(|l| l == MARK), "ok: the pulled image runs and prints its mark");
    check(ok.contains("exit=0"), "ok: the pull and the run succeed");
    check(
        ok.contains("front-redirects ") && !ok.contains("front-redirects 0"),
        "ok: the front redirected the blobs",
    );
    check(
        ok.contains("registry1-blobs ") && !ok.contains("registry1-blobs 0"),
        "ok: the allowed registry served the blobs",
    );
    check(ok.lines().any(|l| l == "image here: 1"), "ok: the image is in the daemon");

    // The filter logged the refused hops (the blob requests the front redirected; nothing
    // else of this test goes to those hosts) with their rules.
    let logs = section(&out, "logs");
    let refused = |rule: &str, url: &str| {
        logs.lines().any(|l| {
            l.contains(&format!(" TCP_DENIED/403 rule={rule} GET {url}/v2/ocsb/redir/blobs/sha256:"))
        })
    };
    check(
        refused("block:local:1", "http://192.0.2.2"),
        "logs: the hop to 192.0.2.2 refused by block:local:1",
    );
    check(
        refused("port", "http://127.0.0.1:8099"),
        "logs: the hop to 127.0.0.1:8099 refused by the port rule",
    );

    // The control: outside the gateway the daemon follows the redirect to the blocked registry.
    let control = section(&out, "control");
    check(control.lines().any(|l| l == "image here: 0"), "control: the image was removed first");
    check(control.contains("exit=0"), "control: root's pull succeeds");
    check(
        control.contains("registry2-blobs ") && !control.contains("registry2-blobs 0"),
        "control: the blocked registry served root's pull",
    );
    check(control.lines().any(|l| l == MARK), "control: root's image runs");

    assert!(failed.is_empty(), "failed: {failed:#?}{ctx}");
}

/// With the squid backend the gateway's pull goes through squid the same way: the allowed
/// registry's blobs are downloaded (the image is not on the daemon) and the image runs; the
/// blocked registry is refused by squid's rule, names it, and sees no request; squid's log has
/// both.
#[test]
fn pulls_go_through_squid_too() {
    let w = World::new();
    let body = format!(
        r#"{world}{COUNT}
        printf 'OCSB_EGRESS_BACKEND=squid\n' >> .opencode-sandbox/local/sandbox.conf
        E() {{ env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" DOCKER_HOST="$DH" setpriv --reuid 1990 --regid 1990 --groups "$DG" -- "$OCSB" egress "$@" </dev/null 2>&1; }}
        E up | tail -1
        R rmi {IMAGE} >/dev/null
        echo "image here: $(R image inspect 192.0.2.1:80/ocsb/pulled:1 >/dev/null 2>&1 && echo 1 || echo 0)"
        echo "== allowed"
        D 'docker pull 192.0.2.1:80/ocsb/pulled:1 && docker run --rm 192.0.2.1:80/ocsb/pulled:1 echo ran-pulled'
        echo "== blocked"
        D 'docker pull 192.0.2.2:80/ocsb/pulled:1; echo "exit=$?"'
        saw registry2 '/v2/' "$RL2"
        echo "== logs"
        E logs --no-follow | sed 's/^/log: /'
        E down >/dev/null
        echo "== end"
        {end}"#,
        world = world(),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    let ctx = format!("\nstdout:\n{out}\nstderr:\n{err}");
    has(&out, "image here: 0", &err);
    let allowed = section(&out, "allowed");
    assert!(allowed.contains("Status: Downloaded newer image for 192.0.2.1:80/ocsb/pulled:1"), "{ctx}");
    assert!(allowed.lines().any(|l| l == "ran-pulled"), "{ctx}");
    let blocked = section(&out, "blocked");
    assert!(
        blocked.contains("connects to 192.0.2.2:80, which the egress rules deny (block:local:1)"),
        "{ctx}"
    );
    assert!(blocked.lines().any(|l| l == "saw registry2 0"), "{ctx}");
    assert!(!blocked.contains("exit=0"), "{ctx}");
    let logs = section(&out, "logs");
    assert!(
        logs.lines().any(|l| l.contains("192.0.2.1") && l.contains("/v2/ocsb/pulled/blobs/sha256:")),
        "{ctx}"
    );
    assert!(logs.lines().any(|l| l.contains("192.0.2.2") && l.contains("block:local:1")), "{ctx}");
}
