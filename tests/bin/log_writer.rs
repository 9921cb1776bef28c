//! `effects-test-writer`: a small writer process for the effect log's crash,
//! race and fault tests (tests/log_disk.rs). Not part of the product.
//!
//! `effects-test-writer DIR RUN_ID COUNT WRITER [--outcomes] [--until-error] [--lease-ms=N] [--hold] [--keyed] [--once=START]`
//!
//! Opens lineage RUN_ID in DIR, or on the fleet store when DIR is a
//! `postgres://` or `postgresql://` URL (no eager recovery: several writers
//! share it)
//! and appends COUNT claims with action ids `WRITER-<i>`. After each claim
//! returns (durable) it prints `ack <position> <check hex>`; with `--outcomes`
//! it then settles the claim and prints `settled <position>`. With
//! `--until-error`, the first failing append prints `error <kind>`, one more
//! append is tried and its result printed the same way, and the writer exits 0.
//! On the fleet store the writer's lease lasts `--lease-ms` (default 30 s).
//! With `--hold`, after its claims it waits for a line on stdin, then
//! settles its first claim and prints `settled <position>` or
//! `error <kind>` (a writer paused past its lease, then resumed). With
//! `--keyed`, a file log is keyed with [`KEY`] (as the tests' readers are).
//! With `--once=START`, claim `i` is made with `claim_once` (EMB-3) for the
//! request [`shared_request`]`((START + i) % COUNT)`, which every writer given
//! the same COUNT shares, and prints `once <request index> <position> <made>`
//! (`made` is `true` when this writer's claim is the one that stands).

#![allow(clippy::disallowed_methods)] // a test tool takes its paths from argv

use std::io::Write;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::log::{
    Checkpoints, ClaimRecord, EffectLog, LogError, Medium, OpenMode, OpenOptionsLog, OperationRef,
    OperatorKey, OutcomeRecord, PgStore, open_lineage,
};
use effect_ledger::model::{CleanupState, Execution, Impact, Outcome, ProducerFacts};

/// The operator key of `--keyed` writers.
pub const KEY: [u8; 32] = [7; 32];

fn claim(action_id: String) -> ClaimRecord {
    ClaimRecord {
        action_id,
        operation: OperationRef {
            tool: "bash".into(),
            action: String::new(),
            input_sha256: "0".repeat(64),
            request_id: "req".into(),
        },
        impact_scope: Vec::new(),
        dependencies: Vec::new(),
        obligations: Vec::new(),
        parent_run_id: None,
        external: false,
        policy_failure: None,
        executor: Some(effect_ledger::executor::current()),
        root: None,
        confined: false,
        profile: None,
        classifier: None,
    }
}

fn success(claim: u64) -> OutcomeRecord {
    OutcomeRecord {
        claim,
        outcome: Outcome {
            execution: Execution::ReportedSuccess,
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

/// The request id `--once` writers share for index `i`: every other one
/// holds a quote, a backslash, a slash and a non-ASCII letter, which the log
/// spells escaped or raw, so a writer that looks for its request in others'
/// lines without decoding them must find every spelling.
pub fn shared_request(i: u64) -> String {
    if i.is_multiple_of(2) { format!("shared-{i}") } else { format!("sh\"a\\r/\u{e9}d-{i}") }
}

fn kind(error: &LogError) -> &'static str {
    match error {
        LogError::Persistence { .. } => "persistence",
        LogError::DurabilityUnknown { .. } => "durability-unknown",
        LogError::Poisoned { .. } => "poisoned",
        LogError::Sealed { .. } => "sealed",
        LogError::Rejected { .. } => "rejected",
        LogError::Corrupt { .. } => "corrupt",
        LogError::Cut { .. } => "cut",
        LogError::Refused { .. } => "refused",
        LogError::Io { .. } => "io",
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, run_id, count, writer, flags @ ..] = args.as_slice() else {
        eprintln!(
            "usage: effects-test-writer DIR RUN_ID COUNT WRITER [--outcomes] [--until-error] [--keyed]"
        );
        std::process::exit(2);
    };
    let outcomes = flags.iter().any(|f| f == "--outcomes");
    let until_error = flags.iter().any(|f| f == "--until-error");
    let hold = flags.iter().any(|f| f == "--hold");
    let once: Option<u64> =
        flags.iter().find_map(|f| f.strip_prefix("--once=")).map(|s| s.parse().expect("START"));
    // `--keyed`: the log is keyed with KEY (LOG-6's head marks are written).
    let key = flags.iter().any(|f| f == "--keyed").then(|| OperatorKey::new(KEY.to_vec()).expect("a key"));
    let lease =
        flags.iter().find_map(|f| f.strip_prefix("--lease-ms=")).map_or(effect_ledger::log::LEASE, |ms| {
            std::time::Duration::from_millis(ms.parse().expect("a number"))
        });
    let count: u64 = count.parse().expect("COUNT is a number");
    let mut log = if dir.starts_with("postgres://") || dir.starts_with("postgresql://") {
        // A connection the server ends while this writer opens (a test
        // that terminates sessions) fails the open, which wrote nothing:
        // open again.
        let mut attempts = 0;
        loop {
            let opened = PgStore::open(dir, run_id, true, Some(lease)).and_then(|store| {
                let store = store.expect("created");
                EffectLog::open_with(Medium::Server(store), run_id.as_str(), None, Checkpoints::Keep)
                    .map_err(std::io::Error::other)
            });
            match opened {
                Ok(log) => break log,
                Err(error) if attempts < 20 => {
                    eprintln!("opening the fleet store failed ({error}); opening again");
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(error) => panic!("the fleet store opens: {error}"),
            }
        }
    } else {
        let dir = Dir::open_ambient_dir(dir, ambient_authority()).expect("DIR opens");
        let options = OpenOptionsLog { mode: OpenMode::ReadWrite, key, recover: false, ..Default::default() };
        open_lineage(&dir, "log-dir", run_id, &options).expect("log opens").expect("read-write")
    };
    let mut out = std::io::stdout().lock();
    let mut first = None;
    for i in 0..count {
        if let Some(start) = once {
            let request = (start + i) % count;
            let mut mine = claim(format!("{writer}-{request}"));
            mine.operation.request_id = shared_request(request);
            let (position, made) = log.claim_once(run_id, mine).expect("claim_once");
            writeln!(out, "once {request} {position} {made}").unwrap();
            continue;
        }
        let position = match log.claim(run_id, claim(format!("{writer}-{i}"))) {
            Ok(position) => position,
            Err(error) if until_error => {
                writeln!(out, "error {}", kind(&error)).unwrap();
                let again = log.claim(run_id, claim(format!("{writer}-again")));
                match again {
                    Ok(position) => writeln!(out, "ack {position} after-error").unwrap(),
                    Err(error) => writeln!(out, "error {}", kind(&error)).unwrap(),
                }
                return;
            }
            Err(error) => panic!("claim failed: {error}"),
        };
        first.get_or_insert(position);
        let check = hex::encode(log.records().last().expect("just appended").check);
        writeln!(out, "ack {position} {check}").unwrap();
        out.flush().unwrap();
        if outcomes {
            log.record_outcome(run_id, success(position)).expect("settling its own claim");
            writeln!(out, "settled {position}").unwrap();
            out.flush().unwrap();
        }
    }
    if hold {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        let first = first.expect("--hold settles the first claim; make one");
        match log.record_outcome(run_id, success(first)) {
            Ok(_) => writeln!(out, "settled {first}").unwrap(),
            Err(error) => writeln!(out, "error {}", kind(&error)).unwrap(),
        }
    }
}
