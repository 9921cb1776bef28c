//! Background launches and their jobs in the runtime chain (SPEC section 6,
//! the launch and `bg_job` rows; LOG-8; TRU-1).
//!
//! - A `bash` / `python` call with `"background": true` **reserves** a launch
//!   generation before it is classified; the reservation is bound as the
//!   launch's `process_launch` dependency, and the launch index maps it to the
//!   claim once the claim is durable (on the fleet store, the claim's own
//!   row is the index, written with it). The job is then started by
//!   [`Ledger::launch_job`]; its RUNNING outcome comes from `classify-process`.
//! - A `bg_job` call is bound to exactly one **validated** job: its record
//!   exists, belongs to this run's lineage, and the launch index maps its
//!   generation to the same claim. A read is admitted; a kill claims the job
//!   and its process. Either one settles the launch of exactly that
//!   generation, once the job is over (see [`Ledger::record`]).
//! - The **monitor** ([`Ledger::monitor`]) does a job read of every launch
//!   still RUNNING whose job has ended. Settlement goes through the log's
//!   merged history, so a launch settled by another process or an earlier try
//!   is left as it is: idempotent across retries and processes.

use std::time::Duration;

use crate::log::{
    ClaimState, Framed, LaunchIndex, LogError, Medium, OpenMode, Position, Record, read_launch_index,
    reserve_launch, write_launch_index,
};
use crate::model::{
    Binding, Execution, JobLifecycle, JobLocation, Location, ProcessLocation, ResourceRef, ResourceRole,
};
use crate::producers::Produced;
use crate::producers::job::{JobRecord, JobStatus, Jobs, generation_of, job_id};
use crate::producers::process::ProcessRequest;

use crate::tools::{BgJob, Call, JobAction};

use super::{Bound, Dispatch, Dispatched, Ledger, Run};

/// How a call is tied to a background launch.
#[derive(Debug, Clone)]
pub enum LaunchLink {
    /// A background launch, with the generation it reserved.
    Launch {
        /// The reserved generation.
        generation: u64,
    },
    /// A read or kill of one validated job.
    Job(JobRecord),
}

/// Grace between SIGTERM and SIGKILL when a job is killed.
const KILL_GRACE: Duration = Duration::from_secs(2);

fn launch_ref(generation: u64) -> ResourceRef {
    ResourceRef::new(
        ResourceRole::Dependency,
        Location::ProcessLaunch(generation),
        format!("generation {generation}"),
        None,
    )
}

/// The PID namespace this host sees processes in (ID-2's `namespace`).
#[allow(clippy::disallowed_methods)] // `/proc` is the kernel's view of processes, not a file under a root
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid").map_or_else(|_| "pid:unknown".into(), |p| p.display().to_string())
}

impl Ledger {
    fn jobs(&self) -> Result<Jobs, LogError> {
        self.config.data_dir.jobs()
    }

    /// Reserves a launch for a background command, or binds the job a
    /// `bg_job` call names; `Ok(None)` for every other call. `Err` is the
    /// dispatch answer: a refusal (no such job), or BLOCKED when the
    /// reservation cannot be made durable.
    pub(super) fn link(&mut self, run: &Run, bound: &mut Bound) -> Result<Option<LaunchLink>, Dispatch> {
        if bound.call.is_background() {
            return self.reserve(run, bound).map(Some);
        }
        if let Call::BgJob(job) = &bound.call {
            let job = job.clone();
            return self.validate_job(run, &job, bound).map(Some);
        }
        Ok(None)
    }

    /// A launch generation, reserved (LOG-8) and bound as the launch's
    /// `process_launch` dependency.
    fn reserve(&mut self, run: &Run, bound: &mut Bound) -> Result<LaunchLink, Dispatch> {
        let reserved = self
            .writable_effects()
            .and_then(|(effects, display)| reserve_launch(&effects, &display, &run.id, &run.lineage));
        let generation =
            reserved.map_err(|e| Dispatch::Blocked(format!("the launch could not be reserved: {e}")))?;
        bound.operation.bindings.push(Binding { name: "launch".into(), resource: launch_ref(generation) });
        bound.paths.push(String::new());
        Ok(LaunchLink::Launch { generation })
    }

    /// The one job a `bg_job` call names, validated: its record exists, it
    /// belongs to this run's lineage, and the launch index maps its
    /// generation to the same claim, in the same lineage. Bound as the job
    /// (and, for a kill, its process) plus its launch.
    fn validate_job(&mut self, run: &Run, call: &BgJob, bound: &mut Bound) -> Result<LaunchLink, Dispatch> {
        let refused = |message: String| Dispatch::Refused(message);
        let named = call.job.as_str();
        let generation = generation_of(named).ok_or_else(|| {
            refused(format!("bg_job: {named:?} is not a job id (job ids look like job-<digits>)"))
        })?;
        let job = self
            .jobs()
            .and_then(|jobs| jobs.find(named))
            .map_err(|e| refused(format!("bg_job: job {named} cannot be read: {e}")))?
            .ok_or_else(|| refused(format!("bg_job: no job {named} in this data dir")))?;
        if job.generation != generation {
            return Err(refused(format!(
                "bg_job: the record of job {named} names generation {}",
                job.generation
            )));
        }
        if job.lineage != run.lineage {
            return Err(refused(format!(
                "bg_job: job {named} belongs to another run lineage ({})",
                job.lineage
            )));
        }
        let indexed = self
            .launch_claim(&job.lineage, generation)
            .map_err(|e| refused(format!("bg_job: launch index of {named} cannot be read: {e}")))?;
        let agrees = indexed == Some(job.launch_claim);
        if !agrees {
            return Err(refused(format!(
                "bg_job: job {named} does not match its launch index (LOG-8); it is not a validated job"
            )));
        }
        let kill = call.action == JobAction::Kill;
        let role = if kill { ResourceRole::Target } else { ResourceRole::Source };
        let incarnation = format!("pid {} start {}", job.pid, job.start_token);
        let location = Location::BackgroundJob(JobLocation { job_id: job.job_id.clone(), generation });
        let mut add = |name: &str, resource| {
            bound.operation.bindings.push(Binding { name: name.into(), resource });
            bound.paths.push(String::new());
        };
        add("job", ResourceRef::new(role, location, incarnation.clone(), None));
        if kill {
            let process = ProcessLocation {
                namespace: pid_namespace(),
                owner: self.config.root.root().owner.clone(),
                request: job.request_id.clone(),
                thread: job.run_id.clone(),
                pid: job.pid,
                start_token: job.start_token,
            };
            add(
                "process",
                ResourceRef::new(ResourceRole::Target, Location::Process(process), incarnation, None),
            );
        }
        add("launch", launch_ref(generation));
        Ok(LaunchLink::Job(job))
    }

    /// LOG-8: the claim in `lineage` that launched `generation`. On the
    /// fleet store, the claim's own row says so; on the local log, the index
    /// entry in the effects directory, if it names this lineage.
    fn launch_claim(&mut self, lineage: &str, generation: u64) -> Result<Option<Position>, LogError> {
        if self.config.data_dir.on_server() {
            let Some(log) = self.log(lineage, false)? else { return Ok(None) };
            if let Medium::Server(store) = log.storage() {
                return store.launch_claim(generation).map_err(|source| LogError::Io {
                    path: log.path().to_owned(),
                    operation: "read the launch index",
                    source,
                });
            }
        }
        let Some((effects, display)) = self.effects(OpenMode::ReadOnly)? else { return Ok(None) };
        let index = read_launch_index(&effects, &display, generation)?;
        Ok(index.filter(|index| index.lineage == lineage).and_then(|index| index.claim))
    }

    /// LOG-8: once a launch's claim is durable, the index maps its
    /// generation to the claim. On the fleet store the claim's own row is
    /// the index (`PgStore::launch_claim`): nothing more to write.
    pub(super) fn index_launch(&self, run: &Run, generation: u64, claim: Position) -> Result<(), LogError> {
        if self.config.data_dir.on_server() {
            return Ok(());
        }
        let (effects, display) = self.writable_effects()?;
        let index = LaunchIndex {
            generation,
            claim: Some(claim),
            run_id: run.id.clone(),
            lineage: run.lineage.clone(),
        };
        write_launch_index(&effects, &display, &index)
    }

    /// Starts a dispatched background launch as a job. The facts name the job
    /// it started; the result is its id, for the agent.
    pub fn launch_job(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        request: &ProcessRequest,
    ) -> Produced<String> {
        let (Some(LaunchLink::Launch { generation }), Some(claim)) = (&dispatched.link, dispatched.claim)
        else {
            return Produced::not_run("not a claimed background launch".into());
        };
        let jobs = match self.jobs() {
            Ok(jobs) => jobs,
            Err(error) => return Produced::not_run(format!("the jobs directory cannot be opened: {error}")),
        };
        let launch =
            (claim, run.id.as_str(), run.lineage.as_str(), dispatched.bound.operation.request_id.as_str());
        // ID-6: confined exactly as its claim says, or not run.
        let jail = match self.config.confine.jail() {
            Ok(jail) => jail,
            Err(error) => return Produced::not_run(format!("the job could not be confined: {error}")),
        };
        let produced = jobs.launch(&self.config.root, request, *generation, launch, jail);
        let (job, gate, leader) = match produced.result {
            Ok(started) => started,
            Err(error) => return Produced { facts: produced.facts, result: Err(error) },
        };
        // PROC-2: the job's processes are durable before its gate can open
        // (which needs its RUNNING outcome too, `Ledger::record`).
        if let Err(error) = self.record_processes(run, claim, &leader) {
            drop(gate); // the command never runs
            job.abandon(&leader);
            return Produced::not_run(format!(
                "job {} was not started: its processes could not be recorded (PROC-2): {error}",
                job.job_id
            ));
        }
        self.gates.insert(*generation, gate);
        Produced { facts: produced.facts, result: Ok(job.job_id) }
    }

    /// Performs a dispatched `bg_job` read or kill. The facts are the job's
    /// lifecycle afterwards; the result describes it, with the tail of the
    /// job's output.
    pub fn job_action(&self, dispatched: &Dispatched) -> Produced<JobStatus> {
        let Some(LaunchLink::Job(job)) = &dispatched.link else {
            return Produced::not_run("bg_job acts only on a validated job".into());
        };
        let acted = self.jobs().and_then(|jobs| match dispatched.bound.operation.action.as_str() {
            "kill" => jobs.kill(job, KILL_GRACE),
            _ => jobs.status(job),
        });
        match acted {
            Ok(status) => {
                if status.all_gone() {
                    job.release();
                }
                Produced { facts: status.facts(&job.job_id), result: Ok(status) }
            }
            Err(error) => Produced::not_run(format!("job {} cannot be read: {error}", job.job_id)),
        }
    }

    /// The tail of a job's output (for the agent), or why there is none.
    pub fn job_output(&self, dispatched: &Dispatched, cap: u64) -> String {
        match (&dispatched.link, self.jobs()) {
            (Some(LaunchLink::Job(job)), Ok(jobs)) => jobs.output(job, cap),
            _ => String::new(),
        }
    }

    /// Settles the launch a validated job read or kill acted on, from the
    /// job facts, through the classifier's status rule (TRU-1: job
    /// settlement only from a bound job read or kill). `read_outcome` is a
    /// read's own settlement (`None` when its policy failed: then nothing is
    /// settled); a kill's is derived here. Nothing is written while the job
    /// runs, when the launch is already settled (by another process, or an
    /// earlier try), or when the claim the job names is not the launch of its
    /// generation in the log: `Ok(None)` then.
    pub(super) fn settle_launch(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        read_outcome: Option<Option<crate::model::Outcome>>,
        facts: &crate::model::ProducerFacts,
    ) -> Result<Option<Position>, LogError> {
        let Some(LaunchLink::Job(job)) = &dispatched.link else { return Ok(None) };
        let outcome = match read_outcome {
            Some(Some(outcome)) => outcome,
            Some(None) => return Ok(None),
            None => {
                let mut operation = dispatched.bound.operation.clone();
                operation.action = "status".into();
                let request = crate::model::SettleRequest { operation, plan: None, facts: facts.clone() };
                match self.config.policies.classifier("bg_job").and_then(|c| c.settle(&request)) {
                    Ok(called) => called.value,
                    // A policy that cannot say how the job ended settles nothing.
                    Err(_) => return Ok(None),
                }
            }
        };
        if outcome.execution == Execution::Running {
            return Ok(None);
        }
        let Some(log) = self.log(&job.lineage, false)? else { return Ok(None) };
        log.refresh()?;
        if log.claim_state(job.launch_claim) != Some(ClaimState::Running) {
            return Ok(None);
        }
        // The job record and the index are plain files; the log decides
        // which claim is this generation's launch. A RUNNING claim's record
        // is at hand even past a checkpoint (it keeps open claims).
        let is_launch = log.record(job.launch_claim).is_some_and(|framed| {
            matches!(&framed.record, Record::Claim(claim) if claim.launches().any(|g| g == job.generation))
        });
        if !is_launch {
            return Ok(None);
        }
        let record = crate::log::OutcomeRecord {
            claim: job.launch_claim,
            outcome,
            facts: facts.clone(),
            recovery: false,
        };
        match log.record_outcome(&run.id, record) {
            Ok(position) => Ok(Some(position)),
            // Another writer settled it between our read and our lock (LOG-2).
            Err(LogError::Rejected { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The monitor: a job read of every launch of `run`'s lineage that is
    /// still RUNNING and whose job has ended, settling it. Returns the
    /// launches it settled. Safe to repeat, and to run from several
    /// processes at once.
    pub fn monitor(&mut self, run: &Run) -> Result<Vec<Position>, LogError> {
        let Some(log) = self.log(&run.lineage, false)? else { return Ok(Vec::new()) };
        log.refresh()?;
        let mut running = Vec::new();
        for position in log.rules().running_claims() {
            if let Some(Framed { record: Record::Claim(claim), .. }) = log.record(position) {
                running.extend(claim.launches());
            }
        }
        if running.is_empty() {
            return Ok(Vec::new());
        }
        let jobs = self.jobs()?;
        let mut settled = Vec::new();
        for generation in running {
            let id = job_id(generation);
            let over = jobs.find(&id)?.map(|job| jobs.status(&job)).transpose()?;
            if over.is_none_or(|status| status.state == JobLifecycle::Running) {
                continue;
            }
            let read = Call::BgJob(BgJob { job: id, action: JobAction::Status });
            let executor = crate::executor::current();
            let Dispatch::Run(dispatched) = self.dispatch_call(run, read, "monitor", executor) else {
                continue;
            };
            let produced = self.job_action(&dispatched);
            let recorded = self.record_facts(run, &dispatched, &produced.facts)?;
            settled.extend(recorded.launch_settled);
        }
        Ok(settled)
    }
}
