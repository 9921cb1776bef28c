//! `classify-unbound`: the fallback classifier (SPEC section 6, last row).
//!
//! Every tool it serves is an effect of unknown scope; settlement uses the exit
//! status alone (TRU-1); it asks for no readbacks, so nothing it claims is ever
//! verified. It is the conservative floor every other classifier improves on, and
//! it must never say more than that.

use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::outcome::{exit_status_only, unknown_scope};
use effects_policy_sdk::types::{
    BoundOperation, Classification, Outcome, ReadbackContext, ReadbackRequest, SettleRequest,
};

/// The policy; its methods are the plain functions below, so they test natively.
pub struct UnboundPolicy;

/// Any tool: an unknown-scope effect.
pub fn classify(_operation: &BoundOperation) -> Classification {
    Classification::Effect(unknown_scope())
}

/// Exit status only, whatever else the result says.
pub fn settle(request: &SettleRequest) -> Outcome {
    exit_status_only(&request.facts)
}

/// No readbacks: an unbound tool's resources are unknown.
pub fn readbacks(_context: &ReadbackContext) -> Vec<ReadbackRequest> {
    Vec::new()
}

impl Guest for UnboundPolicy {
    fn classify(operation: BoundOperation) -> Result<Classification, String> {
        Ok(classify(&operation))
    }

    fn settle(request: SettleRequest) -> Result<Outcome, String> {
        Ok(settle(&request))
    }

    fn readbacks(context: ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
        Ok(readbacks(&context))
    }
}

effects_policy_sdk::export_classifier!(UnboundPolicy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests {
    use super::*;
    use effects_policy_sdk::outcome::not_executed;
    use effects_policy_sdk::types::{Execution, PlannedScope, ProducerFacts};

    fn operation(tool: &str) -> BoundOperation {
        BoundOperation {
            tool: tool.into(),
            action: String::new(),
            request_id: "r1".into(),
            input_json: "{}".into(),
            input_sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a".into(),
            bindings: Vec::new(),
            pre_states: Vec::new(),
            producer_bound: false,
        }
    }

    #[test]
    fn every_tool_is_an_unknown_scope_effect() {
        for tool in ["write_file", "bash", "deploy", ""] {
            match classify(&operation(tool)) {
                Classification::Effect(plan) => {
                    assert!(matches!(plan.scope, PlannedScope::Unknown), "{tool}");
                    assert!(plan.obligations.is_empty() && plan.dependencies.is_empty());
                    assert!(!plan.external);
                }
                other => panic!("{tool}: expected an effect, got {other:?}"),
            }
        }
    }

    #[test]
    fn settles_by_exit_status_and_reads_nothing_back() {
        let facts = ProducerFacts { executed: true, exit_code: Some(1), timed_out: true, ..not_executed() };
        let request = SettleRequest { operation: operation("bash"), plan: None, facts };
        let outcome = settle(&request);
        assert_eq!(outcome.execution, Execution::Failed, "an unbound timeout is not TIMED_OUT (TRU-1)");
        // An unbound tool that ran and gave no exit code (its timeout not
        // attested) is UNKNOWN, never a reported failure (OUT-1, OUT-2).
        let silent = ProducerFacts { executed: true, timed_out: true, ..not_executed() };
        let request = SettleRequest { operation: operation("bash"), plan: None, facts: silent };
        assert_eq!(settle(&request).execution, Execution::Unknown);
        let context = ReadbackContext { operation: operation("bash"), outcome };
        assert!(readbacks(&context).is_empty());
    }
}
