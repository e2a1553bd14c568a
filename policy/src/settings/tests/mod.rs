//! Tests of the settings module: syntax, every error class, layers, defaults, printing, and
//! property tests. Test fixtures only; nothing here is a settings file of a real project.

mod errors;
mod layers;
mod props;
mod syntax;

use std::path::{Path, PathBuf};

use super::load::{LayerText, eval_raw, load_texts};
use super::{Layer, LoadInput, Settings, Value, schema};
use crate::{Error, Result};

/// A home and a project (`<home>/src/shop`) in a fresh temporary directory.
pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    pub input: LoadInput,
}

impl Fixture {
    pub fn new() -> Fixture {
        Self::with_project("shop")
    }

    pub fn with_project(name: &str) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let project = home.join("src").join(name);
        std::fs::create_dir_all(&project).expect("mkdir project");
        let input = LoadInput {
            user_config_dir: home.join(".config/opencode-sandbox"),
            home,
            project_dir: project,
            env: Vec::new(),
        };
        Fixture { dir, input }
    }

    pub fn home(&self) -> &Path {
        &self.input.home
    }

    pub fn project(&self) -> &Path {
        &self.input.project_dir
    }

    /// Writes a layer file (creating its directory).
    pub fn write(&self, layer: Layer, text: &str) -> PathBuf {
        let path = super::layer_files(&self.input)
            .into_iter()
            .find(|(l, _)| *l == layer)
            .map(|(_, p)| p)
            .expect("a file layer");
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write layer");
        path
    }

    pub fn load(&self) -> Result<Settings> {
        Settings::load(&self.input)
    }

    /// Loads `text` as the project layer (in memory, with the real file name).
    pub fn load_project(&self, text: &str) -> Result<Settings> {
        let t = LayerText {
            layer: Layer::Project,
            display: ".opencode-sandbox/sandbox.conf".into(),
            text: text.into(),
        };
        load_texts(&self.input, &[t])
    }

    /// The raw value of `name` after evaluating `text` on top of the defaults.
    pub fn raw(&self, text: &str, name: &str) -> Result<Value> {
        let (i, _) = schema::find(name).expect("known setting");
        Ok(eval_raw(&self.input, text)?.swap_remove(i))
    }
}

/// `(line, column, message + hint)` of an input error.
pub(super) fn where_(e: &Error) -> (u32, u32, String) {
    match e {
        Error::Input { at, message, hint } => {
            (at.line, at.column, format!("{message} | {}", hint.as_deref().unwrap_or("")))
        }
        Error::Io { .. } => panic!("expected an input error, got {e}"),
    }
}

pub(super) fn s(v: &str) -> Value {
    Value::Scalar(v.to_string())
}

pub(super) fn a(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|x| x.to_string()).collect())
}
