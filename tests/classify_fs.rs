//! The shipped filesystem classifier as a component, end to end with the real
//! identity and producers: the postcondition digest it claims before a write
//! is the SHA-256 of the bytes the producer then puts on disk (ADP row 1).

#![allow(clippy::disallowed_methods)] // tests build their trees with ambient authority

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::digest::Sha256Digest;
use effect_ledger::identity::{ControlPlane, SealedRoot, Target};
use effect_ledger::model::{
    Binding, BoundOperation, BoundPreState, Classification, PlannedScope, Postcondition, PreState,
    ResourceRole,
};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::producers::fs::{apply_patch, edit_file, write_file};

struct Setup {
    dir: tempfile::TempDir,
    root: SealedRoot,
    policies: PolicySet,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("store")).unwrap();
    let store = Dir::open_ambient_dir(dir.path().join("store"), ambient_authority()).unwrap();
    let control = ControlPlane::new(&store, Some("store".into())).unwrap();
    let handle = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
    let root = SealedRoot::new(handle, "root", "workspace", "agent", control).unwrap();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    Setup { dir, root, policies }
}

/// Binds `paths` (as the host binder would) with pre-states of their content.
fn bind(setup: &Setup, tool: &str, input: serde_json::Value, paths: &[(&str, &str)]) -> BoundOperation {
    let mut bindings = Vec::new();
    let mut pre_states = Vec::new();
    for (index, (name, path)) in paths.iter().enumerate() {
        let resolved = setup.root.resolve(path, ResourceRole::Target).unwrap();
        let state = match std::fs::read(setup.dir.path().join(path)) {
            Ok(bytes) => PreState::Content(bytes),
            Err(_) => PreState::Absent,
        };
        bindings.push(Binding { name: (*name).into(), resource: resolved.resource });
        pre_states.push(BoundPreState { binding: index as u32, state });
    }
    let input_json = input.to_string();
    BoundOperation {
        tool: tool.into(),
        action: String::new(),
        request_id: "req".into(),
        input_sha256: Sha256Digest::of(input_json.as_bytes()).to_string(),
        input_json,
        bindings,
        pre_states,
        producer_bound: true,
    }
}

/// What the producer opens: `path` as resolved now (ID-3).
fn target(setup: &Setup, path: &str) -> Target {
    Target::of(&setup.root.resolve(path, ResourceRole::Target).unwrap())
}

fn claimed_digests(setup: &mut Setup, operation: &BoundOperation) -> Vec<(u32, Postcondition)> {
    let classifier = setup.policies.classifier(&operation.tool).unwrap();
    assert_eq!(classifier.name(), "classify-fs");
    match classifier.classify(operation).unwrap().value {
        Classification::Effect(plan) => {
            assert!(matches!(plan.scope, PlannedScope::Exact(_)));
            plan.obligations.into_iter().map(|o| (o.target, o.postcondition)).collect()
        }
        other => panic!("expected an effect, got {other:?}"),
    }
}

fn digest_on_disk(setup: &Setup, path: &str) -> Postcondition {
    Postcondition::ContentSha256(
        Sha256Digest::of(&std::fs::read(setup.dir.path().join(path)).unwrap()).to_string(),
    )
}

#[test]
fn a_fenced_write_claims_what_the_producer_writes() {
    let mut setup = setup();
    let content = "```python\nprint('hi')\n```\n";
    let operation = bind(
        &setup,
        "write_file",
        serde_json::json!({"path": "a.py", "content": content}),
        &[("path", "a.py")],
    );
    let claimed = claimed_digests(&mut setup, &operation);
    write_file(&setup.root, &target(&setup, "a.py"), content).result.unwrap();
    assert_eq!(claimed, vec![(0, digest_on_disk(&setup, "a.py"))]);
}

#[test]
fn an_edit_of_a_crlf_file_claims_what_the_producer_writes() {
    let mut setup = setup();
    std::fs::write(setup.dir.path().join("w.txt"), "alpha\r\nbeta\r\n").unwrap();
    let input = serde_json::json!({"path": "w.txt", "old_string": "beta", "new_string": "gamma"});
    let operation = bind(&setup, "edit_file", input, &[("path", "w.txt")]);
    let claimed = claimed_digests(&mut setup, &operation);
    edit_file(&setup.root, &target(&setup, "w.txt"), "beta", "gamma", false).result.unwrap();
    assert_eq!(claimed, vec![(0, digest_on_disk(&setup, "w.txt"))]);
}

#[test]
fn a_patch_claims_what_the_producer_writes_and_deletes() {
    let mut setup = setup();
    std::fs::write(setup.dir.path().join("lib.rs"), "fn a() {\r\n    old();\r\n}\r\n").unwrap();
    std::fs::write(setup.dir.path().join("gone.txt"), "x\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: lib.rs\n fn a() {\n-    old();\n+    new();\n }\n*** Add File: add.txt\n+new file\n*** Delete File: gone.txt\n*** End Patch\n";
    let paths = [("lib.rs", "lib.rs"), ("add.txt", "add.txt"), ("gone.txt", "gone.txt")];
    let operation = bind(&setup, "apply_patch", serde_json::json!({ "patch": patch }), &paths);
    let claimed = claimed_digests(&mut setup, &operation);
    apply_patch(&setup.root, &["lib.rs", "add.txt", "gone.txt"].map(|p| target(&setup, p)), patch)
        .result
        .unwrap();
    assert_eq!(
        claimed,
        vec![
            (0, digest_on_disk(&setup, "lib.rs")),
            (1, digest_on_disk(&setup, "add.txt")),
            (2, Postcondition::Absent)
        ]
    );
    assert!(!setup.dir.path().join("gone.txt").exists());
}

#[test]
fn reads_are_admitted_without_a_claim() {
    let mut setup = setup();
    std::fs::write(setup.dir.path().join("r.txt"), "r\n").unwrap();
    let operation = bind(&setup, "read_file", serde_json::json!({"path": "r.txt"}), &[("path", "r.txt")]);
    let called = setup.policies.classifier("read_file").unwrap().classify(&operation).unwrap();
    assert_eq!(called.value, Classification::ReadOnly);
}
