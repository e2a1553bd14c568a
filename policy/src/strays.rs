//! What a container may leave on a path the sandbox writes that the sandbox itself could not:
//! the judgment, apart from the walk that finds candidates and the moves that neutralise them
//! (`ocsb_sandbox::strays`).
//!
//! *Why*: the sandbox runs as the user, without the capabilities to `chown` (`EINVAL` in its
//! user namespace), `mknod` a device (`EACCES`) or set file capabilities, and its mounts are
//! `nosuid,nodev`. A container the Docker gateway starts runs under the daemon, as root unless
//! told otherwise, and writes the host paths it binds: it can leave a set-user-id-root program,
//! a world-writable device node or a program with file capabilities where another local user
//! (or the user's own host tools) runs it later, and files the user cannot change or remove.

/// The bits of `st_mode` (Linux, as `<sys/stat.h>` defines them).
pub mod mode {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFSOCK: u32 = 0o140000;
    pub const S_IFLNK: u32 = 0o120000;
    pub const S_IFREG: u32 = 0o100000;
    pub const S_IFBLK: u32 = 0o060000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFCHR: u32 = 0o020000;
    pub const S_IFIFO: u32 = 0o010000;
    pub const S_ISUID: u32 = 0o4000;
    pub const S_ISGID: u32 = 0o2000;
}

/// What the walk saw of one entry, as `fstatat(AT_SYMLINK_NOFOLLOW)` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// `st_mode`: the type and the permission bits.
    pub mode: u32,
    /// `st_uid`.
    pub uid: u32,
    /// A regular file that carries `security.capability` (file capabilities).
    pub capabilities: bool,
}

/// Why an entry is a stray, the most serious reason first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stray {
    /// A character or block device node: opening it reaches the device (the host's disk, its
    /// memory, `/dev/kvm`) with the node's permissions, whoever made it.
    Device,
    /// A regular file with the set-user-id or set-group-id bit: whoever runs it gets its
    /// owner's or group's identity.
    SetId,
    /// A regular file with file capabilities: whoever runs it gets them.
    Capabilities,
    /// Owned by another uid than the user's: the user can neither change nor (in a directory
    /// of that owner) remove it, and the owner chose its permissions.
    Foreign { uid: u32 },
}

impl Stray {
    /// Whether it hands a privilege to whoever uses it (rather than only being out of the
    /// user's control): such a stray stands as a finding until the user resolves it.
    pub fn grants(self) -> bool {
        !matches!(self, Stray::Foreign { .. })
    }

    /// Why it was moved aside, for the user.
    pub fn why(self, f: &Facts) -> String {
        match self {
            Stray::Device => format!(
                "a {} device node (mode {:o}, owner uid {}) a container made: opening it reaches the device",
                if f.mode & mode::S_IFMT == mode::S_IFBLK { "block" } else { "character" },
                f.mode & 0o7777,
                f.uid
            ),
            Stray::SetId => format!(
                "a set-{}-id program (mode {:o}, owner uid {}) a container made: whoever runs it gets that identity",
                if f.mode & mode::S_ISUID != 0 { "user" } else { "group" },
                f.mode & 0o7777,
                f.uid
            ),
            Stray::Capabilities => format!(
                "a program with file capabilities (owner uid {}) a container made: whoever runs it gets them",
                f.uid
            ),
            Stray::Foreign { uid } => {
                format!(
                    "owned by uid {uid}, not by you: a container made it (you cannot change or remove it)"
                )
            }
        }
    }
}

/// Whether `f` is a stray for the user `user`, and why. FIFOs and sockets are strays only when
/// another uid owns them: the sandbox makes them too, and they grant nothing beyond what the
/// process serving them does. A set-group-id directory is judged by its owner alone: files made
/// in it take its group, and `chmod g+s` by a caller outside that group clears the bit.
pub fn judge(f: &Facts, user: u32) -> Option<Stray> {
    let kind = f.mode & mode::S_IFMT;
    if kind == mode::S_IFCHR || kind == mode::S_IFBLK {
        return Some(Stray::Device);
    }
    if kind == mode::S_IFREG && f.mode & (mode::S_ISUID | mode::S_ISGID) != 0 {
        return Some(Stray::SetId);
    }
    if kind == mode::S_IFREG && f.capabilities {
        return Some(Stray::Capabilities);
    }
    (f.uid != user).then_some(Stray::Foreign { uid: f.uid })
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: u32 = 1990;

    #[test]
    fn the_mode_bits_are_the_kernels() {
        assert_eq!(
            [mode::S_IFMT, mode::S_IFSOCK, mode::S_IFLNK, mode::S_IFREG, mode::S_IFBLK],
            [libc::S_IFMT, libc::S_IFSOCK, libc::S_IFLNK, libc::S_IFREG, libc::S_IFBLK]
        );
        assert_eq!(
            [mode::S_IFDIR, mode::S_IFCHR, mode::S_IFIFO, mode::S_ISUID, mode::S_ISGID],
            [libc::S_IFDIR, libc::S_IFCHR, libc::S_IFIFO, libc::S_ISUID, libc::S_ISGID]
        );
    }

    fn facts(kind: u32, perm: u32, uid: u32) -> Facts {
        Facts { mode: kind | perm, uid, capabilities: false }
    }

    #[test]
    fn what_only_a_container_could_leave_is_a_stray() {
        let cases = [
            // The user's own files and directories, whatever their permissions.
            (facts(mode::S_IFREG, 0o755, USER), None),
            (facts(mode::S_IFDIR, 0o2775, USER), None),
            (facts(mode::S_IFLNK, 0o777, USER), None),
            // FIFOs and sockets of the user's: the sandbox makes them too.
            (facts(mode::S_IFIFO, 0o666, USER), None),
            (facts(mode::S_IFSOCK, 0o777, USER), None),
            // Set-id programs, whoever owns them (a set-uid file of the user's hands other
            // users the user's identity).
            (facts(mode::S_IFREG, 0o4755, 0), Some(Stray::SetId)),
            (facts(mode::S_IFREG, 0o2755, USER), Some(Stray::SetId)),
            (facts(mode::S_IFREG, 0o4000, USER), Some(Stray::SetId)),
            // Devices, whoever owns them and whatever their mode.
            (facts(mode::S_IFCHR, 0o666, 0), Some(Stray::Device)),
            (facts(mode::S_IFBLK, 0o600, USER), Some(Stray::Device)),
            // Anything of another uid.
            (facts(mode::S_IFREG, 0o644, 0), Some(Stray::Foreign { uid: 0 })),
            (facts(mode::S_IFDIR, 0o755, 0), Some(Stray::Foreign { uid: 0 })),
            (facts(mode::S_IFLNK, 0o777, 33), Some(Stray::Foreign { uid: 33 })),
            (facts(mode::S_IFIFO, 0o666, 0), Some(Stray::Foreign { uid: 0 })),
            (facts(mode::S_IFDIR, 0o2755, 0), Some(Stray::Foreign { uid: 0 })),
        ];
        for (f, want) in cases {
            assert_eq!(judge(&f, USER), want, "{:o} uid {}", f.mode, f.uid);
        }
        let capable = Facts { capabilities: true, ..facts(mode::S_IFREG, 0o755, USER) };
        assert_eq!(judge(&capable, USER), Some(Stray::Capabilities));
        // The worst reason is given: a set-uid-root file is more than a foreign one.
        assert!(Stray::SetId.grants() && Stray::Device.grants() && Stray::Capabilities.grants());
        assert!(!Stray::Foreign { uid: 0 }.grants());
    }

    #[test]
    fn the_reason_names_the_kind_mode_and_owner() {
        let f = facts(mode::S_IFREG, 0o4755, 0);
        let why = Stray::SetId.why(&f);
        assert!(why.contains("set-user-id") && why.contains("4755") && why.contains("uid 0"), "{why}");
        let d = facts(mode::S_IFCHR, 0o666, 0);
        assert!(Stray::Device.why(&d).contains("character device node (mode 666"));
        assert!(Stray::Foreign { uid: 0 }.why(&d).contains("owned by uid 0"));
    }
}
