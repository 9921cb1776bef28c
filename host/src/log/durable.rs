//! Small control-plane files written durably: the launch index (LOG-8) and
//! the background jobs' records. Each is written whole to a temporary file,
//! fsynced, renamed into place, and its directory fsynced (reopened
//! `O_RDONLY|O_DIRECTORY`: a cap-std `O_PATH` handle cannot be fsynced, LOG-3).
//! A reader therefore sees the old file or the new one, never a mix.
//!
//! A file that must not exist yet (a launch's reservation, the compile
//! cache's secret) is written whole to a file with no name (`O_TMPFILE`) and
//! then linked into place ([`link_new`]): the link fails if the name is
//! taken, which is the exclusive create, and no reader, and no crash, ever
//! sees it empty, half written, or with a second name.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};

use cap_std::fs::{Dir, OpenOptions};
use rustix::fs::{Mode, OFlags};

use super::error::LogError;

/// An I/O error on `path` during `operation`, as a [`LogError`].
pub fn io(path: String, operation: &'static str) -> impl FnOnce(std::io::Error) -> LogError {
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
    replace_with(dir, display, name, bytes, true)
}

/// Replaces `name` in `dir` with `bytes` by a rename over it, with no fsync:
/// for a file that only saves work (a checkpoint, LOG-10), which a crash may
/// leave old, empty or torn, and whose reader checks it and falls back.
pub fn replace_unsynced(dir: &Dir, display: &str, name: &str, bytes: &[u8]) -> Result<(), LogError> {
    replace_with(dir, display, name, bytes, false)
}

fn replace_with(dir: &Dir, display: &str, name: &str, bytes: &[u8], durable: bool) -> Result<(), LogError> {
    // Unique per call: two handles of one process may replace one file at once.
    static ATTEMPT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let attempt = ATTEMPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temporary = format!(".{name}.tmp-{}-{attempt}", std::process::id());
    let path = format!("{display}/{name}");
    let mut file = dir.open_with(&temporary, &private_new()).map_err(io(path.clone(), "create"))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| if durable { file.sync_all() } else { Ok(()) })
        .and_then(|()| dir.rename(&temporary, dir, name));
    if let Err(error) = written {
        let _ = dir.remove_file(&temporary);
        return Err(io(path, "write, fsync and rename")(error));
    }
    if durable { sync_dir(dir, display) } else { Ok(()) }
}

/// Creates `name` with `bytes` only if nothing is there yet; `Ok(false)` when
/// something is. Durable when it returns `Ok(true)`. Whole from the start
/// ([`link_new`]); where that cannot be done, created exclusively and then
/// written, so a reader at that moment may find it empty.
pub fn create_new(dir: &Dir, display: &str, name: &str, bytes: &[u8]) -> Result<bool, LogError> {
    let path = format!("{display}/{name}");
    match link_new(dir, name, bytes, true) {
        Some(Ok(())) => return sync_dir(dir, display).map(|()| true),
        Some(Err(rustix::io::Errno::EXIST)) => return Ok(false),
        Some(Err(errno)) => return Err(io(path, "write, fsync and link")(errno.into())),
        None => {}
    }
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

/// Writes `bytes` to a private (`0600`) file with no name in `dir`
/// (`O_TMPFILE`), fsynced when `sync`, and links it in as `name` through
/// `/proc/self/fd` (the recipe of `open(2)`; `AT_EMPTY_PATH` would need
/// `CAP_DAC_READ_SEARCH`). `Err(EXIST)` when `name` is taken; the write's or
/// fsync's own error when they fail; `Err(XDEV)` when what `/proc` linked is
/// not this file (a chroot's fake `/proc`), which is left for the caller to
/// refuse. `None` when it cannot be done here (no `O_TMPFILE` on this
/// filesystem, no `/proc`, a link refused by a sandbox): the caller writes a
/// named one, and reports a real failure itself.
pub fn link_new(dir: impl AsFd, name: &str, bytes: &[u8], sync: bool) -> Option<rustix::io::Result<()>> {
    use rustix::fs::{AtFlags, CWD};
    let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
    let unnamed = rustix::fs::openat(&dir, ".", flags, Mode::from_raw_mode(0o600)).ok()?;
    let mut file = std::fs::File::from(unnamed);
    let written = file.write_all(bytes).and_then(|()| if sync { file.sync_all() } else { Ok(()) });
    if let Err(error) = written {
        return Some(Err(rustix::io::Errno::from_io_error(&error).unwrap_or(rustix::io::Errno::IO)));
    }
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::linkat(CWD, path.as_str(), &dir, name, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => return Some(Err(rustix::io::Errno::EXIST)),
        Err(_) => return None,
    }
    // A `/proc` that is not procfs (a chroot's) could have linked another
    // file: the name must be this one.
    let ours = rustix::fs::fstat(&file).ok()?;
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(linked) if (linked.st_dev, linked.st_ino) == (ours.st_dev, ours.st_ino) => Some(Ok(())),
        _ => Some(Err(rustix::io::Errno::XDEV)),
    }
}

/// The largest control-plane file [`read`] accepts: a launch index entry or
/// a job record is a few hundred bytes; anything near this is not ours.
pub const READ_BOUND: u64 = 1 << 20;

/// Reads `name` whole; `Ok(None)` when it does not exist. Opened
/// `O_NOFOLLOW|O_NONBLOCK` and checked on the descriptor like a log (LOG-1,
/// ID-4): a regular file with exactly one name, at most [`READ_BOUND`]
/// bytes. A second name would let a tool's write through it (or a planted
/// link to another run's entry) decide which claim a job settles.
pub fn read(dir: &Dir, display: &str, name: &str) -> Result<Option<Vec<u8>>, LogError> {
    read_bounded(dir, display, name, READ_BOUND)
}

/// [`read`] with another bound (a log's checkpoint grows with the log).
pub fn read_bounded(dir: &Dir, display: &str, name: &str, bound: u64) -> Result<Option<Vec<u8>>, LogError> {
    use std::io::Read;
    let Some(file) = open_checked(dir, display, name)? else { return Ok(None) };
    let path = format!("{display}/{name}");
    let mut bytes = Vec::new();
    file.take(bound + 1).read_to_end(&mut bytes).map_err(io(path.clone(), "read"))?;
    if bytes.len() as u64 > bound {
        return Err(LogError::Refused {
            path,
            reason: format!("larger than {bound} bytes; not a control-plane file"),
        });
    }
    Ok(Some(bytes))
}

/// Opens `name` for reading as [`read`] does (no symlink, a regular file
/// with one name), for a reader that streams it; `None` when it is absent.
pub fn open_checked(dir: &Dir, display: &str, name: &str) -> Result<Option<std::fs::File>, LogError> {
    let path = format!("{display}/{name}");
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(LogError::Refused {
                path,
                reason: "it is a symlink; control-plane files are regular files".into(),
            });
        }
        Err(errno) => return Err(io(path, "open")(errno.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| io(path.clone(), "fstat")(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(LogError::Refused { path, reason: "not a regular file".into() });
    }
    if stat.st_nlink != 1 {
        return Err(LogError::Refused {
            path,
            reason: format!(
                "it has {} hard links; a control-plane file must have exactly one name (ID-4)",
                stat.st_nlink
            ),
        });
    }
    Ok(Some(std::fs::File::from(fd)))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests open their directories with ambient authority
mod tests {
    use super::*;

    /// A launch's reservation is read while it is being made (another
    /// process asking for that generation): it is absent or whole, never
    /// empty or half written, and a name taken is never taken again.
    #[test]
    fn a_file_created_new_is_absent_or_whole_to_a_reader_and_made_once() {
        let base = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(base.path(), cap_std::ambient_authority()).unwrap();
        if link_new(&dir, "probe", b"", false).is_none() {
            eprintln!("no O_TMPFILE in {}: a reservation is made by O_EXCL there", base.path().display());
            return;
        }
        let body = |i: usize| {
            format!("{{\"generation\": {i}, \"padding\": \"{}\"}}\n", "x".repeat(4096)).into_bytes()
        };
        const FILES: usize = 300;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut seen_absent = 0;
                for i in 0..FILES {
                    let name = format!("launch-{i}.json");
                    loop {
                        assert!(std::time::Instant::now() < deadline, "{name} never appeared");
                        match read(&dir, "test", &name).unwrap() {
                            None => seen_absent += 1,
                            Some(bytes) => {
                                assert_eq!(bytes, body(i), "{name} was read whole");
                                break;
                            }
                        }
                    }
                }
                seen_absent
            });
            for i in 0..FILES {
                let name = format!("launch-{i}.json");
                assert!(create_new(&dir, "test", &name, &body(i)).unwrap(), "{name} is made");
                assert!(!create_new(&dir, "test", &name, b"other").unwrap(), "{name} is not made twice");
            }
            assert!(reader.join().unwrap() > 0, "the reader raced the writer");
        });
    }
}
