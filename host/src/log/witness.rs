//! Keyed witnesses of how far a keyed log reached (LOG-6).
//!
//! The hash chain shows that nothing before a log's last record was altered,
//! inserted or removed. It cannot show that nothing came *after* it: a keyed
//! log cut back at a record boundary (`head -n 3`) is still a valid chain,
//! and every HMAC in it still verifies, so a cut needs no key. What it can
//! drop is exactly what a decision must not lose: a claim whose disclosure
//! the agent's answer owes, an outcome that said FAILED.
//!
//! So a keyed writer leaves a **mark** beside the log after every fsync of
//! its own: `<log>.head`, sealed with the operator key, saying "the log held
//! N records, the last at bytes L..X with check H":
//!
//! ```text
//! effects-head 1 records=<20 digits> offset=<20 digits> last_line=<20 digits> check=<64 hex>\n
//! <64 hex HMAC-SHA-256 of the first line>\n
//! ```
//!
//! Every handle that opens a keyed log reads its marks (the head and the
//! checkpoint's own, LOG-10) and [`confirm`]s each against the log: the log
//! must hold those bytes, the line there must be record N-1 with check H,
//! and the handle must have read N records (a line zeroed to pass for a
//! torn tail would hide the rest). A writer confirms the head mark again
//! before each append, so one open since before a cut never appends past
//! it. A mark that does not hold is [`LogError::Cut`](super::LogError::Cut),
//! and the log is not read at all: a decision over it would say more than
//! the log still knows.
//!
//! The mark is written after the fsync that made its records durable, so a
//! crash never leaves one ahead of the log. It is written in place with one
//! `pwrite` of a fixed length, not fsynced: a crash or a concurrent reader
//! may see it torn, stale or missing, and a mark whose seal fails is no
//! mark. Writers race to write it after unlocking, so it may name fewer
//! records than the log holds; it is a lower bound, never more. None is
//! written while the log is poisoned (LOG-4: another writer's failed fsync
//! may have lost pages this writer's fsync did not report) or sealed.
//!
//! What it cannot catch: whoever can cut the log can also remove the mark,
//! or put back a copy of an older one. It catches a cut made without
//! knowing of it, and a runtime that went on appending to a cut log; a
//! deliberate cut needs a head kept outside the data directory
//! (`docs/threats.md`).

use super::frame::{self, OperatorKey};
use super::record::Position;

/// What a mark says: the log held `records` records, the last at bytes
/// `last_line..offset` with check `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Records the log held.
    pub records: Position,
    /// Bytes those records take.
    pub offset: u64,
    /// Where the last of them starts.
    pub last_line: u64,
    /// Its check.
    pub check: [u8; 32],
}

/// The first line's fixed opening.
const MAGIC: &str = "effects-head 1";

/// The head mark's bytes, always [`MARK_BYTES`] long.
pub fn encode(mark: &Mark, key: &OperatorKey) -> Vec<u8> {
    let body = format!(
        "{MAGIC} records={:020} offset={:020} last_line={:020} check={}",
        mark.records,
        mark.offset,
        mark.last_line,
        hex::encode(mark.check)
    );
    let seal = frame::seal(Some(key), body.as_bytes());
    let bytes = format!("{body}\n{seal}\n").into_bytes();
    debug_assert_eq!(bytes.len(), MARK_BYTES);
    bytes
}

/// The length of every head mark: a write of it in place leaves no bytes of
/// a longer one behind.
pub const MARK_BYTES: usize = MAGIC.len()
    + " records=".len()
    + 20
    + " offset=".len()
    + 20
    + " last_line=".len()
    + 20
    + " check=".len()
    + 64
    + "\n".len()
    + 64
    + "\n".len();

/// The mark `bytes` hold, if they are one sealed with `key`; `None` for
/// anything else (torn, from another key, not a mark).
pub fn decode(bytes: &[u8], key: &OperatorKey) -> Option<Mark> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let (body, seal) = text.split_once('\n')?;
    if frame::seal(Some(key), body.as_bytes()) != seal {
        return None;
    }
    let mut fields = body.strip_prefix(MAGIC)?.split(' ').skip(1);
    let mut field = |name: &str| fields.next()?.strip_prefix(name)?.strip_prefix('=');
    let records = field("records")?.parse().ok()?;
    let offset = field("offset")?.parse().ok()?;
    let last_line = field("last_line")?.parse().ok()?;
    let check = hex::decode(field("check")?).ok()?.try_into().ok()?;
    Some(Mark { records, offset, last_line, check })
}

/// Checks that a log of `log_length` bytes holds what `mark` says, reading
/// the one line it names (`read_line(position, start, end)`, as
/// [`Store::read_line`](super::store::Store::read_line)). `Err` says how it
/// does not.
pub fn confirm(
    mark: &Mark,
    key: Option<&OperatorKey>,
    log_length: u64,
    read_line: &mut impl FnMut(Position, u64, u64) -> std::io::Result<Vec<u8>>,
) -> Result<(), String> {
    if mark.records == 0 || mark.last_line >= mark.offset {
        return Err(format!("it says they end at byte {}, which no record does", mark.offset));
    }
    if mark.offset > log_length {
        return Err(format!("they take {} bytes and the log holds {log_length}", mark.offset));
    }
    let line = read_line(mark.records - 1, mark.last_line, mark.offset)
        .map_err(|e| format!("reading record {}: {e}", mark.records - 1))?;
    let Some(line) = line.strip_suffix(b"\n") else {
        return Err(format!("no line ends at byte {} where record {} should", mark.offset, mark.records - 1));
    };
    match frame::decode_alone(line, key) {
        Ok((last, _)) if last.position + 1 == mark.records && last.check == mark.check => Ok(()),
        Ok((last, _)) => Err(format!(
            "bytes {}..{} hold record {} where record {} was",
            mark.last_line,
            mark.offset,
            last.position,
            mark.records - 1
        )),
        Err(error) => Err(format!(
            "bytes {}..{} are not record {}: {error}",
            mark.last_line,
            mark.offset,
            mark.records - 1
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_fixed_length_and_reads_back_only_under_its_key() {
        let key = OperatorKey::new(vec![7; 32]).unwrap();
        let other = OperatorKey::new(vec![8; 32]).unwrap();
        let small = Mark { records: 1, offset: 90, last_line: 0, check: [1; 32] };
        let large = Mark { records: u64::MAX, offset: u64::MAX, last_line: u64::MAX - 1, check: [0xff; 32] };
        for mark in [small, large] {
            let bytes = encode(&mark, &key);
            assert_eq!(bytes.len(), MARK_BYTES);
            assert_eq!(decode(&bytes, &key), Some(mark));
            assert_eq!(decode(&bytes, &other), None, "another key's seal is no mark");
            for cut in [0, 1, MARK_BYTES / 2, MARK_BYTES - 1] {
                assert_eq!(decode(&bytes[..cut], &key), None, "a torn mark is no mark");
            }
        }
        let mut altered = encode(&small, &key);
        altered[MAGIC.len() + " records=".len()] = b'9';
        assert_eq!(decode(&altered, &key), None, "an altered count fails the seal");
    }
}
