//! Framing: one record as one line of JSON, checksummed and chained.
//!
//! ```text
//! {"position":7,"run_id":"r1","prev":"<64 hex>","record":{"claim":{...}},"check":"<64 hex>"}\n
//! ```
//!
//! - `position` is the record's zero-based index in the file (HIS-1);
//! - `prev` is the previous record's `check` (64 zeros for the first): a hash
//!   chain, so a removed, reordered or duplicated line breaks it (SPEC 9);
//! - `check` is SHA-256 over the line's bytes up to (not including) `,"check"`,
//!   followed by `}`: exactly the serialization of the envelope without the
//!   field. With an operator key it is HMAC-SHA-256 under that key instead, and
//!   the envelope says `"auth":"hmac-sha256"` so a reader never guesses.
//!
//! A line is *torn* when the file ends without its `\n`: the writer died
//! mid-append, and the bytes were never acknowledged. Every other defect (a bad
//! checksum on a terminated line, a broken chain, a wrong position, unparseable
//! JSON, an unknown field or enum value) is *corruption* (LOG-6).

use std::borrow::Cow;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::record::{Position, Record};

/// The `prev` of the first record.
pub const GENESIS: [u8; 32] = [0; 32];

/// Length of the `,"check":"<64 hex>"}` suffix every line ends with.
const CHECK_SUFFIX_LEN: usize = r#","check":""#.len() + 64 + r#""}"#.len();

/// An operator key: records are authenticated with HMAC-SHA-256 under it.
#[derive(Clone)]
pub struct OperatorKey(Vec<u8>);

impl OperatorKey {
    /// A key from its bytes (at least 16).
    pub fn new(bytes: Vec<u8>) -> Result<Self, String> {
        if bytes.len() < 16 {
            return Err(format!("an operator key needs at least 16 bytes, got {}", bytes.len()));
        }
        Ok(Self(bytes))
    }
}

impl std::fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorKey(..)")
    }
}

/// How a record is authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Auth {
    HmacSha256,
}

/// The envelope as written, without its check.
#[derive(Serialize)]
struct EnvelopeOut<'a> {
    position: Position,
    run_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth: Option<Auth>,
    prev: &'a str,
    record: &'a RawValue,
}

/// A record serialized on its own, to be framed later at whatever position
/// and after whatever check an append finds under the lock: the
/// serialization, most of framing's work, is done before the lock is taken
/// (issue 18: every other writer waits while the lock is held). Framed
/// verbatim, it spells the line exactly as serializing the record inside
/// the envelope would.
#[derive(Debug)]
pub struct Body(Box<RawValue>);

impl Body {
    /// `record`, serialized.
    pub fn of(record: &Record) -> Self {
        Self(serde_json::value::to_raw_value(record).expect("records always serialize"))
    }
}

/// The envelope as read, with its check. The two hashes are borrowed from
/// the line when they hold no escape (as `encode` writes them): no
/// allocation for either, per record of every load and merge.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvelopeIn<'a> {
    position: Position,
    run_id: String,
    #[serde(default)]
    auth: Option<Auth>,
    #[serde(borrow)]
    prev: Cow<'a, str>,
    record: Record,
    #[serde(borrow)]
    check: Cow<'a, str>,
}

/// A decoded, verified record with its place in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed {
    /// Its position.
    pub position: Position,
    /// The run that wrote it.
    pub run_id: String,
    /// The record.
    pub record: Record,
    /// Its check, which the next record's `prev` must equal.
    pub check: [u8; 32],
    /// Where its line is in the log, newline included (from 0 when it was
    /// decoded on its own, outside a log): what a checkpoint names it by.
    pub line: std::ops::Range<u64>,
}

/// Why a line is not a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not JSON at all: what a crash leaves of a write (zeros, part of a
    /// line), or any other damage that breaks the syntax.
    #[error("not a record: {0}")]
    Garbled(String),
    /// JSON, but not our schema (unknown field, unknown enum value, ...):
    /// written or altered so, never left by a crash.
    #[error("not a valid record: {0}")]
    Schema(String),
    /// The checksum does not match the bytes.
    #[error("checksum mismatch: the line's bytes were altered")]
    Checksum,
    /// The HMAC does not match the bytes under the key given: the bytes
    /// were altered, or the key is not the one the log was written with
    /// (nothing tells the two apart but the key's owner).
    #[error(
        "HMAC mismatch under the operator key given: the line's bytes were altered, or this is not the key the \
         log was written with (check --key-file or $EFFECTS_LOG_KEY_FILE)"
    )]
    Mac,
    /// The position is not the line's index.
    #[error("position {found} where {expected} belongs (removed, duplicated or reordered line)")]
    Position {
        /// Position the line must have.
        expected: Position,
        /// Position it has.
        found: Position,
    },
    /// `prev` is not the previous record's check.
    #[error("hash chain broken: prev does not match the previous record's check")]
    Chain,
    /// Keyed record without a key, or the reverse.
    #[error("{0}")]
    Auth(String),
}

fn check_of(key: Option<&OperatorKey>, bytes: &[u8]) -> [u8; 32] {
    check_of_parts(key, &[bytes])
}

/// [`check_of`] over `parts` joined, without joining them.
fn check_of_parts(key: Option<&OperatorKey>, parts: &[&[u8]]) -> [u8; 32] {
    match key {
        None => {
            let mut hash = Sha256::new();
            parts.iter().for_each(|part| hash.update(part));
            hash.finalize().into()
        }
        Some(key) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(&key.0).expect("HMAC takes any key length");
            parts.iter().for_each(|part| mac.update(part));
            mac.finalize().into_bytes().into()
        }
    }
}

/// Encodes the record serialized as `body` at `position` after a record
/// whose check was `prev`. Returns the line (with its `\n`) and the new
/// record's check.
pub fn encode(
    position: Position,
    run_id: &str,
    body: &Body,
    prev: &[u8; 32],
    key: Option<&OperatorKey>,
) -> (Vec<u8>, [u8; 32]) {
    let mut prev_hex = [0u8; 64];
    let envelope = EnvelopeOut {
        position,
        run_id,
        auth: key.map(|_| Auth::HmacSha256),
        prev: lower_hex(prev, &mut prev_hex),
        record: &body.0,
    };
    let mut line = serde_json::to_vec(&envelope).expect("records always serialize");
    let check = check_of(key, &line);
    line.pop(); // the closing brace; the check goes before it
    line.extend_from_slice(br#","check":""#);
    line.extend_from_slice(lower_hex(&check, &mut [0u8; 64]).as_bytes());
    line.extend_from_slice(b"\"}\n");
    (line, check)
}

/// `bytes` as 64 lower-case hex characters, written into `out`: the two
/// hashes of every line are spelled without allocating (`hex::encode` builds
/// its `String` a character at a time).
fn lower_hex<'a>(bytes: &[u8; 32], out: &'a mut [u8; 64]) -> &'a str {
    hex::encode_to_slice(bytes, out).expect("64 bytes hold 32 in hex");
    std::str::from_utf8(out).expect("hex is ASCII")
}

/// Decodes 64 lower-case hex characters, the only spelling `encode` writes.
/// `hex` also accepts upper case, which would let the check or `prev` of a
/// line be respelled and still verify. (Other respellings of a line, an
/// escaped `prev` or a space after a colon, change its checksum, so only a
/// forger who recomputes it and every later one, which a keyed log's HMAC
/// prevents, gets them past `decode`; see docs/limitations.md.) One pass,
/// each digit read once: a load reads three of these per line.
fn lower_hex_32(text: &[u8], out: &mut [u8; 32]) -> bool {
    const fn digit(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        }
    }
    if text.len() != 64 {
        return false;
    }
    for (pair, byte) in text.chunks_exact(2).zip(out.iter_mut()) {
        let (Some(high), Some(low)) = (digit(pair[0]), digit(pair[1])) else { return false };
        *byte = high << 4 | low;
    }
    true
}

/// Decodes one line (without its `\n`) that must sit at `expected` after a
/// record whose check was `prev`.
pub fn decode(
    line: &[u8],
    expected: Position,
    prev: &[u8; 32],
    key: Option<&OperatorKey>,
) -> Result<Framed, FrameError> {
    let (framed, chained) = decode_alone(line, key)?;
    if framed.position != expected {
        return Err(FrameError::Position { expected, found: framed.position });
    }
    if &chained != prev {
        return Err(FrameError::Chain);
    }
    Ok(framed)
}

/// Decodes one line on its own: schema, authentication and checksum, but not
/// its place (position, chain). Returns the record and the `prev` it names.
/// What a checkpoint's reader (LOG-10) and the torn-tail judge (LOG-3) use
/// for a line whose predecessor they do not read.
pub fn decode_alone(line: &[u8], key: Option<&OperatorKey>) -> Result<(Framed, [u8; 32]), FrameError> {
    let judged = |e: serde_json::Error| match e.is_data() {
        true => FrameError::Schema(e.to_string()),
        false => FrameError::Garbled(e.to_string()),
    };
    // UTF-8 is checked once for the whole line: `from_str` then takes each
    // string as it stands, where `from_slice` checks every one again. A line
    // that is not UTF-8 is judged by `from_slice`, which names its first
    // defect in reading order: a schema error before a stray byte is
    // corruption, never a torn tail (`scan`). The log's records hold
    // resource refs this host wrote (ID-1): the frame decoder is one of the
    // crate's loaders.
    let envelope: EnvelopeIn = match std::str::from_utf8(line) {
        Ok(text) => crate::model::resource::trusted(|| serde_json::from_str(text)).map_err(judged)?,
        Err(not_text) => {
            let first = crate::model::resource::trusted(|| serde_json::from_slice::<EnvelopeIn>(line)).err();
            return Err(
                first.map_or_else(|| FrameError::Garbled(format!("not UTF-8 text: {not_text}")), judged)
            );
        }
    };
    match (envelope.auth, key) {
        (None, Some(_)) => {
            return Err(FrameError::Auth(
                "record is not authenticated, but an operator key was given: a log is keyed from its first \
                 record or never; use it without the key, or start a new run with it"
                    .into(),
            ));
        }
        (Some(Auth::HmacSha256), None) => {
            return Err(FrameError::Auth(
                "this log is keyed: its records are authenticated with an operator key; give --key-file \
                 (or $EFFECTS_LOG_KEY_FILE)"
                    .into(),
            ));
        }
        _ => {}
    }
    // Parsing succeeded, so the line ends with `,"check":"<hex>"}` exactly when
    // it was written by `encode`; anything else cannot match the checksum.
    let check = sealed_check(line, key)?;
    // The field the parser read is those same 64 characters: the line
    // parsed and ends `,"check":"<hex>"}`, so its last member is that one,
    // and the parser refuses a second `check`. Kept as a defence; no line
    // that gets here fails it.
    if check_hex(line) != Some(envelope.check.as_bytes()) {
        return Err(FrameError::Checksum);
    }
    // `prev` is inside the checksummed body, so a spelling `encode` never
    // writes fails here only if the checksum was forged to match it.
    let mut chained = [0u8; 32];
    if !lower_hex_32(envelope.prev.as_bytes(), &mut chained) {
        return Err(FrameError::Chain);
    }
    let framed = Framed {
        position: envelope.position,
        run_id: envelope.run_id,
        record: envelope.record,
        check,
        line: 0..line.len() as u64 + 1,
    };
    Ok((framed, chained))
}

/// The check a line (without its `\n`) ends with, verified against the
/// line's bytes: the checksum, or the HMAC under `key`, of the line without
/// its check, closed (`encode`'s body), hashed in two parts. What both
/// [`decode_alone`] and [`verify_frame`] judge a line's bytes by.
fn sealed_check(line: &[u8], key: Option<&OperatorKey>) -> Result<[u8; 32], FrameError> {
    let check = check_in(line).ok_or(FrameError::Checksum)?;
    if check_of_parts(key, &[&line[..line.len() - CHECK_SUFFIX_LEN], b"}"]) != check {
        return Err(if key.is_some() { FrameError::Mac } else { FrameError::Checksum });
    }
    Ok(check)
}

/// The 64 characters between `,"check":"` and `"}` at a line's end (the
/// line without its `\n`), if it ends so: where `encode` spells the check.
fn check_hex(line: &[u8]) -> Option<&[u8]> {
    let suffix = line.len().checked_sub(CHECK_SUFFIX_LEN).map(|at| &line[at..])?;
    suffix.strip_prefix(br#","check":""#)?.strip_suffix(b"\"}")
}

/// The check a line (without its `\n`) ends with, read from its last
/// bytes without decoding or verifying anything else: `None` unless it ends
/// `,"check":"<64 lower-case hex>"}` as `encode` writes it: what
/// [`sealed_check`] verifies.
fn check_in(line: &[u8]) -> Option<[u8; 32]> {
    let mut check = [0u8; 32];
    lower_hex_32(check_hex(line)?, &mut check).then_some(check)
}

/// The frame's own checks of a line (without its `\n`), without decoding
/// its record: it starts `{"position":N,`, ends with a check in `encode`'s
/// spelling that matches its bytes (checksum, or HMAC under `key`), and its
/// first `"prev":"` names 64 lower-case hex. Answers the position, `prev`
/// and check; `None` for anything else, including a valid record spelled
/// otherwise, which only a full [`decode`] may judge. What lets an append
/// pass over others' lines under the lock (`scan::pass_over`) yet refuse
/// damaged ones there; the record itself is decoded after.
pub fn verify_frame(line: &[u8], key: Option<&OperatorKey>) -> Option<(Position, [u8; 32], [u8; 32])> {
    let digits = line.strip_prefix(br#"{"position":"#)?;
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    if end == 0 || digits[end] != b',' || (digits[0] == b'0' && end > 1) {
        return None;
    }
    let position = std::str::from_utf8(&digits[..end]).ok()?.parse().ok()?;
    let check = sealed_check(line, key).ok()?;
    const PREV: &[u8] = br#","prev":""#;
    let at = memchr::memmem::find(line, PREV)? + PREV.len();
    let mut prev = [0u8; 32];
    let hex = line.get(at..at + 64)?;
    (lower_hex_32(hex, &mut prev) && line.get(at + 64) == Some(&b'"')).then_some((position, prev, check))
}

/// A MAC or checksum over `bytes`, hex: what a checkpoint carries (LOG-10),
/// under the operator key when there is one, as the records are.
pub fn seal(key: Option<&OperatorKey>, bytes: &[u8]) -> String {
    hex::encode(check_of(key, bytes))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::log::record::{ObservationRecord, Record};
    use crate::model::{Coverage, Mechanism, ResourceRef};

    /// [`super::encode`] of a record serialized in passing.
    pub(crate) fn encode(
        position: Position,
        run_id: &str,
        record: &Record,
        prev: &[u8; 32],
        key: Option<&OperatorKey>,
    ) -> (Vec<u8>, [u8; 32]) {
        super::encode(position, run_id, &Body::of(record), prev, key)
    }

    pub(crate) fn sample_record() -> Record {
        Record::Observation(ObservationRecord {
            resource: ResourceRef::new(
                crate::model::ResourceRole::Source,
                crate::model::Location::ProcessLaunch(3),
                "gen:3".into(),
                None,
            ),
            mechanism: Mechanism::JobState,
            coverage: Coverage::Partial,
            source_action: "a1".into(),
            source_claim: None,
            exists: true,
            content_sha256: None,
            job_state: None,
        })
    }

    #[test]
    fn round_trips_and_chains() {
        let (first, check0) = encode(0, "run", &sample_record(), &GENESIS, None);
        assert_eq!(*first.last().unwrap(), b'\n');
        let framed = decode(&first[..first.len() - 1], 0, &GENESIS, None).unwrap();
        assert_eq!(framed.check, check0);
        assert_eq!(framed.record, sample_record());
        let (second, _) = encode(1, "run", &sample_record(), &check0, None);
        assert!(decode(&second[..second.len() - 1], 1, &check0, None).is_ok());
        assert_eq!(decode(&second[..second.len() - 1], 1, &GENESIS, None), Err(FrameError::Chain));
        assert!(matches!(
            decode(&second[..second.len() - 1], 2, &check0, None),
            Err(FrameError::Position { .. })
        ));
    }

    #[test]
    fn a_body_serialized_beforehand_frames_the_line_serializing_in_place_would() {
        #[derive(Serialize)]
        struct InPlace<'a> {
            position: Position,
            run_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            auth: Option<Auth>,
            prev: &'a str,
            record: &'a Record,
        }
        let Record::Observation(mut observation) = sample_record() else { unreachable!() };
        observation.source_action = "a \"quoted\" \\ back/slash é \u{1} \u{2028} end".into();
        let record = Record::Observation(observation);
        let key = OperatorKey::new(vec![7; 32]).unwrap();
        for (key, run_id) in [(None, "run"), (Some(&key), "r\"ü\n")] {
            let (line, check) = super::encode(9, run_id, &Body::of(&record), &[3; 32], key);
            let in_place = serde_json::to_vec(&InPlace {
                position: 9,
                run_id,
                auth: key.map(|_| Auth::HmacSha256),
                prev: &hex::encode([3; 32]),
                record: &record,
            })
            .unwrap();
            let suffix = format!(",\"check\":\"{}\"}}\n", hex::encode(check));
            assert_eq!(line, [&in_place[..in_place.len() - 1], suffix.as_bytes()].concat());
            assert_eq!(check, check_of(key, &in_place));
            let framed = decode(&line[..line.len() - 1], 9, &[3; 32], key).unwrap();
            assert_eq!(framed.record, record);
        }
    }

    #[test]
    fn the_check_a_line_ends_with_is_read_without_decoding_it() {
        let (line, check) = encode(4, "run", &sample_record(), &GENESIS, None);
        let line = &line[..line.len() - 1];
        assert_eq!(check_in(line), Some(check));
        let text = String::from_utf8(line.to_vec()).unwrap();
        let hex = hex::encode(check);
        assert_eq!(check_in(text.replace(&hex, &hex.to_uppercase()).as_bytes()), None, "only lower case");
        assert_eq!(check_in(&line[..line.len() - 1]), None, "no closing brace");
        assert_eq!(check_in(&line[..40]), None, "a line cut short");
        assert_eq!(check_in(b"}"), None);
    }

    #[test]
    fn a_frame_is_verified_without_decoding_its_record() {
        let key = OperatorKey::new(vec![7; 32]).unwrap();
        for key in [None, Some(&key)] {
            let (line, check) = encode(12, "run", &sample_record(), &[5; 32], key);
            let line = &line[..line.len() - 1];
            assert_eq!(verify_frame(line, key), Some((12, [5; 32], check)));
            let text = String::from_utf8(line.to_vec()).unwrap();
            let flipped = text.replacen("job_state", "job_statf", 1);
            assert_eq!(verify_frame(flipped.as_bytes(), key), None, "a byte changed");
            assert_eq!(
                verify_frame(text.replacen(":12,", ": 12,", 1).as_bytes(), key),
                None,
                "spelled otherwise"
            );
        }
        let (line, _) = encode(0, "run", &sample_record(), &GENESIS, None);
        let key = OperatorKey::new(vec![7; 32]).unwrap();
        assert_eq!(verify_frame(&line[..line.len() - 1], Some(&key)), None, "checked under another key");
    }

    #[test]
    fn keyed_records_need_the_key() {
        let key = OperatorKey::new(vec![7; 32]).unwrap();
        let other = OperatorKey::new(vec![8; 32]).unwrap();
        let (line, _) = encode(0, "run", &sample_record(), &GENESIS, Some(&key));
        let line = &line[..line.len() - 1];
        assert!(decode(line, 0, &GENESIS, Some(&key)).is_ok());
        assert_eq!(decode(line, 0, &GENESIS, Some(&other)), Err(FrameError::Mac));
        assert!(matches!(decode(line, 0, &GENESIS, None), Err(FrameError::Auth(_))));
        let (plain, _) = encode(0, "run", &sample_record(), &GENESIS, None);
        assert!(matches!(
            decode(&plain[..plain.len() - 1], 0, &GENESIS, Some(&key)),
            Err(FrameError::Auth(_))
        ));
    }

    #[test]
    fn lower_hex_is_hex_in_lower_case_and_nothing_else() {
        let bytes: [u8; 32] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        let text = hex::encode(bytes);
        let mut out = [0u8; 32];
        assert!(lower_hex_32(text.as_bytes(), &mut out));
        assert_eq!(out, bytes);
        let wrong = [
            text.to_uppercase(),
            text[1..].to_owned(),
            format!("{text}0"),
            text.replacen('0', "/", 1),
            text.replacen('9', ":", 1),
            text.replacen('a', "`", 1),
            text.replacen('f', "g", 1),
            format!("{}\u{e9}", &text[..62]),
        ];
        for bad in wrong {
            assert_ne!(bad, text);
            assert!(!lower_hex_32(bad.as_bytes(), &mut out), "{bad:?}");
        }
    }

    #[test]
    fn upper_case_hex_in_check_or_prev_does_not_verify() {
        let (first, check0) = encode(0, "run", &sample_record(), &GENESIS, None);
        let (second, _) = encode(1, "run", &sample_record(), &check0, None);
        let text = String::from_utf8(second[..second.len() - 1].to_vec()).unwrap();
        let check = hex::encode(decode(text.as_bytes(), 1, &check0, None).unwrap().check);
        let upper_check = text.replace(&check, &check.to_uppercase());
        assert_ne!(upper_check, text, "the check must hold a letter to change case");
        assert_eq!(decode(upper_check.as_bytes(), 1, &check0, None), Err(FrameError::Checksum));
        let prev = hex::encode(check0);
        let upper_prev = text.replacen(&prev, &prev.to_uppercase(), 1);
        assert_ne!(upper_prev, text);
        // The prev field is inside the checksummed body: a changed spelling
        // fails the checksum before the chain is compared.
        assert!(decode(upper_prev.as_bytes(), 1, &check0, None).is_err());
        assert!(decode(&first[..first.len() - 1], 0, &GENESIS, None).is_ok());
    }

    #[test]
    fn forged_enum_values_and_fields_are_schema_errors() {
        let (line, _) = encode(0, "run", &sample_record(), &GENESIS, None);
        let text = String::from_utf8(line).unwrap();
        let forged = text.replace("\"job_state\":null", "\"job_state\":\"zombie\"");
        assert!(matches!(
            decode(forged.trim_end().as_bytes(), 0, &GENESIS, None),
            Err(FrameError::Schema(_))
        ));
        let extra = text.replace("\"exists\":true", "\"exists\":true,\"verified\":true");
        assert!(matches!(decode(extra.trim_end().as_bytes(), 0, &GENESIS, None), Err(FrameError::Schema(_))));
    }
}
