//! A command the agent runs itself keeps its window open until the ledger
//! sees its processes gone (SPEC 14, INV-2/PROC-1 extended), driven as the
//! agents drive `effects hook`: a stand-in agent process
//! ([`support::agent::Agent`]) starts each hook and runs each command with
//! `bash -c`, the way Claude Code's Bash tool does. Each test does the bad
//! thing: a background writer, a `setsid` escape, a lost window.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::hook_cli::{completed, outcomes, stop, tool_event, write_input};
use crate::support;
use crate::support::agent::Agent;
use crate::support::session::Session;

/// One agent and one session, on a fresh root and data dir.
struct Run {
    place: Session,
    agent: Agent,
    session: &'static str,
    calls: usize,
}

impl Run {
    fn new(session: &'static str) -> Self {
        let place = support::session::session();
        let agent = Agent::start(&place.root);
        Self { place, agent, session, calls: 0 }
    }

    fn hook(&mut self, payload: &Value) -> Value {
        let (code, printed) = self.agent.hook(&self.place.data, "claude", payload);
        assert_eq!(code, 0, "effects hook failed on {payload}");
        printed
    }

    fn event(&mut self, event: &str, tool: &str, input: &Value) -> Value {
        let id = format!("t{}", self.calls);
        let mut payload = tool_event(&self.place, event, self.session, tool, input.clone(), &id);
        if tool == "Bash" && event == "PostToolUse" {
            payload["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false});
        }
        self.hook(&payload)
    }

    /// The agent writes `file` through its Write tool, hooked.
    fn write(&mut self, file: &str, content: &str) {
        self.calls += 1;
        let input = write_input(&self.place, file, content);
        assert_eq!(self.event("PreToolUse", "Write", &input), Value::Null);
        std::fs::write(self.place.root.join(file), content).unwrap();
        self.event("PostToolUse", "Write", &input);
    }

    /// The agent reads `file` through its Read tool, hooked: the ledger
    /// reads it back too.
    fn read(&mut self, file: &str) {
        self.calls += 1;
        let input = json!({"file_path": self.place.root.canonicalize().unwrap().join(file)});
        self.event("PreToolUse", "Read", &input);
        self.event("PostToolUse", "Read", &input);
    }

    /// The agent runs `command` through its Bash tool, hooked: what the
    /// post-tool hook told the agent.
    fn bash(&mut self, command: &str) -> String {
        self.calls += 1;
        let input = json!({"command": command, "description": "a command"});
        assert_eq!(self.event("PreToolUse", "Bash", &input), Value::Null);
        assert_eq!(self.agent.bash(command), 0, "{command}");
        let told = self.event("PostToolUse", "Bash", &input);
        told["hookSpecificOutput"]["additionalContext"].as_str().unwrap_or_default().to_owned()
    }

    fn stop(&mut self, active: bool) -> Value {
        let payload = stop(&self.place, self.session, active);
        self.hook(&payload)
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.place.root.join(name)).unwrap_or_default()
    }
}

/// Waits (up to 20 s) for `done`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(20), "waited 20 s for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The PIDs a held stop says to end (`kill N M`).
fn pids_to_end(reason: &str) -> Vec<u32> {
    let (_, after) = reason.split_once("`kill ").unwrap_or_else(|| panic!("names what to end: {reason}"));
    after.split('`').next().unwrap().split_whitespace().map(|pid| pid.parse().unwrap()).collect()
}

/// The ledger's own look at a command's processes found them gone (the
/// outcome's facts: no runtime can report this one).
fn seen_gone(outcome: &Value) -> bool {
    outcome["facts"]["teardown_dead"] == true
}

/// The scenario of issue 50: a write, read back; then a command that leaves
/// a child that overwrites it two seconds later. Settled at once, its window
/// closed, and the stop said COMPLETED while `a.txt` was about to hold `bad`.
fn a_background_writer_holds_the_stop(command: &str) {
    let mut run = Run::new("bg");
    run.write("a.txt", "good\n");
    let told = run.bash(command);
    assert!(told.contains("still running"), "the agent is told the command is not over: {told}");
    run.read("a.txt");
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "not COMPLETED while the writer lives: {held}");
    let reason = held["reason"].as_str().unwrap();
    assert!(reason.contains("echo bad > a.txt"), "names the command: {reason}");
    let pids = pids_to_end(reason);
    wait_for("the writer", || run.file("a.txt") == "bad\n");
    wait_for("the writer's end", || pids.iter().all(|pid| !run.agent.alive(*pid)));
    // Once its processes are gone the command settles; what it did to a.txt
    // is read back, never taken for the write's bytes.
    run.read("a.txt");
    let after = run.stop(false);
    assert_eq!(after["decision"], "block", "{after}");
    assert!(after["reason"].as_str().unwrap().contains("a.txt"), "{after}");
    let outcomes = outcomes(&run.place.data, "claude-bg");
    assert!(
        outcomes.len() == 2 && seen_gone(&outcomes[1]),
        "the command settled once its processes were seen gone: {outcomes:?} {after}"
    );
}

#[test]
fn a_command_that_leaves_a_writer_behind_holds_the_stop_until_it_ends() {
    a_background_writer_holds_the_stop("(sleep 2; echo bad > a.txt) &");
}

#[test]
fn a_setsid_double_fork_escape_is_seen_too() {
    // A new session, reparented to init: out of the agent's tree and session.
    a_background_writer_holds_the_stop(
        "(setsid sh -c 'sleep 2; echo bad > a.txt' </dev/null >/dev/null 2>&1 &)",
    );
}

#[test]
fn ending_what_a_command_left_running_clears_the_hold() {
    let mut run = Run::new("end");
    run.write("a.txt", "good\n");
    let told = run.bash("sleep 60 &");
    assert!(told.contains("still running"), "{told}");
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "{held}");
    let reason = held["reason"].as_str().unwrap().to_owned();
    // The remedy, carried out (CMP-15): end them, read the file again, stop.
    let pids = pids_to_end(&reason);
    let listed: Vec<String> = pids.iter().map(u32::to_string).collect();
    assert_eq!(run.agent.run(&format!("kill -9 {}", listed.join(" "))), 0);
    wait_for("the sleeper's end", || pids.iter().all(|pid| !run.agent.alive(*pid)));
    run.read("a.txt");
    completed(&run.stop(false));
}

#[test]
fn a_command_whose_processes_end_with_it_settles_at_once() {
    let mut run = Run::new("quick");
    let told = run.bash("echo hi > b.txt");
    assert!(told.contains("settled REPORTED_SUCCESS"), "{told}");
    let outcomes = outcomes(&run.place.data, "claude-quick");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(seen_gone(&outcomes[0]), "its processes were seen gone: {outcomes:?}");
}

#[test]
fn a_command_the_ledger_could_not_watch_keeps_its_window_open() {
    let mut run = Run::new("lost");
    run.write("a.txt", "good\n");
    run.calls += 1;
    let input = json!({"command": "true"});
    run.event("PreToolUse", "Bash", &input);
    // The window the claim opened is lost (a data dir cleaned by hand): the
    // post-tool hook has nothing to judge the processes by.
    std::fs::remove_dir_all(run.place.data.join("windows")).unwrap();
    run.agent.bash("true");
    run.event("PostToolUse", "Bash", &input);
    run.read("a.txt");
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "a window nobody saw close is open: {held}");
    let outcomes = outcomes(&run.place.data, "claude-lost");
    assert!(!seen_gone(&outcomes[1]), "nothing was seen: {outcomes:?}");
}

/// `effects decide --run` as the README teaches it, on a session whose
/// file a command overwrote after the agent wrote it: it decides the files
/// the session's changes left in place, as the hook's own stop did (CMP-7
/// extended), never COMPLETED over nothing required.
#[test]
fn decide_from_outside_requires_what_the_sessions_stop_required() {
    let mut run = Run::new("tampered");
    run.write("a.txt", "good\n");
    run.bash("echo tampered > a.txt");
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "{held}");
    let hooks_verdict = held["reason"].as_str().unwrap().split(" work is ").nth(1).unwrap().split(',').next();
    let decide = |extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_effects"))
            .arg("--data-dir")
            .arg(&run.place.data)
            .args(["decide", "--run", "claude-tampered", "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let outside = decide(&[]);
    assert_eq!(outside["verdict"].as_str(), hooks_verdict, "the hook's verdict, not another: {outside}");
    assert_ne!(outside["verdict"], "COMPLETED");
    let cited = outside["reasons"].to_string();
    assert!(cited.contains("a.txt"), "{cited}");
    // Narrowed on purpose, and said so: a file nobody touched.
    std::fs::write(run.place.root.join("b.txt"), "b\n").unwrap();
    let narrowed = decide(&["--only", "--require", "b.txt"]);
    assert!(!narrowed["reasons"].to_string().contains("a.txt"), "{narrowed}");
}

/// A program whose main thread exits while another thread writes on: its
/// leader reads as a zombie, yet its process runs code. Counted as gone, its
/// command was settled and the stop said COMPLETED before the write landed.
#[test]
fn a_process_whose_main_thread_exited_is_still_running() {
    let mut run = Run::new("threads");
    let program = run.place.root.join("late-writer");
    let source = run.place.root.join("late-writer.c");
    std::fs::write(
        &source,
        "#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         static void *late(void *path) { sleep(2); FILE *f = fopen(path, \"w\"); fputs(\"bad\\n\", f); fclose(f); return 0; }\n\
         int main(int argc, char **argv) { pthread_t t; pthread_create(&t, 0, late, argv[1]); pthread_exit(0); }\n",
    )
    .unwrap();
    let built =
        std::process::Command::new("cc").arg("-pthread").arg("-o").arg(&program).arg(&source).status();
    assert!(built.unwrap().success(), "cc builds the late writer");
    run.write("a.txt", "good\n");
    let told = run.bash("./late-writer a.txt &");
    assert!(told.contains("still running"), "{told}");
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "never COMPLETED while its thread runs: {held}");
    wait_for("the late write", || run.file("a.txt") == "bad\n");
}

/// "Permission denied" for a command that ran and left a writer behind:
/// what `/proc` shows contradicts "never ran" (OUT-2), so it is held like
/// any command still running, never settled NOT_EXECUTED.
#[test]
fn a_denial_after_a_command_left_a_writer_holds_it() {
    let mut run = Run::new("denied");
    run.write("a.txt", "good\n");
    run.calls += 1;
    let command = "(sleep 2; echo bad > a.txt) &";
    let input = json!({"command": command});
    run.event("PreToolUse", "Bash", &input);
    run.agent.bash(command);
    let told = run.event("PermissionDenied", "Bash", &input);
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "{told} {held}");
    assert!(held["reason"].as_str().unwrap().contains("echo bad"), "{held}");
    let outcomes = outcomes(&run.place.data, "claude-denied");
    assert!(outcomes.iter().all(|o| o["outcome"]["execution"] != "NOT_EXECUTED"), "{outcomes:?}");
}

/// A command the agent ran in the background: its post-tool event says it
/// was launched, not how it ended: no exit status (OUT-1), never 0.
#[test]
fn a_background_command_has_no_exit_status() {
    let mut run = Run::new("background");
    run.calls += 1;
    let input = json!({"command": "exit 3", "run_in_background": true});
    run.event("PreToolUse", "Bash", &input);
    run.agent.bash("exit 3 || true");
    run.event("PostToolUse", "Bash", &input);
    let outcomes = outcomes(&run.place.data, "claude-background");
    assert_eq!(outcomes[0]["facts"]["exit_code"], Value::Null, "{outcomes:?}");
    assert_eq!(outcomes[0]["outcome"]["execution"], "UNKNOWN", "{outcomes:?}");
}

/// The hook's notes are bookkeeping a command can reach: one rewritten to
/// another boot (where everything would be gone) is no observation at all,
/// and a FIFO among them never hangs a hook.
#[test]
fn a_forged_or_hostile_note_never_closes_a_window_or_hangs_a_hook() {
    let mut run = Run::new("forged");
    run.write("a.txt", "good\n");
    run.calls += 1;
    let input = json!({"command": "true"});
    run.event("PreToolUse", "Bash", &input);
    let folder = run.place.data.join("windows").join("claude-forged");
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        let mut note: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        note["window"]["boot_id"] = json!("another-boot");
        std::fs::write(&path, note.to_string()).unwrap();
    }
    assert_eq!(
        std::process::Command::new("mkfifo").arg(folder.join("zz.json")).status().unwrap().code(),
        Some(0)
    );
    run.agent.bash("true");
    run.event("PostToolUse", "Bash", &input);
    let outcomes = outcomes(&run.place.data, "claude-forged");
    assert!(!seen_gone(&outcomes[1]), "a forged note observes nothing: {outcomes:?}");
    run.read("a.txt");
    assert_eq!(run.stop(false)["decision"], "block");
}

/// A stop at every turn must not make a file the agent wrote and later
/// deleted (a scratch file) required for good: what the stop required by
/// default is undone by a later delete (CMP-7 extended).
#[test]
fn a_file_required_by_default_then_deleted_is_no_longer_required() {
    let mut run = Run::new("scratch");
    let patch = |id: &str, body: &str| {
        json!({"hook_event_name": "PreToolUse", "session_id": "scratch", "cwd": run.place.root.canonicalize().unwrap(),
               "tool_name": "apply_patch", "tool_use_id": id, "tool_input": {"input": body}})
    };
    let add = patch("p1", "*** Begin Patch\n*** Add File: tmp.txt\n+scratch\n*** End Patch\n");
    let delete = patch("p2", "*** Begin Patch\n*** Delete File: tmp.txt\n*** End Patch\n");
    let post = |mut event: Value| {
        event["hook_event_name"] = json!("PostToolUse");
        event["tool_response"] = json!({"exit_code": 0});
        event
    };
    let stop = |run: &Run| {
        json!({"hook_event_name": "Stop", "session_id": "scratch", "cwd": run.place.root.canonicalize().unwrap(),
               "stop_hook_active": false, "last_assistant_message": "Done."})
    };
    let codex = |run: &mut Run, payload: &Value| run.agent.hook(&run.place.data, "codex", payload).1;
    codex(&mut run, &add);
    std::fs::write(run.place.root.join("tmp.txt"), "scratch\n").unwrap();
    codex(&mut run, &post(add.clone()));
    let first = stop(&run);
    codex(&mut run, &first);
    codex(&mut run, &delete);
    std::fs::remove_file(run.place.root.join("tmp.txt")).unwrap();
    codex(&mut run, &post(delete.clone()));
    let second = stop(&run);
    let answer = codex(&mut run, &second);
    assert_eq!(answer.get("decision"), None, "not held for a file the session deleted: {answer}");
}

/// The verdict file a headless user reads (CMP-14) never keeps an older
/// COMPLETED after a stop that could not be decided.
#[test]
fn the_verdict_file_follows_every_stop_one_that_could_not_decide_included() {
    let mut run = Run::new("verdicts");
    run.write("x", "x\n");
    completed(&run.stop(false));
    let file = run.place.data.join("verdicts").join("claude-verdicts.txt");
    assert!(std::fs::read_to_string(&file).unwrap().contains("COMPLETED"));
    // The file the session wrote is now a directory: no decision can be made.
    run.bash("rm x; mkdir x");
    let held = run.stop(false);
    assert_eq!(held["decision"], "block", "{held}");
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(!kept.contains("COMPLETED") && kept.contains("could not be decided"), "{kept}");
}
