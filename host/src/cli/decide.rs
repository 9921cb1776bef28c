//! `effects decide`: the completion decision for a recorded run, without
//! executing anything (SPEC section 7); and the decision's report, shared with
//! `session`'s `complete` step.
//!
//! The root is the one the run's claims record (ID-5: the absolute path,
//! checked against the recorded device and inode); `--root` may name it
//! again, never another. Required files are read completely at decision time
//! and those reads recorded before deciding (CMP-7b).
//!
//! `--replay POSITION` re-derives a recorded decision from the log alone
//! (POL-3, `completion::replay`): this file only opens the log read-only,
//! picks the evaluator and prints. `--dry-run` decides through a read-only
//! ledger (`Ledger::read_only`), `--explain` prints `completion::explain`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use std::os::unix::fs::MetadataExt;

use clap::Args;
use serde_json::{Value, json};

use effect_ledger::completion::explain::explain;
use effect_ledger::completion::{Recorded, Replay, ReplayError};
use effect_ledger::data_dir::DataDir;
use effect_ledger::digest::Sha256Digest;
use effect_ledger::ledger::{CompleteError, Completion, Run, RunError, recorded_root};
use effect_ledger::log::{EvaluatorRun, LineageLog, LogError, OperatorKey, Position};
use effect_ledger::model::{EffectAssessment, Reason, Verdict};
use effect_ledger::policy::{self, EvaluatorComponent, LoadedComponent, PolicyOptions, PolicySet, World};

use super::input::{read_bounded, read_key};
use super::output::out;
use super::policy::{manifest_source, open_cache};
use super::runtime::{bad, open_data_dir, open_ledger};
use super::{Failure, exit};

/// Arguments of `effects decide`.
#[derive(Args)]
#[command(after_help = "Prints the run and its data dir, then COMPLETED, FAILED, BLOCKED or \
UNVERIFIED with its reasons, the disclosures the answer must carry and the presented answer; --json \
prints one object with `verdict`, `reasons`, `disclosures`, `assessments`, `answer` and `data_dir`. \
The data dir is --data-dir, else $EFFECTS_DATA_DIR, else `.effects` in the current directory, as for \
`session`. The decision is recorded in the \
run's log with the evaluator's digest and fuel, the answer, the full decision and where the \
history ended. Exit 0 whenever a decision was made: read the verdict.

Replay: `effects decide --run RUN --replay POSITION` takes the decision recorded at POSITION \
(`effects log show --run RUN` lists the records) and decides again from the log \
alone: the evidence up to where that decision's history ended, the required files as they were \
resolved then, the answer as it was given. Nothing is read from the root and nothing is written \
to the log. The evaluator must be the \
one the decision names (same sha256): the shipped one, a --manifest's, or a component file given \
with --evaluator. It prints IDENTICAL or NOT IDENTICAL with each difference (verdict, reasons, \
disclosures, assessments, presented answer, and the record's own summary fields); --json prints \
one object with `identical` and `differences`. Exit 0 identical; 1 not identical; 2 no decision \
at POSITION, a decision recorded before decisions could be replayed, or a log that cannot be \
read; 3 the evaluator is not the recorded one.

Dry run: `--dry-run` decides as above and writes nothing: no recovery (LOG-7), no launch settled, \
no readback and no decision recorded, so the log is left byte for byte as it was; claims still open \
are listed (`dry_run.unsettled` in --json). `--explain` adds each reason with the records it cites \
(`explain` in --json). To see which recorded decisions a new evaluator would change, use \
`effects policy replay`.")]
pub struct DecideArgs {
    /// The run to decide, or whose log holds the decision to replay (as
    /// `effects session` printed it): a root run or a child (`PARENT.NAME`);
    /// either is decided over its whole lineage.
    #[arg(long)]
    run: String,
    /// A file beneath the root the work must have produced (repeatable),
    /// besides what the run requires by default: every file its latest
    /// changes left in place and every path a decision of it required (CMP-7).
    #[arg(long = "require", value_name = "PATH")]
    required: Vec<String>,
    /// Require only the --require files, not the run's default set: a
    /// narrower question than the run's own surface asked.
    #[arg(long, requires = "required", conflicts_with = "replay")]
    only: bool,
    /// The agent's final answer.
    #[arg(long, default_value = "")]
    answer: String,
    /// The root the run's tools worked beneath (default: found from its records).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Re-derive the decision recorded at this log position instead of
    /// deciding: exit 0 when identical, 1 when not.
    #[arg(long, value_name = "POSITION", conflicts_with_all = ["required", "answer", "root"])]
    replay: Option<u64>,
    /// With --replay: the evaluator component file to replay with; its
    /// sha256 must be the one the decision recorded.
    #[arg(long, value_name = "FILE", requires = "replay", conflicts_with = "manifest")]
    evaluator: Option<PathBuf>,
    /// Decide, and write nothing: no recovery, no readback and no decision
    /// is recorded, so the log is left byte for byte as it was. Claims still
    /// unsettled are listed: a decide that records would first recover
    /// those of dead executors (LOG-7).
    #[arg(long, conflicts_with = "replay")]
    dry_run: bool,
    /// With each reason, the records it cites: each claim, outcome,
    /// observation or check as the evaluator saw it, with the resources it
    /// names.
    #[arg(long, conflicts_with = "replay")]
    explain: bool,
    /// Write the evidence ledger the decision was taken over to FILE, as
    /// `effects policy run --call evaluate --input FILE` takes it (a new
    /// file; an existing one is never overwritten).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    dump_ledger: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Operator key file for a log written with HMAC-authenticated records:
    /// its records are verified with it and the decision is recorded with
    /// it. A keyed log is refused without it (never read as verified).
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
}

/// The data dir `decide` reads, which must exist: a run is decided where it
/// was recorded.
fn existing_data_dir(data_dir: &Path) -> Result<DataDir, Failure> {
    open_data_dir(data_dir, false)?.ok_or_else(|| {
        bad(anyhow!(
            "no data dir {}: give the run's with --data-dir (or $EFFECTS_DATA_DIR); the default is .effects \
             in the current directory",
            data_dir.display()
        ))
    })
}

/// The run's lineage's log, opened read-only through the library: nothing
/// is recovered or written. A child run's records are in its lineage's log
/// (LOG-1).
fn read_only_log(data: &DataDir, run: &str, key: Option<&OperatorKey>) -> Result<LineageLog, Failure> {
    match data.open_lineage_read_only(run, key) {
        Ok(Some(log)) => Ok(log),
        Ok(None) => Err(no_such_run(data, run)),
        Err(error @ LogError::Refused { .. }) if Run::parse(run).is_err() => Err(bad(error)),
        Err(error) => Err(Failure::new(exit::PROBLEMS, error)),
    }
}

/// What `decide` says when the data dir holds no log of `run`.
fn no_such_run(data: &DataDir, run: &str) -> Failure {
    bad(anyhow!(
        "no log for run {run} in {}: the run claimed nothing (a read-only run keeps no log), or the id or \
         --data-dir is wrong; {}",
        data.store_display(),
        super::log::what_exists(data)
    ))
}

impl DecideArgs {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        let data = existing_data_dir(data_dir)?;
        if let Some(position) = self.replay {
            return self.replay(&data, position);
        }
        let key = read_key(self.key_file.as_deref())?;
        let recorded = match recorded_root(&data, &self.run, key.as_ref()) {
            Ok(recorded) => recorded,
            Err(RunError::NoSuchRun { .. }) => return Err(no_such_run(&data, &self.run)),
            Err(error @ RunError::BadId(_)) => return Err(bad(error)),
            Err(error) => return Err(Failure::new(exit::PROBLEMS, error)),
        };
        drop(data);
        let root = match (&self.root, &recorded) {
            // Another root than the recorded one is refused when the run is
            // continued (ID-5, `Ledger::continue_run`).
            (Some(root), _) => root.clone(),
            (None, Some(recorded)) => {
                let path = PathBuf::from(&recorded.path);
                #[allow(clippy::disallowed_methods)] // the recorded root's path, checked before it is opened
                let metadata = std::fs::metadata(&path).map_err(|e| {
                    bad(anyhow!("the run's root {} is gone ({e}); pass --root", path.display()))
                })?;
                if (metadata.dev(), metadata.ino()) != (recorded.device, recorded.inode) {
                    return Err(bad(anyhow!(
                        "{} is not the directory the run worked beneath (device and inode differ); pass --root",
                        path.display()
                    )));
                }
                path
            }
            (None, None) if self.required.is_empty() => std::env::current_dir().map_err(bad)?,
            (None, None) => {
                return Err(bad(anyhow!("the run touched no files, so its root is unknown: pass --root")));
            }
        };
        let (ledger, display_data) =
            open_ledger(&root, data_dir, self.manifest.as_deref(), self.key_file.as_deref(), &[])?;
        let mut ledger = if self.dry_run { ledger.read_only() } else { ledger };
        let run = ledger.continue_run(&self.run).map_err(|e| bad(anyhow!(e)))?;
        let completed = match self.only {
            true => ledger.complete_exactly(&run, &self.required, &self.answer),
            false => ledger.complete(&run, &self.required, &self.answer),
        };
        let completion = completed.map_err(|error| {
            let code = match error {
                CompleteError::Required { .. } | CompleteError::Directory { .. } => exit::BAD_INPUT,
                CompleteError::Changed { .. } | CompleteError::Log(_) => exit::PROBLEMS,
            };
            Failure::new(code, error)
        })?;
        if let Some(file) = &self.dump_ledger {
            dump(file, &completion.ledger)?;
        }
        let mut report = decision_json(&completion);
        report["data_dir"] = json!(display_data);
        if self.dry_run {
            report["dry_run"] = json!({
                "unsettled": completion.unsettled,
                "unrecorded_readbacks": completion.unrecorded,
            });
        }
        if self.explain {
            let explained =
                explain(&completion.ledger, &completion.decided.decision, completion.unwritten_from());
            report["explain"] = json!(explained);
        }
        if self.json {
            out!("{report}");
            return Ok(ExitCode::SUCCESS);
        }
        out!("run {} (data dir {display_data}){}", run.id, if self.dry_run { ", dry run" } else { "" });
        out!("{}", describe_decision(&report));
        if self.dry_run {
            out!("{}", describe_dry_run(&completion.unsettled, completion.unrecorded));
        }
        if self.explain {
            out!("{}", describe_explained(&report["explain"]));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Writes `ledger` to a new `file` as `policy run` reads it.
fn dump(file: &Path, ledger: &effect_ledger::model::EvidenceLedger) -> Result<(), Failure> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(ledger).expect("a ledger serializes") + "\n";
    #[allow(clippy::disallowed_methods)] // --dump-ledger FILE, a path the operator names
    let opened = std::fs::OpenOptions::new().write(true).create_new(true).open(file);
    opened.and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all())).map_err(|e| {
        bad(anyhow!("--dump-ledger {}: {e} (an existing file is never overwritten)", file.display()))
    })
}

/// What a dry run left as it was, for a terminal.
fn describe_dry_run(unsettled: &[Position], unrecorded: usize) -> String {
    let mut out = format!(
        "  dry run: nothing recorded ({unrecorded} readback(s) of required files taken, not written)"
    );
    if !unsettled.is_empty() {
        let positions: Vec<String> = unsettled.iter().map(Position::to_string).collect();
        out.push_str(&format!(
            "\n  {} claim(s) unsettled (positions {}): decided open; a decide that records first recovers \
             those whose executors are dead (LOG-7)",
            unsettled.len(),
            positions.join(", ")
        ));
    }
    out
}

/// `--explain` for a terminal: each reason, then each record it cites.
fn describe_explained(explained: &Value) -> String {
    let mut out = String::from("explain:");
    for reason in explained.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {} ({}) cites {} record(s)",
            reason["code"].as_str().unwrap_or_default(),
            reason["verdict"].as_str().unwrap_or_default(),
            reason["evidence"].as_array().map_or(0, Vec::len)
        ));
        for cited in reason["evidence"].as_array().into_iter().flatten() {
            out.push_str(&format!("\n    {}: {}", cited["position"], describe_cited(cited)));
        }
    }
    out
}

/// One cited record in a line: its kind and what it says.
fn describe_cited(cited: &Value) -> String {
    let Some((kind, record)) = cited["record"].as_object().and_then(|r| r.iter().next()) else {
        return "no such record in the evidence".to_owned();
    };
    let text = |key: &str| record[key].as_str().unwrap_or_default().to_owned();
    let mut line = match kind.as_str() {
        "claim" => {
            format!("claim of {} by run {} (action {})", text("tool"), text("run_id"), text("action_id"))
        }
        "outcome" => format!(
            "outcome of claim {}: {}{}",
            record["claim"],
            record["outcome"]["execution"].as_str().unwrap_or_default(),
            if record["recovery"] == true { " (recovered)" } else { "" }
        ),
        "observation" => format!(
            "observation ({}, {}): {}",
            record["mechanism"].as_str().unwrap_or_default(),
            record["coverage"].as_str().unwrap_or_default(),
            if record["exists"] == true { "exists" } else { "absent" }
        ),
        "verifier" => format!("check `{}`: {}", text("command"), text("result")),
        other => other.to_owned(),
    };
    for resource in cited["resources"].as_array().into_iter().flatten() {
        let location = &resource["location"];
        match location["filesystem"]["path"].as_str() {
            Some(path) => line.push_str(&format!(" [{path}]")),
            None => line.push_str(&format!(" [{location}]")),
        }
    }
    if cited["written"] == false {
        line.push_str(" (this decision's own readback, not in the log)");
    }
    line
}

impl DecideArgs {
    /// `--replay POSITION`: the recorded decision decided again, compared.
    fn replay(&self, data: &DataDir, position: u64) -> Result<ExitCode, Failure> {
        // Every failure before the comparison is exit 2 (3 for the
        // evaluator): exit 1 says only "re-derived, and it differs".
        let key = read_key(self.key_file.as_deref())?;
        let log = read_only_log(data, &self.run, key.as_ref()).map_err(|f| bad(f.error))?;
        let recorded = Recorded::find(log.records(), position).map_err(bad)?;
        drop(log);
        let refused = |error: ReplayError| {
            let hint = if self.evaluator.is_some() {
                "give --evaluator the component file whose sha256 the decision recorded"
            } else {
                "give that component with --evaluator FILE, or a --manifest that pins it"
            };
            Failure::new(exit::REFUSED, anyhow!("{error}; {hint}"))
        };
        let options = PolicyOptions { cache: open_cache(data), ..PolicyOptions::default() };
        let mut policies;
        let mut loaded;
        let evaluator: &mut EvaluatorComponent = match &self.evaluator {
            Some(file) => {
                let bytes = read_bounded(file, "the evaluator")?;
                // The pin is checked on the bytes before anything parses them (POL-1).
                recorded
                    .check_evaluator(&file.display().to_string(), &Sha256Digest::of(&bytes))
                    .map_err(refused)?;
                let name = &recorded.evaluator().component;
                loaded = match policy::load_unpinned(name, World::Evaluator, &bytes, &options) {
                    Ok(LoadedComponent::Evaluator(component)) => component,
                    Ok(LoadedComponent::Classifier(_)) => unreachable!("loaded as an evaluator"),
                    Err(error) => return Err(Failure::new(exit::REFUSED, error)),
                };
                &mut loaded
            }
            None => {
                policies = PolicySet::load(&manifest_source(self.manifest.as_deref())?, &options)
                    .map_err(|e| Failure::new(exit::REFUSED, e))?;
                policies.evaluator().map_err(|e| Failure::new(exit::REFUSED, e))?
            }
        };
        let replay = recorded.replay(evaluator).map_err(refused)?;
        let mut report = replay_json(&self.run, &recorded, &replay);
        report["data_dir"] = json!(data.display());
        if self.json {
            out!("{report}");
        } else {
            out!("run {} (data dir {})", self.run, data.display());
            out!("{}", describe_replay(&report));
        }
        Ok(if replay.identical() { ExitCode::SUCCESS } else { ExitCode::from(exit::PROBLEMS) })
    }
}

/// A replay as JSON: `identical`, `differences` (each `field`, `recorded`,
/// `replayed`), the `replayed` decision (`verdict`, `reasons`, `disclosures`,
/// `assessments`, `answer`, `policy_failure`), the evaluator run and what it
/// was taken over.
fn replay_json(run: &str, recorded: &Recorded, replay: &Replay) -> Value {
    let decision = &replay.decided.decision;
    json!({
        "run": run,
        "position": recorded.position,
        "decided_by_run": recorded.run_id,
        "identical": replay.identical(),
        "differences": replay.differences,
        "replayed": {
            "verdict": decision.verdict,
            "reasons": decision.reasons,
            "disclosures": decision.disclosures,
            "assessments": decision.assessments,
            "answer": decision.presented_answer,
            "policy_failure": replay.decided.policy_failure,
        },
        "evaluator": replay.decided.evaluator,
        "recorded_fuel_used": recorded.evaluator().fuel_used,
        "through": recorded.record.through,
        "evidence_records": recorded.ledger.records.len(),
    })
}

/// A replay for a terminal: IDENTICAL or NOT IDENTICAL, each difference,
/// the evaluator.
fn describe_replay(report: &Value) -> String {
    let replayed = &report["replayed"];
    let count = |key: &str| replayed[key].as_array().map_or(0, Vec::len);
    let mut out = format!(
        "replay of the decision at position {} (run {}): {}",
        report["position"],
        report["decided_by_run"].as_str().unwrap_or_default(),
        if report["identical"] == true { "IDENTICAL" } else { "NOT IDENTICAL" }
    );
    out.push_str(&format!(
        "\n  replayed: {}, {} reason(s), {} disclosure(s), {} assessment(s), over {} evidence record(s)",
        replayed["verdict"].as_str().unwrap_or_default(),
        count("reasons"),
        count("disclosures"),
        count("assessments"),
        report["evidence_records"]
    ));
    for difference in report["differences"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  differs: {}: recorded {}, replayed {}",
            difference["field"].as_str().unwrap_or_default(),
            difference["recorded"],
            difference["replayed"]
        ));
    }
    if let Some(evaluator) = report["evaluator"].as_object() {
        out.push_str(&format!(
            "\n  evaluator {} (sha256 {}), fuel {} (recorded {})",
            evaluator["component"].as_str().unwrap_or_default(),
            evaluator["sha256"].as_str().unwrap_or_default(),
            evaluator["fuel_used"],
            report["recorded_fuel_used"]
        ));
    }
    out
}

/// A decision as every surface shows it: `verdict`, `reasons`,
/// `disclosures`, `assessments`, `answer` (the presented answer), and how it
/// was reached (`evaluator`, `policy_failure`, where it was `recorded`, how
/// many evidence records it was taken over).
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub(super) struct DecisionView {
    /// COMPLETED, FAILED, BLOCKED or UNVERIFIED.
    pub verdict: Verdict,
    /// Why, each with what would clear it.
    pub reasons: Vec<Reason>,
    /// What the answer must carry.
    pub disclosures: Vec<String>,
    /// Every effect's assessment.
    pub assessments: Vec<EffectAssessment>,
    /// The presented answer: what the agent may show, disclosures included.
    pub answer: String,
    /// The evaluator that decided (POL-4).
    pub evaluator: Option<EvaluatorRun>,
    /// Why evaluation failed, if it did (the verdict is then BLOCKED).
    pub policy_failure: Option<String>,
    /// Its position in the log; `null` for a run without one.
    pub recorded: Option<Position>,
    /// How many evidence records it was taken over.
    pub evidence_records: usize,
}

impl DecisionView {
    pub(super) fn of(completion: &Completion) -> Self {
        let decision = &completion.decided.decision;
        Self {
            verdict: decision.verdict,
            reasons: decision.reasons.clone(),
            disclosures: decision.disclosures.clone(),
            assessments: decision.assessments.clone(),
            answer: decision.presented_answer.clone(),
            evaluator: completion.decided.evaluator.clone(),
            policy_failure: completion.decided.policy_failure.clone(),
            recorded: completion.recorded,
            evidence_records: completion.ledger.records.len(),
        }
    }
}

/// The decision as JSON ([`DecisionView`]).
pub(super) fn decision_json(completion: &Completion) -> Value {
    serde_json::to_value(DecisionView::of(completion)).expect("a decision serializes")
}

/// The decision for a terminal: verdict, reasons (each with what would clear
/// it), the presented answer.
pub(super) fn describe_decision(report: &Value) -> String {
    let mut out = format!("decision: {}", report["verdict"].as_str().unwrap_or_default());
    for reason in report["reasons"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {} ({}): {}",
            reason["code"].as_str().unwrap_or_default(),
            reason["verdict"].as_str().unwrap_or_default(),
            reason["message"].as_str().unwrap_or_default()
        ));
        if let Some(remedy) = reason["remedy"].as_str().filter(|r| !r.is_empty()) {
            out.push_str(&format!("\n    to clear it: {remedy}"));
        }
    }
    if let Some(evaluator) = report["evaluator"].as_object() {
        out.push_str(&format!(
            "\n  evaluator {} (sha256 {}..., fuel {})",
            evaluator["component"].as_str().unwrap_or_default(),
            &evaluator["sha256"].as_str().unwrap_or_default().chars().take(12).collect::<String>(),
            evaluator["fuel_used"]
        ));
    }
    out.push_str("\n  presented answer:");
    for line in report["answer"].as_str().unwrap_or_default().lines() {
        out.push('\n');
        if !line.is_empty() {
            out.push_str("    ");
            out.push_str(line);
        }
    }
    out
}
