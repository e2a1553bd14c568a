//! The project's egress filter, as the launcher starts it: settings → [`ocsb_egress::Instance`],
//! the filter program, and the system's curl the expectations are checked with. All filter
//! logic lives in the `ocsb-egress` crate; `ocsb egress …` prints through `commands::egress`.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ocsb_egress::squid::ImageSource;
use ocsb_egress::{Backend, GatewaySetting, Instance, SquidOverrides};
use ocsb_policy::settings::EgressBackend;

use crate::error::{Error, Result};
use crate::install::Installation;
use crate::project::Project;

/// The filter instance of this project, from the settings.
pub fn instance(project: &Project) -> Result<Instance> {
    let s = &project.settings;
    let exe = Installation::current()?.exe;
    Ok(Instance {
        name: s.name().to_string(),
        backend: match s.egress_backend() {
            EgressBackend::Builtin => Backend::Builtin,
            EgressBackend::Squid => Backend::Squid,
        },
        state_dir: s.state_dir(),
        user_config_dir: project.user_config_dir.clone(),
        project_dir: project.dir.clone(),
        port: s.egress_port(),
        docker_gw: match s.docker_gw() {
            Some(ip) => GatewaySetting::Address(ip),
            None => GatewaySetting::Detect,
        },
        serve_command: serve_command(&exe),
        image_source: ImageSource::Auto,
        squid_overrides: SquidOverrides::default(),
    })
}

/// How the builtin filter is started. It is a program of its own, `ocsb-egress serve`: `make`
/// links it statically, and it then keeps a sixth of squid's memory resident where the whole
/// launcher keeps a third (the code the kernel maps in is the filter's alone). It is looked for
/// where `make install` puts it, beside the netlock shim in `<prefix>/libexec/ocsb/`, then next
/// to `ocsb` (a cargo build). It runs outside the sandbox with the user's rights, so it is
/// trusted as `ocsb` is: it must be a file of the same owner that nobody else may write. Without
/// one, `ocsb egress serve` runs the same filter from this binary.
pub fn serve_command(exe: &Path) -> Vec<OsString> {
    let install = Installation { exe: exe.to_path_buf() };
    let owner = exe.metadata().map(|m| m.uid()).ok();
    let trusted = |p: &PathBuf| {
        p.metadata().is_ok_and(|m| m.is_file() && Some(m.uid()) == owner && m.mode() & 0o022 == 0)
    };
    match [install.filter(), install.bin().join("ocsb-egress")].into_iter().find(trusted) {
        Some(filter) => vec![filter.into(), "serve".into()],
        None => vec![exe.into(), "egress".into(), "serve".into()],
    }
}

/// The curl the expectations are checked with, on the host (`egress verify`) and in the sandbox
/// (the self-tests): the system's, never one from `PATH`, where a directory the agent can write
/// (a shared toolchain cache) may come first and its `curl` would run with the user's rights.
pub fn system_curl() -> Result<std::path::PathBuf> {
    ocsb_egress::verify::system_curl().ok_or_else(|| {
        Error::failed(
            "no curl owned by root in /usr/bin, /bin, /usr/local/bin or the NixOS system profile",
            "install curl (sudo apt-get install curl); a curl found in PATH could be one the agent planted",
        )
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn file(path: &Path, mode: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_filter_program_is_the_installed_one_then_the_one_beside_ocsb_then_ocsb_itself() {
        let t = tempfile::tempdir().unwrap();
        let (exe, installed, beside) = (
            t.path().join("bin/ocsb"),
            t.path().join("libexec/ocsb/ocsb-egress"),
            t.path().join("bin/ocsb-egress"),
        );
        file(&exe, 0o755);
        let serve = |p: &Path| vec![p.as_os_str().to_owned(), "serve".into()];
        assert_eq!(serve_command(&exe), [exe.as_os_str(), "egress".as_ref(), "serve".as_ref()]);
        file(&beside, 0o755);
        assert_eq!(serve_command(&exe), serve(&beside));
        file(&installed, 0o755);
        assert_eq!(serve_command(&exe), serve(&installed));
        // A program someone else may write is no more trusted than a file the agent planted.
        for mode in [0o775, 0o757] {
            std::fs::set_permissions(&installed, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(serve_command(&exe), serve(&beside), "mode {mode:o}");
        }
        std::fs::remove_file(&installed).unwrap();
        std::fs::create_dir(&installed).unwrap();
        assert_eq!(serve_command(&exe), serve(&beside), "a directory is not a program");
    }

    /// Root can give the file to another owner: then it is not the launcher's.
    #[cfg(feature = "host-tests")]
    #[test]
    fn a_filter_program_of_another_owner_is_not_run() {
        let t = tempfile::tempdir().unwrap();
        let (exe, beside) = (t.path().join("bin/ocsb"), t.path().join("bin/ocsb-egress"));
        file(&exe, 0o755);
        file(&beside, 0o755);
        assert_eq!(serve_command(&exe)[0], beside.as_os_str());
        nix::unistd::chown(&beside, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        assert_eq!(serve_command(&exe)[0], exe.as_os_str());
    }
}
