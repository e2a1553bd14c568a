//! The mount plan: a pure function from a [`SandboxSpec`] and facts about the host filesystem to
//! an ordered list of mount operations. No syscalls here, so the order rules are unit-tested.
//!
//! Order, and why:
//! 1. read-only binds of every top-level host directory onto a fresh tmpfs root (symlinks such as
//!    `/bin -> usr/bin` recreated), except `/proc`, `/dev`, `/tmp`, `/run`, which are built fresh;
//! 2. a fresh `/run` (the host's holds the session and system bus, docker.sock, systemd's private
//!    socket: landlock ABI 7 does not mediate `connect()` on them, so they must be absent), a
//!    minimal `/dev`, a fresh `/proc`;
//! 3. `/tmp`, the home (a fresh sealed tmpfs holding only what `ocsb_policy::home` allows: see
//!    `Builder::home`), the writable binds, the project's own caches, the home's allowed
//!    entries and the hidden paths, shallowest first (a mount hides what an earlier, shallower
//!    mount put beneath it); at equal depth the home's tmpfs first, then binds, then hidden
//!    paths, so `/tmp` comes before a project or state dir that lives under `/tmp`;
//! 4. the checkout rule (`ocsb_policy::guard`: git metadata, tool files, ocsb's own settings in
//!    every writable checkout), last of all, so no writable bind can re-expose what it protects;
//! 5. the sockets the policy passes (ssh-agent, docker when allowed).

use std::collections::BTreeSet;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{Error, Result};
use super::spec::{DISABLED_PROGRAMS, DOCKER_SOCKETS, SandboxSpec, TmpMode, ssh_entry_visible};
use ocsb_policy::guard::{Access as GuardAccess, Protection};

/// What `lstat` says about a host path (the checkout rule's type, so both read one fact).
pub use ocsb_policy::guard::Entry as Kind;

/// The host filesystem facts the plan needs; `RealFs` reads them, tests use a map.
pub trait HostFs {
    fn kind(&self, p: &Path) -> Kind;
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf>;
    fn read_dir(&self, p: &Path) -> io::Result<Vec<String>>;
    fn read_link(&self, p: &Path) -> io::Result<PathBuf>;
}

pub struct RealFs;

impl ocsb_policy::guard::Lookup for RealFs {
    fn entry(&self, p: &Path) -> Kind {
        self.kind(p)
    }
    fn names(&self, dir: &Path) -> Vec<String> {
        self.read_dir(dir).unwrap_or_default()
    }
}

impl HostFs for RealFs {
    fn kind(&self, p: &Path) -> Kind {
        match std::fs::symlink_metadata(p) {
            Err(_) => Kind::Missing,
            Ok(m) if m.file_type().is_symlink() => Kind::Symlink,
            Ok(m) if m.is_dir() => Kind::Dir,
            Ok(m) if m.is_file() => Kind::File,
            Ok(_) => Kind::Special,
        }
    }
    fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(p)
    }
    fn read_dir(&self, p: &Path) -> io::Result<Vec<String>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(p)? {
            v.push(e?.file_name().to_string_lossy().into_owned());
        }
        v.sort();
        Ok(v)
    }
    fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(p)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    /// Read-only, nosuid, nodev, recursively (`mount_setattr(AT_RECURSIVE)`).
    Ro,
    /// Writable, nosuid, nodev.
    Rw,
    /// A device node from the host's `/dev`: nosuid, noexec, read-write.
    Device,
}

/// One mount operation; `dst` is a path inside the sandbox (absolute).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// Bind a detached recursive clone of host `src` onto `dst`.
    Bind {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
        dir: bool,
    },
    /// A fresh tmpfs; `seal` makes it read-only once everything beneath is mounted.
    Tmpfs {
        dst: PathBuf,
        mode: u32,
        size: Option<u64>,
        seal: bool,
    },
    /// An empty read-only regular file over a hidden file (reads see nothing, writes `EROFS`).
    Mask {
        dst: PathBuf,
    },
    Symlink {
        dst: PathBuf,
        target: PathBuf,
    },
    /// A fresh procfs for the new pid namespace, with `sys`, `sysrq-trigger`, `irq`, `bus`
    /// covered read-only.
    Proc {
        dst: PathBuf,
    },
    /// A new devpts instance (`ptmxmode=0666`).
    DevPts {
        dst: PathBuf,
    },
    /// The launcher's pty slave (the command's stdin) bound on `dst` (`/dev/console`), so
    /// `ttyname()` finds the terminal as with bwrap's `--dev`; the slave itself lives in the
    /// host's devpts, which the sandbox does not see.
    Console {
        dst: PathBuf,
    },
}

impl Op {
    pub fn dst(&self) -> &Path {
        match self {
            Op::Bind { dst, .. }
            | Op::Tmpfs { dst, .. }
            | Op::Mask { dst }
            | Op::Symlink { dst, .. }
            | Op::Proc { dst }
            | Op::DevPts { dst }
            | Op::Console { dst } => dst,
        }
    }
}

/// A path the launcher creates on the host before start so that a protected path that does not
/// exist yet can still be mounted read-only (the agent must not create it either).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    pub path: PathBuf,
    pub dir: bool,
    /// The placeholder is created beneath this directory without following any link on the
    /// way (a concurrent sandbox could swap a parent for a link between plan and creation).
    #[serde(default)]
    pub anchor: PathBuf,
    /// A directory for the user alone (mode 0700), as the program that later uses it wants
    /// (git's credential cache refuses a socket directory others can read).
    #[serde(default)]
    pub private: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Plan {
    pub ops: Vec<Op>,
    /// Landlock: trees where writes are allowed (inside paths).
    pub writable: Vec<PathBuf>,
    /// Landlock: device files that may be written and ioctl'd.
    pub devices: Vec<PathBuf>,
    pub placeholders: Vec<Placeholder>,
    pub warnings: Vec<String>,
    pub cwd: PathBuf,
}

const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
const SKIP_AT_ROOT: &[&str] = &["proc", "dev", "tmp", "run", "lost+found"];
/// `/run` entries kept (read-only) because systems resolve programs through them.
const RUN_KEEP: &[&str] = &["current-system", "booted-system"];
/// Directories outside `/run` known to hold sockets that lead out (mail submission, LXD).
const SOCKET_DIRS: &[&str] =
    &["/var/spool/postfix/public", "/var/spool/postfix/private", "/var/snap/lxd/common/lxd", "/var/lib/lxd"];
/// Docker sockets under the home directory (Docker Desktop), hidden unless Docker is allowed.
const HOME_DOCKER_SOCKETS: &[&str] = &[".docker/run/docker.sock", ".docker/desktop/docker.sock"];

/// At most this many targets of links from the home to outside it are hidden
/// (`Builder::links_out_of_the_home`): a bound on a plan's size whatever the home holds.
const LINKS_OUT: usize = 64;

/// The order of phase 3's ops at equal depth: the home's tmpfs, then binds, then hidden paths.
const HOME: u8 = 0;
const BIND: u8 = 1;
const HIDDEN: u8 = 2;

fn depth(p: &Path) -> usize {
    p.components().filter(|c| matches!(c, Component::Normal(_))).count()
}

/// The program directory of `programs` that a writable `root` would let the agent change, if
/// any: `root` holds it (and can replace it), or `root` is a file in it (a program bound
/// writable). A directory inside one is not: its contents are not the programs, and a mount
/// point cannot be renamed over them. Both sides are taken as given: the caller resolves them
/// the same way.
pub fn exposes_program<'p>(root: &Path, root_is_dir: bool, programs: &'p [PathBuf]) -> Option<&'p Path> {
    programs
        .iter()
        .map(PathBuf::as_path)
        .find(|d| d.starts_with(root) || (!root_is_dir && root.parent() == Some(*d)))
}

/// Where a private cache is mounted from: the state directory resolved (it may sit behind a
/// link the user made, `/home -> var/home`), and the rest of `own` taken as it is, so that the
/// mount, which opens its source refusing every link, fails on a link in `home-caches/…`.
/// *Why not resolve all of `own`*: the state directory is writable in a running sandbox; the
/// agent can swap `home-caches` for a link to the user's real `~` or another project's caches
/// while a second sandbox of the project starts, and a resolved path would mount that target
/// writable as the "private" cache.
fn cache_source(fs: &dyn HostFs, state_dir: &Path, own: &Path) -> Result<PathBuf> {
    let rest = own.strip_prefix(state_dir).map_err(|_| {
        Error::refused(
            format!(
                "the private cache {} is not in the state directory {}",
                own.display(),
                state_dir.display()
            ),
            "private caches live in <state>/home-caches",
        )
    })?;
    Ok(fs.canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf()).join(rest))
}

fn absolute(p: &Path, what: &str) -> Result<()> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(Error::refused(
            format!("{what} {} is not an absolute path", p.display()),
            "resolve the path against the project or home directory before building the sandbox",
        ))
    }
}

struct Builder<'a> {
    fs: &'a dyn HostFs,
    plan: Plan,
    /// Ops of phase 3 with their sort key: (depth, [`HOME`] / [`BIND`] / [`HIDDEN`]).
    layered: Vec<(usize, u8, Op)>,
    hidden: BTreeSet<PathBuf>,
    private_tmp: bool,
    /// The checkout rule's read-only paths: nothing at or under one is pinned writable.
    read_only_rule: Vec<PathBuf>,
    /// [`SandboxSpec::programs`], resolved.
    programs: Vec<PathBuf>,
    /// The home as the spec names it, and resolved (`None`: it does not exist).
    spec_home: PathBuf,
    home: Option<PathBuf>,
    /// Whether the home is the fresh tmpfs of [`Builder::home`].
    home_sealed: bool,
    /// The private caches, as mounted: each is withdrawn when its mount point cannot be made
    /// ([`Builder::mount_point_ok`]).
    caches: Vec<PathBuf>,
    /// The ops of the plan, from the checkout rule's phase on, so that each is added once
    /// ([`Builder::push_once`]): a tree can hold thousands of protections.
    once: std::collections::HashSet<Op>,
}

impl Builder<'_> {
    /// Paths that are not in the tree at all: `/run` is built fresh, and so is a private `/tmp`.
    fn not_in_tree(&self, p: &Path) -> bool {
        p.starts_with("/run") || (self.private_tmp && p.starts_with("/tmp"))
    }

    fn canonical(&self, p: &Path) -> Result<PathBuf> {
        self.fs.canonicalize(p).map_err(|e| Error::io("resolve", p, e))
    }

    /// Refuse a writable bind of `c` (resolved, as it is mounted) that exposes one of ocsb's
    /// program directories. *Why here too*: the launcher checks the settings' paths when it
    /// opens the state, but a concurrent sandbox can turn a path's component into a link before
    /// this plan resolves it; this check sees the very path the bind opens without following
    /// links.
    fn refuse_program_dir(&self, c: &Path, what: &str) -> Result<()> {
        match exposes_program(c, self.fs.kind(c) == Kind::Dir, &self.programs) {
            None => Ok(()),
            Some(dir) => Err(Error::refused(
                format!(
                    "{what} {} would make ocsb's own programs ({}) writable for the agent; they run on the host",
                    c.display(),
                    dir.display()
                ),
                "give a narrower path, or install ocsb where the sandbox cannot write (`sudo make install`)",
            )),
        }
    }

    fn writable(&mut self, p: &Path, what: &str) -> Result<()> {
        absolute(p, what)?;
        match self.fs.kind(p) {
            Kind::Missing => {
                self.plan.warnings.push(format!("{what} {} does not exist; not mounted", p.display()));
                Ok(())
            }
            _ => {
                let c = self.canonical(p)?;
                self.refuse_program_dir(&c, what)?;
                let dir = self.fs.kind(&c) == Kind::Dir;
                self.plan.writable.push(c.clone());
                self.layered.push((
                    depth(&c),
                    BIND,
                    Op::Bind { src: c.clone(), dst: c, access: Access::Rw, dir },
                ));
                Ok(())
            }
        }
    }

    fn hide(&mut self, p: &Path, what: &str) -> Result<()> {
        absolute(p, what)?;
        match self.fs.kind(p) {
            Kind::Missing => Ok(()),
            Kind::Symlink => {
                // The link itself cannot be mounted over; hide what it points to, so the link
                // dangles into an empty directory or file.
                match self.fs.canonicalize(p) {
                    Ok(c) if c != p => self.hide(&c, what),
                    _ => Ok(()),
                }
            }
            kind => {
                let c = self.canonical(p)?;
                // In the sealed home only what a bind shows needs hiding; the rest is absent.
                let mut at: Vec<PathBuf> = Vec::new();
                if !self.not_in_tree(&c) && self.exposed(&c) {
                    at.push(c.clone());
                }
                at.extend(self.shown_elsewhere(&c));
                for dst in at {
                    if !self.hidden.insert(dst.clone()) {
                        continue;
                    }
                    let op = if kind == Kind::Dir {
                        Op::Tmpfs { dst: dst.clone(), mode: 0o755, size: Some(4096), seal: true }
                    } else {
                        Op::Mask { dst: dst.clone() }
                    };
                    self.layered.push((depth(&dst), HIDDEN, op));
                }
                Ok(())
            }
        }
    }

    /// Where the home shows the host's `c` (resolved) under another name: beneath a read-only
    /// entry of the home that is a link (`~/.config -> dotfiles/config`, or `-> /data/config`),
    /// bound from its target under its own name. *Why*: a hidden name is masked where the
    /// sandbox sees it; the sandbox sees `~/.config/gh`, not `~/dotfiles/config/gh`. Only where
    /// that bind is what shows the path (no deeper mount covers it).
    fn shown_elsewhere(&self, c: &Path) -> Vec<PathBuf> {
        let Some(h) = self.home.as_ref().filter(|_| self.home_sealed) else { return Vec::new() };
        self.layered
            .iter()
            .filter_map(|(_, _, op)| match op {
                Op::Bind { src, dst, access: Access::Ro, .. } if src != dst && dst.starts_with(h) => {
                    c.strip_prefix(src).ok().map(|rest| (op, dst.join(rest)))
                }
                _ => None,
            })
            .filter(|(op, at)| self.holder_op(at, false) == Some(*op))
            .map(|(_, at)| at)
            .collect()
    }

    /// Binds onto itself every directory between the writable root holding `p` and `p`.
    /// *Why*: a mount point cannot be renamed. A hidden file's mask moves with its directory,
    /// so in the sandbox it stays hidden, but the Docker gateway covers it in a container by
    /// its path: `mv secrets s` would leave the real file at `s/key` uncovered there.
    /// Only under a root bound from the same host path (never a private cache or `/tmp`, whose
    /// sources are copies), and never at or under a hidden or read-only path: a pin there would
    /// uncover it (the pin is a fresh bind of the host directory).
    fn pin_way_to(&mut self, p: &Path) {
        let root = self
            .layered
            .iter()
            .filter_map(|(_, _, op)| match op {
                Op::Bind { src, dst, access: Access::Rw, dir: true }
                    if p.starts_with(dst) && p != dst.as_path() =>
                {
                    Some((src, dst))
                }
                _ => None,
            })
            .max_by_key(|(_, dst)| depth(dst));
        let Some((src, root)) = root else { return };
        if src != root {
            return;
        }
        let root = root.clone();
        let covered = |b: &Self, d: &Path| b.hidden.iter().chain(&b.read_only_rule).any(|h| d.starts_with(h));
        let mut cur = root.clone();
        let parts: Vec<PathBuf> = p
            .strip_prefix(&root)
            .map(|r| r.components().map(|c| PathBuf::from(c.as_os_str())).collect())
            .unwrap_or_default();
        for part in parts.iter().take(parts.len().saturating_sub(1)) {
            cur.push(part);
            if self.fs.kind(&cur) != Kind::Dir || covered(self, &cur) {
                return;
            }
            let pin = Op::Bind { src: cur.clone(), dst: cur.clone(), access: Access::Rw, dir: true };
            if !self.layered.iter().any(|(_, _, op)| *op == pin) {
                self.layered.push((depth(&cur), BIND, pin));
            }
        }
    }

    /// The project's own copy `own` of the cache `dir`, mounted from `src`: `own` with only the
    /// state directory's part resolved ([`cache_source`]). In the home it is mounted at the
    /// cache's own name whether or not the host has that directory (a fresh home has no
    /// `~/.npm`, and the tool inside still needs somewhere to write): the mount point is made
    /// in the home's tmpfs, never on the host.
    fn private_cache(&mut self, dir: &Path, own: &Path, src: PathBuf) -> Result<()> {
        absolute(dir, "cache directory")?;
        let in_home = self.in_home(dir);
        if in_home.is_none() && self.fs.kind(dir) == Kind::Missing {
            return Ok(());
        }
        if self.fs.kind(own) != Kind::Dir {
            if self.fs.kind(dir) != Kind::Missing {
                self.plan.warnings.push(format!(
                    "the private copy {} of {} is not a directory; not mounted",
                    own.display(),
                    dir.display()
                ));
            }
            return Ok(());
        }
        let dst = match in_home {
            Some(dst) => dst,
            None => {
                let dst = self.canonical(dir)?;
                if self.fs.kind(&dst) != Kind::Dir {
                    self.plan.warnings.push(format!("{} is not a directory; not mounted", dir.display()));
                    return Ok(());
                }
                dst
            }
        };
        self.plan.writable.push(dst.clone());
        self.caches.push(dst.clone());
        self.layered.push((depth(&dst), BIND, Op::Bind { src, dst, access: Access::Rw, dir: true }));
        Ok(())
    }

    /// Where `p`, named under the home, is inside the sandbox: the resolved home joined with
    /// its name in the home (`None`: not in the home, or the home itself).
    fn in_home(&self, p: &Path) -> Option<PathBuf> {
        let home = self.home.as_ref()?;
        let rel = p.strip_prefix(&self.spec_home).ok().or_else(|| p.strip_prefix(home).ok())?;
        (!rel.as_os_str().is_empty()).then(|| home.join(rel))
    }

    /// The deepest op of phase 3 at or above `p` (strictly above with `strict`), the one `p`
    /// is seen through once everything is mounted.
    fn holder_op(&self, p: &Path, strict: bool) -> Option<&Op> {
        self.layered
            .iter()
            .filter(|(_, _, op)| p.starts_with(op.dst()) && !(strict && p == op.dst()))
            .max_by_key(|(d, class, _)| (*d, *class))
            .map(|(_, _, op)| op)
    }

    /// Whether the host's `p` (resolved) is visible inside: outside the sealed home, or
    /// through a bind in it.
    fn exposed(&self, p: &Path) -> bool {
        match &self.home {
            Some(h) if self.home_sealed && p.starts_with(h) => {
                matches!(self.holder_op(p, false), Some(Op::Bind { .. }))
            }
            _ => true,
        }
    }

    /// Whether the mount point `dst` can be made: in a tmpfs (before it is sealed), in a
    /// writable bind, or where it exists already.
    fn mount_point_ok(&self, dst: &Path) -> bool {
        match self.holder_op(dst, true) {
            Some(Op::Tmpfs { .. }) => true,
            Some(Op::Bind { src, dst: at, access, dir: true }) => {
                *access == Access::Rw
                    || dst.strip_prefix(at).is_ok_and(|r| self.fs.kind(&src.join(r)) != Kind::Missing)
            }
            Some(_) => false,
            None => self.fs.kind(dst) != Kind::Missing,
        }
    }

    /// Withdraw the mount of a cache whose mount point cannot be made: making it would write
    /// into a read-only bind (the start would fail).
    fn drop_cache(&mut self, dst: &Path) {
        self.layered.retain(|(_, _, op)| !matches!(op, Op::Bind { dst: d, .. } if d == dst));
        self.plan.writable.retain(|w| w != dst);
        self.plan
            .warnings
            .push(format!("{} does not exist and cannot be made inside; not mounted", dst.display()));
    }

    /// The home: a fresh tmpfs, sealed read-only once everything beneath is mounted, holding
    /// only the allowed entries (`spec.home_ro`, read-only), `~/.ssh`'s public half, and mount
    /// points for the writable roots and caches that lie in the home.
    ///
    /// *Why*: whatever else is in the home (credentials, tokens, histories under any name, a
    /// file the host writes while the sandbox runs) is absent, not hidden one by one: nothing
    /// can be missing from a list of what to hide. And a mask that the host's rename detaches
    /// has nothing to detach from here: the entries are mount points of this namespace alone.
    fn home(&mut self, spec: &SandboxSpec, hidden: &mut Vec<(PathBuf, &'static str)>) -> Result<()> {
        let Some(h) = self.home.clone() else { return self.drop_unmountable_caches() };
        if h == Path::new("/") {
            return Err(Error::refused(
                format!("the home directory {} is the root directory", spec.home.display()),
                "set HOME to a directory of your own: ocsb shows the sandbox only what it allows of it",
            ));
        }
        if self.fs.kind(&h) != Kind::Dir || self.not_in_tree(&h) {
            return self.drop_unmountable_caches();
        }
        let caches = self.caches.clone();
        if let Some(w) = self.plan.writable.iter().find(|w| !caches.contains(w) && h.starts_with(w)) {
            self.plan.warnings.push(format!(
                "the home directory {} is in the writable path {}: all of it is visible to the agent",
                h.display(),
                w.display()
            ));
            return self.drop_unmountable_caches();
        }
        self.home_sealed = true;
        self.layered.push((
            depth(&h),
            HOME,
            Op::Tmpfs { dst: h.clone(), mode: 0o755, size: None, seal: true },
        ));
        // Hidden names in their forms inside the home: hide wins over an allowed entry.
        // A set, asked for each ancestor of a path: a home entry is compared with every hidden
        // form, and there are hundreds of each.
        let hidden_forms: std::collections::HashSet<PathBuf> = hidden
            .iter()
            .flat_map(|(p, _)| [Some(p.clone()), self.in_home(p), self.fs.canonicalize(p).ok()])
            .flatten()
            .collect();
        let is_hidden = |p: &Path| p.ancestors().any(|a| hidden_forms.contains(a));
        let writable: Vec<PathBuf> = self.plan.writable.clone();
        for p in &spec.home_ro {
            absolute(p, "home entry")?;
            let Some(dst) = self.in_home(p) else { continue };
            if is_hidden(p) || is_hidden(&dst) || writable.iter().any(|w| dst.starts_with(w)) {
                continue;
            }
            if !matches!(self.fs.kind(p), Kind::Dir | Kind::File | Kind::Symlink) {
                continue;
            }
            // A link (a dotfile managed elsewhere) shows what it points to, under its own name.
            let Ok(src) = self.fs.canonicalize(p) else { continue };
            let dir = match self.fs.kind(&src) {
                Kind::Dir => true,
                Kind::File => false,
                _ => continue,
            };
            if is_hidden(&src) {
                continue;
            }
            self.layered.push((depth(&dst), BIND, Op::Bind { src, dst, access: Access::Ro, dir }));
        }
        // `~/.ssh`: only what ssh needs to connect through the filter (config, known_hosts,
        // public keys), never a private key or a ControlMaster socket made there later.
        let ssh = spec.home.join(".ssh");
        if let Ok(dir) = self.fs.canonicalize(&ssh)
            && self.fs.kind(&dir) == Kind::Dir
        {
            for name in self.fs.read_dir(&dir).map_err(|e| Error::io("list", &dir, e))? {
                let src = dir.join(&name);
                let dst = h.join(".ssh").join(&name);
                if ssh_entry_visible(&name) && self.fs.kind(&src) == Kind::File && !is_hidden(&dst) {
                    self.layered.push((
                        depth(&dst),
                        BIND,
                        Op::Bind { src, dst, access: Access::Ro, dir: false },
                    ));
                }
            }
            // Reached through a link to outside the home: hidden where the root's binds show it.
            if !dir.starts_with(&h) {
                hidden.push((dir, "~/.ssh"));
            }
        }
        self.links_out_of_the_home(spec, &h, hidden)?;
        self.cache_sockets(&h)?;
        self.drop_unmountable_caches()
    }

    /// The top-level entries of the home that are links to outside it and are not allowed
    /// (`~/.config -> /data/u/config`, `~/.docker -> /mnt/x`): their targets are hidden where
    /// the root's read-only binds show them, as `~/.ssh`'s is. *Why*: the fresh home leaves
    /// the link's name out, but its target is an ordinary directory of the root, readable
    /// under its own path. The allowed parts beneath such a link (`OCSB_HOME=(.config/nvim)`)
    /// stay visible, under their name in the home and at their resolved path too (a link
    /// inside them may name it).
    ///
    /// What stays: links deeper in the home (`~/.local/share/x -> /data/x`) are not looked
    /// for (that would mean walking the whole home at each start), and a target that holds or
    /// lies in a writable root, the home or ocsb's programs is left as it is (hiding it would
    /// take the project or the sandbox's own programs away). At most [`LINKS_OUT`] targets
    /// are hidden; beyond that the plan says which are not.
    fn links_out_of_the_home(
        &mut self,
        spec: &SandboxSpec,
        h: &Path,
        hidden: &mut Vec<(PathBuf, &'static str)>,
    ) -> Result<()> {
        let mut count = 0usize;
        for name in self.fs.read_dir(h).map_err(|e| Error::io("list", h, e))? {
            let link = h.join(&name);
            if self.fs.kind(&link) != Kind::Symlink {
                continue;
            }
            let Ok(target) = self.fs.canonicalize(&link) else { continue };
            if target.starts_with(h) || h.starts_with(&target) || self.not_in_tree(&target) {
                continue;
            }
            let names = [link.clone(), spec.home.join(&name)];
            if spec.home_ro.iter().any(|p| names.iter().any(|n| n.starts_with(p))) {
                continue;
            }
            let kept = |d: &PathBuf| d.starts_with(&target) || target.starts_with(d);
            if self.plan.writable.iter().any(kept) || self.programs.iter().any(|d| d.starts_with(&target)) {
                continue;
            }
            count += 1;
            if count > LINKS_OUT {
                self.plan.warnings.push(format!(
                    "{} links to outside the home: the target of ~/{name} ({}) and later ones stay readable",
                    LINKS_OUT + 1,
                    target.display()
                ));
                break;
            }
            let again: Vec<Op> = self
                .layered
                .iter()
                .filter_map(|(_, _, op)| match op {
                    Op::Bind { src, dst, access: Access::Ro, dir }
                        if dst.starts_with(&link) && src.starts_with(&target) =>
                    {
                        Some(Op::Bind { src: src.clone(), dst: src.clone(), access: Access::Ro, dir: *dir })
                    }
                    _ => None,
                })
                .collect();
            for op in again {
                self.layered.push((depth(op.dst()), BIND, op));
            }
            hidden.push((target, "a link in the home to outside it"));
        }
        Ok(())
    }

    /// [`ocsb_policy::home::CACHE_SOCKETS`] where a bind shows the directory that holds them:
    /// an empty sealed tmpfs over the socket's directory, made on the host first when missing
    /// (the daemon makes the socket there whenever it starts, also after the sandbox did), and
    /// the way to it pinned (`pin_way_to`: `mv ~/.cache/git g` would carry the cover away).
    /// A link or a file on the way is refused: the cover would not be where the daemon puts
    /// its socket (`~/.cache/git -> elsewhere` makes it in `~/.cache/elsewhere/credential`).
    fn cache_sockets(&mut self, h: &Path) -> Result<()> {
        for (rel, _) in ocsb_policy::home::CACHE_SOCKETS {
            let dst = h.join(rel);
            let Some(Op::Bind { src, dst: at, dir: true, .. }) = self.holder_op(&dst, false).cloned() else {
                continue;
            };
            let Ok(rest) = dst.strip_prefix(&at).map(Path::to_path_buf) else { continue };
            let mut cur = src.clone();
            for part in rest.components() {
                cur.push(part);
                match self.fs.kind(&cur) {
                    Kind::Dir => {}
                    Kind::Missing => self.plan.placeholders.push(Placeholder {
                        path: cur.clone(),
                        dir: true,
                        anchor: src.clone(),
                        private: true,
                    }),
                    _ => {
                        return Err(Error::refused(
                            format!(
                                "{} is a link or a file, where git's credential cache keeps its socket \
                                 directory ({rel}): the sandbox could not cover the socket",
                                cur.display()
                            ),
                            format!(
                                "replace it with a directory of your own (mkdir -m 700 -p ~/{rel}), or use OCSB_CACHES=private"
                            ),
                        ));
                    }
                }
            }
            self.hidden.insert(dst.clone());
            self.layered.push((
                depth(&dst),
                HIDDEN,
                Op::Tmpfs { dst, mode: 0o700, size: Some(4096), seal: true },
            ));
        }
        Ok(())
    }

    fn drop_unmountable_caches(&mut self) -> Result<()> {
        for c in std::mem::take(&mut self.caches) {
            if !self.mount_point_ok(&c) {
                self.drop_cache(&c);
            }
        }
        Ok(())
    }

    /// Adds `op` unless the plan has it already (from the checkout rule's phase on).
    fn push_once(&mut self, op: Op) {
        if self.once.insert(op.clone()) {
            self.plan.ops.push(op);
        }
    }

    fn under_hidden(&self, p: &Path) -> bool {
        self.hidden.iter().any(|h| p.starts_with(h))
    }

    fn base(&mut self) -> Result<()> {
        let root = Path::new("/");
        let names = self.fs.read_dir(root).map_err(|e| Error::io("list", root, e))?;
        for name in names {
            if SKIP_AT_ROOT.contains(&name.as_str()) {
                continue;
            }
            let p = root.join(&name);
            match self.fs.kind(&p) {
                Kind::Dir => {
                    self.plan.ops.push(Op::Bind { src: p.clone(), dst: p, access: Access::Ro, dir: true })
                }
                Kind::File => {
                    self.plan.ops.push(Op::Bind { src: p.clone(), dst: p, access: Access::Ro, dir: false })
                }
                Kind::Symlink => {
                    let target = self.fs.read_link(&p).map_err(|e| Error::io("read link", &p, e))?;
                    self.plan.ops.push(Op::Symlink { dst: p, target });
                }
                Kind::Special | Kind::Missing => {}
            }
        }
        Ok(())
    }

    fn run_dir(&mut self) -> Result<()> {
        self.plan.ops.push(Op::Tmpfs { dst: "/run".into(), mode: 0o755, size: Some(1 << 20), seal: true });
        for name in RUN_KEEP {
            let p = Path::new("/run").join(name);
            match self.fs.kind(&p) {
                Kind::Dir => {
                    self.plan.ops.push(Op::Bind { src: p.clone(), dst: p, access: Access::Ro, dir: true })
                }
                Kind::Symlink => {
                    let target = self.fs.read_link(&p).map_err(|e| Error::io("read link", &p, e))?;
                    self.plan.ops.push(Op::Symlink { dst: p, target });
                }
                _ => {}
            }
        }
        // /etc/resolv.conf is often a symlink into /run (systemd-resolved, NetworkManager).
        if let Ok(c) = self.fs.canonicalize(Path::new("/etc/resolv.conf"))
            && c.starts_with("/run")
            && self.fs.kind(&c) == Kind::File
        {
            self.plan.ops.push(Op::Bind { src: c.clone(), dst: c, access: Access::Ro, dir: false });
        }
        // An old-style /var/run directory (not a link to /run) holds the same sockets.
        if self.fs.kind(Path::new("/var/run")) == Kind::Dir {
            self.hide(Path::new("/var/run"), "/var/run")?;
        }
        Ok(())
    }

    fn dev(&mut self, shm_bytes: u64) {
        let dev = Path::new("/dev");
        self.plan.ops.push(Op::Tmpfs { dst: dev.into(), mode: 0o755, size: Some(1 << 20), seal: true });
        for n in DEV_NODES {
            let p = dev.join(n);
            self.plan.ops.push(Op::Bind {
                src: p.clone(),
                dst: p.clone(),
                access: Access::Device,
                dir: false,
            });
            self.plan.devices.push(p);
        }
        self.plan.ops.push(Op::DevPts { dst: dev.join("pts") });
        self.plan.devices.push(dev.join("pts"));
        self.plan.ops.push(Op::Symlink { dst: dev.join("ptmx"), target: "pts/ptmx".into() });
        self.plan.ops.push(Op::Tmpfs {
            dst: dev.join("shm"),
            mode: 0o1777,
            size: Some(shm_bytes),
            seal: false,
        });
        self.plan.writable.push(dev.join("shm"));
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            self.plan.ops.push(Op::Symlink { dst: dev.join(name), target: target.into() });
        }
        self.plan.ops.push(Op::Proc { dst: "/proc".into() });
    }

    /// One protection of the checkout rule (`ocsb_policy::guard`). Symbolic links between its
    /// anchor and the path are refused: binding through one would protect (or expose) some
    /// other place. A missing path becomes a placeholder, parents included, when the rule
    /// allows one; otherwise there is nothing to mount.
    fn guard(&mut self, g: &Protection) -> Result<()> {
        let Ok(rel) = g.path.strip_prefix(&g.anchor) else {
            return Err(Error::refused(
                format!("protected path {} is not under {}", g.path.display(), g.anchor.display()),
                "report this: the checkout rule produced an inconsistent entry",
            ));
        };
        if self.under_hidden(&g.path) {
            return Ok(());
        }
        let mut cur = g.anchor.clone();
        let mut kind = self.fs.kind(&cur);
        let mut missing = false;
        // Directories created on the way: pinned like existing ones (the rule pins only those
        // that exist), so `mv tools t` fails when `tools/hooks` was made for `core.hooksPath`.
        let mut made: Vec<PathBuf> = Vec::new();
        for (i, part) in std::iter::once(None).chain(rel.components().map(Some)).enumerate() {
            if let Some(part) = part {
                cur.push(part);
                kind = if missing { Kind::Missing } else { self.fs.kind(&cur) };
            }
            let last = cur == g.path;
            match kind {
                Kind::Symlink => {
                    return Err(Error::refused(
                        format!(
                            "{} is a symbolic link; it must be a real {} so it can be protected in place ({})",
                            cur.display(),
                            if last && !g.dir { "file" } else { "directory" },
                            g.why
                        ),
                        format!(
                            "replace the link with the real directory or file (inspect it first: `ls -l {}`)",
                            cur.display()
                        ),
                    ));
                }
                Kind::Missing if i == 0 || !g.placeholder => return Ok(()),
                Kind::Missing => {
                    missing = true;
                    if !last {
                        made.push(cur.clone());
                    }
                    let dir = !last || g.dir;
                    self.plan.placeholders.push(Placeholder {
                        path: cur.clone(),
                        dir,
                        anchor: g.anchor.clone(),
                        private: false,
                    });
                }
                Kind::File | Kind::Special if !last => {
                    // The way to a missing protected path goes through a file: held read-only
                    // in place, or the agent could replace it with a directory and make the
                    // path (an `include.path` of `notes/extra` where `notes` is a file).
                    if g.placeholder && g.access == GuardAccess::ReadOnly {
                        self.push_once(Op::Bind {
                            src: cur.clone(),
                            dst: cur.clone(),
                            access: Access::Ro,
                            dir: false,
                        });
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
        let dir = if missing { g.dir } else { kind == Kind::Dir };
        let access = match g.access {
            GuardAccess::ReadOnly => Access::Ro,
            GuardAccess::Writable => {
                self.plan.writable.push(g.path.clone());
                Access::Rw
            }
        };
        for d in made {
            let pin = Op::Bind { src: d.clone(), dst: d.clone(), access: Access::Rw, dir: true };
            let covered = self.hidden.iter().chain(&self.read_only_rule).any(|h| d.starts_with(h));
            if !covered {
                self.push_once(pin);
            }
        }
        self.push_once(Op::Bind { src: g.path.clone(), dst: g.path.clone(), access, dir });
        Ok(())
    }

    /// One checkout's agent git directory ([`crate::spec::AgentGit`]). *Why over the user's
    /// `.git` rather than beside it*: the agent's git then finds it as git finds any
    /// repository, and a mount point cannot be renamed or removed, so the agent cannot put a
    /// `.git` of its own choosing where the user's git later looks.
    fn agent_git(&mut self, a: &crate::spec::AgentGit) -> Result<()> {
        absolute(&a.dot_git, "checkout .git")?;
        absolute(&a.gitdir, "agent git directory")?;
        let inside = Path::new(super::spec::AGENT_GIT_INSIDE);
        if !a.inside.starts_with(inside) || a.objects.iter().any(|(_, i)| !i.starts_with(inside)) {
            return Err(Error::refused(
                format!(
                    "agent git directory {} is not placed under {}",
                    a.inside.display(),
                    inside.display()
                ),
                "report this: the launcher made an inconsistent entry",
            ));
        }
        for (src, dst) in &a.objects {
            self.push_once(Op::Bind { src: src.clone(), dst: dst.clone(), access: Access::Ro, dir: true });
        }
        self.plan.ops.push(Op::Bind {
            src: a.gitdir.clone(),
            dst: a.inside.clone(),
            access: Access::Rw,
            dir: true,
        });
        self.plan.writable.push(a.inside.clone());
        match (&a.pointer, self.fs.kind(&a.dot_git)) {
            (None, Kind::Dir) => {
                self.plan.ops.push(Op::Bind {
                    src: a.gitdir.clone(),
                    dst: a.dot_git.clone(),
                    access: Access::Rw,
                    dir: true,
                });
            }
            (Some(pointer), Kind::File) => {
                self.plan.ops.push(Op::Bind {
                    src: pointer.clone(),
                    dst: a.dot_git.clone(),
                    access: Access::Ro,
                    dir: false,
                });
            }
            (_, kind) => {
                return Err(Error::refused(
                    format!(
                        "{} changed while the sandbox was being made (now {kind:?}); it must be the checkout's real .git",
                        a.dot_git.display()
                    ),
                    "start again; if it is a symbolic link, replace it with the directory it names",
                ));
            }
        }
        Ok(())
    }

    fn expose_socket(&mut self, p: &Path, what: &str) -> Result<()> {
        absolute(p, what)?;
        if self.fs.kind(p) == Kind::Missing {
            self.plan.warnings.push(format!("{what} {} does not exist; not passed in", p.display()));
            return Ok(());
        }
        let c = self.canonical(p)?;
        self.plan.ops.push(Op::Bind { src: c.clone(), dst: c, access: Access::Ro, dir: false });
        Ok(())
    }
}

impl Plan {
    /// Add the console bind for a command that gets the launcher's pty.
    pub fn add_console(&mut self) {
        let dst = PathBuf::from("/dev/console");
        self.ops.push(Op::Console { dst: dst.clone() });
        self.devices.push(dst);
    }
}

/// Build the plan. Fails (without side effects) on relative paths, unreadable paths and
/// symlinked protected paths.
pub fn build(spec: &SandboxSpec, fs: &dyn HostFs) -> Result<Plan> {
    build_remembered(spec, &super::remembered::Remembered::new(fs))
}

/// [`build`] with answers `fs` remembered from another build of the same moment (nothing on
/// the host changed in between: the launcher's builds before it makes any placeholder).
pub fn build_remembered(spec: &SandboxSpec, fs: &super::remembered::Remembered<'_>) -> Result<Plan> {
    build_until(spec, fs, Until::All)
}

/// The host paths a sandbox of `spec` may write, its protections aside (what the checkout
/// rule is made from): the phases of [`build`] that alone decide them, and no further. *Why*:
/// the rest of a build (the home, the hidden names) is most of its cost, and a
/// start needs these paths before it can make its plan.
pub fn writable_of(spec: &SandboxSpec, fs: &super::remembered::Remembered<'_>) -> Result<Vec<PathBuf>> {
    let mut spec = spec.clone();
    spec.protect.clear();
    Ok(build_until(&spec, fs, Until::Writable)?.writable)
}

/// A [`HostFs`] as the policy's lookups read it.
struct Listing<'a>(&'a dyn HostFs);

impl ocsb_policy::guard::Lookup for Listing<'_> {
    fn entry(&self, p: &Path) -> Kind {
        self.0.kind(p)
    }
    fn names(&self, dir: &Path) -> Vec<String> {
        self.0.read_dir(dir).unwrap_or_default()
    }
}

/// How far [`build_until`] goes.
#[derive(PartialEq)]
enum Until {
    /// The writable binds made; for a spec without protections nothing after adds to them.
    Writable,
    /// Every mount before the checkout rule ([`build_prefix`]).
    Prefix,
    All,
}

/// The mounts a plan of `spec` begins with: everything before the checkout rule (the base,
/// `/run`, `/dev`, `/tmp`, the writable and hidden paths, the home), which needs neither the
/// look at the checkouts nor the session's git or sockets. *Why*: an isolated sandbox's pid 1
/// mounts them while the launcher is still checking (`stage2`). A whole plan built later may
/// begin otherwise (the host changed meanwhile, or the checkout rule stops a pin on its way),
/// so what uses this compares it with the plan's own beginning and uses it only when the two
/// are the same. `None` when mounting them would make anything on the host: a placeholder
/// the launcher makes first (a missing directory of git's credential cache under a shared
/// cache), or any mount point missing beneath a bind of a host directory (`makes_on_host`).
/// *Why*: pid 1 makes a missing mount point where it mounts, and ahead of the request that is
/// before the start is known to go ahead (and before the launcher made a placeholder private).
pub fn build_prefix(spec: &SandboxSpec) -> Result<Option<Vec<Op>>> {
    prefix_on(spec, &RealFs)
}

fn prefix_on(spec: &SandboxSpec, fs: &dyn HostFs) -> Result<Option<Vec<Op>>> {
    let seen = super::remembered::Remembered::new(fs);
    let plan = build_until(spec, &seen, Until::Prefix)?;
    Ok((plan.placeholders.is_empty() && !makes_on_host(&plan.ops, &seen)).then_some(plan.ops))
}

/// Whether mounting `ops` in order makes a mount point on the host: an op whose destination
/// the host lacks beneath a bind of a host directory mounted before it (the deepest one that
/// holds it, the latest of those at that depth). Mount points beneath ocsb's own tmpfs mounts
/// are made in those.
fn makes_on_host(ops: &[Op], fs: &dyn HostFs) -> bool {
    ops.iter().enumerate().any(|(i, op)| {
        let dst = op.dst();
        let holder = ops[..i]
            .iter()
            .filter(|o| dst.starts_with(o.dst()) && dst != o.dst())
            .max_by_key(|o| depth(o.dst()));
        match holder {
            Some(Op::Bind { src, dst: at, .. }) => {
                dst.strip_prefix(at).is_ok_and(|rest| fs.kind(&src.join(rest)) == Kind::Missing)
            }
            _ => false,
        }
    })
}

fn build_until(spec: &SandboxSpec, fs: &super::remembered::Remembered<'_>, until: Until) -> Result<Plan> {
    let fs: &dyn HostFs = fs;
    absolute(&spec.project_dir, "project directory")?;
    absolute(&spec.state_dir, "state directory")?;
    absolute(&spec.home, "home directory")?;
    if fs.kind(&spec.project_dir) != Kind::Dir && fs.kind(&spec.project_dir) != Kind::Symlink {
        return Err(Error::refused(
            format!("project directory {} does not exist", spec.project_dir.display()),
            "run the command from inside the project, or pass -C DIR",
        ));
    }
    let private_tmp = spec.tmp == TmpMode::Private;
    let mut b = Builder {
        fs,
        plan: Plan::default(),
        layered: Vec::new(),
        hidden: BTreeSet::new(),
        private_tmp,
        read_only_rule: spec
            .protect
            .iter()
            .filter(|g| g.access == GuardAccess::ReadOnly)
            .map(|g| g.path.clone())
            .collect(),
        programs: spec.programs.iter().map(|d| fs.canonicalize(d).unwrap_or_else(|_| d.clone())).collect(),
        spec_home: spec.home.clone(),
        home: fs.canonicalize(&spec.home).ok(),
        home_sealed: false,
        caches: Vec::new(),
        once: std::collections::HashSet::new(),
    };
    b.base()?;
    b.run_dir()?;
    b.dev(spec.limits.shm_bytes);

    // Phase 3: /tmp, writable, hidden.
    match spec.tmp {
        TmpMode::Private => {
            // Canonical: the source is opened without following links (`/home -> var/home`).
            let src = fs.canonicalize(&spec.state_dir).unwrap_or_else(|_| spec.state_dir.clone()).join("tmp");
            b.layered.push((1, BIND, Op::Bind { src, dst: "/tmp".into(), access: Access::Rw, dir: true }));
        }
        TmpMode::Shared => {
            b.refuse_program_dir(&b.canonical(Path::new("/tmp"))?, "OCSB_TMP=shared (the host's /tmp)")?;
            b.layered.push((
                1,
                BIND,
                Op::Bind { src: "/tmp".into(), dst: "/tmp".into(), access: Access::Rw, dir: true },
            ));
        }
    }
    b.plan.writable.push("/tmp".into());
    let project = b.canonical(&spec.project_dir)?;
    b.writable(&project, "project directory")?;
    if let Some(w) = &spec.worktrees_dir {
        b.writable(w, "worktrees directory")?;
    }
    b.writable(&spec.state_dir, "state directory")?;
    for p in &spec.rw {
        b.writable(p, "OCSB_RW entry")?;
    }
    for p in &spec.rw_home {
        absolute(p, "OCSB_RW_HOME entry")?;
        if fs.kind(p) != Kind::Missing {
            b.writable(p, "OCSB_RW_HOME entry")?;
        }
    }
    for (dir, own) in &spec.caches {
        b.private_cache(dir, own, cache_source(fs, &spec.state_dir, own)?)?;
    }
    if until == Until::Writable {
        return Ok(b.plan);
    }
    let mut hidden: Vec<(PathBuf, &'static str)> = Vec::new();
    hidden.extend(spec.hide.iter().map(|p| (p.clone(), "OCSB_HIDE entry")));
    hidden.extend(spec.hide_home.iter().map(|p| (p.clone(), "OCSB_HIDE_HOME entry")));
    hidden.push((spec.home.join(".Xauthority"), "X authority file"));
    for d in SOCKET_DIRS {
        hidden.push((PathBuf::from(d), "socket directory"));
    }
    for p in DISABLED_PROGRAMS {
        hidden.push((PathBuf::from(p), "disabled program"));
    }
    if spec.docker_socket.is_none() {
        for p in DOCKER_SOCKETS {
            hidden.push((PathBuf::from(p), "docker socket"));
        }
        for p in HOME_DOCKER_SOCKETS {
            hidden.push((spec.home.join(p), "docker socket"));
        }
    }
    // Credential files inside the default toolchain directories (`ocsb_policy::home::SECRETS`).
    let secrets = ocsb_policy::home::secret_files(&spec.home, &Listing(fs)).map_err(|dir| {
        Error::refused(
            format!(
                "{} holds too many directories to look for credential files in (more than {})",
                dir.display(),
                ocsb_policy::home::SECRET_LISTINGS
            ),
            "remove unused versions there, or hide the directory with OCSB_HIDE_HOME",
        )
    })?;
    hidden.extend(secrets.into_iter().map(|p| (p, "credential file of a toolchain")));
    b.home(spec, &mut hidden)?;
    for (p, what) in hidden {
        if b.not_in_tree(&p) {
            continue;
        }
        b.hide(&p, what)?;
    }
    // After every hide: a pin may not reach into a hidden directory made later.
    for h in b.hidden.clone() {
        b.pin_way_to(&h);
    }
    let mut layered = std::mem::take(&mut b.layered);
    layered.sort_by_key(|(d, class, _)| (*d, *class));
    let mut seen = std::collections::HashSet::new();
    for (_, _, op) in layered {
        if seen.insert(op.clone()) {
            b.plan.ops.push(op);
        }
    }

    if until == Until::Prefix {
        return Ok(b.plan);
    }

    // Phase 4: the checkout rule, last of all, so no writable bind can re-expose what it
    // protects. A `.git` directory is bound onto itself there, so it cannot be renamed away and
    // replaced by one with the agent's hooks (`mv .git g && mkdir -p .git/hooks` gets EBUSY).
    let before_rule = b.plan.ops.len();
    b.once = b.plan.ops.iter().cloned().collect();
    for g in &spec.protect {
        b.guard(g)?;
    }
    // A hidden path inside a protected one was covered by the protection's fresh bind: cover it
    // again on top (`OCSB_HIDE=.vscode/token` with `.vscode` read-only).
    let again: Vec<Op> = b.plan.ops[..before_rule]
        .iter()
        .filter(|op| matches!(op, Op::Mask { .. } | Op::Tmpfs { .. }) && b.hidden.contains(op.dst()))
        .filter(|op| spec.protect.iter().any(|g| op.dst().starts_with(&g.path) && op.dst() != g.path))
        .cloned()
        .collect();
    b.plan.ops.extend(again);
    // Phase 4b: each checkout's `.git` is the agent's own git directory, mounted over the
    // user's last of all, so nothing of the user's git data is writable (nor seen, but the
    // objects it borrows, read-only).
    for a in &spec.agent_git {
        b.agent_git(a)?;
    }
    for g in &spec.git_read_only {
        absolute(g, "checkout .git")?;
        if b.fs.kind(g) == Kind::Dir || b.fs.kind(g) == Kind::File {
            let dir = b.fs.kind(g) == Kind::Dir;
            b.plan.ops.push(Op::Bind { src: g.clone(), dst: g.clone(), access: Access::Ro, dir });
        }
    }
    // Phase 5: sockets passed in.
    if let Some(s) = &spec.ssh_agent {
        absolute(s, "ssh-agent socket")?;
        let dst = PathBuf::from(super::spec::SSH_AGENT_INSIDE);
        b.plan.ops.push(Op::Bind { src: s.clone(), dst, access: Access::Ro, dir: false });
    }
    if let Some(s) = &spec.docker_socket {
        b.expose_socket(s, "docker socket")?;
    }
    if let Some(g) = &spec.docker_gateway {
        absolute(g, "Docker gateway socket")?;
        let dst = PathBuf::from(super::spec::DOCKER_GATEWAY_INSIDE);
        b.plan.ops.push(Op::Bind { src: g.clone(), dst, access: Access::Ro, dir: false });
    }
    b.plan.cwd = match &spec.cwd {
        Some(c) => {
            absolute(c, "working directory")?;
            c.clone()
        }
        None => project,
    };
    Ok(b.plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A host filesystem as a map of path -> kind (+ link targets).
    #[derive(Default)]
    struct FakeFs {
        kinds: BTreeMap<PathBuf, Kind>,
        links: BTreeMap<PathBuf, PathBuf>,
        /// Directories whose listing fails (`EACCES`).
        unlistable: BTreeSet<PathBuf>,
    }

    impl FakeFs {
        fn with(mut self, p: &str, k: Kind) -> Self {
            self.kinds.insert(p.into(), k);
            self
        }
        fn link(mut self, p: &str, t: &str) -> Self {
            self.kinds.insert(p.into(), Kind::Symlink);
            self.links.insert(p.into(), t.into());
            self
        }
    }

    impl HostFs for FakeFs {
        fn kind(&self, p: &Path) -> Kind {
            if let Some(k) = self.kinds.get(p) {
                return *k;
            }
            // lstat resolves links in the parent directories
            match (p.parent().map(|d| self.canonicalize(d)), p.file_name()) {
                (Some(Ok(d)), Some(n)) if d != p.parent().unwrap() => self.kind(&d.join(n)),
                _ => Kind::Missing,
            }
        }
        fn canonicalize(&self, p: &Path) -> io::Result<PathBuf> {
            let mut out = PathBuf::from("/");
            for c in p.components().skip(1) {
                out.push(c);
                if let Some(t) = self.links.get(&out) {
                    out = if t.is_absolute() { t.clone() } else { out.parent().unwrap().join(t) };
                }
            }
            if self.kind(&out) == Kind::Missing {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            }
            Ok(out)
        }
        fn read_dir(&self, p: &Path) -> io::Result<Vec<String>> {
            if self.unlistable.contains(p) {
                return Err(io::Error::from_raw_os_error(libc::EACCES));
            }
            Ok(self
                .kinds
                .keys()
                .filter(|k| k.parent() == Some(p))
                .map(|k| k.file_name().unwrap().to_string_lossy().into_owned())
                .collect())
        }
        fn read_link(&self, p: &Path) -> io::Result<PathBuf> {
            self.links.get(p).cloned().ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
        }
    }

    impl ocsb_policy::guard::Lookup for FakeFs {
        fn entry(&self, p: &Path) -> Kind {
            self.kinds.get(p).copied().unwrap_or(Kind::Missing)
        }
        fn names(&self, dir: &Path) -> Vec<String> {
            self.read_dir(dir).unwrap_or_default()
        }
    }

    /// The plan with the checkout rule applied to the project, as `launch::prepare` does.
    fn ruled(mut s: SandboxSpec, fs: &FakeFs) -> Result<Plan> {
        use ocsb_policy::guard::{Checkout, GitDirs, Rule};
        let root = s.project_dir.clone();
        let dot = root.join(".git");
        let git = match fs.kinds.get(&dot) {
            Some(Kind::Dir) | Some(Kind::Symlink) => Some(GitDirs { gitdir: dot.clone(), common: dot }),
            Some(Kind::File) => {
                Some(GitDirs { gitdir: "/home/u/m/.git/worktrees/p".into(), common: "/home/u/m/.git".into() })
            }
            _ => None,
        };
        let checkout = Checkout {
            root,
            git,
            project: true,
            hooks_paths: vec![],
            config_files: vec![],
            hook_targets: vec![],
        };
        let writable = build(&s, fs)?.writable;
        s.protect = Rule { writable: &writable, rw_tool_files: &[] }.protections(&[checkout], fs);
        build(&s, fs)
    }

    fn host() -> FakeFs {
        FakeFs::default()
            .with("/usr", Kind::Dir)
            .with("/etc", Kind::Dir)
            .with("/etc/resolv.conf", Kind::Symlink)
            .link("/etc/resolv.conf", "/run/systemd/resolve/stub-resolv.conf")
            .with("/run", Kind::Dir)
            .with("/run/systemd", Kind::Dir)
            .with("/run/systemd/resolve", Kind::Dir)
            .with("/run/systemd/resolve/stub-resolv.conf", Kind::File)
            .with("/run/docker.sock", Kind::Special)
            .link("/bin", "usr/bin")
            .with("/proc", Kind::Dir)
            .with("/dev", Kind::Dir)
            .with("/tmp", Kind::Dir)
            .with("/var", Kind::Dir)
            .link("/var/run", "/run")
            .with("/home", Kind::Dir)
            .with("/home/u", Kind::Dir)
            .with("/home/u/.ssh", Kind::Dir)
            .with("/home/u/.ssh/id_ed25519", Kind::File)
            .with("/home/u/.ssh/id_ed25519.pub", Kind::File)
            .with("/home/u/.ssh/config", Kind::File)
            .with("/home/u/.ssh/known_hosts", Kind::File)
            .with("/home/u/.aws", Kind::Dir)
            .with("/home/u/.cache", Kind::Dir)
            .with("/home/u/p", Kind::Dir)
            .with("/home/u/p/.git", Kind::Dir)
            .with("/home/u/p/.git/hooks", Kind::Dir)
            .with("/home/u/p/.git/config", Kind::File)
            .with("/home/u/p/.opencode-sandbox", Kind::Dir)
            .with("/home/u/.local", Kind::Dir)
            .with("/home/u/.local/share", Kind::Dir)
            .with("/home/u/.local/share/ocsb", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/tmp", Kind::Dir)
    }

    fn spec() -> SandboxSpec {
        SandboxSpec {
            worktrees_dir: Some("/home/u/p-worktrees".into()),
            rw_home: vec!["/home/u/.cache".into(), "/home/u/.npm".into()],
            hide_home: vec!["/home/u/.aws".into(), "/home/u/.kube/config".into()],
            ..crate::spec::minimal("/home/u/p".into(), "/home/u/.local/share/ocsb/p".into(), "/home/u".into())
        }
    }

    fn pos(plan: &Plan, dst: &str) -> usize {
        plan.ops
            .iter()
            .position(|o| o.dst() == Path::new(dst))
            .unwrap_or_else(|| panic!("no op for {dst} in {:#?}", plan.ops))
    }

    /// The writable paths of a spec are those of its whole plan, its protections aside: the
    /// phases after the caches add none.
    #[test]
    fn writable_of_is_what_the_whole_plan_makes_writable() {
        let fs = host().with("/home/u/.cache", Kind::Dir).with("/home/u/.npm", Kind::Dir);
        let mut s = spec();
        s.rw = vec!["/home/u/data".into()];
        s.caches =
            vec![("/home/u/.m2/repository".into(), "/home/u/.local/share/ocsb/p/.m2+repository".into())];
        let fs = fs
            .with("/home/u/data", Kind::Dir)
            .with("/home/u/.m2", Kind::Dir)
            .with("/home/u/.m2/repository", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/.m2+repository", Kind::Dir);
        let seen = crate::remembered::Remembered::new(&fs);
        let whole = build(&s, &fs).unwrap().writable;
        assert!(whole.len() >= 6, "{whole:?}");
        assert_eq!(writable_of(&s, &seen).unwrap(), whole);
    }

    #[test]
    fn base_is_read_only_and_skips_fresh_dirs() {
        let plan = build(&spec(), &host()).unwrap();
        assert!(plan.ops.contains(&Op::Bind {
            src: "/usr".into(),
            dst: "/usr".into(),
            access: Access::Ro,
            dir: true
        }));
        assert!(plan.ops.contains(&Op::Symlink { dst: "/bin".into(), target: "usr/bin".into() }));
        for fresh in ["/proc", "/dev", "/run", "/tmp"] {
            assert!(
                !plan.ops.iter().any(
                    |o| matches!(o, Op::Bind { src, access: Access::Ro, .. } if src == Path::new(fresh))
                ),
                "{fresh} must not be bound from the host"
            );
        }
        assert!(matches!(plan.ops[pos(&plan, "/run")], Op::Tmpfs { seal: true, .. }));
        assert!(matches!(plan.ops[pos(&plan, "/proc")], Op::Proc { .. }));
    }

    /// The writable binds, as the plan resolves them, never expose ocsb's program directories:
    /// not through a root above one, not through a link swapped in after the launcher's own
    /// check, not as the shared `/tmp`; a root beside them or deeper inside one is planned.
    #[test]
    fn writable_binds_never_expose_program_directories() {
        let fs = host()
            .with("/home/u/tools", Kind::Dir)
            .with("/home/u/tools/bin", Kind::Dir)
            .with("/home/u/tools/bin/ocsb", Kind::File)
            .with("/home/u/tools/bin/scripts", Kind::Dir)
            .with("/home/u/tools/cache", Kind::Dir)
            .link("/home/u/p/out", "/home/u/tools")
            .with("/tmp/b", Kind::Dir)
            .with("/tmp/b/bin", Kind::Dir);
        let with = |rw: &[&str], programs: &[&str], tmp: TmpMode| {
            let mut s = spec();
            s.rw = rw.iter().map(PathBuf::from).collect();
            s.programs = programs.iter().map(PathBuf::from).collect();
            s.tmp = tmp;
            build(&s, &fs)
        };
        let tools = ["/home/u/tools/bin"];
        for (rw, tmp) in [
            (&["/home/u/tools"][..], TmpMode::Private),
            (&["/home/u/p/out"][..], TmpMode::Private),
            (&["/home/u/tools/bin/ocsb"][..], TmpMode::Private),
        ] {
            let e = with(rw, &tools, tmp).unwrap_err().to_string();
            assert!(
                e.contains("ocsb's own programs (/home/u/tools/bin)") && e.contains("narrower path"),
                "{rw:?}: {e}"
            );
        }
        let e = with(&[], &["/tmp/b/bin"], TmpMode::Shared).unwrap_err().to_string();
        assert!(e.contains("OCSB_TMP=shared") && e.contains("(/tmp/b/bin)"), "{e}");
        let plan =
            with(&["/home/u/tools/cache", "/home/u/tools/bin/scripts"], &tools, TmpMode::Shared).unwrap();
        assert!(plan.writable.contains(&PathBuf::from("/home/u/tools/cache")));
        assert!(plan.writable.contains(&PathBuf::from("/home/u/tools/bin/scripts")));
    }

    #[test]
    fn docker_socket_absent_unless_allowed() {
        let plan = build(&spec(), &host()).unwrap();
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/run/docker.sock")));
        let mut s = spec();
        s.docker_socket = Some("/var/run/docker.sock".into());
        let plan = build(&s, &host()).unwrap();
        let i = pos(&plan, "/run/docker.sock");
        assert!(i > pos(&plan, "/run"), "the socket is bound into the fresh /run");
    }

    #[test]
    fn resolv_conf_target_is_kept_in_run() {
        let plan = build(&spec(), &host()).unwrap();
        let i = pos(&plan, "/run/systemd/resolve/stub-resolv.conf");
        assert!(i > pos(&plan, "/run"));
    }

    #[test]
    fn tmp_before_project_and_state_under_tmp() {
        let fs = host().with("/tmp/w", Kind::Dir).with("/tmp/w/p", Kind::Dir).with("/tmp/w/state", Kind::Dir);
        let mut s = spec();
        s.project_dir = "/tmp/w/p".into();
        s.state_dir = "/tmp/w/state".into();
        let plan = build(&s, &fs).unwrap();
        let tmp = pos(&plan, "/tmp");
        assert!(tmp < pos(&plan, "/tmp/w/p"));
        assert!(tmp < pos(&plan, "/tmp/w/state"));
        assert_eq!(
            plan.ops[tmp],
            Op::Bind { src: "/tmp/w/state/tmp".into(), dst: "/tmp".into(), access: Access::Rw, dir: true }
        );
    }

    #[test]
    fn writable_set_and_missing_entries() {
        let plan = build(&spec(), &host()).unwrap();
        for w in ["/home/u/p", "/home/u/.local/share/ocsb/p", "/home/u/.cache", "/tmp"] {
            assert!(plan.writable.contains(&PathBuf::from(w)), "{w} writable");
        }
        // ~/.npm does not exist: skipped silently (RW_HOME), worktrees dir: warned.
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/home/u/.npm")));
        assert!(plan.warnings.iter().any(|w| w.contains("p-worktrees")));
    }

    /// The home is a fresh sealed tmpfs: only the allowed entries, `~/.ssh`'s public half and
    /// the writable roots in it are bound there; everything else of the host's home is absent,
    /// with no op at all (nothing to detach, nothing the host can add later).
    #[test]
    fn the_home_is_fresh_and_holds_only_what_is_allowed() {
        let fs = host()
            .with("/home/u/.bashrc", Kind::File)
            .link("/home/u/.zshrc", "dotfiles/zshrc")
            .with("/home/u/dotfiles", Kind::Dir)
            .with("/home/u/dotfiles/zshrc", Kind::File)
            .with("/home/u/.cargo", Kind::Dir)
            .with("/home/u/.cargo/bin", Kind::Dir)
            .with("/home/u/.cargo/credentials.toml", Kind::File)
            .with("/home/u/.config", Kind::Dir)
            .with("/home/u/.config/gh", Kind::Dir)
            .with("/home/u/mux.sock", Kind::Special);
        let mut s = spec();
        s.home_ro = [
            "/home/u/.bashrc",
            "/home/u/.zshrc",
            "/home/u/.cargo/bin",
            "/home/u/.rustup",
            "/home/u/mux.sock",
        ]
        .map(PathBuf::from)
        .to_vec();
        s.home_ro.push("/home/u/.aws".into()); // hidden: hide wins
        s.home_ro.push("/srv/tools".into()); // outside the home: the root's binds show it
        let plan = build(&s, &fs).unwrap();
        let home = pos(&plan, "/home/u");
        assert_eq!(plan.ops[home], Op::Tmpfs { dst: "/home/u".into(), mode: 0o755, size: None, seal: true });
        assert!(pos(&plan, "/home") < home, "after the root's read-only /home");
        let ro = |dst: &str, src: &str, dir: bool| {
            let i = pos(&plan, dst);
            assert_eq!(plan.ops[i], Op::Bind { src: src.into(), dst: dst.into(), access: Access::Ro, dir });
            assert!(i > home, "{dst} is bound into the home's tmpfs");
        };
        ro("/home/u/.bashrc", "/home/u/.bashrc", false);
        ro("/home/u/.zshrc", "/home/u/dotfiles/zshrc", false);
        ro("/home/u/.cargo/bin", "/home/u/.cargo/bin", true);
        for visible in ["/home/u/.ssh/config", "/home/u/.ssh/known_hosts", "/home/u/.ssh/id_ed25519.pub"] {
            ro(visible, visible, false);
        }
        let absent =
            |p: &str| !plan.ops.iter().any(|o| o.dst().starts_with(p) && o.dst() != Path::new("/home/u"));
        for p in [
            "/home/u/.aws",
            "/home/u/.ssh/id_ed25519",
            "/home/u/.cargo/credentials.toml",
            "/home/u/.config",
            "/home/u/dotfiles",
            "/home/u/mux.sock",
            "/home/u/.rustup",
            "/home/u/.kube",
            "/home/u/.local/share/ocsb/p/tmp",
        ] {
            assert!(absent(p), "{p}: {:#?}", plan.ops);
        }
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/srv/tools")));
        // The writable roots in the home: their mount points are made in the tmpfs.
        for w in ["/home/u/p", "/home/u/.local/share/ocsb/p", "/home/u/.cache"] {
            assert!(matches!(plan.ops[pos(&plan, w)], Op::Bind { access: Access::Rw, .. }), "{w}");
            assert!(pos(&plan, w) > home && plan.writable.contains(&PathBuf::from(w)), "{w}");
        }
    }

    /// A hidden name is masked only where a bind of the home shows it (an allowed directory, a
    /// writable root); elsewhere in the home it is absent without any op, and a writable root
    /// beneath a hidden directory is still mounted (the state directory beneath the hidden
    /// state of every project).
    #[test]
    fn hidden_names_in_the_home_are_masked_only_where_a_bind_shows_them() {
        let fs = host()
            .with("/home/u/.config", Kind::Dir)
            .with("/home/u/.config/nvim", Kind::Dir)
            .with("/home/u/.config/nvim/token", Kind::File)
            .with("/home/u/.local/share/ocsb/p/secret", Kind::File)
            .with("/home/u/.local/share/ocsb/other", Kind::Dir);
        let mut s = spec();
        s.home_ro = vec!["/home/u/.config/nvim".into()];
        s.hide = vec!["/home/u/.local/share/ocsb".into(), "/home/u/.local/share/ocsb/p/secret".into()];
        s.hide_home.push("/home/u/.config/nvim/token".into());
        let plan = build(&s, &fs).unwrap();
        let nvim = pos(&plan, "/home/u/.config/nvim");
        let token = pos(&plan, "/home/u/.config/nvim/token");
        assert!(matches!(plan.ops[token], Op::Mask { .. }) && token > nvim);
        assert!(matches!(plan.ops[pos(&plan, "/home/u/.local/share/ocsb/p/secret")], Op::Mask { .. }));
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/home/u/.local/share/ocsb")), "absent: no op");
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/home/u/.aws")), "absent: no op");
        assert!(matches!(
            plan.ops[pos(&plan, "/home/u/.local/share/ocsb/p")],
            Op::Bind { access: Access::Rw, .. }
        ));
    }

    /// `~/.ssh` reached through a link to outside the home: its visible files are bound under
    /// `~/.ssh`, and the directory itself is hidden where the root's binds show it.
    #[test]
    fn ssh_through_a_link_is_hidden_at_its_target() {
        let mut fs = host()
            .with("/srv", Kind::Dir)
            .with("/srv/ssh", Kind::Dir)
            .with("/srv/ssh/id_rsa", Kind::File)
            .with("/srv/ssh/config", Kind::File);
        fs.kinds.retain(|k, _| !k.starts_with("/home/u/.ssh"));
        let fs = fs.link("/home/u/.ssh", "/srv/ssh");
        let plan = build(&spec(), &fs).unwrap();
        assert_eq!(
            plan.ops[pos(&plan, "/home/u/.ssh/config")],
            Op::Bind {
                src: "/srv/ssh/config".into(),
                dst: "/home/u/.ssh/config".into(),
                access: Access::Ro,
                dir: false
            }
        );
        assert!(matches!(plan.ops[pos(&plan, "/srv/ssh")], Op::Tmpfs { seal: true, .. }));
        assert!(!plan.ops.iter().any(|o| o.dst().ends_with("id_rsa")));
    }

    /// Credential files inside an allowed toolchain directory (npm's global `etc/npmrc` of a
    /// Node version, conda's `.condarc`): masked inside the bind that shows them; the rest of
    /// the toolchain stays.
    #[test]
    fn credential_files_inside_allowed_toolchains_are_masked() {
        let fs = host()
            .with("/home/u/.nvm", Kind::Dir)
            .with("/home/u/.nvm/versions", Kind::Dir)
            .with("/home/u/.nvm/versions/node", Kind::Dir)
            .with("/home/u/.nvm/versions/node/v20.1.0", Kind::Dir)
            .with("/home/u/.nvm/versions/node/v20.1.0/bin", Kind::Dir)
            .with("/home/u/.nvm/versions/node/v20.1.0/etc", Kind::Dir)
            .with("/home/u/.nvm/versions/node/v20.1.0/etc/npmrc", Kind::File)
            .with("/home/u/miniconda3", Kind::Dir)
            .with("/home/u/miniconda3/.condarc", Kind::File)
            .with("/home/u/miniconda3/envs", Kind::Dir)
            .with("/home/u/miniconda3/envs/ml", Kind::Dir)
            .with("/home/u/miniconda3/envs/ml/conda-meta", Kind::Dir)
            .with("/home/u/miniconda3/envs/ml/conda-meta/state", Kind::File);
        let mut s = spec();
        s.home_ro = vec!["/home/u/.nvm".into(), "/home/u/miniconda3".into()];
        let plan = build(&s, &fs).unwrap();
        let nvm = pos(&plan, "/home/u/.nvm");
        assert!(matches!(plan.ops[nvm], Op::Bind { access: Access::Ro, .. }));
        for secret in [
            "/home/u/.nvm/versions/node/v20.1.0/etc/npmrc",
            "/home/u/miniconda3/.condarc",
            "/home/u/miniconda3/envs/ml/conda-meta/state",
        ] {
            let i = pos(&plan, secret);
            assert_eq!(plan.ops[i], Op::Mask { dst: secret.into() });
            assert!(i > nvm);
        }
        assert!(!plan.ops.iter().any(|o| o.dst().ends_with("bin") && o.dst().starts_with("/home/u/.nvm/")));
        // Not allowed: absent, nothing to mask.
        let plan = build(&spec(), &fs).unwrap();
        assert!(!plan.ops.iter().any(|o| o.dst().starts_with("/home/u/.nvm")));
    }

    /// An allowed entry that is a link (`~/.config -> dotfiles/config`, or to outside the
    /// home): a hidden name beneath it is covered under its name in the home, where the
    /// sandbox sees it, and at its resolved path where the root shows that.
    #[test]
    fn hide_wins_under_a_symlinked_allowed_entry() {
        for target in ["/home/u/dotfiles/config", "/data/u/config"] {
            let fs = host()
                .with("/home/u/dotfiles", Kind::Dir)
                .with("/data", Kind::Dir)
                .with("/data/u", Kind::Dir)
                .with(target, Kind::Dir)
                .with(&format!("{target}/gh"), Kind::Dir)
                .with(&format!("{target}/gh/hosts.yml"), Kind::File)
                .with(&format!("{target}/nvim"), Kind::Dir)
                .link("/home/u/.config", target);
            let mut s = spec();
            s.home_ro = vec!["/home/u/.config".into()];
            s.hide_home.push("/home/u/.config/gh".into());
            let plan = build(&s, &fs).unwrap();
            let config = pos(&plan, "/home/u/.config");
            assert_eq!(
                plan.ops[config],
                Op::Bind { src: target.into(), dst: "/home/u/.config".into(), access: Access::Ro, dir: true }
            );
            let gh = pos(&plan, "/home/u/.config/gh");
            assert!(matches!(plan.ops[gh], Op::Tmpfs { seal: true, .. }) && gh > config, "{target}");
            let outside = !target.starts_with("/home/u");
            assert_eq!(
                plan.ops.iter().any(|o| o.dst() == Path::new(&format!("{target}/gh"))),
                outside,
                "{target}: covered at its own path where the root shows it"
            );
            // Allowed as a whole: the target is not hidden.
            assert!(!plan.ops.iter().any(|o| o.dst() == Path::new(target)), "{target}");
        }
    }

    /// Top-level links of the home to outside it, not allowed: their targets are hidden where
    /// the root shows them; an allowed part beneath stays, at both its names. A target that
    /// holds the project stays as it is.
    #[test]
    fn links_from_the_home_to_outside_it_are_hidden_at_their_targets() {
        let fs = host()
            .with("/data", Kind::Dir)
            .with("/data/u", Kind::Dir)
            .with("/data/u/config", Kind::Dir)
            .with("/data/u/config/gh", Kind::Dir)
            .with("/data/u/config/nvim", Kind::Dir)
            .with("/mnt", Kind::Dir)
            .with("/mnt/x", Kind::Dir)
            .with("/mnt/x/config.json", Kind::File)
            .with("/mnt/netrc", Kind::File)
            .with("/data/src", Kind::Dir)
            .with("/data/src/q", Kind::Dir)
            .link("/home/u/.config", "/data/u/config")
            .link("/home/u/.docker", "/mnt/x")
            .link("/home/u/.netrc", "/mnt/netrc")
            .link("/home/u/src", "/data/src")
            .link("/home/u/.zshrc", "/data/u/zshrc")
            .with("/data/u/zshrc", Kind::File);
        let mut s = spec();
        s.home_ro = vec!["/home/u/.config/nvim".into(), "/home/u/.zshrc".into()];
        s.rw = vec!["/data/src/q".into()];
        let plan = build(&s, &fs).unwrap();
        assert!(matches!(plan.ops[pos(&plan, "/mnt/x")], Op::Tmpfs { seal: true, .. }));
        assert_eq!(plan.ops[pos(&plan, "/mnt/netrc")], Op::Mask { dst: "/mnt/netrc".into() });
        let config = pos(&plan, "/data/u/config");
        assert!(matches!(plan.ops[config], Op::Tmpfs { seal: true, .. }));
        let nvim = |dst: &str| Op::Bind {
            src: "/data/u/config/nvim".into(),
            dst: dst.into(),
            access: Access::Ro,
            dir: true,
        };
        assert_eq!(plan.ops[pos(&plan, "/home/u/.config/nvim")], nvim("/home/u/.config/nvim"));
        let again = pos(&plan, "/data/u/config/nvim");
        assert_eq!(plan.ops[again], nvim("/data/u/config/nvim"));
        assert!(again > config, "the allowed part comes back over the hidden target");
        // Allowed as a whole (a dotfile), and holding a writable root: left as they are.
        assert!(
            !plan.ops.iter().any(|o| o.dst() == Path::new("/data/u/zshrc") && matches!(o, Op::Mask { .. }))
        );
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/data/src")));
        assert!(matches!(plan.ops[pos(&plan, "/data/src/q")], Op::Bind { access: Access::Rw, .. }));
        // Bounded: past the limit the plan says so.
        let mut many = host().with("/data", Kind::Dir);
        for i in 0..=LINKS_OUT {
            many = many
                .with(&format!("/data/t{i}"), Kind::Dir)
                .link(&format!("/home/u/l{i:03}"), &format!("/data/t{i}"));
        }
        let plan = build(&spec(), &many).unwrap();
        assert!(plan.warnings.iter().any(|w| w.contains("stay readable")), "{:?}", plan.warnings);
        assert_eq!(
            plan.ops.iter().filter(|o| o.dst().to_string_lossy().starts_with("/data/t")).count(),
            LINKS_OUT
        );
    }

    /// A home inside a writable root (`OCSB_RW=(~)`, a project that is the home) cannot be
    /// rebuilt: the plan says so rather than hiding it.
    #[test]
    fn a_home_inside_a_writable_root_is_said_to_be_visible() {
        let mut s = spec();
        s.rw = vec!["/home".into()];
        let plan = build(&s, &host()).unwrap();
        assert!(!plan.ops.iter().any(|o| matches!(o, Op::Tmpfs { dst, .. } if dst == Path::new("/home/u"))));
        assert!(plan.warnings.iter().any(|w| w.contains("all of it is visible")), "{:?}", plan.warnings);
        let mut s = spec();
        s.home = "/".into();
        assert!(build(&s, &host().with("/", Kind::Dir)).unwrap_err().to_string().contains("root directory"));
    }

    /// git's credential cache socket under a `~/.cache` the sandbox sees from the host: an empty
    /// sealed tmpfs over its directory, made on the host (0700, as git wants it) when missing.
    #[test]
    fn the_credential_cache_socket_is_covered_under_a_shared_cache() {
        let plan = build(&spec(), &host()).unwrap();
        let cred = pos(&plan, "/home/u/.cache/git/credential");
        assert!(matches!(plan.ops[cred], Op::Tmpfs { seal: true, .. }));
        assert!(cred > pos(&plan, "/home/u/.cache"));
        let made: Vec<_> =
            plan.placeholders.iter().map(|p| (p.path.display().to_string(), p.private)).collect();
        assert_eq!(
            made,
            [("/home/u/.cache/git".to_string(), true), ("/home/u/.cache/git/credential".to_string(), true)]
        );
        assert!(plan.placeholders.iter().all(|p| p.anchor == Path::new("/home/u/.cache") && p.dir));
        let fs = host()
            .with("/home/u/.cache/git", Kind::Dir)
            .with("/home/u/.cache/git/credential", Kind::Dir)
            .with("/home/u/.cache/git/credential/socket", Kind::Special);
        let plan = build(&spec(), &fs).unwrap();
        assert!(plan.placeholders.is_empty());
        let cred = pos(&plan, "/home/u/.cache/git/credential");
        assert!(matches!(plan.ops[cred], Op::Tmpfs { .. }));
        // The way to it is pinned, before the cover: `mv ~/.cache/git g` gets EBUSY.
        let git = pos(&plan, "/home/u/.cache/git");
        assert_eq!(
            plan.ops[git],
            Op::Bind {
                src: "/home/u/.cache/git".into(),
                dst: "/home/u/.cache/git".into(),
                access: Access::Rw,
                dir: true
            }
        );
        assert!(git < cred);
        // A link or a file on the way: refused, not skipped.
        for fs in [
            host().with("/home/u/.cache/elsewhere", Kind::Dir).link("/home/u/.cache/git", "elsewhere"),
            host().with("/home/u/.cache/git", Kind::Dir).with("/home/u/.cache/git/credential", Kind::File),
        ] {
            let e = build(&spec(), &fs).unwrap_err().to_string();
            assert!(e.contains("credential cache") && e.contains("/home/u/.cache/git"), "{e}");
        }
        // Not bound from the host at all: nothing to cover.
        let mut s = spec();
        s.rw_home.clear();
        let plan = build(&s, &fs).unwrap();
        assert!(!plan.ops.iter().any(|o| o.dst().starts_with("/home/u/.cache")));
    }

    #[test]
    fn private_caches_replace_the_host_directory() {
        let own = "/home/u/.local/share/ocsb/p/home-caches";
        let fs = host()
            .with("/home/u/.m2", Kind::Dir)
            .with("/home/u/.m2/repository", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/home-caches", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/home-caches/.m2+repository", Kind::Dir);
        let mut s = spec();
        s.rw_home.clear();
        s.caches = vec![
            ("/home/u/.m2/repository".into(), format!("{own}/.m2+repository").into()),
            ("/home/u/go/pkg/mod".into(), format!("{own}/go+pkg+mod").into()),
        ];
        let plan = build(&s, &fs).unwrap();
        let m2: Vec<_> = plan.ops.iter().filter(|o| o.dst() == Path::new("/home/u/.m2/repository")).collect();
        assert_eq!(
            m2,
            [&Op::Bind {
                src: format!("{own}/.m2+repository").into(),
                dst: "/home/u/.m2/repository".into(),
                access: Access::Rw,
                dir: true
            }],
            "the project's own copy, never the host's"
        );
        assert!(plan.writable.contains(&PathBuf::from("/home/u/.m2/repository")));
        assert!(pos(&plan, "/home/u") < pos(&plan, "/home/u/.m2/repository"));
        assert!(!plan.ops.iter().any(|o| o.dst().starts_with("/home/u/go")), "no own copy: skipped");
    }

    /// The agent swapped `home-caches` for a link to the user's home while a second sandbox of
    /// the project starts: the plan's source is still the path in the state directory, which
    /// the mount opens refusing every link, never the link's target.
    #[test]
    fn a_private_caches_source_is_never_resolved_past_the_state_directory() {
        let own = "/home/u/.local/share/ocsb/p/home-caches";
        let fs = host()
            .with("/home/u/.npm", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p", Kind::Dir)
            .link(own, "/home/u")
            // What lstat says through the link: a directory.
            .with("/home/u/.local/share/ocsb/p/home-caches/.npm", Kind::Dir);
        let mut s = spec();
        s.rw_home.clear();
        s.caches = vec![("/home/u/.npm".into(), format!("{own}/.npm").into())];
        let plan = build(&s, &fs).unwrap();
        let binds: Vec<_> = plan.ops.iter().filter(|o| o.dst() == Path::new("/home/u/.npm")).collect();
        assert_eq!(
            binds,
            [&Op::Bind {
                src: format!("{own}/.npm").into(),
                dst: "/home/u/.npm".into(),
                access: Access::Rw,
                dir: true
            }],
            "the link's target (the user's real ~/.npm) must never be the source"
        );
        s.caches = vec![("/home/u/.npm".into(), "/home/u/elsewhere/.npm".into())];
        assert!(build(&s, &fs).is_err(), "a cache outside the state directory is refused");
    }

    /// A fresh home has no `~/.npm`: the project's own copy is mounted there all the same, its
    /// mount point made in the home's (sealed) tmpfs, never on the host; a nested one
    /// (`~/.cargo/registry` without `~/.cargo`) too. Where the mount point would have to be made
    /// in a read-only entry, the cache is not mounted, and the plan says so.
    #[test]
    fn private_caches_missing_on_the_host_are_mounted_in_the_fresh_home() {
        let own = "/home/u/.local/share/ocsb/p/home-caches";
        let fs = host()
            .with(own, Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/home-caches/.npm", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/home-caches/.cargo+registry", Kind::Dir)
            .with("/home/u/.local/share/ocsb/p/home-caches/.gradle+caches", Kind::Dir)
            .with("/home/u/.gradle", Kind::Dir);
        let mut s = spec();
        s.rw_home.clear();
        s.home_ro = vec!["/home/u/.gradle".into()];
        s.caches = vec![
            ("/home/u/.npm".into(), format!("{own}/.npm").into()),
            ("/home/u/.cargo/registry".into(), format!("{own}/.cargo+registry").into()),
            ("/home/u/go/pkg/mod".into(), format!("{own}/go+pkg+mod").into()),
            ("/home/u/.gradle/caches".into(), format!("{own}/.gradle+caches").into()),
        ];
        let plan = build(&s, &fs).unwrap();
        for (dst, src) in [("/home/u/.npm", ".npm"), ("/home/u/.cargo/registry", ".cargo+registry")] {
            let i = pos(&plan, dst);
            assert_eq!(
                plan.ops[i],
                Op::Bind {
                    src: format!("{own}/{src}").into(),
                    dst: dst.into(),
                    access: Access::Rw,
                    dir: true
                }
            );
            assert!(plan.writable.contains(&PathBuf::from(dst)), "{dst}");
            assert!(pos(&plan, "/home/u") < i, "the home's tmpfs holds the mount point of {dst}");
        }
        assert!(!plan.ops.iter().any(|o| o.dst().starts_with("/home/u/go")), "no own copy: skipped");
        // `~/.gradle` is shown read-only and has no `caches`: no mount point can be made.
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/home/u/.gradle/caches")), "{:#?}", plan.ops);
        assert!(!plan.writable.contains(&PathBuf::from("/home/u/.gradle/caches")));
        assert!(
            plan.warnings.iter().any(|w| w.contains("/home/u/.gradle/caches") && w.contains("not mounted"))
        );
        // A home that does not exist: nothing of it to show, and nowhere to mount the caches.
        let mut s2 = s.clone();
        s2.home = "/home/other".into();
        let plan = build(&s2, &fs).unwrap();
        assert!(!plan.ops.iter().any(|o| o.dst() == Path::new("/home/u/.npm")), "{:#?}", plan.ops);
        assert!(!plan.writable.contains(&PathBuf::from("/home/u/.npm")));
    }

    #[test]
    fn hidden_symlink_hides_its_target() {
        let fs =
            host().with("/srv", Kind::Dir).with("/srv/secret", Kind::Dir).link("/home/u/.aws", "/srv/secret");
        let plan = build(&spec(), &fs).unwrap();
        assert!(matches!(plan.ops[pos(&plan, "/srv/secret")], Op::Tmpfs { .. }));
    }

    #[test]
    fn writable_inside_hidden_comes_after_hiding() {
        let fs = host().with("/home/u/p/data", Kind::Dir).with("/home/u/p/data/out", Kind::Dir);
        let mut s = spec();
        s.hide = vec!["/home/u/p/data".into()];
        s.rw = vec!["/home/u/p/data/out".into()];
        let plan = build(&s, &fs).unwrap();
        assert!(pos(&plan, "/home/u/p/data") < pos(&plan, "/home/u/p/data/out"));
    }

    /// What pid 1 mounts ahead is the beginning of the whole plan, the checkout rule and the
    /// session's mounts after it; where the rule changes that beginning (a read-only
    /// protection stops a pin on the way to a hidden path), it is not, and the two are
    /// compared before anything made ahead is kept.
    #[test]
    fn the_mounts_ahead_begin_the_whole_plan_unless_the_checkout_rule_changes_them() {
        let fs = host()
            .with("/home/u/p/.opencode-sandbox/key", Kind::File)
            .with("/home/u/p/data", Kind::Dir)
            .with("/home/u/p/data/key", Kind::File)
            .with("/home/u/.cache/git", Kind::Dir)
            .with("/home/u/.cache/git/credential", Kind::Dir);
        // The credential cache's directory missing under the shared `~/.cache`: a placeholder
        // the launcher makes first, so nothing is made ahead.
        assert_eq!(prefix_on(&spec(), &host()).unwrap(), None);
        let mut s = spec();
        s.hide = vec!["/home/u/p/data/key".into()];
        s.ssh_agent = Some("/home/u/.local/share/ocsb/p/ssh-agent.sock".into());
        let ahead = prefix_on(&s, &fs).unwrap().unwrap();
        let whole = ruled(s.clone(), &fs).unwrap();
        assert!(!ahead.is_empty() && ahead.len() < whole.ops.len());
        assert!(whole.ops.starts_with(&ahead), "{ahead:#?}\n{:#?}", whole.ops);
        assert!(ahead.iter().all(|o| o.dst() != Path::new(crate::spec::SSH_AGENT_INSIDE)));
        assert!(whole.ops[ahead.len()..].iter().any(|o| o.dst() == Path::new("/home/u/p/.opencode-sandbox")));
        // A hidden path beneath a read-only protection: the rule stops its pin.
        s.hide = vec!["/home/u/p/.opencode-sandbox/key".into()];
        let ahead = prefix_on(&s, &fs).unwrap().unwrap();
        let whole = ruled(s, &fs).unwrap();
        assert!(!whole.ops.starts_with(&ahead), "{ahead:#?}\n{:#?}", whole.ops);
    }

    /// A mount point missing on the host beneath a host bind would be made there by pid 1;
    /// beneath ocsb's own tmpfs, or present, it is not.
    #[test]
    fn a_missing_mount_point_beneath_a_host_bind_is_made_on_the_host() {
        let fs = host().with("/home/u/p/.env", Kind::File);
        let bind =
            Op::Bind { src: "/home/u/p".into(), dst: "/home/u/p".into(), access: Access::Rw, dir: true };
        let home = Op::Tmpfs { dst: "/home/u".into(), mode: 0o755, size: None, seal: true };
        let mask = |p: &str| Op::Mask { dst: p.into() };
        assert!(!makes_on_host(&[bind.clone(), mask("/home/u/p/.env")], &fs));
        assert!(makes_on_host(&[bind.clone(), mask("/home/u/p/.netrc")], &fs));
        assert!(!makes_on_host(&[home.clone(), mask("/home/u/.netrc")], &fs));
        // The latest, deepest holder decides: a tmpfs over the bind takes the mount point.
        let over = Op::Tmpfs { dst: "/home/u/p".into(), mode: 0o755, size: None, seal: true };
        assert!(!makes_on_host(&[bind, over, mask("/home/u/p/.netrc")], &fs));
    }

    #[test]
    fn hidden_inside_writable_comes_after() {
        let fs = host().with("/home/u/p/secrets", Kind::Dir);
        let mut s = spec();
        s.hide = vec!["/home/u/p/secrets".into()];
        let plan = build(&s, &fs).unwrap();
        assert!(pos(&plan, "/home/u/p") < pos(&plan, "/home/u/p/secrets"));
    }

    #[test]
    fn protected_paths_are_read_only_and_last() {
        let mut s = spec();
        s.rw = vec!["/home/u/p/.opencode-sandbox".into()]; // even an explicit rw entry does not win
        let plan = ruled(s, &host()).unwrap();
        let settings =
            plan.ops.iter().rposition(|o| o.dst() == Path::new("/home/u/p/.opencode-sandbox")).unwrap();
        assert!(settings > pos(&plan, "/home/u/p"));
        assert_eq!(
            plan.ops[settings],
            Op::Bind {
                src: "/home/u/p/.opencode-sandbox".into(),
                dst: "/home/u/p/.opencode-sandbox".into(),
                access: Access::Ro,
                dir: true
            }
        );
        // No git directory of the user's is in the rule: the agent's own is bound there.
        assert!(!plan.ops.iter().any(|o| o.dst().starts_with("/home/u/p/.git")), "{:#?}", plan.ops);
    }

    #[test]
    fn missing_protected_paths_get_placeholders() {
        let mut fs = host();
        fs.kinds.remove(Path::new("/home/u/p/.git/hooks"));
        fs.kinds.remove(Path::new("/home/u/p/.git/config"));
        let plan = ruled(spec(), &fs).unwrap();
        assert!(plan.placeholders.contains(&Placeholder {
            path: "/home/u/p/.cc-safety-net".into(),
            dir: true,
            anchor: "/home/u/p".into(),
            private: false,
        }));
        assert!(
            !plan.placeholders.iter().any(|p| p.path.starts_with("/home/u/p/.git")),
            "{:#?}",
            plan.placeholders
        );
        assert!(matches!(
            plan.ops[pos(&plan, "/home/u/p/.cc-safety-net")],
            Op::Bind { access: Access::Ro, dir: true, .. }
        ));
    }

    #[test]
    fn no_git_no_git_placeholders() {
        let mut fs = host();
        fs.kinds.retain(|k, _| !k.starts_with("/home/u/p/.git"));
        let plan = ruled(spec(), &fs).unwrap();
        assert!(!plan.placeholders.iter().any(|p| p.path.starts_with("/home/u/p/.git")));
    }

    #[test]
    fn symlinked_protected_path_is_refused() {
        let fs = host().link("/home/u/p/.opencode-sandbox", "/home/u/.ssh");
        let err = ruled(spec(), &fs).unwrap_err().to_string();
        assert!(err.contains(".opencode-sandbox is a symbolic link"), "{err}");
    }

    #[test]
    fn the_way_to_a_hidden_path_in_the_project_is_pinned_and_a_protection_does_not_uncover_it() {
        let fs = host()
            .with("/home/u/p/secrets", Kind::Dir)
            .with("/home/u/p/secrets/deploy", Kind::Dir)
            .with("/home/u/p/secrets/deploy/key", Kind::File)
            .with("/home/u/p/.vscode", Kind::Dir)
            .with("/home/u/p/.vscode/token", Kind::File);
        let mut s = spec();
        s.hide = vec!["/home/u/p/secrets/deploy/key".into(), "/home/u/p/.vscode/token".into()];
        let plan = ruled(s, &fs).unwrap();
        let pinned = |d: &str| Op::Bind { src: d.into(), dst: d.into(), access: Access::Rw, dir: true };
        let at = |op: &Op| plan.ops.iter().position(|o| o == op).unwrap_or_else(|| panic!("{op:?} missing"));
        let key = Op::Mask { dst: "/home/u/p/secrets/deploy/key".into() };
        assert!(at(&pinned("/home/u/p/secrets")) < at(&pinned("/home/u/p/secrets/deploy")));
        assert!(at(&pinned("/home/u/p/secrets/deploy")) < at(&key));
        // `.vscode` is bound read-only by the checkout rule after the hidden file's mask: the
        // mask is the last word again.
        let vscode = Op::Bind {
            src: "/home/u/p/.vscode".into(),
            dst: "/home/u/p/.vscode".into(),
            access: Access::Ro,
            dir: true,
        };
        let token = Op::Mask { dst: "/home/u/p/.vscode/token".into() };
        let last = plan.ops.iter().rposition(|o| *o == token).unwrap();
        assert!(at(&vscode) < last, "{:#?}", plan.ops);
    }

    #[test]
    fn no_pin_reaches_into_a_private_cache_a_hidden_directory_or_a_protection() {
        let own = "/home/u/.local/share/ocsb/p/home-caches";
        let fs = host()
            .with("/home/u/.cache/hf", Kind::Dir)
            .with("/home/u/.cache/hf/token", Kind::File)
            .with(own, Kind::Dir)
            .with(&format!("{own}/.cache"), Kind::Dir)
            .with("/home/u/p/secrets", Kind::Dir)
            .with("/home/u/p/secrets/deploy", Kind::Dir)
            .with("/home/u/p/secrets/deploy/key", Kind::File);
        let mut s = spec();
        s.rw_home.clear();
        s.caches = vec![("/home/u/.cache".into(), format!("{own}/.cache").into())];
        s.hide = vec![
            "/home/u/.cache/hf/token".into(),
            "/home/u/p/secrets/deploy/key".into(),
            "/home/u/p/secrets".into(),
        ];
        let plan = ruled(s, &fs).unwrap();
        // The cache is the private copy: the host's `.cache/hf` is never bound over it.
        assert!(
            !plan.ops.iter().any(|o| matches!(o, Op::Bind { src, .. } if src.starts_with("/home/u/.cache"))),
            "{:#?}",
            plan.ops
        );
        // `secrets` is hidden whole: nothing of the host's `secrets/deploy` is bound above it.
        assert!(
            !plan
                .ops
                .iter()
                .any(|o| matches!(o, Op::Bind { src, .. } if src.starts_with("/home/u/p/secrets"))),
            "{:#?}",
            plan.ops
        );
    }

    #[test]
    fn directories_made_for_a_protected_path_are_pinned_before_it() {
        use ocsb_policy::guard::{Access as G, Protection};
        let mut s = spec();
        s.protect = vec![Protection {
            path: "/home/u/p/tools/hooks".into(),
            access: G::ReadOnly,
            dir: true,
            placeholder: true,
            anchor: "/home/u/p".into(),
            why: "core.hooksPath".into(),
        }];
        let plan = build(&s, &host()).unwrap();
        let pin = Op::Bind {
            src: "/home/u/p/tools".into(),
            dst: "/home/u/p/tools".into(),
            access: Access::Rw,
            dir: true,
        };
        let hooks = Op::Bind {
            src: "/home/u/p/tools/hooks".into(),
            dst: "/home/u/p/tools/hooks".into(),
            access: Access::Ro,
            dir: true,
        };
        let at = |op: &Op| {
            plan.ops.iter().position(|o| o == op).unwrap_or_else(|| panic!("{op:?} missing: {:#?}", plan.ops))
        };
        assert!(at(&pin) < at(&hooks));
        assert!(plan.placeholders.iter().any(|p| p.path == Path::new("/home/u/p/tools") && p.dir));
    }

    /// A missing include target is held with the directories on the way to it; where a file
    /// stands on the way, the file is held read-only (it could be replaced by a directory).
    #[test]
    fn the_way_to_a_missing_protected_file_is_held() {
        use ocsb_policy::guard::{Access as G, Protection};
        let include = |path: &str| Protection {
            path: path.into(),
            access: G::ReadOnly,
            dir: false,
            placeholder: true,
            anchor: "/home/u/p".into(),
            why: "include.path".into(),
        };
        let mut s = spec();
        s.protect = vec![include("/home/u/p/cfg/git/extra"), include("/home/u/p/README/extra")];
        let plan = build(&s, &host().with("/home/u/p/README", Kind::File)).unwrap();
        for (path, dir) in
            [("/home/u/p/cfg", true), ("/home/u/p/cfg/git", true), ("/home/u/p/cfg/git/extra", false)]
        {
            assert!(plan.placeholders.iter().any(|p| p.path == Path::new(path) && p.dir == dir), "{path}");
        }
        let bind = |p: &str, access, dir| Op::Bind { src: p.into(), dst: p.into(), access, dir };
        for op in [
            bind("/home/u/p/cfg/git/extra", Access::Ro, false),
            bind("/home/u/p/cfg", Access::Rw, true),
            bind("/home/u/p/README", Access::Ro, false),
        ] {
            assert!(plan.ops.contains(&op), "{op:?} missing: {:#?}", plan.ops);
        }
    }

    #[test]
    fn relative_paths_are_refused() {
        let mut s = spec();
        s.rw = vec!["relative/dir".into()];
        assert!(build(&s, &host()).unwrap_err().to_string().contains("not an absolute path"));
    }

    #[test]
    fn shared_tmp_binds_host_tmp() {
        let mut s = spec();
        s.tmp = TmpMode::Shared;
        let plan = build(&s, &host()).unwrap();
        assert_eq!(
            plan.ops[pos(&plan, "/tmp")],
            Op::Bind { src: "/tmp".into(), dst: "/tmp".into(), access: Access::Rw, dir: true }
        );
    }
}
