//! Gives `src/clis.rs` the clap definitions of `ocsb` and `ocsb-netlock-helper` without the
//! xtask linking either program.
//!
//! Both keep their clap types beside the code that runs them (the launcher's `Cli` in
//! `launcher/src/cli.rs` refers to `crate::netlock::NetlockCommand`, the helper's `Cli` is in its
//! `main.rs`). For each crate this script copies, from every source file, the items that derive a
//! clap trait plus the top-level `const`s and the `use` lines they may need (clap, std, and
//! `crate::` paths to other copied items), into a module tree that mirrors the crate's. So the man
//! pages are rendered from the very definitions the binaries parse with and cannot drift from
//! `--help`. If a clap item ever needs something this cannot copy (a value parser function, a type
//! from another crate), the xtask stops compiling with that name in the error: then make the
//! launcher a lib+bin crate and depend on it instead.

use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

const CLAP_TRAITS: [&str; 4] = ["Parser", "Subcommand", "Args", "ValueEnum"];

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR")).join("../..");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for (crate_dir, module, file) in
        [("launcher", "launcher", "launcher_cli.rs"), ("netlock-helper", "helper", "helper_cli.rs")]
    {
        let src = root.join(crate_dir).join("src");
        println!("cargo::rerun-if-changed={}", src.display());
        let text = mirror(&src, &format!("crate::clis::{module}::"));
        fs::write(out.join(file), text).expect("write the generated clap module");
    }
}

/// A module of the mirrored tree: the copied items of one source file.
#[derive(Default)]
struct Module {
    uses: Vec<String>,
    items: Vec<String>,
    names: BTreeSet<String>,
}

fn mirror(src: &Path, prefix: &str) -> String {
    let mut modules: BTreeMap<Vec<String>, Module> = BTreeMap::new();
    let mut parser: Option<(Vec<String>, String)> = None;
    for path in rust_files(src) {
        println!("cargo::rerun-if-changed={}", path.display());
        let rel = path.strip_prefix(src).expect("under src");
        let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let file = module.pop().expect("a file name");
        match file.as_str() {
            "main.rs" | "lib.rs" if module.is_empty() => {}
            "mod.rs" => {}
            f => module.push(f.trim_end_matches(".rs").to_string()),
        }
        let text = fs::read_to_string(&path).expect("read a source file");
        let items = top_level_items(&text);
        // Only files that define clap items are mirrored (their consts and imports with them).
        if !items.iter().any(|i| clap_item(i, &strip_comments_and_attrs(i)).is_some()) {
            continue;
        }
        let m = modules.entry(module.clone()).or_default();
        for item in items {
            let code = strip_comments_and_attrs(&item);
            let code = code.trim();
            if code.starts_with("use ") {
                m.uses.push(code.to_string());
            } else if let Some((is_parser, name)) = clap_item(&item, code) {
                if is_parser && parser.is_none() {
                    parser = Some((module.clone(), name.clone()));
                }
                m.names.insert(name);
                m.items.push(clean_item(&item).replace("crate::", prefix));
            } else if let Some(name) = const_name(code) {
                m.names.insert(name);
                m.items.push(clean_item(&item).replace("crate::", prefix));
            }
        }
    }
    // Keep the `use` lines that can resolve in the mirror.
    let names: BTreeMap<Vec<String>, BTreeSet<String>> =
        modules.iter().map(|(k, v)| (k.clone(), v.names.clone())).collect();
    let mut out = String::new();
    let (pmod, pname) =
        parser.unwrap_or_else(|| panic!("no struct deriving clap::Parser under {}", src.display()));
    let _ = writeln!(
        out,
        "/// The program's clap command.\npub fn command() -> clap::Command {{\n    <self::{}{pname} as clap::CommandFactory>::command()\n}}\n",
        pmod.iter().map(|m| format!("{m}::")).collect::<String>()
    );
    emit(&mut out, &[], &modules, &names, prefix);
    out
}

fn emit(
    out: &mut String,
    at: &[String],
    modules: &BTreeMap<Vec<String>, Module>,
    names: &BTreeMap<Vec<String>, BTreeSet<String>>,
    prefix: &str,
) {
    if let Some(m) = modules.get(at) {
        for u in &m.uses {
            if let Some(u) = resolvable_use(u, names, prefix) {
                let _ = writeln!(out, "{u}");
            }
        }
        for item in &m.items {
            let _ = writeln!(out, "{item}\n");
        }
    }
    // Children: every module path one longer than `at` that starts with it (or has a descendant).
    let children: BTreeSet<String> = modules
        .keys()
        .filter(|k| k.len() > at.len() && k.starts_with(at))
        .map(|k| k[at.len()].clone())
        .collect();
    for child in children {
        let mut path = at.to_vec();
        path.push(child.clone());
        let _ = writeln!(out, "pub mod {child} {{");
        emit(out, &path, modules, names, prefix);
        let _ = writeln!(out, "}}");
    }
}

/// A `use` line that resolves in the mirror: external clap/std paths as they are, `crate::`
/// paths narrowed to the names the mirror has; anything else is dropped.
fn resolvable_use(u: &str, names: &BTreeMap<Vec<String>, BTreeSet<String>>, prefix: &str) -> Option<String> {
    let body = u.trim_start_matches("use ").trim_end_matches(';').trim();
    for ext in ["clap", "clap_complete", "std", "core"] {
        if body == ext || body.starts_with(&format!("{ext}::")) {
            return Some(format!("use {body};"));
        }
    }
    let rest = body.strip_prefix("crate::")?;
    let (path, list): (&str, Vec<&str>) = match rest.find("::{") {
        Some(i) => (&rest[..i], rest[i + 3..].trim_end_matches('}').split(',').map(str::trim).collect()),
        None => {
            let i = rest.rfind("::")?;
            (&rest[..i], vec![&rest[i + 2..]])
        }
    };
    let module: Vec<String> = path.split("::").map(str::to_string).collect();
    let have = names.get(&module)?;
    let keep: Vec<&str> = list.into_iter().filter(|n| have.contains(*n)).collect();
    if keep.is_empty() {
        return None;
    }
    Some(format!("use {prefix}{path}::{{{}}};", keep.join(", ")))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(dir).expect("read a source dir").flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            // src/bin/* are separate programs.
            if p.file_name().is_some_and(|n| n != "bin") {
                out.extend(rust_files(&p));
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// `Some((is_parser, name))` when the item derives a clap trait.
fn clap_item(item: &str, code: &str) -> Option<(bool, String)> {
    let derives: Vec<&str> = item.lines().map(str::trim).filter(|l| l.starts_with("#[derive(")).collect();
    let is_clap = derives.iter().any(|d| CLAP_TRAITS.iter().any(|t| d.contains(t)));
    if !is_clap {
        return None;
    }
    let is_parser = derives.iter().any(|d| d.contains("Parser"));
    let mut words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
    while let Some(w) = words.next() {
        if w == "struct" || w == "enum" {
            return words.find(|w| !w.is_empty()).map(|n| (is_parser, n.to_string()));
        }
    }
    None
}

fn const_name(code: &str) -> Option<String> {
    let code = code.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
    let rest = code.strip_prefix("const ")?;
    Some(rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next()?.to_string())
}

/// The item without inner attributes and module docs (they belong to the file, not the item).
fn clean_item(item: &str) -> String {
    item.lines()
        .filter(|l| !l.trim_start().starts_with("#![") && !l.trim_start().starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// The item's code without comments and `#[...]` attributes, whitespace collapsed.
fn strip_comments_and_attrs(item: &str) -> String {
    let code = scan(item).code;
    let mut out = String::new();
    let mut depth = 0usize;
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let opens = match (chars[i], chars.get(i + 1), chars.get(i + 2)) {
            ('#', Some('['), _) => 2,
            ('#', Some('!'), Some('[')) => 3,
            _ => 0,
        };
        if depth == 0 && opens > 0 {
            depth = 1;
            i += opens;
            continue;
        }
        if depth > 0 {
            match chars[i] {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            i += 1;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The top-level items of a file, each with its docs and attributes.
fn top_level_items(text: &str) -> Vec<String> {
    let s = scan(text);
    let bytes: Vec<char> = text.chars().collect();
    let mut items = Vec::new();
    let mut depth = 0i32;
    let mut start = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        if s.mask[i] {
            match bytes[i] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        let mut end = i + 1;
                        let mut j = end;
                        while j < bytes.len() && bytes[j].is_whitespace() {
                            j += 1;
                        }
                        if j < bytes.len() && bytes[j] == ';' {
                            end = j + 1;
                        }
                        items.push(bytes[start..end].iter().collect());
                        start = end;
                        i = end;
                        continue;
                    }
                }
                ';' if depth == 0 => {
                    items.push(bytes[start..=i].iter().collect());
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    items
}

struct Scanned {
    /// Per char: true when it is code (not in a comment, string or char literal).
    mask: Vec<bool>,
    code: String,
}

/// Marks which characters are code: skips `//` and `/* */` comments, string, raw string, byte
/// string and char literals (so a `'{'` or a `"}"` does not count as a brace).
fn scan(text: &str) -> Scanned {
    let c: Vec<char> = text.chars().collect();
    let mut mask = vec![true; c.len()];
    let mut i = 0;
    while i < c.len() {
        let start = i;
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (c.get(i + 1) == Some(&'#') || c.get(i + 1) == Some(&'"'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            let mut hashes = 0;
            let mut j = i + 1;
            while j < c.len() && c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}') and not a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                continue;
            }
        } else {
            i += 1;
            continue;
        }
        for m in mask.iter_mut().take(i.min(c.len())).skip(start) {
            *m = false;
        }
    }
    let code = c.iter().zip(&mask).map(|(ch, m)| if *m { *ch } else { ' ' }).collect();
    Scanned { mask, code }
}
