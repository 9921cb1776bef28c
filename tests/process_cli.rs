//! Shell commands through `effects session` (issue 6, the scenarios reachable
//! with foreground commands): a command is an unknown-scope claim; a timeout
//! tears its group down and leaves required artifacts unsettled; a command
//! that ran stales every earlier read.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use serde_json::{Value, json};
use support::session::{reports, session};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;
const READ: &str = r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#;

fn bash(command: &str, timeout_ms: u64) -> String {
    json!({ "tool": "bash", "input": { "command": command, "timeout_ms": timeout_ms } }).to_string()
}

fn complete() -> String {
    json!({ "complete": { "required": ["a.txt"], "answer": "" } }).to_string()
}

fn run(lines: &[&str]) -> Vec<Value> {
    let s = session();
    let out = s.run(&(lines.join("\n") + "\n"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    reports(&out)
}

fn codes(decision: &Value) -> Vec<&str> {
    decision["reasons"].as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect()
}

#[test]
fn a_command_that_times_out_after_the_write_blocks_completion() {
    let steps = run(&[WRITE, READ, &bash("sleep 30", 300), &complete()]);
    let command = &steps[2];
    assert_eq!(command["outcome"]["execution"], "TIMED_OUT", "{command:#}");
    assert_eq!(command["outcome"]["cleanup"], "CLEAN", "the group was torn down");
    let decision = steps.last().unwrap();
    assert_eq!(decision["verdict"], "BLOCKED", "{decision:#}");
    assert!(codes(decision).contains(&"UNSETTLED_ARTIFACT"));
}

#[test]
fn a_command_that_ran_stales_the_earlier_read() {
    // It changed the file: the earlier read is stale, and a fresh read shows
    // the write was superseded, so the write is not verified.
    let changed = run(&[WRITE, READ, &bash("echo x >> a.txt", 10_000), READ, &complete()]);
    assert_eq!(changed[2]["outcome"]["execution"], "REPORTED_SUCCESS");
    let decision = changed.last().unwrap();
    assert_ne!(decision["verdict"], "COMPLETED", "{decision:#}");
    // Without a read of its own after the command, the decision's read of
    // the required file (CMP-7b) is the fresh one: verified.
    let decided = run(&[WRITE, READ, &bash("true", 10_000), &complete()]);
    assert_eq!(decided.last().unwrap()["verdict"], "COMPLETED", "{:#}", decided.last().unwrap());
    // A fresh full read after a command that left the file alone verifies it.
    let reread = run(&[WRITE, READ, &bash("true", 10_000), READ, &complete()]);
    assert_eq!(reread.last().unwrap()["verdict"], "COMPLETED", "{:#}", reread.last().unwrap());
}

#[test]
fn a_child_ignoring_sigterm_is_torn_down_and_the_outcome_says_so() {
    let steps = run(&[&bash("(trap '' TERM; sleep 60) & sleep 60", 300)]);
    let command = &steps[0];
    assert_eq!(command["outcome"]["execution"], "TIMED_OUT");
    // Clean only because SIGKILL ended the survivor; the producer checks /proc.
    assert_eq!(command["outcome"]["cleanup"], "CLEAN", "{command:#}");
}

#[test]
fn a_failing_command_is_claimed_and_settled_failed() {
    let steps = run(&[&bash("echo no >&2; exit 4", 10_000)]);
    assert_eq!(steps[0]["claim"], 0, "claimed before it ran");
    assert_eq!(steps[0]["outcome"]["execution"], "FAILED");
    assert_eq!(steps[0]["result"]["error"], "exit status 4");
    // Both streams and the exit code are fields, on failure as on success.
    assert_eq!(steps[0]["result"]["stderr"], "no\n");
    assert_eq!(steps[0]["result"]["stdout"], "");
    assert_eq!(steps[0]["result"]["exit_code"], 4);
    assert_eq!(steps[0]["result"]["ok"], false);
}

#[test]
fn a_session_killed_during_a_command_leaves_it_interrupted_and_completion_blocked() {
    let s = session();
    // The command records its process group, then runs long; the session is
    // SIGKILLed mid-command, so no outcome is ever written.
    let long = bash("echo $$ > pgid; sleep 60", 120_000);
    let (run_id, out) = s.kill_mid_step(&format!("{WRITE}\n{READ}\n{long}\n"), "pgid");
    assert_eq!(reports(&out).len(), 2, "the write and the read reported; the command never finished");
    // A second session on the run recovers the claim eagerly and completes.
    let out = s.run(&format!("{}\n", complete()), &["--run", &run_id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let decision = reports(&out).pop().unwrap();
    assert_eq!(decision["verdict"], "BLOCKED", "{decision:#}");
    assert!(codes(&decision).contains(&"UNSETTLED_ARTIFACT"), "{decision:#}");
    let records = support::session::log_records(&s.logs()[0]);
    let claim = records
        .iter()
        .find(|r| r["kind"] == "claim" && r["record"]["claim"]["operation"]["tool"] == "bash")
        .expect("the command was claimed before it ran")["position"]
        .clone();
    let interrupted = records
        .iter()
        .find(|r| r["kind"] == "outcome" && r["claim"] == claim)
        .expect("the command's claim was settled by recovery");
    assert_eq!(interrupted["execution"], "INTERRUPTED", "{interrupted:#}");
    assert_eq!(interrupted["record"]["outcome"]["recovery"], true);
}
