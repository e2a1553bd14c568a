//! The four egress rule layers. Rules add up: every layer's rules take part, in this order.

use std::path::Path;

use serde::Serialize;

use crate::{Error, Result};

/// The package layer, compiled into the binary so that an installed `ocsb` never depends on a
/// file that a user (or the agent) could have edited.
const PACKAGE_DEFAULTS: &str = include_str!("../../../egress/defaults.conf");

/// Which layer a rule came from. Its [`tag`](EgressLayer::tag) is part of the per-rule annotation
/// that squid logs (`block:project:3`), so it must stay short and free of spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EgressLayer {
    /// `egress/defaults.conf`, embedded in the binary.
    Package,
    /// `~/.config/opencode-sandbox/egress.conf`.
    User,
    /// `.opencode-sandbox/egress.conf` (committed with the project).
    Project,
    /// `.opencode-sandbox/local/egress.conf` (personal, git-ignored).
    Local,
}

impl EgressLayer {
    pub const ALL: [EgressLayer; 4] =
        [EgressLayer::Package, EgressLayer::User, EgressLayer::Project, EgressLayer::Local];

    pub fn tag(self) -> &'static str {
        match self {
            EgressLayer::Package => "package",
            EgressLayer::User => "user",
            EgressLayer::Project => "project",
            EgressLayer::Local => "local",
        }
    }

    pub fn from_tag(tag: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.tag() == tag)
    }
}

/// The text of one layer and the name under which errors and decisions refer to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerText {
    pub layer: EgressLayer,
    /// Display name used in [`crate::Location::file`].
    pub file: String,
    pub text: String,
}

impl LayerText {
    pub fn new(layer: EgressLayer, file: impl Into<String>, text: impl Into<String>) -> Self {
        Self { layer, file: file.into(), text: text.into() }
    }

    /// The package layer (`egress/defaults.conf` as embedded in this binary).
    pub fn package() -> Self {
        Self::new(EgressLayer::Package, "<built-in>/egress/defaults.conf", PACKAGE_DEFAULTS)
    }
}

/// Reads the layers in order. A missing file is simply absent (every layer is optional); a file
/// that exists but cannot be read, or is not UTF-8, is an error so that a rule never silently
/// disappears.
pub fn load_layers(user_config_dir: &Path, project_dir: &Path) -> Result<Vec<LayerText>> {
    let mut out = vec![LayerText::package()];
    let user = user_config_dir.join("egress.conf");
    let files = [
        (EgressLayer::User, user.display().to_string(), user.clone()),
        (
            EgressLayer::Project,
            ".opencode-sandbox/egress.conf".to_string(),
            project_dir.join(".opencode-sandbox/egress.conf"),
        ),
        (
            EgressLayer::Local,
            ".opencode-sandbox/local/egress.conf".to_string(),
            project_dir.join(".opencode-sandbox/local/egress.conf"),
        ),
    ];
    for (layer, name, path) in files {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::Io { path, source }),
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            let line =
                1 + e.as_bytes()[..e.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count();
            Error::input(crate::Location::new(name.clone(), line as u32, 0), "the file is not UTF-8")
                .with_hint(
                    "egress rules are plain ASCII host names, addresses and URLs; re-save the file as UTF-8",
                )
        })?;
        out.push(LayerText::new(layer, name, text));
    }
    Ok(out)
}
