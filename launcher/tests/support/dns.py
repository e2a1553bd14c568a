"""A world name server for the isolated-network tests: answers every A query with ADDR (the
origin), or with the address given for that name, and logs each question's name to LOG, so a
test can show which names left the sandbox.
Usage: dns.py ADDR LOG [NAME=ADDR ...]"""
import socket
import struct
import sys

addr, log = sys.argv[1], sys.argv[2]
zone = dict(a.split("=", 1) for a in sys.argv[3:])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((addr, 53))
while True:
    q, peer = s.recvfrom(4096)
    if len(q) < 12:
        continue
    labels, i = [], 12
    while i < len(q) and q[i]:
        labels.append(q[i + 1 : i + 1 + q[i]].decode(errors="replace"))
        i += 1 + q[i]
    qtype = struct.unpack("!H", q[i + 1 : i + 3])[0] if i + 3 <= len(q) else 0
    with open(log, "a") as f:
        f.write(".".join(labels) + "\n")
    question = q[12 : i + 5]
    answers = b""
    if qtype == 1:
        answer = zone.get(".".join(labels).lower(), addr)
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(answer)
    head = q[:2] + struct.pack("!HHHHH", 0x8180, 1, 1 if answers else 0, 0, 0)
    s.sendto(head + question + answers, peer)
