"""Runs inside an isolated sandbox: each case both through the filter's port (an absolute-form
GET, or a CONNECT for `raw` cases) and directly (the transparent path: resolve through the
namespace's stub, connect, send a GET with the Host header, or read a banner).
Prints `LABEL proxy=STATUS direct=OUTCOME` per case, OUTCOME being an HTTP status, `banner`,
`dns` (the stub gave no address), `reset` (refused, reset or closed with no answer).
Usage: verdicts.py LABEL,HOST,PORT,KIND ...   (KIND: http | raw)"""
import socket
import sys


def status(head):
    try:
        return head.split(b"\r\n", 1)[0].split()[1].decode()
    except IndexError:
        return "none"


def read_head(s):
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 65536:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


def proxied(host, port, kind):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    if kind == "raw":
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    else:
        authority = host if port == 80 else f"{host}:{port}"
        s.sendall(f"GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode())
    return status(read_head(s))


def direct(host, port, kind):
    try:
        addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except socket.gaierror:
        return "dns"
    try:
        s = socket.create_connection(addr, timeout=10)
        if kind == "raw":
            data = s.recv(64)
            return "banner" if data.startswith(b"SSH-") else ("reset" if not data else "data")
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        head = read_head(s)
        return status(head) if head else "reset"
    except OSError:
        return "reset"


for case in sys.argv[1:]:
    label, host, port, kind = case.split(",")
    port = int(port)
    print(f"{label} proxy={proxied(host, port, kind)} direct={direct(host, port, kind)}", flush=True)
