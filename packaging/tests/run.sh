#!/bin/sh
# Packaging tests (run as root on Debian 12, from anywhere):  sh packaging/tests/run.sh
#
#  1. build:    release workspace (reused when up to date), man pages and completions (ocsb-xtask
#               gen), the .deb/.rpm asset lists match packaging/files.list (ocsb-xtask check);
#               completions equal `ocsb completions SHELL`; every man page passes `man --warnings`.
#  2. deb:      cargo deb; its contents (paths, modes, owners) equal files.list; conffiles;
#               lintian, with only the explained overrides of packaging/deb/lintian-overrides.
#  3. deb-root: a clean Debian 12 root (debootstrap, cached by debian-root.sh), in private mount,
#               pid and network namespaces; dpkg -i under strace: the shim is 2755
#               root:opencode-sandbox and was never set-gid while group root; the group, the user,
#               the statoverride, the enabled unit; `ocsb --version` and
#               `ocsb-netlock-helper print` run; a reinstall (the upgrade path) keeps all that;
#               purge leaves nothing behind but the two system accounts. The root has Debian
#               12's apparmor (3.0), whose parser predates the profile's userns rule: postinst
#               says so and writes no profile.
#  4. netlock:  same root with /run/systemd/system present (so the scripts act as under systemd):
#               a table applied in the private netns is deleted by the package's removal.
#  5. rpm:      cargo generate-rpm; its files equal files.list; %pre's accounts equal sysusers.d;
#               rpmlint with packaging/rpm/rpmlintrc; rpm --root install into a clean root (%pre
#               makes the group, the shim unpacks 2755 root:opencode-sandbox), erase.
#  6. arch:     PKGBUILD's package() stages exactly files.list; versions agree.
#  7. source:   packaging/install.sh install/uninstall in a clean root: modes, the set-gid order,
#               uninstall leaves nothing behind but the accounts.
#  8. apparmor: a clean Debian 13 root (AppArmor 4.1, whose parser knows `userns` as Ubuntu's
#               does): dpkg -i writes /etc/apparmor.d/ocsb for /usr/bin/ocsb, and it compiles
#               with Debian 13's kernel feature set (which mediates user namespaces); a broken
#               copy does not; purge removes it. `install.sh` writes ocsb-usr-local for
#               /usr/local/bin/ocsb, which compiles too; uninstall removes it. Loading it needs a
#               kernel with AppArmor: where this one has it, the root sees sysfs and securityfs and
#               the profile must be loaded by postinst and unloaded by purge; where not, postinst
#               must say it did not load it (and the run says the load was not exercised).
#  9. systemd:  the .deb in a Docker container whose PID 1 is systemd (no network): the unit
#               starts, `systemd-analyze security` <= 1.5, a SIGTERM'd daemon is restarted, the
#               watchdog restarts a stuck one, the table stays in force throughout.
#
# Only debian-root.sh downloads (once; then cached under /var/cache/ocsb-test). Every test root
# lives in its own network namespace: nothing here touches the machine's nftables or network.
# Needs: cargo-deb and cargo-generate-rpm (cargo install --locked), and the Debian packages
# debootstrap lintian dpkg-dev rpm rpmlint strace man-db util-linux nftables.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
T=$CARGO_TARGET_DIR
R=$T/release
X=$R/ocsb-xtask
SHIM=/usr/libexec/ocsb/ocsb-netlock-exec
GROUP=opencode-sandbox
PATH=$PATH:$HOME/.cargo/bin
export LC_ALL=C

step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok   %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Inside the namespaces (re-invoked through unshare by the stages below).

# A fresh copy of the cached Debian root, with /proc of the private pid namespace.
new_root() {
    NR=$(mktemp -d /var/tmp/ocsb-pkgtest.XXXXXX)
    tar -C "$NR" -xzf "$TARBALL"
    mount -t proc proc "$NR/proc"
    echo "$NR"
}

in_root() { chroot "$NR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"; }

# Files of the root, without what only records that something ran (dpkg's database and logs).
snapshot() {
    (cd "$NR" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./run -o -path ./tmp \
        -o -path ./var/lib/dpkg -o -path ./var/log -o -path ./var/cache/debconf \
        -o -path ./var/cache/ldconfig \) -prune -o -printf '%p %M %u:%g\n' | sort)
}

accounts() { cut -d: -f1 "$NR/etc/passwd" "$NR/etc/group" | sort; }

# Fails if any write of a set-gid mode to the shim (or a temporary copy of it) came while the file
# still had group root: chown/chmod/openat(O_CREAT) calls on a path naming ocsb-netlock-exec, in
# the order strace saw them. Prints how many set-gid writes it saw.
check_setgid_order() {
    awk '
        /ocsb-netlock-exec/ && /= [0-9]+(<[^>]*>)?$/ {
            line = $0
            sub(/^[0-9]+ +/, "", line)
            call = line; sub(/\(.*/, "", call)
            args = line; sub(/^[^(]*\(/, "", args); sub(/\) += .*$/, "", args)
            n = split(args, a, /, /)
            path = args; if (match(args, /ocsb-netlock-exec[^">,]*/)) path = substr(args, RSTART, RLENGTH)
            g = ""
            if (call == "chown" || call == "fchown" || call == "lchown") g = a[3]
            if (call == "fchownat") g = a[4]
            if (g != "") { if (g != "-1") gid[path] = g + 0; next }   # -1: group unchanged
            mode = ""
            if (call == "chmod" || call == "fchmod") mode = a[2]
            else if (call == "fchmodat") mode = a[3]
            else if ((call == "openat" || call == "open") && args ~ /O_CREAT/) mode = a[n]
            if (mode ~ /^0[0-7]*$/ && length(mode) >= 5 && substr(mode, length(mode) - 3, 1) ~ /[2367]/) {
                setgid++
                if (!(path in gid) || gid[path] == 0) { print "set-gid while group root: " $0 > "/dev/stderr"; bad = 1 }
            }
        }
        END { print setgid + 0; exit bad }' "$1"
}

expect_mode() { # PATH MODE OWNER:GROUP (inside $NR)
    got=$(in_root stat -c '%a %U:%G' "$1")  # names from the root's own account files
    [ "$got" = "$2 $3" ] || fail "$1 is $got, expected $2 $3"
}

inside_deb() {
    NR=$(new_root)
    cp "$DEB" "$NR/tmp/ocsb.deb"
    before=$(snapshot); accounts_before=$(accounts)

    strace -f -y -qq -s 300 -o "$NR/tmp/trace1" -e trace=chown,fchown,fchownat,lchown,chmod,fchmod,fchmodat,open,openat \
        chroot "$NR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C dpkg -i /tmp/ocsb.deb >"$NR/tmp/dpkg.log" 2>&1 ||
        { cat "$NR/tmp/dpkg.log"; fail "dpkg -i"; }
    grep -q 'systemd is not running here' "$NR/tmp/dpkg.log" || { cat "$NR/tmp/dpkg.log"; fail "postinst did not say the service waits for systemd"; }
    ok "dpkg -i into a clean Debian 12 root (systemd not PID 1)"
    grep -q 'AppArmor parser version 3\..* rejects the AppArmor profile' "$NR/tmp/dpkg.log" ||
        { cat "$NR/tmp/dpkg.log"; fail "postinst did not say Debian 12's apparmor_parser rejects the profile"; }
    [ ! -e "$NR/etc/apparmor.d/ocsb" ] || fail "postinst wrote /etc/apparmor.d/ocsb for a parser that rejects it (apparmor.service would fail at boot)"
    ok "AppArmor 3.0 (Debian 12): no /etc/apparmor.d/ocsb, and postinst says why"
    n=$(check_setgid_order "$NR/tmp/trace1") || fail "the shim was set-gid while group root (trace above)"
    [ "$n" -ge 1 ] || fail "strace saw no set-gid chmod of the shim: the trace is not working"
    ok "shim: $n set-gid write(s), each after the chown to $GROUP (strace)"

    gid=$(in_root getent group "$GROUP" | cut -d: -f3) || fail "group $GROUP missing"
    [ "$gid" -lt 1000 ] || fail "group $GROUP has gid $gid, not a system gid"
    in_root getent passwd ocsb-netlock | grep -q ':/usr/sbin/nologin$' || fail "user ocsb-netlock missing or has a login shell"
    ok "accounts: group $GROUP (gid $gid), user ocsb-netlock (nologin)"
    expect_mode $SHIM 2755 root:$GROUP
    expect_mode /usr/bin/ocsb 755 root:root
    expect_mode /usr/libexec/ocsb/ocsb-netlock-helper 755 root:root
    expect_mode /usr/libexec/ocsb/ocsb-egress 755 root:root
    # The filter is shipped statically linked (its resident memory is the code it runs): no
    # program interpreter, no shared library.
    readelf -lW "$NR/usr/libexec/ocsb/ocsb-egress" | grep -q 'INTERP' && fail "ocsb-egress is dynamically linked (run make, which links it statically)"
    readelf -dW "$NR/usr/libexec/ocsb/ocsb-egress" | grep -q 'NEEDED' && fail "ocsb-egress needs shared libraries"
    expect_mode /etc/ocsb/netlock.toml 644 root:root
    expect_mode /usr/lib/systemd/system/ocsb-netlock.service 644 root:root
    bad=$(cd "$NR" && find usr/share/doc/ocsb usr/share/man usr/share/polkit-1 usr/share/dbus-1 usr/lib/sysusers.d \
        -name '*ocsb*' -type f ! -perm 0644 -print | head -1)
    [ -z "$bad" ] || fail "$bad is not 0644"
    ok "modes: shim 2755 root:$GROUP, binaries 0755, data 0644; the filter statically linked"
    [ "$(in_root dpkg-statoverride --list $SHIM)" = "root $GROUP 2755 $SHIM" ] || fail "statoverride: $(in_root dpkg-statoverride --list $SHIM)"
    ok "dpkg-statoverride: root $GROUP 2755"
    in_root dpkg-query -W -f='${Conffiles}\n' ocsb | grep -q '^ /etc/ocsb/netlock.toml ' || fail "/etc/ocsb/netlock.toml is not a conffile"
    [ -L "$NR/etc/systemd/system/sysinit.target.wants/ocsb-netlock.service" ] || fail "ocsb-netlock.service not enabled"
    ok "conffile /etc/ocsb/netlock.toml; unit enabled (sysinit.target.wants)"

    v=$(in_root ocsb --version) || fail "ocsb --version"
    [ "$v" = "ocsb $VERSION" ] || fail "ocsb --version printed '$v'"
    # `print` probes the kernel's table flags with a probe table (added and deleted in one
    # batch): in a network namespace of its own, never the machine's.
    unshare -n chroot "$NR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C \
        /usr/libexec/ocsb/ocsb-netlock-helper print >"$NR/tmp/print" 2>&1 || { cat "$NR/tmp/print"; fail "ocsb-netlock-helper print"; }
    grep -q "table inet ocsb_netlock" "$NR/tmp/print" && grep -q "skgid $gid" "$NR/tmp/print" ||
        { cat "$NR/tmp/print"; fail "ocsb-netlock-helper print: no table for gid $gid"; }
    in_root man -w ocsb >/dev/null 2>&1 || [ -f "$NR/usr/share/man/man1/ocsb.1.gz" ] || fail "man page ocsb.1 missing"
    ok "'$v'; ocsb-netlock-helper print renders table inet ocsb_netlock for gid $gid"

    # The upgrade path: dpkg unpacks over the installed files with the statoverride in place.
    strace -f -y -qq -s 300 -o "$NR/tmp/trace2" -e trace=chown,fchown,fchownat,lchown,chmod,fchmod,fchmodat,open,openat \
        chroot "$NR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C dpkg -i /tmp/ocsb.deb >"$NR/tmp/dpkg.log" 2>&1 ||
        { cat "$NR/tmp/dpkg.log"; fail "dpkg -i (reinstall)"; }
    n=$(check_setgid_order "$NR/tmp/trace2") || fail "reinstall: the shim was set-gid while group root"
    expect_mode $SHIM 2755 root:$GROUP
    ok "reinstall (upgrade path): shim unpacked 2755 root:$GROUP ($n set-gid write(s), none while group root)"

    in_root dpkg --purge ocsb >"$NR/tmp/dpkg.log" 2>&1 || { cat "$NR/tmp/dpkg.log"; fail "dpkg --purge"; }
    after=$(snapshot)
    left=$(printf '%s\n' "$after" | grep -v -E '^\./etc/(passwd|group|shadow|gshadow)-? ' | sort) || true
    was=$(printf '%s\n' "$before" | grep -v -E '^\./etc/(passwd|group|shadow|gshadow)-? ' | sort) || true
    if [ "$left" != "$was" ]; then
        printf '%s\n' "$was" >"$NR/tmp/was"; printf '%s\n' "$left" >"$NR/tmp/left"
        diff "$NR/tmp/was" "$NR/tmp/left" >&2 || true
        fail "purge left files behind (diff above: < before install, > after purge)"
    fi
    [ -z "$(in_root dpkg-statoverride --list $SHIM)" ] || fail "purge left the statoverride"
    ! ls "$NR/var/lib/dpkg/info/" | grep -q '^ocsb\.' || fail "purge left /var/lib/dpkg/info/ocsb.*"
    new=$(printf '%s\n' "$(accounts)" | grep -vxF "$accounts_before" | tr '\n' ' ') || true
    [ "$new" = "ocsb-netlock ocsb-netlock $GROUP " ] || fail "accounts left after purge: '$new' (expected the user and group ocsb-netlock and the group $GROUP)"
    ok "purge: no file left; statoverride gone; kept only the accounts ocsb-netlock and $GROUP (by design)"
    umount "$NR/proc"; rm -rf --one-file-system "$NR"; NR=""
}

inside_netlock() {
    NR=$(new_root)
    cp "$DEB" "$NR/tmp/ocsb.deb"
    # The scripts act as under systemd when this directory exists; systemctl itself then fails
    # (no systemd here), which the generated fragments tolerate.
    mkdir -p "$NR/run/systemd/system"
    ip link set lo up
    in_root dpkg -i /tmp/ocsb.deb >"$NR/tmp/dpkg.log" 2>&1 || { cat "$NR/tmp/dpkg.log"; fail "dpkg -i (systemd marker)"; }
    in_root /usr/libexec/ocsb/ocsb-netlock-helper apply >"$NR/tmp/apply" 2>&1 || { cat "$NR/tmp/apply"; fail "helper apply in the private netns"; }
    nft list tables | grep -q 'inet ocsb_netlock' || fail "no table after apply"
    in_root dpkg --remove ocsb >"$NR/tmp/dpkg.log" 2>&1 || { cat "$NR/tmp/dpkg.log"; fail "dpkg --remove"; }
    if nft list tables | grep -q 'inet ocsb_netlock'; then fail "dpkg --remove left table inet ocsb_netlock"; fi
    in_root dpkg --purge ocsb >/dev/null 2>&1 || fail "dpkg --purge"
    ok "removal deletes table inet ocsb_netlock (private netns)"
    umount "$NR/proc"; rm -rf --one-file-system "$NR"; NR=""
}

inside_rpm() {
    NR=$(new_root)
    rpm --root "$NR" --initdb
    strace -f -y -qq -s 300 -o "$NR/tmp/trace" -e trace=chown,fchown,fchownat,lchown,chmod,fchmod,fchmodat,open,openat \
        rpm --root "$NR" -i --nodeps "$RPM" >"$NR/tmp/rpm.log" 2>&1 || { cat "$NR/tmp/rpm.log"; fail "rpm -i"; }
    n=$(check_setgid_order "$NR/tmp/trace") || fail "rpm -i: the shim was set-gid while group root"
    [ "$n" -ge 1 ] || fail "strace saw no set-gid write of the shim during rpm -i"
    gid=$(in_root getent group "$GROUP" | cut -d: -f3) || fail "rpm %pre did not create $GROUP"
    expect_mode $SHIM 2755 root:$GROUP
    expect_mode /usr/bin/ocsb 755 root:root
    [ -L "$NR/etc/systemd/system/sysinit.target.wants/ocsb-netlock.service" ] || fail "rpm %post did not enable the unit"
    in_root ocsb --version >/dev/null || fail "ocsb --version after rpm -i"
    ok "rpm -i into a clean root: %pre made $GROUP (gid $gid), shim 2755 root:$GROUP ($n set-gid write(s), none while group root), unit enabled"
    rpm --root "$NR" -e ocsb >"$NR/tmp/rpm.log" 2>&1 || { cat "$NR/tmp/rpm.log"; fail "rpm -e"; }
    left=$(cd "$NR" && find usr etc -name '*ocsb*' ! -path 'etc/sysusers.d*' | head -5)
    [ -z "$left" ] || fail "rpm -e left: $left"
    ok "rpm -e removes every file and the enablement"
    umount "$NR/proc"; rm -rf --one-file-system "$NR"; NR=""
}

# The files install.sh reads, under $NR/src: the list, its sources, the build products.
copy_sources() {
    mkdir -p "$NR/src/target/release"
    (cd "$ROOT" && tar cf - packaging/install.sh packaging/files.list $(awk 'NF && $1 !~ /^#/ && $1 !~ /^target\// { print $1 }' packaging/files.list)) |
        tar -C "$NR/src" -xf -
    (cd "$R" && tar cf - ocsb static/ocsb-egress ocsb-netlock-helper ocsb-netlock-exec man completions) | tar -C "$NR/src/target/release" -xf -
}

inside_source() {
    NR=$(new_root)
    copy_sources
    before=$(snapshot); accounts_before=$(accounts)
    strace -f -y -qq -s 300 -o "$NR/tmp/trace" -e trace=chown,fchown,fchownat,lchown,chmod,fchmod,fchmodat,open,openat \
        chroot "$NR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C sh /src/packaging/install.sh install >"$NR/tmp/log" 2>&1 ||
        { cat "$NR/tmp/log"; fail "install.sh install"; }
    n=$(check_setgid_order "$NR/tmp/trace") || fail "install.sh: the shim was set-gid while group root"
    [ "$n" -ge 1 ] || fail "strace saw no set-gid chmod of the shim"
    expect_mode /usr/local/libexec/ocsb/ocsb-netlock-exec 2755 root:$GROUP
    expect_mode /usr/local/bin/ocsb 755 root:root
    expect_mode /usr/local/libexec/ocsb/ocsb-egress 755 root:root
    [ -f "$NR/usr/local/share/man/man1/ocsb.1.gz" ] && [ -f "$NR/usr/local/share/man/man8/ocsb-netlock-helper.8.gz" ] || fail "man pages not installed"
    grep -q '^ExecStart=/usr/local/libexec/ocsb/ocsb-netlock-helper daemon$' "$NR/etc/systemd/system/ocsb-netlock.service" || fail "unit not rewritten for /usr/local"
    [ "$(in_root /usr/local/bin/ocsb --version)" = "ocsb $VERSION" ] || fail "ocsb --version after make install"
    grep -q 'AppArmor parser version 3\..* rejects the profile' "$NR/tmp/log" || { cat "$NR/tmp/log"; fail "install.sh did not say Debian 12's apparmor_parser rejects the profile"; }
    [ ! -e "$NR/etc/apparmor.d/ocsb-usr-local" ] || fail "install.sh wrote a profile that Debian 12's parser rejects"
    ok "install.sh install (PREFIX=/usr/local): shim 2755 root:$GROUP, set-gid after chgrp ($n); unit points to /usr/local"
    in_root sh /src/packaging/install.sh uninstall >"$NR/tmp/log" 2>&1 || { cat "$NR/tmp/log"; fail "install.sh uninstall"; }
    # Files and ocsb's own directories must all be gone; shared directories `install -d` made
    # (share/man/man8, share/zsh/site-functions, ...) stay, as after any `make uninstall`.
    after=$(snapshot)
    left=$(printf '%s\n' "$after" | grep -v -E '^\./etc/(passwd|group|shadow|gshadow)-? ' | grep -v ' d' | sort) || true
    was=$(printf '%s\n' "$before" | grep -v -E '^\./etc/(passwd|group|shadow|gshadow)-? ' | grep -v ' d' | sort) || true
    printf '%s\n' "$before" >"$NR/tmp/before"
    dirs=$(printf '%s\n' "$after" | grep ' d' | grep -F -v -x -f "$NR/tmp/before" | grep ocsb) || true
    if [ "$left" != "$was" ] || [ -n "$dirs" ]; then
        printf '%s\n' "$was" >"$NR/tmp/was"; printf '%s\n' "$left" >"$NR/tmp/left"
        diff "$NR/tmp/was" "$NR/tmp/left" >&2 || true
        fail "uninstall left files behind (diff above) or ocsb directories: $dirs"
    fi
    ok "install.sh uninstall leaves no file and no ocsb directory behind; the accounts stay"
    umount "$NR/proc"; rm -rf --one-file-system "$NR"; NR=""
}

# The AppArmor profile under Debian 13's AppArmor 4.1, from the .deb and from install.sh.
inside_apparmor() {
    NR=$(new_root)
    # With AppArmor in this kernel, the root sees it as the host does, so postinst loads for real.
    loads=""
    if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ]; then
        loads=1
        mount -t sysfs sysfs "$NR/sys"
        mount -t securityfs securityfs "$NR/sys/kernel/security"
    fi
    features=/usr/share/apparmor-features/features
    [ -f "$NR$features" ] || fail "Debian 13's apparmor lacks $features"
    grep -q 'userns_create' "$NR$features" || fail "$features does not mediate user namespaces: the compile below would prove less"
    compiles() { in_root apparmor_parser -Q -K -T --features-file "$features" "$1" >"$NR/tmp/aa.log" 2>&1; }
    loaded() { grep -q "^$1 (unconfined)" "$NR/sys/kernel/security/apparmor/profiles" 2>/dev/null; }

    cp "$DEB" "$NR/tmp/ocsb.deb"
    in_root dpkg -i /tmp/ocsb.deb >"$NR/tmp/dpkg.log" 2>&1 || { cat "$NR/tmp/dpkg.log"; fail "dpkg -i (Debian 13)"; }
    cmp -s "$NR/etc/apparmor.d/ocsb" "$ROOT/packaging/apparmor/ocsb" || fail "postinst did not write /etc/apparmor.d/ocsb (the shipped profile)"
    expect_mode /etc/apparmor.d/ocsb 644 root:root
    grep -qx 'profile ocsb "/usr/bin/ocsb" flags=(unconfined) {' "$NR/etc/apparmor.d/ocsb" || fail "the profile does not attach to /usr/bin/ocsb"
    grep -qx '  userns,' "$NR/etc/apparmor.d/ocsb" || fail "the profile lacks the userns rule"
    compiles /etc/apparmor.d/ocsb || { cat "$NR/tmp/aa.log"; fail "apparmor_parser 4.1 rejects /etc/apparmor.d/ocsb"; }
    sed 's/^  userns,$/  userns create bogus,/' "$NR/etc/apparmor.d/ocsb" >"$NR/tmp/broken"
    if compiles /tmp/broken; then fail "apparmor_parser accepted a broken copy: the compile check proves nothing"; fi
    ok "AppArmor 4.1 (Debian 13): postinst wrote /etc/apparmor.d/ocsb (profile ocsb for /usr/bin/ocsb, userns); it compiles with Debian 13's features (userns_create); a broken copy does not"
    if [ -n "$loads" ]; then
        loaded ocsb || { cat "$NR/tmp/dpkg.log"; fail "postinst did not load the profile into this kernel's AppArmor"; }
        ok "postinst loaded profile ocsb into this kernel's AppArmor"
    else
        grep -q 'AppArmor is not enabled in this kernel, so it was not loaded' "$NR/tmp/dpkg.log" ||
            { cat "$NR/tmp/dpkg.log"; fail "postinst did not say it skipped loading the profile"; }
        ok "no AppArmor in this kernel: postinst says it did not load the profile (the load itself is not exercised here)"
    fi
    in_root dpkg --purge ocsb >"$NR/tmp/dpkg.log" 2>&1 || { cat "$NR/tmp/dpkg.log"; fail "dpkg --purge (Debian 13)"; }
    [ ! -e "$NR/etc/apparmor.d/ocsb" ] || fail "purge left /etc/apparmor.d/ocsb"
    if [ -n "$loads" ] && loaded ocsb; then fail "purge left profile ocsb loaded"; fi
    ok "purge removes /etc/apparmor.d/ocsb${loads:+ and unloads it}"

    copy_sources
    in_root sh /src/packaging/install.sh install >"$NR/tmp/log" 2>&1 || { cat "$NR/tmp/log"; fail "install.sh install (Debian 13)"; }
    p=/etc/apparmor.d/ocsb-usr-local
    grep -qx 'profile ocsb-usr-local "/usr/local/bin/ocsb" flags=(unconfined) {' "$NR$p" || fail "install.sh: $p does not attach to /usr/local/bin/ocsb"
    grep -qx '  include if exists <local/ocsb-usr-local>' "$NR$p" || fail "install.sh: $p does not include local/ocsb-usr-local"
    compiles $p || { cat "$NR/tmp/aa.log"; fail "apparmor_parser 4.1 rejects $p"; }
    cmp -s "$NR/usr/local/share/ocsb/apparmor/ocsb" "$ROOT/packaging/apparmor/ocsb" || fail "install.sh did not install the template"
    if [ -n "$loads" ]; then loaded ocsb-usr-local || fail "install.sh did not load ocsb-usr-local"; fi
    in_root sh /src/packaging/install.sh uninstall >"$NR/tmp/log" 2>&1 || { cat "$NR/tmp/log"; fail "install.sh uninstall (Debian 13)"; }
    [ ! -e "$NR$p" ] && [ ! -e "$NR/usr/local/share/ocsb" ] || fail "install.sh uninstall left $p or /usr/local/share/ocsb"
    if [ -n "$loads" ] && loaded ocsb-usr-local; then fail "uninstall left ocsb-usr-local loaded"; fi
    ok "install.sh (PREFIX=/usr/local): $p for /usr/local/bin/ocsb compiles; uninstall removes it${loads:+ and unloads it}"
    if [ -n "$loads" ]; then umount "$NR/sys/kernel/security" "$NR/sys"; fi
    umount "$NR/proc"; rm -rf --one-file-system "$NR"; NR=""
}

case "${1:-}" in
    __deb | __netlock | __rpm | __source | __apparmor)
        mount --make-rprivate /
        # A failed step leaves no root behind (proc first: rm must not walk into it).
        NR=""
        trap 'if [ -n "$NR" ]; then umount "$NR/proc" 2>/dev/null || true; rm -rf --one-file-system "$NR" || true; fi' EXIT
        "inside_${1#__}"
        exit 0 ;;
esac

# ---------------------------------------------------------------------------------------------
# Stages (host side).

[ "$(id -u)" = 0 ] || fail "run as root (debootstrap, chroot, namespaces)"
missing=""
need() { command -v "$1" >/dev/null 2>&1 || missing="$missing\n  $1: $2"; }
need cargo-deb "cargo install cargo-deb --locked"
need cargo-generate-rpm "cargo install cargo-generate-rpm --locked"
need lintian "apt-get install lintian"
need debootstrap "apt-get install debootstrap"
need dpkg-shlibdeps "apt-get install dpkg-dev"
need rpm "apt-get install rpm"
need rpmlint "apt-get install rpmlint"
need strace "apt-get install strace"
need man "apt-get install man-db"
need unshare "apt-get install util-linux"
need nft "apt-get install nftables"
need ip "apt-get install iproute2"
[ -z "$missing" ] || fail "missing tools:$(printf "$missing")"

# The set-gid order checker, on lines in strace's format (-f -y): it must catch a set-gid mode
# written while the group is root, through every call that can write a mode.
selftest() { printf '%s\n' "$@" >"$T/selftest.trace"; check_setgid_order "$T/selftest.trace" 2>/dev/null; }
mkdir -p "$T"
n=$(selftest '1 fchownat(AT_FDCWD</r>, "ocsb-netlock-exec.new", -1, 997, 0) = 0' \
    '1 fchmodat(AT_FDCWD</r>, "ocsb-netlock-exec.new", 02755) = 0' \
    '2 chown("/r/ocsb-netlock-exec", 0, 997) = 0' '2 chmod("/r/ocsb-netlock-exec", 02755) = 0' \
    '3 fchown(5</r/ocsb-netlock-exec.dpkg-new>, 0, 997) = 0' '3 fchmod(5</r/ocsb-netlock-exec.dpkg-new>, 02755) = 0') &&
    [ "$n" = 3 ] || fail "set-gid checker: rejected a correct order (or counted $n)"
for bad in '1 chmod("/r/ocsb-netlock-exec", 02755) = 0' \
    '1 fchmod(5</r/ocsb-netlock-exec.dpkg-new>, 02755) = 0' \
    '1 openat(AT_FDCWD</r>, "ocsb-netlock-exec", O_WRONLY|O_CREAT|O_EXCL, 02755) = 4</r/ocsb-netlock-exec>'; do
    if selftest "$bad" >/dev/null; then fail "set-gid checker missed: $bad"; fi
done
if selftest '1 chown("/r/ocsb-netlock-exec", 0, -1) = 0' '1 chmod("/r/ocsb-netlock-exec", 02755) = 0' >/dev/null; then
    fail "set-gid checker took chown(-1) for a group change"
fi

VERSION=$(awk -F'"' '/^\[workspace.package\]/ { w = 1 } w && /^version *=/ { print $2; exit }' "$ROOT/Cargo.toml")
[ -n "$VERSION" ] || fail "no version in [workspace.package] of Cargo.toml"
export VERSION
start=$(date +%s)

step "1. build: release workspace, the static filter, man pages, completions"
# `make build`, as a user builds: the static link of the filter is part of it, and the packages
# below ship that copy.
make -s -C "$ROOT" build >/dev/null || fail "make build"
"$X" check || fail "ocsb-xtask check"
ok "asset lists of packaging/xtask/Cargo.toml match files.list"
for sh in bash:ocsb.bash zsh:_ocsb fish:ocsb.fish; do
    "$R/ocsb" completions "${sh%%:*}" | cmp -s - "$R/completions/${sh#*:}" || fail "completions/${sh#*:} differs from 'ocsb completions ${sh%%:*}'"
done
ok "completions equal 'ocsb completions bash|zsh|fish'"
for p in ocsb.1 ocsb-init.1 ocsb-config.1 ocsb-netlock-helper.8; do
    [ -f "$R/man/$p.gz" ] || fail "man page $p missing"
done
for p in "$R"/man/*.gz; do
    w=$(MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$p" 2>&1 >/dev/null) || fail "man $p"
    [ -z "$w" ] || fail "man --warnings $p: $w"
done
ok "$(ls "$R/man" | wc -l) man pages, no warnings from man"

step "2. deb: cargo deb, contents, lintian"
rm -rf "$T/debian"
(cd "$ROOT" && cargo deb -p ocsb-xtask --no-build --locked -q) >/dev/null || fail "cargo deb -p ocsb-xtask --no-build"
DEB=$T/debian/ocsb_${VERSION}-1_amd64.deb
[ -f "$DEB" ] || fail "$DEB not built"
export DEB

# What files.list says a layout contains: "MODE OWNER:GROUP PATH" lines, globs expanded.
expected() { # LAYOUT SHIM_MODE SHIM_OWNER
    "$X" files "$1" | while read -r src dest mode flag; do
        case $src in
            *'*'*) for f in $R/${src#target/release/}; do echo "${mode#0} root:root $dest$(basename "$f")"; done ;;
            *) if [ "$flag" = setgid-shim ]; then echo "$2 $3 $dest"; else echo "${mode#0} root:root $dest"; fi ;;
        esac
    done | sort
}
perm_octal() { # ls-style permissions -> octal, e.g. -rwxr-sr-x -> 2755
    awk '{ p = $1; m = 0; s = 0
        for (i = 2; i <= 10; i++) { c = substr(p, i, 1); b = (10 - i) % 3
            if (c == "r") m += 4 * 8 ^ int((10 - i) / 3)
            if (c == "w") m += 2 * 8 ^ int((10 - i) / 3)
            if (c == "x" || c == "s" || c == "t") m += 8 ^ int((10 - i) / 3)
            if (i == 7 && (c == "s" || c == "S")) s += 2
            if (i == 4 && (c == "s" || c == "S")) s += 4 }
        $1 = sprintf("%d%03o", s, m); sub(/^0/, "", $1); print }'
}
dpkg-deb -c "$DEB" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $1, $2, $6 }' | sed 's#/# #' |
    awk '{ u = ($2 == "0" ? "root" : $2); g = ($3 == "0" ? "root" : $3); print $1, u ":" g, $4 }' | perm_octal | sort >"$T/deb.files"
{ expected deb 755 root:root
  echo "644 root:root /usr/share/doc/ocsb/copyright"
  echo "644 root:root /usr/share/doc/ocsb/changelog.Debian.gz"; } | sort >"$T/deb.expected"
diff "$T/deb.expected" "$T/deb.files" >&2 || fail ".deb contents differ from files.list (< files.list, > .deb)"
ok ".deb holds exactly files.list (+ copyright, changelog.Debian.gz): $(wc -l <"$T/deb.files") files; shim shipped 0755 root:root"
dpkg-deb -I "$DEB" conffiles | grep -qx /etc/ocsb/netlock.toml || fail "conffiles lacks /etc/ocsb/netlock.toml"
dpkg-deb -f "$DEB" Version | grep -qx "${VERSION}-1" || fail "deb version is not ${VERSION}-1"
head -1 "$ROOT/packaging/deb/changelog" | grep -q "^ocsb (${VERSION}-1) " || fail "packaging/deb/changelog does not start with ${VERSION}-1"
ok "conffiles, version ${VERSION}-1, changelog"

# Every override needs a reason: comment lines right above it or above its block of overrides
# (lintian shows that comment with each override of the block).
awk '/^#/ { c = 1; next } !NF { c = 0; next } !c { print FILENAME ":" NR ": override without a reason above it: " $0; bad = 1 }
    END { exit bad }' "$ROOT/packaging/deb/lintian-overrides" >&2 || fail "lintian overrides need reasons"
lintian --fail-on error,warning --display-info "$DEB" >"$T/lintian.log" 2>&1 || { cat "$T/lintian.log"; fail "lintian"; }
if grep -E '(unused|mismatched)-override' "$T/lintian.log"; then fail "stale lintian overrides (above)"; fi
grep -E '^[EW]: ' "$T/lintian.log" && fail "lintian reported the errors or warnings above"
ok "lintian: no error or warning, no stale override; $(grep -c '^ocsb: ' "$ROOT/packaging/deb/lintian-overrides") explained override(s)"

step "3. deb in a clean Debian 12 root"
TARBALL=$(sh "$HERE/debian-root.sh") || fail "debian-root.sh"
export TARBALL
unshare --mount --net --pid --fork sh "$0" __deb

step "4. deb under systemd's marker: removal deletes the nftables table"
unshare --mount --net --pid --fork sh "$0" __netlock

step "5. rpm: cargo generate-rpm, contents, rpmlint, install"
rm -rf "$T/generate-rpm"
(cd "$ROOT" && cargo generate-rpm -p packaging/xtask --target-dir "$T") || fail "cargo generate-rpm"
RPM=$(ls "$T"/generate-rpm/ocsb-"$VERSION"-1.*.rpm)
export RPM
rpm -qp --qf '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]' "$RPM" 2>/dev/null |
    grep -v '^d' | perm_octal | sort >"$T/rpm.files"
expected rpm 2755 root:$GROUP >"$T/rpm.expected"
diff "$T/rpm.expected" "$T/rpm.files" >&2 || fail ".rpm contents differ from files.list (< files.list, > .rpm)"
ok ".rpm holds exactly files.list ($(wc -l <"$T/rpm.files") files; shim 2755 root:$GROUP)"
sed -n '/^systemd-sysusers/,/^SYSUSERS$/p' "$ROOT/packaging/rpm/pre.sh" | sed '1d;$d' >"$T/pre.sysusers"
grep -v -e '^#' -e '^$' "$ROOT/packaging/sysusers.d/ocsb.conf" | diff - "$T/pre.sysusers" >&2 ||
    fail "packaging/rpm/pre.sh's accounts differ from packaging/sysusers.d/ocsb.conf"
rpm -qp --scripts "$RPM" 2>/dev/null | grep -q 'systemd-sysusers --replace' || fail "rpm lacks the %pre scriptlet"
ok "%pre creates the accounts of sysusers.d/ocsb.conf"
awk '/^#/ { c = 1; next } !NF { c = 0; next } !c { print FILENAME ":" NR ": filter without a reason above it: " $0; bad = 1 }
    END { exit bad }' "$ROOT/packaging/rpm/rpmlintrc" >&2 || fail "rpmlint filters need reasons"
rpmlint -r "$ROOT/packaging/rpm/rpmlintrc" "$RPM" >"$T/rpmlint.log" 2>&1 || { cat "$T/rpmlint.log"; fail "rpmlint"; }
grep -q ' 0 errors, 0 warnings' "$T/rpmlint.log" || { cat "$T/rpmlint.log"; fail "rpmlint reported errors or warnings"; }
ok "rpmlint: 0 errors, 0 warnings; $(grep -c '^addFilter' "$ROOT/packaging/rpm/rpmlintrc") explained filter(s)"
unshare --mount --net --pid --fork sh "$0" __rpm

step "6. arch: PKGBUILD"
A=$(mktemp -d /var/tmp/ocsb-arch.XXXXXX)
bash -n "$ROOT/packaging/arch/PKGBUILD" && bash -n "$ROOT/packaging/arch/ocsb.install" || fail "PKGBUILD/ocsb.install syntax"
(cd "$ROOT/packaging/arch" && startdir=$PWD pkgdir=$A/pkg bash -c '. ./PKGBUILD && package' >/dev/null) || fail "PKGBUILD package()"
(cd "$A/pkg" && find . -type f -printf '%m root:root /%P\n' | sort) >"$T/arch.files"
expected arch 755 root:root >"$T/arch.expected"
diff "$T/arch.expected" "$T/arch.files" >&2 || fail "PKGBUILD's package() differs from files.list (< files.list, > package)"
pkgver=$(bash -c '. "$1"; echo "$pkgver"' _ "$ROOT/packaging/arch/PKGBUILD")
[ "$pkgver" = "$VERSION" ] || fail "PKGBUILD pkgver=$pkgver, workspace version $VERSION"
backup=$(bash -c '. "$1"; echo "${backup[*]}"' _ "$ROOT/packaging/arch/PKGBUILD")
cfg=$("$X" files arch | awk '$4 == "config" { sub(/^\//, "", $2); printf "%s%s", sep, $2; sep = " " }')
[ "$backup" = "$cfg" ] || fail "PKGBUILD backup=($backup), files.list config files: $cfg"
rm -rf "$A"
ok "package() stages exactly files.list ($(wc -l <"$T/arch.files") files); pkgver, backup=() agree"

step "7. from source: packaging/install.sh in a clean root"
unshare --mount --net --pid --fork sh "$0" __source

step "8. apparmor: the profile under Debian 13's AppArmor 4.1 (.deb and install.sh)"
TARBALL=$(sh "$HERE/debian-root.sh" trixie) || fail "debian-root.sh trixie"
unshare --mount --net --pid --fork sh "$0" __apparmor
TARBALL=$(sh "$HERE/debian-root.sh") || fail "debian-root.sh"

step "9. systemd: the .deb under a real systemd as PID 1 (a Docker container, no network)"
docker info >/dev/null 2>&1 || fail "no Docker engine (tests/install-deps.sh starts dockerd)"
IMG=ocsb-pkgtest-systemd:$(basename "$TARBALL" .tar.gz)
docker image inspect "$IMG" >/dev/null 2>&1 || docker import "$TARBALL" "$IMG" >/dev/null || fail "docker import $TARBALL"
C=ocsb-pkgtest-sd-$$
# --network none: the container's own network namespace holds only lo; the helper's table lands
# there. SYS_ADMIN for systemd's mounts, NET_ADMIN for the helper; no --privileged.
docker run -d --rm --name "$C" --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined \
    --security-opt apparmor=unconfined --cgroupns=private --tmpfs /run --tmpfs /run/lock --network none \
    -e container=docker -v "$DEB:/tmp/ocsb.deb:ro" "$IMG" /lib/systemd/systemd >/dev/null || fail "docker run systemd"
trap 'docker rm -f "$C" >/dev/null 2>&1 || true' EXIT
in_c() { docker exec "$C" "$@"; }
until_ok() { # SECONDS COMMAND...: retry every 0.5 s
    n=$(($1 * 2)); shift
    while [ "$n" -gt 0 ]; do "$@" >/dev/null 2>&1 && return 0; n=$((n - 1)); sleep 0.5; done
    return 1
}
booted() { s=$(in_c systemctl is-system-running 2>/dev/null); [ "$s" = running ] || [ "$s" = degraded ]; }
until_ok 60 booted || fail "systemd did not boot in the container ($(in_c systemctl is-system-running 2>&1))"
in_c dpkg -i /tmp/ocsb.deb >"$T/sd-dpkg.log" 2>&1 || { cat "$T/sd-dpkg.log"; fail "dpkg -i under systemd"; }
until_ok 20 in_c systemctl is-active --quiet ocsb-netlock.service ||
    { in_c journalctl -u ocsb-netlock --no-pager | tail -20; fail "ocsb-netlock.service is not active"; }
in_c /usr/libexec/ocsb/ocsb-netlock-helper verify >/dev/null || fail "verify after the unit started"
ok "dpkg -i under systemd PID 1: the unit is active and the table matches the contract"
exposure=$(in_c systemd-analyze security ocsb-netlock.service 2>/dev/null |
    sed -n 's/.*Overall exposure level for ocsb-netlock.service: \([0-9.]*\).*/\1/p')
awk -v e="$exposure" 'BEGIN { exit !(e != "" && e <= 1.5) }' || fail "systemd-analyze security: exposure $exposure > 1.5"
ok "systemd-analyze security ocsb-netlock.service: exposure $exposure (<= 1.5)"
main_pid() { in_c systemctl show -p MainPID --value ocsb-netlock.service; }
new_pid() { p=$(main_pid); [ "$p" != 0 ] && [ "$p" != "$1" ] && in_c systemctl is-active --quiet ocsb-netlock.service; }
p1=$(main_pid)
in_c sh -c "kill -TERM $p1"
in_c /usr/libexec/ocsb/ocsb-netlock-helper verify >/dev/null || fail "the table went away with the daemon"
until_ok 15 new_pid "$p1" || fail "a daemon ended by SIGTERM was not restarted"
ok "SIGTERM (not systemctl stop): the table stays, systemd restarts the daemon"
[ "$(in_c systemctl show -p WatchdogUSec --value ocsb-netlock.service)" = 30s ] || fail "WatchdogSec is not 30s"
in_c mkdir -p /run/systemd/system/ocsb-netlock.service.d
printf '[Service]\nWatchdogSec=2s\n' | docker exec -i "$C" sh -c 'cat > /run/systemd/system/ocsb-netlock.service.d/w.conf'
in_c systemctl daemon-reload && in_c systemctl restart ocsb-netlock.service || fail "restart with a short watchdog"
until_ok 10 in_c systemctl is-active --quiet ocsb-netlock.service || fail "not active with WatchdogSec=2s"
sleep 4
p2=$(main_pid)
[ "$p2" != 0 ] || fail "the daemon did not survive its own watchdog pings"
in_c sh -c "kill -STOP $p2"
until_ok 30 new_pid "$p2" || fail "a stuck daemon (SIGSTOP) was not restarted by the watchdog"
in_c /usr/libexec/ocsb/ocsb-netlock-helper verify >/dev/null || fail "verify after the watchdog restart"
ok "watchdog: a daemon that answers stays up; a stuck one is restarted, the table in force throughout"
docker rm -f "$C" >/dev/null 2>&1 || true
trap - EXIT

printf '\nall packaging tests passed in %ss\n' "$(($(date +%s) - start))"
