# %post of ocsb: enable the netlock service on first install (third-party package: no preset
# enables it), start it where systemd runs; restart it after an upgrade. The table stays
# enforcing while the daemon restarts.
if [ "$1" -eq 1 ]; then
    systemctl enable ocsb-netlock.service >/dev/null 2>&1 || :
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null 2>&1 || :
        systemctl start ocsb-netlock.service || :
    fi
elif [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
    systemctl try-restart ocsb-netlock.service >/dev/null 2>&1 || :
fi
