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

/// Complete lines an append of claims may pass over under the lock without
/// decoding them (LOG-2, `effect_log`): how many there are, and the check
/// the last one ends with, which the append chains from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passover {
    /// The number of lines, each one record if the log is sound.
    pub lines: u64,
    /// The check the last line ends with.
    pub last_check: [u8; 32],
}

/// Whether `bytes`, read at a handle's head where the next record is
/// `position` and chains from `prev`, can be passed over: every line
/// complete and holding no zero byte, so none of it is a torn tail a merge
/// would cut (the module doc: a crash leaves lines cut short, or zeros),
/// and each one's frame verified ([`frame::verify_frame`]: its position,
/// checksum or HMAC under `key`, and its place in the chain). So damage is
/// found under the lock, where the merge refuses it and nothing is written
/// after it. Anything else is for a full [`scan`] under the lock. The
/// records themselves are decoded after the append: one a writer framed
/// correctly but that is no valid record fails then, and the append that
/// followed it is not answered as made.
pub fn pass_over(bytes: &[u8], position: u64, prev: [u8; 32], key: Option<&OperatorKey>) -> Option<Passover> {
    if !bytes.ends_with(b"\n") || memchr::memchr(0, bytes).is_some() {
        return None;
    }
    let (mut lines, mut last_check, mut start) = (0u64, prev, 0usize);
    while let Some(newline) = memchr::memchr(b'\n', &bytes[start..]) {
        let (at, chained, check) = frame::verify_frame(&bytes[start..start + newline], key)?;
        if at != position + lines || chained != last_check {
            return None;
        }
        (lines, last_check) = (lines + 1, check);
        start += newline + 1;
    }
    Some(Passover { lines, last_check })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::frame::tests::sample_record;

    fn two_lines() -> (Vec<u8>, [u8; 32], usize) {
        let (first, check) = frame::tests::encode(0, "run", &sample_record(), &genesis(), None);
        let (second, last) = frame::tests::encode(1, "run", &sample_record(), &check, None);
        ([first.clone(), second].concat(), last, first.len())
    }

    #[test]
    fn complete_lines_are_passed_over_with_their_count_and_last_check() {
        let (bytes, last, _) = two_lines();
        let over = pass_over(&bytes, 0, genesis(), None).expect("two whole lines");
        assert_eq!(over, Passover { lines: 2, last_check: last });
    }

    #[test]
    fn what_a_merge_must_judge_is_not_passed_over() {
        let (bytes, _, second_at) = two_lines();
        let over = |bytes: &[u8]| pass_over(bytes, 0, genesis(), None);
        assert_eq!(over(&bytes[..bytes.len() - 1]), None, "a line without its newline (torn)");
        assert_eq!(over(&[bytes.as_slice(), b"\0\0\0\n"].concat()), None, "zeros a crash left");
        let mut zeroed = bytes.clone();
        zeroed[10] = 0;
        assert_eq!(over(&zeroed), None, "a zero byte inside a line");
        let mut flipped = bytes.clone();
        flipped[second_at / 2] ^= 1;
        assert_eq!(over(&flipped), None, "a byte changed in the first line");
        assert_eq!(pass_over(&bytes, 1, genesis(), None), None, "not at the position the handle expects");
        assert_eq!(pass_over(&bytes, 0, [1; 32], None), None, "not chained from the handle's last record");
        assert_eq!(over(&bytes[second_at..]), None, "the second line alone: not at position 0");
        let text = String::from_utf8(bytes).unwrap();
        let cut_check = text.replacen("\"}\n", "}\n", 2);
        assert_eq!(over(cut_check.as_bytes()), None, "a line that does not end with a check");
        assert_eq!(over(b""), None);
    }

    /// A line is judged by its first defect in reading order: a schema
    /// error before a stray byte and zeros is corruption, which a crash
    /// never leaves; a line whose JSON syntax breaks first, with zeros in
    /// it and nothing durable after it, is a torn tail.
    #[test]
    fn a_schema_error_before_a_stray_byte_is_corruption_not_a_torn_tail() {
        let (first, _) = frame::tests::encode(0, "run", &sample_record(), &genesis(), None);
        let judge = |last: &[u8]| {
            let bytes = [first.as_slice(), last].concat();
            scan(&bytes, 0, genesis(), None, &mut History::new())
                .map(|scanned| (scanned.records.len(), scanned.torn))
        };
        for damaged in [&b"{\"position\":1,\"bogus\":\"\xff\0\0\"}\n"[..], b"{\"position\":\"x\",\xff\0\0\n"]
        {
            let defect = judge(damaged).expect_err("corruption");
            assert!(defect.reason.contains("not a valid record"), "{}", defect.reason);
        }
        let torn = b"{\"posi\xff\0\0\0\n";
        assert_eq!(judge(torn), Ok((1, torn.len() as u64)), "the syntax breaks first: a torn tail");
    }
}
