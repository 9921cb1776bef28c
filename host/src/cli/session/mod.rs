//! `effects session`: the main job for a terminal user. Runs a script of tool
//! calls through the runtime chain with the reference producers (or, for tools
//! the reference runtime does not execute, the facts the script reports) and
//! reports, per step, the claim, the outcome and the observations; a
//! `complete` step prints the completion decision and the presented answer.
//!
//! Steps that are refused (an escape, the effect store, a policy refusal)
//! write no claim and the session goes on; a step whose claim cannot be
//! persisted is BLOCKED and never runs.

mod script;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;
use serde_json::{Value, json};

use effect_ledger::ledger::{CompleteError, Verified, VerifyError};
use effect_ledger::ledger::{Dispatch, Dispatched, LaunchLink, Ledger, Recorded, Run};
use effect_ledger::model::{JobLifecycle, ProducerFacts};
use effect_ledger::producers::Produced;
use effect_ledger::producers::fs;
use effect_ledger::producers::job::JobStatus;
use effect_ledger::producers::process::ProcessRequest;

use super::Failure;
use super::decide::{decision_json, describe_decision};
use super::input::read_bounded_text;
use super::output::out;
use super::runtime::{bad, open_ledger};

/// Arguments of `effects session`.
#[derive(Args)]
#[command(after_help = "Script: JSON lines, one step each, e.g.\n  \
{\"tool\": \"write_file\", \"input\": {\"path\": \"a.txt\", \"content\": \"hi\\n\"}}\n  \
{\"tool\": \"read_file\", \"input\": {\"path\": \"a.txt\"}}\n  \
{\"tool\": \"external\", \"input\": {\"server\": \"tracker\", \"tool\": \"create_issue\", \
\"arguments\": {}}, \"reported\": {\"exit_code\": 0}}\n  \
{\"complete\": {\"required\": [\"a.txt\"], \"answer\": \"I wrote a.txt.\"}}\n\
Tools run here: write_file, edit_file, apply_patch, read_file, ls, glob, grep, and bash / python \
{command, timeout_ms} (in the root, in their own process group, torn down on timeout); with \
\"background\": true the command starts as a job (its id is in the result) and bg_job {job, action: \
status | kill} reads or kills it, settling its launch once it has ended. \
{\"verify\": {\"command\": \"cargo test\"}} runs a designated check; its pass or fail is evidence for \
`complete`. Reported (run by \
the embedding runtime, facts given in `reported`): external {server, tool, arguments}, owned_write \
and owned_read {collection, record, revision, attachments}, browser {action: session_info, session}; \
browser page actions are refused. `complete` decides the run so far: \
COMPLETED, FAILED, BLOCKED or UNVERIFIED, with the disclosures the answer must carry. The whole \
script is validated first: a bad line exits 2 naming it, and nothing runs (so does a script larger \
than 16 MiB). Exit 1 when any step was BLOCKED (its claim could not be made durable, so it never ran) \
or ran but was NOT RECORDED; refused steps and the verdict of `complete` do not change the exit \
status. The data dir must lie outside the root and not contain it (exit 2 otherwise).")]
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
    /// The script file, or `-` for standard input (at most 16 MiB).
    #[arg(default_value = "-")]
    script: PathBuf,
}

/// A job's lifecycle for the agent, with the tail of its output.
fn describe_job(ledger: &Ledger, dispatched: &Dispatched, status: &JobStatus) -> String {
    let state = match (status.state, status.exit_code) {
        (JobLifecycle::Exited, Some(code)) => format!("exited with status {code}"),
        (JobLifecycle::Running, _) => "running".to_owned(),
        (JobLifecycle::Killed, _) => "killed".to_owned(),
        (JobLifecycle::Lost, _) => "lost (it ended without reporting a status)".to_owned(),
        (JobLifecycle::Exited, None) => "exited".to_owned(),
    };
    let survivors = if status.state != JobLifecycle::Running && !status.group_gone {
        "; a process of its group is still alive"
    } else {
        ""
    };
    let output = ledger.job_output(dispatched, 4096);
    let output = output.trim_end();
    if output.is_empty() { format!("{state}{survivors}") } else { format!("{state}{survivors}\n{output}") }
}

/// Runs the reference producer for a dispatched step.
fn produce(
    ledger: &mut Ledger,
    run: &Run,
    tool: &str,
    input: &Value,
    dispatched: &Dispatched,
) -> (ProducerFacts, Result<String, String>) {
    let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or_default();
    if let Some(LaunchLink::Launch { .. }) = dispatched.link() {
        let request = ProcessRequest::new(tool, text("command"), Duration::MAX);
        let produced = ledger.launch_job(run, dispatched, &request);
        return (produced.facts, produced.result.map(|job| format!("started background job {job}")));
    }
    if matches!(tool, "bash" | "python") {
        let timeout =
            Duration::from_millis(input.get("timeout_ms").and_then(Value::as_u64).unwrap_or(60_000));
        return produce_command(
            ledger,
            run,
            dispatched,
            &ProcessRequest::new(tool, text("command"), timeout),
        );
    }
    let ledger: &Ledger = ledger;
    let root = ledger.root();
    // Each filesystem binding's resolution: producers open through it (ID-3).
    let targets = dispatched.bound.targets(root);
    if tool == "bg_job" {
        let produced = ledger.job_action(dispatched);
        return (produced.facts, produced.result.map(|status| describe_job(ledger, dispatched, &status)));
    }
    let Some(target) = targets.first() else {
        // Every filesystem tool binds its path; should none be openable,
        // nothing runs (not executed: no impact).
        return (ProducerFacts::default(), Err(format!("{tool}: no resolved path to open")));
    };
    let lines = |produced: Produced<fs::Found>| Produced {
        facts: produced.facts,
        result: produced.result.map(|found| {
            let mut text = found.lines.join("\n");
            if found.truncated {
                text.push_str("\n(truncated)");
            }
            text
        }),
    };
    let written = |produced: Produced<fs::Written>| Produced {
        facts: produced.facts,
        result: produced.result.map(|w| {
            let mut parts: Vec<String> =
                w.files.iter().map(|(p, d)| format!("wrote {p} (sha256 {d})")).collect();
            parts.extend(w.removed.iter().map(|p| format!("removed {p}")));
            parts.join("; ")
        }),
    };
    let produced: Produced<String> = match tool {
        "write_file" => written(fs::write_file(root, target, text("content"))),
        "edit_file" => written(fs::edit_file(
            root,
            target,
            text("old_string"),
            text("new_string"),
            input.get("replace_all").and_then(Value::as_bool).unwrap_or(false),
        )),
        "apply_patch" => written(fs::apply_patch(root, &targets, text("patch"))),
        "read_file" => {
            let offset = input.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize;
            let limit = input.get("limit").and_then(Value::as_u64).map(|l| l as usize);
            let produced = fs::read_file(root, target, offset, limit, 16 << 20);
            Produced { facts: produced.facts, result: produced.result.map(|read| read.text) }
        }
        "ls" => lines(fs::ls(root, target)),
        "glob" => lines(fs::glob(root, target, text("pattern"))),
        "grep" => lines(fs::grep(root, target, text("pattern"))),
        other => unreachable!("the script parser admits only known tools, not {other}"),
    };
    (produced.facts, produced.result)
}

/// Runs a dispatched `bash` / `python` step under its claim (PROC-1, PROC-2).
fn produce_command(
    ledger: &mut Ledger,
    run: &Run,
    dispatched: &Dispatched,
    request: &ProcessRequest,
) -> (ProducerFacts, Result<String, String>) {
    let timeout = request.timeout;
    let produced = ledger.run_command(run, dispatched, request);
    let facts = produced.facts.clone();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim_end().to_owned();
    let result = produced.result.and_then(|ran| {
        let survivors = if ran.survivors.is_empty() {
            String::new()
        } else {
            format!("; processes that survived teardown: {:?}", ran.survivors)
        };
        match (facts.timed_out, facts.exit_code) {
            (true, _) => Err(format!(
                "timed out after {timeout:?}; its processes were torn down ({}){survivors}",
                if ran.survivors.is_empty() { "all dead" } else { "some survived" }
            )),
            (false, Some(0)) if survivors.is_empty() => Ok(text(&ran.stdout)),
            (false, Some(0)) => Err(format!("exit status 0{survivors}")),
            (false, Some(code)) => Err(format!("exit status {code}: {}{survivors}", text(&ran.stderr))),
            (false, None) => Err(format!("killed by signal {}{survivors}", ran.signal.unwrap_or(0))),
        }
    });
    (facts, result)
}

fn outcome_json(recorded: &Recorded) -> Value {
    json!({
        "position": recorded.outcome_position,
        "execution": recorded.outcome.execution,
        "impact": recorded.outcome.impact,
        "cleanup": recorded.outcome.cleanup,
    })
}

fn observations_json(recorded: &Recorded) -> Value {
    recorded
        .observations
        .iter()
        .map(|(position, o)| {
            json!({
                "position": position,
                "mechanism": o.mechanism,
                "coverage": o.coverage,
                "exists": o.exists,
                "content_sha256": o.content_sha256,
            })
        })
        .collect()
}

fn describe_step(report: &Value) -> String {
    let head = format!("[{}] {}", report["step"], report["tool"].as_str().unwrap_or_default());
    match report["status"].as_str().unwrap_or_default() {
        "refused" => format!("{head}: REFUSED ({}); no claim", report["reason"].as_str().unwrap_or_default()),
        "blocked" => format!("{head}: BLOCKED ({}); not run", report["reason"].as_str().unwrap_or_default()),
        _ => {
            let claim = match report["claim"].as_u64() {
                Some(position) => format!("claim #{position}"),
                None => "admitted read (no claim)".to_owned(),
            };
            let outcome = match &report["outcome"] {
                Value::Null => String::new(),
                outcome => format!(
                    " -> {}{}",
                    outcome["execution"].as_str().unwrap_or_default(),
                    outcome["position"].as_u64().map(|p| format!(" (#{p})")).unwrap_or_default()
                ),
            };
            let observations: Vec<String> = report["observations"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    format!(
                        "observation #{} {}{}",
                        o["position"],
                        o["coverage"].as_str().unwrap_or_default(),
                        o["content_sha256"]
                            .as_str()
                            .map(|d| format!(" sha256 {}", &d[..12]))
                            .unwrap_or_default()
                    )
                })
                .collect();
            let result = match (&report["result"]["ok"], &report["result"]["error"]) {
                (Value::String(ok), _) => ok.lines().next().unwrap_or_default().to_owned(),
                (_, Value::String(error)) => format!("error: {error}"),
                _ => String::new(),
            };
            let mut line = format!("{head}: {claim}{outcome}");
            if !observations.is_empty() {
                line.push_str(&format!("; {}", observations.join(", ")));
            }
            if let Some(position) = report["launch_settled"].as_u64() {
                line.push_str(&format!("; settled its launch (#{position})"));
            }
            if let Some(error) = report["record_error"].as_str() {
                line.push_str(&format!("; NOT RECORDED: {error}"));
            }
            if !result.is_empty() {
                line.push_str(&format!("\n      {result}"));
            }
            line
        }
    }
}

fn verifier_json(verified: &Verified) -> Value {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim_end().to_owned();
    let output = match &verified.output {
        Ok(ran) => json!({ "stdout": text(&ran.stdout), "stderr": text(&ran.stderr) }),
        Err(error) => json!({ "error": error }),
    };
    json!({
        "status": "ran",
        "claim": verified.record.claim,
        "position": verified.position,
        "passed": verified.record.passed,
        "exit_code": verified.record.exit_code,
        "timed_out": verified.record.timed_out,
        "output": output,
    })
}

fn describe_verifier(report: &Value) -> String {
    let head =
        format!("[{}] verify `{}`", report["step"], report["verify"]["command"].as_str().unwrap_or_default());
    if let Some(reason) = report["reason"].as_str() {
        return format!("{head}: ERROR ({reason})");
    }
    let verdict = match (report["passed"].as_bool(), report["timed_out"].as_bool()) {
        (Some(true), _) => "PASSED".to_owned(),
        (_, Some(true)) => "FAILED (timed out)".to_owned(),
        _ => format!("FAILED (exit {})", report["exit_code"]),
    };
    format!("{head}: claim #{} -> {verdict} (#{})", report["claim"], report["position"])
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
    /// Step `index` ran, but `what` it did could not be recorded: said at
    /// once on stderr, and the session will exit 1.
    fn lost(&mut self, index: usize, what: &str, error: &dyn std::fmt::Display) {
        self.not_recorded += 1;
        eprintln!("effects: step {}: {what} was NOT RECORDED: {error}", index + 1);
    }
}

/// Runs one tool step and reports it.
fn tool_step(
    ledger: &mut Ledger,
    run: &Run,
    step: &script::ToolStep,
    index: usize,
    tally: &mut Tally,
) -> Value {
    let mut report = json!({ "step": index + 1, "tool": step.tool });
    match ledger.dispatch(run, &step.tool, &step.input, &format!("step-{}", index + 1)) {
        Dispatch::Refused(reason) => {
            tally.refused += 1;
            report["status"] = json!("refused");
            report["reason"] = json!(reason);
        }
        Dispatch::Blocked(reason) => {
            tally.blocked += 1;
            report["status"] = json!("blocked");
            report["reason"] = json!(reason);
        }
        Dispatch::Run(dispatched) => {
            tally.claims += usize::from(dispatched.claim.is_some());
            let (facts, result) = match &step.reported {
                Some(reported) => {
                    let exit =
                        reported.exit_code.map_or_else(|| "no exit code".to_owned(), |c| format!("exit {c}"));
                    (reported.facts(), Ok(format!("reported by the runtime: {exit}")))
                }
                None => produce(ledger, run, &step.tool, &step.input, &dispatched),
            };
            report["status"] = json!("ran");
            report["action_id"] = json!(dispatched.action_id);
            report["claim"] = json!(dispatched.claim);
            report["policy_failure"] = json!(dispatched.policy_failure);
            report["result"] = match result {
                Ok(text) => json!({ "ok": text }),
                Err(error) => json!({ "error": error }),
            };
            match ledger.record(run, &dispatched, &facts) {
                Ok(recorded) => {
                    report["outcome"] =
                        if dispatched.claim.is_some() { outcome_json(&recorded) } else { Value::Null };
                    report["observations"] = observations_json(&recorded);
                    if let Some(position) = recorded.launch_settled {
                        report["launch_settled"] = json!(position);
                    }
                }
                Err(error) => report["record_error"] = json!(error.to_string()),
            }
        }
    }
    report
}

/// Why a decision recorded at `at` (`None`: not recorded, the run had no
/// log then) is no longer current (CMP-12): the first evidence record after
/// it in the run's lineage, by any process; or that the log cannot be read,
/// so currency cannot be shown. `None` when it is current.
fn stale_since(ledger: &mut Ledger, run: &Run, at: Option<u64>) -> Option<String> {
    let history = match ledger.history(&run.lineage) {
        Ok(history) => history,
        Err(error) => return Some(format!("the log cannot be read to check ({error})")),
    };
    history
        .iter()
        .filter(|framed| at.is_none_or(|at| framed.position > at))
        .find(|framed| !matches!(framed.record, effect_ledger::log::Record::Decision(_)))
        .map(|framed| format!("#{}", framed.position))
}

impl SessionArgs {
    pub fn run(self, data_dir: Option<PathBuf>) -> Result<ExitCode, Failure> {
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
        let data_dir = data_dir.unwrap_or_else(|| {
            let parent = self.root.canonicalize().ok().and_then(|r| r.parent().map(Path::to_path_buf));
            parent.unwrap_or_else(|| PathBuf::from(".")).join(".effects")
        });
        let (mut ledger, display_data) = open_ledger(
            &self.root,
            &data_dir,
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
        for (index, step) in steps.iter().enumerate() {
            let report = match &step.action {
                script::Action::Tool(tool) => {
                    let mut report = tool_step(&mut ledger, &run, tool, index, &mut tally);
                    if let Some(error) = report["record_error"].as_str() {
                        tally.lost(index, "its outcome", &error);
                    }
                    report["line"] = json!(step.line);
                    if !self.json {
                        out!("{}", describe_step(&report));
                    }
                    report
                }
                script::Action::Verify(verify) => {
                    let timeout = Duration::from_millis(verify.timeout_ms);
                    let mut report = match ledger.verify(&run, &verify.command, timeout) {
                        Ok(verified) => verifier_json(&verified),
                        Err(error) => {
                            if matches!(error, VerifyError::Log(_)) {
                                tally.lost(index, "the check", &error);
                            }
                            json!({ "status": "error", "reason": error.to_string() })
                        }
                    };
                    report["step"] = json!(index + 1);
                    report["line"] = json!(step.line);
                    report["verify"] = json!({ "command": verify.command });
                    if !self.json {
                        out!("{}", describe_verifier(&report));
                    }
                    report
                }
                script::Action::Complete(complete) => {
                    let mut report = match ledger.complete(&run, &complete.required, &complete.answer) {
                        Ok(completion) => decision_json(&completion),
                        Err(error) => {
                            if matches!(error, CompleteError::Log(_)) {
                                tally.lost(index, "the decision", &error);
                            }
                            json!({ "status": "refused", "reason": error.to_string() })
                        }
                    };
                    report["step"] = json!(index + 1);
                    report["line"] = json!(step.line);
                    report["complete"] = json!({ "required": complete.required });
                    if !self.json {
                        match report["reason"].as_str() {
                            Some(reason) => out!("[{}] complete: REFUSED ({reason})", index + 1),
                            None => out!("[{}] complete: {}", index + 1, describe_decision(&report)),
                        }
                    }
                    decision = Some(report.clone());
                    report
                }
            };
            if self.json {
                out!("{report}");
            }
        }
        let claims = tally.claims;
        // A continued run and a child both write to a log that exists.
        let log = (claims > 0 || self.run.is_some() || self.child_of.is_some())
            .then(|| format!("{display_data}/effects/{}.log", run.lineage));
        // CMP-12: the last decision is current only if nothing was recorded
        // after it, by this process or any other on the lineage.
        let stale_since = match &decision {
            Some(decision) => stale_since(&mut ledger, &run, decision["recorded"].as_u64()),
            None => None,
        };
        let mut summary = json!({ "summary": {
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
        let mut problems = false;
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
        if problems {
            return Ok(ExitCode::from(super::exit::PROBLEMS));
        }
        Ok(ExitCode::SUCCESS)
    }
}
