//! Producer facts and execution outcomes (OUT-1, OUT-2), and the readbacks a
//! classifier asks for after settlement (OBS-1).

use serde::{Deserialize, Serialize};

use super::operation::{BindingIndex, BoundOperation, ClaimPlan};

/// Lifecycle state of a background job as its runner reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobLifecycle {
    /// Still running.
    Running,
    /// Exited by itself.
    Exited,
    /// Killed on request.
    Killed,
    /// The runner lost track of it.
    Lost,
}

/// Typed, bounded facts a producer reports (OUT-2): no free-form maps.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerFacts {
    /// The backend was invoked.
    pub executed: bool,
    /// Exit code, if any.
    pub exit_code: Option<i32>,
    /// The producer's timeout fired.
    pub timed_out: bool,
    /// After teardown, whether every process of the group is dead.
    pub teardown_dead: Option<bool>,
    /// A background job id the producer started.
    pub background_job_id: Option<String>,
    /// A write failed after its truncating open.
    pub mutation_attempted: bool,
    /// Detached by the server.
    pub detached: bool,
    /// Acknowledged by the remote end (set from the captured external resource).
    pub remote_acknowledged: bool,
    /// Lifecycle of the job a job read or kill acted on.
    pub job_state: Option<JobLifecycle>,
    /// Cancelled before it finished.
    pub cancelled: bool,
}

/// Facts that contradict each other (OUT-2, TRU-1): refused as bad input,
/// never settled. A backend that was never invoked has no exit code, no
/// timeout, no cancellation and nothing else only a run can report; settling
/// such facts as NOT_EXECUTED would make an executed call a no-op that
/// changed nothing (INV-1), so they are not recorded at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "contradictory facts: `executed: false` with {}: a call whose backend never ran has none of \
     these (OUT-2); say `executed: true` if the backend was invoked, or drop {}",
    .facts.join(", "),
    if .facts.len() == 1 { "it" } else { "them" }
)]
pub struct FactsError {
    /// The facts only an invoked backend can report, by field name.
    pub facts: Vec<&'static str>,
}

impl ProducerFacts {
    /// OUT-2: refuses facts that say the backend never ran and yet report
    /// what only a run can (an exit code, a timeout, a cancellation, a
    /// teardown, a job, a write begun, a detachment or an acknowledgement).
    /// The `Ledger` checks every call's facts with this before it settles
    /// anything, and the log's history rules refuse an outcome whose facts
    /// fail it.
    pub fn check(&self) -> Result<(), FactsError> {
        if self.executed {
            return Ok(());
        }
        let reported = [
            ("exit_code", self.exit_code.is_some()),
            ("timed_out", self.timed_out),
            ("cancelled", self.cancelled),
            ("teardown_dead", self.teardown_dead.is_some()),
            ("background_job_id", self.background_job_id.is_some()),
            ("mutation_attempted", self.mutation_attempted),
            ("detached", self.detached),
            ("remote_acknowledged", self.remote_acknowledged),
            ("job_state", self.job_state.is_some()),
        ];
        let facts: Vec<&'static str> =
            reported.iter().filter(|(_, present)| *present).map(|(name, _)| *name).collect();
        if facts.is_empty() { Ok(()) } else { Err(FactsError { facts }) }
    }
}

/// How execution ended (OUT-1). `ATTEMPTED` is derived: a claim with no outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Execution {
    /// Never invoked.
    NotExecuted,
    /// The producer reported success.
    ReportedSuccess,
    /// The producer reported failure.
    Failed,
    /// The producer's timeout fired.
    TimedOut,
    /// Cancelled.
    Cancelled,
    /// A background launch still running.
    Running,
    /// The writer died before settling (LOG-7).
    Interrupted,
    /// The call reached its backend, but nobody reported how it ended (a hook
    /// with no exit status, a lost connection): impact POSSIBLE (OUT-1).
    Unknown,
}

/// Whether anything may have changed (OUT-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Impact {
    /// Nothing changed: only with [`Execution::NotExecuted`].
    None,
    /// Something may have changed.
    Possible,
}

/// Cleanup after the effect, separate from execution (OUT-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupState {
    /// Nothing to clean up.
    NotApplicable,
    /// Every process of the group is gone.
    Clean,
    /// Something survived teardown.
    Failed,
    /// Not known.
    Unknown,
}

/// A settled (or RUNNING) outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// How execution ended.
    pub execution: Execution,
    /// Whether anything may have changed.
    pub impact: Impact,
    /// Cleanup.
    pub cleanup: CleanupState,
    /// Reproduced from a replay.
    pub replayed: bool,
    /// Acknowledged by the remote end.
    pub remote_acknowledged: bool,
    /// Detached by the server.
    pub detached: bool,
}

/// Input to settlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    /// The operation as classified.
    pub operation: BoundOperation,
    /// The plan that was claimed, if any.
    pub plan: Option<ClaimPlan>,
    /// What the producer reported.
    pub facts: ProducerFacts,
}

/// How an observation is taken (VER-1, VER-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Filesystem read of the exact resource.
    FilesystemRead,
    /// Filesystem existence check.
    FilesystemStat,
    /// Owned record read.
    OwnedRead,
    /// Remote readback.
    RemoteReadback,
    /// Background job state.
    JobState,
    /// Process ownership.
    ProcessOwnership,
    /// Browser session lifecycle.
    BrowserSession,
    /// Receipt or acknowledgement.
    Receipt,
}

/// How much an observation covers (OBS-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Coverage {
    /// All of it.
    Complete,
    /// Part of it.
    Partial,
}

/// A readback the host should perform after settlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadbackRequest {
    /// Which binding.
    pub binding: BindingIndex,
    /// How.
    pub mechanism: Mechanism,
    /// Admitted coverage.
    pub coverage: Coverage,
}

/// Input to readback planning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadbackContext {
    /// The operation.
    pub operation: BoundOperation,
    /// The recorded outcome.
    pub outcome: Outcome,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_of_a_call_that_never_ran_report_nothing_a_run_reports() {
        assert_eq!(ProducerFacts::default().check(), Ok(()));
        let ran = ProducerFacts { executed: true, exit_code: Some(3), timed_out: true, ..Default::default() };
        assert_eq!(ran.check(), Ok(()));
        // OUT-2's three, named in the error so the caller knows what to drop.
        let contradictory =
            ProducerFacts { exit_code: Some(3), timed_out: true, cancelled: true, ..Default::default() };
        let error = contradictory.check().unwrap_err();
        assert_eq!(error.facts, ["exit_code", "timed_out", "cancelled"]);
        assert!(
            error.to_string().contains("`executed: false` with exit_code, timed_out, cancelled"),
            "{error}"
        );
        // Anything else only a run can report is as contradictory.
        for facts in [
            ProducerFacts { teardown_dead: Some(true), ..Default::default() },
            ProducerFacts { background_job_id: Some("job-1".into()), ..Default::default() },
            ProducerFacts { mutation_attempted: true, ..Default::default() },
            ProducerFacts { detached: true, ..Default::default() },
            ProducerFacts { remote_acknowledged: true, ..Default::default() },
            ProducerFacts { job_state: Some(JobLifecycle::Exited), ..Default::default() },
        ] {
            assert_eq!(facts.check().unwrap_err().facts.len(), 1, "{facts:?}");
        }
    }
}
