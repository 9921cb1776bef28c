//! The typed tool catalogue (SPEC section 6): one definition per tool, its
//! input type (from `effects-tool-inputs`, the crate the classifier guests
//! read too), its family, who runs it, and its JSON Schema for model APIs
//! (`effects tools --json`).
//!
//! A [`Call`] is a tool call whose input has been checked against its type.
//! The binder reads its resources from it, the classifier sees its canonical
//! JSON, and the reference producer acts on the same value: what is claimed
//! and what is run come from one parsed input, never from two readings of
//! the agent's JSON.
//!
//! A tool the catalogue does not name is [`Call::Custom`]: the embedding
//! runtime runs it and reports its facts, it binds no resource, and the
//! manifest's classifier for it (or the `*` fallback) classifies it, which
//! for an unbound tool means unknown scope and exit status only (TRU-1).

use schemars::{JsonSchema, Schema, schema_for};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use effects_tool_inputs::{
    ApplyPatch, BgJob, Browser, Command, EditFile, External, JobAction, Ls, Owned, ReadFile, Search,
    WriteFile,
};

/// A tool's family: which reference producer or reported shape it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Family {
    /// Files beneath the sealed root, through the filesystem producers.
    Filesystem,
    /// `bash` / `python`, through the supervised process producer.
    Process,
    /// A background job's read or kill.
    Job,
    /// Run by the embedding runtime, which reports its facts; the host binds
    /// its resources.
    Reported,
    /// Not in the catalogue: run and reported by the embedding runtime,
    /// nothing bound.
    Custom,
}

/// Who runs a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunsBy {
    /// The host's reference producer, under the claim.
    Host,
    /// The embedding runtime, which reports the facts.
    Runtime,
}

impl Family {
    /// Who runs a tool of this family.
    pub fn runs_by(self) -> RunsBy {
        match self {
            Family::Filesystem | Family::Process | Family::Job => RunsBy::Host,
            Family::Reported | Family::Custom => RunsBy::Runtime,
        }
    }
}

/// A tool call with a checked input.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `write_file`.
    WriteFile(WriteFile),
    /// `edit_file`.
    EditFile(EditFile),
    /// `apply_patch`.
    ApplyPatch(ApplyPatch),
    /// `read_file`.
    ReadFile(ReadFile),
    /// `ls`.
    Ls(Ls),
    /// `glob`.
    Glob(Search),
    /// `grep`.
    Grep(Search),
    /// `bash`.
    Bash(Command),
    /// `python`.
    Python(Command),
    /// `bg_job`.
    BgJob(BgJob),
    /// `external`.
    External(External),
    /// `owned_write`.
    OwnedWrite(Owned),
    /// `owned_read`.
    OwnedRead(Owned),
    /// `browser`.
    Browser(Browser),
    /// A tool the catalogue does not name.
    Custom {
        /// Its name.
        tool: String,
        /// Its input, as given (an object).
        input: Value,
    },
}

/// Why an input is not what its tool takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad input for {tool}: {message}")]
pub struct InputError {
    /// The tool.
    pub tool: String,
    /// What is wrong, naming the field at fault.
    pub message: String,
}

fn typed<T: DeserializeOwned>(tool: &str, input: &Value) -> Result<T, InputError> {
    serde_path_to_error::deserialize::<_, T>(input).map_err(|error| {
        let message = match error.path().to_string() {
            path if path == "." => error.inner().to_string(),
            path => format!("{path}: {}", error.inner()),
        };
        InputError { tool: tool.to_owned(), message }
    })
}

impl Call {
    /// Checks `input` against `tool`'s type. A tool the catalogue does not
    /// name is [`Call::Custom`]; its input must be a JSON object.
    pub fn parse(tool: &str, input: &Value) -> Result<Call, InputError> {
        Ok(match tool {
            "write_file" => Call::WriteFile(typed(tool, input)?),
            "edit_file" => Call::EditFile(typed(tool, input)?),
            "apply_patch" => Call::ApplyPatch(typed(tool, input)?),
            "read_file" => Call::ReadFile(typed(tool, input)?),
            "ls" => Call::Ls(typed(tool, input)?),
            "glob" => Call::Glob(typed(tool, input)?),
            "grep" => Call::Grep(typed(tool, input)?),
            "bash" => Call::Bash(typed(tool, input)?),
            "python" => Call::Python(typed(tool, input)?),
            "bg_job" => Call::BgJob(typed(tool, input)?),
            "external" => Call::External(typed(tool, input)?),
            "owned_write" => Call::OwnedWrite(typed(tool, input)?),
            "owned_read" => Call::OwnedRead(typed(tool, input)?),
            "browser" => Call::Browser(typed(tool, input)?),
            other => {
                if other.is_empty() || other.chars().any(char::is_control) {
                    return Err(InputError {
                        tool: format!("{other:?}"),
                        message: "a tool name is a non-empty name without control characters".into(),
                    });
                }
                if !input.is_object() {
                    return Err(InputError {
                        tool: other.to_owned(),
                        message: "the input must be an object".into(),
                    });
                }
                Call::Custom { tool: other.to_owned(), input: input.clone() }
            }
        })
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        match self {
            Call::WriteFile(_) => "write_file",
            Call::EditFile(_) => "edit_file",
            Call::ApplyPatch(_) => "apply_patch",
            Call::ReadFile(_) => "read_file",
            Call::Ls(_) => "ls",
            Call::Glob(_) => "glob",
            Call::Grep(_) => "grep",
            Call::Bash(_) => "bash",
            Call::Python(_) => "python",
            Call::BgJob(_) => "bg_job",
            Call::External(_) => "external",
            Call::OwnedWrite(_) => "owned_write",
            Call::OwnedRead(_) => "owned_read",
            Call::Browser(_) => "browser",
            Call::Custom { tool, .. } => tool,
        }
    }

    /// The tool's family.
    pub fn family(&self) -> Family {
        match self {
            Call::WriteFile(_)
            | Call::EditFile(_)
            | Call::ApplyPatch(_)
            | Call::ReadFile(_)
            | Call::Ls(_)
            | Call::Glob(_)
            | Call::Grep(_) => Family::Filesystem,
            Call::Bash(_) | Call::Python(_) => Family::Process,
            Call::BgJob(_) => Family::Job,
            Call::External(_) | Call::OwnedWrite(_) | Call::OwnedRead(_) | Call::Browser(_) => {
                Family::Reported
            }
            Call::Custom { .. } => Family::Custom,
        }
    }

    /// The canonical input: the typed value serialized (keys sorted, fields
    /// left at their defaults omitted). What the classifier sees and the
    /// claim's `input_sha256` hashes.
    pub fn input(&self) -> Value {
        fn json(value: &impl Serialize) -> Value {
            serde_json::to_value(value).expect("tool inputs always serialize")
        }
        match self {
            Call::WriteFile(input) => json(input),
            Call::EditFile(input) => json(input),
            Call::ApplyPatch(input) => json(input),
            Call::ReadFile(input) => json(input),
            Call::Ls(input) => json(input),
            Call::Glob(input) | Call::Grep(input) => json(input),
            Call::Bash(input) | Call::Python(input) => json(input),
            Call::BgJob(input) => json(input),
            Call::External(input) => json(input),
            Call::OwnedWrite(input) | Call::OwnedRead(input) => json(input),
            Call::Browser(input) => json(input),
            Call::Custom { input, .. } => input.clone(),
        }
    }

    /// The operation's action: a job's `status` / `kill`, a browser's
    /// action; empty for the rest.
    pub fn action(&self) -> &str {
        match self {
            Call::BgJob(job) => job.action.name(),
            Call::Browser(browser) => &browser.action,
            _ => "",
        }
    }

    /// A `bash` / `python` call that starts a background job.
    pub fn is_background(&self) -> bool {
        matches!(self, Call::Bash(command) | Call::Python(command) if command.background)
    }
}

/// Whether the host binds `tool`'s lifecycle facts to a producer of its own
/// or to resources it captured (TRU-1): every catalogued tool. Any other
/// tool falls to the unbound fallback, and an executed effect of one is
/// disclosed by name (CMP-6).
pub fn producer_bound(tool: &str) -> bool {
    CATALOGUE.iter().any(|entry| entry.name == tool)
}

/// Whether `tool` is a command the host runs (`bash`, `python`).
pub fn is_command(tool: &str) -> bool {
    CATALOGUE.iter().any(|entry| entry.name == tool && entry.family == Family::Process)
}

/// The names of the catalogued tools of `family`, in catalogue order.
pub fn names(family: Family) -> Vec<&'static str> {
    CATALOGUE.iter().filter(|entry| entry.family == family).map(|entry| entry.name).collect()
}

/// One catalogue entry.
struct Entry {
    name: &'static str,
    family: Family,
    description: &'static str,
    schema: fn() -> Schema,
}

fn schema<T: JsonSchema>() -> Schema {
    schema_for!(T)
}

/// Every tool the host knows, in the order `effects tools` lists them.
const CATALOGUE: &[Entry] = &[
    Entry {
        name: "write_file",
        family: Family::Filesystem,
        description: "Write a whole file beneath the root (created if absent, replaced if present).",
        schema: schema::<WriteFile>,
    },
    Entry {
        name: "edit_file",
        family: Family::Filesystem,
        description: "Replace an exact string in a file beneath the root.",
        schema: schema::<EditFile>,
    },
    Entry {
        name: "apply_patch",
        family: Family::Filesystem,
        description: "Add, update, move or delete files beneath the root with one patch.",
        schema: schema::<ApplyPatch>,
    },
    Entry {
        name: "read_file",
        family: Family::Filesystem,
        description: "Read a file's text; a whole read is what verifies a write.",
        schema: schema::<ReadFile>,
    },
    Entry {
        name: "ls",
        family: Family::Filesystem,
        description: "List a directory beneath the root.",
        schema: schema::<Ls>,
    },
    Entry {
        name: "glob",
        family: Family::Filesystem,
        description: "Find files beneath a directory by name pattern (e.g. **/*.rs).",
        schema: schema::<Search>,
    },
    Entry {
        name: "grep",
        family: Family::Filesystem,
        description: "Find lines matching a regular expression in files beneath a directory.",
        schema: schema::<Search>,
    },
    Entry {
        name: "bash",
        family: Family::Process,
        description: "Run a bash command in the root, supervised: everything it starts is torn down at its end.",
        schema: schema::<Command>,
    },
    Entry {
        name: "python",
        family: Family::Process,
        description: "Run a Python 3 program in the root, supervised like bash.",
        schema: schema::<Command>,
    },
    Entry {
        name: "bg_job",
        family: Family::Job,
        description: "Read the state and output of a background job, or kill it.",
        schema: schema::<BgJob>,
    },
    Entry {
        name: "external",
        family: Family::Reported,
        description: "A call to another system (an MCP server's tool, an API); run by the runtime.",
        schema: schema::<External>,
    },
    Entry {
        name: "owned_write",
        family: Family::Reported,
        description: "Write a record in a store the runtime owns; run by the runtime.",
        schema: schema::<Owned>,
    },
    Entry {
        name: "owned_read",
        family: Family::Reported,
        description: "Read a record in a store the runtime owns; run by the runtime.",
        schema: schema::<Owned>,
    },
    Entry {
        name: "browser",
        family: Family::Reported,
        description: "A browser session's info (session_info only; page operations are refused); run by the runtime.",
        schema: schema::<Browser>,
    },
];

/// A tool as `effects tools --json` lists it: the fields model APIs take
/// (`name`, `description`, `input_schema`) and the ledger's own.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// Its input's JSON Schema (draft 2020-12).
    pub input_schema: Schema,
    /// Its family.
    pub family: Family,
    /// Who runs it: the host's reference producer, or the embedding runtime
    /// (which reports its facts).
    pub runs_by: RunsBy,
}

/// The whole catalogue, schemas included.
pub fn catalogue() -> Vec<ToolSpec> {
    CATALOGUE
        .iter()
        .map(|entry| ToolSpec {
            name: entry.name,
            description: entry.description,
            input_schema: (entry.schema)(),
            family: entry.family,
            runs_by: entry.family.runs_by(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_catalogued_tool_parses_back_to_itself() {
        let inputs = [
            ("write_file", json!({"path": "a", "content": "x"})),
            ("edit_file", json!({"path": "a", "old_string": "x", "new_string": "y"})),
            ("apply_patch", json!({"patch": "*** Begin Patch\n*** End Patch\n"})),
            ("read_file", json!({"path": "a", "limit": 3})),
            ("ls", json!({})),
            ("glob", json!({"pattern": "*.rs"})),
            ("grep", json!({"pattern": "fn", "path": "src"})),
            ("bash", json!({"command": "true", "background": true})),
            ("python", json!({"command": "print(1)", "timeout_ms": 5})),
            ("bg_job", json!({"job": "job-1", "action": "kill"})),
            ("external", json!({"server": "s", "tool": "t", "arguments": {"a": 1}})),
            ("owned_write", json!({"collection": "c", "record": "r", "attachments": ["x"]})),
            ("owned_read", json!({"collection": "c", "record": "r"})),
            ("browser", json!({"action": "session_info", "session": "s"})),
        ];
        let catalogued: Vec<&str> = catalogue().iter().map(|spec| spec.name).collect();
        assert_eq!(catalogued, inputs.iter().map(|(tool, _)| *tool).collect::<Vec<_>>());
        for (tool, input) in inputs {
            let call = Call::parse(tool, &input).unwrap();
            assert_eq!(call.tool(), tool);
            // The canonical input is what was given (no defaults written in)
            // and parses to the same call.
            assert_eq!(call.input(), input, "{tool}");
            assert_eq!(Call::parse(tool, &call.input()).unwrap(), call);
            assert!(producer_bound(tool));
        }
    }

    #[test]
    fn a_bad_input_names_the_field_and_an_unknown_tool_is_custom() {
        let error = Call::parse("bash", &json!({"command": "x", "background": "yes"})).unwrap_err();
        assert!(error.message.starts_with("background:"), "{error}");
        let error = Call::parse("write_file", &json!({"path": "a", "content": "", "mode": 1})).unwrap_err();
        assert!(error.message.contains("mode"), "{error}");
        let custom = Call::parse("deploy", &json!({"env": "prod"})).unwrap();
        assert_eq!(custom.family(), Family::Custom);
        assert!(!producer_bound("deploy"));
        assert!(Call::parse("deploy", &json!("prod")).is_err());
        assert!(Call::parse("", &json!({})).is_err());
        assert!(Call::parse("a\nb", &json!({})).is_err());
    }

    #[test]
    fn each_schema_requires_exactly_the_fields_the_parser_requires() {
        // A full input per tool (every field given); dropping a field must
        // fail to parse exactly when the schema lists it as required, and an
        // unknown field must fail both.
        let full = [
            ("write_file", json!({"path": "a", "content": "x"})),
            ("edit_file", json!({"path": "a", "old_string": "x", "new_string": "y", "replace_all": true})),
            ("apply_patch", json!({"patch": "*** Begin Patch\n*** End Patch\n"})),
            ("read_file", json!({"path": "a", "offset": 1, "limit": 3})),
            ("ls", json!({"path": "d"})),
            ("glob", json!({"pattern": "*.rs", "path": "d"})),
            ("grep", json!({"pattern": "fn", "path": "d"})),
            ("bash", json!({"command": "true", "timeout_ms": 5, "background": true})),
            ("python", json!({"command": "1", "timeout_ms": 5, "background": false})),
            ("bg_job", json!({"job": "job-1", "action": "status"})),
            ("external", json!({"server": "s", "tool": "t", "arguments": {}, "endpoint": "e"})),
            (
                "owned_write",
                json!({"collection": "c", "record": "r", "revision": "1", "attachments": [], "fields": {}}),
            ),
            (
                "owned_read",
                json!({"collection": "c", "record": "r", "revision": "1", "attachments": [], "fields": {}}),
            ),
            (
                "browser",
                json!({"action": "session_info", "session": "s", "incarnation": "i", "url": "u", "selector": "q", "text": "t"}),
            ),
        ];
        let specs = catalogue();
        for (tool, input) in full {
            let schema = specs.iter().find(|spec| spec.name == tool).unwrap().input_schema.as_value().clone();
            let properties: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
            let given: Vec<&String> = input.as_object().unwrap().keys().collect();
            assert_eq!(properties, given, "{tool}: the full input names every property");
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            Call::parse(tool, &input).unwrap();
            for field in given {
                let mut without = input.clone();
                without.as_object_mut().unwrap().remove(field);
                let needed = required.iter().any(|r| r == field.as_str());
                assert_eq!(Call::parse(tool, &without).is_err(), needed, "{tool}: without {field}");
            }
            let mut extra = input.clone();
            extra["unknown"] = json!(1);
            assert!(Call::parse(tool, &extra).is_err(), "{tool}: an unknown field");
        }
    }

    #[test]
    fn every_schema_is_an_object_schema_that_refuses_unknown_fields() {
        for spec in catalogue() {
            let schema = spec.input_schema.as_value();
            assert_eq!(schema["type"], "object", "{}", spec.name);
            assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
        }
    }
}
