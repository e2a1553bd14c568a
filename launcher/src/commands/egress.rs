//! `ocsb egress render|explain`: the egress policy as squid gets it, and single decisions.

use std::net::IpAddr;

use ocsb_policy::egress::{Decision, Host, LogLine, Method, Policy, Target};

use ocsb_egress::Backend;

use crate::cli::{ExplainArgs, RenderFormat};
use crate::error::{Error, Result};
use crate::project::Project;

/// `egress render`: exactly what the filter is given for this project's layers (the same
/// function `egress up` deploys with), for the configured backend or the one `--format` names.
pub fn render(project: &Project, format: Option<RenderFormat>) -> Result<()> {
    let mut inst = crate::egress_cmd::instance(project)?;
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
    let inst = crate::egress_cmd::instance(project)?;
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
