//! Native unit tests of the filesystem classifier's plain functions.

use super::*;
use effects_policy_sdk::outcome::not_executed;
use effects_policy_sdk::types::{
    Binding, BoundPreState, FilesystemLocation, FilesystemRoot, Location, ProducerFacts, ResourceRef,
    ResourceRole,
};

fn bound(name: &str) -> Binding {
    Binding {
        name: name.into(),
        resource: ResourceRef {
            role: ResourceRole::Target,
            location: Location::Filesystem(FilesystemLocation {
                root: FilesystemRoot {
                    scope: "s".into(),
                    owner: "o".into(),
                    path: "/r".into(),
                    device: 1,
                    inode: 2,
                },
                path: name.into(),
            }),
            incarnation: "absent:".into(),
            snapshot_sha256: None,
        },
    }
}

fn operation(
    tool: &str,
    input: serde_json::Value,
    names: &[&str],
    pre: Vec<(u32, PreState)>,
) -> BoundOperation {
    BoundOperation {
        tool: tool.into(),
        action: String::new(),
        request_id: "r".into(),
        input_json: input.to_string(),
        input_sha256: String::new(),
        bindings: names.iter().map(|n| bound(n)).collect(),
        pre_states: pre.into_iter().map(|(binding, state)| BoundPreState { binding, state }).collect(),
        producer_bound: true,
    }
}

fn plan(classification: Classification) -> ClaimPlan {
    match classification {
        Classification::Effect(plan) => plan,
        other => panic!("expected an effect, got {other:?}"),
    }
}

/// The postcondition claiming `text` exactly (the host hashes it).
fn content_of(text: &str) -> Postcondition {
    Postcondition::Content(text.as_bytes().to_vec())
}

#[test]
fn a_fenced_write_claims_the_unwrapped_bytes() {
    let op = operation(
        "write_file",
        serde_json::json!({"path": "a.rs", "content": "```rust\nfn x() {}\n```\n"}),
        &["path"],
        vec![],
    );
    let plan = plan(classify(&op).unwrap());
    assert!(matches!(plan.scope, PlannedScope::Exact(ref t) if t == &[0]));
    assert_eq!(plan.obligations[0].postcondition, content_of("fn x() {}\n"));
}

#[test]
fn an_edit_is_derived_from_the_pre_state_or_not_at_all() {
    let input = serde_json::json!({"path": "a", "old_string": "b", "new_string": "c"});
    let with_pre = operation(
        "edit_file",
        input.clone(),
        &["path"],
        vec![(0, PreState::Content(b"a\r\nb\r\n".to_vec()))],
    );
    assert_eq!(plan(classify(&with_pre).unwrap()).obligations[0].postcondition, content_of("a\r\nc\r\n"));
    for pre in [
        vec![],
        vec![(0, PreState::Absent)],
        vec![(0, PreState::Oversized(1 << 30))],
        vec![(0, PreState::Content(b"zzz".to_vec()))],
    ] {
        let op = operation("edit_file", input.clone(), &["path"], pre);
        let plan = plan(classify(&op).unwrap());
        assert!(matches!(plan.scope, PlannedScope::Exact(ref t) if t == &[0]), "still an exact claim");
        assert!(plan.obligations.is_empty(), "no postcondition when the state cannot be derived");
    }
}

const PATCH: &str = "*** Begin Patch\n*** Add File: new.txt\n+hi\n*** Delete File: old.txt\n*** Update File: lib.rs\n-a\n+b\n*** End Patch\n";

#[test]
fn a_patch_claims_every_target_with_its_postcondition() {
    let op = operation(
        "apply_patch",
        serde_json::json!({ "patch": PATCH }),
        &["new.txt", "old.txt", "lib.rs"],
        vec![(2, PreState::Content(b"a\r\n".to_vec()))],
    );
    let plan = plan(classify(&op).unwrap());
    assert!(matches!(plan.scope, PlannedScope::Exact(ref t) if t == &[0, 1, 2]));
    let by_target: Vec<(u32, Postcondition)> =
        plan.obligations.iter().map(|o| (o.target, o.postcondition.clone())).collect();
    assert_eq!(by_target, vec![(0, content_of("hi\n")), (1, Postcondition::Absent), (2, content_of("b\n"))]);
}

#[test]
fn one_underivable_patch_target_drops_every_postcondition() {
    let op = operation(
        "apply_patch",
        serde_json::json!({ "patch": PATCH }),
        &["new.txt", "old.txt", "lib.rs"],
        vec![],
    );
    let plan = plan(classify(&op).unwrap());
    assert!(matches!(plan.scope, PlannedScope::Exact(ref t) if t.len() == 3));
    assert!(plan.obligations.is_empty());
}

#[test]
fn reads_are_admitted_and_read_back_with_honest_coverage() {
    let whole = operation("read_file", serde_json::json!({"path": "a"}), &["path"], vec![]);
    assert_eq!(classify(&whole).unwrap(), Classification::ReadOnly);
    let success = Outcome {
        execution: Execution::ReportedSuccess,
        impact: Impact::Possible,
        cleanup: CleanupState::NotApplicable,
        replayed: false,
        remote_acknowledged: false,
        detached: false,
    };
    let context = |op: BoundOperation| ReadbackContext { operation: op, outcome: success };
    assert_eq!(readbacks(&context(whole)).unwrap()[0].coverage, Coverage::Complete);
    let window = operation("read_file", serde_json::json!({"path": "a", "offset": 3}), &["path"], vec![]);
    assert_eq!(readbacks(&context(window)).unwrap()[0].coverage, Coverage::Partial);
    let listing = operation("ls", serde_json::json!({"path": "."}), &["path"], vec![]);
    assert_eq!(readbacks(&context(listing)).unwrap()[0].mechanism, Mechanism::FilesystemStat);
    let write = operation("write_file", serde_json::json!({"path": "a", "content": ""}), &["path"], vec![]);
    assert!(readbacks(&context(write)).unwrap().is_empty(), "writes are verified by a later read, not here");
    // VER-1: a read that failed (nothing there) is still read back by the
    // host, completely; one that never ran, and a failed listing, are not.
    let outcome = |execution| Outcome { execution, ..success };
    let failed = |op: BoundOperation| ReadbackContext { operation: op, outcome: outcome(Execution::Failed) };
    let missing = operation("read_file", serde_json::json!({"path": "gone.txt"}), &["path"], vec![]);
    assert_eq!(readbacks(&failed(missing.clone())).unwrap()[0].coverage, Coverage::Complete);
    let not_run = ReadbackContext { operation: missing, outcome: outcome(Execution::NotExecuted) };
    assert!(readbacks(&not_run).unwrap().is_empty());
    let listing = operation("ls", serde_json::json!({"path": "gone"}), &["path"], vec![]);
    assert!(readbacks(&failed(listing)).unwrap().is_empty());
}

#[test]
fn other_tools_are_not_ours_and_bound_settlement_has_no_cleanup() {
    assert!(classify(&operation("bash", serde_json::json!({}), &[], vec![])).is_err());
    let request = SettleRequest {
        operation: operation("write_file", serde_json::json!({}), &["path"], vec![]),
        plan: None,
        facts: ProducerFacts { executed: true, exit_code: Some(0), ..not_executed() },
    };
    let outcome = settle(&request);
    assert_eq!(
        (outcome.execution, outcome.cleanup),
        (Execution::ReportedSuccess, CleanupState::NotApplicable)
    );
}

#[test]
fn a_write_that_ran_with_no_exit_code_is_unknown_never_a_failure() {
    // OUT-1 / OUT-2: the reference producers always give an exit code; facts
    // that do not say how the call ended are UNKNOWN.
    let settled = |exit_code| {
        settle(&SettleRequest {
            operation: operation("write_file", serde_json::json!({}), &["path"], vec![]),
            plan: None,
            facts: ProducerFacts { executed: true, exit_code, mutation_attempted: true, ..not_executed() },
        })
    };
    let unknown = settled(None);
    assert_eq!((unknown.execution, unknown.impact), (Execution::Unknown, Impact::Possible));
    assert_eq!(settled(Some(1)).execution, Execution::Failed);
}
