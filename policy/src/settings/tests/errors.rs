//! Every error class, with the exact line and column.

use super::{Fixture, where_};

/// (text, line, column, a piece of the message or hint).
const SYNTAX_ERRORS: &[(&str, u32, u32, &str)] = &[
    // command substitution, backticks, arithmetic
    ("OCSB_NAME=$(touch x)", 1, 11, "command substitution `$(…)`"),
    ("OCSB_NAME=\"a$(id)\"", 1, 13, "command substitution"),
    ("OCSB_NAME=`id`", 1, 11, "backticks"),
    ("OCSB_NAME=\"a`id`\"", 1, 13, "backticks"),
    ("OCSB_RW=(`id`)", 1, 10, "backticks"),
    ("OCSB_WEB_PORT=$((4000+1))", 1, 15, "arithmetic"),
    ("OCSB_WEB_PORT=$[4000+1]", 1, 15, "`$[…]`"),
    ("OCSB_NAME=\"$[1]\"", 1, 12, "`$[…]`"),
    // parameter forms
    ("OCSB_NAME=${OCSB_NAME:-x}", 1, 22, "parameter operator `:`"),
    ("OCSB_NAME=${OCSB_NAME-x}", 1, 22, "parameter operator `-`"),
    ("OCSB_NAME=${OCSB_NAME/a/b}", 1, 22, "parameter operator `/`"),
    ("OCSB_NAME=${#OCSB_NAME}", 1, 13, "length or indirection"),
    ("OCSB_NAME=${!OCSB_NAME}", 1, 13, "length or indirection"),
    ("OCSB_RW=(\"${OCSB_RW[@]}\" x)", 1, 20, "array subscripts"),
    ("OCSB_NAME=${}", 1, 13, "bad substitution"),
    ("OCSB_NAME=${HOME", 1, 11, "unterminated `${`"),
    ("OCSB_NAME=$1", 1, 11, "special parameter `$1`"),
    ("OCSB_NAME=\"$@\"", 1, 12, "special parameter `$@`"),
    ("OCSB_NAME=$$", 1, 11, "special parameter"),
    ("OCSB_NAME=$'a'", 1, 11, "ANSI-C"),
    ("OCSB_NAME=$\"a\"", 1, 11, "locale"),
    // control flow, functions, source, commands
    ("if true; then\n  OCSB_NAME=a\nfi", 1, 1, "`if`"),
    ("OCSB_NAME=a\n  for x in a; do :; done", 2, 3, "`for`"),
    ("while true; do :; done", 1, 1, "`while`"),
    ("case x in esac", 1, 1, "`case`"),
    ("[[ -f x ]]", 1, 1, "`[[`"),
    ("{ OCSB_NAME=a; }", 1, 1, "`{`"),
    ("! true", 1, 1, "`!`"),
    ("f() { :; }", 1, 1, "function definition `f()`"),
    ("f () { :; }", 1, 1, "function definition"),
    ("function f { :; }", 1, 1, "function definitions"),
    ("source ./other.conf", 1, 1, "`source`"),
    (". ./other.conf", 1, 1, "`.`"),
    ("echo hi", 1, 1, "`echo` is a command"),
    ("OCSB_NAME=a\neval 'x'", 2, 1, "`eval` is a command"),
    ("(echo)", 1, 1, "subshell"),
    (")", 1, 1, "`)`"),
    ("\"quoted\" command", 1, 1, "command"),
    ("$(id)", 1, 1, "command substitution"),
    ("declare -a OCSB_RW=(a)", 1, 1, "`declare`"),
    ("readonly OCSB_NAME=a", 1, 1, "`readonly`"),
    ("unset OCSB_NAME", 1, 1, "`unset`"),
    ("export", 1, 1, "`export`"),
    ("export -n OCSB_NAME", 1, 8, "`export` must be followed"),
    ("export OCSB_NAME", 1, 8, "`export` must be followed"),
    ("export OCSB_NAME=a OCSB_WT_PREFIX=$OCSB_NAME", 1, 20, "only one assignment may follow `export`"),
    // operators
    ("OCSB_NAME=a > /tmp/x", 1, 13, "redirection"),
    ("OCSB_NAME=a>/tmp/x", 1, 12, "redirection"),
    ("OCSB_NAME=a < x", 1, 13, "redirection"),
    ("OCSB_NAME=a | cat", 1, 13, "pipe"),
    ("OCSB_NAME=a; OCSB_WEB_PORT=1", 1, 12, "`;`"),
    ("OCSB_NAME=a ; x", 1, 13, "`;`"),
    ("OCSB_NAME=a && x", 1, 13, "`&`"),
    ("OCSB_NAME=a &", 1, 13, "`&`"),
    ("OCSB_NAME=a || x", 1, 13, "pipe"),
    ("OCSB_NAME=a (b)", 1, 13, "`(`"),
    ("OCSB_NAME=a(b)", 1, 12, "`(`"),
    ("OCSB_NAME=a)", 1, 12, "`)`"),
    ("OCSB_RW=(a) ;", 1, 13, "`;`"),
    ("OCSB_RW=(a);", 1, 12, "`;`"),
    ("OCSB_RW=(a (b))", 1, 12, "`(`"),
    ("OCSB_RW=(a|b)", 1, 11, "pipe"),
    // words
    ("OCSB_NAME=a b", 1, 13, "unexpected text after an assignment"),
    ("OCSB_RW=(a)b", 1, 12, "right after the closing `)`"),
    ("OCSB_RW=(a)# bash reads a string", 1, 12, "right after the closing `)`"),
    ("OCSB_NAME='abc", 1, 11, "unterminated single quote"),
    ("OCSB_NAME=\"abc\n\n", 1, 11, "unterminated double quote"),
    ("OCSB_RW=(a\n b", 1, 9, "unterminated array"),
    ("OCSB_NAME=a\\", 1, 12, "backslash at the end"),
    ("OCSB_NAME=~root", 1, 11, "`~user`"),
    ("OCSB_NAME=~+", 1, 11, "`~user`"),
    ("OCSB_WT_PREFIX=a:~/b", 1, 18, "after `:` or `=`"),
    ("OCSB_RW=(x=~/b)", 1, 12, "after `:` or `=`"),
    ("OCSB_RW=(*.log)", 1, 10, "file name pattern"),
    ("OCSB_RW=(a?)", 1, 11, "file name pattern"),
    ("OCSB_RW=([x])", 1, 10, "file name pattern"),
    ("OCSB_RW=(a{b,c})", 1, 11, "brace expansion"),
    ("OCSB_RW[0]=x", 1, 8, "array subscripts"),
    ("OCSB_NAME =x", 1, 1, "blank between `OCSB_NAME` and `=`"),
    ("OCSB_NAME +=x", 1, 1, "blank between"),
    ("1X=2", 1, 1, "`1X` is not a valid variable name"),
    ("A-B=2", 1, 1, "`A-B` is not a valid variable name"),
    ("OCSB_NAME=a\r\n", 1, 12, "carriage return"),
    ("OCSB_NAME='a\r'", 1, 13, "carriage return"),
    ("OCSB_NAME=a\0", 1, 12, "NUL"),
    ("OCSB_NAME=\"a\\\0\"", 1, 14, "NUL"),
    ("\n\nOCSB_NAME=x\n  OCSB_WEB_PORT=$(id)", 4, 17, "command substitution"),
    ("OCSB_NAME=a\\\nb$(id)", 2, 2, "command substitution"),
    ("OCSB_NAME='x\ny' `id`", 2, 4, "unexpected text after an assignment"),
    ("OCSB_WT_PREFIX=é$(id)", 1, 17, "command substitution"),
    ("OCSB_NAME=$\\\n(id)", 1, 11, "command substitution"),
    ("OCSB_NAME=$(\\\n(1))", 1, 11, "arithmetic"),
    ("OCSB_WT_PREFIX=$\\\n'q s'", 1, 16, "ANSI-C"),
    ("OCSB_NAME=${OCSB_NAME\\\n:-x}", 2, 1, "parameter operator `:`"),
    ("OCSB_RW=(a)\\\n#x", 2, 1, "right after the closing `)`"),
    ("OCSB_RW\\\n[0]=x", 2, 1, "array subscripts"),
    ("OCSB_NAME=a \\\n; b", 2, 1, "`;`"),
];

/// Errors found while evaluating assignments: names, kinds, expansions.
const EVAL_ERRORS: &[(&str, u32, u32, &str)] = &[
    ("FOO=bar", 1, 1, "only OCSB_ settings may be set"),
    ("OCSB_NAME=a PATH=/x", 1, 13, "`PATH` is not a setting"),
    ("OCSB_WEBPORT=1", 1, 1, "did you mean OCSB_WEB_PORT?"),
    ("OCSB_HIDEHOME+=(x)", 1, 1, "did you mean OCSB_HIDE_HOME?"),
    ("OCSB_PROJECT_DIR=/x", 1, 1, "set by ocsb"),
    ("OCSB_NAME=$FOO", 1, 11, "$FOO is not set"),
    ("OCSB_NAME=\"${USER}\"", 1, 12, "$USER is not set"),
    ("OCSB_NAME=$OCSB_NAMEX", 1, 11, "did you mean OCSB_NAME?"),
    ("OCSB_WT_PREFIX=$OCSB_STATE_DIR", 1, 16, "not set yet"),
    ("OCSB_STATE_DIR+=/x", 1, 1, "not set yet"),
    ("OCSB_WT_PREFIX=$OCSB_RW", 1, 16, "is an array and cannot be expanded"),
    ("OCSB_RW=a", 1, 1, "OCSB_RW is an array; `OCSB_RW=value` would replace only its first element"),
    ("OCSB_RW+=a", 1, 1, "write OCSB_RW+=(a)"),
    ("OCSB_NAME=(a b)", 1, 11, "OCSB_NAME is a single value, not an array"),
    ("OCSB_NAME+=(a)", 1, 12, "single value"),
];

#[test]
fn settings_every_syntax_error_has_line_and_column() {
    let f = Fixture::new();
    for (text, line, col, needle) in SYNTAX_ERRORS.iter().chain(EVAL_ERRORS) {
        let e = match f.raw(text, "OCSB_NAME") {
            Ok(v) => panic!("{text:?} was accepted: {v:?}"),
            Err(e) => e,
        };
        let (l, c, msg) = where_(&e);
        assert!(msg.contains(needle), "{text:?}: message {msg:?} lacks {needle:?}");
        assert_eq!((l, c), (*line, *col), "{text:?}: {msg}");
        // The display names the file, line and column.
        assert!(e.to_string().starts_with(&format!("t.conf:{line}:{col}: ")), "{e}");
    }
}

#[test]
fn settings_state_dir_usable_once_set() {
    let f = Fixture::new();
    let v = f.raw("OCSB_STATE_DIR=/s\nOCSB_WT_PREFIX=$OCSB_STATE_DIR", "OCSB_WT_PREFIX").expect("ok");
    assert_eq!(v, super::s("/s"));
}

#[test]
fn settings_unquoted_expansion_in_array_must_not_split_or_glob() {
    let f = Fixture::new();
    let e = f.raw("OCSB_WT_PREFIX='a b'\nOCSB_RW=(x $OCSB_WT_PREFIX)", "OCSB_RW").expect_err("split");
    let (l, c, m) = where_(&e);
    assert_eq!((l, c), (2, 12), "{m}");
    assert!(m.contains("split") && m.contains("\"$OCSB_WT_PREFIX\""), "{m}");
    let e = f.raw("OCSB_WT_PREFIX='*'\nOCSB_RW=(${OCSB_WT_PREFIX})", "OCSB_RW").expect_err("glob");
    assert_eq!(where_(&e).0, 2);
    assert!(where_(&e).2.contains("glob"), "{e}");
    // Quoted, or in a scalar, it is fine.
    let v = f.raw("OCSB_WT_PREFIX='a b*'\nOCSB_RW=(\"$OCSB_WT_PREFIX\")", "OCSB_RW").expect("quoted");
    assert_eq!(v, super::a(&["a b*"]));
    let v = f.raw("OCSB_WT_PREFIX='a b*'\nOCSB_WT_BASE=$OCSB_WT_PREFIX", "OCSB_WT_BASE").expect("scalar");
    assert_eq!(v, super::s("a b*"));
    // A home with a blank, unquoted in an array: `~` is not split by bash, $HOME is.
    let f = Fixture::with_project("shop");
    let mut input = f.input.clone();
    input.home = f.dir.path().join("my home");
    let vals = super::super::load::eval_raw(&input, "OCSB_RW=(~/a)").expect("tilde is not split");
    let (i, _) = super::schema::find("OCSB_RW").expect("known");
    assert_eq!(vals[i], super::a(&[&format!("{}/a", input.home.display())]));
    let e = super::super::load::eval_raw(&input, "OCSB_RW=($HOME/a)").expect_err("split");
    assert_eq!(where_(&e).1, 10);
}

/// Values are checked after all layers; the error points at the value that is wrong.
const VALUE_ERRORS: &[(&str, u32, u32, &str)] = &[
    ("OCSB_WEB_PORT=0", 1, 15, "`0` is not a port"),
    ("OCSB_WEB_PORT=65535", 1, 15, "65535 leaves no port"),
    ("OCSB_WEB_PORT=+80", 1, 15, "not a port"),
    ("OCSB_WEB_PORT=abc", 1, 15, "not a port"),
    ("OCSB_WEB_PORT=", 1, 15, "not a port"),
    ("OCSB_EGRESS_PORT=70000", 1, 18, "not a port"),
    ("OCSB_EGRESS_PORT=4196", 1, 18, "is the web UI port"),
    ("OCSB_WEB_PORT=4000\nOCSB_EGRESS_PORT=4001", 2, 18, "OpenCode's port"),
    ("OCSB_NAME=../x", 1, 11, "not a safe name"),
    ("OCSB_NAME=a/b", 1, 11, "not a safe name"),
    ("OCSB_NAME=", 1, 11, "it is empty"),
    ("OCSB_NAME=-x", 1, 11, "start with a letter or a digit"),
    ("OCSB_NAME=a..b", 1, 11, "`..`"),
    ("OCSB_NAME='a b'", 1, 11, "only letters"),
    ("OCSB_PANEL=yes", 1, 12, "not 0 or 1"),
    ("OCSB_SANDBOX=true", 1, 14, "not 0 or 1"),
    ("OCSB_DOCKER=2", 1, 13, "not one of 0, 1, raw"),
    ("OCSB_TMP=public", 1, 10, "not one of private, shared"),
    ("OCSB_EGRESS_BACKEND=nginx", 1, 21, "builtin, squid"),
    ("OCSB_NETLOCK_ACQUIRE=sudo", 1, 22, "exec, sg"),
    ("OCSB_WT_SLUG_REGEX='SHOP-[0-9]+'", 1, 20, "has 0 capture groups"),
    ("OCSB_WT_SLUG_REGEX='(a)(b)'", 1, 20, "has 2 capture groups"),
    ("OCSB_WT_SLUG_REGEX='(a'", 1, 20, "invalid regex"),
    ("OCSB_ENV=(\"A=1\"\n  \"B\")", 2, 3, "`B` is not KEY=VALUE"),
    ("OCSB_ENV=(\"1A=1\")", 1, 11, "not KEY=VALUE"),
    ("OCSB_NETLOCK_GROUP=Bad", 1, 20, "not a valid group name"),
    ("OCSB_WT_PREFIX=a/b", 1, 16, "not a safe prefix"),
    ("OCSB_WT_PREFIX=..", 1, 16, "not a safe prefix"),
    ("OCSB_WT_BASE=--upload-pack=x", 1, 14, "option"),
    ("OCSB_WT_BASE='a b'", 1, 14, "blanks"),
    ("OCSB_DOCKER_GW=docker0", 1, 16, "not an IP address"),
    ("OCSB_RW_HOME=(/etc)", 1, 15, "not relative to the home directory"),
    ("OCSB_RW_HOME+=(../x)", 1, 16, "leaves the home directory"),
    ("OCSB_HIDE_HOME+=(.)", 1, 18, "the home directory itself"),
    ("OCSB_HIDE_HOME+=('')", 1, 18, "is empty"),
    ("OCSB_RW=(a '')", 1, 12, "empty value"),
    ("OCSB_RW=(/)", 1, 10, "the whole system"),
    ("OCSB_RW=(~)", 1, 10, "your whole home directory"),
    ("OCSB_RW=(~/..)", 1, 10, "your whole home directory"),
    ("OCSB_STATE_DIR=~", 1, 16, "your whole home directory"),
    ("OCSB_WORKTREES_DIR=/", 1, 20, "the whole system"),
    ("OCSB_WORKTREES_DIR=", 1, 20, "empty value"),
    ("OCSB_SKILLS=(a/b)", 1, 14, "not a skill name"),
    ("OCSB_PLUGINS=(a/b)", 1, 15, "neither a plugin name nor an absolute path"),
    ("OCSB_OPENCODE_BIN=", 1, 19, "empty value"),
];

#[test]
fn settings_every_value_error_names_the_place() {
    let f = Fixture::new();
    for (text, line, col, needle) in VALUE_ERRORS {
        let e = match f.load_project(text) {
            Ok(_) => panic!("{text:?} was accepted"),
            Err(e) => e,
        };
        let (l, c, msg) = where_(&e);
        assert!(msg.contains(needle), "{text:?}: message {msg:?} lacks {needle:?}");
        assert_eq!((l, c), (*line, *col), "{text:?}: {msg}");
        assert!(e.to_string().starts_with(&format!(".opencode-sandbox/sandbox.conf:{line}:{col}: ")), "{e}");
    }
}

#[test]
fn settings_values_that_are_accepted() {
    let f = Fixture::new();
    for text in [
        "OCSB_WEB_PORT=1",
        "OCSB_WEB_PORT=65534",
        "OCSB_EGRESS_PORT=65535",
        "OCSB_WEB_PORT=4000\nOCSB_EGRESS_PORT=4002",
        "OCSB_NAME=a.b_c-9",
        "OCSB_NAME=9",
        "OCSB_WT_SLUG_REGEX='SHOP-(?:x)?([0-9]+)'",
        "OCSB_WT_SLUG_REGEX=",
        "OCSB_ENV=('A=' '_B=x=y')",
        "OCSB_NETLOCK_GROUP=_my-group$",
        "OCSB_DOCKER_GW=172.17.0.1",
        "OCSB_DOCKER_GW=fd00::1",
        "OCSB_RW_HOME=(.config/foo 'dir with blank')",
        "OCSB_PLUGINS=(/opt/plugin.ts context-panel)",
        "OCSB_TMP=shared\nOCSB_SANDBOX=0\nOCSB_DOCKER=0\nOCSB_PANEL=0\nOCSB_NOTIFICATIONS=0",
        "OCSB_EGRESS_BACKEND=squid\nOCSB_NETLOCK_ACQUIRE=sg",
        "OCSB_RW=(~/work /srv/data)",
        "OCSB_WT_BASE=origin/main",
    ] {
        if let Err(e) = f.load_project(text) {
            panic!("{text:?} was refused: {e}");
        }
    }
}
