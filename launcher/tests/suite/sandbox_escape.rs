//! The numbered escape attempts of docs/escape-tests.md, as the ordinary user `ocsb-test`, each
//! with a positive control (the same probe outside the sandbox, or against an allowed target),
//! the exact errno, and a host-side check where something could have been written.
//! The numbers in the test names are that document's rows (what each attacks, what must hold).

use crate::support::sandbox::{World, read, run_ok};

/// Every attempt runs twice: with the sandbox on the host's network (the netlock mode) and in
/// a network namespace of its own (`OCSB_NETWORK=isolated`). Where the two differ, the test says
/// what each must give.
macro_rules! battery {
    ($($name:ident),* $(,)?) => {
        mod host {
            $( #[test] fn $name() { super::$name(super::World::new()) } )*
        }
        mod isolated {
            $( #[test] fn $name() { super::$name(super::World::isolated()) } )*
        }
    };
}

battery! {
    e13_writes_outside_the_writable_set_fail_erofs,
    e14_symlink_in_project_to_home_does_not_escape,
    e15_hardlinks_out_of_the_project_fail,
    e16_e17_git_metadata_and_sandbox_config_are_read_only,
    e18_symlinked_protected_path_is_refused_before_start,
    e19_hidden_paths_and_private_keys,
    e22_mknod_and_setuid_do_nothing,
    e24_private_tmp_and_ipc,
    e6_ptrace_of_pid1_is_denied,
    e7_process_vm_writev_and_proc_mem,
    e8_proc_shows_only_the_sandbox,
    e10_proc_sys_and_sysrq_are_read_only,
    e11_no_inherited_fds,
    e12_cwd_is_inside,
    e20_e21_mount_and_namespace_syscalls_denied,
    e35_nested_namespaces_and_clone3,
    e28_keyring_is_fresh_and_keyctl_denied,
    e32_socket_families,
    e34_e36_kernel_surface_denied,
    e37_x32_syscalls_fail,
    e38_no_capabilities_nnp_seccomp,
    e40_core_dumps_stay_off,
    e4_no_controlling_terminal_from_the_host,
    e5_kill_outside_fails,
    e1_e2_e3_tiocsti_and_tioclinux_denied,
    e9_host_binaries_cannot_be_overwritten,
    e16_git_dir_cannot_be_swapped,
    e16_e19_the_way_to_protected_and_hidden_paths_cannot_be_renamed,
    e25_abstract_unix_sockets_outside_are_unreachable,
    e26_pathname_sockets_that_lead_out_are_absent,
    e30_e33_landlock_tcp_ports,
    e40_fork_bomb_is_bounded,
    e1_e4_pty_owned_by_the_launcher,
}

fn s(p: &std::path::Path) -> String {
    p.display().to_string()
}

// ---- filesystem --------------------------------------------------------------------------

fn e13_writes_outside_the_writable_set_fail_erofs(w: World) {
    let bashrc = w.home.join(".bashrc");
    assert_eq!(w.probe_outside(&["write", &s(&bashrc)]), "OK", "control: ocsb-test owns ~/.bashrc");
    std::fs::write(&bashrc, "# rc\n").unwrap();
    assert_eq!(w.probe(&["write", &s(&bashrc)]), "ERR EROFS");
    assert_eq!(w.probe(&["write", &s(&w.home.join("new-file"))]), "ERR EROFS");
    assert_eq!(w.probe(&["write", "/etc/ocsb-escape"]), "ERR EROFS");
    assert_eq!(w.probe(&["write", "/usr/ocsb-escape"]), "ERR EROFS");
    assert_eq!(read(&bashrc), "# rc\n", "host file unchanged");
    assert!(!w.home.join("new-file").exists());
    // the writable set works
    assert_eq!(w.probe(&["write", &s(&w.proj.join("ok.txt"))]), "OK");
    assert_eq!(read(&w.proj.join("ok.txt")), "escape\n");
    assert_eq!(w.probe(&["write", &s(&w.home.join(".cache/ok"))]), "OK");
    assert_eq!(w.probe(&["write", &s(&w.state.join("ok"))]), "OK");
}

fn e14_symlink_in_project_to_home_does_not_escape(w: World) {
    let bashrc = w.home.join(".bashrc");
    let link = w.proj.join("l");
    assert_eq!(w.probe(&["symlink-write", &s(&bashrc), &s(&link)]), "ERR EROFS");
    assert_eq!(read(&bashrc), "# rc\n");
}

fn e15_hardlinks_out_of_the_project_fail(w: World) {
    // control: outside, ocsb-test may hard-link its own file into the project
    assert_eq!(w.probe_outside(&["hardlink", &s(&w.home.join(".bashrc")), &s(&w.proj.join("h0"))]), "OK");
    assert_eq!(w.probe(&["hardlink", &s(&w.home.join(".bashrc")), &s(&w.proj.join("h"))]), "ERR EXDEV");
    assert_eq!(w.probe(&["hardlink", "/etc/passwd", &s(&w.proj.join("p"))]), "ERR EXDEV");
    assert!(!w.proj.join("h").exists());
}

fn e16_e17_git_metadata_and_sandbox_config_are_read_only(w: World) {
    let hooks = w.proj.join(".git/hooks/pre-commit");
    let config = w.proj.join(".git/config");
    assert_eq!(w.probe_outside(&["write", &s(&config)]), "OK", "control");
    std::fs::write(&config, "[core]\n").unwrap();
    assert_eq!(w.probe(&["write", &s(&config)]), "ERR EROFS");
    assert_eq!(w.probe(&["write", &s(&hooks)]), "ERR EROFS");
    assert_eq!(w.probe(&["write", &s(&w.proj.join(".git/hooks/post-checkout"))]), "ERR EROFS");
    // placeholders: .opencode-sandbox and .cc-safety-net did not exist, are read-only anyway
    assert_eq!(w.probe(&["write", &s(&w.proj.join(".opencode-sandbox/sandbox.conf"))]), "ERR EROFS");
    assert_eq!(w.probe(&["write", &s(&w.proj.join(".cc-safety-net/policy.json"))]), "ERR EROFS");
    // this `.git` is no repository to git (no HEAD): nothing of it is writable, a rename in it
    // neither (a real repository's `.git` is the agent's own: see the agent_git suite)
    assert_eq!(
        w.probe(&["rename", &s(&w.proj.join(".git/hooks")), &s(&w.proj.join(".git/hooks2"))]),
        "ERR EROFS"
    );
    assert_eq!(
        w.probe(&["rename", &s(&w.proj.join(".opencode-sandbox")), &s(&w.proj.join("x"))]),
        "ERR EBUSY"
    );
    assert_eq!(read(&config), "[core]\n");
    assert_eq!(read(&hooks), "#!/bin/sh\n");
    assert_eq!(w.probe(&["write", &s(&w.proj.join(".git/HEAD"))]), "ERR EROFS");
}

fn e18_symlinked_protected_path_is_refused_before_start(w: World) {
    // A link in the user's `.git` is no way out: inside, a git directory is the agent's own or
    // (as this one, no repository to git) read-only whole, so the start goes on and nothing is
    // written through the link.
    std::fs::remove_dir_all(w.proj.join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(w.home.join(".ssh"), w.proj.join(".git/hooks")).unwrap();
    let through = w.probe(&["write", &s(&w.proj.join(".git/hooks/planted"))]);
    assert!(through.starts_with("ERR"), "{through}");
    assert!(!w.home.join(".ssh/planted").exists(), "written through the link");
    // A path the checkout rule holds in the tree, made a link: the start is refused (the plan
    // would protect the place it leads to instead), naming it. (The start above made it as an
    // empty placeholder.)
    let _ = std::fs::remove_dir_all(w.proj.join(".opencode-sandbox"));
    std::os::unix::fs::symlink(w.home.join(".ssh"), w.proj.join(".opencode-sandbox")).unwrap();
    let o = w.run(&w.spec(), &["true"]);
    assert_eq!(o.status.code(), Some(125), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(".opencode-sandbox") && err.contains("symbolic link"), "{err}");
}

fn e19_hidden_paths_and_private_keys(w: World) {
    let key = w.home.join(".ssh/id_ed25519");
    assert_eq!(w.probe_outside(&["read", &s(&key)]), "OK PRIVATE KEY", "control");
    assert_eq!(w.probe(&["read", &s(&key)]), "ERR ENOENT", "~/.ssh inside holds no key");
    assert_eq!(w.probe(&["write", &s(&key)]), "ERR EROFS");
    assert_eq!(read(&key), "PRIVATE KEY\n");
    assert_eq!(w.probe(&["read", &s(&w.home.join(".ssh/id_ed25519.pub"))]), "OK ssh-ed25519 AAAA");
    assert_eq!(w.probe(&["read", &s(&w.home.join(".ssh/config"))]), "OK Host *");
    // What the host creates in ~/.ssh while the sandbox runs (a new key, a ControlMaster
    // socket) is not there inside: the sandbox's ~/.ssh is its own.
    let ssh = w.home.join(".ssh");
    let late = w.root.join("late.py");
    std::fs::write(
        &late,
        format!(
            "import socket, time\ntime.sleep(0.6)\n\
             try: print('KEY', open('{d}/id_new').read().strip())\nexcept OSError as e: print('KEY', e.strerror)\n\
             s = socket.socket(socket.AF_UNIX)\n\
             try: s.connect('{d}/cm'); print('SOCK connected')\nexcept OSError as e: print('SOCK', e.strerror)\n",
            d = ssh.display()
        ),
    )
    .unwrap();
    let o = w.netns_script(&format!(
        "eval \"$SB python3 {late}\" & sleep 0.2; echo NEWKEY > {d}/id_new; \
         python3 -c 'import socket,time,os; s=socket.socket(socket.AF_UNIX); s.bind(\"{d}/cm\"); os.chmod(\"{d}/cm\", 0o777); s.listen(); time.sleep(1.5)' & wait",
        late = late.display(),
        d = ssh.display()
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("KEY No such file or directory"), "a key made later is not inside: {out}{err}");
    assert!(out.contains("SOCK No such file or directory"), "a socket made later is not inside: {out}{err}");
    // ~/.aws is not allowed: absent from the home, not an empty directory.
    assert_eq!(w.probe(&["listdir", &s(&w.home.join(".aws"))]), "ERR ENOENT", "hidden directory is absent");
    assert_eq!(w.probe(&["write", &s(&w.home.join(".aws/x"))]), "ERR ENOENT");
    assert!(!w.home.join(".aws/x").exists());
}

fn e22_mknod_and_setuid_do_nothing(w: World) {
    // landlock does not grant MakeChar anywhere (the kernel would say EPERM after it)
    assert_eq!(w.probe(&["mknod", &s(&w.proj.join("n"))]), "ERR EACCES");
    assert!(!w.proj.join("n").exists());
}

fn e24_private_tmp_and_ipc(w: World) {
    let canary = std::path::Path::new("/tmp").join(format!("ocsb-canary-{}", std::process::id()));
    std::fs::write(&canary, "x").unwrap();
    assert_eq!(w.probe(&["exists", &s(&canary)]), "OK False");
    assert_eq!(w.probe(&["listdir", "/dev/shm"]), "OK");
    // what the sandbox writes to /tmp lands in <state>/tmp
    assert_eq!(w.probe(&["write", "/tmp/agent-file"]), "OK");
    assert_eq!(read(&w.state.join("tmp/agent-file")), "escape\n");
    let _ = std::fs::remove_file(&canary);
}

// ---- processes, terminal, kernel -----------------------------------------------------------

fn e6_ptrace_of_pid1_is_denied(w: World) {
    assert_eq!(w.probe(&["ptrace-attach", "1"]), "ERR EPERM");
}

fn e7_process_vm_writev_and_proc_mem(w: World) {
    assert_eq!(w.probe(&["process-vm-writev", "1"]), "ERR EPERM");
    assert!(w.probe(&["open-wronly", "/proc/1/mem"]).starts_with("ERR E"), "pid 1 is not dumpable");
}

fn e8_proc_shows_only_the_sandbox(w: World) {
    let pids = w.probe(&["listdir", "/proc"]);
    let n = pids.split_whitespace().filter(|p| p.chars().all(|c| c.is_ascii_digit())).count();
    assert!(n <= 3, "only pid 1, the probe (and maybe a transient): {pids}");
    assert_eq!(w.probe(&["readlink", "/proc/1/root"]), "ERR EACCES");
    assert_eq!(w.probe(&["readlink", "/proc/self/root"]), "OK /");
}

fn e10_proc_sys_and_sysrq_are_read_only(w: World) {
    // this kernel may be built without magic sysrq; then the file does not exist at all
    let sysrq = if std::path::Path::new("/proc/sysrq-trigger").exists() { "ERR EROFS" } else { "ERR ENOENT" };
    assert_eq!(w.probe(&["write", "/proc/sysrq-trigger"]), sysrq);
    // root-owned inside a user namespace where root is unmapped: refused before the ro cover
    assert_eq!(w.probe(&["write", "/proc/sys/kernel/core_pattern"]), "ERR EACCES");
}

fn e11_no_inherited_fds(w: World) {
    // fd 3 on the host /etc and fd 4 on a socket are open in the launcher
    let probe = s(&w.probe);
    let words = w.sandbox_words(&w.spec(), &["python3", &probe, "fds"]);
    let o = w.netns_script(&format!(
        "exec 3</etc; exec 4<>/dev/null; {}",
        crate::support::sandbox::shell_join(&words)
    ));
    let v = crate::support::sandbox::verdict(&o);
    assert_eq!(v, "OK 0 1 2 3", "only stdio and the probe's own listing fd");
}

fn e12_cwd_is_inside(w: World) {
    assert_eq!(w.probe(&["cwd"]), format!("OK {}", s(&w.proj)));
}

fn e20_e21_mount_and_namespace_syscalls_denied(w: World) {
    assert_eq!(w.probe(&["unshare", "0x10000000"]), "ERR EPERM", "CLONE_NEWUSER");
    assert_eq!(w.probe(&["unshare", "0x00020000"]), "ERR EPERM", "CLONE_NEWNS");
    assert_eq!(w.probe(&["mount-tmpfs", "/tmp"]), "ERR EPERM");
    assert_eq!(w.probe(&["umount", &s(&w.home.join(".aws"))]), "ERR EPERM");
    assert_eq!(w.probe(&["chroot", "/tmp"]), "ERR EPERM");
    assert_eq!(w.probe(&["fsopen"]), "ERR EPERM");
    assert_eq!(w.probe(&["open-tree", "/"]), "ERR EPERM");
    if cfg!(target_arch = "x86_64") {
        // pivot_root 155, move_mount 429, mount_setattr 442, fsconfig 431, fsmount 432, fspick 433
        for nr in ["155", "429", "442", "431", "432", "433"] {
            assert_eq!(w.probe(&["syscall", nr, "0", "0", "0", "0", "0"]), "ERR EPERM", "syscall {nr}");
        }
    }
}

fn e35_nested_namespaces_and_clone3(w: World) {
    assert_eq!(w.probe_outside(&["clone", "0x10000000"]), "OK", "control: plain user may clone a user ns");
    assert_eq!(w.probe(&["clone", "0x10000000"]), "ERR EPERM");
    assert_eq!(w.probe(&["clone", "0x50000000"]), "ERR EPERM", "NEWUSER|NEWNET");
    assert_eq!(w.probe(&["clone", "0"]), "OK", "plain fork works");
    assert_eq!(w.probe(&["clone3"]), "ERR ENOSYS");
}

fn e28_keyring_is_fresh_and_keyctl_denied(w: World) {
    assert!(w.probe_outside(&["keyring-read"]).starts_with("OK"), "control");
    assert_eq!(w.probe(&["keyring-read"]), "ERR EPERM");
}

fn e32_socket_families(w: World) {
    assert_eq!(w.probe_outside(&["socket", "16", "3"]), "OK", "control: netlink outside");
    for (fam, ty) in [("16", "3"), ("17", "3"), ("40", "1"), ("31", "1"), ("38", "5")] {
        assert_eq!(w.probe(&["socket", fam, ty]), "ERR EPERM", "family {fam}");
    }
    // high bits do not bypass the 32-bit compare
    assert_eq!(w.probe(&["socket", "0x100000010", "3"]), "ERR EPERM");
    assert_eq!(w.probe(&["socket", "1", "1"]), "OK", "AF_UNIX");
    assert_eq!(w.probe(&["socket", "2", "2"]), "OK", "AF_INET");
    // INET protocols whose traffic the netlock does not see: MPTCP (the control shows the
    // kernel has it) and SMC.
    assert_eq!(w.probe_outside(&["socket", "2", "1", "262"]), "OK", "control: MPTCP outside");
    for proto in ["262", "256"] {
        assert_eq!(w.probe(&["socket", "2", "1", proto]), "ERR EPERM", "protocol {proto}");
        assert_eq!(w.probe(&["socket", "10", "1", proto]), "ERR EPERM", "protocol {proto}, IPv6");
    }
    assert_eq!(w.probe(&["socket", "2", "1", "6"]), "OK", "IPPROTO_TCP");
}

fn e34_e36_kernel_surface_denied(w: World) {
    // x86_64 numbers: io_uring_setup 425, bpf 321, perf_event_open 298, userfaultfd 323,
    // kexec_load 246, init_module 175, open_by_handle_at 304, syslog 103, add_key 248,
    // request_key 249
    if cfg!(target_arch = "x86_64") {
        assert_eq!(w.probe_outside(&["syscall", "425", "1", "0"]), "ERR EFAULT", "control: io_uring exists");
        for nr in ["425", "321", "298", "323", "246", "175", "304", "103", "248", "249"] {
            assert_eq!(w.probe(&["syscall", nr, "0", "0", "0", "0"]), "ERR EPERM", "syscall {nr}");
        }
        // personality(ADDR_NO_RANDOMIZE) denied, query allowed
        assert_eq!(w.probe(&["syscall", "135", "0x0040000"]), "ERR EPERM");
        assert!(w.probe(&["syscall", "135", "0xffffffff"]).starts_with("OK"));
    }
}

fn e37_x32_syscalls_fail(w: World) {
    if cfg!(target_arch = "x86_64") {
        assert_eq!(w.probe(&["syscall", "0x40000065", "16", "1", "0", "0"]), "ERR ENOSYS");
    }
}

fn e38_no_capabilities_nnp_seccomp(w: World) {
    let st = w.probe(&["status", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"]);
    assert_eq!(
        st,
        "OK CapInh=0000000000000000 CapPrm=0000000000000000 CapEff=0000000000000000 \
         CapBnd=0000000000000000 CapAmb=0000000000000000 NoNewPrivs=1 Seccomp=2"
    );
}

fn e40_core_dumps_stay_off(w: World) {
    assert_eq!(w.probe(&["setrlimit-core"]), "ERR EPERM");
}

fn e4_no_controlling_terminal_from_the_host(w: World) {
    assert_eq!(w.probe(&["tty"]), "ERR ENXIO");
}

fn e5_kill_outside_fails(w: World) {
    // a canary owned by ocsb-test in the same network namespace, started outside the sandbox
    let probe = s(&w.probe);
    let o = w.netns_script(&format!(
        "setpriv --reuid 1990 --regid 1990 --clear-groups -- sleep 30 & C=$!; sleep 0.2; \
         eval \"$SB python3 {probe} kill -1 9\" || true; \
         eval \"$SB python3 {probe} kill $C 9\"; \
         if kill -0 $C; then echo CANARY-ALIVE; kill $C; fi"
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("ERR ESRCH"),
        "the outside pid does not exist in the sandbox: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("CANARY-ALIVE"), "{out}");
}

fn e1_e2_e3_tiocsti_and_tioclinux_denied(w: World) {
    // TIOCSTI = 0x5412, TIOCLINUX = 0x541C; on fd 2 (a pipe here) the kernel would say ENOTTY,
    // so EPERM proves the seccomp filter decides, before the kernel looks at the fd.
    assert_eq!(w.probe(&["ioctl", "2", "0x5412"]), "ERR EPERM");
    assert_eq!(w.probe(&["ioctl", "2", "0x5412", "0x123"]), "ERR EPERM", "high bits (CVE-2019-10063)");
    assert_eq!(w.probe(&["ioctl", "2", "0x541C"]), "ERR EPERM");
    assert_eq!(w.probe_outside(&["ioctl", "2", "0x5412"]), "ERR ENOTTY", "control: not filtered outside");
    assert_eq!(w.probe(&["exists", "/dev/tty1"]), "OK False", "no VT devices");
}

fn e9_host_binaries_cannot_be_overwritten(w: World) {
    assert_eq!(w.probe(&["open-wronly", "/proc/self/exe"]), "ERR EACCES");
    assert_eq!(w.probe(&["open-wronly", &s(&w.bin)]), "ERR EACCES", "the launcher binary");
}

fn e16_git_dir_cannot_be_swapped(w: World) {
    let git = s(&w.proj.join(".git"));
    assert_eq!(w.probe_outside(&["rename", &git, &s(&w.proj.join("g0"))]), "OK", "control");
    std::fs::rename(w.proj.join("g0"), w.proj.join(".git")).unwrap();
    assert_eq!(w.probe(&["rename", &git, &s(&w.proj.join("g2"))]), "ERR EBUSY");
    assert!(w.proj.join(".git/hooks/pre-commit").exists());
    assert!(!w.proj.join("g2").exists());
}

/// Every directory between the project and a protected or hidden path is a mount point: moving
/// one aside (and creating a new one of the same name) would leave host git, or a container of
/// the Docker gateway, reading the agent's files by the old path.
fn e16_e19_the_way_to_protected_and_hidden_paths_cannot_be_renamed(w: World) {
    let p = |r: &str| w.proj.join(r);
    run_ok(std::process::Command::new("git").args(["init", "-q"]).arg(&w.proj));
    std::fs::write(p(".git/config"), "[core]\n\thooksPath = tools/hooks\n").unwrap();
    for d in ["tools/hooks", ".git/refs/replace", "secrets/deploy", ".vscode"] {
        std::fs::create_dir_all(p(d)).unwrap();
    }
    std::fs::write(p("tools/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    std::fs::write(p("secrets/deploy/key"), "KEY\n").unwrap();
    std::fs::write(p(".vscode/token"), "TOKEN\n").unwrap();
    run_ok(std::process::Command::new("chown").arg("-R").arg("1990:1990").arg(&w.proj));
    let mut spec = w.spec();
    spec["hide"] = serde_json::json!([p("secrets/deploy/key"), p(".vscode/token")]);
    assert_eq!(w.probe_outside(&["rename", &s(&p("tools")), &s(&p("t0"))]), "OK", "control");
    std::fs::rename(p("t0"), p("tools")).unwrap();
    for (from, to) in [("tools", "t2"), ("secrets", "s2"), ("secrets/deploy", "secrets/d2")] {
        assert_eq!(w.probe_with(&spec, &["rename", &s(&p(from)), &s(&p(to))]), "ERR EBUSY", "mv {from} {to}");
        assert!(p(from).is_dir() && !p(to).exists(), "host: {from} stayed where it was");
    }
    // A hidden file inside a read-only tool directory stays hidden (the read-only bind of
    // `.vscode` came after its mask and covered it before).
    assert_eq!(w.probe_with(&spec, &["read", &s(&p(".vscode/token"))]), "OK");
    assert_eq!(w.probe_with(&spec, &["read", &s(&p("secrets/deploy/key"))]), "OK");
    assert_eq!(w.probe_with(&spec, &["write", &s(&p("tools/hooks/pre-commit"))]), "ERR EROFS");
    assert_eq!(
        w.probe_with(&spec, &["write", &s(&p(".vscode/tasks.json"))]),
        "ERR EROFS",
        ".vscode stays read-only"
    );
    assert_eq!(read(&p("tools/hooks/pre-commit")), "#!/bin/sh\n");
    // What is not protected stays writable.
    assert_eq!(w.probe_with(&spec, &["write", &s(&p("tools/build.sh"))]), "OK");
    assert_eq!(w.probe_with(&spec, &["write", &s(&p("secrets/deploy/notes"))]), "OK");
    assert_eq!(w.probe_with(&spec, &["write", &s(&p(".git/refs/heads-new"))]), "OK");
}

fn e25_abstract_unix_sockets_outside_are_unreachable(w: World) {
    let probe = s(&w.probe);
    let name = format!("ocsb-test-{}", std::process::id());
    let o = w.netns_script(&format!(
        "setpriv --reuid 1990 --regid 1990 --clear-groups -- python3 {probe} listen-abstract {name} 20 & L=$!; \
         for i in $(seq 50); do grep -q '@{name}' /proc/net/unix && break; sleep 0.1; done; \
         echo CONTROL $(setpriv --reuid 1990 --regid 1990 --clear-groups -- python3 {probe} connect-unix @{name}); \
         echo INSIDE $(eval \"$SB python3 {probe} connect-unix @{name}\"); kill $L"
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("CONTROL OK"), "{out} {}", String::from_utf8_lossy(&o.stderr));
    // On the host's network landlock's abstract-unix scope refuses; in a namespace of its own
    // the name does not exist at all (abstract names belong to the network namespace).
    let inside = if w.is_isolated() { "INSIDE ERR ECONNREFUSED" } else { "INSIDE ERR EPERM" };
    assert!(out.contains(inside), "{inside}: {out}");
}

fn e26_pathname_sockets_that_lead_out_are_absent(w: World) {
    // a listener in /run (like the system bus or docker.sock), reachable outside
    let sock = format!("/run/ocsb-test-{}.sock", std::process::id());
    let probe = s(&w.probe);
    let mut allowed = w.spec();
    allowed["docker_socket"] = serde_json::json!(sock);
    let allowed_words = crate::support::sandbox::shell_join(
        &w.sandbox_words(&allowed, &["python3", &probe, "connect-unix", &sock]),
    );
    let o = w.netns_script(&format!(
        "python3 -c 'import socket,os,time; s=socket.socket(socket.AF_UNIX); s.bind(\"{sock}\"); os.chmod(\"{sock}\",0o666); s.listen(8); time.sleep(20)' & L=$!; \
         for i in $(seq 50); do [ -S {sock} ] && break; sleep 0.1; done; \
         echo CONTROL $(setpriv --reuid 1990 --regid 1990 --clear-groups -- python3 {probe} connect-unix {sock}); \
         echo INSIDE $(eval \"$SB python3 {probe} connect-unix {sock}\"); \
         echo ALLOWED $({allowed_words}); \
         echo BUS $(eval \"$SB python3 {probe} exists /run/dbus/system_bus_socket\"); \
         echo USER $(eval \"$SB python3 {probe} exists /run/user/1990\"); \
         kill $L; rm -f {sock}"
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("CONTROL OK"), "{out} {}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("INSIDE ERR ENOENT"), "{out}");
    assert!(out.contains("ALLOWED OK"), "docker socket passed when allowed: {out}");
    assert!(out.contains("BUS OK False") && out.contains("USER OK False"), "{out}");
    let _ = std::fs::remove_file(&sock);
}

/// Landlock's TCP rule: connects only to the ports and ranges named (the filter here, and a
/// range standing for the ephemeral one), so a database on the host's loopback is refused;
/// binding is not restricted.
fn e30_e33_landlock_tcp_ports(w: World) {
    let probe = s(&w.probe);
    let mut spec = w.spec();
    spec["tcp"] = serde_json::json!({"connect": [3128], "connect_ranges": [[40000, 40010]]});
    let words = |args: &[&str]| {
        let mut v = vec!["python3", probe.as_str()];
        v.extend_from_slice(args);
        crate::support::sandbox::shell_join(&w.sandbox_words(&spec, &v))
    };
    let o = w.netns_script(&format!(
        "python3 -c 'import socket,time\nfor p in (3128, 5432, 40005):\n  s=socket.socket(); s.bind((\"127.0.0.1\",p)); s.listen(8); globals()[\"k%d\"%p]=s\ntime.sleep(20)' & L=$!; sleep 0.5; \
         echo CONTROL $(setpriv --reuid 1990 --regid 1990 --clear-groups -- python3 {probe} tcp-connect 127.0.0.1 5432); \
         echo PROXY $({}); echo DB $({}); echo RANGE $({}); echo BIND $({}); \
         echo TFO-OUT $(setpriv --reuid 1990 --regid 1990 --clear-groups -- python3 {probe} tcp-fastopen 127.0.0.1 5432); \
         echo TFO $({}); kill $L",
        words(&["tcp-connect", "127.0.0.1", "3128"]),
        words(&["tcp-connect", "127.0.0.1", "5432"]),
        words(&["tcp-connect", "127.0.0.1", "40005"]),
        words(&["tcp-bind", "8000"]),
        words(&["tcp-fastopen", "127.0.0.1", "5432"]),
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("CONTROL OK"), "{out} {}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("PROXY OK"), "{out}");
    if w.is_isolated() {
        // No landlock port rule: the namespace has nothing but what the launcher relays (the
        // filter's port), so the host's database and its ephemeral range are not there at all.
        assert!(out.contains("DB ERR ECONNREFUSED"), "{out}");
        assert!(out.contains("RANGE ERR ECONNREFUSED"), "{out}");
    } else {
        assert!(out.contains("DB ERR EACCES"), "{out}");
        assert!(out.contains("RANGE OK"), "{out}");
    }
    assert!(out.contains("BIND OK"), "{out}");
    // TCP Fast Open connects inside sendto, where landlock is not asked: seccomp refuses the flag.
    assert!(out.contains("TFO-OUT OK"), "control: Fast Open reaches the database outside: {out}");
    assert!(out.contains("TFO ERR EPERM"), "{out}");
}

fn e40_fork_bomb_is_bounded(w: World) {
    let mut spec = w.spec();
    spec["limits"]["nproc"] = serde_json::json!(32);
    let o = w.run(
        &spec,
        &["python3", "-c", "import os,sys\nn=0\ntry:\n  for i in range(200):\n    if os.fork()==0:\n      import time; time.sleep(5); os._exit(0)\n    n+=1\nexcept OSError as e:\n  print('STOPPED', n, e.errno==11); sys.exit(0)\nprint('UNBOUNDED', n)"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("STOPPED") && out.contains("True"), "{out} {}", String::from_utf8_lossy(&o.stderr));
}

fn e1_e4_pty_owned_by_the_launcher(w: World) {
    let mut spec = w.spec();
    spec["tty"] = serde_json::json!("Auto");
    let probe = s(&w.probe);
    let sti = crate::support::sandbox::shell_join(
        &w.sandbox_words(&spec, &["python3", &probe, "ioctl", "0", "0x5412"]),
    );
    let tty = crate::support::sandbox::shell_join(&w.sandbox_words(&spec, &["python3", &probe, "tty"]));
    // python's pty.spawn gives the launcher a terminal on stdin/stdout
    let o = w.netns_script(&format!(
        "python3 -c 'import pty,sys; pty.spawn([\"bash\",\"-c\",sys.argv[1]])' \
         \"echo OUTER \\$(stat -L -c %t:%T /proc/self/fd/0); {sti}; {tty}\" </dev/null"
    ));
    let out = String::from_utf8_lossy(&o.stdout).replace('\r', "");
    assert!(
        out.contains("ERR EPERM"),
        "TIOCSTI on the sandbox's terminal: {out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let outer = out.lines().find_map(|l| l.strip_prefix("OUTER ")).expect("outer tty").trim().to_string();
    let inner = out.lines().find_map(|l| l.strip_prefix("OK ")).expect("inner tty").trim().to_string();
    assert!(inner.contains(':'), "/dev/tty opens inside: {out}");
    assert_ne!(inner, outer, "the sandbox's terminal is the launcher's pty, not the host terminal");
}
