//! `classify-external`: external / MCP calls (SPEC section 6, the external row;
//! TRU-1; CMP-6).
//!
//! The embedding runtime executes the call and reports its facts; the host
//! binds the endpoint as one `external` resource. The claim is that exact
//! resource with `external = true` and no obligation: nothing remote has a
//! readback contract, so the effect is never verified and the evaluator caps
//! the run at UNVERIFIED with a server-authored disclosure. `remote_acknowledged`
//! is passed on only as the host set it from the captured external resource
//! (exit 0 of the bound external producer), never read from a result.

use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::types::{
    BoundOperation, ClaimPlan, Classification, CleanupState, Execution, Impact, Location, Outcome,
    PlannedScope, ReadbackContext, ReadbackRequest, SettleRequest,
};

/// The policy; its methods are the plain functions below, so they test natively.
pub struct ExternalPolicy;

/// The index of the one external binding, or why there is none.
fn endpoint(operation: &BoundOperation) -> Result<u32, String> {
    let mut found = operation
        .bindings
        .iter()
        .enumerate()
        .filter(|(_, b)| matches!(b.resource.location, Location::External(_)));
    match (found.next(), found.next()) {
        (Some((index, _)), None) => Ok(index as u32),
        (None, _) => Err(format!("{}: no external endpoint was bound", operation.tool)),
        (Some(_), Some(_)) => Err(format!("{}: more than one external endpoint was bound", operation.tool)),
    }
}

/// The exact endpoint, `external = true`, no obligations. An unbound producer
/// (the host could not capture the endpoint) is refused as an error, which the
/// host turns into an unknown-scope claim (POL-4).
pub fn classify(operation: &BoundOperation) -> Result<Classification, String> {
    if !operation.producer_bound {
        return Err(format!("{}: the external producer is not bound", operation.tool));
    }
    let target = endpoint(operation)?;
    Ok(Classification::Effect(ClaimPlan {
        scope: PlannedScope::Exact(vec![target]),
        dependencies: Vec::new(),
        obligations: Vec::new(),
        external: true,
    }))
}

/// From the reported facts: not run, success (exit 0), timed out, cancelled,
/// or failed. Acknowledgement only as the host captured it.
pub fn settle(request: &SettleRequest) -> Outcome {
    let facts = &request.facts;
    let execution = match () {
        _ if !facts.executed => Execution::NotExecuted,
        _ if facts.timed_out => Execution::TimedOut,
        _ if facts.cancelled => Execution::Cancelled,
        _ if facts.exit_code == Some(0) => Execution::ReportedSuccess,
        _ => Execution::Failed,
    };
    let ran = facts.executed;
    Outcome {
        execution,
        impact: if ran { Impact::Possible } else { Impact::None },
        cleanup: CleanupState::NotApplicable,
        replayed: false,
        remote_acknowledged: ran && facts.remote_acknowledged && execution == Execution::ReportedSuccess,
        detached: false,
    }
}

impl Guest for ExternalPolicy {
    fn classify(operation: BoundOperation) -> Result<Classification, String> {
        classify(&operation)
    }

    fn settle(request: SettleRequest) -> Result<Outcome, String> {
        endpoint(&request.operation)?;
        Ok(settle(&request))
    }

    /// Nothing remote has a readback the host can perform.
    fn readbacks(_context: ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
        Ok(Vec::new())
    }
}

effects_policy_sdk::export_classifier!(ExternalPolicy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests {
    use super::*;
    use effects_policy_sdk::outcome::not_executed;
    use effects_policy_sdk::types::{Binding, ExternalLocation, ProducerFacts, ResourceRef, ResourceRole};

    fn operation(bound: bool) -> BoundOperation {
        let location = ExternalLocation {
            namespace: "mcp".into(),
            owner: "o".into(),
            endpoint: String::new(),
            server: "tracker".into(),
            tool: "create_issue".into(),
        };
        BoundOperation {
            tool: "external".into(),
            action: String::new(),
            request_id: "r".into(),
            input_json: "{}".into(),
            input_sha256: String::new(),
            bindings: vec![Binding {
                name: "endpoint".into(),
                resource: ResourceRef {
                    role: ResourceRole::Target,
                    location: Location::External(location),
                    incarnation: "unobserved".into(),
                    snapshot_sha256: None,
                },
            }],
            pre_states: Vec::new(),
            producer_bound: bound,
        }
    }

    fn facts(exit_code: Option<i32>, acknowledged: bool) -> ProducerFacts {
        ProducerFacts { executed: true, exit_code, remote_acknowledged: acknowledged, ..not_executed() }
    }

    #[test]
    fn an_external_call_claims_its_endpoint_as_external_with_no_obligation() {
        let Ok(Classification::Effect(plan)) = classify(&operation(true)) else { panic!() };
        assert_eq!(plan.scope, PlannedScope::Exact(vec![0]));
        assert!(plan.external && plan.obligations.is_empty());
        assert!(classify(&operation(false)).is_err(), "an unbound producer is not trusted");
    }

    #[test]
    fn exit_zero_is_success_acknowledged_only_as_captured() {
        let request = |facts| SettleRequest { operation: operation(true), plan: None, facts };
        let outcome = settle(&request(facts(Some(0), true)));
        assert_eq!(outcome.execution, Execution::ReportedSuccess);
        assert!(outcome.remote_acknowledged);
        assert!(!settle(&request(facts(Some(0), false))).remote_acknowledged);
        let failed = settle(&request(facts(Some(1), true)));
        assert_eq!(failed.execution, Execution::Failed);
        assert!(!failed.remote_acknowledged, "a failure acknowledges nothing");
        assert_eq!(settle(&request(not_executed())).impact, Impact::None);
    }
}
