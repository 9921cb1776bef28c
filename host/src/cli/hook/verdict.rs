//! The session's latest verdict, as the user was told it, in
//! `DATA_DIR/verdicts/RUN.txt` (CMP-14): a headless run's user (`claude -p`,
//! `codex exec`, `gemini -p`) may never see the agent's channel for the
//! user, so every stop writes what it said there, one that could not decide
//! included (an older COMPLETED is never left behind), and names the file.

use std::path::{Path, PathBuf};

/// The data dir's folder of the hooks' latest verdicts, one file per run.
const VERDICTS: &str = "verdicts";

/// Writes `text` as the latest verdict of `run` (replacing the one before,
/// by a rename of a file of this process's own): its path, when written.
#[allow(clippy::disallowed_methods)] // the data dir's path, from the command line
pub fn record(data_dir: &Path, run: &str, text: &str) -> Option<PathBuf> {
    let folder = data_dir.join(VERDICTS);
    let file = folder.join(format!("{run}.txt"));
    let temporary = folder.join(format!("{run}.txt.{}.tmp", std::process::id()));
    let written = std::fs::create_dir_all(&folder)
        .and_then(|()| std::fs::write(&temporary, format!("{text}\n")))
        .and_then(|()| std::fs::rename(&temporary, &file));
    match written {
        Ok(()) => Some(file),
        Err(error) => {
            tracing::warn!("writing the verdict to {}: {error}", file.display());
            None
        }
    }
}
