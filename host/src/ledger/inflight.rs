//! CMP-13's view of other runs: which claims of the data dir's other runs
//! are still in flight when this run decides.
//!
//! A decision must see another run's claim that is claimed and not settled,
//! with its executor alive, when it may touch a required artifact (that run
//! may be changing the file now). Listing every lineage's log would make each
//! decision cost the store's size (LOG-13), so a claim announces itself: just
//! before its claim is appended, [`mark`] writes a marker
//! `DATA_DIR/inflight/<action id>` naming its lineage and its executor, and
//! the step that settles it [`clear`]s it. A decision lists that directory,
//! reads each other lineage it names, and keeps the claims that are really in
//! flight ([`in_flight`]).
//!
//! The marker only says where to look; the log says what is true, and where
//! the log cannot say, the decision fails closed:
//! - a claim with no outcome is in flight while its executor lives; one with a
//!   RUNNING outcome (a background job, which outlives its launcher) is in
//!   flight until it is settled, whoever launched it;
//! - a lineage that cannot be read (damaged, or keyed with another operator
//!   key) is a claim of unknown scope in flight while the marker's writer
//!   lives: nothing says what it touches.
//!
//! A decision that may write removes the markers that can never be in flight
//! again: the claim settled (settlement is final), or not RUNNING and its
//! executor dead (recovery settles it INTERRUPTED), or never appended and
//! its writer dead. Liveness is judged by the executor's start token, never
//! by a clock, so a writer stopped between its marker and its append keeps
//! its marker. Entries that are no marker at all (a stray file, a FIFO, a
//! symlink) are skipped and never opened for reading.
//!
//! Markers are written without an fsync: they matter only while their writer
//! lives, and a crash of the machine ends every writer. With a fleet store
//! (SPEC 13) they show only the claims made through this data dir, not those
//! of other machines.

use std::io::Read;

use cap_std::fs::{Dir, DirBuilder, OpenOptions};
use cap_std::fs::{DirBuilderExt, OpenOptionsExt};
use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};

use crate::data_dir::DataDir;
use crate::log::{ClaimRecord, Executor, Framed, Position, Record, check_run_id};
use crate::model::Execution;

/// The directory beneath the data dir.
pub const DIR: &str = "inflight";

/// The most a marker may hold.
const MARKER_MAX: u64 = 4096;

/// What a marker says: where its claim will be, and who writes it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Marker {
    /// The lineage whose log the claim is appended to.
    lineage: String,
    /// The process that claims it (LOG-7's executor).
    executor: Executor,
}

/// Another run's claim in flight.
pub enum InFlight {
    /// A claim its log holds: its run, its position in its own lineage, and
    /// the claim.
    Claim {
        /// The run that made it.
        run_id: String,
        /// Its position, in its own lineage.
        position: Position,
        /// The claim.
        claim: Box<ClaimRecord>,
    },
    /// A claim announced in a lineage whose log could not be read: of
    /// unknown scope, by what the marker says.
    Unreadable {
        /// The lineage.
        lineage: String,
        /// Why it could not be read.
        why: String,
    },
}

impl InFlight {
    /// Its run (for an unreadable log, its lineage) and its position there.
    pub fn key(&self) -> (&str, Position) {
        match self {
            InFlight::Claim { run_id, position, .. } => (run_id, *position),
            InFlight::Unreadable { lineage, .. } => (lineage, 0),
        }
    }
}

fn open(data_dir: &DataDir, create: bool) -> std::io::Result<Option<Dir>> {
    let dir = data_dir.dir();
    if create {
        let mut builder = DirBuilder::new();
        builder.mode(0o700);
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

/// Announces the claim `action_id` of `lineage` by `executor`, before it is
/// appended.
pub fn mark(data_dir: &DataDir, action_id: &str, lineage: &str, executor: &Executor) -> std::io::Result<()> {
    if !valid(action_id) {
        return Err(std::io::Error::other(format!("action id {action_id:?} is no file name")));
    }
    let dir = open(data_dir, true)?
        .ok_or_else(|| std::io::Error::other(format!("{DIR} vanished as it was made")))?;
    let marker = Marker { lineage: lineage.to_owned(), executor: executor.clone() };
    dir.write(action_id, serde_json::to_vec(&marker).map_err(std::io::Error::other)?)
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

/// The marker named `name`, read without following a symlink or waiting on
/// a FIFO, only when it is a small regular file that parses.
fn read_marker(dir: &Dir, name: &str) -> Option<Marker> {
    let mut options = OpenOptions::new();
    options.read(true).custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32);
    let file = dir.open_with(name, &options).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() > MARKER_MAX {
        return None;
    }
    let mut text = String::new();
    file.take(MARKER_MAX).read_to_string(&mut text).ok()?;
    let marker: Marker = serde_json::from_str(&text).ok()?;
    check_run_id(&marker.lineage).is_ok().then_some(marker)
}

/// Where claim `action_id` stands in `history`: `None` when it is not there,
/// else its record and whether it ended (a settled outcome) or runs (a
/// RUNNING one).
fn find<'h>(history: &'h [Framed], action_id: &str) -> Option<(&'h Framed, &'h ClaimRecord, Stands)> {
    let (framed, claim) = history.iter().find_map(|framed| match &framed.record {
        Record::Claim(claim) if claim.action_id == action_id => Some((framed, claim)),
        _ => None,
    })?;
    let mut stands = Stands::Claimed;
    for later in history.iter().filter(|later| later.position > framed.position) {
        if let Record::Outcome(o) = &later.record
            && o.claim == framed.position
        {
            stands =
                if o.outcome.execution == Execution::Running { Stands::Running } else { Stands::Settled };
        }
    }
    Some((framed, claim, stands))
}

/// Where a claim stands.
#[derive(PartialEq, Eq)]
enum Stands {
    Claimed,
    Running,
    Settled,
}

/// Every claim of a lineage other than `own_lineage` that is in flight now,
/// by the markers (see the module doc for what counts); with `prune`,
/// removes the markers that can never be in flight again (a read-only
/// decision writes nothing).
pub fn in_flight(
    data_dir: &DataDir,
    own_lineage: &str,
    key: Option<&crate::log::OperatorKey>,
    prune: bool,
) -> Vec<InFlight> {
    let Ok(Some(dir)) = open(data_dir, false) else { return Vec::new() };
    let Ok(entries) = dir.entries() else { return Vec::new() };
    let mut by_lineage: std::collections::BTreeMap<String, Vec<(String, Marker)>> = Default::default();
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        if !valid(&name) {
            continue;
        }
        let Some(marker) = read_marker(&dir, &name) else { continue };
        if marker.lineage != own_lineage {
            by_lineage.entry(marker.lineage.clone()).or_default().push((name, marker));
        }
    }
    let remove = |name: &str| {
        if prune {
            let _ = dir.remove_file(name);
        }
    };
    let writer_lives = |marker: &Marker| !crate::executor::is_dead(Some(&marker.executor));
    let mut found = Vec::new();
    for (lineage, markers) in by_lineage {
        // Borrowed from the open log, never copied.
        let mut opened = data_dir.open_lineage_read_only(&lineage, key);
        let read: Result<&[Framed], String> = match &mut opened {
            Ok(Some(log)) => log.history().map_err(|error| error.to_string()),
            Ok(None) => Ok(&[]),
            Err(error) => Err(error.to_string()),
        };
        let history = match read {
            Ok(history) => history,
            Err(why) => {
                // Fail closed while a writer lives: nothing says what it touches.
                if markers.iter().any(|(_, m)| writer_lives(m)) {
                    found.push(InFlight::Unreadable { lineage, why });
                }
                markers.iter().filter(|(_, m)| !writer_lives(m)).for_each(|(name, _)| remove(name));
                continue;
            }
        };
        for (name, marker) in markers {
            match find(history, &name) {
                None if writer_lives(&marker) => {}
                None => remove(&name),
                Some((_, _, Stands::Settled)) => remove(&name),
                Some((framed, claim, Stands::Running)) => found.push(InFlight::Claim {
                    run_id: framed.run_id.clone(),
                    position: framed.position,
                    claim: Box::new(claim.clone()),
                }),
                Some((framed, claim, Stands::Claimed))
                    if !crate::executor::is_dead(claim.executor.as_ref()) =>
                {
                    found.push(InFlight::Claim {
                        run_id: framed.run_id.clone(),
                        position: framed.position,
                        claim: Box::new(claim.clone()),
                    })
                }
                // Its executor is dead: recovery settles it INTERRUPTED.
                Some((_, _, Stands::Claimed)) => remove(&name),
            }
        }
    }
    found
}
