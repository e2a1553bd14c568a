# %postun of ocsb. The group opencode-sandbox and the user ocsb-netlock are kept (Fedora's rule for
# system accounts): files created by sandboxed processes can carry the group's gid.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
