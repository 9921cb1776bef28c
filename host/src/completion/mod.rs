//! Completion (SPEC section 7): the evidence ledger assembled from durable
//! history (`evidence`), passed once to the evaluator, and the decision that
//! comes back, or BLOCKED `POLICY_FAILURE` when the evaluator fails (POL-4).
//! `vectors` runs the conformance vectors in `tests/vectors/` against any
//! evaluator; `coverage` counts the vectors of each rule ID the docs say the
//! evaluator decides; `replay` re-derives a recorded decision from the log;
//! `impact` decides recorded runs with a candidate evaluator and says which
//! decisions it would change; `explain` lists what each reason cites;
//! `suite` runs evaluator and classifier vectors for `effects policy test`.
//!
//! Invariant: no path through this module yields COMPLETED unless an evaluator
//! answered COMPLETED and its answer passed the host's contract checks.

pub mod coverage;
pub mod evidence;
pub mod explain;
pub mod impact;
pub mod replay;
pub mod suite;
pub mod vectors;

use crate::digest::Sha256Digest;
use crate::log::{DecisionDetail, DecisionRecord, EvaluatorRun, Position};
use crate::model::{Decision, EvidenceLedger, EvidenceRecord, Reason, ReasonCode, Verdict};
use crate::policy::{EvaluatorComponent, NativeEvaluator, PolicyError};

pub use evidence::{Concurrent, add_concurrent, assemble};
pub use replay::{Difference, Recorded, Replay, ReplayError};

/// The disclosure every policy-failure decision carries.
pub const POLICY_FAILURE_DISCLOSURE: &str = "Completion could not be evaluated (policy failure); nothing in this answer is confirmed by the effect ledger.";

/// Who decides.
pub enum Evaluator<'a> {
    /// A loaded (pinned) component.
    Component(&'a mut EvaluatorComponent),
    /// The shipped evaluator compiled natively (conformance only).
    Native(NativeEvaluator),
    /// No evaluator could be loaded; the reason why.
    Unavailable(String),
}

/// A decision and how it was reached.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The decision.
    pub decision: Decision,
    /// The evaluator that answered, or was called and failed (POL-4).
    pub evaluator: Option<EvaluatorRun>,
    /// Why evaluation failed, if it did.
    pub policy_failure: Option<String>,
}

/// BLOCKED `POLICY_FAILURE` (POL-4): the answer as given, with the disclosure
/// that nothing was confirmed, and lines imitating the disclosure heading
/// escaped and disclosed as the evaluator does (CMP-10).
pub fn policy_failure_decision(answer: &str, why: &str) -> Decision {
    let disclosure = POLICY_FAILURE_DISCLOSURE.to_owned();
    let mut disclosures = vec![disclosure.clone()];
    if effects_evaluate::imitations(answer) > 0 {
        disclosures.push(effects_evaluate::ESCAPED_DISCLOSURE.to_owned());
    }
    // The shipped evaluator's own layout, so every presented answer reads alike.
    let presented = effects_evaluate::present(answer, &disclosures);
    Decision {
        verdict: Verdict::Blocked,
        reasons: vec![Reason {
            code: ReasonCode::PolicyFailure,
            verdict: Verdict::Blocked,
            message: format!("the evaluator failed: {why}"),
            remedy: "fix or replace the evaluator (`effects policy verify`), then decide again".to_owned(),
            evidence: Vec::new(),
            disclosure: Some(disclosure.clone()),
        }],
        disclosures,
        assessments: Vec::new(),
        presented_answer: presented,
    }
}

impl Evaluator<'_> {
    /// Decides over `ledger`: the evaluator's checked answer, or BLOCKED
    /// `POLICY_FAILURE` for a ledger out of log order, a trap, fuel
    /// exhaustion, a refusal or an answer the contract rejects.
    pub fn decide(&mut self, ledger: &EvidenceLedger) -> Decided {
        let failed = |why: String, evaluator: Option<EvaluatorRun>| Decided {
            decision: policy_failure_decision(&ledger.answer, &why),
            evaluator,
            policy_failure: Some(why),
        };
        if let Err(why) = ledger.check_order() {
            return failed(format!("the evidence ledger is not in log order: {why}"), None);
        }
        match self {
            Evaluator::Component(component) => {
                let (name, sha256) = (component.name().to_owned(), component.sha256().to_string());
                let wit = component.contract().package();
                let run = |fuel_used| EvaluatorRun {
                    component: name.clone(),
                    sha256: sha256.clone(),
                    wit: wit.to_owned(),
                    fuel_used,
                };
                match component.evaluate(ledger) {
                    Ok(called) => Decided {
                        evaluator: Some(run(Some(called.report.fuel_used))),
                        decision: called.value,
                        policy_failure: None,
                    },
                    Err(error) => failed(error.to_string(), Some(run(None))),
                }
            }
            Evaluator::Native(native) => match native.evaluate(ledger) {
                Ok(decision) => Decided { decision, evaluator: None, policy_failure: None },
                Err(why) => failed(why, None),
            },
            Evaluator::Unavailable(why) => failed(why.clone(), None),
        }
    }
}

/// What the log keeps of a decision `decided` over `ledger`, which was
/// assembled from a history ending at `history_through` (POL-4, CMP-11):
/// enough to re-derive it from the log alone. `Ledger::complete` records it,
/// and a replay builds it again to compare, so both say the same things.
pub fn decision_record(
    ledger: &EvidenceLedger,
    history_through: Option<Position>,
    decided: &Decided,
) -> DecisionRecord {
    let decision = &decided.decision;
    DecisionRecord {
        through: ledger.records.last().map(EvidenceRecord::position),
        required: ledger.required.iter().map(|&index| ledger.resources[index as usize].clone()).collect(),
        answer_sha256: Sha256Digest::of(ledger.answer.as_bytes()).to_string(),
        verdict: decision.verdict,
        reasons: decision.reasons.iter().map(|r| r.code).collect(),
        disclosures: decision.disclosures.clone(),
        evaluator: decided.evaluator.clone(),
        policy_failure: decided.policy_failure.clone(),
        detail: Some(DecisionDetail {
            answer: ledger.answer.clone(),
            history_through,
            reasons: decision.reasons.clone(),
            assessments: decision.assessments.clone(),
            presented_answer: decision.presented_answer.clone(),
        }),
    }
}

/// The evaluator of a policy set, or why there is none.
pub fn evaluator_of(result: Result<&mut EvaluatorComponent, PolicyError>) -> Evaluator<'_> {
    match result {
        Ok(component) => Evaluator::Component(component),
        Err(error) => Evaluator::Unavailable(error.to_string()),
    }
}
