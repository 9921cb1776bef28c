//! What one `effects hook` process costs an agent (issue 20), interleaved in
//! one run: a PreToolUse of a `Write` (one durable claim) on a session whose
//! log already holds 1,000 records, vs the same on a session with none
//! (goal: at most 1.2x, LOG-10), and vs `effects --version` plus 15 ms
//! (goal: at most 1.0x, i.e. at most 15 ms over a process that does
//! nothing).
//!
//! `cargo bench --bench hook_latency` (`EFFECTS_BENCH_SCALE=0.1` for a quick
//! run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::latency;
use common::report::{Figure, Goal, value};
use serde_json::{Value, json};

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = common::samples(200);
    let (_scratch, dirs) = common::scratch(&["root", "data"]);
    let (root, data) = (&dirs[0], &dirs[1]);
    let records = fill(root, data, "claude-big", 1_000);
    println!("the long session's log holds {records} records");

    let (mut version, mut empty, mut long) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let mut run_version =
            || version.push(time(Command::new(env!("CARGO_BIN_EXE_effects")).arg("--version"), ""));
        let mut run_empty = || empty.push(hook(data, &pre_write(root, &format!("empty-{i}"), "t1")));
        let mut run_long = || long.push(hook(data, &pre_write(root, "big", &format!("t{i}"))));
        match i % 3 {
            0 => (run_version(), run_empty(), run_long()),
            1 => (run_empty(), run_long(), run_version()),
            _ => (run_long(), run_version(), run_empty()),
        };
    }
    let version = latency("effects --version", &mut version);
    let empty = latency("hook, empty session", &mut empty);
    let long = latency("hook, 1,000-record session", &mut long);
    Figure::new(
        "hook_latency",
        "long_vs_empty_session",
        "one `effects hook` PreToolUse (a durable claim) on a session of 1,000 records vs on an empty one",
        long,
    )
    .against(empty.clone())
    .goal(Goal::AtMost(1.2))
    .print();
    let budget = value("effects --version + 15 ms", "us", version.p50 + 15_000.0, None);
    Figure::new(
        "hook_latency",
        "hook_vs_version_plus_15ms",
        "one `effects hook` PreToolUse on an empty session vs `effects --version` plus 15 ms",
        empty,
    )
    .against(budget)
    .goal(Goal::AtMost(1.0))
    .print();
}

fn pre_write(root: &Path, session: &str, id: &str) -> Value {
    json!({"hook_event_name": "PreToolUse", "session_id": session, "cwd": root,
           "transcript_path": "/dev/null", "permission_mode": "default", "tool_name": "Write",
           "tool_use_id": id, "tool_input": {"file_path": root.join("file.txt"), "content": "x\n"}})
}

fn hook(data: &Path, payload: &Value) -> Duration {
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects"));
    command.arg("--data-dir").arg(data).args(["hook", "--dialect", "claude"]);
    time(&mut command, &payload.to_string())
}

/// The wall time of `command` with `input` on its stdin, from spawn to exit.
fn time(command: &mut Command, input: &str) -> Duration {
    let start = Instant::now();
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let status = child.wait().unwrap();
    let elapsed = start.elapsed();
    assert!(status.success(), "{command:?} failed (its stderr is above)");
    elapsed
}

/// Run `run` with at least `records` records, written through one `effects
/// serve` (claims and settlements of runtime-run writes, as hooks make
/// them), so the fill takes seconds, not a thousand processes.
fn fill(root: &Path, data: &Path, run: &str, records: usize) -> usize {
    let mut server = common::serve::Server::start(data, root);
    let mut call = |method: &str, params: Value| server.result(method, params);
    call("run/begin", json!({"run_id": run}));
    let log = data.join("effects").join(format!("{run}.log"));
    let count = || std::fs::read(&log).map_or(0, |bytes| bytes.iter().filter(|b| **b == b'\n').count());
    let mut i = 0;
    while count() < records {
        for _ in 0..50 {
            let input = json!({"path": format!("f{i}.txt"), "content": format!("{i}\n")});
            let claim = json!({"run_id": run, "request_id": format!("fill-{i}"), "tool": "write_file",
                               "input": input, "profile": "claude-code"});
            assert_eq!(call("effect/claim", claim)["status"], "run");
            std::fs::write(root.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
            call(
                "effect/settle",
                json!({"run_id": run, "request_id": format!("fill-{i}"), "facts": {"exit_code": 0}}),
            );
            i += 1;
        }
    }
    server.stop();
    count()
}
