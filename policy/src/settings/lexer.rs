//! Character-level scanning of the bash subset: positions, blanks, comments and *words*.
//!
//! A word is what bash would see as one word after quote removal, kept as parts so that the
//! expansions it contains (`$VAR`, `${VAR}`, a leading `~`) can be evaluated later, in order,
//! against the settings set so far. Everything in bash that would *run* something or depend on
//! the file system (command substitution, arithmetic, parameter operators, globs in arrays,
//! redirections, pipes, `;`, `&`) is rejected here with the exact line and column, before any
//! value is used. Nothing is ever handed to a shell.

use crate::{Error, Location, Result};

/// One piece of a word, after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// Literal text. `quoted` = it came from quotes or a backslash escape (bash neither splits
    /// nor globs it).
    Lit { text: String, quoted: bool },
    /// `$NAME` or `${NAME}`; `quoted` = inside double quotes.
    Var { name: String, at: Location, quoted: bool },
    /// A `~` at the start of a word (followed by `/` or the end of the word): `$HOME`.
    Home,
}

/// A word after quote removal, with the place where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub parts: Vec<Part>,
    pub at: Location,
    /// Any quote or backslash escape in the word: such a word is never dropped by bash, even
    /// when it expands to the empty string.
    pub any_quoted: bool,
}

impl Word {
    /// The text of a word made only of unquoted literals (a command name, a keyword), if so.
    pub fn plain_text(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit { text, quoted: false } => s.push_str(text),
                _ => return None,
            }
        }
        Some(s)
    }
}

/// Where a word stands; it decides which characters end it and which are errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    /// The value of `NAME=value`: bash neither splits nor globs it.
    Scalar,
    /// An element of `NAME=(…)`: bash splits and globs unquoted parts, so unquoted glob and
    /// brace characters are errors; `)` ends the word.
    Element,
    /// The first word of something that is not an assignment, read only to name it in an error.
    Command,
}

pub(crate) fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The input as characters, with the current 1-based line and column.
///
/// Outside single quotes and comments, bash removes backslash-newline pairs before it splits
/// words, so `$HO\⏎ME` is `$HOME` and `$\⏎(id)` is a command substitution. The cursor does the
/// same: unless it is in raw mode, it never rests on such a pair and looks through them
/// ([`Cursor::peek_at`]), so no check can be dodged by splitting a construct over two lines.
pub(crate) struct Cursor<'a> {
    chars: Vec<char>,
    pos: usize,
    line: u32,
    col: u32,
    file: &'a str,
    /// Inside single quotes or a comment: backslash-newline is kept as it is.
    raw: bool,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &str, file: &'a str) -> Self {
        let mut c = Self { chars: text.chars().collect(), pos: 0, line: 1, col: 1, file, raw: false };
        c.skip_continuations();
        c
    }

    fn is_continuation(&self, i: usize) -> bool {
        self.chars.get(i) == Some(&'\\') && self.chars.get(i + 1) == Some(&'\n')
    }

    fn advance_raw(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn skip_continuations(&mut self) {
        while !self.raw && self.is_continuation(self.pos) {
            self.advance_raw();
            self.advance_raw();
        }
    }

    /// Enters or leaves raw mode (single quotes, comments).
    pub fn set_raw(&mut self, raw: bool) {
        self.raw = raw;
        self.skip_continuations();
    }

    pub fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    /// The character `n` places ahead, looking through line continuations (outside raw mode).
    pub fn peek_at(&self, n: usize) -> Option<char> {
        self.index_at(n).map(|i| self.chars[i])
    }

    fn index_at(&self, n: usize) -> Option<usize> {
        let mut i = self.pos;
        let mut k = 0;
        loop {
            while !self.raw && self.is_continuation(i) {
                i += 2;
            }
            if i >= self.chars.len() {
                return None;
            }
            if k == n {
                return Some(i);
            }
            i += 1;
            k += 1;
        }
    }

    /// The character right after the current one, with no continuation removed: what a
    /// backslash at the cursor escapes.
    pub fn raw_next(&self) -> Option<char> {
        self.chars.get(self.pos + 1).copied()
    }

    pub fn bump(&mut self) -> Option<char> {
        let c = self.advance_raw()?;
        self.skip_continuations();
        Some(c)
    }

    /// Consumes a backslash and the character it escapes; returns that character.
    pub fn bump_escaped(&mut self) -> Option<char> {
        self.advance_raw();
        let c = self.advance_raw();
        self.skip_continuations();
        c
    }

    pub fn loc(&self) -> Location {
        Location::new(self.file, self.line, self.col)
    }

    /// The location of the character `n` places ahead.
    pub fn loc_ahead(&self, n: usize) -> Location {
        let end = self.index_at(n).unwrap_or(self.chars.len());
        let (mut line, mut col) = (self.line, self.col);
        for c in &self.chars[self.pos..end] {
            if *c == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        Location::new(self.file, line, col)
    }

    pub fn err(&self, at: Location, message: impl Into<String>, hint: &str) -> Error {
        let e = Error::input(at, message);
        if hint.is_empty() { e } else { e.with_hint(hint) }
    }

    /// Skips spaces and tabs (line continuations are already invisible).
    pub fn skip_blanks(&mut self) {
        while let Some(' ' | '\t') = self.peek() {
            self.bump();
        }
    }

    /// Skips a `#` comment up to (not including) the newline. A backslash does not continue a
    /// comment, as in bash.
    pub fn skip_comment(&mut self) {
        self.set_raw(true);
        while let Some(c) = self.peek() {
            if c == '\n' {
                break;
            }
            self.bump();
        }
        self.set_raw(false);
    }

    /// The name (`[A-Za-z_][A-Za-z0-9_]*`) starting at the cursor, without consuming it.
    pub fn name_ahead(&self) -> Option<String> {
        let first = self.peek()?;
        if !is_name_start(first) {
            return None;
        }
        let mut n = String::new();
        let mut i = 0;
        while let Some(c) = self.peek_at(i) {
            if !is_name_char(c) {
                break;
            }
            n.push(c);
            i += 1;
        }
        Some(n)
    }

    /// Reads one word in context `ctx`. The caller has made sure that the cursor is not at a
    /// comment.
    pub fn read_word(&mut self, ctx: Ctx) -> Result<Word> {
        let mut w = WordBuilder { parts: Vec::new(), any_quoted: false };
        let at = self.loc();
        if ctx != Ctx::Command && self.peek() == Some('~') {
            self.tilde(ctx)?;
            w.parts.push(Part::Home);
        }
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' => break,
                '\\' => match self.raw_next() {
                    Some(next) => {
                        check_char(self, next, Location::new(self.file, self.line, self.col + 1))?;
                        self.bump_escaped();
                        w.any_quoted = true;
                        w.lit(next, true);
                    }
                    None => {
                        return Err(self.err(
                            self.loc(),
                            "backslash at the end of the file",
                            "remove it, or escape it as \\\\",
                        ));
                    }
                },
                '\'' => {
                    w.any_quoted = true;
                    self.single_quoted(&mut w)?;
                }
                '"' => {
                    w.any_quoted = true;
                    self.double_quoted(&mut w)?;
                }
                '$' => self.dollar(&mut w, false)?,
                '`' => return Err(backtick(self)),
                ';' | '&' | '|' | '<' | '>' if ctx == Ctx::Command => break,
                ';' | '&' | '|' | '<' | '>' => return Err(metachar_error(self, c)),
                '(' if ctx == Ctx::Command => break,
                ')' if ctx != Ctx::Scalar => break,
                '(' | ')' => return Err(metachar_error(self, c)),
                '*' | '?' | '[' if ctx == Ctx::Element => {
                    return Err(self.err(
                        self.loc(),
                        format!(
                            "unquoted `{c}` in an array element: bash would expand it as a file name pattern"
                        ),
                        "quote the element, e.g. '*.log'; values are never matched against files",
                    ));
                }
                '{' if ctx == Ctx::Element => {
                    return Err(self.err(
                        self.loc(),
                        "unquoted `{` in an array element: bash would apply brace expansion",
                        "quote the element, or list the values one by one",
                    ));
                }
                '~' if ctx != Ctx::Command && matches!(w.last_unquoted(), Some(':' | '=')) => {
                    return Err(self.err(
                        self.loc(),
                        "unquoted `~` after `:` or `=`: bash would expand it to the home directory here",
                        "write $HOME instead, or quote the `~`",
                    ));
                }
                _ => {
                    check_char(self, c, self.loc())?;
                    self.bump();
                    w.lit(c, false);
                }
            }
        }
        Ok(Word { parts: w.parts, at, any_quoted: w.any_quoted })
    }

    /// A `~` at the start of a word: only `~` and `~/…` (the user's home) are supported.
    fn tilde(&mut self, ctx: Ctx) -> Result<()> {
        let ends = |c: Option<char>| match c {
            None | Some(' ' | '\t' | '\n' | '/') => true,
            Some(')') => ctx == Ctx::Element,
            _ => false,
        };
        if ends(self.peek_at(1)) {
            self.bump();
            return Ok(());
        }
        Err(self.err(
            self.loc(),
            "only `~` and `~/…` are expanded (to your home directory); `~user`, `~+` and the like are not",
            "write the full path, or quote the `~` to keep it literally",
        ))
    }

    fn single_quoted(&mut self, w: &mut WordBuilder) -> Result<()> {
        let open = self.loc();
        self.set_raw(true);
        self.bump();
        loop {
            match self.peek() {
                None => {
                    return Err(self.err(
                        open,
                        "unterminated single quote",
                        "add the closing ' (a ' cannot be escaped inside single quotes; write '\\'' for one)",
                    ));
                }
                Some('\'') => {
                    self.bump();
                    self.set_raw(false);
                    w.empty_quoted();
                    return Ok(());
                }
                Some(c) => {
                    check_char(self, c, self.loc())?;
                    self.bump();
                    w.lit(c, true);
                }
            }
        }
    }

    fn double_quoted(&mut self, w: &mut WordBuilder) -> Result<()> {
        let open = self.loc();
        self.bump();
        loop {
            match self.peek() {
                None => {
                    return Err(self.err(open, "unterminated double quote", "add the closing \""));
                }
                Some('"') => {
                    self.bump();
                    w.empty_quoted();
                    return Ok(());
                }
                Some('\\') => match self.raw_next() {
                    Some(c @ ('$' | '`' | '"' | '\\')) => {
                        self.bump_escaped();
                        w.lit(c, true);
                    }
                    _ => {
                        // Bash keeps the backslash before any other character.
                        self.bump();
                        w.lit('\\', true);
                    }
                },
                Some('$') => self.dollar(w, true)?,
                Some('`') => return Err(backtick(self)),
                Some(c) => {
                    check_char(self, c, self.loc())?;
                    self.bump();
                    w.lit(c, true);
                }
            }
        }
    }

    /// A `$`: `$NAME` and `${NAME}` are references; every other form that bash would evaluate
    /// is an error; a `$` that bash keeps literally is kept literally.
    fn dollar(&mut self, w: &mut WordBuilder, quoted: bool) -> Result<()> {
        let at = self.loc();
        match self.peek_at(1) {
            Some('{') => {
                self.bump();
                self.bump();
                self.braced(w, at, quoted)
            }
            Some('(') if self.peek_at(2) == Some('(') => Err(self.err(
                at,
                "arithmetic expansion `$((…))` is not supported: settings files are parsed, never executed",
                "write the resulting number",
            )),
            Some('[') => Err(self.err(
                at,
                "arithmetic expansion `$[…]` is not supported: settings files are parsed, never executed",
                "write the resulting number",
            )),
            Some('(') => Err(self.err(
                at,
                "command substitution `$(…)` is not allowed: settings files are parsed, never executed",
                "write the value itself; a committed settings file must not run commands on the host",
            )),
            Some(c) if is_name_start(c) => {
                self.bump();
                let name = self.take_name();
                w.parts.push(Part::Var { name, at, quoted });
                Ok(())
            }
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => Err(self.err(
                at,
                format!("special parameter `${c}` is not supported"),
                "only $HOME, $OCSB_PROJECT_DIR and OCSB_ settings can be referenced",
            )),
            Some('\'') if !quoted => {
                Err(self.err(at, "ANSI-C quoting `$'…'` is not supported", "use single or double quotes"))
            }
            Some('"') if !quoted => {
                Err(self.err(at, "locale quoting `$\"…\"` is not supported", "use plain double quotes"))
            }
            _ => {
                // `$` before a blank, `/`, the end and so on: bash keeps it as is.
                self.bump();
                w.lit('$', quoted);
                Ok(())
            }
        }
    }

    /// After `${`: only `${NAME}`.
    fn braced(&mut self, w: &mut WordBuilder, at: Location, quoted: bool) -> Result<()> {
        match self.peek() {
            Some(c) if is_name_start(c) => {
                let name = self.take_name();
                match self.peek() {
                    Some('}') => {
                        self.bump();
                        w.parts.push(Part::Var { name, at, quoted });
                        Ok(())
                    }
                    None => Err(self.err(at, "unterminated `${`", "add the closing }")),
                    Some('[') => Err(self.err(
                        self.loc(),
                        format!("array subscripts `${{{name}[…]}}` are not supported"),
                        "to add to an array setting write NAME+=(value …)",
                    )),
                    Some(c) => Err(self.err(
                        self.loc(),
                        format!("parameter operator `{c}` in `${{{name}{c}…}}` is not supported"),
                        "only ${NAME} is expanded; write the value you want",
                    )),
                }
            }
            Some(c @ ('#' | '!')) => Err(self.err(
                self.loc(),
                format!("`${{{c}…}}` (length or indirection) is not supported"),
                "only ${NAME} is expanded",
            )),
            None => Err(self.err(at, "unterminated `${`", "add the closing }")),
            Some(_) => Err(self.err(
                self.loc(),
                "bad substitution: `${` must be followed by a variable name",
                "write ${NAME}, or \\$ for a literal dollar sign",
            )),
        }
    }

    fn take_name(&mut self) -> String {
        let mut n = String::new();
        while let Some(c) = self.peek() {
            if !is_name_char(c) {
                break;
            }
            n.push(c);
            self.bump();
        }
        n
    }
}

struct WordBuilder {
    parts: Vec<Part>,
    any_quoted: bool,
}

impl WordBuilder {
    fn lit(&mut self, c: char, quoted: bool) {
        match self.parts.last_mut() {
            Some(Part::Lit { text, quoted: q }) if *q == quoted => text.push(c),
            _ => self.parts.push(Part::Lit { text: c.to_string(), quoted }),
        }
    }

    /// `''` and `""` still make a (possibly empty) quoted part.
    fn empty_quoted(&mut self) {
        if self.parts.is_empty() {
            self.parts.push(Part::Lit { text: String::new(), quoted: true });
        }
    }

    fn last_unquoted(&self) -> Option<char> {
        match self.parts.last() {
            Some(Part::Lit { text, quoted: false }) => text.chars().last(),
            _ => None,
        }
    }
}

/// Characters that no value may hold: NUL cannot be passed to the kernel, and a carriage return
/// is almost always a file saved with CRLF line ends (bash would keep it inside the value).
fn check_char(cur: &Cursor<'_>, c: char, at: Location) -> Result<()> {
    match c {
        '\0' => Err(cur.err(at, "NUL byte in the file", "remove it; settings are text")),
        '\r' => Err(cur.err(
            at,
            "carriage return in the file (CRLF line ends?)",
            "convert the file to LF line ends, e.g. `sed -i 's/\\r$//' FILE`",
        )),
        _ => Ok(()),
    }
}

fn backtick(cur: &Cursor<'_>) -> Error {
    cur.err(
        cur.loc(),
        "command substitution with backticks is not allowed: settings files are parsed, never executed",
        "write the value itself; escape a literal backtick as \\`",
    )
}

/// The error for a shell operator character found outside quotes.
pub(crate) fn metachar_error(cur: &Cursor<'_>, c: char) -> Error {
    let (what, hint) = match c {
        ';' => ("`;` (command separator)", "put each assignment on its own line"),
        '&' => ("`&` (background job or `&&`)", "settings files hold only NAME=value lines"),
        '|' => ("`|` (pipe or `||`)", "settings files hold only NAME=value lines"),
        '<' | '>' => ("redirection", "settings files hold only NAME=value lines"),
        '(' => ("`(` outside of an array assignment", "arrays are written NAME=(a b c)"),
        _ => ("`)` without a matching `NAME=(`", "arrays are written NAME=(a b c)"),
    };
    cur.err(
        cur.loc(),
        format!("{what} is not supported: settings files are parsed, never executed"),
        &format!("{hint}; quote the character if it is part of a value"),
    )
}
