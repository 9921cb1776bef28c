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
use std::sync::Arc;

use cap_std::fs::{Dir, MetadataExt};
use sha2::{Digest, Sha256};

mod placement;

mod mounts;

pub use mounts::{MountError, check_mounts};
pub use placement::{PlacementError, check_placement, lies_beneath};

use crate::data_dir::DataDir;
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
    /// `..` after a name: where it leads is decided by what that name is
    /// when a tool opens the path as given (ID-3).
    #[error(
        "{path:?}: `..` after {at:?} is refused: a tool that opens this path as given goes through \
         {at:?}, whatever it is by then (a symlink would take it out of the root); name the path \
         without `..`"
    )]
    Climb {
        /// The path as given.
        path: String,
        /// The names the `..` would climb back out of.
        at: String,
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
/// it is), the `device:inode` of its files, listed once, and a handle to list
/// them again (ID-4).
///
/// The listing made at start cannot know a file created, or a hard link
/// made, during the run: a multiply linked candidate on the store's device
/// that is not in it triggers a fresh flat listing of the store (and `jobs/`)
/// before it is admitted. So the cost stays with multiply linked files on
/// that device, and never grows with accumulated runs beyond one listing.
#[derive(Debug, Clone, Default)]
pub struct ControlPlane {
    prefix: Option<String>,
    listed: Listing,
    anchor: Option<Anchor>,
}

/// Where a fresh listing starts.
#[derive(Debug, Clone)]
enum Anchor {
    /// The data dir, whose `effects/` may not exist yet.
    DataDir(Arc<Dir>),
    /// The store directory itself (`DATA_DIR/effects`).
    Store(Arc<Dir>),
}

/// The store's directories and files, each as `(device, inode)`.
#[derive(Debug, Clone, Default)]
struct Listing {
    directories: HashSet<(u64, u64)>,
    files: HashSet<(u64, u64)>,
}

fn identity_of(metadata: &cap_std::fs::Metadata) -> (u64, u64) {
    (metadata.dev(), metadata.ino())
}

impl Listing {
    /// One directory, flat: the directory and every regular file in it; the
    /// names of its subdirectories are returned for a caller that lists some
    /// of them too (the cache's buckets). Other processes write the store
    /// while it is listed (a compiled component or a checkpoint lands by a
    /// rename over its name): an entry gone between the directory read and
    /// its stat is not there now, so it is not listed, and the directory is
    /// read again so that the name it was renamed to is (a few rounds, then
    /// what stood still is the listing, as for a file made after it).
    fn add_flat(&mut self, dir: &Dir) -> std::io::Result<Vec<String>> {
        const ROUNDS: usize = 3;
        self.directories.insert(identity_of(&dir.dir_metadata()?));
        let mut subdirectories = Vec::new();
        for _ in 0..ROUNDS {
            subdirectories.clear();
            let mut vanished = false;
            // A directory removed since it was opened (an operator clearing
            // the cache) reads as `ENOENT`: it holds nothing now.
            let entries = match dir.entries() {
                Ok(entries) => entries,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                Err(error) => return Err(error),
            };
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                    Err(error) => return Err(error),
                };
                let metadata = match entry.metadata() {
                    Ok(metadata) => metadata,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        vanished = true;
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                if metadata.is_file() {
                    self.files.insert(identity_of(&metadata));
                } else if metadata.is_dir() {
                    subdirectories.push(entry.file_name().to_string_lossy().into_owned());
                }
            }
            if !vanished {
                break;
            }
        }
        Ok(subdirectories)
    }

    /// `dir/name` listed flat, if it exists as a directory; its
    /// subdirectories' names. A symbolic link or anything else in its place
    /// is not the store and is not followed: whoever uses that name refuses
    /// it on its own terms (the cache is then not used; a log is not opened).
    fn add_named(&mut self, dir: &Dir, name: &str) -> std::io::Result<Option<(Dir, Vec<String>)>> {
        match dir.symlink_metadata(name) {
            Ok(metadata) if !metadata.is_dir() => return Ok(None),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            _ => {}
        }
        match dir.open_dir(name) {
            Ok(opened) => {
                let subdirectories = self.add_flat(&opened)?;
                Ok(Some((opened, subdirectories)))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The store's directory and its `jobs/`, flat: every regular file.
    fn add_store(&mut self, store: &Dir) -> std::io::Result<()> {
        self.add_flat(store)?;
        self.add_named(store, DataDir::JOBS).map(drop)
    }

    /// The compiled-policy cache (`DATA_DIR/cache`, `cache/components`, and
    /// each engine's bucket in it): part of the store (ID-4), so its secret
    /// and entries are as out of reach as the logs. One flat listing per
    /// directory, as for the logs; the buckets are one per engine
    /// configuration, so few.
    fn add_cache(&mut self, data: &Dir) -> std::io::Result<()> {
        let Some((cache, _)) = self.add_named(data, DataDir::CACHE)? else { return Ok(()) };
        let Some((components, buckets)) = self.add_named(&cache, DataDir::CACHE_COMPONENTS)? else {
            return Ok(());
        };
        for bucket in buckets {
            self.add_named(&components, &bucket)?;
        }
        Ok(())
    }

    fn of(anchor: &Anchor) -> std::io::Result<Self> {
        let mut listing = Listing::default();
        match anchor {
            Anchor::Store(store) => listing.add_store(store)?,
            Anchor::DataDir(data) => {
                listing.directories.insert(identity_of(&data.dir_metadata()?));
                if let Some((store, _)) = listing.add_named(data, DataDir::STORE)? {
                    listing.add_named(&store, DataDir::JOBS)?;
                }
                listing.add_cache(data)?;
            }
        }
        Ok(listing)
    }

    fn on_device(&self, device: u64) -> bool {
        self.directories.iter().any(|(d, _)| *d == device)
    }
}

impl ControlPlane {
    /// A guard from the store directory (`DATA_DIR/effects`) and, when the data
    /// dir lies beneath the root, its normalized path relative to the root.
    /// The store's files and its background jobs' files (`jobs/`) are listed.
    pub fn new(store: &Dir, prefix_in_root: Option<String>) -> std::io::Result<Self> {
        Self::anchored(Anchor::Store(Arc::new(store.try_clone()?)), prefix_in_root)
    }

    /// A guard from the data dir, whose `effects/` need not exist yet: what a
    /// ledger that creates its first log during the run needs, since that
    /// log is listed when a candidate could alias it.
    pub fn for_data_dir(data_dir: &Dir, prefix_in_root: Option<String>) -> std::io::Result<Self> {
        Self::anchored(Anchor::DataDir(Arc::new(data_dir.try_clone()?)), prefix_in_root)
    }

    fn anchored(anchor: Anchor, prefix: Option<String>) -> std::io::Result<Self> {
        Ok(Self { prefix, listed: Listing::of(&anchor)?, anchor: Some(anchor) })
    }

    /// A guard for a store that has no files and no handle to list (nothing to
    /// alias), only its place beneath the root, if it has one.
    pub fn without_files(prefix_in_root: Option<String>) -> Self {
        Self { prefix: prefix_in_root, ..Self::default() }
    }

    /// Whether this guard can list the store again (made by [`Self::new`] or
    /// [`Self::for_data_dir`]), or only knows a prefix.
    pub fn is_anchored(&self) -> bool {
        self.anchor.is_some()
    }

    /// The store's directories as they are now (`device:inode`: the data dir,
    /// `effects/`, `effects/jobs/`, `cache/`, `cache/components/` and its
    /// buckets, those that exist): a walk never enters
    /// them and a path never passes through them (ID-4). A store that cannot
    /// be listed now is known by its listing at start.
    pub fn store_directories(&self) -> HashSet<(u64, u64)> {
        let mut directories = self.listed.directories.clone();
        if let Some(fresh) = self.anchor.as_ref().and_then(|anchor| Listing::of(anchor).ok()) {
            directories.extend(fresh.directories);
        }
        directories
    }

    /// Every directory and file of the store as it is now (`device:inode`),
    /// for the check at start that no mount beneath the root shows one of
    /// them (`identity::mounts`). A store that cannot be listed now is an
    /// error: the check must not pass on what it could not see.
    pub fn store_objects(&self) -> std::io::Result<HashSet<(u64, u64)>> {
        let mut objects: HashSet<(u64, u64)> =
            self.listed.directories.union(&self.listed.files).copied().collect();
        if let Some(anchor) = &self.anchor {
            let fresh = Listing::of(anchor)?;
            objects.extend(fresh.directories);
            objects.extend(fresh.files);
        }
        Ok(objects)
    }

    /// Whether a regular file found by a walk (`device`, `inode`, `links`
    /// from its metadata) is another name for a file of the store: the same
    /// check, with the same fresh listing, as [`SealedRoot::resolve`] makes,
    /// so `grep` cannot read through a hard link what `read_file` refuses.
    pub fn aliases_store(&self, device: u64, inode: u64, links: u64) -> bool {
        self.check_alias("", device, inode, links).is_err()
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

    fn check_directory(
        &self,
        path: &str,
        at: &str,
        identity: (u64, u64),
        store: &HashSet<(u64, u64)>,
    ) -> Result<(), IdentityError> {
        if store.contains(&identity) {
            return Err(IdentityError::ControlPlane {
                path: path.into(),
                reason: format!("{at:?} is a directory of the effect store (another name for it)"),
            });
        }
        Ok(())
    }

    fn check_alias(&self, path: &str, device: u64, inode: u64, links: u64) -> Result<(), IdentityError> {
        if links <= 1 {
            return Ok(());
        }
        let refused = |reason: &str| IdentityError::ControlPlane { path: path.into(), reason: reason.into() };
        let alias = "it is a hard link to a file of the effect store";
        let listed = self.listed.files.contains(&(device, inode));
        // Not in the listing made at start: it may be a file created (or a
        // link made) since. In it: the store may have replaced that file
        // since (a compiled component, a checkpoint), and the filesystem
        // handed its inode number to a file of the agent's. Either way the
        // store as it is now decides, when it can be listed again; a
        // candidate off the store's device never aliases it.
        let Some(anchor) = &self.anchor else {
            return if listed { Err(refused(alias)) } else { Ok(()) };
        };
        if !self.listed.on_device(device) {
            return Ok(());
        }
        match Listing::of(anchor) {
            Ok(fresh) if fresh.files.contains(&(device, inode)) => Err(refused(alias)),
            Ok(_) => Ok(()),
            Err(error) => Err(refused(&format!(
                "it has {links} links and the effect store could not be listed to rule out an alias ({error})"
            ))),
        }
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
/// every `..`: one that climbs out of the root, and one after a name
/// ([`IdentityError::Climb`]). As text `link/../b.txt` is `b.txt`, but
/// whoever opens the path as given (an agent's own tool behind a hook, a
/// runtime that performs the effect itself) goes through `link`, and lands
/// beside wherever it points when the tool runs, which a check now cannot
/// hold still: the ledger would claim and read back one file while the
/// tool wrote another.
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
            ".." if parts.is_empty() => return Err(IdentityError::Escape { path: path.into() }),
            ".." => return Err(IdentityError::Climb { path: path.into(), at: parts.join("/") }),
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

    /// The guard that keeps tools out of the effect store, for walks (ID-4).
    pub fn control(&self) -> &ControlPlane {
        &self.control
    }

    /// Replaces the guard: a ledger guards its own data dir even when the
    /// caller sealed the root without one (ID-4).
    pub(crate) fn guard_with(&mut self, control: ControlPlane) {
        self.control = control;
    }

    /// Resolves `path` beneath the root for `role` (ID-3, ID-4).
    pub fn resolve(&self, path: &str, role: ResourceRole) -> Result<Resolved, IdentityError> {
        let parts = normalize(path)?;
        let relative = parts.join("/");
        self.control.check_prefix(path, &relative)?;
        let io = |source: std::io::Error| IdentityError::Io { path: path.into(), source };
        // A directory of the store reached by another name (a bind mount
        // beneath the root) is refused like its path would be (ID-4).
        let store = self.control.store_directories();
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
                Ok(metadata) => {
                    self.control.check_directory(path, &prefix, (metadata.dev(), metadata.ino()), &store)?;
                    chain.update(format!("{}:{};", metadata.dev(), metadata.ino()));
                }
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
                    if metadata.is_dir() {
                        self.control.check_directory(
                            path,
                            &relative,
                            (metadata.dev(), metadata.ino()),
                            &store,
                        )?;
                    }
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
    fn normalization_keeps_inside_and_refuses_every_dot_dot() {
        assert_eq!(normalize("a/./b//c").unwrap(), vec!["a", "b", "c"]);
        assert!(matches!(normalize("../x"), Err(IdentityError::Escape { .. })));
        assert!(matches!(normalize("./../x"), Err(IdentityError::Escape { .. })));
        // A `..` after a name, whatever the name: `a` may be a symlink, or
        // become one, by the time a tool opens the path as given.
        assert!(matches!(normalize("a/../b"), Err(IdentityError::Climb { at, .. }) if at == "a"));
        assert!(matches!(normalize("a/./b/../../x"), Err(IdentityError::Climb { at, .. }) if at == "a/b"));
        assert!(matches!(normalize("a/.."), Err(IdentityError::Climb { .. })));
        assert!(matches!(normalize("/etc/x"), Err(IdentityError::Absolute { .. })));
        assert!(matches!(normalize(""), Err(IdentityError::Malformed { .. })));
        assert!(matches!(normalize("a\0b"), Err(IdentityError::Malformed { .. })));
    }

    /// Other processes write the store while it is listed: a compiled
    /// component lands by a rename, a checkpoint replaces the last, a
    /// secret is linked from a temporary name. An entry that goes between
    /// the directory read and its stat is not an error (CI caught this as one
    /// of six concurrent first hooks of a session denying its tool), and the
    /// files nobody touched are all still listed.
    #[test]
    #[allow(clippy::disallowed_methods)] // the test plays the other processes, by path
    fn a_store_written_while_it_is_listed_still_lists() {
        let base = tempfile::tempdir().unwrap();
        let bucket = base.path().join("cache/components/bucket");
        std::fs::create_dir_all(&bucket).unwrap();
        std::fs::create_dir(base.path().join("effects")).unwrap();
        std::fs::write(bucket.join("kept.cwasm"), "kept").unwrap();
        let data = Dir::open_ambient_dir(base.path(), cap_std::ambient_authority()).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (listings, rounds) = std::thread::scope(|scope| {
            let churn = scope.spawn(|| {
                let mut round = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for dir in [bucket.clone(), base.path().join("effects")] {
                        let temporaries: Vec<_> =
                            (0..32).map(|i| dir.join(format!(".entry.{round}.{i}.tmp"))).collect();
                        for temporary in &temporaries {
                            std::fs::write(temporary, "x").unwrap();
                        }
                        for temporary in &temporaries {
                            std::fs::rename(temporary, dir.join("entry")).unwrap();
                        }
                    }
                    round += 1;
                }
                round
            });
            let listings: Vec<std::io::Result<Listing>> = (0..2_000)
                .map(|_| Listing::of(&Anchor::DataDir(Arc::new(data.try_clone().unwrap()))))
                .collect();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            (listings, churn.join().unwrap())
        });
        assert!(rounds > 0, "the store was written meanwhile");
        let kept =
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(bucket.join("kept.cwasm")).unwrap());
        for listing in listings {
            let listing = listing.expect("a store being written lists");
            assert!(listing.files.iter().any(|&(_, inode)| inode == kept), "an untouched file is listed");
        }
    }
}
