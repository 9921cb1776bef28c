//! Filesystem producers: `write_file`, `edit_file`, `apply_patch`,
//! `read_file`, `ls`, `glob`, `grep`. The transformations are
//! `effects_fs_transform`'s, the same code the filesystem classifier runs to
//! derive postconditions (ADP row 1).
//!
//! Every target is opened through its resolution (ID-3, `identity::Opener`):
//! no symlink followed, the opened `device:inode` checked, regular files only,
//! so a swap after the path check writes nothing and a FIFO never hangs a
//! tool. Writes go through one helper: open (or create exclusively) and check,
//! then truncate, write, `sync_data`. A failure from the truncation on reports
//! `mutation_attempted` (the old content may be gone); a refused open reports
//! none. Walks skip everything that is neither a directory nor a regular file.

use std::io::{Read as _, Write};

use cap_std::fs::{Dir, MetadataExt};
use effects_fs_transform::{PatchOp, apply_edit, apply_hunks, parse_patch, unwrap_fence};

use super::Produced;
use crate::digest::Sha256Digest;
use crate::identity::{ControlPlane, Opener, SealedRoot, Target, normalize, open_found};
use crate::model::Coverage;

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Files written, with the SHA-256 of the exact bytes written.
    pub files: Vec<(String, Sha256Digest)>,
    /// Files removed.
    pub removed: Vec<String>,
}

/// Writes `bytes` to `target`. `Err((message, mutation_attempted))`.
fn write_bytes(
    opener: &mut Opener<'_>,
    target: &Target,
    bytes: &[u8],
) -> Result<Sha256Digest, (String, bool)> {
    let path = target.display();
    let (opened, created) = opener.write(target).map_err(|e| (e.to_string(), false))?;
    let mut file = opened.file;
    // Only now, the object known to be the resolved one, is it truncated:
    // from here on the old content may be gone.
    let truncated = if created { Ok(()) } else { file.set_len(0) };
    truncated
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.sync_data())
        .map_err(|e| (format!("{path}: {e}"), true))?;
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

/// Reads `target` whole, as UTF-8, through its resolution.
fn read_text(opener: &mut Opener<'_>, target: &Target) -> Result<String, String> {
    let path = target.display();
    let mut bytes = Vec::new();
    let mut file = opener.read(target).map_err(|e| e.to_string())?.file;
    file.read_to_end(&mut bytes).map_err(|e| format!("{path}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{path}: not UTF-8 text"))
}

/// `write_file`: writes `content` to the resolved `target`, with one
/// surrounding code fence unwrapped.
pub fn write_file(root: &SealedRoot, target: &Target, content: &str) -> Produced<Written> {
    write_file_bytes(&mut Opener::new(root), target, unwrap_fence(content).as_bytes())
}

/// `edit_file`: exact replacement on the current content of the resolved
/// `target`, no newline translation.
pub fn edit_file(
    root: &SealedRoot,
    target: &Target,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Produced<Written> {
    let mut opener = Opener::new(root);
    let path = target.display();
    let edited = read_text(&mut opener, target)
        .and_then(|pre| apply_edit(&pre, old, new, replace_all).map_err(|e| format!("{path}: {e}")));
    match edited {
        Err(message) => Produced::failure(message, false),
        Ok(text) => write_file_bytes(&mut opener, target, text.as_bytes()),
    }
}

fn write_file_bytes(opener: &mut Opener<'_>, target: &Target, bytes: &[u8]) -> Produced<Written> {
    match write_bytes(opener, target, bytes) {
        Ok(digest) => Produced::success(Written {
            files: vec![(target.display().to_owned(), digest)],
            removed: Vec::new(),
        }),
        Err((message, attempted)) => Produced::failure(message, attempted),
    }
}

/// `apply_patch`: every operation's new content is computed before anything
/// is written, so a hunk that does not match changes nothing; then the
/// operations run in order. Every path the patch names must be among
/// `targets` (the caller resolved them all, refusing the whole patch if any
/// escapes); each operation opens through its own resolution, and a removal
/// unlinks the name only after checking the entry on its verified directory.
pub fn apply_patch(root: &SealedRoot, targets: &[Target], patch: &str) -> Produced<Written> {
    let ops = match parse_patch(patch) {
        Ok(ops) => ops,
        Err(error) => return Produced::failure(error.to_string(), false),
    };
    let target = |path: &str| -> Result<&Target, String> {
        let relative = normalize(path).map_err(|e| e.to_string())?.join("/");
        targets
            .iter()
            .find(|target| target.relative() == relative)
            .ok_or_else(|| format!("{path}: not resolved for this patch; nothing was written"))
    };
    enum Step<'t> {
        Write(&'t Target, Vec<u8>),
        Remove(&'t Target),
    }
    let mut opener = Opener::new(root);
    let mut steps = Vec::new();
    for op in &ops {
        let step = match op {
            PatchOp::Add { path, content } => {
                target(path).map(|t| Step::Write(t, content.clone().into_bytes()))
            }
            PatchOp::Delete { path } => target(path).map(Step::Remove),
            PatchOp::Update { path, move_to, hunks } => {
                let updated = target(path).and_then(|from| {
                    let text = read_text(&mut opener, from)
                        .and_then(|pre| apply_hunks(&pre, hunks).map_err(|e| format!("{path}: {e}")))?;
                    Ok((from, text))
                });
                match (updated, move_to.as_deref().map(target).transpose()) {
                    (Ok((from, text)), Ok(to)) => {
                        steps.push(Step::Write(to.unwrap_or(from), text.into_bytes()));
                        Ok(if to.is_some() { Step::Remove(from) } else { continue })
                    }
                    (Err(message), _) | (_, Err(message)) => Err(message),
                }
            }
        };
        match step {
            Ok(step) => steps.push(step),
            Err(message) => return Produced::failure(message, false),
        }
    }
    let mut written = Written { files: Vec::new(), removed: Vec::new() };
    for (index, step) in steps.into_iter().enumerate() {
        let failed = |message: String, attempted: bool| Produced::failure(message, attempted || index > 0);
        match step {
            Step::Write(target, bytes) => match write_bytes(&mut opener, target, &bytes) {
                Ok(digest) => written.files.push((target.display().to_owned(), digest)),
                Err((message, attempted)) => return failed(message, attempted),
            },
            Step::Remove(target) => match opener.remove(target) {
                Ok(()) => written.removed.push(target.display().to_owned()),
                Err(error) => return failed(error.to_string(), false),
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
/// the resolved `target`. COMPLETE only when the whole file was read and
/// returned.
pub fn read_file(
    root: &SealedRoot,
    target: &Target,
    offset: usize,
    limit: Option<usize>,
    cap: u64,
) -> Produced<ReadResult> {
    let path = target.display();
    let (bytes, truncated) = match Opener::new(root).read(target) {
        Err(error) => return Produced::failure(error.to_string(), false),
        Ok(opened) => match read_capped(opened.file, cap) {
            Ok(read) => read,
            Err(error) => return Produced::failure(format!("{path}: {error}"), false),
        },
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

/// Whether a regular file found by a walk or listing is a hard link to a file
/// of the effect store (ID-4): the alias check `resolve` makes, so a walk
/// shows nothing `read_file` would refuse. Only a file with more than one
/// name costs more than its `stat`; one whose metadata cannot be read is
/// skipped.
fn aliases_store(control: &ControlPlane, entry: &cap_std::fs::DirEntry) -> bool {
    entry.metadata().map_or(true, |m| control.aliases_store(m.dev(), m.ino(), m.nlink()))
}

/// `ls`: the entries of the resolved directory `target`, sorted, directories
/// with a trailing `/`, the store's omitted. Entries are named, never opened.
pub fn ls(root: &SealedRoot, target: &Target) -> Produced<Found> {
    let path = target.display();
    let entries = match Opener::new(root).directory(target) {
        Err(error) => return Produced::failure(error.to_string(), false),
        Ok(opened) => match Dir::from_std_file(opened.file).entries() {
            Ok(entries) => entries,
            Err(error) => return Produced::failure(format!("{path}: {error}"), false),
        },
    };
    let mut lines = Vec::new();
    let store = root.control().store_directories();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().ok();
        let is_dir = kind.is_some_and(|t| t.is_dir());
        // The store is not named either (ID-4): a directory of it (a bind
        // mount) or a hard link to one of its files.
        let hidden = match kind {
            Some(t) if t.is_file() => aliases_store(root.control(), &entry),
            Some(t) if t.is_dir() => entry.metadata().is_ok_and(|m| store.contains(&(m.dev(), m.ino()))),
            _ => false,
        };
        if hidden {
            continue;
        }
        lines.push(if is_dir { format!("{name}/") } else { name });
    }
    lines.sort();
    let truncated = lines.len() > SEARCH_LIMIT;
    lines.truncate(SEARCH_LIMIT);
    Produced::success(Found { lines, truncated })
}

/// Files beneath `start` (relative paths), depth first, sorted per directory,
/// never following symlinks, skipping FIFOs, sockets and devices (by the
/// entry's type: nothing is opened to find out), and never entering a
/// directory of the effect store (`store`, by `device:inode`, ID-4: its logs
/// and job output are not the agent's to read), nor listing a regular file
/// that is another name for a store file (a hard link, [`aliases_store`]);
/// at most [`SEARCH_LIMIT`] entries visited. A directory beneath `start`
/// removed (or replaced by a file) after its parent was listed, as a build
/// cleaning up does, holds nothing now: it is skipped, not an error.
fn walk(root: &Dir, control: &ControlPlane, start: &str) -> std::io::Result<(Vec<String>, bool)> {
    let store = control.store_directories();
    let mut files = Vec::new();
    let start = start.trim_end_matches('/').to_owned();
    let mut pending = vec![start.clone()];
    let mut visited = 0usize;
    while let Some(directory) = pending.pop() {
        let listing = match root.read_dir(if directory.is_empty() { "." } else { &directory }) {
            Ok(listing) => listing,
            Err(error)
                if directory != start
                    && matches!(
                        error.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
            {
                continue;
            }
            Err(error) => return Err(error),
        };
        let mut entries: Vec<(String, bool)> = listing
            .flatten()
            .filter_map(|entry| {
                let kind = entry.file_type().ok()?;
                if kind.is_file() && aliases_store(control, &entry) {
                    return None;
                }
                (kind.is_dir() || kind.is_file())
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

/// The search root checked through its resolution (a directory, the one
/// resolved) before a walk starts from it.
fn search_root<'t>(root: &SealedRoot, target: &'t Target) -> Result<&'t str, String> {
    Opener::new(root).directory(target).map(|_| target.display()).map_err(|e| e.to_string())
}

/// `glob`: files beneath the resolved directory `target` whose path relative
/// to it matches `pattern`.
pub fn glob(root: &SealedRoot, target: &Target, pattern: &str) -> Produced<Found> {
    let matcher = match globset::Glob::new(pattern) {
        Ok(glob) => glob.compile_matcher(),
        Err(error) => return Produced::failure(format!("bad glob {pattern:?}: {error}"), false),
    };
    let path = match search_root(root, target) {
        Ok(path) => path,
        Err(message) => return Produced::failure(message, false),
    };
    match walk(root.dir(), root.control(), path) {
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
/// the resolved directory `target`, as `file:line:text`. Files that are not
/// UTF-8, and anything that is not a regular file when opened (a FIFO
/// swapped in after the walk), are skipped.
pub fn grep(root: &SealedRoot, target: &Target, pattern: &str) -> Produced<Found> {
    let regex = match regex::Regex::new(pattern) {
        Ok(regex) => regex,
        Err(error) => return Produced::failure(format!("bad pattern {pattern:?}: {error}"), false),
    };
    let path = match search_root(root, target) {
        Ok(path) => path,
        Err(message) => return Produced::failure(message, false),
    };
    let (files, mut truncated) = match walk(root.dir(), root.control(), path) {
        Ok(found) => found,
        Err(error) => return Produced::failure(format!("{path}: {error}"), false),
    };
    let mut lines = Vec::new();
    for file in files {
        let Some(mut opened) = open_found(root, &file) else { continue };
        // Checked again on what was opened: a link made after the walk.
        let aliased = opened.metadata().map_or(true, |m| {
            use std::os::unix::fs::MetadataExt as _;
            root.control().aliases_store(m.dev(), m.ino(), m.nlink())
        });
        if aliased {
            continue;
        }
        let mut bytes = Vec::new();
        if opened.read_to_end(&mut bytes).is_err() {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else { continue };
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
