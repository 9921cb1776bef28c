//! The effect store defended as issue 16 attacked it (ID-4, LOG-3, LOG-1 and
//! the hardening items), mostly through the `effects` binary: a data dir that
//! is the root or overlaps it, a bind mount of the store beneath the root, a
//! hard link to a log (or a cache file) made during the run, walks into the
//! store or through hard links to it, a key file beneath the root, a fresh
//! data dir never fsynced into its parent, logs written without the operator
//! key and forged, upper-case hex, unbounded scripts, a BLOCKED session
//! exiting 0, `.broken` readable by all or a symlink, and multiply linked
//! launch index and job files.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, IdentityError, SealedRoot, Target};
use effect_ledger::model::ResourceRole;
use serde_json::Value;
use sha2::{Digest, Sha256};

use support::session::{reports, run_at, session};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;

fn effects(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects"));
    command.args(args);
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `effects --data-dir DATA session --root ROOT --json` over `script`.
fn session_at(data: &Path, root: &Path, script: &str, extra: &[&str]) -> Output {
    run_at(data, root, &[&["--json"], extra].concat(), script)
}

fn summary(out: &Output) -> Value {
    reports(out).last().unwrap()["summary"].clone()
}

// ---- ID-4: where the data dir may be ------------------------------------

#[test]
fn a_data_dir_that_is_the_root_beneath_it_or_above_it_is_refused_at_start() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let cases: [(PathBuf, &str); 4] = [
        (root.clone(), "is the root"),
        (root.join("sub/.effects"), "lies beneath"),
        (root.join("new/.effects"), "lies beneath"),
        (base.path().to_path_buf(), "contains"),
    ];
    for (data, what) in cases {
        let out = session_at(&data, &root, &format!("{WRITE}\n"), &[]);
        assert_eq!(out.status.code(), Some(2), "{}: {}", data.display(), stderr(&out));
        let message = stderr(&out);
        assert!(message.contains(what) && message.contains("--data-dir"), "{message}");
        assert!(!root.join("a.txt").exists(), "no step ran");
    }
    assert!(!root.join("new").exists(), "a refused data dir is not created");
    // The default data dir is `./.effects`: with `/` as the root it lies
    // beneath the root wherever the command runs, and is refused.
    std::fs::write(base.path().join("script"), format!("{WRITE}\n")).unwrap();
    let out = effects(&["session", "--root", "/", "--json", "script"])
        .current_dir(base.path())
        .env_remove("EFFECTS_DATA_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("lies beneath"), "{}", stderr(&out));
}

#[test]
fn a_data_dir_reached_by_another_name_is_refused_by_device_and_inode() {
    // `alias` is a symlink to the root: as paths they differ, as directories
    // they are one. The library's check walks `..` by device:inode.
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(&root, base.path().join("alias")).unwrap();
    let out = session_at(&base.path().join("alias/data"), &root, &format!("{WRITE}\n"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("beneath"), "{}", stderr(&out));
    assert!(!root.join("a.txt").exists());
}

#[test]
fn decide_refuses_a_data_dir_inside_the_root_too() {
    let s = session();
    let first = s.run(&format!("{WRITE}\n"), &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let run = summary(&first)["run_id"].as_str().unwrap().to_owned();
    // Move the data dir into the root: the recorded root is found, and the
    // store is now beneath it.
    let inside = s.root.join("data");
    std::fs::rename(&s.data, &inside).unwrap();
    let out =
        effects(&["--data-dir", inside.to_str().unwrap(), "decide", "--run", &run, "--require", "a.txt"])
            .output()
            .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("beneath"), "{}", stderr(&out));
}

#[test]
fn ledger_new_over_a_misplaced_data_dir_refuses_every_call() {
    // A surface that builds a ledger with `Ledger::new` (not `open`) gets the
    // guard too: nothing is dispatched, so no tool ever has the store in
    // reach.
    use effect_ledger::ledger::{Dispatch, Ledger, LedgerConfig};
    use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
    let base = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(base.path().join("data")).unwrap();
    let data = Dir::open_ambient_dir(base.path().join("data"), ambient_authority()).unwrap();
    let root_dir = Dir::open_ambient_dir(base.path(), ambient_authority()).unwrap();
    let root = SealedRoot::new(root_dir, "base", "s", "o", ControlPlane::default()).unwrap();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let config = LedgerConfig::new(data, "data", root, policies);
    let mut ledger = Ledger::new(config);
    let run = ledger.begin_run(None);
    let input = serde_json::json!({"path": "data/effects/x.log", "content": "forged"});
    match ledger.dispatch(&run, "write_file", &input, "r1") {
        Dispatch::Refused(reason) => assert!(reason.contains("beneath the root"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let input = serde_json::json!({"path": "elsewhere.txt", "content": "x"});
    assert!(matches!(ledger.dispatch(&run, "write_file", &input, "r2"), Dispatch::Refused(_)));
    assert!(!base.path().join("data/effects").exists(), "nothing was claimed");
}

// ---- ID-4: hard links made during the run --------------------------------

#[test]
fn a_hard_link_to_the_runs_own_log_made_during_the_session_is_refused() {
    let s = session();
    // Step 1 creates the log (its first claim); step 2 waits until the test
    // has linked that log into the root; step 3 writes through the link.
    let script = format!(
        "{WRITE}\n{}\n{}\n",
        r#"{"tool": "bash", "input": {"command": "for i in $(seq 600); do [ -e go ] && exit 0; sleep 0.05; done; exit 1", "timeout_ms": 60000}}"#,
        r#"{"tool": "write_file", "input": {"path": "x", "content": "truncated\n"}}"#
    );
    let child = s.spawn(&script, &[]);
    let started = Instant::now();
    let log = loop {
        if let Some(log) = s.logs().into_iter().next() {
            break log;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the first claim never created the log");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::fs::hard_link(&log, s.root.join("x")).unwrap();
    std::fs::write(s.root.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let reports = reports(&out);
    assert_eq!(reports[1]["status"], "RAN", "{:#}", reports[1]);
    assert_eq!(reports[2]["status"], "REFUSED", "{:#}", reports[2]);
    let reason = reports[2]["reason"].as_str().unwrap();
    assert!(reason.contains("hard link") && reason.contains("effect store"), "{reason}");
    assert_ne!(std::fs::read(&log).unwrap(), b"truncated\n");
    // A log with two names is refused by every reader (LOG-1): drop the
    // attacker's name, then the log must verify whole.
    std::fs::remove_file(s.root.join("x")).unwrap();
    let verified = effects(&["log", "verify", log.to_str().unwrap()]).output().unwrap();
    assert!(verified.status.success(), "the log is intact: {}", stderr(&verified));
}

#[test]
fn a_link_made_after_the_store_was_listed_is_caught_by_a_fresh_listing() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let data = base.path().join("data");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(root.join("plain"), "p").unwrap();
    std::fs::hard_link(root.join("plain"), root.join("plain2")).unwrap();
    // Listed while the store did not even exist.
    let data_dir = Dir::open_ambient_dir(&data, ambient_authority()).unwrap();
    let control = ControlPlane::for_data_dir(&data_dir, None).unwrap();
    let sealed = SealedRoot::new(
        Dir::open_ambient_dir(&root, ambient_authority()).unwrap(),
        "root",
        "s",
        "o",
        control,
    )
    .unwrap();
    std::fs::create_dir_all(data.join("effects/jobs")).unwrap();
    std::fs::write(data.join("effects/run-1.log"), "").unwrap();
    std::fs::write(data.join("effects/jobs/job-1.out"), "").unwrap();
    std::fs::hard_link(data.join("effects/run-1.log"), root.join("log-alias")).unwrap();
    std::fs::hard_link(data.join("effects/jobs/job-1.out"), root.join("out-alias")).unwrap();
    for alias in ["log-alias", "out-alias"] {
        match sealed.resolve(alias, ResourceRole::Target) {
            Err(IdentityError::ControlPlane { reason, .. }) => {
                assert!(reason.contains("hard link"), "{reason}")
            }
            other => panic!("{alias}: expected a refusal, got {other:?}"),
        }
    }
    // A multiply linked file that is not the store's is the agent's own.
    assert!(sealed.resolve("plain2", ResourceRole::Target).is_ok());
}

#[test]
fn a_ledger_guards_its_own_store_even_when_the_root_was_sealed_without_a_guard() {
    // An embedder seals the root with `ControlPlane::default()`; the ledger
    // guards its data dir anyway, including the log its first claim creates.
    use effect_ledger::ledger::{Dispatch, Ledger, LedgerConfig};
    use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
    use effect_ledger::producers::fs::write_file;
    let base = tempfile::tempdir().unwrap();
    let (root_path, data_path) = (base.path().join("root"), base.path().join("data"));
    std::fs::create_dir_all(&root_path).unwrap();
    std::fs::create_dir_all(&data_path).unwrap();
    let data = Dir::open_ambient_dir(&data_path, ambient_authority()).unwrap();
    let root_dir = Dir::open_ambient_dir(&root_path, ambient_authority()).unwrap();
    let root = SealedRoot::new(root_dir, "root", "s", "o", ControlPlane::default()).unwrap();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let mut ledger = Ledger::open(LedgerConfig::new(data, "data", root, policies)).unwrap();
    let run = ledger.begin_run(None);
    let input = serde_json::json!({"path": "a.txt", "content": "hi\n"});
    let Dispatch::Run(dispatched) = ledger.dispatch(&run, "write_file", &input, "r1") else {
        panic!("the first write is dispatched")
    };
    let target = Target::of(&ledger.root().resolve("a.txt", ResourceRole::Target).unwrap());
    let produced = write_file(ledger.root(), &target, "hi\n");
    ledger.record(&run, &dispatched, &produced.facts).unwrap();
    let log = data_path.join(format!("effects/{}.log", run.lineage));
    std::fs::hard_link(&log, root_path.join("x")).unwrap();
    let input = serde_json::json!({"path": "x", "content": "truncated\n"});
    match ledger.dispatch(&run, "write_file", &input, "r2") {
        Dispatch::Refused(reason) => assert!(reason.contains("hard link"), "{reason}"),
        other => panic!("a write through a link to the log was not refused: {other:?}"),
    }
}

// ---- ID-4: walks never enter the store -----------------------------------

#[test]
fn grep_and_glob_never_enter_the_store_even_when_it_lies_beneath_the_root() {
    use effect_ledger::producers::fs::{glob, grep};
    // Placement refuses this layout at start; the walk guard holds anyway
    // (a bind mount of the store into the root would look just like it).
    let base = tempfile::tempdir().unwrap();
    let root = base.path();
    std::fs::create_dir_all(root.join("data/effects/jobs")).unwrap();
    std::fs::write(root.join("data/effects/run-1.log"), "secret record\n").unwrap();
    std::fs::write(root.join("data/effects/jobs/job-1.out"), "secret output\n").unwrap();
    std::fs::write(root.join("data/top.txt"), "secret data\n").unwrap();
    std::fs::write(root.join("mine.txt"), "secret mine\n").unwrap();
    let data = Dir::open_ambient_dir(root.join("data"), ambient_authority()).unwrap();
    let control = ControlPlane::for_data_dir(&data, None).unwrap();
    let dir = Dir::open_ambient_dir(root, ambient_authority()).unwrap();
    let seal = |control: ControlPlane| {
        let sealed = SealedRoot::new(dir.try_clone().unwrap(), "root", "s", "o", control).unwrap();
        let top = Target::of(&sealed.resolve(".", ResourceRole::Target).unwrap());
        (sealed, top)
    };
    let (guarded, top) = seal(control.clone());
    let found = grep(&guarded, &top, "secret").result.unwrap();
    assert_eq!(found.lines, vec!["mine.txt:1:secret mine"]);
    let globbed = glob(&guarded, &top, "**/*").result.unwrap();
    assert_eq!(globbed.lines, vec!["mine.txt"]);
    // Without the guard the same walk reads the store: the test can fail.
    let (unguarded, top) = seal(ControlPlane::default());
    let unguarded = grep(&unguarded, &top, "secret").result.unwrap();
    assert_eq!(unguarded.lines.len(), 4, "{:?}", unguarded.lines);
    // And a path through the store's directory is refused, not only walks.
    let sealed = SealedRoot::new(dir.try_clone().unwrap(), "root", "s", "o", control).unwrap();
    assert!(matches!(
        sealed.resolve("data/effects/run-1.log", ResourceRole::Target),
        Err(IdentityError::ControlPlane { .. })
    ));
}

// ---- LOG-3: a fresh data dir is fsynced into its parent ------------------

#[test]
fn each_directory_created_for_the_data_dir_is_fsynced_into_its_parent() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("strace is not installed: skipping the LOG-3 data-dir fsync check");
        return;
    }
    let s = session();
    let data = s.root.parent().unwrap().join("one/two/data");
    let trace = s.root.parent().unwrap().join("trace");
    let mut child = Command::new("strace")
        .args(["-f", "-y", "-qq", "-e", "trace=fsync,fdatasync,mkdir,mkdirat", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&data)
        .args(["session", "--json", "--root"])
        .arg(&s.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(format!("{WRITE}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = std::fs::read_to_string(&trace).unwrap().lines().map(str::to_owned).collect();
    let base = s.root.parent().unwrap().canonicalize().unwrap();
    for created in ["one", "one/two", "one/two/data", "one/two/data/effects"] {
        let path = base.join(created);
        let parent = path.parent().unwrap().display().to_string();
        let name = path.file_name().unwrap().to_str().unwrap();
        // `mkdir("/abs/path", ...)` or `mkdirat(N</abs/parent>, "name", ...)`.
        let made = lines
            .iter()
            .position(|l| {
                (l.contains(&format!("mkdir(\"{}\"", path.display()))
                    || l.contains(&format!("<{parent}>, \"{name}\"")))
                    && l.ends_with("= 0")
            })
            .unwrap_or_else(|| panic!("no mkdir of {}:\n{}", path.display(), lines.join("\n")));
        let synced = lines[made..].iter().any(|l| {
            (l.contains("fsync(") || l.contains("fdatasync(")) && l.contains(&format!("<{parent}>"))
        });
        assert!(synced, "{parent} was not fsynced after creating {created}:\n{}", lines.join("\n"));
    }
}

// ---- The operator key on every writer ------------------------------------

/// Rewrites the log at `path` record by record, re-chaining SHA-256 checks
/// without the key, as an attacker who can write the file can; `edit` may
/// change each line's body (without its check).
fn rechain(path: &Path, edit: impl Fn(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut prev = "0".repeat(64);
    let mut out = String::new();
    for line in text.lines() {
        let at = line.rfind(r#","check":""#).unwrap();
        let mut body = line[..at].to_owned();
        body = body.replacen(r#""auth":"hmac-sha256","#, "", 1);
        let prev_at = body.find(r#""prev":""#).unwrap() + 8;
        body.replace_range(prev_at..prev_at + 64, &prev);
        body = edit(body);
        body.push('}');
        let check = hex::encode(Sha256::digest(body.as_bytes()));
        body.pop();
        out.push_str(&format!("{body},\"check\":\"{check}\"}}\n"));
        prev = check;
    }
    std::fs::write(path, out).unwrap();
}

/// An operator key file `name` of 32 bytes `byte`, beside the session's
/// root (outside it, as a key must be): its path.
fn key_beside(s: &support::session::Session, name: &str, byte: u8) -> String {
    let key = s.root.parent().unwrap().join(name);
    std::fs::write(&key, [byte; 32]).unwrap();
    key.to_str().unwrap().to_owned()
}

#[test]
fn a_keyed_session_s_log_resists_an_unkeyed_writer_and_a_rechained_forgery() {
    let s = session();
    let key = key_beside(&s, "key", 7);
    let script = format!(
        "{WRITE}\n{}\n{}\n",
        r#"{"verify": {"command": "exit 1"}}"#,
        r#"{"complete": {"required": ["a.txt"], "answer": "All tests pass."}}"#
    );
    let out = s.run(&script, &["--key-file", &key]);
    assert!(out.status.success(), "{}", stderr(&out));
    let last = reports(&out).last().unwrap().clone();
    assert_eq!(last["verdict"], "FAILED", "{last:#}");
    let run = last["summary"]["run_id"].as_str().unwrap().to_owned();
    let log = s.logs().into_iter().next().unwrap();
    assert!(
        std::fs::read_to_string(&log).unwrap().contains(r#""auth":"hmac-sha256""#),
        "the records are keyed"
    );
    let data = s.data.to_str().unwrap().to_owned();
    let decide = |extra: &[&str]| {
        let mut args = vec!["--data-dir", &data, "decide", "--run", &run, "--require", "a.txt", "--json"];
        args.extend_from_slice(extra);
        effects(&args).env_remove("EFFECTS_LOG_KEY_FILE").output().unwrap()
    };
    // Without the key: neither decided nor appended to.
    let before = std::fs::read(&log).unwrap();
    let unkeyed = decide(&[]);
    assert_ne!(unkeyed.status.code(), Some(0), "{}", String::from_utf8_lossy(&unkeyed.stdout));
    assert!(
        stderr(&unkeyed).contains("keyed") && stderr(&unkeyed).contains("--key-file"),
        "{}",
        stderr(&unkeyed)
    );
    let continued = s.run(&format!("{WRITE}\n"), &["--run", &run]);
    assert_ne!(continued.status.code(), Some(0));
    assert!(stderr(&continued).contains("--key-file"), "{}", stderr(&continued));
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing was appended without the key");
    // With the key, through the environment variable as well.
    let keyed = effects(&["--data-dir", &data, "decide", "--run", &run, "--require", "a.txt", "--json"])
        .env("EFFECTS_LOG_KEY_FILE", &key)
        .output()
        .unwrap();
    assert!(keyed.status.success(), "{}", stderr(&keyed));
    let decided: Value = serde_json::from_slice(&keyed.stdout).unwrap();
    assert_eq!(decided["verdict"], "FAILED");
    // The forgery: the failed check passes, re-chained without the key.
    rechain(&log, |body| body.replace(r#""passed":false,"exit_code":1"#, r#""passed":true,"exit_code":0"#));
    assert!(std::fs::read_to_string(&log).unwrap().contains(r#""passed":true"#), "the forgery took");
    let forged = decide(&["--key-file", &key]);
    assert_ne!(forged.status.code(), Some(0), "{}", String::from_utf8_lossy(&forged.stdout));
    assert!(stderr(&forged).contains("not authenticated"), "{}", stderr(&forged));
    // What the key protects against: without it the forgery would decide.
    let fooled = decide(&[]);
    assert!(fooled.status.success(), "{}", stderr(&fooled));
    let fooled: Value = serde_json::from_slice(&fooled.stdout).unwrap();
    assert!(fooled["verdict"].is_string(), "{fooled:#}");
    assert_ne!(fooled["verdict"], "FAILED", "the forged check reads as passed to an unkeyed reader");
}

/// LOG-6 under the operator key: whole records cut off a keyed log's end
/// (`head -n 3`) need no key: every line left verifies, and so does the
/// chain. Here the cut drops an external call whose disclosure the answer
/// owes. `log verify` and `decide` refuse the cut log, naming the head mark
/// that vouches for the missing records, instead of deciding COMPLETED
/// over what is left.
#[test]
fn a_keyed_log_cut_at_a_record_boundary_is_refused_by_verify_and_decide() {
    let s = session();
    let key = key_beside(&s, "key", 7);
    let external = r#"{"tool": "external", "input": {"server": "tracker", "tool": "create_issue"}, "reported": {"exit_code": 0}}"#;
    let script = format!("{WRITE}\n{}\n{external}\n", r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#);
    let out = s.run(&script, &["--key-file", &key]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = summary(&out)["run_id"].as_str().unwrap().to_owned();
    let log = s.logs().into_iter().next().unwrap();
    let data = s.data.to_str().unwrap().to_owned();
    let decide = || {
        effects(&[
            "--data-dir",
            &data,
            "decide",
            "--key-file",
            &key,
            "--run",
            &run,
            "--require",
            "a.txt",
            "--json",
        ])
        .output()
        .unwrap()
    };
    let whole = decide();
    assert!(whole.status.success(), "{}", stderr(&whole));
    let whole: Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert_eq!(whole["verdict"], "UNVERIFIED", "the external call is disclosed: {whole:#}");
    // Another key is not taken for damage alone: the message says the key
    // may be the wrong one.
    let wrong = key_beside(&s, "wrong-key", 8);
    let log_text = log.to_str().unwrap();
    let mistaken = effects(&["log", "verify", "--key-file", &wrong, log_text]).output().unwrap();
    assert_ne!(mistaken.status.code(), Some(0));
    assert!(stderr(&mistaken).contains("not the key the log was written with"), "{}", stderr(&mistaken));
    // The cut: the first three records, as `head -n 3` leaves them.
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: String = text.split_inclusive('\n').take(3).collect();
    assert!(kept.len() < text.len() && !kept.contains("tracker"), "the external call's records are cut");
    std::fs::write(&log, &kept).unwrap();
    let verified = effects(&["log", "verify", "--key-file", &key, log_text]).output().unwrap();
    assert_ne!(verified.status.code(), Some(0), "{}", String::from_utf8_lossy(&verified.stdout));
    assert!(stderr(&verified).contains("missing from its end"), "{}", stderr(&verified));
    assert!(stderr(&verified).contains(".head"), "it names the mark: {}", stderr(&verified));
    let cut = decide();
    assert_ne!(
        cut.status.code(),
        Some(0),
        "decided over a cut log: {}",
        String::from_utf8_lossy(&cut.stdout)
    );
    assert!(!String::from_utf8_lossy(&cut.stdout).contains("COMPLETED"));
    assert!(stderr(&cut).contains("missing from its end"), "{}", stderr(&cut));
}

// ---- Lower-case hex only --------------------------------------------------

#[test]
fn a_record_whose_check_is_upper_case_hex_fails_verification() {
    let s = session();
    let out = s.run(&format!("{WRITE}\n"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = s.logs().into_iter().next().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let at = lines[1].rfind(r#","check":""#).unwrap() + 10;
    let check = lines[1][at..at + 64].to_owned();
    assert!(check.bytes().any(|b| b.is_ascii_alphabetic()), "a check with a letter in it");
    lines[1].replace_range(at..at + 64, &check.to_uppercase());
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let verified = effects(&["log", "verify", log.to_str().unwrap()]).output().unwrap();
    assert_eq!(verified.status.code(), Some(1), "{}", String::from_utf8_lossy(&verified.stdout));
    let said = format!("{}{}", String::from_utf8_lossy(&verified.stdout), stderr(&verified));
    assert!(said.contains("line 2"), "{said}");
}

// ---- Bounded inputs -------------------------------------------------------

#[test]
fn an_endless_script_is_refused_at_the_bound() {
    let s = session();
    let started = Instant::now();
    let out = Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["session", "--root"])
        .arg(&s.root)
        .arg("/dev/zero")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("16 MiB"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(30));
    let key = effects(&["log", "verify", "--key-file", "/dev/zero", "x.log"]).output().unwrap();
    assert_eq!(key.status.code(), Some(2), "{}", stderr(&key));
    assert!(stderr(&key).contains("16 MiB"), "{}", stderr(&key));
}

// ---- Exit status ----------------------------------------------------------

#[test]
fn a_session_whose_steps_were_blocked_does_not_exit_0() {
    let s = session();
    // The store directory is not this user's: the log cannot be opened for
    // the claim, so the step is BLOCKED and never runs (LOG-4). As root the
    // owner is changed; otherwise its mode takes the writes away.
    let store = s.data.join("effects");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
    let chowned = Command::new("chown").arg("65534").arg(&store).status().is_ok_and(|st| st.success());
    if !chowned {
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o500)).unwrap();
    }
    let out = s.run(&format!("{WRITE}\n"), &[]);
    let reports = reports(&out);
    assert_eq!(reports[0]["status"], "BLOCKED", "{:#?} {}", reports, stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("BLOCKED"), "{}", stderr(&out));
    assert_eq!(summary(&out)["blocked"], 1);
    assert!(!s.root.join("a.txt").exists(), "a blocked step never runs");
}

// ---- .broken is private ---------------------------------------------------

/// A log of one session with a torn final line appended.
fn torn_log(s: &support::session::Session) -> PathBuf {
    let out = s.run(&format!("{WRITE}\n"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = s.logs().into_iter().next().unwrap();
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(b"{\"position\":9,\"torn")
        .unwrap();
    log
}

#[test]
fn recover_keeps_a_torn_tail_in_a_private_broken_file() {
    let s = session();
    let log = torn_log(&s);
    // A `.broken` already there, readable by all: appended to, made 0600.
    let broken = PathBuf::from(format!("{}.broken", log.display()));
    std::fs::write(&broken, b"earlier\n").unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o644)).unwrap();
    let recovered = effects(&["log", "recover", log.to_str().unwrap()]).output().unwrap();
    assert!(recovered.status.success(), "{}", stderr(&recovered));
    assert_eq!(std::fs::read(&broken).unwrap(), b"earlier\n{\"position\":9,\"torn");
    assert_eq!(std::fs::metadata(&broken).unwrap().permissions().mode() & 0o7777, 0o600);
}

#[test]
fn recover_does_not_follow_a_symlink_planted_at_the_broken_name() {
    let s = session();
    let log = torn_log(&s);
    // Beside the log, named relatively: a symlink that stays in the
    // directory is one cap-std would follow; only O_NOFOLLOW refuses it.
    let victim = log.parent().unwrap().join("victim");
    std::fs::write(&victim, b"victim\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let broken = PathBuf::from(format!("{}.broken", log.display()));
    std::os::unix::fs::symlink("victim", &broken).unwrap();
    let before = std::fs::read(&log).unwrap();
    let recovered = effects(&["log", "recover", log.to_str().unwrap()]).output().unwrap();
    assert_ne!(recovered.status.code(), Some(0), "{}", String::from_utf8_lossy(&recovered.stdout));
    assert_eq!(std::fs::read(&victim).unwrap(), b"victim\n", "nothing written through the link");
    assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o7777, 0o644);
    assert_eq!(std::fs::read(&log).unwrap(), before, "the torn tail is not cut without being kept");
}

// ---- Launch index and job files have one name ----------------------------

#[test]
fn a_multiply_linked_job_record_or_launch_index_is_refused() {
    let s = session();
    let out = s.run(r#"{"tool": "bash", "input": {"command": "true", "background": true}}"#, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let run = summary(&out)["run_id"].as_str().unwrap().to_owned();
    let job = reports(&out)[0]["result"]["job_id"].as_str().unwrap().to_owned();
    let generation = job.strip_prefix("job-").unwrap();
    let elsewhere = s.root.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let record = s.data.join(format!("effects/jobs/{job}.json"));
    std::fs::hard_link(&record, elsewhere.join("job.json")).unwrap();
    let status = format!(r#"{{"tool": "bg_job", "input": {{"job": "{job}", "action": "status"}}}}"#);
    let out = s.run(&format!("{status}\n"), &["--run", &run]);
    let said = format!("{}", reports(&out)[0]);
    assert!(said.contains("hard links"), "{said}");
    std::fs::remove_file(elsewhere.join("job.json")).unwrap();
    // The launch index, read by the library as any surface would.
    let index = s.data.join(format!("effects/launch-{generation}.json"));
    assert!(index.exists(), "{}", index.display());
    std::fs::hard_link(&index, elsewhere.join("launch.json")).unwrap();
    let effects_dir = Dir::open_ambient_dir(s.data.join("effects"), ambient_authority()).unwrap();
    let read = effect_ledger::log::read_launch_index(&effects_dir, "effects", generation.parse().unwrap());
    match read {
        Err(error) => assert!(error.to_string().contains("hard links"), "{error}"),
        Ok(entry) => panic!("a multiply linked launch index was read: {entry:?}"),
    }
}

// ---- ID-4: mounts beneath the root that show the store -------------------

/// A bind mount made by the test, unmounted when dropped (also on a panic).
struct BindMount(PathBuf);

impl BindMount {
    /// `mount --bind from at`, or `None` (and why, printed) where the test
    /// may not mount.
    fn new(from: &Path, at: &Path) -> Option<Self> {
        let out = Command::new("mount").arg("--bind").arg(from).arg(at).output();
        match out {
            Ok(out) if out.status.success() => Some(Self(at.to_path_buf())),
            Ok(out) => {
                eprintln!("cannot bind-mount here ({}): skipping", stderr(&out).trim());
                None
            }
            Err(error) => {
                eprintln!("no mount command ({error}): skipping");
                None
            }
        }
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn a_mount_beneath_the_root_that_shows_the_store_is_refused_at_start() {
    if !is_root() {
        eprintln!("not root: skipping the bind-mount test (CI runs it as root)");
        return;
    }
    let s = session();
    let first = s.run(&format!("{WRITE}\n"), &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let log = s.logs().into_iter().next().unwrap();
    assert!(s.data.join("cache/components").is_dir(), "the session made its cache");
    let base = s.root.parent().unwrap().to_path_buf();
    let write_b = r#"{"tool": "write_file", "input": {"path": "b.txt", "content": "b\n"}}"#;
    // (what is mounted, a directory or a file mount point, what the refusal says)
    let cases: [(PathBuf, bool, &str); 5] = [
        (s.data.clone(), true, "the data dir or a directory that contains it"),
        (base.clone(), true, "the data dir or a directory that contains it"),
        (s.data.join("effects"), true, "a directory of the effect store"),
        (s.data.join("cache/components"), true, "a directory of the effect store"),
        (log.clone(), false, "a file of the effect store"),
    ];
    for (from, directory, what) in cases {
        let at = s.root.join("x");
        if directory {
            std::fs::create_dir(&at).unwrap();
        } else {
            std::fs::write(&at, "").unwrap();
        }
        let Some(mounted) = BindMount::new(&from, &at) else { return };
        let before = std::fs::read(&log).unwrap();
        let out = s.run(&format!("{write_b}\n"), &[]);
        assert_eq!(out.status.code(), Some(2), "{}: {}", from.display(), stderr(&out));
        let message = stderr(&out);
        assert!(message.contains("mount beneath the root") && message.contains(what), "{message}");
        assert!(message.contains(&at.canonicalize().unwrap().display().to_string()), "{message}");
        assert!(!s.root.join("b.txt").exists(), "no step ran");
        assert_eq!(std::fs::read(&log).unwrap(), before, "nothing was appended");
        // `decide` opens the same way and refuses too.
        let run = summary(&first)["run_id"].as_str().unwrap().to_owned();
        let decided =
            effects(&["--data-dir", s.data.to_str().unwrap(), "decide", "--run", &run, "--require", "a.txt"])
                .output()
                .unwrap();
        assert_eq!(decided.status.code(), Some(2), "{}", stderr(&decided));
        drop(mounted);
        if directory {
            std::fs::remove_dir(&at).unwrap();
        } else {
            std::fs::remove_file(&at).unwrap();
        }
    }
    // A mount beneath the root that shows something else is the agent's.
    let elsewhere = base.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::create_dir(s.root.join("x")).unwrap();
    let Some(_mounted) = BindMount::new(&elsewhere, &s.root.join("x")) else { return };
    let out = s.run(&format!("{write_b}\n"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(s.root.join("b.txt").exists());
}

#[test]
fn the_library_refuses_a_mount_that_shows_the_store_for_every_surface() {
    // Not only the CLI: `Ledger::open` refuses at start, and a `Ledger::new`
    // (a surface that does not check) refuses every call, so serve, hook and
    // mcp get the same guard through the step engine.
    use effect_ledger::ledger::{Ledger, LedgerConfig, StepRequest, StepStatus};
    use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
    use effect_ledger::tools::Call;
    if !is_root() {
        eprintln!("not root: skipping the bind-mount test (CI runs it as root)");
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let (root_path, data_path) = (base.path().join("root"), base.path().join("data"));
    std::fs::create_dir_all(root_path.join("x")).unwrap();
    std::fs::create_dir_all(&data_path).unwrap();
    let Some(_mounted) = BindMount::new(&data_path, &root_path.join("x")) else { return };
    let config = || {
        let data = Dir::open_ambient_dir(&data_path, ambient_authority()).unwrap();
        let root_dir = Dir::open_ambient_dir(&root_path, ambient_authority()).unwrap();
        let display = root_path.canonicalize().unwrap().display().to_string();
        let root = SealedRoot::new(root_dir, &display, "s", "o", ControlPlane::default()).unwrap();
        let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
        LedgerConfig::new(data, "data", root, policies)
    };
    let refused = Ledger::open(config()).err().expect("open refuses a mount that shows the store");
    assert!(refused.to_string().contains("mount beneath the root"), "{refused}");
    let mut ledger = Ledger::new(config());
    let run = ledger.begin_run(None);
    let call = Call::parse("write_file", &serde_json::json!({"path": "a.txt", "content": "hi\n"})).unwrap();
    let result = ledger.step(&run, &StepRequest::new(1, "r1", call, None).unwrap());
    assert_eq!(result.status, StepStatus::Refused, "{result:?}");
    assert!(result.reason.unwrap().contains("mount beneath the root"));
    assert!(!root_path.join("a.txt").exists(), "nothing ran");
    assert!(!data_path.join("effects").exists(), "nothing was claimed");
}

// ---- ID-4: walks skip hard links to store files ---------------------------

#[test]
fn grep_glob_and_ls_skip_a_hard_link_to_a_store_file_but_not_the_agents_own() {
    use effect_ledger::producers::fs::{glob, grep, ls};
    let base = tempfile::tempdir().unwrap();
    let (root, data) = (base.path().join("root"), base.path().join("data"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(data.join("effects/jobs")).unwrap();
    std::fs::create_dir_all(data.join("cache/components/0123abcd")).unwrap();
    std::fs::write(data.join("effects/run-1.log"), "secret record\n").unwrap();
    std::fs::write(data.join("effects/jobs/job-1.out"), "secret output\n").unwrap();
    std::fs::write(data.join("cache/components/secret"), "secret key\n").unwrap();
    std::fs::write(data.join("cache/components/0123abcd/e.cwasm"), "secret entry\n").unwrap();
    std::fs::write(root.join("mine.txt"), "secret mine\n").unwrap();
    std::fs::hard_link(root.join("mine.txt"), root.join("mine2.txt")).unwrap();
    let links = [
        ("effects/run-1.log", "log"),
        ("effects/jobs/job-1.out", "out"),
        ("cache/components/secret", "s"),
        ("cache/components/0123abcd/e.cwasm", "entry"),
    ];
    for (store_file, name) in links {
        std::fs::hard_link(data.join(store_file), root.join(name)).unwrap();
    }
    let data_dir = Dir::open_ambient_dir(&data, ambient_authority()).unwrap();
    let seal = |control: ControlPlane| {
        let dir = Dir::open_ambient_dir(&root, ambient_authority()).unwrap();
        let sealed = SealedRoot::new(dir, "root", "s", "o", control).unwrap();
        let top = Target::of(&sealed.resolve(".", ResourceRole::Target).unwrap());
        (sealed, top)
    };
    let (guarded, top) = seal(ControlPlane::for_data_dir(&data_dir, None).unwrap());
    let found = grep(&guarded, &top, "secret").result.unwrap();
    assert_eq!(found.lines, vec!["mine.txt:1:secret mine", "mine2.txt:1:secret mine"]);
    assert_eq!(glob(&guarded, &top, "**/*").result.unwrap().lines, vec!["mine.txt", "mine2.txt"]);
    assert_eq!(ls(&guarded, &top).result.unwrap().lines, vec!["mine.txt", "mine2.txt"]);
    // read_file's resolution refuses the same names, the cache's included.
    for (_, name) in links {
        match guarded.resolve(name, ResourceRole::Target) {
            Err(IdentityError::ControlPlane { reason, .. }) => {
                assert!(reason.contains("hard link"), "{reason}")
            }
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    // Without the guard the same walk reads every linked store file.
    let (unguarded, top) = seal(ControlPlane::default());
    assert_eq!(grep(&unguarded, &top, "secret").result.unwrap().lines.len(), 6);
}

#[test]
fn a_hard_link_to_the_cache_secret_is_refused_to_read_file_and_unlisted_by_glob() {
    let s = session();
    let first = s.run(&format!("{WRITE}\n"), &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let secret = s.data.join("cache/components/secret");
    assert!(secret.is_file(), "the session made the cache's secret");
    std::fs::hard_link(&secret, s.root.join("s")).unwrap();
    let script = [
        r#"{"tool": "read_file", "input": {"path": "s"}}"#,
        r#"{"tool": "glob", "input": {"pattern": "**"}}"#,
        r#"{"tool": "grep", "input": {"pattern": "."}}"#,
    ]
    .join("\n");
    let out = s.run(&format!("{script}\n"), &[]);
    let reports = reports(&out);
    assert_eq!(reports[0]["status"], "REFUSED", "{:#}", reports[0]);
    let reason = reports[0]["reason"].as_str().unwrap();
    assert!(reason.contains("hard link") && reason.contains("effect store"), "{reason}");
    let listed = reports[1].to_string();
    assert!(
        listed.contains("a.txt") && !listed.contains("\\\"s\\\"") && !listed.contains("\"s\""),
        "{listed}"
    );
    let grepped = reports[2].to_string();
    assert!(grepped.contains("a.txt:1:hi") && !grepped.contains("s:1:"), "{grepped}");
}

// ---- ID-4: the operator key out of the tools' reach -----------------------

#[test]
fn a_key_file_beneath_the_root_is_refused_and_a_loose_one_is_warned_about() {
    let s = session();
    std::fs::create_dir_all(s.root.join("keys")).unwrap();
    let inside = s.root.join("keys/key");
    std::fs::write(&inside, [7u8; 32]).unwrap();
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Named directly, and through a symlink from outside the root.
    let link = s.root.parent().unwrap().join("key-link");
    std::os::unix::fs::symlink(&inside, &link).unwrap();
    for key in [&inside, &link] {
        let out = s.run(&format!("{WRITE}\n"), &["--key-file", key.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("lies beneath the root"), "{}", stderr(&out));
        assert!(!s.root.join("a.txt").exists(), "no step ran");
    }
    // Outside the root: used; a private one silently, a 0644 one with a warning.
    let outside = s.root.parent().unwrap().join("key");
    std::fs::write(&outside, [7u8; 32]).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = s.run(&format!("{WRITE}\n"), &["--key-file", outside.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning: key file"), "{}", stderr(&out));
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = s.run(&format!("{WRITE}\n"), &["--key-file", outside.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: key file") && stderr(&out).contains("0644"), "{}", stderr(&out));
}
