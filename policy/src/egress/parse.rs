//! The line parser of the rule language.
//!
//! ```text
//! allow jira.example.com gitlab.example.com   # wins over block
//! allow-regex ^[a-z0-9-]+\.staging\.example\.com$
//! block .example.com                          # the domain and all subdomains
//! block-regex ^prod-
//! connect git.example.com:2222 10.0.0.5:6443 [fd00::5]:22
//! expect-block https://prod.example.com/
//! expect-pass https://10.0.0.5:6443/version -k
//! ```
//! Words are separated by blanks; a word starting with `#` starts a comment. Every error names
//! file, line and column, and says how to fix it.

use serde::Serialize;

use super::curl;
use super::host::{HostPattern, parse_value};
use super::layers::{EgressLayer, LayerText};
use super::regex_subset;
use super::target::Target;
use crate::{Error, Location, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpectKind {
    Pass,
    Block,
}

/// A self-test: `url` must pass (or be blocked by the proxy) when fetched with curl through the
/// filter, with the extra (vetted) `curl_args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Expect {
    pub kind: ExpectKind,
    pub url: String,
    pub curl_args: Vec<String>,
    #[serde(serialize_with = "super::compile::ser_loc")]
    pub at: Location,
}

/// One value with its column.
#[derive(Debug, Clone)]
pub(crate) struct Word<T> {
    pub value: T,
    pub column: u32,
}

#[derive(Debug, Clone)]
pub(crate) enum Body {
    Hosts(Vec<Word<HostPattern>>),
    Regexes(Vec<Word<String>>),
    Connect(Vec<Word<(HostPattern, u16)>>),
    Expect(Expect),
}

#[derive(Debug, Clone)]
pub(crate) struct Directive {
    pub layer: EgressLayer,
    pub at: Location,
    /// `true` for block/block-regex.
    pub block: bool,
    pub body: Body,
}

/// squid reads config lines into an 8 KB buffer; a rendered line is a rule line plus a short prefix.
const MAX_LINE: usize = 4096;

const DIRECTIVES: &str = "allow, allow-regex, block, block-regex, connect, expect-block, expect-pass";

/// Splits a line into words with their 1-based columns, stopping at a word that starts with `#`.
fn words(line: &str) -> Vec<(u32, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices().chain(std::iter::once((line.len(), ' '))) {
        if c == ' ' || c == '\t' {
            if let Some(s) = start.take() {
                out.push((s as u32 + 1, &line[s..i]));
            }
        } else if start.is_none() {
            if c == '#' {
                break;
            }
            start = Some(i);
        }
    }
    out
}

/// Parses one layer. Nothing is returned unless the whole file is valid.
pub(crate) fn parse_layer(text: &LayerText) -> Result<Vec<Directive>> {
    let mut out = Vec::new();
    for (n, raw) in text.text.lines().enumerate() {
        let line_no = n as u32 + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let at = |column: u32| Location::new(text.file.clone(), line_no, column);
        if line.len() > MAX_LINE {
            return Err(Error::input(at(0), format!("the line is longer than {MAX_LINE} bytes"))
                .with_hint("split the values over several lines of the same directive (squid reads config lines of at most 8 KB)"));
        }
        if let Some(i) = line.find(|c: char| c.is_control() && c != '\t') {
            return Err(Error::input(at(i as u32 + 1), "control character in the line")
                .with_hint("rule files are plain text; remove the character"));
        }
        let ws = words(line);
        let Some(&(col, keyword)) = ws.first() else { continue };
        let args = &ws[1..];
        let need_args = |what: &str| -> Result<()> {
            if args.is_empty() {
                Err(Error::input(at(col), format!("`{keyword}` needs at least one {what}"))
                    .with_hint(format!("e.g. `{keyword} {}`", example(keyword))))
            } else {
                Ok(())
            }
        };
        let (block, body) = match keyword {
            "allow" | "block" => {
                need_args("host")?;
                let mut v = Vec::new();
                for &(c, w) in args {
                    let value = parse_value(w, true).map_err(|(m, h)| Error::input(at(c), m).with_hint(h))?;
                    v.push(Word { value, column: c });
                }
                (keyword == "block", Body::Hosts(v))
            }
            "allow-regex" | "block-regex" => {
                need_args("regex")?;
                let mut v = Vec::new();
                for &(c, w) in args {
                    if let Err(e) = regex_subset::validate(w) {
                        return Err(Error::input(
                            at(c + e.offset as u32),
                            format!("regex `{w}`: {}", e.message),
                        )
                        .with_hint(e.hint));
                    }
                    if let Err(e) = regex_subset::compile(w) {
                        return Err(Error::input(at(c), format!("regex `{w}` does not compile: {e}"))
                            .with_hint("simplify the pattern"));
                    }
                    v.push(Word { value: w.to_string(), column: c });
                }
                (keyword == "block-regex", Body::Regexes(v))
            }
            "connect" => {
                need_args("host:port")?;
                let mut v = Vec::new();
                for &(c, w) in args {
                    let value = parse_connect(w).map_err(|(m, h)| Error::input(at(c), m).with_hint(h))?;
                    v.push(Word { value, column: c });
                }
                (false, Body::Connect(v))
            }
            "expect-pass" | "expect-block" => {
                need_args("URL")?;
                let (ucol, url) = args[0];
                check_expect_url(url).map_err(|(m, h)| Error::input(at(ucol), m).with_hint(h))?;
                let rest: Vec<&str> = args[1..].iter().map(|&(_, w)| w).collect();
                if let Err((i, m, h)) = curl::check(&rest) {
                    return Err(Error::input(at(args[1 + i].0), m).with_hint(h));
                }
                let kind = if keyword == "expect-pass" { ExpectKind::Pass } else { ExpectKind::Block };
                let e = Expect {
                    kind,
                    url: url.to_string(),
                    curl_args: rest.iter().map(|s| s.to_string()).collect(),
                    at: at(0),
                };
                (false, Body::Expect(e))
            }
            other => {
                let hint = match other {
                    "deny" | "reject" | "drop" => "did you mean `block`?".to_string(),
                    "allow_regex" | "allowregex" | "allow-re" => "did you mean `allow-regex`?".to_string(),
                    "block_regex" | "blockregex" | "block-re" => "did you mean `block-regex`?".to_string(),
                    "expect" | "expect_pass" | "expect_block" => {
                        "write `expect-pass URL` or `expect-block URL`".to_string()
                    }
                    _ => format!("a line starts with one of: {DIRECTIVES}; `#` starts a comment"),
                };
                return Err(Error::input(at(col), format!("unknown directive `{other}`")).with_hint(hint));
            }
        };
        out.push(Directive { layer: text.layer, at: at(0), block, body });
    }
    Ok(out)
}

fn example(keyword: &str) -> &'static str {
    match keyword {
        "allow" | "block" => ".example.com",
        "allow-regex" | "block-regex" => "^prod-",
        "connect" => "git.example.com:2222",
        _ => "https://example.com/",
    }
}

/// `host:port`, `a.b.c.d:port` or `[ipv6]:port`.
fn parse_connect(w: &str) -> Result<(HostPattern, u16), (String, String)> {
    let hint_port = || format!("write `connect {}:PORT` (a port from 1 to 65535)", w.trim_end_matches(':'));
    let (host, port) = if w.starts_with('[') {
        match w.split_once("]:") {
            Some((h, p)) => (format!("{h}]"), p),
            None => return Err((format!("`{w}`: connect needs a port"), hint_port())),
        }
    } else {
        match w.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err((
                    format!("`{w}`: write IPv6 addresses in brackets"),
                    "e.g. `connect [fd00::5]:22`".into(),
                ));
            }
            Some((h, p)) => (h.to_string(), p),
            None => return Err((format!("`{w}`: connect needs a port"), hint_port())),
        }
    };
    let port = match port.parse::<u32>() {
        Ok(n @ 1..=65535) if port.bytes().all(|b| b.is_ascii_digit()) => n as u16,
        _ => return Err((format!("`{w}`: bad port `{port}`"), "a port is a number from 1 to 65535".into())),
    };
    let h = parse_value(&host, false)?;
    Ok((h, port))
}

fn check_expect_url(url: &str) -> Result<(), (String, String)> {
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err((
            format!("`{url}` is not an http:// or https:// URL"),
            "expect lines test what the proxy lets through; write e.g. `expect-pass https://gitlab.example.com/`".into(),
        ));
    }
    Target::from_absolute_uri("GET", url).map(|_| ()).map_err(|e| {
        (format!("`{url}`: {}", e.reason), "write a URL such as `https://host.example.com/path`".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Directive>> {
        parse_layer(&LayerText::new(EgressLayer::Project, "p.conf", text))
    }

    #[test]
    fn egress_words_and_comments() {
        assert_eq!(words("  allow a b # c d"), vec![(3, "allow"), (9, "a"), (11, "b")]);
        assert_eq!(words("#x"), vec![]);
        assert_eq!(words("allow-regex a#b"), vec![(1, "allow-regex"), (13, "a#b")]);
        assert_eq!(words("\tallow\ta"), vec![(2, "allow"), (8, "a")]);
    }

    /// Every error class, with the exact location.
    #[test]
    fn egress_parse_errors_table() {
        let cases: &[(&str, &str, &str)] = &[
            ("allow\n", "p.conf:1:1", "needs at least one host"),
            ("\n\nfrobnicate x\n", "p.conf:3:1", "unknown directive `frobnicate`"),
            ("deny x.com", "p.conf:1:1", "unknown directive `deny`"),
            ("allow ok.com bad..com", "p.conf:1:14", "empty label"),
            ("block *.example.com", "p.conf:1:7", "wildcards"),
            ("block ex$ample.com", "p.conf:1:7", "cannot appear in a host name"),
            ("allow https://x.com/a", "p.conf:1:7", "is a URL"),
            ("allow x.com:8080", "p.conf:1:7", "a port is not allowed here"),
            ("allow 10.0.0.1/33", "p.conf:1:7", "prefix length"),
            ("allow 10.0.0.1/8", "p.conf:1:7", "host bits"),
            ("allow 2130706433", "p.conf:1:7", "not a valid host name or IPv4 address"),
            ("allow [::1", "p.conf:1:7", "unbalanced"),
            ("allow -x.com", "p.conf:1:7", "starts or ends with `-`"),
            ("connect git.example.com", "p.conf:1:9", "connect needs a port"),
            ("connect git.example.com:", "p.conf:1:9", "bad port"),
            ("connect git.example.com:0", "p.conf:1:9", "bad port `0`"),
            ("connect git.example.com:65536", "p.conf:1:9", "bad port `65536`"),
            ("connect a.com:22 git.example.com:x22", "p.conf:1:18", "bad port `x22`"),
            ("connect ::1:22", "p.conf:1:9", "brackets"),
            ("connect [::1]", "p.conf:1:9", "connect needs a port"),
            ("connect 10.0.0.0/8:22", "p.conf:1:9", "network is not allowed"),
            ("connect\n", "p.conf:1:1", "needs at least one host:port"),
            ("allow-regex ^ok$ \\d+", "p.conf:1:18", "not POSIX"),
            ("block-regex   ab(?i)", "p.conf:1:17", "`(?`"),
            ("block-regex a+?", "p.conf:1:15", "after a quantifier"),
            ("block-regex a{1", "p.conf:1:14", "without `}`"),
            ("block-regex (a|)", "p.conf:1:16", "empty alternative"),
            ("block-regex [[:space:]]", "p.conf:1:14", "inside a bracket"),
            ("expect-pass ftp://x.com/", "p.conf:1:13", "not an http:// or https:// URL"),
            ("expect-block x.com", "p.conf:1:14", "not an http:// or https:// URL"),
            ("expect-pass https://x.com:99999/", "p.conf:1:13", "not in 1-65535"),
            ("expect-pass https://x.com/ -o /tmp/x", "p.conf:1:28", "not allowed in expect lines"),
            ("expect-pass https://x.com/ -d @/etc/passwd", "p.conf:1:31", "file references"),
            ("expect-pass https://x.com/ --data-urlencode a@/etc/passwd", "p.conf:1:45", "file references"),
            ("expect-pass https://x.com/ -H", "p.conf:1:28", "needs a value"),
            ("expect-pass https://x.com/ --proxy http://y", "p.conf:1:28", "not allowed"),
            ("expect-pass https://x.com/ junk", "p.conf:1:28", "unexpected word"),
            ("expect-pass\n", "p.conf:1:1", "needs at least one URL"),
            ("allow a.com\u{7}", "p.conf:1:12", "control character"),
        ];
        for (text, loc, needle) in cases {
            let e = match parse(text) {
                Ok(_) => panic!("{text:?} parsed"),
                Err(e) => e,
            };
            assert_eq!(e.location().map(|l| l.to_string()).as_deref(), Some(*loc), "{text:?}: {e}");
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
            assert!(e.to_string().contains("hint:"), "{text:?} has no hint: {e}");
        }
    }

    #[test]
    fn egress_parse_long_line() {
        let long = format!("# ok\nallow {}\n", vec!["a.example.com"; 400].join(" "));
        let e = parse(&long).unwrap_err();
        assert_eq!(e.location().unwrap().to_string(), "p.conf:2");
        assert!(e.to_string().contains("longer than 4096"), "{e}");
    }

    #[test]
    fn egress_parse_seed_example() {
        let text = r"allow jira.example.com gitlab.example.com # wins over block
allow-regex ^[a-z0-9-]+\.staging\.example\.com$
block .example.com # the domain and all subdomains
block-regex ^prod-
connect git.example.com:2222 10.0.0.5:6443 # tunnels: git over SSH, Kubernetes API
expect-block https://prod.example.com/ # self-tests run by `run` and `egress verify`
expect-pass https://gitlab.example.com/
expect-pass https://10.0.0.5:6443/version -k # extra curl options after the URL
";
        let d = parse(text).unwrap();
        assert_eq!(d.len(), 8);
        let Body::Connect(c) = &d[4].body else { panic!() };
        assert_eq!(c[1].value.1, 6443);
        assert_eq!(c[1].column, 30);
        let Body::Expect(e) = &d[7].body else { panic!() };
        assert_eq!(e.curl_args, vec!["-k"]);
        assert_eq!(e.at.to_string(), "p.conf:8");
    }
}
