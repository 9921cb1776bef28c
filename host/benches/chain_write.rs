//! The ledger's overhead per tool call: `write_file` of a 4 KiB file through
//! the whole chain (bind, classify, durable claim, produce, settle, outcome)
//! vs the same producer called directly (which `sync_data`s its file once),
//! and vs one raw append + `fdatasync` of a claim-sized line (what the
//! claim's durability costs at the least), all interleaved in the same run.
//! Prints medians and the split; the claim's fsync should dominate the
//! chain's extra cost (issue 18: overhead at most 1.2x the raw append).
//!
//! `cargo bench --bench chain_write` (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Instant;

use common::report::{Figure, Goal, value};
use common::{latency, median_us as median, samples, scratch, seal};
use effect_ledger::identity::Target;
use effect_ledger::ledger::{Dispatch, bind::bind};
use effect_ledger::model::ResourceRole;
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::producers::fs::write_file;
use serde_json::json;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = samples(1_000);
    let (_scratch, dirs) = scratch(&["root", "data", "direct", "raw"]);
    let (root_path, data_path, direct_path) = (&dirs[0], &dirs[1], &dirs[2]);
    let mut raw_log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dirs[3].join("raw.log"))
        .unwrap();
    let content: String = "0123456789abcdef".repeat(256); // 4 KiB
    let input = json!({ "path": "file.txt", "content": content });

    let mut ledger = common::ledger(root_path, data_path);
    let run = ledger.begin_run(None);
    let direct = seal(direct_path);

    // A separate root and policy set to time binding and classification alone.
    let probe_root = seal(root_path);
    let mut probe_policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();

    let (mut alone, mut chain, mut dispatch, mut produce, mut record, mut binding, mut classify) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut raw = vec![];
    // One warm-up step, whose claim line sizes the raw baseline's appends.
    let Dispatch::Run(warm_up) = ledger.dispatch(&run, "write_file", &input, "bench") else {
        panic!("the write was not dispatched")
    };
    let produced = write_file(ledger.root(), &warm_up.bound.targets(ledger.root())[0], &content);
    ledger.record(&run, &warm_up, &produced.facts).unwrap();
    let mut claim_line = vec![b'x'; claim_len(data_path, &run.lineage)];
    *claim_line.last_mut().unwrap() = b'\n';
    for i in 0..samples {
        // Resolved outside the timing: the producer alone is measured.
        let direct_target = Target::of(&direct.resolve("file.txt", ResourceRole::Target).unwrap());
        let mut direct_write = || {
            let start = Instant::now();
            write_file(&direct, &direct_target, &content).result.unwrap();
            alone.push(start.elapsed());
        };
        let mut chained_write = || {
            let start = Instant::now();
            let Dispatch::Run(dispatched) = ledger.dispatch(&run, "write_file", &input, "bench") else {
                panic!("the write was not dispatched")
            };
            let claimed = start.elapsed();
            let produced = write_file(ledger.root(), &dispatched.bound.targets(ledger.root())[0], &content);
            let written = start.elapsed();
            ledger.record(&run, &dispatched, &produced.facts).unwrap();
            let recorded = start.elapsed();
            dispatch.push(claimed);
            produce.push(written - claimed);
            record.push(recorded - written);
            chain.push(recorded);
        };
        let mut raw_append = || {
            let start = Instant::now();
            raw_log.write_all(&claim_line).unwrap();
            rustix::fs::fdatasync(&raw_log).unwrap();
            raw.push(start.elapsed());
        };
        match i % 3 {
            0 => (direct_write(), chained_write(), raw_append()),
            1 => (chained_write(), raw_append(), direct_write()),
            _ => (raw_append(), direct_write(), chained_write()),
        };
        let start = Instant::now();
        let call = effect_ledger::tools::Call::parse("write_file", &input).unwrap();
        let bound = bind(&probe_root, call, None, "bench", 16 << 20).unwrap();
        binding.push(start.elapsed());
        let start = Instant::now();
        probe_policies.classifier("write_file").unwrap().classify(&bound.operation).unwrap();
        classify.push(start.elapsed());
    }
    report(&mut alone, &mut chain, &mut raw);
    let (alone, chain) = (median(&mut alone), median(&mut chain));
    let (dispatch, produce, record) = (median(&mut dispatch), median(&mut produce), median(&mut record));
    let (binding, classify) = (median(&mut binding), median(&mut classify));
    println!("write_file of 4 KiB, {samples} samples each, medians (interleaved):");
    println!("  producer alone (write + sync_data)   {alone:>9.1} us");
    println!(
        "  through the chain                    {chain:>9.1} us  ({:.2}x the producer alone)",
        chain / alone
    );
    println!("  split of the chain:");
    println!("    dispatch (bind + classify + claim) {dispatch:>9.1} us");
    println!("      of which bind                    {binding:>9.1} us (measured alone)");
    println!("      of which classify (classify-fs)  {classify:>9.1} us (measured alone)");
    println!("      so the claim (append + fdatasync) ~{:>7.1} us", (dispatch - binding - classify).max(0.0));
    println!("    producer                           {produce:>9.1} us");
    println!("    record (settle + outcome append)   {record:>9.1} us");
}

/// The bytes of the run's first claim line (what the raw baseline appends).
fn claim_len(data: &std::path::Path, run: &str) -> usize {
    let log = data.join("effects").join(format!("{run}.log"));
    let bytes = std::fs::read(log).unwrap();
    bytes.iter().position(|b| *b == b'\n').unwrap() + 1
}

/// The BENCH lines: the chain vs the producer, and the ledger's overhead
/// (chain minus producer, at the medians) vs one raw append + fdatasync.
fn report(
    alone: &mut [std::time::Duration],
    chain: &mut [std::time::Duration],
    raw: &mut [std::time::Duration],
) {
    let (alone, chain, raw) =
        (latency("producer alone", alone), latency("chain", chain), latency("raw append+fdatasync", raw));
    let overhead = chain.p50 - alone.p50;
    Figure::new(
        "chain_write",
        "chain_vs_producer",
        "write_file of 4 KiB through the chain vs the producer alone",
        chain,
    )
    .against(alone)
    .print();
    Figure::new(
        "chain_write",
        "overhead_vs_raw_append",
        "ledger overhead of a write step (chain minus producer) vs one raw append+fdatasync",
        value("overhead", "us", overhead, None),
    )
    .against(raw)
    .goal(Goal::AtMost(1.2))
    .print();
}
