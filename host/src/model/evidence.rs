//! The evidence ledger the evaluator decides over, and the completion decision
//! it returns (CMP-1..11).
//!
//! Every resource appears once in [`EvidenceLedger::resources`]; records refer to
//! it by index, so a ledger of many effects on few files stays small on the wire.

use serde::{Deserialize, Serialize};

use super::operation::Postcondition;
use super::outcome::{Coverage, JobLifecycle, Mechanism, Outcome};
use super::resource::ResourceRef;

/// Index into [`EvidenceLedger::resources`].
pub type ResourceIndex = u32;

/// A log position (HIS-1: unique within a lineage).
pub type Position = u64;

/// An obligation in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObligationEvidence {
    /// Target resource.
    pub target: ResourceIndex,
    /// What must hold.
    pub postcondition: Postcondition,
}

/// A claim (CL-1) as the evaluator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimEvidence {
    /// Log position.
    pub position: Position,
    /// Run that claimed it.
    pub run_id: String,
    /// Action id.
    pub action_id: String,
    /// Tool.
    pub tool: String,
    /// What the call was to, when its scope cannot say: an external call's
    /// `server/tool`, the action its claim recorded. Empty for others, and
    /// absent in JSON means empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    /// Exact scope, or `None` for unknown.
    pub scope: Option<Vec<ResourceIndex>>,
    /// Dependencies.
    pub dependencies: Vec<ResourceIndex>,
    /// Obligations.
    pub obligations: Vec<ObligationEvidence>,
    /// External effect.
    pub external: bool,
    /// Refused as a no-op (INV-1 excludes it from invalidation).
    pub no_op: bool,
    /// It ran processes (a command, a background job, a check) whose identity
    /// the log records (PROC-2): its window (INV-2) closes only at a settled
    /// outcome whose cleanup is CLEAN. Absent in JSON means false.
    #[serde(default)]
    pub processes: bool,
    /// No tool family bound its tool: the unbound fallback classified it, so
    /// nothing the host produced speaks for it (CMP-6). Absent means false.
    #[serde(default)]
    pub unbound: bool,
    /// A command (`bash` / `python`) that ran, or may have run, without
    /// write confinement (ID-6): its decision discloses it. Absent means
    /// false.
    #[serde(default)]
    pub unconfined: bool,
}

impl ClaimEvidence {
    /// A claim with nothing but its identity and scope (`None`: unknown):
    /// no dependencies, no obligations, no flags. What another run's claim
    /// in flight is to a decision (CMP-13), which sees only what it may touch.
    pub fn bare(
        position: Position,
        run_id: String,
        action_id: String,
        tool: String,
        scope: Option<Vec<ResourceIndex>>,
    ) -> Self {
        ClaimEvidence {
            position,
            run_id,
            action_id,
            tool,
            subject: String::new(),
            scope,
            dependencies: Vec::new(),
            obligations: Vec::new(),
            external: false,
            no_op: false,
            processes: false,
            unbound: false,
            unconfined: false,
        }
    }
}

/// An outcome in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeEvidence {
    /// Log position.
    pub position: Position,
    /// Position of the claim it settles.
    pub claim: Position,
    /// The outcome.
    pub outcome: Outcome,
    /// Written by recovery (LOG-7).
    pub recovery: bool,
    /// Failure after the truncating open (CMP-2).
    pub mutation_attempted: bool,
}

/// An observation (OBS-1) in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservationEvidence {
    /// Log position.
    pub position: Position,
    /// The exact resource observed.
    pub resource: ResourceIndex,
    /// How.
    pub mechanism: Mechanism,
    /// How much.
    pub coverage: Coverage,
    /// Source action id.
    pub source_action: String,
    /// Source claim position, if the source action had one.
    pub source_claim: Option<Position>,
    /// Whether anything existed there.
    pub exists: bool,
    /// Digest of the complete content.
    pub content_sha256: Option<String>,
    /// Job lifecycle for a job-state observation.
    pub job_state: Option<JobLifecycle>,
}

/// How a check ended (CMP-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CheckResult {
    /// Exited 0 within its time.
    Passed,
    /// Ran to the end and said no.
    Failed,
    /// Timed out or was cancelled: neither pass nor fail.
    Incomplete,
}

/// A verifier run (CMP-5, CMP-7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifierEvidence {
    /// Log position.
    pub position: Position,
    /// The command.
    pub command: String,
    /// How it ended.
    pub result: CheckResult,
    /// The claim of the check's own run (the log always has it).
    #[serde(default)]
    pub claim: Option<Position>,
}

/// One ledger record, in log order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum EvidenceRecord {
    /// A claim.
    Claim(ClaimEvidence),
    /// An outcome.
    Outcome(OutcomeEvidence),
    /// An observation.
    Observation(ObservationEvidence),
    /// A verifier run.
    Verifier(VerifierEvidence),
}

/// Everything the evaluator decides over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceLedger {
    /// Each resource once.
    #[serde(deserialize_with = "super::resource::deserialize_all")]
    pub resources: Vec<ResourceRef>,
    /// Required artifacts.
    pub required: Vec<ResourceIndex>,
    /// Records by position (see [`EvidenceLedger::check_order`]).
    pub records: Vec<EvidenceRecord>,
    /// The agent's final answer.
    pub answer: String,
    /// Claims of other runs in the same store still in flight at decision
    /// time (claimed, unsettled, executor alive) whose root overlaps this
    /// run's (CMP-13). Their resource indices point into `resources`; their
    /// positions are in their own lineage, so they are never ordered or merged
    /// with `records`. Only an `effects:policy@2.1.0` evaluator sees them.
    /// Absent in JSON means none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concurrent: Vec<ClaimEvidence>,
}

/// Verdicts; worst wins: FAILED > BLOCKED > UNVERIFIED > COMPLETED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Verified.
    Completed,
    /// Contradicted.
    Failed,
    /// Unsettled.
    Blocked,
    /// Not verified.
    Unverified,
}

/// Stable reason codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReasonCode {
    /// CMP-1.
    ContradictedArtifact,
    /// CMP-4.
    ContradictedEffect,
    /// CMP-2.
    UnsettledArtifact,
    /// CMP-5, stale.
    StaleVerifier,
    /// CMP-5, failing.
    FailingVerifier,
    /// CMP-6.
    ExternalEffectUnverified,
    /// CMP-7, unverified.
    UnverifiedArtifact,
    /// CMP-7, missing.
    MissingArtifact,
    /// CMP-8.
    RunningLaunch,
    /// CMP-10.
    UnsupportedClaim,
    /// A failed effect on a required artifact.
    FailedEffect,
    /// POL-4.
    PolicyFailure,
    /// CMP-5, the latest check timed out or was cancelled.
    IncompleteVerifier,
    /// CMP-6, an executed owned-record effect is not verified.
    OwnedEffectUnverified,
    /// CMP-6, an executed effect of an unbound tool.
    UnboundEffectUnverified,
    /// ID-6, a command ran without write confinement (disclosed; the
    /// verdict stays what the evidence gives).
    UnconfinedCommand,
    /// CMP-13, another run's claim in flight may touch a required artifact.
    ConcurrentRun,
    /// CMP-2 (revision 3), a settled command of unknown result ("exit status
    /// unknown").
    UnknownExitStatus,
}

/// One reason of a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reason {
    /// Stable code.
    pub code: ReasonCode,
    /// The verdict this reason alone gives.
    pub verdict: Verdict,
    /// Explanation.
    pub message: String,
    /// What would clear it. Absent in decision records written before
    /// remedies were (read as empty).
    #[serde(default)]
    pub remedy: String,
    /// Evidence positions relied on.
    pub evidence: Vec<Position>,
    /// Server-authored sentence for the final answer.
    pub disclosure: Option<String>,
}

/// Assessment of an obligation or effect (VER-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Assessment {
    /// Verified.
    Verified,
    /// State matches, causality unknown.
    StateObserved,
    /// Execution failed.
    Failed,
    /// Fresh check false.
    Contradicted,
    /// Undecidable.
    Unverified,
    /// Unsettled.
    Pending,
}

/// One effect's assessment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EffectAssessment {
    /// Claim position.
    pub claim: Position,
    /// Obligation index within the claim.
    pub obligation: Option<u32>,
    /// Result.
    pub assessment: Assessment,
    /// Deciding observation.
    pub observation: Option<Position>,
}

/// The completion decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// Worst verdict.
    pub verdict: Verdict,
    /// Reasons.
    pub reasons: Vec<Reason>,
    /// Disclosures the answer carries.
    pub disclosures: Vec<String>,
    /// Every effect's assessment.
    pub assessments: Vec<EffectAssessment>,
    /// The answer as presented.
    pub presented_answer: String,
}

impl Verdict {
    /// Rank for "worst wins": FAILED > BLOCKED > UNVERIFIED > COMPLETED.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::Completed => 0,
            Verdict::Unverified => 1,
            Verdict::Blocked => 2,
            Verdict::Failed => 3,
        }
    }
}

impl EvidenceLedger {
    /// The records are in log order: each position after the one before it
    /// (HIS-1, VER-1). The evaluator's contract carries each kind of record in
    /// a table of its own and merges them by position, so an order the
    /// positions contradict cannot cross it: a ledger is checked here first.
    pub fn check_order(&self) -> Result<(), String> {
        let mut positions = self.records.iter().map(EvidenceRecord::position);
        let Some(mut last) = positions.next() else { return Ok(()) };
        for position in positions {
            if position <= last {
                return Err(format!("position {position} is not after {last} (positions must increase)"));
            }
            last = position;
        }
        Ok(())
    }
}

impl EvidenceRecord {
    /// The record's log position.
    pub fn position(&self) -> Position {
        match self {
            EvidenceRecord::Claim(r) => r.position,
            EvidenceRecord::Outcome(r) => r.position,
            EvidenceRecord::Observation(r) => r.position,
            EvidenceRecord::Verifier(r) => r.position,
        }
    }
}
