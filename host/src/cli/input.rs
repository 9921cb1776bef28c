//! Bounded reads of the files and streams a surface is handed (scripts, key
//! files, components, `policy run` inputs, `decide` evaluators). Nothing the
//! operator names is read without a bound: `/dev/zero` given as a script, or a
//! FIFO that never ends, must be a clear error, not exhausted memory.

use std::io::Read;
use std::path::Path;

use anyhow::anyhow;
use effect_ledger::bounded;
use effect_ledger::log::OperatorKey;

use super::{Failure, exit};

/// Everything from `reader` under the library's bound (16 MiB, the same for
/// scripts, key files, components and documents); `what` names it.
fn bounded(reader: impl Read, what: &str) -> Result<Vec<u8>, Failure> {
    bounded::read_all(reader)
        .map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!("reading {what}: {e}; nothing was run")))
}

/// Reads `path` (`-`: standard input) whole, up to [`bounded::INPUT_BOUND`] bytes;
/// `what` names it in errors ("the script", "key file").
// Ambient authority enters here: the operator names the file on the command line.
#[allow(clippy::disallowed_methods)]
pub fn read_bounded(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    if path == Path::new("-") {
        return bounded(std::io::stdin().lock(), &format!("{what} from standard input"));
    }
    let what = format!("{what} {}", path.display());
    let file =
        std::fs::File::open(path).map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!("{what}: {e}")))?;
    bounded(file, &what)
}

/// [`read_bounded`], as UTF-8 text.
pub fn read_bounded_text(path: &Path, what: &str) -> Result<String, Failure> {
    String::from_utf8(read_bounded(path, what)?)
        .map_err(|_| Failure::new(exit::BAD_INPUT, anyhow!("{what} {}: not UTF-8", path.display())))
}

/// The operator key in `key_file`, if one is given (`--key-file` or
/// `$EFFECTS_LOG_KEY_FILE`, on every command that reads or writes a log).
/// A key file that someone else owns, that group or others may read, or
/// that has another name is warned about on stderr: whoever can read it can
/// forge records (not refused: the operator may have reasons, e.g. a group
/// of operators).
// The key file's owner and mode are looked at by the path the operator gave.
#[allow(clippy::disallowed_methods)]
pub fn read_key(key_file: Option<&Path>) -> Result<Option<OperatorKey>, Failure> {
    let Some(path) = key_file else { return Ok(None) };
    if path != Path::new("-")
        && let Ok(metadata) = std::fs::metadata(path)
    {
        use std::os::unix::fs::MetadataExt;
        let mut problems = Vec::new();
        if metadata.uid() != rustix::process::geteuid().as_raw() {
            problems.push(format!("is owned by uid {}, not by us", metadata.uid()));
        }
        if metadata.mode() & 0o077 != 0 {
            problems.push(format!("has mode {:04o} (group or other bits set)", metadata.mode() & 0o7777));
        }
        if metadata.nlink() > 1 {
            problems.push(format!("has {} names (hard links)", metadata.nlink()));
        }
        if !problems.is_empty() {
            eprintln!(
                "warning: key file {} {}: whoever can read it can forge records; `chmod 600` it, keep it \
                 ours and with one name",
                path.display(),
                problems.join(" and ")
            );
        }
    }
    OperatorKey::new(read_bounded(path, "key file")?)
        .map(Some)
        .map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!("key file {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use effect_ledger::bounded::INPUT_BOUND;

    #[test]
    fn a_stream_past_the_bound_is_refused_and_one_at_it_is_read() {
        let at = std::io::repeat(b'x').take(INPUT_BOUND);
        assert_eq!(bounded(at, "input").ok().map(|b| b.len() as u64), Some(INPUT_BOUND));
        let error = bounded(std::io::repeat(0), "the script")
            .map(|b| b.len())
            .expect_err("an endless stream is refused");
        assert_eq!(error.code, exit::BAD_INPUT);
        assert!(error.error.to_string().contains("16 MiB"), "{}", error.error);
    }
}
