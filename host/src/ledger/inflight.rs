//! CMP-13's view of other runs: which claims of the data dir's other runs
//! are still in flight when this run decides.
//!
//! A decision must see another run's claim that is claimed and not settled,
//! with its executor alive, when it may touch a required artifact (that run
//! may be changing the file now). Listing every lineage's log would make each
//! decision cost the store's size (LOG-13), so a claim announces itself: just
//! before its claim is appended, [`mark`] writes a marker
//! `DATA_DIR/inflight/<action id>` naming its lineage, and the step that
//! settles it [`clear`]s it. A decision lists that directory (as many entries
//! as claims in flight, plus leftovers), reads each other lineage it names,
//! and keeps the claims that are really in flight ([`in_flight`]).
//!
//! The marker only says where to look; the log says what is true. A marker
//! whose claim is settled (by its step, by recovery, by another process) is
//! removed by the next decision that finds it so: settlement is final, so
//! that removal races with nothing. A marker whose claim is not in its log
//! (its writer between the marker and the append, or one that failed or
//! died there) is left alone until it is [`ORPHAN_AFTER`] old. A claim whose
//! executor is dead is no longer in flight (recovery settles it
//! INTERRUPTED); its marker goes when that happens.
//!
//! Markers are written without an fsync: they matter only while their writer
//! lives, and a crash of the machine ends every writer. With a fleet store
//! (SPEC 13) they show only the claims made through this data dir, not those
//! of other machines.

use std::time::{Duration, SystemTime};

use cap_std::fs::{Dir, DirBuilder};

use crate::data_dir::DataDir;
use crate::log::{ClaimRecord, Framed, Record, check_run_id};

use crate::model::Execution;

/// The directory beneath the data dir.
pub const DIR: &str = "inflight";

/// How old a marker whose claim is not in its log must be before a decision
/// removes it: far beyond the time between a marker and its claim's append.
pub const ORPHAN_AFTER: Duration = Duration::from_secs(600);

/// Another run's claim in flight: its run, its position in its own lineage,
/// and the claim.
pub struct InFlight {
    /// The run that made it.
    pub run_id: String,
    /// Its position, in its own lineage.
    pub position: crate::log::Position,
    /// The claim.
    pub claim: ClaimRecord,
}

fn open(data_dir: &DataDir, create: bool) -> std::io::Result<Option<Dir>> {
    let dir = data_dir.dir();
    if create {
        let mut builder = DirBuilder::new();
        cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match dir.create_dir_with(DIR, &builder) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
    }
    match dir.open_dir(DIR) {
        Ok(dir) => Ok(Some(dir)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// An action id as a file name: what the ledger makes (`RUN-UUID`, a
/// child's `PARENT.NAME-UUID`), never a path.
fn valid(action_id: &str) -> bool {
    !action_id.is_empty()
        && action_id.len() <= 255
        && !action_id.starts_with('.')
        && action_id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Announces the claim `action_id` of `lineage`, before it is appended.
pub fn mark(data_dir: &DataDir, action_id: &str, lineage: &str) -> std::io::Result<()> {
    if !valid(action_id) {
        return Err(std::io::Error::other(format!("action id {action_id:?} is no file name")));
    }
    let dir = open(data_dir, true)?.expect("created");
    dir.write(action_id, lineage.as_bytes())
}

/// Withdraws the marker of `action_id` (settled, or never appended). A
/// marker already gone is no error.
pub fn clear(data_dir: &DataDir, action_id: &str) {
    if !valid(action_id) {
        return;
    }
    if let Ok(Some(dir)) = open(data_dir, false) {
        let _ = dir.remove_file(action_id);
    }
}

/// One marker as listed.
struct Marker {
    action_id: String,
    lineage: String,
    age: Duration,
}

fn markers(dir: &Dir) -> Vec<Marker> {
    let Ok(entries) = dir.entries() else { return Vec::new() };
    let now = SystemTime::now();
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Ok(action_id) = entry.file_name().into_string() else { continue };
        let Ok(metadata) = entry.metadata() else { continue };
        if !metadata.is_file() || metadata.len() > 256 || !valid(&action_id) {
            continue;
        }
        let Ok(lineage) = dir.read_to_string(&action_id) else { continue };
        if check_run_id(&lineage).is_err() {
            continue;
        }
        let modified = metadata.modified().map(|m| m.into_std()).unwrap_or(now);
        let age = now.duration_since(modified).unwrap_or_default();
        found.push(Marker { action_id, lineage, age });
    }
    found
}

/// Where claim `action_id` stands in `history`: `None` when it is not there,
/// else its position, its record, and whether it is still in flight (no
/// outcome, or only a RUNNING one).
fn find<'h>(history: &'h [Framed], action_id: &str) -> Option<(&'h Framed, &'h ClaimRecord, bool)> {
    let (framed, claim) = history.iter().find_map(|framed| match &framed.record {
        Record::Claim(claim) if claim.action_id == action_id => Some((framed, claim)),
        _ => None,
    })?;
    let settled = history.iter().any(|later| {
        matches!(&later.record, Record::Outcome(o) if o.claim == framed.position && o.outcome.execution != Execution::Running)
    });
    Some((framed, claim, !settled))
}

/// Every claim of a lineage other than `own_lineage` that is in flight now
/// (claimed, not settled, executor alive), by the markers; with `prune`,
/// removes the markers it finds settled or long orphaned (a read-only
/// decision writes nothing). A lineage that cannot be read is skipped with
/// a warning: a decision is not refused because another run's log is
/// damaged (its own decisions say so).
pub fn in_flight(
    data_dir: &DataDir,
    own_lineage: &str,
    key: Option<&crate::log::OperatorKey>,
    prune: bool,
) -> Vec<InFlight> {
    let Ok(Some(dir)) = open(data_dir, false) else { return Vec::new() };
    let mut by_lineage: std::collections::BTreeMap<String, Vec<Marker>> = Default::default();
    for marker in markers(&dir) {
        if marker.lineage != own_lineage {
            by_lineage.entry(marker.lineage.clone()).or_default().push(marker);
        }
    }
    let mut found = Vec::new();
    for (lineage, markers) in by_lineage {
        let history = match data_dir.open_lineage_read_only(&lineage, key).and_then(|log| match log {
            Some(mut log) => log.history().map(<[Framed]>::to_vec),
            None => Ok(Vec::new()),
        }) {
            Ok(history) => history,
            Err(error) => {
                tracing::warn!(%lineage, %error, "another run's log could not be read for its claims in flight (CMP-13)");
                continue;
            }
        };
        for marker in markers {
            match find(&history, &marker.action_id) {
                None if prune && marker.age > ORPHAN_AFTER => {
                    let _ = dir.remove_file(&marker.action_id);
                }
                None => {}
                Some((_, _, false)) if prune => {
                    let _ = dir.remove_file(&marker.action_id);
                }
                Some((_, _, false)) => {}
                Some((framed, claim, true)) if !crate::executor::is_dead(claim.executor.as_ref()) => {
                    found.push(InFlight {
                        run_id: framed.run_id.clone(),
                        position: framed.position,
                        claim: claim.clone(),
                    });
                }
                // Its executor is dead: recovery settles it INTERRUPTED.
                Some((_, _, true)) => {}
            }
        }
    }
    found
}
