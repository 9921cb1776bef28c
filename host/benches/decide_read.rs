//! The cost of CMP-7b's decision-time read: a completion over a run of ten
//! 4 KiB writes, requiring none of the files vs requiring all ten (each read
//! completely, identity checked, digested, and the ten observations appended
//! in one batch before the evaluator decides), interleaved in the same run,
//! beside reading and digesting the same ten files directly. Prints medians
//! and the cost per required artifact.
//!
//! `cargo bench --bench decide_read` (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::time::Instant;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use common::report::Figure;
use common::{latency, median_us, samples, scratch};
use effect_ledger::digest::Sha256Digest;
use effect_ledger::ledger::{Dispatch, Ledger};
use effect_ledger::producers::fs::write_file;
use serde_json::json;

const FILES: usize = 10;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = samples(200);
    let (_scratch, dirs) = scratch(&["root", "data"]);
    let (root_path, data_path) = (&dirs[0], &dirs[1]);
    let mut ledger = common::ledger(root_path, data_path);
    let run = ledger.begin_run(None);
    let content = "x".repeat(4095) + "\n";
    let names: Vec<String> = (0..FILES).map(|i| format!("f{i}.txt")).collect();
    for name in &names {
        let input = json!({ "path": name, "content": content });
        let Dispatch::Run(dispatched) = ledger.dispatch(&run, "write_file", &input, "bench") else {
            panic!("the write was not dispatched")
        };
        let produced = write_file(ledger.root(), &dispatched.bound.targets(ledger.root())[0], &content);
        ledger.record(&run, &dispatched, &produced.facts).unwrap();
    }
    let root = Dir::open_ambient_dir(root_path, ambient_authority()).unwrap();
    let (mut none, mut all, mut direct) = (Vec::new(), Vec::new(), Vec::new());
    let unrequired = |ledger: &mut Ledger| {
        let start = Instant::now();
        ledger.complete(&run, &[], "").unwrap();
        start.elapsed()
    };
    let required = |ledger: &mut Ledger| {
        let start = Instant::now();
        let completion = ledger.complete(&run, &names, "").unwrap();
        assert_eq!(completion.decided.decision.assessments.len(), FILES);
        start.elapsed()
    };
    let read = || {
        let start = Instant::now();
        for name in &names {
            let bytes = root.read(name).unwrap();
            std::hint::black_box(Sha256Digest::of(&bytes));
        }
        start.elapsed()
    };
    for i in 0..samples {
        // Interleaved, each first in turn.
        for step in 0..3 {
            match (i + step) % 3 {
                0 => none.push(unrequired(&mut ledger)),
                1 => all.push(required(&mut ledger)),
                _ => direct.push(read()),
            }
        }
    }
    Figure::new(
        "decide_read",
        "require_all_vs_none",
        format!("complete requiring all {FILES} written files vs requiring none"),
        latency("requiring all", &mut all),
    )
    .against(latency("requiring none", &mut none))
    .print();
    let (none, all, direct) = (median_us(&mut none), median_us(&mut all), median_us(&mut direct));
    println!("complete over {FILES} verified 4 KiB writes, {samples} samples each, medians (interleaved):");
    println!("  requiring none of them     {none:>9.1} us");
    println!("  requiring all {FILES}          {all:>9.1} us  ({:.2}x)", all / none);
    println!("  the {FILES} reads alone        {direct:>9.1} us  (read + sha256, no ledger)");
    println!(
        "  per required artifact      {:>9.1} us  (of which the read itself {:.1} us)",
        (all - none) / FILES as f64,
        direct / FILES as f64
    );
}
