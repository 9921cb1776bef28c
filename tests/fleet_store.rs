//! The fleet store (SPEC 13) on a real PostgreSQL server, doing what only
//! a server can suffer (the suites every store passes, racing writers and
//! SIGKILLed ones included, are in `every_store`): writers' connections
//! terminated by the server mid-append, forged appends the server's
//! backstops must refuse, a stale writer whose head moved, a run exported to
//! a log file that verifies unchanged, writers paused past their lease and
//! recovery that must leave a live or foreign writer's claim alone, lines
//! changed or removed on the server behind the ledger's back, a database of
//! another schema version, a launch indexed by its claim's row, the server
//! restarted while writers append, and the server gone for longer than a
//! writer resends (`$EFFECTS_TEST_POSTGRES_RESTART` and
//! `$EFFECTS_TEST_POSTGRES_STOP`, set by `cargo xtask test` for its own
//! cluster, are the commands that restart and stop it).
//!
//! The server is `$EFFECTS_TEST_POSTGRES` (`cargo xtask test` starts a
//! private cluster and sets it). Each test works on lineages of its own
//! (fresh ids), so tests share the server without seeing each other.

#![allow(clippy::disallowed_methods)] // tests set up files with ambient authority

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use effect_ledger::log::{
    APPEND_ONE, CHECKPOINT_EVERY, Checkpoints, ClaimRecord, EffectLog, LEASE, LineageLog, LogError, Medium,
    OpenMode, OpenOptionsLog, OperationRef, OutcomeRecord, PgStore, Record, SCHEMA_VERSION, Sidecar, Store,
};
use effect_ledger::model::{CleanupState, Execution, Impact, Outcome, ProducerFacts};

use crate::support::{self, acks};

/// Every test holds this shared while it uses the server; the restart test
/// holds it alone, so no other test's own queries meet a server going down.
static SERVER: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    SERVER.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn server() -> String {
    std::env::var("EFFECTS_TEST_POSTGRES").expect(
        "the fleet store's tests need a PostgreSQL server: run them with `cargo xtask test` (it starts one), \
         or set EFFECTS_TEST_POSTGRES=postgresql://...",
    )
}

/// A lineage no other test (or earlier run) uses.
fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

fn open(lineage: &str, create: bool) -> Option<LineageLog> {
    let store = PgStore::open(&server(), lineage, create, Some(LEASE)).expect("the server answers")?;
    Some(
        EffectLog::open_with(Medium::Server(store), lineage, None, Checkpoints::Ignore)
            .expect("the log reads"),
    )
}

/// A claim with its own request id, made by this process.
fn claim(action_id: &str) -> ClaimRecord {
    ClaimRecord {
        executor: Some(effect_ledger::executor::current()),
        operation: OperationRef { request_id: action_id.to_owned(), ..support::claim(action_id).operation },
        ..support::claim(action_id)
    }
}

fn settled(claim: u64, execution: Execution) -> OutcomeRecord {
    OutcomeRecord {
        claim,
        outcome: Outcome {
            execution,
            impact: Impact::Possible,
            cleanup: CleanupState::Clean,
            replayed: false,
            remote_acknowledged: false,
            detached: false,
        },
        facts: ProducerFacts { executed: true, exit_code: Some(0), ..ProducerFacts::default() },
        recovery: false,
    }
}

/// The server's URL with `application_name` set to `lineage`, so a test
/// can find its own writers' sessions among every test's.
fn server_for(lineage: &str) -> String {
    let url = server();
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}application_name={lineage}")
}

fn writer(lineage: &str, count: usize, name: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects-test-writer"));
    command.arg(server_for(lineage)).arg(lineage).arg(count.to_string()).arg(name).args(extra);
    command
}

/// What the server said, for matching.
fn said(error: postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} {}", db.message(), db.constraint().unwrap_or_default()),
        None => error.to_string(),
    }
}

/// Every claim once per action id, each writer's in its own order, and every
/// acknowledged claim at its acknowledged position with its check.
fn check_lineage(lineage: &str, acknowledged: &HashMap<u64, String>) -> Vec<effect_ledger::log::Framed> {
    let mut log = open(lineage, false).expect("the lineage exists");
    let records = log.history().expect("the whole lineage verifies").to_vec();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for framed in &records {
        if let Record::Claim(claim) = &framed.record {
            let previous = seen.insert(claim.action_id.clone(), framed.position);
            assert!(previous.is_none(), "action {} claimed twice", claim.action_id);
        }
    }
    for (position, check) in acknowledged {
        let framed = &records[*position as usize];
        assert_eq!(&hex::encode(framed.check), check, "acknowledged claim at {position} is on the server");
    }
    records
}

#[test]
fn connections_the_server_terminates_mid_append_are_resent_never_duplicated() {
    let _server = shared();
    let lineage = fresh("cut");
    let appends = 300;
    let stop = AtomicBool::new(false);
    let outputs = std::thread::scope(|scope| {
        // The server ends the writers' sessions again and again while they
        // append (one line at the head, or through the function): each lost
        // answer must be settled by resending.
        let killer = scope.spawn(|| {
            let mut admin = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
            let mut terminated = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let rows = admin
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = $1 \
                           AND (query LIKE '%effects_append%' OR query LIKE '%INSERT INTO effects_lines%')",
                        &[&lineage],
                    )
                    .unwrap();
                terminated += rows.len() as u64;
                std::thread::sleep(Duration::from_millis(100));
            }
            terminated
        });
        let children: Vec<Child> = (0..3)
            .map(|w| {
                writer(&lineage, appends, &format!("c{w}"), &["--outcomes"]).stdout(Stdio::piped()).spawn()
            })
            .collect::<Result<_, _>>()
            .unwrap();
        let outputs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        let terminated = killer.join().unwrap();
        assert!(terminated > 0, "the test terminated no writer's connection; it proves nothing");
        outputs
    });
    for output in &outputs {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let acknowledged: HashMap<u64, String> = outputs.iter().flat_map(|o| acks(&o.stdout)).collect();
    assert_eq!(acknowledged.len(), 3 * appends);
    let records = check_lineage(&lineage, &acknowledged);
    assert_eq!(records.len(), 3 * appends * 2, "no claim or outcome written twice by a resend");
}

#[test]
fn a_stale_writer_merges_what_it_missed_and_cannot_settle_a_settled_claim() {
    let _server = shared();
    let lineage = fresh("stale");
    let mut first = open(&lineage, true).unwrap();
    let mut second = open(&lineage, false).unwrap();
    let position = first.claim(&lineage, claim("a-0")).unwrap();
    // `second` has not read the claim: its append finds the head moved,
    // merges it, and lands after it.
    let other = second.claim(&lineage, claim("b-0")).unwrap();
    assert_eq!((position, other), (0, 1));
    first.record_outcome(&lineage, settled(position, Execution::ReportedSuccess)).unwrap();
    // Still stale by one record: the merged history refuses a second outcome.
    let refused = second.record_outcome(&lineage, settled(position, Execution::Failed));
    assert!(matches!(refused, Err(LogError::Rejected { .. })), "{refused:?}");
    let records = open(&lineage, false).unwrap().history().unwrap().to_vec();
    assert_eq!(records.len(), 3);
}

#[test]
fn the_server_refuses_forged_appends_a_writer_s_rules_would_not_send() {
    let _server = shared();
    let lineage = fresh("forged");
    let mut log = open(&lineage, true).unwrap();
    log.claim(&lineage, claim("a-0")).unwrap();
    log.record_outcome(&lineage, settled(0, Execution::ReportedSuccess)).unwrap();
    let (head, live): ((i64, i64, String), String) = {
        let mut client = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
        let row = client
            .query_one("SELECT records, bytes, head_check FROM effects_heads WHERE lineage = $1", &[&lineage])
            .unwrap();
        let writer = client
            .query_one("SELECT writer FROM effects_lines WHERE lineage = $1 LIMIT 1", &[&lineage])
            .unwrap();
        ((row.get(0), row.get(1), row.get(2)), writer.get(0))
    };
    let mut client = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
    // Under the live writer's own lease, so only the backstop under test
    // can refuse it.
    let mut append_as = |writer: &str, records: i64, prev: &str, settles: Option<i64>, recovers: bool| {
        client.query(
            "SELECT appended, missed FROM effects_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &lineage,
                &records,
                &head.1,
                &vec![b"{}\n".to_vec()],
                &vec![prev],
                &vec!["f".repeat(64)],
                &vec![settles],
                &vec![None::<i64>],
                &vec![false],
                &vec![recovers],
                &vec![None::<i64>],
                &writer,
            ],
        )
    };
    let mut append =
        |records: i64, prev: &str, settles: Option<i64>| append_as(&live, records, prev, settles, false);
    // A second settlement of claim 0, chained correctly: the unique index.
    let twice = said(append(head.0, &head.2, Some(0)).unwrap_err());
    assert!(twice.contains("effects_lines_one_settlement"), "{twice}");
    // A line that does not continue the chain.
    let unchained = said(append(head.0, &"0".repeat(64), None).unwrap_err());
    assert!(unchained.contains("the writer says"), "{unchained}");
    // A head ahead of the server's: records it acknowledged are gone.
    let ahead = said(append(head.0 + 5, &head.2, None).unwrap_err());
    assert!(ahead.contains("lost records it acknowledged"), "{ahead}");
    // A writer with no lease: nothing it sends is taken.
    let unleased = said(append_as("w-none", head.0, &head.2, None, false).unwrap_err());
    assert!(unleased.contains("lease has expired"), "{unleased}");
    // Recovery's outcome for a claim whose writer's lease is live: refused
    // before the settlement index is even asked (EL002).
    let live_claim = said(append_as(&live, head.0, &head.2, Some(0), true).unwrap_err());
    assert!(live_claim.contains("lease is live again"), "{live_claim}");
    // A NULL column is no way around the backstops.
    let mut other = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
    let null_settles = other.query(
        "SELECT appended, missed FROM effects_append($1, $2, $3, $4, $5, $6, NULL, $7, $8, $9, $10, $11)",
        &[
            &lineage,
            &head.0,
            &head.1,
            &vec![b"{}\n".to_vec()],
            &vec![head.2.as_str()],
            &vec!["f".repeat(64)],
            &vec![None::<i64>],
            &vec![false],
            &vec![false],
            &vec![None::<i64>],
            &live,
        ],
    );
    assert!(said(null_settles.unwrap_err()).contains("unequal columns"));
    // The same through the statement one line at the head is sent as: it
    // appends nothing it should not, so the function is asked why.
    let expired = format!("w-expired-{lineage}");
    other
        .execute(
            "INSERT INTO effects_leases (writer, holder, ttl, expires) \
             VALUES ($1, '{}', '1 second', clock_timestamp() - interval '1 second')",
            &[&expired],
        )
        .unwrap();
    let mut one = |writer: &str, records: i64, prev: &str, settles: Option<i64>| {
        other.execute(
            APPEND_ONE,
            &[
                &lineage,
                &records,
                &head.1,
                &b"{}\n".to_vec(),
                &prev,
                &"f".repeat(64),
                &settles,
                &None::<i64>,
                &false,
                &None::<i64>,
                &writer,
            ],
        )
    };
    let twice = said(one(&live, head.0, &head.2, Some(0)).unwrap_err());
    assert!(twice.contains("effects_lines_one_settlement"), "{twice}");
    assert_eq!(one(&live, head.0, &"0".repeat(64), None).unwrap(), 0, "a line off the chain");
    assert_eq!(one(&live, head.0 + 5, &head.2, None).unwrap(), 0, "a head ahead of the server's");
    assert_eq!(one("w-none", head.0, &head.2, None).unwrap(), 0, "a writer with no lease");
    assert_eq!(one(&expired, head.0, &head.2, None).unwrap(), 0, "a writer whose lease expired");
    // Nothing of any of them landed.
    assert_eq!(open(&lineage, false).unwrap().history().unwrap().len(), 2);
    // A head row ahead of the lines the server holds (a partial restore):
    // an append from behind it is an error, not an empty "missed" taken
    // for success.
    let mut admin = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
    admin.execute("DELETE FROM effects_lines WHERE lineage = $1 AND position = 1", &[&lineage]).unwrap();
    let behind = said(append_as(&live, 1, &head.2, None, false).unwrap_err());
    assert!(behind.contains("the store is damaged"), "{behind}");
}

/// Sets the shared database's schema version, and back when dropped.
struct SchemaVersion(postgres::Client);

impl Drop for SchemaVersion {
    fn drop(&mut self) {
        self.0.execute("UPDATE effects_schema SET version = $1", &[&SCHEMA_VERSION]).unwrap();
    }
}

#[test]
fn a_database_of_another_schema_version_is_refused_naming_both() {
    // Alone on the server: every other test would be refused meanwhile.
    let _alone = SERVER.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    let lineage = fresh("version");
    open(&lineage, true).unwrap().claim(&lineage, claim("v-0")).unwrap();
    let mut client = SchemaVersion(postgres::Client::connect(&server(), postgres::NoTls).unwrap());
    client.0.execute("UPDATE effects_schema SET version = 99", &[]).unwrap();
    for create in [false, true] {
        let refused = PgStore::open(&server(), &lineage, create, Some(LEASE)).unwrap_err().to_string();
        let ours = format!("version {SCHEMA_VERSION} only");
        assert!(refused.contains("version 99") && refused.contains(&ours), "{refused}");
    }
    drop(client);
    assert_eq!(open(&lineage, false).unwrap().history().unwrap().len(), 1);
}

#[test]
fn a_lineage_the_server_does_not_hold_opens_as_none_and_creates_nothing() {
    let _server = shared();
    let lineage = fresh("absent");
    assert!(open(&lineage, false).is_none());
    assert!(!PgStore::lineages(&server()).unwrap().contains(&lineage));
}

#[test]
fn a_session_on_the_fleet_store_exports_to_a_log_file_that_verifies_unchanged() {
    let _server = shared();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let effects = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_effects"))
            .current_dir(work.path())
            .env("EFFECTS_STORE", server())
            // Only the ledger's own variable names the server here.
            .env_remove("EFFECTS_TEST_POSTGRES")
            .env_remove("EFFECTS_TEST_POSTGRES_RESTART")
            .args(args)
            .output()
            .unwrap()
    };
    let script = work.path().join("script.jsonl");
    std::fs::write(
        &script,
        "{\"tool\": \"write_file\", \"input\": {\"path\": \"a.txt\", \"content\": \"hello\\n\"}}\n\
         {\"tool\": \"bash\", \"input\": {\"command\": \"env > seen.txt\"}}\n\
         {\"complete\": {}}\n",
    )
    .unwrap();
    let session = effects(&["session", "--json", "--root", root.to_str().unwrap(), script.to_str().unwrap()]);
    assert!(session.status.success(), "{}", String::from_utf8_lossy(&session.stderr));
    let stdout = String::from_utf8_lossy(&session.stdout);
    let summary: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let run = summary["summary"]["run_id"].as_str().unwrap().to_owned();
    assert!(run.starts_with("run-") && run.len() == 36, "a UUIDv7 run id: {run}");
    // The command ran, and never saw the store's address (ID-4): with it
    // a tool could take a lease of its own and append.
    let seen = std::fs::read_to_string(root.join("seen.txt")).expect("the bash step ran");
    assert!(seen.contains("PATH="), "{seen}");
    assert!(!seen.contains("EFFECTS_STORE") && !seen.contains(&server()), "{seen}");
    // The data dir holds no log: it is on the server.
    assert!(!work.path().join(".effects/effects").join(format!("{run}.log")).exists());
    let exported = work.path().join("exported");
    std::fs::create_dir(&exported).unwrap();
    let export = effects(&["log", "export", "--run", &run, "--out", exported.to_str().unwrap()]);
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let file = exported.join(format!("{run}.log"));
    let verify = Command::new(env!("CARGO_BIN_EXE_effects"))
        .env_remove("EFFECTS_STORE")
        .args(["log", "verify", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    assert!(
        String::from_utf8_lossy(&verify.stdout).starts_with("ok: "),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    // A second export never overwrites the first.
    let again = effects(&["log", "export", "--run", &run, "--out", exported.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
}

/// Recovery as every surface opens a fleet lineage: a data dir whose logs
/// are on the server, opened to write, recovering.
fn recover(lineage: &str) -> LineageLog {
    let data = tempfile::tempdir().unwrap();
    let dir = cap_std::fs::Dir::open_ambient_dir(data.path(), cap_std::ambient_authority()).unwrap();
    let data = effect_ledger::data_dir::DataDir::new(dir, "data").with_server(&server());
    let options =
        OpenOptionsLog { mode: OpenMode::ReadWrite, key: None, recover: true, ..Default::default() };
    data.open_lineage(lineage, false, &options).unwrap().expect("the lineage exists")
}

fn outcomes_of(lineage: &str, claim: u64) -> Vec<OutcomeRecord> {
    let mut log = open(lineage, false).unwrap();
    let records = log.history().unwrap().to_vec();
    records
        .into_iter()
        .filter_map(|framed| match framed.record {
            Record::Outcome(outcome) if outcome.claim == claim => Some(outcome),
            _ => None,
        })
        .collect()
}

/// A writer holding one claim, with a lease of `lease_ms`, waiting on stdin.
fn holding_writer(lineage: &str, lease_ms: u64) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = writer(lineage, 1, "held", &["--hold", &format!("--lease-ms={lease_ms}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with("ack 0 "), "{line}");
    (child, stdout)
}

fn resume(child: &mut Child, stdout: &mut BufReader<std::process::ChildStdout>) -> String {
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(child.wait().unwrap().success());
    line.trim().to_owned()
}

#[test]
fn a_writer_paused_past_its_lease_is_recovered_once_and_its_late_outcome_refused() {
    let _server = shared();
    let lineage = fresh("paused");
    let (mut child, mut stdout) = holding_writer(&lineage, 600);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // Its lease expired on the server's clock: recovery knows it dead.
    recover(&lineage);
    let outcomes = outcomes_of(&lineage, 0);
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(outcomes[0].recovery && outcomes[0].outcome.execution == Execution::Interrupted);
    // Once: a second recovery finds nothing to do.
    recover(&lineage);
    assert_eq!(outcomes_of(&lineage, 0).len(), 1);
    // Resumed, the writer's own outcome is refused, not recorded late.
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    let said = resume(&mut child, &mut stdout);
    assert!(said.starts_with("error "), "the late outcome was refused: {said}");
    assert_eq!(outcomes_of(&lineage, 0).len(), 1);
}

/// Sets its flag when dropped, on a panic too.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_lease_the_server_expired_refuses_a_fresh_looking_writer_while_others_move_the_head() {
    let _server = shared();
    let lineage = fresh("expired");
    let mut stale = open(&lineage, true).unwrap();
    stale.claim(&lineage, claim("a-0")).unwrap();
    // The server's clock has the lease expired (an operator's hand, a
    // clock step) while its process renewed it moments ago: its appends go
    // the one-line way, and the server alone can refuse them.
    let mut admin = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
    let expired = admin
        .execute(
            "UPDATE effects_leases SET expires = clock_timestamp() - interval '1 second' \
             WHERE writer = (SELECT writer FROM effects_lines WHERE lineage = $1 AND position = 0)",
            &[&lineage],
        )
        .unwrap();
    assert_eq!(expired, 1);
    // Another writer keeps the head moving all the while, so misses come
    // with lines to merge: after a few the function is asked, and names the
    // expired lease.
    let done = AtomicBool::new(false);
    let others = std::thread::scope(|scope| {
        // Set however this scope ends, so a failed assertion stops the mover.
        let stop = StopOnDrop(&done);
        let mover = scope.spawn(|| {
            let mut other = open(&lineage, false).unwrap();
            let mut appended = 0;
            while !done.load(Ordering::Relaxed) || appended < 3 {
                other.claim(&lineage, claim(&format!("b-{appended}"))).unwrap();
                appended += 1;
            }
            appended
        });
        std::thread::sleep(Duration::from_millis(20));
        for attempt in 0..3 {
            let refused = stale.claim(&lineage, claim(&format!("a-{}", attempt + 1)));
            let Err(LogError::Persistence { source, .. }) = &refused else {
                panic!("an append under an expired lease was not refused: {refused:?}")
            };
            assert!(source.to_string().contains("lease has expired"), "{source}");
        }
        drop(stop);
        mover.join().unwrap()
    });
    // With the head still, the one-line statement itself must refuse it.
    let refused = stale.claim(&lineage, claim("a-4"));
    assert!(
        matches!(&refused, Err(LogError::Persistence { source, .. }) if source.to_string().contains("lease has expired")),
        "{refused:?}"
    );
    let records = open_log(&lineage);
    assert_eq!(records.len(), 1 + others, "nothing of the refused writer's landed");
}

#[test]
fn a_live_writer_s_heartbeat_keeps_its_claim_from_recovery() {
    let _server = shared();
    let lineage = fresh("alive");
    let (mut child, mut stdout) = holding_writer(&lineage, 600);
    // Several lease lengths pass; the heartbeat renews it.
    std::thread::sleep(Duration::from_millis(1500));
    recover(&lineage);
    assert!(outcomes_of(&lineage, 0).is_empty(), "a live writer's claim is its own to settle");
    assert_eq!(resume(&mut child, &mut stdout), "settled 0");
    let outcomes = outcomes_of(&lineage, 0);
    assert_eq!(outcomes.len(), 1);
    assert!(!outcomes[0].recovery);
}

#[test]
fn an_expired_lease_vouches_only_for_its_own_process_s_claims() {
    let _server = shared();
    let lineage = fresh("foreign");
    {
        let store =
            PgStore::open(&server(), &lineage, true, Some(Duration::from_millis(300))).unwrap().unwrap();
        let mut log =
            EffectLog::open_with(Medium::Server(store), lineage.as_str(), None, Checkpoints::Ignore).unwrap();
        // A claim made for another process (as a hook claims for its agent):
        // the writer's lease says nothing of whether that process lives.
        let mut foreign = claim("agent-0");
        if let Some(effect_ledger::log::Executor::Process(identity)) = &mut foreign.executor {
            identity.pid += 1;
        }
        log.claim(&lineage, foreign).unwrap();
        log.claim(&lineage, claim("own-0")).unwrap();
    } // the handle drops: its heartbeat stops, and the lease runs out
    std::thread::sleep(Duration::from_millis(800));
    recover(&lineage);
    assert!(outcomes_of(&lineage, 0).is_empty(), "the foreign executor's claim is left alone");
    let own = outcomes_of(&lineage, 1);
    assert_eq!(own.len(), 1, "the expired writer's own claim is recovered");
    assert_eq!(own[0].outcome.execution, Execution::Interrupted);
}

#[test]
fn a_line_changed_or_removed_on_the_server_is_corruption_not_history() {
    let _server = shared();
    let url = server();
    let reopen = |lineage: &str| {
        let store = PgStore::open(&url, lineage, false, None).unwrap().unwrap();
        EffectLog::open_with(Medium::Server(store), lineage, None, Checkpoints::Ignore).map(drop)
    };
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for (tamper, lineage) in [("changed", fresh("changed")), ("removed", fresh("removed"))] {
        let mut log = open(&lineage, true).unwrap();
        for i in 0..3 {
            log.claim(&lineage, claim(&format!("a-{i}"))).unwrap();
        }
        drop(log);
        let statement = match tamper {
            // One byte of the record, in place: the line no longer checks.
            "changed" => {
                "UPDATE effects_lines SET line = overlay(line placing '7'::bytea from position('a-1' in line) + 2 for 1) \
                 WHERE lineage = $1 AND position = 1"
            }
            // A whole record gone: the chain and the positions break.
            _ => "DELETE FROM effects_lines WHERE lineage = $1 AND position = 1",
        };
        assert_eq!(admin.execute(statement, &[&lineage]).unwrap(), 1);
        let read = reopen(&lineage);
        assert!(matches!(read, Err(LogError::Corrupt { .. })), "{tamper}: {read:?}");
    }
}

/// LOG-10 on the fleet store: a writer keeps a checkpoint in
/// `effects_sidecars`; a continuing handle starts at it, reading each line it
/// names by its position (no index on byte offsets), and takes a line only
/// at the bytes the checkpoint says. One naming a line elsewhere, or a
/// position the server does not hold, is not used: the whole log is read.
#[test]
fn a_checkpoint_on_the_fleet_store_names_lines_the_server_holds_where_it_says() {
    let _server = shared();
    let url = server();
    let lineage = fresh("checkpoint");
    let handle = |create: bool, checkpoints: Checkpoints| {
        let store = PgStore::open(&url, &lineage, create, Some(LEASE)).unwrap().unwrap();
        EffectLog::open_with(Medium::Server(store), &lineage, None, checkpoints).unwrap()
    };
    let mut log = handle(true, Checkpoints::Keep);
    let open_claim = log.claim(&lineage, claim("open")).unwrap();
    for i in 0..CHECKPOINT_EVERY / 2 + 10 {
        let position = log.claim(&lineage, claim(&format!("s-{i}"))).unwrap();
        log.record_outcome(&lineage, settled(position, Execution::ReportedSuccess)).unwrap();
    }
    drop(log);
    let mut store = PgStore::open(&url, &lineage, false, None).unwrap().unwrap();
    let sidecar =
        Store::read_sidecar(&store, Sidecar::Checkpoint).unwrap().expect("a checkpoint on the server");
    let continued = handle(false, Checkpoints::Use);
    assert!(continued.base() > open_claim + 1, "started at the checkpoint");
    assert!(continued.record(open_claim).is_some(), "the open claim's line was read by its position");
    let text = String::from_utf8(sidecar).unwrap();
    let body = text.lines().next().unwrap().to_owned();
    let named = format!("{{\"position\":{open_claim},\"start\":0,");
    assert!(body.contains(&named), "{body}");
    let reseal = |body: &str| {
        let seal = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
        format!("{body}\n{seal}\n").into_bytes()
    };
    for (what, instead) in [
        ("bytes where the line is not", format!("{{\"position\":{open_claim},\"start\":1,")),
        ("a position the server does not hold", "{\"position\":999999,\"start\":0,".to_owned()),
    ] {
        Store::write_sidecar(&mut store, Sidecar::Checkpoint, &reseal(&body.replace(&named, &instead)))
            .unwrap();
        assert_eq!(handle(false, Checkpoints::Use).base(), 0, "{what}: not used, the whole log is read");
    }
}

#[test]
fn a_server_restarted_while_writers_append_loses_no_acknowledged_claim_and_duplicates_none() {
    let _alone = SERVER.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    let restart = std::env::var("EFFECTS_TEST_POSTGRES_RESTART").expect(
        "this test restarts the server: `cargo xtask test` sets EFFECTS_TEST_POSTGRES_RESTART for the cluster \
         it starts; with your own server, set it to a command that restarts it",
    );
    let lineage = fresh("restart");
    let appends = 200;
    let mut children: Vec<Child> = (0..3)
        .map(|w| writer(&lineage, appends, &format!("s{w}"), &["--outcomes"]).stdout(Stdio::piped()).spawn())
        .collect::<Result<_, _>>()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let restarted = Command::new("sh").args(["-c", &restart]).status().unwrap();
    assert!(restarted.success(), "{restart}");
    assert!(
        children.iter_mut().any(|child| child.try_wait().unwrap().is_none()),
        "every writer had finished before the restart ended; the test proves nothing"
    );
    let outputs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
    for output in &outputs {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let acknowledged: HashMap<u64, String> = outputs.iter().flat_map(|o| acks(&o.stdout)).collect();
    assert_eq!(acknowledged.len(), 3 * appends);
    let records = check_lineage(&lineage, &acknowledged);
    assert_eq!(records.len(), 3 * appends * 2, "every claim and outcome once, across the restart");
}

#[test]
fn recovery_on_the_fleet_store_never_judges_another_machine_s_process_by_this_one_s_proc() {
    let _server = shared();
    let lineage = fresh("remote");
    // A writer elsewhere: its claim names a process of another boot (another
    // machine), with a NUL in its request id, and its lease is live.
    let store = PgStore::open(&server(), &lineage, true, Some(LEASE)).unwrap().unwrap();
    let mut remote =
        EffectLog::open_with(Medium::Server(store), lineage.as_str(), None, Checkpoints::Ignore).unwrap();
    let mut elsewhere = claim("remote-0");
    elsewhere.operation.request_id = "nul\u{0}in the id".into();
    if let Some(effect_ledger::log::Executor::Process(identity)) = &mut elsewhere.executor {
        identity.boot_id = "another-machine-boot-id".into();
    }
    remote.claim(&lineage, elsewhere).unwrap();
    // The recovery every surface runs (Ledger::recover, `effects log recover`)
    // and the one at open leave it alone: `/proc` here would call it dead.
    let mut here = open(&lineage, false).unwrap();
    assert!(effect_ledger::executor::recover(&mut here).unwrap().is_empty());
    recover(&lineage);
    assert!(outcomes_of(&lineage, 0).is_empty(), "a live remote writer's claim is its own to settle");
    remote.record_outcome(&lineage, settled(0, Execution::ReportedSuccess)).unwrap();
    assert_eq!(outcomes_of(&lineage, 0).len(), 1);
}

#[test]
fn a_launch_on_the_fleet_store_is_indexed_by_its_claim_s_own_row() {
    let _server = shared();
    let s = support::session::session();
    let url = server();
    let run = |script: &str, extra: &[&str]| {
        let args: Vec<&str> = ["--store", url.as_str()].into_iter().chain(extra.iter().copied()).collect();
        let output = s.run(&format!("{script}\n{{\"complete\": {{}}}}\n"), &args);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        support::session::reports(&output)
    };
    let job_status = |id: &str| {
        format!("{{\"tool\": \"bg_job\", \"input\": {{\"job\": \"{id}\", \"action\": \"status\"}}}}")
    };
    let first =
        run(r#"{"tool": "bash", "input": {"command": "echo ran > out.txt", "background": true}}"#, &[]);
    let launched = &first[0];
    assert_eq!(launched["outcome"]["execution"], "RUNNING", "{launched:#}");
    let claim = launched["claim"].as_i64().unwrap();
    let id = launched["result"]["job_id"].as_str().unwrap().to_owned();
    let generation: i64 = id.trim_start_matches("job-").parse().unwrap();
    let run_id = first.last().unwrap()["summary"]["run_id"].as_str().unwrap().to_owned();
    // LOG-8 in the claim's own transaction: its row carries the generation;
    // the data dir keeps only the reservation (the job is this machine's).
    let mut admin = postgres::Client::connect(&server(), postgres::NoTls).unwrap();
    let index = |admin: &mut postgres::Client| -> Option<i64> {
        admin
            .query_one(
                "SELECT launch FROM effects_lines WHERE lineage = $1 AND position = $2",
                &[&run_id, &claim],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(index(&mut admin), Some(generation));
    let reservation: serde_json::Value = serde_json::from_slice(
        &std::fs::read(s.data.join(format!("effects/launch-{generation}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(reservation["claim"], serde_json::Value::Null, "{reservation}");
    // A later process validates the job by the server's index and settles
    // its launch once the job has exited.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let read = loop {
        let steps = run(&job_status(&id), &["--run", &run_id]);
        let exited = steps[0]["result"]["text"].as_str().is_some_and(|t| t.starts_with("exited"));
        if exited || std::time::Instant::now() > deadline {
            break steps[0].clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(read["launch_settled"].is_u64(), "{read:#}");
    // The server's index is what validated it: without it, the job is not
    // a validated job (the line itself, and so the chain, is unchanged).
    admin
        .execute(
            "UPDATE effects_lines SET launch = NULL WHERE lineage = $1 AND position = $2",
            &[&run_id, &claim],
        )
        .unwrap();
    let unindexed = run(&job_status(&id), &["--run", &run_id]);
    assert_eq!(unindexed[0]["status"], "REFUSED", "{:#}", unindexed[0]);
    assert!(unindexed[0]["reason"].as_str().unwrap().contains("launch index"), "{:#}", unindexed[0]);
}

/// A command from the environment `cargo xtask test` sets for its cluster.
fn server_command(var: &str) -> Command {
    let command = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "this test stops and restarts the server: `cargo xtask test` sets {var} for the cluster it starts"
        )
    });
    let mut shell = Command::new("sh");
    shell.args(["-c", &command]);
    shell
}

#[test]
fn a_ledger_reopens_the_fleet_log_after_an_append_of_unknown_durability() {
    // Alone: the server goes away for longer than a writer resends.
    let _alone = SERVER.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    use effect_ledger::identity::{ControlPlane, SealedRoot};
    use effect_ledger::ledger::{ClaimStatus, Ledger, LedgerConfig};
    use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
    let work = tempfile::tempdir().unwrap();
    let (root, data) = (work.path().join("root"), work.path().join("data"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let open = |path: &std::path::Path| {
        cap_std::fs::Dir::open_ambient_dir(path, cap_std::ambient_authority()).unwrap()
    };
    let sealed = SealedRoot::new(open(&root), "root", "workspace", "agent", ControlPlane::default()).unwrap();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let data_dir = effect_ledger::data_dir::DataDir::new(open(&data), "data").with_server(&server());
    let mut ledger = Ledger::new(LedgerConfig::at(data_dir, sealed, policies));
    let write = |path: &str| {
        effect_ledger::tools::Call::parse("write_file", &serde_json::json!({"path": path, "content": "hi\n"}))
            .unwrap()
    };
    let run = ledger.begin_run(None);
    assert_eq!(ledger.claim(&run, "call-1", write("a.txt"), "effects").status, ClaimStatus::Run);
    // The server is gone for longer than the resends last: the claim's
    // durability is unknown, and it is BLOCKED.
    assert!(server_command("EFFECTS_TEST_POSTGRES_STOP").status().unwrap().success());
    let blocked = ledger.claim(&run, "call-2", write("b.txt"), "effects");
    let restarted = server_command("EFFECTS_TEST_POSTGRES_RESTART").status().unwrap();
    assert!(restarted.success(), "the server did not start again");
    assert_eq!(blocked.status, ClaimStatus::Blocked, "{blocked:?}");
    let reason = blocked.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("durability unknown") && reason.contains("opens a new one"), "{reason}");
    // The server's log is whole: the ledger drops the poisoned handle and
    // its next call appends through a fresh one.
    let next = ledger.claim(&run, "call-3", write("c.txt"), "effects");
    assert_eq!(next.status, ClaimStatus::Run, "{next:?}");
    let records = open_log(&run.lineage);
    assert_eq!(
        records.iter().filter(|r| matches!(r.record, Record::Claim(_))).count(),
        2,
        "call-1 and call-3"
    );
}

fn open_log(lineage: &str) -> Vec<effect_ledger::log::Framed> {
    open(lineage, false).expect("the lineage exists").history().expect("it verifies").to_vec()
}
