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
//! does not execute, carries the facts the embedding runtime `reported`. A
//! `verify` step runs a designated check; a `complete` step decides the run so
//! far. Blank lines and lines starting with `#` are skipped.

use serde::Deserialize;
use serde_json::Value;

use effect_ledger::ledger::{FILESYSTEM_TOOLS, JOB_TOOLS, PROCESS_TOOLS, REPORTED_TOOLS};
use effect_ledger::model::ProducerFacts;

/// What the embedding runtime reports for a tool it executed itself.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reported {
    /// Whether the backend was invoked at all (default true).
    #[serde(default = "yes")]
    pub executed: bool,
    /// Its exit code (0 is success).
    pub exit_code: Option<i32>,
    /// The runtime's timeout fired.
    #[serde(default)]
    pub timed_out: bool,
    /// The call was cancelled.
    #[serde(default)]
    pub cancelled: bool,
}

fn yes() -> bool {
    true
}

impl Reported {
    /// The facts as the runtime gave them, every one passed through: an
    /// exit code, timeout or cancellation of a call that was not executed is
    /// a contradiction the ledger refuses (OUT-2), never dropped to make the
    /// call NOT_EXECUTED. Acknowledgement only for exit 0 of the executed
    /// call (TRU-1: the host captured the external resource it named).
    pub fn facts(&self) -> ProducerFacts {
        ProducerFacts {
            executed: self.executed,
            exit_code: self.exit_code,
            timed_out: self.timed_out,
            cancelled: self.cancelled,
            remote_acknowledged: self.executed && self.exit_code == Some(0),
            ..ProducerFacts::default()
        }
    }
}

/// A tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolStep {
    /// The tool.
    pub tool: String,
    /// Its input, as the agent gave it.
    pub input: Value,
    /// Facts for a tool the reference runtime does not execute.
    pub reported: Option<Reported>,
}

/// A completion step: decide the run so far.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteStep {
    /// Files beneath the root the work must have produced.
    #[serde(default)]
    pub required: Vec<String>,
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
    Tool(ToolStep),
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ExternalInput {
    server: String,
    tool: String,
    #[serde(default)]
    arguments: Value,
    #[serde(default)]
    endpoint: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read only by serde, to validate the shape
struct WriteInput {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct EditInput {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PatchInput {
    patch: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ReadInput {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct LsInput {
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct SearchInput {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ProcessInput {
    command: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    background: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct JobInput {
    job: String,
    action: JobAction,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum JobAction {
    Status,
    Kill,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct OwnedInput {
    collection: String,
    record: String,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    attachments: Vec<String>,
    #[serde(default)]
    fields: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct BrowserInput {
    action: String,
    session: String,
    #[serde(default)]
    incarnation: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    selector: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

/// Checks `input` deserializes as `T`; the error names the field at fault
/// (`background: invalid type ...`).
fn shape<T: for<'de> Deserialize<'de>>(input: &Value) -> Result<(), String> {
    serde_path_to_error::deserialize::<_, T>(input).map(drop).map_err(|e| match e.path().to_string() {
        path if path == "." => e.inner().to_string(),
        path => format!("{path}: {}", e.inner()),
    })
}

/// Checks a step's input has the shape its tool takes, and that `reported`
/// facts come exactly with the tools the reference runtime does not execute.
fn check(step: &ToolStep) -> Result<(), String> {
    let tool = step.tool.as_str();
    match (&step.reported, REPORTED_TOOLS.contains(&tool)) {
        (Some(_), false)
            if FILESYSTEM_TOOLS.contains(&tool)
                || PROCESS_TOOLS.contains(&tool)
                || JOB_TOOLS.contains(&tool) =>
        {
            return Err(format!(
                "{tool}: `reported` is for tools the reference runtime does not execute; it runs {tool} itself"
            ));
        }
        // OUT-2: contradictory facts are bad input, refused with the
        // ledger's own check before anything runs.
        (Some(reported), true) => {
            reported.facts().check().map_err(|e| format!("{tool}: `reported`: {e}"))?;
        }
        (None, true) => {
            return Err(format!(
                "{tool}: the reference runtime does not execute {tool}; give the facts the runtime `reported`, e.g. \"reported\": {{\"exit_code\": 0}}"
            ));
        }
        _ => {}
    }
    match tool {
        "bash" | "python" => shape::<ProcessInput>(&step.input),
        "bg_job" => shape::<JobInput>(&step.input),
        "external" => shape::<ExternalInput>(&step.input),
        "owned_write" | "owned_read" => shape::<OwnedInput>(&step.input),
        "browser" => shape::<BrowserInput>(&step.input),
        "write_file" => shape::<WriteInput>(&step.input),
        "edit_file" => shape::<EditInput>(&step.input),
        "apply_patch" => shape::<PatchInput>(&step.input),
        "read_file" => shape::<ReadInput>(&step.input),
        "ls" => shape::<LsInput>(&step.input),
        "glob" | "grep" => shape::<SearchInput>(&step.input),
        other => Err(format!(
            "no reference producer for tool {other:?} (known: {}, {}, {}; reported: {})",
            FILESYSTEM_TOOLS.join(", "),
            PROCESS_TOOLS.join(", "),
            JOB_TOOLS.join(", "),
            REPORTED_TOOLS.join(", ")
        )),
    }
    .map_err(|e| format!("{}: {e}", step.tool))
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
            let step: ToolStep = serde_json::from_value(value).map_err(|e| (number, e.to_string()))?;
            check(&step).map_err(|message| (number, message))?;
            Action::Tool(step)
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
    fn the_first_bad_line_is_named() {
        let cases = [
            ("{\"tool\":\"ls\",\"input\":{}}\nnot json\n", 2, "expected"),
            ("{\"tool\":\"write_file\",\"input\":{\"path\":\"a\"}}\n", 1, "content"),
            ("{\"tool\":\"write_file\",\"input\":{\"path\":\"a\",\"content\":\"\",\"mode\":1}}\n", 1, "mode"),
            ("{\"tool\":\"rm_rf\",\"input\":{}}\n", 1, "no reference producer"),
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
