//! The user's ssh-agent through the launcher's filter, end to end: a real `ssh-agent` started
//! as the user with two keys, then `ocsb exec` with `SSH_AUTH_SOCK` naming it. Inside, listing
//! and signing work (the signature verifies on the host); adding, removing, removing all,
//! locking and unlocking are refused and said on the launcher's stderr; the user's own socket
//! is unreachable. On the host afterwards the agent holds exactly its two keys, unlocked.
//! `OCSB_SSH_KEYS` naming one key lists and signs with that one only. Both network modes.
//!
//! As the ordinary user `ocsb-test`, in a network namespace the test creates.

use crate::support::sandbox::{NETLOCK_MODE, World, has, scenario};

/// The agent, its keys and the helpers of the scenarios: `$A` the user's agent socket (in the
/// home, where the sandbox would see it were it not hidden), `UA` a command as the user with
/// the agent, `XA` `ocsb exec` with it. The agent is killed when the scenario ends.
const AGENT: &str = r#"A="$HOME/agent.sock"
UA() { U env SSH_AUTH_SOCK="$A" "$@"; }
XA() { UA "$OCSB" exec -- sh -c "$1" </dev/null; }
AGENT_PID=$(U ssh-agent -a "$A" -s | sed -n 's/^SSH_AGENT_PID=\([0-9]*\);.*/\1/p')
trap 'kill "$AGENT_PID" 2>/dev/null; U "$OCSB" egress down >/dev/null 2>&1 </dev/null || true' EXIT
for k in k1 k2 newkey; do U ssh-keygen -q -t ed25519 -N '' -C "$k" -f "$P/$k"; done
UA ssh-add -q "$P/k1" "$P/k2" 2>/dev/null
# Only the agent holds them now: a signature made inside is the agent's.
rm -f "$P/k1" "$P/k2"
cat > "$P/rawsign.py" <<'EOF'
import base64, os, socket, struct
def string(b): return struct.pack(">I", len(b)) + b
def exact(c, n):
    b = b""
    while len(b) < n:
        more = c.recv(n - len(b))
        if not more: raise SystemExit("closed")
        b += more
    return b
for name in ("k1", "k2"):
    blob = base64.b64decode(open(name + ".pub").read().split()[1])
    c = socket.socket(socket.AF_UNIX); c.connect(os.environ["SSH_AUTH_SOCK"])
    c.sendall(string(bytes([13]) + string(blob) + string(b"data") + struct.pack(">I", 0)))
    n = struct.unpack(">I", exact(c, 4))[0]
    print("raw-sign", name, exact(c, n)[0])
# A frame longer than the protocol allows ends the connection; the next one is served.
c = socket.socket(socket.AF_UNIX); c.connect(os.environ["SSH_AUTH_SOCK"])
c.sendall(struct.pack(">I", 1 << 30) + b"x" * 64)
try: print("oversize", "closed" if c.recv(4) == b"" else "answered")
except ConnectionResetError: print("oversize closed")
c = socket.socket(socket.AF_UNIX); c.connect(os.environ["SSH_AUTH_SOCK"])
c.sendall(string(bytes([11])))
print("after-oversize", exact(c, 5)[4])
EOF
printf '#!/bin/sh\necho lockpw\n' > "$P/askpass"; chmod 755 "$P/askpass"; chown 1990 "$P/askpass"
BEFORE=$(UA ssh-add -l | awk '{print $2}' | sort | tr '\n' ' ')
echo "before $BEFORE"
FP1=$(U ssh-keygen -lf "$P/k1.pub" | awk '{print $2}'); FP2=$(U ssh-keygen -lf "$P/k2.pub" | awk '{print $2}')
"#;

/// What the sandbox tries, one line each; then the host's look at its agent.
const INSIDE: &str = r#"XA 'echo "sock $SSH_AUTH_SOCK"
ssh-add -L | awk "{print \"listed\", \$3}"
echo hello > msg; ssh-keygen -Y sign -f k1.pub -n file msg >/dev/null 2>&1; echo "sign-k1 $?"
echo hello > msg2; ssh-keygen -Y sign -f k2.pub -n file msg2 >/dev/null 2>&1; echo "sign-k2 $?"
ssh-add newkey >/dev/null 2>&1; echo "add $?"
ssh-add -d k1.pub >/dev/null 2>&1; echo "remove $?"
ssh-add -D >/dev/null 2>&1; echo "remove-all $?"
ssh-add -D >/dev/null 2>&1; echo "remove-all-again $?"
SSH_ASKPASS="$PWD/askpass" SSH_ASKPASS_REQUIRE=force setsid -w ssh-add -x >/dev/null 2>&1; echo "lock $?"
SSH_ASKPASS="$PWD/askpass" SSH_ASKPASS_REQUIRE=force setsid -w ssh-add -X >/dev/null 2>&1; echo "unlock $?"
SSH_AUTH_SOCK="$HOME/agent.sock" ssh-add -l >/dev/null 2>&1; echo "raw $?"
SSH_AUTH_SOCK="$HOME/agent.sock" ssh-add -D >/dev/null 2>&1; echo "raw-remove-all $?"
ssh-add -l >/dev/null 2>&1; echo "still-listed $?"' 2>"$P/exec.err"
echo "after $(UA ssh-add -l | awk '{print $2}' | sort | tr '\n' ' ')"
echo "fp1 $FP1"
printf 'u@example.invalid %s\n' "$(cut -d' ' -f1,2 k1.pub)" > allowed
ssh-keygen -Y verify -f allowed -I u@example.invalid -n file -s msg.sig < msg >/dev/null 2>&1; echo "verify-k1 $?"
cat "$P/exec.err" >&2; sed -n 's/^ocsb: ssh-agent: refused: /refused: /p' "$P/exec.err"
"#;

fn agent_is_filtered(netlock: bool) {
    let w = World::new();
    let mode = if netlock { NETLOCK_MODE } else { "" };
    let (out, err) = scenario(&w, &format!("{mode}{AGENT}{INSIDE}"));
    let before = out.lines().find_map(|l| l.strip_prefix("before ")).expect("the agent's keys").to_string();
    assert_eq!(before.split_whitespace().count(), 2, "two keys in the agent: {out}\n{err}");
    has(&out, "sock /run/ocsb/ssh-agent.sock", &err);
    has(&out, "listed k1", &err);
    has(&out, "listed k2", &err);
    has(&out, "sign-k1 0", &err);
    has(&out, "sign-k2 0", &err);
    has(&out, "verify-k1 0", &err);
    // Refused: each exits non-zero, and the user's agent is as it was.
    for op in ["add", "remove", "remove-all", "remove-all-again", "lock", "unlock", "raw", "raw-remove-all"] {
        let line = out.lines().find_map(|l| l.strip_prefix(&format!("{op} "))).unwrap_or("missing");
        assert!(line != "0" && line != "missing", "{op} must fail inside: {line}\n{out}\n{err}");
    }
    has(&out, "still-listed 0", &err);
    has(&out, &format!("after {}", before.trim()), &err);
    for said in [
        "refused: the sandbox tried to add a key to your agent",
        "refused: the sandbox tried to remove a key from your agent",
        "refused: the sandbox tried to remove all keys from your agent",
        "refused: the sandbox tried to lock your agent with a password",
        "refused: the sandbox tried to unlock your agent",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(said)),
            "the user is told: {said}\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
    // Once per kind: the second `ssh-add -D` adds no line.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("refused: ") && l.contains("remove all")).count(),
        1,
        "{out}"
    );
}

#[test]
fn the_agent_lists_and_signs_but_cannot_be_changed() {
    agent_is_filtered(false);
}

#[test]
fn netlock_the_agent_lists_and_signs_but_cannot_be_changed() {
    agent_is_filtered(true);
}

/// `OCSB_SSH_KEYS` naming the first key: the second is neither listed nor used, and the
/// refusal names it; with `OCSB_SANDBOX=0` no agent is passed at all, and the user is told.
fn named_keys_only(netlock: bool) {
    let w = World::new();
    let mode = if netlock { NETLOCK_MODE } else { "" };
    let sandbox_off = if netlock {
        r#"echo OCSB_SANDBOX=0 >> .opencode-sandbox/local/sandbox.conf
        XA 'echo "off-sock ${SSH_AUTH_SOCK:-none}"' 2>"$P/off.err"; grep -q 'not passed in with OCSB_SANDBOX=0' "$P/off.err" && echo off-said"#
    } else {
        ""
    };
    let (out, err) = scenario(
        &w,
        &format!(
            r#"{mode}{AGENT}mkdir -p .opencode-sandbox/local; echo "OCSB_SSH_KEYS=('$FP1')" >> .opencode-sandbox/local/sandbox.conf; chown -R 1990 .opencode-sandbox/local
            XA 'ssh-add -l | awk "{{print \"listed\", \$NF, \$(NF-1)}}"
            echo hi > m1; ssh-keygen -Y sign -f k1.pub -n file m1 >/dev/null 2>&1; echo "sign-k1 $?"
            echo hi > m2; ssh-keygen -Y sign -f k2.pub -n file m2 >/dev/null 2>&1; echo "sign-k2 $?"
            python3 rawsign.py' 2>"$P/exec.err"
            cat "$P/exec.err" >&2; grep -q "sign with the key $FP2, which OCSB_SSH_KEYS does not name" "$P/exec.err" && echo said-k2
            echo "after $(UA ssh-add -l | awk '{{print $2}}' | sort | tr '\n' ' ')"
            {sandbox_off}"#
        ),
    );
    has(&out, "listed (ED25519) k1", &err);
    assert!(!out.contains("listed (ED25519) k2"), "k2 is not listed: {out}\n{err}");
    has(&out, "sign-k1 0", &err);
    let k2 = out.lines().find_map(|l| l.strip_prefix("sign-k2 ")).unwrap_or("missing");
    assert!(k2 != "0" && k2 != "missing", "k2 cannot sign: {out}\n{err}");
    // Asked directly, the relay signs with the first (14: a signature) and refuses the second
    // (5: failure), and says so.
    has(&out, "raw-sign k1 14", &err);
    has(&out, "raw-sign k2 5", &err);
    has(&out, "oversize closed", &err);
    has(&out, "after-oversize 12", &err);
    has(&out, "said-k2", &err);
    let before = out.lines().find_map(|l| l.strip_prefix("before ")).unwrap();
    has(&out, &format!("after {}", before.trim()), &err);
    if netlock {
        has(&out, "off-sock none", &err);
        has(&out, "off-said", &err);
    }
}

#[test]
fn named_keys_are_the_only_ones_listed_and_used() {
    named_keys_only(false);
}

#[test]
fn netlock_named_keys_are_the_only_ones_listed_and_used() {
    named_keys_only(true);
}
