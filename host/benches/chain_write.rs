//! The ledger's overhead per tool call: `write_file` of a 4 KiB file through
//! the whole chain (bind, classify, durable claim, produce, settle, outcome)
//! vs the same producer called directly (which `sync_data`s its file once),
//! interleaved in the same run. Prints medians and the split; the claim's
//! fsync should dominate the chain's extra cost.
//!
//! `cargo bench --bench chain_write` (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Dispatch, Ledger, LedgerConfig, bind::bind};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::producers::fs::write_file;
use serde_json::json;

fn median(samples: &mut [Duration]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let factor: f64 = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    let samples = ((1_000.0 * factor) as usize).max(20);
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-chain");
    std::fs::create_dir_all(&base).unwrap();
    let scratch = tempfile::tempdir_in(&base).unwrap();
    let (root_path, data_path, direct_path) =
        (scratch.path().join("root"), scratch.path().join("data"), scratch.path().join("direct"));
    for dir in [&root_path, &data_path, &direct_path] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let content: String = "0123456789abcdef".repeat(256); // 4 KiB
    let input = json!({ "path": "file.txt", "content": content });

    let seal = || {
        let dir = Dir::open_ambient_dir(&root_path, ambient_authority()).unwrap();
        SealedRoot::new(dir, "root", "bench", "bench", ControlPlane::default()).unwrap()
    };
    let root = seal();
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let data = Dir::open_ambient_dir(&data_path, ambient_authority()).unwrap();
    let mut ledger = Ledger::new(LedgerConfig::new(data, "data", root, policies));
    let run = ledger.begin_run(None);
    let direct = Dir::open_ambient_dir(&direct_path, ambient_authority()).unwrap();

    // A separate root and policy set to time binding and classification alone.
    let probe_root = seal();
    let mut probe_policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();

    let (mut alone, mut chain, mut dispatch, mut produce, mut record, mut binding, mut classify) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..samples {
        let mut direct_write = || {
            let start = Instant::now();
            write_file(&direct, "file.txt", &content).result.unwrap();
            alone.push(start.elapsed());
        };
        let mut chained_write = || {
            let start = Instant::now();
            let Dispatch::Run(dispatched) = ledger.dispatch(&run, "write_file", &input, "bench") else {
                panic!("the write was not dispatched")
            };
            let claimed = start.elapsed();
            let produced = write_file(ledger.root().dir(), "file.txt", &content);
            let written = start.elapsed();
            ledger.record(&run, &dispatched, &produced.facts).unwrap();
            let recorded = start.elapsed();
            dispatch.push(claimed);
            produce.push(written - claimed);
            record.push(recorded - written);
            chain.push(recorded);
        };
        if i % 2 == 0 {
            direct_write();
            chained_write();
        } else {
            chained_write();
            direct_write();
        }
        let start = Instant::now();
        let bound = bind(&probe_root, "write_file", &input, "bench", 16 << 20).unwrap();
        binding.push(start.elapsed());
        let start = Instant::now();
        probe_policies.classifier("write_file").unwrap().classify(&bound.operation).unwrap();
        classify.push(start.elapsed());
    }
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
