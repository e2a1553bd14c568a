//! The verdict on one ref update the agent made: import it, hold it for the user, or skip it.

use std::fmt;

use super::paths::{Special, always_held, special_entry};
use super::refs::{Oid, RefKind, RefName, shown};

/// One ref as the gate sees it: its name and three values (`None`: no such ref).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub name: RefName,
    /// The agent's value when the session started (copied from the user's then).
    pub start: Option<Oid>,
    /// The agent's value now; `None`: the agent deleted it.
    pub agent: Option<Oid>,
    /// The user's value now.
    pub user: Option<Oid>,
}

/// One path a commit changes, as `git diff-tree -r --raw` lists it (mode 0: absent on that side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub old_mode: u32,
    pub new_mode: u32,
}

/// The changes of one commit the update would bring that the user does not have, against each of
/// its parents (`git diff-tree -r --no-renames --raw -m --root`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitChanges {
    pub commit: Oid,
    pub changes: Vec<Change>,
}

/// Which tree paths are held read-only in the sandbox (the hooks path's targets, tool files):
/// a commit that changes one is held. [`always_held`] is added by [`judge`] whatever this says.
pub trait HeldPaths {
    fn held(&self, path: &[u8]) -> bool;
}

impl<F: Fn(&[u8]) -> bool> HeldPaths for F {
    fn held(&self, path: &[u8]) -> bool {
        self(path)
    }
}

/// Why an update is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipWhy {
    /// The user's ref already has the agent's value.
    Same,
    /// The agent did not change the ref (whatever the user did with theirs meanwhile stands).
    Unchanged,
    /// The agent deleted the ref. *Why never propagated*: a deletion brings no work, only loses
    /// the user's; branches the agent no longer wants are the user's to delete, on the host.
    Deleted,
}

/// Why an update is held for the user instead of imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The user's ref is no longer where the agent's started (the compare-and-swap failed): the
    /// user moved, made or deleted it meanwhile. Never overwritten.
    UserMoved { expected: Option<Oid>, found: Option<Oid> },
    /// The user has this tag with another value; a tag is never moved.
    TagMoved { found: Oid },
    /// Not a branch or a tag (remote-tracking refs, notes, a tool's refs): never imported.
    NotImportable,
    /// A commit changes a path held read-only in the sandbox.
    HeldPath { commit: Oid, path: Vec<u8> },
    /// A commit adds or moves a submodule (a gitlink, mode 0o160000).
    Gitlink { commit: Oid, path: Vec<u8> },
    /// A commit writes a path git treats specially.
    Special { commit: Oid, path: Vec<u8>, what: Special },
    /// A commit gives a path a mode git itself never writes.
    Mode { commit: Oid, path: Vec<u8>, mode: u32 },
}

fn value(v: &Option<Oid>) -> String {
    v.as_ref().map_or_else(|| "absent".to_string(), |o| o.short().to_string())
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::UserMoved { expected, found } => write!(
                f,
                "your ref changed while the agent worked (it was {} when the session started, it is {} now); it is left as you have it",
                value(expected),
                value(found)
            ),
            Reason::TagMoved { found } => {
                write!(f, "you already have this tag, at {}; a tag is never moved", found.short())
            }
            Reason::NotImportable => {
                f.write_str("only branches (refs/heads/) and tags (refs/tags/) are taken from the sandbox")
            }
            Reason::HeldPath { commit, path } => write!(
                f,
                "commit {} changes {}, which is read-only in the sandbox (hooks, tool settings, .gitmodules)",
                commit.short(),
                shown(path)
            ),
            Reason::Gitlink { commit, path } => write!(
                f,
                "commit {} points the submodule {} at a commit (submodules are changed on the host only)",
                commit.short(),
                shown(path)
            ),
            Reason::Special { commit, path, what } => {
                write!(
                    f,
                    "commit {} writes {}: {what}, which git itself refuses",
                    commit.short(),
                    shown(path)
                )
            }
            Reason::Mode { commit, path, mode } => write!(
                f,
                "commit {} gives {} the mode {mode:06o}, which git never writes",
                commit.short(),
                shown(path)
            ),
        }
    }
}

/// The verdict on one update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Skip(SkipWhy),
    Import,
    Hold(Vec<Reason>),
}

/// The modes git writes in a tree: a file, an executable, a symbolic link, a directory, a
/// gitlink. Anything else came from a hand-made tree.
const GIT_MODES: [u32; 5] = [0o100644, 0o100755, 0o120000, 0o040000, 0o160000];

/// The verdict on `update`, with `commits` the changes of each commit it would bring that the
/// user does not have, and `held` the paths held read-only (to which [`always_held`] is added).
/// Every reason to hold is listed, not only the first, so the user sees all at once.
pub fn judge(update: &RefUpdate, commits: &[CommitChanges], held: &dyn HeldPaths) -> Verdict {
    let Some(agent) = &update.agent else { return Verdict::Skip(SkipWhy::Deleted) };
    if update.user.as_ref() == Some(agent) {
        return Verdict::Skip(SkipWhy::Same);
    }
    if update.start.as_ref() == Some(agent) {
        return Verdict::Skip(SkipWhy::Unchanged);
    }
    let mut reasons = Vec::new();
    match (update.name.kind(), &update.user) {
        (RefKind::Other, _) => reasons.push(Reason::NotImportable),
        (RefKind::Tag, Some(found)) => reasons.push(Reason::TagMoved { found: found.clone() }),
        _ if update.user != update.start => {
            reasons.push(Reason::UserMoved { expected: update.start.clone(), found: update.user.clone() })
        }
        _ => {}
    }
    for c in commits {
        for ch in &c.changes {
            let (commit, path) = (c.commit.clone(), ch.path.clone());
            if always_held(&ch.path) || held.held(&ch.path) {
                reasons.push(Reason::HeldPath { commit, path });
                continue;
            }
            if ch.new_mode == 0 {
                continue;
            }
            if ch.new_mode == 0o160000 {
                reasons.push(Reason::Gitlink { commit, path });
            } else if !GIT_MODES.contains(&ch.new_mode) {
                reasons.push(Reason::Mode { commit, path, mode: ch.new_mode });
            } else if let Some(what) = special_entry(&ch.path, ch.new_mode) {
                reasons.push(Reason::Special { commit, path, what });
            }
        }
    }
    if reasons.is_empty() { Verdict::Import } else { Verdict::Hold(reasons) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitimport::refs::ObjectFormat;
    use proptest::prelude::*;

    fn oid(c: char) -> Oid {
        Oid::parse(ObjectFormat::Sha1, c.to_string().repeat(40).as_bytes()).unwrap()
    }

    fn upd(name: &str, start: Option<char>, agent: Option<char>, user: Option<char>) -> RefUpdate {
        RefUpdate {
            name: RefName::parse(name.as_bytes()).unwrap(),
            start: start.map(oid),
            agent: agent.map(oid),
            user: user.map(oid),
        }
    }

    fn commit(changes: &[(&str, u32, u32)]) -> CommitChanges {
        CommitChanges {
            commit: oid('c'),
            changes: changes
                .iter()
                .map(|(p, o, n)| Change { path: p.as_bytes().to_vec(), old_mode: *o, new_mode: *n })
                .collect(),
        }
    }

    fn nothing_held(_: &[u8]) -> bool {
        false
    }

    #[test]
    fn skips_say_why() {
        let j = |u| judge(&u, &[], &nothing_held);
        assert_eq!(j(upd("refs/heads/m", Some('a'), None, Some('a'))), Verdict::Skip(SkipWhy::Deleted));
        assert_eq!(j(upd("refs/heads/m", Some('a'), Some('b'), Some('b'))), Verdict::Skip(SkipWhy::Same));
        assert_eq!(
            j(upd("refs/heads/m", Some('a'), Some('a'), Some('d'))),
            Verdict::Skip(SkipWhy::Unchanged)
        );
        assert_eq!(j(upd("refs/heads/m", Some('a'), Some('a'), None)), Verdict::Skip(SkipWhy::Unchanged));
        assert_eq!(j(upd("refs/notes/x", None, Some('b'), Some('b'))), Verdict::Skip(SkipWhy::Same));
    }

    #[test]
    fn a_clean_branch_or_new_tag_is_imported() {
        let clean =
            [commit(&[("src/a.rs", 0o100644, 0o100644), ("bin/x", 0, 0o100755), ("old", 0o100644, 0)])];
        assert_eq!(
            judge(&upd("refs/heads/m", Some('a'), Some('b'), Some('a')), &clean, &nothing_held),
            Verdict::Import
        );
        assert_eq!(
            judge(&upd("refs/heads/new", None, Some('b'), None), &clean, &nothing_held),
            Verdict::Import
        );
        assert_eq!(judge(&upd("refs/tags/v2", None, Some('b'), None), &[], &nothing_held), Verdict::Import);
        let link = [commit(&[("l", 0, 0o120000), ("d", 0, 0o040000)])];
        assert_eq!(judge(&upd("refs/heads/m", None, Some('b'), None), &link, &nothing_held), Verdict::Import);
    }

    #[test]
    fn the_compare_and_swap_holds_what_the_user_changed_meanwhile() {
        let hold = |u| judge(&u, &[], &nothing_held);
        assert_eq!(
            hold(upd("refs/heads/m", Some('a'), Some('b'), Some('d'))),
            Verdict::Hold(vec![Reason::UserMoved { expected: Some(oid('a')), found: Some(oid('d')) }])
        );
        assert_eq!(
            hold(upd("refs/heads/m", None, Some('b'), Some('d'))),
            Verdict::Hold(vec![Reason::UserMoved { expected: None, found: Some(oid('d')) }]),
            "both made the same branch"
        );
        assert_eq!(
            hold(upd("refs/heads/m", Some('a'), Some('b'), None)),
            Verdict::Hold(vec![Reason::UserMoved { expected: Some(oid('a')), found: None }]),
            "the user deleted it"
        );
        assert_eq!(
            hold(upd("refs/tags/v1", Some('a'), Some('b'), Some('a'))),
            Verdict::Hold(vec![Reason::TagMoved { found: oid('a') }])
        );
        assert_eq!(
            hold(upd("refs/tags/v1", None, Some('b'), Some('d'))),
            Verdict::Hold(vec![Reason::TagMoved { found: oid('d') }])
        );
        assert_eq!(
            hold(upd("refs/remotes/o/m", Some('a'), Some('b'), Some('a'))),
            Verdict::Hold(vec![Reason::NotImportable])
        );
        assert_eq!(
            hold(upd("refs/stash", None, Some('b'), None)),
            Verdict::Hold(vec![Reason::NotImportable])
        );
    }

    #[test]
    fn what_the_commits_bring_is_checked() {
        let held_hook = |p: &[u8]| p == b"tools/hooks/pre-commit";
        let commits = [
            commit(&[("ok.rs", 0o100644, 0o100644), ("tools/hooks/pre-commit", 0o100755, 0o100755)]),
            commit(&[
                (".gitmodules", 0, 0o100644),
                (".opencode-sandbox/sandbox.conf", 0o100644, 0),
                ("vendor/lib", 0, 0o160000),
                ("x/.GIT/config", 0, 0o100644),
                (".gitattributes", 0, 0o120000),
                ("weird", 0, 0o100664),
                ("gone/.git", 0o100644, 0),
            ]),
        ];
        let Verdict::Hold(reasons) =
            judge(&upd("refs/heads/m", Some('a'), Some('b'), Some('a')), &commits, &held_hook)
        else {
            panic!("held")
        };
        let c = oid('c');
        let p = |s: &str| s.as_bytes().to_vec();
        assert_eq!(
            reasons,
            vec![
                Reason::HeldPath { commit: c.clone(), path: p("tools/hooks/pre-commit") },
                Reason::HeldPath { commit: c.clone(), path: p(".gitmodules") },
                Reason::HeldPath { commit: c.clone(), path: p(".opencode-sandbox/sandbox.conf") },
                Reason::Gitlink { commit: c.clone(), path: p("vendor/lib") },
                Reason::Special { commit: c.clone(), path: p("x/.GIT/config"), what: Special::DotGit },
                Reason::Special {
                    commit: c.clone(),
                    path: p(".gitattributes"),
                    what: Special::LinkedGitFile
                },
                Reason::Mode { commit: c.clone(), path: p("weird"), mode: 0o100664 },
            ]
        );
    }

    #[test]
    fn each_reason_is_one_readable_line() {
        let c = oid('c');
        let reasons = [
            Reason::UserMoved { expected: Some(oid('a')), found: None },
            Reason::TagMoved { found: oid('d') },
            Reason::NotImportable,
            Reason::HeldPath { commit: c.clone(), path: b"a\nb\x1b[31m".to_vec() },
            Reason::Gitlink { commit: c.clone(), path: b"v".to_vec() },
            Reason::Special {
                commit: c.clone(),
                path: ".g\u{200c}it".as_bytes().to_vec(),
                what: Special::DotGitHfs,
            },
            Reason::Mode { commit: c, path: b"m\xff".to_vec(), mode: 0o100664 },
        ];
        for r in &reasons {
            let line = r.to_string();
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        assert!(reasons[0].to_string().contains("aaaaaaaaaaaa when the session started, it is absent now"));
        assert!(reasons[3].to_string().contains("a\\nb\\u{1b}[31m"), "{}", reasons[3]);
        assert!(reasons[5].to_string().contains(".g\\u{200c}it"), "{}", reasons[5]);
        assert!(reasons[6].to_string().contains("m\\xff the mode 100664"), "{}", reasons[6]);
    }

    proptest! {
        #[test]
        fn an_import_never_moves_a_ref_the_user_changed(
            s in proptest::option::of(0u8..3), a in proptest::option::of(0u8..3), u in proptest::option::of(0u8..3),
            tag in any::<bool>(),
        ) {
            let o = |v: Option<u8>| v.map(|n| oid(char::from(b'a' + n)));
            let name = if tag { "refs/tags/t" } else { "refs/heads/b" };
            let update = RefUpdate { name: RefName::parse(name.as_bytes()).unwrap(), start: o(s), agent: o(a), user: o(u) };
            if judge(&update, &[], &nothing_held) == Verdict::Import {
                prop_assert!(update.agent.is_some());
                prop_assert_eq!(&update.user, &update.start);
                if tag { prop_assert!(update.user.is_none()); }
            }
        }
    }
}
