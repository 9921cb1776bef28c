//! Completing a run (SPEC section 7, POL-4): launches whose jobs have ended are
//! settled first (the monitor, `jobs.rs`), then the required artifacts are
//! resolved and observed (existence only: a stat decides no content, so it
//! verifies nothing, but it tells "never produced" from "already there" and
//! notices a replaced file, INV-1), the evidence ledger is assembled from the
//! run's durable history, the evaluator decides once, and the decision is
//! recorded with the evaluator's digest and fuel.
//!
//! A run with no log stays without one (CMP-9): its observations are taken
//! but not written, and the decision is returned, not recorded.

use crate::completion::{Decided, assemble, evaluator_of};
use crate::digest::Sha256Digest;
use crate::identity::IdentityError;
use crate::log::{DecisionRecord, LogError, ObservationRecord, Position, Record};
use crate::model::{Coverage, EvidenceLedger, Mechanism, ReadbackRequest, ResourceRole};

use super::{Ledger, Run, readback};

/// Why a run could not be completed (the decision itself never fails: an
/// evaluator failure is BLOCKED `POLICY_FAILURE`).
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// A required artifact's path is refused (escape, symlink, the store).
    #[error("required artifact {path:?} is refused")]
    Required {
        /// The path as given.
        path: String,
        /// Why.
        source: IdentityError,
    },
    /// The log could not be read or appended to.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// What completing a run decided and wrote.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The decision and the evaluator that took it.
    pub decided: Decided,
    /// The ledger it was taken over.
    pub ledger: EvidenceLedger,
    /// Where the decision was recorded; `None` for a run without a log.
    pub recorded: Option<Position>,
}

impl Ledger {
    /// Decides completion of `run` over its durable history, requiring the
    /// files `required` (paths beneath the root) and presenting `answer`.
    pub fn complete(
        &mut self,
        run: &Run,
        required: &[String],
        answer: &str,
    ) -> Result<Completion, CompleteError> {
        // Launches whose jobs have ended are settled first (the monitor). If
        // that fails the decision is still taken: an unsettled launch only
        // makes it more cautious (CMP-2, CMP-8).
        if let Err(error) = self.monitor(run) {
            tracing::warn!("the monitor could not settle finished launches: {error}");
        }
        let root = &self.config.root;
        let mut resolved = Vec::with_capacity(required.len());
        for path in required {
            let found = root
                .resolve(path, ResourceRole::Target)
                .map_err(|source| CompleteError::Required { path: path.clone(), source })?;
            resolved.push(found);
        }
        let stat =
            ReadbackRequest { binding: 0, mechanism: Mechanism::FilesystemStat, coverage: Coverage::Partial };
        let action = format!("{}-complete-{}", run.id, std::process::id());
        let observations: Vec<ObservationRecord> = resolved
            .iter()
            .filter_map(|r| {
                let path = if r.relative.is_empty() { "." } else { r.relative.as_str() };
                readback::perform(root, path, &stat, &action, None, self.config.read_cap)
            })
            .collect();
        let required_refs: Vec<_> = resolved.into_iter().map(|r| r.resource).collect();
        // Assembled from the log's own records, borrowed: no copy of the history.
        let ledger = match self.log(&run.lineage, false)? {
            Some(log) => {
                for observation in observations {
                    log.record_observation(&run.id, observation)?;
                }
                assemble(log.history()?, &[], &required_refs, answer)
            }
            None => {
                let unrecorded: Vec<Record> = observations.into_iter().map(Record::Observation).collect();
                assemble(&[], &unrecorded, &required_refs, answer)
            }
        };
        let decided = evaluator_of(self.config.policies.evaluator()).decide(&ledger);
        let record = DecisionRecord {
            through: ledger.records.last().map(crate::model::EvidenceRecord::position),
            required: required_refs,
            answer_sha256: Sha256Digest::of(answer.as_bytes()).to_string(),
            verdict: decided.decision.verdict,
            reasons: decided.decision.reasons.iter().map(|r| r.code).collect(),
            disclosures: decided.decision.disclosures.clone(),
            evaluator: decided.evaluator.clone(),
            policy_failure: decided.policy_failure.clone(),
        };
        let recorded = match self.log(&run.lineage, false)? {
            Some(log) => Some(log.record_decision(&run.id, record)?),
            None => None,
        };
        Ok(Completion { decided, ledger, recorded })
    }
}
