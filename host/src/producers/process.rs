//! The reference process producer for `bash` and `python` (SPEC section 6,
//! the launch row; TRU-1; PROC-1, PROC-2): run a command in the sealed root's
//! directory under its supervisor (`supervisor.rs`: a child subreaper leading
//! a new process group), held at a gate until the caller has made its
//! identity durable, under a timeout, capturing output up to a bound.
//!
//! When the command exits, its timeout fires or its [`CancelToken`] is
//! raised, everything it left running
//! is torn down (SIGTERM, a grace period, then SIGKILL), `setsid` and double
//! forks included, and the facts say whether `/proc` shows every descendant
//! gone (`teardown_dead`); survivors are named in the result, never called
//! gone.
//!
//! The supervisor's identity carries its start token (`/proc/PID/stat` field
//! 22, clock ticks since boot), so a reused PID is a different process
//! (ID-2).
//!
//! `effects session` runs `bash` and `python` steps through it, classified by
//! `classify-process`. Background launches run through `job.rs` instead.

use std::io::Read;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::identity::SealedRoot;
use crate::model::ProducerFacts;

use super::Produced;
use super::confine::Jail;
use super::supervisor::{self, Leader};

/// How to run one command.
#[derive(Debug, Clone)]
pub struct ProcessRequest {
    /// The interpreter: `bash` runs `bash -c SCRIPT`, `python` runs `python3 -c SCRIPT`.
    pub tool: String,
    /// The command text.
    pub script: String,
    /// When to tear the command's processes down.
    pub timeout: Duration,
    /// How long processes get between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Largest stdout and stderr kept, each, in bytes.
    pub output_cap: usize,
    /// Cancels the command while it runs: torn down like a timeout, its
    /// facts say `cancelled` (an embedding runtime's
    /// `notifications/cancelled`).
    pub cancel: Option<CancelToken>,
}

/// A flag another thread raises to cancel a running command; clones share it.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// Asks the command to stop: its processes are torn down within one
    /// polling slice ([`CANCEL_POLL`]).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How often a cancellable command's waiter looks at its token.
pub const CANCEL_POLL: Duration = Duration::from_millis(20);

impl ProcessRequest {
    /// A request with a 2 s grace period and 1 MiB of output each.
    pub fn new(tool: &str, script: &str, timeout: Duration) -> Self {
        Self {
            tool: tool.to_owned(),
            script: script.to_owned(),
            timeout,
            grace: Duration::from_secs(2),
            output_cap: 1 << 20,
            cancel: None,
        }
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The supervisor's PID (the process group id too).
    pub pid: u32,
    /// Its start token (`/proc/PID/stat` field 22).
    pub start_token: u64,
    /// Captured standard output: all of it within the cap, else its head
    /// and its tail with a marker line between them.
    pub stdout: Vec<u8>,
    /// Captured standard error, the same way.
    pub stderr: Vec<u8>,
    /// Output beyond the cap was dropped from the middle of a stream.
    pub truncated: bool,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    /// Processes of the command still alive after its teardown (PROC-1):
    /// empty when every one is known gone.
    pub survivors: Vec<u32>,
}

/// Output read from one pipe within a cap: its head and its tail, half the
/// cap each, since a failure's cause is usually at the end (a test run's
/// summary, a compiler's last error) and its context at the start. What is
/// between them is drained, counted and dropped.
#[derive(Default)]
struct Capture {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    omitted: u64,
}

impl Capture {
    fn push(&mut self, mut bytes: &[u8], cap: usize) {
        let half = cap / 2;
        let room = half.saturating_sub(self.head.len());
        let (head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(head);
        bytes = rest;
        let keep = cap - half;
        self.tail.extend(bytes);
        let excess = self.tail.len().saturating_sub(keep);
        self.tail.drain(..excess);
        self.omitted += excess as u64;
    }

    /// The bytes kept, with a marker line where some were dropped, and
    /// whether any were.
    fn take(&self) -> (Vec<u8>, bool) {
        let mut bytes = self.head.clone();
        if self.omitted > 0 {
            bytes.extend_from_slice(format!("\n[... {} bytes omitted ...]\n", self.omitted).as_bytes());
        }
        bytes.extend(self.tail.iter());
        (bytes, self.omitted > 0)
    }
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
            capture.push(&buffer[..n], cap);
        }
        let _ = done.send(());
    });
    shared
}

/// A command started under its supervisor and held at its gate: nothing of
/// it has run yet. [`Pending::run`] opens the gate; dropping it unrun means
/// the command never runs (the supervisor is torn down and reaped).
pub struct Pending {
    supervised: Option<supervisor::Supervised>,
    /// Its confinement (ID-6): the private temporary directory lives until
    /// the command is over.
    _jail: Option<Jail>,
    request: ProcessRequest,
    stdout: Arc<Mutex<Capture>>,
    stderr: Arc<Mutex<Capture>>,
    finished: mpsc::Receiver<()>,
    status: mpsc::Receiver<Option<i32>>,
}

/// Starts `request` in `root`'s directory under its supervisor
/// (`supervisor.rs`), held at its gate: the caller makes [`Pending::leader`]
/// durable (PROC-2), then calls [`Pending::run`]. Confined by `jail` when
/// one is given (ID-6; its temporary directory is removed once the command
/// is over). `Err` when it could not start, or not be confined.
pub fn start(root: &SealedRoot, request: &ProcessRequest, jail: Option<Jail>) -> Result<Pending, String> {
    let mut supervised = supervisor::spawn(
        root,
        &request.tool,
        &request.script,
        supervisor::Mode::Foreground,
        Stdio::piped(),
        Stdio::piped(),
        jail.as_ref(),
    )
    .map_err(|error| format!("cannot start {}: {error}", request.tool))?;
    let (done, finished) = mpsc::channel();
    let stdout = capture(supervised.child.stdout.take().expect("piped"), request.output_cap, done.clone());
    let stderr = capture(supervised.child.stderr.take().expect("piped"), request.output_cap, done);
    let status = match supervised.status() {
        Ok(status) => status,
        Err(error) => {
            supervised.abandon();
            return Err(format!("cannot watch {}: {error}", request.tool));
        }
    };
    Ok(Pending {
        supervised: Some(supervised),
        _jail: jail,
        request: request.clone(),
        stdout,
        stderr,
        finished,
        status,
    })
}

/// Runs `request` in `root`'s directory under its supervisor. `started` is
/// called with the supervisor's identity while it waits at its gate; the
/// command runs only if it returns `Ok` (PROC-2: the caller makes the
/// identity durable there). The result is the captured output whenever the
/// command started (its exit status, timeout and teardown are in the facts);
/// `Err` only when it never ran. Unconfined: the ledger's own commands
/// (`Ledger::run_command`) are confined as its configuration says (ID-6).
pub fn run(
    root: &SealedRoot,
    request: &ProcessRequest,
    started: impl FnOnce(&Leader) -> Result<(), String>,
) -> Produced<Ran> {
    let pending = match start(root, request, None) {
        Ok(pending) => pending,
        Err(error) => return Produced::not_run(error),
    };
    match started(pending.leader()) {
        Ok(()) => pending.run(),
        Err(error) => Produced::not_run(format!("{} was not run: {error}", request.tool)),
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Never run: the supervisor leaves at its closed gate; make sure of it.
        if let Some(supervised) = self.supervised.take() {
            supervised.abandon();
        }
    }
}

impl Pending {
    /// Who the command's processes are (what PROC-2 records).
    pub fn leader(&self) -> &Leader {
        &self.supervised.as_ref().expect("held until run").leader
    }

    /// Opens the gate and runs the command to its end: its exit, or its
    /// timeout; then tears down whatever it left running (PROC-1).
    pub fn run(mut self) -> Produced<Ran> {
        let mut supervised = self.supervised.take().expect("held until run");
        let request = &self.request;
        let leader = supervised.leader.clone();
        if let Err(error) = supervised.open_gate() {
            self.supervised = Some(supervised);
            return Produced::not_run(format!("cannot open the gate of {}: {error}", request.tool));
        }
        let (exit_status, timed_out, cancelled) = self.wait(request);
        // PROC-1: at the leader's exit (or the timeout), whatever it left
        // running is torn down, and only /proc attests that it is gone.
        // A supervisor that ended without reporting a status (killed from
        // outside) took the sight of its tree with it, however much of it
        // /proc still shows as it dies: what is left is torn down and its
        // group swept, but its cleanup is not attested.
        let lost = exit_status.is_none() && !timed_out && !cancelled;
        let torn = supervisor::teardown(&leader.identity, request.grace);
        let attested = torn.is_some() && !lost;
        let mut survivors = torn.unwrap_or_default();
        if !attested {
            survivors.extend(supervisor::sweep_group(&leader.identity));
        }
        // Reap the supervisor (killed by the teardown) on a thread: a survivor
        // that cannot be killed must not hold the call.
        let (reaped, waited) = mpsc::channel();
        let mut child = supervised.child;
        thread::spawn(move || {
            let _ = reaped.send(child.wait().ok());
        });
        let _ = waited.recv_timeout(Duration::from_secs(2));
        // Give the readers a moment to drain what the tree wrote; a survivor
        // holding a pipe open must not hold the call.
        for _ in 0..2 {
            let _ = self.finished.recv_timeout(Duration::from_millis(200));
        }
        let take = |shared: &Arc<Mutex<Capture>>| {
            shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
        };
        let ((stdout, out_cut), (stderr, err_cut)) = (take(&self.stdout), take(&self.stderr));
        // The supervisor reports `$?`: 128 + N when a signal N ended the command.
        let (exit_code, signal) = match exit_status {
            Some(code) if code > 128 => (None, Some(code - 128)),
            other => (other, None),
        };
        let facts = ProducerFacts {
            executed: true,
            exit_code: if timed_out || cancelled { None } else { exit_code },
            timed_out,
            cancelled,
            teardown_dead: (attested || !survivors.is_empty()).then_some(survivors.is_empty()),
            ..ProducerFacts::default()
        };
        let ran = Ran {
            pid: leader.identity.pid,
            start_token: leader.identity.start_token,
            stdout,
            stderr,
            truncated: out_cut || err_cut,
            signal,
            survivors,
        };
        Produced { facts, result: Ok(ran) }
    }

    /// Waits for the supervisor's status until the timeout, looking at the
    /// cancel token every [`CANCEL_POLL`]: `(status, timed_out, cancelled)`.
    /// A status channel that closed without a status is waited out as a
    /// timeout would be (the teardown decides what is left).
    fn wait(&self, request: &ProcessRequest) -> (Option<i32>, bool, bool) {
        let deadline = Instant::now().checked_add(request.timeout);
        loop {
            let left = deadline.map_or(Duration::MAX, |at| at.saturating_duration_since(Instant::now()));
            let slice = match &request.cancel {
                Some(_) => left.min(CANCEL_POLL),
                None => left,
            };
            match self.status.recv_timeout(slice) {
                Ok(status) => return (status, false, false),
                Err(mpsc::RecvTimeoutError::Disconnected) => return (None, true, false),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if request.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
                        return (None, false, true);
                    }
                    if deadline.is_some_and(|at| Instant::now() >= at) {
                        return (None, true, false);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Capture;

    #[test]
    fn a_capture_over_its_cap_keeps_the_head_and_the_tail() {
        let mut capture = Capture::default();
        for chunk in [b"abc".as_slice(), b"defgh", b"ij"] {
            capture.push(chunk, 4);
        }
        let (bytes, cut) = capture.take();
        assert!(cut);
        assert_eq!(String::from_utf8(bytes).unwrap(), "ab\n[... 6 bytes omitted ...]\nij");
        let mut within = Capture::default();
        within.push(b"abcd", 4);
        assert_eq!(within.take(), (b"abcd".to_vec(), false));
    }
}
