//! Filesystem producers: `write_file`, `edit_file`, `apply_patch`,
//! `read_file`. The transformations are `effects_fs_transform`'s, the same
//! code the filesystem classifier runs to derive postconditions (ADP row 1).
//!
//! Writes go through one helper: create the parent directories, open with
//! truncation, write, `sync_data`. A failure after the truncating open reports
//! `mutation_attempted` (the old content may be gone).

use std::io::{Read as _, Write};

use cap_std::fs::{Dir, OpenOptions};
use effects_fs_transform::{PatchOp, apply_edit, apply_hunks, parse_patch, unwrap_fence};

use super::Produced;
use crate::digest::Sha256Digest;
use crate::model::Coverage;

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Files written, with the SHA-256 of the exact bytes written.
    pub files: Vec<(String, Sha256Digest)>,
    /// Files removed.
    pub removed: Vec<String>,
}

/// Writes `bytes` to `path` beneath `root`. `Err((message, mutation_attempted))`.
fn write_bytes(root: &Dir, path: &str, bytes: &[u8]) -> Result<Sha256Digest, (String, bool)> {
    if let Some((parent, _)) = path.rsplit_once('/') {
        root.create_dir_all(parent).map_err(|e| (format!("{path}: creating {parent}: {e}"), false))?;
    }
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    let mut file = root.open_with(path, &options).map_err(|e| (format!("{path}: {e}"), false))?;
    // From here on the old content may be gone.
    file.write_all(bytes).and_then(|()| file.sync_data()).map_err(|e| (format!("{path}: {e}"), true))?;
    Ok(Sha256Digest::of(bytes))
}

/// Reads `path` whole, as UTF-8.
fn read_text(root: &Dir, path: &str) -> Result<String, String> {
    let bytes = root.read(path).map_err(|e| format!("{path}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{path}: not UTF-8 text"))
}

/// `write_file`: writes `content`, with one surrounding code fence unwrapped.
pub fn write_file(root: &Dir, path: &str, content: &str) -> Produced<Written> {
    write_file_bytes(root, path, unwrap_fence(content).as_bytes())
}

/// `edit_file`: exact replacement on the current content, no newline
/// translation.
pub fn edit_file(root: &Dir, path: &str, old: &str, new: &str, replace_all: bool) -> Produced<Written> {
    let edited = read_text(root, path)
        .and_then(|pre| apply_edit(&pre, old, new, replace_all).map_err(|e| format!("{path}: {e}")));
    match edited {
        Err(message) => Produced::failure(message, false),
        Ok(text) => write_file_bytes(root, path, text.as_bytes()),
    }
}

fn write_file_bytes(root: &Dir, path: &str, bytes: &[u8]) -> Produced<Written> {
    match write_bytes(root, path, bytes) {
        Ok(digest) => {
            Produced::success(Written { files: vec![(path.to_owned(), digest)], removed: Vec::new() })
        }
        Err((message, attempted)) => Produced::failure(message, attempted),
    }
}

/// `apply_patch`: every operation's new content is computed before anything
/// is written, so a hunk that does not match changes nothing; then the
/// operations run in order. Paths must already be resolved (the caller refuses
/// the whole patch if any path escapes).
pub fn apply_patch(root: &Dir, patch: &str) -> Produced<Written> {
    let ops = match parse_patch(patch) {
        Ok(ops) => ops,
        Err(error) => return Produced::failure(error.to_string(), false),
    };
    enum Step {
        Write(String, Vec<u8>),
        Remove(String),
    }
    let mut steps = Vec::new();
    for op in &ops {
        match op {
            PatchOp::Add { path, content } => {
                steps.push(Step::Write(path.clone(), content.clone().into_bytes()))
            }
            PatchOp::Delete { path } => steps.push(Step::Remove(path.clone())),
            PatchOp::Update { path, move_to, hunks } => {
                let updated = read_text(root, path)
                    .and_then(|pre| apply_hunks(&pre, hunks).map_err(|e| format!("{path}: {e}")));
                match updated {
                    Err(message) => return Produced::failure(message, false),
                    Ok(text) => {
                        steps.push(Step::Write(
                            move_to.clone().unwrap_or_else(|| path.clone()),
                            text.into_bytes(),
                        ));
                        if move_to.is_some() {
                            steps.push(Step::Remove(path.clone()));
                        }
                    }
                }
            }
        }
    }
    let mut written = Written { files: Vec::new(), removed: Vec::new() };
    for (index, step) in steps.into_iter().enumerate() {
        let failed = |message: String, attempted: bool| Produced::failure(message, attempted || index > 0);
        match step {
            Step::Write(path, bytes) => match write_bytes(root, &path, &bytes) {
                Ok(digest) => written.files.push((path, digest)),
                Err((message, attempted)) => return failed(message, attempted),
            },
            Step::Remove(path) => match root.remove_file(&path) {
                Ok(()) => written.removed.push(path),
                Err(error) => return failed(format!("{path}: {error}"), false),
            },
        }
    }
    Produced::success(written)
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// The text returned to the agent.
    pub text: String,
    /// COMPLETE only for a whole, untruncated read.
    pub coverage: Coverage,
    /// SHA-256 of the complete content, when the whole file was read.
    pub complete_sha256: Option<Sha256Digest>,
}

/// `read_file`: lines `offset..offset+limit` (0-based), at most `cap` bytes of
/// the file. COMPLETE only when the whole file was read and returned.
pub fn read_file(
    root: &Dir,
    path: &str,
    offset: usize,
    limit: Option<usize>,
    cap: u64,
) -> Produced<ReadResult> {
    let mut bytes = Vec::new();
    let opened = root.open(path).and_then(|file| file.take(cap + 1).read_to_end(&mut bytes));
    if let Err(error) = opened {
        return Produced::failure(format!("{path}: {error}"), false);
    }
    let truncated = bytes.len() as u64 > cap;
    bytes.truncate(cap as usize);
    let complete_sha256 = (!truncated).then(|| Sha256Digest::of(&bytes));
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let whole = offset == 0 && limit.is_none() && !truncated;
    let text = if offset == 0 && limit.is_none() {
        text
    } else {
        let lines = text.split_inclusive('\n').skip(offset);
        match limit {
            Some(limit) => lines.take(limit).collect(),
            None => lines.collect(),
        }
    };
    let coverage = if whole { Coverage::Complete } else { Coverage::Partial };
    Produced::success(ReadResult { text, coverage, complete_sha256: complete_sha256.filter(|_| whole) })
}
