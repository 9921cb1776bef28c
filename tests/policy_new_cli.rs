//! `effects policy new`, run as a policy author would, into a copy of the
//! guest workspace's manifests: the files it writes, the vectors they carry
//! passing against the policies they start from, and every refusal leaving
//! nothing behind. That the generated crates compile and pass as components
//! is `cargo xtask check-scaffold` (run by `cargo xtask test`): it needs the
//! wasm toolchain.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn effects(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_effects")).args(args).current_dir(cwd).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A guest workspace with the real workspace manifest and lock file and the
/// directory of the shipped evaluator's modules (empty: nothing here builds).
fn guest() -> (tempfile::TempDir, PathBuf) {
    let base = tempfile::tempdir().unwrap();
    let guest = base.path().join("guest");
    std::fs::create_dir_all(guest.join("policies/evaluate/src")).unwrap();
    for file in ["Cargo.toml", "Cargo.lock"] {
        std::fs::copy(support::root().join("guest").join(file), guest.join(file)).unwrap();
    }
    (base, guest)
}

/// Every file beneath `dir`, relative to it.
fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_classifier_crate_names_its_tools_and_its_vector_passes_against_the_floor_it_starts_from() {
    let (base, guest) = guest();
    let out = effects(
        base.path(),
        &["policy", "new", "classifier", "classify-deploy", "--tool", "deploy", "--tool", "ship", "--json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["world"], "classifier");
    assert_eq!(report["crate"], "guest/policies/classify-deploy");
    let crate_dir = guest.join("policies/classify-deploy");
    assert_eq!(files(&crate_dir), ["Cargo.toml", "src/lib.rs", "vectors/classify-deploy.json"]);
    assert_eq!(report["files"].as_array().unwrap().len(), 3);

    let manifest: toml::Table =
        std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap().parse().expect("valid TOML");
    assert_eq!(manifest["package"]["name"].as_str(), Some("classify-deploy"));
    let effects_table = &manifest["package"]["metadata"]["effects"];
    assert_eq!(effects_table["world"].as_str(), Some("classifier"));
    assert_eq!(effects_table["shipped"].as_bool(), Some(false), "shipped only when its author says so");
    let tools: Vec<&str> =
        effects_table["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tools, ["deploy", "ship"]);
    let source = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap();
    assert!(source.contains("export_classifier!") && source.contains("#[test]"), "{source}");
    assert!(!source.contains("{{"), "every placeholder filled: {source}");

    // The vector states the floor the crate starts from: the shipped
    // fallback classifier, which classifies the same way, passes it.
    let vector = crate_dir.join("vectors/classify-deploy.json");
    let unbound = support::root().join("policies/classify-unbound.wasm");
    let test = effects(
        &support::root(),
        &["policy", "test", "--json", "--classifier", unbound.to_str().unwrap(), vector.to_str().unwrap()],
    );
    assert!(test.status.success(), "{}{}", String::from_utf8_lossy(&test.stdout), stderr(&test));
    assert!(String::from_utf8_lossy(&test.stdout).contains(r#""summary":{"failed":0,"passed":1"#));
}

#[test]
fn an_evaluator_crate_starts_as_the_shipped_evaluator_and_its_vector_passes_against_it() {
    let (base, guest) = guest();
    let out = effects(base.path(), &["policy", "new", "evaluator", "strict"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("created guest/policies/strict (evaluator"), "{text}");
    assert!(text.contains("cargo xtask policies -p strict"), "it says what to run next: {text}");
    let crate_dir = guest.join("policies/strict");
    let source = std::fs::read_to_string(crate_dir.join("src/lib.rs")).unwrap();
    assert!(source.contains(r#"#[path = "../../evaluate/src/decide.rs"]"#), "{source}");
    assert!(source.contains("export_evaluator!") && source.contains("#[test]"));
    let vector = crate_dir.join("vectors/strict.json");
    let test = effects(&support::root(), &["policy", "test", "--json", vector.to_str().unwrap()]);
    assert!(test.status.success(), "{}{}", String::from_utf8_lossy(&test.stdout), stderr(&test));
    assert!(String::from_utf8_lossy(&test.stdout).contains(r#""summary":{"failed":0,"passed":1"#));
}

#[test]
fn a_refused_new_writes_nothing_and_says_why() {
    let (base, guest) = guest();
    let cases: [(&[&str], &str); 8] = [
        (&["classifier", "Classify", "--tool", "x"], "not a policy name"),
        (&["classifier", "../escape", "--tool", "x"], "not a policy name"),
        (&["classifier", "classify-x"], "add --tool"),
        (&["classifier", "classify-x", "--tool", "a\"b"], "a tool name is"),
        (&["classifier", "classify-x", "--tool", "x", "--tool", "x"], "given twice"),
        (&["evaluator", "strict", "--tool", "x"], "serves no tools"),
        // Every package of the workspace and its dependencies is in the lock.
        (&["classifier", "evaluate", "--tool", "x"], "already in guest/Cargo.lock"),
        (&["classifier", "wit-bindgen", "--tool", "x"], "already in guest/Cargo.lock"),
    ];
    for (args, expected) in cases {
        let out = effects(base.path(), &[&["policy", "new"][..], args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(files(&guest.join("policies")), Vec::<String>::new(), "nothing was written");

    // An existing crate is never overwritten.
    let ok = effects(base.path(), &["policy", "new", "classifier", "mine", "--tool", "x"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let lib = guest.join("policies/mine/src/lib.rs");
    std::fs::write(&lib, "// the author's work\n").unwrap();
    let again = effects(base.path(), &["policy", "new", "evaluator", "mine"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("exists") && stderr(&again).contains("nothing is overwritten"));
    assert_eq!(std::fs::read_to_string(&lib).unwrap(), "// the author's work\n");

    // Outside the repository root: no guest workspace, and a hint.
    let elsewhere = tempfile::tempdir().unwrap();
    let lost = effects(elsewhere.path(), &["policy", "new", "evaluator", "strict"]);
    assert_eq!(lost.status.code(), Some(2));
    assert!(stderr(&lost).contains("no guest workspace") && stderr(&lost).contains("--guest"));
    std::fs::create_dir(elsewhere.path().join("guest")).unwrap();
    std::fs::write(elsewhere.path().join("guest/Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    let wrong = effects(elsewhere.path(), &["policy", "new", "evaluator", "strict"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(stderr(&wrong).contains("is not the guest workspace"), "{}", stderr(&wrong));
    assert!(!elsewhere.path().join("guest/policies").exists());

    // A `policies` that is a symlink (here to the fixtures) is not followed.
    let (base, guest) = self::guest();
    std::fs::create_dir(guest.join("fixtures")).unwrap();
    std::fs::remove_dir_all(guest.join("policies")).unwrap();
    std::os::unix::fs::symlink("fixtures", guest.join("policies")).unwrap();
    let out = effects(base.path(), &["policy", "new", "classifier", "sneaky", "--tool", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is a symlink; not followed"), "{}", stderr(&out));
    assert_eq!(files(&guest.join("fixtures")), Vec::<String>::new(), "nothing written through the link");
}
