//! The effect log's append protocol over the in-memory crash model and fault
//! backend (`MemoryFile`): the same `EffectLog` code the disk uses, with
//! failures injected exactly where LOG-4 and LOG-6 care.

use effect_ledger::log::{ClaimRecord, ClaimState, EffectLog, Faults, LogError, MemoryFile, Record, Storage};
use effect_ledger::model::Execution;
use proptest::prelude::*;
use support::claim;

use crate::every_store::{self, outcome};
use crate::support;

fn open(file: &MemoryFile) -> EffectLog<MemoryFile> {
    EffectLog::open(file.clone(), "mem.log", None).expect("log opens")
}

#[test]
fn claims_are_durable_and_the_directory_is_synced_once() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    assert_eq!(log.claim("r1", claim("a0")).unwrap(), 0);
    assert_eq!(log.claim("r1", claim("a1")).unwrap(), 1);
    assert_eq!(file.sync_counts(), (2, 1), "each append fsyncs; the directory once per handle");
    // A crash right now keeps both: they were acknowledged.
    let after = file.crash(0);
    let reopened = open(&after);
    assert_eq!(reopened.records().len(), 2);
}

/// A claim of `action` naming the root with `inode` as its run's.
fn rooted(action: &str, inode: u64) -> ClaimRecord {
    let mut record = claim(action);
    record.root = Some(effect_ledger::model::FilesystemRoot {
        scope: "workspace".into(),
        owner: "test".into(),
        path: "/w".into(),
        device: 1,
        inode,
    });
    record
}

/// The action ids of a handle's claims, in order.
fn actions(log: &EffectLog<MemoryFile>) -> Vec<String> {
    log.records()
        .iter()
        .filter_map(|framed| match &framed.record {
            Record::Claim(claim) => Some(claim.action_id.clone()),
            Record::Outcome(_) => None,
            other => panic!("only claims and outcomes here, found {other:?}"),
        })
        .collect()
}

/// `record`, claiming the request `request`.
fn for_request(mut record: ClaimRecord, request: &str) -> ClaimRecord {
    record.operation.request_id = request.into();
    record
}

/// The file's bytes after a handle on a copy of `bytes` claims `action`:
/// what another writer appending would leave.
fn with_claim(bytes: &[u8], action: &str) -> Vec<u8> {
    with_record(bytes, claim(action))
}

/// [`with_claim`] for a claim made otherwise.
fn with_record(bytes: &[u8], record: ClaimRecord) -> Vec<u8> {
    let copy = MemoryFile::new();
    copy.set_contents(bytes.to_vec());
    open(&copy).claim("r1", record).unwrap();
    copy.contents()
}

/// A handle that has claimed `w` at position 0, as the writer waiting for
/// the lock in the tests of reading ahead below: what it appends there is
/// `w`'s outcome ([`settle_w`]), which is judged against every record
/// before it and so reads ahead while locked out (an append of claims alone
/// passes over what others appended instead, and waits without reading).
fn waiting_writer(file: &MemoryFile) -> EffectLog<MemoryFile> {
    let mut waiting = open(file);
    assert_eq!(waiting.claim("r1", claim("w")).unwrap(), 0);
    waiting
}

/// The waiting writer's append: `w`'s outcome.
fn settle_w(waiting: &mut EffectLog<MemoryFile>) -> Result<u64, LogError> {
    waiting.record_outcome("r1", outcome(0, Execution::ReportedSuccess))
}

/// LOG-2 with reading ahead: a writer locked out reads, verifies and admits
/// what others append while it waits, over several rounds, and keeps it once
/// the lock shows the log still holds those bytes.
#[test]
fn a_writer_locked_out_reads_ahead_and_keeps_what_the_lock_confirms() {
    let file = MemoryFile::new();
    let mut waiting = waiting_writer(&file);
    open(&file).claim("r1", claim("a0")).unwrap();
    let later = with_claim(&file.contents(), "a1");
    // Locked out twice: it reads a0 ahead, then a1, which the holder
    // appended meanwhile (only a second try of the lock, after reading
    // ahead, sees it); then the lock is free.
    file.set_faults(Faults { lock_busy: vec![None, Some(later)], ..Faults::default() });
    assert_eq!(settle_w(&mut waiting).unwrap(), 3);
    assert_eq!(actions(&waiting), ["w", "a0", "a1"]);
    assert_eq!(actions(&open(&file)), ["w", "a0", "a1"], "the log loads strictly, chain intact");
}

/// A batch of claims alone waits for the lock without reading ahead: it
/// passes over what others appended and decodes it after the lock.
#[test]
fn a_writer_of_claims_alone_waits_without_reading_ahead() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    open(&file).claim("r1", claim("a0")).unwrap();
    let later = with_claim(&file.contents(), "a1");
    // Had it read ahead after the first try, its second would have found a1.
    file.set_faults(Faults { lock_busy: vec![None, Some(later)], ..Faults::default() });
    assert_eq!(waiting.claim("r1", claim("a2")).unwrap(), 1);
    assert_eq!(actions(&waiting), ["a0", "a2"]);
    assert_eq!(actions(&open(&file)), ["a0", "a2"], "the log loads strictly, chain intact");
}

/// What was read ahead is the log's only if the log still holds those exact
/// bytes: here the other writer's claim is cut back (its append failed) and
/// a different claim of the same length written in its place. The waiting
/// writer must drop what it read ahead and chain after what is there;
/// keeping it would chain its outcome to a record the log does not hold.
#[test]
fn records_read_ahead_that_were_cut_back_and_written_over_are_dropped() {
    let file = MemoryFile::new();
    let mut waiting = waiting_writer(&file);
    let mine = file.contents();
    open(&file).claim("r1", claim("ax")).unwrap();
    let read_ahead = file.contents();
    let rewritten = with_claim(&mine, "ay");
    assert_eq!(rewritten.len(), read_ahead.len(), "only the bytes tell them apart");
    assert_ne!(rewritten, read_ahead);
    // Locked out twice: it reads ax ahead; before the second try, ax is
    // replaced by ay (no new bytes, so it then waits for the lock).
    file.set_faults(Faults { lock_busy: vec![None, Some(rewritten)], ..Faults::default() });
    assert_eq!(settle_w(&mut waiting).unwrap(), 2);
    assert_eq!(actions(&waiting), ["w", "ay"]);
    assert_eq!(actions(&open(&file)), ["w", "ay"], "the log loads strictly, chain intact");
}

/// A line being written while a writer reads ahead is not read: only
/// complete lines are, and the part line is the lock holder's (here, a
/// crashed writer's torn tail, which the merge under the lock repairs).
#[test]
fn reading_ahead_never_takes_a_line_still_being_written() {
    let file = MemoryFile::new();
    let mut waiting = waiting_writer(&file);
    open(&file).claim("r1", claim("a0")).unwrap();
    let complete = file.contents();
    let next = with_claim(&complete, "a1");
    let part = next[..complete.len() + (next.len() - complete.len()) / 2].to_vec();
    file.set_faults(Faults { lock_busy: vec![Some(part)], ..Faults::default() });
    assert_eq!(settle_w(&mut waiting).unwrap(), 2);
    assert_eq!(actions(&waiting), ["w", "a0"]);
    assert_eq!(file.broken(), next[complete.len()..][..(next.len() - complete.len()) / 2]);
    assert_eq!(actions(&open(&file)), ["w", "a0"]);
}

/// Damage seen while reading ahead ends reading ahead and drops everything
/// read ahead, good records before it included: the merge under the lock
/// judges the log as it is, and fails closed on the damage without touching
/// the file. Once the log is whole again the writer chains after what it
/// holds.
#[test]
fn damage_seen_while_reading_ahead_is_judged_under_the_lock() {
    let file = MemoryFile::new();
    let mut waiting = waiting_writer(&file);
    open(&file).claim("r1", claim("a0")).unwrap();
    let good = file.contents();
    let mut damaged = good.clone();
    damaged.extend_from_slice(b"{\"not\":\"a record\"}\n");
    // Round one reads a0 ahead; round two finds a damaged line after it.
    file.set_faults(Faults { lock_busy: vec![None, Some(damaged.clone())], ..Faults::default() });
    assert!(matches!(settle_w(&mut waiting), Err(LogError::Corrupt { line: 3, .. })));
    assert_eq!(actions(&waiting), ["w"], "nothing read ahead is kept");
    assert_eq!(waiting.rules().len(), 1);
    assert_eq!(file.contents(), damaged, "the file is not touched");
    file.set_contents(with_claim(&good, "a1"));
    assert_eq!(settle_w(&mut waiting).unwrap(), 3);
    assert_eq!(actions(&open(&file)), ["w", "a0", "a1"], "the log loads strictly, chain intact");
}

/// A log cut back under what was read ahead (the holder's append failed and
/// was cut off) ends reading ahead; the writer chains after what is left.
#[test]
fn a_log_cut_back_while_reading_ahead_drops_what_was_read() {
    let file = MemoryFile::new();
    let mut waiting = waiting_writer(&file);
    let mine = file.contents();
    open(&file).claim("r1", claim("a0")).unwrap();
    file.set_faults(Faults { lock_busy: vec![None, Some(mine)], ..Faults::default() });
    assert_eq!(settle_w(&mut waiting).unwrap(), 1);
    assert_eq!(actions(&waiting), ["w"]);
    assert_eq!(actions(&open(&file)), ["w"], "the log loads strictly");
    assert_eq!(open(&file).records().len(), 2, "w and its outcome");
}

/// LOG-4 for a writer that read ahead: another writer's failed fsync
/// poisoned the log while it waited; under the lock it is refused, and keeps
/// none of what it read ahead (those records' durability is unknown).
#[test]
fn a_writer_that_read_ahead_is_refused_by_a_poisoned_log() {
    let file = MemoryFile::new();
    let mut waiting = waiting_writer(&file);
    let mut failing = open(&file);
    file.set_faults(Faults { failing_syncs: 1, ..Faults::default() });
    assert!(matches!(failing.claim("r1", claim("a0")), Err(LogError::DurabilityUnknown { .. })));
    assert!(file.read_sidecar(effect_ledger::log::Sidecar::Poisoned).unwrap().is_some());
    file.set_faults(Faults { lock_busy: vec![None], ..Faults::default() });
    let before = file.contents();
    assert!(matches!(settle_w(&mut waiting), Err(LogError::Poisoned { .. })));
    assert_eq!(actions(&waiting), ["w"], "nothing read ahead is kept");
    assert_eq!(waiting.rules().len(), 1);
    assert_eq!(file.contents(), before, "nothing appended");
}

/// A lineage sealed (retention) while this writer read ahead the records
/// before the seal refuses its append: what it read ahead is dropped, not
/// kept, and nothing follows the sealed log's last record.
#[test]
fn a_writer_that_read_ahead_is_refused_by_a_sealed_lineage() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    let mut sealing = open(&file);
    let claimed = sealing.claim("r1", claim("a0")).unwrap();
    sealing.record_outcome("r1", outcome(claimed, Execution::ReportedSuccess)).unwrap();
    sealing.seal(|bytes, _| Ok((bytes.len(), "sealed for the test".to_owned()))).unwrap();
    let before = file.contents();
    file.set_faults(Faults { lock_busy: vec![None], ..Faults::default() });
    // An outcome, so it reads ahead (an append of claims alone would not).
    match waiting.record_outcome("r1", outcome(claimed, Execution::ReportedSuccess)) {
        Err(LogError::Sealed { detail, .. }) => assert_eq!(detail, "sealed for the test"),
        other => panic!("expected the sealed lineage to refuse the outcome, got {other:?}"),
    }
    assert!(waiting.records().is_empty() && waiting.rules().is_empty(), "nothing read ahead is kept");
    assert_eq!(file.contents(), before, "nothing appended after the seal");
}

/// EMB-3 for a request another writer claimed while this one waited for the
/// lock: `claim_once` waits without reading ahead (its claim may pass over
/// what others appended), finds the request's id in their lines under the
/// lock, merges them there and answers that claim: not claimed twice.
#[test]
fn claim_once_finds_its_request_among_records_appended_while_it_waited() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    open(&file).claim("r1", for_request(claim("a0"), "other")).unwrap();
    open(&file).claim("r1", for_request(claim("a1"), "mine")).unwrap();
    let before = file.contents();
    file.set_faults(Faults { lock_busy: vec![None], ..Faults::default() });
    assert_eq!(waiting.claim_once("r1", for_request(claim("a2"), "mine")).unwrap(), (1, false));
    assert_eq!(file.contents(), before, "not claimed twice");
    assert_eq!(actions(&waiting), ["a0", "a1"]);
}

/// EMB-3 among records read ahead: a claim naming its run's root, while
/// this handle knows of no root for the run yet, cannot pass over others'
/// records (one of them may root the run), so `claim_once` reads ahead
/// while locked out; the request another writer claimed meanwhile is found
/// among what it read, and not claimed twice.
#[test]
fn claim_once_finds_its_request_among_records_read_ahead() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    open(&file).claim("r1", for_request(rooted("a0", 7), "other")).unwrap();
    let later = with_record(&file.contents(), for_request(rooted("a1", 7), "mine"));
    // Only a second try of the lock, after reading a0 ahead, finds a1.
    file.set_faults(Faults { lock_busy: vec![None, Some(later.clone())], ..Faults::default() });
    assert_eq!(waiting.claim_once("r1", for_request(rooted("a2", 7), "mine")).unwrap(), (1, false));
    assert_eq!(file.contents(), later, "not claimed twice");
    assert_eq!(actions(&waiting), ["a0", "a1"]);
}

#[test]
fn a_failed_write_is_cut_back_and_the_handle_keeps_working() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    log.claim("r1", claim("a0")).unwrap();
    let before = file.contents();
    file.set_faults(Faults { short_write_after: Some(17), ..Faults::default() });
    match log.claim("r1", claim("a1")) {
        Err(error @ LogError::Persistence { .. }) => assert!(error.not_persisted()),
        other => panic!("expected a persistence error, got {other:?}"),
    }
    assert_eq!(file.contents(), before, "no partial bytes remain");
    file.set_faults(Faults { disk_full: true, ..Faults::default() });
    assert!(matches!(log.claim("r1", claim("a1")), Err(LogError::Persistence { .. })));
    assert_eq!(file.contents(), before);
    file.set_faults(Faults::default());
    assert_eq!(log.claim("r1", claim("a1")).unwrap(), 1, "appends work again once space is freed");
}

#[test]
fn a_failed_fsync_is_durability_unknown_and_poisons_the_handle() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    log.claim("r1", claim("a0")).unwrap();
    let before = file.length().unwrap();
    file.set_faults(Faults { failing_syncs: 1, ..Faults::default() });
    assert!(matches!(log.claim("r1", claim("a1")), Err(LogError::DurabilityUnknown { .. })));
    // LOG-4 (revision 2): the fsync ran outside the lock, so the claim is not
    // cut back (another writer may have appended after it).
    assert!(file.length().unwrap() > before, "the claim stays, of unknown durability");
    assert!(log.is_poisoned());
    assert!(matches!(log.claim("r1", claim("a2")), Err(LogError::Poisoned { .. })), "no later append");
    // Another handle sees both records, and is refused too: the log is
    // poisoned, not only the handle.
    let mut other = open(&file);
    assert_eq!(other.history().unwrap().len(), 2);
    assert!(matches!(other.claim("r1", claim("a3")), Err(LogError::Poisoned { .. })));
}

#[test]
fn a_torn_tail_is_tolerated_then_repaired_into_broken() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    log.claim("r1", claim("a0")).unwrap();
    let durable = file.contents();
    // A writer dies half way through its line.
    let (line, _) = {
        let mut scratch = open(&file);
        scratch.claim("r1", claim("a1")).unwrap();
        (file.contents()[durable.len()..].to_vec(), ())
    };
    let torn = [durable.clone(), line[..line.len() / 2].to_vec()].concat();
    let crashed = MemoryFile::new();
    crashed.set_contents(torn.clone());
    let mut reopened = open(&crashed);
    assert_eq!(reopened.records().len(), 1, "the torn line is not read");
    assert_eq!(reopened.claim("r1", claim("a2")).unwrap(), 1, "the next append repairs and takes position 1");
    assert_eq!(crashed.broken(), line[..line.len() / 2].to_vec(), "cut bytes are kept");
    assert_eq!(open(&crashed).records().len(), 2);
}

#[test]
fn recovery_interrupts_unsettled_claims_leaves_running_and_is_idempotent() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    let unsettled = log.claim("r1", claim("a0")).unwrap();
    let running = log.claim("r1", claim("a1")).unwrap();
    log.record_outcome("r1", outcome(running, Execution::Running)).unwrap();
    let settled = log.claim("r2", claim("a2")).unwrap();
    log.record_outcome("r2", outcome(settled, Execution::ReportedSuccess)).unwrap();
    let later = log.claim("r2", claim("a3")).unwrap();
    let mut recovering = open(&file);
    assert_eq!(
        recovering.recover_interrupted(effect_ledger::executor::judge).unwrap(),
        vec![unsettled, later]
    );
    assert_eq!(recovering.claim_state(unsettled), Some(ClaimState::Settled(Execution::Interrupted)));
    assert_eq!(recovering.claim_state(running), Some(ClaimState::Running));
    assert_eq!(
        recovering.recover_interrupted(effect_ledger::executor::judge).unwrap(),
        Vec::<u64>::new(),
        "idempotent"
    );
    // The recovery outcome is attributed to the claim's own run.
    let history = recovering.history().unwrap();
    assert_eq!(history.last().unwrap().run_id, "r2");
    // The claim's writer, still alive, cannot settle it over recovery.
    assert!(matches!(
        log.record_outcome("r1", outcome(unsettled, Execution::ReportedSuccess)),
        Err(LogError::Rejected { .. })
    ));
}

/// A small log of every record kind, and its bytes.
fn small_log() -> (Vec<u8>, Vec<Vec<u8>>) {
    let file = MemoryFile::new();
    let mut log = open(&file);
    let c0 = log.claim("r1", claim("a0")).unwrap();
    log.record_outcome("r1", outcome(c0, Execution::ReportedSuccess)).unwrap();
    let c1 = log.claim("r1", claim("a1")).unwrap();
    log.record_outcome("r1", outcome(c1, Execution::Running)).unwrap();
    log.claim("r1", claim("a2")).unwrap();
    let bytes = file.contents();
    let lines = bytes.split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    (bytes, lines)
}

/// What `load` made of `bytes`: the records it accepted (as line bytes) and
/// the torn tail length, or a corruption error.
fn load(bytes: &[u8]) -> Result<(Vec<Vec<u8>>, u64), LogError> {
    let file = MemoryFile::new();
    file.set_contents(bytes.to_vec());
    let log = EffectLog::open(file.clone(), "mem.log", None)?;
    let accepted =
        bytes[..log.read_offset() as usize].split_inclusive(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    Ok((accepted, file.length().unwrap() - log.read_offset()))
}

#[test]
fn damage_matrix_every_truncation_point() {
    let (bytes, lines) = small_log();
    for cut in 0..=bytes.len() {
        let (accepted, torn) = load(&bytes[..cut]).unwrap_or_else(|e| panic!("truncation at {cut}: {e}"));
        let complete = bytes[..cut].iter().filter(|b| **b == b'\n').count();
        assert_eq!(
            accepted,
            lines[..complete].to_vec(),
            "truncation at {cut} keeps exactly the complete lines"
        );
        let boundary: usize = lines[..complete].iter().map(Vec::len).sum();
        assert_eq!(torn as usize, cut - boundary, "truncation at {cut}: the rest is the torn tail");
    }
}

#[test]
fn damage_matrix_every_single_byte_flip() {
    let (bytes, lines) = small_log();
    let mut corrupt = 0;
    for index in 0..bytes.len() {
        for flip in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[index] ^= flip;
            match load(&damaged) {
                Err(LogError::Corrupt { .. }) => corrupt += 1,
                Err(other) => panic!("flip at {index}: unexpected error {other}"),
                Ok((accepted, torn)) => {
                    // Only a flipped final newline can load: the last line then
                    // has no terminator and is a torn tail, never a record.
                    assert_eq!(index, bytes.len() - 1, "flip at {index} was accepted");
                    assert_eq!(accepted, lines[..lines.len() - 1].to_vec());
                    assert_eq!(torn as usize, lines.last().unwrap().len());
                }
            }
        }
    }
    assert_eq!(corrupt, 2 * (bytes.len() - 1), "every other flip fails closed");
}

#[test]
fn removed_reordered_duplicated_lines_break_the_chain() {
    let (_, lines) = small_log();
    let removed: Vec<u8> = [&lines[0][..], &lines[2][..], &lines[3][..]].concat();
    let reordered: Vec<u8> = [&lines[1][..], &lines[0][..], &lines[2][..]].concat();
    let duplicated: Vec<u8> = [&lines[0][..], &lines[0][..], &lines[1][..]].concat();
    for (name, bytes) in [("removed", removed), ("reordered", reordered), ("duplicated", duplicated)] {
        match load(&bytes) {
            Err(LogError::Corrupt { line, .. }) => assert!(line >= 1, "{name}"),
            other => panic!("{name}: expected corruption, got {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The model of `every_store`, on the crash model, with claims of no
    /// executor (so recovery settles every unsettled one).
    #[test]
    fn the_log_follows_the_model_of_the_history_rules(ops in proptest::collection::vec(every_store::op(), 1..40)) {
        let file = MemoryFile::new();
        every_store::follow_the_model(
            &|| open(&file),
            |log| log.recover_interrupted(effect_ledger::executor::judge),
            every_store::Executors::Dead,
            ops,
        )?;
    }
}

#[test]
fn a_batch_costs_one_fsync_and_a_failed_one_fails_it_as_a_whole() {
    // How a batch is validated record by record: `every_store`.
    let file = MemoryFile::new();
    let mut log = open(&file);
    let (a0, a1) = (Record::Claim(claim("a0")), Record::Claim(claim("a1")));
    assert!(log.append_batch(&[("r", &a0), ("r", &a1)]).iter().all(Result::is_ok));
    assert_eq!(file.sync_counts().0, 1, "one fsync for the batch");

    let before = file.contents();
    file.set_faults(Faults { failing_syncs: 1, ..Faults::default() });
    let (a, b) = (Record::Claim(claim("b0")), Record::Claim(claim("b1")));
    let results = log.append_batch(&[("r", &a), ("r", &b)]);
    assert!(results.iter().all(|r| matches!(r, Err(LogError::DurabilityUnknown { .. }))), "{results:?}");
    // LOG-4 (revision 2): the fsync ran after the lock was released, so the
    // batch cannot be cut back (another writer may have appended after it);
    // the log is poisoned instead.
    assert!(file.contents().len() > before.len(), "the batch stays, of unknown durability");
    assert!(log.is_poisoned());
    assert!(file.read_sidecar(effect_ledger::log::Sidecar::Poisoned).unwrap().is_some());
}

#[test]
fn a_failed_write_that_cannot_be_cut_back_is_durability_unknown() {
    let file = MemoryFile::new();
    let mut log = open(&file);
    log.claim("r1", claim("a0")).unwrap();
    file.set_faults(Faults { short_write_after: Some(40), failing_truncates: true, ..Faults::default() });
    match log.claim("r1", claim("a1")) {
        Err(error @ LogError::DurabilityUnknown { .. }) => assert!(!error.not_persisted()),
        other => panic!("partial bytes may remain: expected durability unknown, got {other:?}"),
    }
    assert!(log.is_poisoned());
    file.set_faults(Faults::default());
    // The log is poisoned for every writer until the operator's recovery
    // examined it; then the torn tail is cut and appends go on.
    let mut other = open(&file);
    assert_eq!(other.records().len(), 1);
    assert!(matches!(other.claim("r1", claim("a2")), Err(LogError::Poisoned { .. })));
    assert!(other.clear_poison().unwrap().is_some());
    assert_eq!(other.claim("r1", claim("a2")).unwrap(), 1);
}

/// LOG-2 with claims passing over others' records: a writer whose append is
/// only claims does not decode what others appended under the lock; it
/// takes its position after their count, chains from the last one, and
/// decodes and admits them after. The result must be the log a full merge
/// would have made: the next position, an intact chain, and the handle's
/// view equal to a fresh strict load's.
#[test]
fn a_claim_after_others_records_takes_the_next_position_and_chains_after_them() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    let mut other = open(&file);
    let first = other.claim("r1", claim("a0")).unwrap();
    other.record_outcome("r1", outcome(first, Execution::ReportedSuccess)).unwrap();
    other.claim("r2", claim("a1")).unwrap();
    assert_eq!(waiting.claim("r1", claim("a2")).unwrap(), 3);
    let fresh = open(&file);
    assert_eq!(fresh.records(), waiting.records(), "the same records, decoded and verified");
    assert_eq!(waiting.claim_state(first), Some(ClaimState::Settled(Execution::ReportedSuccess)));
    // And it goes on from there, past more of the other's records.
    other.claim("r2", claim("a3")).unwrap();
    assert_eq!(waiting.claim("r2", claim("a4")).unwrap(), 5);
    assert_eq!(open(&file).records(), waiting.records());
}

/// Damage among others' records is found under the lock even when the
/// append would pass over them: each line's frame (checksum, position,
/// chain) is verified there, so the claim is refused and nothing is written
/// after the damage, by this writer or any other (LOG-6: fail closed).
#[test]
fn damage_among_records_passed_over_is_refused_before_anything_is_written() {
    let file = MemoryFile::new();
    let (mut a, mut b) = (open(&file), open(&file));
    let mut other = open(&file);
    other.claim("r1", claim("a0")).unwrap();
    other.claim("r1", claim("a1")).unwrap();
    let damaged = String::from_utf8(file.contents()).unwrap().replacen("\"a0\"", "\"b0\"", 1);
    file.set_contents(damaged.into_bytes());
    let before = file.contents();
    for (writer, action) in [(0, "x1"), (1, "x2"), (0, "x3")] {
        let answer = [&mut a, &mut b][writer].claim("r1", claim(action));
        assert!(matches!(answer, Err(LogError::Corrupt { line: 1, .. })), "{answer:?}");
    }
    assert_eq!(file.contents(), before, "nothing written after the damage");
}

/// The first line of `file` respelled (`from` to `to`) with its checksum
/// made to match: what anyone can write into an unkeyed log, framed right.
fn respell_first_line(file: &MemoryFile, from: &str, to: &str) {
    use sha2::{Digest, Sha256};
    let text = String::from_utf8(file.contents()).unwrap();
    let (line, rest) = text.split_once('\n').unwrap();
    assert!(line.contains(from), "{from} is in the line");
    let body = line.rsplit_once(r#","check":""#).unwrap().0.replacen(from, to, 1);
    let check = hex::encode(Sha256::digest(format!("{body}}}").as_bytes()));
    file.set_contents(format!("{body},\"check\":\"{check}\"}}\n{rest}").into_bytes());
}

/// A line framed right (checksum, position, chain) that is no valid record
/// passes the checks under the lock; decoding it after the append fails,
/// and the claim written after it is answered as an error, never as made,
/// so its tool does not run. The handle then merges in full, so it does not
/// write claim after claim past the bad line.
#[test]
fn a_record_framed_right_but_invalid_fails_the_claim_after_it_and_is_not_passed_again() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    open(&file).claim("r1", claim("a0")).unwrap();
    respell_first_line(&file, "\"external\":false", "\"external\":false,\"verified\":true");
    assert!(EffectLog::open(file.clone(), "mem.log", None).is_err(), "no valid record: the log fails closed");
    let answer = waiting.claim("r1", claim("a1"));
    assert!(matches!(answer, Err(LogError::Corrupt { line: 1, .. })), "{answer:?}");
    let after = file.contents();
    let again = waiting.claim("r1", claim("a2"));
    assert!(matches!(again, Err(LogError::Corrupt { line: 1, .. })), "{again:?}");
    assert_eq!(file.contents(), after, "not passed over again");
}

/// A claim that names its run's root is judged after every record that may
/// have rooted the run first: here another writer's claim rooted it
/// elsewhere, and this one is refused (the history's rule), not written.
#[test]
fn a_claim_naming_a_root_is_judged_after_the_records_that_may_root_its_run() {
    let file = MemoryFile::new();
    let mut waiting = open(&file);
    open(&file).claim("r1", rooted("a0", 7)).unwrap();
    let before = file.contents();
    let answer = waiting.claim("r1", rooted("a1", 8));
    assert!(matches!(answer, Err(LogError::Rejected { .. })), "{answer:?}");
    assert_eq!(file.contents(), before, "nothing written");
    // Once the run's root is known, a claim naming it passes over others'.
    open(&file).claim("r1", rooted("a2", 7)).unwrap();
    assert_eq!(waiting.claim("r1", rooted("a3", 7)).unwrap(), 2);
    assert_eq!(open(&file).records(), waiting.records());
}

/// EMB-3 with claims passing over others' records: a claim of the request
/// among them, in any spelling, is found and not claimed twice. The
/// request id is spelled as the encoder writes it (escapes included), and
/// lines that spell it otherwise (a `\u` escape, whitespace around the
/// key's colon: valid JSON with a valid checksum, which anyone can write
/// into an unkeyed log) are found too.
#[test]
fn claim_once_is_never_passed_over_a_claim_of_its_request() {
    for request in ["mine", "tab\there \"quoted\" é"] {
        let file = MemoryFile::new();
        let mut waiting = open(&file);
        open(&file).claim("r1", for_request(claim("a0"), "other")).unwrap();
        open(&file).claim("r1", for_request(claim("a1"), request)).unwrap();
        let before = file.contents();
        assert_eq!(
            waiting.claim_once("r1", for_request(claim("a2"), request)).unwrap(),
            (1, false),
            "{request:?}"
        );
        assert_eq!(file.contents(), before, "not claimed twice");
    }
    // The same claim with its request id respelled, checksum made to
    // match: with a `\u` escape, and with whitespace after the key's colon.
    // Each decodes to request "mine".
    for (from, to) in [(r#""mine""#, r#""\u006dine""#), (r#""request_id":"mine""#, r#""request_id": "mine""#)]
    {
        let file = MemoryFile::new();
        let mut waiting = open(&file);
        open(&file).claim("r1", for_request(claim("a0"), "mine")).unwrap();
        respell_first_line(&file, from, to);
        assert_eq!(actions(&open(&file)), ["a0"], "the respelled line is a valid record: {to}");
        assert_eq!(waiting.claim_once("r1", for_request(claim("a1"), "mine")).unwrap(), (0, false), "{to}");
        assert_eq!(actions(&open(&file)), ["a0"], "not claimed twice: {to}");
    }
}
