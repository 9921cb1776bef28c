//! The runtime chain through its Rust API, on real files with the shipped
//! policies: claims are durable before a backend may run, read-only runs leave
//! no file, refusals and persistence failures never dispatch, and a failing
//! classifier still claims (unknown scope, with the reason).

#![allow(clippy::disallowed_methods)] // tests build their trees with ambient authority

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::digest::Sha256Digest;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Dispatch, Dispatched, Ledger, LedgerConfig, RecordError, Run, RunError};
use effect_ledger::log::{Executor, OpenMode, OpenOptionsLog, OutcomeRecord, Record, open_lineage};
use effect_ledger::model::{
    Assessment, CleanupState, Coverage, Execution, Impact, Outcome, Postcondition, ProducerFacts, Verdict,
};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource, SandboxLimits};
use effect_ledger::producers::fs::{ls, read_file, write_file};
use effect_ledger::producers::process::ProcessRequest;
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

fn ledger_with(setup: &Setup, policies: PolicySet) -> Ledger {
    let data = Dir::open_ambient_dir(&setup.data, ambient_authority()).unwrap();
    let root_dir = Dir::open_ambient_dir(&setup.root, ambient_authority()).unwrap();
    let root = SealedRoot::new(root_dir, "work", "workspace", "agent", ControlPlane::default()).unwrap();
    Ledger::new(LedgerConfig::new(data, "data", root, policies))
}

fn ledger(setup: &Setup) -> Ledger {
    ledger_with(setup, PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap())
}

/// A ledger on the same data dir, beneath a sibling root `other` (ID-5).
fn ledger_beneath_another_root(setup: &Setup) -> Ledger {
    let other_root = setup.root.parent().unwrap().join("other");
    std::fs::create_dir_all(&other_root).unwrap();
    let data = Dir::open_ambient_dir(&setup.data, ambient_authority()).unwrap();
    let root_dir = Dir::open_ambient_dir(&other_root, ambient_authority()).unwrap();
    let root = SealedRoot::new(root_dir, "other", "workspace", "agent", ControlPlane::default()).unwrap();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    Ledger::new(LedgerConfig::new(data, "data", root, policies))
}

fn run_now(dispatch: Dispatch) -> Dispatched {
    match dispatch {
        Dispatch::Run(dispatched) => *dispatched,
        other => panic!("expected to run, got {other:?}"),
    }
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
fn a_write_is_claimed_durably_before_it_runs_then_settled_and_read_back() {
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let dispatched =
        run_now(ledger.dispatch(&run, "write_file", &json!({"path": "a.txt", "content": "hi\n"}), "r1"));
    let claim = dispatched.claim.expect("an effect is claimed");
    // Durable now, before the backend: a fresh reader finds it, and the target does not exist yet.
    let Record::Claim(on_disk_claim) = &on_disk(&setup.data, &run.lineage)[claim as usize] else {
        panic!("a claim")
    };
    assert!(!setup.root.join("a.txt").exists());
    assert_eq!(on_disk_claim.impact_scope.len(), 1);
    let expected = Postcondition::ContentSha256(Sha256Digest::of(b"hi\n").to_string());
    assert_eq!(on_disk_claim.obligations[0].postcondition, expected);

    let produced = write_file(ledger.root(), &dispatched.bound.targets(ledger.root())[0], "hi\n");
    let recorded = ledger.record(&run, &dispatched, &produced.facts).unwrap();
    assert_eq!(recorded.outcome.execution, Execution::ReportedSuccess);
    assert!(recorded.observations.is_empty(), "a write is verified by a later read, not by itself");

    let read = run_now(ledger.dispatch(&run, "read_file", &json!({"path": "a.txt"}), "r2"));
    assert!(read.claim.is_none(), "reads are admitted, not claimed");
    let produced = read_file(ledger.root(), &read.bound.targets(ledger.root())[0], 0, None, 1 << 20);
    let recorded = ledger.record(&run, &read, &produced.facts).unwrap();
    let (_, observation) = &recorded.observations[0];
    assert_eq!(observation.coverage, Coverage::Complete);
    assert_eq!(
        Some(Postcondition::ContentSha256(observation.content_sha256.clone().unwrap())),
        Some(expected)
    );
    assert_eq!(on_disk(&setup.data, &run.lineage).len(), 3, "claim, outcome, observation");
}

#[test]
fn a_read_only_run_leaves_no_file() {
    let setup = setup();
    std::fs::write(setup.root.join("r.txt"), "r\n").unwrap();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    for (tool, input) in [("read_file", json!({"path": "r.txt"})), ("ls", json!({"path": "."}))] {
        let dispatched = run_now(ledger.dispatch(&run, tool, &input, "r"));
        let target = &dispatched.bound.targets(ledger.root())[0];
        let produced = if tool == "ls" {
            ls(ledger.root(), target).facts
        } else {
            read_file(ledger.root(), target, 0, None, 1 << 20).facts
        };
        ledger.record(&run, &dispatched, &produced).unwrap();
    }
    assert_eq!(std::fs::read_dir(&setup.data).unwrap().count(), 0, "CMP-9: no effects directory, no log");
}

#[test]
fn an_escape_is_refused_before_any_claim() {
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    match ledger.dispatch(&run, "write_file", &json!({"path": "../x", "content": "no"}), "r") {
        Dispatch::Refused(reason) => assert!(reason.contains("escapes the root"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(std::fs::read_dir(&setup.data).unwrap().count(), 0);
}

#[test]
fn a_claim_that_cannot_be_persisted_blocks_the_call() {
    let setup = setup();
    std::fs::create_dir(setup.data.join("effects")).unwrap();
    std::fs::set_permissions(setup.data.join("effects"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    match ledger.dispatch(&run, "write_file", &json!({"path": "a.txt", "content": "hi\n"}), "r") {
        Dispatch::Blocked(reason) => assert!(reason.contains("could not be persisted"), "{reason}"),
        other => panic!("expected BLOCKED, got {other:?}"),
    }
    assert!(!setup.root.join("a.txt").exists());
}

#[test]
fn a_classifier_that_fails_still_claims_unknown_scope_and_says_why() {
    let setup = setup();
    // A manifest whose write_file classifier never returns.
    let manifest_dir = tempfile::tempdir().unwrap();
    let looping = support::fixture("endless-loop");
    std::fs::write(manifest_dir.path().join("loop.wasm"), &looping).unwrap();
    std::fs::write(
        manifest_dir.path().join("classify-unbound.wasm"),
        support::shipped("classify-unbound.wasm"),
    )
    .unwrap();
    let manifest = format!(
        "wit = \"{}\"\nroute = \"test\"\ntoolchain = \"test\"\n\n[[component]]\nname = \"loop\"\nworld = \"classifier\"\nfile = \"loop.wasm\"\nsha256 = \"{}\"\ntools = [\"write_file\"]\n\n[[component]]\nname = \"classify-unbound\"\nworld = \"classifier\"\nfile = \"classify-unbound.wasm\"\nsha256 = \"{}\"\ntools = [\"*\"]\n",
        effect_ledger::policy::WIT_PACKAGE,
        Sha256Digest::of(&looping),
        Sha256Digest::of(&support::shipped("classify-unbound.wasm"))
    );
    std::fs::write(manifest_dir.path().join("manifest.toml"), manifest).unwrap();
    let source = PolicySource::Directory {
        dir: Dir::open_ambient_dir(manifest_dir.path(), ambient_authority()).unwrap(),
        manifest_file: "manifest.toml".into(),
        display: "test manifest".into(),
    };
    let options = PolicyOptions {
        limits: SandboxLimits { fuel: 1_000_000, ..SandboxLimits::default() },
        ..PolicyOptions::default()
    };
    let mut ledger = ledger_with(&setup, PolicySet::load(&source, &options).unwrap());
    let run = ledger.begin_run(None);
    let dispatched =
        run_now(ledger.dispatch(&run, "write_file", &json!({"path": "a.txt", "content": "hi\n"}), "r"));
    assert!(dispatched.policy_failure.as_deref().unwrap().contains("out of fuel"));
    let Record::Claim(claim) = &on_disk(&setup.data, &run.lineage)[dispatched.claim.unwrap() as usize] else {
        panic!("a claim")
    };
    assert!(claim.impact_scope.is_empty(), "POL-4: unknown scope");
    assert!(claim.policy_failure.as_deref().unwrap().contains("out of fuel"), "and the reason is on disk");
    let named = claim.classifier.as_ref().expect("POL-4: the claim names the classifier that failed");
    assert_eq!(
        (named.component.as_str(), named.sha256.clone()),
        ("loop", Sha256Digest::of(&looping).to_string())
    );
}

#[test]
fn a_claim_names_the_classifier_that_planned_it() {
    // POL-4: "which policy classified this?" is answered by the claim itself,
    // for each tool family, with the digest of the pinned component.
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let write =
        run_now(ledger.dispatch(&run, "write_file", &json!({"path": "a.txt", "content": "hi\n"}), "w"));
    let external = json!({"server": "tracker", "tool": "create_issue", "arguments": {}});
    let reported = run_now(ledger.dispatch(&run, "external", &external, "e"));
    let records = on_disk(&setup.data, &run.lineage);
    for (dispatched, component) in [(write, "classify-fs"), (reported, "classify-reported")] {
        let Record::Claim(claim) = &records[dispatched.claim.unwrap() as usize] else { panic!("a claim") };
        let named = claim.classifier.as_ref().expect("the claim names its classifier");
        assert_eq!(named.component, component);
        let shipped = Sha256Digest::of(&support::shipped(&format!("{component}.wasm"))).to_string();
        assert_eq!(named.sha256, shipped, "the pinned component's digest");
    }
}

#[test]
fn recovery_settles_the_claims_of_dead_executors_only() {
    // LOG-7: two claims made for other processes (as a hook claims for the
    // agent): one whose executor has died, one whose executor lives.
    let setup = setup();
    let mut first = ledger(&setup);
    let run = first.begin_run(None);
    let mut dead = std::process::Command::new("sleep").arg("0.05").spawn().unwrap();
    let dead_identity = effect_ledger::procfs::identity_of(dead.id()).unwrap();
    let mut live = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let live_identity = effect_ledger::procfs::identity_of(live.id()).unwrap();
    let input = json!({ "path": "a.txt", "content": "a\n" });
    let as_dead = Executor::Process(dead_identity);
    let as_live = Executor::Process(live_identity);
    let gone = run_now(first.dispatch_as(&run, "write_file", &input, "r1", as_dead)).claim.unwrap();
    let lives = run_now(first.dispatch_as(&run, "write_file", &input, "r2", as_live)).claim.unwrap();
    dead.wait().unwrap();
    // Another handle (as another process would) opens the run: only the dead
    // executor's claim is recorded INTERRUPTED, and a second pass adds nothing.
    let mut second = ledger(&setup);
    let continued = second.continue_run(&run.id).unwrap();
    assert_eq!(second.recover(&continued.lineage).unwrap(), Vec::<u64>::new(), "idempotent");
    let settled: Vec<u64> = on_disk(&setup.data, &run.lineage)
        .iter()
        .filter_map(|record| match record {
            Record::Outcome(o) if o.recovery && o.outcome.execution == Execution::Interrupted => {
                Some(o.claim)
            }
            _ => None,
        })
        .collect();
    assert_eq!(settled, vec![gone]);
    // Once the live executor dies too, its claim is recovered.
    live.kill().unwrap();
    live.wait().unwrap();
    assert_eq!(second.recover(&continued.lineage).unwrap(), vec![lives]);
}

#[test]
fn two_processes_starting_one_run_beneath_different_roots_cannot_both_claim() {
    // ID-5 under the writer's lock: both pass `new_run` (no log yet), then
    // the second root's claim is refused by the log itself, and never runs.
    let setup = setup();
    let mut here = ledger(&setup);
    let mut there = ledger_beneath_another_root(&setup);
    let (a, b) = (here.new_run("x").unwrap(), there.new_run("x").unwrap());
    let input = json!({ "path": "a.txt", "content": "a\n" });
    run_now(here.dispatch(&a, "write_file", &input, "r1"));
    match there.dispatch(&b, "write_file", &input, "r2") {
        Dispatch::Blocked(reason) => assert!(reason.contains("ID-5"), "{reason}"),
        other => panic!("a claim beneath another root was not refused: {other:?}"),
    }
}

#[test]
fn contradictory_facts_are_refused_and_nothing_of_the_call_is_settled() {
    // OUT-2 / TRU-1: the runtime says the external call never ran, yet gives
    // an exit code. The ledger refuses it as bad input before settling: no
    // NOT_EXECUTED, no outcome at all; the claim (durable since dispatch)
    // waits for facts that hold, and takes them.
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let input = json!({ "server": "tracker", "tool": "create_issue", "arguments": {} });
    let dispatched = run_now(ledger.dispatch(&run, "external", &input, "r1"));
    let claim = dispatched.claim.expect("an external call is claimed");
    for facts in [
        ProducerFacts { executed: false, exit_code: Some(3), ..ProducerFacts::default() },
        ProducerFacts { executed: false, timed_out: true, ..ProducerFacts::default() },
        ProducerFacts { executed: false, cancelled: true, ..ProducerFacts::default() },
    ] {
        match ledger.record(&run, &dispatched, &facts) {
            Err(RecordError::Facts(error)) => {
                assert!(error.to_string().contains("`executed: false` with"), "{error}")
            }
            other => panic!("{facts:?} was not refused as contradictory: {other:?}"),
        }
    }
    let records = on_disk(&setup.data, &run.lineage);
    assert_eq!(records.len(), 1, "only the claim: {records:?}");
    assert!(matches!(records[0], Record::Claim(_)));
    // The same call with facts that hold settles once, as what they say.
    let ran = ProducerFacts { executed: true, exit_code: Some(3), ..ProducerFacts::default() };
    let recorded = ledger.record(&run, &dispatched, &ran).unwrap();
    assert_eq!(recorded.outcome.execution, Execution::Failed);
    let records = on_disk(&setup.data, &run.lineage);
    assert!(matches!(&records[1], Record::Outcome(o) if o.claim == claim && o.facts == ran), "{records:?}");
}

#[test]
fn the_log_itself_refuses_an_outcome_of_contradictory_facts() {
    // Below the ledger: a writer that appends such an outcome to the log
    // directly is refused by the history rules, and marks nothing settled.
    let setup = setup();
    let mut ledger = ledger(&setup);
    let run = ledger.begin_run(None);
    let input = json!({ "path": "a.txt", "content": "a\n" });
    let claim = run_now(ledger.dispatch(&run, "write_file", &input, "r1")).claim.unwrap();
    let effects = Dir::open_ambient_dir(setup.data.join("effects"), ambient_authority()).unwrap();
    let options =
        OpenOptionsLog { mode: OpenMode::ReadWrite, key: None, recover: false, ..Default::default() };
    let mut log = open_lineage(&effects, "effects", &run.lineage, &options).unwrap().unwrap();
    let outcome = OutcomeRecord {
        claim,
        outcome: Outcome {
            execution: Execution::NotExecuted,
            impact: Impact::None,
            cleanup: CleanupState::NotApplicable,
            replayed: false,
            remote_acknowledged: false,
            detached: false,
        },
        facts: ProducerFacts { executed: false, exit_code: Some(0), ..ProducerFacts::default() },
        recovery: false,
    };
    let error = log.record_outcome(&run.id, outcome).unwrap_err();
    assert!(error.to_string().contains("contradictory facts"), "{error}");
    assert_eq!(on_disk(&setup.data, &run.lineage).len(), 1, "nothing but the claim");
}

/// CMP-7b under a race: another thread swaps a required file with a symlink
/// over and over (`RENAME_EXCHANGE`) after changing it behind the ledger's
/// back, while decisions read it back. A decision that finds the path no
/// longer resolving as it did a moment before is refused; none falls back on
/// the readback taken before the change and says COMPLETED. The decisions
/// are a read-only ledger's, so none records a readback that would decide
/// the next.
#[test]
fn a_required_file_swapped_while_deciding_never_completes_on_old_evidence() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let setup = setup();
    let mut writer = ledger(&setup);
    let run = writer.begin_run(None);
    write_and_read(&mut writer, &run, "a.txt", "good\n");
    drop(writer);
    std::fs::write(setup.root.join("a.txt"), "evil\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", setup.root.join("link")).unwrap();
    let mut reader = ledger(&setup).read_only();
    let run = reader.continue_run(&run.id).unwrap();
    let stop = AtomicBool::new(false);
    let (mut completed, mut refused, mut decided) = (0, 0, 0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let root = std::fs::File::open(&setup.root).unwrap();
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(&root, "a.txt", &root, "link", rustix::fs::RenameFlags::EXCHANGE)
                    .unwrap();
            }
        });
        // At least 300 decisions, and on until the race has gone both ways
        // (a loaded machine may refuse every one of the first hundreds).
        for attempt in 0..5_000 {
            if attempt >= 300 && decided > 0 && refused > 0 {
                break;
            }
            match reader.complete(&run, &["a.txt".to_owned()], "a.txt holds good.") {
                Ok(c) if c.decided.decision.verdict == Verdict::Completed => completed += 1,
                Ok(_) => decided += 1,
                Err(_) => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        completed, 0,
        "COMPLETED over the old readback ({refused} refused, {decided} decided otherwise)"
    );
    assert!(decided > 0 && refused > 0, "the race ran both ways: {refused} refused, {decided} decided");
}

/// A write of `path` and a full read of it back, by `run`.
fn write_and_read(ledger: &mut Ledger, run: &Run, path: &str, content: &str) {
    let write = run_now(ledger.dispatch(run, "write_file", &json!({"path": path, "content": content}), "w"));
    let produced = write_file(ledger.root(), &write.bound.targets(ledger.root())[0], content);
    ledger.record(run, &write, &produced.facts).unwrap();
    let read = run_now(ledger.dispatch(run, "read_file", &json!({"path": path}), "r"));
    let produced = read_file(ledger.root(), &read.bound.targets(ledger.root())[0], 0, None, 1 << 20);
    ledger.record(run, &read, &produced.facts).unwrap();
}

/// `command` through the process producer under its claim, by `run`.
fn command(ledger: &mut Ledger, run: &Run, command: &str) {
    let dispatched = run_now(ledger.dispatch(run, "bash", &json!({"command": command}), "c"));
    let request = ProcessRequest::new("bash", command, Duration::from_secs(30));
    let produced = ledger.run_command(run, &dispatched, &request);
    assert_eq!(produced.facts.exit_code, Some(0), "{:?}", produced.result);
    ledger.record(run, &dispatched, &produced.facts).unwrap();
}

#[test]
fn a_child_run_writes_to_its_root_s_log_and_is_continued_by_its_id() {
    // LOG-1: one log per root lineage; a child's claims carry its parent.
    let setup = setup();
    let mut ledger = ledger(&setup);
    let root = ledger.new_run("review").unwrap();
    write_and_read(&mut ledger, &root, "a.txt", "a\n");
    let child = ledger.new_child(&root, "tests").unwrap();
    assert_eq!((child.id.as_str(), child.lineage.as_str()), ("review.tests", "review"));
    let grandchild = ledger.begin_run(Some(&child));
    assert!(grandchild.id.starts_with("review.tests.run-"), "{}", grandchild.id);
    assert_eq!(grandchild.parent.as_deref(), Some("review.tests"));
    write_and_read(&mut ledger, &child, "b.txt", "b\n");
    write_and_read(&mut ledger, &grandchild, "c.txt", "c\n");
    let names: Vec<_> =
        std::fs::read_dir(setup.data.join("effects")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["review.log"], "no log of its own for any child");
    let parents: Vec<Option<String>> = on_disk(&setup.data, "review")
        .iter()
        .filter_map(|record| match record {
            Record::Claim(claim) => Some(claim.parent_run_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(parents, [None, Some("review".into()), Some("review.tests".into())]);
    // Another process continues the child by its id alone; a child the log
    // does not know, or a second child of one name, is refused.
    let mut other =
        ledger_with(&setup, PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap());
    assert_eq!(other.continue_run("review.tests").unwrap(), child);
    assert_eq!(other.continue_run(&grandchild.id).unwrap(), grandchild);
    assert!(matches!(other.continue_run("review.nope"), Err(RunError::NoSuchChild { .. })));
    assert!(matches!(other.continue_run("nope.tests"), Err(RunError::NoSuchRun { .. })));
    let parent = other.continue_run("review").unwrap();
    assert!(matches!(other.new_child(&parent, "tests"), Err(RunError::Exists { .. })));
    assert!(matches!(other.new_child(&parent, "a.b"), Err(RunError::BadId(_))));
}

#[test]
fn a_child_is_continued_only_beneath_its_lineage_s_root() {
    // ID-5: one lineage, one root. A child that claimed nothing yet (only
    // its reads are in the log) is held to its lineage's root.
    let setup = setup();
    std::fs::write(setup.root.join("r.txt"), "r\n").unwrap();
    let mut ledger = ledger(&setup);
    let root = ledger.new_run("main").unwrap();
    write_and_read(&mut ledger, &root, "a.txt", "a\n");
    let child = ledger.new_child(&root, "reader").unwrap();
    let read = run_now(ledger.dispatch(&child, "read_file", &json!({"path": "r.txt"}), "r"));
    let produced = read_file(ledger.root(), &read.bound.targets(ledger.root())[0], 0, None, 1 << 20);
    ledger.record(&child, &read, &produced.facts).unwrap();
    let mut elsewhere = ledger_beneath_another_root(&setup);
    for id in ["main", "main.reader"] {
        match elsewhere.continue_run(id) {
            Err(RunError::OtherRoot { run, .. }) => assert_eq!(run, id),
            other => panic!("{id} continued beneath another root: {other:?}"),
        }
    }
    assert_eq!(ledger.continue_run("main.reader").unwrap(), child, "beneath its own root it continues");
}

#[test]
fn a_child_s_unknown_scope_command_stales_its_parent_s_reads() {
    // Seed P1-5: a child's shell command runs on the parent's host and may
    // change anything the parent read, so the parent's decision after it is
    // not COMPLETED on the read it took before. A child's effect of known
    // scope on another file leaves the parent's read fresh.
    let decide = |child_does: &dyn Fn(&mut Ledger, &Run)| {
        let setup = setup();
        let mut ledger = ledger(&setup);
        let parent = ledger.new_run("parent").unwrap();
        write_and_read(&mut ledger, &parent, "a.txt", "a\n");
        let child = ledger.begin_run(Some(&parent));
        child_does(&mut ledger, &child);
        // Nothing required (not even a.txt, which the run's default set
        // would read at decision time): the parent's own read decides.
        let completion = ledger.complete_exactly(&parent, &[], "I wrote a.txt.").unwrap();
        (completion.decided.decision.verdict, completion.decided.decision.assessments[0].assessment)
    };
    let (verdict, write) = decide(&|ledger, child| command(ledger, child, "true"));
    assert_ne!(verdict, Verdict::Completed, "the parent's read of a.txt is stale after its child's bash");
    assert_eq!(write, Assessment::Unverified);
    let (verdict, write) = decide(&|ledger, child| write_and_read(ledger, child, "b.txt", "b\n"));
    assert_eq!((verdict, write), (Verdict::Completed, Assessment::Verified));
}
