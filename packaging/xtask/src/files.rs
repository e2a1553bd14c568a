//! `packaging/files.list`: parse it and expand its placeholders for one layout.
//!
//! The shell installer (packaging/install.sh) parses the same file with the same rules; the
//! package tests compare what each package really contains against [`expand`].

use std::path::Path;

use crate::error::{Error, Result};

/// One line of files.list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the repository; `target/release/` is the cargo target directory.
    pub source: String,
    /// Absolute, placeholders still in.
    pub dest: String,
    /// Octal, as shipped (the set-gid shim is shipped 0755, see [`Flag::SetgidShim`]).
    pub mode: String,
    pub flag: Option<Flag>,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// Given 2755 root:opencode-sandbox only after the group exists.
    SetgidShim,
    /// Kept when an admin edited it.
    Config,
    /// A systemd unit.
    Unit,
    /// Documentation.
    Doc,
    /// Only in the .deb.
    DebOnly,
    /// The AppArmor profile template: in the .deb and `make install`, not in the rpm or Arch
    /// packages (those systems do not restrict user namespaces through AppArmor).
    AppArmor,
}

impl Flag {
    /// Whether packages of `layout` ship a file with this flag.
    pub fn in_layout(flag: Option<Flag>, layout: Layout) -> bool {
        !matches!(flag, Some(Flag::DebOnly | Flag::AppArmor)) || layout == Layout::Deb
    }
}

/// A target layout: which directory each placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Debian and derivatives (zsh reads vendor-completions).
    Deb,
    /// Fedora/RHEL/openSUSE and Arch (zsh reads site-functions).
    Rpm,
}

impl Layout {
    pub fn parse(s: &str) -> Result<Layout> {
        match s {
            "deb" => Ok(Layout::Deb),
            "rpm" | "arch" => Ok(Layout::Rpm),
            _ => Err(Error(format!("unknown layout {s:?}: use deb, rpm or arch"))),
        }
    }

    /// The directory a placeholder names in this layout (all are /usr layouts).
    pub fn var(self, name: &str) -> Option<&'static str> {
        Some(match name {
            "bindir" => "/usr/bin",
            "libexecdir" => "/usr/libexec",
            "unitdir" => "/usr/lib/systemd/system",
            "sysusersdir" => "/usr/lib/sysusers.d",
            "docdir" => "/usr/share/doc/ocsb",
            "mandir" => "/usr/share/man",
            "bashcompdir" => "/usr/share/bash-completion/completions",
            "zshcompdir" => match self {
                Layout::Deb => "/usr/share/zsh/vendor-completions",
                Layout::Rpm => "/usr/share/zsh/site-functions",
            },
            "fishcompdir" => "/usr/share/fish/vendor_completions.d",
            "pkgdatadir" => "/usr/share/ocsb",
            _ => return None,
        })
    }
}

pub fn read(path: &Path) -> Result<Vec<Entry>> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::error::io("cannot read", path, e))?;
    parse(&text, &path.display().to_string())
}

pub fn parse(text: &str, name: &str) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let at = |msg: String| Error(format!("{name}:{line}: {msg}"));
        let fields: Vec<&str> = raw.split_whitespace().collect();
        if fields.is_empty() || fields[0].starts_with('#') {
            continue;
        }
        if !(3..=4).contains(&fields.len()) {
            return Err(at("expected SOURCE DESTINATION MODE [FLAG]".into()));
        }
        let (source, dest, mode) = (fields[0], fields[1], fields[2]);
        if !dest.starts_with('/') && !dest.starts_with('@') {
            return Err(at(format!("destination {dest:?} must be absolute")));
        }
        if source.contains('*') != dest.ends_with('/') {
            return Err(at(
                "a glob source needs a directory destination ending in `/`, and only a glob source".into(),
            ));
        }
        if source.contains('*') && !source.rsplit('/').next().unwrap_or("").starts_with("ocsb") {
            return Err(at("a glob must start with `ocsb` (uninstall removes what it matches)".into()));
        }
        if !(mode.len() == 4 && mode.chars().all(|c| ('0'..='7').contains(&c))) {
            return Err(at(format!("mode {mode:?} must be four octal digits")));
        }
        let flag = match fields.get(3) {
            None => None,
            Some(&"setgid-shim") => Some(Flag::SetgidShim),
            Some(&"config") => Some(Flag::Config),
            Some(&"unit") => Some(Flag::Unit),
            Some(&"doc") => Some(Flag::Doc),
            Some(&"deb-only") => Some(Flag::DebOnly),
            Some(&"apparmor") => Some(Flag::AppArmor),
            Some(f) => {
                return Err(at(format!(
                    "unknown flag {f:?} (setgid-shim, config, unit, doc, deb-only, apparmor)"
                )));
            }
        };
        if flag == Some(Flag::SetgidShim) && mode != "0755" {
            return Err(at("the set-gid shim is shipped 0755; installers add the set-gid bit".into()));
        }
        out.push(Entry { source: source.into(), dest: dest.into(), mode: mode.into(), flag, line });
    }
    Ok(out)
}

/// The destination with placeholders filled in for `layout`.
pub fn expand(dest: &str, layout: Layout) -> Result<String> {
    let mut out = String::new();
    let mut rest = dest;
    while let Some(start) = rest.find('@') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let end = after.find('@').ok_or_else(|| Error(format!("unclosed placeholder in {dest:?}")))?;
        let name = &after[..end];
        out.push_str(
            layout.var(name).ok_or_else(|| Error(format!("unknown placeholder @{name}@ in {dest:?}")))?,
        );
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_expands() {
        let e = parse(
            "# c\n\ntarget/release/ocsb @bindir@/ocsb 0755\nx/ocsb*.1.gz @mandir@/man1/ 0644 doc\n",
            "t",
        )
        .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].flag, Some(Flag::Doc));
        assert_eq!(expand(&e[0].dest, Layout::Deb).unwrap(), "/usr/bin/ocsb");
        assert_eq!(expand("@zshcompdir@/_ocsb", Layout::Rpm).unwrap(), "/usr/share/zsh/site-functions/_ocsb");
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse("a /b 0644\nsrc /d 644\n", "files.list").unwrap_err();
        assert_eq!(e.0, "files.list:2: mode \"644\" must be four octal digits");
        assert!(parse("s/x @bindir@/s 2755 setgid-shim", "f").is_err(), "the shim must ship 0755");
        assert!(parse("s/* /d 0644", "f").is_err(), "glob needs a directory destination");
        assert!(parse("s/*.1 /d/ 0644", "f").is_err(), "glob must start with ocsb");
        assert!(expand("@nope@/x", Layout::Deb).is_err());
    }

    #[test]
    fn the_real_list_parses() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let entries = read(&root.join("packaging/files.list")).unwrap();
        assert!(entries.iter().any(|e| e.flag == Some(Flag::SetgidShim)));
        let profile = entries.iter().find(|e| e.flag == Some(Flag::AppArmor)).expect("the AppArmor profile");
        assert!(Flag::in_layout(profile.flag, Layout::Deb) && !Flag::in_layout(profile.flag, Layout::Rpm));
        for e in &entries {
            expand(&e.dest, Layout::Deb).unwrap();
            if !e.source.starts_with("target/") {
                assert!(root.join(&e.source).is_file(), "files.list:{}: {} does not exist", e.line, e.source);
            }
        }
    }
}
