//! `effects log seal` and `effects log prune`: retention (SPEC 9) as the
//! operator runs it; what they do is `effect_ledger::retention`'s.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use anyhow::anyhow;
use clap::Args;
use serde_json::json;

use effect_ledger::data_dir::DataDir;
use effect_ledger::ledger::Run;
use effect_ledger::retention::{self, RetentionError, Summary};

use super::input::read_key;
use super::output::out;
use super::runtime::{bad, open_data_dir};
use super::{Failure, exit};

/// Arguments of `effects log seal`.
#[derive(Args)]
#[command(after_help = "Seal: under the log's exclusive lock, every record is verified from the first \
and every claim must have its outcome (none unsettled, none RUNNING). The log's exact bytes go to \
DATA/sealed/<lineage>.log.gz and a summary to DATA/sealed/<lineage>.seal.json (final head, record counts, \
runs, decisions, digests), each fsynced; then a seal marker beside the log refuses every later append to \
the lineage, by any process. The log stays readable where it is until `effects log prune` removes it.

--check: verify the archive against its summary (digests, length, every record's checksum, chain and \
history rules, head, counts, runs and decisions) without changing anything.

Exit 0 sealed (or checked); 1 a claim is not settled, the log does not verify, or the archive does not \
match its summary; 2 bad input (no such run, not sealed, the fleet store).")]
pub struct SealArgs {
    /// The run whose lineage to seal (a child seals its whole lineage).
    #[arg(long)]
    run: String,
    /// Check the lineage's archive against its summary instead of sealing.
    #[arg(long)]
    check: bool,
    /// One JSON object (the summary) instead of text.
    #[arg(long)]
    json: bool,
    /// Operator key file, for logs written with HMAC-authenticated records.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
}

/// Arguments of `effects log prune`.
#[derive(Args)]
#[command(after_help = "Removes every lineage sealed more than AGE ago: its log, checkpoint and torn-tail \
copy, its archive and its summary. Its seal marker stays, so no process still holding the log open can \
append to a removed file, and the lineage is never begun again under its old name. Lineages that are not \
sealed are never touched. --dry-run lists what would go. AGE: a number and a unit, s, m, h, d or w (30d).

A summary that cannot be trusted to describe a finished seal is left alone and reported (`skipped` in \
--json), and the others are pruned all the same: one whose seal marker is missing (a seal that crashed \
between its summary and its marker: the log is still writable; seal it again), one that names another \
lineage or archive, one that does not parse, one whose archive is missing or no longer has the summary's \
sha256 (the log is then the only sound copy).

Exit 0 when done; 1 when a summary was skipped; 2 on bad input (a malformed AGE, the fleet store).")]
pub struct PruneArgs {
    /// Remove lineages sealed longer ago than this (e.g. 30d, 12h).
    #[arg(long, value_name = "AGE")]
    older_than: String,
    /// List what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object per lineage instead of text.
    #[arg(long)]
    json: bool,
}

fn data_dir(path: &Path) -> Result<DataDir, Failure> {
    open_data_dir(path, false)?.ok_or_else(|| {
        bad(anyhow!("no data dir {}: give it with --data-dir (or $EFFECTS_DATA_DIR)", path.display()))
    })
}

fn failure(error: RetentionError) -> Failure {
    let code = match error {
        RetentionError::NoLog { .. } | RetentionError::NotSealed { .. } | RetentionError::FleetStore(_) => {
            exit::BAD_INPUT
        }
        RetentionError::Mismatch { .. } | RetentionError::Log(_) => exit::PROBLEMS,
    };
    Failure::new(code, error)
}

impl SealArgs {
    pub fn run(self, path: &Path) -> Result<ExitCode, Failure> {
        let data = data_dir(path)?;
        let lineage = Run::parse(&self.run).map_err(bad)?.lineage;
        let key = read_key(self.key_file.as_deref())?;
        let summary = if self.check {
            retention::check(&data, &lineage, key.as_ref())
        } else {
            retention::seal(&data, &lineage, key.as_ref())
        }
        .map_err(failure)?;
        if self.json {
            out!("{}", serde_json::to_value(&summary).expect("a summary serializes"));
        } else {
            out!("{}", describe(&data, &summary, self.check));
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn describe(data: &DataDir, summary: &Summary, checked: bool) -> String {
    let what = if checked { "archive verifies against its summary" } else { "sealed" };
    format!(
        "{} {what}: {} record(s), {} byte(s), head {}, {} run(s), {} decision(s)\n  archive {}/{}/{} (sha256 {})",
        summary.lineage,
        summary.records,
        summary.bytes,
        summary.head,
        summary.runs.len(),
        summary.decisions.len(),
        data.display(),
        retention::SEALED,
        summary.archive,
        summary.archive_sha256
    )
}

impl PruneArgs {
    pub fn run(self, path: &Path) -> Result<ExitCode, Failure> {
        let age = retention::parse_age(&self.older_than).map_err(|e| bad(anyhow!("--older-than {e}")))?;
        let data = data_dir(path)?;
        let report = retention::prune(&data, age, SystemTime::now(), self.dry_run).map_err(failure)?;
        let pruned = &report.pruned;
        for lineage in pruned {
            if self.json {
                out!(
                    "{}",
                    json!({ "lineage": lineage.lineage, "sealed_at": lineage.sealed_at, "removed": lineage.removed, "dry_run": self.dry_run })
                );
            } else {
                let verb = if self.dry_run { "would remove" } else { "removed" };
                out!(
                    "{} (sealed at {}): {verb} {}",
                    lineage.lineage,
                    lineage.sealed_at,
                    lineage.removed.join(", ")
                );
            }
        }
        for skipped in &report.skipped {
            if self.json {
                out!("{}", json!({ "lineage": skipped.lineage, "skipped": skipped.why }));
            } else {
                eprintln!("effects: {}: not pruned: {}", skipped.lineage, skipped.why);
            }
        }
        if !self.json {
            eprintln!(
                "{} sealed lineage(s) older than {} {}",
                pruned.len(),
                self.older_than,
                if self.dry_run { "found (dry run)" } else { "pruned" }
            );
        }
        Ok(if report.skipped.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(exit::PROBLEMS) })
    }
}
