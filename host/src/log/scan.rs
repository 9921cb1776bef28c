//! Reading records out of bytes: split into lines, decode each frame against
//! the chain, admit each into the history, and tell a torn tail from
//! corruption (LOG-6, with LOG-3 of revision 2). Pure: bytes in, records out.
//!
//! A torn tail is what a crash leaves of writes that were never made durable:
//! an unterminated final line (the writer died mid-append), or, since
//! outcomes and observations ride the next fsync (LOG-3), a damaged stretch
//! after the last durable record. The log's durable part is a prefix: every
//! fsync makes all bytes before it durable, and every claim, processes record
//! and decision is fsynced before its append returns. A crash leaves the
//! file cut short or, where pages of it were never written back, zeros
//! (local filesystems do not show stale blocks): never a stray byte and
//! never a well-formed line out of place. So a line that is no record at all
//! and holds zeros, followed by no valid record of those kinds, may be a
//! lost tail: cutting it loses only records
//! that were never promised, and an outcome lost so leaves its claim to
//! recover as INTERRUPTED, never as success. Anything else (a valid durable
//! record after the damage, a well-formed line with a wrong check, position
//! or chain) is corruption, and the log fails closed.

use super::frame::{self, FrameError, Framed, OperatorKey};
use super::history::History;

/// A defect found while scanning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defect {
    /// 1-based line number in the file.
    pub line: u64,
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

/// Where a scan left off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// Records decoded, in order.
    pub records: Vec<Framed>,
    /// Bytes consumed: every complete line before any defect.
    pub consumed: u64,
    /// Length of the torn tail after `consumed`, 0 if none.
    pub torn: u64,
    /// The check of the last record decoded (the chain continues from it).
    pub last_check: [u8; 32],
    /// The file offset where the last record decoded starts, if any.
    pub last_start: Option<u64>,
}

/// Scans `bytes`, which start at file offset `base` where the next record is
/// `history.len()` and chains from `prev`. Admits every record into `history`;
/// stops at the first defect. A line that is no record at all (not even
/// JSON) and holds zeros is a torn tail, returned in
/// [`Scanned::torn`], unless a record that is durable on return follows them
/// (see the module doc); that, and every other defect (a well-formed line
/// with a wrong check, position or chain, or one the history refuses), is
/// corruption: `Err`, with `history` holding the records before it (the
/// caller rolls back).
pub fn scan(
    bytes: &[u8],
    base: u64,
    prev: [u8; 32],
    key: Option<&OperatorKey>,
    history: &mut History,
) -> Result<Scanned, Defect> {
    // One record per complete line, at most: sized once, a load of a
    // million records neither copies its records while growing nor faults
    // in pages it then leaves (issue 18).
    let mut records = Vec::with_capacity(memchr::memchr_iter(b'\n', bytes).count());
    let mut last_check = prev;
    let mut start = 0usize;
    let mut last_start = None;
    while let Some(newline) = memchr::memchr(b'\n', &bytes[start..]) {
        let line = &bytes[start..start + newline];
        let position = history.len();
        let defect = |reason: String| Defect { line: position + 1, offset: base + start as u64, reason };
        let mut framed = match frame::decode(line, position, &last_check, key) {
            Ok(framed) => framed,
            // Only bytes that are no record at all, holding zeros, can be a
            // crash's leavings; a well-formed line out of place or with a
            // wrong check, or a stray byte, was written or altered so.
            Err(FrameError::Garbled(reason)) if line.contains(&0) => {
                match durable_record_after(&bytes[start + newline + 1..], key) {
                    None => break,
                    Some(kind) => {
                        return Err(defect(format!(
                            "{reason}; a {kind} record follows, which was fsynced when written, so the damage is \
                         inside the durable log, not a lost tail"
                        )));
                    }
                }
            }
            Err(error) => return Err(defect(error.to_string())),
        };
        history.admit(&framed.run_id, &framed.record).map_err(|e| defect(e.to_string()))?;
        framed.line = base + start as u64..base + (start + newline + 1) as u64;
        last_check = framed.check;
        records.push(framed);
        last_start = Some(base + start as u64);
        start += newline + 1;
    }
    Ok(Scanned {
        records,
        consumed: start as u64,
        torn: (bytes.len() - start) as u64,
        last_check,
        last_start,
    })
}

/// The kind of the first complete line in `rest` that is a valid record on
/// its own (schema, authentication, checksum) and durable on return.
fn durable_record_after(rest: &[u8], key: Option<&OperatorKey>) -> Option<&'static str> {
    rest.split(|&b| b == b'\n')
        .take(rest.iter().filter(|&&b| b == b'\n').count()) // complete lines only
        .filter_map(|line| frame::decode_alone(line, key).ok())
        .map(|(framed, _)| framed.record)
        .find(|record| record.durable_on_return())
        .map(|record| record.kind())
}

/// The genesis `prev`.
pub fn genesis() -> [u8; 32] {
    frame::GENESIS
}
