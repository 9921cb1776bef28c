//! Tools the embedding runtime runs itself, through the Rust API (SPEC
//! section 12): the claim is durable before the answer (EMB-1), a request id
//! is claimed once and settled by id from another ledger on the same data
//! dir (EMB-3), and the ledger reads the claimed files back itself whatever
//! the runtime reports (EMB-4): a backend that wrote other bytes never
//! completes.

#![allow(clippy::disallowed_methods)] // tests build their trees with ambient authority

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{ClaimStatus, Ledger, LedgerConfig, Reported, StepStatus};
use effect_ledger::log::{OpenMode, OpenOptionsLog, Record, open_lineage};
use effect_ledger::model::{Execution, Verdict};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::tools::Call;
use serde_json::json;

struct Setup {
    _base: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
}

fn setup() -> Setup {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("work");
    let data = base.path().join("data");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    Setup { _base: base, root, data }
}

fn ledger(setup: &Setup) -> Ledger {
    let data = Dir::open_ambient_dir(&setup.data, ambient_authority()).unwrap();
    let root_dir = Dir::open_ambient_dir(&setup.root, ambient_authority()).unwrap();
    let root = SealedRoot::new(root_dir, "work", "workspace", "agent", ControlPlane::default()).unwrap();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    Ledger::new(LedgerConfig::new(data, "data", root, policies))
}

fn write(path: &str, content: &str) -> Call {
    Call::parse("write_file", &json!({"path": path, "content": content})).unwrap()
}

fn exit(code: i32) -> Reported {
    Reported { executed: true, exit_code: Some(code), timed_out: false, cancelled: false }
}

/// The lineage's records as another process would load them from disk.
fn on_disk(data: &Path, lineage: &str) -> Vec<Record> {
    let effects = Dir::open_ambient_dir(data.join("effects"), ambient_authority()).unwrap();
    let options =
        OpenOptionsLog { mode: OpenMode::ReadOnly, key: None, recover: false, ..Default::default() };
    let log = open_lineage(&effects, "effects", lineage, &options).unwrap().unwrap();
    log.records().iter().map(|f| f.record.clone()).collect()
}

#[test]
fn a_runtime_write_is_claimed_before_it_runs_settled_by_request_id_and_read_back() {
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let claimed = ledger.claim(&run, "call-1", write("a.txt", "hi\n"), "effects");
    assert_eq!(claimed.status, ClaimStatus::Run, "{claimed:?}");
    let claim = claimed.claim.expect("a write is claimed");
    // EMB-1: durable before the runtime runs it, and it names the profile.
    let Record::Claim(record) = &on_disk(&setup.data, &run.lineage)[claim as usize] else {
        panic!("a claim")
    };
    assert_eq!(record.profile.as_deref(), Some("effects"));
    assert!(!setup.root.join("a.txt").exists());

    std::fs::write(setup.root.join("a.txt"), "hi\n").unwrap(); // the runtime's own backend
    let other = ledger.settle(&run, "call-1", &exit(0), Some(write("a.txt", "bye\n")));
    assert_eq!(other.status, StepStatus::Refused, "another call never settles this claim");
    let settled = ledger.settle(&run, "call-1", &exit(0), None);
    assert_eq!(settled.status, StepStatus::Ran, "{settled:?}");
    assert_eq!(settled.claim, Some(claim));
    assert_eq!(settled.outcome.as_ref().unwrap().execution, Execution::ReportedSuccess);
    assert_eq!(settled.observations.len(), 1, "EMB-4: the ledger read the file back itself");
    let completion = ledger.complete(&run, &[], "I wrote a.txt.").unwrap();
    assert_eq!(completion.decided.decision.verdict, Verdict::Completed, "{:?}", completion.decided.decision);
}

#[test]
fn a_backend_that_writes_other_bytes_than_claimed_never_completes() {
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    assert_eq!(ledger.claim(&run, "call-1", write("a.txt", "hi\n"), "effects").status, ClaimStatus::Run);
    std::fs::write(setup.root.join("a.txt"), "something else\n").unwrap();
    // The runtime reports success; the ledger's own readback says otherwise.
    let settled = ledger.settle(&run, "call-1", &exit(0), None);
    assert_eq!(settled.status, StepStatus::Ran);
    let completion = ledger.complete(&run, &["a.txt".to_owned()], "I wrote a.txt.").unwrap();
    assert_eq!(completion.decided.decision.verdict, Verdict::Failed, "{:?}", completion.decided.decision);
}

#[test]
fn a_request_id_is_claimed_once_and_settled_once_across_ledgers() {
    let setup = setup();
    let mut first = ledger(&setup);
    let run = first.begin_run(None);
    let claimed = first.claim(&run, "call-1", write("a.txt", "hi\n"), "effects");
    assert!(!claimed.duplicate);
    // A retry in this ledger, and one from another ledger on the data dir.
    let again = first.claim(&run, "call-1", write("a.txt", "hi\n"), "effects");
    assert!(again.duplicate && again.claim == claimed.claim, "{again:?}");
    let mut second = ledger(&setup);
    let run_there = second.continue_run(&run.id).unwrap();
    let there = second.claim(&run_there, "call-1", write("a.txt", "hi\n"), "effects");
    assert!(
        there.duplicate && there.claim == claimed.claim && there.action_id == claimed.action_id,
        "{there:?}"
    );
    // The same request id for another call is refused, not a second claim.
    let other = second.claim(&run_there, "call-1", write("a.txt", "bye\n"), "effects");
    assert_eq!(other.status, ClaimStatus::Refused, "{other:?}");

    std::fs::write(setup.root.join("a.txt"), "hi\n").unwrap();
    // Settled from a ledger that never saw the call: without the call it
    // cannot, with another call it is refused, with the call it settles what
    // the claim recorded.
    let mut third = ledger(&setup);
    let run_third = third.continue_run(&run.id).unwrap();
    assert_eq!(third.settle(&run_third, "call-1", &exit(0), None).status, StepStatus::Refused);
    let wrong = Call::parse("write_file", &json!({"path": "a.txt", "content": "bye\n"})).unwrap();
    assert_eq!(third.settle(&run_third, "call-1", &exit(0), Some(wrong)).status, StepStatus::Refused);
    let settled = third.settle(&run_third, "call-1", &exit(0), Some(write("a.txt", "hi\n")));
    assert_eq!(settled.status, StepStatus::Ran, "{settled:?}");
    assert_eq!(settled.observations.len(), 1);
    // The claiming ledger settling later gets the first outcome; nothing is written.
    let records = on_disk(&setup.data, &run.lineage).len();
    let late = first.settle(&run, "call-1", &exit(1), None);
    assert_eq!(late.outcome.unwrap().execution, Execution::ReportedSuccess, "the first outcome stands");
    assert_eq!(on_disk(&setup.data, &run.lineage).len(), records);
    let claims = on_disk(&setup.data, &run.lineage).iter().filter(|r| matches!(r, Record::Claim(_))).count();
    assert_eq!(claims, 1);
    let completion = first.complete(&run, &["a.txt".to_owned()], "I wrote a.txt.").unwrap();
    assert_eq!(completion.decided.decision.verdict, Verdict::Completed, "{:?}", completion.decided.decision);
}

#[test]
fn background_jobs_and_unknown_profiles_are_refused_before_any_claim() {
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let job = Call::parse("bash", &json!({"command": "sleep 1", "background": true})).unwrap();
    assert_eq!(ledger.claim(&run, "a", job, "effects").status, ClaimStatus::Refused);
    assert_eq!(ledger.claim(&run, "b", write("a.txt", "x"), "vendor-x").status, ClaimStatus::Refused);
    assert!(!setup.data.join("effects").join(format!("{}.log", run.lineage)).exists(), "nothing claimed");
}

#[test]
fn a_runtime_command_claim_is_never_recorded_as_confined() {
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let command = Call::parse("bash", &json!({"command": "true"})).unwrap();
    let claimed = ledger.claim(&run, "c", command, "effects");
    let Record::Claim(record) = &on_disk(&setup.data, &run.lineage)[claimed.claim.unwrap() as usize] else {
        panic!("a claim")
    };
    assert!(!record.confined, "ID-6: the runtime, not the ledger, runs it");
}

#[test]
fn two_ledgers_racing_to_claim_one_request_id_get_one_claim() {
    // Two handles on one log (each its own open file, so its own flock):
    // each claim's check for a standing claim and its write are one
    // critical section, so the racers agree on the first.
    let setup = setup();
    let mut first = ledger(&setup);
    let run = first.begin_run(None);
    let seeded = first.claim(&run, "seed", write("seed.txt", "s"), "effects");
    assert_eq!(seeded.status, ClaimStatus::Run);
    let mut second = ledger(&setup);
    let run_there = second.continue_run(&run.id).unwrap();
    const REQUESTS: usize = 40;
    let race = |ledger: &mut Ledger, run: &effect_ledger::ledger::Run| {
        (0..REQUESTS)
            .map(|i| {
                let claimed =
                    ledger.claim(run, &format!("call-{i}"), write(&format!("f{i}.txt"), "x"), "effects");
                assert_eq!(claimed.status, ClaimStatus::Run, "{claimed:?}");
                claimed.claim.unwrap()
            })
            .collect::<Vec<_>>()
    };
    let (mine, theirs) = std::thread::scope(|scope| {
        let theirs = scope.spawn(|| race(&mut second, &run_there));
        (race(&mut first, &run), theirs.join().unwrap())
    });
    assert_eq!(mine, theirs, "both racers answer the same claim for every request id");
    let claims = on_disk(&setup.data, &run.lineage).iter().filter(|r| matches!(r, Record::Claim(_))).count();
    assert_eq!(claims, REQUESTS + 1, "one claim per request id");
}
