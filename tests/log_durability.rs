//! LOG-3, LOG-4 and LOG-10 of SPEC revision 2 over the in-memory crash model
//! (`MemoryFile`), doing the bad things: crashes that lose the records that
//! ride the next fsync, zeros where pages were never written back, a failed
//! fsync seen by several writers, and checkpoints that are forged, stale or
//! cover damage. The same `EffectLog` code runs on disk (`log_disk.rs` does
//! it with real processes, `strace` and SIGKILL).

use effect_ledger::log::{
    BYTES_PER_RECORD, CHECKPOINT_EVERY, CHECKPOINT_LAG, Checkpoints, ClaimRecord, ClaimState, EffectLog,
    Faults, LogError, MemoryFile, OperatorKey, OutcomeRecord, ProcessesRecord, Record, Recovery, Sidecar,
    Storage, VerifierRecord,
};
use effect_ledger::model::{CleanupState, Execution, Impact, Outcome, ProducerFacts};
use effect_ledger::procfs::ProcessIdentity;
use support::claim;

use crate::support;

fn outcome(claim: u64, execution: Execution) -> OutcomeRecord {
    OutcomeRecord {
        claim,
        outcome: Outcome {
            execution,
            impact: Impact::Possible,
            cleanup: CleanupState::NotApplicable,
            replayed: false,
            remote_acknowledged: false,
            detached: false,
        },
        facts: ProducerFacts { executed: true, ..ProducerFacts::default() },
        recovery: false,
    }
}

/// A check's report on its own (settled) run: a record that, like an
/// observation, rides the next fsync.
fn check(claim: u64) -> VerifierRecord {
    VerifierRecord {
        claim,
        command: "cargo test".into(),
        passed: true,
        exit_code: Some(0),
        timed_out: false,
        cancelled: false,
    }
}

fn open(file: &MemoryFile) -> EffectLog<MemoryFile> {
    EffectLog::open(file.clone(), "mem.log", None).expect("log opens")
}

fn open_keep(file: &MemoryFile, key: Option<&OperatorKey>) -> EffectLog<MemoryFile> {
    EffectLog::open_with(file.clone(), "mem.log", key.cloned(), Checkpoints::Keep).expect("log opens")
}

/// Every recovery judge here finds the executor dead.
fn dead(_: &ClaimRecord, _: Option<&ProcessesRecord>) -> Recovery {
    Recovery::Dead { cleanup: CleanupState::NotApplicable }
}

/// One step: a claim, its outcome, and a record after them that rides the
/// next fsync too (as a readback does).
fn step(log: &mut EffectLog<MemoryFile>, action: &str) -> u64 {
    let position = log.claim("r1", claim(action)).unwrap();
    log.record_outcome("r1", outcome(position, Execution::ReportedSuccess)).unwrap();
    log.record_verifier("r1", check(position)).unwrap();
    position
}

/// Byte range of line `index` (0-based) in `bytes`, without its newline.
fn line_range(bytes: &[u8], index: usize) -> std::ops::Range<usize> {
    let starts: Vec<usize> = std::iter::once(0)
        .chain(bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1))
        .collect();
    starts[index]..starts[index + 1] - 1
}

#[test]
fn a_step_costs_one_fsync_its_claims_and_the_rest_ride_it() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    step(&mut log, "a0");
    assert_eq!(file.sync_counts(), (1, 1), "claim fsynced; outcome and check report not");
    assert!(log.has_unsynced());
    step(&mut log, "a1");
    assert_eq!(file.sync_counts().0, 2, "the second claim's fsync is the only other one");
    drop(log);
    assert_eq!(file.sync_counts().0, 3, "dropping the handle makes its last records durable");
}

#[test]
fn an_outcome_lost_in_a_crash_leaves_its_claim_to_recover_as_interrupted() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    let claimed = log.claim("r1", claim("a0")).unwrap();
    log.record_outcome("r1", outcome(claimed, Execution::ReportedSuccess)).unwrap();
    // The crash comes before any fsync covers the outcome.
    let after = file.crash(0);
    std::mem::forget(log); // the process died: nothing ran its drop
    let mut reopened = open(&after);
    assert_eq!(reopened.claim_state(claimed), Some(ClaimState::Attempted), "the claim survives, unsettled");
    assert_eq!(reopened.recover_interrupted(dead).unwrap(), vec![claimed]);
    let history = reopened.history().unwrap();
    let Record::Outcome(recovered) = &history[1].record else { panic!("{:?}", history[1]) };
    assert_eq!(recovered.outcome.execution, Execution::Interrupted, "never success");
    assert!(recovered.recovery);
}

#[test]
fn the_next_claims_fsync_makes_earlier_outcomes_durable() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    let first = step(&mut log, "a0");
    log.claim("r1", claim("a1")).unwrap();
    let after = file.crash(0);
    std::mem::forget(log);
    let reopened = open(&after);
    assert!(matches!(reopened.claim_state(first), Some(ClaimState::Settled(Execution::ReportedSuccess))));
    assert_eq!(reopened.records().len(), 4);
}

#[test]
fn zeros_where_unsynced_records_were_never_written_back_are_a_torn_tail() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    let claimed = step(&mut log, "a0");
    std::mem::forget(log);
    // The outcome's page never reached the disk; the next record's did.
    let mut bytes = file.contents();
    for b in &mut bytes[line_range(&file.contents(), 1)] {
        *b = 0;
    }
    let crashed = MemoryFile::new();
    crashed.set_contents(bytes.clone());
    let mut reopened = open(&crashed);
    assert_eq!(reopened.records().len(), 1, "only the claim is read");
    assert!(reopened.read_offset() < bytes.len() as u64);
    assert!(reopened.repair().unwrap() > 0, "the lost tail is cut");
    assert_eq!(crashed.broken(), bytes[line_range(&bytes, 1).start..].to_vec(), "its bytes are kept");
    assert_eq!(reopened.recover_interrupted(dead).unwrap(), vec![claimed], "the claim recovers INTERRUPTED");
}

#[test]
fn zeros_before_a_durable_claim_are_corruption_not_a_lost_tail() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    step(&mut log, "a0");
    log.claim("r1", claim("a1")).unwrap(); // fsynced after the outcome was written
    std::mem::forget(log);
    let mut bytes = file.contents();
    for b in &mut bytes[line_range(&file.contents(), 1)] {
        *b = 0;
    }
    let damaged = MemoryFile::new();
    damaged.set_contents(bytes);
    match EffectLog::open(damaged, "mem.log", None) {
        Err(LogError::Corrupt { line: 2, reason, .. }) => {
            assert!(reason.contains("claim record follows"), "{reason}")
        }
        Err(other) => panic!("expected corruption at line 2, got {other}"),
        Ok(_) => panic!("damage inside the durable log must fail closed"),
    }
}

#[test]
fn a_stray_byte_in_the_last_outcome_is_corruption_not_a_lost_tail() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    let claimed = log.claim("r1", claim("a0")).unwrap();
    log.record_outcome("r1", outcome(claimed, Execution::Failed)).unwrap();
    drop(log);
    let mut bytes = file.contents();
    let outcome_line = line_range(&bytes, 1);
    bytes[outcome_line.start] = b'['; // no crash writes this
    let damaged = MemoryFile::new();
    damaged.set_contents(bytes);
    assert!(matches!(EffectLog::open(damaged, "mem.log", None), Err(LogError::Corrupt { line: 2, .. })));
}

#[test]
fn a_failed_fsync_poisons_the_log_for_every_writer_until_it_is_examined() {
    let file = MemoryFile::new();
    let (mut first, mut second) = (open(&file), open(&file));
    first.claim("r1", claim("a0")).unwrap();
    file.set_faults(Faults { failing_syncs: 1, ..Faults::default() });
    assert!(matches!(first.claim("r1", claim("a1")), Err(LogError::DurabilityUnknown { .. })));
    assert!(file.read_sidecar(Sidecar::Poisoned).unwrap().is_some(), "a durable marker for the others");
    // The other writer's fsync would succeed now (Linux may say so after
    // dropping the pages): it must not get the chance.
    let before = file.contents().len();
    match second.claim("r1", claim("b0")) {
        Err(error @ LogError::Poisoned { .. }) => {
            assert!(error.to_string().contains("effects log recover"), "{error}");
            assert!(error.not_persisted());
        }
        other => panic!("expected the log poisoned for the second writer, got {other:?}"),
    }
    assert!(matches!(open(&file).claim("r1", claim("c0")), Err(LogError::Poisoned { .. })), "and a new one");
    assert_eq!(file.contents().len(), before, "nothing was written while poisoned");
    // The failed claim stays in the file (others may have appended after
    // it), unsettled: its executor never ran the backend.
    let mut operator = open(&file);
    assert_eq!(operator.claim_state(1), Some(ClaimState::Attempted));
    assert!(operator.clear_poison().unwrap().is_some());
    assert!(file.read_sidecar(Sidecar::Poisoned).unwrap().is_none());
    assert!(second.claim("r1", claim("b1")).is_ok(), "a writer poisoned by the marker appends again");
    assert!(matches!(first.claim("r1", claim("a2")), Err(LogError::Poisoned { .. })), "the failed one never");
}

#[test]
fn a_continuing_handle_reads_only_what_follows_the_checkpoint() {
    let file = MemoryFile::new();
    let mut log = open_keep(&file, None);
    let open_claim = log.claim("r1", claim("open")).unwrap();
    let settled = step(&mut log, "first");
    let steps = CHECKPOINT_EVERY / 3 + 10;
    for i in 0..steps {
        step(&mut log, &format!("s{i}"));
    }
    drop(log);
    assert!(file.read_sidecar(Sidecar::Checkpoint).unwrap().is_some(), "a checkpoint was written");
    let total = 1 + 3 * (steps + 1);

    let mut continued = open_keep(&file, None);
    assert!(continued.base() >= CHECKPOINT_EVERY, "started at the checkpoint: base {}", continued.base());
    assert!((continued.records().len() as u64) < CHECKPOINT_EVERY, "read only what follows it");
    assert_eq!(continued.rules().len(), total, "yet the rules see every record");
    assert!(continued.record(open_claim).is_some(), "an open claim's record is kept");
    // The history rules still hold across the checkpoint.
    assert!(matches!(
        continued.record_outcome("r1", outcome(settled, Execution::Failed)),
        Err(LogError::Rejected { .. })
    ));
    continued.record_outcome("r1", outcome(open_claim, Execution::Failed)).unwrap();
    assert_eq!(continued.history().unwrap().len() as u64, total + 1, "a decision reads the whole log");
    assert_eq!(continued.base(), 0);
}

#[test]
fn an_open_claim_from_before_the_checkpoint_is_still_recovered_with_its_processes() {
    let file = MemoryFile::new();
    let mut log = open_keep(&file, None);
    let open_claim = log.claim("r1", claim("open")).unwrap();
    let processes = ProcessesRecord {
        claim: open_claim,
        leader: ProcessIdentity { pid: 4_000_000, start_token: 1, boot_id: "boot".into() },
        group: 4_000_000,
        session: 4_000_000,
    };
    log.record_processes("r1", processes).unwrap();
    for i in 0..CHECKPOINT_EVERY / 3 + 10 {
        step(&mut log, &format!("s{i}"));
    }
    drop(log);
    let mut continued = open_keep(&file, None);
    assert!(continued.base() > open_claim + 1);
    assert!(continued.processes_of(open_claim).is_some(), "its processes record is kept too");
    let mut judged = Vec::new();
    let recovered = continued
        .recover_interrupted(|record, processes| {
            judged.push((record.action_id.clone(), processes.is_some()));
            Recovery::Dead { cleanup: CleanupState::Clean }
        })
        .unwrap();
    assert_eq!(recovered, vec![open_claim]);
    assert_eq!(judged, vec![("open".to_owned(), true)]);
}

/// LOG-10 with several writers on one lineage (hook processes, agents of
/// one run): one checkpoint per boundary, written by the writer whose own
/// append crossed it, not one per writer that read past it.
#[test]
fn several_writers_write_one_checkpoint_per_boundary() {
    let file = MemoryFile::new();
    let mut writers: Vec<_> = (0..4).map(|_| open_keep(&file, None)).collect();
    let (mut changed_at, mut last) = (Vec::new(), None);
    for i in 0..2 * CHECKPOINT_EVERY + 10 {
        let position = writers[(i % 4) as usize].claim("r1", claim(&format!("c{i}"))).unwrap();
        let now = file.read_sidecar(Sidecar::Checkpoint).unwrap();
        if now != last {
            changed_at.push(position);
            last = now;
        }
    }
    // The claims at these positions took the log to 256 and 512 records.
    assert_eq!(changed_at, [CHECKPOINT_EVERY - 1, 2 * CHECKPOINT_EVERY - 1]);
    drop(writers);
    assert_eq!(file.read_sidecar(Sidecar::Checkpoint).unwrap(), last, "none written at the writers' ends");
    assert_eq!(open_keep(&file, None).base(), 2 * CHECKPOINT_EVERY, "a continuing handle starts at it");
}

/// A checkpoint names every open claim, so where claims stay open one every
/// 256 records rewrote them all again and again: quadratic in the log's
/// length (here about 16 MB of checkpoints for 8,000 claims). One that would
/// cost more than `BYTES_PER_RECORD` per record since the last is put off,
/// so what checkpoints write stays proportional to what is appended, and
/// they still keep up with the log.
#[test]
fn checkpoints_stay_proportional_to_what_is_appended_where_claims_stay_open() {
    let file = MemoryFile::new();
    let mut writer = open_keep(&file, None);
    let (mut written, mut last) = (Vec::new(), None);
    let claims = 32 * CHECKPOINT_EVERY + 50;
    for i in 0..claims {
        let position = writer.claim("r1", claim(&format!("c{i}"))).unwrap();
        let now = file.read_sidecar(Sidecar::Checkpoint).unwrap();
        if now != last {
            written.push((position + 1, now.as_ref().map_or(0, Vec::len)));
            last = now;
        }
    }
    let bytes: usize = written.iter().map(|(_, len)| len).sum();
    assert!(
        bytes as u64 <= 2 * BYTES_PER_RECORD * claims,
        "{bytes} bytes of checkpoints for {claims} claims"
    );
    assert_eq!(
        written[..4].iter().map(|(at, _)| *at).collect::<Vec<_>>(),
        [256, 512, 768, 1024],
        "small: as before"
    );
    drop(writer);
    let continuing = open_keep(&file, None);
    assert!(
        continuing.base() >= claims * 3 / 4,
        "a continuing handle starts near the end: {}",
        continuing.base()
    );
    assert_eq!(continuing.rules().open_claims().count() as u64, claims, "and still knows every open claim");
}

/// A crash can tear a checkpoint and leave its head whole. A writer that
/// finds it unusable reads the whole log, and must not count it as the
/// newest when it weighs writing one (here every claim stays open, so one
/// is due only every few hundred records past the newest): counted, it put
/// the replacement off for hundreds of records, each new process reading
/// the whole log meanwhile.
#[test]
fn a_torn_checkpoint_is_replaced_by_the_first_writer_that_finds_it_torn() {
    let file = MemoryFile::new();
    let mut writer = open_keep(&file, None);
    for i in 0..3000 {
        writer.claim("r1", claim(&format!("c{i}"))).unwrap();
    }
    drop(writer);
    let whole = file.read_sidecar(Sidecar::Checkpoint).unwrap().expect("a checkpoint");
    file.set_sidecar(Sidecar::Checkpoint, Some(whole[..whole.len() / 2].to_vec()));
    let first = open_keep(&file, None);
    assert_eq!(first.base(), 0, "torn: not used");
    drop(first);
    assert_eq!(open_keep(&file, None).base(), 3000, "replaced");
}

/// A log without a checkpoint near its end (from before checkpoints, or
/// whose checkpoint writers all died first) gets one from the next writer,
/// even one whose append crosses no boundary.
#[test]
fn a_writer_that_finds_no_checkpoint_near_the_end_writes_one() {
    let file = MemoryFile::new();
    let mut old = open(&file); // writes no checkpoint
    for i in 0..CHECKPOINT_LAG + 5 {
        old.claim("r1", claim(&format!("c{i}"))).unwrap();
    }
    drop(old);
    assert!(file.read_sidecar(Sidecar::Checkpoint).unwrap().is_none());
    let mut writer = open_keep(&file, None);
    writer.claim("r1", claim("one more")).unwrap();
    assert!(file.read_sidecar(Sidecar::Checkpoint).unwrap().is_some(), "the lagging writer wrote one");
    drop(writer);
    assert_eq!(open_keep(&file, None).base(), CHECKPOINT_LAG + 6);
}

/// A log with a checkpoint, and the checkpoint's bytes.
fn checkpointed(key: Option<&OperatorKey>, actions: &str) -> (MemoryFile, Vec<u8>) {
    let file = MemoryFile::new();
    let mut log = open_keep(&file, key);
    for i in 0..CHECKPOINT_EVERY / 3 + 10 {
        step(&mut log, &format!("{actions}{i}"));
    }
    drop(log);
    let sidecar = file.read_sidecar(Sidecar::Checkpoint).unwrap().expect("a checkpoint");
    (file, sidecar)
}

#[test]
fn a_tampered_or_stale_checkpoint_is_not_used() {
    let (file, sidecar) = checkpointed(None, "s");
    assert!(open_keep(&file, None).base() > 0, "the checkpoint verifies as written");
    // A byte of it changed: its seal fails.
    let mut tampered = sidecar.clone();
    let at = tampered.iter().position(|&b| b == b'a').unwrap();
    tampered[at] = b'o';
    file.set_sidecar(Sidecar::Checkpoint, Some(tampered));
    let reader = EffectLog::open_with(file.clone(), "mem.log", None, Checkpoints::Use).unwrap();
    assert_eq!(reader.base(), 0, "a tampered checkpoint falls back to a full load");
    // The log was replaced by a shorter one: the checkpoint is stale.
    file.set_sidecar(Sidecar::Checkpoint, Some(sidecar.clone()));
    let short = MemoryFile::new();
    let bytes = file.contents();
    short.set_contents(bytes[..line_range(&bytes, 10).end + 1].to_vec());
    short.set_sidecar(Sidecar::Checkpoint, Some(sidecar.clone()));
    let reader = EffectLog::open_with(short.clone(), "mem.log", None, Checkpoints::Use).unwrap();
    assert_eq!((reader.base(), reader.records().len()), (0, 11));
    // Another log of as many records (other actions): the line the
    // checkpoint names is not there, and the whole log is read.
    let other = checkpointed(None, "t").0;
    other.set_sidecar(Sidecar::Checkpoint, Some(sidecar));
    let reader = EffectLog::open_with(other.clone(), "mem.log", None, Checkpoints::Use);
    assert_eq!(reader.unwrap().base(), 0);
}

/// A checkpoint is not fsynced (it only saves work): what a crash can leave
/// of one (nothing, an empty file, a torn prefix, zeros where the data never
/// reached the disk) is not used, and the whole log is read.
#[test]
fn what_a_crash_leaves_of_a_checkpoint_is_not_used() {
    let (file, sidecar) = checkpointed(None, "s");
    let records =
        EffectLog::open_with(file.clone(), "mem.log", None, Checkpoints::Ignore).unwrap().records().len();
    let leftovers =
        [None, Some(Vec::new()), Some(sidecar[..sidecar.len() / 2].to_vec()), Some(vec![0; sidecar.len()])];
    for leftover in leftovers {
        let shown = leftover.as_ref().map(Vec::len);
        file.set_sidecar(Sidecar::Checkpoint, leftover);
        let reader = EffectLog::open_with(file.clone(), "mem.log", None, Checkpoints::Use).unwrap();
        assert_eq!((reader.base(), reader.records().len()), (0, records), "leftover of {shown:?} bytes");
    }
}

#[test]
fn a_keyed_logs_checkpoint_cannot_be_forged_without_the_key() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let (file, sidecar) = checkpointed(Some(&key), "s");
    assert!(open_keep(&file, Some(&key)).base() > 0);
    // Re-sealed with SHA-256 (all an attacker without the key can do): the
    // keyed reader does not take it.
    let text = String::from_utf8(sidecar).unwrap();
    let body = text.lines().next().unwrap();
    let forged_body = body.replace("\"keyed\":true", "\"keyed\":true ");
    let resealed =
        format!("{forged_body}\n{}\n", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&forged_body)));
    file.set_sidecar(Sidecar::Checkpoint, Some(resealed.into_bytes()));
    assert_eq!(EffectLog::open_with(file, "mem.log", Some(key), Checkpoints::Use).unwrap().base(), 0);
}

/// LOG-10: a checkpoint names the open claims it keeps by where their lines
/// are and their checks, without copying them, and a reader reads each back
/// and verifies it on its own. One that names another line, more than one
/// line, or a line changed since is not used.
#[test]
fn a_checkpoint_naming_an_open_claim_where_it_is_not_is_not_used() {
    let file = MemoryFile::new();
    let mut log = open_keep(&file, None);
    let open_claim = log.claim("r1", claim("open")).unwrap();
    for i in 0..CHECKPOINT_EVERY / 3 + 10 {
        step(&mut log, &format!("s{i}"));
    }
    drop(log);
    let sidecar = String::from_utf8(file.read_sidecar(Sidecar::Checkpoint).unwrap().unwrap()).unwrap();
    let body = sidecar.lines().next().unwrap().to_owned();
    assert!(!body.contains("action_id"), "no record is copied into it");
    let bytes = file.contents();
    let (first, second) = (line_range(&bytes, 0), line_range(&bytes, 1));
    let named = format!("\"start\":{},\"end\":{}", first.start, first.end + 1);
    assert!(body.contains(&named), "the open claim is named by its line");
    let continued = open_keep(&file, None);
    assert!(continued.base() > 0 && continued.record(open_claim).is_some(), "used as written");
    let reseal = |body: &str| {
        let seal = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
        Some(format!("{body}\n{seal}\n").into_bytes())
    };
    let used = |file: &MemoryFile| EffectLog::open_with(file.clone(), "mem.log", None, Checkpoints::Use);
    for (what, range) in [
        ("another record's line", format!("\"start\":{},\"end\":{}", second.start, second.end + 1)),
        ("two lines", format!("\"start\":{},\"end\":{}", first.start, second.end + 1)),
        ("part of a line", format!("\"start\":{},\"end\":{}", first.start, first.end)),
        ("beyond what it covers", format!("\"start\":{},\"end\":{}", bytes.len(), bytes.len() + 9)),
    ] {
        file.set_sidecar(Sidecar::Checkpoint, reseal(&body.replace(&named, &range)));
        assert_eq!(used(&file).unwrap().base(), 0, "{what}: not used, the whole log is read");
    }
    // The claim's line changed since: not used, and the full load fails closed.
    file.set_sidecar(Sidecar::Checkpoint, reseal(&body));
    let mut changed = bytes.clone();
    changed[first.start + 2] ^= 1;
    file.set_contents(changed);
    assert!(matches!(used(&file), Err(LogError::Corrupt { line: 1, .. })));
}

/// LOG-10: a checkpoint must name exactly the open claims of what it covers,
/// in order, each followed by its processes record if it has one: one that
/// leaves a claim out would hide it from recovery, one that leaves out a
/// processes record would have recovery judge the claim without its
/// processes, and one that names a record twice or out of order is not what
/// a writer writes.
/// Each, resealed, is not used, and the whole log is read.
#[test]
fn a_checkpoint_that_leaves_out_or_repeats_an_open_claim_is_not_used() {
    let file = MemoryFile::new();
    let mut log = open_keep(&file, None);
    let first = log.claim("r1", claim("open a")).unwrap();
    let leader = ProcessIdentity { pid: 4_000_000, start_token: 1, boot_id: "boot".into() };
    let its_processes = ProcessesRecord { claim: first, leader, group: 4_000_000, session: 4_000_000 };
    let processes = log.record_processes("r1", its_processes).unwrap();
    let open = [first, log.claim("r1", claim("open b")).unwrap()];
    for i in 0..CHECKPOINT_EVERY / 3 + 10 {
        step(&mut log, &format!("s{i}"));
    }
    drop(log);
    let sidecar = String::from_utf8(file.read_sidecar(Sidecar::Checkpoint).unwrap().unwrap()).unwrap();
    let body: serde_json::Value = serde_json::from_str(sidecar.lines().next().unwrap()).unwrap();
    let named = body["open"].as_array().unwrap().clone();
    let positions: Vec<u64> = named.iter().map(|kept| kept["position"].as_u64().unwrap()).collect();
    let whole = EffectLog::open_with(file.clone(), "mem.log", None, Checkpoints::Ignore).unwrap();
    assert_eq!(
        positions[..3],
        [open[0], processes, open[1]],
        "the open claims, the first's processes after it"
    );
    assert_eq!(whole.rules().open_claims().collect::<Vec<_>>(), open);
    assert!(open_keep(&file, None).base() > 0, "used as written");
    let reseal = |open: Vec<serde_json::Value>| {
        let mut body = body.clone();
        body["open"] = serde_json::Value::Array(open);
        let body = body.to_string();
        let seal = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
        Some(format!("{body}\n{seal}\n").into_bytes())
    };
    let without = |index: usize| {
        let mut kept = named.clone();
        kept.remove(index);
        kept
    };
    let swapped = |index: usize| {
        let mut kept = named.clone();
        kept.swap(index, index + 1);
        kept
    };
    let with_twice = |index: usize| {
        let mut kept = named.clone();
        kept.insert(index, named[index].clone());
        kept
    };
    for (what, kept) in [
        ("none named", vec![]),
        ("the first left out", without(0)),
        ("the last left out", without(named.len() - 1)),
        ("a processes record left out", without(1)),
        ("a processes record before its claim", swapped(0)),
        ("a processes record after the next claim", swapped(1)),
        ("the first named twice", with_twice(0)),
        ("the last named twice", with_twice(named.len() - 1)),
    ] {
        file.set_sidecar(Sidecar::Checkpoint, reseal(kept));
        let reader = EffectLog::open_with(file.clone(), "mem.log", None, Checkpoints::Use).unwrap();
        assert_eq!(reader.base(), 0, "{what}: not used, the whole log is read");
        assert_eq!(
            reader.rules().open_claims().collect::<Vec<_>>(),
            whole.rules().open_claims().collect::<Vec<_>>()
        );
    }
}

#[test]
fn damage_the_checkpoint_skipped_still_fails_the_full_load() {
    let (file, _) = checkpointed(None, "s");
    let mut bytes = file.contents();
    let early = line_range(&bytes, 3);
    bytes[early.start + 1] = b'X'; // a record the checkpoint covers
    file.set_contents(bytes);
    // Continuing the run trusts the checkpoint, which verifies...
    let mut continued = open_keep(&file, None);
    assert!(continued.base() > 3);
    continued.claim("r1", claim("after")).unwrap();
    // ...but a decision reads the whole log, and fails closed.
    assert!(matches!(continued.history(), Err(LogError::Corrupt { line: 4, .. })));
    assert!(matches!(EffectLog::open(file, "mem.log", None), Err(LogError::Corrupt { line: 4, .. })));
}

/// A keyed log with a few settled steps and one open claim, every record
/// fsynced (its head mark covers them all); and where each line ends.
fn keyed_steps(key: &OperatorKey) -> (MemoryFile, Vec<usize>) {
    let file = MemoryFile::new();
    let mut log = open_keep(&file, Some(key));
    for i in 0..3 {
        step(&mut log, &format!("k{i}"));
    }
    log.claim("r1", claim("external")).unwrap();
    log.sync().unwrap();
    drop(log);
    let ends = file.contents().iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
    (file, ends)
}

/// LOG-6 under an operator key: cutting whole records off a keyed log's end
/// needs no key (every line left still verifies, and so does the chain), and
/// it drops what a decision must not lose: here the last claim, open. The
/// head mark the last writer left after its fsync catches it: every way of
/// opening the cut log refuses it as cut, naming the mark, instead of reading
/// a shorter history.
#[test]
fn a_keyed_log_cut_at_a_record_boundary_is_refused_not_read_short() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let (file, ends) = keyed_steps(&key);
    assert!(file.read_sidecar(Sidecar::Head).unwrap().is_some(), "a keyed writer leaves a head mark");
    let whole = EffectLog::open(file.clone(), "mem.log", Some(key.clone())).unwrap();
    assert_eq!(whole.witnessed(), ends.len() as u64, "the mark covers every record, and the log holds them");
    drop(whole);
    for keep in [ends.len() - 1, 3, 1, 0] {
        let cut = file.crash(0);
        cut.set_contents(file.contents()[..keep.checked_sub(1).map_or(0, |i| ends[i])].to_vec());
        for checkpoints in [Checkpoints::Ignore, Checkpoints::Use, Checkpoints::Keep] {
            match EffectLog::open_with(cut.clone(), "mem.log", Some(key.clone()), checkpoints) {
                Err(LogError::Cut { records, witness, .. }) => {
                    assert_eq!(records, ends.len() as u64);
                    assert_eq!(witness, "mem.log.head");
                }
                Err(other) => panic!("{keep} records kept, {checkpoints:?}: {other}"),
                Ok(log) => {
                    panic!("{keep} of {} records read as the whole log ({checkpoints:?})", log.rules().len())
                }
            }
        }
    }
}

/// The same cut, with records appended after it (a runtime that went on
/// writing, or another keyed log's lines put in their place): the mark's
/// bytes now hold another record, and the log is refused all the same.
#[test]
fn a_keyed_log_cut_and_written_on_is_refused() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let (file, ends) = keyed_steps(&key);
    let cut = file.crash(0);
    cut.set_contents(file.contents()[..ends[2]].to_vec());
    cut.set_sidecar(Sidecar::Head, None);
    let mut writer = open_keep(&cut, Some(&key));
    for i in 0.. {
        if cut.contents().len() >= ends[ends.len() - 1] {
            break;
        }
        writer.claim("r1", claim(&format!("other{i}"))).unwrap();
    }
    drop(writer);
    cut.set_sidecar(Sidecar::Head, file.read_sidecar(Sidecar::Head).unwrap());
    let refused = EffectLog::open(cut.clone(), "mem.log", Some(key.clone()));
    assert!(matches!(refused, Err(LogError::Cut { .. })), "{:?}", refused.err());
}

/// The mark never refuses a log that was not cut: not after a crash at any
/// point of a keyed writer's appends (the mark is written after the fsync
/// that made its records durable), and not when it is torn, zeroed, sealed
/// with another key or gone (no mark, no claim; `docs/threats.md` says what
/// a cut that also removes the mark gets past). An unkeyed log gets none:
/// anyone could seal it.
#[test]
fn the_head_mark_never_refuses_a_log_that_was_not_cut() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let file = MemoryFile::new();
    let mut log = open_keep(&file, Some(&key));
    for i in 0..12 {
        step(&mut log, &format!("c{i}"));
        for keep in [0, 1, 40, usize::MAX] {
            let after = file.crash(keep);
            let reopened = EffectLog::open_with(after, "mem.log", Some(key.clone()), Checkpoints::Keep);
            assert!(
                reopened.is_ok(),
                "step {i}, a crash keeping {keep} unsynced bytes: {:?}",
                reopened.err()
            );
        }
    }
    log.sync().unwrap();
    drop(log);
    let mark = file.read_sidecar(Sidecar::Head).unwrap().unwrap();
    let other_key = OperatorKey::new(vec![8; 32]).unwrap();
    let mut other = MemoryFile::new();
    let mut elsewhere = open_keep(&other, Some(&other_key));
    step(&mut elsewhere, "o");
    drop(elsewhere);
    let foreign = other.read_sidecar(Sidecar::Head).unwrap().unwrap();
    other = file.crash(0);
    for (what, leftover) in [
        ("torn", Some(mark[..mark.len() / 2].to_vec())),
        ("zeroed", Some(vec![0; mark.len()])),
        ("another key's", Some(foreign)),
        ("gone", None),
    ] {
        other.set_sidecar(Sidecar::Head, leftover);
        let reopened = EffectLog::open(other.clone(), "mem.log", Some(key.clone()));
        assert!(reopened.is_ok(), "a {what} mark: {:?}", reopened.err());
    }
    let unkeyed = MemoryFile::new();
    step(&mut open_keep(&unkeyed, None), "u");
    assert!(unkeyed.read_sidecar(Sidecar::Head).unwrap().is_none());
}

/// A keyed checkpoint is a mark too: one that covers more than the log holds
/// was not written over this log as it is, and the log is refused, not read
/// whole as for an unkeyed one (whose seal anyone can make).
#[test]
fn a_keyed_checkpoint_beyond_the_log_refuses_it() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let (file, _) = checkpointed(Some(&key), "s");
    let cut = file.crash(0);
    let bytes = file.contents();
    cut.set_contents(bytes[..line_range(&bytes, 10).end + 1].to_vec());
    cut.set_sidecar(Sidecar::Head, None);
    for checkpoints in [Checkpoints::Ignore, Checkpoints::Use, Checkpoints::Keep] {
        let opened = EffectLog::open_with(cut.clone(), "mem.log", Some(key.clone()), checkpoints);
        match opened {
            Err(LogError::Cut { witness, .. }) => assert_eq!(witness, "mem.log.checkpoint"),
            other => panic!("{checkpoints:?}: {:?}", other.map(|log| log.rules().len())),
        }
    }
}

/// A cut disguised as a crash: the line of a record the mark vouches for is
/// zeroed, which a loader takes for a torn tail when no durable record
/// follows it (a crash can leave zeros where an unsynced outcome was). The
/// records behind it would be read as never written, and the mark's own
/// last line is still in place. No crash zeroes a line before a record its
/// writer fsynced and marked, so the log is refused.
#[test]
fn a_keyed_log_with_a_line_zeroed_to_pass_for_a_torn_tail_is_refused() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let file = MemoryFile::new();
    let mut log = open_keep(&file, Some(&key));
    step(&mut log, "k0");
    let external = log.claim("r1", claim("external")).unwrap();
    log.record_outcome("r1", outcome(external, Execution::Failed)).unwrap();
    log.record_verifier("r1", check(external)).unwrap();
    log.sync().unwrap();
    drop(log);
    let mut bytes = file.contents();
    let line = line_range(&bytes, external as usize);
    bytes[line].fill(0);
    file.set_contents(bytes);
    match EffectLog::open(file.clone(), "mem.log", Some(key.clone())) {
        Err(LogError::Cut { detail, .. }) => assert!(detail.contains("only the first 3"), "{detail}"),
        Err(other) => panic!("{other}"),
        Ok(log) => panic!("read {} records as the whole log", log.rules().len()),
    }
}

/// A writer open since before a cut (a long-lived server) must not append
/// past it: its own view is behind the cut, so the log did not shrink
/// beneath it, and its append and fsync would leave a new mark over the cut
/// log that hides the cut from every later reader. It confirms the head
/// mark before each append, and refuses.
#[test]
fn a_writer_open_since_before_a_cut_does_not_append_past_it() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let file = MemoryFile::new();
    let mut early = open_keep(&file, Some(&key));
    early.claim("r1", claim("early")).unwrap();
    let mut other = open_keep(&file, Some(&key));
    for i in 0..4 {
        step(&mut other, &format!("o{i}"));
    }
    other.sync().unwrap();
    drop(other);
    let bytes = file.contents();
    file.set_contents(bytes[..line_range(&bytes, 5).end + 1].to_vec());
    let appended = early.claim("r1", claim("after the cut"));
    assert!(matches!(appended, Err(LogError::Cut { .. })), "{appended:?}");
    drop(early);
    let reopened = EffectLog::open(file.clone(), "mem.log", Some(key.clone()));
    assert!(matches!(reopened, Err(LogError::Cut { .. })), "the cut is still seen: {:?}", reopened.err());
}

/// A pruned lineage (retention) has no log but its seal, which refuses every
/// append; a keyed mark left behind by a prune cut short names nothing, and
/// does not turn the seal's refusal into a cut.
#[test]
fn a_mark_left_beside_a_pruned_lineage_is_not_a_cut() {
    let key = OperatorKey::new(vec![7; 32]).unwrap();
    let (file, _) = keyed_steps(&key);
    file.set_contents(Vec::new());
    assert!(matches!(EffectLog::open(file.clone(), "mem.log", Some(key.clone())), Err(LogError::Cut { .. })));
    file.set_sidecar(Sidecar::Sealed, Some(b"sealed by the test\n".to_vec()));
    let mut log = EffectLog::open(file.clone(), "mem.log", Some(key.clone())).expect("opens empty");
    assert!(matches!(log.claim("r1", claim("x")), Err(LogError::Sealed { .. })));
}
