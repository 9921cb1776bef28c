//! Performing the readbacks a classifier asks for (OBS-1): re-resolve the
//! exact bound path (so the observation carries the incarnation seen now) and
//! read it. Coverage is never better than what was read: a capped read is
//! PARTIAL whatever was requested. A resource the embedding runtime read (an
//! owned record, a browser session) is observed as it reported it.
//!
//! A read opens the file through its resolution (ID-3: no symlink followed,
//! regular files only, so a FIFO is refused, never waited on) and, after
//! reading, checks again that the path still names what was read: `fstat` of
//! the descriptor (still linked, same object) and a fresh resolution of the
//! path (same incarnation). A swap between open and re-check makes the read
//! PARTIAL, observed under what the path names now: the digest is never
//! claimed for a path that no longer holds it.

use std::os::unix::fs::MetadataExt as _;

use crate::digest::Sha256Digest;
use crate::identity::{Opener, Resolved, SealedRoot, Target};
use crate::log::{ObservationRecord, Position};
use crate::model::{Coverage, Mechanism, ReadbackRequest, ResourceRef, ResourceRole};
use crate::producers::fs::read_capped;

/// Performs one readback of `path`; `None` for mechanisms this host cannot
/// perform for the filesystem.
pub fn perform(
    root: &SealedRoot,
    path: &str,
    request: &ReadbackRequest,
    source_action: &str,
    source_claim: Option<Position>,
    cap: u64,
) -> Option<ObservationRecord> {
    perform_between(root, path, request, source_action, source_claim, cap, &mut || {})
}

/// [`perform`], with `between` run after the read and before its re-check:
/// the seam the swap test uses (nothing else passes anything but a no-op).
fn perform_between(
    root: &SealedRoot,
    path: &str,
    request: &ReadbackRequest,
    source_action: &str,
    source_claim: Option<Position>,
    cap: u64,
    between: &mut dyn FnMut(),
) -> Option<ObservationRecord> {
    let role = match request.mechanism {
        Mechanism::FilesystemRead => ResourceRole::Source,
        Mechanism::FilesystemStat => ResourceRole::SearchRoot,
        _ => return None,
    };
    let mut resolved = root.resolve(path, role).ok()?;
    let (coverage, content_sha256) = match (request.mechanism, resolved.exists) {
        (Mechanism::FilesystemRead, true) => match read_resolved(root, &resolved, cap, between) {
            Ok((bytes, false)) if request.coverage == Coverage::Complete => {
                (Coverage::Complete, Some(Sha256Digest::of(&bytes).to_string()))
            }
            Ok(_) => (Coverage::Partial, None),
            // The path no longer names what was read: observed as it is now.
            Err(Some(now)) => {
                resolved = *now;
                (Coverage::Partial, None)
            }
            Err(None) => (Coverage::Partial, None),
        },
        (Mechanism::FilesystemRead, false) => (request.coverage, None),
        _ => (Coverage::Partial, None),
    };
    Some(ObservationRecord {
        resource: resolved.resource,
        mechanism: request.mechanism,
        coverage,
        source_action: source_action.to_owned(),
        source_claim,
        exists: resolved.exists,
        content_sha256,
        job_state: None,
    })
}

/// Reads the regular file `resolved` names, up to `cap`, through its
/// identity (a FIFO or device could hang or lie; a swapped-in object is not
/// the one resolved), then checks that the path still names it: the
/// descriptor still linked and a fresh resolution of the same incarnation.
/// `Err(Some(now))` when the path changed (with what it names now),
/// `Err(None)` when nothing could be read.
fn read_resolved(
    root: &SealedRoot,
    resolved: &Resolved,
    cap: u64,
    between: &mut dyn FnMut(),
) -> Result<(Vec<u8>, bool), Option<Box<Resolved>>> {
    let opened = Opener::new(root).read(&Target::of(resolved)).map_err(|_| None)?;
    let mut file = opened.file;
    let read = read_capped(&mut file, cap).map_err(|_| None)?;
    between();
    let linked =
        file.metadata().is_ok_and(|m| m.nlink() > 0 && (m.dev(), m.ino()) == (opened.device, opened.inode));
    let now = root.resolve(&resolved.relative, resolved.resource.role()).map_err(|_| None)?;
    if !linked || now.resource.incarnation() != resolved.resource.incarnation() {
        return Err(Some(Box::new(now)));
    }
    Ok(read)
}

/// The observation of a resource the embedding runtime read for us (an owned
/// record at one revision, a browser session): the resource as bound, PARTIAL
/// (existence or lifecycle only, never content), existing when the read
/// reported success.
pub fn reported(
    resource: &ResourceRef,
    request: &ReadbackRequest,
    succeeded: bool,
    source_action: &str,
    source_claim: Option<Position>,
) -> ObservationRecord {
    ObservationRecord {
        resource: resource.clone(),
        mechanism: request.mechanism,
        coverage: Coverage::Partial,
        source_action: source_action.to_owned(),
        source_claim,
        exists: succeeded,
        content_sha256: None,
        job_state: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // the test builds its tree with ambient authority

    use cap_std::ambient_authority;
    use cap_std::fs::Dir;

    use super::*;
    use crate::identity::ControlPlane;

    fn complete_read() -> ReadbackRequest {
        ReadbackRequest { binding: 0, mechanism: Mechanism::FilesystemRead, coverage: Coverage::Complete }
    }

    fn sealed(path: &std::path::Path) -> SealedRoot {
        let dir = Dir::open_ambient_dir(path, ambient_authority()).unwrap();
        SealedRoot::new(dir, "root", "workspace", "agent", ControlPlane::default()).unwrap()
    }

    #[test]
    fn a_swap_between_the_read_and_its_recheck_claims_no_content_for_the_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "read\n").unwrap();
        std::fs::write(dir.path().join("other.txt"), "swapped in\n").unwrap();
        let root = sealed(dir.path());
        let before = root.resolve("a.txt", ResourceRole::Source).unwrap();
        let mut swap = || std::fs::rename(dir.path().join("other.txt"), dir.path().join("a.txt")).unwrap();
        let observed =
            perform_between(&root, "a.txt", &complete_read(), "act", None, 1 << 20, &mut swap).unwrap();
        assert_eq!((observed.coverage, observed.content_sha256.as_deref()), (Coverage::Partial, None));
        let now = root.resolve("a.txt", ResourceRole::Source).unwrap();
        assert_ne!(now.resource.incarnation(), before.resource.incarnation(), "the swap happened");
        assert_eq!(observed.resource.incarnation(), now.resource.incarnation(), "observed as it is now");
        assert!(observed.exists);

        // Without a swap the same read is COMPLETE, with the digest of what is there.
        let unswapped = perform(&root, "a.txt", &complete_read(), "act", None, 1 << 20).unwrap();
        assert_eq!(unswapped.coverage, Coverage::Complete);
        assert_eq!(unswapped.content_sha256, Some(Sha256Digest::of(b"swapped in\n").to_string()));
    }

    #[test]
    fn a_file_removed_between_the_read_and_its_recheck_is_not_observed_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "read\n").unwrap();
        let root = sealed(dir.path());
        let mut remove = || std::fs::remove_file(dir.path().join("a.txt")).unwrap();
        let observed =
            perform_between(&root, "a.txt", &complete_read(), "act", None, 1 << 20, &mut remove).unwrap();
        assert_eq!((observed.coverage, observed.content_sha256.as_deref()), (Coverage::Partial, None));
        assert!(!observed.exists, "the path names nothing now");
    }
}
