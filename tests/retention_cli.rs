//! Retention (SPEC 9) through the `effects` binary: `log seal` archives a
//! settled lineage with a summary its archive verifies against, refuses a
//! lineage with an open claim, and stops every later append (a handle
//! opened before the seal included); `--check` catches a flipped byte, an
//! edited summary and a re-digested forgery; `log prune` removes only
//! lineages sealed longer ago than asked and keeps their tombstone.

use crate::support;

use std::io::Read;
use std::process::{Command, Output};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde_json::Value;
use sha2::{Digest, Sha256};
use support::session::{Session, session};

use effect_ledger::data_dir::DataDir;
use effect_ledger::log::{LogError, OpenMode, OpenOptionsLog};

const WRITE: &str = r#"{"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}"#;
const READ: &str = r#"{"tool": "read_file", "input": {"path": "a.txt"}}"#;
const COMPLETE: &str = r#"{"complete": {"required": ["a.txt"], "answer": "I wrote a.txt."}}"#;

fn effects(s: &Session, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_effects")).arg("--data-dir").arg(&s.data).args(args).output().unwrap()
}

fn ok_json(s: &Session, args: &[&str]) -> Value {
    let out = effects(s, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A run `id` that wrote, read back and decided.
fn settled_run(s: &Session, id: &str) {
    let out = s.run(&[WRITE, READ, COMPLETE].join("\n"), &["--new-run", id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn a_settled_lineage_seals_into_an_archive_that_verifies_and_takes_no_more_records() {
    let s = session();
    settled_run(&s, "done");
    let log = s.data.join("effects/done.log");
    let bytes = std::fs::read(&log).unwrap();
    // A handle opened before the seal, as a long-lived process holds one.
    let data = DataDir::new(Dir::open_ambient_dir(&s.data, ambient_authority()).unwrap(), "data");
    let options = OpenOptionsLog { mode: OpenMode::ReadWrite, recover: false, ..Default::default() };
    let mut early = data.open_lineage("done", false, &options).unwrap().unwrap();

    let summary = ok_json(&s, &["log", "seal", "--run", "done", "--json"]);
    assert_eq!(summary["records"], bytes.iter().filter(|&&b| b == b'\n').count() as u64, "{summary:#}");
    assert_eq!(summary["bytes"], bytes.len() as u64);
    assert_eq!(summary["log_sha256"], sha256(&bytes));
    assert_eq!(summary["decisions"][0]["verdict"], "COMPLETED", "{summary:#}");
    assert_eq!(summary["runs"], serde_json::json!(["done"]));
    let archive = std::fs::read(s.data.join("sealed/done.log.gz")).unwrap();
    assert_eq!(gunzip(&archive), bytes, "the archive is the log's exact bytes");
    assert_eq!(summary["archive_sha256"], sha256(&archive));
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "the log stays readable, unchanged");
    let checked = ok_json(&s, &["log", "seal", "--run", "done", "--check", "--json"]);
    assert_eq!(checked, summary);

    // Nothing lands after what the archive holds: not through the handle
    // opened before the seal, not through a new session.
    match early.claim("done", support::claim("late")) {
        Err(LogError::Sealed { .. }) => {}
        other => panic!("a sealed lineage took a record: {other:?}"),
    }
    let out = s.run(WRITE, &["--run", "done"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("BLOCKED"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(std::fs::read(&log).unwrap(), bytes);
    // Sealing again is refused: it is sealed.
    let again = effects(&s, &["log", "seal", "--run", "done"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("sealed"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_lineage_with_an_unsettled_claim_is_not_sealed_until_it_is_recovered() {
    let s = session();
    let (run, _) = s.kill_mid_step(
        &(r#"{"tool": "bash", "input": {"command": "echo $PPID > pgid; sleep 60", "timeout_ms": 120000}}"#
            .to_owned()
            + "\n"),
        "pgid",
    );
    let out = effects(&s, &["log", "seal", "--run", &run]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not settled") && stderr.contains("effects log recover"), "{stderr}");
    assert!(
        !s.data.join(format!("sealed/{run}.seal.json")).exists(),
        "nothing is written for a refused seal"
    );
    assert!(!s.data.join(format!("effects/{run}.log.sealed")).exists());
    let out = effects(&s, &["log", "recover", "--run", &run]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ok_json(&s, &["log", "seal", "--run", &run, "--json"]);
}

#[test]
fn the_check_catches_a_flipped_byte_an_edited_summary_and_a_re_digested_forgery() {
    let s = session();
    settled_run(&s, "kept");
    ok_json(&s, &["log", "seal", "--run", "kept", "--json"]);
    let archive_path = s.data.join("sealed/kept.log.gz");
    let summary_path = s.data.join("sealed/kept.seal.json");
    let (archive, summary_text) =
        (std::fs::read(&archive_path).unwrap(), std::fs::read(&summary_path).unwrap());
    let check = |s: &Session| effects(s, &["log", "seal", "--run", "kept", "--check"]);

    let mut flipped = archive.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 1;
    std::fs::write(&archive_path, &flipped).unwrap();
    assert_eq!(check(&s).status.code(), Some(1), "a flipped byte");
    std::fs::write(&archive_path, &archive).unwrap();

    let mut summary: Value = serde_json::from_slice(&summary_text).unwrap();
    summary["decisions"][0]["verdict"] = Value::String("FAILED".into());
    std::fs::write(&summary_path, summary.to_string()).unwrap();
    let out = check(&s);
    assert_eq!(out.status.code(), Some(1), "an edited summary");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("decisions"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A forger who rewrites a record and every digest in the summary: the
    // record's own checksum and the chain still give it away.
    let log = gunzip(&archive);
    let text = String::from_utf8(log).unwrap();
    let forged = text.replacen("\"REPORTED_SUCCESS\"", "\"FAILED\"", 1).into_bytes();
    assert_ne!(forged, text.as_bytes());
    let forged_archive = gzip(&forged);
    let mut summary: Value = serde_json::from_slice(&summary_text).unwrap();
    summary["archive_sha256"] = Value::String(sha256(&forged_archive));
    summary["log_sha256"] = Value::String(sha256(&forged));
    summary["bytes"] = Value::from(forged.len() as u64);
    std::fs::write(&archive_path, &forged_archive).unwrap();
    std::fs::write(&summary_path, summary.to_string()).unwrap();
    let out = check(&s);
    assert_eq!(out.status.code(), Some(1), "a re-digested forgery");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    std::fs::write(&archive_path, &archive).unwrap();
    std::fs::write(&summary_path, &summary_text).unwrap();
    assert!(check(&s).status.success(), "the originals check again");
}

#[test]
fn prune_removes_only_lineages_sealed_longer_ago_than_asked_and_keeps_the_tombstone() {
    let s = session();
    settled_run(&s, "old");
    settled_run(&s, "open");
    ok_json(&s, &["log", "seal", "--run", "old", "--json"]);
    let exists = |path: &str| s.data.join(path).exists();
    let prune = |args: &[&str]| {
        let mut all = vec!["log", "prune"];
        all.extend_from_slice(args);
        let out = effects(&s, &all);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(prune(&["--older-than", "1d"]), "", "sealed just now: not past a day");
    let listed = prune(&["--older-than", "0s", "--dry-run", "--json"]);
    assert!(listed.contains("\"old\"") && !listed.contains("\"open\""), "{listed}");
    assert!(exists("effects/old.log") && exists("sealed/old.log.gz"), "a dry run removes nothing");
    prune(&["--older-than", "0s"]);
    for gone in ["effects/old.log", "sealed/old.log.gz", "sealed/old.seal.json"] {
        assert!(!exists(gone), "{gone}");
    }
    assert!(exists("effects/old.log.sealed"), "the tombstone stays");
    assert!(exists("effects/open.log"), "an unsealed lineage is never pruned");
    // The lineage is not begun again under its old name.
    let out = s.run(WRITE, &["--new-run", "old"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("BLOCKED"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let bad = effects(&s, &["log", "prune", "--older-than", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// A seal that crashed between its summary and its marker leaves a summary
/// of a lineage that is still writable; a summary can also be copied under
/// another lineage's name; an archive can be damaged after its seal. Prune
/// acts on none of them, says so (exit 1), and prunes the rest all the same.
#[test]
fn prune_skips_a_half_finished_seal_a_misnamed_summary_and_a_damaged_archive_and_prunes_the_rest() {
    let s = session();
    for run in ["done", "half"] {
        settled_run(&s, run);
        ok_json(&s, &["log", "seal", "--run", run, "--json"]);
    }
    // The crash: the marker never made it.
    std::fs::remove_file(s.data.join("effects/half.log.sealed")).unwrap();
    let half_log = std::fs::read(s.data.join("effects/half.log")).unwrap();
    // A summary under a name that is not its own.
    std::fs::copy(s.data.join("sealed/done.seal.json"), s.data.join("sealed/other.seal.json")).unwrap();
    // A lineage whose archive was damaged after its seal.
    settled_run(&s, "damaged");
    ok_json(&s, &["log", "seal", "--run", "damaged", "--json"]);
    let archive = s.data.join("sealed/damaged.log.gz");
    let mut bytes = std::fs::read(&archive).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&archive, &bytes).unwrap();
    let damaged_log = std::fs::read(s.data.join("effects/damaged.log")).unwrap();
    // And one whose archive is gone.
    settled_run(&s, "lost");
    ok_json(&s, &["log", "seal", "--run", "lost", "--json"]);
    std::fs::remove_file(s.data.join("sealed/lost.log.gz")).unwrap();

    let out = effects(&s, &["log", "prune", "--older-than", "0s", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let pruned: Vec<&str> =
        lines.iter().filter(|l| l["removed"].is_array()).map(|l| l["lineage"].as_str().unwrap()).collect();
    assert_eq!(pruned, ["done"], "{lines:?}");
    let skipped: Vec<(&str, &str)> =
        lines.iter().filter_map(|l| Some((l["lineage"].as_str()?, l["skipped"].as_str()?))).collect();
    assert_eq!(skipped.len(), 4, "{lines:?}");
    assert!(skipped.iter().any(|(l, why)| *l == "lost" && why.contains("is missing")), "{skipped:?}");
    assert!(
        skipped.iter().any(|(l, why)| *l == "damaged" && why.contains("not the one its summary")),
        "{skipped:?}"
    );
    assert!(skipped.iter().any(|(l, why)| *l == "half" && why.contains("seal marker")), "{skipped:?}");
    assert!(skipped.iter().any(|(l, why)| *l == "other" && why.contains("names done")), "{skipped:?}");
    assert!(!s.data.join("effects/done.log").exists(), "the sound seal was pruned");
    assert_eq!(std::fs::read(s.data.join("effects/half.log")).unwrap(), half_log, "the writable log is kept");
    assert_eq!(
        std::fs::read(s.data.join("effects/damaged.log")).unwrap(),
        damaged_log,
        "its only sound copy is kept"
    );
    assert!(s.data.join("sealed/half.seal.json").exists() && s.data.join("sealed/other.seal.json").exists());

    // Sealed again, the half-finished lineage is pruned like any other.
    ok_json(&s, &["log", "seal", "--run", "half", "--json"]);
    std::fs::remove_file(s.data.join("sealed/other.seal.json")).unwrap();
    std::fs::remove_file(s.data.join("sealed/damaged.seal.json")).unwrap();
    std::fs::remove_file(s.data.join("sealed/lost.seal.json")).unwrap();
    let out = effects(&s, &["log", "prune", "--older-than", "0s"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!s.data.join("effects/half.log").exists());
}

/// A handle opened read-only refuses every append, repair and seal before
/// it touches the file: a failed write there would poison the log for every
/// writer.
#[test]
fn a_read_only_handle_refuses_to_append_and_poisons_nothing() {
    let s = session();
    settled_run(&s, "ro");
    let log = s.data.join("effects/ro.log");
    let bytes = std::fs::read(&log).unwrap();
    let data = DataDir::new(Dir::open_ambient_dir(&s.data, ambient_authority()).unwrap(), "data");
    let mut reader = data.open_lineage_read_only("ro", None).unwrap().unwrap();
    match reader.claim("ro", support::claim("from-a-reader")) {
        Err(LogError::Refused { reason, .. }) => assert!(reason.contains("read-only"), "{reason}"),
        other => panic!("a read-only handle appended: {other:?}"),
    }
    assert!(matches!(reader.repair(), Err(LogError::Refused { .. })));
    assert!(!s.data.join("effects/ro.log.poisoned").exists(), "nothing poisoned");
    assert_eq!(std::fs::read(&log).unwrap(), bytes);
    // And a writer still appends.
    let out = s.run(WRITE, &["--run", "ro"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
