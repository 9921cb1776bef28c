//! The kernel's view of processes, read from `/proc` (ID-2, LOG-7, PROC-1,
//! PROC-2): who a process is (PID, start token, boot id), whether it is alive,
//! its group, session and children.
//!
//! A PID alone names nothing durable: PIDs are reused. A process is its PID
//! *and* its start token (`/proc/PID/stat` field 22, clock ticks since boot)
//! *and* the boot it ran in (`/proc/sys/kernel/random/boot_id`), so a claim's
//! executor recorded in a log can be judged alive or dead from any process,
//! after any restart. Zombies count as dead: they run no code (a leader that
//! exited while its other threads run on is no zombie: its process does).
//!
//! This module only reads; signalling is the callers' (`producers::supervisor`,
//! `executor`).

#![allow(clippy::disallowed_methods)] // `/proc` is the kernel's view of processes, not a file under a root

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// A process, as durable as a log record: PID, start token and boot id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessIdentity {
    /// Its PID.
    pub pid: u32,
    /// Its start token (`/proc/PID/stat` field 22): a reused PID has another.
    pub start_token: u64,
    /// The boot it ran in: after a reboot, every process of an earlier boot is dead.
    pub boot_id: String,
}

/// The fields of one `/proc/PID/stat` line this crate reads. They follow the
/// command name, which may itself contain spaces and parentheses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `Z` for a zombie.
    pub zombie: bool,
    /// Field 3: `T` (stopped by a signal) or `t` (stopped by a tracer).
    pub stopped: bool,
    /// Field 4: the parent's PID.
    pub parent: u32,
    /// Field 5: the process group id.
    pub group: u32,
    /// Field 6: the session id.
    pub session: u32,
    /// Field 22: start time in clock ticks since boot.
    pub start_token: u64,
}

/// Parses one `/proc/PID/stat` line.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // Fields after the name start at field 3 (state).
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    Some(Stat {
        zombie: *fields.first()? == "Z",
        stopped: matches!(*fields.first()?, "T" | "t"),
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_token: fields.get(19)?.parse().ok()?,
    })
}

/// The stat of `pid`, if it exists. A thread-group leader that exited while
/// other threads of it run on shows `Z` in its own line, yet its process
/// still runs code: it is not a zombie here (`/proc/PID/task` lists more
/// than the leader).
pub fn stat_of(pid: u32) -> Option<Stat> {
    let mut stat = parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    if stat.zombie && threads_run_on(pid) {
        stat.zombie = false;
    }
    Some(stat)
}

/// Whether `pid` has threads besides its (exited) leader.
fn threads_run_on(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .is_ok_and(|tasks| tasks.filter_map(Result::ok).nth(1).is_some())
}

/// The command name of `pid` (`/proc/PID/comm`), if it exists.
pub fn command_name(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|name| name.trim_end().to_owned())
}

/// The start token of `pid` (`/proc/PID/stat` field 22).
pub fn start_token(pid: u32) -> Option<u64> {
    stat_of(pid).map(|stat| stat.start_token)
}

/// Field 22 of a `/proc/PID/stat` line.
pub fn parse_start_token(stat: &str) -> Option<u64> {
    parse_stat(stat).map(|stat| stat.start_token)
}

/// This boot's id (read once; empty if the kernel does not say).
pub fn boot_id() -> &'static str {
    static BOOT: OnceLock<String> = OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    })
}

/// The identity of `pid` now, if it exists and is not a zombie.
pub fn identity_of(pid: u32) -> Option<ProcessIdentity> {
    let stat = stat_of(pid).filter(|stat| !stat.zombie)?;
    Some(ProcessIdentity { pid, start_token: stat.start_token, boot_id: boot_id().to_owned() })
}

/// This process.
pub fn current() -> ProcessIdentity {
    static CURRENT: OnceLock<ProcessIdentity> = OnceLock::new();
    CURRENT
        .get_or_init(|| {
            let pid = std::process::id();
            ProcessIdentity { pid, start_token: start_token(pid).unwrap_or(0), boot_id: boot_id().to_owned() }
        })
        .clone()
}

/// Whether the process `pid` with start token `token` is alive (not a
/// zombie): the same PID with another start token is another process.
pub fn alive(pid: u32, token: u64) -> bool {
    stat_of(pid).is_some_and(|stat| !stat.zombie && stat.start_token == token)
}

/// Whether `identity` ran in an earlier boot, as far as anyone can tell:
/// only when both boot ids are known and differ.
pub fn of_another_boot(identity: &ProcessIdentity) -> bool {
    let now = boot_id();
    !identity.boot_id.is_empty() && !now.is_empty() && identity.boot_id != now
}

/// Whether `identity` names a process that is alive now. One of another boot
/// is dead; where either boot id is unknown (the kernel did not say), it is
/// judged by PID and start token alone.
pub fn is_alive(identity: &ProcessIdentity) -> bool {
    !of_another_boot(identity) && alive(identity.pid, identity.start_token)
}

/// Every live (not zombie) process, with its stat: one walk of `/proc`.
pub fn all() -> Vec<(u32, Stat)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| {
            let pid = entry.ok()?.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = stat_of(pid).filter(|stat| !stat.zombie)?;
            Some((pid, stat))
        })
        .collect()
}

/// Live (not zombie) processes whose process group is `pgid`.
pub fn live_members(pgid: u32) -> Vec<u32> {
    all().into_iter().filter(|(_, stat)| stat.group == pgid).map(|(pid, _)| pid).collect()
}

/// The live descendants of `pid` (not `pid` itself), parents before their
/// children: one walk of `/proc`, then the closure of the parent links. A
/// process forking while this runs may be missed; callers that must see
/// everything (teardown) walk again until nothing is left.
pub fn descendants(pid: u32) -> Vec<u32> {
    let everyone = all();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (child, stat) in &everyone {
            if stat.parent == parent && *child != pid && !found.contains(child) {
                found.push(*child);
                frontier.push(*child);
            }
        }
    }
    found
}

/// The PIDs `/proc/PID/task/PID/children` lists: the children of `pid`'s main
/// thread, without walking `/proc`. `None` when the kernel has no such file.
pub fn children(pid: u32) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    Some(text.split_whitespace().filter_map(|p| p.parse().ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_the_name_parses() {
        let line = "4242 (a (weird) name) S 17 4242 4200 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!((stat.parent, stat.group, stat.session, stat.start_token), (17, 4242, 4200, 987654));
        assert!(!stat.zombie);
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_token_or_boot_is_not() {
        let me = current();
        assert!(is_alive(&me));
        assert!(!is_alive(&ProcessIdentity { start_token: me.start_token + 1, ..me.clone() }));
        assert!(!is_alive(&ProcessIdentity { boot_id: "another-boot".into(), ..me }));
    }
}
