//! Where the data dir may lie relative to the root (ID-4, revision 2): not
//! the root itself, not beneath it, not above it. A tool working beneath a
//! root that holds the store could write another run's log; a root inside
//! the store could hand the store's files to every tool.
//!
//! Compared by `device:inode`, walking `..` from each directory to the
//! filesystem's top: a path comparison alone misses a second name for the
//! same directory (a symlink to it). A bind mount of the data dir beneath the
//! root is NOT seen here: `..` from the data dir walks its real parents, never
//! the mount point. `super::mounts` checks the mount table for that. This
//! module only reads metadata.

use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

/// How the data dir and the root overlap.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// One directory is both.
    #[error("the data dir {data} is the root itself; {REMEDY}")]
    Same {
        /// The data dir as displayed.
        data: String,
    },
    /// The store would be reachable by the tools.
    #[error(
        "the data dir {data} lies beneath the root {root}, where tools could read and write the effect store; {REMEDY}"
    )]
    DataDirInsideRoot {
        /// The data dir as displayed.
        data: String,
        /// The root as displayed.
        root: String,
    },
    /// The root is part of the store.
    #[error("the root {root} lies inside the data dir {data}; {REMEDY}")]
    RootInsideDataDir {
        /// The data dir as displayed.
        data: String,
        /// The root as displayed.
        root: String,
    },
    /// A directory's metadata could not be read.
    #[error("cannot check where the data dir lies relative to the root: {0}")]
    Io(#[from] std::io::Error),
}

/// What clears any [`PlacementError`].
pub const REMEDY: &str = "choose a data dir outside the root that does not contain it (e.g. beside the root)";

/// At most this many `..` steps: deeper than any real path, so a loop
/// (which `..` cannot make, but a broken filesystem might) ends.
const MAX_DEPTH: usize = 4096;

fn identity(fd: impl AsFd) -> std::io::Result<(u64, u64)> {
    let stat = rustix::fs::fstat(fd)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// `device:inode` of `dir` and of every directory above it, `dir` first.
pub(super) fn with_ancestors(dir: impl AsFd) -> std::io::Result<Vec<(u64, u64)>> {
    let mut chain = vec![identity(&dir)?];
    let mut current: OwnedFd =
        rustix::fs::openat(&dir, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    for _ in 0..MAX_DEPTH {
        let parent = rustix::fs::openat(
            &current,
            "..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let id = identity(&parent)?;
        if chain.last() == Some(&id) {
            return Ok(chain); // `..` of the top is itself
        }
        chain.push(id);
        current = parent;
    }
    Err(std::io::Error::other("more than 4096 directories above; not a usable place"))
}

/// Whether `dir` is `root` or lies beneath it, by `device:inode` of `dir`
/// and its parents. For a file, pass its directory: what keeps an operator
/// key file out of the tools' reach.
pub fn lies_beneath(root: impl AsFd, dir: impl AsFd) -> std::io::Result<bool> {
    let root = identity(root)?;
    Ok(with_ancestors(dir)?.contains(&root))
}

/// Refuses a data dir that is the root, lies beneath it or contains it.
/// `data_display` and `root_display` name them in the error.
pub fn check_placement(
    root: impl AsFd,
    root_display: &str,
    data_dir: impl AsFd,
    data_display: &str,
) -> Result<(), PlacementError> {
    let root_chain = with_ancestors(root)?;
    let data_chain = with_ancestors(data_dir)?;
    let (data, root) = (data_display.to_owned(), root_display.to_owned());
    if root_chain[0] == data_chain[0] {
        return Err(PlacementError::Same { data });
    }
    if data_chain[1..].contains(&root_chain[0]) {
        return Err(PlacementError::DataDirInsideRoot { data, root });
    }
    if root_chain[1..].contains(&data_chain[0]) {
        return Err(PlacementError::RootInsideDataDir { data, root });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the test makes its directories with ambient authority
mod tests {
    use super::*;
    use cap_std::ambient_authority;
    use cap_std::fs::Dir;

    fn open(path: &std::path::Path) -> Dir {
        Dir::open_ambient_dir(path, ambient_authority()).unwrap()
    }

    #[test]
    fn same_beneath_above_and_beside_are_told_apart() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("root");
        let inside = root.join("deep/data");
        let beside = base.path().join("data");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&beside).unwrap();
        let check = |r: &std::path::Path, d: &std::path::Path| check_placement(open(r), "r", open(d), "d");
        assert!(matches!(check(&root, &root), Err(PlacementError::Same { .. })));
        assert!(matches!(check(&root, &inside), Err(PlacementError::DataDirInsideRoot { .. })));
        assert!(matches!(check(&inside, &root), Err(PlacementError::RootInsideDataDir { .. })));
        assert!(matches!(check(&root, base.path()), Err(PlacementError::RootInsideDataDir { .. })));
        check(&root, &beside).unwrap();
        // A second name for the root (a symlink to it) is still the root.
        let alias = base.path().join("alias");
        std::os::unix::fs::symlink(&root, &alias).unwrap();
        assert!(matches!(check(&alias, &root.join("deep")), Err(PlacementError::DataDirInsideRoot { .. })));
    }
}
