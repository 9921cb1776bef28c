//! The messages of `effects serve` (docs/serve.md): JSON-RPC 2.0 framing,
//! every method's params and result, the notifications, and the error codes.
//! The published schema (`docs/serve.schema.json`, `effects serve --schema`)
//! is generated from these very types, so what the server parses and writes
//! and what a client validates against cannot drift apart.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use effect_ledger::ledger::{Claimed, Reported, StepResult};
use effect_ledger::log::Position;
use effect_ledger::model::Verdict;

use crate::cli::decide::DecisionView;

/// The protocol version this server speaks (`initialize`).
pub const PROTOCOL_VERSION: &str = "1";

/// JSON-RPC error codes: protocol misuse only (EMB-2).
pub mod code {
    /// The line is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a JSON-RPC 2.0 request (batches are not supported).
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not have the method's shape.
    pub const INVALID_PARAMS: i64 = -32602;
    /// `run_id` names no run this server began or continued.
    pub const UNKNOWN_RUN: i64 = -32001;
    /// A method other than `initialize` before `initialize`.
    pub const NOT_INITIALIZED: i64 = -32002;
    /// The server is shutting down.
    pub const SHUTTING_DOWN: i64 = -32003;
    /// The ledger could not read or append to the run's log: nothing was
    /// decided (retrying may succeed; the log's own error is the message).
    pub const LOG_FAILED: i64 = -32004;
    /// No thread could be started for the request (the system refused one
    /// and no worker lives): nothing was run; retrying may succeed.
    pub const NO_WORKER: i64 = -32005;
    /// The request failed inside the server (a defect): what it did is in
    /// the log, as for a server killed mid-request.
    pub const INTERNAL_ERROR: i64 = -32603;
}

fn jsonrpc_version(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"const": "2.0"})
}

/// A request's id: a number or a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RequestId {
    /// A number.
    Number(i64),
    /// A string.
    String(String),
}

/// A request (client to server).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcRequest {
    /// Always `"2.0"`.
    #[schemars(schema_with = "jsonrpc_version")]
    pub jsonrpc: String,
    /// Echoed in the answer.
    pub id: RequestId,
    /// The method.
    pub method: String,
    /// Its params (an object; absent means `{}`).
    #[serde(default)]
    pub params: Option<Map<String, Value>>,
}

/// A notification (either way): no id, no answer.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcNotification {
    /// Always `"2.0"`.
    #[schemars(schema_with = "jsonrpc_version")]
    pub jsonrpc: String,
    /// `notifications/progress` (server to client) or
    /// `notifications/cancelled` (client to server).
    pub method: String,
    /// Its params.
    #[serde(default)]
    pub params: Option<Map<String, Value>>,
}

/// A successful answer.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcResponse {
    /// Always `"2.0"`.
    #[schemars(schema_with = "jsonrpc_version")]
    pub jsonrpc: String,
    /// The request's id.
    pub id: RequestId,
    /// The method's result (domain answers included, EMB-2).
    pub result: Value,
}

/// An error answer: the message itself was wrong.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcError {
    /// Always `"2.0"`.
    #[schemars(schema_with = "jsonrpc_version")]
    pub jsonrpc: String,
    /// The request's id; `null` when it could not be read.
    pub id: Option<RequestId>,
    /// What was wrong.
    pub error: ErrorObject,
}

/// An error's code and message.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorObject {
    /// One of the codes in docs/serve.md.
    pub code: i64,
    /// What was wrong, and what to do.
    pub message: String,
}

/// A request's `_meta`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RequestMeta {
    /// Set: the request gets `notifications/progress` while it runs.
    #[serde(rename = "progressToken", default, skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<RequestId>,
}

/// `initialize`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitializeParams {
    /// The protocol version the client speaks: `"1"`.
    pub protocol_version: String,
    /// Who the client is (logged).
    #[serde(default)]
    pub client: Option<Peer>,
    /// The process that runs the tools this client claims (LOG-7), when it
    /// is not the process that started the server: a live ancestor of the
    /// server other than PID 1, or the initialize is refused. Absent: the
    /// server's parent (shells between them stepped over).
    #[serde(default)]
    pub executor_pid: Option<u32>,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// A client's or server's name and version.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// A policy component the server loaded.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PolicyInfo {
    /// The manifest's name for it.
    pub name: String,
    /// Its pinned SHA-256.
    pub digest: String,
    /// `classifier` or `evaluator`.
    pub world: String,
    /// The tools it classifies (a classifier's).
    pub tools: Vec<String>,
}

/// A catalogued tool (`effects tools --json`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolInfo {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its input's JSON Schema.
    pub input_schema: Map<String, Value>,
    /// Its family.
    pub family: String,
    /// Who runs it: `HOST` (`effect/execute`) or `RUNTIME` (`effect/claim`
    /// and `effect/settle`).
    pub runs_by: String,
}

/// `initialize`'s result.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InitializeResult {
    /// The protocol version the server speaks.
    pub protocol_version: String,
    /// `effects` and its version.
    pub server: Peer,
    /// The sealed root.
    pub root: String,
    /// The data dir.
    pub data_dir: String,
    /// The policy components, with their digests.
    pub policies: Vec<PolicyInfo>,
    /// The tool catalogue.
    pub tools: Vec<ToolInfo>,
    /// The producer profiles `effect/claim` takes (EMB-4).
    pub profiles: Vec<String>,
    /// The checks `check/run` runs (the operator's `--check` names).
    pub checks: Vec<String>,
}

/// `run/begin`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunBeginParams {
    /// The new run's id (a child's name with `child_of`); default a fresh id.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Begin a child of this existing run (LOG-1).
    #[serde(default)]
    pub child_of: Option<String>,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `run/continue`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunContinueParams {
    /// The run to continue (its log must be in this data dir, over this root).
    pub run_id: String,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// A run.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunInfo {
    /// Its id.
    pub id: String,
    /// The root run whose log it writes to.
    pub lineage: String,
    /// Its parent, for a child.
    pub parent: Option<String>,
}

/// `run/begin`'s and `run/continue`'s result: the run, or why not.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunResult {
    /// The run; `null` when it could not be begun or continued.
    pub run: Option<RunInfo>,
    /// Why not.
    pub reason: Option<String>,
}

/// `effect/claim`'s params: a tool the runtime runs itself.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimParams {
    /// The run.
    pub run_id: String,
    /// The runtime's id for the call: one claim per (run, request id).
    pub request_id: String,
    /// The tool (a catalogued one, or any other: unknown scope).
    pub tool: String,
    /// Its input.
    pub input: Map<String, Value>,
    /// The producer profile that predicts its bytes (default `effects`).
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `effect/settle`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleParams {
    /// The run.
    pub run_id: String,
    /// The claimed call's request id.
    pub request_id: String,
    /// What the runtime observed of its run.
    pub facts: Reported,
    /// The call's tool, when another process claimed it.
    #[serde(default)]
    pub tool: Option<String>,
    /// The call's input, when another process claimed it.
    #[serde(default)]
    pub input: Option<Map<String, Value>>,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `effect/execute`'s params: a tool the host runs.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteParams {
    /// The run.
    pub run_id: String,
    /// The call's request id, recorded on its claim.
    pub request_id: String,
    /// The tool.
    pub tool: String,
    /// Its input.
    pub input: Map<String, Value>,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `check/run`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckParams {
    /// The run.
    pub run_id: String,
    /// One of the operator's `--check` names (CMP-5).
    pub name: String,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `run/complete`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    /// The run.
    pub run_id: String,
    /// The agent's final answer.
    pub answer: String,
    /// Files (beneath the root) the answer says exist.
    #[serde(default)]
    pub required: Vec<String>,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `run/decision`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionParams {
    /// The run.
    pub run_id: String,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `run/decision`'s result (CMP-12).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DecisionResult {
    /// The last decision this server took for the run, or `null`.
    pub decision: Option<DecisionView>,
    /// Evidence was recorded after it: it is no longer current.
    pub stale: bool,
    /// The first such record's position.
    pub stale_since: Option<Position>,
}

/// `run/annotate`'s params.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnnotateParams {
    /// The run.
    pub run_id: String,
    /// The message the agent would show the user.
    pub text: String,
    #[serde(rename = "_meta", default)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `run/annotate`'s result: a decision over the text, not recorded.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AnnotateResult {
    /// The verdict the evidence gives now.
    pub verdict: Verdict,
    /// The disclosures the text must carry.
    pub disclosures: Vec<String>,
    /// The text as it may be shown, disclosures included.
    pub answer: String,
}

/// `shutdown`'s params and result: an empty object.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {
    #[serde(rename = "_meta", default, skip_serializing)]
    #[allow(dead_code)] // read before the params are parsed
    meta: Option<RequestMeta>,
}

/// `notifications/progress`'s params (server to client).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressParams {
    /// The request's `_meta.progressToken`.
    #[serde(rename = "progressToken")]
    pub progress_token: RequestId,
    /// Seconds it has run, increasing.
    pub progress: f64,
    /// What it is doing.
    pub message: Option<String>,
}

/// `notifications/cancelled`'s params (client to server).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelledParams {
    /// The request to cancel.
    #[serde(rename = "requestId")]
    pub request_id: RequestId,
    /// Why (logged).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A named definition in `generator`: its `$ref`.
fn definition<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    let schema = generator.subschema_for::<T>();
    if schema.get("$ref").is_some() {
        return schema.to_value();
    }
    let name = T::schema_name().into_owned();
    generator.definitions_mut().insert(name.clone(), schema.to_value());
    json!({"$ref": format!("#/$defs/{name}")})
}

/// The published schema: every definition under `$defs`, and a `methods`
/// table naming each method's (and notification's) params and result.
pub fn schema() -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut methods = Map::new();
    let mut method = |name: &str, params: Value, result: Option<Value>| {
        let mut entry = Map::new();
        entry.insert("params".into(), params);
        if let Some(result) = result {
            entry.insert("result".into(), result);
        }
        methods.insert(name.into(), Value::Object(entry));
    };
    let g = &mut generator;
    method("initialize", definition::<InitializeParams>(g), Some(definition::<InitializeResult>(g)));
    method("run/begin", definition::<RunBeginParams>(g), Some(definition::<RunResult>(g)));
    method("run/continue", definition::<RunContinueParams>(g), Some(definition::<RunResult>(g)));
    method("effect/claim", definition::<ClaimParams>(g), Some(definition::<Claimed>(g)));
    method("effect/settle", definition::<SettleParams>(g), Some(definition::<StepResult>(g)));
    method("effect/execute", definition::<ExecuteParams>(g), Some(definition::<StepResult>(g)));
    method("check/run", definition::<CheckParams>(g), Some(definition::<StepResult>(g)));
    method("run/complete", definition::<CompleteParams>(g), Some(definition::<DecisionView>(g)));
    method("run/decision", definition::<DecisionParams>(g), Some(definition::<DecisionResult>(g)));
    method("run/annotate", definition::<AnnotateParams>(g), Some(definition::<AnnotateResult>(g)));
    method("shutdown", definition::<Empty>(g), Some(definition::<Empty>(g)));
    method("notifications/progress", definition::<ProgressParams>(g), None);
    method("notifications/cancelled", definition::<CancelledParams>(g), None);
    for envelope in [
        definition::<JsonRpcRequest>,
        definition::<JsonRpcNotification>,
        definition::<JsonRpcResponse>,
        definition::<JsonRpcError>,
    ] {
        envelope(g);
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://effect-ledger.dev/serve.schema.json",
        "title": "effects serve",
        "description": format!(
            "The messages of `effects serve`, protocol version {PROTOCOL_VERSION} (docs/serve.md). \
             Generated by `effects serve --schema`; do not edit."
        ),
        "methods": methods,
        "$defs": generator.take_definitions(true),
    })
}
