//! Background jobs through the library chain (issue 6, item 2): two ledger
//! handles that both read a finished job settle its launch once (LOG-2); a
//! job that dies without a word is LOST and its launch INTERRUPTED; a record
//! whose start token is not the live process's is never "running".

#![allow(clippy::disallowed_methods)] // tests inspect files and /proc with ambient authority

use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Dispatch, Dispatched, Ledger, LedgerConfig, Run};
use effect_ledger::model::{CleanupState, Execution, JobLifecycle};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::procfs::live_members;
use effect_ledger::producers::process::ProcessRequest;
use serde_json::json;

struct Place {
    base: tempfile::TempDir,
}

impl Place {
    fn new() -> Self {
        let base = tempfile::tempdir().unwrap();
        std::fs::create_dir(base.path().join("root")).unwrap();
        std::fs::create_dir(base.path().join("data")).unwrap();
        Self { base }
    }

    /// An independent ledger handle over the same data dir and root.
    fn ledger(&self) -> Ledger {
        let data = Dir::open_ambient_dir(self.base.path().join("data"), ambient_authority()).unwrap();
        let root_dir = Dir::open_ambient_dir(self.base.path().join("root"), ambient_authority()).unwrap();
        let root = SealedRoot::new(root_dir, "root", "root", "agent", ControlPlane::default()).unwrap();
        let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
        Ledger::new(LedgerConfig::new(data, "data", root, policies))
    }
}

fn dispatched(ledger: &mut Ledger, run: &Run, tool: &str, input: serde_json::Value) -> Dispatched {
    match ledger.dispatch(run, tool, &input, "req") {
        Dispatch::Run(dispatched) => *dispatched,
        other => panic!("{tool} {input} was not dispatched: {other:?}"),
    }
}

/// Launches `command` as a background job; returns its id and launch claim.
fn launch(ledger: &mut Ledger, run: &Run, command: &str) -> (String, u64) {
    let d = dispatched(ledger, run, "bash", json!({ "command": command, "background": true }));
    let produced = ledger.launch_job(run, &d, &ProcessRequest::new("bash", command, Duration::MAX));
    let recorded = ledger.record(run, &d, &produced.facts).unwrap();
    assert_eq!(recorded.outcome.execution, Execution::Running);
    (produced.result.unwrap(), d.claim.unwrap())
}

/// The outcomes the lineage's log holds for the claim at `claim`, with
/// their positions, in log order.
fn outcomes(ledger: &mut Ledger, run: &Run, claim: u64) -> Vec<(u64, effect_ledger::log::OutcomeRecord)> {
    let history = ledger.history(&run.lineage).unwrap();
    history
        .into_iter()
        .filter_map(|f| match f.record {
            effect_ledger::log::Record::Outcome(o) if o.claim == claim => Some((f.position, o)),
            _ => None,
        })
        .collect()
}

/// A file of job `job` (`json`, `exit`, `out`, `killed`).
fn job_file(place: &Place, job: &str, suffix: &str) -> std::path::PathBuf {
    place.base.path().join(format!("data/effects/jobs/{job}.{suffix}"))
}

/// The record of job `job`, as JSON.
fn job_record(place: &Place, job: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(job_file(place, job, "json")).unwrap()).unwrap()
}

fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_handles_reading_a_finished_job_settle_its_launch_once() {
    let place = Place::new();
    let (mut a, mut b) = (place.ledger(), place.ledger());
    let run = a.begin_run(None);
    let (job, claim) = launch(&mut a, &run, "exit 3");
    let read = json!({ "job": job, "action": "status" });
    wait_until(|| {
        let d = dispatched(&mut a, &run, "bg_job", read.clone());
        a.job_action(&d).facts.job_state == Some(JobLifecycle::Exited)
    });
    // Both read the ended job before either settles: a real race, decided
    // by the log's merged history under its lock.
    let (da, db) =
        (dispatched(&mut a, &run, "bg_job", read.clone()), dispatched(&mut b, &run, "bg_job", read));
    let (fa, fb) = (a.job_action(&da).facts, b.job_action(&db).facts);
    assert_eq!((fa.exit_code, fb.exit_code), (Some(3), Some(3)));
    let first = a.record(&run, &da, &fa).unwrap();
    let second = b.record(&run, &db, &fb).unwrap();
    assert!(first.launch_settled.is_some(), "the first reader settles the launch");
    assert_eq!(second.launch_settled, None, "the second finds it settled and writes nothing");
    let settlements: Vec<_> =
        outcomes(&mut b, &run, claim).into_iter().map(|(_, o)| o.outcome.execution).collect();
    assert_eq!(settlements, vec![Execution::Running, Execution::Failed], "exit 3 is a failed launch");
    // Both reads were observed (JOB_STATE), whoever settled.
    assert_eq!(second.observations.len(), 1);
}

#[test]
fn a_job_killed_from_outside_is_lost_and_its_launch_interrupted() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let (job, claim) = launch(&mut ledger, &run, "sleep 60");
    let record = job_record(&place, &job);
    let pgid = record["pid"].as_u64().unwrap() as i32;
    // Not through bg_job: the whole group is SIGKILLed, so nothing reports.
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pgid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_until(|| live_members(pgid as u32).is_empty());
    let settled = ledger.monitor(&run).unwrap();
    assert_eq!(settled.len(), 1, "the monitor settles the lost job's launch");
    let (_, outcome) =
        outcomes(&mut ledger, &run, claim).into_iter().find(|(p, _)| *p == settled[0]).unwrap();
    assert_eq!(outcome.outcome.execution, Execution::Interrupted);
    assert_eq!(outcome.facts.job_state, Some(JobLifecycle::Lost));
    assert_eq!(ledger.monitor(&run).unwrap(), Vec::<u64>::new(), "idempotent");
}

/// PROC-1: a job's supervisor killed (from outside, or by its own command)
/// after the command started a process outside its group (`setsid`) leaves
/// an empty group and a live escapee. The supervisor attested nothing, so
/// the LOST launch's cleanup is UNKNOWN, never CLEAN: its window stays open
/// while the escapee could still write.
#[test]
fn a_job_whose_supervisor_is_killed_is_never_called_clean() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let pid_file = place.base.path().join("root/escaped.pid");
    let command = format!(
        "setsid sh -c 'echo $$ > {}.tmp && mv {0}.tmp {0}; exec sleep 60' </dev/null >/dev/null 2>&1 & sleep 1",
        pid_file.display()
    );
    let (job, claim) = launch(&mut ledger, &run, &command);
    let pgid = job_record(&place, &job)["pid"].as_u64().unwrap() as i32;
    wait_until(|| pid_file.exists());
    let escaped: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    let escaped = rustix::process::Pid::from_raw(escaped).unwrap();
    // The supervisor alone (it leads the group), then the rest of the group ends.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pgid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_until(|| live_members(pgid as u32).is_empty());
    let alive = rustix::process::test_kill_process(escaped).is_ok();
    let settled = ledger.monitor(&run);
    let _ = rustix::process::kill_process(escaped, rustix::process::Signal::KILL);
    assert!(alive, "the escapee outlived the supervisor (the case under test)");
    let settled = settled.unwrap();
    assert_eq!(settled.len(), 1, "the monitor settles the lost job's launch");
    let (_, outcome) =
        outcomes(&mut ledger, &run, claim).into_iter().find(|(p, _)| *p == settled[0]).unwrap();
    assert_eq!(outcome.facts.job_state, Some(JobLifecycle::Lost));
    assert_eq!(outcome.outcome.execution, Execution::Interrupted);
    assert_eq!(outcome.outcome.cleanup, CleanupState::Unknown, "{outcome:?}");
}

#[test]
fn a_job_record_whose_start_token_is_not_the_live_process_is_not_running() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let (job, _) = launch(&mut ledger, &run, "sleep 60");
    let path = job_file(&place, &job, "json");
    let mut record = job_record(&place, &job);
    let pid = record["pid"].as_u64().unwrap() as u32;
    // The same PID with another start token is another process (ID-2).
    record["start_token"] = json!(record["start_token"].as_u64().unwrap() + 1);
    std::fs::write(&path, record.to_string()).unwrap();
    let d = dispatched(&mut ledger, &run, "bg_job", json!({ "job": job, "action": "status" }));
    let facts = ledger.job_action(&d).facts;
    assert_eq!(facts.job_state, Some(JobLifecycle::Lost));
    // The job's own supervisor is gone as far as the record can tell, and
    // said nothing: that all of the job is dead is unknown (PROC-1), never
    // taken from a group another process leads.
    assert_eq!(facts.teardown_dead, None, "a LOST job attests no cleanup");
    // A kill never signals a process that is not the job's.
    let kill = dispatched(&mut ledger, &run, "bg_job", json!({ "job": job, "action": "kill" }));
    ledger.job_action(&kill);
    assert!(live_members(pid).contains(&pid), "the other process was left alone");
    let group = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process_group(group, rustix::process::Signal::KILL).unwrap();
    wait_until(|| live_members(pid).is_empty());
}

#[test]
fn a_launcher_that_dies_before_its_running_outcome_never_lets_the_command_run() {
    let place = Place::new();
    let run = {
        let mut ledger = place.ledger();
        let run = ledger.begin_run(None);
        let d = dispatched(
            &mut ledger,
            &run,
            "bash",
            json!({ "command": "echo ran > ran.txt", "background": true }),
        );
        let request = ProcessRequest::new("bash", "echo ran > ran.txt", Duration::MAX);
        let produced = ledger.launch_job(&run, &d, &request);
        assert!(produced.result.is_ok(), "the wrapper started, held at its gate");
        // The launcher is gone (its handle dropped, as a SIGKILL would):
        // the gate's pipe closes unopened.
        run
    };
    let mut later = place.ledger();
    wait_until(|| {
        later.monitor(&run).is_ok() && place.base.path().join("data/effects/jobs").read_dir().is_ok()
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!place.base.path().join("root/ran.txt").exists(), "the command never ran");
    // Its executor (this process) lives, so no later open records the claim
    // INTERRUPTED (LOG-7): it is left unsettled, which keeps it unresolved.
    // A launcher process that really dies is recovered: `jobs_cli.rs`.
    let mut later = place.ledger();
    assert!(outcomes(&mut later, &run, 0).is_empty(), "a live executor's claim is not recovered");
}

#[test]
fn another_process_never_recovers_a_live_launcher_s_claim() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let d =
        dispatched(&mut ledger, &run, "bash", json!({ "command": "echo ran > ran.txt", "background": true }));
    let produced =
        ledger.launch_job(&run, &d, &ProcessRequest::new("bash", "echo ran > ran.txt", Duration::MAX));
    // Another process tries to recover the unsettled launch claim: its
    // executor (this process) is alive, so LOG-7 leaves it alone.
    let log = place.base.path().join(format!("data/effects/{}.log", run.lineage));
    let recover = std::process::Command::new(env!("CARGO_BIN_EXE_effects"))
        .args(["log", "recover"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(recover.status.success(), "{}", String::from_utf8_lossy(&recover.stderr));
    assert!(String::from_utf8_lossy(&recover.stdout).contains("nothing to recover"));
    // The launcher's RUNNING outcome is recorded, its gate opens, the command runs.
    let recorded = ledger.record(&run, &d, &produced.facts).unwrap();
    assert_eq!(recorded.outcome.execution, Execution::Running);
    wait_until(|| place.base.path().join("root/ran.txt").exists());
}

#[test]
fn a_job_whose_child_outlives_it_is_running_until_the_whole_group_is_gone() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let (job, _) = launch(
        &mut ledger,
        &run,
        "(for _ in $(seq 1000); do [ -e go ] && break; sleep 0.02; done; echo late > late.txt) >/dev/null 2>&1 &",
    );
    // The leader printed its exit status, but its child lives on.
    wait_until(|| std::fs::read_to_string(job_file(&place, &job, "exit")).is_ok_and(|t| t.ends_with('\n')));
    let pid = job_record(&place, &job)["pid"].as_u64().unwrap() as u32;
    let read = json!({ "job": job, "action": "status" });
    let d = dispatched(&mut ledger, &run, "bg_job", read.clone());
    let facts = ledger.job_action(&d).facts;
    assert_eq!(facts.job_state, Some(JobLifecycle::Running), "a survivor keeps the job running");
    assert_eq!(ledger.record(&run, &d, &facts).unwrap().launch_settled, None);
    std::fs::write(place.base.path().join("root/go"), "").unwrap();
    wait_until(|| live_members(pid).is_empty());
    let d = dispatched(&mut ledger, &run, "bg_job", read);
    let facts = ledger.job_action(&d).facts;
    assert_eq!((facts.job_state, facts.exit_code), (Some(JobLifecycle::Exited), Some(0)));
    assert!(ledger.record(&run, &d, &facts).unwrap().launch_settled.is_some());
    assert!(place.base.path().join("root/late.txt").exists());
}

#[test]
fn a_job_record_pointing_at_another_launch_settles_nothing() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let (first, _) = launch(&mut ledger, &run, "true");
    let (second, other_claim) = launch(&mut ledger, &run, "sleep 60");
    // Both plain files rewritten (a command can): the first job now claims
    // to be the second launch.
    let mut record = job_record(&place, &first);
    record["launch_claim"] = json!(other_claim);
    std::fs::write(job_file(&place, &first, "json"), record.to_string()).unwrap();
    let generation = first.trim_start_matches("job-");
    let index_path = place.base.path().join(format!("data/effects/launch-{generation}.json"));
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    index["claim"] = json!(other_claim);
    std::fs::write(&index_path, index.to_string()).unwrap();
    let pid = record["pid"].as_u64().unwrap() as u32;
    wait_until(|| live_members(pid).is_empty());
    let d = dispatched(&mut ledger, &run, "bg_job", json!({ "job": first, "action": "status" }));
    let facts = ledger.job_action(&d).facts;
    assert_eq!(facts.job_state, Some(JobLifecycle::Exited));
    assert_eq!(
        ledger.record(&run, &d, &facts).unwrap().launch_settled,
        None,
        "the log says it is not that launch"
    );
    let other = outcomes(&mut ledger, &run, other_claim).len();
    assert_eq!(other, 1, "the second launch is still only RUNNING");
    // Stop the second job.
    let kill = dispatched(&mut ledger, &run, "bg_job", json!({ "job": second, "action": "kill" }));
    ledger.job_action(&kill);
}

#[test]
fn a_job_output_file_replaced_by_a_fifo_or_a_link_reads_as_no_output_and_never_hangs() {
    let place = Place::new();
    let mut ledger = place.ledger();
    let run = ledger.begin_run(None);
    let (job, _) = launch(&mut ledger, &run, "echo visible");
    let read = json!({ "job": job, "action": "status" });
    wait_until(|| {
        let d = dispatched(&mut ledger, &run, "bg_job", read.clone());
        ledger.job_action(&d).facts.job_state == Some(JobLifecycle::Exited)
    });
    let d = dispatched(&mut ledger, &run, "bg_job", read.clone());
    assert_eq!(ledger.job_output(&d, 4096).trim_end(), "visible", "the real output is read");

    // A second name for the output file: refused like every store file (ID-4).
    let out = job_file(&place, &job, "out");
    let other = place.base.path().join("elsewhere.out");
    std::fs::hard_link(&out, &other).unwrap();
    assert_eq!(ledger.job_output(&d, 4096), "", "a multiply linked output file is not read");
    std::fs::remove_file(&other).unwrap();

    // A FIFO in its place: an open for reading would block forever without
    // O_NONBLOCK; the read must come back at once with nothing.
    std::fs::remove_file(&out).unwrap();
    let status = std::process::Command::new("mkfifo").arg(&out).status().unwrap();
    assert!(status.success());
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| sender.send(ledger.job_output(&d, 4096)).unwrap());
        let output = receiver.recv_timeout(Duration::from_secs(10));
        if output.is_err() {
            // Unblock the stuck reader (a writer's open completes its open)
            // so the test fails instead of hanging.
            drop(std::fs::OpenOptions::new().write(true).open(&out));
        }
        assert_eq!(output.expect("reading a FIFO in the output's place hung"), "");
    });
}
