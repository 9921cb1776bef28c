//! `classify-process`: `bash` and `python` commands (SPEC section 6, the
//! launch row; TRU-1). Nobody can scope what a command changes, so the claim
//! is unknown scope. What the outcome may say depends on who ran it:
//!
//! - through the **bound** process producer: TIMED_OUT from its timeout, and
//!   cleanup from its teardown (every process of the group dead: clean; one
//!   alive: failed; no teardown: unknown, since a command may leave children);
//! - through anything else: the exit status alone (the SDK's floor).
//!
//! Foreground commands only: background launches (RUNNING with a launch
//! reservation) and `bg_job` are still to come (issue 6).

use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::outcome::{exit_status_only, unknown_scope};
use effects_policy_sdk::types::{
    BoundOperation, Classification, CleanupState, Execution, Impact, Outcome, ReadbackContext,
    ReadbackRequest, SettleRequest,
};

/// The policy; its methods are the plain functions below, so they test natively.
pub struct ProcessPolicy;

/// Any command: an effect of unknown scope.
pub fn classify(_operation: &BoundOperation) -> Classification {
    Classification::Effect(unknown_scope())
}

/// TIMED_OUT and cleanup only from the bound producer (TRU-1).
pub fn settle(request: &SettleRequest) -> Outcome {
    let facts = &request.facts;
    if !request.operation.producer_bound || !facts.executed {
        return exit_status_only(facts);
    }
    let execution = match () {
        _ if facts.timed_out => Execution::TimedOut,
        _ if facts.cancelled => Execution::Cancelled,
        _ if facts.exit_code == Some(0) => Execution::ReportedSuccess,
        _ => Execution::Failed,
    };
    let cleanup = match facts.teardown_dead {
        Some(true) => CleanupState::Clean,
        Some(false) => CleanupState::Failed,
        None => CleanupState::Unknown,
    };
    Outcome {
        execution,
        impact: Impact::Possible,
        cleanup,
        replayed: false,
        remote_acknowledged: false,
        detached: false,
    }
}

impl Guest for ProcessPolicy {
    fn classify(operation: BoundOperation) -> Result<Classification, String> {
        Ok(classify(&operation))
    }

    fn settle(request: SettleRequest) -> Result<Outcome, String> {
        Ok(settle(&request))
    }

    /// Nothing a command touched is known, so nothing is read back.
    fn readbacks(_context: ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
        Ok(Vec::new())
    }
}

effects_policy_sdk::export_classifier!(ProcessPolicy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests {
    use super::*;
    use effects_policy_sdk::outcome::not_executed;
    use effects_policy_sdk::types::{PlannedScope, ProducerFacts};

    fn request(bound: bool, facts: ProducerFacts) -> SettleRequest {
        SettleRequest {
            operation: BoundOperation {
                tool: "bash".into(),
                action: String::new(),
                request_id: "r".into(),
                input_json: "{}".into(),
                input_sha256: String::new(),
                bindings: Vec::new(),
                pre_states: Vec::new(),
                producer_bound: bound,
            },
            plan: None,
            facts,
        }
    }

    fn ran(exit_code: Option<i32>) -> ProducerFacts {
        ProducerFacts { executed: true, exit_code, ..not_executed() }
    }

    #[test]
    fn a_command_is_an_unknown_scope_effect() {
        let Classification::Effect(plan) = classify(&request(true, ran(None)).operation) else { panic!() };
        assert_eq!(plan.scope, PlannedScope::Unknown);
    }

    #[test]
    fn the_bound_producer_attests_timeout_and_teardown() {
        let timed_out = ProducerFacts { timed_out: true, teardown_dead: Some(true), ..ran(None) };
        let outcome = settle(&request(true, timed_out.clone()));
        assert_eq!((outcome.execution, outcome.cleanup), (Execution::TimedOut, CleanupState::Clean));
        let survivor = ProducerFacts { teardown_dead: Some(false), ..timed_out.clone() };
        assert_eq!(settle(&request(true, survivor)).cleanup, CleanupState::Failed);
        let finished = settle(&request(true, ran(Some(0))));
        assert_eq!(
            (finished.execution, finished.cleanup),
            (Execution::ReportedSuccess, CleanupState::Unknown)
        );
        // TRU-1: the same facts from an unbound producer say exit status only.
        let unbound = settle(&request(false, timed_out));
        assert_eq!((unbound.execution, unbound.cleanup), (Execution::Failed, CleanupState::Unknown));
    }
}
