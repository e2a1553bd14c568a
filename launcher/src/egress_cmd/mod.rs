//! `ocsb egress up|down|status|logs|verify|serve`: glue from the settings to the
//! `ocsb-egress` lifecycle. All filter logic lives in that crate; this module only maps settings
//! to an [`ocsb_egress::Instance`], prints results, and maps errors to exit codes.

use std::io::IsTerminal;

use ocsb_egress::squid::ImageSource;
use ocsb_egress::{Backend, GatewaySetting, Instance, LogsOptions, SquidOverrides, UpAction};
use ocsb_policy::settings::EgressBackend;

use crate::cli::LifecycleCommand;
use crate::error::{Error, Result};
use crate::project::Project;

/// The filter instance of this project, from the settings.
pub fn instance(project: &Project) -> Result<Instance> {
    let s = &project.settings;
    let exe = std::env::current_exe().map_err(|e| Error::io("find the path of", "ocsb", e))?;
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
        serve_command: vec![exe.into(), "egress".into(), "serve".into()],
        image_source: ImageSource::Auto,
        squid_overrides: SquidOverrides::default(),
    })
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

/// Run one lifecycle command. `Serve` does not need a project (its arguments say everything).
pub fn run(explicit: Option<&std::path::Path>, cmd: LifecycleCommand) -> Result<()> {
    if let LifecycleCommand::Serve { args } = &cmd {
        let code = ocsb_egress::builtin::serve::main(args);
        std::process::exit(code);
    }
    let project = Project::load(explicit)?;
    let inst = instance(&project)?;
    match cmd {
        LifecycleCommand::Up => {
            let policy = project.egress_policy()?;
            let r = ocsb_egress::up(&inst, &policy, ocsb_egress::lifecycle::stderr_progress())?;
            let verb = match r.action {
                UpAction::Started => "started",
                UpAction::Reloaded => "reloaded (no restart)",
                UpAction::Current => "running, rules current",
            };
            println!("egress filter ({}) {verb}: {}", r.backend.as_str(), r.listen.join(" "));
            println!("  {}", r.listen_note);
            Ok(())
        }
        LifecycleCommand::Down => {
            let was = ocsb_egress::down(&inst)?;
            println!("{}", if was { "egress filter stopped" } else { "egress filter was not running" });
            Ok(())
        }
        LifecycleCommand::Status(a) => {
            let st = ocsb_egress::status(&inst)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&st).unwrap_or_default());
            } else {
                println!("running:  {}", if st.running { "yes" } else { "no" });
                println!("backend:  {}", st.backend.as_str());
                println!("listen:   {}", st.listen.join(" "));
                println!("          {}", st.listen_note);
                if let Some(p) = &st.process {
                    println!(
                        "process:  {p}{}",
                        st.health.as_deref().map(|h| format!(" ({h})")).unwrap_or_default()
                    );
                }
                let cfg = match st.config.as_str() {
                    "stale" => "stale: the rules changed since the filter loaded them; run `ocsb egress up`",
                    "current" => "current",
                    _ => "unknown",
                };
                println!("rules:    {cfg}");
                if let Some(e) = &st.rules_error {
                    println!("rules error (the running filter keeps its old rules):\n  {e}");
                }
            }
            Ok(())
        }
        LifecycleCommand::Logs(a) => {
            let opts = LogsOptions {
                follow: !a.no_follow,
                json: a.json,
                color: std::io::stdout().is_terminal(),
                tail: a.tail,
                raw: false,
            };
            ocsb_egress::logs(&inst, &opts, &mut std::io::stdout().lock()).map_err(Error::from)
        }
        LifecycleCommand::Verify(a) => {
            // curl runs as the agent's commands do: in the sandbox, under the netlock.
            let (sd, _) = crate::run::prepare::open_state(&project)?;
            let policy = project.egress_policy()?;
            let lock = crate::sandbox_spec::netlock_for(&project.settings)?;
            let curl = system_curl()?;
            let report =
                crate::run::prepare::verify_as_sandbox(&project, &sd, &policy, &lock, &curl, !a.no_direct)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            } else {
                for c in &report.checks {
                    let mark = if c.ok { "ok  " } else { "FAIL" };
                    let at = c.at.as_deref().map(|a| format!(" ({a})")).unwrap_or_default();
                    println!("{mark} {} {}{at}: {}", c.kind, c.url, c.observed);
                    if let Some(w) = &c.why {
                        println!("     {w}");
                    }
                }
            }
            report.into_result().map(|_| ()).map_err(Error::from)
        }
        LifecycleCommand::Serve { .. } => unreachable!("handled above"),
    }
}
