//! `OCSB_ENV_FILE`: `KEY=VALUE` lines, parsed and never executed (no `$(…)`, no expansion), so a
//! tokens file cannot run code on the host. Errors name the file and line; nothing is applied
//! when any line is bad.

use std::path::Path;

use crate::error::{Error, Result};

/// Whether `k` is a usable environment variable name.
pub fn valid_key(k: &str) -> bool {
    let mut c = k.chars();
    matches!(c.next(), Some(ch) if ch == '_' || ch.is_ascii_alphabetic())
        && c.all(|ch| ch == '_' || ch.is_ascii_alphanumeric())
}

/// Parse the text of an env file. Accepted per line: blank lines, `# comments`, an optional
/// `export ` prefix, `KEY=VALUE` where VALUE is raw to the end of the line, or wholly in single
/// quotes (taken literally) or double quotes (with `\"`, `\\`, `\n`, `\$` escapes).
pub fn parse(text: &str, file: &Path) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let at = |msg: String, fix: &str| {
            Error::failed(format!("{}:{}: {msg}", file.display(), i + 1), fix.to_string())
        };
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map(str::trim_start).unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            return Err(at(
                format!("`{}` is not KEY=VALUE", raw.trim()),
                "write one KEY=VALUE per line (the file is parsed, never run)",
            ));
        };
        let k = k.trim_end();
        if !valid_key(k) {
            return Err(at(
                format!("`{k}` is not a valid variable name"),
                "use letters, digits and _, not starting with a digit",
            ));
        }
        let v = v.trim_end_matches('\r');
        let value = if let Some(rest) = v.strip_prefix('\'') {
            match rest.strip_suffix('\'') {
                Some(inner) if !inner.contains('\'') => inner.to_string(),
                _ => {
                    return Err(at(
                        "unterminated or nested single quote".into(),
                        "write KEY='value' on one line",
                    ));
                }
            }
        } else if let Some(rest) = v.strip_prefix('"') {
            let Some(inner) = rest.strip_suffix('"') else {
                return Err(at("unterminated double quote".into(), "write KEY=\"value\" on one line"));
            };
            let mut s = String::new();
            let mut it = inner.chars();
            while let Some(c) = it.next() {
                match c {
                    '\\' => match it.next() {
                        Some('n') => s.push('\n'),
                        Some(e @ ('"' | '\\' | '$' | '`')) => s.push(e),
                        Some(e) => {
                            s.push('\\');
                            s.push(e);
                        }
                        None => return Err(at("a trailing backslash".into(), "remove it or write \\\\")),
                    },
                    '"' => {
                        return Err(at("an unescaped \" inside the value".into(), "write \\\" for a quote"));
                    }
                    c => s.push(c),
                }
            }
            s
        } else {
            if v.contains("$(") || v.contains('`') {
                return Err(at(
                    "command substitution is not supported (the file is parsed, never run)".into(),
                    "put the literal value in the file, in single quotes if it must contain $( or `",
                ));
            }
            v.trim().to_string()
        };
        out.retain(|(ek, _)| ek != k);
        out.push((k.to_string(), value));
    }
    Ok(out)
}

/// Read and parse `path`.
pub fn load(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io("read the OCSB_ENV_FILE", path, e))?;
    parse(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: &str) -> Result<Vec<(String, String)>> {
        parse(t, Path::new("/x/agent.env"))
    }

    #[test]
    fn values_are_literal() {
        let v =
            p("# tokens\n\nexport A=1\nB = two words \nC='$(id) `x` $HOME'\nD=\"a\\\"b\\n$c\"\nE=\nA=3\n")
                .unwrap();
        assert_eq!(
            v,
            vec![
                ("B".into(), "two words".into()),
                ("C".into(), "$(id) `x` $HOME".into()),
                ("D".into(), "a\"b\n$c".into()),
                ("E".into(), "".into()),
                ("A".into(), "3".into()),
            ]
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        for (text, line, what) in [
            ("A=1\nrm -rf /\n", 2, "not KEY=VALUE"),
            ("1A=x", 1, "not a valid variable name"),
            ("\n\nX=$(curl evil)", 3, "command substitution"),
            ("Y='abc", 1, "single quote"),
            ("Z=\"abc", 1, "double quote"),
        ] {
            let e = p(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("/x/agent.env:{line}: ")), "{e}");
            assert!(e.contains(what), "{e}");
        }
    }
}
