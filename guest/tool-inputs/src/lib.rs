//! The input of every reference tool, defined once (SPEC section 6: the tool
//! families). The host's catalogue hands these shapes to model APIs as JSON
//! Schemas, its binder reads the resources from them, its producers act on
//! them, and the classifier guests derive claims from them: one type per
//! input, so what is claimed and what is run cannot drift apart.
//!
//! Every type refuses unknown fields (a misspelt `timeout_ms` is an error,
//! not a default). Optional fields are left out when serializing, so the
//! canonical input the ledger hashes names only what the call gave.
//!
//! No IO and nothing but serde: the crate compiles for the wasm guests as it
//! does for the host (feature `schema` adds the JSON Schemas, host only).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(feature = "schema")]
use schemars::JsonSchema;

fn is_false(value: &bool) -> bool {
    !*value
}

/// `write_file`: write a whole file (created if absent, replaced if present).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    /// The file, relative to the root.
    pub path: String,
    /// Its new content. A Markdown code fence around the whole content is
    /// unwrapped first, as models often send one.
    pub content: String,
}

/// `edit_file`: replace an exact string in a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    /// The file, relative to the root.
    pub path: String,
    /// The text to replace; it must occur exactly once unless `replace_all`.
    pub old_string: String,
    /// The replacement.
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replace_all: bool,
}

/// `apply_patch`: add, update, move or delete files with one patch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApplyPatch {
    /// The patch, from `*** Begin Patch` to `*** End Patch`, with `*** Add
    /// File:`, `*** Update File:` (optionally `*** Move to:`) and `*** Delete
    /// File:` sections; paths relative to the root.
    pub patch: String,
}

/// `read_file`: read a file's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    /// The file, relative to the root.
    pub path: String,
    /// The first line to return (0-based); a partial read verifies nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// How many lines to return; a partial read verifies nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `ls`: list a directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Ls {
    /// The directory, relative to the root (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `glob` and `grep`: search beneath a directory, by file name pattern or
/// by content (a regular expression).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// `glob`: a file name pattern (`**/*.rs`); `grep`: a regular expression.
    pub pattern: String,
    /// Where to search, relative to the root (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `bash` and `python`: run a command in the root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Command {
    /// The command: `bash -c COMMAND` or `python3 -c COMMAND`.
    pub command: String,
    /// When to tear the command and everything it started down (default
    /// 60000); ignored for a background job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Start it as a background job: the result names the job, and
    /// `bg_job` reads or kills it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub background: bool,
}

/// What `bg_job` does with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobAction {
    /// Read its state and the tail of its output.
    Status,
    /// Stop it and everything it started.
    Kill,
}

impl JobAction {
    /// The operation's action name.
    pub fn name(self) -> &'static str {
        match self {
            JobAction::Status => "status",
            JobAction::Kill => "kill",
        }
    }
}

/// `bg_job`: read or kill a background job this run's lineage started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BgJob {
    /// The job id the launch's result named (`job-<digits>`).
    pub job: String,
    /// What to do.
    pub action: JobAction,
}

/// `external`: a call to another system (an MCP server's tool, an API)
/// that the embedding runtime makes and reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct External {
    /// The server (or system) called.
    pub server: String,
    /// The tool (or operation) on it.
    pub tool: String,
    /// The call's arguments, as sent.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub arguments: Value,
    /// Where it was reached, when the runtime knows (a URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// `owned_write` and `owned_read`: a record in a store the runtime owns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Owned {
    /// The collection.
    pub collection: String,
    /// The record in it.
    pub record: String,
    /// The revision the runtime names (the record's incarnation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Records in `attachments` the write depends on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<String>,
    /// The fields written.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub fields: Value,
}

/// `browser`: a browser session the runtime drives. Only `session_info` is
/// admitted; page operations are refused (pages are never bound).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Browser {
    /// `session_info`.
    pub action: String,
    /// The session.
    pub session: String,
    /// The session's incarnation, when the runtime knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<String>,
    /// A page operation's URL (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A page operation's selector (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// A page operation's text (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}
