//! Verified checkpoints (LOG-10): continuing a run costs O(new records).
//!
//! A checkpoint, `<log>.checkpoint` beside the log, says where a reader may
//! start instead of reading the whole log:
//!
//! ```text
//! {"version":2,"keyed":false,"records":N,"offset":X,"last_line":L,"head":"<64 hex>",
//!  "history":{...},"open":[{"position":P,"start":S,"end":E,"check":"<64 hex>"}, ...]}\n
//! <64 hex seal>\n
//! ```
//!
//! - `records` and `offset`: it covers the first N records, which end at
//!   byte X (a line boundary);
//! - `last_line` and `head`: record N-1 starts at byte L and its check is
//!   `head`, so a reader verifies the checkpoint against the log itself by
//!   reading that one line (position, checksum or HMAC, check);
//! - `history`: the history rules' state after those records (a
//!   [`HistorySnapshot`]: one byte per record, and the runs' roots);
//! - `open`: the records a writer still needs of the covered part: every
//!   claim with no settled outcome, with its processes record (recovery's
//!   judge, LOG-7, and the monitor of background jobs read them), named by
//!   where their lines are in the log and their checks, not copied: a reader
//!   reads each line back and verifies it on its own (checksum or HMAC,
//!   position, check). Copies made every checkpoint as big as the open
//!   claims, rewritten whole every few hundred records;
//! - the seal: SHA-256 of the first line, or HMAC-SHA-256 under the operator
//!   key when the log is keyed, so a checkpoint stands for the log exactly as
//!   much as its records do.
//!
//! A checkpoint is written only over records that are durable (right after an
//! fsync of the log) and only by a writable handle: the one whose own append
//! crossed a multiple of [`CHECKPOINT_EVERY`] records, or one that finds no
//! checkpoint within [`CHECKPOINT_LAG`] records of what it read; and one that
//! would cost more than [`BYTES_PER_RECORD`] per record appended since the
//! newest ([`size_of`]) is put off to a later boundary. It is not
//! fsynced itself (a rename over the old one): a crash may leave the old
//! one, none, or a torn or zeroed file,
//! and each of those either names durable records or fails its seal. A
//! checkpoint that does not verify (a wrong seal, a line that is not the one
//! it names, a log shorter than it says, an unknown version) is not used:
//! the reader falls back to a full load, and says so in its diagnostics. What
//! it does not check is the covered prefix itself: a full load (a decision,
//! `effects log verify`) still reads every record from the first and fails
//! closed on damage the checkpoint skipped.

use serde::{Deserialize, Serialize};

use super::frame::{self, Framed, OperatorKey};
use super::history::{History, HistorySnapshot};
use super::record::{Position, Record};
use super::witness::{self, Mark};

/// A checkpoint is written by the writer whose own append takes the log
/// past a multiple of this many records: one writer per boundary, however
/// many share the lineage, so a continuing process reads at most about
/// twice this many (a boundary whose writer died before its checkpoint is
/// covered at the next).
pub const CHECKPOINT_EVERY: u64 = 256;

/// A writer that knows of no checkpoint within this many records of what it
/// has read (a log from before checkpoints, writers that all died before
/// theirs) looks for a newer one on disk, and writes one if there is none.
pub const CHECKPOINT_LAG: u64 = 4 * CHECKPOINT_EVERY;

/// A writer puts a checkpoint that is due off while writing it would cost
/// more than this many bytes per record appended since the newest one (by
/// `checkpoint::size_of`), and looks again a boundary later.
/// So what checkpoints write stays proportional to what is appended, however
/// long the log or however many claims stay open, where rewriting one every
/// 256 records wrote about n²/512 bytes over a log's life; and a continuing
/// process reads up to about a checkpoint's bytes divided by this many
/// records after it (at about 1 KB a record, twice the checkpoint's bytes).
pub const BYTES_PER_RECORD: u64 = 512;

/// About how many bytes a checkpoint of `records` records naming `open`
/// open claims takes: a byte of the rules' state per record, and about 120
/// per open claim's reference (a processes record's too, not counted here).
pub fn size_of(records: Position, open: u64) -> u64 {
    records + 120 * open
}

/// The version this host writes and reads (1 copied the open records).
const VERSION: u32 = 2;

/// A checkpoint, as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    version: u32,
    keyed: bool,
    records: Position,
    offset: u64,
    last_line: u64,
    head: String,
    history: HistorySnapshot,
    open: Vec<OpenRef>,
}

/// One record a checkpoint keeps, by reference (see the module doc).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenRef {
    position: Position,
    /// Where its line starts in the log.
    start: u64,
    /// Where it ends, after its newline.
    end: u64,
    check: String,
}

/// A verified checkpoint: where to start and what was before it.
#[derive(Debug)]
pub struct Checkpoint {
    /// Records covered: the next position.
    pub records: Position,
    /// Bytes covered.
    pub offset: u64,
    /// Where the last covered record starts.
    pub last_line: u64,
    /// The last covered record's check, which the next `prev` must equal.
    pub head: [u8; 32],
    /// The history rules' state after the covered records.
    pub history: History,
    /// The open claims of the covered part and their processes records.
    pub open: Vec<Framed>,
}

/// What a writer hands [`encode`]: the state it has just made durable.
pub struct Cover<'a> {
    /// Records covered.
    pub records: Position,
    /// Bytes covered.
    pub offset: u64,
    /// Where the last covered record starts.
    pub last_line: u64,
    /// Its check.
    pub head: [u8; 32],
    /// The history after them.
    pub history: &'a History,
    /// The open claims' records and their processes records.
    pub open: Vec<&'a Framed>,
}

/// The checkpoint's bytes.
pub fn encode(cover: &Cover<'_>, key: Option<&OperatorKey>) -> Vec<u8> {
    let body = Body {
        version: VERSION,
        keyed: key.is_some(),
        records: cover.records,
        offset: cover.offset,
        last_line: cover.last_line,
        head: hex::encode(cover.head),
        history: cover.history.snapshot(),
        open: cover
            .open
            .iter()
            .map(|framed| OpenRef {
                position: framed.position,
                start: framed.line.start,
                end: framed.line.end,
                check: hex::encode(framed.check),
            })
            .collect(),
    };
    let mut bytes = serde_json::to_vec(&body).expect("a checkpoint serializes");
    let seal = frame::seal(key, &bytes);
    bytes.push(b'\n');
    bytes.extend_from_slice(seal.as_bytes());
    bytes.push(b'\n');
    bytes
}

/// Bytes at the start of a checkpoint that hold its record count (`encode`
/// writes `{"version":V,"keyed":B,"records":N,` first).
pub const HEADER_BYTES: u64 = 64;

/// How many records a checkpoint says it covers, from its first
/// [`HEADER_BYTES`], unverified: enough for a writer to see that another
/// wrote a newer one and leave it be (a checkpoint only saves work; one that
/// claims more than it covers fails verification when it is used, and the
/// log is read whole). Reading the whole checkpoint for this, as big as the
/// log's open claims, was a share of eight writers' time. One of another
/// version is not counted: this host would not use it, so it is due for
/// rewriting.
pub fn covered(head: &[u8]) -> Option<Position> {
    const FIELD: &[u8] = br#""records":"#;
    let version = format!(r#"{{"version":{VERSION},"#);
    if !head.starts_with(version.as_bytes()) {
        return None;
    }
    let at = head.windows(FIELD.len()).position(|window| window == FIELD)? + FIELD.len();
    let digits = head[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    // A count cut off by the end of the head is not read.
    if digits == 0 || at + digits == head.len() {
        return None;
    }
    std::str::from_utf8(&head[at..at + digits]).ok()?.parse().ok()
}

/// Verifies a checkpoint's bytes against its seal and against the log's own
/// lines: the last it covers and the open records it names
/// (`read_line(position, start, end)` reads the line of the record the
/// checkpoint says is at `position`, at bytes `start..end`:
/// [`Store::read_line`](super::store::Store::read_line)). `Err` says why it
/// is not used.
pub fn verify(
    bytes: &[u8],
    key: Option<&OperatorKey>,
    log_length: u64,
    mut read_line: impl FnMut(Position, u64, u64) -> std::io::Result<Vec<u8>>,
) -> Result<Checkpoint, String> {
    let body = open_sealed(bytes, key)?;
    let mark = mark_of(&body)?;
    witness::confirm(&mark, key, log_length, &mut read_line)?;
    let history = History::restore(body.history).ok_or("its history is malformed")?;
    if history.len() != body.records {
        return Err("its history does not cover its records".into());
    }
    // The writer names every open claim, in order, each followed by its
    // processes record if it has one (`EffectLog::checkpoint_if_due`); a
    // checkpoint naming any other set would hide a claim from recovery or
    // hand it a record that is not its own, so it is not used.
    let mut named = body.open.iter();
    let mut open = Vec::with_capacity(body.open.len());
    for claim in history.open_claims() {
        let kept = named.next().ok_or(format!("it leaves out open claim {claim}"))?;
        let framed = read_open(kept, key, body.offset, &mut read_line)
            .map_err(|why| format!("record {} it keeps: {why}", kept.position))?;
        if framed.position != claim || !matches!(framed.record, Record::Claim(_)) {
            return Err(format!("it names record {} where open claim {claim} belongs", kept.position));
        }
        open.push(framed);
        if history.has_processes(claim) {
            let kept = named.next().ok_or(format!("it leaves out the processes record of claim {claim}"))?;
            let framed = read_open(kept, key, body.offset, &mut read_line)
                .map_err(|why| format!("record {} it keeps: {why}", kept.position))?;
            if !matches!(&framed.record, Record::Processes(p) if p.claim == claim) {
                return Err(format!(
                    "it names record {} as the processes record of claim {claim}",
                    kept.position
                ));
            }
            open.push(framed);
        }
    }
    if let Some(extra) = named.next() {
        return Err(format!("it keeps record {} that is no open claim or its processes", extra.position));
    }
    Ok(Checkpoint {
        records: body.records,
        offset: body.offset,
        last_line: body.last_line,
        head: mark.check,
        history,
        open,
    })
}

/// The body of a checkpoint whose seal verifies, of this host's version
/// and keying; `Err` says why it is not one.
fn open_sealed(bytes: &[u8], key: Option<&OperatorKey>) -> Result<Body, String> {
    let text = bytes.strip_suffix(b"\n").ok_or("it does not end with a newline")?;
    let split = text.iter().rposition(|&b| b == b'\n').ok_or("it has no seal")?;
    let (body_bytes, seal) = (&text[..split], &text[split + 1..]);
    if frame::seal(key, body_bytes).as_bytes() != seal {
        return Err(match key {
            Some(_) => "its seal is not the operator key's HMAC of it".into(),
            None => "its seal is not the SHA-256 of it".into(),
        });
    }
    let body: Body = crate::model::resource::trusted(|| serde_json::from_slice(body_bytes))
        .map_err(|e| format!("it is not a checkpoint: {e}"))?;
    if body.version != VERSION {
        return Err(format!("version {} (this host reads {VERSION})", body.version));
    }
    if body.keyed != key.is_some() {
        return Err("it was written with another keying than the log is read with".into());
    }
    Ok(body)
}

/// What a checkpoint says of the log's last covered record.
fn mark_of(body: &Body) -> Result<Mark, String> {
    let head = hex::decode(&body.head).ok().and_then(|head| head.try_into().ok());
    let head = head.ok_or("its head is not 64 hex digits")?;
    Ok(Mark { records: body.records, offset: body.offset, last_line: body.last_line, check: head })
}

/// What a checkpoint sealed with the operator key says of how far the log
/// reached: a keyed mark (`witness`), which a reader confirms even when it
/// reads the log whole. `None` for anything not sealed with `key`.
pub fn mark(bytes: &[u8], key: &OperatorKey) -> Option<Mark> {
    open_sealed(bytes, Some(key)).ok().and_then(|body| mark_of(&body).ok())
}

/// Reads the line `kept` names from the log and verifies it on its own: a
/// line (one JSON value, so one line) within the `covered` bytes, a record by
/// its checksum or HMAC, at the position and with the check the checkpoint
/// says.
fn read_open(
    kept: &OpenRef,
    key: Option<&OperatorKey>,
    covered: u64,
    read_line: &mut impl FnMut(Position, u64, u64) -> std::io::Result<Vec<u8>>,
) -> Result<Framed, String> {
    if kept.start >= kept.end || kept.end > covered {
        return Err(format!("its line {}..{} is not within what it covers", kept.start, kept.end));
    }
    let bytes = read_line(kept.position, kept.start, kept.end).map_err(|e| format!("reading it: {e}"))?;
    let line = bytes.strip_suffix(b"\n").ok_or("no line ends where it says")?;
    let (mut framed, _) = frame::decode_alone(line, key).map_err(|e| e.to_string())?;
    if framed.position != kept.position || hex::encode(framed.check) != kept.check {
        return Err("the line there is another record".into());
    }
    framed.line = kept.start..kept.end;
    Ok(framed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_read_from_the_head_alone_and_never_from_a_cut_one() {
        let history = History::new();
        let cover = Cover {
            records: u64::MAX,
            offset: 9,
            last_line: 0,
            head: [0; 32],
            history: &history,
            open: Vec::new(),
        };
        let keyed = OperatorKey::new(vec![1; 16]).unwrap();
        for key in [None, Some(&keyed)] {
            let bytes = encode(&cover, key);
            assert_eq!(covered(&bytes[..HEADER_BYTES as usize]), Some(u64::MAX), "the longest head fits");
        }
        assert_eq!(covered(br#"{"version":2,"keyed":false,"records":1234,"offset""#), Some(1234));
        assert_eq!(covered(br#"{"version":2,"keyed":false,"records":1234"#), None, "may be cut short");
        assert_eq!(covered(br#"{"version":2,"keyed":false,"records":"#), None);
        assert_eq!(covered(b"\0\0\0\0"), None);
        assert_eq!(covered(br#"{"version":1,"keyed":false,"records":1234,"offset""#), None, "not read");
    }

    /// [`size_of`] is what a writer weighs before writing a checkpoint: it
    /// must be near what [`encode`] writes, for few open claims and many.
    #[test]
    fn size_of_is_near_what_a_checkpoint_takes() {
        let (first, _) =
            frame::tests::encode(0, "run", &frame::tests::sample_record(), &frame::GENESIS, None);
        let mut framed = frame::decode(&first[..first.len() - 1], 0, &frame::GENESIS, None).unwrap();
        framed.line = 1_000_000_000..1_000_001_100; // where a long log's lines are
        for (records, open) in [(100_000, 0), (100_000, 10), (20_000, 20_000)] {
            let mut history = History::new();
            for _ in 0..records {
                history.admit("a-run-id", &framed.record).unwrap();
            }
            let open_refs = vec![&framed; open as usize];
            let cover =
                Cover { records, offset: 1, last_line: 0, head: [0; 32], history: &history, open: open_refs };
            let written = encode(&cover, None).len() as f64;
            let estimate = size_of(records, open) as f64;
            assert!(
                (0.5..2.0).contains(&(written / estimate)),
                "{records} records, {open} open: {written} bytes"
            );
        }
    }
}
