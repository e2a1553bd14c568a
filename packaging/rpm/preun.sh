# %preun of ocsb: on erase (not upgrade) stop and disable the service, then delete its table
# (a stopped service leaves it enforcing on purpose). Only where systemd runs: otherwise the
# package never started it, and a chroot's network namespace is the host's.
if [ "$1" -eq 0 ]; then
    systemctl --no-reload disable ocsb-netlock.service >/dev/null 2>&1 || :
    if [ -d /run/systemd/system ]; then
        systemctl stop ocsb-netlock.service >/dev/null 2>&1 || :
        /usr/libexec/ocsb/ocsb-netlock-helper remove >/dev/null ||
            echo "ocsb: could not delete table inet ocsb_netlock; run: nft delete table inet ocsb_netlock" >&2
    fi
fi
