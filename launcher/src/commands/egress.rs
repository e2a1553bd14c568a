//! `ocsb egress …`: the egress policy as the filter gets it, single decisions, suggestions from
//! the log, and the filter's lifecycle (`up|down|status|logs|verify|serve`).

use std::io::IsTerminal;
use std::net::IpAddr;

use ocsb_policy::egress::{Decision, Host, LogLine, Method, Policy, Target};

use ocsb_egress::{Backend, LogsOptions, UpAction};

use crate::cli::{ExplainArgs, LifecycleCommand, RenderFormat};
use crate::error::{Error, Result};
use crate::project::Project;

/// `egress render`: exactly what the filter is given for this project's layers (the same
/// function `egress up` deploys with), for the configured backend or the one `--format` names.
pub fn render(project: &Project, format: Option<RenderFormat>) -> Result<()> {
    let mut inst = crate::filter::instance(project)?;
    match format {
        Some(RenderFormat::Squid) => inst.backend = Backend::Squid,
        Some(RenderFormat::Rules) => inst.backend = Backend::Builtin,
        None => {}
    }
    print!("{}", ocsb_egress::render(&inst)?);
    Ok(())
}

/// `egress explain`: one decision, with the rule and its `file:line`.
pub fn explain(project: &Project, args: &ExplainArgs) -> Result<()> {
    let addrs = ocsb_egress::host_addresses_checked()?;
    let policy = project.egress_policy()?.with_host_addresses(addrs);
    let target = parse_target(&args.target, args.connect)?;
    let (decision, unresolved) = decide(&policy, &target, &args.resolve);
    if args.json {
        let mut v = serde_json::json!({
            "request": request_line(&target),
            "verdict": decision.verdict,
            "rule": decision.rule,
            "source": decision.source.as_ref().map(|l| l.to_string()),
        });
        if unresolved {
            v["unresolved"] = serde_json::Value::Bool(true);
        }
        println!("{v}");
    } else {
        println!("{} {decision}", decision.verdict);
        if !args.connect && target.method == Method::Connect {
            println!(
                "  judged as `{}`: what a client sends through the proxy for https://",
                request_line(&target)
            );
        }
        if unresolved {
            println!(
                "  note: no --resolve given; this holds if {} resolves only to public addresses \
                 (any private address would make it `deny private`)",
                args.target
            );
        }
    }
    Ok(())
}

/// The request the proxy sees, as `METHOD host:port`.
fn request_line(t: &Target) -> String {
    let method = match &t.method {
        Method::Connect => "CONNECT",
        Method::Other(m) => m.as_str(),
    };
    let host = match &t.host {
        Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
        h => h.to_string(),
    };
    format!("{method} {host}:{}", t.port)
}

fn parse_target(text: &str, connect: bool) -> Result<Target> {
    let parsed = if connect { Target::from_connect(text) } else { Target::for_client_url(text) };
    parsed.map_err(|e| {
        let example = if connect { "git.example.com:2222" } else { "https://example.com/" };
        Error::failed(format!("cannot parse {text:?}: {e}"), format!("give a target such as {example}"))
    })
}

/// Decide, resolving only if the policy asks for addresses. Returns whether the answer rests on
/// a name that was not resolved (no `--resolve` given).
fn decide(policy: &Policy, target: &Target, resolved: &[IpAddr]) -> (Decision, bool) {
    use ocsb_policy::egress::Step;
    match policy.evaluate(target) {
        Step::Decided(d) => (d, false),
        Step::NeedsAddresses(pending) => {
            let unresolved = resolved.is_empty();
            (pending.finish(resolved), unresolved)
        }
    }
}

/// `egress suggest`: rule lines for the denied requests in the filter's access log. Reads only.
pub fn suggest(project: &Project, json: bool) -> Result<()> {
    let inst = crate::filter::instance(project)?;
    let opts = ocsb_egress::LogsOptions { raw: true, ..Default::default() };
    let mut raw = Vec::new();
    ocsb_egress::logs(&inst, &opts, &mut raw)?;
    let lines: Vec<LogLine> = String::from_utf8_lossy(&raw).lines().filter_map(LogLine::parse).collect();
    let layers = ocsb_policy::egress::load_layers(&project.user_config_dir, &project.dir)?;
    let found = ocsb_policy::egress::suggest::suggest(&layers, &lines)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&found).unwrap_or_default());
    } else {
        print!("{}", ocsb_policy::egress::suggest::to_text(&found));
    }
    Ok(())
}

/// `egress up|down|status|logs|verify|serve`: one lifecycle command. `Serve` does not need a
/// project (its arguments say everything).
pub fn lifecycle(explicit: Option<&std::path::Path>, cmd: LifecycleCommand) -> Result<()> {
    if let LifecycleCommand::Serve { args } = &cmd {
        let code = ocsb_egress::builtin::serve::main(args);
        std::process::exit(code);
    }
    let project = Project::load(explicit)?;
    let inst = crate::filter::instance(&project)?;
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
            let opened = crate::session::Session::new(&project)?.open()?;
            let policy = project.egress_policy()?;
            let report = opened.verify(&policy, !a.no_direct)?;
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
