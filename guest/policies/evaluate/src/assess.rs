//! VER-1..3: every claim's assessment, per obligation.
//!
//! The check for an obligation is the **newest** observation of its target's
//! location through the verifying mechanism of that kind (a filesystem read, an
//! owned-record read, a remote readback), and only if it came after the claim
//! settled. It decides only if it is FRESH and COMPLETE (CMP-3); otherwise the
//! obligation is UNVERIFIED: there is no fallback to an earlier complete check.
//! Job state, process ownership, browser sessions and receipts never verify
//! (VER-3): they are not verifying mechanisms of any kind.

use effects_evaluator_sdk::types::{
    Assessment, Coverage, EffectAssessment, Execution, ObservationEvidence, Postcondition,
};

use crate::history::{Freshness, History, Observation, State, verifying_mechanism};
use crate::locations::{FixedMap, LocId};

/// One obligation's (or one obligation-less claim's) assessment.
#[derive(Clone, Copy)]
pub struct Assessed {
    /// The location of the obligation's target, if it has one.
    pub target: Option<LocId>,
    /// The result.
    pub assessment: Assessment,
    /// The newest check it looked at, if any.
    pub observation: Option<u64>,
}

/// Assessments of every claim, parallel to `History::claims`.
pub struct Assessments {
    /// Per claim, one per obligation (or one with no target).
    pub per_claim: Vec<Vec<Assessed>>,
    /// (claim, target) -> index of the claim's **last** obligation on that
    /// target: what the claim says will finally hold there (a patch that
    /// deletes and re-adds a file ends with the content).
    last_on: FixedMap<(usize, LocId), usize>,
}

/// Does the observed state satisfy the postcondition (CL-2)?
fn holds(postcondition: &Postcondition, observed: &ObservationEvidence) -> bool {
    match postcondition {
        Postcondition::ContentSha256(digest) => {
            observed.exists && observed.content_sha256.as_deref() == Some(digest.as_str())
        }
        Postcondition::Absent => !observed.exists,
        Postcondition::Exists => observed.exists,
    }
}

/// VER-1, VER-2.
pub fn assess(history: &History<'_>) -> Assessments {
    // The newest verifying observation per location.
    let mut newest: Vec<Option<&Observation<'_>>> = vec![None; history.locations.len()];
    for observation in &history.observations {
        let kind = history.locations.kind(observation.loc);
        if verifying_mechanism(kind).is_some_and(|m| same_mechanism(m, observation.evidence)) {
            newest[observation.loc as usize] = Some(observation);
        }
    }
    let per_claim: Vec<Vec<Assessed>> = history
        .claims
        .iter()
        .map(|claim| {
            let without_check = |target: Option<LocId>| Assessed {
                target,
                assessment: match claim.state {
                    State::Attempted | State::Running(_) => Assessment::Pending,
                    State::Settled(s) if matches!(s.execution, Execution::Failed) => Assessment::Failed,
                    State::Settled(_) => Assessment::Unverified,
                },
                observation: None,
            };
            if claim.evidence.obligations.is_empty() {
                return vec![without_check(None)];
            }
            claim
                .evidence
                .obligations
                .iter()
                .zip(&claim.obligation_targets)
                .map(|(obligation, &target)| {
                    let State::Settled(settled) = claim.state else {
                        return without_check(Some(target));
                    };
                    if matches!(settled.execution, Execution::Failed | Execution::NotExecuted) {
                        return without_check(Some(target));
                    }
                    let Some(check) =
                        newest[target as usize].filter(|o| o.evidence.position > settled.position)
                    else {
                        return without_check(Some(target));
                    };
                    let decidable = check.freshness == Freshness::Fresh
                        && matches!(check.evidence.coverage, Coverage::Complete);
                    let assessment = match (decidable, holds(&obligation.postcondition, check.evidence)) {
                        (false, _) => Assessment::Unverified,
                        (true, false) => Assessment::Contradicted,
                        (true, true) => match settled.execution {
                            Execution::ReportedSuccess => Assessment::Verified,
                            _ => Assessment::StateObserved,
                        },
                    };
                    Assessed { target: Some(target), assessment, observation: Some(check.evidence.position) }
                })
                .collect()
        })
        .collect();
    let mut last_on = FixedMap::default();
    for (claim, assessed) in per_claim.iter().enumerate() {
        for (index, a) in assessed.iter().enumerate() {
            if let Some(target) = a.target {
                last_on.insert((claim, target), index);
            }
        }
    }
    Assessments { per_claim, last_on }
}

fn same_mechanism(
    mechanism: effects_evaluator_sdk::types::Mechanism,
    observation: &ObservationEvidence,
) -> bool {
    use effects_evaluator_sdk::types::Mechanism as M;
    matches!(
        (mechanism, observation.mechanism),
        (M::FilesystemRead, M::FilesystemRead)
            | (M::OwnedRead, M::OwnedRead)
            | (M::RemoteReadback, M::RemoteReadback)
    )
}

impl Assessments {
    /// The assessment of claim `index`'s last obligation on exactly `loc`, if
    /// it has one.
    pub fn on(&self, index: usize, loc: LocId) -> Option<&Assessed> {
        self.last_obligation(index, loc).map(|i| &self.per_claim[index][i])
    }

    /// The index of claim `index`'s last obligation on exactly `loc`.
    pub fn last_obligation(&self, index: usize, loc: LocId) -> Option<usize> {
        self.last_on.get(&(index, loc)).copied()
    }

    /// CMP-11: the list every decision carries.
    pub fn to_wire(&self, history: &History<'_>) -> Vec<EffectAssessment> {
        history
            .claims
            .iter()
            .zip(&self.per_claim)
            .flat_map(|(claim, assessed)| {
                let obligation_less = claim.evidence.obligations.is_empty();
                assessed.iter().enumerate().map(move |(i, a)| EffectAssessment {
                    claim: claim.position(),
                    obligation: (!obligation_less).then_some(i as u32),
                    assessment: a.assessment,
                    observation: a.observation,
                })
            })
            .collect()
    }
}
