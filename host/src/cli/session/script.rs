//! Session scripts: JSON lines, one step each, validated as a whole before
//! anything runs (a bad line is exit 2 with its number, nothing executed).
//!
//! ```text
//! {"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}
//! {"tool": "read_file", "input": {"path": "a.txt"}}
//! {"tool": "external", "input": {"server": "tracker", "tool": "create_issue", "arguments": {}},
//!  "reported": {"exit_code": 0}}
//! {"tool": "bash", "input": {"command": "make test", "timeout_ms": 60000}}
//! {"tool": "bash", "input": {"command": "./serve.sh", "background": true}}
//! {"tool": "bg_job", "input": {"job": "job-1764540000000000000", "action": "status"}}
//! {"verify": {"command": "cargo test", "timeout_ms": 600000}}
//! {"complete": {"required": ["a.txt"], "answer": "I wrote a.txt."}}
//! ```
//!
//! A tool step either runs through a reference producer (the filesystem
//! tools, `bash` / `python`, `bg_job`) or, for a tool the reference runtime
//! does not execute (`external`, `owned_*`, `browser`, or any tool the
//! catalogue does not name), carries the facts the embedding runtime
//! `reported`. Each tool step is checked by the library, against its tool's
//! input type (`tools::Call::parse`) and its reported facts
//! (`StepRequest::new`): this file only reads lines. A `verify` step runs a
//! designated check; a `complete` step decides the run so far. Blank lines
//! and lines starting with `#` are skipped.

use serde::Deserialize;
use serde_json::Value;

use effect_ledger::ledger::{Reported, StepRequest};
use effect_ledger::tools::Call;

/// A tool line, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolLine {
    tool: String,
    input: Value,
    reported: Option<Reported>,
}

/// A completion step: decide the run so far.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteStep {
    /// Files beneath the root the work must have produced, besides what
    /// the run requires by default (CMP-7: what its changes left in place).
    #[serde(default)]
    pub required: Vec<String>,
    /// Require `required` alone, not the run's default set.
    #[serde(default)]
    pub only: bool,
    /// The agent's final answer.
    #[serde(default)]
    pub answer: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteLine {
    complete: CompleteStep,
}

/// A verifier step: run a command the runtime designates as a check.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyStep {
    /// The check, run with `bash -c` in the root.
    pub command: String,
    /// Its timeout in milliseconds (default 10 minutes); a check that times
    /// out did not pass.
    #[serde(default = "verify_timeout")]
    pub timeout_ms: u64,
}

fn verify_timeout() -> u64 {
    600_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyLine {
    verify: VerifyStep,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum Action {
    /// Call a tool.
    Tool(StepRequest),
    /// Run a designated check.
    Verify(VerifyStep),
    /// Decide completion.
    Complete(CompleteStep),
}

/// One step of a script and its 1-based line.
#[derive(Debug, Clone)]
pub struct Step {
    /// What it does.
    pub action: Action,
    /// The script line.
    pub line: usize,
}

/// A tool line as a checked step: its input against its tool's type, its
/// reported facts against who runs it (both the library's checks).
fn tool_step(value: Value, step: u64) -> Result<StepRequest, String> {
    let line: ToolLine = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let call = Call::parse(&line.tool, &line.input).map_err(|e| format!("{}: {}", e.tool, e.message))?;
    StepRequest::new(step, &format!("step-{step}"), call, line.reported).map_err(|e| e.to_string())
}

/// Parses and validates a whole script. `Err((line, message))` names the first
/// bad line.
pub fn parse(text: &str) -> Result<Vec<Step>, (usize, String)> {
    let mut steps = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let value: Value = serde_json::from_str(trimmed).map_err(|e| (number, e.to_string()))?;
        let action = if value.get("complete").is_some() {
            let line: CompleteLine =
                serde_json::from_value(value).map_err(|e| (number, format!("complete: {e}")))?;
            Action::Complete(line.complete)
        } else if value.get("verify").is_some() {
            let line: VerifyLine =
                serde_json::from_value(value).map_err(|e| (number, format!("verify: {e}")))?;
            Action::Verify(line.verify)
        } else {
            Action::Tool(tool_step(value, steps.len() as u64 + 1).map_err(|message| (number, message))?)
        };
        steps.push(Step { action, line: number });
    }
    if steps.is_empty() {
        return Err((0, "the script has no steps".into()));
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_script_parses_with_line_numbers() {
        let steps = parse(
            "# demo\n{\"tool\":\"ls\",\"input\":{}}\n\n{\"tool\":\"read_file\",\"input\":{\"path\":\"a\"}}\n",
        )
        .unwrap();
        assert_eq!(steps.iter().map(|s| s.line).collect::<Vec<_>>(), vec![2, 4]);
    }

    #[test]
    fn a_custom_tool_with_reported_facts_is_a_step() {
        let steps =
            parse("{\"tool\":\"deploy\",\"input\":{\"env\":\"prod\"},\"reported\":{\"exit_code\":0}}\n")
                .unwrap();
        let Action::Tool(request) = &steps[0].action else { panic!("a tool step") };
        assert_eq!(request.call().tool(), "deploy");
    }

    #[test]
    fn the_first_bad_line_is_named() {
        let cases = [
            ("{\"tool\":\"ls\",\"input\":{}}\nnot json\n", 2, "expected"),
            ("{\"tool\":\"write_file\",\"input\":{\"path\":\"a\"}}\n", 1, "content"),
            ("{\"tool\":\"write_file\",\"input\":{\"path\":\"a\",\"content\":\"\",\"mode\":1}}\n", 1, "mode"),
            ("{\"tool\":\"rm_rf\",\"input\":{}}\n", 1, "does not execute rm_rf"),
            (
                "{\"tool\":\"deploy\",\"input\":\"prod\",\"reported\":{\"exit_code\":0}}\n",
                1,
                "must be an object",
            ),
            ("{\"tool\":\"ls\",\"input\":{},\"extra\":true}\n", 1, "extra"),
            ("\n# only comments\n", 0, "no steps"),
            ("{\"tool\":\"external\",\"input\":{\"server\":\"s\",\"tool\":\"t\"}}\n", 1, "reported"),
            ("{\"tool\":\"ls\",\"input\":{},\"reported\":{\"exit_code\":0}}\n", 1, "runs ls itself"),
            ("{\"complete\":{\"required\":\"a.txt\"}}\n", 1, "complete"),
            ("{\"complete\":{},\"tool\":\"ls\"}\n", 1, "complete"),
            ("{\"verify\":{}}\n", 1, "verify: missing field `command`"),
            ("{\"verify\":{\"command\":\"true\",\"shell\":\"zsh\"}}\n", 1, "shell"),
            ("{\"tool\":\"bg_job\",\"input\":{\"job\":\"job-1\",\"action\":\"restart\"}}\n", 1, "restart"),
            ("{\"tool\":\"bash\",\"input\":{\"command\":\"x\",\"background\":\"yes\"}}\n", 1, "background"),
            (
                "{\"tool\":\"external\",\"input\":{\"server\":\"s\",\"tool\":\"t\"},\"reported\":{\"executed\":false,\"exit_code\":3}}\n",
                1,
                "`executed: false` with exit_code",
            ),
        ];
        for (text, line, needle) in cases {
            let (got, message) = parse(text).unwrap_err();
            assert_eq!(got, line, "{text:?}: {message}");
            assert!(message.contains(needle), "{text:?}: {message}");
        }
    }
}
