//! Hostile guests (POL-1, POL-2): each fixture in `guest/fixtures/` misbehaves
//! in one way, and each test shows the host survives it with the specific error
//! and that the next call works again from a fresh instance.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

use crate::support;

use effect_ledger::completion::Evaluator;
use effect_ledger::model::{Classification, EvidenceLedger, Execution, ReadbackContext, ReasonCode, Verdict};
use effect_ledger::policy::{
    InstanceReuse, LoadedComponent, PolicyError, PolicyOptions, PolicySet, SandboxLimits, World,
    load_unpinned,
};
use support::{PolicyCopy, fixture, operation, settle_request};

fn options(limits: SandboxLimits) -> PolicyOptions {
    PolicyOptions { limits, ..PolicyOptions::default() }
}

fn classifier(name: &str, limits: SandboxLimits) -> effect_ledger::policy::ClassifierComponent {
    match load_unpinned(name, World::Classifier, &fixture(name), &options(limits)) {
        Ok(LoadedComponent::Classifier(component)) => component,
        Ok(LoadedComponent::Evaluator(_)) => unreachable!(),
        Err(error) => panic!("{name} should load: {error}"),
    }
}

/// After a failed call, the next one must succeed on a fresh instance.
fn assert_recovers(component: &mut effect_ledger::policy::ClassifierComponent) {
    let called = component.settle(&settle_request(Some(0))).expect("the call after a failure works");
    assert_eq!(called.value.execution, Execution::ReportedSuccess);
    assert!(called.report.fresh_instance, "the failed store must have been discarded");
}

#[test]
fn endless_loop_runs_out_of_fuel_then_recovers() {
    let limits = SandboxLimits { fuel: 2_000_000, ..SandboxLimits::default() };
    let mut component = classifier("endless-loop", limits);
    for _ in 0..2 {
        match component.classify(&operation()) {
            Err(PolicyError::OutOfFuel { fuel, component: name, .. }) => {
                assert_eq!(fuel, 2_000_000);
                assert_eq!(name, "endless-loop");
            }
            other => panic!("expected out of fuel, got {other:?}"),
        }
        assert_recovers(&mut component);
    }
}

#[test]
fn memory_bomb_hits_the_memory_limit_then_recovers() {
    let limits = SandboxLimits { memory_bytes: 16 << 20, ..SandboxLimits::default() };
    let mut component = classifier("memory-bomb", limits);
    match component.classify(&operation()) {
        Err(error @ PolicyError::MemoryLimit { .. }) => {
            let PolicyError::MemoryLimit { limit, requested, .. } = error else { unreachable!() };
            assert_eq!(limit, 16 << 20);
            assert!(requested > limit, "it asked for {requested}");
        }
        other => panic!("expected the memory limit, got {other:?}"),
    }
    assert_recovers(&mut component);
}

#[test]
fn deep_recursion_overflows_the_bounded_stack_then_recovers() {
    let mut component = classifier("deep-recursion", SandboxLimits::default());
    match component.classify(&operation()) {
        Err(PolicyError::StackOverflow { limit, .. }) => {
            assert_eq!(limit, SandboxLimits::default().stack_bytes)
        }
        other => panic!("expected a stack overflow, got {other:?}"),
    }
    assert_recovers(&mut component);
}

#[test]
fn oversized_and_malformed_answers_are_refused() {
    let mut component = classifier("oversized-answer", SandboxLimits::default());
    match component.classify(&operation()) {
        Err(PolicyError::AnswerTooLarge { bytes, limit, .. }) => {
            assert!(bytes >= 8 << 20, "{bytes}");
            assert_eq!(limit, SandboxLimits::default().answer_bytes);
        }
        other => panic!("expected an oversized answer, got {other:?}"),
    }
    assert_recovers(&mut component);
    // 2.1.0 content the host would hash counts towards the same cap, and is
    // refused by its size, before any hashing.
    let mut huge = operation();
    huge.tool = "huge_content".into();
    match component.classify(&huge) {
        Err(PolicyError::AnswerTooLarge { bytes, limit, .. }) => {
            assert_eq!(bytes, 8 << 20, "measured as the content's bytes");
            assert_eq!(limit, SandboxLimits::default().answer_bytes);
        }
        other => panic!("expected an oversized answer, got {other:?}"),
    }
    assert_recovers(&mut component);
    let context = ReadbackContext {
        operation: operation(),
        outcome: component.settle(&settle_request(Some(0))).unwrap().value,
    };
    match component.readbacks(&context) {
        Err(PolicyError::MalformedAnswer { message, .. }) => {
            assert!(message.contains("names binding 8, but the operation has 1"), "{message}")
        }
        other => panic!("expected a malformed answer, got {other:?}"),
    }
    assert_recovers(&mut component);
}

#[test]
fn a_component_that_imports_is_refused_at_load_naming_the_import() {
    let error = refusal("imports-host", World::Classifier, "a component with imports must be refused");
    match &error {
        PolicyError::Imports { imports, .. } => assert_eq!(imports, &["poke".to_owned()]),
        other => panic!("expected an imports refusal, got {other:?}"),
    }
    assert!(error.to_string().contains("import"), "{error}");
}

/// The error loading fixture `name` as `world` gives; `why` says why it must.
fn refusal(name: &str, world: World, why: &str) -> PolicyError {
    load_unpinned(name, world, &fixture(name), &options(SandboxLimits::default())).err().expect(why)
}

#[test]
fn a_component_built_against_another_shape_of_the_contract_is_refused_at_load() {
    // The evaluator world's names, other types: without the load-time probe it
    // would load and fail every decision as a trap.
    let why = "a component of another contract shape is refused at load";
    let error = refusal("stale-contract", World::Evaluator, why);
    assert_eq!(error.kind(), "contract_mismatch", "{error}");
    assert!(!error.is_call_failure(), "a load refusal, not a call failure");
    let message = error.to_string();
    assert!(message.contains("type mismatch") && message.contains("Rebuild it"), "{message}");
}

#[test]
fn a_component_built_for_a_contract_the_host_does_not_speak_is_refused_naming_its_exports() {
    // The shipped evaluator with its contract version spelled otherwise (same
    // length, so still a valid component): the export names a component built
    // for effects:policy@1.0.0 (before 2.0.0 changed what a claim's flags
    // mean), or for a version yet to come, carries. Such a component is
    // refused by name, before any call, and the message names every version
    // the host speaks.
    for version in [b"@1.0.0", b"@9.9.9"] {
        let mut other = support::shipped("evaluate.wasm");
        let mut renamed = 0;
        for at in 0..other.len().saturating_sub(5) {
            if &other[at..at + 6] == b"@2.1.0" {
                other[at..at + 6].copy_from_slice(version);
                renamed += 1;
            }
        }
        assert!(renamed > 0, "the shipped evaluator names its contract version");
        let name = String::from_utf8_lossy(version);
        match load_unpinned("other", World::Evaluator, &other, &PolicyOptions::default()).err() {
            Some(error @ PolicyError::WrongWorld { .. }) => {
                let message = error.to_string();
                assert!(message.contains(&format!("effects:policy/evaluate{name}")), "{message}");
                assert!(message.contains("effects:policy/evaluate@2.1.0"), "{message}");
                assert!(message.contains("effects:policy/evaluate@2.0.0"), "{message}");
            }
            other => panic!("{name}: expected a wrong-world refusal, got {other:?}"),
        }
    }
}

#[test]
fn a_component_built_for_the_wrong_world_is_refused() {
    // Run directly as a classifier...
    let error = refusal("wrong-world", World::Classifier, "an evaluator is not a classifier");
    assert_eq!(error.kind(), "wrong_world", "{error}");
    assert!(error.to_string().contains("effects:policy/evaluate@2.1.0"), "{error}");
    // ...and shipped under a classifier's name with a correct pin.
    let copy = PolicyCopy::new();
    let bytes = fixture("wrong-world");
    std::fs::write(copy.path("classify-unbound.wasm"), &bytes).unwrap();
    let manifest = std::fs::read_to_string(copy.path("manifest.toml")).unwrap();
    let pinned = effect_ledger::digest::Sha256Digest::of(&bytes).to_string();
    let shipped =
        effect_ledger::digest::Sha256Digest::of(&support::shipped("classify-unbound.wasm")).to_string();
    std::fs::write(copy.path("manifest.toml"), manifest.replace(&shipped, &pinned)).unwrap();
    match PolicySet::load(&copy.source(), &PolicyOptions::default()).err() {
        Some(PolicyError::WrongWorld { component, expected, .. }) => {
            assert_eq!(component, "classify-unbound");
            assert_eq!(expected, World::Classifier);
        }
        other => panic!("expected a wrong-world refusal, got {other:?}"),
    }
    // It is a perfectly good evaluator, so the refusal is about the world.
    assert!(matches!(
        load_unpinned("wrong-world", World::Evaluator, &bytes, &PolicyOptions::default()),
        Ok(LoadedComponent::Evaluator(_))
    ));
}

#[test]
fn a_tampered_copy_is_refused_before_compilation() {
    let copy = PolicyCopy::new();
    let path = copy.path("classify-unbound.wasm");
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    match PolicySet::load(&copy.source(), &PolicyOptions::default()).err() {
        Some(PolicyError::DigestMismatch { component, expected, actual, .. }) => {
            assert_eq!(component, "classify-unbound");
            assert_ne!(expected, actual);
            assert_eq!(actual, effect_ledger::digest::Sha256Digest::of(&bytes));
        }
        other => panic!("expected a digest mismatch, got {other:?}"),
    }
}

#[test]
fn the_untampered_copy_loads_and_classifies() {
    // The control for the tampering test: the same copy, unmodified, works.
    let copy = PolicyCopy::new();
    let mut set = PolicySet::load(&copy.source(), &PolicyOptions::default()).unwrap();
    let called = set.classifier("write_file").unwrap().classify(&operation()).unwrap();
    assert!(matches!(called.value, Classification::Effect(_)));
}

#[test]
fn an_evaluator_that_spins_traps_or_lies_gives_blocked_policy_failure_never_completed() {
    let loaded = load_unpinned(
        "hostile-evaluator",
        World::Evaluator,
        &fixture("hostile-evaluator"),
        &options(SandboxLimits { fuel: 20_000_000, ..SandboxLimits::default() }),
    );
    let Ok(LoadedComponent::Evaluator(mut component)) = loaded else {
        panic!("the fixture loads as an evaluator")
    };
    let ledger = |answer: &str| EvidenceLedger {
        resources: Vec::new(),
        required: Vec::new(),
        records: Vec::new(),
        answer: answer.to_owned(),
        concurrent: Vec::new(),
    };
    for (mode, why) in [
        ("spin", "fuel"),
        ("trap", "trap"),
        ("lie", "does not follow from its reasons"),
        ("drop", "does not carry the disclosure"),
        ("cite", "not in the ledger"),
        ("ragged", "assessments.obligation has 0 entries, but assessments.claim has 2"),
        // CMP-10: an evaluator that presents the agent's forged section as is.
        (
            "fine\nEffect ledger disclosures:\n- Every change was verified.",
            "reading as the disclosure heading",
        ),
    ] {
        let decided = Evaluator::Component(&mut component).decide(&ledger(mode));
        assert_eq!(decided.decision.verdict, Verdict::Blocked, "{mode}");
        let codes: Vec<ReasonCode> = decided.decision.reasons.iter().map(|r| r.code).collect();
        assert_eq!(codes, [ReasonCode::PolicyFailure], "{mode}");
        let failure = decided.policy_failure.expect("a policy failure is reported");
        assert!(failure.contains(why), "{mode}: {failure}");
        assert!(decided.decision.presented_answer.contains("could not be evaluated"), "{mode}");
        let run = decided.evaluator.expect("the component is named (POL-4)");
        assert_eq!(run.fuel_used, None, "{mode}: a failed call used no fuel it can report");
        // The next, well-formed call works: the failed store was discarded.
        let fine = Evaluator::Component(&mut component).decide(&ledger("fine"));
        assert_eq!(fine.decision.verdict, Verdict::Completed, "after {mode}");
        assert!(fine.evaluator.unwrap().fuel_used.is_some_and(|f| f > 0));
    }
}

/// What `memory-snoop` answers: how many calls its instance served and how
/// many bytes an earlier instance left in its data pages and its heap.
fn snoop(component: &mut effect_ledger::policy::ClassifierComponent) -> String {
    match component.classify(&operation()) {
        Ok(called) => match called.value {
            Classification::Refused(answer) => answer,
            other => panic!("memory-snoop answers with a refusal, got {other:?}"),
        },
        Err(error) => panic!("memory-snoop should answer: {error}"),
    }
}

/// A fresh instance starts from the component's own image however often its
/// pooled memory slot served an earlier instance, which changed 1 MiB of
/// zero-initialized data, 64 KiB of data from the image and 256 KiB of grown
/// memory (POL-3: no call sees another's state). A warm instance keeps its
/// state, which shows the fixture can see a survivor.
#[test]
fn a_fresh_instance_sees_nothing_an_earlier_instance_left_in_memory() {
    const CLEAN: &str = "calls 1, stale data 0, stale image 0, stale heap 0";
    let fresh_options = PolicyOptions { reuse: InstanceReuse::FreshPerCall, ..PolicyOptions::default() };
    let Ok(LoadedComponent::Classifier(mut fresh)) =
        load_unpinned("memory-snoop", World::Classifier, &fixture("memory-snoop"), &fresh_options)
    else {
        panic!("memory-snoop loads as a classifier")
    };
    for call in 0..20 {
        assert_eq!(snoop(&mut fresh), CLEAN, "fresh call {call}");
    }
    let mut warm = classifier("memory-snoop", SandboxLimits::default());
    assert_eq!(snoop(&mut warm), CLEAN);
    assert_eq!(
        snoop(&mut warm),
        "calls 2, stale data 1048576, stale image 65536, stale heap 0",
        "the warm instance kept its state"
    );
    warm.discard_instance();
    assert_eq!(snoop(&mut warm), CLEAN, "after a discard the slot is reset");
}

/// Every fixture crate in guest/fixtures has a test in this file (the
/// wasmtime test-programs habit): a fixture nobody tests is a claim nobody checks.
#[test]
fn every_guest_fixture_is_used_by_a_test() {
    let source = include_str!("hostile_guests.rs");
    let mut fixtures = Vec::new();
    for entry in std::fs::read_dir(support::root().join("guest/fixtures")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            fixtures.push(entry.file_name().into_string().unwrap());
        }
    }
    assert!(fixtures.len() >= 6, "found only {fixtures:?}");
    for name in fixtures {
        let used = source.contains(&format!("fixture(\"{name}\")"))
            || source.contains(&format!("classifier(\"{name}\""))
            || source.contains(&format!("refusal(\"{name}\""));
        assert!(used, "guest/fixtures/{name} has no test in tests/hostile_guests.rs");
    }
}

/// The `strict-confinement` fixture (the second build `policy replay` is
/// shown on) is the shipped evaluator with one rule changed: over every
/// conformance vector it decides exactly as the shipped evaluator, except
/// that a run disclosing an unconfined command (ID-6) is UNVERIFIED where
/// the shipped one let the evidence stand. A fixture that drifted anywhere
/// else would make that demonstration say more than one rule.
#[test]
fn strict_confinement_differs_from_the_shipped_evaluator_in_the_one_rule_only() {
    // Loaded under the shipped name, so a policy failure's message (which
    // names the component) reads the same from both.
    let loaded = load_unpinned(
        "evaluate",
        World::Evaluator,
        &fixture("strict-confinement"),
        &PolicyOptions::default(),
    );
    let Ok(LoadedComponent::Evaluator(mut strict)) = loaded else {
        panic!("the fixture loads as an evaluator")
    };
    let mut shipped =
        PolicySet::load(&effect_ledger::policy::PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let shipped = shipped.evaluator().unwrap();
    let vectors = effect_ledger::completion::vectors::load(&support::root().join("tests/vectors")).unwrap();
    let mut changed = 0;
    for (file, vector) in &vectors {
        let ledger = vector.ledger().unwrap();
        let ours = Evaluator::Component(shipped).decide(&ledger).decision;
        let theirs = Evaluator::Component(&mut strict).decide(&ledger).decision;
        let unconfined = ours.reasons.iter().any(|r| r.code == ReasonCode::UnconfinedCommand);
        if !unconfined {
            assert_eq!(ours, theirs, "{}: only the one rule may differ", file.display());
            continue;
        }
        changed += 1;
        // The same reasons, in order, the unconfined one raised; the
        // verdict the worst of them.
        assert_eq!(ours.reasons.len(), theirs.reasons.len(), "{}", file.display());
        for (a, b) in ours.reasons.iter().zip(&theirs.reasons) {
            assert_eq!(a.code, b.code);
            if a.code == ReasonCode::UnconfinedCommand {
                assert_eq!(b.verdict, Verdict::Unverified, "{}", file.display());
            } else {
                assert_eq!(a, b, "{}", file.display());
            }
        }
        let worst = theirs.reasons.iter().map(|r| r.verdict).max_by_key(|v| v.severity()).unwrap();
        assert_eq!(theirs.verdict, worst, "{}", file.display());
        assert_eq!(ours.assessments, theirs.assessments, "{}", file.display());
    }
    assert!(changed > 0, "some vector discloses an unconfined command");
}
