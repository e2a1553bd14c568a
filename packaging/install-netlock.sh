#!/bin/sh
# Install (or with "uninstall", remove) the netlock part of ocsb from a source build. Run as root.
#
#   PREFIX=/usr/local BUILD=target/release sh packaging/install-netlock.sh [install|uninstall]
#
# Installs: $PREFIX/libexec/ocsb/ocsb-netlock-helper (0755 root:root),
#           $PREFIX/libexec/ocsb/ocsb-netlock-exec   (2755 root:opencode-sandbox, the setgid shim;
#             it runs $PREFIX/bin/ocsb, so install ocsb into the same PREFIX),
#           the systemd unit, sysusers.d, /etc/ocsb/netlock.toml (kept if present), the polkit
#           actions and the D-Bus policy/activation files (where polkit and dbus-daemon read them),
#           and the audited contract netlock.nft under share/doc/ocsb.
# Starts ocsb-netlock.service where systemd is PID 1; elsewhere says how to start the daemon.
# DESTDIR stages into a directory instead (no users, no service start).
set -eu

PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
BUILD=${BUILD:-target/release}
ACTION=${1:-install}
HERE=$(cd "$(dirname "$0")/.." && pwd)
LIBEXEC=$PREFIX/libexec/ocsb
D=$DESTDIR

if [ -z "$D" ] && [ "$(id -u)" != 0 ]; then
    echo "install-netlock.sh: run as root (or set DESTDIR to stage)" >&2
    exit 1
fi

# systemd reads units from /etc for a local install and /usr/lib for a /usr (package) install.
if [ "$PREFIX" = /usr ]; then UNITDIR=/usr/lib/systemd/system; SYSUSERS=/usr/lib/sysusers.d
else UNITDIR=/etc/systemd/system; SYSUSERS=/etc/sysusers.d; fi
systemd_pid1() { [ -z "$D" ] && [ -d /run/systemd/system ]; }

if [ "$ACTION" = uninstall ]; then
    if systemd_pid1; then systemctl disable --now ocsb-netlock.service 2>/dev/null || true; fi
    # Remove the table (the service leaves it enforcing when stopped).
    [ -x "$D$LIBEXEC/ocsb-netlock-helper" ] && [ -z "$D" ] && "$LIBEXEC/ocsb-netlock-helper" remove || true
    rm -f "$D$LIBEXEC/ocsb-netlock-helper" "$D$LIBEXEC/ocsb-netlock-exec" \
        "$D$UNITDIR/ocsb-netlock.service" "$D$SYSUSERS/ocsb.conf" \
        "$D/usr/share/polkit-1/actions/dev.ocsb.netlock.policy" \
        "$D/usr/share/dbus-1/system.d/dev.ocsb.Netlock1.conf" \
        "$D/usr/share/dbus-1/system-services/dev.ocsb.Netlock1.service" \
        "$D$PREFIX/share/doc/ocsb/netlock.nft"
    rmdir "$D$LIBEXEC" 2>/dev/null || true
    echo "netlock removed (kept /etc/ocsb/netlock.toml, the group opencode-sandbox and the user ocsb-netlock)"
    exit 0
fi

for b in ocsb-netlock-helper ocsb-netlock-exec; do
    [ -x "$BUILD/$b" ] || { echo "install-netlock.sh: $BUILD/$b not built (cargo build --release -p ocsb-netlock-helper)" >&2; exit 1; }
done

# 1. Group and user first: the shim's group must exist before the shim gets its set-gid bit.
install -d -m 0755 "$D$SYSUSERS"
install -m 0644 "$HERE/packaging/sysusers.d/ocsb.conf" "$D$SYSUSERS/ocsb.conf"
if [ -z "$D" ]; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers "$SYSUSERS/ocsb.conf"
    else
        getent group opencode-sandbox >/dev/null || groupadd --system opencode-sandbox
        getent passwd ocsb-netlock >/dev/null || useradd --system --user-group --home-dir / --shell /usr/sbin/nologin ocsb-netlock
    fi
fi
getent group opencode-sandbox >/dev/null || { echo "group opencode-sandbox missing (run systemd-sysusers $HERE/packaging/sysusers.d/ocsb.conf)" >&2; exit 1; }

# 2. Binaries. The shim is written 0755 root:root under a temporary name, given its group and
#    mode, then renamed into place: it is never set-gid to root, not even for a moment.
install -d -m 0755 "$D$LIBEXEC"
install -m 0755 -o root -g root "$BUILD/ocsb-netlock-helper" "$D$LIBEXEC/ocsb-netlock-helper"
install -m 0755 -o root -g root "$BUILD/ocsb-netlock-exec" "$D$LIBEXEC/.ocsb-netlock-exec.new"
chgrp opencode-sandbox "$D$LIBEXEC/.ocsb-netlock-exec.new"
chmod 2755 "$D$LIBEXEC/.ocsb-netlock-exec.new"
mv -f "$D$LIBEXEC/.ocsb-netlock-exec.new" "$D$LIBEXEC/ocsb-netlock-exec"

# 3. Config (an admin's edits are kept), contract, unit, polkit and D-Bus files.
install -d -m 0755 "$D/etc/ocsb"
if [ ! -e "$D/etc/ocsb/netlock.toml" ]; then
    install -m 0644 "$HERE/packaging/etc/netlock.toml" "$D/etc/ocsb/netlock.toml"
fi
install -d -m 0755 "$D$PREFIX/share/doc/ocsb"
install -m 0644 "$HERE/netlock-helper/netlock.nft" "$D$PREFIX/share/doc/ocsb/netlock.nft"
install -d -m 0755 "$D$UNITDIR"
sed "s#/usr/libexec/ocsb/#$LIBEXEC/#g" "$HERE/packaging/systemd/ocsb-netlock.service" > "$D$UNITDIR/ocsb-netlock.service"
chmod 0644 "$D$UNITDIR/ocsb-netlock.service"
install -d -m 0755 "$D/usr/share/polkit-1/actions" "$D/usr/share/dbus-1/system.d" "$D/usr/share/dbus-1/system-services"
install -m 0644 "$HERE/polkit/dev.ocsb.netlock.policy" "$D/usr/share/polkit-1/actions/"
install -m 0644 "$HERE/polkit/dev.ocsb.Netlock1.conf" "$D/usr/share/dbus-1/system.d/"
install -m 0644 "$HERE/polkit/dev.ocsb.Netlock1.service" "$D/usr/share/dbus-1/system-services/"

# 4. Start it.
if systemd_pid1; then
    systemctl daemon-reload
    systemctl enable --now ocsb-netlock.service
    systemctl reload dbus.service 2>/dev/null || true
    echo "ocsb-netlock.service started; check with: ocsb netlock verify"
elif [ -z "$D" ]; then
    cat <<MSG
installed. systemd is not PID 1 here, so nothing was started. Start the daemon (as root) with:
  setpriv --reuid=ocsb-netlock --regid=ocsb-netlock --clear-groups \\
    --inh-caps=-all,+net_admin --ambient-caps=-all,+net_admin --bounding-set=-all,+net_admin \\
    $LIBEXEC/ocsb-netlock-helper daemon &
(or simply '$LIBEXEC/ocsb-netlock-helper apply' for a one-shot table), then: ocsb netlock verify
MSG
fi
