//! seccomp: the denylist of the research note (§3.3), applied last, right before the command
//! runs. Three stacked filters, because one seccompiler filter has one match action:
//! 1. the denylist, `EPERM`;
//! 2. `clone3` and `openat2` → `ENOSYS`: their flags and modes live in structs the filter cannot
//!    read, and `ENOSYS` makes libc fall back to `clone` and `openat`, which filter 1 checks;
//! 3. (x86_64) the x32 guard: syscall numbers with bit 30 set are the x32 ABI, which the
//!    seccompiler filter does not distinguish; they get `ENOSYS`.
//!
//! Foreign architectures (i386 `int 0x80`) are killed by seccompiler's arch check.
//!
//! `ioctl` commands and `socket` families are compared on 32 bits (`Dword`): the kernel truncates
//! them, so a 64-bit compare would let `(1 << 32) | TIOCSTI` through (CVE-2019-10063).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Cmp, SeccompCondition as Cond,
    SeccompFilter, SeccompRule, TargetArch, sock_filter,
};

use super::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Denied unconditionally with `EPERM`.
fn denied() -> Vec<i64> {
    let mut v = vec![
        // process control of other processes, pid 1 included
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_kcmp,
        // namespaces and mounts
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        // kernel attack surface
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_lookup_dcookie,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_syslog,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_vhangup,
        // keys: the session keyring is fresh, and no key syscalls at all
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([libc::SYS_iopl, libc::SYS_ioperm]);
    v
}

const CLONE_NEW_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

/// Values `personality()` may take (Docker's default profile): queries and the harmless ones.
const PERSONALITY_OK: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];
/// Families `socket()`/`socketpair()` may use.
const SOCKET_FAMILIES_OK: &[u64] = &[libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64];
/// Protocols of INET sockets whose traffic the netlock cannot see: `IPPROTO_SMC` (256) moves
/// data over RDMA or shared memory after a TCP handshake, and `IPPROTO_MPTCP` (262) sends it on
/// subflows the kernel opens itself, whose sockets carry no file credentials for `meta skgid`.
const PROTOCOLS_DENIED: &[u64] = &[256, 262];
/// `ioctl` requests denied: terminal input injection and the Linux console's selection paste.
#[allow(clippy::unnecessary_cast)] // c_ulong is u32 on some targets
const IOCTL_DENIED: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

fn cond(arg: u8, op: Cmp, v: u64) -> Result<Cond> {
    Cond::new(arg, Len::Dword, op, v).map_err(sc_err)
}

fn sc_err(e: impl std::fmt::Display) -> Error {
    Error::kernel(
        "seccomp",
        std::io::Error::other(e.to_string()),
        "the kernel refused the seccomp filter: it needs CONFIG_SECCOMP_FILTER; inside a container, allow seccomp filters (no `--security-opt seccomp=unconfined` is needed, but nested filters must be permitted)",
    )
}

fn all_ne(arg: u8, values: &[u64]) -> Result<SeccompRule> {
    SeccompRule::new(values.iter().map(|v| cond(arg, Cmp::Ne, *v)).collect::<Result<_>>()?).map_err(sc_err)
}

/// The denylist filter (match → `EPERM`).
pub fn denylist() -> Result<BpfProgram> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in denied() {
        rules.insert(nr, vec![]);
    }
    rules.insert(
        libc::SYS_ioctl,
        IOCTL_DENIED
            .iter()
            .map(|r| SeccompRule::new(vec![cond(1, Cmp::Eq, *r)?]).map_err(sc_err))
            .collect::<Result<_>>()?,
    );
    let mut socket = vec![all_ne(0, SOCKET_FAMILIES_OK)?];
    for p in PROTOCOLS_DENIED {
        socket.push(SeccompRule::new(vec![cond(2, Cmp::Eq, *p)?]).map_err(sc_err)?);
    }
    rules.insert(libc::SYS_socket, socket);
    rules.insert(libc::SYS_socketpair, vec![all_ne(0, SOCKET_FAMILIES_OK)?]);
    rules.insert(libc::SYS_personality, vec![all_ne(0, PERSONALITY_OK)?]);
    rules.insert(
        libc::SYS_clone,
        CLONE_NEW_FLAGS
            .iter()
            .map(|f| SeccompRule::new(vec![cond(0, Cmp::MaskedEq(*f), *f)?]).map_err(sc_err))
            .collect::<Result<_>>()?,
    );
    // No set-id bit on anything the sandbox makes. Set-user-id: the file lands on the host as
    // the user's, and another local user who runs it (homes are often 0755) becomes the user
    // there; nosuid inside the sandbox protects only the sandbox. Set-group-id: the sandbox runs
    // as the netlock group, and the argument for the 2755 shim rests on the group owning
    // nothing that grants it. Nothing a project builds needs either bit.
    let setgid = |arg: u8| -> Result<Vec<SeccompRule>> {
        [libc::S_ISGID, libc::S_ISUID]
            .into_iter()
            .map(|bit| {
                let bit = u64::from(bit);
                SeccompRule::new(vec![cond(arg, Cmp::MaskedEq(bit), bit)?]).map_err(sc_err)
            })
            .collect()
    };
    // The mode of a file being created counts as much as a later chmod (umask never clears the
    // set-id bits); `openat2`, whose mode sits in a struct, gets `ENOSYS` (filter 2).
    #[cfg(target_arch = "x86_64")]
    for (nr, arg) in [(libc::SYS_chmod, 1), (libc::SYS_open, 2), (libc::SYS_creat, 1), (libc::SYS_mknod, 1)] {
        rules.insert(nr, setgid(arg)?);
    }
    for (nr, arg) in [
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ] {
        rules.insert(nr, setgid(arg)?);
    }
    // TCP Fast Open connects inside `sendto`/`sendmsg`/`sendmmsg`, where landlock's TCP connect
    // rule is not asked: without this the loopback rule would not hold (sshd on 127.0.0.1:22).
    let fastopen = |arg: u8| -> Result<Vec<SeccompRule>> {
        let bit = libc::MSG_FASTOPEN as u64;
        Ok(vec![SeccompRule::new(vec![cond(arg, Cmp::MaskedEq(bit), bit)?]).map_err(sc_err)?])
    };
    for (nr, arg) in [(libc::SYS_sendto, 3), (libc::SYS_sendmsg, 2), (libc::SYS_sendmmsg, 3)] {
        rules.insert(nr, fastopen(arg)?);
    }
    let f = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), ARCH)
        .map_err(sc_err)?;
    BpfProgram::try_from(f).map_err(sc_err)
}

/// `clone3` and `openat2` → `ENOSYS`: their arguments live in structs the filter cannot read
/// (clone flags, the mode of a created file), and `ENOSYS` makes callers fall back to `clone`
/// and `openat`, which filter 1 checks.
pub fn clone3_enosys() -> Result<BpfProgram> {
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_clone3, vec![]);
    rules.insert(libc::SYS_openat2, vec![]);
    let f = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), ARCH)
        .map_err(sc_err)?;
    BpfProgram::try_from(f).map_err(sc_err)
}

/// x32 guard: `nr & 0x40000000` → `ENOSYS`; non-x86_64 arch → kill.
#[cfg(target_arch = "x86_64")]
pub fn x32_guard() -> BpfProgram {
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const BPF_JEQ_K: u16 = 0x05 | 0x10;
    const BPF_JSET_K: u16 = 0x05 | 0x40;
    const BPF_RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let i = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        i(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        i(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        i(BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        i(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        i(BPF_JSET_K, 0, 1, 0x4000_0000),
        i(BPF_RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32),
        i(BPF_RET_K, 0, 0, RET_ALLOW),
    ]
}

/// Install all filters on the calling thread (sets no_new_privs first).
pub fn apply() -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    seccompiler::apply_filter(&x32_guard()).map_err(sc_err)?;
    seccompiler::apply_filter(&clone3_enosys()?).map_err(sc_err)?;
    seccompiler::apply_filter(&denylist()?).map_err(sc_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile() {
        assert!(denylist().unwrap().len() > 50);
        assert!(!clone3_enosys().unwrap().is_empty());
    }

    #[test]
    fn memfd_and_execveat_stay_allowed() {
        let d = denied();
        assert!(!d.contains(&libc::SYS_memfd_create));
        assert!(!d.contains(&libc::SYS_execveat));
    }
}
