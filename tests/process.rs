//! The reference process producer on real processes: it runs in the sealed
//! root, captures output up to a bound, reports exit status, and at the
//! leader's exit or its timeout tears down everything the command started
//! (PROC-1), including a child that ignores SIGTERM, a background child left
//! behind and a `setsid` grandchild; teardown is "dead" only when `/proc`
//! shows nothing of it alive. The command waits at its gate until the caller
//! lets it through (PROC-2).

#![allow(clippy::disallowed_methods)] // tests inspect files and /proc with ambient authority

use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::procfs::{live_members, parse_start_token};
use effect_ledger::producers::Produced;
use effect_ledger::producers::process::{ProcessRequest, Ran, run};

fn sealed() -> (tempfile::TempDir, SealedRoot) {
    let dir = tempfile::tempdir().unwrap();
    let handle = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
    let root = SealedRoot::new(handle, "root", "test", "agent", ControlPlane::default()).unwrap();
    (dir, root)
}

/// Runs `request` with its gate opened at once.
fn go(root: &SealedRoot, request: &ProcessRequest) -> Produced<Ran> {
    run(root, request, |_| Ok(()))
}

/// Waits up to 10 s for `condition`.
fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
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
    let produced = go(&root, &bash("echo hello > made.txt; pwd; echo oops >&2; exit 3", 10_000));
    let ran = produced.result.unwrap();
    assert_eq!(produced.facts.exit_code, Some(3));
    assert!(produced.facts.executed && !produced.facts.timed_out);
    assert_eq!(produced.facts.teardown_dead, Some(true), "nothing was left running, and /proc says so");
    assert_eq!(std::fs::read_to_string(dir.path().join("made.txt")).unwrap(), "hello\n");
    let pwd = String::from_utf8(ran.stdout.clone()).unwrap();
    assert_eq!(std::path::Path::new(pwd.trim()).canonicalize().unwrap(), dir.path().canonicalize().unwrap());
    assert_eq!(ran.stderr, b"oops\n");
    assert!(ran.pid > 0 && ran.start_token > 0, "{ran:?}");
}

#[test]
fn output_beyond_the_cap_keeps_its_head_and_tail_and_says_so() {
    let (_dir, root) = sealed();
    // 100 000 numbered lines: the first and the last must survive the cap.
    let request = ProcessRequest { output_cap: 1000, ..bash("seq 1 100000", 10_000) };
    let ran = go(&root, &request).result.unwrap();
    let text = String::from_utf8(ran.stdout.clone()).unwrap();
    assert!(ran.truncated);
    assert!(text.starts_with("1\n2\n3\n"), "{text}");
    assert!(text.ends_with("99999\n100000\n"), "{text}");
    let omitted = 588_895 - 1000; // `seq 1 100000` writes 588 895 bytes
    assert!(text.contains(&format!("\n[... {omitted} bytes omitted ...]\n")), "{text}");
    assert_eq!(text.len() - format!("\n[... {omitted} bytes omitted ...]\n").len(), 1000);
}

#[test]
fn a_timeout_tears_the_group_down() {
    let (_dir, root) = sealed();
    let started = Instant::now();
    let produced = go(&root, &bash("sleep 30 & sleep 30", 300));
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
    let produced = go(&root, &bash("(trap '' TERM; sleep 60) & sleep 60", 300));
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
    let produced = go(&root, &ProcessRequest::new("perl", "print 1", Duration::from_secs(1)));
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

#[test]
fn a_background_child_left_by_the_leader_is_torn_down_when_it_exits() {
    let (dir, root) = sealed();
    // PROC-1: the command "ends" at once, but its child would write a second
    // later, after any readback that "verified" the file.
    let produced = go(&root, &bash("(sleep 1; echo bad > late.txt) >/dev/null 2>&1 & echo started", 10_000));
    assert_eq!(produced.facts.exit_code, Some(0));
    assert_eq!(produced.facts.teardown_dead, Some(true));
    assert!(produced.result.unwrap().survivors.is_empty());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!dir.path().join("late.txt").exists(), "the leftover child never wrote");
}

#[test]
fn a_setsid_grandchild_does_not_escape_its_command() {
    let (dir, root) = sealed();
    let script = "setsid bash -c 'echo $$ > escaped.pid; sleep 1; echo bad > late.txt' >/dev/null 2>&1 &
                  while [ ! -s escaped.pid ]; do sleep 0.01; done";
    let produced = go(&root, &bash(script, 10_000));
    assert_eq!(produced.facts.exit_code, Some(0));
    assert_eq!(produced.facts.teardown_dead, Some(true));
    let escaped: u32 =
        std::fs::read_to_string(dir.path().join("escaped.pid")).unwrap().trim().parse().unwrap();
    assert!(
        wait_until(|| effect_ledger::procfs::stat_of(escaped).is_none_or(|s| s.zombie)),
        "pid {escaped} lives"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!dir.path().join("late.txt").exists(), "the setsid grandchild never wrote");
}

#[test]
fn a_timeout_while_a_setsid_child_lives_tears_it_down_too() {
    let (dir, root) = sealed();
    let script = "setsid bash -c 'echo $$ > escaped.pid; exec sleep 30' >/dev/null 2>&1 & sleep 30";
    let produced = go(&root, &bash(script, 500));
    assert!(produced.facts.timed_out);
    let escaped: u32 =
        std::fs::read_to_string(dir.path().join("escaped.pid")).unwrap().trim().parse().unwrap();
    let alive = effect_ledger::procfs::stat_of(escaped).is_some_and(|s| !s.zombie);
    // Never "all dead" while the escaped child lives, and it does not.
    assert_eq!(produced.facts.teardown_dead, Some(!alive));
    assert_eq!(produced.facts.teardown_dead, Some(true));
}

#[test]
fn a_command_whose_identity_is_refused_never_runs() {
    let (dir, root) = sealed();
    let mut seen = None;
    let produced = run(&root, &bash("echo ran > ran.txt", 10_000), |leader| {
        seen = Some(leader.clone());
        Err("the log refused it".into())
    });
    assert!(!produced.facts.executed, "{:?}", produced.facts);
    assert!(produced.result.unwrap_err().contains("the log refused it"));
    let leader = seen.expect("the gate callback saw the supervisor");
    assert_eq!(leader.group, leader.identity.pid, "the supervisor leads its own group");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!dir.path().join("ran.txt").exists(), "the command never passed its gate");
    assert!(!effect_ledger::procfs::is_alive(&leader.identity), "the supervisor is gone");
}

#[test]
fn a_supervisor_killed_from_outside_attests_no_cleanup() {
    let (_dir, root) = sealed();
    // The command kills its own supervisor: the sight of its tree is gone, so
    // the group is swept and nothing is called clean (PROC-1).
    let produced = go(&root, &bash("kill -KILL $PPID; sleep 0.2", 10_000));
    assert_eq!(produced.facts.teardown_dead, None, "{:?}", produced.facts);
    let pid = produced.result.unwrap().pid;
    assert!(live_members(pid).is_empty(), "the group was swept");
}

#[test]
fn a_descendant_that_kills_its_supervisor_during_teardown_is_never_called_gone() {
    let (dir, root) = sealed();
    // On SIGTERM the escaped child kills the (stopped) supervisor and starts
    // a grandchild, which then goes to init, past the dying subreaper: the
    // teardown cannot have seen the whole tree, so it attests nothing.
    let script = r#"export SUP=$PPID; cat > child.sh <<'EOF'
trap 'kill -KILL $SUP; (sh -c "sleep 2; echo bad > late.txt" &); exit' TERM
echo ready > ready
while :; do sleep 0.01; done
EOF
setsid bash child.sh >/dev/null 2>&1 & while [ ! -e ready ]; do sleep 0.01; done"#;
    let produced = go(&root, &bash(script, 10_000));
    assert_ne!(produced.facts.teardown_dead, Some(true), "{:?}", produced.facts);
    assert!(dir.path().join("ready").exists());
}
