//! The same suites on every store (SPEC 13): the history rules (LOG-2, OUT-1,
//! LOG-5, LOG-7's "a live executor's claims are left alone"), writers racing
//! on one lineage, and writers killed mid-append then recovered, each written
//! once and run on the local log (`disk::`) and on the fleet store
//! (`server::`, against `$EFFECTS_TEST_POSTGRES`, which `cargo xtask test`
//! starts). What only one store can fail (a torn tail, an fsync's EIO, a
//! connection the server ends) stays in `log_disk`, `effect_log`,
//! `log_durability` and `fleet_store`.
//!
//! The slow suites scale with environment variables: `EFFECTS_TORTURE_KILLS`
//! (default 200 writers killed on the local log; a tenth as many rounds of
//! three, with longer windows, on the fleet store, whose writers connect and
//! take a lease first), `EFFECTS_CONTENTION_APPENDS` (default 500 per
//! writer).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use effect_ledger::log::{
    Checkpoints, ClaimRecord, ClaimState, EffectLog, Framed, GroupLog, LEASE, LineageLog, LogError, Medium,
    OpenMode, OpenOptionsLog, OutcomeRecord, PgStore, Position, Record, Store, open_lineage,
};
use effect_ledger::model::{CleanupState, Execution, Impact, Outcome, ProducerFacts};
use proptest::prelude::*;

use crate::support::{self, acks};

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One lineage on one store: a fresh one per test.
pub struct Lineage {
    /// The local log's effects directory, or `None` on the fleet store.
    dir: Option<tempfile::TempDir>,
    name: String,
}

impl Lineage {
    fn disk() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        Self { dir: Some(dir), name: "lineage".into() }
    }

    fn server() -> Self {
        Self { dir: None, name: format!("every-{}", uuid::Uuid::now_v7().simple()) }
    }

    /// A writable handle, creating the lineage; no recovery at open (several
    /// handles share it).
    fn open(&self) -> LineageLog {
        match &self.dir {
            Some(dir) => {
                let handle =
                    cap_std::fs::Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority()).unwrap();
                let options = OpenOptionsLog {
                    mode: OpenMode::ReadWrite,
                    key: None,
                    recover: false,
                    ..Default::default()
                };
                open_lineage(&handle, "effects", &self.name, &options).unwrap().unwrap()
            }
            None => {
                let url = crate::fleet_store::server();
                let store = PgStore::open(&url, &self.name, true, Some(LEASE)).unwrap().unwrap();
                EffectLog::open_with(Medium::Server(store), &self.name, None, Checkpoints::Ignore).unwrap()
            }
        }
    }

    /// Every record, read strictly by a fresh handle.
    fn history(&self) -> Vec<Framed> {
        self.open().history().expect("the whole lineage verifies").to_vec()
    }

    /// `effects-test-writer` on this lineage.
    fn writer(&self, count: usize, name: &str, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_effects-test-writer"));
        match &self.dir {
            Some(dir) => command.arg(dir.path()),
            None => command.arg(crate::fleet_store::server()),
        };
        command.arg(&self.name).arg(count.to_string()).arg(name).args(extra);
        command
    }

    /// How long a killed writer's claims stay its own: its lease on the
    /// fleet store, nothing on the local log (its process is gone).
    fn writer_lease(&self) -> Option<Duration> {
        self.dir.is_none().then_some(Duration::from_millis(300))
    }
}

/// A claim made by this (live) process.
fn claim(action_id: &str) -> ClaimRecord {
    ClaimRecord { executor: Some(effect_ledger::executor::current()), ..support::claim(action_id) }
}

/// An outcome with no facts; impact NONE exactly when not executed.
pub fn outcome(claim: u64, execution: Execution) -> OutcomeRecord {
    OutcomeRecord {
        claim,
        outcome: Outcome {
            execution,
            impact: if execution == Execution::NotExecuted { Impact::None } else { Impact::Possible },
            cleanup: CleanupState::NotApplicable,
            replayed: false,
            remote_acknowledged: false,
            detached: false,
        },
        facts: ProducerFacts::default(),
        recovery: false,
    }
}

/// Each suite below, as `disk::NAME` and `server::NAME`.
macro_rules! on_every_store {
    ($($test:ident),* $(,)?) => {
        mod disk {
            $( #[test] fn $test() { super::$test(super::Lineage::disk()) } )*
        }
        mod server {
            $( #[test] fn $test() { let _server = crate::fleet_store::shared(); super::$test(super::Lineage::server()) } )*
        }
    };
}

on_every_store!(
    two_handles_merge_and_never_settle_an_effect_twice,
    running_then_one_settlement_only,
    outcomes_out_1_forbids_are_refused_by_the_history,
    a_batch_is_validated_record_by_record,
    group_commit_acknowledges_every_thread_with_unique_positions,
    the_log_follows_the_model_of_the_history_rules,
    eight_writers_share_one_lineage_every_position_once_each_settled_once,
    eight_writers_claiming_the_same_requests_claim_each_once,
    writers_killed_mid_append_lose_no_acknowledged_claim_and_are_recovered_once,
);

fn two_handles_merge_and_never_settle_an_effect_twice(lineage: Lineage) {
    let (mut first, mut second) = (lineage.open(), lineage.open());
    let claimed = first.claim("r1", claim("a0")).unwrap();
    assert_eq!(second.claim("r1", claim("b0")).unwrap(), 1, "the second handle merged position 0 first");
    first.record_outcome("r1", outcome(claimed, Execution::ReportedSuccess)).unwrap();
    match second.record_outcome("r1", outcome(claimed, Execution::Failed)) {
        Err(LogError::Rejected { .. }) => {}
        other => panic!("expected the merged history to refuse a second settlement, got {other:?}"),
    }
    assert!(second.degraded_runs().contains("r1"), "LOG-5: a failed outcome write degrades the run");
    assert_eq!(lineage.history().len(), 3);
}

fn running_then_one_settlement_only(lineage: Lineage) {
    let mut log = lineage.open();
    let c = log.claim("r1", claim("a0")).unwrap();
    log.record_outcome("r1", outcome(c, Execution::Running)).unwrap();
    assert!(log.record_outcome("r1", outcome(c, Execution::Running)).is_err(), "RUNNING never repeats");
    log.record_outcome("r1", outcome(c, Execution::Cancelled)).unwrap();
    assert_eq!(log.claim_state(c), Some(ClaimState::Settled(Execution::Cancelled)));
    assert!(log.record_outcome("r1", outcome(c, Execution::ReportedSuccess)).is_err(), "settled is final");
    assert!(
        log.record_outcome("r1", outcome(99, Execution::ReportedSuccess)).is_err(),
        "an outcome needs its claim"
    );
    assert_eq!(lineage.history().len(), 3, "nothing refused was written");
}

fn outcomes_out_1_forbids_are_refused_by_the_history(lineage: Lineage) {
    let mut log = lineage.open();
    let c = log.claim("r1", claim("a0")).unwrap();
    let mut hidden = outcome(c, Execution::ReportedSuccess);
    hidden.outcome.impact = Impact::None;
    assert!(
        matches!(log.record_outcome("r1", hidden), Err(LogError::Rejected { .. })),
        "impact NONE needs NOT_EXECUTED"
    );
    log.record_outcome("r1", outcome(c, Execution::Running)).unwrap();
    match log.record_outcome("r1", outcome(c, Execution::NotExecuted)) {
        Err(LogError::Rejected { source, .. }) => assert!(source.to_string().contains("RUNNING")),
        other => panic!("a RUNNING launch cannot end NOT_EXECUTED: {other:?}"),
    }
}

fn a_batch_is_validated_record_by_record(lineage: Lineage) {
    let mut log = lineage.open();
    let first = Record::Claim(claim("a0"));
    let bad = Record::Outcome(outcome(7, Execution::ReportedSuccess));
    let settle = Record::Outcome(outcome(0, Execution::ReportedSuccess));
    let results = log.append_batch(&[("r", &first), ("r", &bad), ("r", &settle)]);
    assert_eq!(results[0].as_ref().unwrap(), &0);
    assert!(matches!(results[1], Err(LogError::Rejected { .. })), "an outcome needs its claim");
    assert_eq!(results[2].as_ref().unwrap(), &1, "validated against the batch's own earlier claim");
    assert_eq!(lineage.history().len(), 2);
}

fn group_commit_acknowledges_every_thread_with_unique_positions(lineage: Lineage) {
    let group = std::sync::Arc::new(GroupLog::new(lineage.open()));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let group = group.clone();
            std::thread::spawn(move || {
                (0..100)
                    .map(|i| group.append("r", Record::Claim(claim(&format!("t{t}-{i}")))).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut positions: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    positions.sort_unstable();
    assert_eq!(positions, (0..800).collect::<Vec<u64>>());
    assert_eq!(lineage.history().len(), 800, "all durable and valid");
}

/// Operations for the state machine, against a model of the history rules.
#[derive(Debug, Clone)]
pub enum Op {
    Claim,
    Outcome { claim: u8, running: bool },
    Recover,
    Reopen,
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Claim),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(claim, running)| Op::Outcome { claim, running }),
        1 => Just(Op::Recover),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    Unsettled,
    Running,
    Settled,
}

/// Whose claims the model makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Executors {
    /// This live process's: recovery settles none of them (LOG-7).
    Live,
    /// None named (a process known dead): recovery settles every unsettled
    /// one, once.
    Dead,
}

/// The history rules as a model, one entry per position (`Some` for claims),
/// over handles from `open` and recovery by `recover`.
pub fn follow_the_model<S: Store>(
    open: &dyn Fn() -> EffectLog<S>,
    recover: fn(&mut EffectLog<S>) -> Result<Vec<Position>, LogError>,
    executors: Executors,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let claim = |action: &str| match executors {
        Executors::Live => claim(action),
        Executors::Dead => support::claim(action),
    };
    let mut log = open();
    let mut model: Vec<Option<Model>> = Vec::new();
    for op in ops {
        match op {
            Op::Claim => {
                let position = log.claim("r", claim("a")).unwrap();
                prop_assert_eq!(position, model.len() as u64);
                model.push(Some(Model::Unsettled));
            }
            Op::Outcome { claim, running } => {
                let target = if model.is_empty() { 0 } else { claim as usize % (model.len() + 1) };
                let execution = if running { Execution::Running } else { Execution::ReportedSuccess };
                let allowed = match model.get(target).copied().flatten() {
                    Some(Model::Unsettled) => true,
                    Some(Model::Running) => !running,
                    _ => false,
                };
                let result = log.record_outcome("r", outcome(target as u64, execution));
                prop_assert_eq!(result.is_ok(), allowed, "outcome for {} ({:?})", target, execution);
                if allowed {
                    model[target] = Some(if running { Model::Running } else { Model::Settled });
                    model.push(None);
                }
            }
            Op::Recover => {
                let expected: Vec<Position> = match executors {
                    Executors::Live => Vec::new(),
                    Executors::Dead => (0..model.len())
                        .filter(|p| model[*p] == Some(Model::Unsettled))
                        .map(|p| p as Position)
                        .collect(),
                };
                prop_assert_eq!(recover(&mut log).unwrap(), expected.clone());
                for position in expected {
                    model[position as usize] = Some(Model::Settled);
                    model.push(None);
                }
            }
            Op::Reopen => log = open(),
        }
        prop_assert_eq!(log.history().unwrap().len(), model.len());
    }
    // What is stored reloads to the same history.
    prop_assert_eq!(open().history().unwrap().len(), model.len());
    Ok(())
}

/// The model on a fresh lineage of the same store per case, as every
/// surface recovers (`executor::recover`).
fn the_log_follows_the_model_of_the_history_rules(lineage: Lineage) {
    let config = ProptestConfig { cases: 32, ..ProptestConfig::default() };
    let on_disk = lineage.dir.is_some();
    proptest::test_runner::TestRunner::new(config)
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            let lineage = if on_disk { Lineage::disk() } else { Lineage::server() };
            follow_the_model(&|| lineage.open(), effect_ledger::executor::recover, Executors::Live, ops)
        })
        .unwrap();
}

fn eight_writers_share_one_lineage_every_position_once_each_settled_once(lineage: Lineage) {
    let appends = env_count("EFFECTS_CONTENTION_APPENDS", 500);
    let children: Vec<Child> = (0..8)
        .map(|w| lineage.writer(appends, &format!("w{w}"), &["--outcomes"]).stdout(Stdio::piped()).spawn())
        .collect::<Result<_, _>>()
        .unwrap();
    let outputs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for output in &outputs {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let acknowledged: HashMap<u64, String> = outputs.iter().flat_map(|o| acks(&o.stdout)).collect();
    assert_eq!(acknowledged.len(), 8 * appends, "every acknowledged position is distinct");
    let records = lineage.history();
    assert_eq!(records.len(), 8 * appends * 2, "every claim and outcome, once");
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut settlements = vec![0u32; records.len()];
    for framed in &records {
        match &framed.record {
            Record::Claim(claim) => {
                let (writer, index) = claim.action_id.split_once('-').unwrap();
                let index: i64 = index.parse().unwrap();
                let previous = last.insert(writer.to_owned(), index).unwrap_or(-1);
                assert_eq!(index, previous + 1, "{writer}'s claims out of order");
                assert_eq!(acknowledged.get(&framed.position), Some(&hex::encode(framed.check)));
            }
            Record::Outcome(outcome) => settlements[outcome.claim as usize] += 1,
            other => panic!("the writers append claims and outcomes only, found {}", other.kind()),
        }
    }
    assert_eq!(settlements.iter().filter(|n| **n == 1).count(), 8 * appends, "each claim settled once");
    assert!(settlements.iter().all(|n| *n <= 1));
}

/// EMB-3 across processes: eight writers `claim_once` the same requests, in
/// pairs that race on the same request at the same moment while the others
/// work elsewhere in the list (so an append often finds others' claims of
/// other requests unread: what a writer may pass over) and later reach
/// requests others made long before. Half the request ids hold characters
/// the log spells escaped. Each request is claimed once, and every writer is
/// answered that claim.
fn eight_writers_claiming_the_same_requests_claim_each_once(lineage: Lineage) {
    let requests = env_count("EFFECTS_CONTENTION_APPENDS", 500) as u64 / 2;
    let children: Vec<Child> = (0..8u64)
        .map(|w| {
            let start = format!("--once={}", (w % 4) * requests / 4);
            lineage.writer(requests as usize, &format!("w{w}"), &[&start]).stdout(Stdio::piped()).spawn()
        })
        .collect::<Result<_, _>>()
        .unwrap();
    // request -> (position, writer, made) for every writer's answer.
    let mut answers: HashMap<u64, Vec<(u64, String, bool)>> = HashMap::new();
    for (w, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let lines = String::from_utf8(output.stdout).unwrap();
        assert_eq!(lines.lines().count() as u64, requests, "w{w} answered every request");
        for line in lines.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let ["once", request, position, made] = fields[..] else { panic!("unexpected line {line:?}") };
            let answer = (position.parse().unwrap(), format!("w{w}"), made.parse().unwrap());
            answers.entry(request.parse().unwrap()).or_default().push(answer);
        }
    }
    let records = lineage.history();
    assert_eq!(records.len() as u64, requests, "one claim per request, no more");
    let mut request_ids = std::collections::HashSet::new();
    for framed in &records {
        let Record::Claim(claim) = &framed.record else { panic!("the writers only claim") };
        assert!(request_ids.insert(claim.operation.request_id.clone()), "a request claimed twice");
        let (writer, request) = claim.action_id.split_once('-').unwrap();
        let answered = &answers[&request.parse::<u64>().unwrap()];
        assert_eq!(answered.len(), 8, "every writer asked for request {request}");
        for (position, by, made) in answered {
            assert_eq!(*position, framed.position, "{by} was answered another claim of request {request}");
            assert_eq!(*made, by == writer, "{by} said made={made} of {writer}'s claim");
        }
    }
}

fn writers_killed_mid_append_lose_no_acknowledged_claim_and_are_recovered_once(lineage: Lineage) {
    let kills = env_count("EFFECTS_TORTURE_KILLS", 200);
    // A server writer takes a connection and a lease before its first
    // append: fewer, longer rounds there.
    let (rounds, window_us) = match lineage.dir {
        Some(_) => (kills.div_ceil(3), 15_000),
        None => (kills.div_ceil(10), 150_000),
    };
    let lease = lineage.writer_lease().map(|lease| format!("--lease-ms={}", lease.as_millis()));
    let extra: Vec<&str> = ["--outcomes"].into_iter().chain(lease.as_deref()).collect();
    let mut acknowledged: HashMap<u64, String> = HashMap::new();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut random = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    for round in 0..rounds {
        // Three writers at once; each is killed at its own random moment.
        let mut children: Vec<Child> = (0..3)
            .map(|w| lineage.writer(100_000, &format!("k{round}w{w}"), &extra).stdout(Stdio::piped()).spawn())
            .collect::<Result<_, _>>()
            .unwrap();
        for child in &mut children {
            std::thread::sleep(Duration::from_micros(random(window_us)));
            child.kill().unwrap(); // SIGKILL
        }
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert!(!output.status.success(), "a writer finished 100000 appends before its kill");
            for (position, check) in acks(&output.stdout) {
                let again = acknowledged.insert(position, check);
                assert!(again.is_none(), "position {position} acknowledged twice");
            }
        }
        // After every round: the lineage reads strictly, and every
        // acknowledged claim is there byte for byte (its check is the
        // SHA-256 of its bytes, chained).
        let records = lineage.history();
        for (position, check) in &acknowledged {
            let framed = records
                .get(*position as usize)
                .unwrap_or_else(|| panic!("acknowledged claim {position} lost"));
            assert_eq!(&hex::encode(framed.check), check, "claim {position} changed");
            assert!(matches!(framed.record, Record::Claim(_)));
        }
    }
    assert!(acknowledged.len() > 10, "the torture acknowledged only {} claims", acknowledged.len());
    // Once the dead writers are known dead (their processes gone; on the
    // server, their leases expired too), recovery settles every claim they
    // left, once.
    if let Some(lease) = lineage.writer_lease() {
        std::thread::sleep(lease * 2);
    }
    let mut log = lineage.open();
    if lineage.dir.is_some() {
        log.repair().unwrap();
    }
    let recovered = effect_ledger::executor::recover(&mut log).unwrap();
    assert!(effect_ledger::executor::recover(&mut log).unwrap().is_empty(), "recovery is idempotent");
    let records = lineage.history();
    let claims = records.iter().filter(|r| matches!(r.record, Record::Claim(_))).count();
    let outcomes = records.iter().filter(|r| matches!(r.record, Record::Outcome(_))).count();
    assert_eq!(claims, outcomes, "recovered {} claims, yet some remain unsettled", recovered.len());
    assert!(!recovered.is_empty(), "the kills left no claim to recover; the test proves nothing of recovery");
}
