//! The hops of the gateway's own pull that a registry chooses, attacked as the agent would from
//! inside the sandbox, on a stock daemon of the test's own (as in `docker_pull`). The world
//! namespace serves a real registry (Debian's `docker-registry`, 192.0.2.1) holding an image
//! pushed as root and then removed from the daemon, and in front of it a registry front
//! (192.0.2.5) whose repository's first name component chooses what it does: ask for a token
//! (a `401` with a `Bearer` challenge naming a token service), redirect blobs, tamper with
//! them. A token service (192.0.2.6) and an allowed host a registry redirects to (192.0.2.3,
//! the "sink") log what they are sent; the host the rules block (192.0.2.2) and services on
//! the daemon's loopback (127.0.0.1:80, [::1]:80) log every connection.
//!
//! As the ordinary user, `ocsb exec -- docker …`: a token service the rules allow serves the
//! pull and the image runs; the registry's token goes to the registry only, the user's login to
//! the token service only (not to one a redirected-to host names). A token service or a blob
//! redirect on the blocked host or on the loopback (in any spelling) is refused naming the
//! host, and that host logs nothing; a blob or a manifest that is not what its digest says,
//! and a blob longer than its manifest says, leave no image and no file; an image with one
//! layer twice is pulled. Root's pulls outside the gateway are the controls: the daemon
//! follows the same challenges and redirects to the blocked host and its loopback.

use crate::suite::docker_gateway::{APPLETS, DOCKERD_STOP, OWN_DOCKERD, docker_scenario};
use crate::suite::docker_pull::section;
use crate::support::sandbox::{World, has};

/// The test image of this daemon (imported by `OWN_DOCKERD`).
const IMAGE: &str = "ocsb-test-busybox:hops";

/// What the pulled image holds in `/hops`: a container of it prints this.
const MARK: &str = "the hops image runs";

/// The world's servers, by role: `front`, `token`, `sink`, and `log` (every connection a line).
const HOPS: &str = r#"import hashlib, http.client, json, socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REG = ("192.0.2.1", 80)
REPO = "ocsb/hops"
TOKEN = "hops-token"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
# Blob redirects that name the daemon's loopback (or the blocked host) in other words.
HOPS = {
    "hop-slashes": "//127.0.0.1/{p}",
    "hop-userinfo": "http://192.0.2.1@127.0.0.1/{p}",
    "hop-mapped": "http://[::ffff:127.0.0.1]/{p}",
    "hop-any": "http://0.0.0.0/{p}",
    "hop-decimal": "http://2130706433/{p}",
    "hop-localhost": "http://localhost/{p}",
    "hop-v6": "http://[::1]/{p}",
    "hop-https-blocked": "https://192.0.2.2/{p}",
}
# The challenge of a ping (`GET /v2/`, which only the daemon makes) by the address asked.
PING = {"192.0.2.5": "auth", "192.0.2.7": "realm-blocked", "192.0.2.8": "realm-loop"}
# The token service each repository's challenge names.
REALMS = {
    "auth": "http://192.0.2.6/token",
    "realm-moved": "http://192.0.2.6/token-moved",
    "realm-blocked": "http://192.0.2.2/token",
    "realm-loop": "http://192.0.2.6@127.0.0.1/token",
}


def say(what):
    print(what, flush=True)


def upstream(path, accept=None):
    c = http.client.HTTPConnection(*REG, timeout=20)
    c.request("GET", path, headers={"Accept": accept} if accept else {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("Docker-Content-Digest"), body


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


class Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, headers=(), body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def authz(self):
        return "present" if self.headers.get("Authorization") else "absent"


class Front(Base):
    """The registry API of ocsb/hops on 192.0.2.1 under any name; the first component of the
    name chooses what it does."""

    def do_GET(self):
        path = self.path.partition("?")[0]
        parts = path.split("/")
        if path in ("/v2", "/v2/"):
            # The ping, which names no repository: the challenge of the address asked.
            mode = PING[self.connection.getsockname()[0]]
        elif len(parts) >= 5 and parts[1] == "v2" and parts[-2] in ("manifests", "blobs"):
            mode = parts[2]
        else:
            say(f"front {self.command} {path} 404")
            return self.reply(404)
        say(f"front {self.command} {path} authorization={self.authz()} mode={mode}")
        realm = REALMS.get(mode)
        if realm and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = f'Bearer realm="{realm}",service="x"'
            return self.reply(401, [("WWW-Authenticate", challenge)], b'{"errors":[]}')
        if len(parts) < 5:
            return self.reply(200, [("Content-Type", "application/json")], b"{}")
        kind, ref = parts[-2], parts[-1]
        if kind == "manifests":
            return self.manifest(mode, ref)
        p = f"v2/{REPO}/blobs/{ref}"
        if mode in HOPS:
            return self.reply(307, [("Location", HOPS[mode].format(p=p))])
        if mode in ("auth", "realm-moved"):
            return self.reply(307, [("Location", f"http://192.0.2.3/{p}")])
        if mode == "cdn-login":
            return self.reply(307, [("Location", f"http://192.0.2.3/login/{p}")])
        if mode == "dup" and ref in DUP[1]:
            return self.reply(200, [("Content-Type", "application/octet-stream")], DUP[1][ref])
        status, _, body = upstream("/" + p)
        if status != 200:
            return self.reply(status)
        config = ref == MANIFEST["config"]["digest"]
        if (mode == "tamper-layer" and not config) or (mode == "tamper-config" and config):
            body = body[:-1] + bytes([body[-1] ^ 1])
        if mode == "endless" and not config:
            return self.endless(body)
        self.reply(200, [("Content-Type", "application/octet-stream")], body)

    do_HEAD = do_GET

    def manifest(self, mode, ref):
        body, kind = RAW, DOCKER_MANIFEST
        if mode == "dup":
            body = DUP[0]
        elif mode == "index-lie" and ref == "1":
            # An index whose every platform names the real manifest; that manifest, asked by
            # its digest, comes back with one byte more.
            platforms = [("amd64", None), ("arm64", None), ("arm", "v7"), ("386", None)]
            entries = []
            for arch, variant in platforms:
                p = {"os": "linux", "architecture": arch}
                if variant:
                    p["variant"] = variant
                entries.append({"mediaType": DOCKER_MANIFEST, "digest": sha(RAW), "size": len(RAW), "platform": p})
            body, kind = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode(), OCI_INDEX
        elif mode == "index-lie":
            body = RAW + b" "
        elif mode == "page-digest":
            # A page where the config's digest goes: the message says what is wrong, not the page.
            m = json.loads(RAW)
            m["config"]["digest"] = "FRONT-PAGE " * 1000
            body = json.dumps(m).encode()
        self.reply(200, [("Content-Type", kind), ("Docker-Content-Digest", sha(body))], body)

    def endless(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        try:
            self.wfile.write(body)
            sent = len(body)
            zeros = bytes(1 << 16)
            while sent < (512 << 20):
                self.wfile.write(zeros)
                sent += len(zeros)
            say(f"endless sent {sent} bytes: the cap")
        except OSError:
            say(f"endless stopped after {sent} bytes (blob {len(body)})")
        self.close_connection = True


class Token(Base):
    def do_GET(self):
        path, _, query = self.path.partition("?")
        say(f"token {self.command} {path}?{query} authorization={self.headers.get('Authorization', 'absent')}")
        if path == "/token-moved":
            return self.reply(307, [("Location", f"http://192.0.2.3/token?{query}")])
        if path == "/token" and "scope=repository%3A" in query:
            return self.reply(200, [("Content-Type", "application/json")], json.dumps({"token": TOKEN}).encode())
        self.reply(404)


class Sink(Base):
    """An allowed host a registry sends the pull to: a token of its own, the blobs back to 192.0.2.1."""

    def do_GET(self):
        path = self.path.partition("?")[0]
        say(f"sink {self.command} {path} authorization={self.authz()}")
        if path in ("/token", "/token-cdn"):
            return self.reply(200, [("Content-Type", "application/json")], json.dumps({"token": TOKEN}).encode())
        if path.startswith("/login/"):
            # A host the registry redirected to that asks for a login, at a token service of its own.
            challenge = 'Bearer realm="http://192.0.2.3/token-cdn",service="x"'
            return self.reply(401, [("WWW-Authenticate", challenge)])
        if path.startswith("/v2/"):
            return self.reply(307, [("Location", f"http://192.0.2.1{self.path}")])
        self.reply(404)


def logger(host, port):
    """Every connection, whatever it speaks, is a line; the answer is a page."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(64)

    def one(c):
        try:
            c.settimeout(5)
            first = c.recv(4096).split(b"\r\n")[0][:80]
            say(f"seen {first!r}")
            c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 11\r\nConnection: close\r\n\r\nLOGGER-PAGE")
        except OSError as e:
            say(f"seen {e}")
        finally:
            c.close()

    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "log":
    logger(host, port)
if role == "front":
    _, _, RAW = upstream(f"/v2/{REPO}/manifests/1", DOCKER_MANIFEST)
    MANIFEST = json.loads(RAW)
    # The same image with its layer twice (a new config: two diff_ids, two history entries).
    _, _, cfg = upstream(f"/v2/{REPO}/blobs/{MANIFEST['config']['digest']}")
    c = json.loads(cfg)
    c["rootfs"]["diff_ids"] = c["rootfs"]["diff_ids"] * 2
    c["history"] = c.get("history", []) + [{"created_by": "the same layer again"}]
    new = json.dumps(c, separators=(",", ":")).encode()
    m = json.loads(RAW)
    m["config"] = dict(m["config"], digest=sha(new), size=len(new))
    m["layers"] = m["layers"] * 2
    DUP = (json.dumps(m).encode(), {sha(new): new})
    say(f"dup image {sha(new)}")
handler = {"front": Front, "token": Token, "sink": Sink}[role]
servers = [ThreadingHTTPServer((h, port), handler) for h in host.split(",")]
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
"#;

/// The world: the registry with the image (`$RID`, not in the daemon), the front, the token
/// service, the sink, the loggers; the project's rules block 192.0.2.2. `$HW` holds the logs:
/// `front.log`, `token.log`, `sink.log`, `blocked.log`, `loop.log`, `loop6.log`.
fn world() -> String {
    format!(
        r#"{ORIGIN_NS}for a in 2 3 5 6 7 8; do ip -n "$ON" addr add 192.0.2.$a/24 dev ot$$; done
        ip -n "$ON" route add 172.16.0.0/12 via 192.0.2.254
        HW=$(mktemp -d); chmod 755 "$HW"
        cat > "$HW/hops.py" <<'PY'
{HOPS}PY
        printf 'version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 192.0.2.1:80\n' "$HW/data" > "$HW/registry.yml"
        O docker-registry serve "$HW/registry.yml" >"$HW/registry.log" 2>&1 &
        O python3 "$HW/hops.py" log 192.0.2.2 80 >"$HW/blocked.log" 2>&1 &
        O python3 "$HW/hops.py" log 192.0.2.2 443 >"$HW/blocked443.log" 2>&1 &
        O python3 "$HW/hops.py" sink 192.0.2.3 80 >"$HW/sink.log" 2>&1 &
        O python3 "$HW/hops.py" token 192.0.2.6 80 >"$HW/token.log" 2>&1 &
        python3 "$HW/hops.py" log 127.0.0.1 80 >"$HW/loop.log" 2>&1 &
        python3 "$HW/hops.py" log ::1 80 >"$HW/loop6.log" 2>&1 &
        for i in $(seq 100); do
          [ "$(O ss -Hltn | grep -c -e '192.0.2.1:80 ' -e '192.0.2.2:80 ' -e '192.0.2.2:443 ' -e '192.0.2.3:80 ' -e '192.0.2.6:80 ')" = 5 ] \
            && [ "$(ss -Hltn | grep -c -e '127.0.0.1:80 ' -e '\[::1\]:80 ')" = 2 ] && break; sleep 0.1
        done
        APPLETS="{APPLETS}"; IMAGE={IMAGE}; DOCKERD_FLAGS="--ip-forward=true --insecure-registry 192.0.2.0/24"; G=1990
        {OWN_DOCKERD}
        R() {{ DOCKER_HOST="$DH" docker "$@" 2>&1; }}
        RI=$(mktemp -d); chmod 755 "$RI"; mkdir -p "$RI/bin" "$RI/tmp"; cp /bin/busybox "$RI/bin/"
        for c in $APPLETS; do ln -s busybox "$RI/bin/$c"; done; echo '{MARK}' > "$RI/hops"
        RID=$(tar -C "$RI" -c . | DOCKER_HOST="$DH" docker import - 192.0.2.1:80/ocsb/hops:1); rm -rf "$RI"
        R push 192.0.2.1:80/ocsb/hops:1 >/dev/null && echo "pushed $RID"
        R rmi 192.0.2.1:80/ocsb/hops:1 >/dev/null
        O python3 "$HW/hops.py" front 192.0.2.5,192.0.2.7,192.0.2.8 80 >"$HW/front.log" 2>&1 &
        for i in $(seq 100); do [ "$(O ss -Hltn | grep -c -e '192.0.2.5:80 ' -e '192.0.2.7:80 ' -e '192.0.2.8:80 ')" = 3 ] && break; sleep 0.1; done
        printf 'block 192.0.2.2\n' > .opencode-sandbox/local/egress.conf
        printf 'OCSB_NETWORK=isolated\n' >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
        # `here ID`: whether the daemon has the image; `n PATTERN FILE`: how many lines match;
        # `left`: what the gateway's pulls left in their work directory.
        here() {{ echo "image here: $(R images -q --no-trunc | grep -c "$1")"; }}
        n() {{ grep -c -- "$1" "$2"; }}
        left() {{ echo "left: $(ls -A "$HOME/.local/share/opencode-sandbox/$NAME/egress/docker-pulls" 2>/dev/null | wc -l)"; }}
        here "$RID"
        "#,
        ORIGIN_NS = crate::support::sandbox::ORIGIN_NS,
    )
}

fn end() -> String {
    format!(
        "echo '== logs'; for f in front token sink blocked blocked443 loop loop6; do sed \"s/^/$f: /\" \"$HW/$f.log\"; done\n\
         {DOCKERD_STOP}ip netns pids \"$ON\" | xargs -r kill; ip netns del \"$ON\"\n\
         jobs -p | xargs -r kill; rm -rf \"$HW\"\n"
    )
}

/// Failed checks, gathered so that one run reports them all.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, ok: bool, what: &str) {
        if !ok {
            self.0.push(what.to_string());
        }
    }
    fn line(&mut self, s: &str, line: &str, what: &str) {
        self.check(s.lines().any(|l| l.trim() == line), &format!("{what} (expected the line {line:?})"));
    }
    fn done(self, ctx: &str) {
        assert!(self.0.is_empty(), "failed: {:#?}{ctx}", self.0);
    }
}

/// A registry that asks for a token: the gateway asks the token service the challenge names,
/// as a connection of its own the filter judges. Allowed, it serves the pull (the image was not
/// in the daemon) and the image runs; the registry's token goes to the registry and nowhere
/// its redirects lead, the user's login to the token service and nowhere its redirect leads; a
/// host the registry redirects to that asks for a login gets none.
/// On the blocked host, or on the loopback behind a user-info prefix, it is refused naming
/// the host, and that host logs nothing; root's daemon, the control, asks both.
#[test]
fn a_registrys_token_service_is_judged_and_gets_only_what_is_its_own() {
    let w = World::new();
    let body = format!(
        r#"{world}
        echo "== auth"
        D 'docker pull 192.0.2.5:80/auth/hops:1 && docker run --rm 192.0.2.5:80/auth/hops:1 echo ok && docker run --rm 192.0.2.5:80/auth/hops:1 cat /hops; echo "exit=$?"'
        here "$RID"; left
        echo "tokens: $(n 'token GET /token?service=x&scope=repository%3Aauth%2Fhops%3Apull authorization=absent' "$HW/token.log")"
        echo "front with the token: $(n 'authorization=present mode=auth' "$HW/front.log")"
        echo "sink blobs: $(n 'sink GET /v2/ocsb/hops/blobs/' "$HW/sink.log")"
        R rmi 192.0.2.5:80/auth/hops:1 >/dev/null; here "$RID"
        echo "== moved"
        D 'export DOCKER_CONFIG=$(mktemp -d) && printf "{{\"auths\":{{\"192.0.2.5:80\":{{\"auth\":\"dTpzZWNyZXQtcHc=\"}}}}}}" > "$DOCKER_CONFIG/config.json" && docker pull 192.0.2.5:80/realm-moved/hops:1 && docker run --rm 192.0.2.5:80/realm-moved/hops:1 cat /hops; echo "exit=$?"'
        here "$RID"; left
        echo "login to the token service: $(n 'token GET /token-moved?.* authorization=Basic dTpzZWNyZXQtcHc=$' "$HW/token.log")"
        echo "sink tokens: $(n 'sink GET /token authorization=absent' "$HW/sink.log")"
        echo "sink with authorization: $(n 'authorization=present' "$HW/sink.log")"
        echo "front with the token: $(n 'authorization=present mode=realm-moved' "$HW/front.log")"
        R rmi 192.0.2.5:80/realm-moved/hops:1 >/dev/null; here "$RID"
        echo "== cdn-login"
        D 'export DOCKER_CONFIG=$(mktemp -d) && printf "{{\"auths\":{{\"192.0.2.5:80\":{{\"auth\":\"dTpzZWNyZXQtcHc=\"}}}}}}" > "$DOCKER_CONFIG/config.json" && docker pull 192.0.2.5:80/cdn-login/hops:1; echo "exit=$?"'
        echo "sink login asks: $(n 'sink GET /login/' "$HW/sink.log")"
        echo "sink token asks: $(n 'sink GET /token-cdn' "$HW/sink.log")"
        echo "sink with authorization: $(n 'authorization=present' "$HW/sink.log")"
        here "$RID"; left
        echo "== realm-blocked"
        D 'docker pull 192.0.2.5:80/realm-blocked/hops:1; echo "exit=$?"; docker run --rm 192.0.2.5:80/realm-blocked/hops:1 true; echo "run-exit=$?"'
        echo "blocked saw: $(n '^seen' "$HW/blocked.log")"
        echo "challenges: $(n 'front GET /v2/realm-blocked/hops/manifests/1 authorization=absent' "$HW/front.log")"
        here "$RID"; left
        echo "== realm-loop"
        D 'docker pull 192.0.2.5:80/realm-loop/hops:1; echo "exit=$?"'
        echo "loop saw: $(n '^seen' "$HW/loop.log")"
        here "$RID"; left
        echo "== control"
        R pull 192.0.2.7:80/realm-blocked/hops:1 >/dev/null; echo "blocked saw: $(n '^seen' "$HW/blocked.log")"
        R pull 192.0.2.8:80/realm-loop/hops:1 >/dev/null; echo "loop saw: $(n '^seen' "$HW/loop.log")"
        {end}"#,
        world = world(),
        end = end(),
    );
    let (out, err) = docker_scenario(&w, &body);
    let ctx = format!("\nstdout:\n{out}\nstderr:\n{err}");
    has(&out, "image here: 0", &err);
    assert!(out.lines().any(|l| l.starts_with("pushed sha256:")), "the world's image: {ctx}");
    let mut c = Checks::default();

    // Allowed: the token service served the gateway, the front took its token, the blobs came
    // through the sink, and the image, new to the daemon, runs.
    let auth = section(&out, "auth");
    c.line(auth, "ok", "auth: the pulled image runs `echo ok`");
    c.line(auth, MARK, "auth: the pulled image is the pushed one");
    c.line(auth, "exit=0", "auth: the pull and the runs succeed");
    c.check(auth.contains("Downloaded newer image for 192.0.2.5:80/auth/hops:1"), "auth: downloaded");
    c.check(auth.lines().filter(|l| *l == "image here: 1").count() == 1, "auth: the image is in the daemon");
    c.check(!auth.contains("tokens: 0"), "auth: the token service issued the token");
    c.check(!auth.contains("front with the token: 0"), "auth: the front saw the token");
    c.check(!auth.contains("sink blobs: 0"), "auth: the blobs were redirected through the sink");
    c.line(auth, "left: 0", "auth: no file left");
    c.check(auth.trim_end().ends_with("image here: 0"), "auth: the image is removed again");

    // The login goes to the token service the registry named; its redirect elsewhere (the
    // sink) is asked without it, and the registry's token never goes to the sink.
    let moved = section(&out, "moved");
    c.line(moved, MARK, "moved: the pulled image runs");
    c.line(moved, "exit=0", "moved: the pull and the run succeed");
    c.line(moved, "login to the token service: 1", "moved: the token service got the login once");
    c.check(!moved.contains("sink tokens: 0"), "moved: the sink issued the token (redirected)");
    c.line(moved, "sink with authorization: 0", "moved: no Authorization ever reached the sink");
    c.check(!moved.contains("front with the token: 0"), "moved: the front saw the token");
    c.line(moved, "left: 0", "moved: no file left");

    // A host the registry redirected to asks for a login: not given (Docker gives none either),
    // so its token service never sees the user's login.
    let cdn = section(&out, "cdn-login");
    c.check(!cdn.contains("exit=0"), "cdn-login: the pull fails");
    c.check(
        cdn.contains("the registry answered 401 for blob"),
        "cdn-login: the message says the blob asked for a login",
    );
    c.check(!cdn.contains("sink login asks: 0"), "cdn-login: the front redirected the gateway to the sink");
    c.line(cdn, "sink token asks: 0", "cdn-login: the sink's token service was not asked");
    c.line(cdn, "sink with authorization: 0", "cdn-login: no Authorization ever reached the sink");
    c.line(cdn, "image here: 0", "cdn-login: no image");
    c.line(cdn, "left: 0", "cdn-login: no file left");

    // The token service on the blocked host: refused by its rule, for a pull and for the pull
    // of `docker run`; it saw nothing.
    let blocked = section(&out, "realm-blocked");
    c.check(!blocked.contains("exit=0") && !blocked.contains("run-exit=0"), "realm-blocked: refused");
    c.check(
        blocked.matches("connects to 192.0.2.2:80, which the egress rules deny (block:local:1)").count() == 2,
        "realm-blocked: the pull and the run are refused naming 192.0.2.2:80 and its block rule",
    );
    c.check(!blocked.contains("LOGGER-PAGE"), "realm-blocked: no page reached the agent");
    c.line(blocked, "blocked saw: 0", "realm-blocked: the blocked host saw no connection");
    c.check(!blocked.contains("challenges: 0"), "realm-blocked: the front challenged the gateway");
    c.line(blocked, "image here: 0", "realm-blocked: no image");
    c.line(blocked, "left: 0", "realm-blocked: no file left");

    // The token service on the loopback behind `allowed@`: judged as the loopback it is.
    let looped = section(&out, "realm-loop");
    c.check(!looped.contains("exit=0"), "realm-loop: refused");
    c.check(
        looped.contains("connects to 127.0.0.1:80, which the egress rules deny"),
        "realm-loop: refused naming 127.0.0.1:80",
    );
    c.check(!looped.contains("192.0.2.6"), "realm-loop: the user-info part is not taken for the host");
    c.line(looped, "loop saw: 0", "realm-loop: the loopback service saw no connection");
    c.check(!looped.contains("LOGGER-PAGE"), "realm-loop: no page reached the agent");
    c.line(looped, "image here: 0", "realm-loop: no image");
    c.line(looped, "left: 0", "realm-loop: no file left");

    // The controls: root's daemon follows both challenges.
    let control = section(&out, "control");
    c.check(
        control.lines().any(|l| l.starts_with("blocked saw: ") && l != "blocked saw: 0"),
        "control: root's daemon asked the blocked host",
    );
    c.check(
        control.lines().any(|l| l.starts_with("loop saw: ") && l != "loop saw: 0"),
        "control: root's daemon asked the loopback service",
    );
    c.done(&ctx);
}

/// The blob redirects, each naming the daemon's loopback (or the blocked host) in another
/// spelling, in the order of the front's modes.
const HOPS_TO: [(&str, &str); 8] = [
    ("hop-slashes", "127.0.0.1:80"),
    ("hop-userinfo", "127.0.0.1:80"),
    ("hop-mapped", "[::ffff:127.0.0.1]:80"),
    ("hop-any", "0.0.0.0:80"),
    ("hop-decimal", "127.0.0.1:80"),
    ("hop-localhost", "localhost:80"),
    ("hop-v6", "[::1]:80"),
    ("hop-https-blocked", "192.0.2.2:443"),
];

/// What a registry serves is loaded only as its manifest says: a config or a layer that is not
/// what its digest says, a manifest an index names that is not what the index's digest says, a
/// manifest with a page for a digest (not quoted to the agent),
/// and a layer that goes on past its size (without end) leave no image and no file; an image
/// with one layer twice is pulled and runs. A blob redirect to the loopback or the blocked host,
/// however it is spelled, is refused naming the host, and that host sees nothing; root's
/// daemon, the control, follows it.
#[test]
fn a_registry_gets_loaded_only_what_its_digests_say_and_reaches_no_loopback() {
    let w = World::new();
    let modes: Vec<&str> = HOPS_TO.iter().map(|(m, _)| *m).collect();
    let body = format!(
        r#"{world}
        DUPID=$(sed -n 's/^dup image //p' "$HW/front.log"); echo "dup id $DUPID"
        for m in tamper-config tamper-layer index-lie page-digest endless; do
          echo "== $m"
          D "docker pull 192.0.2.5:80/$m/hops:1; echo exit=\$?; docker run --rm 192.0.2.5:80/$m/hops:1 true; echo run-exit=\$?"
          R image inspect 192.0.2.5:80/$m/hops:1 >/dev/null 2>&1; echo "inspect=$?"; here "$RID"; left
        done
        for i in $(seq 100); do grep -q '^endless' "$HW/front.log" && break; sleep 0.1; done
        echo "== endless-front"
        grep '^endless' "$HW/front.log"
        echo "== dup"
        D 'docker pull 192.0.2.5:80/dup/hops:1 && docker run --rm 192.0.2.5:80/dup/hops:1 cat /hops; echo "exit=$?"'
        here "$DUPID"; left
        echo "== hops"
        D 'for m in {modes}; do echo "-- $m"; docker pull 192.0.2.5:80/$m/hops:1; echo "exit=$?"; done'
        echo "redirects: $(n ' GET /v2/hop-.*/blobs/.* mode=hop-' "$HW/front.log")"
        echo "loop saw: $(n '^seen' "$HW/loop.log")"; echo "loop6 saw: $(n '^seen' "$HW/loop6.log")"
        echo "blocked saw: $(cat "$HW/blocked.log" "$HW/blocked443.log" | grep -c '^seen')"
        here "$RID"; left
        echo "== control"
        R pull 192.0.2.5:80/hop-slashes/hops:1 >/dev/null; echo "loop saw: $(n '^seen' "$HW/loop.log")"
        R pull 192.0.2.5:80/hop-v6/hops:1 >/dev/null; echo "loop6 saw: $(n '^seen' "$HW/loop6.log")"
        {end}"#,
        world = world(),
        end = end(),
        modes = modes.join(" "),
    );
    let (out, err) = docker_scenario(&w, &body);
    let ctx = format!("\nstdout:\n{out}\nstderr:\n{err}");
    has(&out, "image here: 0", &err);
    assert!(out.lines().any(|l| l.starts_with("pushed sha256:")), "the world's image: {ctx}");
    assert!(
        out.lines().any(|l| l.starts_with("dup id sha256:")),
        "the front's image with a layer twice: {ctx}"
    );
    let mut c = Checks::default();

    for (mode, why) in [
        ("tamper-config", "does not match its digest"),
        ("tamper-layer", "does not match its digest"),
        ("index-lie", "has another digest"),
        ("page-digest", "names a digest that is not sha256"),
        ("endless", "is larger than its manifest says"),
    ] {
        c.check(
            !section(&out, mode).contains("FRONT-PAGE"),
            &format!("{mode}: no text of the front's reached the agent"),
        );
        let s = section(&out, mode);
        c.check(!s.contains("exit=0"), &format!("{mode}: the pull and the run fail"));
        c.check(
            s.matches(&format!("the pull of 192.0.2.5:80/{mode}/hops:1 failed")).count() == 2,
            &format!("{mode}: the pull and the run's pull fail with the gateway's message"),
        );
        c.check(s.contains(why), &format!("{mode}: the message says the blob {why}"));
        c.line(s, "inspect=1", &format!("{mode}: no image of that name in the daemon"));
        c.line(s, "image here: 0", &format!("{mode}: the image is not in the daemon"));
        c.line(s, "left: 0", &format!("{mode}: no file left in the work directory"));
    }
    // The endless layer: the gateway stopped reading at its size (through the filter's buffers,
    // far below the front's cap).
    let endless = section(&out, "endless-front");
    let stopped = endless.lines().find_map(|l| {
        let rest = l.strip_prefix("endless stopped after ")?;
        let (sent, blob) = rest.split_once(" bytes (blob ")?;
        Some((sent.parse::<u64>().ok()?, blob.trim_end_matches(')').parse::<u64>().ok()?))
    });
    c.check(
        stopped.is_some_and(|(sent, blob)| sent < blob + (64 << 20)),
        "endless: the front's writes failed soon after the blob's size",
    );

    // One layer twice: the daemon pulls such an image, so the gateway must.
    let dup = section(&out, "dup");
    c.line(dup, MARK, "dup: the image with one layer twice runs");
    c.line(dup, "exit=0", "dup: the pull and the run succeed");
    c.line(dup, "image here: 1", "dup: the image is in the daemon");
    c.line(dup, "left: 0", "dup: no file left");

    let hops = section(&out, "hops");
    for (mode, authority) in HOPS_TO {
        let part = hops.split(&format!("-- {mode}\n")).nth(1).unwrap_or("");
        let part = &part[..part.find("-- ").unwrap_or(part.len())];
        c.check(part.lines().any(|l| l.starts_with("exit=") && l != "exit=0"), &format!("{mode}: refused"));
        c.check(
            part.contains(&format!("connects to {authority}, which the egress rules deny")),
            &format!("{mode}: refused naming {authority}"),
        );
        c.check(!part.contains("LOGGER-PAGE"), &format!("{mode}: no page reached the agent"));
    }
    c.check(
        hops.lines().any(|l| l.starts_with("redirects: ") && l != "redirects: 0"),
        "hops: the front redirected the gateway",
    );
    c.line(hops, "loop saw: 0", "hops: the loopback service saw no connection");
    c.line(hops, "loop6 saw: 0", "hops: the IPv6 loopback service saw no connection");
    c.line(hops, "blocked saw: 0", "hops: the blocked host saw no connection");
    c.line(hops, "image here: 0", "hops: no image");
    c.line(hops, "left: 0", "hops: no file left");

    let control = section(&out, "control");
    c.check(
        control.lines().any(|l| l.starts_with("loop saw: ") && l != "loop saw: 0"),
        "control: root's daemon followed the redirect to the loopback",
    );
    c.check(
        control.lines().any(|l| l.starts_with("loop6 saw: ") && l != "loop6 saw: 0"),
        "control: root's daemon followed the redirect to the IPv6 loopback",
    );
    c.done(&ctx);
}
