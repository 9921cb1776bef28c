//! What embedding through `effects serve` costs (issue 19), interleaved in
//! one run:
//!
//! - a runtime-executed 4 KiB `write_file`: `effect/claim`, the runtime's own
//!   write (+ `sync_data`), `effect/settle`, one request at a time over the
//!   server's stdio, vs the same three steps through the Rust API
//!   (`Ledger::claim` / `Ledger::settle`) in this process (goal: at most
//!   1.3x);
//! - `effect/execute` of the same write (the ledger's reference producer)
//!   vs one `effects session` process doing that one step, which is what a
//!   runtime outside Rust had before serve.
//!
//! `cargo bench --bench serve_roundtrip` (`EFFECTS_BENCH_SCALE=0.1` for a
//! quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::latency;
use common::report::{Figure, Goal};
use common::serve::Server;
use effect_ledger::ledger::{ClaimStatus, Reported, StepStatus};
use effect_ledger::tools::Call;
use serde_json::json;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = common::samples(1_000);
    let sessions = common::samples(100);
    let (_scratch, dirs) = common::scratch(&[
        "api-root",
        "api-data",
        "serve-root",
        "serve-data",
        "session-root",
        "session-data",
    ]);
    let content: String = "0123456789abcdef".repeat(256); // 4 KiB
    let input = json!({ "path": "file.txt", "content": content });
    let call = || Call::parse("write_file", &input).unwrap();
    let ran = Reported { executed: true, exit_code: Some(0), timed_out: false, cancelled: false };

    // The API's data dir holds what the server's does (its policy cache
    // too), so that both guards list the same store.
    Server::start(&dirs[1], &dirs[0]).stop();
    let mut ledger = common::guarded_ledger(&dirs[0], &dirs[1]);
    let api_run = ledger.begin_run(None);
    let mut server = Server::start(&dirs[3], &dirs[2]);
    let serve_run = server.result("run/begin", json!({}))["run"]["id"].as_str().unwrap().to_owned();

    let (mut api, mut served) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    let mut empty = Vec::with_capacity(samples);
    for i in 0..samples {
        let request_id = format!("r{i}");
        let mut through_api = || {
            let start = Instant::now();
            let claimed = ledger.claim(&api_run, &request_id, call(), "effects");
            assert_eq!(claimed.status, ClaimStatus::Run, "{claimed:?}");
            runtime_write(&dirs[0], &content);
            let settled = ledger.settle(&api_run, &request_id, &ran, None);
            assert_eq!(settled.status, StepStatus::Ran, "{settled:?}");
            api.push(start.elapsed());
        };
        let mut through_serve = || {
            let start = Instant::now();
            let params =
                json!({"run_id": serve_run, "request_id": request_id, "tool": "write_file", "input": input});
            let claimed = server.result("effect/claim", params);
            assert_eq!(claimed["status"], "run", "{claimed}");
            runtime_write(&dirs[2], &content);
            let params = json!({"run_id": serve_run, "request_id": request_id, "facts": {"exit_code": 0}});
            let settled = server.result("effect/settle", params);
            assert_eq!(settled["status"], "RAN", "{settled}");
            served.push(start.elapsed());
        };
        if i % 2 == 0 {
            through_api();
            through_serve();
        } else {
            through_serve();
            through_api();
        }
        let start = Instant::now();
        server.result("run/decision", json!({"run_id": serve_run}));
        empty.push(start.elapsed());
    }

    let script = format!("{}\n", json!({"tool": "write_file", "input": input}));
    let (mut executed, mut session) = (Vec::with_capacity(sessions), Vec::with_capacity(sessions));
    for i in 0..sessions {
        let mut through_execute = || {
            let start = Instant::now();
            let params = json!({"run_id": serve_run, "request_id": format!("x{i}"), "tool": "write_file", "input": input});
            let step = server.result("effect/execute", params);
            assert_eq!(step["status"], "RAN", "{step}");
            executed.push(start.elapsed());
        };
        let mut through_session = || session.push(one_step_session(&dirs[5], &dirs[4], &script));
        if i % 2 == 0 {
            through_execute();
            through_session();
        } else {
            through_session();
            through_execute();
        }
    }
    server.stop();

    Figure::new(
        "serve_roundtrip",
        "claim_settle_vs_api",
        "runtime-executed 4 KiB write_file: effect/claim + write + effect/settle over serve vs Ledger::claim + write + Ledger::settle in one process",
        latency("over serve", &mut served),
    )
    .against(latency("Rust API", &mut api))
    .goal(Goal::AtMost(1.3))
    .print();
    // What the process boundary costs alone: the claim and the settle are
    // two of these on top of the ledger's own work.
    Figure::new(
        "serve_roundtrip",
        "empty_roundtrip_vs_api",
        "one round trip of a method that does nothing (run/decision of an undecided run) vs the whole claim + write + settle through the Rust API",
        latency("run/decision", &mut empty),
    )
    .against(latency("Rust API", &mut api.clone()))
    .print();
    Figure::new(
        "serve_roundtrip",
        "execute_vs_session",
        "4 KiB write_file: effect/execute over serve vs one `effects session` process doing the same step",
        latency("effect/execute", &mut executed),
    )
    .against(latency("effects session", &mut session))
    .print();
}

/// What the runtime does between claim and settle: its own write of the
/// file, made durable as the reference producer makes it.
fn runtime_write(root: &Path, content: &str) {
    let mut file = std::fs::File::create(root.join("file.txt")).unwrap();
    file.write_all(content.as_bytes()).unwrap();
    file.sync_data().unwrap();
}

/// One `effects session` process running `script` (one step) in a new run.
fn one_step_session(data: &Path, root: &Path, script: &str) -> Duration {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(data)
        .args(["session", "--root"])
        .arg(root)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let status = child.wait().unwrap();
    let elapsed = start.elapsed();
    assert!(status.success(), "effects session failed (its stderr is above)");
    elapsed
}
