# %postun of ocsb. The group opencode-sandbox and the user ocsb-netlock are kept (Fedora's rule for
# system accounts): files created by sandboxed processes can carry the group's gid.
if [ "$1" -eq 0 ]; then
    # The package lists files, not directories: remove its own directories once empty.
    rmdir /usr/libexec/ocsb /usr/share/doc/ocsb/docs /usr/share/doc/ocsb /etc/ocsb 2>/dev/null || :
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
