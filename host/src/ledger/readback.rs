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
                resolved = now;
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
) -> Result<(Vec<u8>, bool), Option<Resolved>> {
    let opened = Opener::new(root).read(&Target::of(resolved)).map_err(|_| None)?;
    let mut file = opened.file;
    let read = read_capped(&mut file, cap).map_err(|_| None)?;
    between();
    let linked =
        file.metadata().is_ok_and(|m| m.nlink() > 0 && (m.dev(), m.ino()) == (opened.device, opened.inode));
    let now = root.resolve(&resolved.relative, resolved.resource.role()).map_err(|_| None)?;
    if !linked || now.resource.incarnation() != resolved.resource.incarnation() {
        return Err(Some(now));
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
