//! The records of the effect log (CL-1, OUT-1, OBS-1): what is claimed before
//! a tool runs, how it ended, what was observed afterwards.
//!
//! Strictly typed: every struct denies unknown fields and every enum denies
//! unknown values, so a forged or future record fails to parse instead of being
//! half understood (LOG-6). Positions are not stored here; the frame carries
//! them (see `frame.rs`).

use serde::{Deserialize, Serialize};

use crate::model::{
    CheckResult, Coverage, EffectAssessment, FilesystemRoot, JobLifecycle, Mechanism, Outcome, Postcondition,
    ProducerFacts, Reason, ReasonCode, ResourceRef, Verdict,
};
use crate::procfs::ProcessIdentity;

/// A log position: the zero-based index of a record in its lineage's log.
pub type Position = u64;

/// Which operation a claim is for (CL-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRef {
    /// Tool name.
    pub tool: String,
    /// Action within the tool, or `""`.
    pub action: String,
    /// SHA-256 of the normalized input.
    pub input_sha256: String,
    /// The runtime's request id.
    pub request_id: String,
}

/// A postcondition on one target of the claim's impact scope (CL-1, CL-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Obligation {
    /// Index into the claim's `impact_scope`.
    pub target: u32,
    /// What must hold.
    pub postcondition: Postcondition,
}

/// An effect claim: intent, written and fsynced before the backend runs (CL-1,
/// LOG-3). No status field: what happened is an [`OutcomeRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRecord {
    /// The action (tool call) id.
    pub action_id: String,
    /// The operation.
    pub operation: OperationRef,
    /// What it may change; empty means **unknown** scope.
    #[serde(deserialize_with = "crate::model::resource::deserialize_all")]
    pub impact_scope: Vec<ResourceRef>,
    /// What it depends on.
    #[serde(deserialize_with = "crate::model::resource::deserialize_all")]
    pub dependencies: Vec<ResourceRef>,
    /// Postconditions of exact targets.
    pub obligations: Vec<Obligation>,
    /// The parent run, for a child run writing to its root's log (LOG-1).
    pub parent_run_id: Option<String>,
    /// An external effect (CMP-6).
    pub external: bool,
    /// Why classification failed, when it did: the claim then has unknown
    /// scope and this says so (POL-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_failure: Option<String>,
    /// Who runs or reports the effect (LOG-7): recovery settles the claim only
    /// once its executor is known dead. `None` only in logs written before
    /// executors were recorded; recovery treats those as dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<Executor>,
    /// The sealed root the run works beneath (ID-5): a run is continued only
    /// under the same root. `None` in logs written before roots were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<FilesystemRoot>,
    /// A command (`bash` / `python`, a job's launch, a check) the ledger
    /// runs confined by Landlock (ID-6). Absent (false) for every other
    /// claim, and for a command that runs unconfined: Landlock absent or
    /// forced off, a command another process runs (a runtime's own tool), or
    /// a log written before ID-6, whose commands were not confined either.
    /// The decision discloses every executed command claim without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confined: bool,
    /// EMB-4: the producer profile that predicts what the tool writes when
    /// the embedding runtime runs it (`effects`), which also says the
    /// runtime, not the ledger, runs it: such a claim is settled by request
    /// id, possibly by another process (EMB-3). Absent for a claim whose
    /// effect the ledger's own producer runs, and in older logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The classifier component that planned the claim, by name and digest
    /// (POL-4, issue 23): which policy classified this call. Also set when
    /// that classifier failed (then `policy_failure` says why). Absent when
    /// no classifier could be loaded for the tool, and in older logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classifier: Option<PolicyRef>,
}

/// A policy component by name and digest (POL-1's pin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRef {
    /// Component name, as its manifest gives it.
    pub component: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

impl ClaimRecord {
    /// The background launch generations this claim depends on (LOG-8): a
    /// launch names its own, a `bg_job` call the one of its job.
    pub fn launches(&self) -> impl Iterator<Item = u64> + '_ {
        self.dependencies.iter().filter_map(|d| match d.location() {
            crate::model::Location::ProcessLaunch(generation) => Some(*generation),
            _ => None,
        })
    }
}

/// The executor of a claim (LOG-7): the process that runs or reports its
/// effect. A remote writer's lease (SPEC 13) will be another case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Executor {
    /// A local process.
    Process(ProcessIdentity),
}

/// The processes a claimed command runs as (PROC-2), durable before the
/// command may run: its leader (the supervisor, child subreaper of everything
/// the command starts), process group and session. Recovery of an
/// interrupted command finds its survivors by this identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessesRecord {
    /// Position of the command's claim.
    pub claim: Position,
    /// The leader.
    pub leader: ProcessIdentity,
    /// Its process group id.
    pub group: u32,
    /// Its session id.
    pub session: u32,
}

/// How an effect ended (OUT-1), for the claim at `claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeRecord {
    /// Position of the claim it settles.
    pub claim: Position,
    /// The outcome.
    pub outcome: Outcome,
    /// The producer facts it was derived from (OUT-2).
    pub facts: ProducerFacts,
    /// Written by recovery (LOG-7), not by the claim's own writer.
    pub recovery: bool,
}

/// An admitted readback (OBS-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservationRecord {
    /// The exact resource observed, as it was seen.
    #[serde(deserialize_with = "crate::model::resource::deserialize")]
    pub resource: ResourceRef,
    /// How.
    pub mechanism: Mechanism,
    /// How much.
    pub coverage: Coverage,
    /// The source action that took it.
    pub source_action: String,
    /// The source action's claim, when it had one.
    pub source_claim: Option<Position>,
    /// Whether anything existed there.
    pub exists: bool,
    /// SHA-256 of the complete content.
    pub content_sha256: Option<String>,
    /// Job lifecycle for a job-state observation.
    pub job_state: Option<JobLifecycle>,
}

/// A verifier run: a command the runtime designates as a check (the test
/// suite, a linter), run in the root after the work it checks (CMP-5, CMP-7).
/// The run itself is claimed first, as any command is (it may change files);
/// this record is what it said, after its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierRecord {
    /// The claim of the check's own run.
    pub claim: Position,
    /// The command as run.
    pub command: String,
    /// Exited 0 within its timeout.
    pub passed: bool,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The timeout fired (the check then did not pass).
    pub timed_out: bool,
    /// It was cancelled while it ran (absent in records without it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
}

impl VerifierRecord {
    /// How the check ended (CMP-5): a check that timed out or was cancelled
    /// neither passed nor failed, it did not finish.
    pub fn result(&self) -> CheckResult {
        match (self.passed, self.timed_out || self.cancelled) {
            (true, _) => CheckResult::Passed,
            (false, true) => CheckResult::Incomplete,
            (false, false) => CheckResult::Failed,
        }
    }
}

/// The evaluator that took a decision, and what the call cost (POL-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluatorRun {
    /// Component name.
    pub component: String,
    /// Component digest.
    pub sha256: String,
    /// The contract version.
    pub wit: String,
    /// Fuel the call consumed; `None` when the call failed.
    pub fuel_used: Option<u64>,
}

/// A completion decision (CMP-11), recorded after the evidence it was taken
/// over, so it can be re-derived offline from the log (POL-3, POL-4): with
/// its [`DecisionDetail`], `effects decide --replay` rebuilds the evidence
/// ledger and decides again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRecord {
    /// The last position of the evidence it decided over, if there was any.
    pub through: Option<Position>,
    /// The required artifacts, as resolved when deciding.
    #[serde(deserialize_with = "crate::model::resource::deserialize_all")]
    pub required: Vec<ResourceRef>,
    /// SHA-256 of the agent's answer text.
    pub answer_sha256: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The reasons' codes, in order.
    pub reasons: Vec<ReasonCode>,
    /// The disclosures the presented answer carries.
    pub disclosures: Vec<String>,
    /// The evaluator, when one answered (or was loaded and failed).
    pub evaluator: Option<EvaluatorRun>,
    /// Why evaluation failed, when it did (the verdict is then BLOCKED).
    pub policy_failure: Option<String>,
    /// The decision in full, with the inputs the rest of the log lacks, so
    /// `effects decide --replay` re-derives it from the log alone. `None` in
    /// logs written before decisions kept it: such a decision cannot be
    /// replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<DecisionDetail>,
}

/// What a [`DecisionRecord`] keeps beyond its summary: the agent's answer and
/// where the history it was decided over ended (the inputs), and the whole
/// decision (the outputs: every reason as given, every assessment, the
/// presented answer), so a replay compares all of it (CMP-11, POL-3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionDetail {
    /// The agent's answer text; its SHA-256 is the record's `answer_sha256`.
    pub answer: String,
    /// The last position of the history the ledger was assembled from, if
    /// any. Not always `through`, the last evidence record: a processes
    /// record after it still flags its claim (INV-2).
    pub history_through: Option<Position>,
    /// The reasons in full, in order (their codes are the record's `reasons`).
    pub reasons: Vec<Reason>,
    /// Every effect's assessment (CMP-11).
    pub assessments: Vec<EffectAssessment>,
    /// The answer as presented, disclosures included.
    pub presented_answer: String,
}

/// One record of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Record {
    /// A claim.
    Claim(ClaimRecord),
    /// An outcome.
    Outcome(OutcomeRecord),
    /// An observation.
    Observation(ObservationRecord),
    /// A verifier run.
    Verifier(VerifierRecord),
    /// A completion decision.
    Decision(DecisionRecord),
    /// The processes a command runs as (PROC-2).
    Processes(ProcessesRecord),
}

impl Record {
    /// `claim`, `outcome`, `observation`, `verifier`, `decision` or `processes`.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Claim(_) => "claim",
            Record::Outcome(_) => "outcome",
            Record::Observation(_) => "observation",
            Record::Verifier(_) => "verifier",
            Record::Decision(_) => "decision",
            Record::Processes(_) => "processes",
        }
    }

    /// Whether an append of this record is fsynced before it returns
    /// (LOG-3, revision 2): a claim, before its backend runs; a command's
    /// processes, before the command runs (PROC-2); a decision, before it is
    /// returned. Outcomes, observations and verifier runs ride the log's next
    /// fsync: lost in a crash, their claim recovers as INTERRUPTED.
    pub fn durable_on_return(&self) -> bool {
        matches!(self, Record::Claim(_) | Record::Processes(_) | Record::Decision(_))
    }
}
