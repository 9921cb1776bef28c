//! `effects session`, run as a terminal user would: validation before any
//! step runs, refusals that write no claim, read-only sessions that leave no
//! file, runs continued across processes, two processes on one run, and the
//! claim's fsync observed (under strace) before the target file is opened.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use std::process::{Command, Stdio};

use support::session::{reports, session, verify};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;

#[test]
fn a_bad_line_exits_2_naming_it_and_nothing_runs() {
    let s = session();
    let script = format!("{WRITE}\n{{\"tool\": \"write_file\", \"input\": {{\"path\": \"b.txt\"}}}}\n");
    let out = s.run(&script, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 2") && stderr.contains("content") && stderr.contains("nothing was run"),
        "{stderr}"
    );
    assert!(!s.root.join("a.txt").exists(), "the valid first line did not run either");
    assert!(s.logs().is_empty());
}

#[test]
fn a_refused_step_writes_no_claim_and_the_session_goes_on() {
    let s = session();
    let script = format!(
        "{}\n{WRITE}\n",
        r#"{"tool": "write_file", "input": {"path": "../escape.txt", "content": "x"}}"#
    );
    let out = s.run(&script, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reports = reports(&out);
    assert_eq!(reports[0]["status"], "REFUSED");
    assert!(reports[0]["claim"].is_null(), "every key is present, and a refused step has no claim");
    assert_eq!(reports[1]["status"], "RAN");
    assert_eq!(reports[1]["claim"], 0, "the refused step took no position");
    assert_eq!(reports[1]["outcome"]["execution"], "REPORTED_SUCCESS");
    assert_eq!(reports[2]["summary"]["refused"], 1);
    assert!(!s.root.parent().unwrap().join("escape.txt").exists());
    assert_eq!(std::fs::read(s.root.join("a.txt")).unwrap(), b"hi\n");
}

#[test]
fn a_read_only_session_leaves_no_log_file() {
    let s = session();
    std::fs::write(s.root.join("r.txt"), "r\n").unwrap();
    let script = "{\"tool\":\"read_file\",\"input\":{\"path\":\"r.txt\"}}\n{\"tool\":\"ls\",\"input\":{}}\n{\"tool\":\"grep\",\"input\":{\"pattern\":\"r\"}}\n";
    let out = s.run(script, &[]);
    assert!(out.status.success());
    assert_eq!(reports(&out)[3]["summary"]["claims"], 0);
    assert!(s.logs().is_empty(), "CMP-9: no claims, no log file");
}

#[test]
fn a_run_continues_in_a_second_process_and_two_processes_share_it() {
    let s = session();
    let first = s.run(&format!("{WRITE}\n"), &[]);
    let run_id = reports(&first).last().unwrap()["summary"]["run_id"].as_str().unwrap().to_owned();
    // Two processes continue the same run at once.
    let script: String = (0..20)
        .map(|i| {
            format!("{{\"tool\":\"write_file\",\"input\":{{\"path\":\"f{i}.txt\",\"content\":\"{i}\"}}}}\n")
        })
        .collect();
    let children: Vec<_> = (0..2).map(|_| s.spawn(&script, &["--run", &run_id])).collect();
    let mut claims: Vec<u64> = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        claims.extend(reports(&out).iter().filter_map(|r| r["claim"].as_u64()));
    }
    claims.sort_unstable();
    claims.dedup();
    assert_eq!(claims.len(), 40, "every claim its own position");
    let logs = s.logs();
    assert_eq!(logs.len(), 1, "one lineage");
    assert!(verify(&logs[0]).starts_with("ok: 82 records"), "1 + 40 claims, each with an outcome");
}

#[test]
fn the_claim_is_fsynced_before_the_target_is_opened() {
    let s = session();
    let log = s.data.join("strace.txt");
    std::fs::create_dir_all(&s.data).unwrap();
    let mut command = Command::new("strace");
    command.args(["-f", "-qq", "-e", "trace=openat,openat2,fdatasync", "-o"]).arg(&log); // cap-std opens with openat2(RESOLVE_BENEATH)
    let inner = s.command(&[]);
    command.arg(inner.get_program()).args(inner.get_args());
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace is installed");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(format!("{WRITE}\n").as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    let trace = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = trace.lines().collect();
    let fsync = lines.iter().position(|l| l.contains("fdatasync(")).expect("the claim was fdatasynced");
    let open = lines
        .iter()
        // Opened for writing through its resolution (ID-3): created
        // `O_CREAT|O_EXCL` when absent, `O_WRONLY` without `O_TRUNC` otherwise.
        .position(|l| l.contains("\"a.txt\"") && l.contains("O_WRONLY"))
        .expect("the target was opened for writing");
    assert!(
        fsync < open,
        "the claim's fdatasync (line {fsync}) must precede the target's open (line {open})"
    );
}

#[test]
fn a_claim_that_cannot_be_persisted_is_blocked_and_the_file_never_touched() {
    use std::os::unix::fs::PermissionsExt;
    let s = session();
    std::fs::create_dir_all(s.data.join("effects")).unwrap();
    std::fs::set_permissions(&s.data, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(s.data.join("effects"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = s.run(&format!("{WRITE}\n"), &[]);
    // A blocked step makes the session exit 1: it did not do what it was asked.
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reports = reports(&out);
    assert_eq!(reports[0]["status"], "BLOCKED", "{reports:?}");
    assert_eq!(reports[1]["summary"]["blocked"], 1);
    assert!(!s.root.join("a.txt").exists(), "the backend never ran");
}

#[test]
fn contradictory_reported_facts_exit_2_and_nothing_recorded_is_lost() {
    // OUT-2 / TRU-1: an exit code, a timeout or a cancellation of a call the
    // runtime says was never executed is bad input, refused whole before any
    // step runs: nothing is recorded as NOT_EXECUTED, and the run's log is
    // left exactly as it was.
    let s = session();
    let first = s.run(&format!("{WRITE}\n"), &["--new-run", "facts"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let log = s.data.join("effects/facts.log");
    let before = std::fs::read(&log).unwrap();
    let b = r#"{"tool": "write_file", "input": {"path": "b.txt", "content": "b\n"}}"#;
    for (reported, named) in [
        (r#"{"executed": false, "exit_code": 3}"#, "exit_code"),
        (r#"{"executed": false, "timed_out": true}"#, "timed_out"),
        (r#"{"executed": false, "cancelled": true}"#, "cancelled"),
    ] {
        let external = format!(
            r#"{{"tool": "external", "input": {{"server": "tracker", "tool": "close"}}, "reported": {reported}}}"#
        );
        let out = s.run(&format!("{b}\n{external}\n"), &["--run", "facts"]);
        assert_eq!(out.status.code(), Some(2), "{reported}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("line 2")
                && stderr.contains(&format!("`executed: false` with {named}"))
                && stderr.contains("say `executed: true`")
                && stderr.contains("nothing was run"),
            "{reported}: {stderr}"
        );
        assert!(!s.root.join("b.txt").exists(), "the valid step before it did not run either");
        assert_eq!(std::fs::read(&log).unwrap(), before, "the log is as it was");
    }
    // The same step with facts that hold runs, and is recorded as they say.
    let ran = r#"{"tool": "external", "input": {"server": "tracker", "tool": "close"}, "reported": {"exit_code": 3}}"#;
    let out = s.run(&format!("{ran}\n"), &["--run", "facts"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(reports(&out)[0]["outcome"]["execution"], "FAILED");
}

// ---- the step result envelope (one shape for every surface) ---------------

/// The keys of every step result, and of its `result`, whatever happened.
const STEP_KEYS: &[&str] = &[
    "action_id",
    "claim",
    "contradicted",
    "launch_settled",
    "observations",
    "outcome",
    "policy_failure",
    "reason",
    "request_id",
    "result",
    "run_id",
    "schema_version",
    "status",
    "step",
    "tool",
    "verifier",
];
const RESULT_KEYS: &[&str] = &[
    "error",
    "exit_code",
    "job_id",
    "job_state",
    "ok",
    "signal",
    "stderr",
    "stdout",
    "survivors",
    "text",
    "timed_out",
    "truncated",
];

fn keys(value: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

#[test]
fn every_step_result_has_every_key_whatever_its_status() {
    let s = session();
    let steps = [
        WRITE,
        r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#,
        r#"{"tool": "write_file", "input": {"path": "../escape.txt", "content": "x"}}"#,
        r#"{"tool": "bash", "input": {"command": "echo out; echo err >&2; exit 3"}}"#,
        r#"{"verify": {"command": "true"}}"#,
    ];
    let out = s.run(&(steps.join("\n") + "\n"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reports = reports(&out);
    let statuses: Vec<&str> = reports[..5].iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["RAN", "RAN", "REFUSED", "RAN", "RAN"]);
    for report in &reports[..5] {
        assert_eq!(keys(report), STEP_KEYS, "{report:#}");
        assert_eq!(keys(&report["result"]), RESULT_KEYS, "{report:#}");
        assert_eq!(report["schema_version"], 1);
    }
    assert!(reports[1]["claim"].is_null(), "an admitted read has no claim");
    assert_eq!(reports[1]["observations"][0]["path"], "a.txt");
    // A failing command: both streams and its exit code, as fields.
    let failed = &reports[3]["result"];
    assert_eq!((failed["ok"].clone(), failed["exit_code"].clone()), (false.into(), 3.into()), "{failed:#}");
    assert_eq!((failed["stdout"].as_str(), failed["stderr"].as_str()), (Some("out\n"), Some("err\n")));
    assert_eq!(reports[3]["outcome"]["execution"], "FAILED");
    assert_eq!(reports[3]["outcome"]["cleanup"], "CLEAN", "one casing for every enum");
    // A check is a step too, with its verifier record.
    assert_eq!(reports[4]["tool"], "bash");
    assert_eq!(reports[4]["verifier"]["passed"], true, "{:#}", reports[4]);
    assert_eq!(reports[5]["schema_version"], 1, "the summary says its shape too");
}

#[test]
fn a_tool_outside_the_catalogue_runs_with_reported_facts_as_an_unbound_effect() {
    let s = session();
    let deploy = r#"{"tool": "deploy", "input": {"env": "prod"}, "reported": {"exit_code": 0}}"#;
    let complete = r#"{"complete": {"answer": "Deployed."}}"#;
    let out = s.run(&format!("{deploy}\n{complete}\n"), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reports = reports(&out);
    assert_eq!(reports[0]["status"], "RAN", "{:#}", reports[0]);
    assert_eq!(reports[0]["claim"], 0);
    assert_eq!(reports[0]["outcome"]["execution"], "REPORTED_SUCCESS");
    let records = support::session::log_records(&s.logs()[0]);
    let claim = &records[0]["record"]["claim"];
    assert_eq!(claim["operation"]["tool"], "deploy");
    assert_eq!(claim["impact_scope"], serde_json::json!([]), "it binds nothing: unknown scope (TRU-1)");
    // The decision discloses the unbound effect by name.
    let decision = &reports[1];
    let codes: Vec<&str> =
        decision["reasons"].as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect();
    assert!(codes.contains(&"UNBOUND_EFFECT_UNVERIFIED"), "{decision:#}");
    assert_ne!(decision["verdict"], "COMPLETED", "{decision:#}");
    assert!(decision["answer"].as_str().unwrap().contains("deploy"), "{decision:#}");
    // Without reported facts it is refused before anything runs.
    let out = s.run(r#"{"tool": "deploy", "input": {"env": "prod"}}"#, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`reported`"));
}

#[test]
fn errors_are_json_objects_under_json() {
    let s = session();
    let out = s.run("not json\n", &[]); // the session helper passes --json
    assert_eq!(out.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(error["error"]["exit_code"], 2, "{error:#}");
    assert!(error["error"]["message"].as_str().unwrap().contains("line 1"), "{error:#}");
    let out = s.command(&["--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains("--no-such-flag"), "{error:#}");
}

#[test]
fn effects_tools_json_lists_the_catalogue_with_schemas_for_model_apis() {
    let out = Command::new(env!("CARGO_BIN_EXE_effects")).args(["tools", "--json"]).output().unwrap();
    assert!(out.status.success());
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"write_file") && names.contains(&"bash") && names.contains(&"external"));
    for tool in &tools {
        assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()), "{tool:#}");
        assert_eq!(tool["input_schema"]["type"], "object", "{tool:#}");
        assert_eq!(tool["input_schema"]["additionalProperties"], false, "{tool:#}");
        assert!(["HOST", "RUNTIME"].contains(&tool["runs_by"].as_str().unwrap()), "{tool:#}");
    }
    let bash = tools.iter().find(|t| t["name"] == "bash").unwrap();
    assert_eq!(bash["input_schema"]["required"], serde_json::json!(["command"]));
}

#[test]
fn a_closed_stdout_ends_the_session_quietly_between_steps() {
    let s = session();
    let many: Vec<String> = (0..50)
        .map(|n| format!(r#"{{"tool": "write_file", "input": {{"path": "f{n}.txt", "content": "x"}}}}"#))
        .collect();
    let mut child =
        s.command(&[]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all((many.join("\n") + "\n").as_bytes()).unwrap();
    drop(child.stdout.take()); // the reader goes away at once
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "no panic, no backtrace");
    // What ran was recorded whole: every claim it made is settled.
    let log = &s.logs()[0];
    assert!(verify(log).starts_with("ok"), "{}", verify(log));
    let records = support::session::log_records(log);
    let claims = records.iter().filter(|r| r["kind"] == "claim").count();
    let outcomes = records.iter().filter(|r| r["kind"] == "outcome").count();
    assert_eq!(claims, outcomes, "no claim left unsettled by the closed pipe");
    assert!(claims < 50, "it stopped at the first line it could not print");
}

/// LOG-10 end to end: a run long enough to be checkpointed is continued by a
/// process that reads only what follows the checkpoint, so damage planted in
/// the part the checkpoint covers does not stop it; a decision reads the
/// whole log and fails closed on that damage.
#[test]
fn continuing_a_checkpointed_run_reads_only_what_follows_and_deciding_reads_it_all() {
    let s = session();
    // 600 write steps: a claim and an outcome each, well past the
    // `CHECKPOINT_EVERY` (256) records after which a writer leaves a checkpoint.
    let script: String = (0..600)
        .map(|i| format!("{{\"tool\": \"write_file\", \"input\": {{\"path\": \"f{i}.txt\", \"content\": \"{i}\\n\"}}}}\n"))
        .collect();
    let first = s.run(&script, &["--new-run", "long"]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let log = s.data.join("effects/long.log");
    assert!(s.data.join("effects/long.log.checkpoint").exists(), "the long session left a checkpoint");
    // Alter a record the checkpoint covers (a stray byte inside line 5).
    let mut bytes = std::fs::read(&log).unwrap();
    let line5 = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(3).unwrap().0 + 1;
    bytes[line5 + 2] = b'X';
    std::fs::write(&log, &bytes).unwrap();
    // The next process continues the run from the checkpoint.
    let next = s.run(&format!("{WRITE}\n"), &["--run", "long"]);
    assert!(
        next.status.success(),
        "continuing reads only the tail: {}",
        String::from_utf8_lossy(&next.stderr)
    );
    assert_eq!(reports(&next)[0]["status"], "RAN");
    // A decision is over the whole log, and refuses it.
    let decided = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", "long", "--require", "a.txt", "--answer", "I wrote a.txt."])
        .output()
        .unwrap();
    assert!(!decided.status.success(), "{}", String::from_utf8_lossy(&decided.stdout));
    assert!(
        String::from_utf8_lossy(&decided.stderr).contains("line 5"),
        "{}",
        String::from_utf8_lossy(&decided.stderr)
    );
    let verified =
        Command::new(env!("CARGO_BIN_EXE_effects")).arg("log").arg("verify").arg(&log).output().unwrap();
    assert!(!verified.status.success(), "log verify reads every record");
}

/// A classifier that fails (here it spins until its fuel runs out) gives the
/// claim unknown scope (POL-4), and the text a person reads says so on the
/// step's line, as `--json` does in `policy_failure`: never silent.
#[test]
fn a_classifier_that_runs_out_of_fuel_is_named_on_the_step_line() {
    let s = session();
    let copy = support::PolicyCopy::new();
    copy.replace("classify-fs.wasm", &support::fixture("endless-loop"));
    let manifest = copy.path("manifest.toml");
    let text = support::session::run_at(&s.data, &s.root, &["--manifest", manifest.to_str().unwrap()], WRITE);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let out = String::from_utf8_lossy(&text.stdout);
    let step = out.lines().find(|l| l.starts_with("[1] write_file")).expect("the step's line");
    assert!(step.contains("(POLICY FAILURE: ") && step.contains("fuel"), "{out}");
    let json = s.run(WRITE, &["--manifest", manifest.to_str().unwrap()]);
    let step = &reports(&json)[0];
    assert!(step["policy_failure"].as_str().unwrap().contains("fuel"), "{step:#}");
}

/// Ctrl-C (SIGINT) or SIGTERM mid-command: the command and what it left
/// running are torn down through its supervisor and settled CANCELLED, no
/// later step starts, the session says what it stopped and exits 130. Before,
/// the session died where it stood and the command ran on.
#[test]
fn a_signal_mid_command_tears_it_down_settles_it_cancelled_and_exits_130() {
    for signal in ["INT", "TERM"] {
        let place = session();
        let script = concat!(
            r#"{"tool": "bash", "input": {"command": "sleep 60 & cut -d' ' -f5 /proc/$$/stat > group; wait"}}"#,
            "\n",
            r#"{"tool": "write_file", "input": {"path": "after.txt", "content": "x\n"}}"#,
            "\n"
        );
        let child = place.spawn(script, &[]);
        let marker = place.root.join("group");
        let started = std::time::Instant::now();
        let group: i32 = loop {
            if let Some(group) = std::fs::read_to_string(&marker).ok().and_then(|t| t.trim().parse().ok()) {
                break group;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "the command never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let sent =
            Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "SIG{signal}: {stderr}");
        assert!(
            stderr.contains(&format!("SIG{signal}: stopped after step 1 of 2 (bash, CANCELLED)")),
            "{stderr}"
        );
        let reports = reports(&out);
        assert_eq!(reports[0]["outcome"]["execution"], "CANCELLED", "{reports:?}");
        assert_eq!(reports[0]["outcome"]["cleanup"], "CLEAN", "torn down, all dead: {reports:?}");
        assert!(!place.root.join("after.txt").exists(), "no later step ran");
        assert!(
            effect_ledger::procfs::live_members(group as u32).is_empty(),
            "nothing of the command's group is left (the background sleep included)"
        );
        assert!(reports.last().unwrap().get("summary").is_some(), "the summary is still printed");
    }
}
