//! Cost of one completion decision over a large ledger (issue 5: a ledger of
//! 10,000 effects decided in under 10 ms, with no step quadratic in the
//! number of effects).
//!
//! The ledger: n `write_file` effects on m files spread over 100 directories
//! (file i % m), each a claim with a content obligation, a REPORTED_SUCCESS
//! outcome and a COMPLETE readback (3n records), every file seen with a
//! device:inode incarnation of its own (so ID-3's alias tracking does its
//! per-record work, and finds no hard link); every tenth file is required; the answer names a few files. Shapes: 1,000 effects on 1,000
//! files, 10,000 on 10,000 (every effect a new file: the most resources a
//! ledger of that size can have) and 10,000 on 1,000 (each file rewritten
//! and re-read ten times). Cases, interleaved call by call so machine noise
//! hits them alike:
//!
//! - `native`: the shipped evaluator compiled natively (the baseline);
//! - `component`: the shipped `evaluate.wasm` on its warm instance, including
//!   lowering the ledger into the guest and the host's answer checks.
//!
//! The 10k/1k ratio on distinct files shows the growth (10x is linear, 100x
//! would be quadratic). When the hostile fixtures are built (`cargo xtask
//! fixtures`), the bench also times the `hostile-evaluator` fixture in its
//! well-behaved mode, which answers at once, over the 10k/10k ledger: the cost
//! of the boundary alone (laying the ledger out as the WIT's columns,
//! lowering them into a fresh instance, the guest lifting them, the host's
//! answer checks), without any rule, and the fuel the guest spends lifting. It
//! also times a plain clone and drop of the model ledger, as a yardstick for
//! touching every string once. `cargo bench --bench evaluate`
//! (`EFFECTS_BENCH_SCALE=0.2` for a quick run).

#![allow(clippy::disallowed_methods)] // the bench reads a fixture file

mod common;

// The allocator the `effects` binary runs with, so the figures are its figures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use common::report::{Figure, Goal, value};

use effect_ledger::completion::Evaluator;
use effect_ledger::completion::vectors::{
    SeenFile, Vector, VectorClaim, VectorObligation, VectorObservation, VectorOutcome, VectorRecord,
    VectorResource,
};
use effect_ledger::model::{EvidenceLedger, Execution, Verdict};
use effect_ledger::policy::{
    LoadedComponent, NativeEvaluator, PolicyOptions, PolicySet, PolicySource, World, load_unpinned,
};

fn rounds() -> usize {
    let factor: f64 = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    ((40.0 * factor) as usize).max(5)
}

/// The ledger of `effects` verified writes on `files` files.
pub fn ledger(effects: usize, files: usize) -> EvidenceLedger {
    let path = |i: usize| format!("dir{}/file{}.txt", i % 100, i % files);
    let file = |i: usize| VectorResource::File(path(i));
    // Incarnations as the host spells them (ID-2): the object's device:inode
    // and the digest of its directory chain, or `absent:` and that digest.
    // A claim sees the file before it is written (absent the first time),
    // its readback the object written; no two files share an inode.
    let chain = |i: usize| format!("{:064x}", i % 100);
    let object = |i: usize| format!("2049:{}@{}", 1_000_000 + i % files, chain(i));
    let before = |i: usize| if i < files { format!("absent:{}", chain(i)) } else { object(i) };
    let seen = |i: usize| VectorResource::Seen(SeenFile { file: path(i), incarnation: before(i) });
    let mut records = Vec::with_capacity(3 * effects);
    for i in 0..effects {
        let content = format!("content of file {i}\n");
        let claim = 3 * i as u64;
        records.push(VectorRecord::Claim(VectorClaim {
            at: None,
            tool: "write_file".into(),
            subject: String::new(),
            scope: Some(vec![seen(i)]),
            obligations: vec![VectorObligation {
                target: file(i),
                content: Some(content.clone()),
                content_sha256: None,
                absent: false,
                exists: false,
            }],
            external: false,
            no_op: false,
            processes: false,
            unconfined: false,
            unbound: false,
        }));
        records.push(VectorRecord::Outcome(VectorOutcome {
            at: None,
            claim,
            execution: Execution::ReportedSuccess,
            cleanup: None,
            mutation_attempted: false,
            recovery: false,
            remote_acknowledged: false,
        }));
        records.push(VectorRecord::Observation(VectorObservation {
            at: None,
            resource: file(i),
            incarnation: object(i),
            mechanism: None,
            coverage: None,
            exists: true,
            content: Some(content),
            content_sha256: None,
            source_claim: Some(claim),
        }));
    }
    let required = (0..files).step_by(10).map(path).collect();
    let answer = "I wrote dir0/file0.txt and dir1/file1.txt. I updated dir2/file2.txt. Done.".to_owned();
    let vector = Vector::built(records, required, answer);
    vector.ledger().expect("the bench ledger is well formed")
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` and the test harness's probes
    }
    let mut set = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let mut component = Evaluator::Component(set.evaluator().unwrap());
    let mut native = Evaluator::Native(NativeEvaluator);
    let shapes = [(1_000usize, 1_000usize), (10_000, 10_000), (10_000, 1_000)];
    let ledgers: Vec<EvidenceLedger> = shapes.iter().map(|&(n, m)| ledger(n, m)).collect();
    // Warm up, check the answers are what the ledger says, record the fuel.
    let mut fuel = Vec::new();
    for ledger in &ledgers {
        let natively = native.decide(ledger);
        let decided = component.decide(ledger);
        assert_eq!(decided.decision.verdict, Verdict::Completed, "{:?}", decided.decision.reasons);
        assert_eq!(natively.decision, decided.decision, "native and component agree");
        fuel.push(decided.evaluator.and_then(|e| e.fuel_used).unwrap_or(0));
    }
    // Per shape: native, then component.
    let mut samples = vec![Vec::new(); 2 * shapes.len()];
    for _ in 0..rounds() {
        for (i, ledger) in ledgers.iter().enumerate() {
            let start = Instant::now();
            std::hint::black_box(native.decide(ledger));
            samples[2 * i].push(start.elapsed());
            let start = Instant::now();
            std::hint::black_box(component.decide(ledger));
            samples[2 * i + 1].push(start.elapsed());
        }
    }
    let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
    println!("evaluate: medians of {} interleaved rounds", rounds());
    for (i, &(n, m)) in shapes.iter().enumerate() {
        let (nat, comp) = (medians[2 * i], medians[2 * i + 1]);
        println!(
            "  {n:>6} effects on {m:>6} files ({:>6} records, {:>6} resources): native {:>7.3} ms, \
             component {:>7.3} ms ({:.1}x native), fuel {}",
            ledgers[i].records.len(),
            ledgers[i].resources.len(),
            ms(nat),
            ms(comp),
            comp.as_secs_f64() / nat.as_secs_f64(),
            fuel[i]
        );
    }
    for (i, &(n, m)) in shapes.iter().enumerate() {
        let (nat, comp) = (ms(medians[2 * i]), ms(medians[2 * i + 1]));
        let figure = match i {
            0 => "component_vs_native_1k",
            1 => "component_vs_native_10k",
            _ => "component_vs_native_10k_on_1k",
        };
        Figure::new(
            "evaluate",
            figure,
            format!("decision over {n} effects on {m} files: component vs native"),
            value("component", "ms", comp, None),
        )
        .against(value("native", "ms", nat, None))
        .print();
    }
    Figure::new(
        "evaluate",
        "growth_1k_to_10k",
        "component decision, 10,000 effects vs 1,000 (10x is linear)",
        value("10k effects", "ms", ms(medians[3]), None),
    )
    .against(value("1k effects", "ms", ms(medians[1]), None))
    .goal(Goal::AtMost(12.0))
    .print();
    println!(
        "  growth 1k -> 10k distinct files: native {:.1}x, component {:.1}x (10x is linear)",
        medians[2].as_secs_f64() / medians[0].as_secs_f64(),
        medians[3].as_secs_f64() / medians[1].as_secs_f64()
    );
    println!(
        "  target, 10,000 effects under 10 ms through the component: {:.3} ms on 10,000 files, {:.3} ms on 1,000",
        ms(medians[3]),
        ms(medians[5])
    );
    boundary(&ledgers[1]);
}

/// The boundary alone, when the fixture is built (see the module docs).
fn boundary(ledger: &EvidenceLedger) {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/policy-fixtures/fixture-hostile-evaluator.wasm");
    let Ok(bytes) = std::fs::read(&fixture) else {
        println!("  (boundary alone: build the fixtures with `cargo xtask fixtures` to measure it)");
        return;
    };
    let loaded = load_unpinned("hostile-evaluator", World::Evaluator, &bytes, &PolicyOptions::default());
    let Ok(LoadedComponent::Evaluator(mut noop)) = loaded else {
        panic!("the fixture loads as an evaluator")
    };
    let ledger = EvidenceLedger { answer: "fine".into(), ..ledger.clone() }; // the fixture's answer-at-once mode
    let (mut call, mut copy, mut free) = (Vec::new(), Vec::new(), Vec::new());
    let mut fuel = 0;
    for _ in 0..rounds() {
        let start = Instant::now();
        let decided = Evaluator::Component(&mut noop).decide(&ledger);
        call.push(start.elapsed());
        assert!(decided.policy_failure.is_none(), "{:?}", decided.policy_failure);
        fuel = decided.evaluator.and_then(|e| e.fuel_used).unwrap_or(0);
        let start = Instant::now();
        let cloned = std::hint::black_box(ledger.clone());
        copy.push(start.elapsed());
        let start = Instant::now();
        drop(cloned);
        free.push(start.elapsed());
    }
    println!(
        "  boundary alone at 10,000 effects on 10,000 files: {:.3} ms (a no-op evaluator, fuel {fuel}); \
         a clone of the model ledger {:.3} ms, dropping it {:.3} ms",
        ms(median(&mut call)),
        ms(median(&mut copy)),
        ms(median(&mut free))
    );
}
