//! No mount beneath the root may show the effect store (ID-4): checked once,
//! at start, from the mount table.
//!
//! Placement (`super::placement`) walks `..` from the data dir and the root;
//! a bind mount of the data dir (or of one store file) beneath the root is
//! invisible to it, and Landlock grants a confined command writes by path
//! beneath the root, so such a mount would hand the logs to every command.
//! Here every mount point beneath the root's canonical path is stat'ed (the
//! stat shows the mounted object) and refused when it is the data dir, one of
//! its ancestors (which contain it), or any directory or file of the store's
//! listing: a file bind mount of a log keeps one link, so the hard-link guard
//! never sees it. Mounts made after the check are not seen here; the per-path
//! checks still refuse a path through a store directory (docs/limitations.md).

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::ControlPlane;
use super::placement::with_ancestors;

/// The mount table read here.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// More than any real mount table (a line is ~150 bytes): a bound, not a
/// limit anyone meets.
const MOUNTINFO_BOUND: u64 = 8 << 20;

/// What clears a [`MountError::ShowsStore`].
pub const MOUNT_REMEDY: &str = "unmount it, or choose a data dir that no mount beneath the root shows";

/// Why the mounts beneath the root are refused.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A mount beneath the root shows the store, or a directory holding it.
    #[error(
        "{mount} is a mount beneath the root that shows {what}, where tools and commands could read and write \
         the effect store (ID-4); {MOUNT_REMEDY}"
    )]
    ShowsStore {
        /// The mount point.
        mount: String,
        /// What of the store it shows.
        what: &'static str,
    },
    /// The mount table or the store could not be read: the check cannot pass
    /// on what it did not see.
    #[error("cannot check the mounts beneath the root for the effect store (ID-4): {0}")]
    Io(#[from] std::io::Error),
}

/// Undoes the mount table's octal escapes (`\040` for a space, `\011`,
/// `\012`, `\134`).
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[at], octal) {
            (b'\\', Some(digits)) => {
                let value = digits.iter().fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
                out.push(value as u8);
                at += 4;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The mount points in `table` (mountinfo format: the fifth field) that are
/// `root` or lie beneath it.
fn mount_points_beneath(table: &str, root: &Path) -> Vec<PathBuf> {
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|point| point.starts_with(root))
        .collect()
}

/// Refuses when a mount beneath `root` (its canonical path) shows the data
/// dir, an ancestor of it, or a directory or file of the store `control`
/// lists. Call it at start, after placement.
#[allow(clippy::disallowed_methods)] // `/proc` is the kernel's view of the mounts, not a file under a root; the mount points are named by it
pub fn check_mounts(root: &Path, data_dir: impl AsFd, control: &ControlPlane) -> Result<(), MountError> {
    let mut table = String::new();
    std::fs::File::open(MOUNTINFO)?.take(MOUNTINFO_BOUND + 1).read_to_string(&mut table)?;
    if table.len() as u64 > MOUNTINFO_BOUND {
        return Err(
            std::io::Error::other(format!("{MOUNTINFO} is larger than {MOUNTINFO_BOUND} bytes")).into()
        );
    }
    let points = mount_points_beneath(&table, root);
    if points.is_empty() {
        return Ok(());
    }
    let holding: HashSet<(u64, u64)> = with_ancestors(data_dir)?.into_iter().collect();
    let store = control.store_objects()?;
    for point in points {
        // A mount point that vanished (unmounted meanwhile) shows nothing.
        let Ok(metadata) = std::fs::symlink_metadata(&point) else { continue };
        let shown = (metadata.dev(), metadata.ino());
        let what = if holding.contains(&shown) {
            "the data dir or a directory that contains it"
        } else if store.contains(&shown) {
            if metadata.is_dir() { "a directory of the effect store" } else { "a file of the effect store" }
        } else {
            continue;
        };
        return Err(MountError::ShowsStore { mount: point.display().to_string(), what });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped_and_matched_by_whole_components() {
        let table = "36 35 98:0 /mnt1 /mnt/a\\040b rw - ext3 /dev/root rw\n\
                     37 35 98:0 / /srv/root/x rw - ext3 /dev/root rw\n\
                     38 35 98:0 / /srv/rootless rw - ext3 /dev/root rw\n\
                     39 35 98:0 / /srv rw - ext3 /dev/root rw\n";
        assert_eq!(unescape("/a\\040b\\134c\\011"), PathBuf::from("/a b\\c\t"));
        assert_eq!(unescape("/a\\04"), PathBuf::from("/a\\04"), "a cut escape is kept as it is");
        assert_eq!(mount_points_beneath(table, Path::new("/srv/root")), vec![PathBuf::from("/srv/root/x")]);
        assert_eq!(mount_points_beneath(table, Path::new("/mnt/a b")), vec![PathBuf::from("/mnt/a b")]);
    }
}
