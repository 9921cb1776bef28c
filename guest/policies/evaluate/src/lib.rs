//! `evaluate`: the shipped evaluator (SPEC section 4 INV/VER, section 7 CMP).
//!
//! From one evidence ledger it computes every observation's freshness
//! (`history`), assesses every claim (`assess`), and decides COMPLETED /
//! FAILED / BLOCKED / UNVERIFIED (`decide`), worst verdict wins; the prose gate
//! and the presented answer are in `prose`. Pure and deterministic (POL-3): the
//! same ledger gives the same decision, natively or as a component, so the
//! conformance vectors run against both.

mod aliases;
mod assess;
mod decide;
mod history;
mod locations;
mod prose;
mod tables;

use effects_evaluator_sdk::evaluator::Guest;
use effects_evaluator_sdk::types::{Decision, EvidenceLedger};

pub use effects_evaluator_sdk::types;
pub use prose::{DISCLOSURE_HEADING, ESCAPED_DISCLOSURE, imitations, present};

/// Decides completion over `ledger`; `Err` when the ledger itself is
/// inconsistent (a column of the wrong length, an index or run outside its
/// table, positions not increasing, HIS-1), which the host turns into
/// BLOCKED `POLICY_FAILURE` (POL-4).
pub fn evaluate(ledger: &EvidenceLedger) -> Result<Decision, String> {
    let tables = tables::Tables::new(ledger)?;
    let history = history::History::build(&tables)?;
    let assessments = assess::assess(&history);
    let index = decide::Index::new(&history, &assessments);
    let mut reasons = index.reasons();
    // CMP-10 over CMP-9: a run with no claims is gated too, but only the
    // agent's own claims count there (conversation stays unchanged).
    let support = prose::Support::new(&index, decide::worst(&reasons), &ledger.answer);
    let (annotated, unsupported) = prose::gate(&ledger.answer, &support);
    reasons.extend(unsupported);
    // A disclosure quoting a name or a sentence stays one line of the section.
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
