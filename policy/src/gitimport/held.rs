//! Where held updates wait in the user's repository, and how the user takes one.
//!
//! A held update is kept as `refs/ocsb/held/<session>/<name without refs/>`: outside
//! `refs/heads/` and `refs/tags/`, so no branch or tag of the user's moves and `git log --all`
//! still shows the work, and per session, so two sessions never overwrite each other's.

use std::fmt;

use super::refs::{Oid, RefKind, RefName};
use crate::{Error, Location, Result};

const HELD: &str = "refs/ocsb/held/";

/// A session's id as it appears in ref names: `[0-9A-Za-z._-]{1,64}`, not starting with `.`, with
/// no `..` and not ending with `.lock` (so that every name made with it is a ref name git takes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Session(String);

impl Session {
    pub fn parse(id: &str) -> Result<Session> {
        let why = if id.is_empty() || id.len() > 64 {
            Some("not 1 to 64 characters")
        } else if !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            Some("a character other than letters, digits, '.', '_' and '-'")
        } else if id.starts_with('.') || id.contains("..") || id.ends_with(".lock") || id.ends_with('.') {
            Some("starts with '.', holds \"..\" or ends with '.' or \".lock\"")
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::input(
                Location::new(super::refs::shown(id.as_bytes()), 0, 0),
                format!("not a session id: {why}"),
            )),
            None => Ok(Session(id.to_string())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where `session`'s held update of `name` waits: `refs/ocsb/held/<session>/<name minus refs/>`.
pub fn held_ref(session: &Session, name: &RefName) -> String {
    format!("{HELD}{session}/{}", name.without_refs())
}

/// The session and ref name of a held ref made by [`held_ref`]; `None` for any other name.
pub fn held_of(refname: &str) -> Option<(Session, RefName)> {
    let (session, rest) = refname.strip_prefix(HELD)?.split_once('/')?;
    let session = Session::parse(session).ok()?;
    let name = RefName::parse(format!("refs/{rest}").as_bytes()).ok()?;
    Some((session, name))
}

/// What taking a held update does to the user's ref. Never a forced move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accept {
    /// The user has no such ref: it is made with the held value.
    Create,
    /// The user's ref already has the held value: only the held ref goes.
    Already,
    /// The held value descends from the user's branch: the branch moves forward to it.
    FastForward,
    /// The user's ref went elsewhere: the held value becomes this new ref beside it
    /// (`refs/heads/ocsb/<session>/<branch>` or `refs/tags/ocsb/<session>/<tag>`), for the user to
    /// merge or compare.
    Aside(RefName),
    /// Not a branch or a tag: never taken (it stays held for the user to look at).
    NotImportable,
}

/// How to take `session`'s held update of `name` to `held`, the user's ref being at `user`;
/// `held_descends_from_user` says whether `user` is an ancestor of `held` (the caller asks git).
pub fn accept(
    session: &Session,
    name: &RefName,
    held: &Oid,
    user: Option<&Oid>,
    held_descends_from_user: bool,
) -> Accept {
    let (prefix, short) = match name.kind() {
        RefKind::Branch => ("refs/heads/", name.as_str().strip_prefix("refs/heads/")),
        RefKind::Tag => ("refs/tags/", name.as_str().strip_prefix("refs/tags/")),
        RefKind::Other => return Accept::NotImportable,
    };
    let Some(short) = short else { return Accept::NotImportable };
    match user {
        None => Accept::Create,
        Some(u) if u == held => Accept::Already,
        Some(_) if name.kind() == RefKind::Branch && held_descends_from_user => Accept::FastForward,
        Some(_) => Accept::Aside(RefName::joined(prefix, &format!("ocsb/{session}/{short}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitimport::refs::ObjectFormat;
    use proptest::prelude::*;

    fn oid(c: char) -> Oid {
        Oid::parse(ObjectFormat::Sha1, c.to_string().repeat(40).as_bytes()).unwrap()
    }

    fn name(s: &str) -> RefName {
        RefName::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn session_ids() {
        for ok in ["1", "abc-DEF_0.9", "20261207T111900-42", &"a".repeat(64)] {
            assert!(Session::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".a", "a/b", "a b", "a..b", "a.lock", "a.", "é", &"a".repeat(65), "a\n"] {
            assert!(Session::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn held_refs_round_trip() {
        let s = Session::parse("s-1").unwrap();
        for n in ["refs/heads/main", "refs/heads/feat/x", "refs/tags/v1.0", "refs/remotes/origin/y"] {
            let h = held_ref(&s, &name(n));
            assert!(h.starts_with("refs/ocsb/held/s-1/"), "{h}");
            assert!(RefName::parse(h.as_bytes()).is_ok(), "{h}");
            assert_eq!(held_of(&h), Some((s.clone(), name(n))));
        }
        assert_eq!(held_ref(&s, &name("refs/heads/main")), "refs/ocsb/held/s-1/heads/main");
        for other in [
            "refs/heads/main",
            "refs/ocsb/held/s-1",
            "refs/ocsb/held/.x/heads/m",
            "refs/ocsb/held/s/heads/a..b",
            "refs/ocsb/heldx/s/heads/m",
        ] {
            assert_eq!(held_of(other), None, "{other}");
        }
    }

    #[test]
    fn accepting_never_forces_a_ref() {
        let s = Session::parse("s1").unwrap();
        let (h, u) = (oid('a'), oid('b'));
        let br = name("refs/heads/feat/x");
        let tag = name("refs/tags/v1");
        assert_eq!(accept(&s, &br, &h, None, false), Accept::Create);
        assert_eq!(accept(&s, &br, &h, Some(&h), true), Accept::Already);
        assert_eq!(accept(&s, &br, &h, Some(&u), true), Accept::FastForward);
        assert_eq!(accept(&s, &br, &h, Some(&u), false), Accept::Aside(name("refs/heads/ocsb/s1/feat/x")));
        assert_eq!(accept(&s, &tag, &h, None, false), Accept::Create);
        assert_eq!(accept(&s, &tag, &h, Some(&u), true), Accept::Aside(name("refs/tags/ocsb/s1/v1")));
        assert_eq!(accept(&s, &name("refs/notes/commits"), &h, None, true), Accept::NotImportable);
    }

    proptest! {
        #[test]
        fn aside_names_are_ref_names(branch in "[a-z][a-z0-9./-]{0,20}", id in "[0-9A-Za-z_-]{1,10}") {
            let s = Session::parse(&id).unwrap();
            if let Ok(n) = RefName::parse(format!("refs/heads/{branch}").as_bytes()) {
                if let Accept::Aside(a) = accept(&s, &n, &oid('a'), Some(&oid('b')), false) {
                    prop_assert!(RefName::parse(a.as_str().as_bytes()).is_ok(), "{}", a);
                }
                prop_assert_eq!(held_of(&held_ref(&s, &n)), Some((s.clone(), n.clone())));
            }
        }

        #[test]
        fn held_of_never_panics(s in "\\PC{0,40}") {
            let _ = held_of(&s);
            let _ = held_of(&format!("refs/ocsb/held/{s}"));
            let _ = Session::parse(&s);
        }
    }
}
