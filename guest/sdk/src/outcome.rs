//! Outcome and claim-plan building blocks shared by classifiers.
//!
//! These are pure functions over the contract's types, so every policy derives
//! the conservative cases (unknown scope, exit status only) the same way. They
//! never widen what a fact means: TRU-1 says result keys carry lifecycle meaning
//! only from a producer the host bound, so `exit_status_only` looks at nothing but
//! whether the backend ran and its exit code.

use crate::types::{
    Binding, BoundOperation, ClaimPlan, CleanupState, Execution, Impact, Outcome, PlannedScope, ProducerFacts,
};

/// The claim plan for an effect nobody can scope: unknown impact, no
/// dependencies, no obligations (SPEC section 6, "unbound tools").
pub fn unknown_scope() -> ClaimPlan {
    ClaimPlan {
        scope: PlannedScope::Unknown,
        dependencies: Vec::new(),
        obligations: Vec::new(),
        external: false,
    }
}

/// The outcome of a call whose producer the host did not bind (TRU-1): its exit
/// status alone. A backend that never ran has no impact (OUT-1); one that ran
/// without an exit code is UNKNOWN (OUT-1, OUT-2): nobody reported how it
/// ended, so it is neither a success (never inferred) nor a reported failure.
/// Timeouts, teardown, jobs and acknowledgements are ignored here on purpose:
/// only a bound producer may attest them.
pub fn exit_status_only(facts: &ProducerFacts) -> Outcome {
    let (execution, impact) = if !facts.executed {
        (Execution::NotExecuted, Impact::None)
    } else {
        (by_exit_code(facts.exit_code), Impact::Possible)
    };
    Outcome {
        execution,
        impact,
        cleanup: if facts.executed { CleanupState::Unknown } else { CleanupState::NotApplicable },
        replayed: false,
        remote_acknowledged: false,
        detached: false,
    }
}

/// How a call that reached its backend ended, by its exit code alone:
/// REPORTED_SUCCESS for 0, FAILED for any other code, and UNKNOWN with none
/// (OUT-1, OUT-2: a missing exit code is never a reported failure).
pub fn by_exit_code(exit_code: Option<i32>) -> Execution {
    match exit_code {
        Some(0) => Execution::ReportedSuccess,
        Some(_) => Execution::Failed,
        None => Execution::Unknown,
    }
}

/// Facts for a backend that was never invoked; a starting point for tests.
pub fn not_executed() -> ProducerFacts {
    ProducerFacts {
        executed: false,
        exit_code: None,
        timed_out: false,
        teardown_dead: None,
        background_job_id: None,
        mutation_attempted: false,
        detached: false,
        remote_acknowledged: false,
        job_state: None,
        cancelled: false,
    }
}

/// A bound operation of `tool` / `action` with `bindings`, through the bound
/// producer, with an empty input and no pre-states; a starting point for
/// tests.
pub fn bound_operation(tool: &str, action: &str, bindings: Vec<Binding>) -> BoundOperation {
    BoundOperation {
        tool: tool.into(),
        action: action.into(),
        request_id: "r".into(),
        input_json: "{}".into(),
        input_sha256: String::new(),
        bindings,
        pre_states: Vec::new(),
        producer_bound: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(exit_code: Option<i32>) -> ProducerFacts {
        ProducerFacts { executed: true, exit_code, ..not_executed() }
    }

    #[test]
    fn exit_zero_is_reported_success_with_possible_impact() {
        let outcome = exit_status_only(&ran(Some(0)));
        assert_eq!(outcome.execution, Execution::ReportedSuccess);
        assert_eq!(outcome.impact, Impact::Possible);
        assert_eq!(outcome.cleanup, CleanupState::Unknown);
    }

    #[test]
    fn a_nonzero_exit_code_is_failure_and_a_missing_one_unknown() {
        assert_eq!(exit_status_only(&ran(Some(2))).execution, Execution::Failed);
        // OUT-1 / OUT-2: it ran and nobody said how it ended.
        let unknown = exit_status_only(&ran(None));
        assert_eq!((unknown.execution, unknown.impact), (Execution::Unknown, Impact::Possible));
    }

    #[test]
    fn never_executed_has_no_impact() {
        let outcome = exit_status_only(&not_executed());
        assert_eq!(outcome.execution, Execution::NotExecuted);
        assert_eq!(outcome.impact, Impact::None);
    }

    #[test]
    fn unbound_facts_cannot_claim_lifecycle() {
        // TRU-1: an unbound tool that says it timed out, was detached and was
        // acknowledged contributes its exit status alone.
        let facts = ProducerFacts {
            timed_out: true,
            detached: true,
            remote_acknowledged: true,
            teardown_dead: Some(true),
            ..ran(Some(0))
        };
        let outcome = exit_status_only(&facts);
        assert_eq!(outcome.execution, Execution::ReportedSuccess);
        assert!(!outcome.detached && !outcome.remote_acknowledged);
        assert_eq!(outcome.cleanup, CleanupState::Unknown);
    }
}
