//! Conformance: every vector in `tests/vectors/` (INV, VER, CMP) against the
//! shipped evaluator component and against the same evaluator compiled
//! natively, so the guest and its native build can never disagree silently.
//! Also the rules no vector can express: a broken vector file is an error, not
//! a skip, and the vectors cover every rule family the issue names.

#![allow(clippy::disallowed_methods)] // tests write vector files with ambient authority

mod support;

use effect_ledger::completion::vectors::{self, VectorResult};
use effect_ledger::completion::{Evaluator, evaluator_of};
use effect_ledger::policy::{NativeEvaluator, PolicyOptions, PolicySet, PolicySource};

fn vectors_dir() -> std::path::PathBuf {
    support::root().join("tests/vectors")
}

fn assert_all_pass(results: &[VectorResult], against: &str) {
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.passed())
        .map(|r| {
            format!("{} ({}: {}):\n    {}", r.file.display(), r.rule, r.title, r.failures.join("\n    "))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} vectors failed against {against}:\n{}",
        failed.len(),
        results.len(),
        failed.join("\n")
    );
}

#[test]
fn every_vector_passes_against_the_native_build() {
    let results = vectors::run(&vectors_dir(), &mut Evaluator::Native(NativeEvaluator)).unwrap();
    assert_all_pass(&results, "the native build");
}

#[test]
fn every_vector_passes_against_the_shipped_component() {
    let mut set = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let results = vectors::run(&vectors_dir(), &mut evaluator_of(set.evaluator())).unwrap();
    assert_all_pass(&results, "the shipped component");
}

#[test]
fn native_and_component_decide_every_vector_identically() {
    let mut set = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let mut component = evaluator_of(set.evaluator());
    let mut native = Evaluator::Native(NativeEvaluator);
    for (file, vector) in vectors::load(&vectors_dir()).unwrap() {
        let ledger = vector.ledger().unwrap();
        let (a, b) = (component.decide(&ledger), native.decide(&ledger));
        match (&a.policy_failure, &b.policy_failure) {
            // Refusals agree in substance; the component's message names it.
            (Some(theirs), Some(ours)) => assert!(theirs.contains(ours.as_str()), "{}", file.display()),
            _ => assert_eq!(a.decision, b.decision, "{}", file.display()),
        }
    }
}

#[test]
fn vectors_cover_every_rule_family() {
    let loaded = vectors::load(&vectors_dir()).unwrap();
    let rules: std::collections::BTreeSet<&str> = loaded.iter().map(|(_, v)| v.rule.as_str()).collect();
    for rule in [
        "INV-1", "INV-2", "INV-3", "VER-1", "VER-2", "VER-3", "CMP-2", "CMP-3", "CMP-4", "CMP-5", "CMP-6",
        "CMP-7", "CMP-8", "CMP-9", "CMP-10", "CMP-11",
    ] {
        assert!(rules.contains(rule), "no vector for {rule}");
    }
}

#[test]
fn a_wrong_expectation_fails_and_a_broken_file_is_an_error() {
    // The checker can fail: flip one vector's verdict and it must say so.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(vectors_dir().join("ver-1-verified.json")).unwrap();
    std::fs::write(dir.path().join("flipped.json"), text.replace("\"COMPLETED\"", "\"FAILED\"")).unwrap();
    let results = vectors::run(dir.path(), &mut Evaluator::Native(NativeEvaluator)).unwrap();
    assert!(!results[0].passed());
    assert!(
        results[0].failures[0].contains("verdict Completed, expected Failed"),
        "{:?}",
        results[0].failures
    );
    std::fs::write(dir.path().join("zz-broken.json"), "{\"rule\": \"CMP-1\"").unwrap();
    let error = vectors::run(dir.path(), &mut Evaluator::Native(NativeEvaluator)).unwrap_err();
    assert!(error.contains("zz-broken.json") && error.contains("not a valid vector"), "{error}");
}
