//! The tree paths git treats specially, and the ones the gate always holds.
//!
//! A tree entry named `.git` (or `..`) would, once checked out, make git read a repository or
//! write outside the checkout; git refuses such trees (`verify_path`, `fsck`) in every spelling a
//! file system may take as the same name: any case (case-insensitive file systems), with Unicode
//! characters HFS+ ignores in between, and the NTFS spellings (trailing spaces and dots, an
//! alternate data stream `:…`, the 8.3 short name `GIT~1`, a backslash as separator). The same
//! spellings are checked for the names the gate holds (`.gitmodules`, ocsb's settings), so that a
//! commit cannot slip one past under another spelling.
//!
//! *Why a list of bad names*: this is the closed set of names git gives a meaning to inside a tree;
//! every other path is ordinary content.

use std::fmt;

/// How a path is special to git.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// An empty component (`a//b`, a leading or trailing `/`).
    Empty,
    /// A component `.`.
    Dot,
    /// A component `..` (also between backslashes, which NTFS takes as separators).
    DotDot,
    /// `.git`, in any case.
    DotGit,
    /// `.git` once the characters HFS+ ignores are dropped (`.g\u{200c}it`).
    DotGitHfs,
    /// A name NTFS takes as `.git`: `.git` followed by spaces and dots or a `:` stream,
    /// `git~1`, or `.git` between backslashes.
    DotGitNtfs,
    /// A symbolic link named `.gitmodules`, `.gitattributes`, `.gitignore` or `.mailmap` (in any
    /// of the spellings above): git reads these from the tree and refuses them as links.
    LinkedGitFile,
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Special::Empty => "an empty path component",
            Special::Dot => "a \".\" component",
            Special::DotDot => "a \"..\" component",
            Special::DotGit => "a \".git\" component",
            Special::DotGitHfs => "a name macOS (HFS+) reads as \".git\"",
            Special::DotGitNtfs => "a name Windows (NTFS) reads as \".git\"",
            Special::LinkedGitFile => "a symbolic link in place of a file git reads from the tree",
        })
    }
}

/// A dot-name and its other spellings.
struct DotName {
    /// Without the dot, lower case.
    name: &'static str,
    /// The NTFS 8.3 short name's stem (`gitmod` of `GITMOD~1`) and the highest `~N` taken.
    short: &'static str,
    max_n: u8,
    /// The stem NTFS falls back to once `~1`..`~4` are taken (a hash of the name), if known.
    hashed: Option<&'static str>,
}

const GIT: DotName = DotName { name: "git", short: "git", max_n: 1, hashed: None };
const GITMODULES: DotName = DotName { name: "gitmodules", short: "gitmod", max_n: 4, hashed: Some("gi7eba") };
const GITATTRIBUTES: DotName =
    DotName { name: "gitattributes", short: "gitatt", max_n: 4, hashed: Some("gi7d29") };
const GITIGNORE: DotName = DotName { name: "gitignore", short: "gitign", max_n: 4, hashed: Some("gi250a") };
const MAILMAP: DotName = DotName { name: "mailmap", short: "mailma", max_n: 4, hashed: Some("maba30") };
const OCSB_SETTINGS: DotName = DotName { name: "opencode-sandbox", short: "openco", max_n: 4, hashed: None };
const SAFETY_NET: DotName = DotName { name: "cc-safety-net", short: "cc-saf", max_n: 4, hashed: None };

/// The first way `path` (a tree path as git lists it, `/`-separated) is special to git, if any.
pub fn special_path(path: &[u8]) -> Option<Special> {
    path.split(|&b| b == b'/').find_map(special_component)
}

/// [`special_path`], and for a symbolic link (`mode` 0o120000) a last component git reads from
/// the tree (`.gitmodules`, `.gitattributes`, `.gitignore`, `.mailmap`, in any spelling).
pub fn special_entry(path: &[u8], mode: u32) -> Option<Special> {
    special_path(path).or_else(|| {
        let last = path.rsplit(|&b| b == b'/').next().unwrap_or_default();
        let read = [&GITMODULES, &GITATTRIBUTES, &GITIGNORE, &MAILMAP];
        (mode == 0o120000 && read.iter().any(|d| any_spelling(last, d))).then_some(Special::LinkedGitFile)
    })
}

fn special_component(c: &[u8]) -> Option<Special> {
    match c {
        b"" => return Some(Special::Empty),
        b"." => return Some(Special::Dot),
        b".." => return Some(Special::DotDot),
        _ => {}
    }
    if c.eq_ignore_ascii_case(b".git") {
        return Some(Special::DotGit);
    }
    if hfs_spelling(c, &GIT) {
        return Some(Special::DotGitHfs);
    }
    for piece in c.split(|&b| b == b'\\') {
        match piece {
            b"." if c != b"." => return Some(Special::Dot),
            b".." => return Some(Special::DotDot),
            _ if ntfs_spelling(piece, &GIT) => return Some(Special::DotGitNtfs),
            _ => {}
        }
    }
    None
}

/// Whether `path` is one the gate always holds, whatever the caller adds: any component that is
/// `.gitmodules` (git reads submodule URLs and paths from it), `.opencode-sandbox` (ocsb's
/// settings for the project) or `.cc-safety-net` (the agent's command guard's settings), in any
/// spelling, or a path under one. *Why any component, not only the top*: a project may be a
/// subdirectory of its repository, and a nested checkout has its own top.
pub fn always_held(path: &[u8]) -> bool {
    path.split(|&b| b == b'/').any(|c| {
        c.split(|&b| b == b'\\')
            .chain(std::iter::once(c))
            .any(|p| [&GITMODULES, &OCSB_SETTINGS, &SAFETY_NET].iter().any(|d| any_spelling(p, d)))
    })
}

/// Whether `component` is a spelling of `.gitmodules` (exact, case, HFS+ or NTFS).
pub fn is_dotgitmodules(component: &[u8]) -> bool {
    any_spelling(component, &GITMODULES)
}

fn any_spelling(c: &[u8], d: &DotName) -> bool {
    hfs_spelling(c, d) || ntfs_spelling(c, d)
}

/// The characters HFS+ leaves out when it compares names.
fn hfs_ignored(c: char) -> bool {
    matches!(c as u32, 0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff)
}

/// `.name` once HFS+'s ignored characters are dropped and ASCII case is folded. Bytes that are not
/// UTF-8 are never the name (HFS+ stores them escaped).
fn hfs_spelling(c: &[u8], d: &DotName) -> bool {
    let Ok(text) = std::str::from_utf8(c) else { return false };
    let mut left = text.chars().filter(|&ch| !hfs_ignored(ch));
    let mut want = std::iter::once('.').chain(d.name.chars());
    loop {
        match (left.next(), want.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a.to_ascii_lowercase() == b => {}
            _ => return false,
        }
    }
}

/// A name NTFS takes for `.name` (no backslash in `c`): `.name`, or the short name `STEM~N`
/// (N up to `max_n`), or the hashed short name (a prefix of the hashed stem of up to six
/// characters, `~`, a digit 1-9 and digits, eight characters in all), in any ASCII case, followed
/// by nothing but spaces and dots up to the end or an alternate data stream (`:…`).
fn ntfs_spelling(c: &[u8], d: &DotName) -> bool {
    let tail_ok = |tail: &[u8]| {
        let until_stream = tail.split(|&b| b == b':').next().unwrap_or_default();
        until_stream.iter().all(|&b| b == b' ' || b == b'.')
    };
    let lower = c.to_ascii_lowercase();
    let dotted = lower.strip_prefix(b".").and_then(|r| r.strip_prefix(d.name.as_bytes()));
    if dotted.is_some_and(tail_ok) {
        return true;
    }
    let short = lower.strip_prefix(d.short.as_bytes()).and_then(|r| r.strip_prefix(b"~"));
    if let Some((&n, tail)) = short.and_then(<[u8]>::split_first)
        && (b'1'..=b'0' + d.max_n).contains(&n)
        && tail_ok(tail)
    {
        return true;
    }
    let Some(hashed) = d.hashed else { return false };
    let (Some(head), Some(tail)) = (lower.get(..8), lower.get(8..)) else { return false };
    let Some(tilde) = head.iter().position(|&b| b == b'~') else { return false };
    let (stem, number) = head.split_at(tilde);
    let number = number.get(1..).unwrap_or_default();
    tilde <= 6
        && hashed.as_bytes().starts_with(stem)
        && number.first().is_some_and(|b| (b'1'..=b'9').contains(b))
        && number.iter().all(u8::is_ascii_digit)
        && tail_ok(tail)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The spellings of `.gitmodules` that git's own tests (t0060, "match .gitmodules") expect to
    /// match, and those they expect not to.
    pub(crate) fn gitmodules_vectors() -> (Vec<String>, Vec<String>) {
        let mut yes: Vec<String> = vec![".gitmodules".into(), ".git\u{200c}modules".into()];
        for stem in [".gitmodules", ".Gitmodules"] {
            for tail in ["", " ", ".", "  ", ". ", " .", "..", "   ", ".  ", " . ", "  ."] {
                yes.push(format!("{stem}{tail}"));
            }
        }
        yes.push(".gitmoduleS".into());
        for s in ["GITMOD~1", "gitmod~1", "GITMOD~2", "gitmod~3", "GITMOD~4"] {
            yes.push(s.into());
        }
        for s in [
            "GITMOD~1 ",
            "gitmod~2.",
            "GITMOD~3  ",
            "gitmod~4. ",
            "GITMOD~1 .",
            "gitmod~2   ",
            "GITMOD~3.  ",
            "gitmod~4 . ",
        ] {
            yes.push(s.into());
        }
        for s in [
            "GI7EBA~1",
            "gi7eba~9",
            "GI7EB~10",
            "GI7EB~11",
            "GI7EB~99",
            "GI7E~100",
            "GI7E~101",
            "GI7E~999",
            "~1000000",
            "~9999999",
            ".gitmodules:$DATA",
            "gitmod~4 . :$DATA",
        ] {
            yes.push(s.into());
        }
        let no = [
            ".gitmodules x",
            ".gitmodules .x",
            " .gitmodules",
            "..gitmodules",
            "gitmodules",
            ".gitmodule",
            ".gitmodules x ",
            "GI7EBA~",
            "GI7EBA~0",
            "GI7EBA~~1",
            "GI7EBA~X",
            "Gx7EBA~1",
            "GI7EBX~1",
            "GI7EB~1",
            "GI7EB~01",
            "GI7EB~1X",
            ".gitmodules,:$DATA",
        ];
        (yes, no.iter().map(|s| s.to_string()).collect())
    }

    /// The `.git` spellings git's tests (t1014, "reject ... at end of path") refuse, as the last
    /// component or a directory.
    pub(crate) fn dotgit_vectors() -> Vec<&'static str> {
        vec![
            ".",
            "..",
            ".git",
            ".GIT",
            "\u{200c}.Git",
            ".gI\u{200c}T",
            ".GiT\u{200c}",
            "git~1",
            ".git. ",
            ".\\\\.GIT\\\\foobar",
            ".git\\\\foobar",
            ".git...:alternate-stream",
        ]
    }

    #[test]
    fn gits_own_dotgitmodules_cases() {
        let (yes, no) = gitmodules_vectors();
        for s in &yes {
            assert!(is_dotgitmodules(s.as_bytes()), "{s:?} is .gitmodules");
            assert!(always_held(format!("a/{s}").as_bytes()), "{s:?}");
        }
        for s in &no {
            assert!(!is_dotgitmodules(s.as_bytes()), "{s:?} is not .gitmodules");
        }
    }

    #[test]
    fn gits_own_other_dotfile_cases() {
        for (d, names) in [
            (
                &GITATTRIBUTES,
                [
                    ".gitattributes",
                    ".git\u{200c}attributes",
                    ".Gitattributes",
                    ".gitattributeS",
                    "GITATT~1",
                    "GI7D29~1",
                ],
            ),
            (
                &GITIGNORE,
                [".gitignore", ".git\u{200c}ignore", ".Gitignore", ".gitignorE", "GITIGN~1", "GI250A~1"],
            ),
            (&MAILMAP, [".mailmap", ".mail\u{200c}map", ".Mailmap", ".mailmaP", "MAILMA~1", "MABA30~1"]),
        ] {
            for n in names {
                assert!(any_spelling(n.as_bytes(), d), "{n:?}");
                assert_eq!(special_entry(n.as_bytes(), 0o120000), Some(Special::LinkedGitFile), "{n:?}");
                assert_eq!(special_entry(n.as_bytes(), 0o100644), None, "{n:?}");
            }
        }
        assert_eq!(special_entry(b"d/.gitmodules", 0o120000), Some(Special::LinkedGitFile));
        assert_eq!(special_entry(b".gitmodules/d", 0o120000), None);
    }

    #[test]
    fn gits_own_dotgit_cases_at_the_end_and_as_a_directory() {
        for s in dotgit_vectors() {
            // The test script's backslashes are halved by the shell before git sees them.
            let s = s.replace("\\\\", "\\");
            assert!(special_path(format!("a/{s}").as_bytes()).is_some(), "{s:?} at the end");
            assert!(special_path(format!("{s}/file").as_bytes()).is_some(), "{s:?} as a directory");
            assert!(special_entry(s.as_bytes(), 0o100644).is_some(), "{s:?}");
        }
        assert_eq!(special_path(b".git"), Some(Special::DotGit));
        assert_eq!(special_path(b"x/.GiT/y"), Some(Special::DotGit));
        assert_eq!(special_path(".g\u{feff}it".as_bytes()), Some(Special::DotGitHfs));
        assert_eq!(special_path(b"GIT~1"), Some(Special::DotGitNtfs));
        assert_eq!(special_path(b".git::$INDEX_ALLOCATION"), Some(Special::DotGitNtfs));
        assert_eq!(special_path(b"a\\.git"), Some(Special::DotGitNtfs));
        assert_eq!(special_path(b"a\\..\\b"), Some(Special::DotDot));
        assert_eq!(special_path(b".\\a"), Some(Special::Dot));
        assert_eq!(special_path(b""), Some(Special::Empty));
        assert_eq!(special_path(b"a//b"), Some(Special::Empty));
        assert_eq!(special_path(b"a/"), Some(Special::Empty));
        assert_eq!(special_path(b"a/./b"), Some(Special::Dot));
        assert_eq!(special_path(b"../b"), Some(Special::DotDot));
    }

    #[test]
    fn ordinary_paths_are_not_special() {
        for ok in [
            "src/main.rs",
            ".github/workflows/ci.yml",
            ".gitignore",
            ".gitmodules",
            ".git-blame-ignore-revs",
            ".gitx",
            "git",
            "x.git",
            ".git x",
            "git~2",
            "git~1x",
            "...",
            ".g\u{200b}it",
            "a\\b",
            "\u{e9}.git",
        ] {
            assert_eq!(special_path(ok.as_bytes()), None, "{ok:?}");
        }
        assert_eq!(special_path(b".g\xffit"), None);
        assert_eq!(special_path(b".git\xff"), None);
    }

    #[test]
    fn held_paths_in_every_spelling() {
        for held in [
            ".gitmodules",
            "sub/.gitmodules",
            ".opencode-sandbox/sandbox.conf",
            ".opencode-sandbox/local/egress.conf",
            "nested/.opencode-sandbox/x",
            ".OpenCode-Sandbox/sandbox.conf",
            ".opencode-sandbox./sandbox.conf",
            ".opencode-sandbox::$DATA",
            "OPENCO~1/sandbox.conf",
            ".open\u{200d}code-sandbox/sandbox.conf",
            ".cc-safety-net/config.json",
            "CC-SAF~2/config.json",
            "x\\.gitmodules",
        ] {
            assert!(always_held(held.as_bytes()), "{held:?}");
        }
        for free in [
            "src/a.rs",
            ".opencode-sandboxes/x",
            "opencode-sandbox/x",
            ".cc-safety-nets",
            "OPENCO~5/x",
            ".gitmodules.bak",
            "gitmodules",
        ] {
            assert!(!always_held(free.as_bytes()), "{free:?}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40), mode in any::<u32>()) {
            let _ = special_path(&bytes);
            let _ = special_entry(&bytes, mode);
            let _ = always_held(&bytes);
            let _ = is_dotgitmodules(&bytes);
        }

        #[test]
        fn every_case_and_ignorable_of_dotgit_is_special(
            mask in any::<u8>(),
            at in 0usize..5,
            ign in prop_oneof![Just('\u{200c}'), Just('\u{200f}'), Just('\u{202a}'), Just('\u{206f}'), Just('\u{feff}')],
            tail in "[ .]{0,3}",
        ) {
            let base: String = ".git".chars().enumerate()
                .map(|(i, c)| if mask & (1 << i) != 0 { c.to_ascii_uppercase() } else { c }).collect();
            prop_assert!(special_path(base.as_bytes()).is_some());
            let mut hfs = base.clone();
            hfs.insert(at.min(hfs.len()), ign);
            let inside = format!("d/{hfs}/f");
            prop_assert!(special_path(inside.as_bytes()).is_some(), "{:?}", hfs);
            let ntfs = format!("{base}{tail}");
            prop_assert!(special_path(ntfs.as_bytes()).is_some(), "{:?}", ntfs);
            let modules = format!(".gitmodules{tail}");
            prop_assert!(always_held(modules.as_bytes()), "{:?}", modules);
        }
    }
}
