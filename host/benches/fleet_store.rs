//! The fleet store against the server's own floor (issue 22, SPEC 13).
//!
//! - **claim vs INSERT**: one claim through a lineage on the fleet store
//!   (`effects_append`: compare the head, check the chain, renew the lease,
//!   insert the line, commit) against a raw single-row `INSERT` of a line of
//!   the same size into a plain table, committed, on the same server and
//!   connection kind, interleaved sample by sample. Both commits wait for
//!   the server's WAL flush (`synchronous_commit = on`). Goal: at most 1.5x.
//! - **claim vs the local log**: the same claim through a lineage in a local
//!   data dir (flock, write, fdatasync), for reference.
//! - **8 lineages vs 1**: eight writers (threads, each with its own handle
//!   and connection) claiming on eight lineages against eight on one, in
//!   claims per second: what contention on one lineage's head row costs.
//!
//! The server is `$EFFECTS_TEST_POSTGRES` (`cargo xtask bench` starts a
//! private cluster and sets it). `cargo bench --bench fleet_store`
//! (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its files directly

mod common;

use std::time::{Duration, Instant};

use common::report::{Figure, Goal, value};
use common::{claim, claim_line, latency, open_log, samples, scratch};
use effect_ledger::log::{Checkpoints, EffectLog, LEASE, LineageLog, Medium, PgStore};
use postgres::{Client, NoTls};

const WRITERS: usize = 8;

fn server() -> String {
    std::env::var("EFFECTS_TEST_POSTGRES")
        .expect("set EFFECTS_TEST_POSTGRES to a PostgreSQL server's URL, or run `cargo xtask bench`")
}

fn fleet_log(url: &str, lineage: &str) -> LineageLog {
    let store = PgStore::open(url, lineage, true, Some(LEASE)).unwrap().unwrap();
    EffectLog::open_with(Medium::Server(store), lineage, None, Checkpoints::Keep).unwrap()
}

fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// Claims per second over `WRITERS` threads, each claiming `per_writer`
/// times on the lineage `lineage_of(writer)` names.
fn throughput(url: &str, per_writer: usize, lineage_of: impl Fn(usize) -> String + Sync) -> f64 {
    let logs: Vec<(String, LineageLog)> = (0..WRITERS)
        .map(|writer| {
            let lineage = lineage_of(writer);
            let log = fleet_log(url, &lineage);
            (lineage, log)
        })
        .collect();
    let barrier = std::sync::Barrier::new(WRITERS + 1);
    let elapsed = std::thread::scope(|scope| {
        for (writer, (lineage, mut log)) in logs.into_iter().enumerate() {
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                for i in 0..per_writer {
                    log.claim(&lineage, claim(writer * per_writer + i)).unwrap();
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        start.elapsed()
    });
    (WRITERS * per_writer) as f64 / elapsed.as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let url = server();
    let n = samples(1000);
    let line = claim_line(0);

    // Claim latency: the fleet store, a raw INSERT, the local log.
    let lineage = fresh("bench-claim");
    let mut fleet = fleet_log(&url, &lineage);
    let mut raw = Client::connect(&url, NoTls).unwrap();
    raw.batch_execute(
        "CREATE TABLE IF NOT EXISTS bench_raw_lines (id bigserial PRIMARY KEY, line bytea NOT NULL)",
    )
    .unwrap();
    let insert = raw.prepare("INSERT INTO bench_raw_lines (line) VALUES ($1)").unwrap();
    let (_scratch, dirs) = scratch(&["logs"]);
    let mut local = open_log(&dirs[0], "bench-local");
    let (mut ours, mut baseline, mut on_disk) = (Vec::new(), Vec::new(), Vec::new());
    let time = |f: &mut dyn FnMut()| -> Duration {
        let start = Instant::now();
        f();
        start.elapsed()
    };
    for i in 0..n {
        let mut fleet_claim = || {
            fleet.claim(&lineage, claim(i)).unwrap();
        };
        let mut raw_insert = || {
            raw.execute(&insert, &[&line]).unwrap();
        };
        let mut local_claim = || {
            local.claim("bench-local", claim(i)).unwrap();
        };
        if i % 2 == 0 {
            ours.push(time(&mut fleet_claim));
            baseline.push(time(&mut raw_insert));
        } else {
            baseline.push(time(&mut raw_insert));
            ours.push(time(&mut fleet_claim));
        }
        on_disk.push(time(&mut local_claim));
    }
    let (ours, baseline, on_disk) = (
        latency("claim, fleet store", &mut ours),
        latency("INSERT, committed", &mut baseline),
        latency("claim, local log", &mut on_disk),
    );
    println!("{n} interleaved samples, p50 / p99 in us:");
    println!("  raw INSERT commit   {:>8.0} / {:>8.0}", baseline.p50, baseline.p99.unwrap_or(0.0));
    println!("  claim, fleet store  {:>8.0} / {:>8.0}", ours.p50, ours.p99.unwrap_or(0.0));
    println!("  claim, local log    {:>8.0} / {:>8.0}", on_disk.p50, on_disk.p99.unwrap_or(0.0));
    Figure::new(
        "fleet_store",
        "claim_vs_insert",
        "one claim on the fleet store vs a raw single-row INSERT commit",
        ours.clone(),
    )
    .against(baseline)
    .goal(Goal::AtMost(1.5))
    .print();
    Figure::new(
        "fleet_store",
        "claim_vs_local",
        "one claim on the fleet store vs one on the local log",
        ours,
    )
    .against(on_disk)
    .print();

    // Eight writers: eight lineages against one.
    let per_writer = samples(300);
    let shared = fresh("bench-shared");
    let one = throughput(&url, per_writer, |_| shared.clone());
    let spread_prefix = fresh("bench-spread");
    let eight = throughput(&url, per_writer, |writer| format!("{spread_prefix}-{writer}"));
    println!(
        "{WRITERS} writers, {per_writer} claims each: 8 lineages {eight:.0} claims/s, 1 lineage {one:.0} claims/s"
    );
    Figure::new(
        "fleet_store",
        "lineages_8_vs_1",
        "8 writers on 8 lineages vs 8 writers on one lineage",
        value("8 lineages", "claims/s", eight, None),
    )
    .against(value("1 lineage", "claims/s", one, None))
    .print();
}
