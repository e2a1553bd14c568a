//! The regex subset means the same to glibc's POSIX ERE (what squid's `dstdom_regex -i` uses)
//! and to the Rust `regex` crate (what `Policy::decide` uses): for generated regexes that the
//! validator accepts, `regexec(REG_EXTENDED|REG_ICASE)` and the policy agree on generated hosts.

use std::ffi::CString;

use ocsb_policy::egress::{EgressLayer, LayerText, Policy, RuleKind, Target, validate_regex};
use proptest::prelude::*;

/// glibc `regcomp`/`regexec`, as squid calls them.
struct Glibc(libc::regex_t);

impl Glibc {
    fn new(re: &str) -> Glibc {
        let c = CString::new(re).unwrap();
        // SAFETY: regex_t is plain data that regcomp initialises; zeroed is a valid start.
        let mut r: libc::regex_t = unsafe { std::mem::zeroed() };
        // SAFETY: `r` is a valid regex_t and `c` a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::regcomp(&mut r, c.as_ptr(), libc::REG_EXTENDED | libc::REG_ICASE | libc::REG_NOSUB)
        };
        assert_eq!(rc, 0, "glibc regcomp rejects `{re}`, which the validator accepted");
        Glibc(r)
    }

    fn is_match(&self, s: &str) -> bool {
        let c = CString::new(s).unwrap();
        // SAFETY: `self.0` was compiled by regcomp; REG_NOSUB means no match array is written.
        unsafe { libc::regexec(&self.0, c.as_ptr(), 0, std::ptr::null_mut(), 0) == 0 }
    }
}

impl Drop for Glibc {
    fn drop(&mut self) {
        // SAFETY: frees what regcomp allocated, once.
        unsafe { libc::regfree(&mut self.0) };
    }
}

fn regex_strategy() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(vec![
        "a",
        "b",
        "z",
        "0",
        "7",
        "-",
        "_",
        ":",
        ".",
        "\\.",
        "\\-",
        "[a-c]",
        "[^.]",
        "[0-9a-f]",
        "[-.b]",
        "[[:digit:]]",
        "[[:alpha:]]",
        "[^a-z0-9]",
        "ab",
        "x-y",
    ])
    .prop_map(String::from);
    let quantified = (leaf, prop::sample::select(vec!["", "", "", "*", "+", "?", "{2}", "{0,2}", "{1,}"]))
        .prop_map(|(a, q)| format!("{a}{q}"));
    let seq = prop::collection::vec(quantified, 1..4).prop_map(|v| v.concat());
    let seq2 = seq.clone();
    let group =
        (prop::collection::vec(seq.clone(), 1..3), prop::sample::select(vec!["", "", "*", "+", "?", "{2}"]))
            .prop_map(|(alts, q)| format!("({}){q}", alts.join("|")));
    let branch = prop::collection::vec(prop_oneof![2 => seq2, 1 => group], 1..3).prop_map(|v| v.concat());
    (any::<bool>(), prop::collection::vec(branch, 1..3), any::<bool>())
        .prop_map(|(hat, branches, dollar)| {
            let b: Vec<String> = branches
                .into_iter()
                .map(|b| format!("{}{b}{}", if hat { "^" } else { "" }, if dollar { "$" } else { "" }))
                .collect();
            b.join("|")
        })
        .prop_filter("in the subset", |r| validate_regex(r).is_ok())
}

fn host_strategy() -> impl Strategy<Value = String> {
    let label = prop::collection::vec(
        prop::sample::select(vec!['a', 'b', 'z', '0', '7', '-', '_', 'x', 'y', 'F', 'B']),
        1..5,
    )
    .prop_map(|v| v.into_iter().collect::<String>());
    prop::collection::vec(label, 1..4).prop_map(|v| v.join("."))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn egress_regex_subset_agrees_with_glibc(re in regex_strategy(), hosts in prop::collection::vec(host_strategy(), 16)) {
        let glibc = Glibc::new(&re);
        let policy = Policy::compile(&[LayerText::new(EgressLayer::Project, "p", format!("allow-regex {re}\n"))]).unwrap();
        for h in &hosts {
            let Ok(t) = Target::from_absolute_uri("GET", &format!("http://{h}/")) else { continue };
            let acl = t.host.acl_string();
            let rust = policy.decide(&t, &[]).rule == RuleKind::Allow;
            prop_assert_eq!(rust, glibc.is_match(&acl), "regex `{}` on host `{}`", re, acl);
        }
    }
}

/// Known differences between the dialects are exactly what the validator refuses.
#[test]
fn egress_regex_dialect_traps_are_refused() {
    // glibc does not read `\d` as a digit (it compiles it silently); Rust does.
    let g = Glibc::new("^\\d$");
    assert!(!g.is_match("1"));
    assert!(regex::Regex::new("^\\d$").unwrap().is_match("1"));
    assert!(validate_regex("^\\d$").is_err());
    // ERE `a+?` = `(a+)?` matches "b" (empty match); Rust lazy `a+?` needs an `a`.
    let g = Glibc::new("^a+?b$");
    assert!(g.is_match("b"));
    assert!(!regex::Regex::new("^a+?b$").unwrap().is_match("b"));
    assert!(validate_regex("^a+?b$").is_err());
    // Inside brackets ERE reads `\` literally.
    let g = Glibc::new("^[\\.]$");
    assert!(g.is_match("\\"));
    assert!(!regex::Regex::new("^[\\.]$").unwrap().is_match("\\"));
    assert!(validate_regex("^[\\.]$").is_err());
}
