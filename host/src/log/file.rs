//! Opening a lineage's log on disk with the checks LOG-1 and LOG-9 demand.
//!
//! Layout (named in `crate::data_dir`): `DATA_DIR/effects/` (mode `0700`)
//! holds `<root run id>.log` (mode `0600`), its `.broken` companion when a
//! torn tail was ever cut, the launch index (`launch.rs`) and the background
//! jobs' records (`jobs/`). The directory is reached through a cap-std
//! [`Dir`]; the log itself is opened with `openat(2)` beneath it so the exact
//! flags are ours: `O_NOFOLLOW` (a symlink in its place is refused),
//! `O_NONBLOCK` (a FIFO in its place cannot hang the open), `O_CLOEXEC`. Then,
//! on the open descriptor: a regular file, `st_nlink == 1` (no hardlinked
//! alias), mode `0600`, owned by us, on a local filesystem.

use std::fs::File;

use cap_std::fs::{Dir, DirBuilder};
use rustix::fs::{FileType, Mode, OFlags};

use super::effect_log::{Checkpoints, EffectLog};
use super::error::LogError;
use super::frame::OperatorKey;
use super::storage::DiskFile;
use super::store::Medium;
use crate::data_dir::DataDir;

/// Filesystems where `flock` is emulated or durability is not ours to claim
/// (LOG-9), by `statfs` magic.
const NETWORK_FILESYSTEMS: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0x517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x0102_1997, "9P"),
    (0x00C3_6400, "Ceph"),
    (0x5346_414F, "AFS"),
    (0x6573_5546, "FUSE"),
];

/// Whether opening may create the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Never creates anything: a run with no claims leaves no file (LOG-5).
    ReadOnly,
    /// Creates the directory and log if missing.
    ReadWrite,
}

/// Options for [`open_lineage`].
#[derive(Debug, Clone)]
pub struct OpenOptionsLog {
    /// Create or not.
    pub mode: OpenMode,
    /// Operator key for HMAC-authenticated records.
    pub key: Option<OperatorKey>,
    /// Recover, at open, the unsettled claims whose executors are dead
    /// (LOG-7, SPEC 9 "eager recovery"): tear their commands' survivors down
    /// and record them INTERRUPTED. Readers that must not write turn it off.
    pub recover: bool,
    /// Start at the log's checkpoint, and keep one (LOG-10). A read-only
    /// handle never writes one, whatever this says.
    pub checkpoints: Checkpoints,
}

impl Default for OpenOptionsLog {
    fn default() -> Self {
        Self { mode: OpenMode::ReadWrite, key: None, recover: true, checkpoints: Checkpoints::Ignore }
    }
}

/// A run id: the name of a lineage's log. Letters, digits, `-`, `_`; 1 to 64.
pub fn check_run_id(run_id: &str) -> Result<(), String> {
    let ok = !run_id.is_empty()
        && run_id.len() <= 64
        && run_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(()) } else { Err(format!("run id {run_id:?}: use 1-64 letters, digits, '-' or '_'")) }
}

/// A lineage's log, on the medium it was opened on (a file here; the
/// fleet store through `PgStore`).
pub type LineageLog = EffectLog<Medium>;

fn refused(path: &str, reason: impl Into<String>) -> LogError {
    LogError::Refused { path: path.to_owned(), reason: reason.into() }
}

/// Opens (creating `0700` and fsyncing it into its parent, if `mode` allows)
/// the `effects` directory under `data_dir`. `None` when it does not exist and
/// `mode` is read-only.
pub fn open_effects_dir(data_dir: &Dir, display: &str, mode: OpenMode) -> Result<Option<Dir>, LogError> {
    let store = DataDir::STORE;
    let path = format!("{display}/{store}");
    let io = |operation| {
        let path = path.clone();
        move |source| LogError::Io { path, operation, source }
    };
    match data_dir.open_dir(store) {
        Ok(dir) => return check_private_dir(dir, &path).map(Some),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && mode == OpenMode::ReadWrite => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io("open directory")(error)),
    }
    let mut builder = DirBuilder::new();
    cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
    match data_dir.create_dir_with(store, &builder) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(io("create directory")(error)),
    }
    // LOG-3: a directory created for the log is fsynced in its parent.
    super::durable::sync_dir(data_dir, display)?;
    let dir = data_dir.open_dir(store).map_err(io("open directory"))?;
    check_private_dir(dir, &path).map(Some)
}

/// LOG-1: the effects directory is ours and `0700`.
fn check_private_dir(dir: Dir, path: &str) -> Result<Dir, LogError> {
    let stat = rustix::fs::fstat(&dir).map_err(|e| LogError::Io {
        path: path.to_owned(),
        operation: "fstat",
        source: e.into(),
    })?;
    let permissions = stat.st_mode & 0o7777;
    if permissions != 0o700 {
        return Err(refused(
            path,
            format!(
                "mode {permissions:04o}; the effects directory must be 0700 (chmod 700 it if it is yours)"
            ),
        ));
    }
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(refused(path, format!("owned by uid {}, not by this user", stat.st_uid)));
    }
    Ok(dir)
}

/// Opens the log of lineage `root_run_id` in `effects_dir` with every LOG-1 /
/// LOG-9 check, and (per `options.recover`) recovers it eagerly. `None` when it
/// does not exist and the mode is read-only.
pub fn open_lineage(
    effects_dir: &Dir,
    display_dir: &str,
    root_run_id: &str,
    options: &OpenOptionsLog,
) -> Result<Option<LineageLog>, LogError> {
    let name = DataDir::log_name(root_run_id).map_err(|reason| refused(display_dir, reason))?;
    let path = format!("{display_dir}/{name}");
    let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    flags |= match options.mode {
        OpenMode::ReadWrite => OFlags::RDWR | OFlags::CREATE,
        OpenMode::ReadOnly => OFlags::RDONLY,
    };
    let fd = match rustix::fs::openat(effects_dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) if options.mode == OpenMode::ReadOnly => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(refused(&path, "it is a symlink; the log must be a regular file"));
        }
        Err(errno) => return Err(LogError::Io { path, operation: "open", source: errno.into() }),
    };
    let file = File::from(fd);
    check_file(&file, &path)?;
    let directory = effects_dir.try_clone().map_err(|source| LogError::Io {
        path: path.clone(),
        operation: "clone directory handle",
        source,
    })?;
    let storage = Medium::File(DiskFile::new(file, directory, display_dir, &name));
    let checkpoints = match (options.mode, options.checkpoints) {
        (OpenMode::ReadOnly, Checkpoints::Keep) => Checkpoints::Use,
        (_, checkpoints) => checkpoints,
    };
    let mut log = EffectLog::open_with(storage, path, options.key.clone(), checkpoints)?;
    if options.mode == OpenMode::ReadOnly {
        log.set_read_only();
    }
    if options.recover && options.mode == OpenMode::ReadWrite {
        match crate::executor::recover(&mut log) {
            Ok(recovered) if recovered.is_empty() => {}
            Ok(recovered) => {
                tracing::info!(path = %log.path(), ?recovered, "recorded claims of dead executors as INTERRUPTED");
            }
            // LOG-4: a poisoned log still opens, to be read; every append,
            // recovery's included, waits for `effects log recover`.
            Err(error @ LogError::Poisoned { .. }) => tracing::warn!("{error}"),
            Err(error) => return Err(error),
        }
    }
    Ok(Some(log))
}

/// The LOG-1 / LOG-9 checks on an open descriptor; returns (device, inode).
pub fn check_file(file: &File, path: &str) -> Result<(u64, u64), LogError> {
    let stat = rustix::fs::fstat(file).map_err(|e| LogError::Io {
        path: path.to_owned(),
        operation: "fstat",
        source: e.into(),
    })?;
    let file_type = FileType::from_raw_mode(stat.st_mode);
    if file_type != FileType::RegularFile {
        return Err(refused(path, format!("it is a {file_type:?}, not a regular file")));
    }
    if stat.st_nlink != 1 {
        return Err(refused(
            path,
            format!("it has {} hard links; a log must have exactly one name (ID-4, LOG-1)", stat.st_nlink),
        ));
    }
    let permissions = stat.st_mode & 0o7777;
    if permissions != 0o600 {
        return Err(refused(
            path,
            format!("mode {permissions:04o}; the log must be 0600 (chmod 600 it if it is yours)"),
        ));
    }
    if stat.st_uid != rustix::process::geteuid().as_raw() {
        return Err(refused(path, format!("owned by uid {}, not by this user", stat.st_uid)));
    }
    let statfs = rustix::fs::fstatfs(file).map_err(|e| LogError::Io {
        path: path.to_owned(),
        operation: "fstatfs",
        source: e.into(),
    })?;
    let magic = statfs.f_type as i64;
    if let Some((_, name)) = NETWORK_FILESYSTEMS.iter().find(|(m, _)| *m == magic) {
        return Err(refused(
            path,
            format!(
                "it is on {name}, where flock and fsync are not what a local filesystem promises (LOG-9); use a local data dir"
            ),
        ));
    }
    Ok((stat.st_dev, stat.st_ino))
}
