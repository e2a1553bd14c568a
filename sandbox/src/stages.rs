//! Timestamps of a start's stages, for the benchmark's stage table (`OCSB_BENCH=stages`).
//! Compiled in only with `RUSTFLAGS="--cfg ocsb_stage_marks"`, never in a build users run:
//! each mark appends `NANOS PID LABEL` (wall clock, so that the launcher, stage 2 and pid 1
//! share one time line) to [`LOG`], if it exists.

/// Where the marks go: the benchmark creates it, and reads it after its runs.
pub const LOG: &str = "/tmp/ocsb-stages.log";

/// Marks the moment `label` in this process.
#[cfg(ocsb_stage_marks)]
pub fn mark(label: &str) {
    use std::io::Write;
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    // One write per line: processes of one start mark at the same moments.
    let line = format!("{} {} {label}\n", t.as_nanos(), std::process::id());
    // Opened once and kept: pid 1 inherits it from stage 2, and marks after its `pivot_root`.
    static FILE: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let file = FILE.get_or_init(|| std::fs::OpenOptions::new().append(true).open(LOG).ok());
    if let Some(mut f) = file.as_ref() {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Marks nothing: this build has no stage marks.
#[cfg(not(ocsb_stage_marks))]
#[inline(always)]
pub fn mark(_label: &str) {}
