//! Evaluating the layers: defaults, then each file's assignments in order, then the environment;
//! then the derived defaults, validation and path resolution.

use std::path::{Path, PathBuf};

use super::lexer::{Part, Word};
use super::parser::{self, Assignment, Rhs};
use super::schema::{self, DefaultValue, Kind, Paths, SCHEMA, Spec};
use super::{
    ENV_INTERNAL_PREFIXES, ENV_NOT_SETTINGS, Entry, Layer, LoadInput, Origin, Settings, Value, layer_files,
};
use crate::{Error, Location, Result};

const DEFAULTS_FILE: &str = "<package defaults>";

struct Slot {
    value: Value,
    origin: Origin,
    /// Where the value (scalar) or each element (array) was written, for validation errors.
    value_at: Vec<Location>,
    /// Set by a layer above the defaults.
    explicit: bool,
}

struct State {
    home: String,
    project: String,
    slots: Vec<Slot>,
}

/// A file layer's text and the name used for it in messages.
pub(super) struct LayerText {
    pub layer: Layer,
    pub display: String,
    pub text: String,
}

pub(super) fn load(input: &LoadInput) -> Result<Settings> {
    load_texts(input, &read_layers(input)?)
}

/// The file layers that exist, read and decoded, in order.
pub(super) fn read_layers(input: &LoadInput) -> Result<Vec<LayerText>> {
    let mut texts = Vec::new();
    for (layer, path) in layer_files(input) {
        let Some(bytes) = read(&path)? else { continue };
        let display = display_path(&path, &input.project_dir, &input.home);
        let text = utf8(bytes, &display)?;
        texts.push(LayerText { layer, display, text });
    }
    Ok(texts)
}

/// Everything after reading the files: parse and apply each layer in order, then the
/// environment, then derive, validate and resolve.
pub(super) fn load_texts(input: &LoadInput, texts: &[LayerText]) -> Result<Settings> {
    let mut st = State::new(input)?;
    for t in texts {
        for a in parser::parse(&t.text, &t.display)? {
            st.assign(t.layer, a)?;
        }
    }
    st.environment(&input.env)?;
    st.finish(input)
}

/// Parses and applies `text` as one layer on top of the defaults, without validation or path
/// resolution: the raw values as the bash subset evaluates them (for the syntax tests).
#[cfg(test)]
pub(super) fn eval_raw(input: &LoadInput, text: &str) -> Result<Vec<Value>> {
    let mut st = State::new(input)?;
    for a in parser::parse(text, "t.conf")? {
        st.assign(Layer::Project, a)?;
    }
    Ok(st.slots.into_iter().map(|s| s.value).collect())
}

/// A layer file's bytes, or `None` if it does not exist.
fn read(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            Ok(None)
        }
        Err(source) => Err(Error::Io { path: path.to_path_buf(), source }),
    }
}

fn utf8(bytes: Vec<u8>, file: &str) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
        let col =
            String::from_utf8_lossy(valid.rsplit(|b| *b == b'\n').next().unwrap_or_default()).chars().count()
                + 1;
        Error::input(Location::new(file, line as u32, col as u32), "the file is not valid UTF-8")
            .with_hint("save the file as UTF-8")
    })
}

/// How a file is named in messages: relative to the project, `~/…` under HOME, else absolute.
fn display_path(path: &Path, project: &Path, home: &Path) -> String {
    if let Ok(rel) = path.strip_prefix(project) {
        rel.display().to_string()
    } else if let Ok(rel) = path.strip_prefix(home) {
        format!("~/{}", rel.display())
    } else {
        path.display().to_string()
    }
}

fn path_str(p: &Path, what: &str) -> Result<String> {
    match p.to_str() {
        Some(s) if p.is_absolute() => Ok(s.to_string()),
        _ => Err(Error::input(
            Location::new(p.display().to_string(), 0, 0),
            format!("the {what} must be an absolute UTF-8 path"),
        )),
    }
}

fn defaults_at() -> Location {
    Location::new(DEFAULTS_FILE, 0, 0)
}

impl State {
    fn new(input: &LoadInput) -> Result<State> {
        let home = path_str(&input.home, "home directory")?;
        let project = path_str(&input.project_dir, "project directory")?;
        let dir_name = input.project_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parent = input.project_dir.parent().unwrap_or(Path::new("/"));
        let slots = SCHEMA
            .iter()
            .map(|s| {
                let value = match s.default {
                    DefaultValue::Str(v) => Value::Scalar(v.to_string()),
                    DefaultValue::List(l) => Value::Array(l.iter().map(|v| v.to_string()).collect()),
                    DefaultValue::Documented(l) => {
                        Value::Array(l.iter().map(|(v, _)| v.to_string()).collect())
                    }
                    DefaultValue::ProjectName => Value::Scalar(schema::sanitize_name(dir_name)),
                    DefaultValue::WorktreesDir => Value::Scalar(
                        parent.join(format!("{dir_name}-worktrees")).to_string_lossy().into_owned(),
                    ),
                    // Computed in `finish`, once OCSB_NAME is final.
                    DefaultValue::StateDir => Value::Scalar(String::new()),
                };
                let n = match &value {
                    Value::Scalar(_) => 1,
                    Value::Array(a) => a.len(),
                };
                Slot {
                    value,
                    origin: Origin { layer: Layer::Defaults, at: defaults_at() },
                    value_at: vec![defaults_at(); n],
                    explicit: false,
                }
            })
            .collect();
        Ok(State { home, project, slots })
    }

    /// Applies one assignment of a file layer.
    fn assign(&mut self, layer: Layer, a: Assignment) -> Result<()> {
        let (i, spec) = lookup(&a.name, &a.at)?;
        let value_at;
        let value = match (spec.kind, a.rhs, a.append) {
            (Kind::Scalar, Rhs::Scalar(w), append) => {
                if append {
                    // `+=` reads the old value like `$NAME` does (and fails the same way).
                    self.var(spec.name, &a.at)?;
                }
                value_at = vec![w.at.clone()];
                let v = self.expand(&w, false)?.unwrap_or_default();
                match (&self.slots[i].value, append) {
                    (Value::Scalar(old), true) => Value::Scalar(format!("{old}{v}")),
                    _ => Value::Scalar(v),
                }
            }
            (Kind::Scalar, Rhs::Array(_, open), _) => {
                return Err(Error::input(open, format!("{} is a single value, not an array", spec.name))
                    .with_hint(format!("write {}=value", spec.name)));
            }
            (Kind::Array, Rhs::Array(words, _), append) => {
                let mut elems = Vec::new();
                let mut at = Vec::new();
                for w in &words {
                    if let Some(v) = self.expand(w, true)? {
                        elems.push(v);
                        at.push(w.at.clone());
                    }
                }
                match (&self.slots[i].value, append) {
                    (Value::Array(old), true) => {
                        let mut all = old.clone();
                        all.extend(elems);
                        let mut all_at = self.slots[i].value_at.clone();
                        all_at.extend(at);
                        value_at = all_at;
                        Value::Array(all)
                    }
                    _ => {
                        value_at = at;
                        Value::Array(elems)
                    }
                }
            }
            (Kind::Array, Rhs::Scalar(w), append) => {
                let (op, bash) = if append {
                    ("+=", "append to its first element")
                } else {
                    ("=", "replace only its first element")
                };
                return Err(Error::input(
                    a.at,
                    format!("{} is an array; `{}{op}value` would {bash} in bash", spec.name, spec.name),
                )
                .with_hint(format!(
                    "write {}{op}({})",
                    spec.name,
                    w.plain_text().filter(|t| !t.is_empty()).unwrap_or("value".into())
                )));
            }
        };
        self.slots[i] = Slot { value, origin: Origin { layer, at: a.at }, value_at, explicit: true };
        Ok(())
    }

    /// A word's value; `None` for an array element that bash would drop (unquoted, expands to
    /// nothing).
    fn expand(&self, w: &Word, element: bool) -> Result<Option<String>> {
        let mut out = String::new();
        for p in &w.parts {
            match p {
                Part::Lit { text, .. } => out.push_str(text),
                Part::Home => out.push_str(&self.home),
                Part::Var { name, at, quoted } => {
                    let v = self.var(name, at)?;
                    if element && !quoted {
                        if v.contains([' ', '\t', '\n']) {
                            return Err(Error::input(
                                at.clone(),
                                format!("${name} holds blanks and is not quoted: bash would split it into several elements"),
                            )
                            .with_hint(format!("quote it: \"${name}\"")));
                        }
                        if v.contains(['*', '?', '[']) {
                            return Err(Error::input(
                                at.clone(),
                                format!("${name} holds glob characters and is not quoted: bash would expand it as a file name pattern"),
                            )
                            .with_hint(format!("quote it: \"${name}\"")));
                        }
                    }
                    out.push_str(v);
                }
            }
        }
        Ok((!(element && !w.any_quoted && out.is_empty())).then_some(out))
    }

    fn var<'a>(&'a self, name: &str, at: &Location) -> Result<&'a str> {
        match name {
            "HOME" => return Ok(&self.home),
            "OCSB_PROJECT_DIR" => return Ok(&self.project),
            _ => {}
        }
        let Some((i, spec)) = schema::find(name) else {
            let hint = if name.starts_with("OCSB_") {
                format!("there is no setting {name}; did you mean {}?", schema::closest(name))
            } else {
                "only $HOME, $OCSB_PROJECT_DIR and OCSB_ settings can be used; settings files are not run by a shell"
                    .to_string()
            };
            return Err(Error::input(at.clone(), format!("${name} is not set")).with_hint(hint));
        };
        let slot = &self.slots[i];
        match &slot.value {
            Value::Array(_) => {
                Err(Error::input(at.clone(), format!("${name} is an array and cannot be expanded"))
                    .with_hint(format!("add elements with {name}+=(…)")))
            }
            _ if matches!(spec.default, DefaultValue::StateDir) && !slot.explicit => Err(Error::input(
                at.clone(),
                format!("${name} is not set yet: its default is computed from OCSB_NAME after all layers"),
            )
            .with_hint(format!("set {name} before using it, or write the path"))),
            Value::Scalar(s) => Ok(s),
        }
    }

    /// The environment layer: `OCSB_<NAME>` for scalar settings.
    fn environment(&mut self, env: &[(String, String)]) -> Result<()> {
        for (k, v) in env {
            if !k.starts_with("OCSB_")
                || ENV_NOT_SETTINGS.contains(&k.as_str())
                || ENV_INTERNAL_PREFIXES.iter().any(|p| k.starts_with(p))
            {
                continue;
            }
            let at = Location::new(format!("environment variable {k}"), 0, 0);
            let (i, spec) = lookup(k, &at)?;
            if spec.kind == Kind::Array {
                return Err(Error::input(
                    at,
                    format!("{k} is an array setting; the environment can set only single values"),
                )
                .with_hint(format!(
                    "unset {k}, and set it in .opencode-sandbox/local/sandbox.conf: {k}=(…)"
                )));
            }
            self.slots[i] = Slot {
                value: Value::Scalar(v.clone()),
                origin: Origin { layer: Layer::Environment, at: at.clone() },
                value_at: vec![at],
                explicit: true,
            };
        }
        Ok(())
    }

    /// Derived defaults, validation, cross-checks, path resolution.
    fn finish(mut self, input: &LoadInput) -> Result<Settings> {
        #[allow(clippy::expect_used, reason = "names of the schema table, which a unit test lists")]
        let (name_i, _) = schema::find("OCSB_NAME").expect("in the table");
        #[allow(clippy::expect_used, reason = "names of the schema table, which a unit test lists")]
        let (state_i, _) = schema::find("OCSB_STATE_DIR").expect("in the table");
        if !self.slots[state_i].explicit {
            let name = match &self.slots[name_i].value {
                Value::Scalar(n) => n.clone(),
                Value::Array(_) => String::new(),
            };
            let dir = input.home.join(".local/share/opencode-sandbox").join(name);
            self.slots[state_i].value = Value::Scalar(dir.to_string_lossy().into_owned());
        }
        for (spec, slot) in SCHEMA.iter().zip(&self.slots) {
            let values = match &slot.value {
                Value::Scalar(v) => std::slice::from_ref(v),
                Value::Array(a) => a.as_slice(),
            };
            for (v, at) in values.iter().zip(&slot.value_at) {
                schema::check(spec, v, at).map_err(|e| match slot.origin.layer {
                    // A computed default that does not fit (e.g. the project directory's name).
                    Layer::Defaults => e.with_hint(format!(
                        "the default does not fit here; set {} in .opencode-sandbox/sandbox.conf",
                        spec.name
                    )),
                    _ => e,
                })?;
            }
        }
        self.cross_check()?;
        for (spec, slot) in SCHEMA.iter().zip(self.slots.iter_mut()) {
            resolve_slot(spec, slot, &input.project_dir, &input.home)?;
        }
        let entries = self.slots.into_iter().map(|s| Entry { value: s.value, origin: s.origin }).collect();
        Ok(Settings {
            entries,
            project_dir: input.project_dir.clone(),
            home: input.home.clone(),
            user_config_dir: input.user_config_dir.clone(),
        })
    }

    fn cross_check(&self) -> Result<()> {
        let port = |name| {
            #[allow(clippy::expect_used, reason = "names of the schema table, which a unit test lists")]
            let (i, _) = schema::find(name).expect("in the table");
            let s = &self.slots[i];
            match &s.value {
                Value::Scalar(v) => (schema::port_of(v).unwrap_or(0), s),
                Value::Array(_) => (0, s),
            }
        };
        let (web, web_slot) = port("OCSB_WEB_PORT");
        let (egress, egress_slot) = port("OCSB_EGRESS_PORT");
        if egress == web || egress == web + 1 {
            let what = if egress == web { "the web UI port" } else { "OpenCode's port (OCSB_WEB_PORT + 1)" };
            return Err(Error::input(
                egress_slot.value_at[0].clone(),
                format!(
                    "OCSB_EGRESS_PORT {egress} is {what}; OCSB_WEB_PORT {web} is set at {}",
                    web_slot.origin
                ),
            )
            .with_hint("choose different ports, e.g. OCSB_WEB_PORT=4196 and OCSB_EGRESS_PORT=3128"));
        }
        Ok(())
    }
}

fn lookup(name: &str, at: &Location) -> Result<(usize, &'static Spec)> {
    if let Some(found) = schema::find(name) {
        return Ok(found);
    }
    if name == "OCSB_PROJECT_DIR" {
        return Err(Error::input(
            at.clone(),
            "OCSB_PROJECT_DIR is set by ocsb (the project's directory) and cannot be assigned",
        )
        .with_hint("use $OCSB_PROJECT_DIR in values; relative paths are already relative to the project"));
    }
    if !name.starts_with("OCSB_") {
        return Err(Error::input(at.clone(), format!("`{name}` is not a setting: only OCSB_ settings may be set"))
            .with_hint("settings files hold no helper variables (they are parsed, not run by a shell); write the value directly, $HOME and $OCSB_PROJECT_DIR can be used"));
    }
    Err(Error::input(at.clone(), format!("unknown setting {name}"))
        .with_hint(format!("did you mean {}? `ocsb config` lists every setting", schema::closest(name))))
}

/// Resolves the path settings in place and refuses writable paths that would open the whole
/// home directory or the whole system.
fn resolve_slot(spec: &Spec, slot: &mut Slot, project: &Path, home: &Path) -> Result<()> {
    let applies = |v: &str| match spec.paths {
        Paths::Project => !v.is_empty(),
        Paths::Command => v.contains('/'),
        Paths::No | Paths::Home => false,
    };
    let writable = matches!(spec.name, "OCSB_RW" | "OCSB_STATE_DIR" | "OCSB_WORKTREES_DIR");
    let values: Vec<&mut String> = match &mut slot.value {
        Value::Scalar(s) => vec![s],
        Value::Array(a) => a.iter_mut().collect(),
    };
    for (v, at) in values.into_iter().zip(&slot.value_at) {
        if !applies(v) {
            continue;
        }
        let p = resolve(v, project, home);
        if writable {
            let lexical = lexical(&p);
            let whole = if lexical == Path::new("/") {
                Some("the whole system")
            } else if home.starts_with(&lexical) || home.starts_with(&p) {
                Some("your whole home directory")
            } else {
                None
            };
            if let Some(whole) = whole {
                return Err(Error::input(
                    at.clone(),
                    format!("{}: `{}` would make {whole} writable", spec.name, p.display()),
                )
                .with_hint("name the directories the agent needs"));
            }
        }
        *v = p.to_string_lossy().into_owned();
    }
    Ok(())
}

/// `~` and `~/…` under HOME, absolute as is, relative against the project; `.` components and
/// repeated slashes removed. `..` is kept: removing it lexically could name a different file
/// than the kernel would when a component is a symlink.
pub(crate) fn resolve(v: &str, project: &Path, home: &Path) -> PathBuf {
    let p = if v == "~" {
        home.to_path_buf()
    } else if let Some(rest) = v.strip_prefix("~/") {
        home.join(rest)
    } else if v.starts_with('/') {
        PathBuf::from(v)
    } else {
        project.join(v)
    };
    p.components().collect()
}

/// `p` with `..` removed lexically: only for the "whole home writable" check, which must not be
/// fooled by `~/..`.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}
