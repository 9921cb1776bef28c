//! `{{name}}`: the classifier for {{tools_prose}}, as `effects policy new`
//! generated it.
//!
//! It starts from the conservative floor (SPEC section 6, unbound tools):
//! every call is an effect of unknown scope, settled by its exit status alone
//! (TRU-1), with nothing read back, so nothing it claims is ever verified.
//! Improve on it by naming what a call changes: an exact scope and
//! obligations from the operation's bindings (CL-1), a read-only answer for a
//! call that changes nothing (CMP-9), `external` for an effect outside the
//! roots (CMP-6). Never say more than the operation shows: the host refuses a
//! plan that names resources the operation does not bind.
//!
//! The three calls are plain functions, so they test natively:
//! `cargo test --manifest-path guest/Cargo.toml -p {{name}}`.

use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::outcome::{exit_status_only, unknown_scope};
use effects_policy_sdk::types::{
    BoundOperation, Classification, Outcome, ReadbackContext, ReadbackRequest, SettleRequest,
};

/// The policy; its methods are the plain functions below.
pub struct Policy;

/// What to claim before the call runs.
pub fn classify(_operation: &BoundOperation) -> Classification {
    Classification::Effect(unknown_scope())
}

/// How the call ended, from the producer's facts.
pub fn settle(request: &SettleRequest) -> Outcome {
    exit_status_only(&request.facts)
}

/// Which resources to read back after it settled.
pub fn readbacks(_context: &ReadbackContext) -> Vec<ReadbackRequest> {
    Vec::new()
}

impl Guest for Policy {
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

effects_policy_sdk::export_classifier!(Policy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests {
    use super::*;
    use effects_policy_sdk::outcome::{bound_operation, not_executed};
    use effects_policy_sdk::types::{Execution, PlannedScope, ProducerFacts};

    #[test]
    fn a_call_is_an_effect_of_unknown_scope() {
        match classify(&bound_operation("{{tool}}", "", Vec::new())) {
            Classification::Effect(plan) => {
                assert!(matches!(plan.scope, PlannedScope::Unknown));
                assert!(plan.obligations.is_empty() && !plan.external);
            }
            other => panic!("expected an effect, got {other:?}"),
        }
    }

    #[test]
    fn a_call_settles_by_its_exit_status() {
        let operation = bound_operation("{{tool}}", "", Vec::new());
        let ran = |exit_code| ProducerFacts { executed: true, exit_code, ..not_executed() };
        for (facts, expected) in [
            (not_executed(), Execution::NotExecuted),
            (ran(Some(0)), Execution::ReportedSuccess),
            (ran(Some(2)), Execution::Failed),
            (ran(None), Execution::Unknown),
        ] {
            let request = SettleRequest { operation: operation.clone(), plan: None, facts };
            assert_eq!(settle(&request).execution, expected);
        }
    }
}
