//! Gives `src/clis.rs` the clap definitions of both binaries without the xtask depending on them.
//!
//! The launcher keeps its clap tree in `launcher/src/cli.rs` (clap definitions only), which
//! `src/clis.rs` includes with `#[path]`. The netlock helper keeps it in `src/main.rs` beside the
//! code that runs it; until it has its own `netlock-helper/src/cli.rs`, the items deriving clap
//! traits are cut out of main.rs here. Either way the man page is generated from the very types
//! the binary parses with, so it cannot drift from `--help`.

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("../..");
    let cli_rs = root.join("netlock-helper/src/cli.rs");
    let main_rs = root.join("netlock-helper/src/main.rs");
    println!("cargo::rerun-if-changed={}", cli_rs.display());
    println!("cargo::rerun-if-changed={}", main_rs.display());
    let text = if cli_rs.exists() {
        fs::read_to_string(&cli_rs).expect("read netlock-helper/src/cli.rs")
    } else {
        let main = fs::read_to_string(&main_rs).expect("read netlock-helper/src/main.rs");
        let items = clap_items(&main);
        assert!(
            items.contains("struct Cli"),
            "no `struct Cli` deriving clap::Parser in {}",
            main_rs.display()
        );
        format!("use clap::{{Args, Parser, Subcommand, ValueEnum}};\n\n{items}")
    };
    // The items may be private; this accessor is not.
    let text = format!("{text}\npub fn command() -> clap::Command {{\n    <Cli as clap::CommandFactory>::command()\n}}\n");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("helper_cli.rs");
    fs::write(out, text).expect("write helper_cli.rs");
}

/// The items (with their doc comments and attributes) whose derive list names a clap trait.
fn clap_items(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        let clap_derive = t.starts_with("#[derive(")
            && ["Parser", "Subcommand", "Args", "ValueEnum"].iter().any(|d| t.contains(d));
        if !clap_derive {
            i += 1;
            continue;
        }
        // Doc comments directly above the derive belong to the item.
        let mut start = i;
        while start > 0 && lines[start - 1].trim_start().starts_with("///") {
            start -= 1;
        }
        let mut depth = 0i32;
        let mut opened = false;
        let mut end = i;
        'item: for (j, line) in lines.iter().enumerate().skip(i) {
            for c in code_chars(line) {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened && depth == 0 && j > i => {
                        end = j;
                        break 'item;
                    }
                    _ => {}
                }
                if opened && depth == 0 {
                    end = j;
                    break 'item;
                }
            }
            end = j;
        }
        for line in &lines[start..=end] {
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        i = end + 1;
    }
    out
}

/// The characters of a line outside string literals and `//` comments.
fn code_chars(line: &str) -> Vec<char> {
    let mut out = Vec::new();
    let mut in_str = false;
    let mut escaped = false;
    let mut prev = '\0';
    for c in line.chars() {
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
        } else if c == '/' && prev == '/' {
            out.pop();
            break;
        } else {
            out.push(c);
        }
        prev = c;
    }
    out
}
