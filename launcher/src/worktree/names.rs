//! The pure part of `ocsb wt`: which branch names are accepted, how a slug is derived from a
//! branch name, and where a worktree's directory goes. No I/O and no processes here, so every
//! rule is unit-tested.
//!
//! Why so strict: the branch name and the slug reach `git` command lines, hook environments and a
//! path on disk. A name starting with `-` would be read as an option, `..` or `/` in a directory
//! name would leave the worktrees directory, and control characters end up in terminals and shell
//! scripts. `git check-ref-format --branch` still runs afterwards for git's own rules; the checks
//! here exist so that the dangerous cases are refused with a clear message before any process is
//! started, whatever the installed git accepts.

use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;

/// A name or setting that `ocsb wt` refuses: what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub what: String,
    pub fix: String,
}

impl Refusal {
    fn new(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Refusal { what: what.into(), fix: fix.into() }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n  fix: {}", self.what, self.fix)
    }
}

impl From<Refusal> for crate::error::Error {
    fn from(r: Refusal) -> Self {
        crate::error::Error::failed(r.what, r.fix)
    }
}

/// Shows a user-supplied name with control characters escaped, so an error message can never
/// carry terminal escape sequences.
pub fn shown(s: &str) -> String {
    format!("{s:?}")
}

/// The checks `ocsb wt add` makes on a new branch name before `git check-ref-format --branch`.
pub fn check_branch(branch: &str) -> Result<(), Refusal> {
    let fix = "choose a branch name of letters, digits, '-', '_', '.' and '/', e.g. feature/cart-42";
    let bad = |why: &str| Err(Refusal::new(format!("branch name {} {why}", shown(branch)), fix));
    if branch.is_empty() {
        return Err(Refusal::new("the branch name is empty", fix));
    }
    if branch.starts_with('-') {
        return bad("starts with '-' (it would be read as an option)");
    }
    if branch.chars().any(char::is_control) {
        return bad("contains a control character");
    }
    if branch.chars().any(char::is_whitespace) {
        return bad("contains whitespace");
    }
    if branch.contains("..") {
        return bad("contains '..'");
    }
    if branch.contains("@{") {
        return bad("contains '@{' (git reads it as a reflog expression)");
    }
    if branch.contains('\\') {
        return bad("contains a backslash");
    }
    Ok(())
}

/// The checks on a revision given as `OCSB_WT_BASE`: it is passed to `git rev-parse` after
/// `--end-of-options`, but a value starting with `-` is refused anyway because it is a mistake.
pub fn check_base(base: &str) -> Result<(), Refusal> {
    let fix =
        "set OCSB_WT_BASE to a branch, tag or commit (e.g. main), or leave it empty for the current HEAD";
    if base.starts_with('-') || base.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(Refusal::new(format!("OCSB_WT_BASE={} is not a revision", shown(base)), fix));
    }
    Ok(())
}

/// Characters allowed in a slug and in a worktree directory name: portable file-name characters
/// that need no quoting in a shell, a URL or a Docker Compose project name.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// The reason `name` is not a safe single directory-name component, if it is not.
fn component_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name == "." || name.contains("..") {
        Some("contains '..' or is '.'")
    } else if name.starts_with('-') {
        Some("starts with '-'")
    } else if !name.chars().all(is_name_char) {
        Some("may only contain ASCII letters, digits, '-', '_' and '.'")
    } else if name.len() > 200 {
        Some("is longer than 200 characters")
    } else {
        None
    }
}

/// A slug: one directory-name component that also does not start with `.`.
pub fn check_slug(slug: &str) -> Result<(), Refusal> {
    let problem = component_problem(slug).or(slug.starts_with('.').then_some("starts with '.'"));
    match problem {
        None => Ok(()),
        Some(why) => Err(Refusal::new(
            format!("the worktree slug {} {why}", shown(slug)),
            "change OCSB_WT_SLUG_REGEX so that its capture group matches only letters, digits, \
             '-', '_' and '.' (e.g. 'SHOP-([0-9]+)'), or choose another branch name",
        )),
    }
}

/// `OCSB_WT_PREFIX`: may be empty; otherwise the same characters as a slug.
pub fn check_prefix(prefix: &str) -> Result<(), Refusal> {
    if prefix.is_empty() {
        return Ok(());
    }
    match component_problem(prefix) {
        None => Ok(()),
        Some(why) => Err(Refusal::new(
            format!("OCSB_WT_PREFIX={} {why}", shown(prefix)),
            "set OCSB_WT_PREFIX to letters, digits, '-', '_' and '.' only, e.g. shop-wt-",
        )),
    }
}

/// The branch name made path-safe: every character outside `[A-Za-z0-9._-]` (including `/`)
/// becomes `-`, runs of `-` and `.` collapse, and leading or trailing `-`/`.` are dropped.
/// `feature/SHOP-42-cart` → `feature-SHOP-42-cart`.
pub fn path_safe(branch: &str) -> String {
    let mut out = String::with_capacity(branch.len());
    for c in branch.chars() {
        let c = if is_name_char(c) { c } else { '-' };
        match (out.chars().last(), c) {
            (Some('-'), '-') | (Some('.'), '.') => {}
            (Some('.'), '-') => {
                out.pop();
                out.push('-');
            }
            (Some('-'), '.') => {}
            _ => out.push(c),
        }
    }
    out.trim_matches(|c| c == '-' || c == '.').to_string()
}

/// How a slug is derived from a branch name: `OCSB_WT_SLUG_REGEX` when it is set, else the
/// branch name made path-safe.
#[derive(Debug)]
pub struct SlugRule {
    regex: Option<Regex>,
}

/// A derived slug and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slug {
    pub slug: String,
    /// `false` when a regex is configured but did not match, so the path-safe branch name was
    /// used instead. The caller says so on stderr.
    pub from_regex: bool,
}

impl SlugRule {
    /// Compile `OCSB_WT_SLUG_REGEX` (empty = no regex). It must have exactly one capture group,
    /// as the seed's settings table says.
    pub fn new(pattern: &str) -> Result<SlugRule, Refusal> {
        if pattern.is_empty() {
            return Ok(SlugRule { regex: None });
        }
        let fix = "set OCSB_WT_SLUG_REGEX to a regular expression with exactly one capture group, \
                   e.g. 'SHOP-([0-9]+)'";
        let regex = Regex::new(pattern).map_err(|e| {
            Refusal::new(
                format!("OCSB_WT_SLUG_REGEX={} is not a valid regular expression: {e}", shown(pattern)),
                fix,
            )
        })?;
        let groups = regex.captures_len() - 1;
        if groups != 1 {
            return Err(Refusal::new(
                format!("OCSB_WT_SLUG_REGEX={} has {groups} capture groups, not one", shown(pattern)),
                fix,
            ));
        }
        Ok(SlugRule { regex: Some(regex) })
    }

    /// The slug for `branch` (already checked by [`check_branch`]).
    ///
    /// The regex is searched for anywhere in the branch name (`SHOP-([0-9]+)` finds `42` in
    /// `feature-SHOP-42-cart`). When it does not match, or its group took no part in the match,
    /// the slug falls back to the path-safe branch name rather than failing: a branch without a
    /// ticket number is still a valid worktree, and `wt list` shows the slug it got.
    pub fn derive(&self, branch: &str) -> Result<Slug, Refusal> {
        let captured = self
            .regex
            .as_ref()
            .and_then(|re| re.captures(branch))
            .and_then(|caps| caps.get(1))
            .map(|m| m.as_str().to_string());
        let slug = match captured {
            Some(s) => Slug { slug: s, from_regex: true },
            None => Slug { slug: path_safe(branch), from_regex: false },
        };
        if slug.slug.is_empty() && !slug.from_regex {
            return Err(Refusal::new(
                format!("cannot make a directory name from branch {}", shown(branch)),
                "use a branch name that contains letters or digits",
            ));
        }
        check_slug(&slug.slug)?;
        Ok(slug)
    }

    /// Whether a regex is configured at all.
    pub fn has_regex(&self) -> bool {
        self.regex.is_some()
    }
}

/// The directory name of a worktree: `<OCSB_WT_PREFIX><slug>`.
pub fn dir_name(prefix: &str, slug: &str) -> Result<String, Refusal> {
    check_prefix(prefix)?;
    check_slug(slug)?;
    let name = format!("{prefix}{slug}");
    match component_problem(&name) {
        None => Ok(name),
        Some(why) => Err(Refusal::new(
            format!("the worktree directory name {} {why}", shown(&name)),
            "shorten OCSB_WT_PREFIX or the branch name",
        )),
    }
}

/// `<worktrees_dir>/<prefix><slug>`. The name is one checked component, so the result is
/// always a direct child of `worktrees_dir` (asserted, not assumed).
pub fn target_path(worktrees_dir: &Path, prefix: &str, slug: &str) -> Result<PathBuf, Refusal> {
    let name = dir_name(prefix, slug)?;
    let path = worktrees_dir.join(&name);
    if path.parent() != Some(worktrees_dir) {
        return Err(Refusal::new(
            format!("the worktree path {} would leave {}", path.display(), worktrees_dir.display()),
            "use a plain branch name",
        ));
    }
    Ok(path)
}

/// The slug of an existing worktree directory: its name without the prefix (a directory made
/// before the prefix was set keeps its whole name as its slug).
pub fn slug_of<'a>(prefix: &str, dir_name: &'a str) -> &'a str {
    match dir_name.strip_prefix(prefix) {
        Some(rest) if !rest.is_empty() => rest,
        _ => dir_name,
    }
}

/// How `wt rm` names the worktree to remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// Something with a `/` (or `.`/`..`): a path, relative to the current directory.
    Path(PathBuf),
    /// A slug (`42`) or a directory name (`shop-wt-42`) under the worktrees directory.
    Name(String),
}

impl Query {
    pub fn parse(arg: &str, cwd: &Path) -> Query {
        if arg.contains('/') || arg == "." || arg == ".." {
            Query::Path(cwd.join(arg))
        } else {
            Query::Name(arg.to_string())
        }
    }
}

/// Of the worktree paths `candidates` (direct children of the worktrees directory), the one a
/// name refers to: its directory name is `name`, or `<prefix><name>`. `None` if none matches;
/// an error if two different ones do.
pub fn match_name<'a>(
    candidates: &[&'a Path],
    prefix: &str,
    name: &str,
) -> Result<Option<&'a Path>, Refusal> {
    let with_prefix = format!("{prefix}{name}");
    let mut found: Vec<&'a Path> = candidates
        .iter()
        .copied()
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str());
            n == Some(name) || n == Some(with_prefix.as_str())
        })
        .collect();
    found.dedup();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(Refusal::new(
            format!(
                "{} matches several worktrees: {}",
                shown(name),
                many.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            "name the worktree by its full directory name or its path",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_that_are_refused() {
        for b in [
            "", "-x", "--force", "a b", "a\tb", "a\nb", "a..b", "..", "x@{1}", "a\u{7f}b", "a\\b", "a\u{a0}b",
        ] {
            assert!(check_branch(b).is_err(), "{b:?} must be refused");
        }
    }

    #[test]
    fn branch_names_that_pass_the_own_checks() {
        for b in ["main", "feature/SHOP-42-cart", "x.y", "a_b-c", "ü"] {
            assert_eq!(check_branch(b), Ok(()), "{b:?}");
        }
    }

    #[test]
    fn refusal_message_escapes_control_characters() {
        let e = check_branch("a\u{1b}[31mb").unwrap_err();
        assert!(!e.what.contains('\u{1b}'), "{}", e.what);
        assert!(e.what.contains("control character"));
    }

    #[test]
    fn path_safe_examples() {
        assert_eq!(path_safe("feature/SHOP-42-cart"), "feature-SHOP-42-cart");
        assert_eq!(path_safe("a//b"), "a-b");
        assert_eq!(path_safe("/a/"), "a");
        assert_eq!(path_safe(".hidden"), "hidden");
        assert_eq!(path_safe("a/.b"), "a-b");
        assert_eq!(path_safe("a./b"), "a-b");
        assert_eq!(path_safe("x...y"), "x.y");
        assert_eq!(path_safe("grüße"), "gr-e");
        assert_eq!(path_safe("---"), "");
        assert_eq!(path_safe("v1.2"), "v1.2");
    }

    #[test]
    fn path_safe_output_is_always_a_valid_slug_or_empty() {
        for b in ["a/b", "-.-", "..a..", "a.-.b", "ä/ö", "x", "a-/-.b", "1.2.3/", "/."] {
            let s = path_safe(b);
            assert!(s.is_empty() || check_slug(&s).is_ok(), "{b:?} -> {s:?}");
        }
    }

    #[test]
    fn slug_from_regex_group() {
        let rule = SlugRule::new("SHOP-([0-9]+)").unwrap();
        assert_eq!(
            rule.derive("feature-SHOP-42-cart").unwrap(),
            Slug { slug: "42".into(), from_regex: true }
        );
    }

    #[test]
    fn slug_falls_back_when_regex_does_not_match() {
        let rule = SlugRule::new("SHOP-([0-9]+)").unwrap();
        assert_eq!(rule.derive("fix/typo").unwrap(), Slug { slug: "fix-typo".into(), from_regex: false });
    }

    #[test]
    fn slug_without_regex_is_path_safe_branch() {
        let rule = SlugRule::new("").unwrap();
        assert!(!rule.has_regex());
        assert_eq!(rule.derive("feature/x").unwrap().slug, "feature-x");
        assert!(rule.derive("---").is_err());
    }

    #[test]
    fn regex_needs_exactly_one_group() {
        assert!(SlugRule::new("SHOP-[0-9]+").is_err());
        assert!(SlugRule::new("(A)-(B)").is_err());
        assert!(SlugRule::new("(").is_err());
        assert!(SlugRule::new("(?:x)-([0-9]+)").is_ok());
    }

    #[test]
    fn unsafe_capture_is_refused_not_sanitised() {
        let rule = SlugRule::new("^(.*)$").unwrap();
        assert!(rule.derive("a/b").is_err());
        let rule = SlugRule::new("x(.*)").unwrap();
        assert!(rule.derive("x").is_err(), "empty capture");
    }

    #[test]
    fn prefix_and_dir_name() {
        assert_eq!(dir_name("shop-wt-", "42").unwrap(), "shop-wt-42");
        assert_eq!(dir_name("", "42").unwrap(), "42");
        assert!(dir_name("../", "42").is_err());
        assert!(dir_name("a/", "42").is_err());
        assert!(dir_name("-x", "42").is_err());
        assert!(dir_name("a", "../b").is_err());
        assert!(dir_name("a.", ".b").is_err());
    }

    #[test]
    fn target_path_is_a_direct_child() {
        let dir = Path::new("/w/p-worktrees");
        assert_eq!(target_path(dir, "p-", "42").unwrap(), PathBuf::from("/w/p-worktrees/p-42"));
        assert!(target_path(dir, "", "..").is_err());
        assert!(target_path(dir, "", "/etc").is_err());
    }

    #[test]
    fn slug_of_strips_prefix() {
        assert_eq!(slug_of("shop-wt-", "shop-wt-42"), "42");
        assert_eq!(slug_of("shop-wt-", "other"), "other");
        assert_eq!(slug_of("shop-wt-", "shop-wt-"), "shop-wt-");
        assert_eq!(slug_of("", "x"), "x");
    }

    #[test]
    fn query_kinds() {
        let cwd = Path::new("/c");
        assert_eq!(Query::parse("42", cwd), Query::Name("42".into()));
        assert_eq!(Query::parse("../w/x", cwd), Query::Path(PathBuf::from("/c/../w/x")));
        assert_eq!(Query::parse("/abs", cwd), Query::Path(PathBuf::from("/abs")));
        assert_eq!(Query::parse(".", cwd), Query::Path(PathBuf::from("/c/.")));
    }

    #[test]
    fn match_by_slug_or_dir_name() {
        let a = Path::new("/w/shop-wt-42");
        let b = Path::new("/w/shop-wt-7");
        let c = [a, b];
        assert_eq!(match_name(&c, "shop-wt-", "42").unwrap(), Some(a));
        assert_eq!(match_name(&c, "shop-wt-", "shop-wt-7").unwrap(), Some(b));
        assert_eq!(match_name(&c, "shop-wt-", "8").unwrap(), None);
    }

    #[test]
    fn ambiguous_name_is_an_error() {
        let a = Path::new("/w/42");
        let b = Path::new("/w/p-42");
        assert!(match_name(&[a, b], "p-", "42").is_err());
    }
}
