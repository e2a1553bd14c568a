//! The spend ledger: one JSON line per model request in `<state>/spend/ledger.jsonl` (a
//! directory the sandbox cannot see), the running totals the cap is checked against, and the
//! sums `ocsb spend` prints. Days are UTC days.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use ocsb_policy::settings::SpendLimit;
use serde::{Deserialize, Serialize};

use super::usage::Usage;
use crate::Files;
use crate::error::Result;
use ocsb_sandbox::statefs::StateDir;

/// One model request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `YYYY-MM-DDTHH:MM:SSZ` when the request arrived.
    pub time: String,
    pub session: String,
    pub provider: String,
    pub model: String,
    #[serde(flatten)]
    pub usage: Usage,
    /// USD; `null` when the model has no known price.
    pub cost: Option<f64>,
    pub duration_ms: u64,
    /// The provider's HTTP status (or the broker's own, for a request it refused).
    pub status: u16,
}

/// Sums over some entries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub cost: f64,
    pub requests: u64,
    /// Requests whose model had no price (their cost is not in `cost`).
    pub unpriced: u64,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Totals {
    fn add(&mut self, e: &Entry) {
        self.requests += 1;
        match e.cost {
            Some(c) if c.is_finite() && c >= 0.0 => self.cost += c,
            _ => self.unpriced += 1,
        }
        self.input += e.usage.input;
        self.output += e.usage.output;
        self.cache_read += e.usage.cache_read;
        self.cache_write += e.usage.cache_write;
    }
}

/// The UTC date of `t` as `YYYY-MM-DD`, and the time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc(t: SystemTime) -> (String, String) {
    let time = ocsb_policy::clock::utc(t);
    (time.get(..10).unwrap_or_default().to_string(), time)
}

/// Today's and one session's totals of a ledger's text (lines that do not parse are skipped:
/// the file is the launcher's own, and a torn last line must not hide the rest).
pub fn totals(text: &str, day: &str, session: &str) -> (Totals, Totals) {
    let (mut today, mut this) = (Totals::default(), Totals::default());
    for e in text.lines().filter_map(|l| serde_json::from_str::<Entry>(l).ok()) {
        if e.time.starts_with(day) {
            today.add(&e);
        }
        if e.session == session {
            this.add(&e);
        }
    }
    (today, this)
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// `per day` or `per run`.
    pub which: &'static str,
    pub spent: f64,
    /// What the calls under way may still cost.
    pub reserved: f64,
    pub limit: f64,
}

impl Refusal {
    /// `set_at`: where OCSB_SPEND_LIMIT is set (`project .opencode-sandbox/sandbox.conf:3`).
    pub fn message(&self, set_at: &str) -> String {
        format!(
            "ocsb: the spend limit of ${:.2} {} (OCSB_SPEND_LIMIT) is reached: ${:.4} spent{}. \
             Model requests are refused until {}; to raise the limit, change OCSB_SPEND_LIMIT ({}) and start `ocsb run` again.",
            self.limit,
            self.which,
            self.spent,
            if self.reserved > 0.0 {
                format!(" and up to ${:.4} for calls under way", self.reserved)
            } else {
                String::new()
            },
            if self.which == "per day" { "the next UTC day" } else { "the next `ocsb run`" },
            set_at
        )
    }
}

/// What the Tokens panel shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct View {
    pub today: f64,
    pub session: f64,
    pub limit_day: Option<f64>,
    pub limit_session: Option<f64>,
    pub refused: u64,
}

#[derive(Debug, Default)]
struct Spent {
    day: String,
    today: f64,
    session: f64,
    refused: u64,
    /// What the calls under way may still cost (their reservations).
    in_flight: f64,
    open: std::collections::HashMap<u64, (Entry, f64)>,
    next: u64,
}

/// Refusals beyond this many per run are counted, not written: the agent can send refused
/// calls as fast as it likes, and the ledger must not grow with them.
const MAX_REFUSAL_LINES: u64 = 100;

/// The ledger of one `ocsb run`.
#[derive(Debug)]
pub struct Ledger {
    file: Mutex<File>,
    session: String,
    limit: SpendLimit,
    spent: Mutex<Spent>,
}

/// Reads the ledger at `path` whole, without following a final symlink or blocking on a FIFO
/// (the sandbox cannot see the directory, but an older sandbox could have planted something
/// before it was hidden). Empty when there is none.
pub fn read(path: &Path) -> String {
    ocsb_sandbox::checkouts::read_limited(path, u64::MAX).unwrap_or_default()
}

impl Ledger {
    /// Opens the ledger for appending (no-follow, see [`StateDir::append`]), sums what was
    /// already spent today and records `session` as the one that runs.
    pub fn open(sd: &StateDir, files: &Files, session: &str, limit: SpendLimit) -> Result<Ledger> {
        sd.dir(&files.dir)?;
        let file = sd.append(&files.ledger)?;
        let text = read(&sd.path().join(&files.ledger));
        let (day, _) = utc(SystemTime::now());
        let (today, _) = totals(&text, &day, session);
        sd.rewrite_private(&files.session, format!("{session}\n").as_bytes())?;
        Ok(Ledger {
            file: Mutex::new(file),
            session: session.to_string(),
            limit,
            spent: Mutex::new(Spent { day, today: today.cost, ..Spent::default() }),
        })
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    pub fn limit(&self) -> SpendLimit {
        self.limit
    }

    fn spent(&self) -> std::sync::MutexGuard<'_, Spent> {
        let mut s = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        let (day, _) = utc(SystemTime::now());
        if s.day != day {
            s.day = day;
            s.today = 0.0;
        }
        s
    }

    /// Admit a model call, or refuse it once what was spent, together with what the calls under
    /// way may still cost, reaches a limit. The call's own `reserve` (the most it can cost)
    /// counts against later calls until it ends: many calls started at once cannot all slip
    /// under the limit. Returns the call's ticket for [`Ledger::finish`].
    pub fn admit(&self, entry: Entry, reserve: f64) -> std::result::Result<u64, Refusal> {
        let mut s = self.spent();
        let over = [("per day", s.today, self.limit.day), ("per run", s.session, self.limit.session)]
            .into_iter()
            .find_map(|(which, spent, limit)| {
                limit.filter(|l| spent + s.in_flight >= *l).map(|limit| Refusal {
                    which,
                    spent,
                    reserved: s.in_flight,
                    limit,
                })
            });
        if let Some(r) = over {
            s.refused += 1;
            let write = s.refused <= MAX_REFUSAL_LINES;
            drop(s);
            if write {
                self.write(&Entry { cost: Some(0.0), status: 402, ..entry });
            }
            return Err(r);
        }
        s.next += 1;
        let id = s.next;
        s.in_flight += reserve;
        s.open.insert(id, (entry, reserve));
        Ok(id)
    }

    /// A call ended: its line is written and its cost (`None`: no price known) replaces its
    /// reservation.
    pub fn finish(
        &self,
        id: u64,
        usage: super::usage::Usage,
        cost: Option<f64>,
        status: u16,
        duration_ms: u64,
    ) {
        let mut s = self.spent();
        let Some((mut e, reserve)) = s.open.remove(&id) else { return };
        s.in_flight = (s.in_flight - reserve).max(0.0);
        if let Some(c) = cost {
            s.today += c;
            s.session += c;
        }
        drop(s);
        e.time = utc(SystemTime::now()).1;
        e.usage = usage;
        e.cost = cost;
        e.status = status;
        e.duration_ms = duration_ms;
        self.write(&e);
    }

    /// The run ends: calls still under way are written with their reservation as their cost
    /// (status 0), since the provider bills them whether or not the broker saw them end.
    pub fn close(&self) {
        let open: Vec<(Entry, f64)> = self.spent().open.drain().map(|(_, v)| v).collect();
        for (e, reserve) in open {
            self.write(&Entry { time: utc(SystemTime::now()).1, cost: Some(reserve), status: 0, ..e });
        }
    }

    fn write(&self, e: &Entry) {
        let Ok(line) = serde_json::to_string(e) else { return };
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(err) = f.write_all(format!("{line}\n").as_bytes()) {
            eprintln!("ocsb: broker: could not write the spend ledger: {err}");
        }
    }

    pub fn view(&self) -> View {
        let s = self.spent();
        View {
            today: s.today,
            session: s.session,
            limit_day: self.limit.day,
            limit_session: self.limit.session,
            refused: s.refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn utc_dates() {
        assert_eq!(utc(UNIX_EPOCH).1, "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_189_951); // 2026-12-02T05:39:11Z
        assert_eq!(utc(t), ("2026-12-02".into(), "2026-12-02T05:39:11Z".into()));
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(utc(leap).0, "2000-02-29");
    }

    fn entry(time: &str, session: &str, cost: Option<f64>) -> Entry {
        Entry {
            time: time.into(),
            session: session.into(),
            provider: "fake".into(),
            model: "m1".into(),
            usage: Usage { input: 10, output: 2, cache_read: 1, cache_write: 0 },
            cost,
            duration_ms: 5,
            status: 200,
        }
    }

    #[test]
    fn totals_by_day_and_session() {
        let lines: Vec<String> = [
            entry("2026-12-01T23:59:59Z", "a", Some(1.0)),
            entry("2026-12-02T00:00:01Z", "a", Some(0.5)),
            entry("2026-12-02T08:00:00Z", "b", None),
            entry("2026-12-02T09:00:00Z", "b", Some(0.25)),
        ]
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
        let text = lines.join("\n") + "\n{\"torn";
        let (today, b) = totals(&text, "2026-12-02", "b");
        assert_eq!((today.cost, today.requests, today.unpriced, today.input), (0.75, 3, 1, 30));
        assert_eq!((b.cost, b.requests), (0.25, 2));
    }

    #[test]
    fn the_cap_refuses_once_reached() {
        let d = tempfile::tempdir().unwrap();
        let sd = StateDir::open(d.path()).unwrap();
        let l =
            Ledger::open(&sd, &Files::for_tests(), "s1", SpendLimit { day: Some(1.0), session: Some(0.5) })
                .unwrap();
        let (_, now) = utc(SystemTime::now());
        let e = || entry(&now, "s1", None);
        let a = l.admit(e(), 0.3).unwrap();
        l.finish(a, Usage::default(), Some(0.4), 200, 1);
        let b = l.admit(e(), 0.3).unwrap();
        // 0.4 spent and 0.3 reserved: a third call started now is refused.
        let r = l.admit(e(), 0.3).unwrap_err();
        assert_eq!((r.which, r.limit), ("per run", 0.5));
        assert!(
            r.message("local /p/sandbox.conf:2")
                .contains("change OCSB_SPEND_LIMIT (local /p/sandbox.conf:2)")
        );
        l.finish(b, Usage::default(), Some(0.05), 200, 1);
        assert!(l.admit(e(), 0.01).is_ok(), "0.45 of 0.5 once the reservation is settled");
        assert_eq!(l.view().refused, 1);
        // The run ends with a call under way: it is written at its reservation.
        l.close();
        let text = std::fs::read_to_string(d.path().join(Files::for_tests().ledger)).unwrap();
        let statuses: Vec<u16> =
            text.lines().map(|x| serde_json::from_str::<Entry>(x).unwrap().status).collect();
        assert_eq!(statuses, vec![200, 402, 200, 0]);
        // A new run of the same day starts with the day's spend and a fresh session.
        drop(l);
        let l = Ledger::open(&sd, &Files::for_tests(), "s2", SpendLimit { day: Some(0.46), session: None })
            .unwrap();
        assert!((l.view().today - 0.46).abs() < 1e-9 && l.view().session == 0.0, "{:?}", l.view());
        assert_eq!(l.admit(e(), 0.0).unwrap_err().which, "per day");
        assert_eq!(std::fs::read_to_string(d.path().join(Files::for_tests().session)).unwrap(), "s2\n");
    }

    #[test]
    fn refusals_past_a_hundred_are_counted_not_written() {
        let d = tempfile::tempdir().unwrap();
        let sd = StateDir::open(d.path()).unwrap();
        let l = Ledger::open(&sd, &Files::for_tests(), "s1", SpendLimit { day: None, session: Some(0.0) })
            .unwrap();
        for _ in 0..150 {
            assert!(l.admit(entry("t", "s1", None), 0.0).is_err());
        }
        assert_eq!(l.view().refused, 150);
        assert_eq!(
            std::fs::read_to_string(d.path().join(Files::for_tests().ledger)).unwrap().lines().count(),
            100
        );
    }
}
