//! Why a decision says what it says (`effects decide --explain`): each reason
//! with the evidence records it cites (a reason's `evidence` positions), each
//! record as the evaluator saw it and the resources it names resolved from
//! the ledger's table.
//!
//! A reason citing a position the ledger does not hold is shown with no
//! record rather than dropped: the host's contract checks refuse such an
//! answer before it is a decision, so seeing one here means the decision
//! came from somewhere those checks did not run.

use serde::Serialize;

use crate::log::Position;
use crate::model::{
    Decision, EvidenceLedger, EvidenceRecord, ReasonCode, ResourceIndex, ResourceRef, Verdict,
};

/// One reason of a decision and the records it cites.
#[derive(Debug, Clone, Serialize)]
pub struct Explained {
    /// The reason's code.
    pub code: ReasonCode,
    /// The verdict it alone gives.
    pub verdict: Verdict,
    /// The evaluator's explanation.
    pub message: String,
    /// What it cites, in the order cited.
    pub evidence: Vec<Cited>,
}

/// One cited position.
#[derive(Debug, Clone, Serialize)]
pub struct Cited {
    /// The position.
    pub position: Position,
    /// Whether the log holds the record: false for a decision's own
    /// readbacks that were taken and not written (a run without a log, a
    /// dry run), and for a position the ledger does not hold.
    pub written: bool,
    /// The record as the evaluator saw it; `None` when the ledger holds no
    /// record there.
    pub record: Option<EvidenceRecord>,
    /// The resources it names (a claim's scope and dependencies, an
    /// observation's resource), from the ledger's table.
    pub resources: Vec<ResourceRef>,
}

/// Each of `decision`'s reasons with what it cites in `ledger`, whose
/// records from position `unwritten_from` on were not written.
pub fn explain(ledger: &EvidenceLedger, decision: &Decision, unwritten_from: Position) -> Vec<Explained> {
    let resource = |index: &ResourceIndex| ledger.resources.get(*index as usize).cloned();
    let cite = |position: Position| {
        let record = ledger
            .records
            .binary_search_by_key(&position, EvidenceRecord::position)
            .ok()
            .map(|i| ledger.records[i].clone());
        let resources = match &record {
            Some(EvidenceRecord::Claim(claim)) => {
                claim.scope.iter().flatten().chain(&claim.dependencies).filter_map(resource).collect()
            }
            Some(EvidenceRecord::Observation(observation)) => {
                resource(&observation.resource).into_iter().collect()
            }
            _ => Vec::new(),
        };
        let written = record.is_some() && position < unwritten_from;
        Cited { position, written, record, resources }
    };
    decision
        .reasons
        .iter()
        .map(|reason| Explained {
            code: reason.code,
            verdict: reason.verdict,
            message: reason.message.clone(),
            evidence: reason.evidence.iter().map(|&position| cite(position)).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClaimEvidence, Reason, VerifierEvidence};

    fn claim(position: Position) -> EvidenceRecord {
        let bare = ClaimEvidence::bare(position, "r".into(), "a".into(), "bash".into(), None);
        EvidenceRecord::Claim(ClaimEvidence { unconfined: true, ..bare })
    }

    #[test]
    fn each_reason_cites_its_records_and_says_which_were_written() {
        let ledger = EvidenceLedger {
            resources: Vec::new(),
            required: Vec::new(),
            records: vec![
                claim(2),
                EvidenceRecord::Verifier(VerifierEvidence {
                    position: 5,
                    command: "make test".into(),
                    result: crate::model::CheckResult::Passed,
                    claim: Some(2),
                }),
            ],
            answer: String::new(),
            concurrent: Vec::new(),
        };
        let reason = |code, evidence| Reason {
            code,
            verdict: Verdict::Unverified,
            message: "m".into(),
            remedy: String::new(),
            evidence,
            disclosure: None,
        };
        let decision = Decision {
            verdict: Verdict::Unverified,
            reasons: vec![
                reason(ReasonCode::UnconfinedCommand, vec![2, 5]),
                reason(ReasonCode::RunningLaunch, vec![9]),
            ],
            disclosures: Vec::new(),
            assessments: Vec::new(),
            presented_answer: String::new(),
        };
        let explained = explain(&ledger, &decision, 5);
        assert_eq!(explained.len(), 2);
        let cited = &explained[0].evidence;
        assert_eq!(
            cited.iter().map(|c| (c.position, c.written)).collect::<Vec<_>>(),
            [(2, true), (5, false)]
        );
        assert!(matches!(cited[0].record, Some(EvidenceRecord::Claim(_))));
        assert!(matches!(cited[1].record, Some(EvidenceRecord::Verifier(_))));
        // A position the ledger does not hold is shown, with no record.
        assert_eq!(explained[1].evidence[0].position, 9);
        assert!(explained[1].evidence[0].record.is_none());
    }
}
