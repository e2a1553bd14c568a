//! Property tests: the parser and the loader never panic, whatever the input; quoting round-trips.

use proptest::prelude::*;

use super::super::load::{LayerText, eval_raw, load_texts};
use super::super::parser::parse;
use super::super::print::quote;
use super::{Fixture, a, s};
use crate::settings::Layer;

/// Characters that matter to the lexer, plus some others.
fn shellish() -> impl Strategy<Value = String> {
    let alphabet: Vec<char> = "OCSB_NAMEWRHIDabc01 \t\n\\'\"$`(){}[]*?~#;&|<>=+:/!.-é\r\0".chars().collect();
    prop::collection::vec(prop::sample::select(alphabet), 0..120).prop_map(|v| v.into_iter().collect())
}

const VALID: &str = "# settings\nOCSB_NAME=shop\nexport OCSB_WEB_PORT=4296 # ports\nOCSB_RW=(\n  a 'b c' \"$HOME/d\" ~/e\n)\n\
OCSB_RW+=(f) OCSB_WT_PREFIX=\"${OCSB_NAME}-\"\nOCSB_ENV=('A=1')\nOCSB_WT_SLUG_REGEX='SHOP-([0-9]+)'\\\n\nOCSB_TMP=shared\n";

#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, char),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let alphabet: Vec<char> = "\\'\"$`(){}[]*?~# \n;=+a".chars().collect();
    let edit = prop_oneof![
        (any::<usize>(), prop::sample::select(alphabet)).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<usize>(), 0usize..8).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<usize>(), 0usize..12).prop_map(|(i, n)| Edit::Duplicate(i, n)),
    ];
    prop::collection::vec(edit, 1..6)
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut v: Vec<char> = text.chars().collect();
    for e in edits {
        let len = v.len().max(1);
        match *e {
            Edit::Insert(i, c) => v.insert(i % (v.len() + 1), c),
            Edit::Delete(i, n) => {
                let i = i % len;
                let end = (i + n).min(v.len());
                v.drain(i.min(v.len())..end);
            }
            Edit::Duplicate(i, n) => {
                let i = (i % len).min(v.len());
                let end = (i + n).min(v.len());
                let piece: Vec<char> = v[i..end].to_vec();
                v.splice(i..i, piece);
            }
        }
    }
    v.into_iter().collect()
}

fn load_all_layers(f: &Fixture, text: &str) {
    let t = |layer, display: &str| LayerText { layer, display: display.into(), text: text.into() };
    let _ = load_texts(&f.input, &[t(Layer::User, "u"), t(Layer::Project, "p"), t(Layer::Local, "l")]);
}

proptest! {

    #[test]
    fn settings_parser_never_panics(text in shellish()) {
        let _ = parse(&text, "p");
        let f = Fixture::new();
        load_all_layers(&f, &text);
    }

    #[test]
    fn settings_parser_never_panics_on_any_unicode(text in any::<String>()) {
        let _ = parse(&text, "p");
    }

    #[test]
    fn settings_mutated_valid_file_never_panics(e in edits()) {
        let text = apply(VALID, &e);
        let f = Fixture::new();
        load_all_layers(&f, &text);
        // Errors always carry a position inside the text.
        if let Err(err) = parse(&text, "p") {
            let at = err.location().expect("an input error has a location");
            prop_assert!(at.line >= 1 && at.line as usize <= text.split('\n').count(), "{err}");
            prop_assert!(at.column >= 1, "{err}");
        }
    }

    #[test]
    fn settings_quote_round_trips(v in "[^\\x00\\r]{0,40}", w in "[^\\x00\\r]{0,20}") {
        let f = Fixture::new();
        let text = format!("OCSB_WT_PREFIX={}\nOCSB_RW=({} {})\n", quote(&v), quote(&v), quote(&w));
        let vals = eval_raw(&f.input, &text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let (pi, _) = crate::settings::schema::find("OCSB_WT_PREFIX").expect("known");
        let (ri, _) = crate::settings::schema::find("OCSB_RW").expect("known");
        prop_assert_eq!(&vals[pi], &s(&v));
        prop_assert_eq!(&vals[ri], &a(&[&v, &w]));
    }
}

#[test]
fn settings_valid_sample_of_the_property_tests_is_valid() {
    let f = Fixture::new();
    let st = f.load_project(VALID).expect("VALID loads");
    assert_eq!(st.rw().len(), 5);
}

/// Pieces of values that exercise quoting, escapes, expansions, comments and continuations.
#[rustfmt::skip]
const FRAGMENTS: &[&str] = &[
    "a", "b1", "-", ".", "/", ":", "=", "'q s'", "'it'\\''s'", "\"d q\"", "\"\\\"\\\\\\$\"", "\"\\n\"", "\\ ",
    "\\x", "$HOME", "${HOME}", "\"$HOME\"", "$OCSB_NAME", "\"${OCSB_NAME}\"", "$OCSB_PROJECT_DIR", "~", "~/",
    "~/x", "#", " #c", "\\\n", "\"\"", "''", "$", "\"$\"", "é", "{", "}", "*", "?", "[", "]", "!", "\"a\nb\"",
    "$OCSB_WT_PREFIX", "\"$OCSB_WT_PREFIX\"", "%", "+", ",", "@", "(", ")", "$(", "`", ";", "&", "|", ">",
    "\t", "=(", "+=", "$[", "${#", "${HOME:-", "\\\"", "\"'\"", "'\"'", " OCSB_WT_BASE=", "$\\\n", "\\\\",
];

fn value() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..5).prop_map(|v| v.concat())
}

fn statement() -> impl Strategy<Value = String> {
    let scalar =
        (prop::sample::select(vec!["OCSB_WT_PREFIX", "OCSB_WT_BASE", "OCSB_NAME"]), any::<bool>(), value())
            .prop_map(|(n, app, v)| format!("{n}{}{v}", if app { "+=" } else { "=" }));
    let exported = (any::<bool>(), prop::sample::select(vec!["OCSB_WT_BASE=", "OCSB_NAME+="]), value())
        .prop_map(|(tab, n, v)| format!("export{}{n}{v}", if tab { "\t" } else { " " }));
    let array = (
        prop::sample::select(vec!["OCSB_RW", "OCSB_HIDE"]),
        any::<bool>(),
        prop::collection::vec(value(), 0..4),
        prop::sample::select(vec![" ", "\n", " \\\n ", " # c\n"]),
    )
        .prop_map(|(n, app, vs, sep)| format!("{n}{}({})", if app { "+=" } else { "=" }, vs.join(sep)));
    prop_oneof![scalar, array, exported]
}

proptest! {

    /// Whenever ocsb accepts a file, bash gives every setting the same value. bash runs only
    /// files the parser accepted (assignments only) with an empty PATH and environment.
    #[test]
    fn settings_accepted_files_mean_the_same_to_bash(
        stmts in prop::collection::vec(statement(), 1..4),
        seps in prop::collection::vec(prop::sample::select(vec!["\n", " ", "\t", "  # c\n", "\n\n"]), 4),
    ) {
        let mut text = String::new();
        for (s, sep) in stmts.iter().zip(&seps) {
            text.push_str(s);
            text.push_str(sep);
        }
        let f = Fixture::new();
        let Ok(ours) = eval_raw(&f.input, &text) else { return Ok(()) };
        let bash = super::syntax::bash_values(&f, &text);
        let names = ["OCSB_WT_PREFIX", "OCSB_WT_BASE", "OCSB_NAME", "OCSB_RW", "OCSB_HIDE"];
        for name in names {
            let (i, _) = crate::settings::schema::find(name).expect("known");
            prop_assert_eq!(&ours[i], &bash[i], "{} differs for {:?}", name, text);
        }
    }
}
