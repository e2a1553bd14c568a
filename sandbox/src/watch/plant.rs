//! What a new entry of a watched tree is: the matchers the watch asks.
//!
//! A matcher sees one new directory entry (its directory, name and type, and the types of its
//! siblings) and says whether it is a plant, what it is and why it matters, which entry to act
//! on and how. [`Git`] knows git's own names; the registry of tool files plugs in beside it as
//! another [`Matcher`] (a `Vec` of matchers is one: the first that matches decides).

use std::ffi::{OsStr, OsString};
use std::path::Path;

/// The type of an entry as `lstat` gives it: a link is never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Link,
    Other,
}

impl Kind {
    /// The type of `st_mode`.
    pub fn of_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Link,
            _ => Kind::Other,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Dir => "directory",
            Kind::File => "file",
            Kind::Link => "symbolic link",
            Kind::Other => "special file",
        }
    }
}

/// A new entry of a watched directory, as a matcher sees it.
pub struct Entry<'a> {
    /// The directory it is in (for messages, and for matchers that care where).
    pub dir: &'a Path,
    pub name: &'a OsStr,
    pub kind: Kind,
    /// The type of another entry of the same directory (never following a link), `None` when
    /// there is none: looked up relative to the directory's descriptor, not by path.
    pub sibling: &'a dyn Fn(&OsStr) -> Option<Kind>,
}

/// What the watch does with a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Rename the subject to `<name>.ocsb-planted-<secs>[-n]` in its directory, and report.
    MoveAside,
    /// Only report it.
    Report,
}

/// What kind of plant a match is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plant {
    /// A `.git` of any type (directory, `gitdir:` file, link): git takes the directory it is in
    /// for a repository of its own and obeys that repository's config and hooks there.
    GitEntry,
    /// A directory that became a git directory as git tells one (`HEAD` with `objects` and
    /// `refs`, or `HEAD` with `commondir`): git run inside it, or pointed at it, obeys its config.
    GitDirLayout,
    /// A file a tool acts on, named by a registry matcher (`what` names the tool's file).
    Tool { what: String },
}

/// A matcher's verdict on an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    pub plant: Plant,
    /// The entry of the same directory to act on: the new entry itself, or the `HEAD` of a
    /// directory laid out as a git directory (without it, git no longer takes the directory
    /// for one, and the directory, which may be the user's source, stays where it is).
    pub subject: OsString,
    /// What it is and why it matters, for the user.
    pub why: String,
    pub action: Action,
}

/// Decides what a new directory entry is.
pub trait Matcher: Send {
    fn judge(&self, entry: &Entry<'_>) -> Option<Match>;
}

impl Matcher for Vec<Box<dyn Matcher>> {
    fn judge(&self, entry: &Entry<'_>) -> Option<Match> {
        self.iter().find_map(|m| m.judge(entry))
    }
}

/// git's own names: a `.git` entry and a directory laid out as a git directory.
///
/// These are a closed set, so naming them is enough: git finds a repository only through an
/// entry named `.git` (compared without regard to ASCII case, since a case-folding directory,
/// which its owner may make, answers git's lookup of `.git` with a `.GIT`) or a directory
/// that holds the names [`Layout`] lists.
pub struct Git;

impl Matcher for Git {
    fn judge(&self, e: &Entry<'_>) -> Option<Match> {
        if e.name.as_encoded_bytes().eq_ignore_ascii_case(b".git") {
            return Some(Match {
                plant: Plant::GitEntry,
                subject: e.name.to_os_string(),
                why: format!(
                    "a .git {} appeared in {}: git run there would take it for a repository and obey \
                     its config and hooks",
                    e.kind.noun(),
                    e.dir.display()
                ),
                action: Action::MoveAside,
            });
        }
        if !Layout::names(e.name) {
            return None;
        }
        let mut layout = Layout::default();
        for n in Layout::NAMES {
            if (e.sibling)(OsStr::new(n)).is_some() {
                layout.see(OsStr::new(n));
            }
        }
        layout.is_git_dir().then(|| Match {
            plant: Plant::GitDirLayout,
            subject: OsString::from("HEAD"),
            why: format!(
                "{} became a git directory (HEAD with objects and refs, or with commondir): git run \
                 in it or pointed at it would obey its config and hooks",
                e.dir.display()
            ),
            action: Action::MoveAside,
        })
    }
}

/// The names of a directory that make it a git directory to git (`is_git_directory`): a
/// `HEAD`, and `objects` and `refs` or a `commondir` that names them elsewhere. Of any type:
/// git takes a `HEAD` that is a link to a ref, and follows links to `objects` and `refs`.
#[derive(Default)]
pub struct Layout {
    head: bool,
    objects: bool,
    refs: bool,
    commondir: bool,
}

impl Layout {
    pub const NAMES: [&'static str; 4] = ["HEAD", "objects", "refs", "commondir"];

    /// Whether `name` is one of the layout's names: an entry of that name may have made its
    /// directory a git directory.
    pub fn names(name: &OsStr) -> bool {
        Self::NAMES.iter().any(|n| name == *n)
    }

    pub fn see(&mut self, name: &OsStr) {
        match name.to_str() {
            Some("HEAD") => self.head = true,
            Some("objects") => self.objects = true,
            Some("refs") => self.refs = true,
            Some("commondir") => self.commondir = true,
            _ => {}
        }
    }

    pub fn is_git_dir(&self) -> bool {
        self.head && ((self.objects && self.refs) || self.commondir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(name: &str, kind: Kind, siblings: &[&str]) -> Option<Match> {
        let sib = |n: &OsStr| siblings.iter().any(|s| n == *s).then_some(Kind::File);
        Git.judge(&Entry { dir: Path::new("/p/d"), name: OsStr::new(name), kind, sibling: &sib })
    }

    #[test]
    fn git_entries_of_every_type_and_layouts_match_and_look_alikes_do_not() {
        for kind in [Kind::Dir, Kind::File, Kind::Link, Kind::Other] {
            for name in [".git", ".GIT", ".Git"] {
                let m = judge(name, kind, &[]).unwrap();
                assert_eq!(
                    (m.plant, m.subject.to_str(), m.action),
                    (Plant::GitEntry, Some(name), Action::MoveAside)
                );
            }
        }
        for name in
            [".github", ".gitignore", ".gitattributes", ".git-blame-ignore-revs", "git", ".git~", "x.git"]
        {
            assert_eq!(judge(name, Kind::Dir, &[]), None, "{name}");
        }
        for (new, siblings) in [
            ("HEAD", &["HEAD", "objects", "refs"][..]),
            ("refs", &["HEAD", "objects", "refs"]),
            ("commondir", &["HEAD", "commondir"]),
        ] {
            let m = judge(new, Kind::Dir, siblings).unwrap();
            assert_eq!((m.plant, m.subject.to_str()), (Plant::GitDirLayout, Some("HEAD")));
        }
        for (new, siblings) in [
            ("HEAD", &["HEAD", "objects"][..]),
            ("objects", &["objects", "refs"]),
            ("refs", &["HEAD", "refs", "config"]),
            ("config", &["HEAD", "objects", "refs", "config"]),
        ] {
            assert_eq!(judge(new, Kind::Dir, siblings), None, "{new} {siblings:?}");
        }
    }

    #[test]
    fn a_list_of_matchers_takes_the_first_match() {
        struct Tool;
        impl Matcher for Tool {
            fn judge(&self, e: &Entry<'_>) -> Option<Match> {
                (e.name == ".envrc").then(|| Match {
                    plant: Plant::Tool { what: "direnv".into() },
                    subject: e.name.into(),
                    why: "direnv runs it".into(),
                    action: Action::Report,
                })
            }
        }
        let all: Vec<Box<dyn Matcher>> = vec![Box::new(Git), Box::new(Tool)];
        let sib = |_: &OsStr| None;
        let e =
            |name| Entry { dir: Path::new("/p"), name: OsStr::new(name), kind: Kind::File, sibling: &sib };
        assert_eq!(all.judge(&e(".git")).unwrap().plant, Plant::GitEntry);
        assert_eq!(all.judge(&e(".envrc")).unwrap().action, Action::Report);
        assert_eq!(all.judge(&e("main.rs")), None);
    }
}
