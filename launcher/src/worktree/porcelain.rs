//! Parsing `git worktree list --porcelain -z` (pure). With `-z` every attribute is one
//! NUL-terminated field and a record ends with an empty field, so paths with newlines or
//! quotes need no unquoting.

use std::path::PathBuf;

/// One entry of `git worktree list`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    pub path: PathBuf,
    /// `refs/heads/` stripped; `None` when detached (or bare).
    pub branch: Option<String>,
    pub head: Option<String>,
    pub bare: bool,
    pub locked: bool,
    /// git reports the worktree's directory (or gitdir) as gone.
    pub prunable: bool,
}

/// The entries in git's order: the main worktree first.
pub fn parse(out: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut current: Option<Entry> = None;
    for field in out.split(|&b| b == 0) {
        if field.is_empty() {
            if let Some(e) = current.take() {
                entries.push(e);
            }
            continue;
        }
        let (key, value) = match field.iter().position(|&b| b == b' ') {
            Some(i) => (&field[..i], Some(&field[i + 1..])),
            None => (field, None),
        };
        if key == b"worktree" {
            if let Some(e) = current.take() {
                entries.push(e);
            }
            let path = value.ok_or("`worktree` field without a path")?;
            current = Some(Entry { path: bytes_to_path(path), ..Entry::default() });
            continue;
        }
        let e = current.as_mut().ok_or("attribute before the first `worktree` field")?;
        match key {
            b"HEAD" => e.head = value.map(|v| String::from_utf8_lossy(v).into_owned()),
            b"branch" => {
                let r = String::from_utf8_lossy(value.unwrap_or_default()).into_owned();
                e.branch = Some(r.strip_prefix("refs/heads/").map(str::to_string).unwrap_or(r));
            }
            b"bare" => e.bare = true,
            b"locked" => e.locked = true,
            b"prunable" => e.prunable = true,
            _ => {} // `detached` and attributes of newer git versions
        }
    }
    if let Some(e) = current.take() {
        entries.push(e);
    }
    Ok(entries)
}

fn bytes_to_path(b: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_main_linked_detached_and_flags() {
        let out = b"worktree /r\0HEAD abc\0branch refs/heads/main\0\0\
                    worktree /w/p-42\0HEAD def\0branch refs/heads/feature/SHOP-42\0locked because\0\0\
                    worktree /w/odd\nname\0HEAD 123\0detached\0prunable gitdir file points nowhere\0\0";
        let e = parse(out).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path, PathBuf::from("/r"));
        assert_eq!(e[0].branch.as_deref(), Some("main"));
        assert_eq!(e[1].branch.as_deref(), Some("feature/SHOP-42"));
        assert!(e[1].locked && !e[1].prunable);
        assert_eq!(e[2].path, PathBuf::from("/w/odd\nname"));
        assert_eq!(e[2].branch, None);
        assert!(e[2].prunable);
        assert_eq!(e[2].head.as_deref(), Some("123"));
    }

    #[test]
    fn bare_and_empty() {
        assert_eq!(parse(b"").unwrap(), vec![]);
        let e = parse(b"worktree /r.git\0bare\0\0").unwrap();
        assert!(e[0].bare);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse(b"HEAD abc\0\0").is_err());
    }
}
