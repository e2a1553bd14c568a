#!/bin/sh
# Remove what `make install` put under PREFIX (packaging/install.sh uninstall: every file of
# packaging/files.list; with systemd it stops the service and removes the nftables table first),
# then say what is deliberately left. Run as root; `make uninstall` runs it.
#
#   PREFIX=/usr/local sh packaging/uninstall.sh
#
# DESTDIR removes from a staging directory instead (no service is stopped, no table removed).
#
# Kept on purpose, and printed at the end with the command that removes each: /etc/ocsb/netlock.toml
# (an admin's edits), the group opencode-sandbox and the user ocsb-netlock (files may still be
# owned by them), every user's state in ~/.local/share/opencode-sandbox, per-project egress
# filters still running, and the Docker image opencode-sandbox-egress. A root script cannot run
# `ocsb egress down` in each user's projects: do that first, as each user (see README, Uninstall).
set -eu

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
HERE=$(cd "$(dirname "$0")/.." && pwd)
D=$DESTDIR

if [ -z "$D" ] && [ "$(id -u)" != 0 ]; then
    echo "uninstall.sh: run as root (sudo make uninstall), or set DESTDIR to remove from a staging directory" >&2
    exit 1
fi

# 1. Every installed file (the one list the packages use too).
PREFIX=$PREFIX DESTDIR=$DESTDIR sh "$HERE/packaging/install.sh" uninstall
echo "ocsb removed from $D$PREFIX"

# 2. What is left, and how to remove it.
[ -n "$D" ] && exit 0
cat <<'MSG'
Left in place (remove what you no longer need):
  each user, in each project:  ocsb egress down        (stops that project's filter)
  each user:                   rm -rf ~/.local/share/opencode-sandbox ~/.config/opencode-sandbox
  Docker image:                docker rmi opencode-sandbox-egress
  netlock config:              rm -rf /etc/ocsb
  group and helper user:       groupdel opencode-sandbox; userdel ocsb-netlock
MSG
if command -v docker >/dev/null 2>&1; then
    left=$(docker ps -a --filter name=opencode-sandbox-egress- --format '{{.Names}}' 2>/dev/null || true)
    if [ -n "$left" ]; then
        echo "egress containers still present (run 'ocsb egress down' in their projects, or docker rm -f):"
        echo "$left" | sed 's/^/  /'
    fi
fi
