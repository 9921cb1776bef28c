//! `effects decide`: the completion decision for a recorded run, without
//! executing anything (SPEC section 7); and the decision's report, shared with
//! `session`'s `complete` step.
//!
//! The root is the one the run's claims record (ID-5: the absolute path,
//! checked against the recorded device and inode); `--root` may name it
//! again, never another. Required files are read completely at decision time
//! and those reads recorded before deciding (CMP-7b).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use cap_std::ambient_authority;
use std::os::unix::fs::MetadataExt;

use cap_std::fs::Dir;
use clap::Args;
use serde_json::{Value, json};

use effect_ledger::ledger::{CompleteError, Completion, Run};
use effect_ledger::log::{OpenMode, OpenOptionsLog, Record, open_effects_dir, open_lineage};
use effect_ledger::model::{FilesystemRoot, Location, ResourceRef};

use super::runtime::{bad, open_ledger};
use super::{Failure, exit};

/// Arguments of `effects decide`.
#[derive(Args)]
#[command(after_help = "Prints COMPLETED, FAILED, BLOCKED or UNVERIFIED with its reasons, the \
disclosures the answer must carry and the presented answer; --json prints one object with \
`verdict`, `reasons`, `disclosures`, `assessments` and `answer`. The decision is recorded in the \
run's log with the evaluator's digest and fuel. Exit 0 whenever a decision was made: read the \
verdict.")]
pub struct DecideArgs {
    /// The run to decide (as `effects session` printed it): a root run or a
    /// child (`PARENT.NAME`); either is decided over its whole lineage.
    #[arg(long)]
    run: String,
    /// A file beneath the root the work must have produced (repeatable).
    #[arg(long = "require", value_name = "PATH")]
    required: Vec<String>,
    /// The agent's final answer.
    #[arg(long, default_value = "")]
    answer: String,
    /// The root the run's tools worked beneath (default: found from its records).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The root the run's records name, if any of its resources is a file. A
/// child run's records are in its lineage's log (LOG-1), whose root it
/// shares (ID-5).
fn recorded_root(data_dir: &Path, run: &str) -> Result<Option<FilesystemRoot>, Failure> {
    let lineage = Run::parse(run).map_err(|e| bad(anyhow!(e)))?.lineage;
    let data = Dir::open_ambient_dir(data_dir, ambient_authority())
        .map_err(|e| bad(anyhow!("cannot open the data dir {}: {e}", data_dir.display())))?;
    let display = data_dir.display().to_string();
    let missing = || {
        bad(anyhow!(
            "no log for run {lineage} in {display}/effects: the run claimed nothing (a read-only run keeps no \
             log), or the id or --data-dir is wrong"
        ))
    };
    let effects = open_effects_dir(&data, &display, OpenMode::ReadOnly)
        .map_err(|e| bad(anyhow!(e)))?
        .ok_or_else(missing)?;
    let options = OpenOptionsLog { mode: OpenMode::ReadOnly, key: None, recover: false };
    let log = open_lineage(&effects, &format!("{display}/effects"), &lineage, &options)
        .map_err(|e| Failure::new(exit::PROBLEMS, e))?
        .ok_or_else(missing)?;
    let filesystem_root = |r: &ResourceRef| match r.location() {
        Location::Filesystem(fs) => Some(fs.root.clone()),
        _ => None,
    };
    // ID-5: the root recorded with the run's claims, else with its
    // lineage's (a child that claimed nothing yet); a log from before roots
    // were recorded names it only in its filesystem resources.
    let claimed = |own: bool| {
        log.records().iter().find_map(|framed| match &framed.record {
            Record::Claim(claim) if !own || framed.run_id == run => claim.root.clone(),
            _ => None,
        })
    };
    Ok(claimed(true).or_else(|| claimed(false)).or_else(|| {
        log.records().iter().find_map(|framed| match &framed.record {
            Record::Claim(claim) => claim.impact_scope.iter().find_map(filesystem_root),
            Record::Observation(observation) => filesystem_root(&observation.resource),
            _ => None,
        })
    }))
}

impl DecideArgs {
    pub fn run(self, data_dir: Option<PathBuf>) -> Result<ExitCode, Failure> {
        let data_dir = data_dir.ok_or_else(|| {
            bad(anyhow!("give the data dir of the run with --data-dir (or $EFFECTS_DATA_DIR)"))
        })?;
        let recorded = recorded_root(&data_dir, &self.run)?;
        let root = match (&self.root, &recorded) {
            // Another root than the recorded one is refused when the run is
            // continued (ID-5, `Ledger::continue_run`).
            (Some(root), _) => root.clone(),
            (None, Some(recorded)) => {
                let path = PathBuf::from(&recorded.path);
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
        let (mut ledger, _) = open_ledger(&root, &data_dir, self.manifest.as_deref())?;
        let run = ledger.continue_run(&self.run).map_err(|e| bad(anyhow!(e)))?;
        let completion = ledger.complete(&run, &self.required, &self.answer).map_err(|error| {
            let code = match error {
                CompleteError::Required { .. } | CompleteError::Directory { .. } => exit::BAD_INPUT,
                CompleteError::Log(_) => exit::PROBLEMS,
            };
            Failure::new(code, error)
        })?;
        let report = decision_json(&completion);
        if self.json {
            println!("{report}");
        } else {
            println!("{}", describe_decision(&report));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The decision as JSON: `verdict`, `reasons`, `disclosures`, `assessments`,
/// `answer` (the presented answer), and how it was reached.
pub(super) fn decision_json(completion: &Completion) -> Value {
    let decision = &completion.decided.decision;
    json!({
        "verdict": decision.verdict,
        "reasons": decision.reasons,
        "disclosures": decision.disclosures,
        "assessments": decision.assessments,
        "answer": decision.presented_answer,
        "evaluator": completion.decided.evaluator,
        "policy_failure": completion.decided.policy_failure,
        "recorded": completion.recorded,
        "evidence_records": completion.ledger.records.len(),
    })
}

/// The decision for a terminal: verdict, reasons, the presented answer.
pub(super) fn describe_decision(report: &Value) -> String {
    let mut out = format!("decision: {}", report["verdict"].as_str().unwrap_or_default());
    for reason in report["reasons"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {} ({}): {}",
            reason["code"].as_str().unwrap_or_default(),
            reason["verdict"].as_str().unwrap_or_default(),
            reason["message"].as_str().unwrap_or_default()
        ));
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
