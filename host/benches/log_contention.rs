//! Writer processes on one lineage vs the disk's own ceiling (issue 18).
//!
//! Eight processes append claims to one lineage, each through its own
//! handle, as eight hook processes or eight agents of one run would; the
//! baseline is eight processes appending lines of the same size to one plain
//! file the way a log that shares its flushes would at best: `flock`, `write`,
//! unlock, then `fdatasync` outside the lock (so one flush can cover several
//! writers' lines). Rounds alternate which side goes first; every round uses
//! a fresh lineage and a fresh file. The children are this bench's own binary
//! (`--child ours|raw ...`): they open their log, say `ready`, and start
//! appending only when every child is ready, so process start-up and the
//! lineage's open are outside the timing. One process alone through the
//! ledger is printed for reference.
//!
//! Each child also says how much CPU time (user and system) its appends
//! took, so the bench prints the CPU each side spends per append and how
//! many claims a second the machine's cores would fit at that cost: on a
//! machine with few cores, how much of the gap to the raw appenders is the
//! CPU eight writers spend decoding each other's records.
//!
//! Goal: 8 processes through the ledger at least 0.8x the 8 raw appenders.
//!
//! `cargo bench --bench log_contention` (`EFFECTS_BENCH_SCALE=0.1` for a
//! quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its files directly

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::report::{Figure, Goal, value};
use common::{claim, claim_line, open_log, samples, scratch};
use rustix::fs::{FlockOperation, fdatasync, flock};

const WRITERS: usize = 8;
const ROUNDS: usize = 5;

/// This process's CPU time (user and system) so far, in microseconds.
fn cpu_us() -> f64 {
    let spent = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    spent.tv_sec as f64 * 1e6 + spent.tv_nsec as f64 / 1e3
}

/// Tells the parent the CPU time the appends since `start` took, per append.
fn report_cpu(start: f64, count: usize) {
    println!("cpu {}", (cpu_us() - start) / count as f64);
}

/// Waits for the parent's go (its closing our stdin).
fn wait_for_go() {
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
}

/// `--child ours DIR RUN WRITER COUNT`: COUNT claims through the log.
fn child_ours(dir: &Path, run: &str, writer: usize, count: usize) {
    let mut log = open_log(dir, run);
    let records: Vec<_> = (0..count).map(|i| claim(writer * count + i)).collect();
    wait_for_go();
    let start = cpu_us();
    for record in records {
        log.claim(run, record).unwrap();
    }
    report_cpu(start, count);
}

/// `--child raw FILE LEN COUNT`: COUNT lines of LEN bytes, each written under
/// the lock and flushed after it.
fn child_raw(file: &Path, len: usize, count: usize) {
    let mut file = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    let mut line = vec![b'x'; len];
    *line.last_mut().unwrap() = b'\n';
    wait_for_go();
    let start = cpu_us();
    for _ in 0..count {
        flock(&file, FlockOperation::LockExclusive).unwrap();
        file.write_all(&line).unwrap();
        flock(&file, FlockOperation::Unlock).unwrap();
        fdatasync(&file).unwrap();
    }
    report_cpu(start, count);
}

/// One round: appends per second over all the writers, and the CPU time
/// they spent per append (the mean of theirs), in microseconds.
struct Round {
    rate: f64,
    cpu_us: f64,
}

/// Starts `writers` children with `args(writer)`, waits until all are ready,
/// releases them together and measures them.
fn round(writers: usize, per_writer: usize, args: impl Fn(usize) -> Vec<String>) -> Round {
    let mut children: Vec<Child> = (0..writers)
        .map(|writer| {
            Command::new(std::env::current_exe().unwrap())
                .arg("--child")
                .args(args(writer))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outputs: Vec<_> = children.iter_mut().map(|c| BufReader::new(c.stdout.take().unwrap())).collect();
    for output in &mut outputs {
        let mut ready = String::new();
        output.read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready", "a child failed to open its log");
    }
    let start = Instant::now();
    for child in &mut children {
        drop(child.stdin.take()); // go
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success(), "a writer failed");
    }
    let rate = (writers * per_writer) as f64 / start.elapsed().as_secs_f64();
    let cpu: Vec<f64> = outputs
        .into_iter()
        .map(|mut output| {
            let mut line = String::new();
            output.read_line(&mut line).unwrap();
            line.trim().strip_prefix("cpu ").expect("a writer reports its CPU time").parse().unwrap()
        })
        .collect();
    Round { rate, cpu_us: cpu.iter().sum::<f64>() / cpu.len() as f64 }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    if args.get(1).map(String::as_str) == Some("--child") {
        match args[2].as_str() {
            "ours" => {
                child_ours(Path::new(&args[3]), &args[4], args[5].parse().unwrap(), args[6].parse().unwrap())
            }
            "raw" => child_raw(Path::new(&args[3]), args[4].parse().unwrap(), args[5].parse().unwrap()),
            other => panic!("unknown child kind {other}"),
        }
        return;
    }
    let per_writer = samples(400);
    let (_scratch, dirs) = scratch(&["logs"]);
    let dir = &dirs[0];
    let len = claim_line(0).len();
    let dir_arg = dir.display().to_string();
    let ours = |round_id: usize, writers: usize| {
        let run = format!("contention-{writers}-{round_id}");
        round(writers, per_writer, |writer| {
            vec!["ours".into(), dir_arg.clone(), run.clone(), writer.to_string(), per_writer.to_string()]
        })
    };
    let raw = |round_id: usize| {
        let file = dir.join(format!("raw-{round_id}.bin"));
        std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&file).unwrap();
        let file = file.display().to_string();
        round(WRITERS, per_writer, |_| {
            vec!["raw".into(), file.clone(), len.to_string(), per_writer.to_string()]
        })
    };
    let (mut ledger, mut baseline, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        if r % 2 == 0 {
            baseline.push(raw(r));
            ledger.push(ours(r, WRITERS));
        } else {
            ledger.push(ours(r, WRITERS));
            baseline.push(raw(r));
        }
        alone.push(ours(r, 1));
    }
    let rates = |rounds: &[Round]| median(rounds.iter().map(|r| r.rate).collect());
    let cpus = |rounds: &[Round]| median(rounds.iter().map(|r| r.cpu_us).collect());
    let (ledger_cpu, baseline_cpu) = (cpus(&ledger), cpus(&baseline));
    let (ledger, baseline, alone) = (rates(&ledger), rates(&baseline), rates(&alone));
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    // At most this many claims a second fit in the CPU the machine has,
    // if every core did nothing but these writers' work.
    let ceiling = cores * 1e6 / ledger_cpu;
    println!(
        "{WRITERS} writer processes, {per_writer} appends each, medians of {ROUNDS} interleaved rounds:"
    );
    println!("  raw, fdatasync after unlock  {baseline:>9.0} appends/s");
    println!(
        "  through the log              {ledger:>9.0} claims/s ({:.2}x raw; goal >= 0.8x)",
        ledger / baseline
    );
    println!("  one process through the log  {alone:>9.0} claims/s ({:.2}x for eight)", ledger / alone);
    println!(
        "  CPU per append: the log {ledger_cpu:.0} us, raw {baseline_cpu:.0} us; {cores} cores fit at most \
         {ceiling:.0} claims/s ({:.2}x raw)",
        ceiling / baseline
    );
    Figure::new(
        "log_contention",
        "processes_8_vs_raw",
        "8 processes claiming on one lineage vs 8 raw appenders that fsync after unlocking",
        value("8 processes, the log", "claims/s", ledger, None),
    )
    .against(value("8 raw appenders", "appends/s", baseline, None))
    .goal(Goal::AtLeast(0.8))
    .print();
    Figure::new(
        "log_contention",
        "processes_8_vs_1",
        "8 processes claiming on one lineage vs one process",
        value("8 processes", "claims/s", ledger, None),
    )
    .against(value("1 process", "claims/s", alone, None))
    .print();
    Figure::new(
        "log_contention",
        "cpu_8_vs_raw",
        "CPU time (user and system) per append of the 8 processes vs the 8 raw appenders",
        value("8 processes, the log", "us", ledger_cpu, None),
    )
    .against(value("8 raw appenders", "us", baseline_cpu, None))
    .print();
    Figure::new(
        "log_contention",
        "cpu_ceiling_vs_raw",
        format!("claims/s the machine's {cores} cores fit at the log's CPU per claim vs the 8 raw appenders"),
        value("CPU ceiling", "claims/s", ceiling, None),
    )
    .against(value("8 raw appenders", "appends/s", baseline, None))
    .print();
}
