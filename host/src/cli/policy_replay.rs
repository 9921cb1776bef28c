//! `effects policy replay`: policy impact replay (SPEC 9). Every run's last
//! recorded decision in a store, decided again by a candidate evaluator and
//! compared with the recorded evaluator's (`completion::impact`): the report
//! a reviewer reads before the candidate is pinned. Logs are opened
//! read-only; nothing is written to them.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::Args;
use serde::Serialize;
use serde_json::json;

use effect_ledger::completion::Recorded;
use effect_ledger::completion::impact::{Baseline, Impact, impact, last_decisions};
use effect_ledger::data_dir::DataDir;
use effect_ledger::policy::{EvaluatorComponent, LoadedComponent, PolicyOptions, PolicySet, World};

use super::input::read_key;
use super::output::{name, out};
use super::policy::{load_file, manifest_source, open_cache};
use super::runtime::{bad, open_data_dir};
use super::{Failure, exit};

/// Arguments of `effects policy replay`.
#[derive(Args)]
#[command(after_help = "For each run in the store (the data dir's, or the fleet store with --store), its \
last recorded decision is rebuilt from the log alone, as `decide --replay` does: the evidence up to \
where that decision's history ended, the required files as they were resolved then, the answer as \
given. The candidate decides over it, and its decision is compared with the baseline: the recorded \
evaluator's decision taken again when that evaluator is at hand (the shipped one, or a --manifest's, \
with the recorded sha256), else the decision as recorded. Taking it again also checks the record: \
`drift` lists where the recorded evaluator does not re-derive it.

Prints one line per run whose decision would change (verdict first, then reasons and disclosures), \
each run whose record drifted, and a summary; --json prints one object with `changed`, `unchanged`, \
`skipped` (decisions that cannot be replayed, with why) and every `impact`. Nothing is written to any \
log.

Exit 0 when the candidate changes no decision; 1 when it changes one or more (or a record drifted); \
2 bad input or a log that cannot be read; 3 the candidate is not an evaluator component.")]
pub struct ReplayArgs {
    /// The candidate evaluator component file.
    #[arg(long, value_name = "FILE")]
    evaluator: PathBuf,
    /// Only these runs (repeatable; a child is replayed over its lineage's
    /// log). Default: every run in the store.
    #[arg(long = "run", value_name = "RUN")]
    runs: Vec<String>,
    /// The manifest whose evaluator is the baseline when its sha256 is the
    /// recorded one (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Operator key file for logs written with HMAC-authenticated records.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
}

/// A decision that cannot be replayed, and why.
#[derive(Serialize)]
struct Skipped {
    run_id: String,
    position: u64,
    why: String,
}

impl ReplayArgs {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        let data = open_data_dir(data_dir, false)?.ok_or_else(|| {
            bad(anyhow!(
                "no data dir {}: give the runs' with --data-dir (or $EFFECTS_DATA_DIR)",
                data_dir.display()
            ))
        })?;
        let key = read_key(self.key_file.as_deref())?;
        let options = PolicyOptions { cache: open_cache(&data), ..PolicyOptions::default() };
        let mut candidate =
            match load_file(&self.evaluator, "the candidate evaluator", World::Evaluator, &options)? {
                LoadedComponent::Evaluator(component) => component,
                LoadedComponent::Classifier(_) => unreachable!("loaded as an evaluator"),
            };
        let mut policies = PolicySet::load(&manifest_source(self.manifest.as_deref())?, &options)
            .map_err(|e| Failure::new(exit::REFUSED, e))?;
        let mut baseline = policies.evaluator().ok();
        let lineages = self.lineages(&data)?;
        let (mut impacts, mut skipped) = (Vec::new(), Vec::new());
        for lineage in &lineages {
            let log = match data.open_lineage_read_only(lineage, key.as_ref()) {
                Ok(Some(log)) => log,
                Ok(None) => continue,
                Err(error) => return Err(bad(anyhow!("the log of {lineage}: {error}"))),
            };
            let records = log.records();
            for position in last_decisions(records) {
                let run_id = records[position as usize].run_id.clone();
                if !self.runs.is_empty() && !self.runs.contains(&run_id) {
                    continue;
                }
                match Recorded::find(records, position) {
                    Ok(recorded) => {
                        impacts.push(impact(&recorded, baseline.as_deref_mut(), &mut candidate));
                    }
                    Err(error) => skipped.push(Skipped { run_id, position, why: error.to_string() }),
                }
            }
        }
        let report = Report::of(&data, &candidate, lineages.len(), impacts, skipped);
        if self.json {
            out!("{}", serde_json::to_value(&report).expect("the report serializes"));
        } else {
            out!("{}", report.describe());
        }
        let findings = report.changed + report.drifted;
        Ok(if findings == 0 { ExitCode::SUCCESS } else { ExitCode::from(exit::PROBLEMS) })
    }

    /// The lineages to open: those of `--run`, else every one in the store.
    fn lineages(&self, data: &DataDir) -> Result<Vec<String>, Failure> {
        if self.runs.is_empty() {
            return data.lineages().map_err(|error| Failure::new(exit::PROBLEMS, error));
        }
        let mut lineages = Vec::new();
        for run in &self.runs {
            let lineage = effect_ledger::ledger::Run::parse(run).map_err(bad)?.lineage;
            if !lineages.contains(&lineage) {
                lineages.push(lineage);
            }
        }
        Ok(lineages)
    }
}

/// What `policy replay` found.
#[derive(Serialize)]
struct Report {
    data_dir: String,
    candidate: serde_json::Value,
    lineages: usize,
    replayed: usize,
    changed: usize,
    verdicts_changed: usize,
    unchanged: usize,
    drifted: usize,
    skipped: Vec<Skipped>,
    impact: Vec<Impact>,
}

impl Report {
    fn of(
        data: &DataDir,
        candidate: &EvaluatorComponent,
        lineages: usize,
        impact: Vec<Impact>,
        skipped: Vec<Skipped>,
    ) -> Self {
        let changed = impact.iter().filter(|i| i.changed()).count();
        Self {
            data_dir: data.store_display(),
            candidate: json!({ "component": candidate.name(), "sha256": candidate.sha256().to_string() }),
            lineages,
            replayed: impact.len(),
            changed,
            verdicts_changed: impact.iter().filter(|i| i.verdict_changed()).count(),
            unchanged: impact.len() - changed,
            drifted: impact.iter().filter(|i| !i.drift.is_empty()).count(),
            skipped,
            impact,
        }
    }

    /// For a terminal: each changed or drifted run, then the totals.
    fn describe(&self) -> String {
        let mut out = format!(
            "policy replay: candidate {} (sha256 {}) over {} ({} lineage(s))",
            self.candidate["component"].as_str().unwrap_or_default(),
            self.candidate["sha256"].as_str().unwrap_or_default(),
            self.data_dir,
            self.lineages
        );
        let codes = |codes: &[effect_ledger::model::ReasonCode]| {
            let names: Vec<String> = codes.iter().map(name).collect();
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        };
        for impact in &self.impact {
            if impact.changed() {
                let fields: Vec<&str> = impact.changes.iter().map(|d| d.field).collect();
                out.push_str(&format!(
                    "\nCHANGED run {} (decision at {}): {} -> {}; reasons [{}] -> [{}]; differs in {}",
                    impact.run_id,
                    impact.position,
                    name(&impact.before.verdict),
                    name(&impact.after.verdict),
                    codes(&impact.before.reasons),
                    codes(&impact.after.reasons),
                    fields.join(", ")
                ));
            }
            if !impact.drift.is_empty() {
                let fields: Vec<&str> = impact.drift.iter().map(|d| d.field).collect();
                out.push_str(&format!(
                    "\nDRIFT run {} (decision at {}): the recorded evaluator does not re-derive the record ({})",
                    impact.run_id,
                    impact.position,
                    fields.join(", ")
                ));
            }
        }
        for skipped in &self.skipped {
            out.push_str(&format!(
                "\nskipped run {} (decision at {}): {}",
                skipped.run_id, skipped.position, skipped.why
            ));
        }
        let baselines = self.impact.iter().filter(|i| i.baseline == Baseline::Recorded).count();
        out.push_str(&format!(
            "\n{} decision(s) replayed: {} changed ({} verdict(s)), {} unchanged, {} skipped, {} drifted",
            self.replayed,
            self.changed,
            self.verdicts_changed,
            self.unchanged,
            self.skipped.len(),
            self.drifted
        ));
        if baselines > 0 {
            out.push_str(&format!(
                "\n{baselines} compared with the decision as recorded: their evaluator was not at hand (give --manifest)"
            ));
        }
        out
    }
}
