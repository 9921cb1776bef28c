//! ID-6 through the `effects` binary, doing the bad things: a `bash` step
//! that writes the lineage's log, cuts its own claim off it, links a store
//! file into the root or writes outside the root is refused by Landlock
//! ("Permission denied"), the log still verifies and the decision is not
//! COMPLETED on forged grounds; writes beneath the root, in `$TMPDIR` and in
//! an `--allow-write` path work; a background job and a `verify` check are
//! confined too; an `--allow-write` reaching the data dir is refused; with
//! `EFFECTS_CONFINE=off` commands run and the decision discloses it; and the
//! supervisor, told to confine and unable to, runs nothing.
//!
//! Where the kernel lacks Landlock every confined case skips with a message
//! (the unconfined-disclosure case runs everywhere).

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::session::{Session, log_records, reports, session, verify};

const DISCLOSURE: &str = "Commands ran without write confinement.";

/// Whether this machine confines commands (`effects doctor --json`); prints
/// why a test skips when it does not.
fn confined_here(test: &str) -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_effects")).args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let confined = report["commands"]["confined"] == true;
    if !confined {
        eprintln!("skipping {test}: commands cannot be confined here: {}", report["commands"]["detail"]);
    }
    confined
}

fn bash(command: &str) -> String {
    json!({ "tool": "bash", "input": { "command": command, "timeout_ms": 20_000 } }).to_string()
}

fn write(path: &str, content: &str) -> String {
    json!({ "tool": "write_file", "input": { "path": path, "content": content } }).to_string()
}

fn complete(required: &[&str]) -> String {
    json!({ "complete": { "required": required, "answer": "Done." } }).to_string()
}

/// Runs `lines` as a session (with `extra` arguments and `env`), which must
/// succeed; its JSON reports.
fn run(s: &Session, lines: &[String], extra: &[&str], env: &[(&str, &str)]) -> Vec<Value> {
    let mut command = s.command(extra);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all((lines.join("\n") + "\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() || out.status.code() == Some(1), "{stderr}");
    reports(&out)
}

/// A root file the command wrote, trimmed.
fn read(root: &Path, name: &str) -> String {
    std::fs::read_to_string(root.join(name)).unwrap_or_else(|e| panic!("{name}: {e}")).trim().to_owned()
}

/// The last report, a decision.
fn decision(steps: &[Value]) -> &Value {
    steps.last().unwrap()
}

/// `$D/effects/*.log` as a shell word for the data dir `data`.
fn logs_glob(data: &Path) -> String {
    format!("'{}'/effects/*.log", data.display())
}

#[test]
fn a_command_cannot_write_truncate_or_cut_its_claim_off_the_log_and_the_log_still_verifies() {
    if !confined_here("the log attack") {
        return;
    }
    let s = session();
    let logs = logs_glob(&s.data);
    // The attack of issue 16: cut its own claim (and processes record) off
    // the log, then change a required file behind it.
    let attack = format!(
        "for f in {logs}; do \
           {{ echo forged >> \"$f\"; }} 2> append.err; echo $? > append.rc; \
           n=$(head -n -2 \"$f\" | wc -c); truncate -s \"$n\" \"$f\" 2> cut.err; echo $? > cut.rc; \
           {{ : > \"$f\"; }} 2> empty.err; echo $? > empty.rc; \
         done; echo changed > a.txt"
    );
    let steps = run(&s, &[write("a.txt", "hi\n"), bash(&attack), complete(&["a.txt"])], &[], &[]);
    for (rc, err) in [("append.rc", "append.err"), ("cut.rc", "cut.err"), ("empty.rc", "empty.err")] {
        assert_ne!(read(&s.root, rc), "0", "{rc}: the command wrote the log");
        assert!(read(&s.root, err).contains("Permission denied"), "{err}: {}", read(&s.root, err));
    }
    let log = &s.logs()[0];
    verify(log);
    let records = log_records(log);
    let claims: Vec<&Value> = records.iter().filter(|r| r.to_string().contains("\"bash\"")).collect();
    assert!(!claims.is_empty(), "the command's claim is still in the log: {records:#?}");
    assert!(records.iter().any(|r| r.to_string().contains("\"confined\":true")), "the claim says confined");
    let decided = decision(&steps);
    assert_ne!(decided["verdict"], "COMPLETED", "{decided:#}");
    assert!(!decided.to_string().contains(DISCLOSURE), "confined: nothing to disclose: {decided:#}");
}

#[test]
fn a_command_cannot_link_a_store_file_into_the_root_nor_write_outside_it() {
    if !confined_here("the link and outside attacks") {
        return;
    }
    let s = session();
    let outside = tempfile::tempdir().unwrap();
    let logs = logs_glob(&s.data);
    let attack = format!(
        "for f in {logs}; do ln \"$f\" linked.log 2> ln.err; echo $? > ln.rc; done; \
         {{ echo x > '{}/escaped'; }} 2> out.err; echo $? > out.rc; \
         mkdir '{}/dir' 2> mkdir.err; echo $? > mkdir.rc",
        outside.path().display(),
        outside.path().display()
    );
    run(&s, &[write("a.txt", "hi\n"), bash(&attack)], &[], &[]);
    assert_ne!(read(&s.root, "ln.rc"), "0");
    assert!(
        read(&s.root, "ln.err").contains("Permission denied")
            || read(&s.root, "ln.err").contains("Invalid cross-device"),
        "ln: {}",
        read(&s.root, "ln.err")
    );
    assert!(!s.root.join("linked.log").exists(), "a store file was linked into the root");
    for (rc, err) in [("out.rc", "out.err"), ("mkdir.rc", "mkdir.err")] {
        assert_ne!(read(&s.root, rc), "0", "{rc}");
        assert!(read(&s.root, err).contains("Permission denied"), "{err}: {}", read(&s.root, err));
    }
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing was written outside the root"
    );
    verify(&s.logs()[0]);
}

#[test]
fn a_command_writes_beneath_the_root_its_tmpdir_and_allowed_paths() {
    if !confined_here("the allowed writes") {
        return;
    }
    let s = session();
    let allowed = tempfile::tempdir().unwrap();
    let work = format!(
        "mkdir -p sub && echo in > sub/in.txt && echo $TMPDIR > tmpdir.txt && echo t > \"$TMPDIR/t\" \
         && mktemp > /dev/null && echo a > '{}/allowed.txt' && echo gone > /dev/null && echo ok > ok.txt",
        allowed.path().display()
    );
    let extra = ["--allow-write", allowed.path().to_str().unwrap()];
    run(&s, &[bash(&work)], &extra, &[]);
    assert_eq!(read(&s.root, "ok.txt"), "ok", "every allowed write succeeded");
    assert_eq!(read(&s.root, "sub/in.txt"), "in");
    assert_eq!(std::fs::read_to_string(allowed.path().join("allowed.txt")).unwrap(), "a\n");
    let tmpdir = read(&s.root, "tmpdir.txt");
    assert!(tmpdir.contains("effects-cmd-"), "a private TMPDIR: {tmpdir}");
    assert!(!Path::new(&tmpdir).exists(), "a foreground command's TMPDIR is removed once it is over");
}

#[test]
fn an_allowed_path_that_reaches_the_data_dir_is_refused() {
    let s = session();
    std::fs::create_dir_all(s.data.join("effects")).unwrap();
    let parent = s.data.parent().unwrap().to_str().unwrap().to_owned();
    for path in [s.data.to_str().unwrap().to_owned(), s.data.join("effects").display().to_string(), parent] {
        let out = s.run(&(bash("echo hi > a.txt") + "\n"), &["--allow-write", &path]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--allow-write {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("data dir"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!s.root.join("a.txt").exists(), "nothing ran");
    }
}

#[test]
fn a_background_job_and_a_check_are_confined_too() {
    if !confined_here("the job and check attacks") {
        return;
    }
    let s = session();
    let logs = logs_glob(&s.data);
    let job_dir = format!("'{}'/effects/jobs", s.data.display());
    let job = format!(
        "for f in {logs}; do {{ echo forged >> \"$f\"; }} 2> job.err; echo $? > job.rc; done; \
         for f in {job_dir}/*.exit; do {{ echo 0 > \"$f\"; }} 2> exit.err; echo $? > exit.rc; done; \
         {{ echo forged >> /proc/$PPID/fd/1; }} 2> fd.err; echo $? > fd.rc; touch job.done"
    );
    let launch = json!({ "tool": "bash", "input": { "command": job, "background": true } }).to_string();
    let check = format!(
        "for f in {logs}; do {{ echo forged >> \"$f\"; }} 2> check.err; echo $? > check.rc; done; true"
    );
    let check = json!({ "verify": { "command": check, "timeout_ms": 20_000 } }).to_string();
    let wait = bash("for i in $(seq 200); do [ -e job.done ] && break; sleep 0.05; done");
    run(&s, &[write("a.txt", "hi\n"), launch, wait, check], &[], &[]);
    for (rc, err) in
        [("job.rc", "job.err"), ("exit.rc", "exit.err"), ("fd.rc", "fd.err"), ("check.rc", "check.err")]
    {
        assert_ne!(read(&s.root, rc), "0", "{rc}: the store was written");
        assert!(read(&s.root, err).contains("Permission denied"), "{err}: {}", read(&s.root, err));
    }
    verify(&s.logs()[0]);
}

#[test]
fn unconfined_commands_run_and_every_decision_discloses_it() {
    let s = session();
    let steps = run(
        &s,
        &[write("a.txt", "hi\n"), bash("echo ran > ran.txt"), complete(&["a.txt"])],
        &[],
        &[("EFFECTS_CONFINE", "off")],
    );
    assert_eq!(read(&s.root, "ran.txt"), "ran", "the command ran");
    let decided = decision(&steps);
    let disclosures = decided["disclosures"].as_array().unwrap();
    assert!(disclosures.iter().any(|d| d == DISCLOSURE), "{decided:#}");
    assert!(decided.to_string().contains("UNCONFINED_COMMAND"), "{decided:#}");
    // A later `decide` (confined or not, here) reads the claim's record and
    // discloses it again.
    let run_id = s.logs()[0].file_stem().unwrap().to_str().unwrap().to_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["decide", "--run", &run_id, "--json", "--require", "a.txt"])
        .output()
        .unwrap();
    let later: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(later["disclosures"].as_array().unwrap().iter().any(|d| d == DISCLOSURE), "{later:#}");
    assert!(later.to_string().contains(DISCLOSURE), "{later:#}");
}

#[test]
fn a_supervisor_told_to_confine_that_cannot_runs_nothing() {
    if !confined_here("the supervisor's refusal") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let supervisor = Path::new(env!("CARGO_BIN_EXE_effects")).with_file_name("effects-supervisor");
    let marker = dir.path().join("ran");
    let command = format!("touch '{}'", marker.display());
    // A path that cannot be opened, and an ABI this kernel cannot fully
    // enforce (the greatest the crate knows): the domain would not be the
    // one asked for, so the command must not run.
    for confine in [vec!["--confine", "7", "--write", "/nonexistent/effects-test"], vec!["--confine", "99"]] {
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let out = Command::new(&supervisor)
            .args(&confine)
            .args(["--", "sh", "-c", &command])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .output()
            .unwrap();
        let _ = mine.shutdown(std::net::Shutdown::Write);
        let mut said = String::new();
        use std::io::Read;
        (&mine).read_to_string(&mut said).unwrap();
        if confine[1] == "99" && said.trim() == "confined" {
            eprintln!("this kernel enforces every ABI the crate knows; the ABI case says nothing here");
            continue;
        }
        assert_eq!(out.status.code(), Some(126), "{confine:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(said.starts_with("not confined:"), "{confine:?}: {said:?}");
        assert!(!marker.exists(), "{confine:?}: the command ran unconfined");
    }
}
