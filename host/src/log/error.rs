//! Errors of the effect log. Persistence failures are split the way LOG-4
//! splits them: a failed write is "not written" (truncated back), a failed fsync
//! is "durability unknown" (truncated back, handle poisoned).

use std::io;

use super::history::HistoryError;
use super::record::Position;

/// What a local log needs after [`LogError::DurabilityUnknown`].
pub const UNKNOWN_ON_FILE: &str =
    "the log accepts no more appends until `effects log recover` has examined its tail";

/// What a fleet store needs after [`LogError::DurabilityUnknown`]: the
/// server's log is whole (it commits an append or none of it), so only this
/// handle stops; the claim, if it landed, is recovered once its lease ends.
pub const UNKNOWN_ON_SERVER: &str = "this handle appends no more (a ledger drops it and opens a new one for its \
     next call, which reads what the server holds); an unsettled claim it made is recovered once its lease has \
     expired";

/// An effect-log failure.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Opening, reading or locking failed.
    #[error("{path}: {operation}: {source}")]
    Io {
        /// The log or directory.
        path: String,
        /// What was being done.
        operation: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file is not one the log may use (LOG-1, LOG-9).
    #[error("{path}: refused: {reason}")]
    Refused {
        /// The path.
        path: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A damaged record (LOG-6): never accepted, never repaired automatically.
    #[error("{path}: line {line} (byte {offset}): {reason}")]
    Corrupt {
        /// The log.
        path: String,
        /// 1-based line number.
        line: u64,
        /// Byte offset of the line.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A keyed mark beside the log (its head mark or its checkpoint, sealed
    /// with the operator key) names records the log no longer holds: it was
    /// cut at a record boundary, or cut and written on (LOG-6,
    /// `log::witness`). Nothing read from it is trusted.
    #[error(
        "{path}: records are missing from its end: {witness}, sealed with the operator key, vouches for {records} records, but {detail}. \
         The log was cut back (whole records need no key to remove), so nothing read from it is trusted. \
         Restore the log from a copy that holds those records; if you cut it yourself on purpose, move {witness} aside (and the log's other keyed mark, its .head or .checkpoint, if that refuses it too)"
    )]
    Cut {
        /// The log.
        path: String,
        /// The sidecar holding the mark.
        witness: String,
        /// Records the mark vouches for.
        records: Position,
        /// What the log holds instead.
        detail: String,
    },
    /// The record could not be written; the file was cut back (LOG-4). For a
    /// claim, the dispatcher answers BLOCKED and never runs the backend.
    #[error("{path}: record not persisted: {source}")]
    Persistence {
        /// The log.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// An fsync failed, a failed write could not be cut back, or a server's
    /// answer was lost and could not be asked again: the record may or may
    /// not be durable, and the log is poisoned (LOG-4): for every writer of
    /// a local log, for this handle on a fleet store.
    #[error("{path}: durability unknown: {source}; the record may or may not be durable, and {remedy}")]
    DurabilityUnknown {
        /// The log.
        path: String,
        /// What failed.
        source: io::Error,
        /// What appends again, by the store: [`UNKNOWN_ON_FILE`] or
        /// [`UNKNOWN_ON_SERVER`].
        remedy: &'static str,
    },
    /// An earlier [`LogError::DurabilityUnknown`], by this writer or (on a
    /// local log) another, poisoned the log (LOG-4): nothing was written.
    #[error(
        "{path}: durability unknown since an earlier append ({detail}): nothing was written, and {remedy}"
    )]
    Poisoned {
        /// The log.
        path: String,
        /// The poison marker, or what this handle saw.
        detail: String,
        /// What appends again, as for [`LogError::DurabilityUnknown`].
        remedy: &'static str,
    },
    /// The lineage is sealed (retention): nothing appends to it again.
    #[error(
        "{path}: the lineage is sealed ({detail}): nothing was written; a sealed lineage takes no more records, so start a new run"
    )]
    Sealed {
        /// The log.
        path: String,
        /// The seal marker.
        detail: String,
    },
    /// The merged history refuses the record (LOG-2).
    #[error("{path}: record refused: {source}")]
    Rejected {
        /// The log.
        path: String,
        /// The rule it breaks.
        source: HistoryError,
    },
}

impl LogError {
    /// True for the failures after which the record is certainly not in the log.
    pub fn not_persisted(&self) -> bool {
        matches!(
            self,
            LogError::Persistence { .. }
                | LogError::Poisoned { .. }
                | LogError::Sealed { .. }
                | LogError::Rejected { .. }
        )
    }
}
