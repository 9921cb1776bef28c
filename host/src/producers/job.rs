//! The reference background-job runner for `bash` / `python` launches with
//! `"background": true` and the `bg_job` tool (SPEC section 6, the launch and
//! `bg_job` rows; ID-2 `background_job`).
//!
//! A job is one command started under its supervisor (`supervisor.rs`: a
//! child subreaper leading a new process group) and left running; its **job
//! record** lives in the data dir's `effects/jobs/` (control plane, never
//! reachable from a tool path):
//!
//! - `job-<generation>.json`: who it is (pid, start token, launch claim),
//!   written durably once the process exists;
//! - `job-<generation>.exit`: the supervisor's standard output, to which it
//!   prints the command's exit status when the command ends, and `end` once
//!   nothing the command started is alive (the command's own
//!   output goes to `job-<generation>.out`; confined (ID-6), the command
//!   cannot open either for writing, even through `/proc/PID/fd`; unconfined,
//!   a same-user command could, and its decision discloses that);
//! - `job-<generation>.killed`: written (durably) before a kill signals the
//!   group.
//!
//! **The gate.** The supervisor waits for one line on its standard input
//! before it runs the command. The launcher writes it only once the job's
//! processes (PROC-2) and the launch's RUNNING outcome are durable
//! ([`Gate::open`]); if the launcher dies first (and another process then
//! recovers the claim as INTERRUPTED), or either record is refused, the
//! socket closes unopened and the command never runs. So a command runs only
//! under a RUNNING launch the ledger can settle, never behind a claim that is
//! already settled.
//!
//! **Lifecycle**, read from those facts alone, in any process: while the
//! supervisor is alive (same PID and start token, not a zombie; it stays
//! while anything the command started lives, since it is their subreaper) or
//! any process of its group is, the job is RUNNING, whatever its files say (a
//! command can write into them). Once all of it is gone: an exit line
//! followed by `end` means EXITED (the supervisor, their subreaper, saw
//! everything the command started gone); a kill marker (written only after
//! a teardown that attested the whole tree gone) means KILLED; anything
//! else means LOST (it died without a word, e.g. killed from outside, by a
//! crash, or by a process of its own that left the group first), which
//! attests no cleanup: a process that left the group and outlived the
//! supervisor is not seen.
//! Nothing here needs the process that launched the job to be alive.
//!
//! The exit and output files are not fsynced: after a machine crash a job
//! reads as LOST (and its launch INTERRUPTED), never as finished. Output is
//! capped at [`OUTPUT_CAP`] bytes; the rest is drained and dropped.

use std::time::Duration;

use cap_std::fs::{Dir, DirBuilder, OpenOptions};
use serde::{Deserialize, Serialize};

use crate::data_dir::DataDir;
use crate::identity::SealedRoot;
use crate::log::{LogError, Position, durable};
use crate::model::{JobLifecycle, ProducerFacts};

use super::Produced;
use super::confine::{Jail, PrivateTmp};
use super::process::ProcessRequest;
use super::supervisor::{self, Gate, Leader};
use crate::procfs::{ProcessIdentity, alive, live_members};

/// Most bytes of a job's output kept in its output file.
pub const OUTPUT_CAP: u64 = 1 << 20;

/// Who a job is (written once, when it has started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    /// The job id (`job-<generation>`).
    pub job_id: String,
    /// Its launch generation (LOG-8).
    pub generation: u64,
    /// The claim of its launch.
    pub launch_claim: Position,
    /// The run that launched it, and that run's lineage.
    pub run_id: String,
    /// The root run whose log holds the launch claim.
    pub lineage: String,
    /// The request that launched it.
    pub request_id: String,
    /// `bash` or `python`.
    pub tool: String,
    /// The command text.
    pub command: String,
    /// The supervisor's PID, which is also the process group id.
    pub pid: u32,
    /// Its start token (`/proc/PID/stat` field 22): a reused PID is not it.
    pub start_token: u64,
    /// Its jail's private temporary directory, when it was confined: removed
    /// once the job is found over with nothing of it alive
    /// ([`JobRecord::release`]). Absent from records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<Box<PrivateTmp>>,
}

impl JobRecord {
    /// Removes the job's private temporary directory, if it has one
    /// ([`PrivateTmp::remove`]): only once nothing of the job is alive
    /// ([`JobStatus::all_gone`], or a teardown that attested it). A failure
    /// is logged, not answered: the directory is the job's scratch, not
    /// evidence the ledger reads.
    pub fn release(&self) {
        if let Some(tmp) = &self.tmp
            && let Err(error) = tmp.remove()
        {
            tracing::warn!(job = %self.job_id, "the job's temporary directory was not removed: {error}");
        }
    }

    /// Tears down a job whose gate was dropped unopened (its command never
    /// ran) and, once that teardown attests nothing is left, releases it.
    /// True when nothing is left.
    pub fn abandon(&self, leader: &Leader) -> bool {
        let gone = supervisor::teardown(&leader.identity, Duration::ZERO).is_some_and(|left| left.is_empty());
        if gone {
            self.release();
        }
        gone
    }
}

/// A job's lifecycle as read from its record (OUT-2's job facts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStatus {
    /// Running, exited, killed or lost.
    pub state: JobLifecycle,
    /// The command's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// No process of the job's group is alive.
    pub group_gone: bool,
}

impl JobStatus {
    /// Whether the job is over with its whole tree known gone: it exited
    /// (its supervisor, their subreaper, outlived everything it started) or
    /// was killed by a teardown that attested nothing left, and its group
    /// is empty. A LOST job attests nothing, so what it left is left alone.
    pub fn all_gone(&self) -> bool {
        matches!(self.state, JobLifecycle::Exited | JobLifecycle::Killed) && self.group_gone
    }

    /// The typed facts a job read or kill reports: the job's lifecycle, its
    /// exit status, and (once it is over) whether its whole group is gone.
    /// A LOST job's supervisor ended without a word, so it attests nothing
    /// (PROC-1): its group being empty says nothing of a process that left
    /// the group (`setsid`) and outlived its subreaper, so whether all of it
    /// is dead is unknown, never yes.
    pub fn facts(&self, job_id: &str) -> ProducerFacts {
        let teardown_dead = match self.state {
            JobLifecycle::Running | JobLifecycle::Lost => None,
            JobLifecycle::Exited | JobLifecycle::Killed => Some(self.group_gone),
        };
        ProducerFacts {
            executed: true,
            exit_code: self.exit_code,
            teardown_dead,
            background_job_id: Some(job_id.to_owned()),
            job_state: Some(self.state),
            ..ProducerFacts::default()
        }
    }
}

/// The status in a job's exit file, if it is whole: `<status>\nend\n`.
fn exit_status(bytes: &[u8]) -> Option<i32> {
    let (status, rest) = std::str::from_utf8(bytes).ok()?.split_once('\n')?;
    (rest == "end\n").then(|| status.parse().ok())?
}

/// The job id of a launch generation.
pub fn job_id(generation: u64) -> String {
    format!("job-{generation}")
}

/// The generation a job id names, if it is one (`job-<digits>`).
pub fn generation_of(job_id: &str) -> Option<u64> {
    let digits = job_id.strip_prefix("job-")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// The live processes of the job's group. Linux does not reuse a PID while
/// a group of that id exists, so members of the group are the job's, unless
/// the group is led by another process with that PID (the job's group died
/// out and the PID was reused): then none are, and none may be signalled.
fn group(job: &JobRecord) -> Vec<u32> {
    let members = live_members(job.pid);
    if members.contains(&job.pid) && !alive(job.pid, job.start_token) { Vec::new() } else { members }
}

/// The jobs directory, `effects/jobs/` (mode `0700`).
pub struct Jobs {
    dir: Dir,
    display: String,
}

impl Jobs {
    /// Opens (creating if missing) the jobs directory beneath `effects_dir`.
    pub fn open(effects_dir: &Dir, effects_display: &str) -> Result<Self, LogError> {
        let jobs = DataDir::JOBS;
        let display = format!("{effects_display}/{jobs}");
        let io = |operation| {
            let path = display.clone();
            move |source| LogError::Io { path, operation, source }
        };
        let mut builder = DirBuilder::new();
        cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match effects_dir.create_dir_with(jobs, &builder) {
            Ok(()) => durable::sync_dir(effects_dir, effects_display)?,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(io("create directory")(error)),
        }
        let dir = effects_dir.open_dir(jobs).map_err(io("open directory"))?;
        Ok(Self { dir, display })
    }

    fn create(&self, name: &str) -> Result<std::fs::File, LogError> {
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        cap_std::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = self.dir.open_with(name, &options).map_err(|source| LogError::Io {
            path: format!("{}/{name}", self.display),
            operation: "create",
            source,
        })?;
        Ok(file.into_std())
    }

    /// Starts the supervisor of `request` as background job `generation` of
    /// the launch claimed at `launch_claim`, held at its gate. The result is
    /// the job record, the gate and the supervisor's identity (PROC-2);
    /// `Err` when the supervisor could not be started or its record could not
    /// be written (then it is torn down again and the command never ran).
    ///
    /// Confined by `jail` when one is given (ID-6); its temporary directory
    /// is left behind, since the job outlives this call.
    pub fn launch(
        &self,
        root: &SealedRoot,
        request: &ProcessRequest,
        generation: u64,
        launch: (Position, &str, &str, &str),
        jail: Option<Jail>,
    ) -> Produced<(JobRecord, Gate, Leader)> {
        let (launch_claim, run_id, lineage, request_id) = launch;
        let id = job_id(generation);
        let files = self
            .create(&format!("{id}.exit"))
            .and_then(|exit| Ok((exit, self.create(&format!("{id}.out"))?)));
        let (exit, out) = match files {
            Ok(files) => files,
            Err(error) => return Produced::not_run(format!("cannot prepare job {id}: {error}")),
        };
        let mode = supervisor::Mode::Job { output_cap: OUTPUT_CAP };
        let spawned = supervisor::spawn(
            root,
            &request.tool,
            &request.script,
            mode,
            exit.into(),
            out.into(),
            jail.as_ref(),
        )
        .and_then(|supervised| supervised.gate().map(|gate| (supervised, gate)));
        let tmp = match (&spawned, jail) {
            (Ok(_), Some(jail)) => jail.keep().map(Box::new),
            _ => None, // a jail dropped removes its directory
        };
        let (supervised, gate) = match spawned {
            Ok(spawned) => spawned,
            Err(error) => return Produced::not_run(format!("cannot start {}: {error}", request.tool)),
        };
        let leader = supervised.leader.clone();
        let pid = leader.identity.pid;
        let mut child = supervised.child;
        let record = JobRecord {
            job_id: id.clone(),
            generation,
            launch_claim,
            run_id: run_id.to_owned(),
            lineage: lineage.to_owned(),
            request_id: request_id.to_owned(),
            tool: request.tool.clone(),
            command: request.script.clone(),
            pid,
            start_token: leader.identity.start_token,
            tmp,
        };
        // Reap the supervisor while this process lives; after that, init does.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        let mut bytes = serde_json::to_vec(&record).expect("a job record serializes");
        bytes.push(b'\n');
        if let Err(error) = durable::replace(&self.dir, &self.display, &format!("{id}.json"), &bytes) {
            drop(gate); // the command never runs
            let gone = record.abandon(&leader);
            let facts = ProducerFacts {
                executed: true,
                exit_code: Some(1),
                teardown_dead: Some(gone),
                ..ProducerFacts::default()
            };
            return Produced {
                facts,
                result: Err(format!("job {id} started but its record was not written ({error}); torn down")),
            };
        }
        let facts = ProducerFacts { executed: true, background_job_id: Some(id), ..ProducerFacts::default() };
        Produced { facts, result: Ok((record, gate, leader)) }
    }

    /// The record of `job_id`; `Ok(None)` when there is no such job.
    pub fn find(&self, job_id: &str) -> Result<Option<JobRecord>, LogError> {
        let name = format!("{job_id}.json");
        let Some(bytes) = durable::read(&self.dir, &self.display, &name)? else { return Ok(None) };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| LogError::Refused {
            path: format!("{}/{name}", self.display),
            reason: format!("not a job record: {e}"),
        })
    }

    /// The command's exit status, once the supervisor said `end` after it:
    /// nothing the command started is alive. A status alone (the command
    /// ended, its tree had not, and the supervisor did not live to see it
    /// gone) or a line still being written is none.
    fn exit_code(&self, job: &JobRecord) -> Result<Option<i32>, LogError> {
        let bytes = durable::read(&self.dir, &self.display, &format!("{}.exit", job.job_id))?;
        Ok(bytes.and_then(|bytes| exit_status(&bytes)))
    }

    fn killed(&self, job: &JobRecord) -> bool {
        self.dir.exists(format!("{}.killed", job.job_id))
    }

    /// The job's lifecycle, read from its record and `/proc` (see the module
    /// doc: RUNNING while anything of its group lives).
    pub fn status(&self, job: &JobRecord) -> Result<JobStatus, LogError> {
        if alive(job.pid, job.start_token) || !group(job).is_empty() {
            return Ok(JobStatus { state: JobLifecycle::Running, exit_code: None, group_gone: false });
        }
        let (state, exit_code) = match self.exit_code(job)? {
            Some(code) => (JobLifecycle::Exited, Some(code)),
            None if self.killed(job) => (JobLifecycle::Killed, None),
            None => (JobLifecycle::Lost, None),
        };
        Ok(JobStatus { state, exit_code, group_gone: true })
    }

    /// Kills the job's whole tree if anything of it is alive: every
    /// descendant of its supervisor gets SIGTERM, `grace`, SIGKILL (PROC-1),
    /// the supervisor and whatever is left of its group are killed, and only
    /// then, when that teardown attests nothing is left, the kill marker is
    /// written durably (so the job reads KILLED; else LOST). Returns its
    /// lifecycle afterwards; a job that already ended keeps its own end (the
    /// launch then settles by how it really ended).
    pub fn kill(&self, job: &JobRecord, grace: Duration) -> Result<JobStatus, LogError> {
        let supervisor = ProcessIdentity {
            pid: job.pid,
            start_token: job.start_token,
            boot_id: crate::procfs::boot_id().to_owned(),
        };
        if alive(job.pid, job.start_token) || !group(job).is_empty() {
            let left = supervisor::teardown(&supervisor, grace);
            supervisor::sweep_group(&supervisor);
            // KILLED says the whole tree is gone: only a teardown the
            // supervisor stayed stopped through, that left nothing, attests
            // it (PROC-1). Otherwise (it was already gone, a descendant
            // killed it mid-walk, something survived) the job reads LOST,
            // whose cleanup is unknown. Written after the teardown, so a
            // reader that finds the job gone mid-kill reads LOST: never more
            // than is known.
            if left.is_some_and(|left| left.is_empty()) && self.exit_code(job)?.is_none() {
                durable::replace(&self.dir, &self.display, &format!("{}.killed", job.job_id), b"killed\n")?;
            }
        }
        self.status(job)
    }

    /// The last `cap` bytes of the job's output so far (read from there: the
    /// file itself is capped at [`OUTPUT_CAP`]). Opened like every store
    /// file: never through a symlink, never a FIFO or device (`O_NONBLOCK` to
    /// look, so nothing planted there can hang the caller), and only with
    /// exactly one name (ID-4); anything else reads as no output.
    pub fn output(&self, job: &JobRecord, cap: u64) -> String {
        use rustix::fs::{FileType, Mode, OFlags};
        use std::io::{Read, Seek, SeekFrom};
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let Ok(fd) = rustix::fs::openat(&self.dir, format!("{}.out", job.job_id), flags, Mode::empty())
        else {
            return String::new();
        };
        let Ok(stat) = rustix::fs::fstat(&fd) else { return String::new() };
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
            return String::new();
        }
        let mut file = std::fs::File::from(fd);
        let length = stat.st_size as u64;
        let mut tail = Vec::new();
        let read = file
            .seek(SeekFrom::Start(length.saturating_sub(cap)))
            .and_then(|_| file.take(cap).read_to_end(&mut tail));
        if read.is_err() {
            return String::new();
        }
        String::from_utf8_lossy(&tail).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_exited_only_once_its_supervisor_said_end_after_the_status() {
        assert_eq!(exit_status(b"0\nend\n"), Some(0));
        assert_eq!(exit_status(b"3\nend\n"), Some(3));
        assert_eq!(exit_status(b"0\n"), None, "the command ended, its tree was not seen gone");
        assert_eq!(exit_status(b"0\nen"), None, "still being written");
        assert_eq!(exit_status(b"0\nend\nend\n"), None);
        assert_eq!(exit_status(b"x\nend\n"), None);
        assert_eq!(exit_status(b""), None);
    }
}
