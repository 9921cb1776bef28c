//! The families' rows of SPEC section 6, natively.

use super::*;
use effects_policy_sdk::outcome::not_executed;
use effects_policy_sdk::types::{
    Binding, BrowserLocation, ExternalLocation, OwnedLocation, ProducerFacts, ResourceRef,
};

fn binding(name: &str, role: ResourceRole, location: Location) -> Binding {
    Binding {
        name: name.into(),
        resource: ResourceRef { role, location, incarnation: "r1".into(), snapshot_sha256: None },
    }
}

fn endpoint() -> Location {
    Location::External(ExternalLocation {
        namespace: "mcp".into(),
        owner: "o".into(),
        endpoint: String::new(),
        server: "tracker".into(),
        tool: "create_issue".into(),
    })
}

fn record(name: &str) -> Location {
    Location::Owned(OwnedLocation {
        namespace: "store".into(),
        owner: "o".into(),
        thread: "t".into(),
        collection: "notes".into(),
        record: name.into(),
    })
}

fn session() -> Location {
    Location::BrowserSession(BrowserLocation {
        owner: "o".into(),
        thread: "t".into(),
        session_key: "s".into(),
    })
}

fn operation(tool: &str, action: &str, bindings: Vec<Binding>) -> BoundOperation {
    effects_policy_sdk::outcome::bound_operation(tool, action, bindings)
}

fn facts(exit_code: Option<i32>, acknowledged: bool) -> ProducerFacts {
    ProducerFacts { executed: true, exit_code, remote_acknowledged: acknowledged, ..not_executed() }
}

fn settled(op: &BoundOperation, facts: ProducerFacts) -> Outcome {
    settle(&SettleRequest { operation: op.clone(), plan: None, facts })
}

#[test]
fn an_external_call_claims_its_endpoint_as_external_with_no_obligation() {
    let op = operation("external", "", vec![binding("endpoint", ResourceRole::Target, endpoint())]);
    let Ok(Classification::Effect(plan)) = classify(&op) else { panic!() };
    assert_eq!(plan.scope, PlannedScope::Exact(vec![0]));
    assert!(plan.external && plan.obligations.is_empty());
    assert!(
        classify(&BoundOperation { producer_bound: false, ..op }).is_err(),
        "an unbound producer is not trusted"
    );
}

#[test]
fn exit_zero_is_success_acknowledged_only_for_external_and_only_as_captured() {
    let ext = operation("external", "", vec![binding("endpoint", ResourceRole::Target, endpoint())]);
    assert!(settled(&ext, facts(Some(0), true)).remote_acknowledged);
    assert!(!settled(&ext, facts(Some(0), false)).remote_acknowledged);
    let failed = settled(&ext, facts(Some(1), true));
    assert_eq!(failed.execution, Execution::Failed);
    assert!(!failed.remote_acknowledged, "a failure acknowledges nothing");
    assert_eq!(settled(&ext, not_executed()).impact, Impact::None);
    let write = operation("owned_write", "", vec![binding("record", ResourceRole::Target, record("n1"))]);
    assert!(!settled(&write, facts(Some(0), true)).remote_acknowledged, "an owned write is not remote");
    assert_eq!(
        settled(&write, ProducerFacts { timed_out: true, ..facts(None, false) }).execution,
        Execution::TimedOut
    );
}

#[test]
fn an_executed_call_with_no_exit_code_is_unknown_never_a_reported_failure() {
    // OUT-1 / OUT-2: a runtime hook that carries no exit status, a lost
    // connection. Timeouts and cancellations still say how it ended.
    let ext = operation("external", "", vec![binding("endpoint", ResourceRole::Target, endpoint())]);
    let write = operation("owned_write", "", vec![binding("record", ResourceRole::Target, record("n1"))]);
    for op in [&ext, &write] {
        let unknown = settled(op, facts(None, false));
        assert_eq!(
            (unknown.execution, unknown.impact),
            (Execution::Unknown, Impact::Possible),
            "{}",
            op.tool
        );
        assert!(!unknown.remote_acknowledged);
        let cancelled = settled(op, ProducerFacts { cancelled: true, ..facts(None, false) });
        assert_eq!(cancelled.execution, Execution::Cancelled);
    }
    assert_eq!(
        settled(&ext, facts(Some(7), false)).execution,
        Execution::Failed,
        "an exit code is a failure"
    );
}

#[test]
fn an_owned_write_claims_its_record_with_attachments_as_dependencies() {
    let op = operation(
        "owned_write",
        "",
        vec![
            binding("record", ResourceRole::Target, record("n1")),
            binding("attachment", ResourceRole::Dependency, record("a1")),
        ],
    );
    let Ok(Classification::Effect(plan)) = classify(&op) else { panic!() };
    assert_eq!(plan.scope, PlannedScope::Exact(vec![0]));
    assert_eq!(plan.dependencies, vec![1]);
    assert!(!plan.external && plan.obligations.is_empty(), "owned mutations have no verification");
}

#[test]
fn reads_are_admitted_and_observed_partially() {
    let read = operation("owned_read", "", vec![binding("record", ResourceRole::Source, record("n1"))]);
    assert_eq!(classify(&read), Ok(Classification::ReadOnly));
    let context = |op: BoundOperation| ReadbackContext {
        operation: op,
        outcome: settled(&read, facts(Some(0), false)),
    };
    let asked = readbacks(&context(read.clone())).unwrap();
    assert_eq!(
        asked,
        vec![ReadbackRequest { binding: 0, mechanism: Mechanism::OwnedRead, coverage: Coverage::Partial }]
    );
    let info =
        operation("browser", "session_info", vec![binding("session", ResourceRole::Source, session())]);
    assert_eq!(classify(&info), Ok(Classification::ReadOnly));
    assert_eq!(readbacks(&context(info)).unwrap()[0].mechanism, Mechanism::BrowserSession);
}

#[test]
fn browser_page_operations_are_refused_before_dispatch() {
    let page = operation("browser", "navigate", vec![binding("session", ResourceRole::Source, session())]);
    match classify(&page) {
        Ok(Classification::Refused(why)) => assert!(why.contains("navigate"), "{why}"),
        other => panic!("{other:?}"),
    }
}
