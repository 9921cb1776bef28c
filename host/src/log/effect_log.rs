//! [`EffectLog`]: one handle on one lineage's log, over any [`Store`].
//!
//! Append protocol (LOG-2, and LOG-3 / LOG-4 of SPEC revision 2):
//!
//! 1. **lock** exclusively; while another writer holds the lock, **read
//!    ahead**: decode, verify and admit (in a history journal left open)
//!    the complete lines appended since this handle last read, so the
//!    waiting does the work step 3 would otherwise do under the lock. Not
//!    for an append that may pass over them (step 3): it decodes them after
//!    the lock anyway, and reading ahead would only take the CPU from the
//!    writer holding the lock;
//! 2. **refuse** if the log is poisoned: its `<log>.poisoned` marker says an
//!    fsync of it failed, in this writer or another;
//! 3. **merge**: read only the bytes other writers appended since this handle
//!    last read; what was read ahead is kept only if those bytes still start
//!    with exactly the bytes it was read from (a failed append cut back and
//!    written over differs, if only in its chain), else it is undone; decode
//!    and admit the rest; a torn tail left by a crash (`scan`) is cut off
//!    (its bytes kept in `<log>.broken`) and the cut is fsynced. An append
//!    of claims that those records cannot affect **passes over** them
//!    instead ([`EffectLog::pass_over`]): it counts their lines and chains
//!    from the last, and decodes and admits them after step 7;
//! 4. **allocate** the next position from the merged tail;
//! 5. **validate** the record against the merged history (an outcome for an
//!    effect another writer settled is refused here);
//! 6. **write** the framed lines at the end; on failure cut back to the old
//!    length and return [`LogError::Persistence`]. Each record was
//!    serialized before step 1 ([`frame::Body`]): framing under the lock
//!    only places it after its position and `prev`, and checksums the line;
//! 7. **unlock**;
//! 8. **fsync** (`fdatasync`, and on this handle's first sync its directory),
//!    outside the lock, when the batch holds a record that is durable on
//!    return (a claim, a command's processes, a decision:
//!    [`Record::durable_on_return`]). Outcomes, observations and verifier runs
//!    ride the log's next fsync: this handle's next durable append, an explicit
//!    [`EffectLog::sync`], or its drop; or any other writer's, since an
//!    `fdatasync` makes every byte of the file written before it durable,
//!    whoever wrote it. Writers therefore share fsyncs instead of taking turns
//!    holding the lock across them.
//!
//! A failed fsync cannot be cut back (other writers may have appended after
//! the bytes it was for) and says nothing about what is on disk (Linux may
//! report a later fsync as success after dropping the pages). So it
//! **poisons the log** for every writer: the handle refuses appends, and the
//! `<log>.poisoned` marker, written under the lock, makes every other writer
//! refuse them at step 2, until `effects log recover` has examined the tail
//! ([`EffectLog::clear_poison`]).
//!
//! Readers merge under a shared lock and never repair: a torn tail seen there
//! is simply not read yet.
//!
//! Over a server store ([`Store::compares_head`]) steps 1, 2, 3 and 7 are the
//! server's: the writer allocates and validates at the head it knows and
//! appends with one round trip that names that head; when others have
//! appended since, it gets their lines instead (from the same answer, or a
//! read after it), and the writer merges them and runs steps 4-6 again. Its commit is durable when
//! acknowledged, so step 8 has nothing to do, and a lost answer is settled by
//! sending the identical lines at the same head again (the store's work).

use std::collections::{BTreeMap, BTreeSet};

use super::checkpoint::{self, CHECKPOINT_EVERY, CHECKPOINT_LAG};
use super::error::LogError;
use super::frame::{self, Framed, OperatorKey};
use super::history::{ClaimState, History};
use super::record::{
    ClaimRecord, DecisionRecord, ObservationRecord, OutcomeRecord, Position, ProcessesRecord, Record,
    VerifierRecord,
};
use super::requests::RequestIndex;
use super::scan::{self, Scanned, scan};
use super::storage::{LockKind, Sidecar};
use super::store::{After, Head, LineMeta, Store, Written};
use super::witness;
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
fn copy_failure_of(path: &str, poisoned: Option<&'static str>) -> LogError {
    let source =
        std::io::Error::other("the batch this record was written in failed; see the first record's error");
    if let Some(remedy) = poisoned {
        LogError::DurabilityUnknown { path: path.to_owned(), source, remedy }
    } else {
        LogError::Persistence { path: path.to_owned(), source }
    }
}

/// An fsync's error, said as one.
fn fsync_failed(source: std::io::Error) -> std::io::Error {
    std::io::Error::new(source.kind(), format!("fsync failed ({source})"))
}

/// Each record of `batch` serialized, before the lock is taken: under it,
/// framing only places them ([`frame::Body`]).
fn bodies(batch: &[(&str, &Record)]) -> Vec<frame::Body> {
    batch.iter().map(|(_, record)| frame::Body::of(record)).collect()
}

/// The error for the rest of a batch whose lock or merge failed.
fn copy_failure(path: &str) -> LogError {
    LogError::Io {
        path: path.to_owned(),
        operation: "append (batch)",
        source: std::io::Error::other("the batch failed before writing; see the first record's error"),
    }
}

/// What [`EffectLog::write_batch`] did.
enum Wrote {
    /// Each record's result, and whether anything was written.
    Batch(Vec<Result<Position, LogError>>, bool),
    /// The request already has this claim: nothing was written.
    Found(Position),
}

/// A batch allocated, validated and framed, not yet appended.
struct Prepared {
    /// The framed lines.
    bytes: Vec<u8>,
    /// What a server store checks of each line.
    meta: Vec<LineMeta>,
    /// Where the last line starts within `bytes`.
    last_line: u64,
    /// The records admitted, in order.
    accepted: Vec<Framed>,
    /// Each record's result, in input order.
    results: Vec<Result<Position, LogError>>,
}

/// Records a writer read ahead while another held the lock: decoded,
/// verified and admitted to the history in a journal still open, not yet
/// the handle's. The merge under the lock keeps them only if the log still
/// holds these exact bytes where they were read.
struct ReadAhead {
    /// The complete lines read, from the handle's read offset.
    bytes: Vec<u8>,
    /// What scanning them found, over every round (`consumed` is the
    /// length of `bytes`).
    scanned: Scanned,
}

/// Others' lines an append of claims passed over under the lock (step 3
/// for a claim: [`EffectLog::pass_over`]): read, counted and chained from,
/// not yet decoded. They are decoded and admitted right after the lock is
/// released, and the batch written after them with them.
struct Passed {
    /// The lines, from the handle's read offset.
    bytes: Vec<u8>,
    /// What the lock's holder needed of them.
    over: scan::Passover,
    /// The batch appended after them, once it is: where it was written, and
    /// what [`EffectLog::appended`] needs of it.
    ours: Option<(Head, Prepared)>,
}

/// Most rounds of reading ahead before waiting for the lock.
const READ_AHEAD_ROUNDS: usize = 32;

/// Whether a handle starts at the log's checkpoint and keeps it (LOG-10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checkpoints {
    /// Read every record from the first (what `log verify` and a decision
    /// need) and write no checkpoint.
    #[default]
    Ignore,
    /// Start at the checkpoint if it verifies; write none (a reader).
    Use,
    /// Start at it, and write a new one every [`CHECKPOINT_EVERY`] records
    /// (a writer: the ledger's handles).
    Keep,
}

/// One handle on a lineage's log.
pub struct EffectLog<S: Store> {
    storage: S,
    path: String,
    key: Option<OperatorKey>,
    history: History,
    /// The records read or written, from position `base` on.
    records: Vec<Framed>,
    /// The first position `records` holds: 0, or the records a checkpoint
    /// covered (LOG-10).
    base: Position,
    /// Records before `base` a writer still needs: open claims and their
    /// processes records, from the checkpoint.
    pinned: BTreeMap<Position, Framed>,
    checkpoints: Checkpoints,
    /// Records covered by the newest checkpoint this handle knows of.
    checkpointed: Position,
    /// This handle's own append took the log past a multiple of
    /// [`CHECKPOINT_EVERY`] since its last checkpoint: the next one is its
    /// to write.
    crossed: bool,
    /// No checkpoint before the log holds this many records: the last one
    /// due was put off, as too big for the records since the newest, until
    /// the next boundary ([`EffectLog::checkpoint_still_due`]).
    put_off_until: Position,
    /// The records the checkpoint on disk said it covered when this handle
    /// found it unusable at open (its seal, its lines or the log after it
    /// did not agree): a head that says so is no newer checkpoint.
    unusable_checkpoint: Option<Position>,
    /// File offset up to which this handle has read (always a line boundary).
    read_offset: u64,
    /// Where the last record read or written starts.
    last_line: u64,
    last_check: [u8; 32],
    directory_synced: bool,
    /// Bytes this handle appended that no fsync of its own has covered yet.
    unsynced: bool,
    /// Where the history stood at this handle's last successful fsync
    /// (position, offset): everything before it was durable then.
    synced: (Position, u64),
    /// Opened read-only: every append, repair and seal is refused before
    /// anything touches the file (`set_read_only`).
    read_only: bool,
    poisoned: bool,
    degraded: BTreeSet<String>,
    /// The first claim of each request id, for [`EffectLog::claim_once`].
    requests: RequestIndex,
    /// What this writer read ahead while waiting for the lock, until its
    /// merge confirms or drops it.
    ahead: Option<ReadAhead>,
    /// What an append of claims passed over under the lock, until it is
    /// admitted after it.
    passed: Option<Passed>,
    /// A catch-up failed: this handle merges in full from then on.
    caught_up_failed: bool,
    /// Records the keyed marks this handle wrote or confirmed vouch for
    /// (`witness`): a keyed writer leaves a new one after each fsync that
    /// covered more.
    witnessed: Position,
}

impl<S: Store> EffectLog<S> {
    /// A handle over `storage`, reading everything in it strictly (LOG-6). A
    /// torn tail is tolerated (not read) and repaired by the first append.
    pub fn open(storage: S, path: impl Into<String>, key: Option<OperatorKey>) -> Result<Self, LogError> {
        Self::open_with(storage, path, key, Checkpoints::Ignore)
    }

    /// [`EffectLog::open`], starting at the log's checkpoint when
    /// `checkpoints` says so and it verifies (LOG-10): then only the records
    /// after it are read, and [`EffectLog::records`] holds those. A
    /// checkpoint that does not verify, or after which the log does not
    /// continue as it says, is not used: the whole log is read.
    pub fn open_with(
        storage: S,
        path: impl Into<String>,
        key: Option<OperatorKey>,
        checkpoints: Checkpoints,
    ) -> Result<Self, LogError> {
        let mut log = Self {
            storage,
            path: path.into(),
            key,
            history: History::new(),
            records: Vec::new(),
            base: 0,
            pinned: BTreeMap::new(),
            checkpoints,
            checkpointed: 0,
            crossed: false,
            put_off_until: 0,
            unusable_checkpoint: None,
            read_offset: 0,
            last_line: 0,
            last_check: scan::genesis(),
            directory_synced: false,
            unsynced: false,
            synced: (0, 0),
            poisoned: false,
            read_only: false,
            degraded: BTreeSet::new(),
            requests: RequestIndex::default(),
            ahead: None,
            passed: None,
            caught_up_failed: false,
            witnessed: 0,
        };
        log.with_lock(LockKind::Shared, |log| {
            let started = checkpoints != Checkpoints::Ignore && log.start_at_checkpoint();
            if !started {
                log.merge(false)?;
            } else if let Err(error) = log.merge(false) {
                tracing::warn!(path = %log.path, "the log does not continue as its checkpoint says ({error}); reading the whole log");
                log.unusable_checkpoint = Some(log.checkpointed);
                log.checkpointed = 0;
                log.restart();
                log.merge(false)?;
            }
            log.confirm_marks(!started)
        })?;
        Ok(log)
    }

    /// LOG-6 under an operator key: every keyed mark beside the log (the
    /// head mark, and the checkpoint's unless this handle started at it and
    /// so confirmed it already) must name records the log still holds and
    /// this handle has read, else [`LogError::Cut`]. Called under the lock
    /// right after a merge (at every open, and before every append), when
    /// this handle has read every complete record: no mark names more,
    /// since a mark is written only over records its writer appended before
    /// unlocking. So a record the log no longer holds, or one hidden behind
    /// a line zeroed to pass for a torn tail, is caught, and a writer open
    /// since before a cut never appends past it. A mark that is absent,
    /// unreadable or not sealed with the key is no mark (`witness`).
    /// Unkeyed logs have none: anyone can seal one.
    fn confirm_marks(&mut self, checkpoint_too: bool) -> Result<(), LogError> {
        let Some(key) = self.key.as_ref() else { return Ok(()) };
        if self.storage.compares_head() {
            // A server keeps its own lines; it has no head mark to cut past.
            return Ok(());
        }
        let mut marks = Vec::with_capacity(2);
        let sidecars = [(Sidecar::Head, true), (Sidecar::Checkpoint, checkpoint_too)];
        for (which, wanted) in sidecars {
            let bytes = match wanted.then(|| self.storage.read_sidecar(which)).transpose() {
                Ok(bytes) => bytes.flatten(),
                Err(error) => {
                    tracing::warn!(path = %self.path, sidecar = which.suffix(), "a keyed mark cannot be read ({error}); not checked");
                    None
                }
            };
            let mark = bytes.and_then(|bytes| match which {
                Sidecar::Head => witness::decode(&bytes, key),
                Sidecar::Checkpoint => checkpoint::mark(&bytes, key),
                Sidecar::Poisoned | Sidecar::Sealed => None,
            });
            if let Some(mark) = mark {
                marks.push((which, mark));
            }
        }
        if marks.is_empty() {
            return Ok(());
        }
        let length = self.storage.length().map_err(self.io("stat"))?;
        if length == 0 && self.seal_marker()?.is_some() {
            // A pruned lineage (retention): its log is gone and its seal
            // refuses every append; a mark left behind names nothing here.
            return Ok(());
        }
        // Records passed over under this lock count as read: they are the
        // log's, and a mark naming them is confirmed from their lines.
        let read = self.write_head().records;
        for (which, mark) in marks {
            let storage = &self.storage;
            let mut read_line = |position, start, end| storage.read_line(position, start, end);
            let confirmed = witness::confirm(&mark, Some(key), length, &mut read_line).and_then(|()| {
                if mark.records <= read {
                    return Ok(());
                }
                Err(format!(
                    "only the first {read} could be read: line {} is damaged to pass for a torn tail, which no \
                     crash leaves before a record its writer fsynced",
                    read + 1
                ))
            });
            if let Err(detail) = confirmed {
                return Err(LogError::Cut {
                    path: self.path.clone(),
                    witness: format!("{}.{}", self.path, which.suffix()),
                    records: mark.records,
                    detail,
                });
            }
            self.witnessed = self.witnessed.max(mark.records);
        }
        Ok(())
    }

    /// Whether this handle reads and writes with an operator key.
    pub fn is_keyed(&self) -> bool {
        self.key.is_some()
    }

    /// The most records a keyed mark beside the log vouched for when this
    /// handle opened it or wrote since (0 for an unkeyed log, or a keyed one
    /// with no mark yet): a lower bound the log was checked to reach.
    pub fn witnessed(&self) -> Position {
        self.witnessed
    }

    /// Leaves the head mark after an fsync of this handle's that covered
    /// more than the last it wrote (`witness`): keyed file logs only (a
    /// server store's lines are its own to keep). Failing to write it is a
    /// warning: the mark only catches cuts, and a missing one is no claim.
    fn mark_head(&mut self) {
        let Some(key) = self.key.as_ref() else { return };
        if self.read_only || self.storage.compares_head() || self.history.len() <= self.witnessed {
            return;
        }
        // After another writer's failed fsync this one's may succeed while
        // pages the other wrote never reached the disk (an fsync error is
        // reported once per descriptor): no mark until recovery examined
        // the log, nor on a sealed one (its log may be pruned already).
        if matches!(self.poison_marker(), Ok(Some(_))) || matches!(self.seal_marker(), Ok(Some(_))) {
            return;
        }
        let mark = witness::Mark {
            records: self.history.len(),
            offset: self.read_offset,
            last_line: self.last_line,
            check: self.last_check,
        };
        match self.storage.write_sidecar(Sidecar::Head, &witness::encode(&mark, key)) {
            Ok(()) => self.witnessed = mark.records,
            Err(error) => tracing::warn!(path = %self.path, "the head mark could not be written: {error}"),
        }
    }

    /// Starts this handle at the log's checkpoint, if it has one that
    /// verifies; true when it did.
    fn start_at_checkpoint(&mut self) -> bool {
        let bytes = match self.storage.read_sidecar(Sidecar::Checkpoint) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return false,
            Err(error) => {
                tracing::warn!(path = %self.path, "the checkpoint cannot be read ({error}); reading the whole log");
                return false;
            }
        };
        let length = match self.storage.length() {
            Ok(length) => length,
            Err(_) => return false,
        };
        let storage = &self.storage;
        let verified = checkpoint::verify(&bytes, self.key.as_ref(), length, |position, start, end| {
            storage.read_line(position, start, end)
        });
        match verified {
            Ok(found) => {
                self.history = found.history;
                self.base = found.records;
                self.checkpointed = found.records;
                self.read_offset = found.offset;
                self.last_line = found.last_line;
                self.last_check = found.head;
                self.pinned = found.open.into_iter().map(|framed| (framed.position, framed)).collect();
                true
            }
            Err(why) => {
                tracing::warn!(path = %self.path, "the checkpoint is not used ({why}); reading the whole log");
                self.unusable_checkpoint =
                    checkpoint::covered(&bytes[..bytes.len().min(checkpoint::HEADER_BYTES as usize)]);
                false
            }
        }
    }

    /// Forgets everything read, to read the log again from its first record.
    fn restart(&mut self) {
        self.history = History::new();
        self.records.clear();
        self.base = 0;
        self.pinned.clear();
        self.read_offset = 0;
        self.last_line = 0;
        self.last_check = scan::genesis();
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
        self.storage.lock(kind).map_err(self.io("flock"))?;
        self.locked(f)
    }

    /// Runs `f` under the lock this handle holds, and releases it.
    fn locked<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, LogError>) -> Result<T, LogError> {
        let result = f(self);
        // flock is released on close too, so a failed unlock cannot leak the
        // lock past this handle; it is worth a warning, not an error.
        if let Err(error) = self.storage.unlock() {
            tracing::warn!(path = %self.path, "unlocking the effect log failed: {error}");
        }
        result
    }

    /// Steps 1 and 7 for an append of `batch` on a file: takes the
    /// exclusive lock, and while another writer holds it, reads ahead what
    /// has been appended ([`EffectLog::read_ahead`]), so the decoding and
    /// verifying a merge needs is done while waiting, not while holding the
    /// lock every other writer waits for. Then runs `f` under the lock; its
    /// merge keeps what was read ahead only if it is still the log's. What
    /// `f` passed over is admitted once the lock is released
    /// ([`EffectLog::catch_up`]).
    ///
    /// A batch that may pass over others' lines ([`EffectLog::may_pass_over`])
    /// waits for the lock without reading ahead: its decoding is after the
    /// lock either way, and decoding while others hold it only competes for
    /// the CPU with the writer holding it (issue 18: eight writer processes
    /// on two cores made 2.6-11% more claims a second without it). If it does
    /// not pass over after all, its merge decodes under the lock.
    fn with_append_lock(
        &mut self,
        batch: &[(&str, &Record)],
        f: impl FnOnce(&mut Self) -> Result<Wrote, LogError>,
    ) -> Result<Wrote, LogError> {
        if self.storage.compares_head() {
            return self.with_lock(LockKind::Exclusive, f);
        }
        let locked = if self.may_pass_over(batch) {
            self.storage.lock(LockKind::Exclusive)
        } else {
            let mut rounds = 0;
            loop {
                match self.storage.try_lock_exclusive() {
                    Ok(true) => break Ok(()),
                    Ok(false) if rounds < READ_AHEAD_ROUNDS && self.read_ahead() => rounds += 1,
                    Ok(false) => break self.storage.lock(LockKind::Exclusive),
                    Err(error) => break Err(error),
                }
            }
        };
        let result = match locked {
            Ok(()) => self.locked(f),
            Err(source) => Err(LogError::Io { path: self.path.clone(), operation: "flock", source }),
        };
        self.drop_read_ahead();
        let passed = self.passed.take();
        match (result, passed) {
            (Ok(wrote), Some(passed)) => {
                let caught_up = self.catch_up(passed);
                self.caught_up_failed |= caught_up.is_err();
                caught_up.map(|()| wrote)
            }
            // What was passed over is left unread, to be merged again.
            (result, _) => result,
        }
    }

    /// The rest of an append that passed over others' lines (step 3 for a
    /// claim, [`EffectLog::pass_over`]), after the lock: decodes, verifies
    /// and admits those lines as a merge would, then admits the batch
    /// written after them. A line that does not decode is corruption, and
    /// the batch is not answered as written (its claims must not be acted
    /// on): nothing is trusted that decoding has not verified.
    fn catch_up(&mut self, passed: Passed) -> Result<(), LogError> {
        let torn = self.absorb(passed.bytes, false)?;
        let Some((head, prepared)) = passed.ours else { return Ok(()) };
        let refused = |log: &Self, reason: String| LogError::Corrupt {
            path: log.path.clone(),
            line: head.records + 1,
            offset: head.offset,
            reason,
        };
        if torn > 0 || self.history.len() != head.records {
            // pass_over took only complete lines without zeros whose frames
            // verified in place, each a record unless a writer made it
            // otherwise; scan stops only at a defect.
            let reason = "the lines this append passed over did not all read as records".to_owned();
            return Err(refused(self, reason));
        }
        self.history.begin();
        for framed in &prepared.accepted {
            if let Err(error) = self.history.admit(&framed.run_id, &framed.record) {
                // History::admits_claim_alone said this cannot happen.
                self.history.rollback();
                return Err(refused(
                    self,
                    format!("a claim written after others' records is refused by them: {error}"),
                ));
            }
        }
        self.appended(head, prepared);
        Ok(())
    }

    /// Reads, without the lock, the complete lines appended after what this
    /// handle has read (and read ahead), and decodes, verifies and admits
    /// them as a merge would, in a history journal left open. True when it
    /// found new records. Anything it cannot take as records (a line being
    /// written, damage, a log that shrank) ends reading ahead and drops what
    /// was read ahead; the merge under the lock is the judge of those.
    fn read_ahead(&mut self) -> bool {
        let (offset, prev) = match &self.ahead {
            Some(ahead) => (self.read_offset + ahead.bytes.len() as u64, ahead.scanned.last_check),
            None => (self.read_offset, self.last_check),
        };
        let head = Head { records: self.history.len(), offset };
        let bytes = match self.storage.read_after(head) {
            Ok(After::Bytes(bytes)) if !bytes.is_empty() => bytes,
            Ok(After::Bytes(_)) => return false,
            Ok(After::Shrank { .. }) | Err(_) => {
                self.drop_read_ahead();
                return false;
            }
        };
        if self.ahead.is_none() {
            self.history.begin();
        }
        match scan(&bytes, offset, prev, self.key.as_ref(), &mut self.history) {
            Ok(scanned) if !scanned.records.is_empty() => {
                let lines = &bytes[..scanned.consumed as usize];
                match &mut self.ahead {
                    None => self.ahead = Some(ReadAhead { bytes: lines.to_vec(), scanned }),
                    Some(ahead) => {
                        ahead.bytes.extend_from_slice(lines);
                        let so_far = &mut ahead.scanned;
                        so_far.records.extend(scanned.records);
                        so_far.consumed += scanned.consumed;
                        so_far.last_check = scanned.last_check;
                        so_far.last_start = scanned.last_start.or(so_far.last_start);
                    }
                }
                true
            }
            Ok(_) => {
                if self.ahead.is_none() {
                    self.history.rollback(); // nothing was admitted
                }
                false
            }
            Err(_) => {
                // The journal is open (begun above or by an earlier round).
                self.history.rollback();
                self.ahead = None;
                false
            }
        }
    }

    /// Undoes what was read ahead and not merged.
    fn drop_read_ahead(&mut self) {
        if self.ahead.take().is_some() {
            self.history.rollback();
        }
    }

    /// Keeps what was read ahead if `bytes`, read under the lock at this
    /// handle's head, start with exactly the bytes it was read from (then
    /// they are the same records; a writer's failed append cut back and
    /// written over would differ, if only in the chain); otherwise drops
    /// it. Returns the bytes still to absorb.
    fn confirm_read_ahead(&mut self, mut bytes: Vec<u8>) -> Vec<u8> {
        let Some(ahead) = self.ahead.take() else {
            return bytes;
        };
        if !bytes.starts_with(&ahead.bytes) {
            self.history.rollback();
            return bytes;
        }
        self.history.commit();
        bytes.drain(..ahead.bytes.len());
        self.take_scanned(ahead.scanned);
        bytes
    }

    /// Step 2: read and admit what others appended. Returns the length of a
    /// torn tail found at the end (0 if none). With `repair` (only under the
    /// exclusive lock) that tail is preserved in `<log>.broken` and cut off.
    fn merge(&mut self, repair: bool) -> Result<u64, LogError> {
        let bytes = self.read_new()?;
        self.absorb(bytes, repair)
    }

    /// The first half of a merge: the bytes after this handle's head, less
    /// what reading ahead already admitted (if they still start with it).
    fn read_new(&mut self) -> Result<Vec<u8>, LogError> {
        let read = self.storage.read_after(self.head());
        let bytes = match read.map_err(self.io("read"))? {
            After::Bytes(bytes) => self.confirm_read_ahead(bytes),
            After::Shrank { length } => {
                self.drop_read_ahead();
                return Err(LogError::Corrupt {
                    path: self.path.clone(),
                    line: self.history.len() + 1,
                    offset: length,
                    reason: format!("the log shrank to {length} bytes under records this handle had read"),
                });
            }
        };
        Ok(bytes)
    }

    /// Step 3 for an append of claims: passes over `bytes`, others' lines
    /// read under the lock, without decoding them there, when that cannot
    /// change what the append does (issue 18: with many writers on one
    /// lineage, decoding every other writer's records under the lock made
    /// the lock, not the disk, the limit). The append then takes its
    /// positions after their count and chains from the last one's check,
    /// and [`EffectLog::catch_up`] decodes and admits them, and the batch
    /// after them, once the lock is released. Only when:
    /// - every record of the batch is a claim the history admits or refuses
    ///   on its own ([`History::admits_claim_alone`]): validation (step 5)
    ///   answers the same before and after those lines;
    /// - for `claim_once`, no line can hold a claim of its request id: the
    ///   id, as the string token the encoder writes, is nowhere in them,
    ///   and neither is an escape (`\u`, `\/`) that could spell it
    ///   otherwise;
    /// - the lines are complete, hold no zero byte (no torn tail to cut),
    ///   and each one's frame verifies in its place: position, checksum
    ///   or HMAC, chain ([`scan::pass_over`]), so damage is refused here;
    /// - no earlier catch-up of this handle failed: a line that frames
    ///   right but is no record (only a writer could make one) is not
    ///   passed over again and again, with a claim written after it each
    ///   time.
    ///
    /// Answers the bytes back when it does not pass them over.
    fn pass_over(
        &mut self,
        bytes: Vec<u8>,
        batch: &[(&str, &Record)],
        once: Option<&str>,
    ) -> Result<(), Vec<u8>> {
        if bytes.is_empty() || !self.may_pass_over(batch) {
            return Err(bytes);
        }
        if let Some(request_id) = once {
            // The id as a whole string token, wherever it stands: JSON may
            // put whitespace around a key's colon, but not inside a string.
            let spelled = serde_json::to_string(request_id).expect("a string serializes");
            let mentions = |pattern: &[u8]| memchr::memmem::find(&bytes, pattern).is_some();
            if mentions(spelled.as_bytes()) || mentions(br"\u") || mentions(br"\/") {
                return Err(bytes);
            }
        }
        match scan::pass_over(&bytes, self.history.len(), self.last_check, self.key.as_ref()) {
            Some(over) => {
                self.passed = Some(Passed { bytes, over, ours: None });
                Ok(())
            }
            None => Err(bytes),
        }
    }

    /// Whether an append of `batch` may pass over others' lines, whatever
    /// they are ([`EffectLog::pass_over`] also reads the lines): no earlier
    /// catch-up of this handle failed, and every record of the batch is a
    /// claim the history admits or refuses on its own.
    fn may_pass_over(&self, batch: &[(&str, &Record)]) -> bool {
        let alone = |(run_id, record): &(&str, &Record)| match record {
            Record::Claim(claim) => self.history.admits_claim_alone(run_id, claim),
            _ => false,
        };
        !self.caught_up_failed && !batch.is_empty() && batch.iter().all(alone)
    }

    /// Where an append writes: this handle's head, past what it passed over.
    fn write_head(&self) -> Head {
        match &self.passed {
            None => self.head(),
            Some(passed) => Head {
                records: self.history.len() + passed.over.lines,
                offset: self.read_offset + passed.bytes.len() as u64,
            },
        }
    }

    /// Where this handle's reading stands.
    fn head(&self) -> Head {
        Head { records: self.history.len(), offset: self.read_offset }
    }

    /// Decodes and admits `bytes`, read at this handle's head; the rest of
    /// [`EffectLog::merge`].
    fn absorb(&mut self, bytes: Vec<u8>, repair: bool) -> Result<u64, LogError> {
        if bytes.is_empty() {
            return Ok(0);
        }
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
        let (consumed, torn) = (scanned.consumed, scanned.torn);
        self.take_scanned(scanned);
        if torn > 0 && repair {
            let torn_bytes = &bytes[consumed as usize..];
            self.storage.keep_torn(torn_bytes).map_err(self.io("preserving a torn tail"))?;
            if let Err(source) = self.storage.cut(self.read_offset) {
                // LOG-4's rule for any failed fsync: the log is poisoned.
                self.mark_poisoned(&source);
                return Err(self.durability_unknown(source));
            }
            tracing::warn!(path = %self.path, bytes = torn, "cut a torn tail left by a crashed writer");
        }
        Ok(torn)
    }

    /// Makes the records a scan admitted (and its history journal committed)
    /// this handle's: they follow what it had read.
    fn take_scanned(&mut self, scanned: Scanned) {
        if self.records.is_empty() {
            self.records = scanned.records; // a load: moved, not copied
        } else {
            self.records.extend(scanned.records);
        }
        self.read_offset += scanned.consumed;
        self.last_check = scanned.last_check;
        if let Some(start) = scanned.last_start {
            self.last_line = start;
        }
    }

    /// Steps 1-8 for one record.
    fn append(&mut self, run_id: &str, record: &Record) -> Result<Position, LogError> {
        self.append_batch(&[(run_id, record)]).pop().expect("one result per record")
    }

    /// Steps 1-8 for a batch under one lock, one write and at most one fsync
    /// (group commit). Each record is validated against the history as
    /// extended by the batch's earlier records; a refused record gets its own
    /// [`LogError::Rejected`] and the rest go on. A failed write fails every
    /// record of the batch (cut back, [`LogError::Persistence`]); a failed
    /// fsync fails every record of it with [`LogError::DurabilityUnknown`] and
    /// poisons the log. Results are in input order.
    pub fn append_batch(&mut self, batch: &[(&str, &Record)]) -> Vec<Result<Position, LogError>> {
        if self.poisoned {
            let detail = self.poisoned_detail();
            let refused = || self.poisoned_by(detail.clone());
            return batch.iter().map(|_| Err(refused())).collect();
        }
        let bodies = bodies(batch);
        let outcome = self.with_append_lock(batch, |log| {
            log.refuse_and_merge(batch, None)?;
            log.write_batch(batch, &bodies, None)
        });
        let (results, written) = match outcome {
            Ok(Wrote::Batch(results, written)) => (results, written),
            Ok(Wrote::Found(_)) => unreachable!("only claim_once looks for a request's claim"),
            Err(error) => {
                let first = Err(error);
                let path = self.path.clone();
                return std::iter::once(first)
                    .chain(batch.iter().skip(1).map(|_| Err(copy_failure(&path))))
                    .collect();
            }
        };
        if !written {
            return results;
        }
        if !batch.iter().any(|(_, record)| record.durable_on_return()) {
            self.unsynced = true; // LOG-3: rides the next fsync
            return results;
        }
        match self.sync_now() {
            Ok(()) => results,
            Err(source) => {
                let mut failure = Some(self.durability_unknown(fsync_failed(source)));
                results
                    .into_iter()
                    .map(|result| match result {
                        Ok(_) => Err(failure
                            .take()
                            .unwrap_or_else(|| copy_failure_of(&self.path, Some(self.unknown_remedy())))),
                        rejected => rejected,
                    })
                    .collect()
            }
        }
    }

    /// Marks this handle read-only (it was opened so): appends, repairs and
    /// seals are refused up front, never tried on a descriptor that cannot
    /// write (a failed write would poison the log for every writer).
    pub fn set_read_only(&mut self) {
        self.read_only = true;
    }

    fn refuse_if_read_only(&self) -> Result<(), LogError> {
        if self.read_only {
            return Err(LogError::Refused {
                path: self.path.clone(),
                reason: "this handle was opened read-only (a reader, a dry run): nothing is written".into(),
            });
        }
        Ok(())
    }

    /// Steps 2-3 for a file (under the exclusive lock): refuse a poisoned
    /// log and merge, or for claims pass over what others appended
    /// ([`EffectLog::pass_over`]; `once`: `claim_once`'s request id). A
    /// server store does both itself on each append.
    fn refuse_and_merge(&mut self, batch: &[(&str, &Record)], once: Option<&str>) -> Result<(), LogError> {
        self.refuse_if_read_only()?;
        if !self.storage.compares_head() {
            self.refuse_if_poisoned()?;
            self.refuse_if_sealed()?;
            let bytes = self.read_new()?;
            if let Err(bytes) = self.pass_over(bytes, batch, once) {
                self.absorb(bytes, true)?;
            }
            // LOG-6: a writer open since before a cut must not append past
            // it and leave a mark that hides it.
            self.confirm_marks(false)?;
        }
        Ok(())
    }

    /// Step 2 too: a sealed lineage takes no more records, whoever holds a
    /// handle on it (`retention.rs`).
    fn refuse_if_sealed(&self) -> Result<(), LogError> {
        match self.seal_marker()? {
            None => Ok(()),
            Some(detail) => Err(LogError::Sealed { path: self.path.clone(), detail }),
        }
    }

    /// Seals the lineage (retention, `retention.rs`), under the exclusive
    /// lock so no append interleaves: every record is read and verified from
    /// the first (a torn tail is cut, as an append would), a claim still
    /// unsettled or RUNNING refuses the seal, and `archive` is handed the
    /// log's exact bytes and records to write its archive durably. Only
    /// when it succeeds is the seal marker (`marker`, its answer) written,
    /// durably; from then on every append of every handle is refused. A
    /// file store only: a server store's retention is the database's.
    pub fn seal<T>(
        &mut self,
        archive: impl FnOnce(&[u8], &[Framed]) -> Result<(T, String), LogError>,
    ) -> Result<T, LogError> {
        self.refuse_if_read_only()?;
        if self.storage.compares_head() {
            return Err(LogError::Io {
                path: self.path.clone(),
                operation: "seal",
                source: std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "the fleet store keeps its lineages in the database; retention there is the database's",
                ),
            });
        }
        self.with_lock(LockKind::Exclusive, |log| {
            log.refuse_if_poisoned()?;
            log.refuse_if_sealed()?;
            if log.base > 0 {
                log.restart();
            }
            log.merge(true)?;
            // Outcomes that ride the next fsync (LOG-3) are in the file but
            // maybe not on the disk: the archive must not hold what a crash
            // could take from the log.
            log.storage.sync(false).map_err(|source| log.durability_unknown(fsync_failed(source)))?;
            let open: Vec<Position> =
                log.history.unsettled_claims().chain(log.history.running_claims()).collect();
            if !open.is_empty() {
                return Err(LogError::Io {
                    path: log.path.clone(),
                    operation: "seal",
                    source: std::io::Error::other(format!(
                        "claims at positions {open:?} are not settled (unsettled or RUNNING): a lineage is sealed \
                         only once every effect has its outcome; recover or settle them first (`effects log recover`)"
                    )),
                });
            }
            let bytes = match log.storage.read_after(Head { records: 0, offset: 0 }).map_err(log.io("read"))? {
                After::Bytes(bytes) => bytes,
                After::Shrank { length } => {
                    return Err(LogError::Io {
                        path: log.path.clone(),
                        operation: "seal",
                        source: std::io::Error::other(format!("the log shrank to {length} bytes while sealing")),
                    });
                }
            };
            let bytes = &bytes[..(log.read_offset as usize).min(bytes.len())];
            let (answer, marker) = archive(bytes, &log.records)?;
            log.storage.write_sidecar(Sidecar::Sealed, marker.as_bytes()).map_err(log.io("write the seal marker"))?;
            Ok(answer)
        })
    }

    /// The seal marker's text, if the lineage is sealed.
    pub fn seal_marker(&self) -> Result<Option<String>, LogError> {
        self.marker(Sidecar::Sealed, "read the seal marker")
    }

    /// A marker sidecar's text (the poison or the seal marker), trimmed.
    fn marker(&self, which: Sidecar, operation: &'static str) -> Result<Option<String>, LogError> {
        self.storage
            .read_sidecar(which)
            .map(|bytes| bytes.map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned()))
            .map_err(self.io(operation))
    }

    /// Steps 4-7 after [`EffectLog::refuse_and_merge`]: allocates,
    /// validates and frames the batch at this handle's head and appends it.
    /// When a server store answers lines this handle missed, they are merged
    /// and the batch is validated again at the new head, so a claim another
    /// writer made for the request (`once`: run and request id, for
    /// [`EffectLog::claim_once`]) or an outcome it settled is seen before
    /// anything is written. `Err` only when merging the missed lines fails.
    fn write_batch(
        &mut self,
        batch: &[(&str, &Record)],
        bodies: &[frame::Body],
        once: Option<(&str, &str)>,
    ) -> Result<Wrote, LogError> {
        loop {
            if let Some((run_id, request_id)) = once
                && let Some(found) =
                    self.requests.find(self.base, &self.pinned, &self.records, run_id, request_id)
            {
                return Ok(Wrote::Found(found));
            }
            let head = self.write_head();
            let mut prepared = self.prepare(batch, bodies, head);
            if prepared.accepted.is_empty() {
                self.history.commit();
                return Ok(Wrote::Batch(prepared.results, false));
            }
            match self.storage.append_at(head, &prepared.bytes, &prepared.meta) {
                Ok(Written::Appended) => match &mut self.passed {
                    None => return Ok(self.appended(head, prepared)),
                    Some(passed) => {
                        // Admitted again after what was passed over
                        // (catch_up): at the positions it was written at.
                        self.history.rollback();
                        let results = std::mem::take(&mut prepared.results);
                        passed.ours = Some((head, prepared));
                        return Ok(Wrote::Batch(results, true));
                    }
                },
                Ok(Written::Missed(missed)) => {
                    self.history.rollback();
                    self.absorb(missed, false)?;
                }
                Err(failed) => {
                    // LOG-4: not written, or (the cut back or the resend
                    // failed too) unknown, which poisons the log.
                    let failure = match failed.unknown {
                        None => LogError::Persistence { path: self.path.clone(), source: failed.source },
                        Some(cut) => {
                            tracing::error!(path = %self.path, "a failed append may have left lines behind: {cut}");
                            self.mark_poisoned(&cut);
                            self.durability_unknown(failed.source)
                        }
                    };
                    self.history.rollback();
                    let mut failure = Some(failure);
                    let results = prepared
                        .results
                        .into_iter()
                        .map(|result| match result {
                            Ok(_) => Err(failure.take().unwrap_or_else(|| {
                                copy_failure_of(&self.path, self.poisoned.then(|| self.unknown_remedy()))
                            })),
                            rejected => rejected,
                        })
                        .collect();
                    return Ok(Wrote::Batch(results, false));
                }
            }
        }
    }

    /// Steps 4-6: admits each record of the batch to the history (begun,
    /// neither committed nor rolled back) and frames those admitted, to be
    /// written at `head`: past what was passed over, if anything was, whose
    /// records the history does not hold yet.
    fn prepare(&mut self, batch: &[(&str, &Record)], bodies: &[frame::Body], head: Head) -> Prepared {
        let skipped = head.records - self.history.len();
        self.history.begin();
        let mut chain = self.passed.as_ref().map_or(self.last_check, |passed| passed.over.last_check);
        let mut prepared = Prepared {
            bytes: Vec::new(),
            meta: Vec::new(),
            last_line: 0,
            accepted: Vec::new(),
            results: Vec::with_capacity(batch.len()),
        };
        for ((run_id, record), body) in batch.iter().zip(bodies) {
            if let Err(source) = self.history.admit(run_id, record) {
                prepared.results.push(Err(LogError::Rejected { path: self.path.clone(), source }));
                continue;
            }
            let position = self.history.len() - 1 + skipped;
            let (line, check) = frame::encode(position, run_id, body, &chain, self.key.as_ref());
            prepared.last_line = prepared.bytes.len() as u64;
            prepared.bytes.extend_from_slice(&line);
            let settles = match record {
                Record::Outcome(outcome) => {
                    Some((outcome.claim, outcome.outcome.execution == crate::model::Execution::Running))
                }
                _ => None,
            };
            prepared.meta.push(LineMeta {
                prev: chain,
                check,
                settles,
                claim: matches!(record, Record::Claim(_)),
                recovers: matches!(record, Record::Outcome(outcome) if outcome.recovery),
                launch: match record {
                    Record::Claim(claim) => claim.launches().next(),
                    _ => None,
                },
            });
            chain = check;
            prepared.accepted.push(Framed {
                position,
                run_id: (*run_id).to_owned(),
                record: (*record).clone(),
                check,
                line: head.offset + prepared.last_line..head.offset + prepared.bytes.len() as u64,
            });
            prepared.results.push(Ok(position));
        }
        prepared
    }

    /// Step 7's bookkeeping: the prepared batch is in the log at `head`.
    fn appended(&mut self, head: Head, prepared: Prepared) -> Wrote {
        let first = self.history.len() - prepared.accepted.len() as u64;
        self.history.commit();
        if first / CHECKPOINT_EVERY != self.history.len() / CHECKPOINT_EVERY {
            self.crossed = true;
        }
        self.last_check = prepared.accepted.last().expect("a written batch has records").check;
        self.records.extend(prepared.accepted);
        self.read_offset = head.offset + prepared.bytes.len() as u64;
        self.last_line = head.offset + prepared.last_line;
        Wrote::Batch(prepared.results, true)
    }

    /// Step 8: fsyncs the file (and, the first time, its directory). A
    /// failure poisons the log.
    fn sync_now(&mut self) -> std::io::Result<()> {
        let at = (self.history.len(), self.read_offset);
        match self.storage.sync(!self.directory_synced) {
            Ok(()) => {
                self.directory_synced = true;
                self.unsynced = false;
                self.synced = at;
                self.mark_head();
                self.checkpoint_if_due();
                Ok(())
            }
            Err(source) => {
                // The lock is not held here (step 8): take it to leave the
                // marker, so a writer that locks after us sees it.
                let marked = self.with_lock(LockKind::Exclusive, |log| {
                    log.mark_poisoned(&source);
                    Ok(())
                });
                if let Err(error) = marked {
                    tracing::error!(path = %self.path, "locking to mark the log poisoned failed: {error}");
                    self.poisoned = true;
                }
                Err(source)
            }
        }
    }

    /// Whether a writer's checkpoint is due: it keeps them, and its own
    /// append crossed a boundary, or it knows of none within
    /// [`CHECKPOINT_LAG`] records of what it read.
    fn checkpoint_due(&self) -> bool {
        self.checkpoints == Checkpoints::Keep
            && self.history.len() > self.checkpointed
            && self.history.len() >= self.put_off_until
            && (self.crossed || self.history.len() >= self.checkpointed + CHECKPOINT_LAG)
    }

    /// [`EffectLog::checkpoint_due`], where a lagging writer first looks at
    /// the checkpoint on disk: another writer's newer one is left be.
    /// Answers the open claims the checkpoint names when one is due (found
    /// once: weighing its size needs them too).
    ///
    /// A checkpoint holds a byte per record and names every open claim, so
    /// writing one every [`CHECKPOINT_EVERY`] records costs more the longer
    /// the log, and more still where claims stay open (a run of launches,
    /// writers that never settle): 100,000 claims from one process took
    /// 34 s, about half of it beyond their fsyncs. So one that would cost more
    /// than [`checkpoint::BYTES_PER_RECORD`] per record appended since the
    /// newest one on disk is put off, and looked at again a boundary later:
    /// what checkpoints write stays proportional to what is appended. A log
    /// of settled claims keeps one every 256 records up to about 131,000
    /// records; one whose claims all stay open, up to about 1,000.
    fn checkpoint_still_due(&mut self) -> Option<Vec<Position>> {
        if !self.checkpoint_due() {
            return None;
        }
        if !self.crossed {
            self.look_for_newer_checkpoint();
            if !self.checkpoint_due() {
                return None;
            }
        }
        let open: Vec<Position> = self.history.open_claims().collect();
        let spacing =
            checkpoint::size_of(self.history.len(), open.len() as u64) / checkpoint::BYTES_PER_RECORD;
        if spacing <= CHECKPOINT_EVERY {
            return Some(open);
        }
        if self.crossed {
            // Another boundary's writer may have written one since.
            self.look_for_newer_checkpoint();
        }
        let spacing = if self.crossed { spacing } else { spacing.max(CHECKPOINT_LAG) };
        if self.history.len() >= self.checkpointed + spacing {
            return Some(open);
        }
        // Looked at again at the next boundary, not at every fsync.
        self.crossed = false;
        self.put_off_until = (self.history.len() / CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY;
        None
    }

    /// Counts the checkpoint on disk as known when it covers more than the
    /// newest this handle knows of (its head only, unverified: it decides
    /// when to write one, never what is read), unless it is the one this
    /// handle found unusable (a crash can tear a checkpoint and leave its
    /// head whole; counted, it would put off the one that replaces it).
    fn look_for_newer_checkpoint(&mut self) {
        if let Ok(Some(head)) = self.storage.read_sidecar_head(Sidecar::Checkpoint, checkpoint::HEADER_BYTES)
            && let Some(covered) = checkpoint::covered(&head)
            && Some(covered) != self.unusable_checkpoint
        {
            self.checkpointed = self.checkpointed.max(covered.min(self.history.len()));
        }
    }

    /// LOG-10: writes a checkpoint over everything this handle has read or
    /// written, when one is due. Called right after a successful fsync, so
    /// all of it is durable. A checkpoint only saves work: failing to write
    /// one is a warning.
    fn checkpoint_if_due(&mut self) {
        let Some(claims) = self.checkpoint_still_due() else { return };
        let mut open = Vec::with_capacity(claims.len());
        for claim in claims {
            let Some(framed) = self.record(claim) else {
                tracing::warn!(path = %self.path, claim, "no checkpoint: an open claim's record is not at hand");
                return;
            };
            open.push(framed);
            if let Some(processes) = self.processes_framed(claim) {
                open.push(processes);
            }
        }
        let cover = checkpoint::Cover {
            records: self.history.len(),
            offset: self.read_offset,
            last_line: self.last_line,
            head: self.last_check,
            history: &self.history,
            open,
        };
        let bytes = checkpoint::encode(&cover, self.key.as_ref());
        match self.storage.write_sidecar(Sidecar::Checkpoint, &bytes) {
            Ok(()) => {
                self.checkpointed = self.history.len();
                self.crossed = false;
            }
            Err(error) => tracing::warn!(path = %self.path, "the checkpoint could not be written: {error}"),
        }
    }

    /// Makes every record this handle has read or written durable: one
    /// fsync of the file, which covers other writers' bytes too (LOG-3: what
    /// a decision is made over, and what a process ends with). A failure
    /// poisons the log and is [`LogError::DurabilityUnknown`].
    pub fn sync(&mut self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(self.poisoned_error());
        }
        self.sync_now().map_err(|source| self.durability_unknown(fsync_failed(source)))
    }

    /// Whether this handle appended records no fsync of its own covered yet.
    pub fn has_unsynced(&self) -> bool {
        self.unsynced
    }

    /// LOG-4: poisons this handle and leaves the marker that poisons the log
    /// for every other writer. Called with the exclusive lock held. The
    /// marker says from where durability is unknown: everything before this
    /// handle's last successful fsync was durable then.
    ///
    /// A server store leaves no marker: what it acknowledged is durable and
    /// what it holds every writer reads alike, so only the handle that cannot
    /// tell whether its own lines landed is in doubt.
    fn mark_poisoned(&mut self, source: &std::io::Error) {
        self.poisoned = true;
        if self.storage.compares_head() {
            return;
        }
        let marker = serde_json::json!({
            "error": source.to_string(),
            "pid": std::process::id(),
            "unknown_from_position": self.synced.0,
            "unknown_from_offset": self.synced.1,
            // What this handle read, and passed over if it did: where a
            // write of its that failed would have started.
            "through_offset": self.write_head().offset,
        });
        let bytes = format!("{marker}\n");
        if let Err(error) = self.storage.write_sidecar(Sidecar::Poisoned, bytes.as_bytes()) {
            tracing::error!(
                path = %self.path,
                "an fsync of the log failed ({source}) and the poison marker could not be written ({error}); \
                 this handle refuses appends, other writers may not know"
            );
        }
    }

    /// Step 2: a marker left by any writer's failed fsync refuses the append.
    fn refuse_if_poisoned(&mut self) -> Result<(), LogError> {
        match self.poison_marker()? {
            None => Ok(()),
            // Not this handle's own failure: once `effects log recover` has
            // cleared the marker, this handle appends again.
            Some(detail) => Err(self.poisoned_by(detail)),
        }
    }

    /// LOG-4's "durability unknown" for this log, with what its store needs
    /// before anything appends again.
    fn durability_unknown(&self, source: std::io::Error) -> LogError {
        LogError::DurabilityUnknown { path: self.path.clone(), source, remedy: self.unknown_remedy() }
    }

    fn unknown_remedy(&self) -> &'static str {
        if self.storage.compares_head() {
            super::error::UNKNOWN_ON_SERVER
        } else {
            super::error::UNKNOWN_ON_FILE
        }
    }

    fn poisoned_error(&self) -> LogError {
        self.poisoned_by(self.poisoned_detail())
    }

    fn poisoned_by(&self, detail: String) -> LogError {
        LogError::Poisoned { path: self.path.clone(), detail, remedy: self.unknown_remedy() }
    }

    /// The poison marker's text, or what this handle saw itself.
    fn poisoned_detail(&self) -> String {
        match self.poison_marker() {
            Ok(Some(marker)) => marker,
            _ => "this handle's own append was not confirmed durable".to_owned(),
        }
    }

    /// The poison marker's text, if the log is poisoned (LOG-4).
    pub fn poison_marker(&self) -> Result<Option<String>, LogError> {
        self.marker(Sidecar::Poisoned, "read the poison marker")
    }

    /// The operator's answer to a poisoned log (`effects log recover`):
    /// under the exclusive lock, reads whatever this handle has not read yet
    /// strictly (a torn tail is cut, corruption fails closed and keeps the
    /// poison), fsyncs the whole file again, and only when that succeeds
    /// removes the marker. Returns the marker it cleared, if any. What it
    /// cannot know: Linux may keep pages it failed to write back readable in
    /// its cache, so records read here after a failed fsync may still be
    /// missing from the disk; the marker's offsets name those records.
    pub fn clear_poison(&mut self) -> Result<Option<String>, LogError> {
        self.refuse_if_read_only()?;
        let marker = self.poison_marker()?;
        if marker.is_none() && !self.poisoned {
            return Ok(None);
        }
        self.with_lock(LockKind::Exclusive, |log| {
            log.merge(true)?;
            log.storage.sync(false).map_err(|source| log.durability_unknown(fsync_failed(source)))?;
            log.storage.remove_sidecar(Sidecar::Poisoned).map_err(|source| LogError::Io {
                path: log.path.clone(),
                operation: "remove the poison marker",
                source,
            })?;
            log.poisoned = false;
            log.unsynced = false;
            log.synced = (log.history.len(), log.read_offset);
            Ok(())
        })?;
        Ok(marker.or_else(|| Some("this handle's own fsync failed".to_owned())))
    }

    /// Appends a claim; durable when it returns (LOG-3), and with it every
    /// record written before it. On any error the caller must not run the
    /// backend (LOG-4).
    pub fn claim(&mut self, run_id: &str, claim: ClaimRecord) -> Result<Position, LogError> {
        self.append(run_id, &Record::Claim(claim))
    }

    /// EMB-3: appends `claim` unless `run_id` already has a claim with its
    /// request id, and answers the claim that stands and whether it is this
    /// one. The check and the write are under one exclusive lock, so two
    /// writers claiming one request id at once get one claim. Durable when
    /// it returns either way: an earlier claim another writer made may not
    /// have been fsynced yet, so a found claim is fsynced before it is
    /// answered (EMB-1).
    pub fn claim_once(&mut self, run_id: &str, claim: ClaimRecord) -> Result<(Position, bool), LogError> {
        if self.poisoned {
            return Err(self.poisoned_error());
        }
        let request_id = claim.operation.request_id.clone();
        let record = Record::Claim(claim);
        let batch = [(run_id, &record)];
        let bodies = bodies(&batch);
        let outcome = self.with_append_lock(&batch, |log| {
            log.refuse_and_merge(&batch, Some(&request_id))?;
            log.write_batch(&batch, &bodies, Some((run_id, &request_id)))
        })?;
        let (position, fresh) = match outcome {
            Wrote::Found(found) => (found, false),
            Wrote::Batch(mut results, _) => (results.pop().expect("one result per record")?, true),
        };
        self.sync_now().map_err(|source| self.durability_unknown(fsync_failed(source)))?;
        Ok((position, fresh))
    }

    /// EMB-3: the first claim of `request_id` in `run` among the records
    /// this handle holds, as of its last merge ([`EffectLog::refresh`]).
    pub fn claim_of_request(&mut self, run_id: &str, request_id: &str) -> Option<Position> {
        self.requests.find(self.base, &self.pinned, &self.records, run_id, request_id)
    }

    /// The outcome that settled the claim at `claim`, if this handle holds it.
    pub fn outcome_of(&self, claim: Position) -> Option<(Position, &OutcomeRecord)> {
        let from = claim.saturating_sub(self.base) as usize;
        self.records[from.min(self.records.len())..].iter().find_map(|framed| match &framed.record {
            Record::Outcome(outcome) if outcome.claim == claim => Some((framed.position, outcome)),
            _ => None,
        })
    }

    /// Appends an outcome, durable with the log's next fsync (LOG-3). A
    /// failure marks `run_id` degraded (LOG-5): its claim stays unsettled on
    /// disk and replays as unknown.
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

    /// Appends observations as one batch (one write); a failure
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
        self.processes_framed(claim).map(|framed| match &framed.record {
            Record::Processes(processes) => processes,
            _ => unreachable!("processes_framed finds processes records only"),
        })
    }

    fn processes_framed(&self, claim: Position) -> Option<&Framed> {
        if !self.history.has_processes(claim) {
            return None;
        }
        let is_its = |framed: &&Framed| matches!(&framed.record, Record::Processes(p) if p.claim == claim);
        let from = claim.saturating_sub(self.base) as usize;
        self.pinned
            .values()
            .find(is_its)
            .or_else(|| self.records[from.min(self.records.len())..].iter().find(is_its))
    }

    /// The record at `position`, if this handle holds it: every record it
    /// read or wrote, and of the part a checkpoint covered only the open
    /// claims and their processes records.
    pub fn record(&self, position: Position) -> Option<&Framed> {
        match position.checked_sub(self.base) {
            Some(index) => self.records.get(index as usize),
            None => self.pinned.get(&position),
        }
    }

    /// Appends a completion decision (POL-4), durable when it returns with
    /// all it was made over (LOG-3). A decision is not evidence: a failure
    /// here leaves the evidence as it was and marks nothing degraded.
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

    /// True after a failed fsync of this handle's own (LOG-4): it never
    /// appends again, whatever the marker says. (A handle that found another
    /// writer's marker refuses appends while the marker is there.)
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The whole history, merged with what other writers appended (under a
    /// shared lock). A torn tail is not read. A handle that started at a
    /// checkpoint reads the part it skipped now, from the first record
    /// (LOG-6 for all of it: a decision is over the whole log).
    pub fn history(&mut self) -> Result<&[Framed], LogError> {
        self.with_lock(LockKind::Shared, |log| {
            if log.base > 0 {
                let kept = (log.history.clone(), log.records.clone(), log.base, log.pinned.clone());
                let at = (log.read_offset, log.last_line, log.last_check);
                log.restart();
                if let Err(error) = log.merge(false) {
                    (log.history, log.records, log.base, log.pinned) = kept;
                    (log.read_offset, log.last_line, log.last_check) = at;
                    return Err(error);
                }
                return Ok(());
            }
            log.merge(false).map(drop)
        })?;
        Ok(&self.records)
    }

    /// Merges what other writers appended (under a shared lock), without
    /// reading what a checkpoint skipped: what [`EffectLog::record`], the
    /// claim states and the runs' roots then answer from.
    pub fn refresh(&mut self) -> Result<(), LogError> {
        self.with_lock(LockKind::Shared, |log| log.merge(false).map(drop))
    }

    /// The history rules' view of the log as of the last merge: claim
    /// states, the runs and their roots, for every record.
    pub fn rules(&self) -> &History {
        &self.history
    }

    /// The first position [`EffectLog::records`] holds: 0 unless the handle
    /// started at a checkpoint.
    pub fn base(&self) -> Position {
        self.base
    }

    /// The byte offset just past the last complete record this handle read.
    pub fn read_offset(&self) -> u64 {
        self.read_offset
    }

    /// The records this handle has read so far, without merging, from
    /// position [`EffectLog::base`] on.
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
        self.refuse_if_read_only()?;
        if self.poisoned {
            return Err(self.poisoned_error());
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
        let unsettled: Vec<Position> = self.history.unsettled_claims().collect();
        for claim in unsettled {
            let Some(framed) = self.record(claim) else { continue };
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
                let (Some(processes), Some(Framed { record: Record::Claim(record), .. })) =
                    (self.processes_of(claim), self.record(claim))
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

impl<S: Store> Drop for EffectLog<S> {
    /// LOG-3: what this handle appended without an fsync becomes durable when
    /// it is dropped at the latest (a process's end). A failure here poisons
    /// the log like any other; nobody is left to tell but the diagnostics.
    fn drop(&mut self) {
        // A writer that read far past its checkpoint (a log from before
        // checkpoints, or others' appends) fsyncs first: a checkpoint covers
        // durable records only.
        if (self.unsynced || self.checkpoint_due())
            && !self.poisoned
            && let Err(error) = self.sync()
        {
            tracing::error!(path = %self.path, "the log's last records may not be durable: {error}");
        }
    }
}
