//! Executors (LOG-7) and the recovery of a dead executor's processes (PROC-2).
//!
//! Every claim names its executor: the process that runs or reports its
//! effect (this process, for the reference producers; the agent's process,
//! for a runtime that reports). Recovery settles a claim as INTERRUPTED only
//! when its executor is **known dead** (another boot, or its PID now names
//! another process or none): a live executor's claim is left alone, whoever
//! opens the log, so two processes can share a run and neither turns the
//! other's work INTERRUPTED.
//!
//! A dead executor's command may have left processes running. If the claim
//! has its processes recorded (PROC-2), [`judge`] finds them by that identity
//! and tears them down before the claim is settled, and the cleanup it
//! records is what it observed: CLEAN only when its supervisor was alive
//! (so the whole tree was beneath it) and `/proc` then shows every descendant
//! gone; FAILED when something survived; UNKNOWN when the supervisor was
//! already gone (a process may have escaped with it), which keeps the
//! effect's window open (INV-2). A claim without a processes record ran no
//! command of ours (the record is durable before the gate opens; recovery
//! reads the log again before it settles a claim judged without one), and is
//! UNKNOWN as every recovered claim was before.

use std::collections::HashMap;
use std::time::Duration;

use crate::log::{
    ClaimRecord, Executor, Framed, LineageLog, LogError, Medium, Position, ProcessesRecord, Record, Recovery,
    ServerRefusal,
};
use crate::model::CleanupState;
use crate::procfs;
use crate::producers::supervisor;

/// This process, as the executor of the claims it makes.
pub fn current() -> Executor {
    Executor::Process(procfs::current())
}

/// Whether `executor` is known dead. A claim from before executors were
/// recorded (`None`) has no one to ask and is judged dead, as it always was.
pub fn is_dead(executor: Option<&Executor>) -> bool {
    match executor {
        None => true,
        Some(Executor::Process(identity)) => !procfs::is_alive(identity),
    }
}

/// How long recovery gives survivors between SIGTERM and SIGKILL.
const RECOVERY_GRACE: Duration = Duration::from_millis(500);

/// Recovery's judge (LOG-7, PROC-2) for one unsettled claim.
pub fn judge(claim: &ClaimRecord, processes: Option<&ProcessesRecord>) -> Recovery {
    if !is_dead(claim.executor.as_ref()) {
        return Recovery::Alive;
    }
    let Some(processes) = processes else {
        return Recovery::Dead { cleanup: CleanupState::Unknown };
    };
    Recovery::Dead { cleanup: tear_down(processes) }
}

/// LOG-7 for a lineage on whichever store holds it: judged by this
/// machine's `/proc` on the local log ([`judge`]), by writer leases on the
/// fleet store ([`judge_leased`]; `/proc` there would take a process of
/// another machine or container for dead). Returns the claims it settled.
/// On the fleet store, a recovery the server refuses because the claim's
/// writer renewed its lease meanwhile settles nothing and is not an error.
pub fn recover(log: &mut LineageLog) -> Result<Vec<Position>, LogError> {
    let expired = match log.storage() {
        Medium::File(_) => return log.recover_interrupted(judge),
        Medium::Server(store) => store.expired_claims().map_err(|source| LogError::Io {
            path: log.path().to_owned(),
            operation: "read the expired leases",
            source,
        })?,
    };
    if expired.is_empty() {
        return Ok(Vec::new());
    }
    log.refresh()?;
    let by_action: HashMap<String, String> = expired
        .into_iter()
        .filter_map(|(position, holder)| match log.record(position) {
            Some(Framed { record: Record::Claim(claim), .. }) => Some((claim.action_id.clone(), holder)),
            _ => None,
        })
        .collect();
    match log.recover_interrupted(|claim, _| judge_leased(&by_action, claim)) {
        Err(LogError::Persistence { source, .. })
            if ServerRefusal::of(&source).is_some_and(|refusal| refusal.code == "EL002") =>
        {
            tracing::info!(path = %log.path(), "a writer renewed its lease before its claims were recovered: {source}");
            Ok(Vec::new())
        }
        recovered => recovered,
    }
}

/// Recovery's judge on the fleet store (LOG-7 across machines), given the
/// unsettled claims whose writer's lease expired (by action id, with the
/// lease holder's executor as JSON: `PgStore::expired_claims`). A claim is
/// dead when its writer's lease expired and its executor is that holder:
/// the process that wrote it, and could no longer append, is the one that
/// was to settle it. Any other claim (a live lease, or an executor the lease
/// does not vouch for, such as a hook's agent) is left alone: this machine's
/// `/proc` cannot see another machine's or container's processes. The
/// cleanup is UNKNOWN: the command's processes may be on another machine.
pub fn judge_leased(expired: &HashMap<String, String>, claim: &ClaimRecord) -> Recovery {
    let holder =
        expired.get(&claim.action_id).and_then(|holder| serde_json::from_str::<Executor>(holder).ok());
    match (holder, &claim.executor) {
        (Some(holder), Some(executor)) if holder == *executor => {
            Recovery::Dead { cleanup: CleanupState::Unknown }
        }
        _ => Recovery::Alive,
    }
}

/// Tears a dead executor's command down by its recorded identity and says
/// what was observed.
fn tear_down(processes: &ProcessesRecord) -> CleanupState {
    let leader = &processes.leader;
    if procfs::of_another_boot(leader) {
        // Every process of an earlier boot is dead.
        return CleanupState::Clean;
    }
    if let Some(survivors) = supervisor::teardown(leader, RECOVERY_GRACE) {
        if survivors.is_empty() {
            tracing::info!(claim = processes.claim, "tore down the processes of an interrupted command");
            return CleanupState::Clean;
        }
        tracing::warn!(claim = processes.claim, ?survivors, "processes of an interrupted command survived");
        return CleanupState::Failed;
    }
    // The supervisor is gone: what is left of its group is the command's,
    // but a process that left the group may have escaped with it.
    if supervisor::sweep_group(leader).is_empty() { CleanupState::Unknown } else { CleanupState::Failed }
}
