"""One escape attempt per call: `python3 probe.py NAME ARGS...` prints `OK [detail]` when the
call succeeded or `ERR <ERRNO>` with the errno name when it failed (bubblewrap's try-syscall
pattern). The tests run the same probe inside and outside the sandbox."""
import ctypes, errno, os, socket, struct, sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def err(e):
    print("ERR", errno.errorcode.get(e, str(e)))
    sys.exit(0)


def sc(nr, *args):
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(nr), *cargs)
    if r < 0:
        err(ctypes.get_errno())
    return r


def ok(detail=""):
    print(("OK " + str(detail)).strip())
    sys.exit(0)


def main():
    name, args = sys.argv[1], sys.argv[2:]
    try:
        run(name, args)
    except OSError as e:
        err(e.errno)


def run(name, a):
    if name == "write":  # append a line to a path
        fd = os.open(a[0], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"escape\n")
        os.close(fd)
        ok()
    if name == "read":
        with open(a[0], "rb") as f:
            ok(f.read(64).decode(errors="replace").strip())
    if name == "listdir":
        ok(" ".join(sorted(os.listdir(a[0]))))
    if name == "mkdir":
        os.makedirs(a[0])
        ok()
    if name == "rename":
        os.rename(a[0], a[1])
        ok()
    if name == "unlink":
        os.unlink(a[0])
        ok()
    if name == "symlink-write":  # ln -s TARGET LINK; append through LINK
        os.symlink(a[0], a[1])
        fd = os.open(a[1], os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"escape\n")
        ok()
    if name == "hardlink":
        os.link(a[0], a[1])
        ok()
    if name == "mknod":
        os.mknod(a[0], 0o600 | 0o020000, os.makedev(1, 3))
        ok()
    if name == "exists":
        ok(os.path.lexists(a[0]))
    if name == "open-wronly":
        os.open(a[0], os.O_WRONLY)
        ok()
    if name == "ioctl":  # FD REQUEST [HIGHBITS]
        c = ctypes.c_char(b"x")
        req = int(a[1], 0) | (int(a[2], 0) << 32 if len(a) > 2 else 0)
        sc(16 if os.uname().machine == "x86_64" else 29, int(a[0]), req, ctypes.byref(c))
        ok()
    if name == "ptrace-attach":
        sc(101 if os.uname().machine == "x86_64" else 117, 16, int(a[0]), 0, 0)
        ok()
    if name == "process-vm-writev":
        buf = ctypes.create_string_buffer(8)
        iov = struct.pack("PL", ctypes.addressof(buf), 8)
        liov = ctypes.create_string_buffer(iov)
        sc(311 if os.uname().machine == "x86_64" else 271, int(a[0]), liov, 1, liov, 1, 0)
        ok()
    if name == "kill":
        os.kill(int(a[0]), int(a[1]))
        ok()
    if name == "syscall":  # NR ARGS... (integers)
        ok(sc(int(a[0], 0), *[int(x, 0) for x in a[1:]]))
    if name == "mount-tmpfs":
        r = libc.mount(b"none", a[0].encode(), b"tmpfs", 0, None)
        if r < 0:
            err(ctypes.get_errno())
        ok()
    if name == "umount":
        if libc.umount2(a[0].encode(), 2) < 0:
            err(ctypes.get_errno())
        ok()
    if name == "chroot":
        os.chroot(a[0])
        ok()
    if name == "fsopen":
        ok(sc(430, ctypes.c_char_p(b"tmpfs"), 0))
    if name == "open-tree":
        ok(sc(428, -100, ctypes.c_char_p(a[0].encode()), 1))
    if name == "unshare":
        sc(272 if os.uname().machine == "x86_64" else 97, int(a[0], 0))
        ok()
    if name == "clone":  # FLAGS: fork-like clone; the child exits at once
        r = sc(56 if os.uname().machine == "x86_64" else 220, int(a[0], 0) | 17, 0, 0, 0, 0)
        if r == 0:
            os._exit(0)
        os.waitpid(r, 0)
        ok()
    if name == "clone3":
        args = ctypes.create_string_buffer(88)
        r = sc(435, args, 88)
        if r == 0:
            os._exit(0)
        ok()
    if name == "socket":  # FAMILY TYPE [PROTO]
        fam = int(a[0], 0)
        s = sc(41 if os.uname().machine == "x86_64" else 198, fam, int(a[1], 0), int(a[2], 0) if len(a) > 2 else 0)
        os.close(s)
        ok()
    if name == "connect-unix":  # PATH or @abstract
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        p = a[0]
        s.connect("\0" + p[1:] if p.startswith("@") else p)
        ok()
    if name == "listen-abstract":  # NAME SECONDS: accept connections until killed
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + a[0])
        s.listen(8)
        print("LISTENING", flush=True)
        import time
        time.sleep(float(a[1]))
        ok()
    if name == "tcp-connect":  # HOST PORT
        s = socket.create_connection((a[0], int(a[1])), timeout=3)
        ok()
    if name == "tcp-fastopen":  # HOST PORT: a connect inside sendto (MSG_FASTOPEN)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.sendto(b"x", socket.MSG_FASTOPEN, (a[0], int(a[1])))
        ok()
    if name == "udp-send":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"x", (a[0], int(a[1])))
        ok()
    if name == "tcp-bind":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", int(a[0])))
        ok()
    if name == "status":  # fields of /proc/self/status
        want = set(a)
        out = []
        for line in open("/proc/self/status"):
            k, _, v = line.partition(":")
            if k in want:
                out.append(k + "=" + v.strip())
        ok(" ".join(out))
    if name == "fds":
        ok(" ".join(sorted(os.listdir("/proc/self/fd"), key=int)))
    if name == "cwd":
        ok(os.getcwd())
    if name == "tty":  # open the controlling terminal; print stdin's device major:minor
        os.open("/dev/tty", os.O_RDWR)
        rdev = os.fstat(0).st_rdev
        ok("%x:%x" % (os.major(rdev), os.minor(rdev)))
    if name == "session":
        st = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        ok("sid=%s tty_nr=%s" % (st[3], st[4]))
    if name == "readlink":
        ok(os.readlink(a[0]))
    if name == "env":
        ok(os.environ.get(a[0], "<unset>"))
    if name == "setrlimit-core":  # raise RLIMIT_CORE (4) to unlimited
        lim = (ctypes.c_ulong * 2)(2**64 - 1, 2**64 - 1)
        if libc.setrlimit(4, lim) < 0:
            err(ctypes.get_errno())
        ok()
    if name == "keyring-read":
        # KEYCTL_DESCRIBE (6) of the session keyring (-3)
        buf = ctypes.create_string_buffer(256)
        sc(250 if os.uname().machine == "x86_64" else 219, 6, -3, buf, 256)
        ok(buf.value.decode())
    print("unknown probe", name)
    sys.exit(2)


main()
