"""A fake desktop notification daemon for the tests (python3-dbus + python3-gi, no root).

Owns org.freedesktop.Notifications on the bus in DBUS_SESSION_BUS_ADDRESS, prints READY once the
name is owned, then one JSON line per Notify call:
  {"id": 1, "app_name": ..., "replaces_id": ..., "app_icon": ..., "summary": ..., "body": ...,
   "actions": [...], "hints": {...}, "expire_timeout": ...}
Ids are increasing uint32 from 1. Stops on SIGTERM/SIGINT.
"""
import json
import os
import signal
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

IFACE = "org.freedesktop.Notifications"


def plain(v):
    """dbus-python values to JSON-able ones."""
    if isinstance(v, (dbus.Boolean, bool)):
        return bool(v)
    if isinstance(v, (dbus.Byte, dbus.Int16, dbus.UInt16, dbus.Int32, dbus.UInt32, dbus.Int64, dbus.UInt64, int)):
        return int(v)
    if isinstance(v, (dbus.Double, float)):
        return float(v)
    if isinstance(v, (dbus.Dictionary, dict)):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (dbus.Array, dbus.Struct, list, tuple)):
        return [plain(x) for x in v]
    return str(v)


class Server(dbus.service.Object):
    def __init__(self, bus):
        super().__init__(bus, "/org/freedesktop/Notifications")
        self.next_id = 1

    @dbus.service.method(IFACE, in_signature="susssasa{sv}i", out_signature="u")
    def Notify(self, app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout):
        nid = int(replaces_id) or self.next_id
        if not replaces_id:
            self.next_id += 1
        line = {
            "id": nid,
            "app_name": str(app_name),
            "replaces_id": int(replaces_id),
            "app_icon": str(app_icon),
            "summary": str(summary),
            "body": str(body),
            "actions": plain(actions),
            "hints": plain(hints),
            "expire_timeout": int(expire_timeout),
        }
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        return dbus.UInt32(nid)

    @dbus.service.method(IFACE, in_signature="", out_signature="as")
    def GetCapabilities(self):
        return ["body"]

    @dbus.service.method(IFACE, in_signature="", out_signature="ssss")
    def GetServerInformation(self):
        return ("ocsb-fake-notifications", "ocsb", "1.0", "1.2")

    @dbus.service.method(IFACE, in_signature="u", out_signature="")
    def CloseNotification(self, nid):
        self.NotificationClosed(nid, 3)

    @dbus.service.signal(IFACE, signature="uu")
    def NotificationClosed(self, nid, reason):
        pass

    # What a desktop shell that owns the Notifications name may export besides it (KDE's
    # plasmashell has org.kde.PlasmaShell.evaluateScript): the proxy must not pass it through.
    @dbus.service.method("org.kde.PlasmaShell", in_signature="s", out_signature="s")
    def evaluateScript(self, script):
        return "EVALUATED " + str(script)


def main():
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    server = Server(bus)
    name = dbus.service.BusName(IFACE, bus, do_not_queue=True)  # raises if already owned
    loop = GLib.MainLoop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    loop.run()
    # No name release on the way out: the bus may already be gone (a traceback on stderr).
    os._exit(0)


if __name__ == "__main__":
    main()
