#!/bin/sh
# Print the path of a cached tarball holding a clean Debian root with what the ocsb package needs
# at run time, building it with debootstrap first if it is not cached yet.
#
#   sh packaging/tests/debian-root.sh            -> /var/cache/ocsb-test/bookworm-<hash>.tar.gz
#   sh packaging/tests/debian-root.sh trixie     -> /var/cache/ocsb-test/trixie-<hash>.tar.gz
#
# Only this step downloads (from the Debian mirror apt is configured with, like tests/install-deps.sh);
# the install/purge test itself unpacks the tarball and needs no network. The cache key is a hash of
# the package list, so a changed list builds a new root. Override the mirror with OCSB_DEBIAN_MIRROR
# and the cache directory with OCSB_TEST_CACHE.
set -eu

# The ocsb package's run-time dependencies (Depends of the .deb; libc is in every root). systemd
# brings systemd-sysusers, which postinst runs before the shim gets its group; nftables brings
# nft(8), which `ocsb-netlock-helper verify` runs (the systemd stage checks the table with it).
# apparmor, installed by default on Debian and Ubuntu, is what postinst hands the AppArmor profile
# to: Debian 12's parser (AppArmor 3.0) predates the profile's userns rule, Debian 13's (4.1)
# knows it, as Ubuntu's (>= 4.0) does.
SUITE=${1:-bookworm}
case $SUITE in
    bookworm | trixie) ;;
    *) echo "debian-root.sh: unknown suite $SUITE (bookworm, trixie)" >&2; exit 1 ;;
esac
INCLUDE=systemd,curl,git,libnftnl11,libmnl0,nftables,apparmor

CACHE=${OCSB_TEST_CACHE:-/var/cache/ocsb-test}
HASH=$(printf '%s minbase %s\n' "$SUITE" "$INCLUDE" | sha256sum | cut -c1-12)
TARBALL=$CACHE/$SUITE-$HASH.tar.gz

if [ -s "$TARBALL" ]; then
    echo "$TARBALL"
    exit 0
fi

command -v debootstrap >/dev/null 2>&1 || {
    echo "debian-root.sh: debootstrap is missing: apt-get install debootstrap" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || { echo "debian-root.sh: must run as root (debootstrap)" >&2; exit 1; }

# The mirror apt already uses for bookworm (deb822 "URIs:" or one-line "deb URL bookworm ...").
mirror() {
    if [ -n "${OCSB_DEBIAN_MIRROR:-}" ]; then echo "$OCSB_DEBIAN_MIRROR"; return; fi
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        m=$(awk '
            /^deb[ \t]/ && $0 ~ /[ \t]bookworm[ \t]/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }
            /^URIs:/ { uri = $2 }
            /^Suites:/ && uri != "" { for (i = 2; i <= NF; i++) if ($i == "bookworm") { print uri; exit } }
            /^$/ { uri = "" }' "$f")
        if [ -n "$m" ]; then echo "$m"; return; fi
    done
    echo "debian-root.sh: no bookworm mirror in /etc/apt/sources.list*; set OCSB_DEBIAN_MIRROR" >&2
    return 1
}
MIRROR=$(mirror)

mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "debian-root.sh: debootstrap $SUITE from $MIRROR into $WORK (cached afterwards)" >&2
debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$WORK/root" "$MIRROR" >"$WORK/log" 2>&1 || {
    tail -n 30 "$WORK/log" >&2
    echo "debian-root.sh: debootstrap failed (log above)" >&2
    exit 1
}
# Downloaded .debs are not part of the root under test.
rm -rf "$WORK/root/var/cache/apt/archives"/*.deb "$WORK/root/var/lib/apt/lists"/*_Packages
tar -C "$WORK/root" --numeric-owner -czf "$WORK/root.tar.gz" .
mv "$WORK/root.tar.gz" "$TARBALL"
echo "$TARBALL"
