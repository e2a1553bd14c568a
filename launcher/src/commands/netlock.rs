//! `ocsb netlock setup|teardown|status|verify`: the helper asked over the system bus
//! ([`client`]), the lock checked by the probe as the locked group ([`probe`]).

use ocsb_policy::settings::{NetlockAcquire, Settings};

use crate::error::{Error, Result};
use crate::netlock::client::{self, Helper};
use crate::netlock::probe::{self, Outcome};
use crate::netlock::{not_installed, setup_hint};

/// `ocsb netlock setup`: the helper applies the lock, then it is verified.
pub fn setup(settings: &Settings) -> Result<()> {
    let helper = client::connect();
    let Helper::Present(conn) = &helper else { return Err(not_installed(&helper)) };
    let state = client::call(conn, "Apply")?;
    println!("helper: {state}");
    verify_lock(settings.netlock_group(), settings.netlock_acquire(), false)
}

/// `ocsb netlock teardown`.
pub fn teardown() -> Result<()> {
    let helper = client::connect();
    let Helper::Present(conn) = &helper else { return Err(not_installed(&helper)) };
    let state = client::call(conn, "Remove")?;
    println!(
        "helper: {state}. The daemon keeps it removed until `ocsb netlock setup` or its next start; \
         to stop it for good: sudo systemctl disable --now ocsb-netlock.service"
    );
    Ok(())
}

/// `ocsb netlock status [--json]`.
pub fn status(settings: &Settings, json: bool) -> Result<()> {
    print_status(settings.netlock_group(), settings.netlock_acquire(), json)
}

/// `ocsb netlock verify [--json]`.
pub fn verify(settings: &Settings, json: bool) -> Result<()> {
    let (group, acquire) = (settings.netlock_group(), settings.netlock_acquire());
    if json {
        print_status(group, acquire, true)?;
        match probe::run(acquire, group) {
            Ok(r) if r.outcome == Outcome::Locked => Ok(()),
            _ => Err(Error::failed("the netlock is not working", "run `ocsb netlock verify` for details")),
        }
    } else {
        verify_lock(group, acquire, true)
    }
}

/// The authoritative check: the probe as gid G, then what the helper says.
fn verify_lock(group: &str, acquire: NetlockAcquire, show_helper: bool) -> Result<()> {
    let report = probe::run(acquire, group)?;
    match &report.outcome {
        Outcome::Locked => println!(
            "ok: the netlock works: a datagram sent as group {group} (gid {}) to {} was rejected (EPERM)",
            report.gid,
            probe::TARGET
        ),
        Outcome::Open => {
            return Err(Error::failed(
                format!(
                    "the netlock is NOT working: a datagram sent as group {group} (gid {}) was not rejected; \
                     sandboxes will refuse to start",
                    report.gid
                ),
                format!(
                    "{} (the probe never leaves the machine: it is bound to `lo`)",
                    setup_hint(&client::connect())
                ),
            ));
        }
        Outcome::Error(e) => {
            return Err(Error::failed(
                format!("the netlock probe could not decide: {e}"),
                "check `ip link show lo` is up",
            ));
        }
    }
    if show_helper {
        match client::connect() {
            Helper::Present(conn) => match client::status(&conn) {
                Ok((state, _)) => println!("helper: {state}"),
                Err(e) => println!("helper: status unavailable ({e})"),
            },
            absent => println!("helper: {} (the table was installed some other way)", absent.why()),
        }
    }
    Ok(())
}

fn print_status(group: &str, acquire: NetlockAcquire, json: bool) -> Result<()> {
    let helper = client::connect();
    let (state, details) = match &helper {
        Helper::Present(conn) => client::status(conn)
            .unwrap_or_else(|e| ("unknown".into(), format!("{{\"error\":{:?}}}", e.to_string()))),
        absent => client::status_file()
            .unwrap_or_else(|| ("not installed".into(), format!("{{\"error\":{:?}}}", absent.why()))),
    };
    let probe = probe::run(acquire, group);
    let probe_text = match &probe {
        Ok(r) => match &r.outcome {
            Outcome::Locked => "locked".to_string(),
            Outcome::Open => "OPEN".to_string(),
            Outcome::Error(e) => format!("error: {e}"),
        },
        Err(e) => format!("error: {}", e.to_string().lines().next().unwrap_or_default()),
    };
    if json {
        let details: serde_json::Value = serde_json::from_str(&details).unwrap_or(serde_json::Value::Null);
        let v = serde_json::json!({ "helper": { "state": state, "details": details }, "probe": probe_text, "group": group });
        println!("{v}");
    } else {
        println!("helper: {state}");
        if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(&details) {
            for key in ["gid", "dns4", "dns6", "owner_flags", "error"] {
                if let Some(v) = m.get(key).filter(|v| !v.is_null()) {
                    println!("  {key}: {v}");
                }
            }
        }
        println!("probe as group {group}: {probe_text}");
    }
    Ok(())
}
