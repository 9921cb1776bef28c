//! The supervisor: how a command's processes stay its own (PROC-1, PROC-2).
//!
//! Every command (`bash` / `python`, in the foreground or as a background
//! job, and designated checks) runs as the child of a small shell wrapper,
//! the **supervisor**, which leads the command's process group and is made a
//! *child subreaper* (`PR_SET_CHILD_SUBREAPER`, set before `exec` and kept
//! across it): whatever the command starts, `setsid` and double forks
//! included, stays beneath it, because an orphan is re-parented to its
//! nearest subreaper ancestor, not to init. The supervisor's identity (PID,
//! start token, group, session) is therefore the identity of all of the
//! command's processes, and it is what PROC-2 makes durable.
//!
//! Protocol, over one socket pair on the supervisor's standard input:
//!
//! 0. **confinement** (ID-6, `confine.rs`), only when a jail is given: the
//!    `effects-supervisor` helper restricts itself with Landlock and writes
//!    `confined` (or why not, and exits); [`spawn`] returns only after it.
//! 1. **gate**: the supervisor waits for the line `go`. The caller writes it
//!    only once the identity is durable in the log; if the caller dies or
//!    refuses first, the socket closes and the command never runs.
//! 2. the command runs with `/dev/null` as its input, so it cannot reach the
//!    socket; in the foreground its output is the supervisor's, and its exit
//!    status comes back as one line on the socket; a job's output goes to
//!    its files and its status to the supervisor's standard output.
//! 3. **teardown** ([`teardown`]): the supervisor is stopped (so it forks
//!    nothing more, yet orphans still land beneath it), every live descendant
//!    gets SIGTERM and SIGCONT, then after a grace period SIGKILL, until
//!    `/proc` shows none; then the supervisor itself is killed. What
//!    survived is named, never called gone.
//!
//! If the caller dies while the command runs, the supervisor stays while it
//! has children, so the next process that recovers the claim finds the whole
//! tree beneath the recorded identity (`executor.rs`), and exits once the
//! tree is empty.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

use super::confine::Jail;
use crate::identity::SealedRoot;
use crate::procfs::{self, ProcessIdentity};

/// The supervisor's script for a foreground command, POSIX `sh` (it starts
/// faster than `bash`, and every command pays for it): the command's status
/// comes back on the socket. The status write to a closed socket (its
/// caller died) must not kill the supervisor, so it happens in a subshell
/// ignoring SIGPIPE; the command itself keeps the default disposition.
const FOREGROUND: &str = r#"IFS= read -r gate && [ "$gate" = go ] || exit 125
"$@" </dev/null
status=$?
(trap '' PIPE; printf '%s\n' "$status" >&0) 2>/dev/null
IFS= read -r _
while :; do kids=; read -r kids </proc/$$/task/$$/children; [ -n "$kids" ] || exit 0; sleep 0.1; done"#;

/// The supervisor's script for a background job (`bash`, for `PIPESTATUS`):
/// the output capped into its standard error, the status on its standard
/// output; then it stays while anything the command started lives, and
/// says `end` on its standard output once nothing does: only then has the
/// job exited (`job.rs`). A supervisor killed before that (by a process of
/// the job that left its group, or from outside) leaves no `end`, and the
/// job reads LOST, which attests nothing of what it left alive.
const JOB: &str = r#"IFS= read -r gate && [ "$gate" = go ] || exit 125
"$@" </dev/null 2>&1 | { head -c "$EFFECTS_JOB_OUTPUT_CAP"; cat >/dev/null; } >&2
printf '%s\n' "${PIPESTATUS[0]}"
IFS= read -r _
while :; do kids=; read -r kids </proc/$$/task/$$/children; [ -n "$kids" ] || break; sleep 0.1; done
printf 'end\n'"#;

/// How the command's output and status travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Output on the supervisor's stdout and stderr, status on the socket.
    Foreground,
    /// Output (capped at this many bytes) on the supervisor's stderr, status
    /// on its stdout.
    Job {
        /// Most bytes of output kept.
        output_cap: u64,
    },
}

/// The identity PROC-2 records before the command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The supervisor.
    pub identity: ProcessIdentity,
    /// Its process group (its own PID).
    pub group: u32,
    /// Its session.
    pub session: u32,
}

/// A started supervisor, held at its gate.
#[derive(Debug)]
pub struct Supervised {
    /// The supervisor process (the caller reaps it).
    pub child: Child,
    /// Who it is.
    pub leader: Leader,
    control: UnixStream,
}

/// The caller's end of a supervisor's gate: [`Gate::open`] lets the command
/// run; dropping it unopened means it never will.
#[derive(Debug)]
pub struct Gate(UnixStream);

impl Gate {
    /// Lets the command run. Call only once its identity is durable.
    pub fn open(mut self) -> std::io::Result<()> {
        self.0.write_all(b"go\n")
    }
}

/// The `effects-supervisor` helper beside the running executable (or beside
/// its directory, where test binaries live), if there is one.
fn helper() -> Option<&'static std::path::Path> {
    static HELPER: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    HELPER
        .get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            let dir = exe.parent()?;
            [dir, dir.parent()?]
                .into_iter()
                .map(|d| d.join("effects-supervisor"))
                .find(|candidate| candidate.is_file())
        })
        .as_deref()
}

/// The `effects-supervisor` helper is installed: only it can confine a
/// command (ID-6, `confine.rs`).
pub(crate) fn has_helper() -> bool {
    helper().is_some()
}

/// Where the `effects-supervisor` helper is, for the check that commands
/// cannot replace it (ID-6, `confine.rs`).
pub(crate) fn helper_path() -> Option<std::path::PathBuf> {
    helper().map(std::path::Path::to_path_buf)
}

/// The interpreter and flag of a process tool.
pub fn interpreter(tool: &str) -> Option<(&'static str, &'static str)> {
    match tool {
        "bash" => Some(("bash", "-c")),
        "python" => Some(("python3", "-c")),
        _ => None,
    }
}

/// Starts the supervisor of `tool`'s `script` in `root`'s directory, in a new
/// process group, held at its gate; confined by `jail` when one is given
/// (ID-6): then it returns only once the supervisor has said it is confined,
/// and `Err` when it could not be (it exited before its gate: the command
/// never ran).
pub fn spawn(
    root: &SealedRoot,
    tool: &str,
    script: &str,
    mode: Mode,
    stdout: Stdio,
    stderr: Stdio,
    jail: Option<&Jail>,
) -> std::io::Result<Supervised> {
    let (program, flag) = interpreter(tool).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("no process producer for {tool:?}"))
    })?;
    let (control, theirs) = UnixStream::pair()?;
    // The child changes into the root through its own copy of the root's
    // descriptor (it is inherited until exec), so no path is resolved again.
    let cwd = format!("/proc/self/fd/{}", root.dir().as_raw_fd());
    let (shell, script_text) = match mode {
        Mode::Foreground => ("sh", FOREGROUND),
        Mode::Job { .. } => ("bash", JOB),
    };
    let helper = helper();
    let mut command = match (helper, jail) {
        (Some(helper), jail) => {
            let mut command = Command::new(helper);
            if let Some(jail) = jail {
                command.args(jail.args()).env("TMPDIR", jail.tmp());
            }
            command.arg(shell);
            command
        }
        (None, None) => Command::new(shell),
        (None, Some(_)) => {
            return Err(std::io::Error::other("no effects-supervisor to confine the command (ID-6)"));
        }
    };
    command.args(["-c", script_text]);
    crate::data_dir::withhold_store(&mut command);
    if let Mode::Job { output_cap } = mode {
        command.env("EFFECTS_JOB_OUTPUT_CAP", output_cap.to_string());
    }
    command
        .args(["effects-supervisor", program, flag, script])
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(stdout)
        .stderr(stderr);
    // PROC-1: orphans of the command are re-parented to the supervisor, not
    // to init. The helper makes it a subreaper and execs the shell, so the
    // host can use posix_spawn; without it, the child does so itself before
    // exec, which forces a fork of the whole host.
    if helper.is_none() {
        // SAFETY: the closure only makes one system call (prctl), which is
        // async-signal-safe, and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                rustix::process::set_child_subreaper(Some(Pid::INIT)).map_err(std::io::Error::from)
            });
        }
    }
    let mut child = command.spawn()?;
    if jail.is_some()
        && let Err(error) = confined(&control)
    {
        let _ = child.kill();
        let _ = child.wait();
        return Err(error);
    }
    let pid = child.id();
    let stat = procfs::stat_of(pid);
    let leader = Leader {
        identity: ProcessIdentity {
            pid,
            start_token: stat.map_or(0, |s| s.start_token),
            boot_id: procfs::boot_id().to_owned(),
        },
        group: stat.map_or(pid, |s| s.group),
        session: stat.map_or(0, |s| s.session),
    };
    Ok(Supervised { child, leader, control })
}

/// Waits for a confined supervisor's first line: `confined` once its
/// Landlock domain is fully enforced, else why not (it then exits).
fn confined(control: &UnixStream) -> std::io::Result<()> {
    control.set_read_timeout(Some(Duration::from_secs(10)))?;
    // Byte by byte: nothing past this line may be consumed here (the status
    // reader owns the rest of the socket).
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut reader = control;
    while line.len() < 4096 {
        match std::io::Read::read(&mut reader, &mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => line.push(byte[0]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                control.set_read_timeout(None)?;
                return Err(std::io::Error::other(format!(
                    "the supervisor did not say it is confined: {error}"
                )));
            }
        }
    }
    control.set_read_timeout(None)?;
    match String::from_utf8_lossy(&line).as_ref() {
        "confined" => Ok(()),
        "" => Err(std::io::Error::other("the supervisor exited before confining the command (ID-6)")),
        said => Err(std::io::Error::other(format!("the command could not be confined (ID-6): {said}"))),
    }
}

impl Supervised {
    /// The gate, for a caller that opens it later (a background job).
    pub fn gate(&self) -> std::io::Result<Gate> {
        Ok(Gate(self.control.try_clone()?))
    }

    /// Lets the command run (its identity is durable).
    pub fn open_gate(&mut self) -> std::io::Result<()> {
        self.control.write_all(b"go\n")
    }

    /// Abandons a supervisor whose command must never run: tears down what
    /// there is of it and reaps it.
    pub fn abandon(mut self) {
        teardown(&self.leader.identity, Duration::ZERO);
        let _ = self.child.wait();
    }

    /// A thread that delivers the foreground command's exit status (as the
    /// supervisor's `$?` saw it: 128 + N for a signal N) or `None` when the
    /// supervisor died or closed without saying.
    pub fn status(&self) -> std::io::Result<std::sync::mpsc::Receiver<Option<i32>>> {
        let socket = self.control.try_clone()?;
        let (send, receive) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let status =
                BufReader::new(socket).read_line(&mut line).ok().and_then(|_| line.trim().parse().ok());
            let _ = send.send(status);
        });
        Ok(receive)
    }
}

/// Signals one process, ignoring one that is already gone.
fn signal(pid: u32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = kill_process(pid, signal);
    }
}

/// Polls `done` until it holds or `within` has passed, sleeping `first`, then
/// twice as long each time, up to 10 ms. Says whether it held.
fn poll(within: Duration, first: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    let mut pause = first;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// PROC-1 teardown of the tree beneath the supervisor `leader` (nothing is
/// signalled unless it is alive with that identity): stop it, TERM and CONT every descendant,
/// wait up to `grace` for them, SIGKILL what is left (up to two seconds),
/// then kill the supervisor. Returns the PIDs `/proc` still shows beneath it
/// afterwards (empty: every descendant is known gone), or `None` when the
/// supervisor was gone, or did not stay stopped, before the walk ended: then
/// its tree could not be seen whole, and nothing is attested (callers sweep
/// its group, [`sweep_group`]).
pub fn teardown(leader: &ProcessIdentity, grace: Duration) -> Option<Vec<u32>> {
    if !procfs::is_alive(leader) {
        return None;
    }
    let pid = leader.pid;
    // Stopped, the supervisor forks nothing more (its own wait loop) and
    // reaps nothing, yet stays the subreaper every orphan of the tree goes to.
    signal(pid, Signal::STOP);
    // SIGSTOP is delivered asynchronously: wait until it has stopped, so the
    // walk below sees a tree nothing can leave any more.
    let stopped = || procfs::stat_of(pid).is_some_and(|s| s.stopped && s.start_token == leader.start_token);
    if !poll(Duration::from_secs(1), Duration::from_micros(50), || stopped() || !procfs::is_alive(leader))
        || !stopped()
    {
        signal(pid, Signal::KILL);
        return None;
    }
    let remaining = || -> Vec<u32> {
        // Fast path: a subreaper whose children are all zombies has no live
        // descendants, if the list is the same when read again (a child
        // forking and exiting between the reads would change it).
        let first = procfs::children(pid);
        if let Some(children) = &first
            && children.iter().all(|&c| procfs::stat_of(c).is_none_or(|s| s.zombie))
            && procfs::children(pid) == first
        {
            return Vec::new();
        }
        procfs::descendants(pid)
    };
    let mut left = remaining();
    if !left.is_empty() {
        for &p in &left {
            signal(p, Signal::TERM);
            signal(p, Signal::CONT);
        }
        // Most leftovers are already exiting (the status writer, a child
        // killed with its parent): poll soon, then back off.
        poll(grace, Duration::from_micros(250), || {
            left = remaining();
            left.is_empty()
        });
        let deadline = Instant::now() + Duration::from_secs(2);
        while !left.is_empty() {
            for &p in &left {
                signal(p, Signal::KILL);
            }
            if Instant::now() >= deadline {
                break;
            }
            thread::sleep(Duration::from_millis(10));
            left = remaining();
        }
    }
    // The walk saw the whole tree only if the supervisor was its subreaper
    // all along: still this process, still stopped. A descendant that killed
    // it (from a signal handler, say) may have sent a child past it to init.
    let held = stopped();
    signal(pid, Signal::KILL);
    held.then_some(left)
}

/// Kills whatever is left of a process group whose supervisor is gone
/// (recovery after the supervisor itself was killed): Linux does not reuse a
/// PID while a group of that id exists, so its members are the command's,
/// unless another process now has that PID (the group died out and the PID
/// was reused): then none are. Returns the members still alive afterwards.
pub fn sweep_group(leader: &ProcessIdentity) -> Vec<u32> {
    let group = leader.pid;
    let reused = || procfs::identity_of(group).is_some_and(|now| now.start_token != leader.start_token);
    let members = || if reused() { Vec::new() } else { procfs::live_members(group) };
    if members().is_empty() {
        return Vec::new();
    }
    if let Some(pgid) = Pid::from_raw(group as i32) {
        let _ = kill_process_group(pgid, Signal::KILL);
    }
    poll(Duration::from_secs(2), Duration::from_millis(10), || members().is_empty());
    members()
}
