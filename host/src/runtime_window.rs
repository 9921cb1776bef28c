//! The window of a command the runtime runs itself (SPEC 14, INV-2 and
//! PROC-1 extended): the ledger's own observation, from `/proc`, of whether
//! the processes a runtime-run call started are gone.
//!
//! The ledger does not run such a command (a hook's `Bash`, `serve`'s
//! `effect/claim` of `bash`), so no supervisor of ours leads it. What it can
//! see is the kernel's process table: [`Window::open`] notes the moment the
//! call was claimed (boot-relative clock ticks, the unit of `/proc/PID/stat`'s
//! start time), and [`Window::survivors`] lists the live processes that may
//! be the call's: every process of this user started at or after that
//! moment (beneath the runtime, in its session, orphaned to an init where a
//! `setsid` and double fork escape lands, or handed to a process that was
//! already running, such as a terminal multiplexer's server), never the
//! observer itself or its ancestors (the hook's own shell).
//!
//! Looking again later ([`Window::survivors_after`]) counts what the first
//! look found and everything beneath it, what started before the first look
//! beneath the runtime, in its session or orphaned, and every new orphan: a
//! survivor that forks and detaches while it is watched is still seen, and
//! the runtime's own later work (a later call, a later hook) is not counted. What the rule cannot see, and says so
//! (docs/limitations.md): a process of another user, one reparented to a
//! subreaper that is neither init nor `systemd`, and a process that detached
//! from the runtime's session and tree before the window opened.
//!
//! It errs towards "not gone": anything of this user that started while the
//! call ran (a concurrent tool, another hook, another program) counts, so a
//! busy machine only delays the window's close, never closes it early.
//!
//! A window of another boot, or one that starts after now, cannot be the
//! window of a call whose runtime is asking in this boot: such a note was
//! forged or damaged, and [`Window::is_plausible`] says so, so a surface
//! takes it as no observation at all, never as "gone".

#![allow(clippy::disallowed_methods)] // `/proc` is the kernel's view of processes, not a file under a root

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::procfs::{self, Stat};

/// When a runtime-run call was claimed, as `/proc` counts time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// Clock ticks since boot (the unit of a process's start token), rounded
    /// down a tick so nothing started in the same tick is missed.
    pub since: u64,
    /// The boot it was taken in: after a reboot every process of it is gone.
    pub boot_id: String,
}

/// A live process the window may still hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Survivor {
    /// Its PID.
    pub pid: u32,
    /// Its start token: a reused PID is another process.
    pub start_token: u64,
    /// Its command name (`/proc/PID/comm`), for the people reading why.
    pub command: String,
}

impl std::fmt::Display for Survivor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.pid, self.command)
    }
}

/// Clock ticks since boot now, on the clock `/proc/PID/stat` start times
/// count on (CLOCK_BOOTTIME, which counts through suspension).
pub fn ticks_now() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let hz = rustix::param::clock_ticks_per_second();
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    seconds * hz + nanos * hz / 1_000_000_000
}

/// This user (the effective uid, as `/proc/PID/status` gives it second).
fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// One look at the process table, from the observer's place in it.
struct Table {
    everyone: Vec<(u32, Stat)>,
    /// The observer and its ancestors.
    observer: HashSet<u32>,
    user: u32,
}

impl Table {
    fn now() -> Self {
        let everyone = procfs::all();
        let mut observer = HashSet::new();
        let mut pid = std::process::id();
        while pid != 0 && observer.insert(pid) {
            pid = everyone.iter().find(|(p, _)| *p == pid).map_or(0, |(_, stat)| stat.parent);
        }
        Self { everyone, observer, user: rustix::process::geteuid().as_raw() }
    }

    fn stat(&self, pid: u32) -> Option<&Stat> {
        self.everyone.iter().find(|(p, _)| *p == pid).map(|(_, stat)| stat)
    }

    /// `roots` and every live process beneath them.
    fn beneath(&self, roots: impl IntoIterator<Item = u32>) -> HashSet<u32> {
        let mut found: HashSet<u32> = roots.into_iter().collect();
        let mut frontier: Vec<u32> = found.iter().copied().collect();
        while let Some(parent) = frontier.pop() {
            for (child, stat) in &self.everyone {
                if stat.parent == parent && found.insert(*child) {
                    frontier.push(*child);
                }
            }
        }
        found
    }

    /// Whether `stat`'s parent is an init an escape lands on.
    fn orphaned(&self, stat: &Stat) -> bool {
        stat.parent == 1 || procfs::command_name(stat.parent).is_some_and(|name| name == "systemd")
    }

    fn survivor(&self, pid: u32, stat: &Stat) -> Survivor {
        Survivor {
            pid,
            start_token: stat.start_token,
            command: procfs::command_name(pid).unwrap_or_default(),
        }
    }
}

impl Window {
    /// The window of a call claimed now.
    pub fn open() -> Self {
        Self { since: ticks_now().saturating_sub(1), boot_id: procfs::boot_id().to_owned() }
    }

    /// Whether this window can be the one of a call claimed in this boot,
    /// before now (see the module doc).
    pub fn is_plausible(&self) -> bool {
        !self.of_another_boot() && self.since <= ticks_now()
    }

    /// Whether this boot is not the window's: everything it saw is gone.
    fn of_another_boot(&self) -> bool {
        let now = procfs::boot_id();
        !self.boot_id.is_empty() && !now.is_empty() && self.boot_id != now
    }

    /// The first look, once the runtime says the call ended: the live
    /// processes that may be the call's (see the module doc), `runtime`
    /// being the process that ran it. Empty: the window closes here.
    pub fn survivors(&self, runtime: u32) -> Vec<Survivor> {
        // Every process of this user started in the window: work handed to
        // a process already running (a terminal multiplexer's server, an
        // editor's) starts unrelated to the runtime, yet it is the call's.
        self.look(runtime, |_, _, _, _| true)
    }

    /// A later look, after a first one at `until` (ticks) found `found`:
    /// what started before that look and still lives, anything beneath what
    /// it found, and every orphan since the window opened. Later work of the
    /// runtime's own (a later call, a later hook) is not this call's.
    pub fn survivors_after(&self, runtime: u32, until: u64, found: &[Survivor]) -> Vec<Survivor> {
        let mut watched = None;
        self.look(runtime, |table, pid, stat, related| {
            let watched = watched.get_or_insert_with(|| {
                let alive = found
                    .iter()
                    .filter(|s| table.stat(s.pid).is_some_and(|st| st.start_token == s.start_token));
                table.beneath(alive.map(|s| s.pid))
            });
            (stat.start_token <= until && related) || watched.contains(&pid) || table.orphaned(stat)
        })
    }

    /// The live processes of this user, started since the window opened,
    /// other than the observer, its ancestors and `runtime`, that `counts`
    /// keeps; it is told whether each is related to the runtime (beneath
    /// it, in its session, or orphaned to an init).
    fn look(&self, runtime: u32, mut counts: impl FnMut(&Table, u32, &Stat, bool) -> bool) -> Vec<Survivor> {
        if self.of_another_boot() {
            return Vec::new();
        }
        let table = Table::now();
        let tree = table.beneath([runtime]);
        let session = table.stat(runtime).map(|stat| stat.session);
        let mut found = Vec::new();
        for (pid, stat) in &table.everyone {
            if stat.start_token < self.since || table.observer.contains(pid) || *pid == runtime {
                continue;
            }
            let related = tree.contains(pid) || Some(stat.session) == session || table.orphaned(stat);
            if counts(&table, *pid, stat, related) && uid_of(*pid) == Some(table.user) {
                found.push(table.survivor(*pid, stat));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_now_is_the_clock_start_tokens_count_on() {
        let before = ticks_now();
        let child = std::process::Command::new("sleep").arg("5").spawn().expect("sleep runs");
        let token = procfs::start_token(child.id()).expect("it has a start token");
        let after = ticks_now();
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(before <= token + 1 && token <= after + 1, "{before} <= {token} <= {after}");
    }

    #[test]
    fn a_child_started_in_the_window_survives_until_it_ends() {
        let window = Window::open();
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let found = window.survivors(me);
        // The observer is this process, and the child is beneath it: the
        // test's own process is the "runtime" here, not an observer's ancestor.
        assert!(found.iter().any(|s| s.pid == child.id()), "{found:?}");
        let until = ticks_now();
        assert!(window.survivors_after(me, until, &found).iter().any(|s| s.pid == child.id()));
        child.kill().expect("kill");
        child.wait().expect("reaped");
        assert!(!window.survivors_after(me, until, &found).iter().any(|s| s.pid == child.id()));
    }

    #[test]
    fn a_window_of_another_boot_holds_nothing() {
        let window = Window { since: 0, boot_id: "another-boot".into() };
        assert!(window.survivors(std::process::id()).is_empty());
    }
}
