//! `circles [DIR]`: import circles among a crate's source files (default: `launcher/src`).
//!
//! Each file's `crate::…` paths (in `use` trees and inline) are resolved to the file that
//! defines the longest matching module; the strongly connected components of more than one
//! file are the circles, printed one a line with their size, then their count. *Why only
//! `crate::` paths*: a module and its own children (`super::`, `mod x;`) are one unit; a
//! circle worth breaking runs between units. Exit status 0 whatever is found: it measures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::error::{Result, io};

pub fn run(dir: &Path) -> Result<()> {
    let mut files = BTreeMap::new();
    collect(dir, dir, &mut files)?;
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).map_err(|e| io("read", path, e))?;
        let targets = graph.entry(module.clone()).or_default();
        for p in crate_paths(&text) {
            let found = (1..=p.len()).rev().map(|n| p[..n].to_vec()).find(|m| files.contains_key(m));
            if let Some(m) = found.filter(|m| m != module) {
                targets.insert(m);
            }
        }
    }
    let circles: Vec<Vec<String>> = components(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| c.iter().map(|m| if m.is_empty() { "lib".into() } else { m.join("/") }).collect())
        .collect();
    for c in &circles {
        println!("{} {}", c.len(), c.join(" "));
    }
    println!("circles: {} (files in them: {})", circles.len(), circles.iter().map(Vec::len).sum::<usize>());
    Ok(())
}

/// Every `.rs` file under `dir`, by its module path (`a/mod.rs` and `a.rs` are `a`).
fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<Vec<String>, PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| io("read", dir, e))? {
        let path = entry.map_err(|e| io("read", dir, e))?.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap_or(&path).with_extension("");
            let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|l| ["mod", "lib", "main"].contains(&l.as_str())) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    Ok(())
}

/// The module paths named after `crate::`, a `use` tree's braces expanded; line comments skipped.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let word_start = i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        rest = &rest[i + "crate::".len()..];
        if word_start {
            tree(rest, Vec::new(), &mut out);
        }
    }
    out
}

/// One `use` tree at the start of `s` (`a::b`, `a::{b, c::d}`), each leaf path into `out`;
/// returns what follows it.
fn tree<'a>(mut s: &'a str, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> &'a str {
    loop {
        s = s.trim_start();
        if let Some(inner) = s.strip_prefix('{') {
            s = inner;
            loop {
                s = tree(s, prefix.clone(), out).trim_start();
                match s.chars().next() {
                    Some(',') => s = &s[1..],
                    Some('}') => return &s[1..],
                    _ => return s,
                }
            }
        }
        let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
        if end == 0 {
            break;
        }
        prefix.push(s[..end].to_string());
        s = &s[end..];
        match s.strip_prefix("::") {
            Some(next) => s = next,
            None => break,
        }
    }
    if !prefix.is_empty() {
        out.push(prefix);
    }
    s
}

/// Tarjan's strongly connected components.
fn components(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g [String], (usize, usize)>,
        stack: Vec<&'g [String]>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'g>(st: &mut State<'g>, v: &'g [String]) {
        let n = st.index.len();
        st.index.insert(v, (n, n));
        st.stack.push(v);
        for w in st.graph.get(v).into_iter().flatten() {
            let low = match st.index.get(w.as_slice()) {
                None => {
                    visit(st, w);
                    st.index[w.as_slice()].1
                }
                Some(&(i, _)) if st.stack.contains(&w.as_slice()) => i,
                Some(_) => continue,
            };
            if let Some(e) = st.index.get_mut(v) {
                e.1 = e.1.min(low);
            }
        }
        let (i, low) = st.index[v];
        if i == low {
            let mut comp = Vec::new();
            while let Some(w) = st.stack.pop() {
                comp.push(w.to_vec());
                if w == v {
                    break;
                }
            }
            comp.sort();
            st.out.push(comp);
        }
    }
    let mut st = State { graph, index: BTreeMap::new(), stack: Vec::new(), out: Vec::new() };
    for v in graph.keys() {
        if !st.index.contains_key(v.as_slice()) {
            visit(&mut st, v);
        }
    }
    st.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str) -> Vec<String> {
        crate_paths(text).into_iter().map(|p| p.join("::")).collect()
    }

    #[test]
    fn use_trees_and_inline_paths_are_read() {
        assert_eq!(paths("use crate::a::{b, c::{d, e}};"), ["a::b", "a::c::d", "a::c::e"]);
        assert_eq!(paths("let x = crate::run::state::lock(sd)?;"), ["run::state::lock"]);
        assert_eq!(paths("// crate::gone\nuse crate::{x, y::Z as W};"), ["x", "y::Z"]);
        assert!(paths("mycrate::a").is_empty());
    }

    #[test]
    fn only_circles_of_more_than_one_are_components_of_more_than_one() {
        let m = |s: &str| vec![s.to_string()];
        let graph: BTreeMap<_, BTreeSet<_>> =
            [(m("a"), [m("b")].into()), (m("b"), [m("a"), m("c")].into()), (m("c"), BTreeSet::new())].into();
        let mut sizes: Vec<usize> = components(&graph).iter().map(Vec::len).collect();
        sizes.sort();
        assert_eq!(sizes, [1, 2]);
    }
}
