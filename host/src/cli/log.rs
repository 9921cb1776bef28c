//! `effects log ...`: the operator's view of an effect log. `verify` checks
//! every record (exit 0 when valid; a torn final line is repairable, not an
//! error), `show` prints the history, `recover` repairs a torn tail and records
//! unsettled claims as INTERRUPTED (LOG-7), idempotently.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Subcommand;
use serde_json::json;

use effect_ledger::log::{
    DiskLog, Executor, LogError, OpenMode, OpenOptionsLog, Record, Storage, open_lineage,
};

use super::input::read_key;
use super::output::out;
use super::{Failure, exit, open_parent};

#[derive(Subcommand)]
pub enum LogCommand {
    /// Check every record: checksum, hash chain, positions, schema, history
    /// rules. Exit 0 when valid (a torn final line is reported as repairable),
    /// 1 naming the first bad line otherwise.
    Verify {
        /// The log file (`DATA_DIR/effects/<run id>.log`).
        path: PathBuf,
        /// Operator key file, for logs written with HMAC-authenticated records.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Print the history, one record per line.
    Show {
        /// The log file.
        path: PathBuf,
        /// One JSON object per record instead of text.
        #[arg(long)]
        json: bool,
        /// Operator key file.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Cut a torn final line (keeping its bytes in `<log>.broken`) and record
    /// every unsettled claim as INTERRUPTED. Running it twice changes nothing
    /// the second time.
    Recover {
        /// The log file.
        path: PathBuf,
        /// Operator key file.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
}

impl LogCommand {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self {
            LogCommand::Verify { path, key_file } => verify(&path, key_file.as_deref()),
            LogCommand::Show { path, json, key_file } => show(&path, json, key_file.as_deref()),
            LogCommand::Recover { path, key_file } => recover(&path, key_file.as_deref()),
        }
    }
}

/// Opens the log at `path` (named `<run id>.log`) without recovering it.
fn open(path: &Path, mode: OpenMode, key_file: Option<&Path>) -> Result<DiskLog, Failure> {
    let bad = |message: String| Failure::new(exit::BAD_INPUT, anyhow!("{}: {message}", path.display()));
    let run_id = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".log"))
        .ok_or_else(|| bad("not a log file name (want <run id>.log)".into()))?;
    let (dir, parent) = open_parent(path).map_err(|e| bad(e.to_string()))?;
    let options = OpenOptionsLog { mode, key: read_key(key_file)?, recover: false };
    match open_lineage(&dir, &parent.display().to_string(), run_id, &options) {
        Ok(Some(log)) => Ok(log),
        Ok(None) => Err(bad("no such log".into())),
        Err(error @ LogError::Io { .. }) => Err(Failure::new(exit::BAD_INPUT, error)),
        Err(error) => Err(Failure::new(exit::PROBLEMS, error)),
    }
}

fn verify(path: &Path, key_file: Option<&Path>) -> Result<ExitCode, Failure> {
    let log = open(path, OpenMode::ReadOnly, key_file)?;
    let records = log.records();
    let count = |kind: &str| records.iter().filter(|r| r.record.kind() == kind).count();
    out!(
        "ok: {} records ({} claims, {} outcomes, {} observations); checksums, hash chain and history rules hold",
        records.len(),
        count("claim"),
        count("outcome"),
        count("observation")
    );
    let length = log.storage().length().map_err(|e| Failure::new(exit::BAD_INPUT, e))?;
    let read = log.read_offset();
    if length > read {
        out!(
            "torn final line: {} bytes at byte {read} were never acknowledged; repairable: run `effects log recover {}`",
            length - read,
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(path: &Path, as_json: bool, key_file: Option<&Path>) -> Result<ExitCode, Failure> {
    let log = open(path, OpenMode::ReadOnly, key_file)?;
    for framed in log.records() {
        if as_json {
            let mut object = json!({
                "position": framed.position,
                "kind": framed.record.kind(),
                "run_id": framed.run_id,
                "record": framed.record,
            });
            if let Record::Outcome(outcome) = &framed.record {
                object["execution"] = json!(outcome.outcome.execution);
                object["claim"] = json!(outcome.claim);
            }
            out!("{object}");
        } else {
            out!("{}", describe(framed.position, &framed.run_id, &framed.record));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(position: u64, run_id: &str, record: &Record) -> String {
    match record {
        Record::Claim(claim) => format!(
            "#{position} claim       run={run_id} action={} tool={} scope={}{}{}",
            claim.action_id,
            claim.operation.tool,
            if claim.impact_scope.is_empty() {
                "unknown".to_owned()
            } else {
                format!("{} resource(s)", claim.impact_scope.len())
            },
            if claim.external { " external" } else { "" },
            match &claim.executor {
                Some(Executor::Process(p)) => format!(" executor=pid {} (start {})", p.pid, p.start_token),
                None => String::new(),
            }
        ),
        Record::Processes(processes) => format!(
            "#{position} processes   run={run_id} claim=#{} leader=pid {} (start {}) group={} session={}",
            processes.claim,
            processes.leader.pid,
            processes.leader.start_token,
            processes.group,
            processes.session
        ),
        Record::Outcome(outcome) => format!(
            "#{position} outcome     run={run_id} claim=#{} execution={:?} impact={:?} cleanup={:?}{}",
            outcome.claim,
            outcome.outcome.execution,
            outcome.outcome.impact,
            outcome.outcome.cleanup,
            if outcome.recovery { " (recovery)" } else { "" }
        ),
        Record::Observation(observation) => format!(
            "#{position} observation run={run_id} source={} mechanism={:?} coverage={:?} exists={}{}",
            observation.source_action,
            observation.mechanism,
            observation.coverage,
            observation.exists,
            match (&observation.content_sha256, observation.job_state) {
                (Some(digest), _) => format!(" sha256={digest}"),
                (None, Some(state)) => format!(" job_state={state:?}"),
                (None, None) => String::new(),
            }
        ),
        Record::Verifier(verifier) => format!(
            "#{position} verifier    run={run_id} passed={} exit={}{} command={:?}",
            verifier.passed,
            verifier.exit_code.map_or_else(|| "none".to_owned(), |c| c.to_string()),
            if verifier.timed_out { " (timed out)" } else { "" },
            verifier.command
        ),
        Record::Decision(decision) => format!(
            "#{position} decision    run={run_id} verdict={:?} reasons={:?}{}",
            decision.verdict,
            decision.reasons,
            decision
                .evaluator
                .as_ref()
                .map(|e| {
                    let fuel =
                        e.fuel_used.map_or_else(|| "none (the call failed)".to_owned(), |f| f.to_string());
                    format!(" evaluator={} fuel={fuel}", e.component)
                })
                .unwrap_or_default()
        ),
    }
}

fn recover(path: &Path, key_file: Option<&Path>) -> Result<ExitCode, Failure> {
    let mut log = open(path, OpenMode::ReadWrite, key_file)?;
    let problem = |error: LogError| Failure::new(exit::PROBLEMS, error);
    let cut = log.repair().map_err(problem)?;
    let recovered = log.recover_interrupted(effect_ledger::executor::judge).map_err(problem)?;
    if cut == 0 && recovered.is_empty() {
        out!("nothing to recover: no torn tail, no unsettled claims of dead executors");
        return Ok(ExitCode::SUCCESS);
    }
    if cut > 0 {
        out!("cut a torn final line of {cut} bytes (kept in {}.broken)", path.display());
    }
    if !recovered.is_empty() {
        let list: Vec<String> = recovered.iter().map(|p| format!("#{p}")).collect();
        out!(
            "recorded {} unsettled claim(s) of dead executors as INTERRUPTED: {}",
            recovered.len(),
            list.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
