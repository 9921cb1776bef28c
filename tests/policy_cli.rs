//! The policy author's CLI (`effects policy inspect | verify | run`), run as a
//! user would: exit codes, JSON on stdout, one line per problem.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::{PolicyCopy, root};

fn effects(args: &[&str]) -> Output {
    let data = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_effects"))
        .args(args)
        .current_dir(root())
        .env("EFFECTS_DATA_DIR", data.path())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn fixture_path(name: &str) -> String {
    let dir = tempfile::tempdir().unwrap().keep();
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, support::fixture(name)).unwrap();
    path.display().to_string()
}

#[test]
fn verify_passes_on_the_shipped_manifest() {
    let out = effects(&["policy", "verify", "--manifest", "policies/manifest.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let manifest = std::fs::read_to_string(support::root().join("policies/manifest.toml")).unwrap();
    assert_eq!(lines.len(), manifest.matches("[[component]]").count(), "{stdout}");
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{stdout}");
    for name in ["classify-fs", "classify-unbound", "classify-reported", "evaluate"] {
        assert!(stdout.contains(name), "{name}: {stdout}");
    }
    let embedded = effects(&["policy", "verify"]);
    assert!(embedded.status.success(), "{}", text(&embedded.stderr));
}

#[test]
fn verify_names_the_component_whose_byte_was_flipped() {
    let copy = PolicyCopy::new();
    let path = copy.path("classify-unbound.wasm");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0x80;
    std::fs::write(&path, bytes).unwrap();
    let manifest = copy.path("manifest.toml").display().to_string();
    let out = effects(&["policy", "verify", "--manifest", &manifest]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let problems: Vec<&str> = stdout.lines().filter(|l| l.starts_with("problem")).collect();
    assert_eq!(problems.len(), 1, "{stdout}");
    assert!(problems[0].contains("classify-unbound") && problems[0].contains("sha256 mismatch"), "{stdout}");
}

#[test]
fn inspect_reports_world_imports_digest_and_size() {
    let out = effects(&["policy", "inspect", "policies/classify-unbound.wasm", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bytes = support::shipped("classify-unbound.wasm");
    assert_eq!(json["world"], "classifier");
    assert_eq!(json["imports"], Value::Array(vec![]));
    assert_eq!(json["size"], bytes.len());
    assert_eq!(json["sha256"], effect_ledger::digest::Sha256Digest::of(&bytes).to_string());

    let importer = fixture_path("imports-host");
    let out = effects(&["policy", "inspect", &importer]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("imports: poke"), "{}", text(&out.stdout));
}

#[test]
fn run_prints_the_answer_and_the_call_report() {
    let out = effects(&[
        "policy",
        "run",
        "policies/classify-unbound.wasm",
        "--call",
        "classify",
        "--input",
        "tests/data/bound-operation.json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["value"]["effect"]["scope"], "unknown");
    assert_eq!(json["report"]["wit"], "effects:policy@2.0.0");
    assert!(json["report"]["fuel_used"].as_u64().unwrap() > 0);
}

#[test]
fn run_exits_nonzero_saying_which_failure() {
    let looping = fixture_path("endless-loop");
    let input = "tests/data/bound-operation.json";
    let out =
        effects(&["policy", "run", &looping, "--call", "classify", "--input", input, "--fuel", "1000000"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out.stderr).contains("ran out of fuel"), "{}", text(&out.stderr));

    let importer = fixture_path("imports-host");
    let out = effects(&["policy", "run", &importer, "--call", "classify", "--input", input]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("import"), "{}", text(&out.stderr));

    let bad = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bad.path(), "{\"tool\": 7}").unwrap();
    let bad_path = bad.path().display().to_string();
    let out = effects(&[
        "policy",
        "run",
        "policies/classify-unbound.wasm",
        "--call",
        "classify",
        "--input",
        &bad_path,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(&bad_path), "{}", text(&out.stderr));
}

#[test]
fn run_refuses_an_evaluate_input_whose_records_are_out_of_log_order() {
    use effect_ledger::model::{CheckResult, EvidenceLedger, EvidenceRecord, VerifierEvidence};
    let verifier = |position| {
        EvidenceRecord::Verifier(VerifierEvidence {
            position,
            command: "cargo test".into(),
            result: CheckResult::Passed,
            claim: None,
        })
    };
    let ledger = |positions: [u64; 2]| EvidenceLedger {
        resources: Vec::new(),
        required: Vec::new(),
        records: positions.map(verifier).into(),
        answer: "Tests pass.".into(),
    };
    let run = |ledger: &EvidenceLedger| {
        let input = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(input.path(), serde_json::to_vec(ledger).unwrap()).unwrap();
        let path = input.path().display().to_string();
        effects(&["policy", "run", "policies/evaluate.wasm", "--call", "evaluate", "--input", &path])
    };
    let ordered = run(&ledger([1, 2]));
    assert!(ordered.status.success(), "{}", text(&ordered.stderr));
    let unordered = run(&ledger([2, 1]));
    assert_eq!(unordered.status.code(), Some(2), "bad input");
    assert!(
        text(&unordered.stderr).contains("records out of log order: position 1 is not after 2"),
        "{}",
        text(&unordered.stderr)
    );
}
