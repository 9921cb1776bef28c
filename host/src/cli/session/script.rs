//! Session scripts: JSON lines, one step each, validated as a whole before
//! anything runs (a bad line is exit 2 with its number, nothing executed).
//!
//! ```text
//! {"tool": "write_file", "input": {"path": "a.txt", "content": "hi\n"}}
//! {"tool": "read_file", "input": {"path": "a.txt"}}
//! ```
//!
//! Blank lines and lines starting with `#` are skipped.

use serde::Deserialize;
use serde_json::Value;

/// One step of a script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The tool.
    pub tool: String,
    /// Its input, as the agent gave it.
    pub input: Value,
    /// The 1-based script line (filled in by the parser).
    #[serde(skip)]
    pub line: usize,
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

fn shape<T: for<'de> Deserialize<'de>>(input: &Value) -> Result<(), String> {
    T::deserialize(input).map(drop).map_err(|e| e.to_string())
}

/// Checks a step's input has the shape its tool takes.
fn check(step: &Step) -> Result<(), String> {
    match step.tool.as_str() {
        "write_file" => shape::<WriteInput>(&step.input),
        "edit_file" => shape::<EditInput>(&step.input),
        "apply_patch" => shape::<PatchInput>(&step.input),
        "read_file" => shape::<ReadInput>(&step.input),
        "ls" => shape::<LsInput>(&step.input),
        "glob" | "grep" => shape::<SearchInput>(&step.input),
        other => Err(format!(
            "no reference producer for tool {other:?} (known: write_file, edit_file, apply_patch, read_file, ls, glob, grep)"
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
        let mut step: Step = serde_json::from_str(trimmed).map_err(|e| (number, e.to_string()))?;
        step.line = number;
        check(&step).map_err(|message| (number, message))?;
        steps.push(step);
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
        ];
        for (text, line, needle) in cases {
            let (got, message) = parse(text).unwrap_err();
            assert_eq!(got, line, "{text:?}: {message}");
            assert!(message.contains(needle), "{text:?}: {message}");
        }
    }
}
