//! [`Store`]: the effect log's medium, at the level of lines (SPEC 13).
//!
//! [`EffectLog`](super::EffectLog) keeps the history, the chain and the rules;
//! a store keeps the lines. Two kinds exist. A **file** (any byte
//! [`Storage`]: the real [`DiskFile`](super::DiskFile), or the crash model
//! [`MemoryFile`](super::MemoryFile)) is appended to under `flock`: the writer
//! reads what it missed under the exclusive lock, then writes at the end, so
//! the write never finds the head moved. A **server** (the PostgreSQL store)
//! takes no lock: every append says where the writer believes the head is,
//! and the server appends only if it is there, or answers the lines the
//! writer missed ([`Written::Missed`]) so it can merge them, validate again
//! and retry. The same merge, allocate and validate code runs over both.
//!
//! A [`Head`] names a place in the log twice: by records before it and by
//! bytes before it (the file's offset; for a server the sum of its lines'
//! lengths, which it stores beside each line), so the checkpoints of LOG-10
//! work on both.

use std::io;

use super::record::Position;
use super::storage::{LockKind, Sidecar, Storage, read_range};

/// A place in the log: the records and the bytes before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Records before this place (the next record's position).
    pub records: Position,
    /// Bytes before this place.
    pub offset: u64,
}

/// What an append did.
#[derive(Debug)]
pub enum Written {
    /// The lines are in the log, at the head the writer named.
    Appended,
    /// The head had moved on: nothing was written, and these are the lines
    /// appended after the writer's head (a server store's answer).
    Missed(Vec<u8>),
}

/// An append that failed.
#[derive(Debug)]
pub struct AppendFailed {
    /// Why the append failed.
    pub source: io::Error,
    /// `None` when nothing of it is in the log; otherwise why that cannot be
    /// said (a file's cut back failed, a server's answer was lost and could
    /// not be asked again): some of its lines may be durable.
    pub unknown: Option<io::Error>,
}

/// What reading after a head found.
#[derive(Debug)]
pub enum After {
    /// The bytes after the head: complete lines, and for a file perhaps a
    /// torn last line a crashed writer left.
    Bytes(Vec<u8>),
    /// The log is shorter than the head: records a handle read are gone.
    Shrank {
        /// Bytes the log now holds.
        length: u64,
    },
}

/// What the effect log needs from its medium.
pub trait Store {
    /// True for a server: every append compares the head itself, so a writer
    /// appends without locking or reading first, and takes a stale head back
    /// as [`Written::Missed`]. False for a file: the writer merges under the
    /// exclusive lock, and [`Store::append_at`] always appends.
    fn compares_head(&self) -> bool;

    /// Takes the lock, blocking (a server has none).
    fn lock(&self, kind: LockKind) -> io::Result<()>;
    /// Takes the exclusive lock if it is free: `false`, without waiting,
    /// when another handle holds it.
    fn try_lock_exclusive(&self) -> io::Result<bool>;
    /// Releases the lock.
    fn unlock(&self) -> io::Result<()>;
    /// The bytes after `head`.
    fn read_after(&self, head: Head) -> io::Result<After>;
    /// `len` bytes from byte `offset` (fewer only at the end): what
    /// `log export` copies.
    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>>;
    /// The line of the record at `position`, which the caller was told is
    /// at bytes `start..end` (a checkpoint's word, LOG-10, which the caller
    /// then verifies against the line's own position and check). A file
    /// reads those bytes; a store that keeps lines by position may read the
    /// line at `position` instead, and must then answer it only if it is at
    /// `start..end`.
    fn read_line(&self, position: Position, start: u64, end: u64) -> io::Result<Vec<u8>> {
        let _ = position;
        self.read_range(start, end.saturating_sub(start))
    }
    /// Appends `lines` (`count` framed records, each ending in `\n`) at
    /// `head`; `meta` says for each line what a server's backstops check
    /// (its chain, the claim it settles) and its recovery looks for.
    fn append_at(&mut self, head: Head, lines: &[u8], meta: &[LineMeta]) -> Result<Written, AppendFailed>;
    /// Keeps the bytes of a torn tail a crashed writer left (a file's
    /// `<log>.broken`), before [`Store::cut`] removes them.
    fn keep_torn(&mut self, torn: &[u8]) -> io::Result<()>;
    /// Cuts the log back to `at` bytes, durably.
    fn cut(&mut self, at: u64) -> io::Result<()>;
    /// Makes everything appended so far durable; `first` on a handle's first
    /// sync, when a file's directory entry is made durable too.
    fn sync(&mut self, first: bool) -> io::Result<()>;
    /// The sidecar's bytes; `None` when there is none.
    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>>;
    /// The sidecar's first `len` bytes (fewer when it is shorter).
    fn read_sidecar_head(&self, which: Sidecar, len: u64) -> io::Result<Option<Vec<u8>>> {
        Ok(super::storage::head_of(self.read_sidecar(which)?, len))
    }
    /// Replaces the sidecar with `bytes`, durably; except [`Sidecar::Head`],
    /// which a file writes in place and not durably (its seal tells a torn
    /// one).
    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()>;
    /// Removes the sidecar, durably; no error when there is none.
    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()>;
    /// Bytes the log holds, for reports.
    fn length(&self) -> io::Result<u64>;
}

/// What a server store checks of each line it appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineMeta {
    /// The previous record's check.
    pub prev: [u8; 32],
    /// This record's check.
    pub check: [u8; 32],
    /// The claim this line settles, and whether as RUNNING.
    pub settles: Option<(Position, bool)>,
    /// Whether this line is a claim (what a server's recovery looks at).
    pub claim: bool,
    /// Whether this line is recovery's outcome (LOG-7): a server settles
    /// with it only while the claim's writer's lease is still expired.
    pub recovers: bool,
    /// The launch generation a claim names as its dependency (LOG-8): on a
    /// server, the first claim of a lineage naming a generation is that
    /// launch's claim, so the launch index is written with the claim itself.
    pub launch: Option<u64>,
}

/// A byte file is a store: locked with `flock`, appended at its end.
impl<S: Storage> Store for S {
    fn compares_head(&self) -> bool {
        false
    }

    fn lock(&self, kind: LockKind) -> io::Result<()> {
        Storage::lock(self, kind)
    }

    fn try_lock_exclusive(&self) -> io::Result<bool> {
        Storage::try_lock_exclusive(self)
    }

    fn unlock(&self) -> io::Result<()> {
        Storage::unlock(self)
    }

    fn read_after(&self, head: Head) -> io::Result<After> {
        let length = Storage::length(self)?;
        if length < head.offset {
            return Ok(After::Shrank { length });
        }
        read_range(self, head.offset, length - head.offset).map(After::Bytes)
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        read_range(self, offset, len)
    }

    fn append_at(&mut self, head: Head, lines: &[u8], _meta: &[LineMeta]) -> Result<Written, AppendFailed> {
        match self.write_at(head.offset, lines) {
            Ok(()) => Ok(Written::Appended),
            // LOG-4: not written. Cut back whatever part landed, durably; if
            // even that fails, complete lines may survive.
            Err(source) => {
                let unknown = self.truncate(head.offset).and_then(|()| Storage::sync(self)).err();
                Err(AppendFailed { source, unknown })
            }
        }
    }

    fn keep_torn(&mut self, torn: &[u8]) -> io::Result<()> {
        self.preserve_broken(torn)
    }

    fn cut(&mut self, at: u64) -> io::Result<()> {
        self.truncate(at)?;
        Storage::sync(self)
    }

    fn sync(&mut self, first: bool) -> io::Result<()> {
        Storage::sync(self)?;
        if first { self.sync_directory() } else { Ok(()) }
    }

    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>> {
        Storage::read_sidecar(self, which)
    }

    fn read_sidecar_head(&self, which: Sidecar, len: u64) -> io::Result<Option<Vec<u8>>> {
        Storage::read_sidecar_head(self, which, len)
    }

    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()> {
        Storage::write_sidecar(self, which, bytes)
    }

    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()> {
        Storage::remove_sidecar(self, which)
    }

    fn length(&self) -> io::Result<u64> {
        Storage::length(self)
    }
}

/// The store a lineage's log is on, chosen when it is opened: the embedded
/// default (a file in the data dir) or the fleet store.
pub enum Medium {
    /// `DATA_DIR/effects/<lineage>.log`.
    File(super::DiskFile),
    /// The lineage on a PostgreSQL server (SPEC 13).
    Server(super::pg::PgStore),
}

/// Every call goes to the medium's store.
macro_rules! by_medium {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            Medium::File($store) => $call,
            Medium::Server($store) => $call,
        }
    };
}

impl Store for Medium {
    fn compares_head(&self) -> bool {
        by_medium!(self, store => store.compares_head())
    }

    fn lock(&self, kind: LockKind) -> io::Result<()> {
        by_medium!(self, store => Store::lock(store, kind))
    }

    fn try_lock_exclusive(&self) -> io::Result<bool> {
        by_medium!(self, store => Store::try_lock_exclusive(store))
    }

    fn unlock(&self) -> io::Result<()> {
        by_medium!(self, store => Store::unlock(store))
    }

    fn read_after(&self, head: Head) -> io::Result<After> {
        by_medium!(self, store => store.read_after(head))
    }

    fn read_range(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        by_medium!(self, store => Store::read_range(store, offset, len))
    }

    fn read_line(&self, position: Position, start: u64, end: u64) -> io::Result<Vec<u8>> {
        by_medium!(self, store => store.read_line(position, start, end))
    }

    fn append_at(&mut self, head: Head, lines: &[u8], meta: &[LineMeta]) -> Result<Written, AppendFailed> {
        by_medium!(self, store => store.append_at(head, lines, meta))
    }

    fn keep_torn(&mut self, torn: &[u8]) -> io::Result<()> {
        by_medium!(self, store => store.keep_torn(torn))
    }

    fn cut(&mut self, at: u64) -> io::Result<()> {
        by_medium!(self, store => store.cut(at))
    }

    fn sync(&mut self, first: bool) -> io::Result<()> {
        by_medium!(self, store => Store::sync(store, first))
    }

    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>> {
        by_medium!(self, store => Store::read_sidecar(store, which))
    }

    fn read_sidecar_head(&self, which: Sidecar, len: u64) -> io::Result<Option<Vec<u8>>> {
        by_medium!(self, store => Store::read_sidecar_head(store, which, len))
    }

    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()> {
        by_medium!(self, store => Store::write_sidecar(store, which, bytes))
    }

    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()> {
        by_medium!(self, store => Store::remove_sidecar(store, which))
    }

    fn length(&self) -> io::Result<u64> {
        by_medium!(self, store => Store::length(store))
    }
}
