//! `classify-reported`: the tool families the embedding runtime executes and
//! reports on, classified by SPEC section 6 and TRU-1. The host binds each
//! call's resource (it never runs these tools); this policy says what to
//! claim, how the reported facts settle, and what to observe.
//!
//! | tool | claim | observation | verification |
//! | --- | --- | --- | --- |
//! | `external` | the exact endpoint, `external = true` | none | never (CMP-6) |
//! | `owned_write` | the exact revisioned record, attachments as dependencies | none | none |
//! | `owned_read` | none (admitted read) | PARTIAL owned-record read of the exact revision | existence only |
//! | `browser` `session_info` | none | BROWSER_SESSION lifecycle | never (VER-3) |
//! | `browser`, any page op | refused before dispatch | | |
//!
//! Settlement uses only what a bound producer reported: success, failure,
//! timeout, cancellation. `remote_acknowledged` passes only as the host set it
//! from the captured external resource, never from a result.

use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::outcome::by_exit_code;
use effects_policy_sdk::types::{
    BoundOperation, ClaimPlan, Classification, CleanupState, Coverage, Execution, Impact, Location,
    Mechanism, Outcome, PlannedScope, ReadbackContext, ReadbackRequest, ResourceRole, SettleRequest,
};

/// The policy; its methods are the plain functions below, so they test natively.
pub struct ReportedPolicy;

/// Index of the one binding whose location satisfies `kind`, or why not.
fn only(operation: &BoundOperation, what: &str, kind: impl Fn(&Location) -> bool) -> Result<u32, String> {
    let mut found = operation.bindings.iter().enumerate().filter(|(_, b)| kind(&b.resource.location));
    match (found.next(), found.next()) {
        (Some((index, _)), None) => Ok(index as u32),
        (None, _) => Err(format!("{}: no {what} was bound", operation.tool)),
        (Some(_), Some(_)) => Err(format!("{}: more than one {what} was bound", operation.tool)),
    }
}

fn external(location: &Location) -> bool {
    matches!(location, Location::External(_))
}

fn owned(location: &Location) -> bool {
    matches!(location, Location::Owned(_))
}

fn browser(location: &Location) -> bool {
    matches!(location, Location::BrowserSession(_))
}

/// Per SPEC section 6. An unbound producer, or bindings that do not fit the
/// tool, are errors, which the host turns into an unknown-scope claim (POL-4).
pub fn classify(operation: &BoundOperation) -> Result<Classification, String> {
    if !operation.producer_bound {
        return Err(format!("{}: the producer is not bound", operation.tool));
    }
    let plan = |target: u32, dependencies: Vec<u32>, external: bool| {
        Classification::Effect(ClaimPlan {
            scope: PlannedScope::Exact(vec![target]),
            dependencies,
            obligations: Vec::new(),
            external,
        })
    };
    match operation.tool.as_str() {
        "external" => Ok(plan(only(operation, "external endpoint", external)?, Vec::new(), true)),
        "owned_write" => {
            let target = operation
                .bindings
                .iter()
                .position(|b| owned(&b.resource.location) && b.resource.role == ResourceRole::Target)
                .ok_or_else(|| "owned_write: no record was bound".to_owned())?;
            let dependencies = (0..operation.bindings.len() as u32)
                .filter(|&i| operation.bindings[i as usize].resource.role == ResourceRole::Dependency)
                .collect();
            Ok(plan(target as u32, dependencies, false))
        }
        "owned_read" => only(operation, "record", owned).map(|_| Classification::ReadOnly),
        "browser" if operation.action == "session_info" => {
            only(operation, "browser session", browser).map(|_| Classification::ReadOnly)
        }
        "browser" => Ok(Classification::Refused(format!(
            "browser page operation {:?} is refused before dispatch (ID-2): no claim, never run",
            operation.action
        ))),
        other => Err(format!("classify-reported does not serve {other:?}")),
    }
}

/// From the reported facts: not run, timed out, cancelled, success (exit 0),
/// failure (another exit code), or UNKNOWN when the call ran and no exit code
/// was reported (OUT-1, OUT-2: a hook with no exit status, a lost connection
/// is never a reported failure). Acknowledgement only for an external call,
/// only as captured.
pub fn settle(request: &SettleRequest) -> Outcome {
    let facts = &request.facts;
    let execution = match () {
        _ if !facts.executed => Execution::NotExecuted,
        _ if facts.timed_out => Execution::TimedOut,
        _ if facts.cancelled => Execution::Cancelled,
        _ => by_exit_code(facts.exit_code),
    };
    let is_external = request.operation.tool == "external";
    Outcome {
        execution,
        impact: if facts.executed { Impact::Possible } else { Impact::None },
        cleanup: CleanupState::NotApplicable,
        replayed: false,
        remote_acknowledged: is_external
            && facts.remote_acknowledged
            && execution == Execution::ReportedSuccess,
        detached: false,
    }
}

/// An owned read observes the exact revision (PARTIAL: existence only); a
/// session read observes the session's lifecycle. Nothing else is observed.
pub fn readbacks(context: &ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
    let operation = &context.operation;
    let request = |binding, mechanism| ReadbackRequest { binding, mechanism, coverage: Coverage::Partial };
    Ok(match operation.tool.as_str() {
        "owned_read" => vec![request(only(operation, "record", owned)?, Mechanism::OwnedRead)],
        "browser" if operation.action == "session_info" => {
            vec![request(only(operation, "browser session", browser)?, Mechanism::BrowserSession)]
        }
        _ => Vec::new(),
    })
}

impl Guest for ReportedPolicy {
    fn classify(operation: BoundOperation) -> Result<Classification, String> {
        classify(&operation)
    }

    fn settle(request: SettleRequest) -> Result<Outcome, String> {
        Ok(settle(&request))
    }

    fn readbacks(context: ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
        readbacks(&context)
    }
}

effects_policy_sdk::export_classifier!(ReportedPolicy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests;
