//! The curl options an `expect-pass`/`expect-block` line may carry.
//!
//! Expect lines come from committed files and are run by `ocsb run` / `egress verify` with curl.
//! An option such as `-o ~/.bashrc`, `-K file`, `-d @~/.ssh/id_ed25519` or `--proxy` would turn a
//! self-test into a way to write or leak host files or to skip the filter, so only options that
//! shape the request itself are accepted.

/// Options without a value.
const FLAGS: &[&str] = &[
    "-k",
    "--insecure",
    "-I",
    "--head",
    "-L",
    "--location",
    "--http1.0",
    "--http1.1",
    "--http2",
    "-4",
    "--ipv4",
    "-6",
    "--ipv6",
    "--compressed",
    "-G",
    "--get",
];

/// Options that take the next word as their value (which must not name a file with `@`).
const WITH_VALUE: &[&str] = &[
    "-X",
    "--request",
    "-H",
    "--header",
    "-m",
    "--max-time",
    "--connect-timeout",
    "-A",
    "--user-agent",
    "-d",
    "--data",
    "--data-raw",
    "--data-urlencode",
    "-e",
    "--referer",
];

/// Checks the words after the URL. `Err((index of the bad word, message, hint))`.
pub(crate) fn check(args: &[&str]) -> Result<(), (usize, String, String)> {
    let hint = || {
        format!(
            "expect lines run curl on your machine, so only these options are accepted: {} and, with a value, {}",
            FLAGS.join(" "),
            WITH_VALUE.join(" ")
        )
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a.contains(['"', '\'']) {
            return Err((
                i,
                format!("`{a}`: quotes are not supported"),
                "words are split on spaces; a value cannot contain spaces".into(),
            ));
        }
        if FLAGS.contains(&a) {
            i += 1;
        } else if WITH_VALUE.contains(&a) {
            let Some(v) = args.get(i + 1) else {
                return Err((
                    i,
                    format!("`{a}` needs a value"),
                    "write the value after the option, e.g. `-H X-Test:1`".into(),
                ));
            };
            // `--data-urlencode name@file` reads a file from anywhere in the value.
            let file_ref = v.starts_with('@') || (a == "--data-urlencode" && v.contains('@'));
            if file_ref || v.contains('"') || v.contains('\'') {
                return Err((i + 1, format!("`{v}`: file references and quotes are not accepted"), hint()));
            }
            i += 2;
        } else if a.starts_with('-') {
            return Err((i, format!("curl option `{a}` is not allowed in expect lines"), hint()));
        } else {
            return Err((
                i,
                format!("unexpected word `{a}` after the URL"),
                "an expect line takes one URL, then curl options".into(),
            ));
        }
    }
    Ok(())
}
