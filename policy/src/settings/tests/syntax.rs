//! Every accepted syntax form, checked against the expected value and, for each case, against
//! what bash itself makes of the same text (the fixtures are literal; bash runs only them).

use std::process::Command;

use super::super::print::quote;
use super::{Fixture, s};
use crate::settings::{SCHEMA, Value};

/// (text, setting, expected value). `{H}` is HOME, `{P}` the project directory. The project
/// directory is named `shop`, so OCSB_NAME defaults to `shop`.
const CASES: &[(&str, &str, &[&str], bool)] = &[
    // (text, name, value (one element for a scalar), is_array)
    ("OCSB_WT_PREFIX=abc", "OCSB_WT_PREFIX", &["abc"], false),
    ("OCSB_WT_PREFIX=", "OCSB_WT_PREFIX", &[""], false),
    ("OCSB_WT_PREFIX=''", "OCSB_WT_PREFIX", &[""], false),
    ("OCSB_WT_PREFIX='a b $HOME \\ \"'", "OCSB_WT_PREFIX", &["a b $HOME \\ \""], false),
    (r#"OCSB_WT_PREFIX="a \"b\" \\ \$x \` c""#, "OCSB_WT_PREFIX", &["a \"b\" \\ $x ` c"], false),
    (r#"OCSB_WT_PREFIX="a\nb\'c""#, "OCSB_WT_PREFIX", &["a\\nb\\'c"], false),
    (r"OCSB_WT_PREFIX=a\ b\'\\", "OCSB_WT_PREFIX", &["a b'\\"], false),
    (r#"OCSB_WT_PREFIX=a'b'"c"d"#, "OCSB_WT_PREFIX", &["abcd"], false),
    (r#"OCSB_WT_PREFIX="$HOME/x""#, "OCSB_WT_PREFIX", &["{H}/x"], false),
    ("OCSB_WT_PREFIX=${HOME}x", "OCSB_WT_PREFIX", &["{H}x"], false),
    ("OCSB_WT_PREFIX=$OCSB_PROJECT_DIR/y", "OCSB_WT_PREFIX", &["{P}/y"], false),
    ("OCSB_WT_PREFIX=$OCSB_NAME-", "OCSB_WT_PREFIX", &["shop-"], false),
    ("OCSB_NAME=web\nOCSB_WT_PREFIX=\"${OCSB_NAME}_\"", "OCSB_WT_PREFIX", &["web_"], false),
    ("OCSB_WT_PREFIX=~/x", "OCSB_WT_PREFIX", &["{H}/x"], false),
    ("OCSB_WT_PREFIX=~", "OCSB_WT_PREFIX", &["{H}"], false),
    ("OCSB_WT_PREFIX='~/x'", "OCSB_WT_PREFIX", &["~/x"], false),
    ("OCSB_WT_PREFIX=\"~\"/x", "OCSB_WT_PREFIX", &["~/x"], false),
    ("OCSB_WT_PREFIX=a~b", "OCSB_WT_PREFIX", &["a~b"], false),
    ("OCSB_WT_PREFIX=a#b # comment", "OCSB_WT_PREFIX", &["a#b"], false),
    ("OCSB_WT_PREFIX=a # comment $(x) `y`", "OCSB_WT_PREFIX", &["a"], false),
    ("# only a comment\n\n   \n\t\nOCSB_WT_PREFIX=a\n", "OCSB_WT_PREFIX", &["a"], false),
    ("\tOCSB_WT_PREFIX=a\t# tabs", "OCSB_WT_PREFIX", &["a"], false),
    ("OCSB_WT_PREFIX=ab\\\ncd", "OCSB_WT_PREFIX", &["abcd"], false),
    ("OCSB_WT_PREFIX=\"ab\\\ncd\"", "OCSB_WT_PREFIX", &["abcd"], false),
    ("OCSB_WT_PREFIX=\\\nx", "OCSB_WT_PREFIX", &["x"], false),
    ("OCSB_WT_PREFIX=\"multi\nline\"", "OCSB_WT_PREFIX", &["multi\nline"], false),
    ("OCSB_WT_PREFIX='multi\nline'", "OCSB_WT_PREFIX", &["multi\nline"], false),
    ("export OCSB_WT_PREFIX=a", "OCSB_WT_PREFIX", &["a"], false),
    ("export\tOCSB_WT_PREFIX=a # c", "OCSB_WT_PREFIX", &["a"], false),
    ("OCSB_WT_PREFIX=a\nOCSB_WT_PREFIX+=b", "OCSB_WT_PREFIX", &["ab"], false),
    ("OCSB_WT_PREFIX+=\"-x\"", "OCSB_WT_PREFIX", &["-x"], false),
    ("OCSB_WT_PREFIX=a OCSB_WT_BASE=$OCSB_WT_PREFIX.b", "OCSB_WT_BASE", &["a.b"], false),
    ("OCSB_WT_PREFIX=$", "OCSB_WT_PREFIX", &["$"], false),
    ("OCSB_WT_PREFIX=\"a$\"$/x", "OCSB_WT_PREFIX", &["a$$/x"], false),
    ("OCSB_WT_PREFIX=*.log", "OCSB_WT_PREFIX", &["*.log"], false),
    ("OCSB_WT_PREFIX={a,b}?[c]", "OCSB_WT_PREFIX", &["{a,b}?[c]"], false),
    (r"OCSB_WT_PREFIX='it'\''s'", "OCSB_WT_PREFIX", &["it's"], false),
    ("OCSB_WT_PREFIX=\"it's\"", "OCSB_WT_PREFIX", &["it's"], false),
    ("OCSB_WT_PREFIX=é€ü", "OCSB_WT_PREFIX", &["é€ü"], false),
    ("OCSB_WT_PREFIX=a=b:c", "OCSB_WT_PREFIX", &["a=b:c"], false),
    ("OCSB_WT_PREFIX=!x", "OCSB_WT_PREFIX", &["!x"], false),
    ("OCSB_WT_PREFIX=a}", "OCSB_WT_PREFIX", &["a}"], false),
    // Backslash-newline is removed before words are split, except in single quotes and comments.
    ("OCSB_WT_PREFIX=$HO\\\nME", "OCSB_WT_PREFIX", &["{H}"], false),
    ("OCSB_\\\nWT_PREFIX=x", "OCSB_WT_PREFIX", &["x"], false),
    ("OCSB_WT_PREFIX\\\n+=x", "OCSB_WT_PREFIX", &["x"], false),
    ("OCSB_WT_PREFIX=~\\\n/x", "OCSB_WT_PREFIX", &["{H}/x"], false),
    ("OCSB_WT_PREFIX='a\\\nb'", "OCSB_WT_PREFIX", &["a\\\nb"], false),
    ("OCSB_WT_PREFIX=a # c \\\nOCSB_WT_PREFIX=b", "OCSB_WT_PREFIX", &["b"], false),
    ("OCSB_WT_PREFIX=a\\\\\nOCSB_WT_BASE=b", "OCSB_WT_PREFIX", &["a\\"], false),
    ("OCSB_WT_PREFIX=a\\\\\nOCSB_WT_BASE=b", "OCSB_WT_BASE", &["b"], false),
    ("OCSB_WT_PREFIX=\"a\\\\\n\"", "OCSB_WT_PREFIX", &["a\\\n"], false),
    ("\\\nOCSB_WT_PREFIX=a", "OCSB_WT_PREFIX", &["a"], false),
    ("OCSB_RW=(a)\\\n OCSB_HIDE=(b)", "OCSB_HIDE", &["b"], true),
    ("OCSB_RW=(a b c)", "OCSB_RW", &["a", "b", "c"], true),
    ("OCSB_RW=()", "OCSB_RW", &[], true),
    ("OCSB_RW=( )", "OCSB_RW", &[], true),
    ("OCSB_RW=(\n  a # one\n  'b c'\n  # a whole line\n\n  \"d\"\n)", "OCSB_RW", &["a", "b c", "d"], true),
    ("OCSB_RW=(#c\na)", "OCSB_RW", &["a"], true),
    ("OCSB_RW=(a#b)", "OCSB_RW", &["a#b"], true),
    ("OCSB_RW+=(x)", "OCSB_RW", &["x"], true),
    ("OCSB_RW=(a)\nOCSB_RW+=(b c)\nOCSB_RW+=()", "OCSB_RW", &["a", "b", "c"], true),
    ("OCSB_RW=(~/a \"$HOME/b\" ~ '~')", "OCSB_RW", &["{H}/a", "{H}/b", "{H}", "~"], true),
    ("OCSB_RW=($OCSB_NAME ${OCSB_NAME}x)", "OCSB_RW", &["shop", "shopx"], true),
    ("OCSB_RW=('' \"\")", "OCSB_RW", &["", ""], true),
    ("OCSB_RW=($OCSB_WT_PREFIX)", "OCSB_RW", &[], true),
    ("OCSB_RW=(\"$OCSB_WT_PREFIX\" $OCSB_WT_PREFIX'')", "OCSB_RW", &["", ""], true),
    ("OCSB_RW=(a\\ b 'c'd e\\*)", "OCSB_RW", &["a b", "cd", "e*"], true),
    ("OCSB_RW=(a) # trailing", "OCSB_RW", &["a"], true),
    ("OCSB_RW=(a \\\n b)", "OCSB_RW", &["a", "b"], true),
    ("OCSB_RW=(\"*\" '?' \"[x]\" '{a,b}')", "OCSB_RW", &["*", "?", "[x]", "{a,b}"], true),
    ("export OCSB_RW=(a)", "OCSB_RW", &["a"], true),
    ("OCSB_RW=(a) OCSB_HIDE=(b)", "OCSB_HIDE", &["b"], true),
    ("OCSB_RW=(x=1 a~b)", "OCSB_RW", &["x=1", "a~b"], true),
    ("OCSB_ENV=(\"SHOP_ENV=dev\" 'A=b c')", "OCSB_ENV", &["SHOP_ENV=dev", "A=b c"], true),
];

fn expected(f: &Fixture, v: &[&str], array: bool) -> Value {
    let fill = |x: &&str| {
        x.replace("{H}", f.home().to_str().expect("utf8")).replace("{P}", f.project().to_str().expect("utf8"))
    };
    if array { Value::Array(v.iter().map(fill).collect()) } else { s(&fill(&v[0])) }
}

#[test]
fn settings_syntax_table() {
    let f = Fixture::new();
    for (text, name, v, array) in CASES {
        let got = f.raw(text, name).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(got, expected(&f, v, *array), "{text:?}");
    }
}

/// The same cases through bash: the subset means what bash means.
#[test]
fn settings_syntax_agrees_with_bash() {
    let f = Fixture::new();
    for (text, name, v, array) in CASES {
        let (i, _) = crate::settings::schema::find(name).expect("known");
        assert_eq!(bash_values(&f, text)[i], expected(&f, v, *array), "bash disagrees on {text:?}");
    }
}

/// The README of the repository, which users read to configure ocsb.
fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The README's settings table has one row per setting, no more and no fewer.
#[test]
fn settings_readme_table_lists_every_setting() {
    let text = readme();
    let rows: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `OCSB_")?.split_once('`').map(|(name, _)| name))
        .collect();
    let mut documented: Vec<String> = rows.iter().map(|n| format!("OCSB_{n}")).collect();
    let mut known: Vec<String> = SCHEMA.iter().map(|s| s.name.to_string()).collect();
    documented.sort();
    known.sort();
    assert_eq!(documented, known, "README.md's table of settings and the schema differ");
}

#[test]
fn settings_syntax_example_of_the_readme() {
    let f = Fixture::new();
    let text = r#"OCSB_NAME=shop
OCSB_WEB_PORT=4296 # different ports let several projects run at once
OCSB_EGRESS_PORT=3138
OCSB_ENV_FILE=~/.config/shop/agent.env
OCSB_HIDE=(../shop-secrets)
OCSB_ENV=("SHOP_ENV=dev")
OCSB_WT_PREFIX=shop-wt-
OCSB_WT_BASE=main
OCSB_WT_SLUG_REGEX='SHOP-([0-9]+)'
"#;
    assert!(readme().contains(&format!("```sh\n{text}```")), "README.md no longer shows this example");
    let st = f.load_project(text).expect("the README's example loads");
    assert_eq!(st.name(), "shop");
    assert_eq!(st.web_port(), 4296);
    assert_eq!(st.opencode_port(), 4297);
    assert_eq!(st.egress_port(), 3138);
    assert_eq!(st.env_file(), Some(f.home().join(".config/shop/agent.env")));
    assert_eq!(st.hide(), vec![f.project().join("../shop-secrets")]);
    assert_eq!(st.env_vars(), vec![("SHOP_ENV".to_string(), "dev".to_string())]);
    assert_eq!(st.wt_prefix(), "shop-wt-");
    assert_eq!(st.wt_base(), Some("main"));
    let re = st.wt_slug_regex().expect("a regex");
    assert_eq!(&re.captures("feature-SHOP-42-cart").expect("match")[1], "42");
    assert_eq!(st.get("OCSB_WT_BASE").expect("set").origin.at.line, 8);
}

/// `ocsb config` output means the same to bash as to ocsb.
#[test]
fn settings_config_output_agrees_with_bash() {
    let f = Fixture::new();
    let st = f
        .load_project(
            "OCSB_ENV=(\"A=it's a \\\"test\\\"\" 'B=$HOME `x` \\' 'C=multi\nline' 'D=é€ #x')\n\
             OCSB_RW=('with blank' '*glob*' '~tilde')\nOCSB_WT_SLUG_REGEX='^(?:a|b)-([0-9]+)$'\n",
        )
        .expect("loads");
    let printed = crate::settings::print::render(&st, true);
    for ((name, entry), bash) in st.iter().zip(bash_values(&f, &printed)) {
        assert_eq!(bash, entry.value, "{name}");
    }
}

/// Every setting's value after bash runs the defaults and then `text` (a fixture that the parser
/// accepted: assignments only). Runs with an empty environment and PATH, in a scratch directory.
pub(super) fn bash_values(f: &Fixture, text: &str) -> Vec<Value> {
    let defaults = super::super::load::eval_raw(&f.input, "").expect("defaults");
    let mut script = String::new();
    for (spec, v) in SCHEMA.iter().zip(&defaults) {
        let rhs = match v {
            Value::Scalar(x) => quote(x),
            Value::Array(xs) => format!("({})", xs.iter().map(|x| quote(x)).collect::<Vec<_>>().join(" ")),
        };
        script.push_str(&format!("{}={rhs}\n", spec.name));
    }
    script.push_str(&format!("OCSB_PROJECT_DIR={}\n", quote(f.project().to_str().expect("utf8"))));
    script.push_str(text);
    script.push('\n');
    for spec in SCHEMA {
        script.push_str(&format!(
            "for x in \"${{{}[@]}}\"; do printf '%s\\0' \"$x\"; done; printf '\\1'\n",
            spec.name
        ));
    }
    let out = Command::new("/bin/bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .env_clear()
        .env("HOME", f.home())
        .env("PATH", "")
        .current_dir(f.dir.path())
        .output()
        .expect("run bash (Debian package `bash`)");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "bash failed on {text:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf8");
    SCHEMA
        .iter()
        .zip(&defaults)
        .zip(stdout.split('\u{1}'))
        .map(|((_, d), got)| {
            let mut items: Vec<String> = got.split('\0').map(str::to_string).collect();
            items.pop();
            match d {
                Value::Scalar(_) => s(&items.concat()),
                Value::Array(_) => Value::Array(items),
            }
        })
        .collect()
}

#[test]
fn spend_limits_parse_or_name_the_problem() {
    use crate::settings::SpendLimit;
    let l = |day, session| SpendLimit { day, session };
    assert_eq!(SpendLimit::parse("").unwrap(), l(None, None));
    assert_eq!(SpendLimit::parse("5").unwrap(), l(Some(5.0), None));
    assert_eq!(SpendLimit::parse("5/1.50").unwrap(), l(Some(5.0), Some(1.5)));
    assert_eq!(SpendLimit::parse("/0.5").unwrap(), l(None, Some(0.5)));
    assert!(!SpendLimit::parse("").unwrap().is_set());
    for bad in ["-1", "1e3", "five", "5/", "1.2.3", "inf", "NaN", "5/1/2", "$5"] {
        assert!(SpendLimit::parse(bad).is_err(), "{bad} must be refused");
    }
}
