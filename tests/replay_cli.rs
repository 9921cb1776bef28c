//! `effects decide --replay POSITION` (POL-3: a decision re-derived from the
//! log alone): recorded decisions replay identical even when the root has
//! changed or is gone, a tampered decision record (validly re-chained) is
//! reported not identical, a decision naming another evaluator is refused,
//! and a position that holds no decision is bad input. Replay never writes.
//! `effects policy replay` (policy impact replay, SPEC 9) on two evaluator
//! builds that differ in one rule lists exactly the run that rule changes,
//! reports a record its evaluator does not re-derive, and writes nothing.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};
use support::session::{Session, log_records, reports, session, verify};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;
const READ: &str = r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#;
const EXTERNAL: &str = r#"{"tool": "external", "input": {"server": "tracker", "tool": "create_issue", "arguments": {"title": "bug"}}, "reported": {"exit_code": 0}}"#;

fn complete(required: &[&str], answer: &str) -> String {
    serde_json::json!({ "complete": { "required": required, "answer": answer } }).to_string()
}

/// Runs `lines` as one session; returns its final summary.
fn summary_of(s: &Session, lines: &[&str]) -> Value {
    let out = s.run(&(lines.join("\n") + "\n"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    reports(&out).pop().unwrap()
}

/// Runs `lines` as one session; returns the run id and the position of the
/// decision its `complete` step recorded.
fn recorded_decision(s: &Session, lines: &[&str]) -> (String, u64) {
    let summary = summary_of(s, lines);
    let run = summary["summary"]["run_id"].as_str().unwrap().to_owned();
    (run, summary["recorded"].as_u64().expect("the decision was recorded"))
}

/// `effects --data-dir D decide --run RUN --replay POSITION EXTRA...`.
fn replay(s: &Session, run: &str, position: u64, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", run, "--replay", &position.to_string()])
        .args(extra)
        .output()
        .unwrap()
}

fn replay_json(s: &Session, run: &str, position: u64, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = replay(s, run, position, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} / {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

fn log_of(s: &Session) -> PathBuf {
    let logs = s.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    logs[0].clone()
}

/// Rewrites the record at `position` with `change`, then frames it and every
/// record after it again (`prev` and `check`, as `log/frame.rs` defines them):
/// a forgery by someone who holds the file, which the hash chain alone cannot
/// tell from the truth (no operator key).
fn forge(log: &Path, position: usize, change: impl FnOnce(&mut Value)) {
    let text = std::fs::read_to_string(log).unwrap();
    let mut lines = text.lines();
    // The records before it keep their bytes, so their checks still hold.
    let mut out: String = lines.by_ref().take(position).map(|l| format!("{l}\n")).collect();
    let mut change = Some(change);
    let mut prev: Option<String> = None;
    for line in lines {
        let mut envelope: Value = serde_json::from_str(line).unwrap();
        if let Some(change) = change.take() {
            change(&mut envelope["record"]);
        }
        let object = envelope.as_object_mut().unwrap();
        object.remove("check");
        if let Some(prev) = &prev {
            object.insert("prev".into(), Value::String(prev.clone()));
        }
        let body = serde_json::to_string(object).unwrap();
        let check = hex::encode(Sha256::digest(body.as_bytes()));
        out.push_str(&format!("{},\"check\":\"{check}\"}}\n", &body[..body.len() - 1]));
        prev = Some(check);
    }
    std::fs::write(log, out).unwrap();
}

#[test]
fn a_recorded_decision_replays_identical_from_the_log_alone() {
    let s = session();
    let (run, position) = recorded_decision(&s, &[WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")]);
    let log = log_of(&s);
    let before = std::fs::read(&log).unwrap();
    // The root is rewritten, then removed: a replay that read a file or
    // resolved a path again would decide FAILED or fail; the log alone gives
    // the recorded COMPLETED.
    std::fs::write(s.root.join("a.txt"), "changed behind the ledger's back\n").unwrap();
    std::fs::remove_dir_all(&s.root).unwrap();
    let (code, report) = replay_json(&s, &run, position, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["identical"], true, "{report:#}");
    assert_eq!(report["differences"], serde_json::json!([]));
    assert_eq!(report["replayed"]["verdict"], "COMPLETED");
    assert_eq!(report["replayed"]["assessments"][0]["assessment"], "VERIFIED");
    assert_eq!(report["replayed"]["answer"], "I wrote a.txt.");
    assert_eq!(report["position"], position);
    // Read-only: the log is byte for byte what it was, and no record was added.
    assert_eq!(std::fs::read(&log).unwrap(), before, "a replay never writes the log");
    verify(&log);
    // The text output says so too.
    let out = replay(&s, &run, position, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("IDENTICAL"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_decision_with_reasons_and_disclosures_replays_identical_and_keeps_them_in_the_log() {
    let s = session();
    // An external call: UNVERIFIED, with a server-authored disclosure carried
    // by the presented answer (CMP-6); a write never read back (CMP-7).
    let (run, position) =
        recorded_decision(&s, &[EXTERNAL, WRITE, &complete(&["a.txt"], "I filed the bug and wrote a.txt.")]);
    let records = log_records(&log_of(&s));
    let recorded = &records[position as usize]["record"]["decision"];
    let detail = &recorded["detail"];
    assert_eq!(detail["answer"], "I filed the bug and wrote a.txt.", "{recorded:#}");
    assert!(!detail["reasons"].as_array().unwrap().is_empty(), "{recorded:#}");
    assert!(
        detail["presented_answer"].as_str().unwrap().contains(recorded["disclosures"][0].as_str().unwrap())
    );
    let (code, report) = replay_json(&s, &run, position, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["replayed"]["verdict"], recorded["verdict"]);
    assert_eq!(report["replayed"]["reasons"], detail["reasons"]);
    assert_eq!(report["replayed"]["assessments"], detail["assessments"]);
    assert_eq!(report["replayed"]["answer"], detail["presented_answer"]);
}

#[test]
fn a_decision_taken_by_effects_decide_replays_with_the_evaluator_file() {
    let s = session();
    let run = summary_of(&s, &[WRITE])["summary"]["run_id"].as_str().unwrap().to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", &run, "--require", "a.txt", "--answer", "Wrote it.", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decided: Value = serde_json::from_slice(&out.stdout).unwrap();
    let position = decided["recorded"].as_u64().unwrap();
    let evaluator = support::root().join("policies/evaluate.wasm");
    let (code, report) = replay_json(&s, &run, position, &["--evaluator", evaluator.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["replayed"]["verdict"], decided["verdict"]);
    assert_eq!(report["replayed"]["answer"], decided["answer"]);
}

#[test]
fn a_tampered_decision_record_is_reported_not_identical() {
    let s = session();
    let (run, position) = recorded_decision(&s, &[WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")]);
    let log = log_of(&s);
    forge(&log, position as usize, |record| record["decision"]["verdict"] = "FAILED".into());
    // The forgery is validly framed: the log loads and verifies.
    verify(&log);
    let (code, report) = replay_json(&s, &run, position, &[]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["identical"], false);
    let differences = report["differences"].as_array().unwrap();
    assert_eq!(differences.len(), 1, "{report:#}");
    assert_eq!(differences[0]["field"], "verdict");
    assert_eq!(differences[0]["recorded"], "FAILED");
    assert_eq!(differences[0]["replayed"], "COMPLETED");
    let out = replay(&s, &run, position, &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NOT IDENTICAL") && text.contains("verdict"), "{text}");

    // An answer text that is not the one whose digest was recorded differs too.
    forge(&log, position as usize, |record| {
        record["decision"]["verdict"] = "COMPLETED".into();
        record["decision"]["detail"]["answer"] = "I wrote b.txt.".into();
    });
    let (code, report) = replay_json(&s, &run, position, &[]);
    assert_eq!(code, Some(1), "{report:#}");
    let fields: Vec<&str> =
        report["differences"].as_array().unwrap().iter().map(|d| d["field"].as_str().unwrap()).collect();
    assert!(fields.contains(&"answer_sha256"), "{report:#}");
}

#[test]
fn a_decision_naming_another_evaluator_is_refused() {
    let s = session();
    let (run, position) = recorded_decision(&s, &[WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")]);
    // A component file that is not the recorded evaluator is refused before
    // it is compiled, naming both digests.
    let other = support::root().join("policies/classify-fs.wasm");
    let out = replay(&s, &run, position, &["--evaluator", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let shipped = effect_ledger::digest::Sha256Digest::of(&support::shipped("evaluate.wasm")).to_string();
    let offered = effect_ledger::digest::Sha256Digest::of(&support::shipped("classify-fs.wasm")).to_string();
    assert!(stderr.contains(&shipped) && stderr.contains(&offered), "{stderr}");

    // A decision that names another evaluator than the shipped one is refused
    // with the shipped one, and says how to give the recorded one.
    let forged = "ab".repeat(32);
    forge(&log_of(&s), position as usize, |record| {
        record["decision"]["evaluator"]["sha256"] = forged.clone().into();
    });
    verify(&log_of(&s));
    let out = replay(&s, &run, position, &[]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&forged) && stderr.contains(&shipped), "{stderr}");
    assert!(stderr.contains("--evaluator"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "a refused replay reports no comparison");
}

#[test]
fn a_policy_failure_replays_identical_with_the_manifest_that_pins_its_evaluator() {
    // POL-4: an evaluator that runs out of fuel gave BLOCKED POLICY_FAILURE.
    // The same component fails the same way again (POL-3), so the decision
    // replays identical, given the manifest that pins it.
    let s = session();
    let copy = support::PolicyCopy::new();
    copy.replace("evaluate.wasm", &support::fixture("hostile-evaluator"));
    let manifest = copy.path("manifest.toml");
    let manifest = manifest.to_str().unwrap();
    let out = s.run(&[WRITE, READ, &complete(&["a.txt"], "spin")].join("\n"), &["--manifest", manifest]);
    let summary = reports(&out).pop().unwrap();
    assert_eq!(summary["verdict"], "BLOCKED", "{summary:#}");
    let (run, position) =
        (summary["summary"]["run_id"].as_str().unwrap(), summary["recorded"].as_u64().unwrap());
    let (code, report) = replay_json(&s, run, position, &["--manifest", manifest]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["replayed"]["reasons"][0]["code"], "POLICY_FAILURE");
    assert!(report["replayed"]["policy_failure"].as_str().unwrap().contains("fuel"), "{report:#}");
    // The shipped evaluator is not the one that decided: refused, with the way out.
    let out = replay(&s, run, position, &[]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--manifest") && stderr.contains("--evaluator FILE"), "{stderr}");
}

#[test]
fn a_position_that_holds_no_decision_is_bad_input() {
    let s = session();
    let (run, position) = recorded_decision(&s, &[WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")]);
    let out = replay(&s, &run, 0, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("position 0") && stderr.contains("`claim`, not a decision"), "{stderr}");
    let beyond = position + 1;
    let out = replay(&s, &run, beyond, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("no record at position {beyond}")), "{stderr}");
    // A run with no log is bad input too, and says why.
    let out = replay(&s, "no-such-run", 0, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no log for run no-such-run"));
}

/// `effects --data-dir D policy replay --json EXTRA...`: exit code and report.
fn policy_replay(s: &Session, extra: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["policy", "replay", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} / {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

/// The report's entry for `run`.
fn impact_of<'a>(report: &'a Value, run: &str) -> &'a Value {
    report["impact"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["run_id"] == run)
        .unwrap_or_else(|| panic!("{run}: {report:#}"))
}

/// Every log of the data dir, by name, with its bytes.
fn logs_bytes(s: &Session) -> Vec<(PathBuf, Vec<u8>)> {
    let mut logs: Vec<_> =
        s.logs().into_iter().map(|log| (log.clone(), std::fs::read(&log).unwrap())).collect();
    logs.sort();
    logs
}

/// Two evaluator builds that differ in one rule: the shipped one discloses
/// an unconfined command and leaves the verdict COMPLETED; the fixture
/// `strict-confinement` makes that run UNVERIFIED. Replaying the store with
/// the fixture lists exactly the run with an unconfined command, with its
/// verdict change, against the shipped evaluator decided again; replaying
/// with the shipped evaluator's own file changes nothing. No log changes.
#[test]
fn policy_replay_lists_exactly_the_runs_a_one_rule_change_would_change() {
    let s = session();
    let unconfined = r#"{"tool": "bash", "input": {"command": "echo hi > b.txt"}}"#;
    let mut command = s.command(&["--new-run", "loose"]);
    command.env("EFFECTS_CONFINE", "off");
    let script = [WRITE, READ, unconfined, &complete(&["a.txt"], "I wrote a.txt.")].join("\n") + "\n";
    let mut child =
        command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), script.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let loose = reports(&out).pop().unwrap();
    assert_eq!(loose["verdict"], "COMPLETED", "the shipped evaluator discloses, and completes: {loose:#}");
    let out = s.run(
        &([WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")].join("\n") + "\n"),
        &["--new-run", "tidy"],
    );
    assert!(out.status.success());
    let before = logs_bytes(&s);

    let strict = support::fixture_path("strict-confinement");
    let (code, report) = policy_replay(&s, &["--evaluator", strict.to_str().unwrap()]);
    assert_eq!(code, Some(1), "a changed decision is a finding: {report:#}");
    assert_eq!((report["replayed"].as_u64(), report["changed"].as_u64()), (Some(2), Some(1)), "{report:#}");
    assert_eq!(report["verdicts_changed"], 1);
    let changed = impact_of(&report, "loose");
    assert_eq!(changed["baseline"], "replayed", "the shipped evaluator is at hand: {changed:#}");
    assert_eq!(changed["drift"], serde_json::json!([]), "the shipped evaluator re-derives its record");
    assert_eq!(
        (changed["before"]["verdict"].as_str(), changed["after"]["verdict"].as_str()),
        (Some("COMPLETED"), Some("UNVERIFIED"))
    );
    let fields: Vec<&str> =
        changed["changes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert!(fields.contains(&"verdict"), "{fields:?}");
    let unchanged = impact_of(&report, "tidy");
    assert_eq!(unchanged["changes"], serde_json::json!([]), "{unchanged:#}");
    assert_eq!(unchanged["after"]["verdict"], "COMPLETED");
    assert_eq!(logs_bytes(&s), before, "policy replay never writes a log");

    // Only the runs asked for.
    let (code, report) = policy_replay(&s, &["--evaluator", strict.to_str().unwrap(), "--run", "tidy"]);
    assert_eq!((code, report["replayed"].as_u64()), (Some(0), Some(1)), "{report:#}");

    // The shipped evaluator as the candidate: nothing changes.
    let shipped = support::root().join("policies/evaluate.wasm");
    let (code, report) = policy_replay(&s, &["--evaluator", shipped.to_str().unwrap()]);
    assert_eq!((code, report["changed"].as_u64()), (Some(0), Some(0)), "{report:#}");

    // The text report names the changed run and the totals.
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["policy", "replay", "--evaluator", strict.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("CHANGED run loose") && text.contains("COMPLETED -> UNVERIFIED"), "{text}");
    assert!(!text.contains("CHANGED run tidy"), "{text}");
    assert_eq!(logs_bytes(&s), before);
}

/// A decision record altered in the log (re-chained, so the chain still
/// verifies) is not what the recorded evaluator decides: policy replay
/// reports the drift beside the candidate's changes, and a candidate is
/// compared with what the evaluator really decides, not with the forgery.
#[test]
fn policy_replay_reports_a_record_its_evaluator_does_not_re_derive() {
    let s = session();
    let (_, position) = recorded_decision(&s, &[EXTERNAL, &complete(&[], "I filed the bug.")]);
    let log = log_of(&s);
    forge(&log, position as usize, |record| {
        record["decision"]["verdict"] = Value::String("COMPLETED".into());
    });
    let shipped = support::root().join("policies/evaluate.wasm");
    let (code, report) = policy_replay(&s, &["--evaluator", shipped.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["drifted"], 1, "{report:#}");
    let impact = &report["impact"][0];
    assert!(impact["drift"].as_array().unwrap().iter().any(|d| d["field"] == "verdict"), "{impact:#}");
    assert_eq!(
        impact["before"]["verdict"], "UNVERIFIED",
        "the baseline is the evaluator's decision: {impact:#}"
    );
    assert_eq!(impact["changes"], serde_json::json!([]), "the candidate is the evaluator: no change");
}

/// A decision that cannot be replayed is skipped with why, not failed; a
/// candidate that is not an evaluator component is refused (exit 3); a
/// missing data dir is bad input.
#[test]
fn policy_replay_skips_what_it_cannot_replay_and_refuses_a_candidate_that_is_no_evaluator() {
    let s = session();
    let (_, position) = recorded_decision(&s, &[WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")]);
    // A decision as recorded before decisions kept their detail.
    forge(&log_of(&s), position as usize, |record| {
        record["decision"].as_object_mut().unwrap().remove("detail");
    });
    let shipped = support::root().join("policies/evaluate.wasm");
    let (code, report) = policy_replay(&s, &["--evaluator", shipped.to_str().unwrap()]);
    assert_eq!((code, report["replayed"].as_u64()), (Some(0), Some(0)), "{report:#}");
    let skipped = &report["skipped"][0];
    assert_eq!(skipped["position"], position, "{report:#}");
    assert!(skipped["why"].as_str().unwrap().contains("before decisions kept"), "{skipped:#}");
    let classifier = support::root().join("policies/classify-fs.wasm");
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["policy", "replay", "--evaluator", classifier.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(s.data.join("nowhere"))
        .args(["policy", "replay", "--evaluator", classifier.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `decide --dump-ledger FILE` writes the exact ledger the decision was
/// taken over, which `policy run --call evaluate` decides again to the same
/// verdict and reasons; an existing file is never overwritten. `policy run`
/// also takes a vector as it is, evaluator or classifier.
#[test]
fn a_dumped_ledger_and_a_vector_run_through_policy_run() {
    let s = session();
    let (run, _) = recorded_decision(&s, &[EXTERNAL, WRITE, &complete(&["a.txt"], "I filed the bug.")]);
    let dumped = s.data.parent().unwrap().join("ledger.json");
    let decide = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_effects"))
            .arg("--data-dir")
            .arg(&s.data)
            .args([
                "decide",
                "--run",
                &run,
                "--json",
                "--dry-run",
                "--require",
                "a.txt",
                "--answer",
                "I filed the bug.",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = decide(&["--dump-ledger", dumped.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decided: Value = serde_json::from_slice(&out.stdout).unwrap();
    let policy_run = |call: &str, input: &Path, component: &str| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_effects"))
            .args(["policy", "run", support::root().join("policies").join(component).to_str().unwrap()])
            .args(["--call", call, "--input", input.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let again = policy_run("evaluate", &dumped, "evaluate.wasm");
    assert_eq!(again["value"]["verdict"], decided["verdict"], "{again:#}");
    assert_eq!(again["value"]["reasons"], decided["reasons"]);
    let refused = decide(&["--dump-ledger", dumped.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "an existing file is never overwritten");

    let vector = support::root().join("tests/vectors/ver-1-verified.json");
    assert_eq!(policy_run("evaluate", &vector, "evaluate.wasm")["value"]["verdict"], "COMPLETED");
    let classifier = support::root().join("tests/classifier-vectors/cmp-9-a-read-is-read-only.json");
    assert_eq!(policy_run("classify", &classifier, "classify-fs.wasm")["value"], "read_only");
}

/// `session --trace-policies DIR` writes the exact argument of every policy
/// call, one file each, and `policy run` takes each file as it is: the
/// classify call answers the plan the claim recorded. A trace directory
/// beneath the root is refused before anything is created.
#[test]
fn a_session_s_policy_calls_are_traced_and_each_runs_again() {
    let s = session();
    let trace = s.data.parent().unwrap().join("trace");
    let out = s.run(
        &[WRITE, READ, &complete(&["a.txt"], "I wrote a.txt.")].join("\n"),
        &["--trace-policies", trace.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut files: Vec<String> = std::fs::read_dir(&trace)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let calls: Vec<&str> = files.iter().map(|f| f.split('-').nth(1).unwrap()).collect();
    // The write and the read each: classify, settle, readbacks; then the decision.
    let step = ["classify", "settle", "readbacks"];
    assert_eq!(calls, [&step[..], &step[..], &["evaluate"]].concat(), "{files:?}");
    for file in &files {
        let (call, component) = {
            let stem = file.trim_end_matches(".json");
            let mut parts = stem.splitn(3, '-');
            parts.next();
            (parts.next().unwrap().to_owned(), parts.next().unwrap().to_owned())
        };
        let out = Command::new(env!("CARGO_BIN_EXE_effects"))
            .args([
                "policy",
                "run",
                support::root().join(format!("policies/{component}.wasm")).to_str().unwrap(),
            ])
            .args(["--call", &call, "--input", trace.join(file).to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        if file.starts_with("000001-") {
            let claim = &log_records(&log_of(&s))[0]["record"]["claim"];
            let scope = answer["value"]["effect"]["scope"]["exact"].as_array().unwrap().len();
            assert_eq!(scope, claim["impact_scope"].as_array().unwrap().len(), "{answer:#} / {claim:#}");
        }
    }
    let inside = s.root.join("trace");
    let out = s.run(READ, &["--trace-policies", inside.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lies beneath the root"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!inside.exists(), "nothing is created beneath the root");
}
