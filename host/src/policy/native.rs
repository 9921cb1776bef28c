//! The shipped evaluator compiled natively: the same Rust as `evaluate.wasm`,
//! called without a sandbox. It exists so the conformance vectors run against
//! both builds (a guest and its native build can never disagree silently) and
//! as the baseline the component's cost is measured against. It is not a
//! substitute for the pinned component at run time: decisions a runtime
//! records come from the component (POL-4).

use crate::model::{Decision, EvidenceLedger};

use super::answer;
use super::bindings::evaluate_natively;

/// The native build of the shipped evaluator.
#[derive(Debug, Default, Clone, Copy)]
pub struct NativeEvaluator;

impl NativeEvaluator {
    /// Decides over `ledger`, applying the same contract checks the host
    /// applies to a component's answer. `Err` carries the evaluator's refusal
    /// or the check that failed. The records must be in log order, as for
    /// the component ([`EvidenceLedger::check_order`]).
    pub fn evaluate(&self, ledger: &EvidenceLedger) -> Result<Decision, String> {
        let decision = evaluate_natively(ledger)?;
        answer::check_decision(ledger, &decision)?;
        Ok(decision)
    }
}
