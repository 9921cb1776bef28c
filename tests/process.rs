//! The reference process producer (issue 6, item 1) on real processes: it runs
//! in the sealed root, captures output up to a bound, reports exit status, and
//! on timeout tears the whole process group down, including a child that
//! ignores SIGTERM; teardown is "dead" only when `/proc` shows no member alive.

#![allow(clippy::disallowed_methods)] // tests inspect files and /proc with ambient authority

use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::producers::process::{ProcessRequest, live_members, parse_start_token, run};

fn sealed() -> (tempfile::TempDir, SealedRoot) {
    let dir = tempfile::tempdir().unwrap();
    let handle = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
    let root = SealedRoot::new(handle, "root", "test", "agent", ControlPlane::default()).unwrap();
    (dir, root)
}

fn bash(script: &str, timeout_ms: u64) -> ProcessRequest {
    ProcessRequest {
        grace: Duration::from_millis(300),
        ..ProcessRequest::new("bash", script, Duration::from_millis(timeout_ms))
    }
}

#[test]
fn a_command_runs_in_the_root_and_reports_its_exit_status_and_output() {
    let (dir, root) = sealed();
    let produced = run(&root, &bash("echo hello > made.txt; pwd; echo oops >&2; exit 3", 10_000));
    let ran = produced.result.unwrap();
    assert_eq!(produced.facts.exit_code, Some(3));
    assert!(produced.facts.executed && !produced.facts.timed_out);
    assert_eq!(produced.facts.teardown_dead, None, "no teardown happened");
    assert_eq!(std::fs::read_to_string(dir.path().join("made.txt")).unwrap(), "hello\n");
    let pwd = String::from_utf8(ran.stdout.clone()).unwrap();
    assert_eq!(std::path::Path::new(pwd.trim()).canonicalize().unwrap(), dir.path().canonicalize().unwrap());
    assert_eq!(ran.stderr, b"oops\n");
    assert!(ran.pid > 0 && ran.start_token > 0, "{ran:?}");
}

#[test]
fn output_beyond_the_cap_is_dropped_and_said_so() {
    let (_dir, root) = sealed();
    let request = ProcessRequest { output_cap: 1000, ..bash("head -c 1000000 /dev/zero", 10_000) };
    let ran = run(&root, &request).result.unwrap();
    assert_eq!(ran.stdout.len(), 1000);
    assert!(ran.truncated);
}

#[test]
fn a_timeout_tears_the_group_down() {
    let (_dir, root) = sealed();
    let started = Instant::now();
    let produced = run(&root, &bash("sleep 30 & sleep 30", 300));
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(produced.facts.timed_out);
    assert_eq!(produced.facts.exit_code, None);
    assert_eq!(produced.facts.teardown_dead, Some(true));
    let pid = produced.result.unwrap().pid;
    assert!(live_members(pid).is_empty(), "no member of the group is alive");
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_never_reported_clean_while_alive() {
    let (_dir, root) = sealed();
    // The child ignores TERM and would outlive the timeout by far.
    let produced = run(&root, &bash("(trap '' TERM; sleep 60) & sleep 60", 300));
    let pid = produced.result.as_ref().unwrap().pid;
    let alive = live_members(pid);
    assert!(produced.facts.timed_out);
    // Either teardown killed it, or the facts say it failed: never "dead"
    // while a member lives.
    assert_eq!(produced.facts.teardown_dead, Some(alive.is_empty()), "alive: {alive:?}");
    assert_eq!(produced.facts.teardown_dead, Some(true), "SIGKILL after the grace period ends it");
}

#[test]
fn an_unknown_interpreter_is_not_run() {
    let (_dir, root) = sealed();
    let produced = run(&root, &ProcessRequest::new("perl", "print 1", Duration::from_secs(1)));
    assert!(!produced.facts.executed);
    assert!(produced.result.unwrap_err().contains("perl"));
}

#[test]
fn the_start_token_is_field_22_even_when_the_name_has_spaces_and_parens() {
    let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(parse_start_token(stat), Some(987654));
    // And for this very process, the kernel's own line parses.
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    assert!(parse_start_token(&own).is_some_and(|t| t > 0));
}
