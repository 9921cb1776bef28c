//! The ledger's overhead per `bash` call: `bash -c true` through the whole
//! chain (bind, classify, durable claim, the processes record before the gate
//! opens, run under the supervisor, teardown check, settle, outcome append)
//! vs the supervised process producer alone vs a bare `bash -c true` spawned
//! in its own process group and waited for (what the producer did before it
//! had a supervisor), interleaved in the same run. Prints medians, the ratios
//! and the absolute overheads: the supervisor's (one more `bash`, the gate,
//! the teardown check) and the ledger's (three log appends with their
//! fdatasyncs: claim, processes, outcome).
//!
//! `cargo bench --bench chain_bash` (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use common::report::Figure;
use common::{latency, median_us, samples, scratch, seal};
use effect_ledger::ledger::Dispatch;
use effect_ledger::producers::process::{ProcessRequest, run};
use serde_json::json;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = samples(400);
    let (_scratch, dirs) = scratch(&["root", "data"]);
    let (root_path, data_path) = (&dirs[0], &dirs[1]);
    let mut ledger = common::ledger(root_path, data_path);
    let run_id = ledger.begin_run(None);
    let direct_root = seal(root_path);
    let request = ProcessRequest::new("bash", "true", Duration::from_secs(30));
    let input = json!({ "command": "true" });

    let (mut bare, mut alone, mut chain) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let mut spawned = || {
            let start = Instant::now();
            let status =
                std::process::Command::new("bash").args(["-c", "true"]).process_group(0).status().unwrap();
            assert!(status.success());
            bare.push(start.elapsed());
        };
        let mut direct = || {
            let start = Instant::now();
            let produced = run(&direct_root, &request, |_| Ok(()));
            assert_eq!(produced.facts.exit_code, Some(0));
            alone.push(start.elapsed());
        };
        let mut chained = || {
            let start = Instant::now();
            let Dispatch::Run(dispatched) = ledger.dispatch(&run_id, "bash", &input, "bench") else {
                panic!("the command was not dispatched")
            };
            let produced = ledger.run_command(&run_id, &dispatched, &request);
            assert_eq!(produced.facts.teardown_dead, Some(true));
            ledger.record(&run_id, &dispatched, &produced.facts).unwrap();
            chain.push(start.elapsed());
        };
        match i % 3 {
            0 => (spawned(), direct(), chained()),
            1 => (direct(), chained(), spawned()),
            _ => (chained(), spawned(), direct()),
        };
    }
    Figure::new(
        "chain_bash",
        "chain_vs_producer",
        "bash -c true through the chain vs the supervised producer alone",
        latency("chain", &mut chain),
    )
    .against(latency("supervised producer", &mut alone))
    .print();
    Figure::new(
        "chain_bash",
        "producer_vs_spawn",
        "the supervised producer vs a bare spawn in a process group",
        latency("supervised producer", &mut alone),
    )
    .against(latency("bare spawn", &mut bare))
    .print();
    let (bare, alone, chain) = (median_us(&mut bare), median_us(&mut alone), median_us(&mut chain));
    println!("bash -c true, {samples} samples each, medians (interleaved):");
    println!("  bare spawn in a group     {bare:>9.1} us");
    println!("  supervised producer alone {alone:>9.1} us  ({:.2}x the bare spawn)", alone / bare);
    println!(
        "  through the chain         {chain:>9.1} us  ({:.2}x the producer alone, {:.2}x the bare spawn)",
        chain / alone,
        chain / bare
    );
    println!("  supervisor overhead       {:>9.1} us per call", alone - bare);
    println!("  ledger overhead           {:>9.1} us per call", chain - alone);
}
