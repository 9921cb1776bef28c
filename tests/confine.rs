//! ID-6 through the `effects` binary, doing the bad things: a `bash` step
//! that writes the lineage's log, cuts its own claim off it, links a store
//! file into the root or writes outside the root is refused by Landlock
//! ("Permission denied"), the log still verifies and the decision is not
//! COMPLETED on forged grounds; writes beneath the root, in `$TMPDIR` and in
//! an `--allow-write` path work; a background job and a `verify` check are
//! confined too; an `--allow-write` reaching the data dir is refused; with
//! `EFFECTS_CONFINE=off` commands run and the decision discloses it; and the
//! supervisor, told to confine and unable to, runs nothing. A background
//! job's private `$TMPDIR` outlives the call that started it and is removed
//! by the read that finds the job over.
//!
//! The review's holes, each done for real: a command running as root makes
//! a block device and mounts (no capabilities are left to it, and device
//! nodes are never granted); a command swaps a later command's writable path
//! for a symlink into the data dir (the supervisor checks the inode and
//! refuses); the ledger's binaries lie beneath the root (commands count as
//! unconfined and the decision discloses it); a descriptor the host
//! inherited is written through (it is closed before the command); a
//! command signals the host (signals are scoped, ABI 6).
//!
//! Where the kernel lacks Landlock every confined case skips with a message
//! (the unconfined-disclosure case runs everywhere).

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

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
    run_command(command, lines)
}

/// Runs `lines` through `command` (an `effects session`), which must
/// succeed; its JSON reports.
fn run_command(mut command: Command, lines: &[String]) -> Vec<Value> {
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

/// Starts `command` as a background job in a new run, which it completes;
/// the job's id and the run's.
fn launch_job(s: &Session, command: &str) -> (String, String) {
    let launch = json!({ "tool": "bash", "input": { "command": command, "background": true } }).to_string();
    let first = run(s, &[launch, complete(&[])], &[], &[]);
    let id = first[0]["result"]["job_id"].as_str().unwrap_or_else(|| panic!("{:#}", first[0])).to_owned();
    (id, decision(&first)["summary"]["run_id"].as_str().unwrap().to_owned())
}

/// The record of job `id`.
fn job_record(s: &Session, id: &str) -> Value {
    serde_json::from_slice(&std::fs::read(s.data.join(format!("effects/jobs/{id}.json"))).unwrap()).unwrap()
}

/// Waits for `condition` until `deadline`, failing as `what` never came.
fn wait_until(deadline: std::time::Instant, what: &str, mut condition: impl FnMut() -> bool) {
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A `bg_job` status read of `id` in run `run_id`, as a later process.
fn job_status(s: &Session, run_id: &str, id: &str) -> Value {
    let status = json!({ "tool": "bg_job", "input": { "job": id, "action": "status" } }).to_string();
    run(s, &[status], &["--run", run_id], &[]).remove(0)
}

#[test]
fn a_background_jobs_private_tmpdir_is_removed_once_a_read_finds_it_over() {
    if !confined_here("the job's TMPDIR") {
        return;
    }
    let s = session();
    let job = "echo $TMPDIR > tmp.txt; mkdir \"$TMPDIR/sub\" && echo scratch > \"$TMPDIR/sub/s\"; \
               for _ in $(seq 1000); do [ -e go ] && break; sleep 0.02; done";
    let (id, run_id) = launch_job(&s, job);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_until(deadline, "the job never started", || {
        s.root.join("tmp.txt").exists() && read(&s.root, "tmp.txt").starts_with('/')
    });
    let tmp = std::path::PathBuf::from(read(&s.root, "tmp.txt"));
    assert!(tmp.to_string_lossy().contains("effects-cmd-"), "a private TMPDIR: {}", tmp.display());
    let record = job_record(&s, &id);
    assert_eq!(record["tmp"]["path"], tmp.to_str().unwrap(), "the job's record names it: {record:#}");

    let running = job_status(&s, &run_id, &id);
    assert!(running["result"]["text"].as_str().unwrap().starts_with("running"), "{running:#}");
    wait_until(deadline, "the job never wrote its scratch file", || tmp.join("sub/s").exists());
    assert!(tmp.join("sub/s").exists(), "a running job keeps its TMPDIR");

    std::fs::write(s.root.join("go"), "").unwrap();
    let over = loop {
        let read = job_status(&s, &run_id, &id);
        if read["result"]["text"].as_str().is_some_and(|t| t.starts_with("exited")) {
            break read;
        }
        assert!(std::time::Instant::now() < deadline, "the job never ended: {read:#}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(over["launch_settled"].is_u64(), "{over:#}");
    assert!(!tmp.exists(), "the read that found it over removed {}", tmp.display());
    let again = job_status(&s, &run_id, &id);
    assert!(again["result"]["text"].as_str().unwrap().starts_with("exited"), "{again:#}");
    verify(&s.logs()[0]);
}

#[test]
fn a_job_starts_under_a_tmpdir_whose_name_is_not_utf8_and_its_record_names_none() {
    if !confined_here("the non-UTF-8 TMPDIR") {
        return;
    }
    use std::os::unix::ffi::OsStrExt;
    let s = session();
    let base = tempfile::tempdir().unwrap();
    let odd = base.path().join(std::ffi::OsStr::from_bytes(b"tmp-\xff"));
    std::fs::create_dir(&odd).unwrap();
    let launch =
        json!({ "tool": "bash", "input": { "command": "touch ran.txt", "background": true } }).to_string();
    let mut command = s.command(&[]);
    command.env("TMPDIR", &odd);
    let steps = run_command(command, &[launch]);
    let id =
        steps[0]["result"]["job_id"].as_str().unwrap_or_else(|| panic!("started: {:#}", steps[0])).to_owned();
    let record = job_record(&s, &id);
    assert!(record.get("tmp").is_none(), "a record cannot name it: {record:#}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_until(deadline, "the job never ran", || s.root.join("ran.txt").exists());
}

#[test]
fn a_job_whose_supervisor_is_killed_by_its_own_escaped_process_is_lost_and_keeps_its_tmpdir() {
    if !confined_here("the escaped process") {
        return;
    }
    let s = session();
    // The command leaves a process outside its group and exits 0; that
    // process kills the supervisor (same Landlock domain: it may), so
    // nothing is left to see it gone, then it goes on using the TMPDIR.
    let job = "echo $TMPDIR > tmp.txt; sup=$PPID; \
               setsid sh -c \"sleep 0.5; kill -9 $sup; sleep 1; echo still > \\\"\\$TMPDIR/alive\\\"; \
               touch escaped.done\" </dev/null >/dev/null 2>&1 &";
    let (id, run_id) = launch_job(&s, job);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    wait_until(deadline, "the escaped process never finished", || s.root.join("escaped.done").exists());
    let tmp = std::path::PathBuf::from(read(&s.root, "tmp.txt"));
    let exit = std::fs::read_to_string(s.data.join(format!("effects/jobs/{id}.exit"))).unwrap();
    assert_eq!(exit, "0\n", "the command's status, and no end: the supervisor died first");
    let read_job = job_status(&s, &run_id, &id);
    assert!(
        read_job["result"]["text"].as_str().unwrap().starts_with("lost"),
        "not exited: nothing saw its tree gone: {read_job:#}"
    );
    assert!(tmp.join("alive").exists(), "a TMPDIR that may still be in use is left alone");
    std::fs::remove_dir_all(&tmp).unwrap();
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
    for confine in
        [vec!["--confine", "7", "--write", "/nonexistent/effects-test", "0:0"], vec!["--confine", "99"]]
    {
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

/// Whether this process is root (the capability attacks need it to mean
/// anything); prints why a test skips when it is not.
fn root_here(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("skipping {test}: not root, so the command has no capabilities to misuse");
    }
    root
}

#[test]
fn a_root_command_cannot_make_a_device_node_or_mount_and_has_no_capabilities() {
    if !confined_here("the capability attacks") || !root_here("the capability attacks") {
        return;
    }
    let s = session();
    // Loop device 0 (block 7:0) and /dev/zero's numbers (char 1:5): a node
    // beneath the root would reach any disk, the store's included.
    let attack = "mknod blk b 7 0 2> blk.err; echo $? > blk.rc; \
                  mknod chr c 1 5 2> chr.err; echo $? > chr.rc; \
                  mkdir sub; mount -t tmpfs none sub 2> mount.err; echo $? > mount.rc; \
                  grep CapEff /proc/self/status > capeff.txt; grep CapBnd /proc/self/status > capbnd.txt; \
                  grep CapAmb /proc/self/status > capamb.txt";
    run(&s, &[write("a.txt", "hi\n"), bash(attack)], &[], &[]);
    for rc in ["blk.rc", "chr.rc", "mount.rc"] {
        assert_ne!(read(&s.root, rc), "0", "{rc}: a root command did it");
    }
    assert!(!s.root.join("blk").exists() && !s.root.join("chr").exists(), "a device node was made");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(s.root.join("sub").to_str().unwrap()), "a tmpfs was mounted");
    for (file, field) in [("capeff.txt", "CapEff"), ("capbnd.txt", "CapBnd"), ("capamb.txt", "CapAmb")] {
        assert_eq!(read(&s.root, file), format!("{field}:\t0000000000000000"), "{file}");
    }
    verify(&s.logs()[0]);
}

#[test]
fn a_command_that_swaps_a_later_commands_writable_path_for_a_symlink_to_the_store_stops_that_command() {
    if !confined_here("the swapped path attack") {
        return;
    }
    let s = session();
    let allowed = tempfile::tempdir().unwrap();
    let nested = allowed.path().join("nested");
    std::fs::create_dir(&nested).unwrap();
    let extra =
        ["--allow-write", allowed.path().to_str().unwrap(), "--allow-write", nested.to_str().unwrap()];
    // The first command may write the outer path, so it can replace the
    // nested one with a symlink to the data dir; the second then writes
    // "through" it.
    let swap = format!(
        "rm -rf '{0}' && ln -s '{1}' '{0}' && echo swapped > swapped.txt",
        nested.display(),
        s.data.display()
    );
    let through = format!("echo forged > '{}/forged' ; touch ran.txt", nested.display());
    let steps = run(&s, &[write("a.txt", "hi\n"), bash(&swap), bash(&through)], &extra, &[]);
    assert!(s.root.join("swapped.txt").exists(), "the swap itself was allowed: {steps:#?}");
    assert!(!s.data.join("forged").exists(), "a command wrote the data dir through the swapped path");
    assert!(!s.root.join("ran.txt").exists(), "the command after the swap ran: {steps:#?}");
    let refused = steps[2].to_string();
    assert!(refused.contains("replaced"), "the report says why it did not run: {refused}");
    verify(&s.logs()[0]);
}

#[test]
fn a_supervisor_refuses_a_writable_path_that_is_no_longer_the_inode_it_was() {
    if !confined_here("the supervisor's inode check") {
        return;
    }
    // The private TMPDIR case, directly: the host made the directory and
    // passed its inode; a symlink now stands at its path, pointing at a
    // directory the command must not write.
    let dir = tempfile::tempdir().unwrap();
    let made = dir.path().join("effects-cmd-made");
    std::fs::create_dir(&made).unwrap();
    let stat = rustix::fs::stat(&made).unwrap();
    let expected = format!("{}:{}", stat.st_dev, stat.st_ino);
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    std::fs::rename(&made, dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&store, &made).unwrap();
    let work = tempfile::tempdir().unwrap();
    let command = format!("echo forged > '{}/forged'", made.display());
    let supervisor = Path::new(env!("CARGO_BIN_EXE_effects")).with_file_name("effects-supervisor");
    let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let out = Command::new(&supervisor)
        .args(["--confine", "3", "--write", made.to_str().unwrap(), &expected, "--", "sh", "-c", &command])
        .current_dir(work.path())
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .output()
        .unwrap();
    let mut said = String::new();
    use std::io::Read;
    (&mine).read_to_string(&mut said).unwrap();
    assert_eq!(out.status.code(), Some(126), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.starts_with("not confined:") && said.contains("replaced"), "{said:?}");
    assert!(!store.join("forged").exists(), "the command ran with write access through the symlink");
}

#[test]
fn binaries_beneath_the_root_make_commands_unconfined_and_the_decision_discloses_it() {
    if !confined_here("the replaceable binaries") {
        return;
    }
    let s = session();
    let bin = s.root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let effects = Path::new(env!("CARGO_BIN_EXE_effects"));
    for name in ["effects", "effects-supervisor"] {
        std::fs::copy(effects.with_file_name(name), bin.join(name)).unwrap();
    }
    let mut command = s.command(&[]);
    let mut copied = Command::new(bin.join("effects"));
    copied.args(command.get_args());
    command = copied;
    let steps =
        run_command(command, &[write("a.txt", "hi\n"), bash("echo ran > ran.txt"), complete(&["a.txt"])]);
    assert_eq!(read(&s.root, "ran.txt"), "ran", "the command ran (unconfined)");
    let records = log_records(&s.logs()[0]);
    assert!(!records.iter().any(|r| r.to_string().contains("\"confined\":true")), "{records:#?}");
    let decided = decision(&steps);
    assert!(decided["disclosures"].as_array().unwrap().iter().any(|d| d == DISCLOSURE), "{decided:#}");
    // The same binaries outside the root confine (the contrast).
    let other = session();
    let steps = run(&other, &[write("a.txt", "hi\n"), bash("true"), complete(&["a.txt"])], &[], &[]);
    assert!(!decision(&steps).to_string().contains(DISCLOSURE), "{:#}", decision(&steps));
}

#[test]
fn a_descriptor_the_host_inherited_does_not_reach_a_command() {
    let s = session();
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("inherited.txt");
    std::fs::write(&file, "before\n").unwrap();
    let command = s.command(&[]);
    // `7>>FILE` opens the file without close-on-exec for `effects`, as a
    // careless parent would.
    let mut wrapped = Command::new("sh");
    wrapped
        .arg("-c")
        .arg(format!("exec \"$0\" \"$@\" 7>>'{}'", file.display()))
        .arg(command.get_program())
        .args(command.get_args());
    let attack = "{ echo leaked >&7; } 2> fd.err; echo $? > fd.rc; \
                  { echo leaked > /proc/self/fd/7; } 2> proc.err; echo $? > proc.rc";
    run_command(wrapped, &[write("a.txt", "hi\n"), bash(attack)]);
    assert_ne!(read(&s.root, "fd.rc"), "0", "fd 7 reached the command");
    assert_ne!(read(&s.root, "proc.rc"), "0", "fd 7 reached the command");
    assert!(read(&s.root, "fd.err").contains("Bad file descriptor"), "{}", read(&s.root, "fd.err"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "before\n", "the file was written");
}

#[test]
fn a_confined_command_cannot_signal_the_host_but_can_signal_its_own_tree() {
    if !confined_here("the signal scoping") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_effects")).args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    if report["landlock"]["abi"].as_i64().unwrap_or(0) < 6 {
        eprintln!("skipping the signal scoping: Landlock ABI below 6 does not scope signals");
        return;
    }
    let s = session();
    // The command's parent is its supervisor (in its domain); the
    // supervisor's parent is `effects` (outside it).
    let attack = "host=$(awk '/^PPid/ {print $2}' /proc/$PPID/status); echo $host > host.pid; \
                  kill -0 $host 2> host.err; echo $? > host.rc; \
                  kill -0 $PPID; echo $? > supervisor.rc; \
                  sleep 30 & kill $!; echo $? > own.rc";
    run(&s, &[write("a.txt", "hi\n"), bash(attack)], &[], &[]);
    assert_ne!(read(&s.root, "host.pid"), "", "found the host");
    assert_ne!(read(&s.root, "host.rc"), "0", "the command signalled the host");
    assert!(read(&s.root, "host.err").contains("Operation not permitted"), "{}", read(&s.root, "host.err"));
    assert_eq!(read(&s.root, "supervisor.rc"), "0", "its own supervisor is in its domain");
    assert_eq!(read(&s.root, "own.rc"), "0", "its own child is in its domain");
    verify(&s.logs()[0]);
}
