//! Background jobs through `effects session` (issue 6): a launch is claimed
//! RUNNING with its launch index written (LOG-8); a job read in a later
//! process settles exactly that launch; a kill settles it CANCELLED and
//! leaves nothing of the group alive; the monitor settles finished launches
//! once, even when two processes race to do it.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::session::{Session, log_records, reports, session, verify};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;
const READ: &str = r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#;

fn launch(command: &str) -> String {
    json!({ "tool": "bash", "input": { "command": command, "background": true } }).to_string()
}

fn job(id: &str, action: &str) -> String {
    json!({ "tool": "bg_job", "input": { "job": id, "action": action } }).to_string()
}

fn complete(required: &[&str]) -> String {
    json!({ "complete": { "required": required, "answer": "" } }).to_string()
}

fn run(s: &Session, lines: &[&str], extra: &[&str]) -> Vec<Value> {
    let out = s.run(&(lines.join("\n") + "\n"), extra);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    reports(&out)
}

fn codes(decision: &Value) -> Vec<&str> {
    decision["reasons"].as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect()
}

/// The job id a launch step reported (`started background job job-N`).
fn job_id(step: &Value) -> String {
    assert_eq!(step["result"]["job_state"], "RUNNING", "{step:#}");
    step["result"]["job_id"].as_str().unwrap_or_else(|| panic!("not a started job: {step:#}")).to_owned()
}

/// The outcomes the log holds for the claim at `claim`, in order.
fn outcomes_of(s: &Session, claim: u64) -> Vec<Value> {
    log_records(&s.logs()[0])
        .into_iter()
        .filter_map(|r| r["record"]["outcome"].as_object().cloned().map(Value::Object))
        .filter(|o| o["claim"] == claim)
        .map(|o| o["outcome"].clone())
        .collect()
}

fn wait_for(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_running_job_leaves_the_run_unverified_and_a_later_process_settles_its_launch() {
    let s = session();
    let first = run(
        &s,
        &[
            &launch("for _ in $(seq 1000); do [ -e go ] && break; sleep 0.02; done; echo ran > out.txt"),
            &complete(&[]),
        ],
        &[],
    );
    let launched = &first[0];
    assert_eq!(launched["outcome"]["execution"], "RUNNING", "{launched:#}");
    let claim = launched["claim"].as_u64().unwrap();
    let id = job_id(launched);
    // LOG-8: the launch index maps the generation to the claim.
    let generation = id.trim_start_matches("job-");
    let index: Value = serde_json::from_slice(
        &std::fs::read(s.data.join(format!("effects/launch-{generation}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(index["claim"], claim);
    // CMP-8: still running, no required artifacts: UNVERIFIED, not BLOCKED.
    let decision = &first[1];
    assert_eq!(decision["verdict"], "UNVERIFIED", "{decision:#}");
    assert_eq!(codes(decision), vec!["RUNNING_LAUNCH"]);

    // Let it finish, then read it from a second process.
    std::fs::write(s.root.join("go"), "").unwrap();
    wait_for(&s.root.join("out.txt"));
    let run_id = first.last().unwrap()["summary"]["run_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let steps = run(&s, &[&job(&id, "status")], &["--run", &run_id]);
        if steps[0]["result"]["text"].as_str().is_some_and(|t| t.starts_with("exited"))
            || Instant::now() > deadline
        {
            break steps;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = &second[0];
    assert_eq!(read["claim"], Value::Null, "a job read is admitted, not claimed");
    assert_eq!(read["observations"].as_array().unwrap().len(), 1, "a JOB_STATE observation");
    assert!(read["launch_settled"].is_u64(), "{read:#}");
    let outcomes = outcomes_of(&s, claim);
    assert_eq!(outcomes.len(), 2, "RUNNING, then exactly one settlement: {outcomes:#?}");
    assert_eq!(outcomes[0]["execution"], "RUNNING");
    assert_eq!(outcomes[1]["execution"], "REPORTED_SUCCESS");
    assert_eq!(outcomes[1]["cleanup"], "clean");
    // Reading it again settles nothing more.
    let again = run(&s, &[&job(&id, "status")], &["--run", &run_id]);
    assert!(again[0]["launch_settled"].is_null());
    assert_eq!(outcomes_of(&s, claim).len(), 2);
    let observed = log_records(&s.logs()[0]);
    let states: Vec<&Value> =
        observed.iter().filter_map(|r| r["record"]["observation"].get("job_state")).collect();
    assert_eq!(states, vec!["exited", "exited"], "{observed:#?}");
    verify(&s.logs()[0]);
}

/// The job record's PID (the group id too).
fn job_pid(s: &Session, id: &str) -> u32 {
    let record: Value =
        serde_json::from_slice(&std::fs::read(s.data.join(format!("effects/jobs/{id}.json"))).unwrap())
            .unwrap();
    record["pid"].as_u64().unwrap() as u32
}

/// Live (not zombie) processes of process group `pgid`, from `/proc`.
fn group_members(pgid: u32) -> Vec<u32> {
    effect_ledger::procfs::live_members(pgid)
}

#[test]
fn a_kill_tears_down_a_job_that_ignores_sigterm_and_settles_its_launch_cancelled() {
    let s = session();
    // The job and its child ignore SIGTERM (an ignored signal is inherited).
    let steps = run(&s, &[WRITE, READ, &launch("trap '' TERM; sleep 60 & sleep 60; wait")], &[]);
    let claim = steps[2]["claim"].as_u64().unwrap();
    let id = job_id(&steps[2]);
    let run_id = steps.last().unwrap()["summary"]["run_id"].as_str().unwrap().to_owned();
    let pgid = job_pid(&s, &id);
    let deadline = Instant::now() + Duration::from_secs(10);
    while group_members(pgid).len() < 3 {
        assert!(Instant::now() < deadline, "the job's processes never all started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = run(&s, &[&job(&id, "kill"), &complete(&["a.txt"])], &["--run", &run_id]);
    let kill = &killed[0];
    assert!(kill["claim"].is_u64(), "a kill is claimed: {kill:#}");
    assert_eq!(kill["outcome"]["execution"], "REPORTED_SUCCESS", "{kill:#}");
    assert_eq!(kill["outcome"]["cleanup"], "CLEAN");
    assert_eq!(kill["result"]["text"], "killed");
    assert_eq!(kill["result"]["job_state"], "KILLED");
    assert!(group_members(pgid).is_empty(), "nothing of the group survives the kill");
    let outcomes = outcomes_of(&s, claim);
    assert_eq!(
        outcomes.iter().map(|o| o["execution"].as_str().unwrap()).collect::<Vec<_>>(),
        vec!["RUNNING", "CANCELLED"]
    );
    // The kill claim names the job and its process exactly.
    let records = log_records(&s.logs()[0]);
    let kill_claim = records.iter().find(|r| r["position"] == kill["claim"]).unwrap();
    let kinds: Vec<&str> = kill_claim["record"]["claim"]["impact_scope"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["location"].as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(kinds, vec!["background_job", "process"], "{kill_claim:#}");
    // CMP-2: a cancelled unknown-scope launch after the last change of a
    // required file leaves it unsettled.
    assert_eq!(killed[1]["verdict"], "BLOCKED", "{:#}", killed[1]);
    assert!(codes(&killed[1]).contains(&"UNSETTLED_ARTIFACT"));
    verify(&s.logs()[0]);
}

#[test]
fn the_monitor_settles_a_finished_launch_exactly_once_when_two_processes_race() {
    let s = session();
    let steps = run(&s, &[&launch("echo hi > out.txt")], &[]);
    let claim = steps[0]["claim"].as_u64().unwrap();
    let run_id = steps.last().unwrap()["summary"]["run_id"].as_str().unwrap().to_owned();
    // Wait until the job is over: its status printed and its group gone.
    let id = job_id(&steps[0]);
    let pgid = job_pid(&s, &id);
    let exit = s.data.join(format!("effects/jobs/{id}.exit"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(std::fs::read_to_string(&exit).is_ok_and(|t| t.ends_with('\n')) && group_members(pgid).is_empty())
    {
        assert!(Instant::now() < deadline, "the job never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Two processes complete the run at once; each runs the monitor first.
    let script = complete(&[]) + "\n";
    let racers: Vec<_> = (0..2).map(|_| s.spawn(&script, &["--run", &run_id])).collect();
    for racer in racers {
        let out = racer.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let outcomes = outcomes_of(&s, claim);
    assert_eq!(
        outcomes.iter().map(|o| o["execution"].as_str().unwrap()).collect::<Vec<_>>(),
        vec!["RUNNING", "REPORTED_SUCCESS"],
        "settled exactly once"
    );
    verify(&s.logs()[0]);
}

#[test]
fn a_job_read_binds_only_a_validated_job_of_this_lineage() {
    let s = session();
    let steps = run(&s, &[&launch("true")], &[]);
    let id = job_id(&steps[0]);
    // Another run (a new lineage) may not read or kill it.
    let other = run(
        &s,
        &[&job(&id, "status"), &job(&id, "kill"), &job("job-1", "status"), &job("../x", "status")],
        &[],
    );
    for (step, needle) in other.iter().take(4).zip([
        "another run lineage",
        "another run lineage",
        "no job job-1",
        "not a job id",
    ]) {
        assert_eq!(step["status"], "REFUSED", "{step:#}");
        assert!(step["reason"].as_str().unwrap().contains(needle), "{step:#}");
    }
    // A job record that no longer matches its launch index is refused.
    let run_id = steps.last().unwrap()["summary"]["run_id"].as_str().unwrap().to_owned();
    let generation = id.trim_start_matches("job-");
    let index = s.data.join(format!("effects/launch-{generation}.json"));
    let mut entry: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    entry["claim"] = json!(99);
    std::fs::write(&index, entry.to_string()).unwrap();
    let tampered = run(&s, &[&job(&id, "status")], &["--run", &run_id]);
    assert_eq!(tampered[0]["status"], "REFUSED");
    assert!(tampered[0]["reason"].as_str().unwrap().contains("launch index"), "{:#}", tampered[0]);
}
