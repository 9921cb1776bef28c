//! `{{name}}`: an evaluator, as `effects policy new` generated it: the
//! shipped evaluator's pipeline, ready to change.
//!
//! The modules below are the shipped evaluator's own source
//! (`guest/policies/evaluate/src`), compiled again here, so this crate starts
//! out deciding exactly as `evaluate` does; only `evaluate` in this file is
//! yours. Change a rule here, on the reasons the shipped rules produced: raise
//! or add a reason, never drop evidence the host recorded. A reason's verdict
//! decides the run (worst wins); its disclosure is carried by the answer.
//!
//! The shipped modules' own unit tests run here too; once you change a rule,
//! those that test it fail and say what changed. Then:
//!
//! ```sh
//! cargo test --manifest-path guest/Cargo.toml -p {{name}}
//! cargo xtask policies -p {{name}}
//! effects policy test --evaluator target/policies/{{name}}.wasm tests/vectors guest/policies/{{name}}/vectors
//! effects policy replay --evaluator target/policies/{{name}}.wasm   # which recorded decisions change
//! ```

#[path = "../../evaluate/src/aliases.rs"]
mod aliases;
#[path = "../../evaluate/src/assess.rs"]
mod assess;
#[path = "../../evaluate/src/decide.rs"]
mod decide;
#[path = "../../evaluate/src/history.rs"]
mod history;
#[path = "../../evaluate/src/locations.rs"]
mod locations;
#[path = "../../evaluate/src/prose.rs"]
mod prose;
#[path = "../../evaluate/src/tables.rs"]
mod tables;

use effects_evaluator_sdk::evaluator::Guest;
use effects_evaluator_sdk::types::{Decision, EvidenceLedger};

/// Decides completion over `ledger`; `Err` when the ledger is inconsistent,
/// which the host turns into BLOCKED `POLICY_FAILURE` (POL-4).
pub fn evaluate(ledger: &EvidenceLedger) -> Result<Decision, String> {
    let tables = tables::Tables::new(ledger)?;
    let history = history::History::build(&tables)?;
    let assessments = assess::assess(&history);
    let index = decide::Index::new(&history, &assessments);
    let mut reasons = index.reasons();
    // Your rules go here, over `reasons`, before the answer is gated.
    let support = prose::Support::new(&index, decide::worst(&reasons), &ledger.answer);
    let (annotated, unsupported) = prose::gate(&ledger.answer, &support);
    reasons.extend(unsupported);
    for disclosure in reasons.iter_mut().filter_map(|r| r.disclosure.as_mut()) {
        prose::keep_on_one_line(disclosure);
    }
    let mut seen = std::collections::BTreeSet::new();
    let disclosures: Vec<String> = reasons
        .iter()
        .filter_map(|r| r.disclosure.as_ref())
        .filter(|d| seen.insert(d.as_str()))
        .cloned()
        .collect();
    Ok(Decision {
        verdict: decide::worst(&reasons),
        presented_answer: prose::present(&annotated, &disclosures),
        reasons,
        disclosures,
        assessments: assessments.to_wire(&history),
    })
}

/// The component's export.
pub struct Evaluator;

impl Guest for Evaluator {
    fn evaluate(ledger: EvidenceLedger) -> Result<Decision, String> {
        evaluate(&ledger)
    }
}

effects_evaluator_sdk::export_evaluator!(Evaluator with_types_in effects_evaluator_sdk::bindings);

#[cfg(test)]
mod generated_tests {
    use effects_evaluator_sdk::types::{CleanupState, Execution, Verdict};

    use crate::tables::tests::Built;

    #[test]
    fn a_write_read_back_as_intended_is_completed() {
        let mut built = Built::new();
        let write = built.write();
        built.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        built.read();
        let decision = crate::evaluate(&built.ledger).expect("a consistent ledger");
        assert_eq!(decision.verdict, Verdict::Completed, "{:?}", decision.reasons);
    }
}
