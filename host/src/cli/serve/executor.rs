//! Who runs a tool `effect/claim` claims (LOG-7 as made precise in SPEC 14):
//! the runtime, the client process that asked, never this server. The
//! server only relays the claim; a server that exits (or is killed) while
//! the runtime still runs the tool must not make the next server's open
//! recover the claim INTERRUPTED, so the claim names the runtime, and
//! recovery waits for the runtime's death.
//!
//! The runtime is found, never taken on the client's word alone:
//! - a PID the client names in `initialize` (`executor_pid`) is taken only
//!   when it is alive, is not PID 1, and is an ancestor of this server (the
//!   client spawned it, directly or through wrappers): the server sees that
//!   relation itself in `/proc`, and a live ancestor is the one process
//!   whose death the relay cannot outlive unnoticed;
//! - otherwise the server's parent (a client spawns the server over stdio),
//!   stepping over shells between them (`sh -c 'effects serve ...'` leaves
//!   a shell that dies with the server, not with the runtime);
//! - with no parent to name (PID 1: the spawner is gone, or the server is
//!   run by init), the server itself, as before: its claims recover once it
//!   is gone.
//!
//! PID 1 is never named: it never dies, so its claims would never recover.
//! This module only reads `/proc`; it decides nothing about recovery.

use effect_ledger::log::Executor;
use effect_ledger::procfs;

/// Programs that start the server for someone else: a shell between the
/// runtime and the server is not the runtime.
const SHELLS: &[&str] = &["sh", "dash", "bash", "zsh", "ksh", "fish", "busybox"];

/// How far up the process tree a named executor is looked for.
const DEPTH: usize = 64;

/// The executor of this server's `effect/claim` claims: the process the
/// client named (`Err` saying why it cannot be), or else the runtime found
/// from this server's parent.
pub(super) fn runtime(named: Option<u32>) -> Result<Executor, String> {
    let ancestors = ancestors();
    let chosen = match named {
        Some(pid) => {
            if pid <= 1 || !ancestors.contains(&pid) {
                return Err(format!(
                    "executor_pid {pid} is not an ancestor of this server (PID {}); name the runtime \
                     process that started it, or leave executor_pid out to name the server's parent",
                    std::process::id()
                ));
            }
            pid
        }
        None => match ancestors.iter().find(|pid| !is_shell(**pid)).or(ancestors.first()) {
            Some(pid) => *pid,
            None => return Ok(effect_ledger::executor::current()),
        },
    };
    match procfs::identity_of(chosen) {
        Some(identity) => Ok(Executor::Process(identity)),
        None if named.is_some() => Err(format!("executor_pid {chosen} is not alive")),
        // Gone since the walk: no runtime to name.
        None => Ok(effect_ledger::executor::current()),
    }
}

/// This server's ancestors, nearest first, up to (not including) PID 1.
fn ancestors() -> Vec<u32> {
    let mut ancestors = Vec::new();
    let mut pid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
    while pid > 1 && ancestors.len() < DEPTH {
        ancestors.push(pid);
        pid = procfs::stat_of(pid).filter(|stat| !stat.zombie).map_or(0, |stat| stat.parent);
    }
    ancestors
}

fn is_shell(pid: u32) -> bool {
    procfs::command_name(pid).is_some_and(|name| SHELLS.contains(&name.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_executor_must_be_a_live_ancestor_other_than_init() {
        let Executor::Process(parent) = runtime(None).unwrap();
        // The test's runner is this process's parent or an ancestor of it.
        assert_ne!(parent.pid, 1);
        assert!(runtime(Some(1)).is_err());
        assert!(runtime(Some(std::process::id())).is_err(), "itself is no ancestor");
        assert!(runtime(Some(u32::MAX)).is_err());
        let named = ancestors()[0];
        let Executor::Process(identity) = runtime(Some(named)).unwrap();
        assert_eq!(identity.pid, named);
    }
}
