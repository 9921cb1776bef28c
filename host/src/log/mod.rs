//! The durable effect log (SPEC sections 4, 5, 9: HIS-1, LOG-1..9).
//!
//! One append-only file per root run lineage. Each record is one line of JSON,
//! checksummed and hash-chained (`frame`); the history rules decide which
//! records may follow which (`history`); `scan` reads bytes into records and
//! tells a torn tail from corruption; [`EffectLog`] runs the append protocol
//! (lock, merge, allocate, validate, write, unlock, fsync) over the one
//! medium seam [`Store`] (a byte [`Storage`] file, or a server); `checkpoint` lets a continuing process read only what
//! follows a verified checkpoint (LOG-10); `witness` leaves and confirms the
//! keyed marks that catch a keyed log cut at a record boundary (LOG-6); `file` opens the real file with
//! the LOG-1 checks; `launch` is the launch index (LOG-8), written through
//! `durable`'s whole-file replace.
//!
//! Record format and fsync protocol: see `frame.rs` and `effect_log.rs`; both
//! are written down at the top of those files.

mod checkpoint;
pub mod durable;
mod effect_log;
mod error;
mod file;
mod frame;
mod group;
mod history;
mod launch;
mod pg;
mod record;
mod requests;
mod scan;
mod storage;
mod store;
mod witness;

pub use checkpoint::{BYTES_PER_RECORD, CHECKPOINT_EVERY, CHECKPOINT_LAG};
pub use effect_log::{Checkpoints, EffectLog, Recovery};
pub use error::{LogError, UNKNOWN_ON_FILE, UNKNOWN_ON_SERVER};
pub use file::{
    LineageLog, OpenMode, OpenOptionsLog, check_file, check_run_id, open_effects_dir, open_lineage,
};
pub use frame::{Framed, OperatorKey};
pub use group::GroupLog;
pub use history::{ClaimState, History, HistoryError, HistorySnapshot};
pub use launch::{LaunchIndex, read_launch_index, reserve_launch, write_launch_index};
pub use pg::{APPEND_ONE, LEASE, PgStore, SCHEMA_VERSION, ServerRefusal};
pub use record::{
    ClaimRecord, DecisionDetail, DecisionRecord, EvaluatorRun, Executor, Obligation, ObservationRecord,
    OperationRef, OutcomeRecord, PolicyRef, Position, ProcessesRecord, Record, VerifierRecord,
};
pub use scan::{Defect, Scanned, genesis, scan};
pub use storage::{DiskFile, Faults, LockKind, MemoryFile, Sidecar, Storage};
pub use store::{After, AppendFailed, Head, LineMeta, Medium, Store, Written};
