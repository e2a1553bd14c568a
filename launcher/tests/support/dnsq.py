"""Asks one A question over TCP (to port 53 of ADDR; inside an isolated sandbox every port 53
is the stub) and prints `NAME ADDRESS`, or `NAME rcode N`.
Usage: dnsq.py ADDR NAME"""
import socket
import struct
import sys

server, name = sys.argv[1], sys.argv[2]
q = struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
s = socket.create_connection((server, 53), timeout=10)
s.sendall(struct.pack("!H", len(q)) + q)
n = struct.unpack("!H", s.recv(2))[0]
r = b""
while len(r) < n:
    r += s.recv(n - len(r))
rcode, answers = r[3] & 15, struct.unpack("!H", r[6:8])[0]
print(name, socket.inet_ntoa(r[-4:]) if rcode == 0 and answers else f"rcode {rcode}")
