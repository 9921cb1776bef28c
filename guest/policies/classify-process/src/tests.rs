//! Native tests of `classify-process`: what a command and a job action claim,
//! and which outcomes only a bound producer may attest (TRU-1).

use super::*;
use effects_policy_sdk::outcome::not_executed;
use effects_policy_sdk::types::{Binding, JobLocation, ProcessLocation, ResourceRef};

fn binding(name: &str, role: ResourceRole, location: Location) -> Binding {
    Binding {
        name: name.into(),
        resource: ResourceRef { role, location, incarnation: "i".into(), snapshot_sha256: None },
    }
}

fn reservation() -> Binding {
    binding("launch", ResourceRole::Dependency, Location::ProcessLaunch(7))
}

fn job(role: ResourceRole) -> Binding {
    binding("job", role, Location::BackgroundJob(JobLocation { job_id: "job-7".into(), generation: 7 }))
}

fn process() -> Binding {
    let location = ProcessLocation {
        namespace: "pid:[1]".into(),
        owner: "o".into(),
        request: "r".into(),
        thread: "t".into(),
        pid: 42,
        start_token: 9,
    };
    binding("process", ResourceRole::Target, Location::Process(location))
}

fn operation(tool: &str, action: &str, bound: bool, bindings: Vec<Binding>) -> BoundOperation {
    BoundOperation {
        producer_bound: bound,
        ..effects_policy_sdk::outcome::bound_operation(tool, action, bindings)
    }
}

fn request(operation: BoundOperation, facts: ProducerFacts) -> SettleRequest {
    let plan = match classify(&operation).unwrap() {
        Classification::Effect(plan) => Some(plan),
        _ => None,
    };
    SettleRequest { operation, plan, facts }
}

fn ran(exit_code: Option<i32>) -> ProducerFacts {
    ProducerFacts { executed: true, exit_code, ..not_executed() }
}

fn job_facts(state: JobLifecycle, exit_code: Option<i32>, gone: Option<bool>) -> ProducerFacts {
    ProducerFacts {
        job_state: Some(state),
        teardown_dead: gone,
        background_job_id: Some("job-7".into()),
        ..ran(exit_code)
    }
}

#[test]
fn a_command_is_an_unknown_scope_effect_and_a_launch_depends_on_its_reservation() {
    let Classification::Effect(plan) = classify(&operation("bash", "", true, Vec::new())).unwrap() else {
        panic!()
    };
    assert_eq!((plan.scope, plan.dependencies), (PlannedScope::Unknown, Vec::new()));
    let launch = operation("bash", "", true, vec![reservation()]);
    let Classification::Effect(plan) = classify(&launch).unwrap() else { panic!() };
    assert_eq!((plan.scope, plan.dependencies), (PlannedScope::Unknown, vec![0]));
}

#[test]
fn the_bound_producer_attests_timeout_and_teardown() {
    let timed_out = ProducerFacts { timed_out: true, teardown_dead: Some(true), ..ran(None) };
    let outcome = settle(&request(operation("bash", "", true, Vec::new()), timed_out.clone()));
    assert_eq!((outcome.execution, outcome.cleanup), (Execution::TimedOut, CleanupState::Clean));
    let survivor = ProducerFacts { teardown_dead: Some(false), ..timed_out.clone() };
    assert_eq!(
        settle(&request(operation("bash", "", true, Vec::new()), survivor)).cleanup,
        CleanupState::Failed
    );
    let finished = settle(&request(operation("bash", "", true, Vec::new()), ran(Some(0))));
    assert_eq!((finished.execution, finished.cleanup), (Execution::ReportedSuccess, CleanupState::Unknown));
    // Ended by a signal (the producer gives no exit code then): UNKNOWN, not
    // a reported failure (OUT-1, OUT-2); an exit code is one.
    let signalled = ProducerFacts { teardown_dead: Some(true), ..ran(None) };
    let signalled = settle(&request(operation("bash", "", true, Vec::new()), signalled));
    assert_eq!((signalled.execution, signalled.cleanup), (Execution::Unknown, CleanupState::Clean));
    assert_eq!(
        settle(&request(operation("bash", "", true, Vec::new()), ran(Some(4)))).execution,
        Execution::Failed
    );
    // TRU-1: the same facts from an unbound producer say exit status only,
    // and they give none: UNKNOWN, never TIMED_OUT (OUT-1, OUT-2). Its
    // cleanup is the host's own look at the processes (`teardown_dead`,
    // which only the host sets: SPEC 14, INV-2 extended), UNKNOWN without one.
    let unbound = settle(&request(operation("bash", "", false, Vec::new()), timed_out.clone()));
    assert_eq!((unbound.execution, unbound.cleanup), (Execution::Unknown, CleanupState::Clean));
    let unobserved = ProducerFacts { teardown_dead: None, ..timed_out };
    let unbound = settle(&request(operation("bash", "", false, Vec::new()), unobserved));
    assert_eq!((unbound.execution, unbound.cleanup), (Execution::Unknown, CleanupState::Unknown));
    let live = ProducerFacts { teardown_dead: Some(false), ..ran(Some(0)) };
    let unbound = settle(&request(operation("bash", "", false, Vec::new()), live));
    assert_eq!((unbound.execution, unbound.cleanup), (Execution::ReportedSuccess, CleanupState::Failed));
}

#[test]
fn running_needs_a_bound_producer_a_reservation_and_a_started_job() {
    let started = ProducerFacts { background_job_id: Some("job-7".into()), ..ran(None) };
    let launch = |bound, bindings| settle(&request(operation("bash", "", bound, bindings), started.clone()));
    assert_eq!(launch(true, vec![reservation()]).execution, Execution::Running);
    // No reservation, or not the bound producer: never RUNNING; it ran,
    // with no exit code, so how it ended is UNKNOWN (OUT-1, OUT-2).
    assert_eq!(launch(true, Vec::new()).execution, Execution::Unknown);
    assert_eq!(launch(false, vec![reservation()]).execution, Execution::Unknown);
    // A launch that reported no job did not start one: no exit code and no
    // job, so nothing says how it ended.
    let none = settle(&request(operation("bash", "", true, vec![reservation()]), ran(None)));
    assert_eq!(none.execution, Execution::Unknown);
}

#[test]
fn a_job_read_is_admitted_and_settles_its_launch_by_the_jobs_lifecycle() {
    let read = || operation("bg_job", "status", true, vec![job(ResourceRole::Source), reservation()]);
    assert_eq!(classify(&read()).unwrap(), Classification::ReadOnly);
    let cases = [
        (JobLifecycle::Running, None, None, Execution::Running, CleanupState::Unknown),
        (JobLifecycle::Exited, Some(0), Some(true), Execution::ReportedSuccess, CleanupState::Clean),
        (JobLifecycle::Exited, Some(3), Some(false), Execution::Failed, CleanupState::Failed),
        // An exit the job's record gives no status for (OUT-2).
        (JobLifecycle::Exited, None, Some(true), Execution::Unknown, CleanupState::Clean),
        (JobLifecycle::Killed, None, Some(true), Execution::Cancelled, CleanupState::Clean),
        (JobLifecycle::Lost, None, Some(true), Execution::Interrupted, CleanupState::Clean),
    ];
    for (state, code, gone, execution, cleanup) in cases {
        let outcome = settle(&request(read(), job_facts(state, code, gone)));
        assert_eq!((outcome.execution, outcome.cleanup), (execution, cleanup), "{state:?}");
    }
    // TRU-1: an unbound read, or one without a validated job, settles nothing.
    let exited = job_facts(JobLifecycle::Exited, Some(0), Some(true));
    let unbound = operation("bg_job", "status", false, vec![job(ResourceRole::Source), reservation()]);
    assert_eq!(settle(&request(unbound, exited.clone())).execution, Execution::Running);
    let no_launch = operation("bg_job", "status", true, vec![job(ResourceRole::Source)]);
    assert_eq!(settle(&request(no_launch.clone(), exited)).execution, Execution::Running);
    assert!(matches!(classify(&no_launch).unwrap(), Classification::Refused(_)));
    let two_jobs = operation(
        "bg_job",
        "status",
        true,
        vec![job(ResourceRole::Source), job(ResourceRole::Source), reservation()],
    );
    assert!(matches!(classify(&two_jobs).unwrap(), Classification::Refused(_)));
}

#[test]
fn a_kill_claims_the_job_and_its_process_and_succeeds_only_when_the_group_is_gone() {
    let kill =
        || operation("bg_job", "kill", true, vec![job(ResourceRole::Target), process(), reservation()]);
    let Classification::Effect(plan) = classify(&kill()).unwrap() else { panic!() };
    assert_eq!((plan.scope, plan.dependencies), (PlannedScope::Exact(vec![0, 1]), vec![2]));
    let killed = settle(&request(kill(), job_facts(JobLifecycle::Killed, None, Some(true))));
    assert_eq!((killed.execution, killed.cleanup), (Execution::ReportedSuccess, CleanupState::Clean));
    let survivor = settle(&request(kill(), job_facts(JobLifecycle::Killed, None, Some(false))));
    assert_eq!((survivor.execution, survivor.cleanup), (Execution::Failed, CleanupState::Failed));
    assert_eq!(
        settle(&request(kill(), job_facts(JobLifecycle::Running, None, None))).execution,
        Execution::Failed
    );
    assert_eq!(
        readbacks(&ReadbackContext { operation: kill(), outcome: killed }),
        vec![ReadbackRequest { binding: 0, mechanism: Mechanism::JobState, coverage: Coverage::Partial }]
    );
    let other = operation("bg_job", "restart", true, vec![job(ResourceRole::Target), reservation()]);
    assert!(matches!(classify(&other).unwrap(), Classification::Refused(_)));
}
