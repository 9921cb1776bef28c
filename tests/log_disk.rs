//! The effect log on a real filesystem, doing the bad things for real: hostile
//! files in the log's place, fsync failing under `strace` fault injection, a
//! full tmpfs, and the operator CLI over damaged logs. Eight processes racing
//! and writers killed with SIGKILL mid-append are in `every_store`, which
//! runs them here and on the fleet store.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::log::{LineageLog, LogError, OpenMode, OpenOptionsLog, Record, open_lineage};

use crate::support::{self, acks};

/// A private directory standing in for `DATA_DIR/effects`.
fn effects_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn open(dir: &Path, run_id: &str, mode: OpenMode) -> Result<Option<LineageLog>, LogError> {
    let handle = Dir::open_ambient_dir(dir, ambient_authority()).unwrap();
    open_lineage(
        &handle,
        &dir.display().to_string(),
        run_id,
        &OpenOptionsLog { mode, key: None, recover: false, ..Default::default() },
    )
}

fn load(dir: &Path, run_id: &str) -> LineageLog {
    open(dir, run_id, OpenMode::ReadOnly).expect("the log loads").expect("the log exists")
}

fn writer(dir: &Path, run_id: &str, count: usize, name: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects-test-writer"));
    command.arg(dir).arg(run_id).arg(count.to_string()).arg(name).args(extra);
    command
}

fn refusal(result: Result<Option<LineageLog>, LogError>) -> String {
    match result {
        Err(error @ LogError::Refused { .. }) => error.to_string(),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the log opened"),
    }
}

#[test]
fn a_read_only_open_creates_nothing() {
    let dir = effects_dir();
    assert!(open(dir.path(), "r1", OpenMode::ReadOnly).unwrap().is_none());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn hostile_files_in_the_logs_place_are_refused() {
    let dir = effects_dir();
    let outside = dir.path().join("elsewhere.txt");
    std::fs::write(&outside, "").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();

    symlink(&outside, dir.path().join("sym.log")).unwrap();
    assert!(refusal(open(dir.path(), "sym", OpenMode::ReadWrite)).contains("symlink"));

    std::fs::hard_link(&outside, dir.path().join("hard.log")).unwrap();
    assert!(refusal(open(dir.path(), "hard", OpenMode::ReadWrite)).contains("2 hard links"));

    let loose = dir.path().join("loose.log");
    std::fs::write(&loose, "").unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(refusal(open(dir.path(), "loose", OpenMode::ReadWrite)).contains("mode 0644"));

    let fifo = dir.path().join("fifo.log");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert!(refusal(open(dir.path(), "fifo", OpenMode::ReadWrite)).contains("Fifo"));

    // Nothing was written through any of them.
    assert_eq!(std::fs::read(&outside).unwrap(), b"");
}

/// Runs the writer under strace with the Nth `fdatasync` failing (EIO): the
/// log syncs its file with `fdatasync` (and its directory with `fsync`, which
/// strace counts separately).
fn writer_with_failing_fsync(dir: &Path, nth: u32) -> Output {
    let strace = Command::new("strace").arg("-V").output();
    assert!(
        strace.map(|o| o.status.success()).unwrap_or(false),
        "strace is needed for the fsync-injection test: apt-get install -y strace"
    );
    Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e", &format!("inject=fdatasync:error=EIO:when={nth}")])
        .arg(env!("CARGO_BIN_EXE_effects-test-writer"))
        .arg(dir)
        .args(["fsync", "5", "f", "--until-error"])
        .output()
        .unwrap()
}

#[test]
fn a_failed_fsync_is_durability_unknown_and_poisons_the_log_until_recover_examined_it() {
    let dir = effects_dir();
    // One acknowledged claim first, from a healthy writer.
    assert!(writer(dir.path(), "fsync", 1, "ok", &[]).stdout(Stdio::null()).status().unwrap().success());
    let path = dir.path().join("fsync.log");
    let path_text = path.display().to_string();
    // In the traced writer: the first append's fdatasync succeeds, the
    // second append's fails.
    let output = writer_with_failing_fsync(dir.path(), 2);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(lines[0].starts_with("ack 1 "), "{stdout}");
    assert_eq!(lines[1], "error durability-unknown", "{stdout}");
    assert_eq!(lines[2], "error poisoned", "no later append from that writer: {stdout}");
    // LOG-4 (revision 2): the fsync ran after the lock was released, so the
    // claim is not cut back; it stays, unsettled, and the log is poisoned.
    assert_eq!(load(dir.path(), "fsync").records().len(), 3);
    let marker = std::fs::read_to_string(dir.path().join("fsync.log.poisoned")).expect("a durable marker");
    assert!(marker.contains("Input/output error"), "{marker}");
    // Another writer process, healthy, refuses too.
    let other = writer(dir.path(), "fsync", 1, "other", &["--until-error"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&other.stdout), "error poisoned\nerror poisoned\n");
    let verified = effects(&["log", "verify", &path_text]);
    assert!(!verified.status.success(), "verify reports the poison");
    assert!(String::from_utf8_lossy(&verified.stdout).contains("poisoned"));
    // The operator's recovery reads the log whole, fsyncs it, clears it.
    let recovered = effects(&["log", "recover", &path_text]);
    assert!(recovered.status.success(), "{}", String::from_utf8_lossy(&recovered.stderr));
    assert!(String::from_utf8_lossy(&recovered.stdout).contains("cleared the poison"));
    assert!(!dir.path().join("fsync.log.poisoned").exists());
    let again = writer(dir.path(), "fsync", 2, "again", &[]).output().unwrap();
    assert!(again.status.success(), "appends go on: {}", String::from_utf8_lossy(&again.stderr));
}

/// A child killed if the test fails before it exits.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_fsync_failure_in_one_writer_stops_every_other_writer_of_the_log() {
    let dir = effects_dir();
    assert!(writer(dir.path(), "fsync", 1, "ok", &[]).stdout(Stdio::null()).status().unwrap().success());
    // A healthy writer appending as fast as it can, started first...
    let mut busy = KillOnDrop(
        writer(dir.path(), "fsync", 10_000_000, "busy", &["--until-error"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(busy.0.stdout.take().unwrap()).lines();
    for _ in 0..5 {
        assert!(lines.next().unwrap().unwrap().starts_with("ack "), "the busy writer appends");
    }
    // ...then a second one whose second fdatasync fails.
    let failing = writer_with_failing_fsync(dir.path(), 2);
    assert!(String::from_utf8_lossy(&failing.stdout).contains("error durability-unknown"));
    // The busy writer stops at its next append: the marker refuses it (or
    // its own fsync reports the same error).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut errors = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(kind) = line.strip_prefix("error ") {
            errors.push(kind.to_owned());
        }
        assert!(std::time::Instant::now() < deadline, "the busy writer went on after the log was poisoned");
    }
    assert!(busy.0.wait().unwrap().success());
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors.iter().all(|e| e == "poisoned" || e == "durability-unknown"), "{errors:?}");
    assert_eq!(errors[1], "poisoned", "and appends nothing after it");
}

struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a handle still open elsewhere in the test must not leave the
        // mount behind on the machine.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_filesystem_fails_the_append_cleanly_and_recovers_when_space_is_freed() {
    let mount = tempfile::tempdir().unwrap().keep();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs"])
        .arg(&mount)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(mounted, "mounting a small tmpfs needs root (CI runs as root)");
    let _guard = Tmpfs(mount.clone());
    let filler = mount.join("filler");
    // Leave a few hundred bytes: the next claims will not fit.
    std::fs::write(&filler, vec![0u8; 60 * 1024]).unwrap();
    let output = writer(&mount, "full", 50, "f", &["--until-error"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("error persistence"), "{stdout} {}", String::from_utf8_lossy(&output.stderr));
    let log = load(&mount, "full");
    let length = std::fs::metadata(mount.join("full.log")).unwrap().len();
    assert_eq!(length, log.read_offset(), "no partial bytes remain after ENOSPC");
    let acked = acks(&output.stdout).len();
    assert!(log.records().len() >= acked, "every acknowledged claim is there");
    std::fs::remove_file(&filler).unwrap();
    let again = writer(&mount, "full", 3, "g", &[]).output().unwrap();
    assert!(again.status.success(), "appends work again: {}", String::from_utf8_lossy(&again.stderr));
    assert!(load(&mount, "full").records().len() >= acked + 3);
}

fn effects(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_effects")).args(args).output().unwrap()
}

#[test]
fn log_cli_verify_show_and_recover() {
    let dir = effects_dir();
    assert!(writer(dir.path(), "cli", 3, "c", &[]).stdout(Stdio::null()).status().unwrap().success());
    let path = dir.path().join("cli.log");
    let path_text = path.display().to_string();

    let verified = effects(&["log", "verify", &path_text]);
    assert!(verified.status.success(), "{}", String::from_utf8_lossy(&verified.stderr));
    assert!(String::from_utf8_lossy(&verified.stdout).starts_with("ok: 3 records"));

    let shown = effects(&["log", "show", &path_text, "--json"]);
    let objects: Vec<serde_json::Value> =
        String::from_utf8_lossy(&shown.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(objects.len(), 3);
    assert_eq!(objects[2]["position"], 2);
    assert_eq!(objects[2]["kind"], "claim");
    assert_eq!(objects[2]["run_id"], "cli");

    // A torn tail: repairable, not an error.
    let intact = std::fs::read(&path).unwrap();
    std::fs::write(&path, [&intact[..], br#"{"position":3,"run_id":"cli","pr"#].concat()).unwrap();
    let torn = effects(&["log", "verify", &path_text]);
    assert!(torn.status.success());
    assert!(String::from_utf8_lossy(&torn.stdout).contains("repairable"));

    // Recover: cuts the tail into .broken, interrupts the 3 unsettled claims.
    let recovered = effects(&["log", "recover", &path_text]);
    assert!(recovered.status.success(), "{}", String::from_utf8_lossy(&recovered.stderr));
    let text = String::from_utf8_lossy(&recovered.stdout);
    assert!(text.contains("cut a torn tail") && text.contains("3 unsettled claim(s)"), "{text}");
    assert!(std::fs::read(dir.path().join("cli.log.broken")).unwrap().starts_with(b"{\"position\":3"));
    let again = effects(&["log", "recover", &path_text]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to recover"));
    let shown = effects(&["log", "show", &path_text, "--json"]);
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&shown.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "outcome");
    assert_eq!(last["execution"], "INTERRUPTED");

    // A flipped byte mid-file: non-zero, naming the line.
    let mut damaged = std::fs::read(&path).unwrap();
    let second_line = damaged.iter().position(|b| *b == b'\n').unwrap() + 20;
    damaged[second_line] ^= 0x04;
    std::fs::write(&path, damaged).unwrap();
    let corrupt = effects(&["log", "verify", &path_text]);
    assert_eq!(corrupt.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&corrupt.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&corrupt.stderr)
    );
}

#[test]
fn a_writer_acknowledges_only_what_a_reader_then_finds() {
    // The ack stream is read line by line while the writer runs, as a runtime would.
    let dir = effects_dir();
    let mut child = writer(dir.path(), "stream", 20, "s", &[]).stdout(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let position: u64 = line.split(' ').nth(1).unwrap().parse().unwrap();
        let log = load(dir.path(), "stream");
        assert!(log.records().len() as u64 > position, "ack {position} before it was readable");
    }
    assert!(child.wait().unwrap().success());
}

#[test]
fn opening_a_log_recovers_dead_executors_claims_and_leaves_live_ones_alone() {
    let dir = effects_dir();
    // A writer that claimed and died before settling (it exits without outcomes).
    assert!(writer(dir.path(), "eager", 2, "e", &[]).stdout(Stdio::null()).status().unwrap().success());
    let handle = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
    let mut first = open_lineage(&handle, "d", "eager", &OpenOptionsLog::default()).unwrap().unwrap();
    let interrupted = |log: &LineageLog| {
        log.records()
            .iter()
            .filter(|r| matches!(&r.record, Record::Outcome(o) if o.recovery && o.outcome.execution == effect_ledger::model::Execution::Interrupted))
            .count()
    };
    assert_eq!(interrupted(&first), 2, "LOG-7: both unsettled claims recorded INTERRUPTED at open");
    // This process is alive and claims something it has not settled yet: a
    // second open must leave that claim alone (LOG-7: its executor lives).
    let live = effect_ledger::log::ClaimRecord {
        executor: Some(effect_ledger::executor::current()),
        ..support::claim("live")
    };
    let in_flight = first.claim("eager", live).unwrap();
    let second = open_lineage(&handle, "d", "eager", &OpenOptionsLog::default()).unwrap().unwrap();
    assert_eq!(second.records().len(), 5);
    assert_eq!(second.claim_state(in_flight), Some(effect_ledger::log::ClaimState::Attempted));
    drop((first, second));
}

#[test]
fn the_effects_directory_is_private_and_the_launch_index_is_replaced_atomically() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = Dir::open_ambient_dir(data.path(), ambient_authority()).unwrap();
    assert!(effect_ledger::log::open_effects_dir(&data_dir, "d", OpenMode::ReadOnly).unwrap().is_none());
    let effects = effect_ledger::log::open_effects_dir(&data_dir, "d", OpenMode::ReadWrite).unwrap().unwrap();
    let mode = std::fs::metadata(data.path().join("effects")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "LOG-1: the effects directory is 0700");

    use effect_ledger::log::{LaunchIndex, read_launch_index, reserve_launch, write_launch_index};
    let first = reserve_launch(&effects, "d/effects", "run-1", "run-1").unwrap();
    let second = reserve_launch(&effects, "d/effects", "run-1", "run-1").unwrap();
    assert_ne!(first, second, "a reserved generation is never handed out twice");
    std::fs::remove_file(data.path().join(format!("effects/launch-{second}.json"))).unwrap();
    let reserved = read_launch_index(&effects, "d/effects", first).unwrap().unwrap();
    assert_eq!(reserved.claim, None, "a reservation names no claim yet");
    let mut index = LaunchIndex { claim: Some(12), ..reserved };
    write_launch_index(&effects, "d/effects", &index).unwrap();
    index.claim = Some(15);
    write_launch_index(&effects, "d/effects", &index).unwrap();
    assert_eq!(read_launch_index(&effects, "d/effects", first).unwrap(), Some(index));
    assert_eq!(read_launch_index(&effects, "d/effects", first + 1_000_000).unwrap(), None);
    let index_path = data.path().join(format!("effects/launch-{first}.json"));
    assert_eq!(std::fs::metadata(&index_path).unwrap().permissions().mode() & 0o777, 0o600);
    let names: Vec<String> = std::fs::read_dir(data.path().join("effects"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![format!("launch-{first}.json")], "no temporary file left behind");
}

#[test]
fn an_effects_directory_others_can_read_is_refused() {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir(data.path().join("effects")).unwrap();
    std::fs::set_permissions(data.path().join("effects"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data_dir = Dir::open_ambient_dir(data.path(), ambient_authority()).unwrap();
    match effect_ledger::log::open_effects_dir(&data_dir, "d", OpenMode::ReadWrite) {
        Err(error @ LogError::Refused { .. }) => assert!(error.to_string().contains("0755"), "{error}"),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the directory opened"),
    }
}

/// LOG-6's head mark on a real filesystem, with real processes: four keyed
/// writers append at once (each leaving its mark after its own fsyncs,
/// written in place while others read it), a fifth is killed with SIGKILL
/// mid-run, and a reader opens the log over and over meanwhile. No open ever
/// finds the log cut: a mark never runs ahead of the log, whichever writer
/// wrote it last. Then the log is cut by a record for real, and it is.
#[test]
fn keyed_writers_racing_and_killed_never_make_a_mark_the_log_cannot_bear_out() {
    let dir = effects_dir();
    let key = effect_ledger::log::OperatorKey::new(vec![7; 32]).unwrap();
    let keyed = |mode| {
        let handle = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
        let options = OpenOptionsLog { mode, key: Some(key.clone()), recover: false, ..Default::default() };
        open_lineage(&handle, &dir.path().display().to_string(), "k", &options)
    };
    let spawn = |name: &str, count: usize| {
        writer(dir.path(), "k", count, name, &["--outcomes", "--keyed"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut victim = spawn("victim", 100_000);
    let writers: Vec<Child> = (0..4).map(|i| spawn(&format!("w{i}"), 150)).collect();
    let open_while_they_write = |opens: std::ops::Range<usize>| {
        for open in opens {
            if let Err(error) = keyed(OpenMode::ReadOnly) {
                panic!("open {open} of a log no one cut: {error}");
            }
        }
    };
    open_while_they_write(0..20);
    // Killed between an ack and whatever it was writing next.
    let mut line = String::new();
    BufReader::new(victim.stdout.take().unwrap()).read_line(&mut line).unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    open_while_they_write(20..50);
    for writer in writers {
        let out = writer.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(acks(&out.stdout).len(), 150);
    }
    let log = keyed(OpenMode::ReadOnly).expect("the log opens after the kill").expect("it exists");
    assert!(log.witnessed() > 600, "the marks vouch for the writers' records: {}", log.witnessed());
    drop(log);
    // One claim more, alone: its fsync leaves the last mark, over every record.
    let last = writer(dir.path(), "k", 1, "last", &["--keyed"]).output().unwrap();
    assert_eq!(acks(&last.stdout).len(), 1, "{}", String::from_utf8_lossy(&last.stderr));
    let records = keyed(OpenMode::ReadOnly).unwrap().unwrap().records().len();
    // Now cut that claim off for real.
    let path = dir.path().join("k.log");
    let bytes = std::fs::read(&path).unwrap();
    let last = bytes[..bytes.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(last as u64).unwrap();
    match keyed(OpenMode::ReadOnly) {
        Err(LogError::Cut { records: vouched, .. }) => assert_eq!(vouched as usize, records),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("the cut log of {records} records opened"),
    }
}
