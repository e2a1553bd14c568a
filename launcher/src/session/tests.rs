//! The start is the same whichever command calls it: what a command adds is only what its
//! [`Command`] says, and the steps (the Docker gateway among them) are chosen by the settings.

use std::path::PathBuf;
use std::time::Duration;

use ocsb_sandbox::{Acquire, Ahead, Netlock, Network, SandboxSpec, TtyMode};

use super::start::{self, Command};
use super::{Session, docker, shell_argv};
use crate::project::Project;

/// The spec as JSON, without what the commands differ in by design: what runs and its terminal.
fn but_command(spec: &SandboxSpec) -> serde_json::Value {
    let mut spec = spec.clone();
    spec.argv.clear();
    spec.tty = TtyMode::Never;
    serde_json::to_value(&spec).unwrap()
}

/// The session's spec for `conf`, with the netlock `prepare` would have set.
fn prepared(t: &tempfile::TempDir, conf: &str) -> (Project, SandboxSpec) {
    let project = Project::in_temp(t.path(), conf);
    let mut spec = Session::new(&project).unwrap().spec;
    spec.netlock =
        Netlock::Required { gid: 4242, acquire: Acquire::Inherited, probe_interval: Duration::from_secs(5) };
    (project, spec)
}

#[test]
fn run_exec_and_shell_hand_the_sandbox_the_same_spec_for_the_same_settings_the_gateway_included() {
    for network in ["netlock", "isolated"] {
        let t = tempfile::tempdir().unwrap();
        let (project, base) = prepared(&t, &format!("OCSB_DOCKER=1\nOCSB_NETWORK={network}\n"));
        // The gateway is chosen by the settings and the session's spec, before any command.
        assert!(docker::wanted(&project, &base), "{network}");
        let gateway = Some(PathBuf::from("/state/egress/docker-1-ab.sock"));
        let env = vec![("FROM_SETTINGS".to_string(), "1".to_string())];
        let oc = project.settings.opencode_port();
        let run = start::handed(
            &base,
            &Command::server(vec!["opencode".into()], env.clone(), None, oc),
            gateway.clone(),
        );
        let exec =
            start::handed(&base, &Command::interactive(vec!["make".into()], env.clone()), gateway.clone());
        let shell = start::handed(&base, &Command::interactive(shell_argv(), env.clone()), gateway.clone());

        assert_eq!(but_command(&run), but_command(&exec), "{network}: run and exec");
        assert_eq!(but_command(&shell), but_command(&exec), "{network}: shell and exec");
        assert_eq!(exec.tty, TtyMode::Auto);
        assert_eq!(shell.tty, TtyMode::Auto);
        assert_eq!(run.tty, TtyMode::Never);
        for spec in [&run, &exec, &shell] {
            assert_eq!(spec.docker_gateway, gateway, "{network}");
            assert!(spec.env.iter().any(|(k, v)| k == "DOCKER_HOST" && v == "unix:///run/docker.sock"));
            assert!(spec.env.contains(&env[0]));
            assert_eq!(spec.env.last().map(|(k, _)| k.as_str()), Some("DOCKER_HOST"));
        }

        // A key broker: `run` reaches its port, and that is all it adds.
        let with_broker = start::handed(
            &base,
            &Command::server(vec!["opencode".into()], env.clone(), Some(7), oc),
            gateway.clone(),
        );
        let mut expected = run.clone();
        match &mut expected.network {
            Network::Host => expected.tcp.as_mut().unwrap().connect.push(7),
            Network::Isolated { forward } => forward.push(7),
        }
        assert_eq!(but_command(&with_broker), but_command(&expected), "{network}: the broker's port");
    }
}

#[test]
fn the_settings_alone_choose_the_gateway() {
    for (conf, wanted) in
        [("OCSB_DOCKER=1\n", true), ("OCSB_DOCKER=0\n", false), ("OCSB_DOCKER=1\nOCSB_SANDBOX=0\n", false)]
    {
        let t = tempfile::tempdir().unwrap();
        let (project, base) = prepared(&t, conf);
        assert_eq!(docker::wanted(&project, &base), wanted, "{conf}");
    }
}

/// Without a gateway (so without side effects), the start hands the sandbox exactly the spec
/// [`start::handed`] makes, and serves an isolated network whatever the command.
#[test]
fn a_start_hands_the_sandbox_the_spec_made_for_the_command() {
    for network in ["netlock", "isolated"] {
        let t = tempfile::tempdir().unwrap();
        let (project, base) = prepared(&t, &format!("OCSB_DOCKER=0\nOCSB_NETWORK={network}\n"));
        let policy = project.egress_policy().unwrap();
        for cmd in [
            Command::check(vec!["true".into()]),
            Command::interactive(vec!["make".into()], Vec::new()),
            Command::server(vec!["opencode".into()], Vec::new(), Some(7), project.settings.opencode_port()),
        ] {
            let launch = start::launch(&project, &policy, &base, &cmd, Ahead::default()).unwrap();
            let handed = start::handed(&base, &cmd, None);
            assert_eq!(serde_json::to_value(launch.spec()).unwrap(), serde_json::to_value(&handed).unwrap());
            assert_eq!(launch.served(), network == "isolated", "{network}");
        }
    }
}

/// `OCSB_ENV` entries replace the settings' own variables, but never the project's name, which
/// stays last; a command's environment is added as `env::build` would have added it.
#[test]
fn a_commands_environment_is_added_in_order_with_the_project_last() {
    let t = tempfile::tempdir().unwrap();
    let (_, base) = prepared(&t, "");
    let env = vec![
        ("HOME".to_string(), "/elsewhere".to_string()),
        (super::PROJECT_VAR.to_string(), "/forged".to_string()),
        ("X".to_string(), "1".to_string()),
    ];
    let spec = start::handed(&base, &Command::check(Vec::new()), None);
    let with = start::handed(&base, &Command::interactive(Vec::new(), env), None);
    let n = spec.env.len();
    assert_eq!(with.env.iter().filter(|(k, _)| k == "HOME").count(), 1);
    assert_eq!(with.env[with.env.len() - 3], ("HOME".to_string(), "/elsewhere".to_string()));
    assert_eq!(with.env[with.env.len() - 2], ("X".to_string(), "1".to_string()));
    assert_eq!(with.env.last(), spec.env.last());
    assert_eq!(spec.env.last().unwrap().0, super::PROJECT_VAR);
    assert_eq!(with.env.len(), n + 1);
}
