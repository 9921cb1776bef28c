//! Effect-log benchmarks, each beside its baseline in the same run (the
//! machines are shared and noisy: read the ratios, not the absolutes).
//!
//! 1. claim latency p50/p99 vs a raw `write` + `fsync` of the same bytes to a
//!    file on the same filesystem (target: at most 1.1x at the median);
//! 2. claim latency on a log of 100,000 records vs an empty log (target: at
//!    most 1.1x: append cost must not grow with the log);
//! 3. the same claims as rows in SQLite (WAL, `synchronous=FULL`, one
//!    transaction per claim): we should be at least as fast;
//! 4. 8 threads claiming at once vs 1 thread, in claims per second;
//! 5. `load` of a 1,000,000-record log in MB/s vs `serde_json` parsing each
//!    line of the same bytes into a `Value`.
//!
//! `cargo bench --bench log_append` (set `EFFECTS_BENCH_SCALE=0.1` for a quick
//! run). Files go to `$EFFECTS_BENCH_DIR`, default a temporary directory under
//! `target/`, which is on the same filesystem as a real data dir would be here.

#![allow(clippy::disallowed_methods)] // a bench sets up its files directly

mod common;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::report::{Figure, Goal, value};
use common::{claim, claim_line, open_log};
use effect_ledger::log::{ClaimRecord, EffectLog, GroupLog, LineageLog, MemoryFile, Record};

fn scale(n: usize) -> usize {
    let factor: f64 = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    ((n as f64 * factor) as usize).max(10)
}

fn bench_dir() -> PathBuf {
    let base = std::env::var_os("EFFECTS_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-log"));
    std::fs::create_dir_all(&base).unwrap();
    let dir = tempfile::tempdir_in(base).unwrap().keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

struct Latencies(Vec<Duration>);

impl Latencies {
    fn percentile(&mut self, p: f64) -> Duration {
        common::percentile(&mut self.0, p)
    }

    /// The median and 99th percentile as a report value named `name`.
    fn value(&mut self, name: &str) -> common::report::Value {
        common::latency(name, &mut self.0)
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs `a` and `b` alternately (`a` first on even iterations, `b` first on
/// odd ones), timing each, so both see the same disk and the same neighbours:
/// on a shared machine, back-to-back phases drift more than the difference
/// being measured.
fn interleaved(n: usize, mut a: impl FnMut(usize), mut b: impl FnMut(usize)) -> (Latencies, Latencies) {
    let (mut left, mut right) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let time = |f: &mut dyn FnMut(usize), i: usize| {
        let start = Instant::now();
        f(i);
        start.elapsed()
    };
    for i in 0..n {
        if i % 2 == 0 {
            left.push(time(&mut a, i));
            right.push(time(&mut b, i));
        } else {
            right.push(time(&mut b, i));
            left.push(time(&mut a, i));
        }
    }
    (Latencies(left), Latencies(right))
}

/// Appends one claim line with `write` + `fsync` to a plain file: the floor.
fn raw_appender(dir: &Path) -> impl FnMut(usize) {
    let line = claim_line(0);
    let mut file =
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join("raw.bin")).unwrap();
    move |_| {
        file.write_all(&line).unwrap();
        rustix::fs::fsync(&file).unwrap();
    }
}

/// Inserts one claim row into SQLite (WAL, synchronous=FULL, autocommit).
fn sqlite_inserter(dir: &Path) -> impl FnMut(usize) {
    let db = rusqlite::Connection::open(dir.join("claims.sqlite")).unwrap();
    db.pragma_update(None, "journal_mode", "WAL").unwrap();
    db.pragma_update(None, "synchronous", "FULL").unwrap();
    db.execute("CREATE TABLE claims (position INTEGER PRIMARY KEY, run_id TEXT, body TEXT)", []).unwrap();
    let bodies: Vec<String> = (0..64).map(|i| serde_json::to_string(&claim(i)).unwrap()).collect();
    move |i| {
        db.execute(
            "INSERT INTO claims (run_id, body) VALUES (?1, ?2)",
            rusqlite::params!["bench", &bodies[i % 64]],
        )
        .unwrap();
    }
}

/// Appends claims to `log` (records prepared outside the timed call).
fn claimer(mut log: LineageLog) -> impl FnMut(usize) {
    let records: Vec<ClaimRecord> = (0..64).map(claim).collect();
    move |i| {
        log.claim("bench", records[i % 64].clone()).unwrap();
    }
}

/// A log of `records` claims written through the real encoder, fast (in
/// memory), then placed on disk with the log's mode.
fn prebuilt_log(dir: &Path, run_id: &str, records: usize) -> PathBuf {
    let file = MemoryFile::new();
    let mut log = EffectLog::open(file.clone(), "prebuilt", None).unwrap();
    for i in 0..records {
        log.claim(run_id, claim(i)).unwrap();
    }
    let path = dir.join(format!("{run_id}.log"));
    std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .unwrap()
        .write_all(&file.contents())
        .unwrap();
    path
}

/// Claims per second from `threads` threads, each with its own handle.
fn throughput(dir: &Path, run_id: &str, threads: usize, per_thread: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                let mut log = open_log(dir, run_id);
                for i in 0..per_thread {
                    log.claim(run_id, claim(t * per_thread + i)).unwrap();
                }
            });
        }
    });
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

/// Claims per second from `threads` threads sharing one group-commit handle.
fn group_throughput(dir: &Path, threads: usize, per_thread: usize) -> f64 {
    let group = GroupLog::new(open_log(dir, "group"));
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let group = &group;
            scope.spawn(move || {
                for i in 0..per_thread {
                    group.append("group", Record::Claim(claim(t * per_thread + i))).unwrap();
                }
            });
        }
    });
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` and test harness probes
    }
    let samples = scale(2_000);
    let dir = bench_dir();
    println!("effect log benchmarks in {} ({samples} samples each)", dir.display());

    // 1. claim vs raw write + fsync, interleaved.
    let (mut raw, mut claims) = interleaved(samples, raw_appender(&dir), claimer(open_log(&dir, "empty")));
    let (raw50, raw99, c50, c99) =
        (raw.percentile(0.5), raw.percentile(0.99), claims.percentile(0.5), claims.percentile(0.99));
    println!("\n1. claim latency vs raw write+fsync of the same {} bytes (interleaved)", claim_line(0).len());
    println!("   raw write+fsync  p50 {:>8.1} us  p99 {:>8.1} us", micros(raw50), micros(raw99));
    println!("   claim            p50 {:>8.1} us  p99 {:>8.1} us", micros(c50), micros(c99));
    println!(
        "   ratio at p50: {:.2}x (target <= 1.1x); at p99: {:.2}x",
        micros(c50) / micros(raw50),
        micros(c99) / micros(raw99)
    );
    Figure::new(
        "log_append",
        "claim_vs_raw",
        "durable claim vs raw append+fsync of the same bytes",
        claims.value("claim"),
    )
    .against(raw.value("raw append+fsync"))
    .goal(Goal::AtMost(1.1))
    .print();

    // 2. claim on a 100k-record log vs an empty one, interleaved.
    let big = scale(100_000);
    prebuilt_log(&dir, "big", big);
    let (mut on_big, mut on_empty) =
        interleaved(samples, claimer(open_log(&dir, "big")), claimer(open_log(&dir, "fresh")));
    let (b50, e50) = (on_big.percentile(0.5), on_empty.percentile(0.5));
    println!("\n2. claim latency on a {big}-record log vs an empty log (interleaved)");
    println!(
        "   empty log        p50 {:>8.1} us  p99 {:>8.1} us",
        micros(e50),
        micros(on_empty.percentile(0.99))
    );
    println!(
        "   {big}-record log p50 {:>8.1} us  p99 {:>8.1} us",
        micros(b50),
        micros(on_big.percentile(0.99))
    );
    println!("   ratio at p50: {:.2}x (target <= 1.1x)", micros(b50) / micros(e50));
    Figure::new(
        "log_append",
        "claim_on_big_log",
        format!("claim on a {big}-record log vs on an empty log"),
        on_big.value("claim, big log"),
    )
    .against(on_empty.value("claim, empty log"))
    .goal(Goal::AtMost(1.1))
    .print();

    // 3. SQLite, interleaved.
    let (mut sqlite, mut ours) =
        interleaved(samples, sqlite_inserter(&dir), claimer(open_log(&dir, "vs-sqlite")));
    let (s50, o50) = (sqlite.percentile(0.5), ours.percentile(0.5));
    println!("\n3. the same claims in SQLite (WAL, synchronous=FULL, one transaction each; interleaved)");
    println!(
        "   sqlite insert    p50 {:>8.1} us  p99 {:>8.1} us",
        micros(s50),
        micros(sqlite.percentile(0.99))
    );
    println!(
        "   claim            p50 {:>8.1} us  p99 {:>8.1} us",
        micros(o50),
        micros(ours.percentile(0.99))
    );
    println!("   claim / sqlite at p50: {:.2}x (want <= 1.0x)", micros(o50) / micros(s50));
    Figure::new(
        "log_append",
        "claim_vs_sqlite",
        "claim vs a SQLite insert (WAL, synchronous=FULL)",
        ours.value("claim"),
    )
    .against(sqlite.value("sqlite insert"))
    .goal(Goal::AtMost(1.0))
    .print();

    // 4. 8 threads vs 1.
    let per_thread = scale(1_000);
    let one = throughput(&dir, "one", 1, per_thread * 2);
    let eight = throughput(&dir, "eight", 8, per_thread);
    let grouped = group_throughput(&dir, 8, per_thread);
    println!("\n4. concurrent claims on one lineage");
    println!("   1 thread, 1 handle             {one:>10.0} claims/s");
    println!(
        "   8 threads, a handle each       {eight:>10.0} claims/s  ({:.2}x: every claim its own flock + fsync)",
        eight / one
    );
    println!(
        "   8 threads, group commit        {grouped:>10.0} claims/s  ({:.2}x; target >= 3x)",
        grouped / one
    );
    let one = value("1 thread", "claims/s", one, None);
    Figure::new(
        "log_append",
        "threads_8_vs_1",
        "8 threads with a handle each vs 1 thread",
        value("8 threads", "claims/s", eight, None),
    )
    .against(one.clone())
    .print();
    Figure::new(
        "log_append",
        "group_8_vs_1",
        "8 threads on one group-commit handle vs 1 thread",
        value("8 threads, group commit", "claims/s", grouped, None),
    )
    .against(one)
    .goal(Goal::AtLeast(3.0))
    .print();

    // 5. load a 1M-record log vs plain serde_json over the same bytes.
    let records = scale(1_000_000);
    let path = prebuilt_log(&dir, "million", records);
    let bytes = std::fs::read(&path).unwrap();
    let megabytes = bytes.len() as f64 / 1e6;
    let start = Instant::now();
    let mut parsed = 0usize;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let value: serde_json::Value = serde_json::from_slice(line).unwrap();
        parsed += value.is_object() as usize;
    }
    let serde_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let loaded = open_log(&dir, "million");
    let load_seconds = start.elapsed().as_secs_f64();
    assert_eq!(loaded.records().len(), records);
    assert_eq!(parsed, records);
    println!("\n5. load of a {records}-record log ({megabytes:.0} MB)");
    println!("   serde_json Value per line  {:>8.1} MB/s", megabytes / serde_seconds);
    println!(
        "   EffectLog load (strict)    {:>8.1} MB/s  ({:.2}x the serde_json time)",
        megabytes / load_seconds,
        load_seconds / serde_seconds
    );
    Figure::new(
        "log_append",
        "load_vs_serde",
        format!("strict load of a {records}-record log vs serde_json per line"),
        value("EffectLog load", "MB/s", megabytes / load_seconds, None),
    )
    .against(value("serde_json Value per line", "MB/s", megabytes / serde_seconds, None))
    .goal(Goal::AtLeast(0.5))
    .print();

    std::fs::remove_dir_all(&dir).unwrap();
}
