# %pre of ocsb: create the accounts before the payload is unpacked, because the set-gid shim is
# unpacked as 2755 root:opencode-sandbox and rpm would fall back to group root (a set-gid root
# file) if the group did not exist. The lines are those of /usr/lib/sysusers.d/ocsb.conf
# (packaging/tests/run.sh checks they match), given on stdin as Fedora's %sysusers_create_compat does.
systemd-sysusers --replace=/usr/lib/sysusers.d/ocsb.conf - <<'SYSUSERS'
g opencode-sandbox -
u ocsb-netlock - "OpenCode sandbox netlock helper" / /usr/sbin/nologin
SYSUSERS
if ! getent group opencode-sandbox >/dev/null; then
    echo "ocsb: the group opencode-sandbox could not be created; refusing to install the set-gid shim" >&2
    exit 1
fi
