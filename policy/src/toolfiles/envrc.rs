//! What an `.envrc` has direnv read, run or put on `PATH`, so that the sandbox can keep those
//! paths read-only too: an `.envrc` the user allowed (direnv hashes it) stays the same while a
//! script it sources, a `.env` it loads or a `bin/` it puts on `PATH` changes under it, and
//! direnv does not look at those.
//!
//! The `.envrc` is bash, and this is no bash: a small tokenizer (comments, quotes, `\`
//! continuations, commands separated by newlines, `;`, `&&`, `||`, `|`, `&`, parentheses and
//! backquotes) and a look at each command. It is deliberately generous: besides direnv's
//! directives, every word that is a path spelled with a `/` or a leading `.` is taken as
//! something the file runs or reads. Anything it cannot read as a path (`$VAR`, `~`) is left
//! out: the enforcement cannot resolve it either.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// A path an `.envrc` has direnv read, run or put on PATH.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Load {
    /// As written, relative to the .envrc's directory unless absolute.
    pub path: PathBuf,
    /// A directory (what `PATH_add` puts on `PATH`, `watch_dir`, `layout`'s `.direnv`).
    pub dir: bool,
    /// What direnv does with it, for the user: "dotenv loads it", "PATH_add: its programs run
    /// as yours".
    pub what: String,
    /// A bare word (`sh setup.sh`): a file of that name, if one exists, is what the command
    /// reads or runs; nothing to hold or watch when there is none (most such words are no file).
    pub maybe: bool,
}

/// At most this much of a file is read: an `.envrc` is a few lines; a larger one is cut, not
/// refused (the enforcement reads it size-bounded already).
const MAX_TEXT: usize = 1 << 20;
/// At most this many loads are returned: each becomes a mount or a watch.
const MAX_LOADS: usize = 4096;
/// How many directories above `source_up` is followed (deeper trees are rare; the enforcement
/// keeps only those in the writable trees).
const MAX_UP: usize = 32;

/// Stands in a word's text for an expansion (`$X`, `${X}`, `$(…)`) other than `$PWD`: a part
/// of a word holding it is no path this can resolve. (No `.envrc` holds a NUL: bash stops
/// reading a line at one.)
const EXPANDS: char = '\0';

/// One word of a command, after quote removal.
#[derive(Debug, Default, Clone)]
struct Word {
    text: String,
    /// A `~` at its start, unquoted: the user's home, not the directory's.
    tilde: bool,
}

/// The commands of `text`, each its words.
fn commands(text: &str) -> Vec<Vec<Word>> {
    commands_at(cut(text, MAX_TEXT), 0)
}

/// How deep command substitutions are parsed (`"$(cat "$(x)")"`).
const MAX_NESTING: usize = 8;

/// After `$(`: the text up to the matching `)` (quotes inside followed roughly: a `)` in
/// quotes does not end it).
fn substitution(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> String {
    let (mut depth, mut inner, mut quote) = (1usize, String::new(), None::<char>);
    for x in chars.by_ref() {
        match (quote, x) {
            (Some(q), _) if x == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(x),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        inner.push(x);
    }
    inner
}

/// A `$(…)` met in a word: `$(pwd)` is the directory itself, as `$PWD` is; anything else is an
/// expansion, whose command is parsed as one of the file's (`eval "$(cat tools/env.sh)"` reads
/// `tools/env.sh`).
fn command_substitution(
    w: &mut Word,
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    subs: &mut Vec<String>,
) {
    chars.next();
    let inner = substitution(chars);
    if inner.trim() == "pwd" {
        pwd(w, chars);
    } else {
        w.text.push(EXPANDS);
        subs.push(inner);
    }
}

/// `$PWD` (or `$(pwd)`) where a word or a value starts: the directory itself (dropped with the
/// `/` after it); elsewhere, an expansion.
fn pwd(w: &mut Word, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    let at_start = w.text.is_empty() || w.text.ends_with('=') || w.text.ends_with(':');
    if !at_start {
        w.text.push(EXPANDS);
    } else if chars.peek() == Some(&'/') {
        chars.next();
    } else {
        w.text.push('.');
    }
}

fn commands_at(text: &str, nesting: usize) -> Vec<Vec<Word>> {
    let mut subs: Vec<String> = Vec::new();
    let mut out: Vec<Vec<Word>> = Vec::new();
    let mut cmd: Vec<Word> = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = text.chars().peekable();

    fn end_word(cmd: &mut Vec<Word>, word: &mut Option<Word>) {
        if let Some(w) = word.take() {
            cmd.push(w);
        }
    }
    fn end_cmd(out: &mut Vec<Vec<Word>>, cmd: &mut Vec<Word>, word: &mut Option<Word>) {
        end_word(cmd, word);
        if !cmd.is_empty() {
            out.push(std::mem::take(cmd));
        }
    }

    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(x) => word.get_or_insert_with(Word::default).text.push(x),
            },
            '#' if word.is_none() => {
                for x in chars.by_ref() {
                    if x == '\n' {
                        break;
                    }
                }
                end_cmd(&mut out, &mut cmd, &mut word);
            }
            ' ' | '\t' | '\r' => end_word(&mut cmd, &mut word),
            '\n' | ';' | '&' | '|' | '(' | ')' | '`' | '{' | '}' | '<' | '>' => {
                end_cmd(&mut out, &mut cmd, &mut word)
            }
            '\'' => {
                let w = word.get_or_insert_with(Word::default);
                for x in chars.by_ref() {
                    if x == '\'' {
                        break;
                    }
                    w.text.push(x);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(Word::default);
                while let Some(x) = chars.next() {
                    match x {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some('\n') | None => {}
                            Some(y @ ('"' | '\\' | '$' | '`')) => w.text.push(y),
                            Some(y) => {
                                w.text.push('\\');
                                w.text.push(y);
                            }
                        },
                        '$' if chars.peek() == Some(&'(') => command_substitution(w, &mut chars, &mut subs),
                        '$' => dollar(w, &mut chars),
                        _ => w.text.push(x),
                    }
                }
            }
            '$' => {
                if chars.peek() == Some(&'(') {
                    // A command substitution: what is inside is a command of its own.
                    command_substitution(word.get_or_insert_with(Word::default), &mut chars, &mut subs);
                } else {
                    dollar(word.get_or_insert_with(Word::default), &mut chars);
                }
            }
            '~' if word.is_none() => word.get_or_insert_with(Word::default).tilde = true,
            _ => word.get_or_insert_with(Word::default).text.push(c),
        }
    }
    end_cmd(&mut out, &mut cmd, &mut word);
    if nesting < MAX_NESTING {
        for sub in subs {
            out.extend(commands_at(&sub, nesting + 1));
        }
    }
    out
}

/// After a `$` (outside single quotes): `$PWD`/`${PWD}` at the start of a word, or of a value
/// (after `=` or `:`, as in `PATH=$PWD/bin:$PATH`), is the directory itself (dropped, with the
/// `/` after it); any other expansion is marked.
fn dollar(w: &mut Word, chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    let mut name = String::new();
    if chars.peek() == Some(&'{') {
        chars.next();
        for x in chars.by_ref() {
            if x == '}' {
                break;
            }
            name.push(x);
        }
    } else {
        while let Some(&x) = chars.peek() {
            if x.is_ascii_alphanumeric() || x == '_' {
                name.push(x);
                chars.next();
            } else {
                break;
            }
        }
    }
    if name == "PWD" {
        pwd(w, chars);
    } else {
        w.text.push(EXPANDS);
    }
}

/// The longest prefix of `s` at most `max` bytes long, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The word as a path this can resolve, if it is one (no expansion, no `~`, not empty).
fn plain(w: &Word) -> Option<&str> {
    (!w.tilde && !w.text.is_empty() && !w.text.contains(EXPANDS)).then_some(w.text.as_str())
}

/// Whether `s` is spelled as a path: with a `/`, or a leading `.` (not `.`/`..` alone, not a
/// URL, not an option).
fn looks_like_path(s: &str) -> bool {
    !s.is_empty()
        && !s.contains(EXPANDS)
        && s != "."
        && s != ".."
        && !s.starts_with('-')
        && !s.contains("://")
        && (s.contains('/') || s.starts_with('.'))
}

/// The loads found so far, in the order the file names them, each once.
#[derive(Default)]
struct Out {
    loads: Vec<Load>,
    seen: BTreeSet<(String, bool)>,
}

impl Out {
    fn add(&mut self, path: &str, dir: bool, what: &str) {
        self.push(path, dir, what, false);
    }

    fn push(&mut self, path: &str, dir: bool, what: &str, maybe: bool) {
        if self.loads.len() >= MAX_LOADS || path.is_empty() {
            return;
        }
        if self.seen.insert((path.to_string(), dir)) {
            self.loads.push(Load { path: PathBuf::from(path), dir, what: what.to_string(), maybe });
        }
    }
}

/// What `text` (an .envrc) loads, in the order it names them, each once:
///
/// * `dotenv`, `dotenv_if_exists` (default `.env`);
/// * `source_env`, `source_env_if_exists` (a directory means its `.envrc`, which is in the
///   registry anyway: the path is given as written); `source_up` (nothing: the `.envrc` files
///   above are in the registry), `source_up FILE` (`../FILE`, the first place it looks);
/// * `watch_file`, `watch_dir`; `PATH_add`, `path_add VAR`, `load_prefix` (directories);
/// * `layout <any>` (`.direnv`, and for `layout node` `node_modules/.bin`);
/// * `use nix [file]` (`shell.nix`, `default.nix`), `use flake [ref]` (`flake.nix`,
///   `flake.lock` of a local ref), `use devenv` (its `devenv.*` files);
/// * bash's `source X` / `. X`;
/// * every other word of the file that is a path spelled with a `/` or a leading `.` (a script
///   the `.envrc` runs), assignments' values and each part of a `:` list included.
///
/// Quotes and `$PWD/`/`${PWD}/` prefixes are understood; `$VAR` elsewhere is no path. Work is
/// bounded (the first MiB of text, at most 4,096 loads). Never panics on any input (fuzzed by
/// a unit test with random bytes).
pub fn loads(text: &str) -> Vec<Load> {
    let mut out = Out::default();
    for cmd in commands(text) {
        one(&cmd, &mut out);
    }
    out.loads
}

/// A word before a command's name: a builtin that runs the rest (`exec`, `command`), a
/// declaration (`export`, `local`), a keyword (`if`, `then`), or an assignment (`X=…`).
fn prefix_word(w: &str) -> bool {
    const BUILTINS: &[&str] = &[
        "export", "local", "declare", "typeset", "readonly", "command", "builtin", "exec", "eval", "!", "if",
        "then", "elif", "else", "do", "while", "until", "time",
    ];
    if BUILTINS.contains(&w) {
        return true;
    }
    match w.split_once('=') {
        Some((name, _)) => {
            let name = name.strip_suffix('+').unwrap_or(name);
            !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit()
        }
        None => false,
    }
}

/// One command: its directive, if any, then every other word that looks like a path.
fn one(cmd: &[Word], out: &mut Out) {
    // What comes before the command's name (`export`, `command`, `X=… cmd`): its assignments
    // are looked at like any other word below.
    let start = cmd.iter().position(|w| !prefix_word(&w.text)).unwrap_or(cmd.len());
    let (name, args) = match cmd.get(start) {
        Some(w) => (w.text.as_str(), &cmd[start + 1..]),
        None => ("", &cmd[0..0]),
    };
    let paths: Vec<&str> = args.iter().filter_map(plain).collect();
    let files: Vec<&str> = paths.iter().copied().filter(|p| !p.starts_with('-')).collect();
    let mut handled = true;
    match name {
        "dotenv" | "dotenv_if_exists" => match args.first() {
            None => out.add(".env", false, "dotenv loads it into your environment"),
            Some(w) => {
                if let Some(f) = plain(w) {
                    out.add(f, false, "dotenv loads it into your environment");
                }
            }
        },
        "source_env" | "source_env_if_exists" => {
            for f in &files {
                out.add(f, false, "source_env runs it as a bash script (a directory: its .envrc)");
            }
        }
        "source_up" | "source_up_if_exists" => {
            // The nearest file of that name above, in any directory up to `/` (the caller keeps
            // those in the writable trees); a `.envrc` there is in the registry anyway.
            if let Some(f) = files.first().filter(|f| !f.contains('/') && !f.eq_ignore_ascii_case(".envrc")) {
                for up in 1..=MAX_UP {
                    out.add(&format!("{}{f}", "../".repeat(up)), false, "source_up runs it as a bash script");
                }
            }
        }
        "watch_file" => {
            for f in &files {
                out.add(f, false, "watch_file: a change to it has direnv reload");
            }
        }
        "watch_dir" => {
            for f in &files {
                out.add(f, true, "watch_dir: a change in it has direnv reload");
            }
        }
        "PATH_add" | "path_add" | "PATH_rm" => {
            let dirs = if name == "path_add" { files.get(1..).unwrap_or(&[]) } else { &files[..] };
            if name != "PATH_rm" {
                for f in dirs {
                    out.add(f, true, "PATH_add: its programs run as yours");
                }
            }
        }
        "load_prefix" => {
            for f in &files {
                out.add(f, true, "load_prefix: its bin/ is put on PATH, its programs run as yours");
            }
        }
        "source" | "." => {
            if let Some(f) = files.first() {
                out.add(f, false, "sourced: it runs as a bash script");
            }
        }
        "use" | "use_nix" | "use_flake" | "use_devenv" => {
            let (what, rest) = match name {
                "use" => (files.first().copied().unwrap_or(""), files.get(1..).unwrap_or(&[])),
                "use_nix" => ("nix", &files[..]),
                "use_flake" => ("flake", &files[..]),
                _ => ("devenv", &files[..]),
            };
            match what {
                "nix" => {
                    let given: Vec<&&str> =
                        rest.iter().filter(|f| f.ends_with(".nix") || looks_like_path(f)).collect();
                    let packages = args.iter().any(|w| w.text == "-p" || w.text == "--packages");
                    if given.is_empty() && !packages {
                        out.add("shell.nix", false, "use nix evaluates it; its build hooks run as yours");
                        out.add("default.nix", false, "use nix evaluates it; its build hooks run as yours");
                    }
                    for f in given {
                        out.add(f, false, "use nix evaluates it; its build hooks run as yours");
                    }
                }
                "flake" => {
                    // `use flake [ref]`: the directory's flake, or the one a local ref names
                    // (`.#dev`, `./sub`, `path:sub#x`); a remote ref (`github:o/r`) reads
                    // nothing of the directory's.
                    let r = rest.first().map_or("", |r| r.split('#').next().unwrap_or(""));
                    let local = r.strip_prefix("path:").or((!r.contains(':')).then_some(r));
                    if let Some(dir) = local {
                        let dir = dir.trim_end_matches('/');
                        let base =
                            if dir.is_empty() || dir == "." { String::new() } else { format!("{dir}/") };
                        out.add(
                            &format!("{base}flake.nix"),
                            false,
                            "use flake evaluates it; its shell hook runs as yours",
                        );
                        out.add(&format!("{base}flake.lock"), false, "use flake takes the inputs it pins");
                    }
                }
                "devenv" => {
                    for f in ["devenv.nix", "devenv.yaml", "devenv.lock", "devenv.local.nix"] {
                        out.add(
                            f,
                            false,
                            "use devenv evaluates it; its shell hook and processes run as yours",
                        );
                    }
                }
                _ => handled = false,
            }
        }
        n if n == "layout" || n.starts_with("layout_") => {
            out.add(".direnv", true, "layout keeps the environment it activates here");
            let kind =
                if n == "layout" { files.first().copied().unwrap_or("") } else { &n["layout_".len()..] };
            if kind == "node" {
                out.add("node_modules/.bin", true, "layout node: its programs are put on PATH, run as yours");
            }
        }
        _ => handled = false,
    }
    // The command word itself and every argument of a command that is no directive, and the
    // assignments before any command: a path spelled as one is something the file runs or
    // reads.
    let rest = if handled { &cmd[..start] } else { cmd };
    for (i, w) in rest.iter().enumerate() {
        if w.tilde || w.text.is_empty() {
            continue;
        }
        let text = w.text.as_str();
        // `VAR=value`, `--opt=value`: the value; a PATH-like value: each of its parts.
        let (var, value) = match text.split_once('=') {
            Some((k, v)) => (Some(k), v),
            None => (None, text),
        };
        // `PATH=bin:$PATH` (any `…PATH` variable): each part is a directory searched for
        // programs, spelled as a path or not.
        let search = var.is_some_and(|k| k.ends_with("PATH")) && i < start;
        for part in value.split(':') {
            if value.contains("://") || part.is_empty() || part.contains(EXPANDS) {
                continue;
            }
            if search && part != "." && !part.starts_with('-') {
                out.add(part, true, "on a PATH the .envrc sets: its programs run as yours");
            } else if looks_like_path(part) {
                out.add(part, false, "the .envrc names it: a script it runs or a file it reads");
            } else if !handled
                && i > start
                && var.is_none()
                && !part.starts_with('-')
                && part != "."
                && part != ".."
            {
                // `sh setup.sh`: an argument that names a file of the directory, if one exists.
                out.push(part, false, "the .envrc names it: a script it runs or a file it reads", true);
            }
        }
    }
}

/// Whether direnv's own config (the text of `~/.config/direnv/direnv.toml`) has it load a
/// `.env` in every directory (`load_dotenv = true` under `[global]`).
///
/// A file that is no TOML is taken to load it when it says `load_dotenv` at all: direnv's own
/// reading of a broken file is not something to bet the user's `.env` files on.
pub fn loads_dotenv(direnv_toml: &str) -> bool {
    match direnv_toml.parse::<toml::Table>() {
        Ok(t) => {
            t.get("global").and_then(|g| g.get("load_dotenv")).and_then(toml::Value::as_bool).unwrap_or(false)
        }
        Err(_) => direnv_toml.contains("load_dotenv"),
    }
}

#[cfg(test)]
#[path = "envrc_tests.rs"]
mod tests;
