//! The statement grammar of the bash subset.
//!
//! ```text
//! file       = { blank | comment | newline | line }
//! line       = "export" blanks assignment [ comment ] ( newline | EOF )
//!            | assignment { blanks assignment } [ comment ] ( newline | EOF )
//! assignment = NAME ( "=" | "+=" ) ( word | "(" { word | comment | newline } ")" )
//! ```
//!
//! (Backslash-newline outside single quotes and comments has already vanished in the cursor.)
//!
//! Anything else — a command, a keyword, a function, `source`, an operator — is an error at its
//! line and column. The result is a list of assignments whose values are still unevaluated
//! words; [`super::load`] evaluates them in order.

use super::lexer::{Ctx, Cursor, Word, is_name_start, metachar_error};
use crate::{Location, Result};

/// `NAME=value`, `NAME+=value`, `NAME=(…)` or `NAME+=(…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assignment {
    pub name: String,
    /// Where the name starts.
    pub at: Location,
    pub append: bool,
    pub rhs: Rhs,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rhs {
    Scalar(Word),
    /// The elements and the location of the `(`.
    Array(Vec<Word>, Location),
}

/// Parses a whole file. `file` is the name used in error locations.
pub(crate) fn parse(text: &str, file: &str) -> Result<Vec<Assignment>> {
    let mut cur = Cursor::new(text, file);
    let mut out = Vec::new();
    loop {
        cur.skip_blanks();
        match cur.peek() {
            None => return Ok(out),
            Some('\n') => {
                cur.bump();
                continue;
            }
            Some('#') => {
                cur.skip_comment();
                continue;
            }
            Some(_) => {}
        }
        line(&mut cur, &mut out)?;
    }
}

/// One logical line of assignments, up to (not including) its newline.
fn line(cur: &mut Cursor<'_>, out: &mut Vec<Assignment>) -> Result<()> {
    let mut exported = false;
    if cur.name_ahead().as_deref() == Some("export") && matches!(cur.peek_at(6), Some(' ' | '\t')) {
        for _ in 0..6 {
            cur.bump();
        }
        cur.skip_blanks();
        exported = true;
    }
    let mut first = true;
    loop {
        match assignment(cur)? {
            Some(a) => out.push(a),
            None if first && exported => {
                return Err(cur.err(
                    cur.loc(),
                    "`export` must be followed by NAME=value",
                    "write `export OCSB_NAME=value`, or drop `export` (it changes nothing here)",
                ));
            }
            None if first => return Err(command(cur)?),
            None => {
                return Err(cur.err(
                    cur.loc(),
                    "unexpected text after an assignment",
                    "in bash `NAME=a b` runs the command `b`; quote a value that contains blanks: NAME='a b'",
                ));
            }
        }
        first = false;
        cur.skip_blanks();
        match cur.peek() {
            None | Some('\n') => return Ok(()),
            Some('#') => {
                cur.skip_comment();
                return Ok(());
            }
            Some(c @ (';' | '&' | '|' | '<' | '>' | '(' | ')')) => {
                return Err(metachar_error(cur, c));
            }
            Some(_) if exported => {
                // bash expands all of `export A=1 B=$A` before assigning any: B would get the
                // old value of A. One assignment per `export` line avoids the difference.
                return Err(cur.err(
                    cur.loc(),
                    "only one assignment may follow `export`",
                    "put each assignment on its own line (`export` changes nothing here)",
                ));
            }
            Some(_) => {}
        }
    }
}

/// An assignment at the cursor, or `None` (nothing consumed) if the cursor is not at one.
fn assignment(cur: &mut Cursor<'_>) -> Result<Option<Assignment>> {
    let Some(name) = cur.name_ahead() else { return Ok(None) };
    let n = name.chars().count();
    let append = match (cur.peek_at(n), cur.peek_at(n + 1)) {
        (Some('='), _) => false,
        (Some('+'), Some('=')) => true,
        (Some('['), _) => {
            return Err(cur.err(
                cur.loc_ahead(n),
                format!("array subscripts (`{name}[…]=`) are not supported"),
                "assign the whole array, NAME=(a b), or add to it, NAME+=(c)",
            ));
        }
        _ => return Ok(None),
    };
    let at = cur.loc();
    for _ in 0..n + 1 + usize::from(append) {
        cur.bump();
    }
    let rhs = if cur.peek() == Some('(') {
        let open = cur.loc();
        cur.bump();
        Rhs::Array(elements(cur, &open)?, open)
    } else {
        Rhs::Scalar(cur.read_word(Ctx::Scalar)?)
    };
    Ok(Some(Assignment { name, at, append, rhs }))
}

/// The elements of an array, after its `(`, up to and including the `)`.
fn elements(cur: &mut Cursor<'_>, open: &Location) -> Result<Vec<Word>> {
    let mut words = Vec::new();
    loop {
        cur.skip_blanks();
        match cur.peek() {
            None => {
                return Err(cur.err(
                    open.clone(),
                    "unterminated array: `(` without `)`",
                    "add the closing )",
                ));
            }
            Some('\n') => {
                cur.bump();
            }
            Some('#') => cur.skip_comment(),
            Some(')') => {
                cur.bump();
                return match cur.peek() {
                    // Not `#`: bash reads `NAME=(a)#x` as the *string* `(a)#x`.
                    None | Some(' ' | '\t' | '\n') => Ok(words),
                    Some(c @ (';' | '&' | '|' | '<' | '>' | '(' | ')')) => Err(metachar_error(cur, c)),
                    Some(_) => Err(cur.err(
                        cur.loc(),
                        "text right after the closing `)` of an array",
                        "put a blank or a newline after `)`",
                    )),
                };
            }
            Some(_) => words.push(cur.read_word(Ctx::Element)?),
        }
    }
}

const CONTROL: &[&str] = &[
    "if", "then", "elif", "else", "fi", "case", "esac", "for", "select", "while", "until", "do", "done",
    "in", "time", "coproc", "{", "}", "[[", "]]", "!",
];

/// The error for a line that does not start with an assignment: says what bash would have done.
fn command(cur: &mut Cursor<'_>) -> Result<crate::Error> {
    let at = cur.loc();
    match cur.peek() {
        Some('(') => {
            return Ok(cur.err(
                at,
                "subshell `( … )` is not allowed: settings files are parsed, never executed",
                "settings files hold only NAME=value lines",
            ));
        }
        Some(c @ (';' | '&' | '|' | '<' | '>' | ')')) => return Ok(metachar_error(cur, c)),
        _ => {}
    }
    let word = cur.read_word(Ctx::Command)?;
    cur.skip_blanks();
    let next_is_paren = cur.peek() == Some('(');
    let text = word.plain_text();
    let (message, hint) = match text.as_deref() {
        Some(n) if cur.peek() == Some('=') || (cur.peek() == Some('+') && cur.peek_at(1) == Some('=')) => (
            format!("blank between `{n}` and `=`: bash would run `{n}` as a command"),
            "write NAME=value with no blanks around =".to_string(),
        ),
        Some(k) if CONTROL.contains(&k) => (
            format!("shell syntax `{k}` is not supported: settings files are parsed, never executed"),
            "settings files hold only NAME=value and NAME=(…) lines; no conditions or loops".to_string(),
        ),
        Some("function") => (
            "function definitions are not supported: settings files are parsed, never executed".to_string(),
            "settings files hold only NAME=value lines".to_string(),
        ),
        Some(n) if next_is_paren && n.chars().next().is_some_and(is_name_start) => (
            format!("function definition `{n}()` is not supported: settings files are parsed, never executed"),
            "settings files hold only NAME=value lines".to_string(),
        ),
        Some(k @ ("source" | ".")) => (
            format!("`{k}` is not supported: a settings file cannot include another file"),
            "put personal values in .opencode-sandbox/local/sandbox.conf or ~/.config/opencode-sandbox/sandbox.conf; the layers are read in order"
                .to_string(),
        ),
        Some(k @ ("declare" | "typeset" | "local" | "readonly" | "export")) => (
            format!("`{k}` with options or without an assignment is not supported"),
            "write plain NAME=value or NAME=(…) lines".to_string(),
        ),
        Some("unset") => (
            "`unset` is not supported".to_string(),
            "assign an empty value instead: NAME= or NAME=()".to_string(),
        ),
        Some(t) if t.contains('=') => (
            format!("`{}` is not a valid variable name", t.split('=').next().unwrap_or_default().trim_end_matches('+')),
            "names start with a letter or _ and hold only letters, digits and _; settings start with OCSB_"
                .to_string(),
        ),
        Some(t) if !t.is_empty() => (
            format!("`{t}` is a command; commands are not run: settings files are parsed, never executed"),
            "settings files hold only NAME=value and NAME=(…) lines".to_string(),
        ),
        _ => (
            "a command is not allowed here: settings files are parsed, never executed".to_string(),
            "settings files hold only NAME=value and NAME=(…) lines".to_string(),
        ),
    };
    Ok(crate::Error::input(at, message).with_hint(hint))
}
