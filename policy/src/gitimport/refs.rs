//! Object ids, ref names and the two ref files (a loose ref, `packed-refs`) as git writes them.
//!
//! *Why strict*: the files come from a git directory the agent can write. What git itself would
//! write is read; anything else (upper-case hex, a missing newline, an unknown line, a name git
//! would refuse) is an error naming the file and line, so a crafted file is never half-understood.

use std::fmt;

use crate::{Error, Location, Result};

/// The longest ref name taken, in bytes. Git has no hard limit; names beyond this are not made by
/// people and would only make the gate's work and messages unbounded.
pub const MAX_REF_NAME: usize = 1024;

/// The hash of a repository (`extensions.objectFormat`), given by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectFormat {
    Sha1,
    Sha256,
}

impl ObjectFormat {
    /// The length of an object id in hex digits.
    pub fn hex_len(self) -> usize {
        match self {
            ObjectFormat::Sha1 => 40,
            ObjectFormat::Sha256 => 64,
        }
    }
}

/// An object id in lower-case hex, of the length its format gives (git writes no other).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Oid(String);

impl Oid {
    /// The id in `text`: exactly [`ObjectFormat::hex_len`] lower-case hex digits.
    pub fn parse(format: ObjectFormat, text: &[u8]) -> Option<Oid> {
        let ok =
            text.len() == format.hex_len() && text.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| Oid(text.iter().map(|&b| char::from(b)).collect()))
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// All zeros: git's "no object", never a ref's value.
    pub fn is_null(&self) -> bool {
        self.0.bytes().all(|b| b == b'0')
    }

    /// The first 12 digits, for messages.
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a ref is, for the gate: only branches and tags are ever imported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    /// `refs/heads/...`
    Branch,
    /// `refs/tags/...`
    Tag,
    /// Anything else under `refs/` (remote-tracking refs, notes, stash, a tool's refs).
    Other,
}

/// A full ref name under `refs/` that `git check-ref-format` accepts, UTF-8, at most
/// [`MAX_REF_NAME`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RefName(String);

impl RefName {
    /// `name` if git accepts it as a ref name and it starts with `refs/`; the error says which
    /// rule it breaks. The rules are `git check-ref-format`'s (without `--allow-onelevel`,
    /// `--refspec-pattern` or `--normalize`): no component empty or starting with `.` or ending
    /// with `.lock`; no `..`, `@{`, ASCII control character, space or any of `~^:?*[\`; not `@`;
    /// no trailing `/` or `.`. A name that is not UTF-8 is refused too (git allows it; no branch
    /// a person makes needs it, and messages could not show it faithfully).
    pub fn parse(name: &[u8]) -> Result<RefName> {
        let bad = |why: &str| {
            Error::input(Location::new(shown(name), 0, 0), format!("not a ref name git takes: {why}"))
        };
        if name.len() > MAX_REF_NAME {
            return Err(bad(&format!("longer than {MAX_REF_NAME} bytes")));
        }
        let Ok(text) = std::str::from_utf8(name) else { return Err(bad("not UTF-8")) };
        if let Some(why) = check_ref_format(text) {
            return Err(bad(why));
        }
        if !text.starts_with("refs/") {
            return Err(bad("not under refs/"));
        }
        Ok(RefName(text.to_string()))
    }

    /// A name made of parts already known to be valid (a valid prefix and the valid rest of a
    /// ref name): valid by construction, so only the length limit of [`RefName::parse`] may not
    /// hold, which git does not have.
    pub(super) fn joined(prefix: &str, rest: &str) -> RefName {
        RefName(format!("{prefix}{rest}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn kind(&self) -> RefKind {
        if self.0.starts_with("refs/heads/") {
            RefKind::Branch
        } else if self.0.starts_with("refs/tags/") {
            RefKind::Tag
        } else {
            RefKind::Other
        }
    }

    /// The name without its leading `refs/` (`heads/main`).
    pub fn without_refs(&self) -> &str {
        self.0.strip_prefix("refs/").unwrap_or(&self.0)
    }
}

impl fmt::Display for RefName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which of git's ref-name rules `name` breaks, if any.
fn check_ref_format(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("empty");
    }
    if name == "@" {
        return Some("\"@\" alone");
    }
    if name.contains("@{") {
        return Some("contains \"@{\"");
    }
    if name.contains("..") {
        return Some("contains \"..\"");
    }
    if let Some(c) = name.chars().find(|&c| c.is_ascii_control() || " ~^:?*[\\".contains(c)) {
        return Some(if c == ' ' {
            "contains a space"
        } else if c.is_ascii_control() {
            "contains a control character"
        } else {
            "contains one of ~^:?*[\\"
        });
    }
    if name.ends_with('/') {
        return Some("ends with \"/\"");
    }
    if name.ends_with('.') {
        return Some("ends with \".\"");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return Some("an empty component (\"//\" or a leading \"/\")");
        }
        if component.starts_with('.') {
            return Some("a component starts with \".\"");
        }
        if component.ends_with(".lock") {
            return Some("a component ends with \".lock\"");
        }
    }
    None
}

/// What a loose ref file (or `HEAD`) holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefValue {
    /// `<hex>\n`
    Oid(Oid),
    /// `ref: refs/...\n`
    Symbolic(RefName),
}

/// `bytes` as shown in a message: valid UTF-8 with control and invisible characters escaped.
pub(crate) fn shown(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            let invisible = matches!(c as u32, 0x200b..=0x200f | 0x202a..=0x202e | 0x2066..=0x206f | 0xfeff);
            if c.is_control() || invisible || c == '\\' {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn too_big(file: &str, len: usize, limit: usize) -> Option<Error> {
    (len > limit)
        .then(|| Error::input(Location::new(file, 0, 0), format!("{len} bytes, more than the {limit} read")))
}

/// The value of a loose ref file or `HEAD`, `file` naming it in errors: exactly `<hex>\n` (lower
/// case, of `format`'s length, not all zeros) or `ref: <name>\n`, at most `limit` bytes.
pub fn parse_ref_file(file: &str, bytes: &[u8], format: ObjectFormat, limit: usize) -> Result<RefValue> {
    if let Some(e) = too_big(file, bytes.len(), limit) {
        return Err(e);
    }
    let at = || Location::new(file, 1, 0);
    let Some(line) = bytes.strip_suffix(b"\n") else {
        return Err(Error::input(at(), "no newline at the end (git always writes one)"));
    };
    if line.contains(&b'\n') {
        return Err(Error::input(Location::new(file, 2, 0), "a second line (a ref file has one)"));
    }
    if let Some(target) = line.strip_prefix(b"ref: ") {
        return RefName::parse(target)
            .map(RefValue::Symbolic)
            .map_err(|e| Error::input(at(), format!("a symbolic ref to {e}")));
    }
    oid_at(line, format, at()).map(RefValue::Oid)
}

fn oid_at(text: &[u8], format: ObjectFormat, at: Location) -> Result<Oid> {
    match Oid::parse(format, text) {
        Some(oid) if oid.is_null() => Err(Error::input(at, "the null object id")),
        Some(oid) => Ok(oid),
        None => Err(Error::input(
            at,
            format!("\"{}\" is not {} lower-case hex digits", shown(text), format.hex_len()),
        )),
    }
}

/// The refs of a `packed-refs` file, `file` naming it in errors, at most `limit` bytes: an optional
/// first line `# pack-refs with: <traits>`, then `<hex> <name>` lines, each optionally followed by
/// one `^<hex>` line (the object a tag object points to, which git writes after a ref to one;
/// read and dropped). Every line ends with a newline; a name twice is an error.
pub fn parse_packed_refs(
    file: &str,
    bytes: &[u8],
    format: ObjectFormat,
    limit: usize,
) -> Result<Vec<(RefName, Oid)>> {
    if let Some(e) = too_big(file, bytes.len(), limit) {
        return Err(e);
    }
    let mut refs: Vec<(RefName, Oid)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut peelable = false;
    let mut rest = bytes;
    let mut n: u32 = 0;
    while !rest.is_empty() {
        n = n.saturating_add(1);
        let at = || Location::new(file, n, 0);
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return Err(Error::input(at(), "no newline at the end (git always writes one)"));
        };
        let (line, next) = rest.split_at(end);
        rest = next.get(1..).unwrap_or_default();
        if n == 1 && line.starts_with(b"#") {
            if !line.starts_with(b"# pack-refs with: ") {
                return Err(Error::input(at(), "a header other than \"# pack-refs with: ...\""));
            }
            continue;
        }
        if let Some(peeled) = line.strip_prefix(b"^") {
            if !peelable {
                return Err(Error::input(at(), "a \"^\" line not right after a ref"));
            }
            oid_at(peeled, format, at())?;
            peelable = false;
            continue;
        }
        let hex = format.hex_len();
        let (Some(id), Some(b' '), Some(name)) = (line.get(..hex), line.get(hex), line.get(hex + 1..)) else {
            return Err(Error::input(at(), format!("not \"<id> <ref name>\": \"{}\"", shown(line))));
        };
        let oid = oid_at(id, format, at())?;
        let name = RefName::parse(name).map_err(|e| Error::input(at(), e.to_string()))?;
        if !seen.insert(name.clone()) {
            return Err(Error::input(at(), format!("{name} a second time")));
        }
        refs.push((name, oid));
        peelable = true;
    }
    Ok(refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "89abcdef0123456789abcdef0123456789abcdef";
    const S1: ObjectFormat = ObjectFormat::Sha1;

    fn name(s: &str) -> RefName {
        RefName::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn ref_names_follow_check_ref_format() {
        for good in [
            "refs/heads/main",
            "refs/heads/feature/x-1",
            "refs/tags/v1.0",
            "refs/heads/a.b",
            "refs/heads/@",
            "refs/heads/x@y",
            "refs/heads/ü",
            "refs/heads/a.lockx",
            "refs/remotes/origin/HEAD",
        ] {
            assert!(RefName::parse(good.as_bytes()).is_ok(), "{good}");
        }
        for bad in [
            "",
            "@",
            "refs",
            "main",
            "HEAD",
            "refs/heads/.hidden",
            "refs/heads/x/.y",
            "refs/heads/a..b",
            "refs/heads/x.lock",
            "refs/heads/x.lock/y",
            "refs/heads/a b",
            "refs/heads/a\tb",
            "refs/heads/a\x7fb",
            "refs/heads/a~1",
            "refs/heads/a^",
            "refs/heads/a:b",
            "refs/heads/a?",
            "refs/heads/a*",
            "refs/heads/a[b",
            "refs/heads/a\\b",
            "refs/heads/a@{1}",
            "refs/heads//a",
            "/refs/heads/a",
            "refs/heads/a/",
            "refs/heads/a.",
            "refs/heads/",
        ] {
            assert!(RefName::parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(RefName::parse(b"refs/heads/\xff").is_err());
        let long = format!("refs/heads/{}", "a".repeat(MAX_REF_NAME - 11));
        assert!(RefName::parse(long.as_bytes()).is_ok());
        assert!(RefName::parse(format!("{long}b").as_bytes()).is_err());
        assert_eq!(name("refs/heads/x").kind(), RefKind::Branch);
        assert_eq!(name("refs/tags/x").kind(), RefKind::Tag);
        assert_eq!(name("refs/remotes/o/x").kind(), RefKind::Other);
        assert_eq!(name("refs/headsx/y").kind(), RefKind::Other);
        let e = RefName::parse(b"refs/heads/a\nb").unwrap_err().to_string();
        assert!(e.contains("refs/heads/a\\nb") && e.contains("control"), "{e}");
    }

    #[test]
    fn oids_are_lower_case_hex_of_the_formats_length() {
        assert_eq!(Oid::parse(S1, A.as_bytes()).unwrap().as_str(), A);
        assert!(Oid::parse(S1, A.to_uppercase().as_bytes()).is_none());
        assert!(Oid::parse(S1, &A.as_bytes()[1..]).is_none());
        assert!(Oid::parse(ObjectFormat::Sha256, A.as_bytes()).is_none());
        let long = format!("{A}{}", &B[..24]);
        assert!(Oid::parse(ObjectFormat::Sha256, long.as_bytes()).is_some());
        assert!(Oid::parse(S1, format!("{}g", &A[..39]).as_bytes()).is_none());
        assert_eq!(Oid::parse(S1, A.as_bytes()).unwrap().short(), "0123456789ab");
    }

    #[test]
    fn a_ref_file_is_an_id_or_a_symbolic_ref() {
        let v = parse_ref_file("HEAD", format!("{A}\n").as_bytes(), S1, 100).unwrap();
        assert_eq!(v, RefValue::Oid(Oid::parse(S1, A.as_bytes()).unwrap()));
        let v = parse_ref_file("HEAD", b"ref: refs/heads/main\n", S1, 100).unwrap();
        assert_eq!(v, RefValue::Symbolic(name("refs/heads/main")));
        for bad in [
            A.to_string(),
            format!("{A}\n\n"),
            format!("{A} \n"),
            format!("{}\n", A.to_uppercase()),
            format!("{}\n", "0".repeat(40)),
            "ref: refs/heads/main".to_string(),
            "ref:refs/heads/main\n".to_string(),
            "ref: HEAD\n".to_string(),
            "ref: refs/heads/a..b\n".to_string(),
            "\n".to_string(),
            String::new(),
        ] {
            let e = parse_ref_file("refs/heads/x", bad.as_bytes(), S1, 100);
            assert!(e.is_err(), "{bad:?}");
            assert!(e.unwrap_err().to_string().starts_with("refs/heads/x:"), "{bad:?}");
        }
        let e = parse_ref_file("HEAD", format!("{A}\n").as_bytes(), S1, 40).unwrap_err();
        assert!(e.to_string().contains("more than the 40"), "{e}");
    }

    #[test]
    fn packed_refs_as_git_writes_them() {
        let text = format!(
            "# pack-refs with: peeled fully-peeled sorted \n{A} refs/heads/main\n{B} refs/tags/v1\n^{A}\n{B} refs/remotes/origin/main\n"
        );
        let refs = parse_packed_refs("packed-refs", text.as_bytes(), S1, 1 << 20).unwrap();
        let names: Vec<&str> = refs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["refs/heads/main", "refs/tags/v1", "refs/remotes/origin/main"]);
        assert_eq!(refs[1].1.as_str(), B);
        assert_eq!(parse_packed_refs("p", b"", S1, 10).unwrap(), vec![]);
        assert_eq!(parse_packed_refs("p", b"# pack-refs with: \n", S1, 100).unwrap(), vec![]);
    }

    #[test]
    fn packed_refs_errors_name_the_line() {
        let cases = [
            (format!("{A} refs/heads/main\n# pack-refs with: x\n"), 2),
            (format!("# comment\n{A} refs/heads/main\n"), 1),
            (format!("^{A}\n"), 1),
            (format!("{A} refs/heads/a\n^{B}\n^{B}\n"), 3),
            (format!("{A} refs/heads/a\n{A}  refs/heads/b\n"), 2),
            (format!("{A} refs/heads/a\n{A} refs/heads/a\n"), 2),
            (format!("{A} refs/heads/a\n{A} refs/heads/b"), 2),
            (format!("{A} refs/heads/a\r\n"), 1),
            (format!("{A}\n"), 1),
            (format!("{} refs/heads/a\n", "0".repeat(40)), 1),
            (format!("{A} refs/heads/a\n\n"), 2),
            ("short refs/heads/a\n".to_string(), 1),
            (format!("{A} HEAD\n"), 1),
        ];
        for (text, line) in cases {
            let e = parse_packed_refs("packed-refs", text.as_bytes(), S1, 1 << 20).unwrap_err();
            assert_eq!(e.location().unwrap().line, line, "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("packed-refs:{line}: ")), "{e}");
        }
        let big = format!("{A} refs/heads/a\n");
        assert!(parse_packed_refs("p", big.as_bytes(), S1, big.len() - 1).is_err());
        assert!(parse_packed_refs("p", big.as_bytes(), S1, big.len()).is_ok());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_ref_file("f", &bytes, S1, 150);
            let _ = parse_packed_refs("f", &bytes, ObjectFormat::Sha256, 150);
            let _ = RefName::parse(&bytes);
            let _ = shown(&bytes);
        }

        #[test]
        fn packed_refs_lines_never_panic(lines in proptest::collection::vec(
            prop_oneof![
                Just(format!("{A} refs/heads/a")),
                Just(format!("^{B}")),
                Just("# pack-refs with: peeled".to_string()),
                "[ -~]{0,50}",
                Just(format!("{A} refs/tags/{}", "x")),
            ], 0..8)) {
            let text = lines.join("\n");
            let _ = parse_packed_refs("f", text.as_bytes(), S1, 1000);
            let _ = parse_packed_refs("f", format!("{text}\n").as_bytes(), S1, 1000);
        }

        #[test]
        fn every_accepted_name_is_under_refs_and_bounded(s in "refs/[ -~]{0,30}") {
            if let Ok(n) = RefName::parse(s.as_bytes()) {
                prop_assert!(n.as_str().starts_with("refs/") && !n.as_str().contains(".."));
                prop_assert!(!n.as_str().contains(' ') && !n.as_str().ends_with('/'));
            }
        }
    }
}
