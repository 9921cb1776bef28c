//! Contract checks on what a guest answers, beyond what the types already
//! enforce: indices in range, obligations inside their scope, outcomes OUT-1
//! allows, decisions whose verdict follows from their reasons. A guest is
//! untrusted code; an answer that fails here is refused as malformed.
//!
//! Every check is linear in the answer (the decision check is linear in the
//! ledger plus the answer), so a large answer cannot make the host quadratic.

use std::collections::HashSet;

use crate::digest::Sha256Digest;
use crate::model::{
    BindingIndex, BoundOperation, Classification, Decision, EvidenceLedger, EvidenceRecord,
    Execution, Impact, Outcome, PlannedScope, Postcondition, ReadbackRequest, Verdict,
};

fn binding_in_range(operation: &BoundOperation, index: BindingIndex, what: &str) -> Result<(), String> {
    if (index as usize) < operation.bindings.len() {
        Ok(())
    } else {
        Err(format!("{what} names binding {index}, but the operation has {}", operation.bindings.len()))
    }
}

/// A plan may name only the operation's bindings; each obligation targets a
/// binding in the exact scope (CL-1); content digests are digests.
pub(crate) fn check_classification(operation: &BoundOperation, answer: &Classification) -> Result<(), String> {
    let Classification::Effect(plan) = answer else { return Ok(()) };
    let scope: &[BindingIndex] = match &plan.scope {
        PlannedScope::Exact(bindings) => bindings,
        PlannedScope::Unknown => &[],
    };
    for &index in scope {
        binding_in_range(operation, index, "the scope")?;
    }
    for &index in &plan.dependencies {
        binding_in_range(operation, index, "a dependency")?;
    }
    for obligation in &plan.obligations {
        binding_in_range(operation, obligation.target, "an obligation")?;
        if !scope.contains(&obligation.target) {
            return Err(format!("an obligation targets binding {}, which is not in the exact scope", obligation.target));
        }
        if let Postcondition::ContentSha256(digest) = &obligation.postcondition {
            digest.parse::<Sha256Digest>().map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// OUT-1: `impact: none` exactly when the backend was never invoked.
pub(crate) fn check_outcome(answer: &Outcome) -> Result<(), String> {
    let not_executed = answer.execution == Execution::NotExecuted;
    let no_impact = answer.impact == Impact::None;
    if not_executed != no_impact {
        return Err(format!(
            "execution {:?} with impact {:?}: impact NONE goes with NOT_EXECUTED and only with it",
            answer.execution, answer.impact
        ));
    }
    Ok(())
}

/// Readbacks name only the operation's bindings.
pub(crate) fn check_readbacks(operation: &BoundOperation, answer: &[ReadbackRequest]) -> Result<(), String> {
    answer.iter().try_for_each(|request| binding_in_range(operation, request.binding, "a readback"))
}

/// The verdict is the worst of the reasons' verdicts (COMPLETED with none), and
/// every position a reason or assessment cites is a record of the ledger.
pub(crate) fn check_decision(ledger: &EvidenceLedger, answer: &Decision) -> Result<(), String> {
    let worst = answer.reasons.iter().map(|r| r.verdict).max_by_key(|v| v.severity()).unwrap_or(Verdict::Completed);
    if worst != answer.verdict {
        return Err(format!("verdict {:?} does not follow from its reasons (worst is {worst:?})", answer.verdict));
    }
    let positions: HashSet<u64> = ledger.records.iter().map(EvidenceRecord::position).collect();
    let cited = answer
        .reasons
        .iter()
        .flat_map(|r| r.evidence.iter().copied())
        .chain(answer.assessments.iter().flat_map(|a| std::iter::once(a.claim).chain(a.observation)));
    for position in cited {
        if !positions.contains(&position) {
            return Err(format!("it cites position {position}, which is not in the ledger"));
        }
    }
    Ok(())
}
