use super::*;
use std::ffi::OsStr;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn lookup_matches_at_any_depth_without_regard_to_case_and_leaves_rw_names_out() {
    assert_eq!(lookup(None, os(".envrc"), &[]).map(|t| t.name), Some(".envrc"));
    assert_eq!(lookup(Some(os("sub")), os(".ENVRC"), &[]).map(|t| t.name), Some(".envrc"));
    assert_eq!(lookup(Some(os(".config")), os("mise.toml"), &[]).map(|t| t.tool), Some("mise"));
    assert!(lookup(None, os("README.md"), &[]).is_none());
    assert!(lookup(None, os(".envrc"), &[".envrc".to_string()]).is_none());
}

#[test]
fn in_registry_finds_entries_and_what_lies_inside_directories() {
    assert_eq!(in_registry(b"a/b/c/.envrc", &[]).map(|t| t.name), Some(".envrc"));
    assert_eq!(in_registry(b".vscode/tasks.json", &[]).map(|t| t.name), Some(".vscode"));
    assert_eq!(in_registry(b"x/.vscode/tasks.json", &[]).map(|t| t.name), Some(".vscode"));
    assert!(in_registry(b"src/main.rs", &[]).is_none());
    assert!(in_registry(b"x/.vscode/tasks.json", &[".vscode".to_string()]).is_none());
}

#[test]
fn names_are_unique_and_every_entry_has_at_most_one_star() {
    let mut seen = std::collections::BTreeSet::new();
    for t in REGISTRY {
        assert!(seen.insert(t.name), "{} twice", t.name);
        assert!(t.entry.matches('*').count() <= 1, "{}", t.name);
        assert!(is_name(t.name));
    }
}
