//! The shipped policy set, end to end through the embedded default: the
//! manifest loads by pin, `classify-unbound` behaves as SPEC section 6's last
//! row says, every call reports digest, WIT version and fuel (POL-4), and the
//! compiled-component cache is used and survives a damaged entry.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

use crate::support;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::digest::Sha256Digest;
use effect_ledger::model::{Classification, CleanupState, Execution, Impact, PlannedScope, ReadbackContext};
use effect_ledger::policy::{CompileCache, PolicyOptions, PolicySet, PolicySource, WIT_PACKAGE};
use support::{operation, settle_request};

#[test]
fn every_tool_is_claimed_with_unknown_scope_by_the_fallback() {
    let mut set = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let pinned = set.manifest().classifier_for("anything").unwrap().sha256;
    for tool in ["make", "terraform", "deploy_to_prod"] {
        let mut op = operation();
        op.tool = tool.into();
        let classifier = set.classifier(tool).unwrap();
        assert_eq!(classifier.name(), "classify-unbound");
        let called = classifier.classify(&op).unwrap();
        match called.value {
            Classification::Effect(plan) => {
                assert_eq!(plan.scope, PlannedScope::Unknown, "{tool}");
                assert!(plan.obligations.is_empty() && plan.dependencies.is_empty() && !plan.external);
            }
            other => panic!("{tool}: {other:?}"),
        }
        assert_eq!(called.report.sha256, pinned);
        assert_eq!(called.report.wit, WIT_PACKAGE);
        assert!(called.report.fuel_used > 0);
    }
}

#[test]
fn settlement_uses_the_exit_status_alone() {
    let mut set = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let classifier = set.classifier("make").unwrap();
    let first = classifier.settle(&settle_request(Some(0))).unwrap();
    assert!(first.report.fresh_instance);
    assert_eq!(first.value.execution, Execution::ReportedSuccess);
    assert_eq!(first.value.impact, Impact::Possible);
    assert_eq!(first.value.cleanup, CleanupState::Unknown, "cleanup is attested only by a bound producer");

    let mut timed_out = settle_request(Some(137));
    timed_out.facts.timed_out = true;
    timed_out.facts.teardown_dead = Some(true);
    let second = classifier.settle(&timed_out).unwrap();
    assert!(!second.report.fresh_instance, "the warm instance is reused");
    assert_eq!(second.value.execution, Execution::Failed, "TRU-1: no TIMED_OUT from an unbound producer");

    let mut never_ran = settle_request(None);
    never_ran.facts.executed = false;
    let third = classifier.settle(&never_ran).unwrap();
    assert_eq!((third.value.execution, third.value.impact), (Execution::NotExecuted, Impact::None));

    let context = ReadbackContext { operation: operation(), outcome: first.value };
    assert!(classifier.readbacks(&context).unwrap().value.is_empty());
}

#[test]
fn compiled_components_are_cached_and_a_damaged_entry_is_recompiled() {
    let base = tempfile::tempdir().unwrap();
    let open = || {
        let parent = Dir::open_ambient_dir(base.path(), ambient_authority()).unwrap();
        let cache = CompileCache::open_beneath(&parent, "components").unwrap();
        PolicyOptions { cache: Some(cache), ..PolicyOptions::default() }
    };
    let data = base.path().join("components");
    let cached_files = || -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        // Beside the buckets (one per engine configuration) is the cache's secret.
        for bucket in std::fs::read_dir(&data).unwrap() {
            let bucket = bucket.unwrap().path();
            if !bucket.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(bucket).unwrap() {
                files.push(file.unwrap().path());
            }
        }
        files
    };
    let set = PolicySet::load(&PolicySource::Shipped, &open()).unwrap();
    let all = cached_files();
    assert_eq!(all.len(), set.manifest().components.len(), "one compiled entry per component: {all:?}");
    let digest = Sha256Digest::of(&support::shipped("classify-unbound.wasm"));
    let files: Vec<_> = all.into_iter().filter(|f| f.ends_with(format!("{digest}.cwasm"))).collect();
    assert_eq!(files.len(), 1, "{files:?}");

    // A second load uses the entry: it must not be rewritten.
    let written = std::fs::metadata(&files[0]).unwrap().modified().unwrap();
    let mut set = PolicySet::load(&PolicySource::Shipped, &open()).unwrap();
    assert_eq!(std::fs::metadata(&files[0]).unwrap().modified().unwrap(), written);
    set.classifier("make").unwrap().classify(&operation()).unwrap();

    // A truncated entry is discarded, recompiled and replaced.
    let original = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &original[..original.len() / 3]).unwrap();
    let mut set = PolicySet::load(&PolicySource::Shipped, &open()).unwrap();
    set.classifier("make").unwrap().classify(&operation()).unwrap();
    assert_eq!(std::fs::read(&files[0]).unwrap().len(), original.len());
}

#[test]
fn fresh_per_call_instances_answer_exactly_as_warm_ones() {
    use effect_ledger::policy::InstanceReuse;
    let warm_options = PolicyOptions::default();
    let fresh_options = PolicyOptions { reuse: InstanceReuse::FreshPerCall, ..PolicyOptions::default() };
    let mut warm = PolicySet::load(&PolicySource::Shipped, &warm_options).unwrap();
    let mut fresh = PolicySet::load(&PolicySource::Shipped, &fresh_options).unwrap();
    let mut fresh_fuel = Vec::new();
    for _ in 0..3 {
        let a = warm.classifier("make").unwrap().classify(&operation()).unwrap();
        let b = fresh.classifier("make").unwrap().classify(&operation()).unwrap();
        assert_eq!(a.value, b.value, "the same answer either way");
        assert!(b.report.fresh_instance, "FreshPerCall never reuses an instance");
        fresh_fuel.push(b.report.fuel_used);
    }
    // A fresh instance is a pure function of its input, fuel included; a warm
    // one can spend less (its allocator is already set up), which is why the
    // recorded fuel of a warm call is not part of what replay re-derives.
    assert!(fresh_fuel.windows(2).all(|w| w[0] == w[1]), "{fresh_fuel:?}");
    let again = warm.classifier("make").unwrap().classify(&operation()).unwrap();
    assert!(!again.report.fresh_instance);
}

/// A copy of the shipped policies in a directory, `damaged` (a component
/// file name) with one byte changed, as a manifest source.
fn shipped_copy_with_damaged(damaged: &str) -> (tempfile::TempDir, PolicySource) {
    let dir = tempfile::tempdir().unwrap();
    let shipped = support::root().join("policies");
    for entry in std::fs::read_dir(&shipped).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let file = dir.path().join(damaged);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    let source = PolicySource::Directory {
        dir: Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap(),
        manifest_file: "manifest.toml".into(),
        display: "a damaged copy".into(),
    };
    (dir, source)
}

#[test]
fn a_lazily_loaded_set_checks_each_component_when_it_is_first_used() {
    let (_dir, source) = shipped_copy_with_damaged("classify-process.wasm");
    assert!(PolicySet::load(&source, &PolicyOptions::default()).is_err(), "an eager load refuses the set");
    let (_dir, source) = shipped_copy_with_damaged("classify-process.wasm");
    let mut lazy = PolicySet::load_lazily(source, PolicyOptions::default()).unwrap();
    // The component it needs is loaded and checked; the damaged one is
    // refused when (and each time) a call needs it, never skipped.
    assert_eq!(lazy.classifier("write_file").unwrap().name(), "classify-fs");
    for _ in 0..2 {
        let refused = lazy.classifier("bash").err().expect("the damaged classifier is refused at first use");
        assert!(refused.to_string().contains("classify-process"), "{refused}");
    }
    assert!(lazy.evaluator().is_ok());
    let (_dir, source) = shipped_copy_with_damaged("evaluate.wasm");
    let mut lazy = PolicySet::load_lazily(source, PolicyOptions::default()).unwrap();
    assert!(lazy.evaluator().is_err(), "a damaged evaluator is refused when a decision needs it");
}
