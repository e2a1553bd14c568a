//! One thin handler per subcommand: load the project when the command needs one, call the module
//! that does the work, print its result. The work itself never lives here.

pub mod config;
pub mod docker;
pub mod egress;
pub mod init;
pub mod inside;
pub mod netlock;
pub mod password;
pub mod sandbox;
pub mod spend;

use clap::CommandFactory;

use crate::cli::{Cli, Command, DockerCommand, EgressCommand, NetlockCommand, SandboxCommand, WtCommand};
use crate::error::Result;
use crate::project::{self, Project};
use crate::session::{self, Session};
use crate::{doctor, opencode, run, web, worktree};

pub fn dispatch(cli: Cli) -> Result<()> {
    let explicit = cli.project.as_deref();
    let project = || Project::load(explicit);
    inside::refuse(&cli.command)?;
    match cli.command {
        Command::Init => {
            let start = project::locate(explicit)?;
            let outcomes = init::run(&start)?;
            init::report(&outcomes, &project::git_toplevel(&start).unwrap_or(start));
            Ok(())
        }
        Command::Config(args) => config::run(&project()?, args.origin, args.trust),
        Command::Egress(EgressCommand::Render(args)) => egress::render(&project()?, args.format),
        Command::Egress(EgressCommand::Explain(args)) => egress::explain(&project()?, &args),
        Command::Egress(EgressCommand::Suggest(a)) => egress::suggest(&project()?, a.json),
        Command::Egress(EgressCommand::Lifecycle(cmd)) => egress::lifecycle(explicit, cmd),
        Command::Wt(WtCommand::Add { branch, args }) => worktree::add(explicit, &branch, &args),
        Command::Wt(WtCommand::Rm { name, force }) => worktree::rm(explicit, &name, force),
        Command::Wt(WtCommand::List) => worktree::list(explicit),
        Command::Netlock(cmd) => {
            let settings = project()?.settings;
            match cmd {
                NetlockCommand::Setup => netlock::setup(&settings),
                NetlockCommand::Teardown => netlock::teardown(),
                NetlockCommand::Status { json } => netlock::status(&settings, json),
                NetlockCommand::Verify { json } => netlock::verify(&settings, json),
            }
        }
        Command::Doctor(args) => doctor::run(explicit, args.json),
        Command::Password => password::run(&project()?),
        Command::Prepare(args) => Session::new(&project()?)?.prepare(args.retest).map(drop),
        Command::Run(args) => run::run(&project()?, &args.opencode_args, args.no_browser),
        Command::Exec(args) => std::process::exit(sandbox::exec(&project()?, args.command)?),
        Command::Shell => std::process::exit(sandbox::shell(&project()?)?),
        Command::Sandbox(SandboxCommand::Status) => sandbox::status(),
        Command::Docker(DockerCommand::Ls(a)) => docker::ls(&project()?, a.json),
        Command::Spend(a) => spend::run(&project()?, a.json),
        Command::Audit(args) => sandbox::audit(&project()?, args.accept),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ocsb", &mut std::io::stdout());
            Ok(())
        }
        Command::SandboxRun { spec, command } => std::process::exit(session::replay::main(&spec, command)),
        Command::NetlockProbe => std::process::exit(crate::netlock::probe::main().into()),
        Command::IsolatedProbe => std::process::exit(match ocsb_sandbox::netns::probe() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        }),
        Command::DockerWatch { pid, dir } => {
            Ok(ocsb_docker_gw::watch(pid, &crate::state::Layout::of_egress(&dir).docker())?)
        }
        Command::OpencodeConfig { dir } => {
            println!("{}", opencode::config_for_tests(&dir)?);
            Ok(())
        }
        Command::WebFront(a) => {
            web::serve_alone(a.listen, a.upstream, &a.password_file, &a.upstream_password_file, !a.no_panel)
        }
    }
}
