//! `effects log ...`: the operator's view of the effect logs. `list` lists
//! every lineage's log in the data dir, `verify` checks every record (exit 0
//! when valid; a torn final line is repairable, not an error), `show` prints
//! the history, `recover` repairs a torn tail and records unsettled claims
//! as INTERRUPTED (LOG-7), idempotently; `seal` and `prune` are retention
//! (`retention.rs`).
//!
//! A log is found by run (`--run ID`, in the data dir, through the
//! library's `DataDir`) or by the path of a file the operator holds; this
//! module opens no log file itself.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use effect_ledger::data_dir::{DataDir, open_log_file};
use effect_ledger::ledger::Run;
use effect_ledger::log::{
    ClaimState, Executor, Framed, LineageLog, LogError, OpenMode, OpenOptionsLog, Record, Store,
};

use super::input::read_key;
use super::output::{name, out};
use super::runtime::open_data_dir;
use super::{Failure, exit, open_parent};

#[derive(Subcommand)]
pub enum LogCommand {
    /// List every lineage's log in the data dir: its runs (children
    /// included), records, unsettled claims, the last decision and whether
    /// anything was recorded after it, and the file's size.
    #[command(after_help = "Text: the data dir, then one line per lineage. --json: one JSON object \
per lineage, one per line (`lineage`, `log`, `runs`, `records`, `unsettled`, `running`, `size`, \
`torn_tail`, `last_decision` with `position`, `verdict`, `stale` and `stale_since`, or null; \
`error` instead when the log cannot be read). Exit 0 when every log could be read, 1 otherwise.")]
    List {
        /// One JSON object per lineage, one per line, instead of text.
        #[arg(long)]
        json: bool,
        /// Operator key file, for logs written with HMAC-authenticated records.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Check every record: checksum, hash chain, positions, schema, history
    /// rules. Exit 0 when valid (a torn final line is reported as repairable),
    /// 1 naming the first bad line otherwise.
    Verify {
        #[command(flatten)]
        which: Which,
        /// Operator key file, for logs written with HMAC-authenticated records.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Print the history, one record per line.
    Show {
        #[command(flatten)]
        which: Which,
        /// One JSON object per record instead of text.
        #[arg(long)]
        json: bool,
        /// Operator key file.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Write a run's lineage log, read from the store (the data dir's, or
    /// the fleet store with --store), to `DIR/<lineage>.log`: every record is
    /// verified as it is read, and the file is byte for byte the log the
    /// local store would hold, so `effects log verify FILE` checks it
    /// anywhere. An existing file is never overwritten.
    #[command(after_help = "Exit 0 when written; 1 when the log does not verify; 2 on bad input (no \
such run, DIR missing, the file already there).")]
    Export {
        /// The run whose lineage to export (a child exports its lineage).
        #[arg(long)]
        run: String,
        /// The directory to write `<lineage>.log` in.
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Operator key file, for logs written with HMAC-authenticated records.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Cut a torn tail (keeping its bytes in `<log>.broken`), clear a
    /// poisoned log (LOG-4: after a failed fsync; the whole log is read and
    /// fsynced again first) and record every unsettled claim of a dead
    /// executor as INTERRUPTED. Running it twice changes nothing the second
    /// time.
    Recover {
        #[command(flatten)]
        which: Which,
        /// Operator key file.
        #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
        key_file: Option<PathBuf>,
    },
    /// Retention: archive a fully settled lineage (compressed) with a
    /// verifiable summary, and refuse every later append to it; `--check`
    /// verifies an archive against its summary.
    Seal(super::retention::SealArgs),
    /// Retention: remove the lineages sealed longer ago than `--older-than`.
    Prune(super::retention::PruneArgs),
}

/// Which log: a run's, found in the data dir, or a file by its path.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// The run whose log to open, in the data dir (`effects log list` lists
    /// them). A child (`PARENT.NAME`) finds its lineage's log; `show` then
    /// prints only its records and its descendants'.
    #[arg(long)]
    run: Option<String>,
    /// Or the log file itself (`DATA_DIR/effects/<run id>.log`, or a copy).
    path: Option<PathBuf>,
}

impl LogCommand {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        match self {
            LogCommand::List { json, key_file } => list(data_dir, json, key_file.as_deref()),
            LogCommand::Verify { which, key_file } => {
                verify(&open(data_dir, &which, OpenMode::ReadOnly, key_file)?)
            }
            LogCommand::Show { which, json, key_file } => {
                show(&open(data_dir, &which, OpenMode::ReadOnly, key_file)?, json)
            }
            LogCommand::Export { run, out, key_file } => {
                let which = Which { run: Some(run), path: None };
                export(&open(data_dir, &which, OpenMode::ReadOnly, key_file)?, &out)
            }
            LogCommand::Recover { which, key_file } => {
                recover(open(data_dir, &which, OpenMode::ReadWrite, key_file)?)
            }
            LogCommand::Seal(args) => args.run(data_dir),
            LogCommand::Prune(args) => args.run(data_dir),
        }
    }
}

/// A log opened for one command, and how to name it again.
struct Opened {
    log: LineageLog,
    /// The command that recovers this log, for `verify` to suggest.
    recover_command: String,
    /// `show --run CHILD`: only this run's records and its descendants'.
    run: Option<String>,
}

/// What the data dir holds, for a message about a run it does not.
pub(super) fn what_exists(data: &DataDir) -> String {
    match data.lineages() {
        Ok(lineages) if lineages.is_empty() => format!("{} has no logs yet", data.store_display()),
        Ok(lineages) => format!(
            "the runs with a log there: {} (`effects --data-dir {} log list` shows them)",
            lineages.join(", "),
            data.display()
        ),
        Err(error) => format!("its logs cannot be listed: {error}"),
    }
}

fn failure(error: LogError) -> Failure {
    match error {
        LogError::Io { .. } => Failure::new(exit::BAD_INPUT, error),
        error => Failure::new(exit::PROBLEMS, error),
    }
}

/// Opens the log `which` names, without recovering it.
fn open(
    data_dir: &Path,
    which: &Which,
    mode: OpenMode,
    key_file: Option<PathBuf>,
) -> Result<Opened, Failure> {
    let options =
        OpenOptionsLog { mode, key: read_key(key_file.as_deref())?, recover: false, ..Default::default() };
    if let Some(path) = &which.path {
        let bad = |message: String| Failure::new(exit::BAD_INPUT, anyhow!("{}: {message}", path.display()));
        let name =
            path.file_name().and_then(|n| n.to_str()).ok_or_else(|| bad("not a log file name".into()))?;
        let (dir, parent) = open_parent(path).map_err(|e| bad(e.to_string()))?;
        return match open_log_file(&dir, &parent.display().to_string(), name, &options) {
            Ok(Some(log)) => {
                let recover_command = format!("effects log recover {}", path.display());
                Ok(Opened { log, recover_command, run: None })
            }
            Ok(None) => Err(bad("no such log".into())),
            Err(LogError::Refused { reason, .. }) if DataDir::lineage_of(name).is_none() => Err(bad(reason)),
            Err(error) => Err(failure(error)),
        };
    }
    let run = which.run.as_deref().expect("clap requires --run or a path");
    let bad = |error: anyhow::Error| Failure::new(exit::BAD_INPUT, error);
    let parsed = Run::parse(run).map_err(|e| bad(anyhow!(e)))?;
    let data = open_data_dir(data_dir, false)?.ok_or_else(|| {
        bad(anyhow!(
            "no data dir {}: give the run's with --data-dir (or $EFFECTS_DATA_DIR); the default is .effects \
             in the current directory",
            data_dir.display()
        ))
    })?;
    // Read-write only for a log that exists: recovering a run never makes one.
    let opened = match data.open_lineage(&parsed.lineage, false, &options) {
        Ok(opened) => opened,
        Err(error) => return Err(failure(error)),
    };
    let log = opened.ok_or_else(|| {
        bad(anyhow!("no log for run {run} in {}; {}", data.store_display(), what_exists(&data)))
    })?;
    // A child is found by its records in its lineage's log (LOG-1).
    if parsed.parent.is_some() && !log.records().iter().any(|framed| of_run(framed, run)) {
        let mut runs: Vec<&str> = Vec::new();
        for framed in log.records() {
            if !runs.contains(&framed.run_id.as_str()) {
                runs.push(&framed.run_id);
            }
        }
        return Err(bad(anyhow!(
            "run {run} has no records in {}; the runs there: {}",
            log.path(),
            runs.join(", ")
        )));
    }
    let recover_command = format!("effects --data-dir {} log recover --run {run}", data.display());
    Ok(Opened { log, recover_command, run: parsed.parent.is_some().then(|| run.to_owned()) })
}

fn verify(opened: &Opened) -> Result<ExitCode, Failure> {
    let records = opened.log.records();
    let count = |kind: &str| records.iter().filter(|r| r.record.kind() == kind).count();
    out!(
        "ok: {} records ({} claims, {} outcomes, {} observations); checksums, hash chain and history rules hold",
        records.len(),
        count("claim"),
        count("outcome"),
        count("observation")
    );
    if opened.log.is_keyed() {
        match opened.log.witnessed() {
            0 => out!(
                "no keyed mark: nothing beside this keyed log vouches for its length, so records cut from its end would not be seen (LOG-6)"
            ),
            n => out!(
                "keyed marks: the log holds the {n} records its head mark or checkpoint vouch for (LOG-6)"
            ),
        }
    }
    let length = opened.log.storage().length().map_err(|e| Failure::new(exit::BAD_INPUT, e))?;
    let read = opened.log.read_offset();
    if length > read {
        out!(
            "torn tail: {} bytes at byte {read} were never made durable; repairable: run `{}`",
            length - read,
            opened.recover_command
        );
    }
    if let Some(marker) = opened.log.poison_marker().map_err(|e| Failure::new(exit::PROBLEMS, e))? {
        out!(
            "poisoned: an fsync of this log failed ({marker}); appends are refused until `{}`",
            opened.recover_command
        );
        return Ok(ExitCode::from(exit::PROBLEMS));
    }
    Ok(ExitCode::SUCCESS)
}

/// `log export`: the verified records' exact bytes, to a new file.
#[allow(clippy::disallowed_methods)] // `--out`, opened by its path: where its authority enters
fn export(opened: &Opened, out: &Path) -> Result<ExitCode, Failure> {
    let bad = |error: anyhow::Error| Failure::new(exit::BAD_INPUT, error);
    let records = opened.log.records();
    let lineage = match records.first() {
        Some(first) => Run::parse(&first.run_id).map_err(|e| bad(anyhow!(e)))?.lineage,
        None => return Err(bad(anyhow!("{} holds no records", opened.log.path()))),
    };
    let bytes = opened
        .log
        .storage()
        .read_range(0, opened.log.read_offset())
        .map_err(|e| bad(anyhow!("reading {}: {e}", opened.log.path())))?;
    let name = DataDir::log_name(&lineage).map_err(|e| bad(anyhow!(e)))?;
    let dir = cap_std::fs::Dir::open_ambient_dir(out, cap_std::ambient_authority())
        .map_err(|e| bad(anyhow!("opening {}: {e}", out.display())))?;
    let target = out.join(&name);
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    cap_std::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = dir.open_with(&name, &options).and_then(|mut file| {
        use std::io::Write;
        file.write_all(&bytes)?;
        file.sync_all()
    });
    written.map_err(|e| bad(anyhow!("writing {}: {e}", target.display())))?;
    effect_ledger::log::durable::sync_dir(&dir, &out.display().to_string()).map_err(|e| bad(anyhow!(e)))?;
    out!(
        "exported {} records ({} bytes) of {} to {}; `effects log verify {}` checks it",
        records.len(),
        bytes.len(),
        opened.log.path(),
        target.display(),
        target.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether `framed` belongs to `run` or one of its descendants.
pub(super) fn of_run(framed: &Framed, run: &str) -> bool {
    framed.run_id == run || framed.run_id.strip_prefix(run).is_some_and(|rest| rest.starts_with('.'))
}

/// One record as `log show --json` prints it (and `effects mcp` serves
/// it): its position, kind and run, the record, and an outcome's execution
/// and claim at the top.
pub(super) fn record_json(framed: &Framed) -> Value {
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
    object
}

fn show(opened: &Opened, as_json: bool) -> Result<ExitCode, Failure> {
    let records = opened.log.records().iter();
    for framed in records.filter(|framed| opened.run.as_deref().is_none_or(|run| of_run(framed, run))) {
        if as_json {
            out!("{}", record_json(framed));
        } else {
            out!("{}", describe(framed.position, &framed.run_id, &framed.record));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One lineage's log summarized for `log list`.
fn summarize(data: &DataDir, lineage: &str, log: &LineageLog) -> Value {
    let records = log.records();
    let mut runs: Vec<&str> = Vec::new();
    for framed in records {
        if !runs.contains(&framed.run_id.as_str()) {
            runs.push(&framed.run_id);
        }
    }
    let claims = || records.iter().filter(|framed| matches!(framed.record, Record::Claim(_)));
    let in_state =
        |state: ClaimState| claims().filter(|f| log.claim_state(f.position) == Some(state)).count();
    // CMP-12, as `session` reports it: the last decision is current only if
    // nothing but decisions was recorded after it.
    let last_decision = records.iter().rev().find_map(|framed| match &framed.record {
        Record::Decision(decision) => Some((framed.position, decision)),
        _ => None,
    });
    let last_decision = last_decision.map(|(position, decision)| {
        let stale_since = records
            .iter()
            .filter(|framed| framed.position > position)
            .find(|framed| !matches!(framed.record, Record::Decision(_)))
            .map(|framed| framed.position);
        json!({
            "position": position,
            "run_id": records.iter().find(|f| f.position == position).map(|f| f.run_id.clone()),
            "verdict": decision.verdict,
            "stale": stale_since.is_some(),
            "stale_since": stale_since,
        })
    });
    let size = log.storage().length().ok();
    json!({
        "lineage": lineage,
        "log": data.log_display(lineage),
        "runs": runs,
        "records": records.len(),
        "unsettled": in_state(ClaimState::Attempted),
        "running": in_state(ClaimState::Running),
        "size": size,
        "torn_tail": size.is_some_and(|size| size > log.read_offset()),
        "last_decision": last_decision,
    })
}

/// A `log list` entry for a terminal.
fn describe_summary(entry: &Value) -> String {
    let lineage = entry["lineage"].as_str().unwrap_or_default();
    if let Some(error) = entry["error"].as_str() {
        return format!("{lineage}  cannot be read: {error}");
    }
    let runs: Vec<&str> = entry["runs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let decision = match entry["last_decision"].as_object() {
        None => "no decision".to_owned(),
        Some(decision) => format!(
            "last decision #{} {}{}",
            decision["position"],
            decision["verdict"].as_str().unwrap_or_default(),
            match decision["stale_since"].as_u64() {
                Some(since) => format!(" (stale: recorded after it since #{since})"),
                None => " (current)".to_owned(),
            }
        ),
    };
    format!(
        "{lineage}  runs: {}  records: {}  unsettled: {}  running: {}  {decision}  {} bytes{}",
        if runs.is_empty() { "none".to_owned() } else { runs.join(", ") },
        entry["records"],
        entry["unsettled"],
        entry["running"],
        entry["size"],
        if entry["torn_tail"] == true { "  torn final line (repairable: effects log recover)" } else { "" }
    )
}

fn list(data_dir: &Path, as_json: bool, key_file: Option<&Path>) -> Result<ExitCode, Failure> {
    let key = read_key(key_file)?;
    let data = open_data_dir(data_dir, false)?;
    let lineages = match &data {
        Some(data) => data.lineages().map_err(failure)?,
        None => Vec::new(),
    };
    if !as_json {
        let shown = data.as_ref().map_or_else(|| data_dir.display().to_string(), |d| d.display().to_owned());
        let missing = if data.is_none() { " (it does not exist)" } else { "" };
        out!("data dir {shown}{missing}: {} lineage log(s)", lineages.len());
    }
    let mut unreadable = 0;
    for lineage in &lineages {
        let data = data.as_ref().expect("lineages come from a data dir");
        let entry = match data.open_lineage_read_only(lineage, key.as_ref()) {
            Ok(Some(log)) => summarize(data, lineage, &log),
            // Gone between the listing and the open: nothing to say about it.
            Ok(None) => continue,
            Err(error) => {
                unreadable += 1;
                json!({ "lineage": lineage, "log": data.log_display(lineage), "error": error.to_string() })
            }
        };
        if as_json {
            out!("{entry}");
        } else {
            out!("{}", describe_summary(&entry));
        }
    }
    Ok(if unreadable == 0 { ExitCode::SUCCESS } else { ExitCode::from(exit::PROBLEMS) })
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
            "#{position} outcome     run={run_id} claim=#{} execution={} impact={} cleanup={}{}",
            outcome.claim,
            name(&outcome.outcome.execution),
            name(&outcome.outcome.impact),
            name(&outcome.outcome.cleanup),
            if outcome.recovery { " (recovery)" } else { "" }
        ),
        Record::Observation(observation) => format!(
            "#{position} observation run={run_id} source={} mechanism={} coverage={} exists={}{}",
            observation.source_action,
            name(&observation.mechanism),
            name(&observation.coverage),
            observation.exists,
            match (&observation.content_sha256, observation.job_state) {
                (Some(digest), _) => format!(" sha256={digest}"),
                (None, Some(state)) => format!(" job_state={}", name(&state)),
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
            "#{position} decision    run={run_id} verdict={} reasons=[{}]{}",
            name(&decision.verdict),
            decision.reasons.iter().map(name).collect::<Vec<_>>().join(", "),
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

fn recover(opened: Opened) -> Result<ExitCode, Failure> {
    let mut log = opened.log;
    let problem = |error: LogError| Failure::new(exit::PROBLEMS, error);
    // The log was read whole and strictly when it was opened; a poisoned one
    // is read on to its end, fsynced again, and only then cleared (LOG-4).
    let cleared = log.clear_poison().map_err(problem)?;
    if let Some(marker) = &cleared {
        out!(
            "cleared the poison of a failed fsync ({marker}): the log reads whole and strictly and fsyncs again; \
             records from the marker's position on were written around the failure, and their claims are \
             settled by their executors or recovered below"
        );
    }
    let cut = log.repair().map_err(problem)?;
    let recovered = effect_ledger::executor::recover(&mut log).map_err(problem)?;
    if cut == 0 && recovered.is_empty() {
        if cleared.is_none() {
            out!("nothing to recover: no torn tail, no poison, no unsettled claims of dead executors");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if cut > 0 {
        out!("cut a torn tail of {cut} bytes (kept in {}.broken)", log.path());
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
