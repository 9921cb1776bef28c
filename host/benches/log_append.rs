//! Effect-log benchmarks, each beside its baseline in the same run (the
//! machines are shared and noisy: read the ratios, not the absolutes).
//!
//! 1. claim latency p50/p99 vs a raw `write` + `fsync` of the same bytes to a
//!    file on the same filesystem (target: at most 1.25x at the median);
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

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::log::{
    ClaimRecord, DiskLog, EffectLog, GroupLog, MemoryFile, OpenMode, OpenOptionsLog, OperationRef, Record,
    open_lineage,
};
use effect_ledger::model::{ResourceRef, ResourceRole};

fn scale(n: usize) -> usize {
    let factor: f64 = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    ((n as f64 * factor) as usize).max(10)
}

/// 97 files' refs, resolved once beneath a real root: a resource reference
/// is made by the host only (ID-1), so the bench resolves them as a tool
/// path would be, and each claim clones one.
fn targets() -> &'static [ResourceRef] {
    static TARGETS: OnceLock<Vec<ResourceRef>> = OnceLock::new();
    TARGETS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let opened = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
        let root =
            SealedRoot::new(opened, "/work/demo", "workspace", "agent", ControlPlane::default()).unwrap();
        (0..97)
            .map(|k| {
                let path = format!("src/module_{k}.rs");
                std::fs::write(dir.path().join(&path), "").unwrap();
                root.resolve(&path, ResourceRole::Target).unwrap().resource
            })
            .collect()
    })
}

/// A claim of typical size: one filesystem target, one obligation.
fn claim(i: usize) -> ClaimRecord {
    let target = targets()[i % 97].clone();
    ClaimRecord {
        action_id: format!("action-{i}"),
        operation: OperationRef {
            tool: "write_file".into(),
            action: String::new(),
            input_sha256: "8f4c5bd1b0b8b4f9b5c6f0e2b1d1b7f0f7e0d9c2a6b3e4f5a6b7c8d9e0f1a2b3".into(),
            request_id: format!("req-{i}"),
        },
        impact_scope: vec![target],
        dependencies: Vec::new(),
        obligations: vec![effect_ledger::log::Obligation {
            target: 0,
            postcondition: effect_ledger::model::Postcondition::ContentSha256(
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
            ),
        }],
        parent_run_id: None,
        external: false,
        policy_failure: None,
        executor: Some(effect_ledger::executor::current()),
        root: None,
        confined: false,
    }
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

fn open_log(dir: &Path, run_id: &str) -> DiskLog {
    let handle = Dir::open_ambient_dir(dir, ambient_authority()).unwrap();
    let options =
        OpenOptionsLog { mode: OpenMode::ReadWrite, key: None, recover: false, ..Default::default() };
    open_lineage(&handle, "bench", run_id, &options).unwrap().unwrap()
}

struct Latencies(Vec<Duration>);

impl Latencies {
    fn percentile(&mut self, p: f64) -> Duration {
        self.0.sort_unstable();
        self.0[((self.0.len() as f64 - 1.0) * p).round() as usize]
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The bytes one claim appends (one framed line), from a scratch log.
fn claim_line(i: usize) -> Vec<u8> {
    let file = MemoryFile::new();
    let mut log = EffectLog::open(file.clone(), "scratch", None).unwrap();
    log.claim("bench", claim(i)).unwrap();
    file.contents()
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
fn claimer(mut log: DiskLog) -> impl FnMut(usize) {
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
        "   ratio at p50: {:.2}x (target <= 1.25x); at p99: {:.2}x",
        micros(c50) / micros(raw50),
        micros(c99) / micros(raw99)
    );

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

    std::fs::remove_dir_all(&dir).unwrap();
}
