#!/usr/bin/python3
# Test probe, installed by the tests as <prefix>/bin/ocsb so that the real ocsb-netlock-exec shim
# runs it with gid G. Prints one line per check: "ok" or the errno name (or "timeout").
import ctypes, errno, os, socket, sys

def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else repr(e)

def tcp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        return "ok"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return err(e)
    finally:
        s.close()

def udp(host, port):
    """sendto + wait for the world's echo: 'ok' only if the datagram really went through."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.sendto(b"ping", (host, int(port)))
        s.recvfrom(64)
        return "ok"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return err(e)
    finally:
        s.close()

def tcp_self(host):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    l = socket.socket(fam, socket.SOCK_STREAM)
    l.bind((host, 0))
    l.listen(1)
    return tcp(host, l.getsockname()[1])

def userns():
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(0x10000000) != 0:
        return "unshare:" + errno.errorcode[ctypes.get_errno()]
    open("/proc/self/setgroups", "w").write("deny")
    open("/proc/self/uid_map", "w").write(f"0 {uid} 1")
    open("/proc/self/gid_map", "w").write(f"0 {gid} 1")
    return f"uid={os.getuid()} gid={os.getgid()} " + tcp(sys.argv[2], sys.argv[3])

def setegid_escape():
    out = []
    for name, f in (("setegid", os.setegid), ("setgid", os.setgid), ("setregid", lambda g: os.setregid(g, g))):
        try:
            f(int(sys.argv[2]))
            out.append(f"{name}:ok")
        except OSError as e:
            out.append(f"{name}:{err(e)}")
    return " ".join(out) + " " + tcp(sys.argv[3], sys.argv[4])

def ids():
    r, e, s = os.getresgid()
    fs = [l.split()[4] for l in open("/proc/self/status") if l.startswith("Gid:")][0]
    nnp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs:")][0]
    fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    um = os.umask(0)
    return f"rgid={r} egid={e} sgid={s} fsgid={fs} nnp={nnp} umask={um:03o} fds={','.join(map(str, fds))} argv0={os.path.basename(sys.argv[0])}"

mode = sys.argv[1]
print({
    "tcp": lambda: tcp(sys.argv[2], sys.argv[3]),
    "udp": lambda: udp(sys.argv[2], sys.argv[3]),
    "tcp-self": lambda: tcp_self(sys.argv[2]),
    "userns": userns,
    "setegid": setegid_escape,
    "ids": ids,
}[mode](), flush=True)
