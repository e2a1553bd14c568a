//! `ocsb docker ls [--json]`: the project's containers and networks, made through the gateway,
//! with the session that made each.

use crate::error::Result;
use crate::project::Project;

pub fn ls(project: &Project, json: bool) -> Result<()> {
    let (containers, networks) = ocsb_docker_gw::made(project.settings.name())?;
    if json {
        let v = serde_json::json!({"containers": containers, "networks": networks});
        println!("{v}");
        return Ok(());
    }
    for (kind, list) in [("container", &containers), ("network", &networks)] {
        for m in list {
            let id: String = m.id.chars().take(12).collect();
            println!("{kind:<9} {id:<12} {:<24} {:<10} session {}", m.name, m.state, m.session);
        }
    }
    if containers.is_empty() && networks.is_empty() {
        let name = project.settings.name();
        println!(
            "no containers or networks of project {name} (label {}={name})",
            ocsb_policy::docker::PROJECT_LABEL
        );
    }
    Ok(())
}
