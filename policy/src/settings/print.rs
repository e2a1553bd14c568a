//! `ocsb config` output: the effective settings as bash assignments that this parser (and bash)
//! reads back to the same values.

use super::schema::DefaultValue;
use super::{Settings, Value};

/// One line per setting in table order: `NAME=value` or `NAME=(a b)`; with `origins`, each line
/// ends with `  # <layer> <file>:<line>` (see [`super::Origin`]'s display).
pub fn render(settings: &Settings, origins: bool) -> String {
    let mut out = String::new();
    for (name, entry) in settings.iter() {
        out.push_str(name);
        out.push('=');
        match &entry.value {
            Value::Scalar(s) => out.push_str(&quote(s)),
            Value::Array(a) => out.push_str(&array(name, a)),
        }
        if origins {
            out.push_str("  # ");
            out.push_str(&entry.origin.to_string());
        }
        out.push('\n');
    }
    out
}

/// `(a b)` on one line, or one element per line when that line would be long.
fn array(name: &str, a: &[String]) -> String {
    let words: Vec<String> = a.iter().map(|s| quote(s)).collect();
    let one_line = format!("({})", words.join(" "));
    if name.len() + one_line.len() < 100 {
        return one_line;
    }
    let mut out = String::from("(\n");
    for w in words {
        out.push_str("  ");
        out.push_str(&w);
        out.push('\n');
    }
    out.push(')');
    out
}

/// A word that bash reads back as exactly `s`: bare when it holds only characters that are
/// never special, else single-quoted (a `'` becomes `'\''`).
pub fn quote(s: &str) -> String {
    let bare = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_./:@%+,=-".contains(c));
    if bare { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

/// A commented `sandbox.conf` for `ocsb init`: every setting, its meaning and default, as a
/// commented-out assignment. Uncommenting any line gives a file that loads.
pub fn template() -> String {
    let mut out = String::from(
        "# opencode-sandbox settings. Bash syntax, but parsed, never executed: only NAME=value,\n\
         # NAME=(a b), NAME+=(c), quotes, comments, $HOME, $OCSB_PROJECT_DIR, $OCSB_<setting> and ~/.\n\
         # Layers, later wins: package defaults, ~/.config/opencode-sandbox/sandbox.conf, this file,\n\
         # .opencode-sandbox/local/sandbox.conf (personal, git-ignored), OCSB_<NAME>=... in the\n\
         # environment (single values only). Relative paths are relative to the project.\n\
         # `ocsb config --origin` shows the effective values and where each comes from.\n",
    );
    for spec in super::SCHEMA {
        out.push_str(&format!("\n# {} (default: {})\n", spec.meaning, spec.default_doc));
        let line = match (spec.kind, &spec.default) {
            (super::Kind::Array, DefaultValue::List(l)) if !l.is_empty() => {
                format!("#{}=({})", spec.name, l.iter().map(|v| quote(v)).collect::<Vec<_>>().join(" "))
            }
            (super::Kind::Array, _) => format!("#{}{}", spec.name, example(spec.name)),
            (_, DefaultValue::Str(v)) => format!("#{}={}", spec.name, quote(v)),
            (_, DefaultValue::ProjectName) => format!("#{}=my-project", spec.name),
            (_, DefaultValue::WorktreesDir) => format!("#{}=../my-project-worktrees", spec.name),
            (_, _) => format!("#{}=~/.local/share/opencode-sandbox/my-project", spec.name),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// An example for an array setting whose default is empty or too long to show.
fn example(name: &str) -> &'static str {
    match name {
        "OCSB_ENV" => "=(\"SHOP_ENV=dev\")",
        "OCSB_LOOPBACK_PORTS" | "OCSB_FORWARD_PORTS" => "=(5432)",
        "OCSB_RW" => "=(../shared-data)",
        "OCSB_HIDE" => "=(../shop-secrets)",
        "OCSB_RW_HOME" => "+=(.local/share/my-tool)",
        "OCSB_HIDE_HOME" => "+=(.config/my-secrets)",
        "OCSB_HOME" => "=(.config/nvim .local/share/my-tool)",
        "OCSB_SKILL_DIRS" => "=(~/my-skills)",
        _ => "=()",
    }
}
