//! The step result envelope: what every surface answers for one step, the
//! same shape whatever happened. Every key is always present (`null` or
//! empty when it does not apply), every enum is written in one casing
//! (SCREAMING_SNAKE_CASE, like verdicts and executions), and
//! `schema_version` says which shape this is.
//!
//! ```json
//! {"schema_version": 1, "run_id": "r", "step": 1, "request_id": "step-1", "tool": "bash",
//!  "status": "RAN", "reason": null, "action_id": "r-1-0", "claim": 0, "policy_failure": null,
//!  "outcome": {"position": 2, "execution": "FAILED", "impact": "POSSIBLE", "cleanup": "CLEAN"},
//!  "observations": [], "launch_settled": null, "verifier": null,
//!  "result": {"ok": false, "text": null, "error": "exit status 1", "stdout": "", "stderr": "...",
//!             "exit_code": 1, "signal": null, "timed_out": false, "truncated": false,
//!             "survivors": [], "job_id": null, "job_state": null}}
//! ```

use serde::{Serialize, Serializer};

use crate::log::{ObservationRecord, Position};
use crate::model::{
    CleanupState, Coverage, Execution, Impact, JobLifecycle, Location, Mechanism, Postcondition,
};

use super::step::Reported;
use super::{Dispatched, Recorded, Run};

/// The envelope's shape; raised when a key changes meaning or goes away.
pub const STEP_SCHEMA_VERSION: u32 = 1;

/// A unit enum's name in SCREAMING_SNAKE_CASE whatever its own serde
/// casing (some model enums are lower case in the log's format, which stays
/// as it is so older logs load); `None` for a value that is not a unit
/// variant. The one casing the ledger shows enums in, as JSON and as text.
pub fn screaming_name(value: &impl Serialize) -> Option<String> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => Some(name.to_uppercase()),
        _ => None,
    }
}

fn screaming<T: Serialize, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    match screaming_name(value) {
        Some(name) => serializer.serialize_str(&name),
        None => value.serialize(serializer),
    }
}

fn screaming_option<T: Serialize, S: Serializer>(
    value: &Option<T>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => screaming(value, serializer),
        None => serializer.serialize_none(),
    }
}

/// How a step ended, for the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepStatus {
    /// It ran (or, for a tool the runtime runs, its facts were taken) and
    /// everything was recorded.
    Ran,
    /// Refused before anything was claimed or run (an escape, the effect
    /// store, a policy refusal, a job that is not this lineage's, bad input).
    Refused,
    /// Its claim could not be made durable: it never ran (LOG-4).
    Blocked,
    /// It ran, but its outcome or observations could not be recorded: its
    /// claim stays unsettled and no decision may rely on it.
    NotRecorded,
}

/// The settled outcome, where the log holds it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct OutcomeView {
    /// The outcome record's position.
    pub position: Option<Position>,
    /// How the call ended.
    pub execution: Execution,
    /// Whether it may have changed something.
    pub impact: Impact,
    /// What is known of its processes' cleanup.
    #[serde(serialize_with = "screaming")]
    #[schemars(with = "String")]
    pub cleanup: CleanupState,
}

/// One readback, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ObservationView {
    /// Its position.
    pub position: Position,
    /// The path read, for a file beneath the root.
    pub path: Option<String>,
    /// How it was read.
    #[serde(serialize_with = "screaming")]
    #[schemars(with = "String")]
    pub mechanism: Mechanism,
    /// How much of it.
    pub coverage: Coverage,
    /// Whether it exists.
    pub exists: bool,
    /// Its content's SHA-256, when read completely.
    pub content_sha256: Option<String>,
    /// A job's state, for a job read.
    #[serde(serialize_with = "screaming_option")]
    #[schemars(with = "Option<String>")]
    pub job_state: Option<JobLifecycle>,
}

impl ObservationView {
    pub(super) fn of(position: Position, record: &ObservationRecord) -> Self {
        let path = match record.resource.location() {
            Location::Filesystem(file) => Some(file.path.clone()),
            _ => None,
        };
        Self {
            position,
            path,
            mechanism: record.mechanism,
            coverage: record.coverage,
            exists: record.exists,
            content_sha256: record.content_sha256.clone(),
            job_state: record.job_state,
        }
    }
}

/// A verifier run's record, for a `verify` step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct VerifierView {
    /// The verifier record's position.
    pub position: Position,
    /// Exit 0 within its time.
    pub passed: bool,
}

/// What the tool answered: for the agent (`text` or `error`) and, for a
/// command, everything a program needs (both streams, always; the exit code
/// or signal; whether the timeout fired or the output was cut).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ToolResult {
    /// It did what was asked (exit 0, nothing survived, the file written).
    pub ok: bool,
    /// Its answer, when `ok`.
    pub text: Option<String>,
    /// Why not, otherwise.
    pub error: Option<String>,
    /// A command's standard output (a job's: the tail of its output). When
    /// cut, its head and its tail are kept, with a marker between them.
    pub stdout: Option<String>,
    /// A command's standard error, the same way.
    pub stderr: Option<String>,
    /// A command's or job's exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended a command.
    pub signal: Option<i32>,
    /// A command's timeout fired.
    pub timed_out: bool,
    /// Output was cut (a command's streams, a listing).
    pub truncated: bool,
    /// PIDs of a command's processes still alive after its teardown.
    pub survivors: Vec<u32>,
    /// A background job's id: started by this step, or read or killed.
    pub job_id: Option<String>,
    /// That job's state.
    #[serde(serialize_with = "screaming_option")]
    #[schemars(with = "Option<String>")]
    pub job_state: Option<JobLifecycle>,
}

impl ToolResult {
    /// A successful answer.
    pub fn text(text: String) -> Self {
        Self { ok: true, text: Some(text), ..Self::default() }
    }

    /// A failed one.
    pub fn error(error: String) -> Self {
        Self { error: Some(error), ..Self::default() }
    }

    /// What the runtime reported, said back.
    pub fn reported(reported: &Reported) -> Self {
        let exit =
            reported.exit_code.map_or_else(|| "no exit code".to_owned(), |code| format!("exit {code}"));
        let ok = reported.executed && reported.exit_code == Some(0);
        Self {
            ok,
            text: ok.then(|| format!("reported by the runtime: {exit}")),
            error: (!ok).then(|| format!("reported by the runtime: {exit}")),
            exit_code: reported.exit_code,
            timed_out: reported.timed_out,
            ..Self::default()
        }
    }
}

/// One step's result.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StepResult {
    /// [`STEP_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The run.
    pub run_id: String,
    /// The caller's step number.
    pub step: u64,
    /// The request id recorded on the claim.
    pub request_id: String,
    /// The tool.
    pub tool: String,
    /// How it ended.
    pub status: StepStatus,
    /// Why it was refused, blocked or not recorded.
    pub reason: Option<String>,
    /// The action id, once dispatched.
    pub action_id: Option<String>,
    /// The claim's position; `null` for an admitted read or a step that
    /// was never claimed.
    pub claim: Option<Position>,
    /// Why classification or settlement fell back to the host's floor.
    pub policy_failure: Option<String>,
    /// The settled outcome, for a claimed step that was recorded.
    pub outcome: Option<OutcomeView>,
    /// The readbacks recorded.
    pub observations: Vec<ObservationView>,
    /// The launch a job read or kill settled, if it did.
    pub launch_settled: Option<Position>,
    /// The files this step's readbacks found not holding what its claim
    /// said they would (its postconditions: these bytes, absent, present),
    /// by a readback that decides it (a COMPLETE read, or a stat for
    /// existence): CONTRADICTED, whatever the tool or the runtime reported,
    /// and `result.ok` is false.
    pub contradicted: Vec<String>,
    /// The verifier record, for a `verify` step.
    pub verifier: Option<VerifierView>,
    /// What the tool answered.
    pub result: ToolResult,
}

impl StepResult {
    /// A step not yet dispatched.
    pub(super) fn new(run: &Run, step: u64, request_id: &str, tool: &str) -> Self {
        Self {
            schema_version: STEP_SCHEMA_VERSION,
            run_id: run.id.clone(),
            step,
            request_id: request_id.to_owned(),
            tool: tool.to_owned(),
            status: StepStatus::Ran,
            reason: None,
            action_id: None,
            claim: None,
            policy_failure: None,
            outcome: None,
            observations: Vec::new(),
            launch_settled: None,
            contradicted: Vec::new(),
            verifier: None,
            result: ToolResult::default(),
        }
    }

    /// A step that ended before it ran, or whose run was not recorded,
    /// for a caller that never reached [`super::Ledger::step`] (a check
    /// whose claim was refused).
    pub fn unrun(
        run: &Run,
        step: u64,
        request_id: &str,
        tool: &str,
        status: StepStatus,
        reason: String,
    ) -> Self {
        Self::new(run, step, request_id, tool).ended(status, reason)
    }

    /// Ended before it ran: refused or blocked.
    pub(super) fn ended(mut self, status: StepStatus, reason: String) -> Self {
        self.result = ToolResult::error(reason.clone());
        self.status_because(status, reason);
        self
    }

    pub(super) fn status_because(&mut self, status: StepStatus, reason: String) {
        self.status = status;
        self.reason = Some(reason);
    }

    pub(super) fn dispatched(&mut self, dispatched: &Dispatched) {
        self.action_id = Some(dispatched.action_id.clone());
        self.claim = dispatched.claim;
        self.policy_failure = dispatched.policy_failure.clone();
    }

    pub(super) fn recorded(&mut self, dispatched: &Dispatched, recorded: &Recorded) {
        self.outcome = dispatched.claim.map(|_| OutcomeView {
            position: recorded.outcome_position,
            execution: recorded.outcome.execution,
            impact: recorded.outcome.impact,
            cleanup: recorded.outcome.cleanup,
        });
        self.observations = recorded
            .observations
            .iter()
            .map(|(position, record)| ObservationView::of(*position, record))
            .collect();
        self.launch_settled = recorded.launch_settled;
        if self.policy_failure.is_none() {
            self.policy_failure = recorded.policy_failure.clone();
        }
    }

    /// Holds each of the claim's postconditions against the newest of the
    /// step's readbacks of its target that can decide it, as the evaluator
    /// does (VER-1): a COMPLETE read for content; a stat or a COMPLETE read
    /// for existence. One that shows other bytes, absence where bytes were
    /// claimed, or presence where absence was, names the file in
    /// [`StepResult::contradicted`]; a step whose tool answered `ok` is then
    /// no longer `ok`. A PARTIAL read, or none, contradicts nothing (the
    /// decision says what is unverified). Called once, with every readback
    /// the step took.
    pub(super) fn contradict(
        &mut self,
        dispatched: &Dispatched,
        observations: &[(Position, ObservationRecord)],
    ) {
        let Some(plan) = &dispatched.plan else { return };
        let bindings = &dispatched.bound.operation.bindings;
        let complete_read = |o: &ObservationRecord| {
            o.mechanism == Mechanism::FilesystemRead && o.coverage == Coverage::Complete
        };
        for obligation in &plan.obligations {
            let index = obligation.target as usize;
            let Some(binding) = bindings.get(index) else { continue };
            let location = binding.resource.location();
            let decides = |o: &ObservationRecord| match obligation.postcondition {
                Postcondition::ContentSha256(_) => complete_read(o),
                Postcondition::Absent | Postcondition::Exists => {
                    complete_read(o) || o.mechanism == Mechanism::FilesystemStat
                }
            };
            let seen =
                observations.iter().rev().find(|(_, o)| o.resource.location() == location && decides(o));
            let Some((_, observed)) = seen else { continue };
            let holds = match &obligation.postcondition {
                Postcondition::ContentSha256(sha) => observed.content_sha256.as_ref() == Some(sha),
                Postcondition::Absent => !observed.exists,
                Postcondition::Exists => observed.exists,
            };
            let path = dispatched.bound.paths.get(index).cloned().unwrap_or_default();
            if !holds && !self.contradicted.contains(&path) {
                self.contradicted.push(path);
            }
        }
        if !self.contradicted.is_empty() && self.result.ok {
            let files = self.contradicted.join(", ");
            let reported = self.result.text.take().unwrap_or_default();
            self.result.ok = false;
            self.result.error = Some(format!(
                "CONTRADICTED: the ledger read back {files} and it does not hold what this call was to leave \
                 there; do not report it as done ({reported})"
            ));
        }
    }
}
