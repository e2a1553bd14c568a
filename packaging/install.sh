#!/bin/sh
# Install ocsb from a source build, or remove it again. Reads packaging/files.list, the one file
# list the .deb, the .rpm and the Arch package are made from.
#
#   sudo sh packaging/install.sh [install]    # PREFIX=/usr/local by default
#   sudo sh packaging/install.sh uninstall    # PURGE=1 also deletes an edited /etc/ocsb/netlock.toml
#   sh packaging/install.sh list              # what would be installed where
#
# Environment: PREFIX (/usr/local), DESTDIR (stage into a directory: no accounts, no set-gid bit,
# no service; packagers do those in their scripts), BUILD (the cargo release directory:
# $CARGO_TARGET_DIR/release, else target/release; build with `make`), ZSHCOMPDIR (where zsh
# completions go). Binaries, man pages and completions must be built first (`make`).
set -eu

ACTION=${1:-install}
HERE=$(cd "$(dirname "$0")/.." && pwd)
LIST=$HERE/packaging/files.list
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
BUILD=${BUILD:-${CARGO_TARGET_DIR:-$HERE/target}/release}
D=$DESTDIR
GROUP=opencode-sandbox

# Where each @placeholder@ of files.list goes. systemd and systemd-sysusers read /usr/lib for
# packages and /etc for local installs; polkit and D-Bus paths in files.list are absolute.
if [ "$PREFIX" = /usr ]; then
    UNITDIR=/usr/lib/systemd/system
    SYSUSERSDIR=/usr/lib/sysusers.d
    if [ -e /etc/debian_version ]; then DEFAULT_ZSH=/usr/share/zsh/vendor-completions
    else DEFAULT_ZSH=/usr/share/zsh/site-functions; fi
else
    UNITDIR=/etc/systemd/system
    SYSUSERSDIR=/etc/sysusers.d
    DEFAULT_ZSH=$PREFIX/share/zsh/site-functions
fi
ZSHCOMPDIR=${ZSHCOMPDIR:-$DEFAULT_ZSH}
LIBEXECDIR=$PREFIX/libexec

# files.list, expanded: "SOURCE DEST MODE FLAG" lines (FLAG "-" when absent); the .deb-only
# entries are skipped.
entries() {
    awk 'NF && $1 !~ /^#/ && $4 != "deb-only" { print $1, $2, $3, (NF >= 4 ? $4 : "-") }' "$LIST" | sed \
        -e "s#@bindir@#$PREFIX/bin#" -e "s#@libexecdir@#$LIBEXECDIR#" \
        -e "s#@unitdir@#$UNITDIR#" -e "s#@sysusersdir@#$SYSUSERSDIR#" \
        -e "s#@docdir@#$PREFIX/share/doc/ocsb#" -e "s#@mandir@#$PREFIX/share/man#" \
        -e "s#@bashcompdir@#$PREFIX/share/bash-completion/completions#" \
        -e "s#@zshcompdir@#$ZSHCOMPDIR#" -e "s#@fishcompdir@#$PREFIX/share/fish/vendor_completions.d#"
}

# The file a SOURCE column names: target/release/ is the build directory.
source_path() {
    case $1 in
        target/release/*) echo "$BUILD/${1#target/release/}" ;;
        *) echo "$HERE/$1" ;;
    esac
}

die() { echo "install.sh: $*" >&2; exit 1; }
systemd_pid1() { [ -z "$D" ] && [ -d /run/systemd/system ]; }

list() {
    entries | while read -r src dest mode flag; do
        case $src in
            *'*'*)
                for f in $(source_path "$src"); do
                    [ -e "$f" ] || die "nothing matches $src in $BUILD: build first (make)"
                    echo "$dest$(basename "$f") $mode $flag"
                done ;;
            *) echo "$dest $mode $flag" ;;
        esac
    done
}

do_uninstall() {
    [ -n "$D" ] || [ "$(id -u)" = 0 ] || die "run as root (or set DESTDIR)"
    if systemd_pid1; then systemctl disable --now ocsb-netlock.service 2>/dev/null || true; fi
    # A stopped service leaves its table enforcing on purpose; removal takes it away.
    if [ -z "$D" ] && [ -x "$LIBEXECDIR/ocsb/ocsb-netlock-helper" ]; then
        "$LIBEXECDIR/ocsb/ocsb-netlock-helper" remove >/dev/null 2>&1 ||
            echo "install.sh: could not delete table inet ocsb_netlock (nft delete table inet ocsb_netlock)" >&2
    fi
    entries | while read -r src dest mode flag; do
        case $src in
            *'*'*) for f in "$D$dest"$(basename "$src"); do [ -e "$f" ] && rm -f "$f"; done; continue ;;
        esac
        if [ "$flag" = config ] && [ -e "$D$dest" ] && [ -z "${PURGE:-}" ] &&
            ! cmp -s "$D$dest" "$(source_path "$src")"; then
            echo "install.sh: kept $D$dest (edited; PURGE=1 removes it)" >&2
            continue
        fi
        rm -f "$D$dest"
    done
    rmdir "$D$LIBEXECDIR/ocsb" "$D$PREFIX/share/doc/ocsb" "$D/etc/ocsb" 2>/dev/null || true
    if systemd_pid1; then systemctl daemon-reload; fi
    echo "ocsb removed (kept the group $GROUP and the user ocsb-netlock: files may carry their ids)"
}

# The accounts first: the shim's group must exist before the shim gets its set-gid bit.
make_accounts() {
    conf=$(source_path packaging/sysusers.d/ocsb.conf)
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers "$conf"
    else
        getent group "$GROUP" >/dev/null || groupadd --system "$GROUP"
        getent passwd ocsb-netlock >/dev/null ||
            useradd --system --user-group --home-dir / --shell /usr/sbin/nologin ocsb-netlock
    fi
    getent group "$GROUP" >/dev/null || die "group $GROUP missing after systemd-sysusers $conf"
}

do_install() {
    [ -n "$D" ] || [ "$(id -u)" = 0 ] || die "run as root (or set DESTDIR to stage)"
    # Check everything is built before touching the system: nothing half-installed.
    entries | while read -r src dest mode flag; do
        for f in $(source_path "$src"); do
            [ -e "$f" ] || die "$f is missing: build first with 'make' (as yourself; it also links the filter statically and renders the man pages)"
        done
    done
    [ -n "$D" ] || make_accounts
    entries | while read -r src dest mode flag; do
        case $src in
            *'*'*)
                install -d -m 0755 "$D$dest"
                for f in $(source_path "$src"); do install -m "$mode" "$f" "$D$dest"; done
                continue ;;
        esac
        f=$(source_path "$src")
        install -d -m 0755 "$(dirname "$D$dest")"
        case $flag in
            setgid-shim)
                # Written root:root 0755 under a temporary name, given its group, then its mode,
                # then renamed into place: never set-gid root, and never a half-set file in place.
                tmp=$(dirname "$D$dest")/.$(basename "$dest").new
                install -m 0755 "$f" "$tmp"
                if [ -z "$D" ]; then chgrp "$GROUP" "$tmp" && chmod 2755 "$tmp"; fi
                mv -f "$tmp" "$D$dest" ;;
            config)
                if [ -e "$D$dest" ]; then echo "install.sh: kept $D$dest" >&2
                else install -m "$mode" "$f" "$D$dest"; fi ;;
            unit)
                sed "s#/usr/libexec/#$LIBEXECDIR/#g" "$f" > "$D$dest"
                chmod "$mode" "$D$dest" ;;
            *) install -m "$mode" "$f" "$D$dest" ;;
        esac
    done
    # The set-gid shim grants nothing only while the group owns nothing else (`ocsb doctor`
    # checks the same trees: netlock-group-files).
    if [ -z "$D" ]; then
        owned=$(find /etc /usr /opt /srv /var/lib /boot -xdev -group "$GROUP" \
            ! -path "$LIBEXECDIR/ocsb/ocsb-netlock-exec" 2>/dev/null | head -n 10)
        if [ -n "$owned" ]; then
            echo "install.sh: the group $GROUP owns files besides the shim; every sandbox runs as that" >&2
            echo "install.sh: group and could use them. Fix: chgrp root each of:" >&2
            echo "$owned" | sed 's/^/  /' >&2
            exit 1
        fi
    fi
    if systemd_pid1; then
        systemctl daemon-reload
        systemctl enable --now ocsb-netlock.service
        systemctl reload dbus.service 2>/dev/null || true
        echo "installed; ocsb-netlock.service started (check: ocsb-netlock-helper verify)"
    elif [ -z "$D" ]; then
        echo "installed. systemd is not PID 1 here: start the netlock daemon with"
        echo "  systemctl enable --now ocsb-netlock.service   (once systemd runs), or for a one-shot table:"
        echo "  $LIBEXECDIR/ocsb/ocsb-netlock-helper apply"
    fi
}

case $ACTION in
    install) do_install ;;
    uninstall) do_uninstall ;;
    list) list ;;
    *) die "usage: install.sh [install|uninstall|list]" ;;
esac
