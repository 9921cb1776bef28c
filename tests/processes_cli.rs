//! Truth across processes (LOG-7, PROC-1, PROC-2, ID-5, CMP-7b, CMP-12),
//! through the `effects` binary with real processes: a second process on a
//! run, a `decide` beside a live command, commands whose children outlive
//! them, a SIGKILLed session whose command survives, four sessions on one
//! run at once, a run continued elsewhere, a file changed behind the
//! ledger's back, and a decision that a later effect makes stale.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::session::{Session, log_records, reports, session};

fn write(path: &str, content: &str) -> String {
    json!({ "tool": "write_file", "input": { "path": path, "content": content } }).to_string()
}

fn read(path: &str) -> String {
    json!({ "tool": "read_file", "input": { "path": path } }).to_string()
}

fn bash(command: &str, timeout_ms: u64) -> String {
    json!({ "tool": "bash", "input": { "command": command, "timeout_ms": timeout_ms } }).to_string()
}

fn complete(required: &[&str]) -> String {
    json!({ "complete": { "required": required, "answer": "" } }).to_string()
}

fn script(lines: &[&str]) -> String {
    lines.join("\n") + "\n"
}

/// Runs a session that must succeed; its JSON reports.
fn ok(s: &Session, lines: &[&str], extra: &[&str]) -> Vec<Value> {
    let out = s.run(&script(lines), extra);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    reports(&out)
}

/// `effects decide` of `run` requiring `required`, as JSON.
fn decide(s: &Session, run: &str, required: &[&str]) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects"));
    command.arg("--data-dir").arg(&s.data).args(["decide", "--run", run, "--json"]);
    for path in required {
        command.args(["--require", path]);
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits up to 30 s for `condition`.
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The log's records for `run`.
fn records(s: &Session, run: &str) -> Vec<Value> {
    log_records(&s.data.join("effects").join(format!("{run}.log")))
}

fn interrupted(records: &[Value]) -> usize {
    records.iter().filter(|r| r["kind"] == "outcome" && r["execution"] == "INTERRUPTED").count()
}

fn alive(pid: u32) -> bool {
    effect_ledger::procfs::stat_of(pid).is_some_and(|s| !s.zombie)
}

fn pid_in(path: &Path) -> u32 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_peer_s_command_in_flight_blocks_completion_and_its_outcome_is_still_recorded() {
    let s = session();
    ok(&s, &[&write("seed.txt", "seed\n")], &["--new-run", "x"]);
    // B: a command that rewrites a.txt two seconds from now.
    let b = s.spawn(&script(&[&bash("touch b-started; sleep 2; echo bad > a.txt", 20_000)]), &["--run", "x"]);
    wait_for("B's command to start", || s.root.join("b-started").exists());
    // A, meanwhile: write, read back, complete. B is in flight.
    let a = ok(&s, &[&write("a.txt", "good\n"), &read("a.txt"), &complete(&["a.txt"])], &["--run", "x"]);
    let decision = a.last().unwrap();
    assert_eq!(decision["verdict"], "BLOCKED", "{decision:#}");
    // B ends, and its own outcome is recorded: nobody "recovered" it.
    let b = b.wait_with_output().unwrap();
    assert!(b.status.success(), "{}", stderr(&b));
    let b = reports(&b);
    assert_eq!(b[0]["outcome"]["execution"], "REPORTED_SUCCESS", "{:#}", b[0]);
    assert_eq!(b[0]["status"], "RAN", "{:#}", b[0]);
    assert_eq!(interrupted(&records(&s, "x")), 0);
    assert_eq!(std::fs::read_to_string(s.root.join("a.txt")).unwrap(), "bad\n");
    // A's write was superseded by B's command: never COMPLETED now.
    let later = decide(&s, "x", &["a.txt"]);
    assert_ne!(later["verdict"], "COMPLETED", "{later:#}");
}

#[test]
fn a_decide_beside_a_live_command_leaves_it_alone() {
    let s = session();
    let live = s.spawn(
        &script(&[
            &bash("touch started; sleep 2", 20_000),
            &write("a.txt", "good\n"),
            &read("a.txt"),
            &complete(&["a.txt"]),
        ]),
        &["--new-run", "x"],
    );
    wait_for("the command to start", || s.root.join("started").exists());
    let meanwhile = decide(&s, "x", &["a.txt"]);
    assert_ne!(meanwhile["verdict"], "COMPLETED", "{meanwhile:#}");
    let out = live.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let steps = reports(&out);
    assert_eq!(steps[0]["outcome"]["execution"], "REPORTED_SUCCESS", "{:#}", steps[0]);
    assert_eq!(steps[0]["outcome"]["cleanup"], "CLEAN");
    assert_eq!(steps[3]["verdict"], "COMPLETED", "{:#}", steps[3]);
    assert_eq!(interrupted(&records(&s, "x")), 0, "the decide recovered nothing of a live executor");
}

/// A command that leaves `leftover` running, then a write and read of a.txt;
/// 1.5 s later a decide: never COMPLETED with a.txt rewritten.
fn leftover_never_rewrites_a_verified_file(leftover: &str) {
    let s = session();
    let steps =
        ok(&s, &[&bash(leftover, 20_000), &write("a.txt", "good\n"), &read("a.txt")], &["--new-run", "x"]);
    assert_eq!(steps[0]["outcome"]["cleanup"], "CLEAN", "{:#}", steps[0]);
    std::thread::sleep(Duration::from_millis(1500));
    let decision = decide(&s, "x", &["a.txt"]);
    let content = std::fs::read_to_string(s.root.join("a.txt")).unwrap();
    if content != "good\n" {
        assert_ne!(decision["verdict"], "COMPLETED", "a.txt = {content:?}: {decision:#}");
    }
    // And in fact the leftover was torn down when its command ended.
    assert_eq!(content, "good\n");
    assert_eq!(decision["verdict"], "COMPLETED", "{decision:#}");
}

#[test]
fn a_background_child_of_a_command_never_rewrites_a_verified_file() {
    leftover_never_rewrites_a_verified_file("(sleep 1; echo bad > a.txt) >/dev/null 2>&1 &");
}

#[test]
fn a_setsid_child_of_a_command_never_rewrites_a_verified_file() {
    leftover_never_rewrites_a_verified_file("setsid bash -c 'sleep 1; echo bad > a.txt' >/dev/null 2>&1 &");
}

#[test]
fn a_timeout_while_a_setsid_child_lives_is_not_all_dead_unless_it_is() {
    let s = session();
    let command =
        "setsid bash -c 'echo $$ > child.pid; sleep 1; echo bad > a.txt' >/dev/null 2>&1 & sleep 30";
    let steps =
        ok(&s, &[&bash(command, 500), &write("a.txt", "good\n"), &read("a.txt")], &["--new-run", "x"]);
    assert_eq!(steps[0]["outcome"]["execution"], "TIMED_OUT", "{:#}", steps[0]);
    let child = pid_in(&s.root.join("child.pid"));
    let clean = steps[0]["outcome"]["cleanup"] == "CLEAN";
    assert_eq!(
        clean,
        !alive(child),
        "cleanup said {} while the child alive = {}",
        steps[0]["outcome"]["cleanup"],
        alive(child)
    );
    assert!(clean, "the setsid child is beneath the supervisor, so teardown reaches it");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(std::fs::read_to_string(s.root.join("a.txt")).unwrap(), "good\n");
    assert_eq!(decide(&s, "x", &["a.txt"])["verdict"], "COMPLETED");
}

#[test]
fn the_next_process_tears_down_what_a_killed_session_left_running() {
    let s = session();
    let survivor = "setsid bash -c 'echo $$ > survivor.pid; while :; do echo bad > a.txt; sleep 0.05; done' \
                    >/dev/null 2>&1 & touch started; sleep 60";
    let mut first = s.spawn(&script(&[&bash(survivor, 120_000)]), &["--new-run", "x"]);
    wait_for("the command to start", || {
        s.root.join("started").exists() && s.root.join("survivor.pid").exists()
    });
    // SIGKILL the session alone: its command and the setsid orphan live on.
    first.kill().unwrap();
    first.wait().unwrap();
    let orphan = pid_in(&s.root.join("survivor.pid"));
    assert!(alive(orphan), "the orphan outlived its session");
    // The next process on the run recovers the dead executor's claim: it
    // tears the survivors down first, and records what it observed.
    let steps = ok(&s, &[&write("a.txt", "good\n"), &read("a.txt"), &complete(&["a.txt"])], &["--run", "x"]);
    assert!(!alive(orphan), "the orphan was torn down by recovery");
    let log = records(&s, "x");
    let recovered: Vec<&Value> =
        log.iter().filter(|r| r["kind"] == "outcome" && r["record"]["outcome"]["recovery"] == true).collect();
    assert_eq!(recovered.len(), 1, "{log:#?}");
    assert_eq!(recovered[0]["execution"], "INTERRUPTED");
    assert_eq!(recovered[0]["record"]["outcome"]["outcome"]["cleanup"], "clean", "{:#}", recovered[0]);
    std::thread::sleep(Duration::from_millis(300));
    let content = std::fs::read_to_string(s.root.join("a.txt")).unwrap();
    let decision = steps.last().unwrap();
    if content != "good\n" {
        assert_ne!(decision["verdict"], "COMPLETED", "{decision:#}");
    }
    assert_eq!(content, "good\n", "nothing rewrote a.txt after the readback");
    assert_eq!(decision["verdict"], "COMPLETED", "{decision:#}");
}

#[test]
fn four_sessions_on_one_run_all_record_their_outcomes() {
    let s = session();
    ok(&s, &[&write("seed.txt", "seed\n")], &["--new-run", "x"]);
    let children: Vec<_> = (1..=4)
        .map(|n| {
            s.spawn(&script(&[&bash(&format!("sleep 1; echo p{n} > p{n}.txt"), 20_000)]), &["--run", "x"])
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let step = &reports(&out)[0];
        assert_eq!(step["outcome"]["execution"], "REPORTED_SUCCESS", "{step:#}");
        assert_eq!(step["status"], "RAN", "{step:#}");
    }
    let log = records(&s, "x");
    assert_eq!(interrupted(&log), 0, "{log:#?}");
    let settled = log.iter().filter(|r| r["kind"] == "outcome").count();
    assert_eq!(settled, 5, "the seed's write and the four commands, each settled once");
    let files = ["p1.txt", "p2.txt", "p3.txt", "p4.txt"];
    let reads: Vec<String> = files.iter().map(|f| read(f)).collect();
    let reads: Vec<&str> = reads.iter().map(String::as_str).collect();
    ok(&s, &reads, &["--run", "x"]);
    // Nothing is in flight or unsettled. The files are a command's products,
    // which CMP-7 cannot verify (no postcondition): UNVERIFIED, not BLOCKED.
    let decision = decide(&s, "x", &files);
    assert_eq!(decision["verdict"], "UNVERIFIED", "{decision:#}");
    let codes: Vec<&str> =
        decision["reasons"].as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect();
    assert!(codes.iter().all(|c| *c == "UNVERIFIED_ARTIFACT"), "{codes:?}");
}

/// `effects --data-dir DATA session --root ROOT ARGS` with `script` on
/// standard input.
fn session_in(data: &Path, root: &Path, args: &[&str], script: &str) -> Output {
    support::session::run_at(data, root, args, script)
}

#[test]
fn a_run_is_continued_only_where_it_lives() {
    let s = session();
    ok(&s, &[&write("a.txt", "a\n")], &["--new-run", "x"]);
    let step = script(&[&write("b.txt", "b\n")]);
    // Another data dir: no log there.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = session_in(elsewhere.path(), &s.root, &["--run", "x"], &step);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&elsewhere.path().join("effects").display().to_string()),
        "{}",
        stderr(&out)
    );
    // Another root: refused, naming the run's own root.
    let other = tempfile::tempdir().unwrap();
    let out = session_in(&s.data, other.path(), &["--run", "x"], &step);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&s.root.canonicalize().unwrap().display().to_string()), "{}", stderr(&out));
    assert!(stderr(&out).contains("ID-5"), "{}", stderr(&out));
    assert!(!other.path().join("b.txt").exists(), "nothing ran under the other root");
    // `decide --root` another root: refused too.
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", "x", "--require", "a.txt", "--root"])
        .arg(other.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // A new run only when asked for, and never over an existing one.
    let out = s.run(&script(&[&read("a.txt")]), &["--new-run", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
    let out = s.run(&script(&[&read("a.txt")]), &["--run", "never-made"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no log"), "{}", stderr(&out));
}

#[test]
fn a_change_behind_the_ledger_s_back_is_read_at_decision_time() {
    let s = session();
    ok(&s, &[&write("a.txt", "good\n"), &read("a.txt")], &["--new-run", "x"]);
    assert_eq!(decide(&s, "x", &["a.txt"])["verdict"], "COMPLETED");
    // Rewritten in place (same inode), outside any tool: the last readback
    // cannot see it, the decision-time read does (CMP-7b).
    std::fs::write(s.root.join("a.txt"), "tampered\n").unwrap();
    let decision = decide(&s, "x", &["a.txt"]);
    assert_eq!(decision["verdict"], "FAILED", "{decision:#}");
    // The read was recorded before the decision, as evidence.
    let log = records(&s, "x");
    let last_decision = log.iter().rposition(|r| r["kind"] == "decision").unwrap();
    assert_eq!(log[last_decision - 1]["kind"], "observation", "{log:#?}");
}

#[test]
fn a_required_directory_is_bad_input() {
    let s = session();
    ok(&s, &[&write("dir/a.txt", "a\n")], &["--new-run", "x"]);
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", "x", "--require", "dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("directory"), "{}", stderr(&out));
}

#[test]
fn a_decision_older_than_the_last_effect_is_never_reported_as_current() {
    let s = session();
    let steps = ok(
        &s,
        &[&write("a.txt", "good\n"), &read("a.txt"), &complete(&["a.txt"]), &bash("echo x > a.txt", 10_000)],
        &["--new-run", "x"],
    );
    assert_eq!(steps[2]["verdict"], "COMPLETED");
    let summary = steps.last().unwrap();
    assert!(summary.get("verdict").is_none(), "a stale verdict at the top level: {summary:#}");
    assert_eq!(summary["last_decision"]["stale"], true, "{summary:#}");
    assert_eq!(summary["last_decision"]["verdict"], "COMPLETED");
    // Text mode says so too.
    let out = session_in(
        &s.data,
        &s.root,
        &["--run", "x"],
        &script(&[&complete(&["a.txt"]), &bash("true", 10_000)]),
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("STALE"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn an_outcome_that_is_not_recorded_fails_the_session_loudly() {
    let s = session();
    ok(&s, &[&write("seed.txt", "seed\n")], &["--new-run", "x"]);
    // Another process of the user cuts the log while the command runs (a
    // confined command cannot: tests/confine.rs); the command's own outcome
    // then cannot be appended.
    let wait = "touch started; while [ ! -e go ]; do sleep 0.02; done";
    let child = s.spawn(&script(&[&bash(wait, 20_000)]), &["--run", "x"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !s.root.join("started").exists() {
        assert!(std::time::Instant::now() < deadline, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::File::create(s.data.join("effects/x.log")).unwrap();
    std::fs::write(s.root.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("NOT RECORDED"), "{}", stderr(&out));
    let steps = reports(&out);
    assert_eq!(steps[0]["status"], "NOT_RECORDED", "{:#}", steps[0]);
    assert!(steps[0]["reason"].is_string(), "{:#}", steps[0]);
    assert_eq!(steps.last().unwrap()["summary"]["not_recorded"], 1);
}

#[test]
fn a_command_whose_processes_are_not_known_dead_keeps_its_window_open() {
    let s = session();
    // The command kills its own supervisor: what it started can no longer be
    // seen, so its cleanup is not attested, and its window never closes
    // (INV-2): a later write and readback of a.txt may still be overwritten.
    let steps = ok(
        &s,
        &[
            &bash("kill -KILL $PPID; sleep 0.2", 10_000),
            &write("a.txt", "good\n"),
            &read("a.txt"),
            &complete(&["a.txt"]),
        ],
        &["--new-run", "x"],
    );
    assert_eq!(steps[0]["outcome"]["cleanup"], "UNKNOWN", "{:#}", steps[0]);
    let decision = &steps[3];
    assert_eq!(decision["verdict"], "BLOCKED", "{decision:#}");
    // The same command whose processes are known dead closes its window.
    let clean = ok(
        &s,
        &[&bash("sleep 0.2", 10_000), &write("b.txt", "good\n"), &read("b.txt"), &complete(&["b.txt"])],
        &["--new-run", "y"],
    );
    assert_eq!(clean[0]["outcome"]["cleanup"], "CLEAN");
    assert_eq!(clean[3]["verdict"], "COMPLETED", "{:#}", clean[3]);
}

#[test]
fn a_killed_session_whose_supervisor_died_too_keeps_the_window_open() {
    let s = session();
    // The session and its command's whole group (the supervisor included)
    // are killed: recovery can observe nothing, so the command's window
    // stays open and a later write cannot be COMPLETED over it (INV-2).
    let (run, _) = s.kill_mid_step(&script(&[&bash("echo $PPID > pgid; sleep 60", 120_000)]), "pgid");
    let steps = ok(&s, &[&write("a.txt", "good\n"), &read("a.txt"), &complete(&["a.txt"])], &["--run", &run]);
    let log = records(&s, &run);
    let recovered =
        log.iter().find(|r| r["kind"] == "outcome" && r["record"]["outcome"]["recovery"] == true).unwrap();
    assert_eq!(recovered["record"]["outcome"]["outcome"]["cleanup"], "unknown", "{recovered:#}");
    assert_eq!(steps.last().unwrap()["verdict"], "BLOCKED", "{:#}", steps.last().unwrap());
}

#[test]
fn a_decision_taken_before_the_run_had_a_log_is_stale_after_a_claim() {
    let s = session();
    std::fs::write(s.root.join("a.txt"), "a\n").unwrap();
    let steps = ok(&s, &[&read("a.txt"), &complete(&["a.txt"]), &write("a.txt", "b\n")], &["--new-run", "x"]);
    assert_eq!(steps[1]["recorded"], Value::Null, "a read-only run had no log to record it in");
    let summary = steps.last().unwrap();
    assert!(summary.get("verdict").is_none(), "{summary:#}");
    assert_eq!(summary["last_decision"]["stale"], true, "{summary:#}");
}

/// `effects decide ARGS... --json` of `run` that must succeed.
fn decide_with(s: &Session, run: &str, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", run, "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Whether any process of group `pgid` is left.
fn group_alive(pgid: i32) -> bool {
    Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// `decide --dry-run` writes nothing and kills nothing. A SIGKILLed
/// session's command is still running under its supervisor: a dry run
/// leaves its claim unsettled (and says so), its processes up, and the log
/// byte for byte as it was, and does not say COMPLETED over the open claim.
/// `--explain` cites each reason's records and marks the dry run's own
/// readback as not in the log. A decide that records then recovers both
/// (LOG-7, PROC-2), and a dry run taken just before a recording decide gets
/// the very decision that decide records.
#[test]
fn a_dry_run_decides_without_recovering_recording_or_killing() {
    let s = session();
    ok(&s, &[&write("a.txt", "good\n"), &read("a.txt")], &["--new-run", "x"]);
    let mut child = s.spawn(&script(&[&bash("echo $PPID > pgid; sleep 60", 120_000)]), &["--run", "x"]);
    let marker = s.root.join("pgid");
    wait_for("the command to start", || std::fs::read_to_string(&marker).is_ok_and(|t| t.ends_with('\n')));
    child.kill().unwrap();
    child.wait().unwrap();
    let pgid: i32 = std::fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
    let log = s.data.join("effects/x.log");
    let before = std::fs::read(&log).unwrap();
    let claim = records(&s, "x")
        .iter()
        .position(|r| r["kind"] == "claim" && r["record"]["claim"]["operation"]["tool"] == "bash")
        .unwrap() as u64;

    let dry = decide_with(&s, "x", &["--require", "a.txt", "--dry-run", "--explain"]);
    assert_eq!(std::fs::read(&log).unwrap(), before, "a dry run writes nothing");
    assert!(group_alive(pgid), "a dry run tears nothing down");
    assert_eq!(dry["recorded"], Value::Null, "{dry:#}");
    assert_eq!(dry["dry_run"]["unsettled"], json!([claim]), "{dry:#}");
    assert_eq!(dry["dry_run"]["unrecorded_readbacks"], 1);
    assert_ne!(dry["verdict"], "COMPLETED", "an open claim may still change a.txt: {dry:#}");
    let length = before.iter().filter(|&&b| b == b'\n').count() as u64;
    let cited: Vec<&Value> =
        dry["explain"].as_array().unwrap().iter().flat_map(|r| r["evidence"].as_array().unwrap()).collect();
    assert!(!cited.is_empty(), "{dry:#}");
    for c in &cited {
        let position = c["position"].as_u64().unwrap();
        assert_eq!(c["written"], position < length, "{c:#}");
        assert!(c["record"].is_object(), "every cited position is a record of the evidence: {c:#}");
    }
    assert!(cited.iter().any(|c| c["position"] == claim), "the open claim is cited: {dry:#}");

    // A decide that records: the claim is recovered, its command torn down.
    let real = decide_with(&s, "x", &["--require", "a.txt"]);
    assert!(real["recorded"].is_u64(), "{real:#}");
    wait_for("the command's group to be torn down", || !group_alive(pgid));
    let recovered = records(&s, "x")
        .into_iter()
        .filter(|r| r["kind"] == "outcome" && r["record"]["outcome"]["claim"] == claim)
        .count();
    assert_eq!(recovered, 1, "recovered once, by the decide that records");

    // Nothing moves between the two: the dry run is the decision recorded next.
    let dry = decide_with(&s, "x", &["--require", "a.txt", "--dry-run"]);
    let real = decide_with(&s, "x", &["--require", "a.txt"]);
    for field in ["verdict", "reasons", "disclosures", "assessments", "answer"] {
        assert_eq!(dry[field], real[field], "{field}: {dry:#} / {real:#}");
    }
    assert_eq!(dry["dry_run"]["unsettled"], json!([]));
}

#[test]
fn another_run_s_background_job_blocks_after_its_launcher_exits() {
    // CMP-13: a job outlives the session that launched it; while it is
    // RUNNING it is in flight, whoever launched it.
    let s = session();
    let job = json!({ "tool": "bash", "input": {
        "command": "touch job-started; sleep 4; echo clobbered > a.txt", "background": true } })
    .to_string();
    ok(&s, &[&job], &["--new-run", "launcher"]);
    wait_for("the job to start", || s.root.join("job-started").exists());
    let ours =
        ok(&s, &[&write("a.txt", "good\n"), &read("a.txt"), &complete(&["a.txt"])], &["--new-run", "ours"]);
    let decision = ours.last().unwrap();
    assert_eq!(decision["verdict"], "BLOCKED", "{decision:#}");
    assert!(
        decision["reasons"].as_array().unwrap().iter().any(|r| r["code"] == "CONCURRENT_RUN"),
        "{decision:#}"
    );
}

#[test]
fn another_run_s_log_this_run_cannot_read_fails_closed() {
    // CMP-13: a peer run keyed with an operator key this run lacks: its log
    // cannot be read here, so its claim in flight is of unknown scope.
    let s = session();
    let key = s.root.parent().unwrap().join("operator.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    let key_arg = key.to_str().unwrap();
    let b = s.spawn(
        &script(&[&bash("touch b-started; sleep 3; echo bad > a.txt", 20_000)]),
        &["--new-run", "keyed", "--key-file", key_arg],
    );
    wait_for("the keyed run's command to start", || s.root.join("b-started").exists());
    let ours =
        ok(&s, &[&write("a.txt", "good\n"), &read("a.txt"), &complete(&["a.txt"])], &["--new-run", "plain"]);
    let decision = ours.last().unwrap();
    assert_eq!(decision["verdict"], "BLOCKED", "{decision:#}");
    let reason = decision["reasons"].as_array().unwrap().iter().find(|r| r["code"] == "CONCURRENT_RUN");
    assert!(reason.is_some_and(|r| r["message"].as_str().unwrap().contains("cannot read")), "{decision:#}");
    let b = b.wait_with_output().unwrap();
    assert!(b.status.success(), "{}", stderr(&b));
}
