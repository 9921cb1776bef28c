//! Continuing a run costs what follows its checkpoint, not its history
//! (LOG-10, issue 18), measured as a user sees it: whole `effects` processes.
//!
//! 1. A one-step `effects session --run` on a run of about 100,000 records
//!    vs the same on a run of 2, alternating, in wall time and in peak
//!    resident memory (each child's own `ru_maxrss`, from `wait4` in a small
//!    measurer process, see [`session`]). Goal: at most 1.2x in both.
//! 2. 1,000 tool calls as one process each (what a hook does) on one run:
//!    the median of the last tenth of the calls vs the first tenth. Linear
//!    total cost means a flat per-call cost; goal at most 1.2x. A call reads
//!    the checkpoint (one byte per record) and the records after it (fewer
//!    than `CHECKPOINT_EVERY`, 256), so within one run its cost is a sawtooth
//!    of that period; the 100,000-record figure above is where the
//!    checkpoint's own size shows.
//!
//! The big run is made first by one `effects session` of 50,000 writes (a
//! claim and an outcome each), on the same disk as the measured runs.
//!
//! `cargo bench --bench session_continue` (`EFFECTS_BENCH_SCALE=0.1` for a
//! quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::report::{Figure, Goal, value};
use common::{median_us, samples, scratch};

const ONE_STEP: &str =
    "{\"tool\": \"write_file\", \"input\": {\"path\": \"next.txt\", \"content\": \"next\\n\"}}\n";

/// What one `effects` process cost.
struct Cost {
    wall: Duration,
    /// Peak resident set, KiB.
    max_rss_kib: i64,
}

/// Runs `effects --data-dir DATA session --root ROOT ARGS... -` with `script`
/// on its standard input, through a measurer (this bench's own binary, run
/// with `--measure`); panics unless it succeeds. The measurer is there for the
/// peak RSS: a child's `ru_maxrss` starts at the high-water mark of the
/// address space it was spawned from (Linux folds it in at `execve`), and this
/// process holds the big script, so `effects` is spawned from a small one.
fn session(data: &Path, root: &Path, args: &[&str], script: &str) -> Cost {
    let mut measurer = Command::new(std::env::current_exe().unwrap())
        .arg("--measure")
        .arg(data)
        .arg(root)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    measurer.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let output = measurer.wait_with_output().unwrap();
    assert!(output.status.success(), "effects session {args:?} failed (its stderr is above)");
    let text = String::from_utf8(output.stdout).unwrap();
    let (wall_us, max_rss_kib) = text.trim().split_once(' ').expect("the measurer prints two numbers");
    Cost { wall: Duration::from_micros(wall_us.parse().unwrap()), max_rss_kib: max_rss_kib.parse().unwrap() }
}

/// `--measure DATA ROOT ARGS...`: runs the session on this process's standard
/// input and prints its wall time in microseconds and its peak RSS in KiB.
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which also reports its peak RSS
fn measure(data: &Path, root: &Path, args: &[String]) {
    let mut script = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut script).unwrap();
    let mut errors = tempfile::tempfile().unwrap();
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(data)
        .arg("session")
        .arg("--root")
        .arg(root)
        .args(args)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(errors.try_clone().unwrap())
        .spawn()
        .unwrap();
    // A child that exits early closes its end: its stderr says why.
    let _ = child.stdin.take().unwrap().write_all(&script);
    let (status, max_rss_kib) = wait4(child.id());
    let wall = start.elapsed();
    if !status.success() {
        use std::io::{Read, Seek};
        let mut stderr = String::new();
        errors.rewind().unwrap();
        errors.read_to_string(&mut stderr).unwrap();
        eprintln!("effects session {args:?} failed ({status}): {stderr}");
        std::process::exit(1);
    }
    println!("{} {max_rss_kib}", wall.as_micros());
}

/// Reaps `pid`, returning its exit status and its own peak RSS in KiB.
fn wait4(pid: u32) -> (std::process::ExitStatus, i64) {
    let mut status = 0;
    // SAFETY: `rusage` is plain data that wait4 fills; `pid` is our child,
    // not yet reaped (std only reaps on `wait`, which we never call).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid as libc::pid_t, "wait4: {}", std::io::Error::last_os_error());
    (std::process::ExitStatus::from_raw(status), usage.ru_maxrss)
}

/// The script of `steps` writes to distinct files.
fn writes(steps: usize) -> String {
    (0..steps)
        .map(|i| format!("{{\"tool\": \"write_file\", \"input\": {{\"path\": \"f{i}.txt\", \"content\": \"{i}\\n\"}}}}\n"))
        .collect()
}

fn records(data: &Path, run: &str) -> usize {
    let bytes = std::fs::read(data.join("effects").join(format!("{run}.log"))).unwrap();
    bytes.iter().filter(|b| **b == b'\n').count()
}

fn median_kib(samples: &mut [i64]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2] as f64
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.iter().any(|a| a == "--list") {
        return;
    }
    if argv.get(1).map(String::as_str) == Some("--measure") {
        return measure(Path::new(&argv[2]), Path::new(&argv[3]), &argv[4..]);
    }
    let (_scratch, dirs) = scratch(&["root", "data"]);
    let (root, data) = (&dirs[0], &dirs[1]);

    let big_steps = samples(50_000);
    let made = Instant::now();
    session(data, root, &["--new-run", "big"], &writes(big_steps));
    session(data, root, &["--new-run", "small"], &writes(1));
    let (big_records, small_records) = (records(data, "big"), records(data, "small"));
    println!(
        "made a run of {big_records} records ({big_steps} writes) in {:.1} s; the small run has {small_records}",
        made.elapsed().as_secs_f64()
    );

    // 1. One step on the big run vs on the small run, alternating.
    let rounds = samples(30);
    let (mut big_wall, mut small_wall, mut big_rss, mut small_rss) = (vec![], vec![], vec![], vec![]);
    for i in 0..rounds {
        let on = |run: &str| session(data, root, &["--run", run], ONE_STEP);
        let (big, small) = if i % 2 == 0 {
            let big = on("big");
            (big, on("small"))
        } else {
            let small = on("small");
            (on("big"), small)
        };
        big_wall.push(big.wall);
        small_wall.push(small.wall);
        big_rss.push(big.max_rss_kib);
        small_rss.push(small.max_rss_kib);
    }
    let (bw, sw) = (median_us(&mut big_wall), median_us(&mut small_wall));
    let (br, sr) = (median_kib(&mut big_rss), median_kib(&mut small_rss));
    println!("one-step session --run, medians of {rounds} alternating rounds:");
    println!("  on {small_records} records  {:>8.2} ms  {:>8.1} MiB peak", sw / 1e3, sr / 1024.0);
    println!(
        "  on {big_records} records  {:>8.2} ms  {:>8.1} MiB peak  ({:.2}x time, {:.2}x memory; goal <= 1.2x)",
        bw / 1e3,
        br / 1024.0,
        bw / sw,
        br / sr
    );
    Figure::new(
        "session_continue",
        "time_big_vs_small",
        format!(
            "one-step session --run: wall time on a {big_records}-record run vs a {small_records}-record run"
        ),
        value("big run", "ms", bw / 1e3, None),
    )
    .against(value("small run", "ms", sw / 1e3, None))
    .goal(Goal::AtMost(1.2))
    .print();
    Figure::new(
        "session_continue",
        "memory_big_vs_small",
        format!(
            "one-step session --run: peak RSS on a {big_records}-record run vs a {small_records}-record run"
        ),
        value("big run", "MiB", br / 1024.0, None),
    )
    .against(value("small run", "MiB", sr / 1024.0, None))
    .goal(Goal::AtMost(1.2))
    .print();

    // 2. Calls as one process each, on one run.
    let calls = samples(1_000);
    session(data, root, &["--new-run", "hooks"], ONE_STEP);
    let mut each: Vec<Duration> =
        (0..calls).map(|_| session(data, root, &["--run", "hooks"], ONE_STEP).wall).collect();
    let tenth = (calls / 10).max(1);
    let total: Duration = each.iter().sum();
    let (first, last) = {
        let (head, tail) = each.split_at_mut(calls - tenth);
        (median_us(&mut head[..tenth]), median_us(tail))
    };
    println!(
        "{calls} one-process calls on one run ({} records at the end): {:.1} s in all",
        records(data, "hooks"),
        total.as_secs_f64()
    );
    println!(
        "  first tenth {:.3} ms per call, last tenth {:.3} ms ({:.3}x; goal <= 1.2x)",
        first / 1e3,
        last / 1e3,
        last / first
    );
    Figure::new(
        "session_continue",
        "calls_last_vs_first",
        format!("{calls} one-process calls on one run: a call in the last tenth vs the first tenth"),
        value("last tenth", "ms", last / 1e3, None),
    )
    .against(value("first tenth", "ms", first / 1e3, None))
    .goal(Goal::AtMost(1.2))
    .print();
}
