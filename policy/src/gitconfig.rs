//! The git config the agent's git reads: the user's global config, as git lists it (includes
//! expanded), with only what carries no credential and runs no program ([`generate`]); and the
//! config of the agent's own git directory, from the user's repository config the same way
//! ([`generate_repo`]).
//!
//! *Why an allowlist*: a global config holds credentials in many shapes (`credential.*`,
//! `http.extraHeader`, a token in a `url.*.insteadOf` rule, `sendemail.smtpPass`, tool sections
//! such as `github.*` or `lfs.url`) and names programs that git runs (pagers, editors, signing
//! programs, `core.sshCommand`, diff and merge tools, filters, `core.fsmonitor`, hooks). New
//! tools add new sections every year, so the rule lists what is kept: the user's identity,
//! aliases, and settings that change git's behaviour but hold neither a secret nor a program
//! (`KEEP`). Everything else is left out, `include.*`/`includeIf.*` too (git already expanded
//! them into the list this reads).
//!
//! Signing (`commit.gpgSign`, `tag.gpgSign`, `gpg.*`, `user.signingKey`) is left out: it needs a
//! program and a key the sandbox does not have, and a commit that git refused to sign would fail
//! the agent's `git commit`. Commits made inside are unsigned; sign them on the host
//! (`git rebase --exec 'git commit --amend --no-edit -S'`).

/// One entry of `git config --list --null`: the key as git prints it (section and name in
/// lower case, a subsection as written) and its value (`None`: a bare boolean, `[core] bare`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Option<String>,
}

/// The global entries of `git config --list --show-scope --includes --null` output: a scope
/// and an entry, each ending with NUL; an entry's key and value are separated by its first
/// newline. *Why scopes*: `git config --global --list` reads only `~/.gitconfig` when it
/// exists, never `~/.config/git/config` beside it, where git itself reads both. Entries of
/// other scopes (the repository's, the system's) and entries that are not UTF-8 are left out
/// (the latter counted in the second value).
pub fn parse_list(out: &[u8]) -> (Vec<Entry>, usize) {
    parse_scopes(out, &[b"global"])
}

/// The repository's own entries (scopes `local` and `worktree`) of `git config --list
/// --show-scope --null` run in the user's repository, read as [`parse_list`] reads the global ones.
pub fn parse_repo_list(out: &[u8]) -> (Vec<Entry>, usize) {
    parse_scopes(out, &[b"local", b"worktree"])
}

fn parse_scopes(out: &[u8], scopes: &[&[u8]]) -> (Vec<Entry>, usize) {
    let mut entries = Vec::new();
    let mut skipped = 0;
    let mut fields = out.split(|&b| b == 0);
    while let (Some(scope), Some(raw)) = (fields.next(), fields.next()) {
        if !scopes.contains(&scope) || raw.is_empty() {
            continue;
        }
        let Ok(text) = std::str::from_utf8(raw) else {
            skipped += 1;
            continue;
        };
        let entry = match text.split_once('\n') {
            Some((k, v)) => Entry { key: k.to_string(), value: Some(v.to_string()) },
            None => Entry { key: text.to_string(), value: None },
        };
        entries.push(entry);
    }
    (entries, skipped)
}

/// Which subsections a kept section may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// None: `[push]`. Most sections that take one name a program or a remote (`diff.<driver>`,
    /// `branch.<name>`), so a subsection is kept only where [`KEEP`] says so.
    No,
    /// Any: `[color "diff"]`.
    Any,
    /// One is required: `[remote "origin"]`.
    Named,
}

/// The settings kept: section, its subsections, and its names (lower case, as git lists them;
/// `*` is every name). None of these holds a secret or names a program.
const KEEP: &[(&str, Sub, &[&str])] = &[
    ("user", Sub::No, &["name", "email", "useconfigonly"]),
    ("author", Sub::No, &["name", "email"]),
    ("committer", Sub::No, &["name", "email"]),
    (
        "core",
        Sub::No,
        &[
            "autocrlf",
            "eol",
            "safecrlf",
            "quotepath",
            "whitespace",
            "abbrev",
            "filemode",
            "symlinks",
            "ignorecase",
            "precomposeunicode",
            "protecthfs",
            "protectntfs",
            "checkstat",
            "trustctime",
            "preloadindex",
            "untrackedcache",
            "commentchar",
            "commentstring",
            "compression",
            "looseCompression",
            "bigfilethreshold",
            "splitindex",
            "multipackindex",
            "commitgraph",
            "logallrefupdates",
            "warnambiguousrefs",
            "longpaths",
        ],
    ),
    ("init", Sub::No, &["defaultbranch"]),
    ("pull", Sub::No, &["rebase", "ff", "twohead", "octopus"]),
    (
        "push",
        Sub::No,
        &["default", "autosetupremote", "followtags", "useforceifincludes", "negotiate", "recursesubmodules"],
    ),
    (
        "merge",
        Sub::No,
        &[
            "conflictstyle",
            "ff",
            "log",
            "renames",
            "renamelimit",
            "directoryrenames",
            "autostash",
            "verbosity",
            "stat",
            "branchdesc",
        ],
    ),
    (
        "rebase",
        Sub::No,
        &[
            "autosquash",
            "autostash",
            "updaterefs",
            "stat",
            "missingcommitscheck",
            "abbreviatecommands",
            "reschedulefailedexec",
            "forkpoint",
            "instructionformat",
            "backend",
        ],
    ),
    (
        "diff",
        Sub::No,
        &[
            "algorithm",
            "colormoved",
            "colormovedws",
            "renames",
            "renamelimit",
            "mnemonicprefix",
            "noprefix",
            "relative",
            "context",
            "interhunkcontext",
            "indentheuristic",
            "submodule",
            "wserrorhighlight",
            "statgraphwidth",
            "suppressblankempty",
            "srcprefix",
            "dstprefix",
            "dirstat",
            "ignoresubmodules",
        ],
    ),
    ("color", Sub::Any, &["*"]),
    ("column", Sub::No, &["*"]),
    (
        "fetch",
        Sub::No,
        &[
            "prune",
            "prunetags",
            "parallel",
            "writecommitgraph",
            "fsckobjects",
            "recursesubmodules",
            "showforcedupdates",
            "all",
        ],
    ),
    ("transfer", Sub::No, &["fsckobjects"]),
    ("protocol", Sub::No, &["version"]),
    ("branch", Sub::No, &["autosetupmerge", "autosetuprebase", "sort"]),
    ("tag", Sub::No, &["sort"]),
    ("versionsort", Sub::No, &["suffix"]),
    (
        "status",
        Sub::No,
        &[
            "showuntrackedfiles",
            "short",
            "branch",
            "submodulesummary",
            "relativepaths",
            "aheadbehind",
            "showstash",
            "renames",
            "renamelimit",
        ],
    ),
    (
        "log",
        Sub::No,
        &[
            "date",
            "decorate",
            "follow",
            "abbrevcommit",
            "mailmap",
            "initialdecorationset",
            "excludedecoration",
        ],
    ),
    ("format", Sub::No, &["pretty", "signoff", "numbered", "coverletter", "thread"]),
    ("pretty", Sub::No, &["*"]),
    ("help", Sub::No, &["autocorrect", "format"]),
    ("advice", Sub::No, &["*"]),
    ("commit", Sub::No, &["verbose", "cleanup", "status"]),
    ("rerere", Sub::No, &["enabled", "autoupdate"]),
    (
        "grep",
        Sub::No,
        &["linenumber", "patterntype", "extendedregexp", "column", "fullname", "fallbacktonoindex"],
    ),
    (
        "blame",
        Sub::No,
        &["date", "coloring", "showemail", "blankboundary", "markignoredlines", "markunblamablelines"],
    ),
    ("submodule", Sub::No, &["recurse", "fetchjobs", "propagatebranches"]),
    ("feature", Sub::No, &["manyfiles", "experimental"]),
    ("index", Sub::No, &["version", "threads", "skiphash"]),
    ("checkout", Sub::No, &["defaultremote", "workers", "thresholdforparallelism"]),
    ("clone", Sub::No, &["defaultremotename", "rejectshallow"]),
    ("worktree", Sub::No, &["guessremote"]),
    ("am", Sub::No, &["threeway", "keepcr"]),
    ("apply", Sub::No, &["whitespace", "ignorewhitespace"]),
    ("stash", Sub::No, &["showpatch", "showstat", "showincludeuntracked"]),
    ("i18n", Sub::No, &["commitencoding", "logoutputencoding"]),
    ("interactive", Sub::No, &["singlekey"]),
    (
        "gc",
        Sub::No,
        &["auto", "autodetach", "autopacklimit", "pruneexpire", "reflogexpire", "reflogexpireunreachable"],
    ),
    ("safe", Sub::No, &["directory"]),
];

/// The commands of Git LFS's filter as `git lfs install` writes them: the one program kept,
/// and only with exactly these values, so that LFS checkouts keep working inside.
const LFS_FILTER: &[(&str, &str)] = &[
    ("clean", "git-lfs clean -- %f"),
    ("smudge", "git-lfs smudge -- %f"),
    ("process", "git-lfs filter-process"),
    ("required", "true"),
];

/// The generated config, and the names (`section.name`, never a subsection or a value: those
/// may hold the secret) of what was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub text: String,
    pub left_out: Vec<String>,
}

/// The config for the sandbox from the user's `entries`, in their order (so repeated keys and
/// "the last one wins" mean what they meant).
pub fn generate(entries: &[Entry]) -> Generated {
    render(
        entries,
        "# Made by ocsb at each start from your global git config, with only the settings that carry\n\
         # no credential and run no program. Changes here last until the next start.\n",
        None,
        |key, value| kept(key, value).then(|| value.map(str::to_string)),
    )
}

/// The settings of the user's repository config kept in the agent's git directory: section, its
/// subsections, names (lower case; `*` every name).
const REPO_KEEP: &[(&str, Sub, &[&str])] = &[
    (
        "core",
        Sub::No,
        &[
            "repositoryformatversion",
            "filemode",
            "symlinks",
            "ignorecase",
            "precomposeunicode",
            "autocrlf",
            "eol",
            "safecrlf",
            "quotepath",
            "abbrev",
            "sparsecheckout",
            "sparsecheckoutcone",
            "hookspath",
        ],
    ),
    ("extensions", Sub::No, &["objectformat"]),
    (
        "remote",
        Sub::Named,
        &["url", "pushurl", "fetch", "push", "tagopt", "prune", "promisor", "partialclonefilter"],
    ),
    ("branch", Sub::Named, &["remote", "merge", "rebase", "pushremote"]),
    ("user", Sub::No, &["name", "email"]),
    ("init", Sub::No, &["defaultbranch"]),
    ("pull", Sub::No, &["*"]),
    ("push", Sub::No, &["default"]),
    ("merge", Sub::No, &["ff"]),
];

/// The config of the agent's git directory from the user's repository config `entries` (as
/// [`parse_repo_list`] reads them), in their order.
///
/// *Why an allowlist*: a repository's config names programs that git runs — `core.fsmonitor`,
/// `filter.*` drivers, `diff.*.textconv`, `core.sshCommand`, `credential.helper`,
/// `remote.*.uploadpack` — and holds credentials (a token in a remote's URL, `http.extraHeader`).
/// Inside the sandbox those programs are not the user's to run and the credentials are not the
/// agent's to read, and tools add new such keys every year; so only what the agent's git needs
/// to work like the user's is kept (`REPO_KEEP`): the repository's format, checkout behaviour,
/// remotes and branch tracking, identity, pull/push defaults. A remote URL loses its user and
/// password (`https://TOKEN@host/r` becomes `https://host/r`); one that still carries a
/// credential (`?access_token=`) is left out. `core.bare` is always written `false` (the agent
/// works in a checkout), never copied.
pub fn generate_repo(entries: &[Entry]) -> Generated {
    render(
        entries,
        "# Made by ocsb at the session's start from your repository's config, with only the settings\n\
         # that carry no credential and run no program.\n",
        Some(("core", "bare", "false")),
        repo_kept,
    )
}

/// What of one repository entry is kept: `None` leaves it out; `Some(value)` keeps it, with
/// the value to write.
fn repo_kept(key: &Key<'_>, value: Option<&str>) -> Option<Option<String>> {
    let (section, name) = (key.section.to_ascii_lowercase(), key.name.to_ascii_lowercase());
    if key.sub.is_some_and(carries_credential) {
        return None;
    }
    let listed = REPO_KEEP.iter().any(|(ks, ksub, names)| {
        *ks == section
            && match ksub {
                Sub::No => key.sub.is_none(),
                Sub::Any => true,
                Sub::Named => key.sub.is_some(),
            }
            && names.iter().any(|k| *k == "*" || *k == name)
    });
    if !listed {
        return None;
    }
    let Some(v) = value else { return Some(None) };
    let v = if section == "remote" && matches!(name.as_str(), "url" | "pushurl") {
        without_userinfo(v)
    } else {
        v.to_string()
    };
    (!carries_credential(&v)).then_some(Some(v))
}

/// `url` without the user and password of its authority (`scheme://user:pw@host/…` →
/// `scheme://host/…`), when it has them and is not an ssh login (`ssh://git@host/`, which names
/// no secret); other text as it is.
fn without_userinfo(url: &str) -> String {
    if !carries_credential(url) {
        return url.to_string();
    }
    let Some(i) = url.find("://") else { return url.to_string() };
    let (head, after) = url.split_at(i + 3);
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    match after[..authority_end].rfind('@') {
        Some(at) => format!("{head}{}", &after[at + 1..]),
        None => url.to_string(),
    }
}

/// The config text from `entries`: `keep` says what of each is written (its value), `first` is
/// an entry (section, name, value) written before them all; the rest is listed by name in
/// `left_out`.
fn render(
    entries: &[Entry],
    preamble: &str,
    first: Option<(&str, &str, &str)>,
    keep: impl Fn(&Key<'_>, Option<&str>) -> Option<Option<String>>,
) -> Generated {
    let mut body = String::new();
    let mut left_out: Vec<String> = Vec::new();
    let mut current: Option<(String, Option<String>)> = None;
    if let Some((section, name, value)) = first {
        body.push_str(&section_header(section, None));
        body.push_str(&entry_line(name, Some(value)).unwrap_or_default());
        current = Some((section.to_string(), None));
    }
    for e in entries {
        let Some(key) = split(&e.key) else {
            left_out.push("(an unreadable key)".into());
            continue;
        };
        let Some(value) = keep(&key, e.value.as_deref()) else {
            let name = format!("{}.{}", key.section, key.name);
            if !left_out.contains(&name) {
                left_out.push(name);
            }
            continue;
        };
        let Some(line) = entry_line(key.name, value.as_deref()) else {
            left_out.push(format!("{}.{}", key.section, key.name));
            continue;
        };
        let header = (key.section.to_string(), key.sub.map(str::to_string));
        if current.as_ref() != Some(&header) {
            body.push_str(&section_header(&header.0, header.1.as_deref()));
            current = Some(header);
        }
        body.push_str(&line);
    }
    let mut text = preamble.to_string();
    if !left_out.is_empty() {
        text.push_str(&format!("# Left out: {}\n", left_out.join(", ")));
    }
    text.push_str(&body);
    Generated { text, left_out }
}

/// A key split as git's parser reads it.
struct Key<'a> {
    section: &'a str,
    sub: Option<&'a str>,
    name: &'a str,
}

/// `section[.subsection].name`; the subsection may itself hold dots (`url.https://x/.insteadof`).
fn split(key: &str) -> Option<Key<'_>> {
    let (section, rest) = key.split_once('.')?;
    let (sub, name) = match rest.rsplit_once('.') {
        Some((s, n)) => (Some(s), n),
        None => (None, rest),
    };
    let section_ok = !section.is_empty() && section.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let name_ok = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    (section_ok && name_ok).then_some(Key { section, sub, name })
}

/// Whether the entry is kept: [`KEEP`], aliases and `url.*` rewrites without a credential, and
/// the standard LFS filter.
fn kept(key: &Key<'_>, value: Option<&str>) -> bool {
    let (section, name) = (key.section.to_ascii_lowercase(), key.name.to_ascii_lowercase());
    match (section.as_str(), key.sub, name.as_str()) {
        ("alias", None, _) => value.is_none_or(|v| !carries_credential(v)),
        ("url", Some(base), "insteadof" | "pushinsteadof") => {
            !carries_credential(base) && value.is_none_or(|v| !carries_credential(v))
        }
        ("filter", Some("lfs"), n) => LFS_FILTER.iter().any(|(k, v)| *k == n && value == Some(*v)),
        (s, sub, n) => KEEP.iter().any(|(ks, ksub, names)| {
            *ks == s
                && match ksub {
                    Sub::No => sub.is_none(),
                    Sub::Any => true,
                    Sub::Named => sub.is_some(),
                }
                && names.iter().any(|k| *k == "*" || k.eq_ignore_ascii_case(n))
        }),
    }
}

/// Whether `text` (a URL, or an alias's command line) visibly holds a credential: a URL with a
/// password, a URL of a scheme other than ssh with a user (`https://TOKEN@host`), a URL with a
/// query (`?access_token=…`), or an HTTP authorization header.
///
/// *Why this is a list of bad shapes*: aliases and `url.*` rewrites are kept for what they do,
/// and a token in one has a few recognisable shapes. An `ssh://git@host` or `git@host:path`
/// names a login, not a secret (ssh authenticates with the key), so it stays.
pub fn carries_credential(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    if ["authorization:", "bearer ", "private-token:", "x-api-key:", "token "]
        .iter()
        .any(|h| lower.contains(h))
    {
        return true;
    }
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let scheme: String = rest[..i]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<String>()
            .to_ascii_lowercase();
        let after = &rest[i + 3..];
        let url_end =
            after.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'')).unwrap_or(after.len());
        let url = &after[..url_end];
        let authority = &url[..url.find(['/', '?', '#']).unwrap_or(url.len())];
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            let ssh = matches!(scheme.as_str(), "ssh" | "git+ssh" | "ssh+git");
            if userinfo.contains(':') || !ssh {
                return true;
            }
        }
        if url.contains('?') {
            return true;
        }
        rest = &after[url_end..];
    }
    false
}

/// `[section]` or `[section "sub"]`, the subsection quoted as git reads it back.
fn section_header(section: &str, sub: Option<&str>) -> String {
    match sub {
        None => format!("[{section}]\n"),
        Some(s) => format!("[{section} \"{}\"]\n", s.replace('\\', "\\\\").replace('"', "\\\"")),
    }
}

/// `\tname = "value"`, escaped as git reads it back; a bare boolean stays bare. `None` for a
/// value git could not read back (a control character other than newline, tab and backspace,
/// which it cannot hold).
fn entry_line(name: &str, value: Option<&str>) -> Option<String> {
    let Some(v) = value else { return Some(format!("\t{name}\n")) };
    let mut q = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => q.push_str("\\\\"),
            '"' => q.push_str("\\\""),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            '\u{8}' => q.push_str("\\b"),
            c if c.is_control() => return None,
            c => q.push(c),
        }
    }
    Some(format!("\t{name} = \"{q}\"\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, Location, Result};

    fn unreadable(what: impl Into<String>) -> Error {
        Error::input(Location::new("git config --global", 0, 0), what)
    }

    /// The lines of [`generate`]'s text for a check of its own: the text parses as `key=value`
    /// with git's own quoting rules for the subset it writes. Used by the tests.
    fn read_back(text: &str) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut section = String::new();
        for line in text.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = match h.split_once(" \"") {
                    Some((s, sub)) => {
                        let sub = sub.strip_suffix('"').ok_or_else(|| unreadable(line))?;
                        format!("{s}.{}", sub.replace("\\\"", "\"").replace("\\\\", "\\"))
                    }
                    None => h.to_string(),
                };
                continue;
            }
            let line = line.strip_prefix('\t').ok_or_else(|| unreadable(line))?;
            let entry = match line.split_once(" = ") {
                None => Entry { key: format!("{section}.{line}"), value: None },
                Some((k, v)) => {
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .ok_or_else(|| unreadable(line))?;
                    let mut val = String::new();
                    let mut it = v.chars();
                    while let Some(c) = it.next() {
                        if c == '\\' {
                            match it.next() {
                                Some('n') => val.push('\n'),
                                Some('t') => val.push('\t'),
                                Some('b') => val.push('\u{8}'),
                                Some(c) => val.push(c),
                                None => return Err(unreadable(line)),
                            }
                        } else {
                            val.push(c);
                        }
                    }
                    Entry { key: format!("{section}.{k}"), value: Some(val) }
                }
            };
            out.push(entry);
        }
        Ok(out)
    }

    fn e(k: &str, v: &str) -> Entry {
        Entry { key: k.into(), value: Some(v.into()) }
    }

    fn keys(g: &Generated) -> Vec<(String, Option<String>)> {
        read_back(&g.text).unwrap().into_iter().map(|e| (e.key, e.value)).collect()
    }

    #[test]
    fn the_list_is_read_as_git_prints_it() {
        let out = b"global\0user.name\nA B\0global\0core.bare\0local\0core.bare\nfalse\0\
                    global\0url.https://x/.insteadof\nhttps://y/\0global\0alias.m\nline1\nline2\0";
        let (entries, skipped) = parse_list(out);
        assert_eq!((entries.len(), skipped), (4, 0), "{entries:?}");
        assert_eq!(entries[0], e("user.name", "A B"));
        assert_eq!(entries[1], Entry { key: "core.bare".into(), value: None });
        assert_eq!(entries[2], e("url.https://x/.insteadof", "https://y/"));
        assert_eq!(entries[3], e("alias.m", "line1\nline2"), "only the first newline splits");
        let (entries, skipped) =
            parse_list(b"global\0user.name\n\xff\0global\0user.email\na@b\0system\0x.y\nz\0");
        assert_eq!((entries.len(), skipped), (1, 1));
    }

    #[test]
    fn identity_aliases_and_behaviour_are_kept() {
        let g = generate(&[
            e("user.name", "Ada \"the\" Lovelace \\ x"),
            e("user.email", "ada@example.org"),
            e("alias.co", "checkout"),
            e("alias.lg", "!git log --graph | head -n 5; echo '#;'"),
            e("init.defaultbranch", "main"),
            e("pull.rebase", "true"),
            e("color.diff.meta", "yellow bold"),
            e("core.autocrlf", "input"),
            e("url.git@github.com:.insteadof", "https://github.com/"),
            e("url.ssh://git@example.org/.pushinsteadof", "https://example.org/"),
            Entry { key: "rerere.enabled".into(), value: None },
        ]);
        assert!(g.left_out.is_empty(), "{:?}", g.left_out);
        let back = keys(&g);
        assert_eq!(back.len(), 11, "{}", g.text);
        assert_eq!(back[0], ("user.name".into(), Some("Ada \"the\" Lovelace \\ x".into())));
        assert_eq!(back[3].1.as_deref(), Some("!git log --graph | head -n 5; echo '#;'"));
        assert_eq!(back[6].0, "color.diff.meta");
        assert_eq!(back[8].0, "url.git@github.com:.insteadof");
        assert_eq!(back[10], ("rerere.enabled".into(), None));
        assert!(g.text.contains("[color \"diff\"]\n\tmeta = \"yellow bold\"\n"), "{}", g.text);
    }

    #[test]
    fn credentials_programs_and_includes_are_left_out_by_name() {
        let g = generate(&[
            e("user.name", "u"),
            e("credential.helper", "store"),
            e("credential.https://github.com.username", "u"),
            e("http.extraheader", "Authorization: Bearer SECRET1"),
            e("http.https://git.example.org/.extraheader", "Authorization: Basic SECRET2"),
            e("url.https://SECRET3@github.com/.insteadof", "https://github.com/"),
            e("url.https://example.org/.insteadof", "https://u:SECRET4@example.org/"),
            e("url.https://mirror.example.org/?token=SECRET5.insteadof", "https://example.org/"),
            e("include.path", "~/.gitconfig-work"),
            e("includeif.gitdir:~/work/.path", "~/.gitconfig-work"),
            e("core.pager", "delta"),
            e("core.editor", "vim"),
            e("core.sshcommand", "ssh -i ~/.ssh/work"),
            e("core.fsmonitor", "true"),
            e("core.hookspath", "~/.githooks"),
            e("diff.external", "difft"),
            e("diff.lfs.textconv", "cat"),
            e("merge.tool", "meld"),
            e("mergetool.meld.cmd", "meld $LOCAL"),
            e("filter.crypt.smudge", "decrypt"),
            e("filter.lfs.smudge", "git-lfs smudge --evil -- %f"),
            e("commit.gpgsign", "true"),
            e("gpg.program", "gpg2"),
            e("user.signingkey", "ABC"),
            e("sendemail.smtppass", "SECRET6"),
            e("github.token", "SECRET7"),
            e("alias.pr", "!curl -H 'Authorization: token SECRET8' https://api.github.com"),
            e("alias.get", "!curl https://SECRET9@example.org/x"),
            e("branch.main.remote", "origin"),
            e("pager.log", "less"),
        ]);
        assert!(!g.text.contains("SECRET"), "{}", g.text);
        assert_eq!(keys(&g), vec![("user.name".into(), Some("u".into()))], "{}", g.text);
        for name in
            ["credential.helper", "http.extraheader", "url.insteadof", "include.path", "commit.gpgsign"]
        {
            assert!(g.left_out.contains(&name.to_string()), "{name}: {:?}", g.left_out);
        }
        assert!(g.text.contains("# Left out: "), "{}", g.text);
    }

    #[test]
    fn the_standard_lfs_filter_is_kept() {
        let g = generate(&[
            e("filter.lfs.clean", "git-lfs clean -- %f"),
            e("filter.lfs.smudge", "git-lfs smudge -- %f"),
            e("filter.lfs.process", "git-lfs filter-process"),
            e("filter.lfs.required", "true"),
        ]);
        assert_eq!(keys(&g).len(), 4, "{}", g.text);
    }

    #[test]
    fn odd_keys_and_values_never_break_the_file() {
        let g = generate(&[
            e("nodot", "x"),
            e("user.9bad", "x"),
            e("user.name", "cr\rhere"),
            e("color.we\"ird\\sub.x", "y"),
            e("user.email", "tab\tnew\nline"),
        ]);
        let back = keys(&g);
        assert_eq!(back[0], ("color.we\"ird\\sub.x".into(), Some("y".into())));
        assert_eq!(back[1], ("user.email".into(), Some("tab\tnew\nline".into())));
        assert_eq!(back.len(), 2, "{}", g.text);
        assert_eq!(generate(&[]).left_out, Vec::<String>::new());
    }

    #[test]
    fn credentials_are_recognised_in_urls_and_commands() {
        for bad in [
            "https://TOKEN@github.com/",
            "https://u:p@example.org",
            "http://x@y",
            "ssh://git:pw@host/",
            "https://h/p?access_token=1",
            "curl -H 'Authorization: x'",
            "git clone https://tok@h/r",
        ] {
            assert!(carries_credential(bad), "{bad}");
        }
        for good in [
            "https://github.com/",
            "git@github.com:",
            "ssh://git@host/",
            "checkout",
            "!git log @{u}..",
            "a@b.c",
        ] {
            assert!(!carries_credential(good), "{good}");
        }
    }

    fn repo(text: &[(&str, &str)]) -> Generated {
        generate_repo(&text.iter().map(|(k, v)| e(k, v)).collect::<Vec<_>>())
    }

    #[test]
    fn the_repository_list_reads_local_and_worktree_scopes() {
        let out = b"global\0user.name\nG\0local\0core.bare\nfalse\0worktree\0core.sparsecheckout\ntrue\0\
                    system\0x.y\nz\0command\0user.email\nc@d\0";
        let (entries, skipped) = parse_repo_list(out);
        assert_eq!(skipped, 0);
        assert_eq!(entries, vec![e("core.bare", "false"), e("core.sparsecheckout", "true")]);
    }

    #[test]
    fn the_agents_repository_config_keeps_format_remotes_and_tracking() {
        let g = repo(&[
            ("core.repositoryformatversion", "1"),
            ("core.filemode", "true"),
            ("core.bare", "true"),
            ("core.logallrefupdates", "true"),
            ("core.hookspath", ".husky"),
            ("extensions.objectformat", "sha256"),
            ("extensions.refstorage", "reftable"),
            ("remote.origin.url", "https://github.com/o/r.git"),
            ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
            ("remote.origin.promisor", "true"),
            ("remote.origin.partialclonefilter", "blob:none"),
            ("branch.main.remote", "origin"),
            ("branch.main.merge", "refs/heads/main"),
            ("branch.feat/x.rebase", "true"),
            ("user.email", "me@example.org"),
            ("init.defaultbranch", "main"),
            ("pull.rebase", "merges"),
            ("pull.ff", "only"),
            ("push.default", "simple"),
            ("merge.ff", "false"),
        ]);
        let back = keys(&g);
        assert_eq!(back[0], ("core.bare".into(), Some("false".into())), "{}", g.text);
        assert!(!back.iter().skip(1).any(|(k, _)| k == "core.bare"), "{}", g.text);
        for k in [
            "core.repositoryformatversion",
            "core.hookspath",
            "extensions.objectformat",
            "remote.origin.url",
            "remote.origin.partialclonefilter",
            "branch.main.merge",
            "branch.feat/x.rebase",
            "pull.ff",
            "merge.ff",
        ] {
            assert!(back.iter().any(|(key, _)| key == k), "{k}: {}", g.text);
        }
        assert_eq!(back.len(), 18, "{}", g.text);
        assert_eq!(g.left_out, ["core.bare", "core.logallrefupdates", "extensions.refstorage"]);
        assert!(
            g.text.contains("\n[core]\n\tbare = \"false\"\n\trepositoryformatversion = \"1\"\n"),
            "{}",
            g.text
        );
    }

    #[test]
    fn the_agents_repository_config_runs_no_program_and_holds_no_credential() {
        let g = repo(&[
            ("core.fsmonitor", "/usr/bin/watchman-hook"),
            ("core.sshcommand", "ssh -i ~/.ssh/deploy"),
            ("core.editor", "vim"),
            ("core.pager", "less"),
            ("core.worktree", "/elsewhere"),
            ("filter.crypt.smudge", "decrypt"),
            ("diff.pdf.textconv", "pdftotext"),
            ("credential.helper", "store"),
            ("http.extraheader", "Authorization: Bearer SECRET1"),
            ("remote.origin.uploadpack", "evil"),
            ("remote.origin.receivepack", "evil"),
            ("remote.origin.proxy", "http://SECRET2@proxy"),
            ("remote.a.url", "https://SECRET3@github.com/o/r.git"),
            ("remote.b.pushurl", "https://u:SECRET4@example.org/r"),
            ("remote.c.url", "https://example.org/r?access_token=SECRET5"),
            ("remote.https://SECRET6@h/.url", "x"),
            ("remote.d.url", "ssh://git@example.org/r"),
            ("remote.e.url", "git@github.com:o/r.git"),
            ("remote.url", "https://example.org/no-name"),
            ("branch.remote", "origin"),
            ("user.signingkey", "ABC"),
            ("push.recursesubmodules", "on-demand"),
            ("include.path", "../x"),
        ]);
        assert!(!g.text.contains("SECRET"), "{}", g.text);
        assert!(
            !g.text.contains("evil") && !g.text.contains("watchman") && !g.text.contains("pdftotext"),
            "{}",
            g.text
        );
        let back = keys(&g);
        assert_eq!(
            back,
            vec![
                ("core.bare".to_string(), Some("false".to_string())),
                ("remote.a.url".into(), Some("https://github.com/o/r.git".into())),
                ("remote.b.pushurl".into(), Some("https://example.org/r".into())),
                ("remote.d.url".into(), Some("ssh://git@example.org/r".into())),
                ("remote.e.url".into(), Some("git@github.com:o/r.git".into())),
            ],
            "{}",
            g.text
        );
        for name in ["core.fsmonitor", "credential.helper", "remote.uploadpack", "remote.url", "include.path"]
        {
            assert!(g.left_out.contains(&name.to_string()), "{name}: {:?}", g.left_out);
        }
    }

    #[test]
    fn userinfo_is_taken_out_of_urls_only_when_it_is_a_credential() {
        assert_eq!(without_userinfo("https://tok@h/p"), "https://h/p");
        assert_eq!(without_userinfo("https://u:p@h:8443/p@x"), "https://h:8443/p@x");
        assert_eq!(without_userinfo("ssh://git@h/r"), "ssh://git@h/r");
        assert_eq!(without_userinfo("ssh://git:pw@h/r"), "ssh://h/r");
        assert_eq!(without_userinfo("/srv/git/r.git"), "/srv/git/r.git");
        assert_eq!(without_userinfo("https://h/r?token=x"), "https://h/r?token=x");
    }
}
