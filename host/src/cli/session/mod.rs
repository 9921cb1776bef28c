//! `effects session`: the main job for a terminal user. Runs a script of tool
//! calls through the runtime chain with the reference producers (or, for tools
//! the reference runtime does not execute, the facts the script reports) and
//! reports, per step, the claim, the outcome and the observations; a
//! `complete` step prints the completion decision and the presented answer.
//!
//! Steps that are refused (an escape, the effect store, a policy refusal)
//! write no claim and the session goes on; a step whose claim cannot be
//! persisted is BLOCKED and never runs.

mod interrupt;
mod script;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use serde_json::{Value, json};

use effect_ledger::ledger::envelope::STEP_SCHEMA_VERSION;
use effect_ledger::ledger::{CompleteError, Completion, Ledger, Run, StepResult, StepStatus};

use super::Failure;
use super::decide::{decision_json, describe_decision};
use super::input::read_bounded_text;
use super::output::{name, out};
use super::runtime::{bad, open_ledger};

/// Arguments of `effects session`.
#[derive(Args)]
#[command(after_help = "Script: JSON lines, one step each, e.g.\n  \
{\"tool\": \"write_file\", \"input\": {\"path\": \"a.txt\", \"content\": \"hi\\n\"}}\n  \
{\"tool\": \"bash\", \"input\": {\"command\": \"make test\", \"timeout_ms\": 60000}}\n  \
{\"tool\": \"external\", \"input\": {\"server\": \"tracker\", \"tool\": \"create_issue\"}, \
\"reported\": {\"exit_code\": 0}}\n  \
{\"verify\": {\"command\": \"cargo test\"}}\n  \
{\"complete\": {\"required\": [\"a.txt\"], \"answer\": \"I wrote a.txt.\"}}\n\
Each tool's input is listed by `effects tools` (`--json`: the JSON Schemas). Tools the host runs \
(the filesystem tools, bash / python, bg_job) run here under their claims; with \"background\": \
true a command starts as a job (its id is the result's job_id) and bg_job {job, action: status | \
kill} reads or kills it. Tools the embedding runtime runs (external, owned_write, owned_read, \
browser, and any tool not in the catalogue) take the facts it `reported` {executed, exit_code, \
timed_out, cancelled}; a tool not in the catalogue binds nothing, so its claim has unknown scope. \
`verify` runs a designated check; its pass or fail is evidence for `complete`, which decides the \
run so far (requiring every file the run's changes left in place and its `required` files; with \
\"only\": true, its `required` files alone): COMPLETED, FAILED, BLOCKED or UNVERIFIED, with the disclosures the answer must carry. \
The whole script is validated first: a bad line exits 2 naming it, and nothing runs (so does a \
script larger than 16 MiB). --json prints one step result per line (schema_version, run_id, step, \
request_id, tool, status RAN | REFUSED | BLOCKED | NOT_RECORDED, reason, action_id, claim, \
policy_failure, outcome, observations, launch_settled, verifier, result {ok, text, error, stdout, \
stderr, exit_code, signal, timed_out, truncated, survivors, job_id, job_state}: every key always \
present), a decision object per `complete`, then {\"summary\": ...}. Exit 1 when any step was \
BLOCKED (its claim could not be made durable, so it never ran) or ran but was NOT RECORDED; \
refused steps and the verdict of `complete` do not change the exit status. The data dir must lie \
outside the root and not contain it (exit 2 otherwise).")]
pub struct SessionArgs {
    /// The directory the tools work beneath (a sealed root; created if missing).
    #[arg(long)]
    root: PathBuf,
    /// Continue this run (runs outlive processes): its log must be in the
    /// data dir, and the root must be the one it works beneath (ID-5). A
    /// child run is continued by its id too (`PARENT.NAME`).
    #[arg(long, conflicts_with_all = ["new_run", "child_of"])]
    run: Option<String>,
    /// Start a new run with this id (refused if it exists); with
    /// --child-of, the new child's name. Default: a fresh id.
    #[arg(long, value_name = "ID")]
    new_run: Option<String>,
    /// Begin a child run of this existing run (LOG-1): its id is
    /// `PARENT.NAME`, it writes to the log of its parent's lineage, works
    /// beneath the same root, and its effects count against the parent's
    /// evidence (a command it runs stales the parent's reads).
    #[arg(long, value_name = "PARENT")]
    child_of: Option<String>,
    /// One JSON object per step, then a summary object.
    #[arg(long)]
    json: bool,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Let commands write beneath PATH too (repeatable; ID-6). Commands are
    /// confined by Landlock where it is available: writes beneath the root,
    /// a private TMPDIR and these paths only. A path that is, contains or
    /// lies beneath the data dir is refused.
    #[arg(long, value_name = "PATH")]
    allow_write: Vec<PathBuf>,
    /// Operator key file: the run's records are written HMAC-authenticated
    /// with it. A keyed log refuses appends without its key, and an unkeyed
    /// log refuses a key (a log is keyed from its first record or never).
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// Write the exact argument of every policy call (classify, settle,
    /// readbacks, evaluate) to DIR, one file per call, as `effects policy
    /// run --input` takes it. DIR must lie outside the root; it holds what
    /// the tools were given.
    #[arg(long, value_name = "DIR")]
    trace_policies: Option<PathBuf>,
    /// The script file, or `-` for standard input (at most 16 MiB).
    #[arg(default_value = "-")]
    script: PathBuf,
}

/// A step for a terminal: its claim, outcome and observations on one line,
/// then the tool's answer (or why not, with the first line of stderr).
fn describe_step(result: &StepResult, label: &str, line: usize) -> String {
    let head = format!("[{}] {label}", result.step);
    let reason = result.reason.as_deref().unwrap_or_default();
    match result.status {
        StepStatus::Refused => return format!("{head}: REFUSED ({reason}); no claim (line {line})"),
        StepStatus::Blocked => return format!("{head}: BLOCKED ({reason}); not run (line {line})"),
        StepStatus::Ran | StepStatus::NotRecorded => {}
    }
    let claim = match result.claim {
        Some(position) => format!("claim #{position}"),
        None => "admitted read (no claim)".to_owned(),
    };
    let mut text = format!("{head}: {claim}");
    if let Some(failure) = &result.policy_failure {
        // POL-4: a policy call of this step failed (fuel, memory, a trap, a
        // refused answer): a classifier's leaves the claim unknown scope, a
        // settle's or readback's leaves less evidence. Never silent.
        text.push_str(&format!(" (POLICY FAILURE: {failure})"));
    }
    if let Some(outcome) = &result.outcome {
        let at = outcome.position.map(|p| format!(" (#{p})")).unwrap_or_default();
        text.push_str(&format!(" -> {}{at}", name(&outcome.execution)));
    }
    let observations: Vec<String> = result
        .observations
        .iter()
        .map(|o| {
            let digest =
                o.content_sha256.as_deref().map(|d| format!(" sha256 {}", &d[..12])).unwrap_or_default();
            format!("observation #{} {}{digest}", o.position, name(&o.coverage))
        })
        .collect();
    if !observations.is_empty() {
        text.push_str(&format!("; {}", observations.join(", ")));
    }
    if let Some(position) = result.launch_settled {
        text.push_str(&format!("; settled its launch (#{position})"));
    }
    if let Some(verifier) = &result.verifier {
        let verdict = match (verifier.passed, result.result.timed_out) {
            (true, _) => "PASSED".to_owned(),
            (false, true) => "FAILED (timed out)".to_owned(),
            (false, false) => format!(
                "FAILED (exit {})",
                result.result.exit_code.map_or_else(|| "none".to_owned(), |code| code.to_string())
            ),
        };
        text.push_str(&format!("; check {verdict} (#{})", verifier.position));
    }
    if result.status == StepStatus::NotRecorded {
        text.push_str(&format!("; NOT RECORDED: {reason}"));
    }
    let answer = match (&result.result.text, &result.result.error) {
        (Some(answer), _) => answer.lines().next().unwrap_or_default().to_owned(),
        (None, Some(error)) => {
            let stderr =
                result.result.stderr.as_deref().and_then(|e| e.lines().find(|l| !l.trim().is_empty()));
            match stderr {
                Some(first) => format!("error: {error}: {first}"),
                None => format!("error: {error}"),
            }
        }
        (None, None) => String::new(),
    };
    if !answer.is_empty() {
        text.push_str(&format!("\n      {answer}"));
    }
    text
}

/// Counts for the summary.
#[derive(Default)]
struct Tally {
    claims: usize,
    refused: usize,
    blocked: usize,
    /// Steps whose outcome, observations, check or decision could not be
    /// recorded.
    not_recorded: usize,
}

impl Tally {
    /// Counts a step's result; one that ran but was not recorded is said at
    /// once on stderr, and the session will exit 1.
    fn count(&mut self, result: &StepResult) {
        self.claims += usize::from(result.claim.is_some());
        match result.status {
            StepStatus::Ran => {}
            StepStatus::Refused => self.refused += 1,
            StepStatus::Blocked => self.blocked += 1,
            StepStatus::NotRecorded => {
                self.not_recorded += 1;
                let reason = result.reason.as_deref().unwrap_or_default();
                eprintln!("effects: step {}: what it did was NOT RECORDED: {reason}", result.step);
            }
        }
    }
}

/// A `verify` step: the check's run as a step, with its verifier record.
fn verify_step(ledger: &mut Ledger, run: &Run, step: u64, verify: &script::VerifyStep) -> StepResult {
    let timeout = Duration::from_millis(verify.timeout_ms);
    let mut result = match ledger.verify(run, &verify.command, timeout) {
        Ok(verified) => verified.step,
        Err(error) => error.step(run, step),
    };
    result.step = step;
    result
}

/// A `complete` step's line: the decision, under the envelope's header.
fn complete_json(run: &Run, step: u64, required: &[String], decided: Result<&Completion, String>) -> Value {
    let mut report = match decided {
        Ok(completion) => {
            let mut report = decision_json(completion);
            report["status"] = json!("DECIDED");
            report["reason"] = Value::Null;
            report
        }
        Err(reason) => json!({ "status": "REFUSED", "reason": reason }),
    };
    report["schema_version"] = json!(STEP_SCHEMA_VERSION);
    report["run_id"] = json!(run.id);
    report["step"] = json!(step);
    report["tool"] = json!("complete");
    report["required"] = json!(required);
    report
}

impl SessionArgs {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        let steps =
            script::parse(&read_bounded_text(&self.script, "the script")?).map_err(|(line, message)| {
                let place = if line == 0 { String::new() } else { format!(" line {line}") };
                bad(anyhow!("script{place}: {message}; nothing was run"))
            })?;
        #[allow(clippy::disallowed_methods)] // `--root` from the command line, created when missing
        if !self.root.exists() {
            std::fs::create_dir_all(&self.root)
                .with_context(|| format!("creating root {}", self.root.display()))
                .map_err(bad)?;
            eprintln!("created root {}", self.root.display());
        }
        if let Some(dir) = &self.trace_policies {
            super::runtime::trace_policies(&self.root, dir)?;
        }
        let (mut ledger, display_data) = open_ledger(
            &self.root,
            data_dir,
            self.manifest.as_deref(),
            self.key_file.as_deref(),
            &self.allow_write,
        )?;
        let run = match (&self.run, &self.child_of, &self.new_run) {
            (Some(id), _, _) => ledger.continue_run(id),
            (None, Some(parent), name) => ledger.continue_run(parent).and_then(|parent| match name {
                Some(name) => ledger.new_child(&parent, name),
                None => Ok(ledger.begin_run(Some(&parent))),
            }),
            (None, None, Some(id)) => ledger.new_run(id),
            (None, None, None) => Ok(ledger.begin_run(None)),
        }
        .map_err(|e| bad(anyhow!(e)))?;
        if !self.json {
            match &run.parent {
                Some(parent) => out!("run {} (child of {parent}; data dir {display_data})", run.id),
                None => out!("run {} (data dir {display_data})", run.id),
            }
        }
        let mut tally = Tally::default();
        let mut decision = None;
        // Ctrl-C or SIGTERM: the running command is torn down and settled
        // CANCELLED, and no later step starts.
        let interrupt = interrupt::Interrupt::install();
        let mut stopped = None;
        for (index, step) in steps.iter().enumerate() {
            let number = index as u64 + 1;
            let report = match &step.action {
                script::Action::Tool(request) => {
                    let cancel = interrupt.as_ref().map(interrupt::Interrupt::arm);
                    let result = ledger.step_cancellable(&run, request, cancel);
                    if let Some(interrupt) = &interrupt {
                        interrupt.disarm();
                    }
                    tally.count(&result);
                    if !self.json {
                        out!("{}", describe_step(&result, &result.tool, step.line));
                    }
                    serde_json::to_value(&result).expect("a step result serializes")
                }
                script::Action::Verify(verify) => {
                    let result = verify_step(&mut ledger, &run, number, verify);
                    tally.count(&result);
                    if !self.json {
                        let label = format!("verify `{}`", verify.command);
                        out!("{}", describe_step(&result, &label, step.line));
                    }
                    serde_json::to_value(&result).expect("a step result serializes")
                }
                script::Action::Complete(complete) => {
                    let decided = match complete.only {
                        true => ledger.complete_exactly(&run, &complete.required, &complete.answer),
                        false => ledger.complete(&run, &complete.required, &complete.answer),
                    };
                    if let Err(error @ CompleteError::Log(_)) = &decided {
                        tally.not_recorded += 1;
                        eprintln!("effects: step {number}: the decision was NOT RECORDED: {error}");
                    }
                    let decided = decided.as_ref().map_err(ToString::to_string);
                    let report = complete_json(&run, number, &complete.required, decided);
                    if !self.json {
                        match report["reason"].as_str() {
                            Some(reason) => out!("[{number}] complete: REFUSED ({reason})"),
                            None => out!("[{number}] complete: {}", describe_decision(&report)),
                        }
                    }
                    decision = Some(report.clone());
                    report
                }
            };
            if self.json {
                out!("{report}");
            }
            if let Some(signal) = interrupt.as_ref().and_then(interrupt::Interrupt::signalled) {
                stopped = Some((signal, number, step_label(&report)));
                break;
            }
        }
        // LOG-3: the outcomes and observations of the last steps ride this
        // fsync; a session that cannot make them durable says so.
        let synced = ledger.sync();
        if let Err(error) = &synced {
            eprintln!(
                "effects: the last steps' outcomes may not be durable: {error}; after a crash their claims \
                 recover as INTERRUPTED"
            );
        }
        let claims = tally.claims;
        // A continued run and a child both write to a log that exists.
        let log = (claims > 0 || self.run.is_some() || self.child_of.is_some())
            .then(|| ledger.data_dir().log_display(&run.lineage));
        // CMP-12: the last decision is current only if nothing was recorded
        // after it, by this process or any other on the lineage.
        let stale_since = match &decision {
            Some(decision) => match ledger.stale_since(&run, decision["recorded"].as_u64()) {
                Ok(since) => since.map(|position| format!("#{position}")),
                Err(error) => Some(format!("the log cannot be read to check ({error})")),
            },
            None => None,
        };
        let mut summary = json!({ "schema_version": STEP_SCHEMA_VERSION, "summary": {
            "run_id": run.id, "lineage": run.lineage, "parent": run.parent, "steps": steps.len(), "claims": claims,
            "refused": tally.refused, "blocked": tally.blocked, "not_recorded": tally.not_recorded,
            "data_dir": display_data, "log": log,
        }});
        // The final object carries the last decision's fields at the top
        // level while it is current; a stale one only under `last_decision`.
        if let Some(Value::Object(fields)) = &decision {
            let mut last = json!({ "stale": stale_since.is_some(), "stale_since": stale_since });
            for key in ["verdict", "reasons", "disclosures", "assessments", "answer", "recorded"] {
                if let Some(value) = fields.get(key) {
                    last[key] = value.clone();
                    if stale_since.is_none() {
                        summary[key] = value.clone();
                    }
                }
            }
            summary["last_decision"] = last;
        }
        if self.json {
            out!("{summary}");
        } else {
            if let (Some(since), Some(Value::Object(fields))) = (stale_since, &decision) {
                out!(
                    "the last decision ({}) is STALE: evidence was recorded after it ({since}); \
                     decide again before presenting it",
                    fields.get("verdict").and_then(Value::as_str).unwrap_or_default(),
                );
            }
            out!(
                "{} step(s): {claims} claimed, {} refused, {} blocked; continue with --run {}",
                steps.len(),
                tally.refused,
                tally.blocked,
                run.id
            );
        }
        // A session that could not do what it was asked does not exit 0: a
        // caller that reads only the status must not take BLOCKED steps (their
        // claims were never durable, so they never ran) or unrecorded ones
        // for work done.
        let mut problems = synced.is_err();
        if tally.blocked > 0 {
            eprintln!(
                "effects: {} step(s) were BLOCKED: their claims could not be made durable, so they never \
                 ran; fix the data dir (space, permissions, `effects log recover`) and run them again",
                tally.blocked
            );
            problems = true;
        }
        if tally.not_recorded > 0 {
            eprintln!(
                "effects: {} step(s) ran but what they did was NOT RECORDED; the log holds their claims \
                 unsettled, and no decision may rely on them",
                tally.not_recorded
            );
            problems = true;
        }
        if let Some((signal, number, label)) = stopped {
            // A command the signal stopped was torn down and settled
            // CANCELLED (the label says so); any other step ran to its end.
            eprintln!(
                "effects: {signal}: stopped after step {number} of {} ({label}); no later step ran. Continue \
                 with --run {}",
                steps.len(),
                run.id
            );
            return Ok(ExitCode::from(interrupt::INTERRUPTED));
        }
        if problems {
            return Ok(ExitCode::from(super::exit::PROBLEMS));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// What a step's report says it was, for the line that says where a signal
/// stopped the session: its tool and outcome, or its kind.
fn step_label(report: &Value) -> String {
    let tool = report["tool"].as_str().unwrap_or("complete");
    match report["outcome"]["execution"].as_str() {
        Some(execution) => format!("{tool}, {execution}"),
        None => tool.to_owned(),
    }
}
