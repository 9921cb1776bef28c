//! The reference process producer for `bash` and `python` (SPEC section 6,
//! the launch row; TRU-1): run a command in the sealed root's directory, in a
//! new process group, under a timeout, capturing output up to a bound.
//!
//! On timeout the whole group is torn down (SIGTERM, a grace period, then
//! SIGKILL) and the facts say whether every process of the group is dead
//! (`teardown_dead`), as read from `/proc`: a process that ignores SIGTERM
//! and outlives the timeout is killed, or the facts say teardown failed;
//! never "clean" while one of the group is alive. A process that left the
//! group (`setsid`) is beyond what a group teardown can see.
//!
//! The process's identity carries its start token (`/proc/PID/stat` field
//! 22, clock ticks since boot), so a reused PID is a different process
//! (ID-2).
//!
//! `effects session` runs `bash` and `python` steps through it, classified by
//! `classify-process`. Background launches run through `job.rs` instead.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use crate::identity::SealedRoot;
use crate::model::ProducerFacts;

use super::Produced;

/// How to run one command.
#[derive(Debug, Clone)]
pub struct ProcessRequest {
    /// The interpreter: `bash` runs `bash -c SCRIPT`, `python` runs `python3 -c SCRIPT`.
    pub tool: String,
    /// The command text.
    pub script: String,
    /// When to tear the group down.
    pub timeout: Duration,
    /// How long processes get between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Largest stdout and stderr kept, each, in bytes.
    pub output_cap: usize,
}

impl ProcessRequest {
    /// A request with a 2 s grace period and 1 MiB of output each.
    pub fn new(tool: &str, script: &str, timeout: Duration) -> Self {
        Self {
            tool: tool.to_owned(),
            script: script.to_owned(),
            timeout,
            grace: Duration::from_secs(2),
            output_cap: 1 << 20,
        }
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The group leader's PID (the process group id too).
    pub pid: u32,
    /// Its start token (`/proc/PID/stat` field 22).
    pub start_token: u64,
    /// Captured standard output, up to the cap.
    pub stdout: Vec<u8>,
    /// Captured standard error, up to the cap.
    pub stderr: Vec<u8>,
    /// Output beyond the cap was discarded.
    pub truncated: bool,
    /// The signal that ended the leader, if one did.
    pub signal: Option<i32>,
}

/// Output read from one pipe, up to a cap; the rest is drained and dropped.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
    truncated: bool,
}

fn capture(mut pipe: impl Read + Send + 'static, cap: usize, done: mpsc::Sender<()>) -> Arc<Mutex<Capture>> {
    let shared = Arc::new(Mutex::new(Capture::default()));
    let writer = Arc::clone(&shared);
    thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buffer) {
            if n == 0 {
                break;
            }
            let mut capture = writer.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let room = cap.saturating_sub(capture.bytes.len());
            capture.bytes.extend_from_slice(&buffer[..n.min(room)]);
            capture.truncated |= n > room;
        }
        let _ = done.send(());
    });
    shared
}

/// The fields of one `/proc/PID/stat` line this module reads. They follow the
/// command name, which may itself contain spaces and parentheses.
struct Stat {
    /// Field 3: `R`, `S`, ..., `Z` for a zombie.
    zombie: bool,
    /// Field 5: the process group id.
    group: u32,
    /// Field 22: start time in clock ticks since boot.
    start_token: u64,
}

fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // Fields after the name start at field 3 (state).
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    Some(Stat {
        zombie: *fields.first()? == "Z",
        group: fields.get(2)?.parse().ok()?,
        start_token: fields.get(19)?.parse().ok()?,
    })
}

#[allow(clippy::disallowed_methods)] // `/proc` is the kernel's view of processes, not a file under a root
fn stat_of(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start token of `pid` (`/proc/PID/stat` field 22).
pub fn start_token(pid: u32) -> Option<u64> {
    stat_of(pid).map(|stat| stat.start_token)
}

/// Field 22 of a `/proc/PID/stat` line.
pub fn parse_start_token(stat: &str) -> Option<u64> {
    parse_stat(stat).map(|stat| stat.start_token)
}

/// Live (not zombie) processes whose process group is `pgid`.
#[allow(clippy::disallowed_methods)] // `/proc` is the kernel's view of processes, not a file under a root
pub fn live_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat_of(pid).is_some_and(|stat| stat.group == pgid && !stat.zombie))
        .collect()
}

/// Whether the process `pid` with start token `token` is alive (not a
/// zombie): the same PID with another start token is another process.
pub fn alive(pid: u32, token: u64) -> bool {
    stat_of(pid).is_some_and(|stat| !stat.zombie && stat.start_token == token)
}

/// Signals the whole group, then waits up to `within` for it to be gone.
pub fn signal_group(pgid: u32, signal: Signal, within: Duration) -> bool {
    if let Some(pid) = Pid::from_raw(pgid as i32) {
        let _ = kill_process_group(pid, signal);
    }
    let deadline = Instant::now() + within;
    loop {
        if live_members(pgid).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `request` in `root`'s directory, in a new process group. The result
/// is the captured output whenever the command started (its exit status,
/// timeout and teardown are in the facts); `Err` only when it could not start.
pub fn run(root: &SealedRoot, request: &ProcessRequest) -> Produced<Ran> {
    let (program, flag) = match request.tool.as_str() {
        "bash" => ("bash", "-c"),
        "python" => ("python3", "-c"),
        other => return Produced::not_run(format!("no process producer for {other:?}")),
    };
    // The child changes into the root through its own copy of the root's
    // descriptor (it is inherited until exec), so no path is resolved again.
    let cwd = format!("/proc/self/fd/{}", root.dir().as_raw_fd());
    let spawned = Command::new(program)
        .arg(flag)
        .arg(&request.script)
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(error) => return Produced::not_run(format!("cannot start {program}: {error}")),
    };
    let pid = child.id();
    let start_token = start_token(pid).unwrap_or(0);
    let (done, finished) = mpsc::channel();
    let mut child = child;
    let stdout = capture(child.stdout.take().expect("piped"), request.output_cap, done.clone());
    let stderr = capture(child.stderr.take().expect("piped"), request.output_cap, done);
    // A waiter thread reaps the leader, so the exit is seen at once (no polling).
    let (exited, status) = mpsc::channel();
    thread::spawn(move || {
        let _ = exited.send(child.wait().ok());
    });
    let (status, timed_out, teardown_dead) = match status.recv_timeout(request.timeout) {
        Ok(status) => (status, false, None),
        Err(_) => {
            let gone = signal_group(pid, Signal::TERM, request.grace)
                || signal_group(pid, Signal::KILL, Duration::from_secs(2));
            (status.recv_timeout(Duration::from_secs(2)).ok().flatten(), true, Some(gone))
        }
    };
    // Give the readers a moment to drain what the group wrote; a survivor
    // holding a pipe open must not hold the call.
    for _ in 0..2 {
        let _ = finished.recv_timeout(Duration::from_millis(200));
    }
    let take = |shared: &Arc<Mutex<Capture>>| {
        let capture = shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        (capture.bytes.clone(), capture.truncated)
    };
    let ((stdout, out_cut), (stderr, err_cut)) = (take(&stdout), take(&stderr));
    let exit_code = status.and_then(|s| s.code());
    let facts = ProducerFacts {
        executed: true,
        exit_code: if timed_out { None } else { exit_code },
        timed_out,
        teardown_dead,
        ..ProducerFacts::default()
    };
    let ran = Ran {
        pid,
        start_token,
        stdout,
        stderr,
        truncated: out_cut || err_cut,
        signal: status.and_then(|s| s.signal()),
    };
    Produced { facts, result: Ok(ran) }
}
