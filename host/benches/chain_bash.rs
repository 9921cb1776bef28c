//! The ledger's overhead per `bash` call (issue 6): `bash -c true` through the
//! whole chain (bind, classify, durable claim, run, settle, outcome append)
//! vs the process producer alone, interleaved in the same run. Prints medians,
//! the ratio and the absolute overhead, which should be about two log appends
//! with their fdatasyncs (claim, outcome).
//!
//! `cargo bench --bench chain_bash` (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use common::{median_us, samples, scratch, seal};
use effect_ledger::ledger::{Dispatch, Ledger, LedgerConfig};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::producers::process::{ProcessRequest, run};
use serde_json::json;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = samples(400);
    let (_scratch, dirs) = scratch(&["root", "data"]);
    let (root_path, data_path) = (&dirs[0], &dirs[1]);
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let data = Dir::open_ambient_dir(data_path, ambient_authority()).unwrap();
    let mut ledger = Ledger::new(LedgerConfig::new(data, "data", seal(root_path), policies));
    let run_id = ledger.begin_run(None);
    let direct_root = seal(root_path);
    let request = ProcessRequest::new("bash", "true", Duration::from_secs(30));
    let input = json!({ "command": "true" });

    let (mut alone, mut chain) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let mut direct = || {
            let start = Instant::now();
            let produced = run(&direct_root, &request);
            assert_eq!(produced.facts.exit_code, Some(0));
            alone.push(start.elapsed());
        };
        let mut chained = || {
            let start = Instant::now();
            let Dispatch::Run(dispatched) = ledger.dispatch(&run_id, "bash", &input, "bench") else {
                panic!("the command was not dispatched")
            };
            let produced = run(ledger.root(), &request);
            ledger.record(&run_id, &dispatched, &produced.facts).unwrap();
            chain.push(start.elapsed());
        };
        if i % 2 == 0 {
            direct();
            chained();
        } else {
            chained();
            direct();
        }
    }
    let (alone, chain) = (median_us(&mut alone), median_us(&mut chain));
    println!("bash -c true, {samples} samples each, medians (interleaved):");
    println!("  process producer alone   {alone:>9.1} us");
    println!("  through the chain        {chain:>9.1} us  ({:.2}x the producer alone)", chain / alone);
    println!("  ledger overhead          {:>9.1} us per call", chain - alone);
}
