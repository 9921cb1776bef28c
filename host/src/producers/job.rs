//! The reference background-job runner for `bash` / `python` launches with
//! `"background": true` and the `bg_job` tool (SPEC section 6, the launch and
//! `bg_job` rows; ID-2 `background_job`).
//!
//! A job is one command started in its own process group under a small
//! `bash` wrapper and left running; its **job record** lives in the data
//! dir's `effects/jobs/` (control plane, never reachable from a tool path):
//!
//! - `job-<generation>.json`: who it is (pid, start token, launch claim),
//!   written durably once the process exists;
//! - `job-<generation>.exit`: the wrapper's standard output, to which it
//!   prints the command's exit status when the command ends (the command's own
//!   output goes to `job-<generation>.out`, so it cannot write here);
//! - `job-<generation>.killed`: written after a kill tore the group down.
//!
//! Its lifecycle is read from those facts alone, in any process: an exit line
//! means EXITED; a kill marker means KILLED; the leader alive (same PID and
//! start token, not a zombie) means RUNNING; otherwise LOST (it died without a
//! word, e.g. killed from outside or lost to a crash). Nothing here needs the
//! process that launched the job to be alive.

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use cap_std::fs::{Dir, DirBuilder, OpenOptions};
use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use crate::identity::SealedRoot;
use crate::log::{LogError, Position, durable};
use crate::model::{JobLifecycle, ProducerFacts};

use super::Produced;
use super::process::{ProcessRequest, alive, live_members, signal_group, start_token};

/// Prints the command's exit status on its own standard output once the
/// command (`"$@"`, whose output goes to standard error) has ended.
const WRAPPER: &str = r#""$@" </dev/null 1>&2; printf '%s\n' "$?""#;

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
    /// The wrapper's PID, which is also the process group id.
    pub pid: u32,
    /// Its start token (`/proc/PID/stat` field 22): a reused PID is not it.
    pub start_token: u64,
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
    /// The typed facts a job read or kill reports: the job's lifecycle, its
    /// exit status, and (once it is over) whether its whole group is gone.
    pub fn facts(&self, job_id: &str) -> ProducerFacts {
        ProducerFacts {
            executed: true,
            exit_code: self.exit_code,
            teardown_dead: (self.state != JobLifecycle::Running).then_some(self.group_gone),
            background_job_id: Some(job_id.to_owned()),
            job_state: Some(self.state),
            ..ProducerFacts::default()
        }
    }
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
        let display = format!("{effects_display}/jobs");
        let io = |operation| {
            let path = display.clone();
            move |source| LogError::Io { path, operation, source }
        };
        let mut builder = DirBuilder::new();
        cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match effects_dir.create_dir_with("jobs", &builder) {
            Ok(()) => durable::sync_dir(effects_dir, effects_display)?,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(io("create directory")(error)),
        }
        let dir = effects_dir.open_dir("jobs").map_err(io("open directory"))?;
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

    /// Starts `request` as background job `generation` of the launch claimed
    /// at `launch_claim`. The result is the job record; `Err` when the command
    /// could not be started (nothing ran) or its record could not be written
    /// (the job is torn down again, and the facts say whether that worked).
    pub fn launch(
        &self,
        root: &SealedRoot,
        request: &ProcessRequest,
        generation: u64,
        launch: (Position, &str, &str, &str),
    ) -> Produced<JobRecord> {
        let (launch_claim, run_id, lineage, request_id) = launch;
        let (program, flag) = match request.tool.as_str() {
            "bash" => ("bash", "-c"),
            "python" => ("python3", "-c"),
            other => return Produced::not_run(format!("no process producer for {other:?}")),
        };
        let id = job_id(generation);
        let files = self
            .create(&format!("{id}.exit"))
            .and_then(|exit| Ok((exit, self.create(&format!("{id}.out"))?)));
        let (exit, out) = match files {
            Ok(files) => files,
            Err(error) => return Produced::not_run(format!("cannot prepare job {id}: {error}")),
        };
        let cwd = format!("/proc/self/fd/{}", root.dir().as_raw_fd());
        let spawned = Command::new("bash")
            .args(["-c", WRAPPER, "effects-job", program, flag, &request.script])
            .current_dir(cwd)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::from(exit))
            .stderr(Stdio::from(out))
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => return Produced::not_run(format!("cannot start {program}: {error}")),
        };
        let pid = child.id();
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
            start_token: start_token(pid).unwrap_or(0),
        };
        // Reap the wrapper while this process lives; after that, init does.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        let mut bytes = serde_json::to_vec(&record).expect("a job record serializes");
        bytes.push(b'\n');
        if let Err(error) = durable::replace(&self.dir, &self.display, &format!("{id}.json"), &bytes) {
            let gone = signal_group(pid, Signal::KILL, Duration::from_secs(2));
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
        Produced { facts, result: Ok(record) }
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

    fn exit_code(&self, job: &JobRecord) -> Result<Option<i32>, LogError> {
        let bytes = durable::read(&self.dir, &self.display, &format!("{}.exit", job.job_id))?;
        // Only a whole line counts: the wrapper may be mid-write.
        Ok(bytes.and_then(|b| std::str::from_utf8(&b).ok()?.strip_suffix('\n')?.parse().ok()))
    }

    fn killed(&self, job: &JobRecord) -> bool {
        self.dir.exists(format!("{}.killed", job.job_id))
    }

    /// The job's lifecycle, read from its record and `/proc`.
    pub fn status(&self, job: &JobRecord) -> Result<JobStatus, LogError> {
        let group_gone = || group(job).is_empty();
        if let Some(code) = self.exit_code(job)? {
            return Ok(JobStatus {
                state: JobLifecycle::Exited,
                exit_code: Some(code),
                group_gone: group_gone(),
            });
        }
        if self.killed(job) {
            return Ok(JobStatus { state: JobLifecycle::Killed, exit_code: None, group_gone: group_gone() });
        }
        if alive(job.pid, job.start_token) {
            return Ok(JobStatus { state: JobLifecycle::Running, exit_code: None, group_gone: false });
        }
        // It may have printed its status between the first look and now.
        let exit_code = self.exit_code(job)?;
        let state = if exit_code.is_some() { JobLifecycle::Exited } else { JobLifecycle::Lost };
        Ok(JobStatus { state, exit_code, group_gone: group_gone() })
    }

    /// Kills the job's whole group (SIGTERM, `grace`, SIGKILL) if anything of
    /// it is alive, marks it killed when it was still running, and returns
    /// its lifecycle afterwards. A job that already ended keeps its own end.
    pub fn kill(&self, job: &JobRecord, grace: Duration) -> Result<JobStatus, LogError> {
        let before = self.status(job)?;
        if !group(job).is_empty() {
            let _gone = signal_group(job.pid, Signal::TERM, grace)
                || signal_group(job.pid, Signal::KILL, Duration::from_secs(2));
            if before.state == JobLifecycle::Running && self.exit_code(job)?.is_none() {
                durable::replace(&self.dir, &self.display, &format!("{}.killed", job.job_id), b"killed\n")?;
            }
        }
        self.status(job)
    }

    /// The job's captured output so far (at most `cap` bytes of its end).
    pub fn output(&self, job: &JobRecord, cap: usize) -> String {
        let bytes = self.dir.read(format!("{}.out", job.job_id)).unwrap_or_default();
        let tail = &bytes[bytes.len().saturating_sub(cap)..];
        String::from_utf8_lossy(tail).into_owned()
    }
}
