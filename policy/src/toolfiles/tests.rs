use super::*;
use std::ffi::OsStr;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn name_of(parent: Option<&str>, entry: &str) -> Option<&'static str> {
    lookup(parent.map(os), os(entry), &[]).map(|t| t.name)
}

fn rw(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn lookup_matches_in_any_directory_without_regard_to_case() {
    assert_eq!(name_of(None, ".envrc"), Some(".envrc"));
    assert_eq!(name_of(Some("sub"), ".envrc"), Some(".envrc"));
    assert_eq!(name_of(Some("sub"), ".ENVRC"), Some(".envrc"), "a case-folding directory");
    assert_eq!(name_of(Some("deep"), "Rust-Toolchain.TOML"), Some("rust-toolchain.toml"));
    assert_eq!(name_of(Some("x"), ".vscode"), Some(".vscode"));
    assert!(lookup(None, os(".vscode"), &[]).is_some_and(|t| t.dir));
    assert_eq!(name_of(None, "README.md"), None);
    assert_eq!(name_of(None, ".envrc.bak"), None);
    assert_eq!(name_of(None, "envrc"), None);
}

#[test]
fn lookup_patterns_take_any_bytes_for_their_star() {
    assert_eq!(name_of(None, "mise.toml"), Some("mise.toml"));
    assert_eq!(name_of(None, "mise.local.toml"), Some("mise.*.toml"));
    assert_eq!(name_of(None, "mise.production.local.toml"), Some("mise.*.toml"));
    assert_eq!(name_of(None, ".mise.dev.toml"), Some(".mise.*.toml"));
    assert_eq!(name_of(None, "mise.tom"), None);
    assert_eq!(name_of(None, "mise..toml"), Some("mise.*.toml"), "the star may stand for nothing");
    assert_eq!(name_of(None, "app.code-workspace"), Some("*.code-workspace"));
    assert_eq!(name_of(None, ".code-workspace"), Some("*.code-workspace"));
    assert_eq!(name_of(None, "lefthook.yml"), Some("lefthook.yml"), "the exact name before the pattern");
    assert_eq!(name_of(None, "lefthook.toml"), Some("lefthook.*"));
    assert_eq!(name_of(None, ".lefthook-local.jsonc"), Some(".lefthook-local.*"));
    // Non-UTF-8 bytes are bytes like any other.
    use std::os::unix::ffi::OsStrExt;
    let odd = OsStr::from_bytes(b"mise.\xff.toml");
    assert_eq!(lookup(None, odd, &[]).map(|t| t.name), Some("mise.*.toml"));
}

#[test]
fn lookup_entries_with_a_parent_match_only_there() {
    assert_eq!(name_of(Some(".cargo"), "config.toml"), Some(".cargo/config.toml"));
    assert_eq!(name_of(Some(".CARGO"), "config"), Some(".cargo/config"));
    assert_eq!(name_of(Some("src"), "config.toml"), None);
    assert_eq!(name_of(None, "config.toml"), None, "no parent known: not in one");
    assert_eq!(name_of(Some(".config"), "mise"), Some(".config/mise"));
    assert_eq!(name_of(Some("src"), "mise"), None, "a directory named mise elsewhere is the project's");
    assert_eq!(name_of(Some("mise"), "config.toml"), Some("mise/config.toml"));
    assert_eq!(name_of(Some("mise"), "config.dev.toml"), Some("mise/config.*.toml"));
    assert_eq!(
        name_of(Some(".config"), "mise.dev.toml"),
        Some("mise.*.toml"),
        "the any-directory entry first"
    );
    assert_eq!(name_of(Some(".yarn"), "releases"), Some(".yarn/releases"));
    assert_eq!(name_of(Some(".yarn"), "cache"), None, "yarn's cache is written by installs");
}

#[test]
fn rw_names_leave_the_file_writable_under_any_entry_it_matches() {
    assert!(lookup(None, os(".envrc"), &rw(&[".envrc"])).is_none());
    assert!(lookup(None, os(".envrc"), &rw(&[".vscode"])).is_some());
    // `lefthook.yml` matches `lefthook.yml` and `lefthook.*`: naming either leaves it writable.
    assert!(lookup(None, os("lefthook.yml"), &rw(&["lefthook.yml"])).is_none());
    assert!(lookup(None, os("lefthook.yml"), &rw(&["lefthook.*"])).is_none());
    assert!(lookup(None, os("lefthook.toml"), &rw(&["lefthook.yml"])).is_some(), "only the file named");
    assert!(lookup(Some(os(".config")), os("mise.toml"), &rw(&[".config/mise.toml"])).is_none());
    // An rw value is a registry name, compared exactly.
    assert!(lookup(None, os(".envrc"), &rw(&[".ENVRC"])).is_some());
}

#[test]
fn in_registry_finds_entries_at_any_depth_and_what_lies_inside_directories() {
    let at = |p: &[u8]| in_registry(p, &[]).map(|t| t.name);
    assert_eq!(at(b".envrc"), Some(".envrc"));
    assert_eq!(at(b"a/b/c/.envrc"), Some(".envrc"));
    assert_eq!(at(b".vscode/tasks.json"), Some(".vscode"));
    assert_eq!(at(b"x/y/.vscode/tasks.json"), Some(".vscode"));
    assert_eq!(at(b"x/.vscode"), Some(".vscode"));
    assert_eq!(at(b"crates/a/.cargo/config.toml"), Some(".cargo/config.toml"));
    assert_eq!(at(b"web/.config/mise/conf.d/a.toml"), Some(".config/mise"));
    assert_eq!(at(b"web/.yarn/releases/yarn-4.cjs"), Some(".yarn/releases"));
    assert_eq!(at(b"deep/er/.DEVCONTAINER/devcontainer.json"), Some(".devcontainer"));
    assert_eq!(at(b"a//.envrc"), Some(".envrc"), "empty components skipped");
    assert_eq!(at(b"src/main.rs"), None);
    assert_eq!(at(b".cargo/registry.toml"), None);
    assert_eq!(at(b"config.toml"), None);
    assert_eq!(at(b"docs/vscode/settings.json"), None);
    assert_eq!(at(b""), None);
    assert!(in_registry(b"x/.vscode/tasks.json", &rw(&[".vscode"])).is_none());
}

#[test]
fn is_name_takes_registry_names_only() {
    for n in [".envrc", "mise.*.toml", ".config/mise.toml", ".cargo/config.toml", ".vscode", "lefthook.yml"] {
        assert!(is_name(n), "{n}");
    }
    for n in [".bashrc", "mise.dev.toml", ".ENVRC", "config.toml", "", ".vscode/"] {
        assert!(!is_name(n), "{n}");
    }
    assert_eq!(names().len(), REGISTRY.len());
}

#[test]
fn only_cd_moves_aside() {
    assert!(Trigger::Cd.moves_aside());
    for t in [Trigger::Open, Trigger::Git, Trigger::Command] {
        assert!(!t.moves_aside(), "{t:?}");
    }
}

#[test]
fn every_entry_is_well_formed_and_named_once() {
    let mut seen = std::collections::BTreeSet::new();
    for t in REGISTRY {
        assert!(seen.insert(t.name), "{} twice", t.name);
        assert!(t.entry.matches('*').count() <= 1, "{}: at most one star", t.name);
        assert!(!t.entry.is_empty() && !t.entry.contains('/'), "{}: one component", t.name);
        let want = match t.parent {
            None => t.entry.to_string(),
            Some(p) => format!("{p}/{}", t.entry),
        };
        assert_eq!(t.name, want, "a name says where the entry is");
        assert!(!t.tool.is_empty() && !t.why.is_empty(), "{}", t.name);
        assert!(is_name(t.name));
        // The entry's own name finds it (or an entry of the same tool before it).
        let parent = t.parent.map(OsStr::new);
        let sample = t.entry.replace('*', "x");
        let hit = lookup(parent, OsStr::new(&sample), &[]).unwrap_or_else(|| panic!("{} not found", t.name));
        assert_eq!(hit.tool, t.tool, "{}", t.name);
    }
}

#[test]
fn the_registry_keeps_every_name_of_the_old_rule_and_the_new_tools() {
    // Names users have in OCSB_RW_TOOL_FILES already.
    for n in [
        ".envrc",
        ".vscode",
        ".idea",
        ".devcontainer",
        ".devcontainer.json",
        ".gitmodules",
        ".pre-commit-config.yaml",
        "lefthook.yml",
        ".lefthook.yml",
        "lefthook.yaml",
        "lefthook-local.yml",
        ".lefthook-local.yml",
    ] {
        assert!(is_name(n), "{n}");
    }
    for n in [
        "rust-toolchain",
        "rust-toolchain.toml",
        ".tool-versions",
        "mise.toml",
        ".mise.toml",
        "mise.*.toml",
        ".mise.*.toml",
        ".mise",
        ".config/mise.toml",
        ".config/mise",
        "mise/config.toml",
        ".rtx.toml",
        ".helix",
        ".zed",
    ] {
        assert!(is_name(n), "{n}");
    }
    let by = |n: &str| REGISTRY.iter().find(|t| t.name == n).unwrap();
    assert_eq!(by(".envrc").trigger, Trigger::Cd);
    assert_eq!(by("rust-toolchain.toml").trigger, Trigger::Cd);
    assert_eq!(by(".vscode").trigger, Trigger::Open);
    assert_eq!(by(".gitmodules").trigger, Trigger::Git);
    assert_eq!(by(".cargo/config.toml").trigger, Trigger::Command);
    // Version-only files name a release and run nothing of the project's.
    for n in [".nvmrc", ".node-version", ".python-version", ".ruby-version", ".env"] {
        assert_eq!(name_of(None, n), None, "{n}");
    }
}

#[test]
fn markdown_table_has_a_row_per_entry() {
    let t = markdown_table();
    assert_eq!(t.lines().count(), REGISTRY.len() + 2);
    assert!(t.lines().all(|l| l.starts_with('|') && l.ends_with('|')), "{t}");
    assert!(t.contains("| `.envrc` | direnv | you cd into the directory |"), "{t}");
    assert!(t.contains("| `.vscode` (directory) | VS Code |"), "{t}");
    // Every row has four cells: a `|` in a reason is escaped.
    for l in t.lines() {
        let cells = l.replace("\\|", "").matches('|').count();
        assert_eq!(cells, 5, "{l}");
    }
}

/// The README's table of tool files is this registry's, row for row. When it fails, paste the
/// table it prints between the two markers of README.md.
#[test]
fn readme_tool_file_table_is_the_registry() {
    const BEGIN: &str = "<!-- tool-files:begin -->";
    const END: &str = "<!-- tool-files:end -->";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let want = markdown_table();
    let block = readme.split_once(BEGIN).and_then(|(_, rest)| rest.split_once(END)).map(|(b, _)| b.trim());
    assert!(
        block == Some(want.trim()),
        "README.md's tool-file table is not the registry's; put this between {BEGIN} and {END}:\n\n{BEGIN}\n{want}{END}\n"
    );
}
