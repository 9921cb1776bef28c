//! Resource identity for the filesystem (ID-1, ID-2, ID-3, ID-4): sealed
//! roots, path resolution beneath them, and the control-plane guard that keeps
//! tools out of the effect store.
//!
//! A [`SealedRoot`] is a cap-std [`Dir`] opened once (by the caller, who holds
//! the ambient authority) together with its identity: scope, owner, device and
//! inode. Tool paths resolve only beneath it: absolute paths, `..` that climbs
//! out, and symlinks (in the path or at its end) are refused, so a resolved
//! path names one object by a chain of real directories. Its incarnation is the
//! object's `device:inode` plus the SHA-256 of that chain, or `absent:` plus
//! the chain's digest when nothing is there yet.
//!
//! This module is the only place a filesystem [`ResourceRef`] is made from a
//! tool's path (ID-1). Resolution never writes; the opener creates a file or
//! directory, or removes a name, only when a producer asks it to, and never
//! writes content.
//!
//! Producers and the host's own reads do not open by path: `open.rs` opens a
//! resolved [`Target`] through its identity (no symlink followed on any
//! component, the ancestor chain and `device:inode` checked against the
//! resolution, regular files only), so a swap between resolution and open is
//! refused and nothing is written.

mod open;

use std::collections::HashSet;

use cap_std::fs::{Dir, MetadataExt};
use sha2::{Digest, Sha256};

use crate::model::{FilesystemLocation, FilesystemRoot, Location, ResourceRef, ResourceRole};

pub use open::{OpenError, Opened, Opener, Target, open_found};

/// Why a tool path does not resolve.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// An absolute path: tools address files relative to the root.
    #[error("{path:?}: absolute paths are refused; give a path relative to the root")]
    Absolute {
        /// The path as given.
        path: String,
    },
    /// `..` climbs out of the root.
    #[error("{path:?}: escapes the root")]
    Escape {
        /// The path as given.
        path: String,
    },
    /// A symlink in the path or at its end.
    #[error("{path:?}: {at:?} is a symlink; symlinks are not followed beneath a sealed root")]
    Symlink {
        /// The path as given.
        path: String,
        /// The component that is a symlink.
        at: String,
    },
    /// An ancestor is not a directory.
    #[error("{path:?}: {at:?} is not a directory")]
    NotADirectory {
        /// The path as given.
        path: String,
        /// The component.
        at: String,
    },
    /// The path leads into the effect store, or aliases one of its files (ID-4).
    #[error("{path:?}: refused: {reason} (the effect store is control plane, ID-4)")]
    ControlPlane {
        /// The path as given.
        path: String,
        /// Which check caught it.
        reason: String,
    },
    /// An empty path or one with a NUL byte.
    #[error("{path:?}: not a usable path")]
    Malformed {
        /// The path as given.
        path: String,
    },
    /// The OS refused a lookup.
    #[error("{path:?}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What the effect store looks like from a root: where it is beneath it (if
/// it is), and the inodes of its files on its device, listed once (ID-4).
#[derive(Debug, Clone, Default)]
pub struct ControlPlane {
    prefix: Option<String>,
    device: u64,
    inodes: HashSet<u64>,
}

impl ControlPlane {
    /// A guard from the store directory (`DATA_DIR/effects`) and, when the data
    /// dir lies beneath the root, its normalized path relative to the root.
    /// The store's files and its background jobs' files (`jobs/`) are listed.
    pub fn new(store: &Dir, prefix_in_root: Option<String>) -> std::io::Result<Self> {
        let device = store.dir_metadata()?.dev();
        let mut inodes = HashSet::new();
        let mut list = |dir: &Dir| -> std::io::Result<()> {
            for entry in dir.entries()? {
                let metadata = entry?.metadata()?;
                if metadata.is_file() {
                    inodes.insert(metadata.ino());
                }
            }
            Ok(())
        };
        list(store)?;
        match store.open_dir("jobs") {
            Ok(jobs) => list(&jobs)?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        Ok(Self { prefix: prefix_in_root, device, inodes })
    }

    /// A guard for a store that has no files yet (nothing to alias), only its
    /// place beneath the root, if it has one.
    pub fn without_files(prefix_in_root: Option<String>) -> Self {
        Self { prefix: prefix_in_root, device: u64::MAX, inodes: HashSet::new() }
    }

    /// Adds a store file created after the listing (a new lineage's log).
    pub fn remember(&mut self, inode: u64) {
        self.inodes.insert(inode);
    }

    fn check_prefix(&self, path: &str, relative: &str) -> Result<(), IdentityError> {
        let Some(prefix) = &self.prefix else { return Ok(()) };
        let inside = relative == prefix || relative.starts_with(&format!("{prefix}/")) || prefix.is_empty();
        if inside {
            return Err(IdentityError::ControlPlane {
                path: path.into(),
                reason: "it lies inside the effect store".into(),
            });
        }
        Ok(())
    }

    fn check_alias(&self, path: &str, device: u64, inode: u64, links: u64) -> Result<(), IdentityError> {
        if links > 1 && device == self.device && self.inodes.contains(&inode) {
            return Err(IdentityError::ControlPlane {
                path: path.into(),
                reason: "it is a hard link to a file of the effect store".into(),
            });
        }
        Ok(())
    }
}

/// A root opened once, with its identity.
pub struct SealedRoot {
    dir: Dir,
    root: FilesystemRoot,
    control: ControlPlane,
}

/// A resolved tool path: the resource and what was there.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The resource reference.
    pub resource: ResourceRef,
    /// The normalized path relative to the root.
    pub relative: String,
    /// Whether anything exists there.
    pub exists: bool,
}

/// Splits a tool path into normalized components, refusing absolute paths and
/// `..` that climbs out.
pub fn normalize(path: &str) -> Result<Vec<String>, IdentityError> {
    if path.is_empty() || path.contains('\0') {
        return Err(IdentityError::Malformed { path: path.into() });
    }
    if path.starts_with('/') {
        return Err(IdentityError::Absolute { path: path.into() });
    }
    let mut parts: Vec<String> = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(IdentityError::Escape { path: path.into() });
                }
            }
            name => parts.push(name.to_owned()),
        }
    }
    Ok(parts)
}

impl SealedRoot {
    /// Seals `dir` (opened by the caller) as a root for `scope` and `owner`.
    /// `display` is the path it was opened at, for messages and refs.
    pub fn new(
        dir: Dir,
        display: &str,
        scope: &str,
        owner: &str,
        control: ControlPlane,
    ) -> std::io::Result<Self> {
        let metadata = dir.dir_metadata()?;
        let root = FilesystemRoot {
            scope: scope.to_owned(),
            owner: owner.to_owned(),
            path: display.to_owned(),
            device: metadata.dev(),
            inode: metadata.ino(),
        };
        Ok(Self { dir, root, control })
    }

    /// The root's identity.
    pub fn root(&self) -> &FilesystemRoot {
        &self.root
    }

    /// The root directory capability, for producers.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Resolves `path` beneath the root for `role` (ID-3, ID-4).
    pub fn resolve(&self, path: &str, role: ResourceRole) -> Result<Resolved, IdentityError> {
        let parts = normalize(path)?;
        let relative = parts.join("/");
        self.control.check_prefix(path, &relative)?;
        let io = |source: std::io::Error| IdentityError::Io { path: path.into(), source };
        // The ancestor chain: device:inode of every directory from the root to
        // the parent, the root included.
        let mut chain = Sha256::new();
        chain.update(format!("{}:{};", self.root.device, self.root.inode));
        let mut prefix = String::new();
        let mut missing_from = None;
        for (index, part) in parts.iter().enumerate().take(parts.len().saturating_sub(1)) {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            match self.dir.symlink_metadata(&prefix) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    return Err(IdentityError::Symlink { path: path.into(), at: prefix });
                }
                Ok(metadata) if !metadata.is_dir() => {
                    return Err(IdentityError::NotADirectory { path: path.into(), at: prefix });
                }
                Ok(metadata) => chain.update(format!("{}:{};", metadata.dev(), metadata.ino())),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    // Missing directories are part of the location, not of the
                    // chain: the chain names what exists.
                    missing_from = Some(index);
                    break;
                }
                Err(error) => return Err(io(error)),
            }
        }
        let ancestors = hex::encode(chain.finalize());
        let final_state = if missing_from.is_some() || parts.is_empty() {
            None
        } else {
            match self.dir.symlink_metadata(&relative) {
                Ok(metadata) if metadata.file_type().is_symlink() => {
                    return Err(IdentityError::Symlink { path: path.into(), at: relative });
                }
                Ok(metadata) => {
                    self.control.check_alias(path, metadata.dev(), metadata.ino(), metadata.nlink())?;
                    Some((metadata.dev(), metadata.ino()))
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(error) => return Err(io(error)),
            }
        };
        let (incarnation, exists) = match (parts.is_empty(), final_state) {
            (true, _) => (format!("{}:{}@{ancestors}", self.root.device, self.root.inode), true),
            (false, Some((device, inode))) => (format!("{device}:{inode}@{ancestors}"), true),
            (false, None) => (format!("absent:{ancestors}"), false),
        };
        let location =
            Location::Filesystem(FilesystemLocation { root: self.root.clone(), path: relative.clone() });
        Ok(Resolved { resource: ResourceRef::new(role, location, incarnation, None), relative, exists })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_keeps_inside_and_refuses_climbing_out() {
        assert_eq!(normalize("a/./b//c").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(normalize("a/../b").unwrap(), vec!["b"]);
        assert!(matches!(normalize("../x"), Err(IdentityError::Escape { .. })));
        assert!(matches!(normalize("a/../../x"), Err(IdentityError::Escape { .. })));
        assert!(matches!(normalize("/etc/x"), Err(IdentityError::Absolute { .. })));
        assert!(matches!(normalize(""), Err(IdentityError::Malformed { .. })));
        assert!(matches!(normalize("a\0b"), Err(IdentityError::Malformed { .. })));
    }
}
