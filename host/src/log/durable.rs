//! Small control-plane files written durably: the launch index (LOG-8) and
//! the background jobs' records. Each is written whole to a temporary file,
//! fsynced, renamed into place, and its directory fsynced (reopened
//! `O_RDONLY|O_DIRECTORY`: a cap-std `O_PATH` handle cannot be fsynced, LOG-3).
//! A reader therefore sees the old file or the new one, never a mix.

use std::io::Write;

use cap_std::fs::{Dir, OpenOptions};
use rustix::fs::{Mode, OFlags};

use super::error::LogError;

fn io(path: String, operation: &'static str) -> impl FnOnce(std::io::Error) -> LogError {
    move |source| LogError::Io { path, operation, source }
}

/// Fsyncs `dir` itself, so a rename or create in it is durable.
pub fn sync_dir(dir: &Dir, display: &str) -> Result<(), LogError> {
    let opened =
        rustix::fs::openat(dir, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| io(display.to_owned(), "open directory for fsync")(e.into()))?;
    rustix::fs::fsync(opened).map_err(|e| io(display.to_owned(), "fsync directory")(e.into()))
}

fn private_new() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    cap_std::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Replaces `name` in `dir` with `bytes`: temporary file, fsync, rename
/// over, directory fsync.
pub fn replace(dir: &Dir, display: &str, name: &str, bytes: &[u8]) -> Result<(), LogError> {
    let temporary = format!(".{name}.tmp-{}", std::process::id());
    let path = format!("{display}/{name}");
    let _ = dir.remove_file(&temporary); // a leftover of a crashed attempt by this pid
    let mut file = dir.open_with(&temporary, &private_new()).map_err(io(path.clone(), "create"))?;
    let written =
        file.write_all(bytes).and_then(|()| file.sync_all()).and_then(|()| dir.rename(&temporary, dir, name));
    if let Err(error) = written {
        let _ = dir.remove_file(&temporary);
        return Err(io(path, "write, fsync and rename")(error));
    }
    sync_dir(dir, display)
}

/// Creates `name` with `bytes` only if nothing is there yet; `Ok(false)` when
/// something is. Durable when it returns `Ok(true)`.
pub fn create_new(dir: &Dir, display: &str, name: &str, bytes: &[u8]) -> Result<bool, LogError> {
    let path = format!("{display}/{name}");
    let mut file = match dir.open_with(name, &private_new()) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(error) => return Err(io(path, "create")(error)),
    };
    if let Err(error) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        let _ = dir.remove_file(name);
        return Err(io(path, "write and fsync")(error));
    }
    sync_dir(dir, display).map(|()| true)
}

/// Reads `name` whole; `Ok(None)` when it does not exist.
pub fn read(dir: &Dir, display: &str, name: &str) -> Result<Option<Vec<u8>>, LogError> {
    match dir.read(name) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io(format!("{display}/{name}"), "read")(error)),
    }
}
