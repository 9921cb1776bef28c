//! Verifier runs through `effects session` (issue 6, item 4; CMP-5, CMP-7): a
//! designated check's pass or fail is evidence. A passing check after the
//! last change covers it; an unsettled effect after it makes it stale; a
//! failing latest check fails the run. A check's own run is claimed before
//! it starts, like any command.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use serde_json::{Value, json};
use support::session::{Session, log_records, reports, session, verify};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;
const READ: &str = r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#;

fn check(command: &str) -> String {
    json!({ "verify": { "command": command, "timeout_ms": 10_000 } }).to_string()
}

fn bash(command: &str, timeout_ms: u64) -> String {
    json!({ "tool": "bash", "input": { "command": command, "timeout_ms": timeout_ms } }).to_string()
}

fn complete(required: &[&str]) -> String {
    json!({ "complete": { "required": required, "answer": "" } }).to_string()
}

fn run_in(s: &Session, lines: &[&str]) -> Vec<Value> {
    let out = s.run(&(lines.join("\n") + "\n"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    reports(&out)
}

fn run(lines: &[&str]) -> Vec<Value> {
    run_in(&session(), lines)
}

fn codes(decision: &Value) -> Vec<&str> {
    decision["reasons"].as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect()
}

/// The decision a script's `complete` step printed (the step before the summary).
fn decision(steps: &[Value]) -> &Value {
    &steps[steps.len() - 2]
}

#[test]
fn a_passing_check_then_a_command_killed_by_timeout_is_a_stale_verifier() {
    let steps = run(&[WRITE, READ, &check("grep -q hi a.txt"), &bash("sleep 30", 300), &complete(&[])]);
    assert_eq!(steps[2]["verifier"]["passed"], true, "{:#}", steps[2]);
    assert_eq!(steps[3]["outcome"]["execution"], "TIMED_OUT");
    let decided = decision(&steps);
    assert_eq!(decided["verdict"], "BLOCKED", "{decided:#}");
    assert!(codes(decided).contains(&"STALE_VERIFIER"), "{decided:#}");
}

#[test]
fn a_failing_latest_check_fails_the_run_even_after_an_earlier_pass() {
    let steps = run(&[WRITE, READ, &check("true"), &check("grep -q bye a.txt"), &complete(&["a.txt"])]);
    assert_eq!(steps[3]["verifier"]["passed"], false);
    assert_eq!(steps[3]["result"]["exit_code"], 1);
    let decided = decision(&steps);
    assert_eq!(decided["verdict"], "FAILED", "{decided:#}");
    assert!(codes(decided).contains(&"FAILING_VERIFIER"), "{decided:#}");
    // The latest one decides: a pass after the failure clears it.
    let cleared = run(&[WRITE, READ, &check("false"), &check("true"), &complete(&["a.txt"])]);
    assert_eq!(decision(&cleared)["verdict"], "COMPLETED", "{:#}", decision(&cleared));
}

#[test]
fn a_passing_check_after_the_last_change_covers_an_unread_artifact() {
    // CMP-7: no readback, but a fresh passing check ran after the write.
    let covered = run(&[WRITE, &check("grep -q hi a.txt"), &complete(&["a.txt"])]);
    assert_eq!(decision(&covered)["verdict"], "COMPLETED", "{:#}", decision(&covered));
    // (That a check before the write covers nothing is the conformance vector
    // cmp-7-verifier-before-the-change-does-not-cover: through the CLI the
    // decision's own read of a required file verifies it, CMP-7b.)
    // A check that times out neither passed nor failed (CMP-5): BLOCKED
    // INCOMPLETE_VERIFIER, not FAILED.
    let slow = run(&[
        WRITE,
        &json!({ "verify": { "command": "sleep 30", "timeout_ms": 200 } }).to_string(),
        &complete(&["a.txt"]),
    ]);
    assert_eq!(slow[1]["verifier"]["passed"], false);
    assert_eq!(slow[1]["result"]["timed_out"], true);
    let slow = decision(&slow);
    assert_eq!(slow["verdict"], "BLOCKED", "{slow:#}");
    let codes: Vec<&str> =
        slow["reasons"].as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect();
    assert!(codes.contains(&"INCOMPLETE_VERIFIER"), "{slow:#}");
    assert!(!codes.contains(&"FAILING_VERIFIER"), "{slow:#}");
}

#[test]
fn a_check_is_claimed_before_it_runs_and_its_changes_stale_earlier_reads() {
    let s = session();
    let steps = run_in(&s, &[WRITE, READ, &check("echo changed > a.txt"), &complete(&["a.txt"])]);
    let checked = &steps[2];
    assert_eq!(checked["verifier"]["passed"], true, "{checked:#}");
    let records = log_records(&s.logs()[0]);
    let claim = &records[checked["claim"].as_u64().unwrap() as usize];
    assert_eq!(claim["record"]["claim"]["operation"]["action"], "verify", "{claim:#}");
    assert_eq!(claim["record"]["claim"]["impact_scope"], json!([]), "a check's scope is unknown");
    let record = &records[checked["verifier"]["position"].as_u64().unwrap() as usize];
    assert_eq!(record["record"]["verifier"]["claim"], checked["claim"], "the record names its run's claim");
    assert!(checked["verifier"]["position"].as_u64() > checked["claim"].as_u64());
    // The write's readback was taken before the check changed the file: it
    // no longer verifies the write.
    let decided = decision(&steps);
    let write = decided["assessments"].as_array().unwrap().iter().find(|a| a["claim"] == 0).unwrap();
    assert_ne!(write["assessment"], "VERIFIED", "{decided:#}");
    verify(&s.logs()[0]);
}

#[test]
fn a_session_killed_during_a_check_leaves_no_verdict_of_it_and_completion_blocked() {
    let s = session();
    let long =
        json!({ "verify": { "command": "echo $$ > pgid; sleep 60", "timeout_ms": 120_000 } }).to_string();
    let (run_id, _) = s.kill_mid_step(&format!("{WRITE}\n{READ}\n{long}\n"), "pgid");
    let out = s.run(&format!("{}\n", complete(&["a.txt"])), &["--run", &run_id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decided = reports(&out).pop().unwrap();
    assert_eq!(decided["verdict"], "BLOCKED", "{decided:#}");
    assert!(codes(&decided).contains(&"UNSETTLED_ARTIFACT"), "{decided:#}");
    let records = log_records(&s.logs()[0]);
    assert!(records.iter().all(|r| r["kind"] != "verifier"), "a check that never finished said nothing");
}
