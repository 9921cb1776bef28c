//! Filesystem producers: `write_file`, `edit_file`, `apply_patch`,
//! `read_file`. The transformations are `effects_fs_transform`'s, the same
//! code the filesystem classifier runs to derive postconditions (ADP row 1).
//!
//! Writes go through one helper: create the parent directories, open with
//! truncation, write, `sync_data`. A failure after the truncating open reports
//! `mutation_attempted` (the old content may be gone).

use std::io::{Read as _, Write};

use cap_std::fs::{Dir, MetadataExt, OpenOptions};
use effects_fs_transform::{PatchOp, apply_edit, apply_hunks, parse_patch, unwrap_fence};

use super::Produced;
use crate::digest::Sha256Digest;
use crate::identity::ControlPlane;
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

/// Reads at most `cap` bytes from `reader`; the flag says whether there was
/// more (the content is then cut at `cap`). Producers, pre-states and
/// readbacks all read through this, so "truncated" means the same everywhere.
pub fn read_capped(reader: impl std::io::Read, cap: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    reader.take(cap + 1).read_to_end(&mut bytes)?;
    let truncated = bytes.len() as u64 > cap;
    bytes.truncate(cap as usize);
    Ok((bytes, truncated))
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
    let (bytes, truncated) = match root.open(path).and_then(|file| read_capped(file, cap)) {
        Ok(read) => read,
        Err(error) => return Produced::failure(format!("{path}: {error}"), false),
    };
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

/// Most entries a listing or search visits before it stops (and says so).
pub const SEARCH_LIMIT: usize = 10_000;

/// A listing or search result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// One line per entry or match.
    pub lines: Vec<String>,
    /// The search stopped at [`SEARCH_LIMIT`].
    pub truncated: bool,
}

/// `ls`: the entries of a directory, sorted, directories with a trailing `/`.
pub fn ls(root: &Dir, path: &str) -> Produced<Found> {
    let entries = match root.read_dir(path) {
        Ok(entries) => entries,
        Err(error) => return Produced::failure(format!("{path}: {error}"), false),
    };
    let mut lines = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        lines.push(if is_dir { format!("{name}/") } else { name });
    }
    lines.sort();
    let truncated = lines.len() > SEARCH_LIMIT;
    lines.truncate(SEARCH_LIMIT);
    Produced::success(Found { lines, truncated })
}

/// Files beneath `start` (relative paths), depth first, sorted per directory,
/// never following symlinks and never entering a directory of the effect
/// store (`store`, by `device:inode`, ID-4: its logs and job output are not
/// the agent's to read); at most [`SEARCH_LIMIT`] entries visited.
fn walk(root: &Dir, store: &ControlPlane, start: &str) -> std::io::Result<(Vec<String>, bool)> {
    let store = store.store_directories();
    let mut files = Vec::new();
    let mut pending = vec![start.trim_end_matches('/').to_owned()];
    let mut visited = 0usize;
    while let Some(directory) = pending.pop() {
        let mut entries: Vec<(String, bool)> = root
            .read_dir(if directory.is_empty() { "." } else { &directory })?
            .flatten()
            .filter_map(|entry| {
                let kind = entry.file_type().ok()?;
                (!kind.is_symlink())
                    .then(|| (entry.file_name().to_string_lossy().into_owned(), kind.is_dir()))
            })
            .collect();
        entries.sort();
        for (name, is_dir) in entries.into_iter().rev() {
            visited += 1;
            if visited > SEARCH_LIMIT {
                return Ok((files, true));
            }
            let path =
                if directory.is_empty() || directory == "." { name } else { format!("{directory}/{name}") };
            if !is_dir {
                files.push(path);
            } else if !root.symlink_metadata(&path).is_ok_and(|m| store.contains(&(m.dev(), m.ino()))) {
                pending.push(path);
            }
        }
    }
    files.sort();
    Ok((files, false))
}

/// `glob`: files beneath `path` whose path relative to it matches `pattern`.
pub fn glob(root: &Dir, store: &ControlPlane, path: &str, pattern: &str) -> Produced<Found> {
    let matcher = match globset::Glob::new(pattern) {
        Ok(glob) => glob.compile_matcher(),
        Err(error) => return Produced::failure(format!("bad glob {pattern:?}: {error}"), false),
    };
    match walk(root, store, path) {
        Err(error) => Produced::failure(format!("{path}: {error}"), false),
        Ok((files, truncated)) => {
            let base = path.trim_end_matches('/');
            let lines = files
                .into_iter()
                .filter(|file| {
                    let relative = file.strip_prefix(base).map(|r| r.trim_start_matches('/')).unwrap_or(file);
                    matcher.is_match(relative)
                })
                .collect();
            Produced::success(Found { lines, truncated })
        }
    }
}

/// `grep`: lines matching the regular expression `pattern` in files beneath
/// `path`, as `file:line:text`. Files that are not UTF-8 are skipped.
pub fn grep(root: &Dir, store: &ControlPlane, path: &str, pattern: &str) -> Produced<Found> {
    let regex = match regex::Regex::new(pattern) {
        Ok(regex) => regex,
        Err(error) => return Produced::failure(format!("bad pattern {pattern:?}: {error}"), false),
    };
    let (files, mut truncated) = match walk(root, store, path) {
        Ok(found) => found,
        Err(error) => return Produced::failure(format!("{path}: {error}"), false),
    };
    let mut lines = Vec::new();
    for file in files {
        let Ok(text) = read_text(root, &file) else { continue };
        for (number, line) in text.lines().enumerate() {
            if regex.is_match(line) {
                if lines.len() == SEARCH_LIMIT {
                    truncated = true;
                    return Produced::success(Found { lines, truncated });
                }
                lines.push(format!("{file}:{}:{line}", number + 1));
            }
        }
    }
    Produced::success(Found { lines, truncated })
}
