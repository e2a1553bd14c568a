//! `sync` / `check`: the asset lists of the .deb and .rpm metadata in this crate's Cargo.toml,
//! rendered from packaging/files.list between `# BEGIN files.list <kind>` and `# END` markers.

use std::path::Path;

use crate::error::{Error, Result, io};
use crate::files::{self, Entry, Flag, Layout};

/// The group the set-gid shim belongs to (created by sysusers.d/ocsb.conf).
pub const SHIM_GROUP: &str = "opencode-sandbox";

/// cargo-deb: `[source, dest, mode]`; sources relative to this crate, except `target/release/`
/// which cargo-deb maps to the real target directory. The shim ships 0755 root:root: postinst
/// gives it its group and mode with dpkg-statoverride once the group exists.
pub fn deb_block(entries: &[Entry]) -> Result<String> {
    let mut out = String::from("assets = [\n");
    for e in entries {
        let dest = files::expand(&e.dest, Layout::Deb)?;
        let source = crate_relative(&e.source);
        out.push_str(&format!(
            "    [{:?}, {:?}, {:?}],\n",
            source,
            dest.trim_start_matches('/'),
            e.mode.trim_start_matches('0')
        ));
    }
    out.push_str("]\n");
    Ok(out)
}

/// cargo-generate-rpm: sources relative to the repository root (where it is run). rpm sets the
/// owner before the mode when it unpacks, and %pre has created the group, so the shim is unpacked
/// straight to 2755 root:opencode-sandbox.
pub fn rpm_block(entries: &[Entry]) -> Result<String> {
    let mut out = String::from("assets = [\n");
    for e in entries.iter().filter(|e| Flag::in_layout(e.flag, Layout::Rpm)) {
        let dest = files::expand(&e.dest, Layout::Rpm)?;
        let mut fields = vec![format!("source = {:?}", e.source), format!("dest = {dest:?}")];
        match e.flag {
            Some(Flag::SetgidShim) => {
                fields.push("mode = \"2755\"".into());
                fields.push("user = \"root\"".into());
                fields.push(format!("group = {SHIM_GROUP:?}"));
            }
            _ => fields.push(format!("mode = {:?}", e.mode.trim_start_matches('0'))),
        }
        match e.flag {
            Some(Flag::Config) => fields.push("config = \"noreplace\"".into()),
            Some(Flag::Doc) => fields.push("doc = true".into()),
            _ => {}
        }
        out.push_str(&format!("    {{ {} }},\n", fields.join(", ")));
    }
    out.push_str("]\n");
    Ok(out)
}

fn crate_relative(source: &str) -> String {
    if source.starts_with("target/release/") { source.to_string() } else { format!("../../{source}") }
}

/// Cargo.toml with both blocks replaced.
pub fn render(manifest: &str, entries: &[Entry]) -> Result<String> {
    let text = replace_block(manifest, "deb", &deb_block(entries)?)?;
    replace_block(&text, "rpm", &rpm_block(entries)?)
}

fn replace_block(text: &str, kind: &str, body: &str) -> Result<String> {
    let begin_tag = format!("# BEGIN files.list {kind} ");
    let begin =
        text.find(&begin_tag).ok_or_else(|| Error(format!("Cargo.toml: no `{begin_tag}...` marker line")))?;
    let body_start = begin + text[begin..].find('\n').map(|i| i + 1).unwrap_or(text.len() - begin);
    let end_tag = format!("# END files.list {kind}");
    let end = body_start
        + text[body_start..]
            .find(&end_tag)
            .ok_or_else(|| Error(format!("Cargo.toml: no `{end_tag}` marker line")))?;
    Ok(format!("{}{}{}", &text[..body_start], body, &text[end..]))
}

/// `sync` writes the blocks; `check` fails when they are out of date.
pub fn run(root: &Path, write: bool) -> Result<()> {
    let entries = files::read(&root.join("packaging/files.list"))?;
    let path = root.join("packaging/xtask/Cargo.toml");
    let current = std::fs::read_to_string(&path).map_err(|e| io("cannot read", &path, e))?;
    let wanted = render(&current, &entries)?;
    if current == wanted {
        println!("{}: package asset lists match packaging/files.list", path.display());
        return Ok(());
    }
    if write {
        std::fs::write(&path, wanted).map_err(|e| io("cannot write", &path, e))?;
        println!("{}: asset lists rewritten from packaging/files.list", path.display());
        Ok(())
    } else {
        Err(Error(format!(
            "{}: the .deb/.rpm asset lists differ from packaging/files.list; run `cargo run -p ocsb-xtask -- sync`",
            path.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_replaced_between_markers() {
        let entries = files::parse(
            "target/release/x @libexecdir@/ocsb/x 0755 setgid-shim\nREADME.md @docdir@/README.md 0644 doc\n",
            "t",
        )
        .unwrap();
        let manifest = "a\n# BEGIN files.list deb (gen)\nold\n# END files.list deb\nb\n# BEGIN files.list rpm (gen)\n# END files.list rpm\n";
        let out = render(manifest, &entries).unwrap();
        assert!(out.contains("[\"target/release/x\", \"usr/libexec/ocsb/x\", \"755\"]"), "{out}");
        assert!(out.contains("[\"../../README.md\", \"usr/share/doc/ocsb/README.md\", \"644\"]"), "{out}");
        assert!(out.contains("mode = \"2755\", user = \"root\", group = \"opencode-sandbox\""), "{out}");
        assert!(!out.contains("old"));
        assert_eq!(render(&out, &entries).unwrap(), out, "idempotent");
    }

    #[test]
    fn cargo_toml_is_in_sync() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        run(&root, false).unwrap();
    }
}
