//! The previous contract, `effects:policy@2.0.0`, on this host (SPEC revision
//! 3, POL-1 changed): the components shipped for 2.0.0, kept byte for byte in
//! `tests/fixtures/policy-2.0.0/` with their manifest, load by pin, classify
//! every classifier vector as the 2.1.0 set does, and report their version;
//! a 2.1.0 `content` postcondition is hashed by the host into the obligation
//! it records; and a component must export the version its manifest says.
//! (The 2.0.0 evaluator's conformance is in `conformance.rs`.)

#![allow(clippy::disallowed_methods)] // tests read fixtures with ambient authority

use crate::support;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::completion::Decided;
use effect_ledger::completion::suite::{self, Answerers};
use effect_ledger::digest::Sha256Digest;
use effect_ledger::model::{Classification, EvidenceLedger, Postcondition};
use effect_ledger::policy::{
    Contract, LoadedComponent, PolicyError, PolicyOptions, PolicySet, PolicySource, SandboxLimits, World,
    classify_json, load_unpinned,
};
use support::{PolicyCopy, fixture, operation};

/// The directory of the 2.0.0 fixture set.
fn previous_dir() -> std::path::PathBuf {
    support::root().join("tests/fixtures/policy-2.0.0")
}

/// The 2.0.0 set, through its own manifest.
pub fn previous_source() -> PolicySource {
    PolicySource::Directory {
        dir: Dir::open_ambient_dir(previous_dir(), ambient_authority()).unwrap(),
        manifest_file: "manifest.toml".into(),
        display: "tests/fixtures/policy-2.0.0/manifest.toml".into(),
    }
}

#[test]
fn the_2_0_0_set_loads_by_pin_and_reports_its_version() {
    let mut set = PolicySet::load(&previous_source(), &PolicyOptions::default()).unwrap();
    assert_eq!(set.manifest().contract(), Some(Contract::V2_0));
    let entries = set.manifest().components.clone();
    assert_eq!(entries.len(), 5, "four classifiers and the evaluator");
    for entry in entries.iter().filter(|e| e.world == World::Classifier) {
        let tool = &entry.tools[0];
        let classifier = set.classifier(tool).unwrap();
        assert_eq!((classifier.name(), classifier.contract()), (entry.name.as_str(), Contract::V2_0));
        assert_eq!(classifier.sha256(), entry.sha256);
    }
    let called = set.classifier("write_file").unwrap().classify(&operation()).unwrap();
    assert_eq!(called.report.wit, "effects:policy@2.0.0");
    assert_eq!(set.evaluator().unwrap().contract(), Contract::V2_0);
    let mut current = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    assert_eq!(current.evaluator().unwrap().contract(), Contract::V2_1);
    assert_eq!(current.classifier("write_file").unwrap().contract(), Contract::V2_1);
}

#[test]
fn the_2_0_0_classifiers_pass_every_classifier_vector_and_agree_with_2_1_0() {
    let mut previous = PolicySet::load(&previous_source(), &PolicyOptions::default()).unwrap();
    let mut current = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let files = suite::files(&[support::root().join("tests/classifier-vectors")]).unwrap();
    assert!(files.len() >= 4, "{files:?}");
    let classify_with = |set: &mut PolicySet, operation: &serde_json::Value| {
        let tool = operation["tool"].as_str().ok_or("no tool")?.to_owned();
        let classifier = set.classifier(&tool).map_err(|e| e.to_string())?;
        classify_json(classifier, operation).map_err(|e| e.to_string())
    };
    for file in files {
        let mut answers = Vec::new();
        let mut decide = |_: &EvidenceLedger| -> Decided { unreachable!("classifier vectors only") };
        for set in [&mut previous, &mut current] {
            let mut classify = |operation: &serde_json::Value| {
                let answer = classify_with(set, operation);
                answers.push(answer.clone());
                answer
            };
            let checked =
                suite::check(&file, &mut Answerers { decide: &mut decide, classify: &mut classify });
            assert!(checked.result.passed(), "{}: {:?}", file.display(), checked.result.failures);
        }
        assert_eq!(answers[0], answers[1], "{}: 2.0.0 and 2.1.0 classify alike", file.display());
    }
}

#[test]
fn a_write_claims_the_same_digest_hashed_in_the_guest_2_0_0_or_by_the_host_2_1_0() {
    // The 2.1.0 classify-fs returns the bytes; the 2.0.0 one hashed them
    // itself. The obligation the host records is the same digest.
    let digest = Postcondition::ContentSha256(Sha256Digest::of(b"hi\n").to_string());
    for source in [previous_source(), PolicySource::Shipped] {
        let mut set = PolicySet::load(&source, &PolicyOptions::default()).unwrap();
        let classifier = set.classifier("write_file").unwrap();
        match classifier.classify(&operation()).unwrap().value {
            Classification::Effect(plan) => {
                assert_eq!(plan.obligations.len(), 1);
                assert_eq!(plan.obligations[0].postcondition, digest, "{}", source.describe());
            }
            other => panic!("{}: {other:?}", source.describe()),
        }
    }
}

#[test]
fn content_a_2_1_0_guest_returns_is_hashed_by_the_host_as_bytes() {
    let loaded = load_unpinned(
        "oversized-answer",
        World::Classifier,
        &fixture("oversized-answer"),
        &PolicyOptions::default(),
    );
    let Ok(LoadedComponent::Classifier(mut component)) = loaded else { panic!("the fixture loads") };
    assert_eq!(component.contract(), Contract::V2_1);
    let mut some = operation();
    some.tool = "some_content".into();
    let called = component.classify(&some).unwrap();
    let Classification::Effect(plan) = called.value else { panic!("an effect") };
    // The fixture's bytes, which are not text: hashed as they are.
    let expected = Sha256Digest::of(b"\xff\x00not text\n").to_string();
    assert_eq!(plan.obligations[0].postcondition, Postcondition::ContentSha256(expected));
    // Under a cap smaller than the content, it is refused by its size.
    let limits = SandboxLimits { answer_bytes: 8, ..SandboxLimits::default() };
    let options = PolicyOptions { limits, ..PolicyOptions::default() };
    let loaded = load_unpinned("oversized-answer", World::Classifier, &fixture("oversized-answer"), &options);
    let Ok(LoadedComponent::Classifier(mut capped)) = loaded else { panic!("the fixture loads") };
    match capped.classify(&some) {
        Err(PolicyError::AnswerTooLarge { bytes, limit: 8, .. }) => assert_eq!(bytes, 11),
        other => panic!("expected an oversized answer, got {other:?}"),
    }
}

#[test]
fn a_component_must_export_the_version_its_manifest_says() {
    // The 2.0.0 evaluator, pinned in a manifest that says 2.1.0.
    let copy = PolicyCopy::new();
    let bytes = std::fs::read(previous_dir().join("evaluate.wasm")).unwrap();
    std::fs::write(copy.path("evaluate.wasm"), &bytes).unwrap();
    let manifest = std::fs::read_to_string(copy.path("manifest.toml")).unwrap();
    let shipped = Sha256Digest::of(&support::shipped("evaluate.wasm")).to_string();
    let manifest = manifest.replace(&shipped, &Sha256Digest::of(&bytes).to_string());
    std::fs::write(copy.path("manifest.toml"), &manifest).unwrap();
    let mut set = PolicySet::load_lazily(copy.source(), PolicyOptions::default()).unwrap();
    match set.evaluator().err() {
        Some(error @ PolicyError::WrongWorld { .. }) => {
            let message = error.to_string();
            assert!(message.contains("manifest says it was built for effects:policy@2.1.0"), "{message}");
            assert!(message.contains("exports effects:policy@2.0.0's names"), "{message}");
        }
        other => panic!("expected a wrong-world refusal, got {:?}", other.map(|e| e.to_string())),
    }
    // The same manifest saying 2.0.0 loads it (and no longer the others).
    std::fs::write(copy.path("manifest.toml"), manifest.replace("@2.1.0", "@2.0.0")).unwrap();
    let mut set = PolicySet::load_lazily(copy.source(), PolicyOptions::default()).unwrap();
    assert_eq!(set.evaluator().unwrap().contract(), Contract::V2_0);
    assert_eq!(set.classifier("write_file").err().map(|e| e.kind()), Some("wrong_world"));
}
