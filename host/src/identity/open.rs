//! Opening a resolved target through its identity (ID-3, revision 2).
//!
//! [`SealedRoot::resolve`](super::SealedRoot::resolve) names an object by a
//! chain of real directories and its `device:inode`. Between that walk and a
//! producer's open, anyone may rename a symlink or another file into the path.
//! This module opens the target so that such a swap is refused, never
//! followed: every directory is opened from its parent's descriptor with
//! `O_NOFOLLOW | O_DIRECTORY` (the ancestor chain is recomputed from what was
//! opened and must equal the resolution's), the last component with
//! `O_NOFOLLOW | O_NONBLOCK` and no `O_TRUNC`, and `fstat` of the descriptor
//! must show a regular file (or a directory, where one was asked for) with the
//! resolved `device:inode`. A target absent at resolution is created with
//! `O_CREAT | O_EXCL`, so a file or symlink planted in between fails the
//! open and nothing is written. FIFOs, sockets and devices are refused before
//! they are read from: `O_NONBLOCK` keeps even the open from waiting for a
//! peer.
//!
//! It never writes file content and never truncates: it hands back a checked
//! descriptor and the caller writes through it.
//!
//! Residual: removing an entry checks its `device:inode` on the verified
//! parent and then unlinks the name; a rename of another object onto that name
//! in the instant between the two removes that object's name instead (never a
//! file outside the verified directory, and never through a symlink).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use super::{Resolved, SealedRoot, normalize};
use crate::model::{Location, ResourceRef};

/// What a resolution said is at a path: the expected identity a producer
/// opens against. Made from a [`Resolved`] or from a bound resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    relative: String,
    object: Option<(u64, u64)>,
    ancestors: String,
}

/// Why a target was not opened. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// What is at the path now is not what was resolved (a symlink or another
    /// object swapped in, a directory replaced, a file created or removed).
    #[error("{path}: changed since it was resolved ({what}); nothing was written")]
    Changed {
        /// The path relative to the root.
        path: String,
        /// What differs.
        what: String,
    },
    /// The object is of a kind that is not opened (a FIFO, socket, device, a
    /// directory where a file was asked for, or a file where a directory was).
    #[error("{path}: is {kind}, not a {wanted}; refused")]
    NotAFile {
        /// The path relative to the root.
        path: String,
        /// What it is.
        kind: &'static str,
        /// What was asked for.
        wanted: &'static str,
    },
    /// Nothing is there (and nothing was resolved there either).
    #[error("{path}: no such file")]
    NotFound {
        /// The path relative to the root.
        path: String,
    },
    /// The resource is not a location beneath this root.
    #[error("{path}: not resolved beneath this root")]
    Foreign {
        /// The path as known.
        path: String,
    },
    /// The OS refused.
    #[error("{path}: {source}")]
    Io {
        /// The path relative to the root.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl OpenError {
    /// Whether the object is a directory where a file was asked for.
    pub fn is_directory(&self) -> bool {
        matches!(self, Self::NotAFile { kind, .. } if *kind == kind_name(FileType::Directory))
    }
}

impl Target {
    /// The target a resolution names.
    pub fn of(resolved: &Resolved) -> Self {
        Self::parse(&resolved.relative, resolved.resource.incarnation())
            .expect("resolve makes well-formed incarnations")
    }

    /// The target a bound filesystem resource names, if it is one beneath
    /// `root` (its root's device and inode).
    pub fn of_resource(root: &SealedRoot, resource: &ResourceRef) -> Result<Self, OpenError> {
        let Location::Filesystem(location) = resource.location() else {
            return Err(OpenError::Foreign { path: String::new() });
        };
        let foreign = || OpenError::Foreign { path: location.path.clone() };
        if (location.root.device, location.root.inode) != (root.root().device, root.root().inode) {
            return Err(foreign());
        }
        Self::parse(&location.path, resource.incarnation()).ok_or_else(foreign)
    }

    fn parse(relative: &str, incarnation: &str) -> Option<Self> {
        let (object, ancestors) = match incarnation.strip_prefix("absent:") {
            Some(chain) => (None, chain),
            None => {
                let (object, chain) = incarnation.split_once('@')?;
                let (device, inode) = object.split_once(':')?;
                (Some((device.parse().ok()?, inode.parse().ok()?)), chain)
            }
        };
        Some(Self { relative: relative.to_owned(), object, ancestors: ancestors.to_owned() })
    }

    /// The normalized path relative to the root (empty for the root itself).
    pub fn relative(&self) -> &str {
        &self.relative
    }

    /// The path as producers report it: `.` for the root itself.
    pub fn display(&self) -> &str {
        if self.relative.is_empty() { "." } else { &self.relative }
    }

    /// Whether something existed there at resolution.
    pub fn existed(&self) -> bool {
        self.object.is_some()
    }
}

/// An object opened through its identity.
#[derive(Debug)]
pub struct Opened {
    /// The descriptor (regular file, or directory where one was asked for).
    pub file: File,
    /// Its `fstat` at open.
    pub device: u64,
    /// Its inode.
    pub inode: u64,
    /// Its size at open.
    pub size: u64,
}

/// Opens targets beneath one root for one producer call, remembering the
/// directories and files it created, so a later step of the same call (a
/// patch adding two files in a new directory) sees them as its own and not as
/// a change made by someone else.
pub struct Opener<'r> {
    root: &'r SealedRoot,
    created_dirs: HashSet<(u64, u64)>,
    created_files: HashMap<String, (u64, u64)>,
}

/// The directory an entry lives in, opened and checked, and the entry's name.
struct Parent {
    dir: OwnedFd,
    name: String,
}

fn kind_of(stat: &Stat) -> &'static str {
    kind_name(FileType::from_raw_mode(stat.st_mode))
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of unknown type",
    }
}

fn identity(stat: &Stat) -> (u64, u64) {
    #[allow(clippy::unnecessary_cast)] // the field types differ by target
    (stat.st_dev as u64, stat.st_ino as u64)
}

impl<'r> Opener<'r> {
    /// An opener beneath `root`.
    pub fn new(root: &'r SealedRoot) -> Self {
        Self { root, created_dirs: HashSet::new(), created_files: HashMap::new() }
    }

    fn io(path: &str, errno: Errno) -> OpenError {
        OpenError::Io { path: path.to_owned(), source: errno.into() }
    }

    fn changed(path: &str, what: impl Into<String>) -> OpenError {
        OpenError::Changed { path: path.to_owned(), what: what.into() }
    }

    /// Walks the target's directories from the root's descriptor, never
    /// following a symlink, and checks the ancestor chain against the
    /// resolution's. `create` makes missing directories (`mkdirat`), which
    /// are recorded and kept out of the chain (the chain names what existed).
    /// `Ok(None)` when a directory is missing and `create` is off.
    fn parent(&mut self, target: &Target, create: bool) -> Result<Option<Parent>, OpenError> {
        let path = target.relative.as_str();
        let parts = normalize(path).map_err(|_| Self::changed(path, "not a normalized path"))?;
        let Some((name, directories)) = parts.split_last() else {
            return Err(Self::changed(path, "the root has no parent"));
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut current = rustix::fs::openat(self.root.dir().as_fd(), ".", flags, Mode::empty())
            .map_err(|e| Self::io(path, e))?;
        let root = rustix::fs::fstat(&current).map_err(|e| Self::io(path, e))?;
        if identity(&root) != (self.root.root().device, self.root.root().inode) {
            return Err(Self::changed(path, "the root is not the sealed one"));
        }
        let mut chain = Sha256::new();
        chain.update(format!("{}:{};", self.root.root().device, self.root.root().inode));
        let mut missing = false;
        for directory in directories {
            let next = match rustix::fs::openat(&current, directory.as_str(), flags, Mode::empty()) {
                Ok(next) => next,
                Err(Errno::NOENT) if !create => return Ok(None),
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(&current, directory.as_str(), Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(errno) => return Err(Self::io(path, errno)),
                    }
                    let made = rustix::fs::openat(&current, directory.as_str(), flags, Mode::empty())
                        .map_err(|e| Self::io(path, e))?;
                    self.created_dirs
                        .insert(identity(&rustix::fs::fstat(&made).map_err(|e| Self::io(path, e))?));
                    made
                }
                // ELOOP: a symlink; ENOTDIR: something that is not a directory.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    return Err(Self::changed(path, format!("{directory:?} is no longer a directory")));
                }
                Err(errno) => return Err(Self::io(path, errno)),
            };
            let opened = identity(&rustix::fs::fstat(&next).map_err(|e| Self::io(path, e))?);
            if self.created_dirs.contains(&opened) {
                // Ours, made in this call: the resolution saw nothing here.
                missing = true;
            } else if missing {
                return Err(Self::changed(
                    path,
                    format!("{directory:?} appeared beneath a missing directory"),
                ));
            } else {
                chain.update(format!("{}:{};", opened.0, opened.1));
            }
            current = next;
        }
        if hex::encode(chain.finalize()) != target.ancestors {
            return Err(Self::changed(path, "its directories are not the ones resolved"));
        }
        Ok(Some(Parent { dir: current, name: name.clone() }))
    }

    /// Checks what was opened: its kind and that it is the resolved object
    /// (or one this opener created there).
    fn check(&self, target: &Target, stat: &Stat, wanted: FileType) -> Result<(), OpenError> {
        let path = target.relative.as_str();
        // Resolution refuses symlinks, so one here was put there since.
        if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
            return Err(Self::changed(path, "a symlink was put there"));
        }
        if FileType::from_raw_mode(stat.st_mode) != wanted {
            let wanted = if wanted == FileType::Directory { "directory" } else { "regular file" };
            return Err(OpenError::NotAFile { path: path.to_owned(), kind: kind_of(stat), wanted });
        }
        let opened = identity(stat);
        let ours = self.created_files.get(path) == Some(&opened);
        match target.object {
            Some(expected) if expected == opened => Ok(()),
            None if ours => Ok(()),
            Some(_) if ours => Ok(()),
            Some(_) => Err(Self::changed(path, "another object is there now")),
            None => Err(Self::changed(path, "something was created there")),
        }
    }

    fn opened(file: OwnedFd, stat: &Stat) -> Opened {
        let (device, inode) = identity(stat);
        #[allow(clippy::unnecessary_cast)]
        Opened { file: File::from(file), device, inode, size: stat.st_size as u64 }
    }

    /// Opens the target to read it: a regular file, the one resolved.
    pub fn read(&mut self, target: &Target) -> Result<Opened, OpenError> {
        self.open_existing(target, OFlags::RDONLY, FileType::RegularFile)
    }

    /// Opens the target as a directory (the root itself included), the one
    /// resolved.
    pub fn directory(&mut self, target: &Target) -> Result<Opened, OpenError> {
        if target.relative.is_empty() {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(self.root.dir().as_fd(), ".", flags, Mode::empty())
                .map_err(|e| Self::io(".", e))?;
            let stat = rustix::fs::fstat(&fd).map_err(|e| Self::io(".", e))?;
            self.check(target, &stat, FileType::Directory)?;
            return Ok(Self::opened(fd, &stat));
        }
        self.open_existing(target, OFlags::RDONLY | OFlags::DIRECTORY, FileType::Directory)
    }

    fn open_existing(
        &mut self,
        target: &Target,
        access: OFlags,
        wanted: FileType,
    ) -> Result<Opened, OpenError> {
        let path = target.relative.clone();
        let Some(parent) = self.parent(target, false)? else {
            if target.object.is_some() {
                return Err(Self::changed(&path, "its directory was removed"));
            }
            return Err(OpenError::NotFound { path });
        };
        // Look before opening: a device is not even opened when its type
        // already shows. The open below checks again (a swap in between).
        let seen = match rustix::fs::statat(&parent.dir, parent.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) if target.object.is_none() => return Err(OpenError::NotFound { path }),
            Err(Errno::NOENT) => return Err(Self::changed(&path, "it was removed")),
            Err(errno) => return Err(Self::io(&path, errno)),
        };
        self.check(target, &seen, wanted)?;
        let flags = access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = match rustix::fs::openat(&parent.dir, parent.name.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(Self::changed(&path, "a symlink was put there")),
            Err(Errno::NOENT) => return Err(Self::changed(&path, "it was removed")),
            // A FIFO with no peer (write side), a socket.
            Err(Errno::NXIO | Errno::OPNOTSUPP) => {
                return Err(Self::changed(&path, "it is no longer a file"));
            }
            Err(errno) => return Err(Self::io(&path, errno)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Self::io(&path, e))?;
        self.check(target, &stat, wanted)?;
        // Regular files ignore O_NONBLOCK; cleared anyway so the descriptor
        // reads and writes as any other.
        rustix::fs::fcntl_setfl(&fd, access).map_err(|e| Self::io(&path, e))?;
        Ok(Self::opened(fd, &stat))
    }

    /// Opens the target to replace its content: the resolved regular file
    /// (opened without `O_TRUNC`: the caller truncates it once it is known to
    /// be the right one), or, where nothing was resolved, a new file made
    /// with `O_CREAT | O_EXCL` (missing directories made on the way). The
    /// flag says whether it was created.
    pub fn write(&mut self, target: &Target) -> Result<(Opened, bool), OpenError> {
        let path = target.relative.clone();
        let ours = self.created_files.contains_key(&path);
        if target.object.is_some() || ours {
            let opened = self.open_existing(target, OFlags::WRONLY, FileType::RegularFile)?;
            return Ok((opened, false));
        }
        let parent = self.parent(target, true)?.expect("created on the way");
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd =
            match rustix::fs::openat(&parent.dir, parent.name.as_str(), flags, Mode::from_raw_mode(0o666)) {
                Ok(fd) => fd,
                Err(Errno::EXIST) => return Err(Self::changed(&path, "something was created there")),
                Err(errno) => return Err(Self::io(&path, errno)),
            };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Self::io(&path, e))?;
        self.created_files.insert(path, identity(&stat));
        Ok((Self::opened(fd, &stat), true))
    }

    /// Removes the target's name: the entry on the verified parent must be
    /// the resolved regular file (or one this opener created).
    pub fn remove(&mut self, target: &Target) -> Result<(), OpenError> {
        let path = target.relative.clone();
        let Some(parent) = self.parent(target, false)? else {
            return Err(Self::changed(&path, "its directory was removed"));
        };
        let stat = match rustix::fs::statat(&parent.dir, parent.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) if target.object.is_none() => return Err(OpenError::NotFound { path }),
            Err(Errno::NOENT) => return Err(Self::changed(&path, "it was removed")),
            Err(errno) => return Err(Self::io(&path, errno)),
        };
        self.check(target, &stat, FileType::RegularFile)?;
        rustix::fs::unlinkat(&parent.dir, parent.name.as_str(), AtFlags::empty())
            .map_err(|e| Self::io(&path, e))?;
        self.created_files.remove(&path);
        Ok(())
    }
}

/// Opens `relative` (a file found by a walk, not resolved) for reading:
/// every component without following a symlink, `O_NONBLOCK`, and only if
/// `fstat` shows a regular file. `None` for anything else: walks skip what
/// they must not read.
pub fn open_found(root: &SealedRoot, relative: &str) -> Option<File> {
    let parts = normalize(relative).ok()?;
    let (name, directories) = parts.split_last()?;
    let directory_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut current = rustix::fs::openat(root.dir().as_fd(), ".", directory_flags, Mode::empty()).ok()?;
    for directory in directories {
        current = rustix::fs::openat(&current, directory.as_str(), directory_flags, Mode::empty()).ok()?;
    }
    let seen = rustix::fs::statat(&current, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if FileType::from_raw_mode(seen.st_mode) != FileType::RegularFile {
        return None;
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::openat(&current, name.as_str(), flags, Mode::empty()).ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    rustix::fs::fcntl_setfl(&fd, OFlags::RDONLY).ok()?;
    Some(File::from(fd))
}
