//! `classify-process`: `bash` and `python` commands, foreground and background,
//! and the `bg_job` tool that reads or kills a background job (SPEC section 6,
//! the launch and `bg_job` rows; TRU-1; ID-2).
//!
//! Nobody can scope what a command changes, so a command is an effect of
//! unknown scope; a background launch also depends on its launch reservation
//! (the `process-launch` binding the host made for it). What an outcome may
//! say depends on who ran it:
//!
//! - through the **bound** process producer: TIMED_OUT from its timeout;
//!   cleanup from its teardown (every process of the group dead: clean; one
//!   alive: failed; no teardown: unknown, since a command may leave children);
//!   RUNNING only for a launch with a reservation whose producer reported the
//!   job it started;
//! - through anything else: the exit status alone (the SDK's floor).
//!
//! `bg_job` acts on exactly one job the host validated (a `background-job`
//! binding and the `process-launch` binding of its generation). `status` is an
//! admitted read; its settlement is the outcome of the **launch** it read
//! (RUNNING while the job runs, then how it ended). `kill` claims the job and
//! its process; its own outcome says whether the job is gone, and the launch
//! is then settled as a status read right after the kill would settle it.

use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::outcome::{by_exit_code, exit_status_only, unknown_scope};
use effects_policy_sdk::types::{
    BoundOperation, ClaimPlan, Classification, CleanupState, Coverage, Execution, Impact, JobLifecycle,
    Location, Mechanism, Outcome, PlannedScope, ProducerFacts, ReadbackContext, ReadbackRequest,
    ResourceRole, SettleRequest,
};

/// The policy; its methods are the plain functions below, so they test natively.
pub struct ProcessPolicy;

/// Index of the only binding whose location `is`, if exactly one matches.
fn only(operation: &BoundOperation, is: fn(&Location) -> bool) -> Option<u32> {
    let mut found = operation.bindings.iter().enumerate().filter(|(_, b)| is(&b.resource.location));
    let (index, _) = found.next()?;
    found.next().is_none().then_some(index as u32)
}

fn launch_binding(operation: &BoundOperation) -> Option<u32> {
    only(operation, |l| matches!(l, Location::ProcessLaunch(_)))
}

fn job_binding(operation: &BoundOperation) -> Option<u32> {
    only(operation, |l| matches!(l, Location::BackgroundJob(_)))
}

fn process_binding(operation: &BoundOperation) -> Option<u32> {
    only(operation, |l| matches!(l, Location::Process(_)))
}

/// A command is an effect of unknown scope (with its launch reservation as a
/// dependency when it is a background launch); `bg_job` acts on one
/// validated job or is refused.
pub fn classify(operation: &BoundOperation) -> Result<Classification, String> {
    if operation.tool != "bg_job" {
        let reservation = launch_binding(operation)
            .filter(|&i| operation.bindings[i as usize].resource.role == ResourceRole::Dependency);
        return Ok(Classification::Effect(ClaimPlan {
            dependencies: reservation.into_iter().collect(),
            ..unknown_scope()
        }));
    }
    let (Some(job), Some(launch)) = (job_binding(operation), launch_binding(operation)) else {
        return Ok(Classification::Refused(
            "bg_job acts on exactly one validated job and its launch; the host bound none".into(),
        ));
    };
    match operation.action.as_str() {
        "status" => Ok(Classification::ReadOnly),
        "kill" => {
            let mut scope = vec![job];
            scope.extend(process_binding(operation));
            Ok(Classification::Effect(ClaimPlan {
                scope: PlannedScope::Exact(scope),
                dependencies: vec![launch],
                ..unknown_scope()
            }))
        }
        other => Ok(Classification::Refused(format!("bg_job action {other:?}: use \"status\" or \"kill\""))),
    }
}

fn outcome(execution: Execution, cleanup: CleanupState) -> Outcome {
    Outcome {
        execution,
        impact: Impact::Possible,
        cleanup,
        replayed: false,
        remote_acknowledged: false,
        detached: false,
    }
}

/// Cleanup as the bound producer attests it.
fn cleanup(facts: &ProducerFacts) -> CleanupState {
    match facts.teardown_dead {
        Some(true) => CleanupState::Clean,
        Some(false) => CleanupState::Failed,
        None => CleanupState::Unknown,
    }
}

/// The launch's outcome from a status read of its job: RUNNING while it
/// runs; how it ended once it has.
fn launch_from_job(facts: &ProducerFacts) -> Outcome {
    let execution = match facts.job_state {
        None | Some(JobLifecycle::Running) => Execution::Running,
        // An exit with no status (OUT-2) is UNKNOWN, not a reported failure.
        Some(JobLifecycle::Exited) => by_exit_code(facts.exit_code),
        Some(JobLifecycle::Killed) => Execution::Cancelled,
        Some(JobLifecycle::Lost) => Execution::Interrupted,
    };
    outcome(execution, if execution == Execution::Running { CleanupState::Unknown } else { cleanup(facts) })
}

/// Outcomes only a bound producer may attest (TRU-1).
pub fn settle(request: &SettleRequest) -> Outcome {
    let facts = &request.facts;
    let operation = &request.operation;
    if operation.tool == "bg_job" {
        let validated = operation.producer_bound
            && facts.executed
            && job_binding(operation).is_some()
            && launch_binding(operation).is_some();
        return match (validated, operation.action.as_str()) {
            // Not a validated job read: nothing about the launch is settled.
            (false, "status") => outcome(Execution::Running, CleanupState::Unknown),
            (false, _) => exit_status_only(facts),
            (true, "status") => launch_from_job(facts),
            // A kill succeeded when nothing of the job is left alive.
            (true, _) => match (facts.job_state, facts.teardown_dead) {
                (Some(JobLifecycle::Running) | None, _) | (_, Some(false) | None) => {
                    outcome(Execution::Failed, cleanup(facts))
                }
                _ => outcome(Execution::ReportedSuccess, CleanupState::Clean),
            },
        };
    }
    if !operation.producer_bound || !facts.executed {
        // A command the runtime ran: its exit status only (TRU-1), but the
        // host's own look at its processes (`teardown_dead`, which no
        // runtime's report can set: SPEC 14, INV-2 extended) is cleanup the
        // ledger observed.
        let reported = exit_status_only(facts);
        return match facts.teardown_dead {
            Some(_) if facts.executed => Outcome { cleanup: cleanup(facts), ..reported },
            _ => reported,
        };
    }
    let reserved = request.plan.as_ref().is_some_and(|plan| {
        plan.dependencies.iter().any(|&d| {
            matches!(
                operation.bindings.get(d as usize).map(|b| &b.resource.location),
                Some(Location::ProcessLaunch(_))
            )
        })
    });
    let execution = match () {
        _ if facts.timed_out => Execution::TimedOut,
        _ if facts.cancelled => Execution::Cancelled,
        _ if reserved && facts.background_job_id.is_some() && facts.exit_code.is_none() => Execution::Running,
        // No exit code (killed by a signal, a supervisor lost from outside) is
        // UNKNOWN: the facts do not say how it ended (OUT-1, OUT-2).
        _ => by_exit_code(facts.exit_code),
    };
    outcome(execution, cleanup(facts))
}

/// A job read or kill reads the job's state back (JOB_STATE, never
/// verifying: VER-3); a command's effects are unknown, so nothing else is.
pub fn readbacks(context: &ReadbackContext) -> Vec<ReadbackRequest> {
    let operation = &context.operation;
    if operation.tool != "bg_job" || !operation.producer_bound {
        return Vec::new();
    }
    job_binding(operation)
        .map(|binding| ReadbackRequest {
            binding,
            mechanism: Mechanism::JobState,
            coverage: Coverage::Partial,
        })
        .into_iter()
        .collect()
}

impl Guest for ProcessPolicy {
    fn classify(operation: BoundOperation) -> Result<Classification, String> {
        classify(&operation)
    }

    fn settle(request: SettleRequest) -> Result<Outcome, String> {
        Ok(settle(&request))
    }

    fn readbacks(context: ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
        Ok(readbacks(&context))
    }
}

effects_policy_sdk::export_classifier!(ProcessPolicy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests;
