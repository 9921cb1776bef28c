//! Retention (SPEC 9): sealing a settled lineage and pruning sealed ones.
//!
//! **Seal** (`effects log seal --run ID`), under the log's exclusive lock
//! (`EffectLog::seal`): every record is read and verified from the first; a
//! claim without an outcome, or still RUNNING, refuses the seal. The log's
//! exact bytes are written gzip-compressed to `DATA/sealed/<lineage>.log.gz`,
//! then a [`Summary`] to `DATA/sealed/<lineage>.seal.json` (final head, record
//! counts by kind, runs, every decision, the digests of the log and of the
//! archive), each durably (fsync, rename, directory fsync). Only then is the
//! seal marker written beside the log, durably: from then on every append
//! to the lineage is refused, by any handle, old or new, so nothing can land
//! after what the archive holds. The log itself stays readable in place.
//!
//! **Check** ([`check`]): the archive, decompressed, must have the summary's
//! digest and length, and verify record by record (checksums, hash chain,
//! HMAC with the operator key, history rules) to the summary's head and
//! counts.
//!
//! **Prune** (`effects log prune --older-than AGE`): every lineage sealed
//! longer ago than AGE loses its log, head mark, checkpoint, archive and
//! summary. Its seal marker stays as a tombstone: a handle still open on the removed log
//! would otherwise append to a file no longer there and believe it durable,
//! and a new writer would start the lineage again from nothing. A lineage
//! is pruned only while its summary names it and its archive, its seal
//! marker is there (else the seal did not finish and the log is still
//! writable) and its archive is there with the summary's sha256 (else the
//! log is the only sound copy); any other is skipped and reported, and the
//! rest are pruned all the same.
//!
//! The fleet store is not sealed here: its lineages live in the database,
//! whose retention is its own (docs/fleet.md).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use crate::data_dir::DataDir;
use crate::digest::Sha256Digest;
use crate::log::durable;
use crate::log::{
    Framed, History, LogError, OpenMode, OpenOptionsLog, OperatorKey, Position, Record, Sidecar, scan,
};
use crate::model::Verdict;

/// The directory of archives and summaries beneath the data dir.
pub const SEALED: &str = "sealed";

/// The largest archive read back (16 GiB).
const ARCHIVE_BOUND: u64 = 16 << 30;

/// A sealed lineage's summary: what its archive must verify to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// The lineage.
    pub lineage: String,
    /// When it was sealed, in seconds since the Unix epoch.
    pub sealed_at: u64,
    /// How many records the log holds.
    pub records: u64,
    /// The log's length in bytes.
    pub bytes: u64,
    /// The check of the last record (the head of the hash chain), hex.
    pub head: String,
    /// SHA-256 of the log's bytes.
    pub log_sha256: String,
    /// The archive's file name in `sealed/`.
    pub archive: String,
    /// SHA-256 of the archive's bytes.
    pub archive_sha256: String,
    /// Records by kind.
    pub kinds: BTreeMap<String, u64>,
    /// The runs that wrote to it.
    pub runs: Vec<String>,
    /// Every decision, in log order.
    pub decisions: Vec<SealedDecision>,
}

/// One decision of a sealed lineage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedDecision {
    /// The run that recorded it.
    pub run: String,
    /// Its position.
    pub position: Position,
    /// Its verdict.
    pub verdict: Verdict,
}

/// The summary of `records`, read from `bytes`.
fn summarize(lineage: &str, bytes: &[u8], records: &[Framed], archive: &[u8], sealed_at: u64) -> Summary {
    let mut kinds = BTreeMap::new();
    let mut runs: Vec<String> = Vec::new();
    let mut decisions = Vec::new();
    for framed in records {
        *kinds.entry(framed.record.kind().to_owned()).or_insert(0) += 1;
        if !runs.contains(&framed.run_id) {
            runs.push(framed.run_id.clone());
        }
        if let Record::Decision(decision) = &framed.record {
            decisions.push(SealedDecision {
                run: framed.run_id.clone(),
                position: framed.position,
                verdict: decision.verdict,
            });
        }
    }
    Summary {
        lineage: lineage.to_owned(),
        sealed_at,
        records: records.len() as u64,
        bytes: bytes.len() as u64,
        head: hex::encode(records.last().map_or(crate::log::genesis(), |f| f.check)),
        log_sha256: Sha256Digest::of(bytes).to_string(),
        archive: archive_name(lineage),
        archive_sha256: Sha256Digest::of(archive).to_string(),
        kinds,
        runs,
        decisions,
    }
}

fn archive_name(lineage: &str) -> String {
    format!("{lineage}.log.gz")
}

fn summary_name(lineage: &str) -> String {
    format!("{lineage}.seal.json")
}

/// Why a lineage could not be sealed, checked or pruned.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// The data dir has no log of that lineage.
    #[error("no log of {lineage} in {store}")]
    NoLog {
        /// The lineage.
        lineage: String,
        /// Where it was looked for.
        store: String,
    },
    /// The lineage was never sealed (no summary).
    #[error("{lineage} is not sealed: no {SEALED}/{} in {data}", summary_name(lineage))]
    NotSealed {
        /// The lineage.
        lineage: String,
        /// The data dir.
        data: String,
    },
    /// The archive does not verify to its summary.
    #[error("the archive of {lineage} does not verify against its summary: {why}")]
    Mismatch {
        /// The lineage.
        lineage: String,
        /// What differs.
        why: String,
    },
    /// The fleet store: retention is the database's.
    #[error(
        "the lineages are on the fleet store ({0}); sealing and pruning apply to a data dir's own logs, and \
         the database keeps its own retention (docs/fleet.md)"
    )]
    FleetStore(String),
    /// Reading or writing failed.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Seals `lineage` (see the module docs); returns its summary.
pub fn seal(data: &DataDir, lineage: &str, key: Option<&OperatorKey>) -> Result<Summary, RetentionError> {
    if let Some(server) = data.server_display() {
        return Err(RetentionError::FleetStore(server));
    }
    let options =
        OpenOptionsLog { mode: OpenMode::ReadWrite, key: key.cloned(), recover: false, ..Default::default() };
    let Some(mut log) = data.open_lineage(lineage, false, &options)? else {
        return Err(RetentionError::NoLog { lineage: lineage.to_owned(), store: data.store_display() });
    };
    let sealed = sealed_dir(data)?;
    let display = format!("{}/{SEALED}", data.display());
    let sealed_at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let written = std::cell::Cell::new(false);
    let sealing = log.seal(|bytes, records| {
        let archive = compress(bytes).map_err(io(&display, "compress the log"))?;
        let summary = summarize(lineage, bytes, records, &archive, sealed_at);
        durable::replace(&sealed, &display, &summary.archive, &archive)?;
        let text = serde_json::to_string_pretty(&summary).expect("a summary serializes") + "\n";
        durable::replace(&sealed, &display, &summary_name(lineage), text.as_bytes())?;
        written.set(true);
        let marker = serde_json::json!({
            "sealed_at": sealed_at,
            "records": summary.records,
            "head": summary.head,
            "summary": format!("{display}/{}", summary_name(lineage)),
        });
        Ok((summary, marker.to_string()))
    });
    match sealing {
        Ok(summary) => Ok(summary),
        Err(error) => {
            // Written, but the marker was not: the lineage is not sealed, so
            // no summary may say it is.
            if written.get() {
                for name in [archive_name(lineage), summary_name(lineage)] {
                    if let Err(removal) = sealed.remove_file(&name) {
                        let left = format!("{display}/{name}");
                        tracing::warn!("{left} is left from a seal that failed: {removal}");
                    }
                }
            }
            Err(error.into())
        }
    }
}

/// Checks `lineage`'s archive against its summary; returns the summary.
pub fn check(data: &DataDir, lineage: &str, key: Option<&OperatorKey>) -> Result<Summary, RetentionError> {
    let summary = read_summary(data, lineage)?;
    let sealed = sealed_dir(data)?;
    let display = format!("{}/{SEALED}", data.display());
    let mismatch = |why: String| RetentionError::Mismatch { lineage: lineage.to_owned(), why };
    let archive = durable::read_bounded(&sealed, &display, &summary.archive, ARCHIVE_BOUND)?
        .ok_or_else(|| mismatch(format!("the archive {display}/{} is missing", summary.archive)))?;
    if Sha256Digest::of(&archive).to_string() != summary.archive_sha256 {
        return Err(mismatch("the archive's sha256 is not the summary's".into()));
    }
    // Never more than the summary's length (and a byte to see it is more):
    // a forged archive cannot make the check inflate without bound.
    let bytes = decompress(&archive, summary.bytes.saturating_add(1))
        .map_err(|e| mismatch(format!("the archive does not decompress: {e}")))?;
    if bytes.len() as u64 != summary.bytes || Sha256Digest::of(&bytes).to_string() != summary.log_sha256 {
        return Err(mismatch("the log in the archive is not the one the summary describes".into()));
    }
    let mut history = History::new();
    let scanned = scan(&bytes, 0, crate::log::genesis(), key, &mut history)
        .map_err(|defect| mismatch(format!("line {}: {}", defect.line, defect.reason)))?;
    if scanned.torn != 0 || scanned.consumed != summary.bytes {
        return Err(mismatch("the archived log ends in a torn line".into()));
    }
    let again = summarize(lineage, &bytes, &scanned.records, &archive, summary.sealed_at);
    if again != summary {
        return Err(mismatch("its records do not give the summary's head, counts, runs or decisions".into()));
    }
    Ok(summary)
}

/// A lineage pruned, or that would be.
#[derive(Debug, Clone, Serialize)]
pub struct Pruned {
    /// The lineage.
    pub lineage: String,
    /// When it was sealed.
    pub sealed_at: u64,
    /// The files removed (or to remove), by name.
    pub removed: Vec<String>,
}

/// A summary prune found and left alone, and why: the others are pruned all
/// the same, so one damaged or half-sealed lineage never blocks retention.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// The lineage its file name gives.
    pub lineage: String,
    /// Why it was not pruned.
    pub why: String,
}

/// What one prune did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PruneReport {
    /// Lineages pruned (or that would be).
    pub pruned: Vec<Pruned>,
    /// Summaries left alone: one whose seal did not finish (a crash between
    /// its summary and its marker: the log is still writable, so removing it
    /// would lose records), one that names another lineage or archive or
    /// does not parse, one whose archive is missing or no longer has the
    /// summary's sha256.
    pub skipped: Vec<Skipped>,
}

/// Removes every lineage sealed more than `older_than` before `now` (see
/// the module docs), or with `dry_run` only lists them. A summary that
/// cannot be trusted to describe a finished seal is skipped and reported,
/// never acted on.
pub fn prune(
    data: &DataDir,
    older_than: Duration,
    now: SystemTime,
    dry_run: bool,
) -> Result<PruneReport, RetentionError> {
    if let Some(server) = data.server_display() {
        return Err(RetentionError::FleetStore(server));
    }
    let sealed = sealed_dir(data)?;
    let display = format!("{}/{SEALED}", data.display());
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut names: Vec<String> = sealed
        .entries()
        .map_err(io(&display, "list"))?
        .filter_map(|entry| entry.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|name| name.strip_suffix(".seal.json").is_some_and(|l| DataDir::log_name(l).is_ok()))
        .collect();
    names.sort();
    let mut report = PruneReport::default();
    let store = data.open_store(OpenMode::ReadOnly)?;
    for name in names {
        let lineage = name.strip_suffix(".seal.json").expect("filtered on the suffix");
        let skip = |why: String| Skipped { lineage: lineage.to_owned(), why };
        let summary = match read_summary(data, lineage) {
            Ok(summary) => summary,
            Err(error) => {
                report.skipped.push(skip(error.to_string()));
                continue;
            }
        };
        if summary.lineage != lineage || summary.archive != archive_name(lineage) {
            report
                .skipped
                .push(skip(format!("its summary names {} and {}", summary.lineage, summary.archive)));
            continue;
        }
        if now.saturating_sub(summary.sealed_at) < older_than.as_secs() {
            continue;
        }
        let log = DataDir::log_name(lineage).expect("filtered on a valid log name");
        // Only a lineage whose marker is there is pruned: the marker is what
        // keeps a handle from appending to a removed log, and without it the
        // seal did not finish (the log may have grown since the summary).
        let marker = format!("{log}.{}", Sidecar::Sealed.suffix());
        if store.as_ref().is_none_or(|store| store.symlink_metadata(&marker).is_err()) {
            report.skipped.push(skip(format!(
                "its summary is here but its seal marker {marker} is not (a seal that did not finish: \
                 seal it again)"
            )));
            continue;
        }
        // The log goes only while its archive is there and still the one its
        // summary describes: a lost or damaged archive keeps the log.
        let archive_problem = match archive_sha256(&sealed, &display, &summary.archive) {
            Ok(Some(digest)) if digest == summary.archive_sha256 => None,
            Ok(Some(_)) => Some(format!(
                "its archive {display}/{} is not the one its summary describes (check it with `log seal --check`)",
                summary.archive
            )),
            Ok(None) => Some(format!("its archive {display}/{} is missing", summary.archive)),
            Err(error) => Some(error.to_string()),
        };
        if let Some(why) = archive_problem {
            report.skipped.push(skip(why));
            continue;
        }
        // The keyed marks go first (the head mark, the checkpoint): a prune
        // cut short must not leave one naming records of a log no longer
        // there (`log::witness`).
        let store_files = [
            format!("{log}.{}", Sidecar::Head.suffix()),
            format!("{log}.{}", Sidecar::Checkpoint.suffix()),
            log.clone(),
            format!("{log}.broken"),
        ];
        let mut removed = Vec::new();
        if let Some(store) = &store {
            for file in store_files.iter().filter(|f| store.symlink_metadata(f).is_ok()) {
                if !dry_run {
                    store.remove_file(file).map_err(io(&data.store_display(), "remove"))?;
                }
                removed.push(format!("{}/{file}", data.store_display()));
            }
            if !dry_run {
                durable::sync_dir(store, &data.store_display())?;
            }
        }
        for file in [summary.archive.clone(), name.clone()] {
            if sealed.symlink_metadata(&file).is_ok() {
                if !dry_run {
                    sealed.remove_file(&file).map_err(io(&display, "remove"))?;
                }
                removed.push(format!("{display}/{file}"));
            }
        }
        if !dry_run {
            durable::sync_dir(&sealed, &display)?;
        }
        report.pruned.push(Pruned { lineage: lineage.to_owned(), sealed_at: summary.sealed_at, removed });
    }
    Ok(report)
}

/// The archive's SHA-256 in hex, streamed (an archive can be large), or
/// `None` when it is absent.
fn archive_sha256(sealed: &Dir, display: &str, name: &str) -> Result<Option<String>, LogError> {
    use sha2::{Digest as _, Sha256};
    let Some(mut file) = durable::open_checked(sealed, display, name)? else { return Ok(None) };
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(durable::io(format!("{display}/{name}"), "read"))?;
    Ok(Some(hex::encode(hasher.finalize())))
}

fn read_summary(data: &DataDir, lineage: &str) -> Result<Summary, RetentionError> {
    let not_sealed =
        || RetentionError::NotSealed { lineage: lineage.to_owned(), data: data.display().to_owned() };
    let Ok(sealed) = open_nofollow(data.dir(), SEALED) else { return Err(not_sealed()) };
    let display = format!("{}/{SEALED}", data.display());
    let text =
        durable::read_bounded(&sealed, &display, &summary_name(lineage), 16 << 20)?.ok_or_else(not_sealed)?;
    serde_json::from_slice(&text).map_err(|e| RetentionError::Mismatch {
        lineage: lineage.to_owned(),
        why: format!("its summary is not one: {e}"),
    })
}

/// `DATA/sealed`, made `0700` and fsynced into the data dir when missing.
fn sealed_dir(data: &DataDir) -> Result<Dir, RetentionError> {
    let display = data.display().to_owned();
    match open_nofollow(data.dir(), SEALED) {
        Ok(dir) => Ok(dir),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let mut builder = cap_std::fs::DirBuilder::new();
            cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match data.dir().create_dir_with(SEALED, &builder) {
                Ok(()) => durable::sync_dir(data.dir(), &display)?,
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(io(&display, "create sealed/")(error).into()),
            }
            Ok(open_nofollow(data.dir(), SEALED).map_err(io(&display, "open sealed/"))?)
        }
        Err(error) => Err(io(&display, "open sealed/")(error).into()),
    }
}

/// `name` beneath `dir`, never through a symbolic link in its place.
fn open_nofollow(dir: &Dir, name: &str) -> std::io::Result<Dir> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    Ok(Dir::from_std_file(std::fs::File::from(fd)))
}

fn io<'a>(path: &'a str, operation: &'static str) -> impl FnOnce(std::io::Error) -> LogError + 'a {
    move |source| LogError::Io { path: path.to_owned(), operation, source }
}

fn compress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes)?;
    encoder.finish()
}

/// At most `limit` bytes of the log compressed in `bytes`.
fn decompress(bytes: &[u8], limit: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// `30d`, `12h`, `90m`, `45s` (or a bare number of seconds) as a duration.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: give a whole number and a unit, e.g. 30d, 12h, 90m, 45s"))?;
    let seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        other => return Err(format!("{text:?}: unknown unit {other:?}; use s, m, h, d or w")),
    };
    number.checked_mul(seconds).map(Duration::from_secs).ok_or_else(|| format!("{text:?}: too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_an_operator_writes_them() {
        assert_eq!(parse_age("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert_eq!(parse_age("12h").unwrap(), Duration::from_secs(12 * 3600));
        assert_eq!(parse_age("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_age("2w").unwrap(), Duration::from_secs(14 * 86_400));
        for bad in ["", "d", "3y", "-1d", "1.5h", "99999999999999999999d"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_archive_round_trips() {
        let bytes = b"{\"a\":1}\n{\"b\":2}\n".repeat(100);
        let archive = compress(&bytes).unwrap();
        assert!(archive.len() < bytes.len());
        assert_eq!(decompress(&archive, u64::MAX).unwrap(), bytes);
        assert!(decompress(&archive[..archive.len() / 2], u64::MAX).is_err());
        assert_eq!(decompress(&archive, 10).unwrap().len(), 10, "never more than the limit");
    }
}
