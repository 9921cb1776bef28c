//! `effects hook` driven as an agent drives it: one process per event, the
//! payload on stdin, this test process as the agent (the hook's parent, so
//! the executor of its claims, LOG-7). The vendors' own types and schemas
//! check the same payloads and outputs in `tests/hooks/` (run by `cargo
//! xtask test`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support;

/// Runs one hook event; answers its stdout as JSON (`Null` when it printed
/// nothing) after checking it exited 0.
fn hook(place: &support::session::Session, dialect: &str, payload: &Value) -> Value {
    hook_with(place, dialect, payload, &[])
}

fn hook_with(place: &support::session::Session, dialect: &str, payload: &Value, args: &[&str]) -> Value {
    let (code, printed, stderr) = run_hook(&place.data, dialect, payload, args);
    assert_eq!(code, 0, "effects hook failed: {stderr}");
    printed
}

/// `effects --data-dir DATA hook --dialect D ARGS...` with `payload` on its
/// stdin: its exit status, its stdout as JSON (`Null` when it printed
/// nothing) and its stderr.
fn run_hook(data: &Path, dialect: &str, payload: &Value, args: &[&str]) -> (i32, Value, String) {
    run_hook_bytes(data, dialect, payload.to_string().as_bytes(), args)
}

/// [`run_hook`] with any bytes on stdin, JSON or not.
fn run_hook_bytes(data: &Path, dialect: &str, payload: &[u8], args: &[&str]) -> (i32, Value, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(data)
        .args(["hook", "--dialect", dialect])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(payload).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let printed = if stdout.trim().is_empty() { Value::Null } else { serde_json::from_str(&stdout).unwrap() };
    (output.status.code().unwrap(), printed, String::from_utf8_lossy(&output.stderr).into_owned())
}

pub(crate) fn base(place: &support::session::Session, event: &str, session: &str) -> Value {
    json!({"hook_event_name": event, "session_id": session, "cwd": place.root.canonicalize().unwrap(),
           "transcript_path": "/dev/null", "permission_mode": "default"})
}

pub(crate) fn tool_event(
    place: &support::session::Session,
    event: &str,
    session: &str,
    tool: &str,
    input: Value,
    id: &str,
) -> Value {
    let mut payload = base(place, event, session);
    payload["tool_name"] = json!(tool);
    payload["tool_input"] = input;
    payload["tool_use_id"] = json!(id);
    if event == "PostToolUse" {
        payload["tool_response"] = json!({});
    }
    payload
}

pub(crate) fn write_input(place: &support::session::Session, file: &str, content: &str) -> Value {
    json!({"file_path": place.root.canonicalize().unwrap().join(file), "content": content})
}

pub(crate) fn stop(place: &support::session::Session, session: &str, active: bool) -> Value {
    let mut payload = base(place, "Stop", session);
    payload["stop_hook_active"] = json!(active);
    payload["last_assistant_message"] = json!("Done.");
    payload
}

/// Every record of the session's log.
pub(crate) fn records(data: &Path, run: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(data.join("effects").join(format!("{run}.log"))).unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

pub(crate) fn claims(data: &Path, run: &str) -> Vec<Value> {
    records(data, run).into_iter().filter_map(|r| r["record"].get("claim").cloned()).collect()
}

pub(crate) fn outcomes(data: &Path, run: &str) -> Vec<Value> {
    records(data, run).into_iter().filter_map(|r| r["record"].get("outcome").cloned()).collect()
}

/// A stop the ledger let through as COMPLETED: never held, and the verdict
/// told to the user all the same (CMP-14), and kept in the file it names.
pub(crate) fn completed(answer: &Value) -> String {
    assert_eq!(answer.get("decision"), None, "COMPLETED holds nothing: {answer}");
    let message = answer["systemMessage"].as_str().unwrap_or_else(|| panic!("told to the user: {answer}"));
    assert!(message.contains("COMPLETED"), "{message}");
    let file = message.rsplit_once("also in ").map(|(_, file)| file.trim_end_matches(".)")).unwrap();
    assert_eq!(std::fs::read_to_string(file).unwrap().trim_end(), message.rsplit_once("\n(This").unwrap().0);
    message.to_owned()
}

#[test]
fn a_write_read_back_stops_freely_and_one_never_settled_is_blocked_naming_it() {
    let place = support::session::session();
    let input = write_input(&place, "a.txt", "hello\n");
    let pre = hook(&place, "claude", &tool_event(&place, "PreToolUse", "s1", "Write", input.clone(), "t1"));
    assert_eq!(pre, Value::Null, "no permission decision at all (EMB-5)");
    std::fs::write(place.root.join("a.txt"), "hello\n").unwrap();
    let post = hook(&place, "claude", &tool_event(&place, "PostToolUse", "s1", "Write", input, "t1"));
    let context = post["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.contains("the bytes are the ones claimed"), "{context}");
    completed(&hook(&place, "claude", &stop(&place, "s1", false)));

    // A second session writes a.txt and its post-tool hook never comes.
    let other = support::session::session();
    let input = write_input(&other, "a.txt", "hello\n");
    hook(&other, "claude", &tool_event(&other, "PreToolUse", "s2", "Write", input, "t1"));
    std::fs::write(other.root.join("a.txt"), "hello\n").unwrap();
    let blocked = hook(&other, "claude", &stop(&other, "s2", false));
    assert_eq!(blocked["decision"], "block", "{blocked}");
    assert!(blocked["reason"].as_str().unwrap().contains("a.txt"), "{blocked}");
    // The stop the hook held once goes through, with what the user must see.
    let told = hook(&other, "claude", &stop(&other, "s2", true));
    assert!(told.get("decision").is_none(), "never a loop: {told}");
    assert!(told["systemMessage"].as_str().unwrap().contains("a.txt"), "{told}");
}

#[test]
fn a_sabotaged_write_is_reported_to_the_agent_and_fails_the_stop() {
    let place = support::session::session();
    let input = write_input(&place, "a.txt", "hello\n");
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "s", "Write", input.clone(), "t1"));
    std::fs::write(place.root.join("a.txt"), "other bytes\n").unwrap();
    let post = hook(&place, "claude", &tool_event(&place, "PostToolUse", "s", "Write", input, "t1"));
    let context = post["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.contains("does NOT hold"), "{context}");
    let blocked = hook(&place, "claude", &stop(&place, "s", false));
    assert!(blocked["reason"].as_str().unwrap().contains("FAILED"), "{blocked}");
}

#[test]
fn a_refused_call_is_denied_with_its_reason() {
    let place = support::session::session();
    let input = json!({"file_path": "/etc/effects-hook-test", "content": "x"});
    let pre = hook(&place, "claude", &tool_event(&place, "PreToolUse", "s", "Write", input, "t1"));
    assert_eq!(pre["hookSpecificOutput"]["permissionDecision"], "deny", "{pre}");
    let gemini = json!({"hook_event_name": "BeforeTool", "session_id": "g", "cwd": place.root,
                        "tool_name": "write_file", "tool_input": {"file_path": "../x", "content": "x"}});
    let denied = hook(&place, "gemini", &gemini);
    assert_eq!(denied["decision"], "deny", "{denied}");
}

#[test]
fn the_post_hook_settles_the_pre_hooks_claim_and_a_failure_is_not_success() {
    let place = support::session::session();
    // Commands through an agent of their own: their windows are judged by
    // its process tree (SPEC 14), not by this test binary's.
    let mut agent = support::agent::Agent::start(&place.root);
    let mut hook = |place: &support::session::Session, dialect: &str, payload: &Value| {
        let (code, printed) = agent.hook(&place.data, dialect, payload);
        assert_eq!(code, 0, "effects hook failed");
        printed
    };
    let input = write_input(&place, "a.txt", "a\n");
    // The pre-tool hook's process has exited; its claim's executor is this
    // process (the agent), alive: the next hook settles it.
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "s", "Write", input.clone(), "t1"));
    std::fs::write(place.root.join("a.txt"), "a\n").unwrap();
    hook(&place, "claude", &tool_event(&place, "PostToolUse", "s", "Write", input, "t1"));
    // A failing Bash arrives only as PostToolUseFailure, without an exit status.
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "s", "Bash", json!({"command": "false"}), "t2"));
    let mut failure =
        tool_event(&place, "PostToolUseFailure", "s", "Bash", json!({"command": "false"}), "t2");
    failure["error"] = json!("Exit code 1");
    hook(&place, "claude", &failure);
    // One whose failure names no exit status is UNKNOWN (OUT-1), never a
    // success and never a made-up status.
    hook(
        &place,
        "claude",
        &tool_event(&place, "PreToolUse", "s", "Bash", json!({"command": "sleep 9"}), "t3"),
    );
    let mut failure =
        tool_event(&place, "PostToolUseFailure", "s", "Bash", json!({"command": "sleep 9"}), "t3");
    failure["error"] = json!("Command timed out");
    hook(&place, "claude", &failure);
    let outcomes = outcomes(&place.data, "claude-s");
    let executions: Vec<&str> =
        outcomes.iter().map(|o| o["outcome"]["execution"].as_str().unwrap()).collect();
    assert_eq!(executions, ["REPORTED_SUCCESS", "FAILED", "UNKNOWN"], "{outcomes:?}");
    assert_eq!(outcomes[1]["facts"]["exit_code"], 1, "the status Claude Code gave");
    assert!(outcomes.iter().all(|o| o["recovery"] == false), "settled, never recovered: {outcomes:?}");
}

#[test]
fn after_the_agent_dies_its_unsettled_claims_recover_interrupted() {
    let place = support::session::session();
    let payload = tool_event(&place, "PreToolUse", "s", "Write", write_input(&place, "a.txt", "a\n"), "t1");
    // A stand-in agent: a process that runs the pre-tool hook, then exits.
    let agent = format!(
        "import subprocess, sys\n\
         r = subprocess.run([{bin:?}, '--data-dir', {data:?}, 'hook', '--dialect', 'claude'], input={payload:?}.encode())\n\
         sys.exit(r.returncode)\n",
        bin = env!("CARGO_BIN_EXE_effects"),
        data = place.data.display().to_string(),
        payload = payload.to_string(),
    );
    let status = Command::new("python3").args(["-c", &agent]).status().unwrap();
    assert!(status.success());
    let claims = records(&place.data, "claude-s");
    let claim = claims.iter().find(|r| r["record"].get("claim").is_some()).unwrap();
    let executor = claim["record"]["claim"]["executor"]["process"]["pid"].as_u64().unwrap();
    assert_ne!(executor, u64::from(std::process::id()), "the executor is the agent, not the test");
    let blocked = hook(&place, "claude", &stop(&place, "s", false));
    assert_eq!(blocked["decision"], "block", "{blocked}");
    let outcomes = outcomes(&place.data, "claude-s");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0]["outcome"]["execution"], "INTERRUPTED");
    assert_eq!(outcomes[0]["recovery"], true);
}

#[test]
fn concurrent_hooks_on_one_run_settle_each_claim_once() {
    let place = support::session::session();
    let calls: Vec<(String, Value)> = (0..6)
        .map(|i| (format!("t{i}"), write_input(&place, &format!("f{i}.txt"), &format!("{i}\n"))))
        .collect();
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let hooks: Vec<_> = calls
            .iter()
            .map(|(id, input)| {
                let place = &place;
                scope.spawn(move || {
                    hook(place, "claude", &tool_event(place, "PreToolUse", "s", "Write", input.clone(), id))
                })
            })
            .collect();
        hooks.into_iter().map(|hook| hook.join().unwrap()).collect()
    });
    assert!(answers.iter().all(Value::is_null), "every tool was let run, none denied: {answers:?}");
    for (i, _) in calls.iter().enumerate() {
        std::fs::write(place.root.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    // Every post-tool hook twice at once (hooks are retried, EMB-3).
    std::thread::scope(|scope| {
        for (id, input) in calls.iter().chain(calls.iter()) {
            let place = &place;
            scope.spawn(move || {
                hook(place, "claude", &tool_event(place, "PostToolUse", "s", "Write", input.clone(), id))
            });
        }
    });
    let records = records(&place.data, "claude-s");
    let claims: Vec<u64> = records
        .iter()
        .filter(|r| r["record"].get("claim").is_some())
        .map(|r| r["position"].as_u64().unwrap())
        .collect();
    assert_eq!(claims.len(), 6, "one claim per tool-use id");
    let mut settled: Vec<u64> =
        outcomes(&place.data, "claude-s").iter().map(|o| o["claim"].as_u64().unwrap()).collect();
    settled.sort_unstable();
    assert_eq!(settled, claims, "each claim settled exactly once");
    completed(&hook(&place, "claude", &stop(&place, "s", false)));
}

#[test]
fn gemini_settles_first_in_first_out_without_an_id() {
    let place = support::session::session();
    let event = |name: &str, content: &str| {
        json!({"hook_event_name": name, "session_id": "g", "cwd": place.root.canonicalize().unwrap(),
               "timestamp": "2026-12-03T00:00:00Z", "tool_name": "write_file",
               "tool_input": {"file_path": "a.txt", "content": content}, "tool_response": {}})
    };
    assert_eq!(hook(&place, "gemini", &event("BeforeTool", "x\n")), Value::Null);
    assert_eq!(hook(&place, "gemini", &event("BeforeTool", "x\n")), Value::Null);
    std::fs::write(place.root.join("a.txt"), "x\n").unwrap();
    hook(&place, "gemini", &event("AfterTool", "x\n"));
    hook(&place, "gemini", &event("AfterTool", "x\n"));
    let settled: Vec<u64> =
        outcomes(&place.data, "gemini-g").iter().map(|o| o["claim"].as_u64().unwrap()).collect();
    assert_eq!(settled.len(), 2, "two identical calls, two claims, each settled once: {settled:?}");
    assert!(settled[0] < settled[1], "first in, first out");
    // Four identical calls in flight, their after-tool hooks all at once:
    // each claim settled exactly once, whichever hook took which.
    for _ in 0..4 {
        hook(&place, "gemini", &event("BeforeTool", "x\n"));
    }
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| hook(&place, "gemini", &event("AfterTool", "x\n")));
        }
    });
    let claims = claims(&place.data, "gemini-g").len();
    let mut settled: Vec<u64> =
        outcomes(&place.data, "gemini-g").iter().map(|o| o["claim"].as_u64().unwrap()).collect();
    settled.sort_unstable();
    let outcomes_written = settled.len();
    settled.dedup();
    assert_eq!((claims, settled.len(), outcomes_written), (6, 6, 6), "every claim settled once: {settled:?}");
    let after = json!({"hook_event_name": "AfterAgent", "session_id": "g", "cwd": place.root,
                       "prompt": "p", "prompt_response": "Done.", "stop_hook_active": false});
    completed(&hook(&place, "gemini", &after));
}

/// OUT-1, TRU-1: Gemini's shell result puts the command's output before its
/// own `Exit Code` line, so a command that prints `Exit Code: 0` says
/// nothing about its status: one that exited 1 is FAILED with 1, and one a
/// signal ended (`Exit Code: (none)`) is UNKNOWN, never a success.
#[test]
fn a_gemini_command_cannot_print_its_own_exit_status() {
    let place = support::session::session();
    let mut agent = support::agent::Agent::start(&place.root);
    let mut hook = |place: &support::session::Session, dialect: &str, payload: &Value| {
        assert_eq!(agent.hook(&place.data, dialect, payload).0, 0, "effects hook failed");
    };
    let shell = |name: &str, command: &str, content: Option<String>| {
        let mut event = json!({"hook_event_name": name, "session_id": "spoof",
               "cwd": place.root.canonicalize().unwrap(), "timestamp": "2026-12-05T00:00:00Z",
               "tool_name": "run_shell_command", "tool_input": {"command": command}, "tool_response": {}});
        if let Some(content) = content {
            event["tool_response"]["llmContent"] = json!(content);
        }
        event
    };
    let result = |output: &str, exit: &str, signal: &str| {
        format!(
            "Command: ./build.sh\nDirectory: (root)\nOutput: {output}\nError: (none)\nExit Code: {exit}\n\
             Signal: {signal}\nBackground PIDs: (none)\nProcess Group PGID: 4242"
        )
    };
    let spoof = "step 1 done\nExit Code: 0\nSignal: (none)";
    for (command, exit, signal) in [("./build.sh", "1", "(none)"), ("./build.sh --long", "(none)", "9")] {
        hook(&place, "gemini", &shell("BeforeTool", command, None));
        hook(&place, "gemini", &shell("AfterTool", command, Some(result(spoof, exit, signal))));
    }
    // The honest result, for contrast: its status is read.
    hook(&place, "gemini", &shell("BeforeTool", "./build.sh --ok", None));
    hook(&place, "gemini", &shell("AfterTool", "./build.sh --ok", Some(result("built", "0", "(none)"))));
    let outcomes = outcomes(&place.data, "gemini-spoof");
    let settled: Vec<(&str, &Value)> = outcomes
        .iter()
        .map(|o| (o["outcome"]["execution"].as_str().unwrap(), &o["facts"]["exit_code"]))
        .collect();
    assert_eq!(
        settled,
        [("FAILED", &json!(1)), ("UNKNOWN", &Value::Null), ("REPORTED_SUCCESS", &json!(0))],
        "{outcomes:?}"
    );
}

#[test]
fn a_required_file_never_written_blocks_the_stop() {
    let place = support::session::session();
    let blocked = hook_with(&place, "codex", &stop(&place, "c", false), &["--require", "report.md"]);
    assert_eq!(blocked["decision"], "block", "{blocked}");
    assert!(blocked["reason"].as_str().unwrap().contains("report.md"), "{blocked}");
}

#[test]
fn install_prints_and_merges_the_settings() {
    let place = support::session::session();
    let printed = Command::new(env!("CARGO_BIN_EXE_effects"))
        .args(["hook", "install", "--dialect", "claude"])
        .output()
        .unwrap();
    assert!(printed.status.success());
    let snippet: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert!(
        snippet["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .contains("hook --dialect claude")
    );
    std::fs::create_dir_all(place.root.join(".claude")).unwrap();
    std::fs::write(place.root.join(".claude/settings.json"), r#"{"model": "opus"}"#).unwrap();
    for _ in 0..2 {
        let merged = Command::new(env!("CARGO_BIN_EXE_effects"))
            .args(["hook", "install", "--dialect", "claude", "--project"])
            .current_dir(&place.root)
            .output()
            .unwrap();
        assert!(merged.status.success(), "{}", String::from_utf8_lossy(&merged.stderr));
    }
    let settings: Value =
        serde_json::from_slice(&std::fs::read(place.root.join(".claude/settings.json")).unwrap()).unwrap();
    assert_eq!(settings["model"], "opus");
    assert_eq!(settings["hooks"]["Stop"].as_array().unwrap().len(), 1, "merged once: {settings}");
}

/// `effects hook` with its exit status, for the failure paths.
fn hook_status(data: &Path, dialect: &str, payload: &Value) -> (i32, Value) {
    let (code, printed, _) = run_hook(data, dialect, payload, &[]);
    (code, printed)
}

#[test]
fn a_ledger_that_cannot_open_denies_tools_holds_the_stop_once_and_never_loops() {
    let place = support::session::session();
    // A data dir that cannot hold a store: every event fails to open it.
    let broken = place.root.parent().unwrap().join("not-a-dir");
    std::fs::write(&broken, "").unwrap();
    let pre = tool_event(&place, "PreToolUse", "s", "Write", write_input(&place, "a.txt", "a\n"), "t1");
    let (code, denied) = hook_status(&broken, "claude", &pre);
    assert_eq!((code, denied["hookSpecificOutput"]["permissionDecision"].as_str()), (0, Some("deny")));
    let (code, held) = hook_status(&broken, "claude", &stop(&place, "s", false));
    assert_eq!((code, held["decision"].as_str()), (0, Some("block")), "held once: {held}");
    let (code, told) = hook_status(&broken, "claude", &stop(&place, "s", true));
    assert_eq!(code, 0);
    assert!(told.get("decision").is_none() && told["systemMessage"].is_string(), "never a loop: {told}");
    // After a tool, a failure only warns (exit 1): exit 2 would feed the
    // agent an error as if the tool failed.
    let post = tool_event(&place, "PostToolUse", "s", "Write", write_input(&place, "a.txt", "a\n"), "t1");
    assert_eq!(hook_status(&broken, "claude", &post).0, 1);
    // An unreadable stop only warns; an unreadable pre-tool event is denied.
    let (code, _) = hook_status(&place.data, "claude", &json!({"hook_event_name": "Stop"}));
    assert_eq!(code, 1);
    let (code, denied) = hook_status(&place.data, "claude", &json!({"hook_event_name": "PreToolUse"}));
    assert_eq!((code, denied["hookSpecificOutput"]["permissionDecision"].as_str()), (0, Some("deny")));
}

#[test]
fn an_exit_status_is_taken_only_from_the_agents_own_shell() {
    let place = support::session::session();
    let mut agent = support::agent::Agent::start(&place.root);
    let mut hook = |place: &support::session::Session, dialect: &str, payload: &Value| {
        assert_eq!(agent.hook(&place.data, dialect, payload).0, 0, "effects hook failed");
    };
    let codex = |event: &str, tool: &str, input: Value, id: &str, response: Value| {
        let mut payload = tool_event(&place, event, "c", tool, input, id);
        payload["tool_response"] = response;
        payload
    };
    let bash = json!({"command": "make"});
    hook(&place, "codex", &codex("PreToolUse", "Bash", bash.clone(), "b1", json!(null)));
    hook(&place, "codex", &codex("PostToolUse", "Bash", bash.clone(), "b1", json!({"output": "done"})));
    hook(&place, "codex", &codex("PreToolUse", "Bash", bash.clone(), "b2", json!(null)));
    hook(&place, "codex", &codex("PostToolUse", "Bash", bash, "b2", json!({"exit_code": 2})));
    // An MCP tool's result that says `exit_code: 0` is its output, not a
    // status the agent reported.
    let mcp = json!({"query": "x"});
    hook(&place, "codex", &codex("PreToolUse", "mcp__db__run", mcp.clone(), "m1", json!(null)));
    hook(&place, "codex", &codex("PostToolUse", "mcp__db__run", mcp, "m1", json!({"exit_code": 0})));
    let executions: Vec<String> = outcomes(&place.data, "codex-c")
        .iter()
        .map(|o| o["outcome"]["execution"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(executions, ["UNKNOWN", "FAILED", "UNKNOWN"]);
}

#[test]
fn a_patch_is_required_at_stop_and_a_denied_write_is_not() {
    let place = support::session::session();
    let patch = "*** Begin Patch\n*** Add File: p.txt\n+p\n*** End Patch\n";
    let pre = json!({"hook_event_name": "PreToolUse", "session_id": "p", "cwd": place.root.canonicalize().unwrap(),
                     "tool_name": "apply_patch", "tool_use_id": "a1", "tool_input": {"input": patch}});
    hook(&place, "codex", &pre);
    // The patch never settles: the stop names the file it adds.
    let held = hook(&place, "codex", &stop(&place, "p", false));
    assert!(held["reason"].as_str().unwrap().contains("p.txt"), "{held}");
    // A write the user refused never ran: nothing to require.
    let other = support::session::session();
    let input = write_input(&other, "d.txt", "d\n");
    hook(&other, "claude", &tool_event(&other, "PreToolUse", "d", "Write", input.clone(), "w1"));
    let mut denied = tool_event(&other, "PermissionDenied", "d", "Write", input, "w1");
    denied["reason"] = json!("the user said no");
    assert_eq!(hook(&other, "claude", &denied), Value::Null);
    // Nothing was done, nothing to hold.
    completed(&hook(&other, "claude", &stop(&other, "d", false)));
}

/// An event that cannot be parsed (a lone surrogate in a tool's input, as
/// JavaScript writes a broken emoji; nesting past the parser's depth; more
/// than the 16 MiB bound) cannot be claimed: if its bytes name a tool about
/// to run, the tool is denied, not let run unclaimed behind a warning.
/// Anything else only warns, and no log is begun.
#[test]
fn an_unreadable_event_that_names_a_tool_about_to_run_is_denied() {
    let place = support::session::session();
    let pre = tool_event(&place, "PreToolUse", "u", "Write", write_input(&place, "a.txt", "LONE"), "t1");
    let lone = pre.to_string().replace("LONE", "bad \\ud83d bytes");
    assert!(serde_json::from_str::<Value>(&lone).is_err(), "the payload is not JSON: {lone}");
    let deep = format!(
        r#"{{"hook_event_name": "BeforeTool", "session_id": "u", "cwd": {}, "tool_name": "mcp_x_y", "tool_input": {{"a": {}1{}}}}}"#,
        json!(place.root.canonicalize().unwrap()),
        "[".repeat(200),
        "]".repeat(200)
    );
    // Past the bound, with the event's name after the tool's input: the
    // whole input is scanned.
    let mut large = pre.clone();
    large["tool_input"]["content"] = json!("x".repeat(17 << 20));
    large.as_object_mut().unwrap().remove("hook_event_name");
    let large = large.to_string();
    let large = format!("{},\"hook_event_name\":\"PreToolUse\"}}", large.strip_suffix('}').unwrap());
    for (dialect, bytes) in [("claude", lone.as_str()), ("gemini", deep.as_str()), ("codex", large.as_str())]
    {
        let (code, printed, stderr) = run_hook_bytes(&place.data, dialect, bytes.as_bytes(), &[]);
        assert_eq!(code, 0, "{dialect}: {stderr}");
        let denied = match dialect {
            "gemini" => printed["decision"].as_str(),
            _ => printed["hookSpecificOutput"]["permissionDecision"].as_str(),
        };
        assert_eq!(denied, Some("deny"), "{dialect}: {printed}");
    }
    // A stop that cannot be read is not held (EMB-5): it warns.
    let stop = stop(&place, "u", false).to_string().replace("Done.", "Done \\udc00");
    let (code, printed, _) = run_hook_bytes(&place.data, "claude", stop.as_bytes(), &[]);
    assert_eq!((code, printed), (1, Value::Null));
    // Text in a tool's input that spells the event is inside a string,
    // where its quotes are escaped: a PostToolUse carrying it only warns.
    let post = tool_event(&place, "PostToolUse", "u", "Write", write_input(&place, "a.txt", "LONE"), "t1");
    let post = post.to_string().replace("LONE", r#"\"hook_event_name\":\"PreToolUse\" \ud83d"#);
    let (code, printed, _) = run_hook_bytes(&place.data, "claude", post.as_bytes(), &[]);
    assert_eq!((code, printed), (1, Value::Null), "{post}");
    // So is the key itself inside a tool's input: only the top level names
    // the event.
    let mut nested = tool_event(&place, "PostToolUse", "u", "mcp__s__t", json!({"note": "LONE"}), "t2");
    nested["tool_input"]["hook_event_name"] = json!("PreToolUse");
    let nested = nested.to_string().replace("LONE", "x\\ud83d");
    let (code, printed, _) = run_hook_bytes(&place.data, "claude", nested.as_bytes(), &[]);
    assert_eq!((code, printed), (1, Value::Null), "{nested}");
    assert!(!place.data.join("effects").join("claude-u.log").exists(), "nothing was claimed");
}

/// `link/../b.txt` names `b.txt` to text, but the agent's own `Write` opens
/// it as given and lands beside wherever `link` points, outside the root:
/// the tool is denied before it runs, so the ledger never verifies a file
/// the call did not write. A real directory is no better: it may be a
/// symlink by the time the tool runs (ID-3).
#[test]
#[allow(clippy::disallowed_methods)] // the test lays out the agent's files by path
fn a_write_through_dot_dot_is_denied() {
    let place = support::session::session();
    let root = place.root.canonicalize().unwrap();
    let outside = root.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("b.txt"), "hello\n").unwrap();
    for (id, through) in [("t1", "link/../b.txt"), ("t2", "d/../b.txt")] {
        let input = json!({"file_path": root.join(through), "content": "hello\n"});
        let printed = hook(&place, "claude", &tool_event(&place, "PreToolUse", "l", "Write", input, id));
        assert_eq!(printed["hookSpecificOutput"]["permissionDecision"].as_str(), Some("deny"), "{printed}");
        let reason = printed["hookSpecificOutput"]["permissionDecisionReason"].as_str().unwrap_or_default();
        assert!(reason.contains("`..`"), "the reason names the `..`: {reason}");
    }
    let log = place.data.join("effects").join("claude-l.log");
    assert!(!log.exists() || claims(&place.data, "claude-l").is_empty(), "nothing was claimed");
}

/// A path the agent gives relative is taken from where its own tool takes
/// it: Codex CLI applies a patch from its working directory, so with the
/// root named apart from it (`--root`), a patch cannot be claimed as the
/// files it will write, and is denied; at the root it is claimed.
#[test]
fn a_codex_patch_applied_away_from_the_root_is_denied() {
    let place = support::session::session();
    let root = place.root.canonicalize().unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let patch = "*** Begin Patch\n*** Add File: p.txt\n+p\n*** End Patch\n";
    let pre = |cwd: &Path, id: &str| {
        json!({"hook_event_name": "PreToolUse", "session_id": "r", "cwd": cwd,
               "tool_name": "apply_patch", "tool_use_id": id, "tool_input": {"input": patch}})
    };
    let root_arg = root.to_str().unwrap();
    let denied = hook_with(&place, "codex", &pre(&root.join("sub"), "a1"), &["--root", root_arg]);
    assert_eq!(denied["hookSpecificOutput"]["permissionDecision"].as_str(), Some("deny"), "{denied}");
    assert_eq!(hook_with(&place, "codex", &pre(&root, "a2"), &["--root", root_arg]), Value::Null);
    assert_eq!(claims(&place.data, "codex-r").len(), 1, "only the patch applied at the root was claimed");
}

/// EMB-1 (extended): a tool the agent ran with no claim (its pre-tool hook
/// timed out, or never ran) is recorded as an effect that ran unclaimed, so
/// the stop is not silent about it; never a COMPLETED over a write nobody
/// claimed.
#[test]
fn a_tool_that_ran_unclaimed_is_recorded_and_the_stop_says_so() {
    let place = support::session::session();
    let input = write_input(&place, "a.txt", "a\n");
    // No PreToolUse: the agent gave up waiting for it and wrote anyway.
    std::fs::write(place.root.join("a.txt"), "a\n").unwrap();
    let told = hook(&place, "claude", &tool_event(&place, "PostToolUse", "u", "Write", input.clone(), "w1"));
    let context = told["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(context.contains("ran unclaimed"), "{context}");
    // A retried post-tool hook records it once.
    hook(&place, "claude", &tool_event(&place, "PostToolUse", "u", "Write", input, "w1"));
    let claims = claims(&place.data, "claude-u");
    assert_eq!(claims.len(), 1, "{claims:?}");
    assert_eq!(claims[0]["operation"]["tool"], "Write (ran unclaimed)", "{claims:?}");
    let held = hook(&place, "claude", &stop(&place, "u", false));
    assert_eq!(held["decision"], "block", "not COMPLETED over an unclaimed write: {held}");
    assert!(held["reason"].as_str().unwrap().contains("ran unclaimed"), "{held}");
}

/// OUT-2 (extended): "permission denied" that arrives after the tool wrote
/// the claimed bytes is contradicted by the readback: not NOT_EXECUTED.
#[test]
fn a_denial_the_file_contradicts_is_not_never_ran() {
    let place = support::session::session();
    let input = write_input(&place, "a.txt", "claimed\n");
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "d", "Write", input.clone(), "w1"));
    std::fs::write(place.root.join("a.txt"), "claimed\n").unwrap();
    let mut denied = tool_event(&place, "PermissionDenied", "d", "Write", input, "w1");
    denied["reason"] = json!("denied too late");
    hook(&place, "claude", &denied);
    let outcomes = outcomes(&place.data, "claude-d");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_ne!(outcomes[0]["outcome"]["execution"], "NOT_EXECUTED", "{outcomes:?}");
    assert_eq!(outcomes[0]["facts"]["executed"], true, "{outcomes:?}");
    // A denial the file agrees with still never ran.
    let input = write_input(&place, "b.txt", "b\n");
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "d", "Write", input.clone(), "w2"));
    let mut denied = tool_event(&place, "PermissionDenied", "d", "Write", input, "w2");
    denied["reason"] = json!("no");
    hook(&place, "claude", &denied);
    assert_eq!(self::outcomes(&place.data, "claude-d")[1]["outcome"]["execution"], "NOT_EXECUTED");
}

#[test]
fn another_session_s_write_in_flight_holds_the_stop_naming_it() {
    // CMP-13: two agent sessions on one project and one data dir.
    let place = support::session::session();
    let theirs = write_input(&place, "a.txt", "hello\n");
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "s2", "Write", theirs.clone(), "b1"));
    let ours = write_input(&place, "a.txt", "hello\n");
    hook(&place, "claude", &tool_event(&place, "PreToolUse", "s1", "Write", ours.clone(), "a1"));
    std::fs::write(place.root.join("a.txt"), "hello\n").unwrap();
    hook(&place, "claude", &tool_event(&place, "PostToolUse", "s1", "Write", ours, "a1"));
    // Session s2's write is claimed and unsettled, its agent alive: s1's own
    // evidence is complete, yet s2 may be writing a.txt now.
    let held = hook(&place, "claude", &stop(&place, "s1", false));
    assert_eq!(held["decision"], "block", "{held}");
    let reason = held["reason"].as_str().unwrap();
    assert!(reason.contains("claude-s2") && reason.contains("still in flight"), "{reason}");
    // Once s2's write settles, nothing of another run is in flight, and its
    // marker is gone.
    hook(&place, "claude", &tool_event(&place, "PostToolUse", "s2", "Write", theirs, "b1"));
    completed(&hook(&place, "claude", &stop(&place, "s1", false)));
    let left = std::fs::read_dir(place.data.join("inflight")).unwrap().count();
    assert_eq!(left, 0, "every claim settled, no marker left");
}
