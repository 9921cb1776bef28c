//! Reading records out of bytes: split into lines, decode each frame against
//! the chain, admit each into the history, and tell a torn tail (no final
//! `\n`) from corruption (LOG-6). Pure: bytes in, records out.

use super::frame::{self, Framed, OperatorKey};
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
    /// Bytes consumed: every complete line.
    pub consumed: u64,
    /// Length of an unterminated final line (a torn tail), 0 if none.
    pub torn: u64,
    /// The check of the last record decoded (the chain continues from it).
    pub last_check: [u8; 32],
}

/// Scans `bytes`, which start at file offset `base` where the next record is
/// `history.len()` and chains from `prev`. Admits every record into `history`;
/// stops at the first defect.
pub fn scan(
    bytes: &[u8],
    base: u64,
    prev: [u8; 32],
    key: Option<&OperatorKey>,
    history: &mut History,
) -> Result<Scanned, Defect> {
    let mut records = Vec::new();
    let mut last_check = prev;
    let mut start = 0usize;
    while let Some(newline) = memchr(&bytes[start..]) {
        let line = &bytes[start..start + newline];
        let position = history.len();
        let defect = |reason: String| Defect { line: position + 1, offset: base + start as u64, reason };
        let framed = frame::decode(line, position, &last_check, key).map_err(|e| defect(e.to_string()))?;
        history.admit(&framed.run_id, &framed.record).map_err(|e| defect(e.to_string()))?;
        last_check = framed.check;
        records.push(framed);
        start += newline + 1;
    }
    Ok(Scanned { records, consumed: start as u64, torn: (bytes.len() - start) as u64, last_check })
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// The genesis `prev`.
pub fn genesis() -> [u8; 32] {
    frame::GENESIS
}
