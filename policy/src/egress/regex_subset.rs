//! The regex dialect of `allow-regex` / `block-regex`: a subset that means the same in POSIX
//! ERE (glibc `regcomp`, which squid uses) and in the Rust `regex` crate (the built-in proxy).
//!
//! Why a subset: the same rule file drives both backends. glibc silently reads `\d` as a literal
//! `d`, squid only logs an `ERROR` for a regex it cannot compile and then drops the rule, and
//! Rust reads `a+?` as a lazy quantifier where ERE reads it as `(a+)?`. A regex outside the
//! subset is refused with its column instead of meaning two different things.
//!
//! Allowed: literal letters, digits, `-`, `_`, `:`; `.`; escapes of ERE metacharacters
//! (`\.` `\-` `\[` …); bracket expressions of letters, digits, `.`, `_`, `-`, ranges of the same
//! kind (`a-z`, `0-9`) and `[:alpha:]` `[:digit:]` `[:alnum:]` `[:xdigit:]`, optionally negated
//! with a leading `^`; groups `( … )`; alternation `|` with non-empty branches; quantifiers
//! `* + ? {n} {n,} {n,m}` (n ≤ m ≤ 255) after an atom; `^` at the start and `$` at the end of a
//! branch.

/// A violation: `offset` is the byte offset in the regex, `message` what is wrong, `hint` how
/// to say it in the subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexError {
    pub offset: usize,
    pub message: String,
    pub hint: String,
}

fn fail<T>(offset: usize, message: impl Into<String>, hint: impl Into<String>) -> Result<T, RegexError> {
    Err(RegexError { offset, message: message.into(), hint: hint.into() })
}

const HOST_HINT: &str = "the regex is matched against the host name only (no scheme, port or path); literal characters are letters, digits, `-`, `_` and `:`";

/// Checks that `re` is in the common subset.
pub fn validate(re: &str) -> Result<(), RegexError> {
    if re.is_empty() {
        return fail(0, "empty regex", "write a pattern such as `^prod-`");
    }
    if re.starts_with("parameters(") {
        return fail(
            0,
            "squid reads a value starting with `parameters(` as a file include",
            "escape the first letter's meaning with a bracket, e.g. `[p]arameters(`",
        );
    }
    if re != ".*" && (re.starts_with(".*") || re.starts_with("^.*")) {
        return fail(
            re.find('.').unwrap_or(0),
            "leading `.*`",
            "a regex matches anywhere in the host unless it starts with `^`: drop the leading `.*` (squid rewrites it with a warning); `.*` alone matches every host",
        );
    }
    let mut p = Parser { s: re.as_bytes(), i: 0 };
    p.alternation()?;
    if p.i < p.s.len() {
        // Only a stray `)` stops the top-level alternation early.
        return fail(p.i, "unbalanced `)`", "remove it or add the matching `(`");
    }
    Ok(())
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn alternation(&mut self) -> Result<(), RegexError> {
        loop {
            let start = self.i;
            self.branch()?;
            if self.i == start {
                return fail(
                    start,
                    "empty alternative",
                    "every side of `|` needs a pattern (an empty one means different things in ERE and Rust)",
                );
            }
            match self.peek() {
                Some(b'|') => {
                    self.i += 1;
                    if self.i == self.s.len() || self.peek() == Some(b')') {
                        return fail(self.i, "empty alternative", "every side of `|` needs a pattern");
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// A branch: `^`? atoms-with-quantifiers `$`?
    fn branch(&mut self) -> Result<(), RegexError> {
        if self.peek() == Some(b'^') {
            self.i += 1;
            self.no_quantifier("`^`")?;
        }
        loop {
            match self.peek() {
                None | Some(b'|') | Some(b')') => return Ok(()),
                Some(b'$') => {
                    self.i += 1;
                    self.no_quantifier("`$`")?;
                    if !matches!(self.peek(), None | Some(b'|') | Some(b')')) {
                        return fail(
                            self.i - 1,
                            "`$` in the middle of a pattern",
                            "`$` is allowed only at the end of a pattern or alternative; write `\\$` for a literal (hosts have none)",
                        );
                    }
                    return Ok(());
                }
                Some(b'^') => {
                    return fail(
                        self.i,
                        "`^` in the middle of a pattern",
                        "`^` is allowed only at the start of a pattern or alternative",
                    );
                }
                Some(_) => {
                    self.atom()?;
                    self.quantifier()?;
                }
            }
        }
    }

    fn no_quantifier(&self, after: &str) -> Result<(), RegexError> {
        if let Some(c @ (b'*' | b'+' | b'?' | b'{')) = self.peek() {
            return fail(
                self.i,
                format!("`{}` after {after}", c as char),
                "a quantifier must follow a character, `.`, a bracket expression or a group",
            );
        }
        Ok(())
    }

    fn atom(&mut self) -> Result<(), RegexError> {
        let at = self.i;
        let c = self.s[at];
        match c {
            b'(' => {
                if self.s.get(at + 1) == Some(&b'?') {
                    return fail(
                        at,
                        "`(?` groups (flags, look-around, non-capturing) are not supported",
                        "use a plain group `( … )`; matching is always case-insensitive",
                    );
                }
                if self.s.get(at + 1) == Some(&b')') {
                    return fail(at, "empty group `()`", "remove it");
                }
                self.i += 1;
                self.alternation()?;
                if self.peek() != Some(b')') {
                    return fail(at, "unbalanced `(`", "add the matching `)`");
                }
                self.i += 1;
                Ok(())
            }
            b'[' => self.bracket(),
            b'\\' => self.escape(),
            b'.' => {
                self.i += 1;
                Ok(())
            }
            b'*' | b'+' | b'?' | b'{' => fail(
                at,
                format!("`{}` with nothing to repeat", c as char),
                format!(
                    "a quantifier must follow a character, `.`, a bracket expression or a group; write `\\{}` for a literal",
                    c as char
                ),
            ),
            b'}' => fail(at, "unescaped `}`", "write `\\}` for a literal (hosts have none)"),
            b']' => {
                fail(at, "unescaped `]`", "write `\\]` for a literal, or open a bracket expression with `[`")
            }
            c if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b':') => {
                self.i += 1;
                Ok(())
            }
            c if c.is_ascii_graphic() => {
                fail(at, format!("`{}` cannot appear in a host name", c as char), HOST_HINT)
            }
            _ => fail(at, "non-ASCII or control character", HOST_HINT),
        }
    }

    fn escape(&mut self) -> Result<(), RegexError> {
        let at = self.i;
        match self.s.get(at + 1) {
            None => fail(at, "trailing `\\`", "remove it, or write `\\\\` for a literal backslash"),
            Some(c) if b".[]()*+?{}|^$\\-".contains(c) => {
                self.i += 2;
                Ok(())
            }
            Some(c @ (b'd' | b'w' | b's' | b'b' | b'D' | b'W' | b'S' | b'B')) => fail(
                at,
                format!("`\\{}` is not POSIX (glibc reads it as the letter `{}`)", *c as char, *c as char),
                match c {
                    b'd' | b'D' => "write `[0-9]` for a digit",
                    b'w' | b'W' => "write `[a-z0-9_]` for a word character",
                    b's' | b'S' => "host names contain no spaces",
                    _ => "word boundaries differ between ERE and Rust; anchor with `^`, `$` or `\\.` instead",
                },
            ),
            Some(c @ b'1'..=b'9') => {
                fail(at, format!("backreference `\\{}`", *c as char), "backreferences are not supported")
            }
            Some(&c) => fail(
                at,
                format!("`\\{}` is not an escape of a metacharacter", c as char),
                "only `\\` followed by one of `. [ ] ( ) * + ? { } | ^ $ \\ -` is allowed",
            ),
        }
    }

    fn bracket(&mut self) -> Result<(), RegexError> {
        let open = self.i;
        self.i += 1;
        if self.peek() == Some(b'^') {
            self.i += 1;
        }
        let first = self.i;
        let mut prev_char: Option<u8> = None; // last single character (range start candidate)
        loop {
            let at = self.i;
            let Some(c) = self.peek() else {
                return fail(open, "unterminated bracket expression", "close it with `]`");
            };
            match c {
                b']' if at == first => {
                    return fail(
                        at,
                        "`]` at the start of a bracket expression",
                        "an empty or `]`-first bracket means different things in ERE and Rust",
                    );
                }
                b']' => {
                    self.i += 1;
                    return Ok(());
                }
                b'[' => {
                    let rest = &self.s[at..];
                    let class = [&b"[:alpha:]"[..], b"[:digit:]", b"[:alnum:]", b"[:xdigit:]"]
                        .into_iter()
                        .find(|k| rest.starts_with(k));
                    match class {
                        Some(k) => {
                            self.i += k.len();
                            prev_char = None;
                        }
                        None => {
                            return fail(
                                at,
                                "`[` inside a bracket expression",
                                "only `[:alpha:]`, `[:digit:]`, `[:alnum:]` and `[:xdigit:]` are allowed inside `[…]` (Rust reads a nested `[` as a set)",
                            );
                        }
                    }
                }
                b'\\' => {
                    return fail(
                        at,
                        "`\\` inside a bracket expression",
                        "ERE reads `\\` literally inside `[…]` and Rust as an escape; write `[.]` or `[-]` without escapes",
                    );
                }
                b'-' => {
                    let next = self.s.get(at + 1).copied();
                    if next.is_none() {
                        return fail(open, "unterminated bracket expression", "close it with `]`");
                    }
                    if at == first || next == Some(b']') {
                        // literal `-` at either edge
                        self.i += 1;
                        prev_char = None;
                    } else {
                        let (Some(lo), Some(hi)) = (prev_char, next) else {
                            return fail(
                                at,
                                "`-` must be a range between two letters or digits, or stand first or last",
                                "e.g. `[a-z0-9-]`",
                            );
                        };
                        let same_kind = (lo.is_ascii_digit() && hi.is_ascii_digit())
                            || (lo.is_ascii_lowercase() && hi.is_ascii_lowercase())
                            || (lo.is_ascii_uppercase() && hi.is_ascii_uppercase());
                        if !same_kind || lo > hi {
                            return fail(
                                at - 1,
                                format!("bad range `{}-{}`", lo as char, hi as char),
                                "a range joins two digits or two letters of the same case, in order, e.g. `a-z`, `0-9`",
                            );
                        }
                        self.i += 2;
                        prev_char = None;
                    }
                }
                c if c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_') => {
                    self.i += 1;
                    prev_char = Some(c);
                }
                _ => {
                    return fail(
                        at,
                        format!("`{}` inside a bracket expression", c as char),
                        "a bracket expression holds letters, digits, `.`, `_`, `-` and `[:alpha:]`-style classes",
                    );
                }
            }
        }
    }

    fn quantifier(&mut self) -> Result<(), RegexError> {
        match self.peek() {
            Some(b'*' | b'+' | b'?') => self.i += 1,
            Some(b'{') => {
                let at = self.i;
                let close = self.s[at..].iter().position(|&c| c == b'}').map(|p| at + p);
                let Some(close) = close else {
                    return fail(
                        at,
                        "`{` without `}`",
                        "a bound is `{n}`, `{n,}` or `{n,m}`; write `\\{` for a literal",
                    );
                };
                let body = std::str::from_utf8(&self.s[at + 1..close]).unwrap_or("");
                let num = |t: &str| -> Option<u32> {
                    if t.is_empty() || t.len() > 3 || !t.bytes().all(|b| b.is_ascii_digit()) {
                        None
                    } else {
                        t.parse().ok()
                    }
                };
                let ok = match body.split_once(',') {
                    None => num(body).is_some_and(|n| n <= 255),
                    Some((a, "")) => num(a).is_some_and(|n| n <= 255),
                    Some((a, b)) => matches!((num(a), num(b)), (Some(x), Some(y)) if x <= y && y <= 255),
                };
                if !ok {
                    return fail(
                        at,
                        format!("bad bound `{{{body}}}`"),
                        "a bound is `{n}`, `{n,}` or `{n,m}` with n ≤ m ≤ 255",
                    );
                }
                self.i = close + 1;
            }
            _ => return Ok(()),
        }
        if let Some(c @ (b'*' | b'+' | b'?' | b'{')) = self.peek() {
            return fail(
                self.i,
                format!("`{}` after a quantifier", c as char),
                if c == b'?' {
                    "Rust reads `+?`/`*?` as a lazy quantifier, ERE as an optional repetition; group it: `(a+)?`"
                } else {
                    "repeat a group instead: `(a+)*`"
                },
            );
        }
        Ok(())
    }
}

/// Compiles a validated regex the way both backends match: case-insensitive (squid `-i`), on
/// the host bytes, unanchored.
pub(crate) fn compile(re: &str) -> Result<regex::bytes::Regex, regex::Error> {
    regex::bytes::RegexBuilder::new(re).case_insensitive(true).unicode(false).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_regex_subset_accepts() {
        for re in [
            r"^[a-z0-9-]+\.staging\.example\.com$",
            "^prod-",
            "prod",
            "^(a|b)c$",
            "^x{2}y{1,}z{0,3}$",
            "[[:alpha:]][[:digit:]]+",
            "[^a-z]",
            "[-a]",
            "[a-]",
            r"\-x",
            "a.b*c?",
            "^$",
            "(^a|b$)",
            r"\[::1\]",
            ".*",
            "a.*",
            "^a.*$",
        ] {
            assert_eq!(validate(re), Ok(()), "{re}");
            compile(re).unwrap();
        }
    }

    #[test]
    fn egress_regex_subset_rejects() {
        for (re, offset, needle) in [
            (r"\d+", 0, "not POSIX"),
            (r"a\w", 1, "not POSIX"),
            (r"\s", 0, "not POSIX"),
            (r"\bfoo", 0, "not POSIX"),
            ("(?i)a", 0, "`(?`"),
            ("a(?=b)", 1, "`(?`"),
            ("(?<!a)b", 0, "`(?`"),
            (r"(a)\1", 3, "backreference"),
            ("a+?", 2, "after a quantifier"),
            ("a*?", 2, "after a quantifier"),
            ("a**", 2, "after a quantifier"),
            ("*a", 0, "nothing to repeat"),
            ("a{", 1, "without `}`"),
            ("a{2,1}", 1, "bad bound"),
            ("a{,3}", 1, "bad bound"),
            ("a{x}", 1, "bad bound"),
            ("a{1000}", 1, "bad bound"),
            ("a}", 1, "unescaped `}`"),
            ("a|", 2, "empty alternative"),
            ("|a", 0, "empty alternative"),
            ("a||b", 2, "empty alternative"),
            ("(|a)", 1, "empty alternative"),
            ("()", 0, "empty group"),
            ("(a", 0, "unbalanced `(`"),
            ("a)", 1, "unbalanced `)`"),
            ("[a-", 0, "unterminated"),
            ("[]a]", 1, "`]` at the start"),
            ("[]", 1, "`]` at the start"),
            (r"[\d]", 1, "inside a bracket"),
            ("[[:lower:]]", 1, "inside a bracket"),
            ("[[.a.]]", 1, "inside a bracket"),
            ("[a-Z]", 1, "bad range"),
            ("[z-a]", 1, "bad range"),
            ("[a--]", 1, "bad range"),
            ("[a&&b]", 2, "inside a bracket"),
            (r"\x41", 0, "not an escape"),
            (r"\n", 0, "not an escape"),
            ("a\\", 1, "trailing"),
            ("a/b", 1, "host name"),
            ("a$b", 1, "middle"),
            ("a^b", 1, "middle"),
            ("^*", 1, "after `^`"),
            ("é", 0, "non-ASCII"),
            ("", 0, "empty regex"),
            ("\"file\"", 0, "host name"),
            ("parameters(x)", 0, "file include"),
            (".*a", 0, "leading `.*`"),
            ("^.*a", 1, "leading `.*`"),
            ("^.*", 1, "leading `.*`"),
            (".*.*", 0, "leading `.*`"),
        ] {
            let e = validate(re).expect_err(re);
            assert_eq!(e.offset, offset, "{re}: {e:?}");
            assert!(e.message.contains(needle), "{re}: {e:?}");
        }
    }
}
