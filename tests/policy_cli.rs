//! The policy author's CLI (`effects policy inspect | verify | run | test`),
//! run as a user would: exit codes, JSON on stdout, one line per problem;
//! `test`'s rule coverage against the rules document.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

use crate::support;

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
    assert_eq!(json["report"]["wit"], "effects:policy@2.1.0");
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
        concurrent: Vec::new(),
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

/// `effects policy test --native --rules RULES DIR --json`: the exit code,
/// the coverage rows and the summary.
fn coverage_of(dir: &str, rules: &str) -> (Option<i32>, Vec<Value>, Value, String) {
    let out = effects(&["policy", "test", "--native", "--json", "--rules", rules, dir]);
    let lines: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let coverage = lines.iter().find_map(|l| l["coverage"].as_array().cloned()).expect("a coverage line");
    let summary = lines.last().unwrap()["summary"].clone();
    (out.status.code(), coverage, summary, text(&out.stderr))
}

fn row<'a>(coverage: &'a [Value], rule: &str) -> &'a Value {
    coverage.iter().find(|r| r["rule"] == rule).unwrap_or_else(|| panic!("no coverage row for {rule}"))
}

#[test]
fn test_reports_coverage_and_the_shipped_vectors_cover_every_rule_the_docs_require() {
    let rules = std::fs::read_to_string(root().join("docs/rules.md")).unwrap();
    let table = effect_ledger::completion::coverage::RuleTable::parse(&rules, "docs/rules.md").unwrap();
    let (code, coverage, summary, stderr) = coverage_of("tests/vectors", "docs/rules.md");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(summary["uncovered"], serde_json::json!([]), "{summary}");
    for (rule, requirement) in &table.rules {
        let vectors = row(&coverage, rule)["vectors"].as_array().unwrap().len();
        if *requirement == effect_ledger::completion::coverage::Requirement::Required {
            assert!(vectors > 0, "{rule} is required and has no vector");
        }
    }
    // A vector's `rules` list counts: CL-2 is no vector's `rule`.
    let cl2 = row(&coverage, "CL-2")["vectors"].as_array().unwrap();
    assert!(cl2.iter().any(|v| v == "ver-1-verified.json"), "{cl2:?}");
    // The text output has the table, defaulting to docs/rules.md.
    let out = effects(&["policy", "test", "--native"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("coverage of the rules docs/rules.md lists:"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.trim_start().starts_with("CMP-2 ") && l.ends_with("required")),
        "{stdout}"
    );
}

#[test]
fn test_fails_naming_a_required_rule_that_no_vector_exercises() {
    // The shipped docs, with one more rule required: a row right below the
    // header of the section's table.
    let docs = tempfile::NamedTempFile::new().unwrap();
    let shipped = std::fs::read_to_string(root().join("docs/rules.md")).unwrap();
    let section = shipped.find(effect_ledger::completion::coverage::SECTION).unwrap();
    let header = section + shipped[section..].find("| --- | --- |\n").unwrap() + "| --- | --- |\n".len();
    std::fs::write(
        docs.path(),
        format!("{}| `CMP-99` | required |\n{}", &shipped[..header], &shipped[header..]),
    )
    .unwrap();
    let path = docs.path().display().to_string();
    let (code, coverage, summary, stderr) = coverage_of("tests/vectors", &path);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(summary["failed"], 0, "every vector passed; coverage alone fails it");
    assert_eq!(summary["uncovered"], serde_json::json!(["CMP-99"]));
    assert_eq!(row(&coverage, "CMP-99")["vectors"], serde_json::json!([]));
    assert!(stderr.contains("no vector exercises CMP-99") && stderr.contains(&path), "{stderr}");
    let out = effects(&["policy", "test", "--native", "--rules", &path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("required, UNCOVERED"), "{}", text(&out.stdout));

    // A vector that names it in its `rules` list covers it.
    let vectors = tempfile::tempdir().unwrap();
    let vector = std::fs::read_to_string(root().join("tests/vectors/ver-1-verified.json")).unwrap();
    let tagged = vector.replacen("\"rules\": [\"CL-2\"]", "\"rules\": [\"CL-2\", \"CMP-99\"]", 1);
    assert_ne!(tagged, vector);
    std::fs::write(vectors.path().join("ver-1-verified.json"), tagged).unwrap();
    let table = "## Conformance vectors per rule\n\n| rule | vectors |\n| --- | --- |\n\
                 | `VER-1` | required |\n| `CMP-99` | required |\n| `OUT-1` | pending: later |\n";
    std::fs::write(docs.path(), table).unwrap();
    let dir = vectors.path().display().to_string();
    let (code, coverage, summary, stderr) = coverage_of(&dir, &path);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(row(&coverage, "CMP-99")["vectors"], serde_json::json!(["ver-1-verified.json"]));
    assert_eq!(row(&coverage, "OUT-1")["vectors"], serde_json::json!([]), "pending is listed, not required");
    assert_eq!(summary["uncovered"], serde_json::json!([]));
    std::fs::write(vectors.path().join("ver-1-verified.json"), vector).unwrap();
    let (code, _, summary, _) = coverage_of(&dir, &path);
    assert_eq!(code, Some(1));
    assert_eq!(summary["uncovered"], serde_json::json!(["CMP-99"]));
}

#[test]
fn test_refuses_a_rules_document_it_cannot_read_as_a_table() {
    let docs = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        docs.path(),
        "## Conformance vectors per rule\n\n| rule | vectors |\n| `CMP-2` | requird |\n",
    )
    .unwrap();
    let path = docs.path().display().to_string();
    let out = effects(&["policy", "test", "--native", "--rules", &path]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("{path}:4:")) && stderr.contains("requird"), "{stderr}");
    let out = effects(&["policy", "test", "--native", "--rules", "no/such/rules.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("give --rules FILE"), "{}", text(&out.stderr));
}

/// A scratch vectors directory holding copies of `vectors` (paths from the
/// repository root) and extra files `(name, text)`.
fn vectors_dir(vectors: &[&str], extra: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for vector in vectors {
        let name = std::path::Path::new(vector).file_name().unwrap();
        std::fs::copy(root().join(vector), dir.path().join(name)).unwrap();
    }
    for (name, text) in extra {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// `policy test ARGS... --json`: the exit code and each vector's line, by file.
fn test_json(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["policy", "test", "--native", "--json"];
    all.extend_from_slice(args);
    let out = effects(&all);
    let lines: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (out.status.code(), lines, text(&out.stderr))
}

fn vector_line<'a>(lines: &'a [Value], file: &str) -> &'a Value {
    lines.iter().find(|l| l["file"] == file).unwrap_or_else(|| panic!("no line for {file}: {lines:#?}"))
}

const WRITE_VECTOR: &str =
    "tests/classifier-vectors/cl-1-a-write-to-an-absent-file-claims-it-with-its-content.json";
const UNBOUND_VECTOR: &str = "tests/classifier-vectors/tru-1-an-unbound-producer-is-not-planned-for.json";
const EVALUATOR_VECTOR: &str = "tests/vectors/ver-1-verified.json";

#[test]
fn test_runs_classifier_vectors_beside_evaluator_vectors_and_a_bad_vector_fails_alone() {
    // A classifier vector whose expected plan is wrong: no obligation.
    let wrong = std::fs::read_to_string(root().join(WRITE_VECTOR)).unwrap();
    let mut wrong: Value = serde_json::from_str(&wrong).unwrap();
    wrong["expect"]["effect"]["obligations"] = serde_json::json!([]);
    let wrong = wrong.to_string();
    let dir = vectors_dir(
        &[WRITE_VECTOR, UNBOUND_VECTOR, EVALUATOR_VECTOR],
        &[
            ("broken.json", "{\"rule\": \"CMP-1\", "),
            ("wrong-plan.json", &wrong),
            (
                "no-ledger.json",
                "{\"rule\": \"CMP-1\", \"title\": \"t\", \"records\": [{\"outcome\": {\"claim\": 7}}], \"expect\": {\"verdict\": \"COMPLETED\", \"reasons\": []}}",
            ),
        ],
    );
    let (code, lines, stderr) = test_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stderr}");
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!((summary["passed"].as_u64(), summary["failed"].as_u64()), (Some(3), Some(3)), "{lines:#?}");
    // Each bad file fails as itself, saying why; the others ran and passed.
    let broken = vector_line(&lines, "broken.json");
    assert!(broken["failures"][0].as_str().unwrap().contains("not JSON"), "{broken:#}");
    let plan = vector_line(&lines, "wrong-plan.json");
    assert_eq!(plan["kind"], "classifier");
    assert!(plan["failures"][0].as_str().unwrap().contains("classification: expected"), "{plan:#}");
    assert_eq!(vector_line(&lines, "no-ledger.json")["passed"], false);
    for passing in [
        "cl-1-a-write-to-an-absent-file-claims-it-with-its-content.json",
        "tru-1-an-unbound-producer-is-not-planned-for.json",
        "ver-1-verified.json",
    ] {
        assert_eq!(vector_line(&lines, passing)["passed"], true, "{passing}: {lines:#?}");
    }
    // The classifier vectors' rules are counted apart from the evaluator's.
    let coverage = lines.iter().find(|l| l["coverage"].is_array()).unwrap();
    let classifier_rules: Vec<&str> = coverage["classifier_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert!(classifier_rules.contains(&"TRU-1") && classifier_rules.contains(&"CL-1"), "{coverage:#}");
    let cl1 = coverage["coverage"].as_array().unwrap().iter().find(|r| r["rule"] == "CL-1").unwrap();
    assert_eq!(
        cl1["vectors"],
        serde_json::json!([]),
        "a classifier vector does not cover the evaluator's CL-1"
    );

    // The shipped classifier vectors pass against the shipped classifiers;
    // given another classifier for every vector, the write's plan is not
    // the filesystem classifier's.
    let (code, lines, stderr) = test_json(&["tests/classifier-vectors"]);
    assert_eq!(code, Some(0), "{stderr}: {lines:#?}");
    let unbound = support::shipped("classify-unbound.wasm");
    let other = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(other.path(), unbound).unwrap();
    let (code, lines, _) = test_json(&["--classifier", other.path().to_str().unwrap(), WRITE_VECTOR]);
    assert_eq!(code, Some(1), "{lines:#?}");
}

#[test]
fn test_filters_by_name_and_speaks_junit_and_tap() {
    let (code, lines, stderr) = test_json(&["--run", "^cmp-9-", "tests/vectors", "tests/classifier-vectors"]);
    assert_eq!(code, Some(0), "{stderr}");
    let files: Vec<&str> = lines.iter().filter_map(|l| l["file"].as_str()).collect();
    assert!(!files.is_empty() && files.iter().all(|f| f.starts_with("cmp-9-")), "{files:?}");
    assert!(files.contains(&"cmp-9-a-read-is-read-only.json"), "a classifier vector matched too: {files:?}");
    // A filtered run does not judge what the whole set covers.
    assert_eq!(lines.last().unwrap()["summary"]["uncovered"], serde_json::json!([]));
    let out = effects(&["policy", "test", "--native", "--run", "^no-such-vector", "tests/vectors"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no vector file name matches"), "{}", text(&out.stderr));
    let out = effects(&["policy", "test", "--native", "--run", "(", "tests/vectors"]);
    assert_eq!(out.status.code(), Some(2), "a bad regular expression is bad input");

    // A vector whose title and failure carry markup, quotes and a line
    // break, which must reach the XML escaped and the TAP stream as one line.
    let mut odd: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(WRITE_VECTOR)).unwrap()).unwrap();
    odd["title"] = Value::String("a <b> & \"c\" 'd'\nsecond line # not a directive".into());
    odd["expect"] = serde_json::json!("read_only");
    let odd = odd.to_string();
    let dir = vectors_dir(
        &[WRITE_VECTOR, EVALUATOR_VECTOR],
        &[("broken.json", "{ <&\u{1} \""), ("odd.json", &odd)],
    );
    let junit = effects(&["policy", "test", "--native", "--format", "junit", dir.path().to_str().unwrap()]);
    assert_eq!(junit.status.code(), Some(1));
    let xml = text(&junit.stdout);
    assert!(xml.contains("tests=\"4\" failures=\"2\""), "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 4, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 2, "{xml}");
    assert!(xml.contains("a &lt;b&gt; &amp; &quot;c&quot; &apos;d&apos;&#10;second line"), "{xml}");
    // Well-formed XML, by a real parser.
    let mut parse = Command::new("python3")
        .args(["-c", "import sys, xml.dom.minidom; xml.dom.minidom.parseString(sys.stdin.buffer.read())"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut parse.stdin.take().unwrap(), xml.as_bytes()).unwrap();
    assert!(parse.wait().unwrap().success(), "not well-formed: {xml}");

    let tap = effects(&["policy", "test", "--native", "--format", "tap", dir.path().to_str().unwrap()]);
    assert_eq!(tap.status.code(), Some(1));
    let tap = text(&tap.stdout);
    let lines: Vec<&str> = tap.lines().collect();
    assert_eq!(&lines[..2], ["TAP version 13", "1..4"], "{tap}");
    assert!(lines.iter().any(|l| l.starts_with("not ok 1 - broken.json")), "{tap}");
    assert!(lines.iter().any(|l| l.starts_with("ok 2 - cl-1-")), "{tap}");
    let odd = lines.iter().find(|l| l.starts_with("not ok 3 - odd.json")).expect("the odd vector's line");
    assert!(odd.contains("second line \\# not a directive"), "one line, the # escaped: {tap}");
    assert!(lines.iter().any(|l| l.starts_with("ok 4 - ver-1-verified.json")), "{tap}");
}

#[test]
fn test_coverage_counts_the_vectors_expecting_each_reason_code() {
    let (code, lines, stderr) = test_json(&["--coverage", "tests/vectors"]);
    assert_eq!(code, Some(0), "{stderr}");
    let reasons = lines.iter().find_map(|l| l["reasons"].as_array().cloned()).expect("a reasons line");
    let of = |code: &str| {
        reasons.iter().find(|r| r["code"] == code).unwrap_or_else(|| panic!("{code}: {reasons:#?}"))["vectors"]
            .as_array()
            .unwrap()
            .len()
    };
    assert!(of("POLICY_FAILURE") + of("UNCONFINED_COMMAND") + of("MISSING_ARTIFACT") > 0);
    // Every code the contract defines has a row, each counted from the vectors' own `expect`.
    let expected: usize = std::fs::read_dir(root().join("tests/vectors"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|t| t.contains("\"MISSING_ARTIFACT\""))
        .count();
    assert!(expected > 0);
    assert!(of("MISSING_ARTIFACT") <= expected && of("MISSING_ARTIFACT") > 0);
}

#[test]
fn a_working_directory_manifest_that_differs_from_the_embedded_one_is_warned_about() {
    // A policy author rebuilt classify-fs into policies/ and not the binary.
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("policies")).unwrap();
    let shipped = std::fs::read_to_string(root().join("policies/manifest.toml")).unwrap();
    let run_in = |manifest: &str| {
        std::fs::write(work.path().join("policies/manifest.toml"), manifest).unwrap();
        let data = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_effects"))
            .args(["policy", "verify"])
            .current_dir(work.path())
            .env("EFFECTS_DATA_DIR", data.path())
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    let (code, stderr) = run_in(&shipped);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("differ"), "the same manifest: no warning: {stderr}");
    assert!(stderr.contains("the shipped policies (embedded)"), "verify says which set it checked: {stderr}");
    let digest = shipped.lines().find(|l| l.starts_with("sha256 = ")).unwrap();
    let rebuilt = shipped.replacen(digest, &format!("sha256 = \"{}\"", "0".repeat(64)), 1);
    let (code, stderr) = run_in(&rebuilt);
    assert_eq!(code, Some(0), "the embedded set itself is fine: {stderr}");
    assert!(
        stderr.contains("differ from ./policies/manifest.toml") && stderr.contains("--manifest"),
        "{stderr}"
    );
    assert!(stderr.contains(&"0".repeat(64)), "it names the differing pin: {stderr}");
}
