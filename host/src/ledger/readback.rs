//! Performing the readbacks a classifier asks for (OBS-1): re-resolve the
//! exact bound path (so the observation carries the incarnation seen now) and
//! read it. Coverage is never better than what was read: a capped read is
//! PARTIAL whatever was requested. A resource the embedding runtime read (an
//! owned record, a browser session) is observed as it reported it.

use crate::digest::Sha256Digest;
use crate::identity::SealedRoot;
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
    let role = match request.mechanism {
        Mechanism::FilesystemRead => ResourceRole::Source,
        Mechanism::FilesystemStat => ResourceRole::SearchRoot,
        _ => return None,
    };
    let resolved = root.resolve(path, role).ok()?;
    let (coverage, content_sha256) = match (request.mechanism, resolved.exists) {
        (Mechanism::FilesystemRead, true) => match read_resolved(root, path, &resolved.resource, cap) {
            Some((bytes, false)) if request.coverage == Coverage::Complete => {
                (Coverage::Complete, Some(Sha256Digest::of(&bytes).to_string()))
            }
            _ => (Coverage::Partial, None),
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

/// Reads the regular file `path` resolved as `resource`, up to `cap`: only if
/// it is a regular file (a FIFO or device could hang or lie) and the object
/// opened is the one resolved (device and inode as in its incarnation), so
/// the digest is of what the observation names. `None` otherwise.
fn read_resolved(root: &SealedRoot, path: &str, resource: &ResourceRef, cap: u64) -> Option<(Vec<u8>, bool)> {
    use cap_std::fs::MetadataExt as _;
    if !root.dir().symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let file = root.dir().open(path).ok()?;
    let metadata = file.metadata().ok()?;
    let opened = format!("{}:{}@", metadata.dev(), metadata.ino());
    if !metadata.is_file() || !resource.incarnation().starts_with(&opened) {
        return None;
    }
    read_capped(file, cap).ok()
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
