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
        -e "s#@zshcompdir@#$ZSHCOMPDIR#" -e "s#@fishcompdir@#$PREFIX/share/fish/vendor_completions.d#" \
        -e "s#@pkgdatadir@#$PREFIX/share/ocsb#"
}

# The AppArmor profile of $PREFIX/bin/ocsb. Its name (and file in /etc/apparmor.d) is ocsb for
# /usr, the package's prefix, and ocsb-<prefix> otherwise, so that a source install beside the
# package neither replaces nor removes the package's profile. `ocsb doctor` names it the same way.
if [ "$PREFIX" = /usr ]; then AA_NAME=ocsb
else AA_NAME=ocsb-$(printf '%s' "${PREFIX#/}" | tr / -); fi
AA_PROFILE=/etc/apparmor.d/$AA_NAME

apparmor_enabled() {
    if command -v aa-enabled >/dev/null 2>&1; then aa-enabled --quiet 2>/dev/null
    else [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; fi
}

# Write the profile from its template with this prefix's name and path, where the system's
# parser accepts it (AppArmor >= 4 knows `userns`; an older parser would fail on it at every
# boot, and the kernels it runs with do not restrict user namespaces), then load it.
install_apparmor() { # TEMPLATE
    case $PREFIX in *[\"*?[{}^]*)
        echo "install.sh: no AppArmor profile: PREFIX $PREFIX has characters AppArmor reads as a pattern" >&2
        return 0 ;;
    esac
    command -v apparmor_parser >/dev/null 2>&1 || return 0
    # The profile exempts whatever program sits at $PREFIX/bin/ocsb: only where no one but root
    # can put one there (every directory on the way root's, writable by root alone).
    d=$D$PREFIX/bin
    while :; do
        if [ -L "$d" ] || [ "$(stat -c %u "$d" 2>/dev/null)" != 0 ] || [ -n "$(find "$d" -maxdepth 0 -perm /022 2>/dev/null)" ]; then
            echo "install.sh: no AppArmor profile: $d is not root's alone, so another program could take ocsb's place there" >&2
            return 0
        fi
        [ "$d" = / ] || [ -z "$d" ] && break
        d=$(dirname "$d")
    done
    tmp=$(dirname "$AA_PROFILE")/.$AA_NAME.new
    sed -e "s#^profile ocsb \"/usr/bin/ocsb\" #profile $AA_NAME \"$PREFIX/bin/ocsb\" #" \
        -e "s#<local/ocsb>#<local/$AA_NAME>#" "$1" >"$tmp"
    if ! apparmor_parser -Q -K -T "$tmp" >/dev/null 2>&1; then
        rm -f "$tmp" "$AA_PROFILE"
        echo "install.sh: $(apparmor_parser --version 2>/dev/null | head -n 1) rejects the profile (its userns rule needs AppArmor >= 4); none written to $AA_PROFILE (not needed with an older AppArmor: only AppArmor >= 4 restricts user namespaces)" >&2
        return 0
    fi
    chmod 0644 "$tmp" && mv -f "$tmp" "$AA_PROFILE"
    if apparmor_enabled; then
        if apparmor_parser -r -T -W "$AA_PROFILE"; then echo "loaded the AppArmor profile $AA_PROFILE ($PREFIX/bin/ocsb may create user namespaces)"
        else echo "install.sh: could not load $AA_PROFILE; load it with: sudo apparmor_parser -r $AA_PROFILE" >&2; fi
    else
        echo "wrote $AA_PROFILE; AppArmor is not enabled in this kernel, so it was not loaded"
    fi
}

uninstall_apparmor() {
    [ -e "$AA_PROFILE" ] || return 0
    if apparmor_enabled; then apparmor_parser -R "$AA_PROFILE" >/dev/null 2>&1 || true; fi
    rm -f "$AA_PROFILE"
    for c in /var/cache/apparmor/*/"$AA_NAME"; do [ -e "$c" ] && rm -f "$c"; done
    return 0
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
    [ -n "$D" ] || uninstall_apparmor
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
    rmdir "$D$LIBEXECDIR/ocsb" "$D$PREFIX/share/doc/ocsb/docs" "$D$PREFIX/share/doc/ocsb" "$D$PREFIX/share/ocsb/apparmor" \
        "$D$PREFIX/share/ocsb" "$D/etc/ocsb" 2>/dev/null || true
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
        # Only where AppArmor's configuration directory is (staging: where the packager made it).
        if [ "$flag" = apparmor ] && [ ! -d "$D/etc/apparmor.d" ]; then continue; fi
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
            apparmor)
                install -m "$mode" "$f" "$D$dest"
                # Staged packages write and load it in their own scripts, as the .deb does.
                [ -n "$D" ] || install_apparmor "$D$dest" ;;
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
