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
    assert_eq!(reports[0]["status"], "refused");
    assert!(reports[0].get("claim").is_none());
    assert_eq!(reports[1]["status"], "ran");
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
    assert_eq!(reports[0]["status"], "blocked", "{reports:?}");
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
