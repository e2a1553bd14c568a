//! The tool files of a sandbox's writable trees (`ocsb_policy::toolfiles`), as the launcher's
//! walk before the start finds them, at any depth: every entry the registry names, every path
//! an `.envrc` there has direnv load, and, when the user's direnv config loads `.env` files
//! by itself, every `.env`.
//!
//! *Why the loads*: direnv asks again only when an `.envrc` changes, not when the `.env` it loads
//! (`dotenv`), the script it sources (`source_env`) or the directory it puts on `PATH`
//! (`PATH_add`, `layout node`) does. So an `.envrc` the user allowed runs whatever the agent
//! writes there on the next `cd`.
//!
//! What exists is held read-only in place (a bind each, the checkout rule's mechanism); what an
//! `.envrc` loads and does not exist yet is watched by its exact path ([`crate::watch::Tools`]),
//! and moved aside when it appears. What cannot be held in place (a link, an `.envrc` this
//! cannot read, a load that is a whole writable tree, more entries than the sandbox binds) is
//! a [`Finding`] that refuses the start for as long as it holds, and `ocsb audit` lists.
//!
//! The walk itself is the audit's ([`crate::audit`]): this module judges each entry it meets
//! ([`Collect::see`]), and reads the `.envrc` files it met once the walk is done.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use ocsb_policy::guard::{Access, Finding, Protection};
use ocsb_policy::toolfiles::{self, envrc};
use serde::{Deserialize, Serialize};

use crate::checkouts;

/// The most tool files the sandbox holds read-only: each is a bind mount, and a mount costs
/// more the more there are (measured on 2 cores: about 0.2 ms each at 1,000, 0.35 ms each at
/// 5,000). Beyond it the start is refused, so that nothing is left unprotected and no start
/// takes seconds: such a tree is a dependency tree of packages that ship their authors' editor
/// settings, which the user can leave writable (`OCSB_RW_TOOL_FILES`) or remove.
pub const MAX_HELD: usize = 4_096;

/// The largest `.envrc` read: one larger is refused, never read in part.
const MAX_ENVRC: u64 = 1 << 20;

/// The most loads one `.envrc` may have: the parser stops at this many, so a file that reaches
/// it may have more that would go unseen.
const MAX_LOADS: usize = 4096;

/// A path the sandbox holds: read-only while it exists, watched by its exact path (loads).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Held {
    pub path: PathBuf,
    /// The writable root it lies in (the walk came down to it through directories, no link).
    pub root: PathBuf,
    /// It exists: held read-only (unless a link, which [`ToolFiles::unholdable`] names).
    pub exists: bool,
    /// A symbolic link: a bind cannot hold it in place, so the start is refused over it; it is
    /// here so that one made while the sandbox runs is found (and moved aside) after it.
    #[serde(default)]
    pub link: bool,
    pub dir: bool,
    /// A path an `.envrc` loads (watched by its exact path), not a name of the registry.
    pub load: bool,
    /// A new one here is moved aside at once (a tool acts on it on `cd`), not only reported.
    pub aside: bool,
    /// What tool acts on it and how, for the user.
    pub why: String,
}

/// What the walk found: the start's protections, the watch's exact paths, and what refuses
/// the start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFiles {
    pub held: Vec<Held>,
    /// direnv's own config loads a `.env` in every directory (`load_dotenv`).
    pub dotenv: bool,
    /// What cannot be held in place: refuses the start while it holds (never recorded: every
    /// look finds it again, and no `ocsb audit --accept` clears it).
    pub unholdable: Vec<Finding>,
}

/// One entry of the registry (or a `.env`) the walk met.
#[derive(Debug)]
struct Seen {
    path: PathBuf,
    root: PathBuf,
    kind: Kind,
    tool: &'static str,
    why: String,
    aside: bool,
    envrc: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Link,
    Other,
}

impl Kind {
    fn of(ft: &std::fs::FileType) -> Kind {
        if ft.is_symlink() {
            Kind::Link
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        }
    }
}

/// What the walk collects, entry by entry.
#[derive(Debug, Default)]
pub struct Collect {
    /// `OCSB_RW_TOOL_FILES`.
    rw: Vec<String>,
    dotenv: bool,
    seen: Vec<Seen>,
}

/// The name direnv's `load_dotenv` reads in every directory.
const DOTENV: &[u8] = b".env";

impl Collect {
    pub fn new(rw: Vec<String>, dotenv: bool) -> Collect {
        Collect { rw, dotenv, seen: Vec::new() }
    }

    /// One entry `name` of the directory `dir` (whose own name is `parent`, worked out once per
    /// directory by the caller) the walk of `root` met, of type `ft` (never following a link).
    /// Costs one look-up in the registry per entry.
    pub fn see(
        &mut self,
        root: &Path,
        dir: &Path,
        parent: Option<&OsStr>,
        name: &OsStr,
        ft: &std::fs::FileType,
    ) {
        let (tool, why, aside, envrc) = if let Some(t) = toolfiles::lookup(parent, name, &self.rw) {
            (
                t.tool,
                format!("a tool file of {}: {}", t.tool, t.why),
                t.trigger.moves_aside(),
                t.name == ".envrc",
            )
        } else if self.dotenv && name.as_encoded_bytes().eq_ignore_ascii_case(DOTENV) {
            (
                "direnv",
                "a tool file of direnv: your direnv config (`load_dotenv`) loads it when you cd into the \
                        directory"
                    .to_string(),
                true,
                false,
            )
        } else {
            return;
        };
        self.seen.push(Seen {
            path: dir.join(name),
            root: root.to_path_buf(),
            kind: Kind::of(ft),
            tool,
            why,
            aside,
            envrc,
        });
    }

    /// The walk is done: what it met, and what the `.envrc` files among it load, resolved in
    /// `roots` (the walked trees; a load outside them is nothing the sandbox can write).
    pub fn finish(self, roots: &[PathBuf]) -> ToolFiles {
        let mut out = ToolFiles { dotenv: self.dotenv, ..ToolFiles::default() };
        for s in &self.seen {
            out.held.push(Held {
                path: s.path.clone(),
                root: s.root.clone(),
                exists: true,
                link: s.kind == Kind::Link,
                dir: s.kind == Kind::Dir,
                load: false,
                aside: s.aside,
                why: s.why.clone(),
            });
            if s.kind == Kind::Link {
                out.unholdable.push(Finding {
                    path: s.path.clone(),
                    why: format!(
                        "a symbolic link where {} reads a tool file ({}): {} follows it, and a link cannot be \
                         held read-only in place; replace it with what it names, or name it in \
                         OCSB_RW_TOOL_FILES",
                        s.tool, s.why, s.tool
                    ),
                });
            }
            if s.kind == Kind::File
                && let Some(n) = hard_links(&s.path)
            {
                out.unholdable.push(Finding {
                    path: s.path.clone(),
                    why: format!(
                        "a tool file with {n} names (hard links): a read-only bind holds this name, and the \
                         agent could change the same file through another ({}); give it a name of its own \
                         (`cp -p F F.new && mv F.new F`), or name it in OCSB_RW_TOOL_FILES",
                        s.why
                    ),
                });
            }
            if s.envrc && s.kind == Kind::File {
                loads_of(&s.path, roots, &mut out);
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        out.held.retain(|h| seen.insert(h.path.clone()));
        let count = out.held.iter().filter(|h| h.exists && !h.link).count();
        if count > MAX_HELD
            && let Some(root) = roots.first()
        {
            out.unholdable.push(Finding {
                path: root.clone(),
                why: format!(
                    "{count} tool files in the writable trees, more than the {MAX_HELD} the sandbox holds \
                     read-only (each is a mount): leave the names writable with OCSB_RW_TOOL_FILES, or \
                     remove those you do not use (a dependency tree's editor settings)"
                ),
            });
        }
        out
    }
}

/// What the `.envrc` at `path` loads, added to `out`.
fn loads_of(path: &Path, roots: &[PathBuf], out: &mut ToolFiles) {
    let unreadable = |why: &str| Finding {
        path: path.to_path_buf(),
        why: format!(
            "an .envrc ocsb cannot read whole ({why}): what it has direnv load cannot be held read-only; \
             shorten or mend it, or let the agent write .envrc files and what they load \
             (OCSB_RW_TOOL_FILES=(.envrc))"
        ),
    };
    let Some(bytes) = checkouts::read_bytes(path, MAX_ENVRC + 1) else {
        return out.unholdable.push(unreadable("it cannot be opened as a file"));
    };
    if bytes.len() as u64 > MAX_ENVRC {
        return out.unholdable.push(unreadable("larger than 1 MiB"));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return out.unholdable.push(unreadable("not UTF-8"));
    };
    let loads = envrc::loads(&text);
    if loads.len() >= MAX_LOADS {
        return out.unholdable.push(unreadable("more paths than ocsb holds for one .envrc"));
    }
    let Some(dir) = path.parent() else { return };
    for l in loads {
        let p = checkouts::lexical(&dir.join(&l.path));
        // A bare word of a command (`sh setup.sh`): a load only where a file of that name is.
        if l.maybe && !p.symlink_metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Some(root) = roots.iter().filter(|r| p.starts_with(r)).max_by_key(|r| r.components().count())
        else {
            continue;
        };
        if &p == root {
            out.unholdable.push(Finding {
                path: path.to_path_buf(),
                why: format!(
                    "this .envrc has direnv use the whole writable tree {} ({}): it cannot be held \
                     read-only; change the .envrc, or let the agent write it (OCSB_RW_TOOL_FILES=(.envrc))",
                    root.display(),
                    l.what
                ),
            });
            continue;
        }
        let why = format!("direnv loads it for {} ({})", path.display(), l.what);
        match on_the_way(root, &p) {
            Way::Link(link) => out.unholdable.push(Finding {
                path: link,
                why: format!(
                    "a symbolic link on the way to {}, which {}: a link cannot be held read-only in place; \
                     replace it with what it names, or let the agent write .envrc files and what they load \
                     (OCSB_RW_TOOL_FILES=(.envrc))",
                    p.display(),
                    why
                ),
            }),
            // Through a file: nothing can be made there without replacing the file, an entry
            // of its directory, which the exact path's watch sees.
            Way::Missing | Way::ThroughFile => out.held.push(Held {
                path: p,
                root: root.clone(),
                exists: false,
                link: false,
                dir: l.dir,
                load: true,
                aside: true,
                why,
            }),
            // `source_env dir` reads `dir/.envrc`, which the registry holds already.
            Way::Dir if !l.dir => {}
            Way::Dir => out.held.push(Held {
                path: p,
                root: root.clone(),
                exists: true,
                link: false,
                dir: true,
                load: true,
                aside: true,
                why,
            }),
            Way::File => out.held.push(Held {
                path: p,
                root: root.clone(),
                exists: true,
                link: false,
                dir: false,
                load: true,
                aside: true,
                why,
            }),
        }
    }
}

/// What is on the way from `root` down to `p` (below it), never following a link.
enum Way {
    /// Everything exists; `p` is a directory.
    Dir,
    /// Everything exists; `p` is a file (or a special file).
    File,
    /// `p`, or a directory on the way, does not exist.
    Missing,
    /// A file stands where the way needs a directory.
    ThroughFile,
    /// A link on the way, or at `p`.
    Link(PathBuf),
}

fn on_the_way(root: &Path, p: &Path) -> Way {
    let Ok(rel) = p.strip_prefix(root) else { return Way::Missing };
    let mut cur = root.to_path_buf();
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        cur.push(part);
        let last = parts.peek().is_none();
        match std::fs::symlink_metadata(&cur) {
            Err(_) => return Way::Missing,
            Ok(m) if m.file_type().is_symlink() => return Way::Link(cur),
            Ok(m) if m.is_dir() => {
                if last {
                    return Way::Dir;
                }
            }
            Ok(_) if last => return Way::File,
            Ok(_) => return Way::ThroughFile,
        }
    }
    Way::Missing
}

impl ToolFiles {
    /// The read-only protections: every held path that exists, anchored at its root (the plan
    /// refuses a link on the way; the walk came through none).
    pub fn protections(&self) -> Vec<Protection> {
        self.held
            .iter()
            .filter(|h| h.exists && !h.link)
            .map(|h| Protection {
                path: h.path.clone(),
                access: Access::ReadOnly,
                dir: h.dir,
                placeholder: false,
                anchor: h.root.clone(),
                why: h.why.clone(),
            })
            .collect()
    }

    /// The paths `.envrc` files load, whether they exist or not: a commit that touches one is
    /// held by the import gate, and a new entry at one is moved aside by the watch.
    pub fn loads(&self) -> impl Iterator<Item = &Held> {
        self.held.iter().filter(|h| h.load)
    }

    /// The live watch's matcher for these: the registry, the loads, `.env` under `load_dotenv`.
    pub fn matcher(&self, rw: &[String]) -> crate::watch::Tools {
        let mut t = crate::watch::Tools::new(rw.to_vec(), self.dotenv);
        for h in self.loads() {
            t.load(h.path.clone(), &h.root, h.why.clone());
        }
        t
    }
}

/// Whether the user's direnv loads a `.env` in every directory by itself (`load_dotenv` in its
/// config): `$DIRENV_CONFIG`, else `$XDG_CONFIG_HOME/direnv`, else `~/.config/direnv`, file
/// `direnv.toml` (or the older `config.toml`). The user's own config: links are followed.
pub fn direnv_loads_dotenv(home: &Path) -> bool {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = var("DIRENV_CONFIG")
        .or_else(|| var("XDG_CONFIG_HOME").map(|x| x.join("direnv")))
        .unwrap_or_else(|| home.join(".config/direnv"));
    ["direnv.toml", "config.toml"].iter().any(|n| {
        use std::io::Read;
        let Ok(f) = std::fs::File::open(dir.join(n)) else { return false };
        let mut text = String::new();
        f.take(MAX_ENVRC).read_to_string(&mut text).is_ok() && envrc::loads_dotenv(&text)
    })
}

/// How many names the regular file at `path` has, when more than one (never following a link).
fn hard_links(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    path.symlink_metadata().ok().filter(|m| m.is_file() && m.nlink() > 1).map(|m| m.nlink())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Walks `root` as the audit does (no link followed, no `.git` entered) with a collector.
    fn collect(root: &Path, rw: &[&str], dotenv: bool) -> ToolFiles {
        let mut c = Collect::new(rw.iter().map(|s| s.to_string()).collect(), dotenv);
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let ft = e.file_type().unwrap();
                c.see(root, &d, d.file_name(), &e.file_name(), &ft);
                if ft.is_dir() && e.file_name() != ".git" {
                    stack.push(e.path());
                }
            }
        }
        c.finish(&[root.to_path_buf()])
    }

    fn held<'a>(t: &'a ToolFiles, p: &Path) -> &'a Held {
        t.held.iter().find(|h| h.path == p).unwrap_or_else(|| panic!("{} not held: {t:#?}", p.display()))
    }

    /// Registry entries at every depth are held read-only (directories whole); what an
    /// `.envrc` loads is held when it exists and watched when not; a load outside the walked
    /// trees is not the sandbox's to hold.
    #[test]
    fn the_walk_holds_tool_files_at_any_depth_and_what_envrcs_load() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap().join("p");
        for d in ["a/b/c/.vscode", "node_modules/x/.idea", "sub/bin", ".git/x"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("a/b/c/rust-toolchain.toml"), "[toolchain]\npath = \"/x\"\n").unwrap();
        fs::write(root.join(".git/x/.envrc"), "").unwrap();
        fs::write(root.join("sub/.env"), "A=1\n").unwrap();
        fs::write(
            root.join("sub/.envrc"),
            "dotenv\nsource_env_if_exists .envrc.local\nPATH_add bin\nPATH_add ../../outside/bin\n",
        )
        .unwrap();
        let got = collect(&root, &[], false);
        assert!(got.unholdable.is_empty(), "{:?}", got.unholdable);
        for (p, dir, aside) in [
            ("a/b/c/.vscode", true, false),
            ("node_modules/x/.idea", true, false),
            ("a/b/c/rust-toolchain.toml", false, true),
            ("sub/.envrc", false, true),
        ] {
            let h = held(&got, &root.join(p));
            assert_eq!((h.exists, h.dir, h.load, h.aside), (true, dir, false, aside), "{p}");
        }
        assert!(held(&got, &root.join("a/b/c/.vscode")).why.contains("VS Code"));
        for (p, exists, dir) in
            [("sub/.env", true, false), ("sub/.envrc.local", false, false), ("sub/bin", true, true)]
        {
            let h = held(&got, &root.join(p));
            assert_eq!((h.exists, h.dir, h.load), (exists, dir, true), "{p}");
            assert!(h.why.contains("sub/.envrc") && h.why.contains("direnv"), "{}", h.why);
        }
        assert!(!got.held.iter().any(|h| h.path.starts_with(root.join(".git"))), "entered .git");
        assert!(!got.held.iter().any(|h| !h.path.starts_with(&root)), "{got:#?}");
        let protected: Vec<PathBuf> = got.protections().into_iter().map(|p| p.path).collect();
        assert!(
            protected.contains(&root.join("sub/bin")) && !protected.contains(&root.join("sub/.envrc.local"))
        );
        assert!(got.protections().iter().all(|p| p.access == Access::ReadOnly && p.anchor == root));
        // Named in OCSB_RW_TOOL_FILES: neither held nor read.
        let got = collect(&root, &[".envrc", ".vscode"], false);
        assert!(!got.held.iter().any(|h| h.load || h.path.ends_with(".vscode")), "{got:#?}");
        assert!(got.held.iter().any(|h| h.path.ends_with(".idea")));
        // direnv's `load_dotenv`: every `.env`.
        fs::write(root.join("a/.env"), "B=2\n").unwrap();
        let got = collect(&root, &[".envrc"], true);
        assert!(held(&got, &root.join("a/.env")).aside);
    }

    /// The walk's cost on a tree without tool files: one look-up in the registry per entry,
    /// measured over 100,000 entries of ordinary names (a large project's tree).
    #[test]
    fn the_collector_costs_a_tree_without_tool_files_next_to_nothing() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), "").unwrap();
        let ft = std::fs::symlink_metadata(t.path().join("f")).unwrap().file_type();
        let names: Vec<std::ffi::OsString> = (0..100_000)
            .map(|i| {
                format!(
                    "{}{i}.{}",
                    ["index", "src", "README", ".eslintrc", "mod"][i % 5],
                    ["js", "rs", "md", "json", ""][i % 5]
                )
                .into()
            })
            .collect();
        let dir = Path::new("/p/node_modules/pkg/lib");
        let mut c = Collect::new(vec![], true);
        let began = std::time::Instant::now();
        for n in &names {
            c.see(Path::new("/p"), dir, dir.file_name(), n, &ft);
        }
        let took = began.elapsed();
        assert!(c.finish(&[PathBuf::from("/p")]) == ToolFiles { dotenv: true, ..ToolFiles::default() });
        eprintln!("registry look-ups for 100,000 entries: {took:?}");
        assert!(took < std::time::Duration::from_millis(500), "{took:?}");
    }

    /// Up to [`MAX_HELD`] tool files are held; one more refuses the start, saying how many and
    /// what to do, rather than leaving any unprotected.
    #[test]
    fn more_tool_files_than_the_bound_refuse_the_start() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        for i in 0..MAX_HELD {
            fs::create_dir_all(root.join(format!("node_modules/p{i}/.vscode"))).unwrap();
        }
        let got = collect(&root, &[], false);
        assert!(got.unholdable.is_empty() && got.protections().len() == MAX_HELD);
        fs::create_dir_all(root.join("node_modules/last/.idea")).unwrap();
        let got = collect(&root, &[], false);
        assert!(
            matches!(&got.unholdable[..], [f] if f.why.contains(&format!("{} tool files", MAX_HELD + 1))
                && f.why.contains("OCSB_RW_TOOL_FILES")),
            "{:?}",
            got.unholdable
        );
        assert!(collect(&root, &[".idea"], false).unholdable.is_empty());
    }

    /// What cannot be held in place refuses the start, named: a link where a tool reads, an
    /// `.envrc` too large to read, a load that is a whole tree or lies through a link.
    #[test]
    fn what_cannot_be_held_in_place_is_named() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap().join("p");
        for d in ["l", "big", "whole", "via/real"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("/etc/hostname", root.join("l/.envrc")).unwrap();
        fs::write(root.join("big/.envrc"), "#".repeat(MAX_ENVRC as usize + 1)).unwrap();
        fs::write(root.join("whole/.envrc"), "PATH_add ..\n").unwrap();
        std::os::unix::fs::symlink("real", root.join("via/link")).unwrap();
        fs::write(root.join("via/.envrc"), "source_env link/x.sh\n").unwrap();
        let got = collect(&root, &[], false);
        let named = |p: &str, says: &str| {
            assert!(
                got.unholdable.iter().any(|f| f.path == root.join(p) && f.why.contains(says)),
                "{p}: {:#?}",
                got.unholdable
            )
        };
        named("l/.envrc", "symbolic link");
        named("big/.envrc", "larger than 1 MiB");
        named("whole/.envrc", "whole writable tree");
        named("via/link", "on the way");
        assert_eq!(got.unholdable.len(), 4, "{:#?}", got.unholdable);
    }
}
