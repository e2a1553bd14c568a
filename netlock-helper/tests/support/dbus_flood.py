#!/usr/bin/env python3
"""Floods dev.ocsb.Netlock1 from ONE bus connection, as an unprivileged caller could: every
second one Apply (which needs a polkit check) and BURST-1 Status calls, all flagged NO_REPLY_EXPECTED, for SECONDS.
A raw client (no D-Bus library): the test needs calls that nobody waits for.

usage: dbus_flood.py BUS_SOCKET_PATH SECONDS BURST"""
import os
import socket
import struct
import sys
import time


def pad(b, n):
    return b + b"\0" * ((-len(b)) % n)


def message(serial, path, iface, member, dest, flags):
    """A method call without a body (little-endian, protocol 1)."""
    fields = [(1, b"o", path), (2, b"s", iface), (3, b"s", member), (6, b"s", dest)]
    buf = struct.pack("<cBBBII", b"l", 1, flags, 1, 0, serial) + b"\0\0\0\0"
    for code, sig, val in fields:
        buf = pad(buf, 8) + bytes([code, len(sig)]) + sig + b"\0"
        v = val.encode()
        buf = pad(buf, 4) + struct.pack("<I", len(v)) + v + b"\0"
    buf = buf[:12] + struct.pack("<I", len(buf) - 16) + buf[16:]
    return pad(buf, 8)


def main():
    path, seconds, burst = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"\0AUTH EXTERNAL " + str(os.getuid()).encode().hex().encode() + b"\r\n")
    assert s.recv(4096).startswith(b"OK"), "bus authentication failed"
    s.sendall(b"BEGIN\r\n")
    s.sendall(message(1, "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "org.freedesktop.DBus", 0))
    serial, end = 1, time.time() + seconds
    while time.time() < end:
        out = b""
        for i in range(burst):
            serial += 1
            member = "Apply" if i == 0 else "Status"
            out += message(serial, "/dev/ocsb/Netlock1", "dev.ocsb.Netlock1", member, "dev.ocsb.Netlock1", 1)
        s.setblocking(True)
        s.sendall(out)
        s.setblocking(False)
        try:
            while s.recv(65536):
                pass
        except BlockingIOError:
            pass
        time.sleep(1.0)


main()
