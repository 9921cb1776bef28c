//! [`EffectLog`]: one handle on one lineage's log, over any [`Storage`].
//!
//! Append protocol (LOG-2, LOG-3, LOG-4), every step under one exclusive
//! `flock`:
//!
//! 1. **lock** exclusively;
//! 2. **merge**: read only the bytes other writers appended since this handle
//!    last read, decode and admit them; a torn tail left by a dead writer is cut
//!    off (its bytes kept in `<log>.broken`) and the cut is fsynced;
//! 3. **allocate** the next position from the merged tail;
//! 4. **validate** the record against the merged history (an outcome for an
//!    effect another writer settled is refused here);
//! 5. **write** the framed line at the end; on failure cut back to the old
//!    length and return [`LogError::Persistence`];
//! 6. **fsync** the file (`fdatasync`: the data and the length needed to read
//!    it), and on this handle's first append its directory (`fsync`); on
//!    failure cut back, fsync the cut, poison the handle and return
//!    [`LogError::DurabilityUnknown`] (Linux may report a later fsync as
//!    success after losing the pages, so the handle never trusts the file again);
//! 7. **unlock**.
//!
//! Readers merge under a shared lock and never repair: a torn tail seen there
//! is simply not read yet.

use std::collections::BTreeSet;

use super::error::LogError;
use super::frame::{self, Framed, OperatorKey};
use super::history::{ClaimState, History};
use super::record::{
    ClaimRecord, DecisionRecord, ObservationRecord, OutcomeRecord, Position, ProcessesRecord, Record,
    VerifierRecord,
};
use super::scan::{self, scan};
use super::storage::{LockKind, Storage, read_range};
use crate::model::{CleanupState, Execution, Impact, Outcome, ProducerFacts};

/// What recovery's judge (LOG-7) found of an unsettled claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Its executor is alive (or not known dead): the claim is its
    /// executor's to settle, and recovery leaves it alone.
    Alive,
    /// Its executor is dead: the claim is recorded INTERRUPTED with the
    /// cleanup recovery observed of its processes (PROC-2): CLEAN only when
    /// every one is known gone; UNKNOWN when nothing could be observed.
    Dead {
        /// The cleanup observed.
        cleanup: CleanupState,
    },
}

/// The LOG-7 outcome for a claim whose executor died before settling it,
/// with the cleanup recovery observed.
fn interrupted(claim: Position, cleanup: CleanupState) -> OutcomeRecord {
    let teardown_dead = match cleanup {
        CleanupState::Clean => Some(true),
        CleanupState::Failed => Some(false),
        CleanupState::NotApplicable | CleanupState::Unknown => None,
    };
    OutcomeRecord {
        claim,
        outcome: Outcome {
            execution: Execution::Interrupted,
            impact: Impact::Possible,
            cleanup,
            replayed: false,
            remote_acknowledged: false,
            detached: false,
        },
        facts: ProducerFacts { teardown_dead, ..ProducerFacts::default() },
        recovery: true,
    }
}

/// The error every record of a failed batch after the first gets: the same
/// kind of failure, for the same reason (`io::Error` does not clone).
fn copy_failure_of(path: &str, poisoned: bool) -> LogError {
    let source =
        std::io::Error::other("the batch this record was written in failed; see the first record's error");
    if poisoned {
        LogError::DurabilityUnknown { path: path.to_owned(), source }
    } else {
        LogError::Persistence { path: path.to_owned(), source }
    }
}

/// The error for the rest of a batch whose lock or merge failed.
fn copy_failure(path: &str) -> LogError {
    LogError::Io {
        path: path.to_owned(),
        operation: "append (batch)",
        source: std::io::Error::other("the batch failed before writing; see the first record's error"),
    }
}

/// One handle on a lineage's log.
pub struct EffectLog<S: Storage> {
    storage: S,
    path: String,
    key: Option<OperatorKey>,
    history: History,
    records: Vec<Framed>,
    /// File offset up to which this handle has read (always a line boundary).
    read_offset: u64,
    last_check: [u8; 32],
    directory_synced: bool,
    poisoned: bool,
    degraded: BTreeSet<String>,
}

impl<S: Storage> EffectLog<S> {
    /// A handle over `storage`, reading everything in it strictly (LOG-6). A
    /// torn tail is tolerated (not read) and repaired by the first append.
    pub fn open(storage: S, path: impl Into<String>, key: Option<OperatorKey>) -> Result<Self, LogError> {
        let mut log = Self {
            storage,
            path: path.into(),
            key,
            history: History::new(),
            records: Vec::new(),
            read_offset: 0,
            last_check: scan::genesis(),
            directory_synced: false,
            poisoned: false,
            degraded: BTreeSet::new(),
        };
        log.with_lock(LockKind::Shared, |log| log.merge(false).map(drop))?;
        Ok(log)
    }

    /// The path, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The underlying storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    fn io(&self, operation: &'static str) -> impl FnOnce(std::io::Error) -> LogError + '_ {
        move |source| LogError::Io { path: self.path.clone(), operation, source }
    }

    fn with_lock<T>(
        &mut self,
        kind: LockKind,
        f: impl FnOnce(&mut Self) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        self.storage.lock(kind).map_err(|source| LogError::Io {
            path: self.path.clone(),
            operation: "flock",
            source,
        })?;
        let result = f(self);
        // flock is released on close too, so a failed unlock cannot leak the
        // lock past this handle; it is worth a warning, not an error.
        if let Err(error) = self.storage.unlock() {
            tracing::warn!(path = %self.path, "unlocking the effect log failed: {error}");
        }
        result
    }

    /// Step 2: read and admit what others appended. Returns the length of a
    /// torn tail found at the end (0 if none). With `repair` (only under the
    /// exclusive lock) that tail is preserved in `<log>.broken` and cut off.
    fn merge(&mut self, repair: bool) -> Result<u64, LogError> {
        let length = self.storage.length().map_err(self.io("stat"))?;
        if length < self.read_offset {
            return Err(LogError::Corrupt {
                path: self.path.clone(),
                line: self.history.len() + 1,
                offset: length,
                reason: format!("the log shrank to {length} bytes under records this handle had read"),
            });
        }
        if length == self.read_offset {
            return Ok(0);
        }
        let bytes = read_range(&self.storage, self.read_offset, length - self.read_offset)
            .map_err(self.io("read"))?;
        self.history.begin();
        let scanned =
            match scan(&bytes, self.read_offset, self.last_check, self.key.as_ref(), &mut self.history) {
                Ok(scanned) => scanned,
                Err(defect) => {
                    // The handle keeps its last good view; the file is not touched.
                    self.history.rollback();
                    return Err(LogError::Corrupt {
                        path: self.path.clone(),
                        line: defect.line,
                        offset: defect.offset,
                        reason: defect.reason,
                    });
                }
            };
        self.history.commit();
        self.records.extend(scanned.records);
        self.read_offset += scanned.consumed;
        self.last_check = scanned.last_check;
        if scanned.torn > 0 && repair {
            let torn = &bytes[scanned.consumed as usize..];
            self.storage.preserve_broken(torn).map_err(self.io("preserving a torn tail"))?;
            if let Err(source) = self.storage.truncate(self.read_offset).and_then(|()| self.storage.sync()) {
                // LOG-4's rule for any failed fsync: nothing written through
                // this handle can be trusted to be on disk any more.
                self.poisoned = true;
                return Err(LogError::DurabilityUnknown { path: self.path.clone(), source });
            }
            tracing::warn!(path = %self.path, bytes = scanned.torn, "cut a torn tail left by a crashed writer");
        }
        Ok(scanned.torn)
    }

    /// Steps 1-7 for one record.
    fn append(&mut self, run_id: &str, record: &Record) -> Result<Position, LogError> {
        self.append_batch(&[(run_id, record)]).pop().expect("one result per record")
    }

    /// Steps 1-7 for a batch under one lock, one write and one fsync (group
    /// commit). Each record is validated against the history as extended by
    /// the batch's earlier records; a refused record gets its own
    /// [`LogError::Rejected`] and the rest go on. A failed write or fsync fails
    /// every record of the batch with LOG-4's semantics: cut back, and after a
    /// failed fsync the handle is poisoned. Results are in input order.
    pub fn append_batch(&mut self, batch: &[(&str, &Record)]) -> Vec<Result<Position, LogError>> {
        if self.poisoned {
            return batch.iter().map(|_| Err(LogError::Poisoned { path: self.path.clone() })).collect();
        }
        let outcome = self.with_lock(LockKind::Exclusive, |log| {
            log.merge(true)?;
            Ok(log.write_batch(batch))
        });
        match outcome {
            Ok(results) => results,
            Err(error) => {
                let first = Err(error);
                let path = self.path.clone();
                std::iter::once(first).chain(batch.iter().skip(1).map(|_| Err(copy_failure(&path)))).collect()
            }
        }
    }

    /// Steps 3-6 under the exclusive lock, after the merge.
    fn write_batch(&mut self, batch: &[(&str, &Record)]) -> Vec<Result<Position, LogError>> {
        self.history.begin();
        let mut chain = self.last_check;
        let mut bytes = Vec::new();
        let mut accepted = Vec::new();
        let mut results: Vec<Result<Position, LogError>> = Vec::with_capacity(batch.len());
        for (run_id, record) in batch {
            if let Err(source) = self.history.admit(run_id, record) {
                results.push(Err(LogError::Rejected { path: self.path.clone(), source }));
                continue;
            }
            let position = self.history.len() - 1;
            let (line, check) = frame::encode(position, run_id, record, &chain, self.key.as_ref());
            bytes.extend_from_slice(&line);
            chain = check;
            accepted.push(Framed {
                position,
                run_id: (*run_id).to_owned(),
                record: (*record).clone(),
                check,
            });
            results.push(Ok(position));
        }
        if accepted.is_empty() {
            self.history.commit();
            return results;
        }
        let before = self.read_offset;
        let failure = if let Err(source) = self.storage.write_at(before, &bytes) {
            // LOG-4: not written. Cut back whatever part of the batch landed,
            // durably; if even that fails, complete lines of the batch may
            // survive, so the answer is "durability unknown", not "not written".
            match self.storage.truncate(before).and_then(|()| self.storage.sync()) {
                Ok(()) => Some(LogError::Persistence { path: self.path.clone(), source }),
                Err(cut) => {
                    tracing::error!(path = %self.path, "cutting back a failed write failed too: {cut}");
                    self.poisoned = true;
                    Some(LogError::DurabilityUnknown { path: self.path.clone(), source })
                }
            }
        } else if let Err(source) = self
            .storage
            .sync()
            .and_then(|()| if self.directory_synced { Ok(()) } else { self.storage.sync_directory() })
        {
            self.poisoned = true;
            let _ = self.storage.truncate(before).and_then(|()| self.storage.sync());
            Some(LogError::DurabilityUnknown { path: self.path.clone(), source })
        } else {
            None
        };
        if let Some(failure) = failure {
            self.history.rollback();
            let mut failure = Some(failure);
            return results
                .into_iter()
                .map(|result| match result {
                    Ok(_) => {
                        Err(failure.take().unwrap_or_else(|| copy_failure_of(&self.path, self.poisoned)))
                    }
                    rejected => rejected,
                })
                .collect();
        }
        self.directory_synced = true;
        self.history.commit();
        self.records.extend(accepted);
        self.read_offset = before + bytes.len() as u64;
        self.last_check = chain;
        results
    }

    /// Appends a claim; durable when it returns (LOG-3). On any error the
    /// caller must not run the backend (LOG-4).
    pub fn claim(&mut self, run_id: &str, claim: ClaimRecord) -> Result<Position, LogError> {
        self.append(run_id, &Record::Claim(claim))
    }

    /// Appends an outcome. A failure marks `run_id` degraded (LOG-5): its claim
    /// stays unsettled on disk and replays as unknown.
    pub fn record_outcome(&mut self, run_id: &str, outcome: OutcomeRecord) -> Result<Position, LogError> {
        let result = self.append(run_id, &Record::Outcome(outcome));
        self.mark_degraded_on_failure(run_id, &result);
        result
    }

    /// Appends an observation; a failure marks `run_id` degraded (LOG-5).
    pub fn record_observation(
        &mut self,
        run_id: &str,
        observation: ObservationRecord,
    ) -> Result<Position, LogError> {
        let result = self.append(run_id, &Record::Observation(observation));
        self.mark_degraded_on_failure(run_id, &result);
        result
    }

    /// Appends observations as one batch (one write, one fsync); a failure
    /// marks `run_id` degraded (LOG-5). Positions in input order.
    pub fn record_observations(
        &mut self,
        run_id: &str,
        observations: Vec<ObservationRecord>,
    ) -> Result<Vec<Position>, LogError> {
        let records: Vec<Record> = observations.into_iter().map(Record::Observation).collect();
        let batch: Vec<(&str, &Record)> = records.iter().map(|record| (run_id, record)).collect();
        let result: Result<Vec<Position>, LogError> = self.append_batch(&batch).into_iter().collect();
        self.mark_degraded_on_failure(run_id, &result);
        result
    }

    /// Appends a verifier run (CMP-5); a failure marks `run_id` degraded
    /// (LOG-5), since a check that is not on disk vouches for nothing.
    pub fn record_verifier(&mut self, run_id: &str, verifier: VerifierRecord) -> Result<Position, LogError> {
        let result = self.append(run_id, &Record::Verifier(verifier));
        self.mark_degraded_on_failure(run_id, &result);
        result
    }

    /// Appends the processes a claimed command runs as (PROC-2); durable when
    /// it returns. On any error the command must not run.
    pub fn record_processes(
        &mut self,
        run_id: &str,
        processes: ProcessesRecord,
    ) -> Result<Position, LogError> {
        self.append(run_id, &Record::Processes(processes))
    }

    /// The processes record of the claim at `claim`, if it has one.
    pub fn processes_of(&self, claim: Position) -> Option<&ProcessesRecord> {
        if !self.history.has_processes(claim) {
            return None;
        }
        self.records[claim as usize..].iter().find_map(|framed| match &framed.record {
            Record::Processes(processes) if processes.claim == claim => Some(processes),
            _ => None,
        })
    }

    /// Appends a completion decision (POL-4). A decision is not evidence: a
    /// failure here leaves the evidence as it was and marks nothing degraded.
    pub fn record_decision(&mut self, run_id: &str, decision: DecisionRecord) -> Result<Position, LogError> {
        self.append(run_id, &Record::Decision(decision))
    }

    fn mark_degraded_on_failure<T>(&mut self, run_id: &str, result: &Result<T, LogError>) {
        if result.is_err() {
            self.degraded.insert(run_id.to_owned());
        }
    }

    /// Runs whose outcome or observation writes failed in this handle (LOG-5).
    pub fn degraded_runs(&self) -> &BTreeSet<String> {
        &self.degraded
    }

    /// True after a failed fsync (LOG-4).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The whole history, merged with what other writers appended (under a
    /// shared lock). A torn tail is not read.
    pub fn history(&mut self) -> Result<&[Framed], LogError> {
        self.with_lock(LockKind::Shared, |log| log.merge(false).map(drop))?;
        Ok(&self.records)
    }

    /// The byte offset just past the last complete record this handle read.
    pub fn read_offset(&self) -> u64 {
        self.read_offset
    }

    /// The records this handle has read so far, without merging.
    pub fn records(&self) -> &[Framed] {
        &self.records
    }

    /// The state of the claim at `position`, as of the last merge.
    pub fn claim_state(&self, position: Position) -> Option<ClaimState> {
        self.history.claim_state(position)
    }

    /// Repairs a torn tail, if any, under the exclusive lock; returns the
    /// number of bytes cut (kept in `<log>.broken`).
    pub fn repair(&mut self) -> Result<u64, LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned { path: self.path.clone() });
        }
        self.with_lock(LockKind::Exclusive, |log| log.merge(true))
    }

    /// LOG-7: asks `judge` about every claim with no outcome (RUNNING ones
    /// are left alone) and appends INTERRUPTED, possible impact, for each
    /// whose executor it finds dead, with the cleanup it observed. A claim
    /// whose executor is alive is left to it, whoever opens the log. The
    /// judge runs without the lock (tearing a dead command's survivors down
    /// takes time); a claim settled meanwhile is refused by the merged
    /// history, since that outcome is its writer's. Idempotent. Returns the
    /// claims it settled.
    pub fn recover_interrupted(
        &mut self,
        mut judge: impl FnMut(&ClaimRecord, Option<&ProcessesRecord>) -> Recovery,
    ) -> Result<Vec<Position>, LogError> {
        self.with_lock(LockKind::Shared, |log| log.merge(false).map(drop))?;
        let mut candidates: Vec<(Position, String, Record)> = Vec::new();
        let mut judged_without_processes = Vec::new();
        for claim in self.history.unsettled_claims() {
            let framed = &self.records[claim as usize];
            let Record::Claim(record) = &framed.record else { continue };
            let processes = self.processes_of(claim);
            if let Recovery::Dead { cleanup } = judge(record, processes) {
                if processes.is_none() {
                    judged_without_processes.push(candidates.len());
                }
                candidates.push((claim, framed.run_id.clone(), Record::Outcome(interrupted(claim, cleanup))));
            }
        }
        // A dead executor may have recorded its command's processes after the
        // merge above and before it died: read again, and judge those claims
        // again with their processes, so their survivors are torn down.
        if !judged_without_processes.is_empty() {
            self.with_lock(LockKind::Shared, |log| log.merge(false).map(drop))?;
            for index in judged_without_processes {
                let claim = candidates[index].0;
                let (Some(processes), Record::Claim(record)) =
                    (self.processes_of(claim), &self.records[claim as usize].record)
                else {
                    continue;
                };
                if let Recovery::Dead { cleanup } = judge(record, Some(processes)) {
                    candidates[index].2 = Record::Outcome(interrupted(claim, cleanup));
                }
            }
        }
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        // One batch, one fsync.
        let batch: Vec<(&str, &Record)> =
            candidates.iter().map(|(_, run, record)| (run.as_str(), record)).collect();
        let results = self.append_batch(&batch);
        let mut recovered = Vec::new();
        for ((claim, _, _), result) in candidates.iter().zip(results) {
            match result {
                Ok(_) => recovered.push(*claim),
                Err(LogError::Rejected { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(recovered)
    }
}
