//! The one IO seam of the effect log. [`EffectLog`](super::EffectLog) does all
//! its file work through [`Storage`], so the same append, merge and recovery
//! code runs over the real filesystem ([`DiskFile`]) and over
//! [`MemoryFile`], an in-memory crash model with fault injection (after fjall
//! and redb's test backends).
//!
//! The contract mirrors POSIX: `write_at` may fail after writing part of its
//! bytes (ENOSPC, a short write), `sync` may fail (EIO) and after a failed sync
//! nothing is known about durability, `lock` is `flock(2)`. Beside the log live
//! its [`Sidecar`]s, small files each written whole and durably: the poison
//! marker a failed fsync leaves (LOG-4) and the verified checkpoint (LOG-10).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard};

use cap_std::fs::Dir;
use rustix::fs::{FlockOperation, fdatasync, flock, fsync};

/// Shared or exclusive, as in `flock(2)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Readers merge under a shared lock.
    Shared,
    /// Appends and repairs run under an exclusive lock.
    Exclusive,
}

/// A small file beside the log, named after it (`<log>.poisoned`,
/// `<log>.checkpoint`): written whole and durably, read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sidecar {
    /// LOG-4: an fsync of the log failed; appends are refused until the
    /// operator's recovery has examined the tail.
    Poisoned,
    /// LOG-10: where a reader may start instead of reading the whole log.
    Checkpoint,
    /// LOG-6 under an operator key: how far the log reached at a keyed
    /// writer's last fsync (`witness`). Written in place, not durably: a
    /// crash or a concurrent reader may find it stale or torn, which its
    /// seal tells.
    Head,
    /// The lineage is sealed (retention, `retention.rs`): its archive and
    /// summary are written, and no handle appends again, old or new. Kept
    /// after the lineage is pruned, as its tombstone.
    Sealed,
}

impl Sidecar {
    /// The file name's suffix after the log's: `<log>.<suffix>`.
    pub fn suffix(self) -> &'static str {
        match self {
            Sidecar::Poisoned => "poisoned",
            Sidecar::Checkpoint => "checkpoint",
            Sidecar::Head => "head",
            Sidecar::Sealed => "sealed",
        }
    }

    /// The largest sidecar read: a checkpoint holds one byte per record
    /// (`history.rs`), so 64 MiB is a log of some sixty million records.
    const READ_BOUND: u64 = 64 << 20;
}

/// What the effect log needs from a file.
pub trait Storage {
    /// Current length in bytes.
    fn length(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `offset`; 0 at end of file.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes all of `bytes` at `offset`, or fails having written some prefix.
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes everything written so far durable (`fdatasync` on disk: the data
    /// and the metadata needed to read it back, which includes the new length).
    fn sync(&mut self) -> io::Result<()>;
    /// Makes the file's directory entry durable (`fsync` of the directory).
    fn sync_directory(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// Takes the lock, blocking.
    fn lock(&self, kind: LockKind) -> io::Result<()>;
    /// Takes the exclusive lock if no one holds it, without waiting: `false`
    /// when another handle does.
    fn try_lock_exclusive(&self) -> io::Result<bool> {
        self.lock(LockKind::Exclusive).map(|()| true)
    }
    /// Releases the lock.
    fn unlock(&self) -> io::Result<()>;
    /// Keeps bytes cut from a torn tail beside the log (`<log>.broken`).
    fn preserve_broken(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// The sidecar's bytes; `None` when there is none.
    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>>;
    /// The sidecar's first `len` bytes (fewer when it is shorter); `None`
    /// when there is none.
    fn read_sidecar_head(&self, which: Sidecar, len: u64) -> io::Result<Option<Vec<u8>>> {
        Ok(head_of(self.read_sidecar(which)?, len))
    }
    /// Replaces the sidecar with `bytes`, durably (a reader sees the old
    /// one or the new one, never a mix); except [`Sidecar::Head`], written
    /// in place and not durably, which a reader may find stale or torn
    /// (its seal tells).
    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()>;
    /// Removes the sidecar, durably; no error when there is none.
    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()>;
}

/// The first `len` bytes of a sidecar read whole: what a store that cannot
/// read less gives for a sidecar's head.
pub(crate) fn head_of(bytes: Option<Vec<u8>>, len: u64) -> Option<Vec<u8>> {
    bytes.map(|mut bytes| {
        bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
        bytes
    })
}

/// Reads `len` bytes from `offset` (fewer only at end of file).
pub(crate) fn read_range(storage: &impl Storage, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
    let mut filled = 0;
    while filled < bytes.len() {
        match storage.read_at(offset + filled as u64, &mut bytes[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    bytes.truncate(filled);
    Ok(bytes)
}

/// A log file on disk, opened and checked by `super::file`.
pub struct DiskFile {
    file: File,
    directory: Dir,
    /// The directory's name, for messages.
    display: String,
    name: String,
    broken_name: String,
    /// The head mark (`Sidecar::Head`), opened at its first write and kept.
    head: Option<File>,
}

impl DiskFile {
    /// `flock(2)`, asked again when a signal interrupts it: that happens
    /// even under SA_RESTART on some kernels' paths, and the lock was not
    /// taken, so the append should not fail for it.
    fn flock(&self, operation: FlockOperation) -> rustix::io::Result<()> {
        loop {
            match flock(&self.file, operation) {
                Err(rustix::io::Errno::INTR) => continue,
                result => return result,
            }
        }
    }

    pub(crate) fn new(file: File, directory: Dir, display: &str, name: &str) -> Self {
        Self {
            file,
            directory,
            display: display.to_owned(),
            name: name.to_owned(),
            broken_name: format!("{name}.broken"),
            head: None,
        }
    }

    /// Writes the head mark over the old one in place: one `pwrite` of a
    /// fixed length (`witness::MARK_BYTES`), so nothing of a longer one is
    /// left. Opened as the broken tail is (no symlink followed, a regular
    /// file with one name, 0600), once per handle.
    fn write_head(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.head.is_none() {
            let name = self.sidecar_name(Sidecar::Head);
            let (file, size) = self.open_private(&name, rustix::fs::OFlags::empty(), "")?;
            if size != bytes.len() as u64 {
                file.set_len(bytes.len() as u64)?;
            }
            self.head = Some(file);
        }
        let file = self.head.as_ref().expect("opened above");
        file.write_all_at(bytes, 0)
    }

    /// Opens `name` beside the log for writing (with `extra` flags), as
    /// private as the log itself, and answers it with its size. A symlink
    /// planted at the name is not followed (O_NOFOLLOW), a FIFO does not
    /// block the open (O_NONBLOCK) and is refused, as is a file with another
    /// name (`refused` is added to that error: what to do), and an existing
    /// file gets 0600 by fchmod: the create mode applies only to a file this
    /// open makes.
    fn open_private(&self, name: &str, extra: rustix::fs::OFlags, refused: &str) -> io::Result<(File, u64)> {
        use rustix::fs::{FileType, Mode, OFlags};
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC
            | extra;
        let fd = rustix::fs::openat(&self.directory, name, flags, Mode::from_raw_mode(0o600))?;
        let stat = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
            return Err(io::Error::other(format!("{name} is not a regular file with one name{refused}")));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        Ok((File::from(fd), stat.st_size as u64))
    }

    fn sidecar_name(&self, which: Sidecar) -> String {
        format!("{}.{}", self.name, which.suffix())
    }
}

fn as_io(error: super::LogError) -> io::Error {
    io::Error::other(error.to_string())
}

impl Storage for DiskFile {
    fn length(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        FileExt::read_at(&self.file, buf, offset)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(fdatasync(&self.file)?)
    }

    fn sync_directory(&mut self) -> io::Result<()> {
        // LOG-3: reopened O_RDONLY|O_DIRECTORY; an O_PATH handle cannot fsync.
        let directory = rustix::fs::openat(
            &self.directory,
            ".",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(fsync(directory)?)
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn lock(&self, kind: LockKind) -> io::Result<()> {
        let operation = match kind {
            LockKind::Shared => FlockOperation::LockShared,
            LockKind::Exclusive => FlockOperation::LockExclusive,
        };
        Ok(self.flock(operation)?)
    }

    fn try_lock_exclusive(&self) -> io::Result<bool> {
        match self.flock(FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    fn unlock(&self) -> io::Result<()> {
        Ok(flock(&self.file, FlockOperation::Unlock)?)
    }

    fn preserve_broken(&mut self, bytes: &[u8]) -> io::Result<()> {
        use rustix::fs::OFlags;
        use std::io::Write;
        // The cut bytes are log records: as private as the log itself.
        let refused = "; move it away to keep the cut bytes";
        let (mut broken, _) = self.open_private(&self.broken_name, OFlags::APPEND, refused)?;
        rustix::fs::fcntl_setfl(&broken, OFlags::APPEND)?;
        broken.write_all(bytes)?;
        broken.sync_all()
    }

    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>> {
        // Checked like every control-plane file: regular, one name, bounded.
        super::durable::read_bounded(
            &self.directory,
            &self.display,
            &self.sidecar_name(which),
            Sidecar::READ_BOUND,
        )
        .map_err(as_io)
    }

    fn read_sidecar_head(&self, which: Sidecar, len: u64) -> io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let opened = super::durable::open_checked(&self.directory, &self.display, &self.sidecar_name(which));
        let Some(file) = opened.map_err(as_io)? else { return Ok(None) };
        let mut bytes = Vec::new();
        file.take(len).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()> {
        let name = self.sidecar_name(which);
        match which {
            // The poison marker must outlive a crash (LOG-4), and so must a
            // seal: it is what refuses every later append.
            Sidecar::Poisoned | Sidecar::Sealed => {
                super::durable::replace(&self.directory, &self.display, &name, bytes)
            }
            // A checkpoint only saves work: it is written after the fsync of
            // the records it covers, so whatever a crash leaves of it names
            // durable records or fails its seal (LOG-10); no fsync of its own.
            Sidecar::Checkpoint => {
                super::durable::replace_unsynced(&self.directory, &self.display, &name, bytes)
            }
            // Written after every keyed fsync: one pwrite in place through a
            // descriptor kept open, not a file made and renamed each time.
            Sidecar::Head => return self.write_head(bytes),
        }
        .map_err(as_io)
    }

    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()> {
        match self.directory.remove_file(self.sidecar_name(which)) {
            Ok(()) => super::durable::sync_dir(&self.directory, &self.display).map_err(as_io),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// Faults a [`MemoryFile`] can be told to inject.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Fail the next write after writing this many of its bytes (ENOSPC).
    pub short_write_after: Option<usize>,
    /// Fail this many upcoming syncs (EIO), counting from the next one.
    pub failing_syncs: u32,
    /// Fail every write while set (a full disk).
    pub disk_full: bool,
    /// Fail every truncation while set (EIO).
    pub failing_truncates: bool,
    /// Another handle holds the lock for as many non-blocking attempts to
    /// take it as this has entries; an entry with bytes first replaces the
    /// contents, durably (what that handle did meanwhile: appended, or cut
    /// back a failed append and wrote over it).
    pub lock_busy: Vec<Option<Vec<u8>>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    /// What readers see now.
    current: Vec<u8>,
    /// `current[..durable_len]` is what a crash keeps for certain...
    durable_len: usize,
    /// ...unless an unsynced truncation cut into it: then the durable bytes
    /// are kept here until the next sync. (Appends never rewrite bytes, so
    /// this is the only way durable and current bytes diverge.)
    durable_before_truncation: Option<Vec<u8>>,
    broken: Vec<u8>,
    /// Sidecars are written durably, so a crash keeps them.
    sidecars: std::collections::HashMap<Sidecar, Vec<u8>>,
    faults: Faults,
    syncs: u64,
    directory_syncs: u64,
}

/// An in-memory file that models a crash: bytes become durable only when a
/// sync succeeds, and [`MemoryFile::crash`] keeps the durable bytes plus any
/// prefix of the rest. Clones share the same file (like two handles).
#[derive(Debug, Clone, Default)]
pub struct MemoryFile {
    state: Arc<Mutex<MemoryState>>,
}

impl MemoryFile {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the injected faults.
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// What readers see now.
    pub fn contents(&self) -> Vec<u8> {
        self.state().current.clone()
    }

    /// Replaces the contents (all durable), e.g. to plant damage.
    pub fn set_contents(&self, bytes: Vec<u8>) {
        let mut state = self.state();
        state.durable_len = bytes.len();
        state.durable_before_truncation = None;
        state.current = bytes;
    }

    /// Bytes preserved from torn tails.
    pub fn broken(&self) -> Vec<u8> {
        self.state().broken.clone()
    }

    /// Successful file syncs so far, and directory syncs.
    pub fn sync_counts(&self) -> (u64, u64) {
        let state = self.state();
        (state.syncs, state.directory_syncs)
    }

    /// The file after a crash: the durable bytes, then `keep` bytes of
    /// whatever was written but not yet synced (clamped).
    pub fn crash(&self, keep: usize) -> MemoryFile {
        let state = self.state();
        let durable = match &state.durable_before_truncation {
            Some(bytes) => bytes.as_slice(),
            None => &state.current[..state.durable_len],
        };
        let common = durable.iter().zip(&state.current).take_while(|(a, b)| a == b).count();
        let mut after = durable.to_vec();
        let unsynced = &state.current[common..];
        if common == durable.len() {
            after.extend_from_slice(&unsynced[..keep.min(unsynced.len())]);
        }
        let file = MemoryFile::new();
        file.set_contents(after);
        file.state().sidecars = state.sidecars.clone();
        file
    }

    /// Plants (or, with `None`, removes) a sidecar, e.g. a forged checkpoint.
    pub fn set_sidecar(&self, which: Sidecar, bytes: Option<Vec<u8>>) {
        let mut state = self.state();
        match bytes {
            Some(bytes) => state.sidecars.insert(which, bytes),
            None => state.sidecars.remove(&which),
        };
    }
}

impl Storage for MemoryFile {
    fn length(&self) -> io::Result<u64> {
        Ok(self.state().current.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let state = self.state();
        let start = (offset as usize).min(state.current.len());
        let n = buf.len().min(state.current.len() - start);
        buf[..n].copy_from_slice(&state.current[start..start + n]);
        Ok(n)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut state = self.state();
        if state.faults.disk_full {
            return Err(io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()));
        }
        let (written, failure) = match state.faults.short_write_after.take() {
            Some(n) if n < bytes.len() => {
                (n, Some(io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error())))
            }
            _ => (bytes.len(), None),
        };
        let offset = offset as usize;
        if state.current.len() < offset + written {
            state.current.resize(offset + written, 0);
        }
        state.current[offset..offset + written].copy_from_slice(&bytes[..written]);
        failure.map_or(Ok(()), Err)
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut state = self.state();
        if state.faults.failing_syncs > 0 {
            state.faults.failing_syncs -= 1;
            return Err(io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error()));
        }
        state.durable_len = state.current.len();
        state.durable_before_truncation = None;
        state.syncs += 1;
        Ok(())
    }

    fn sync_directory(&mut self) -> io::Result<()> {
        self.state().directory_syncs += 1;
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let mut state = self.state();
        if state.faults.failing_truncates {
            return Err(io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error()));
        }
        let len = len as usize;
        if len < state.durable_len && state.durable_before_truncation.is_none() {
            let durable = state.current[..state.durable_len].to_vec();
            state.durable_before_truncation = Some(durable);
        }
        state.current.truncate(len);
        Ok(())
    }

    fn lock(&self, _kind: LockKind) -> io::Result<()> {
        Ok(()) // one process; tests that race use real files
    }

    fn try_lock_exclusive(&self) -> io::Result<bool> {
        let mut state = self.state();
        if state.faults.lock_busy.is_empty() {
            return Ok(true);
        }
        if let Some(bytes) = state.faults.lock_busy.remove(0) {
            state.durable_len = bytes.len();
            state.durable_before_truncation = None;
            state.current = bytes;
        }
        Ok(false)
    }

    fn unlock(&self) -> io::Result<()> {
        Ok(())
    }

    fn preserve_broken(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.state().broken.extend_from_slice(bytes);
        Ok(())
    }

    fn read_sidecar(&self, which: Sidecar) -> io::Result<Option<Vec<u8>>> {
        Ok(self.state().sidecars.get(&which).cloned())
    }

    fn write_sidecar(&mut self, which: Sidecar, bytes: &[u8]) -> io::Result<()> {
        self.state().sidecars.insert(which, bytes.to_vec());
        Ok(())
    }

    fn remove_sidecar(&mut self, which: Sidecar) -> io::Result<()> {
        self.state().sidecars.remove(&which);
        Ok(())
    }
}
