//! The three hook contracts `effects hook` speaks (docs/hooks.md): what each
//! agent sends on stdin per event, read into one [`Event`], and what each
//! expects back, written from one [`Answer`]. Claude Code's contract is the
//! model (OpenHands, Qwen Code, Goose and VS Code reuse it); Codex CLI's is
//! nearly the same; Gemini CLI names its events differently, carries no
//! tool-use id and denies with a top-level `decision`.
//!
//! Also here: each dialect's tool names mapped onto the ledger's calls (the
//! producer profiles of EMB-4: what the agent's own tool writes, as a pure
//! transformation of its input).

use std::path::Path;

use clap::ValueEnum;
use serde_json::{Map, Value, json};

/// An agent's hook contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dialect {
    /// Claude Code (and the agents that reuse its contract).
    Claude,
    /// OpenAI Codex CLI.
    Codex,
    /// Google Gemini CLI.
    Gemini,
}

impl Dialect {
    /// The name used on the command line and in run ids.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Claude => "claude",
            Dialect::Codex => "codex",
            Dialect::Gemini => "gemini",
        }
    }

    /// The producer profile of this agent's tools (EMB-4).
    pub fn profile(self) -> &'static str {
        match self {
            Dialect::Claude => "claude-code",
            Dialect::Codex => "codex",
            Dialect::Gemini => "gemini",
        }
    }

    /// The events this dialect's hooks are installed for, as the agent names
    /// them.
    pub fn events(self) -> &'static [&'static str] {
        match self {
            Dialect::Claude => {
                &["PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionDenied", "Stop"]
            }
            Dialect::Codex => &["PreToolUse", "PostToolUse", "Stop"],
            Dialect::Gemini => &["BeforeTool", "AfterTool", "AfterAgent"],
        }
    }
}

/// What happened, in the ledger's terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// The tool is about to run.
    Before,
    /// The tool ran and the agent says it succeeded.
    After,
    /// The tool ran and the agent says it failed; `interrupted` when the
    /// user stopped it.
    Failed { error: String, interrupted: bool },
    /// The tool never ran (the user or a rule denied it).
    Denied,
    /// The agent is about to stop; `active` when a stop hook already made
    /// it go on once (EMB-5: never block again).
    Stop { active: bool, last_message: Option<String> },
    /// An event the ledger has nothing to do at.
    Other(String),
}

/// One hook event.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    /// The event's name as the agent sent it.
    pub name: String,
    pub session_id: String,
    pub cwd: Option<String>,
    pub tool_name: String,
    pub tool_input: Value,
    pub tool_response: Value,
    /// The agent's id of this tool call (Claude Code, Codex); Gemini has none.
    pub tool_use_id: Option<String>,
}

fn text(payload: &Map<String, Value>, key: &str) -> Option<String> {
    payload.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Reads one payload as `dialect` sends it.
pub fn parse(dialect: Dialect, payload: &Value) -> Result<Event, String> {
    let Some(payload) = payload.as_object() else {
        return Err("the hook input is not a JSON object".into());
    };
    let name = text(payload, "hook_event_name").ok_or("the hook input has no `hook_event_name`")?;
    let session_id = text(payload, "session_id").ok_or("the hook input has no `session_id`")?;
    let kind = match (dialect, name.as_str()) {
        (_, "PreToolUse") | (Dialect::Gemini, "BeforeTool") => Kind::Before,
        (Dialect::Gemini, "AfterTool") => match payload.get("tool_response").and_then(|r| r.get("error")) {
            Some(error) if !error.is_null() => Kind::Failed {
                error: error.as_str().map_or_else(|| error.to_string(), str::to_owned),
                interrupted: false,
            },
            _ => Kind::After,
        },
        (_, "PostToolUse") => Kind::After,
        (Dialect::Claude, "PostToolUseFailure") => Kind::Failed {
            error: text(payload, "error").unwrap_or_default(),
            interrupted: payload.get("is_interrupt").and_then(Value::as_bool).unwrap_or(false),
        },
        (Dialect::Claude, "PermissionDenied") => Kind::Denied,
        (Dialect::Claude | Dialect::Codex, "Stop") | (Dialect::Gemini, "AfterAgent") => Kind::Stop {
            active: payload.get("stop_hook_active").and_then(Value::as_bool).unwrap_or(false),
            last_message: text(payload, "last_assistant_message")
                .or_else(|| text(payload, "prompt_response")),
        },
        (_, other) => Kind::Other(other.to_owned()),
    };
    let tool_bound = matches!(kind, Kind::Before | Kind::After | Kind::Failed { .. } | Kind::Denied);
    let tool_name = text(payload, "tool_name").unwrap_or_default();
    if tool_bound && tool_name.is_empty() {
        return Err(format!("the {name} input has no `tool_name`"));
    }
    Ok(Event {
        kind,
        name,
        session_id,
        cwd: text(payload, "cwd"),
        tool_name,
        tool_input: payload.get("tool_input").cloned().unwrap_or(Value::Null),
        tool_response: payload.get("tool_response").cloned().unwrap_or(Value::Null),
        tool_use_id: text(payload, "tool_use_id").filter(|id| !id.is_empty()),
    })
}

/// The dialect's event for a tool about to run.
fn before_tool(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Gemini => "BeforeTool",
        Dialect::Claude | Dialect::Codex => "PreToolUse",
    }
}

/// Whether an unreadable `payload` still says a tool is about to run (so
/// the hook must deny it rather than let it run unclaimed).
pub fn names_a_tool_about_to_run(dialect: Dialect, payload: &Value) -> bool {
    payload.get("hook_event_name").and_then(Value::as_str) == Some(before_tool(dialect))
}

/// The top-level `hook_event_name` of an event's bytes that do not parse
/// as JSON (past the input bound, nested too deep, a lone surrogate): a
/// scan that keeps track of strings, escapes and nesting, fed in pieces,
/// so a tool's own input or output, nested inside the event, cannot pass
/// for it, and the key is found wherever it comes in the input.
#[derive(Debug, Default)]
pub struct EventScan {
    /// Objects and arrays open around the current byte.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At the top level, the next string is a key.
    expect_key: bool,
    /// The last key at the top level was `hook_event_name`.
    named: bool,
    /// The top-level string being read (its first bytes).
    token: Vec<u8>,
    /// The event's name as the scan last found it (the last of duplicates,
    /// as a JSON parser takes it).
    event: Option<Vec<u8>>,
}

/// Longer top-level strings are no key or event name worth keeping.
const SCAN_TOKEN: usize = 64;

impl EventScan {
    /// Reads the next bytes of the event.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if self.in_string {
                match (self.escaped, byte) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => {
                        self.in_string = false;
                        if self.depth == 1 {
                            self.top_level_string();
                        }
                        continue;
                    }
                    _ => {}
                }
                if self.depth == 1 && self.token.len() <= SCAN_TOKEN {
                    self.token.push(byte);
                }
                continue;
            }
            match byte {
                b'"' => {
                    self.in_string = true;
                    self.token.clear();
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    self.expect_key = self.depth == 1 && byte == b'{';
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b',' if self.depth == 1 => self.expect_key = true,
                _ => {}
            }
        }
    }

    fn top_level_string(&mut self) {
        if self.expect_key {
            self.named = self.token == b"hook_event_name";
            self.expect_key = false;
        } else if std::mem::take(&mut self.named) {
            self.event = Some(self.token.clone());
        }
    }

    /// Whether the event is the dialect's before-tool event: a tool about
    /// to run.
    pub fn names_a_tool_about_to_run(&self, dialect: Dialect) -> bool {
        self.event.as_deref() == Some(before_tool(dialect).as_bytes())
    }
}

/// What one agent tool call is, for the ledger.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    /// An effect, claimed before it runs: the ledger tool and its input.
    Effect { tool: String, input: Value },
    /// A read of one file: after it, the ledger reads the file itself.
    Read { path: String },
    /// Nothing the ledger tracks (a search, a fetch, a to-do list).
    Nothing,
    /// A call the ledger cannot name as the agent's tool will run it: why.
    /// Before it runs, it is denied (EMB-1).
    Refused(String),
}

/// The agent's read-only tools, by dialect: no claim, nothing to settle.
fn read_only(dialect: Dialect, tool: &str) -> bool {
    let names: &[&str] = match dialect {
        Dialect::Claude => &[
            "Glob",
            "Grep",
            "LS",
            "WebFetch",
            "WebSearch",
            "TodoWrite",
            "Task",
            "Agent",
            "ExitPlanMode",
            "BashOutput",
            "NotebookRead",
            "ListMcpResourcesTool",
            "ReadMcpResourceTool",
            "AskUserQuestion",
        ],
        Dialect::Codex => &["view_image", "update_plan", "web_search"],
        Dialect::Gemini => &[
            "glob",
            "search_file_content",
            "list_directory",
            "read_many_files",
            "google_web_search",
            "web_fetch",
            "write_todos",
        ],
    };
    names.contains(&tool)
}

/// `path` as the ledger names it: relative to `root` when beneath it (the
/// agents send absolute paths); anything else is left as given, and binding
/// refuses it (an escape, ID-2). A relative path is taken from `base` (the
/// agent's working directory, or its project), as the agent's own tool
/// takes it, then named from the root.
fn relative(root: &Path, base: &Path, path: &str) -> String {
    let path = base.join(path);
    match path.strip_prefix(root) {
        Ok(rest) if rest.as_os_str().is_empty() => ".".into(),
        Ok(rest) => rest.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

fn field<'a>(input: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|key| input.get(*key).and_then(Value::as_str))
}

/// The producer profiles (EMB-4): `tool_name` with `input`, as the agent's
/// own tool runs it, as a ledger call. Each is a pure transformation:
/// contents are passed byte for byte (Claude Code's `Write` writes its
/// `content` as given, fences and line endings included; so do Codex and
/// Gemini), paths are made relative to `root`: a relative one as the agent
/// takes it, from `base` (the directory it resolves paths from).
pub fn map(dialect: Dialect, root: &Path, base: &Path, tool_name: &str, input: &Value) -> Mapped {
    let path_of = |keys: &[&str]| field(input, keys).map(|path| relative(root, base, path));
    let custom = || Mapped::Effect { tool: tool_name.to_owned(), input: object(input) };
    if let Some(rest) = tool_name.strip_prefix("mcp__") {
        let (server, tool) = rest.split_once("__").unwrap_or((rest, ""));
        return Mapped::Effect {
            tool: "external".into(),
            input: json!({"server": server, "tool": tool, "arguments": object(input)}),
        };
    }
    if read_only(dialect, tool_name) {
        return Mapped::Nothing;
    }
    match (dialect, tool_name) {
        (Dialect::Claude, "Write") | (Dialect::Gemini, "write_file") => {
            match (path_of(&["file_path", "path"]), field(input, &["content"])) {
                (Some(path), Some(content)) => Mapped::Effect {
                    tool: "write_file".into(),
                    input: json!({"path": path, "content": content}),
                },
                _ => custom(),
            }
        }
        (Dialect::Claude, "Edit") | (Dialect::Gemini, "replace") => {
            let replace_all = match dialect {
                Dialect::Gemini => match input.get("expected_replacements").and_then(Value::as_u64) {
                    None | Some(1) => false,
                    // "exactly N" is not "all": the ledger cannot predict it.
                    Some(_) => return custom(),
                },
                _ => input.get("replace_all").and_then(Value::as_bool).unwrap_or(false),
            };
            match (
                path_of(&["file_path", "path"]),
                field(input, &["old_string"]),
                field(input, &["new_string"]),
            ) {
                (Some(path), Some(old), Some(new)) => Mapped::Effect {
                    tool: "edit_file".into(),
                    input: json!({"path": path, "old_string": old, "new_string": new, "replace_all": replace_all}),
                },
                _ => custom(),
            }
        }
        (Dialect::Codex, "apply_patch") => match field(input, &["patch", "input", "command"]) {
            // The patch names its files from Codex's working directory; the
            // ledger binds them from the root, so the two must be one.
            Some(_) if base != root => Mapped::Refused(format!(
                "Codex applies this patch's paths from its working directory {}, not from the root {}, \
                 so the files it claims would not be the files written; run the hook with --root at the \
                 session's working directory",
                base.display(),
                root.display()
            )),
            Some(patch) => Mapped::Effect { tool: "apply_patch".into(), input: json!({"patch": patch}) },
            None => custom(),
        },
        (Dialect::Claude | Dialect::Codex, "Bash") | (Dialect::Gemini, "run_shell_command") => {
            match field(input, &["command"]) {
                // A command the agent runs: unknown scope, exit status only
                // (TRU-1). One it runs in the background too: its window
                // stays open while what it started lives (SPEC 14, the
                // hook's held windows), so it is a command like any other.
                Some(command) => Mapped::Effect { tool: "bash".into(), input: json!({"command": command}) },
                None => custom(),
            }
        }
        (Dialect::Claude, "Read") | (Dialect::Gemini, "read_file") => {
            match path_of(&["file_path", "absolute_path", "path"]) {
                // A read of part of a file verifies nothing (CMP-3); the
                // ledger's own read after it is whole.
                Some(path) => Mapped::Read { path },
                None => Mapped::Nothing,
            }
        }
        _ => custom(),
    }
}

fn object(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        Value::Null => json!({}),
        other => json!({ "input": other }),
    }
}

/// What the hook says back.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Nothing at all (EMB-5: no "allow", which would skip the user's prompt).
    Silent,
    /// Do not run the tool, because `reason`.
    Deny(String),
    /// Context for the agent about the call that just ran.
    Context(String),
    /// Do not stop yet: `reason` goes to the agent.
    Block(String),
    /// Let it stop, and show `message` to the user.
    Tell(String),
}

/// The answer's stdout, as `dialect` reads it on `event` (`None`: print
/// nothing).
pub fn render(dialect: Dialect, event: &str, answer: &Answer) -> Option<Value> {
    Some(match (dialect, answer) {
        (_, Answer::Silent) => return None,
        (Dialect::Gemini, Answer::Deny(reason)) => json!({"decision": "deny", "reason": reason}),
        (_, Answer::Deny(reason)) => json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }}),
        // Claude Code's PermissionDenied output carries no context.
        (Dialect::Claude, Answer::Context(_)) if event == "PermissionDenied" => return None,
        (_, Answer::Context(context)) => json!({"hookSpecificOutput": {
            "hookEventName": event,
            "additionalContext": context,
        }}),
        (Dialect::Gemini, Answer::Block(reason)) => json!({"decision": "deny", "reason": reason}),
        (_, Answer::Block(reason)) => json!({"decision": "block", "reason": reason}),
        (_, Answer::Tell(message)) => json!({"systemMessage": message}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/work/project";

    fn mapped(dialect: Dialect, tool: &str, input: Value) -> Mapped {
        map(dialect, Path::new(ROOT), Path::new(ROOT), tool, &input)
    }

    #[test]
    fn writes_keep_their_bytes_fences_and_line_endings_included() {
        // Vectors of the profiles: the content is what the tool writes.
        for content in ["```rust\nfn main() {}\n```\n", "a\r\nb\r\n", "no newline", ""] {
            let input = json!({"file_path": format!("{ROOT}/src/a.rs"), "content": content});
            let expected = Mapped::Effect {
                tool: "write_file".into(),
                input: json!({"path": "src/a.rs", "content": content}),
            };
            assert_eq!(mapped(Dialect::Claude, "Write", input.clone()), expected);
            assert_eq!(mapped(Dialect::Gemini, "write_file", input), expected);
        }
    }

    #[test]
    fn each_dialects_tools_map_to_the_ledgers() {
        let edit = mapped(
            Dialect::Claude,
            "Edit",
            json!({"file_path": format!("{ROOT}/a.txt"), "old_string": "x", "new_string": "y", "replace_all": true}),
        );
        assert_eq!(
            edit,
            Mapped::Effect {
                tool: "edit_file".into(),
                input: json!({"path": "a.txt", "old_string": "x", "new_string": "y", "replace_all": true}),
            }
        );
        let several = mapped(
            Dialect::Gemini,
            "replace",
            json!({"file_path": "a.txt", "old_string": "x", "new_string": "y", "expected_replacements": 3}),
        );
        assert!(matches!(several, Mapped::Effect { tool, .. } if tool == "replace"), "exactly 3 is unbound");
        let patch =
            mapped(Dialect::Codex, "apply_patch", json!({"input": "*** Begin Patch\n*** End Patch\n"}));
        assert_eq!(
            patch,
            Mapped::Effect {
                tool: "apply_patch".into(),
                input: json!({"patch": "*** Begin Patch\n*** End Patch\n"})
            }
        );
        let bash = mapped(Dialect::Codex, "Bash", json!({"command": "make"}));
        assert_eq!(bash, Mapped::Effect { tool: "bash".into(), input: json!({"command": "make"}) });
        let background =
            mapped(Dialect::Claude, "Bash", json!({"command": "serve", "run_in_background": true}));
        // In the background too: the hook holds its window while it runs.
        assert_eq!(background, Mapped::Effect { tool: "bash".into(), input: json!({"command": "serve"}) });
        let mcp = mapped(Dialect::Claude, "mcp__github__create_issue", json!({"title": "t"}));
        assert_eq!(
            mcp,
            Mapped::Effect {
                tool: "external".into(),
                input: json!({"server": "github", "tool": "create_issue", "arguments": {"title": "t"}}),
            }
        );
        assert_eq!(
            mapped(Dialect::Claude, "Read", json!({"file_path": format!("{ROOT}/a.txt"), "limit": 3})),
            Mapped::Read { path: "a.txt".into() }
        );
        assert_eq!(mapped(Dialect::Claude, "Grep", json!({"pattern": "x"})), Mapped::Nothing);
        let unknown = mapped(Dialect::Claude, "NotebookEdit", json!({"notebook_path": "n.ipynb"}));
        assert!(matches!(unknown, Mapped::Effect { tool, .. } if tool == "NotebookEdit"), "unknown: unbound");
        // A path outside the root is left for binding to refuse.
        let outside = mapped(Dialect::Claude, "Write", json!({"file_path": "/etc/passwd", "content": ""}));
        assert!(matches!(outside, Mapped::Effect { input, .. } if input["path"] == "/etc/passwd"));
    }

    /// Only the top-level key names the event: the same key inside a tool's
    /// input, or in text, does not; fed in pieces, split anywhere.
    #[test]
    fn an_event_scan_finds_only_the_top_level_event() {
        let scan = |text: &str, split: usize| {
            let mut scan = EventScan::default();
            let (head, tail) = text.as_bytes().split_at(split.min(text.len()));
            scan.feed(head);
            scan.feed(tail);
            scan.names_a_tool_about_to_run(Dialect::Claude)
        };
        let pre =
            r#"{"session_id":"s","tool_input":{"a":[1,"]"]},"hook_event_name" : "PreToolUse","x":"\ud83d"#;
        let nested =
            r#"{"hook_event_name":"PostToolUse","tool_input":{"hook_event_name":"PreToolUse"},"n":"\ud83d"}"#;
        let in_text =
            r#"{"hook_event_name":"PostToolUse","note":"\"hook_event_name\":\"PreToolUse\"\ud83d"}"#;
        let as_value = r#"{"note":"hook_event_name","PreToolUse":1}"#;
        for split in [0, 1, 17, 30, 45, 200] {
            assert!(scan(pre, split), "split at {split}");
            assert!(!scan(nested, split), "a tool's own key, split at {split}");
            assert!(!scan(in_text, split), "text, split at {split}");
            assert!(!scan(as_value, split), "a value that spells the key, split at {split}");
        }
        let gemini = r#"{"hook_event_name":"BeforeTool"}"#;
        let mut scanned = EventScan::default();
        scanned.feed(gemini.as_bytes());
        assert!(scanned.names_a_tool_about_to_run(Dialect::Gemini));
        assert!(!scanned.names_a_tool_about_to_run(Dialect::Codex));
    }

    /// A relative path is taken from where the agent takes it, then named
    /// from the root; a Codex patch, whose paths the ledger cannot move, is
    /// refused unless Codex works at the root.
    #[test]
    fn a_relative_path_is_taken_from_the_agents_directory() {
        let (root, sub) = (Path::new(ROOT), Path::new("/work/project/sub"));
        let write = json!({"file_path": "a.txt", "content": ""});
        let from_sub = map(Dialect::Gemini, root, sub, "write_file", &write);
        assert!(matches!(from_sub, Mapped::Effect { input, .. } if input["path"] == "sub/a.txt"));
        let up = json!({"file_path": "../b.txt", "content": ""});
        let climbed = map(Dialect::Gemini, root, sub, "write_file", &up);
        assert!(matches!(climbed, Mapped::Effect { input, .. } if input["path"] == "sub/../b.txt"));
        let patch = json!({"input": "*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n"});
        assert!(matches!(map(Dialect::Codex, root, sub, "apply_patch", &patch), Mapped::Refused(_)));
        assert!(matches!(map(Dialect::Codex, root, root, "apply_patch", &patch), Mapped::Effect { .. }));
    }

    #[test]
    fn events_are_read_per_dialect() {
        let stop = json!({"hook_event_name": "Stop", "session_id": "s", "stop_hook_active": true,
                          "last_assistant_message": "Done."});
        let event = parse(Dialect::Claude, &stop).unwrap();
        assert_eq!(event.kind, Kind::Stop { active: true, last_message: Some("Done.".into()) });
        let after = json!({"hook_event_name": "AfterTool", "session_id": "s", "tool_name": "write_file",
                           "tool_input": {}, "tool_response": {"error": "disk full"}});
        assert!(matches!(parse(Dialect::Gemini, &after).unwrap().kind, Kind::Failed { .. }));
        let failure = json!({"hook_event_name": "PostToolUseFailure", "session_id": "s", "tool_name": "Bash",
                             "tool_use_id": "t1", "error": "exit 1", "is_interrupt": true});
        let event = parse(Dialect::Claude, &failure).unwrap();
        assert_eq!(event.kind, Kind::Failed { error: "exit 1".into(), interrupted: true });
        assert_eq!(event.tool_use_id.as_deref(), Some("t1"));
        assert!(
            parse(Dialect::Claude, &json!({"hook_event_name": "PreToolUse", "session_id": "s"})).is_err()
        );
        assert!(parse(Dialect::Claude, &json!([])).is_err());
    }

    #[test]
    fn no_answer_ever_allows() {
        for dialect in [Dialect::Claude, Dialect::Codex, Dialect::Gemini] {
            for answer in [
                Answer::Silent,
                Answer::Deny("r".into()),
                Answer::Context("c".into()),
                Answer::Block("b".into()),
                Answer::Tell("t".into()),
            ] {
                let printed =
                    render(dialect, "PreToolUse", &answer).map(|v| v.to_string()).unwrap_or_default();
                assert!(!printed.contains("allow") && !printed.contains("approve"), "{printed}");
            }
        }
    }
}
