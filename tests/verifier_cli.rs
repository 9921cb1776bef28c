//! Verifier runs through `effects session` (issue 6, item 4; CMP-5, CMP-7): a
//! designated check's pass or fail is evidence. A passing check after the
//! last change covers it; an unsettled effect after it makes it stale; a
//! failing latest check fails the run. A check is not a claim, so a run of
//! checks alone writes no log until its first claim.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

mod support;

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
    assert_eq!(steps[2]["passed"], true, "{:#}", steps[2]);
    assert_eq!(steps[3]["outcome"]["execution"], "TIMED_OUT");
    let decided = decision(&steps);
    assert_eq!(decided["verdict"], "BLOCKED", "{decided:#}");
    assert!(codes(decided).contains(&"STALE_VERIFIER"), "{decided:#}");
}

#[test]
fn a_failing_latest_check_fails_the_run_even_after_an_earlier_pass() {
    let steps = run(&[WRITE, READ, &check("true"), &check("grep -q bye a.txt"), &complete(&["a.txt"])]);
    assert_eq!(steps[3]["passed"], false);
    assert_eq!(steps[3]["exit_code"], 1);
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
    // A check before the write covers nothing.
    let early = run(&[&check("true"), WRITE, &complete(&["a.txt"])]);
    assert_eq!(decision(&early)["verdict"], "UNVERIFIED", "{:#}", decision(&early));
    // A check that times out did not pass.
    let slow = run(&[
        WRITE,
        &json!({ "verify": { "command": "sleep 30", "timeout_ms": 200 } }).to_string(),
        &complete(&["a.txt"]),
    ]);
    assert_eq!(slow[1]["passed"], false);
    assert_eq!(slow[1]["timed_out"], true);
    assert_eq!(decision(&slow)["verdict"], "FAILED", "{:#}", decision(&slow));
}

#[test]
fn checks_before_the_first_claim_are_kept_and_then_written_first() {
    let s = session();
    // Checks alone: decided from memory, no log file (CMP-9, LOG-5).
    let alone = run_in(&s, &[&check("false"), &complete(&[])]);
    assert_eq!(alone[0]["position"], Value::Null);
    assert_eq!(decision(&alone)["verdict"], "FAILED", "{:#}", decision(&alone));
    assert!(s.logs().is_empty(), "a run of checks alone writes no log");
    // A later claim creates the log with the earlier check first.
    let steps = run_in(&s, &[&check("true"), WRITE, &complete(&["a.txt"])]);
    assert_eq!(steps[0]["position"], Value::Null);
    let records = log_records(&s.logs()[0]);
    let kinds: Vec<&str> =
        records.iter().map(|r| r["record"].as_object().unwrap().keys().next().unwrap().as_str()).collect();
    assert_eq!(kinds[..3], ["verifier", "claim", "outcome"], "{records:#?}");
    assert_eq!(records[0]["record"]["verifier"]["passed"], true);
    verify(&s.logs()[0]);
}
