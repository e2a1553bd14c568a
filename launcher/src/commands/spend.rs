//! `ocsb spend [--json]`: the sums of the broker's ledger, today (UTC) and for this run.

use std::time::SystemTime;

use crate::error::Result;
use crate::project::Project;
use ocsb_broker::ledger::{self, Totals};

pub fn run(project: &Project, json: bool) -> Result<()> {
    let s = &project.settings;
    let limit = s.spend_limit();
    // Read without creating anything: a project that never ran has no state directory.
    let state = crate::state::Layout::of(s);
    let text = ledger::read(&state.ledger());
    let session = ocsb_sandbox::checkouts::read_small(&state.spend_session())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let (day, _) = ledger::utc(SystemTime::now());
    let (today, this) = ledger::totals(&text, &day, &session);
    if json {
        let v = serde_json::json!({
            "day": day,
            "today": today,
            "session": {"id": session, "totals": this},
            "limit": {"day": limit.day, "session": limit.session},
        });
        println!("{v}");
        return Ok(());
    }
    let line = |what: String, t: &Totals, limit: Option<f64>| {
        let limit = limit.map(|l| format!(" of ${l:.2} (OCSB_SPEND_LIMIT)")).unwrap_or_default();
        let unpriced =
            if t.unpriced > 0 { format!(", {} without a known price", t.unpriced) } else { String::new() };
        println!(
            "{what:<22} ${:.4}{limit} in {} requests{unpriced}; tokens in {} out {} cache read {} write {}",
            t.cost, t.requests, t.input, t.output, t.cache_read, t.cache_write
        );
    };
    line(format!("today ({day} UTC):"), &today, limit.day);
    if session.is_empty() {
        println!("this run:              no `ocsb run` has used the broker yet");
    } else {
        line(format!("this run ({session}):"), &this, limit.session);
    }
    Ok(())
}
