//! Binding: a tool call's JSON input resolved to typed resources beneath the
//! sealed root, plus the pre-states a classifier needs (SPEC section 2, the
//! first arrow). A path that escapes the root or reaches the effect store is
//! refused here, before anything is claimed or run.
//!
//! Conventions shared with `classify-fs`: single-file tools bind `path`;
//! searches bind `path` (default `.`) as their search root; `apply_patch` binds
//! every path its patch names, under that path string, with the content
//! pre-state of each file it updates.

use effects_fs_transform::{PatchOp, parse_patch};
use serde_json::Value;

use crate::digest::Sha256Digest;
use crate::identity::{IdentityError, OpenError, Opener, Resolved, SealedRoot, Target};
use crate::model::{
    Binding, BoundOperation, BoundPreState, BrowserLocation, ExternalLocation, Location, OwnedLocation,
    PreState, ResourceRef, ResourceRole,
};
use crate::producers::fs::read_capped;

/// Tools the reference producers implement.
pub const FILESYSTEM_TOOLS: &[&str] =
    &["write_file", "edit_file", "apply_patch", "read_file", "ls", "glob", "grep"];

/// Tools the reference process producer runs (`producers::process`): unknown
/// scope, so nothing to bind.
pub const PROCESS_TOOLS: &[&str] = &["bash", "python"];

/// Tools that act on a background job the process producer started
/// (`producers::job`): bound by the ledger to exactly one validated job.
pub const JOB_TOOLS: &[&str] = &["bg_job"];

/// Tools the embedding runtime executes and reports on: the host binds their
/// resources and records their reported facts, but runs nothing itself.
pub const REPORTED_TOOLS: &[&str] = &["external", "owned_write", "owned_read", "browser"];

/// Whether a tool family binds `tool` (TRU-1): its lifecycle facts come from a
/// producer the host bound. Every other tool falls to the unbound fallback, and
/// an executed effect of one is disclosed by name (CMP-6).
pub fn producer_bound(tool: &str) -> bool {
    [FILESYSTEM_TOOLS, PROCESS_TOOLS, JOB_TOOLS, REPORTED_TOOLS].iter().any(|tools| tools.contains(&tool))
}

/// Why a call cannot be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A path the ledger refuses (escape, symlink, control plane): a refused
    /// tool result, no claim.
    #[error("refused: {0}")]
    Refused(#[from] IdentityError),
    /// A browser page operation: pages are never bound (ID-2).
    #[error(
        "refused: browser page operation {0:?}: pages are never bound (ID-2); only session_info is admitted"
    )]
    PageOperation(String),
    /// The input is not what the tool takes.
    #[error("bad input for {tool}: {message}")]
    BadInput {
        /// The tool.
        tool: String,
        /// What is wrong.
        message: String,
    },
}

/// A bound call: the operation and the root-relative path of each binding.
#[derive(Debug, Clone)]
pub struct Bound {
    /// What the classifier sees.
    pub operation: BoundOperation,
    /// Normalized path of each binding, by index (`.` for the root itself).
    pub paths: Vec<String>,
}

fn text<'a>(tool: &str, input: &'a Value, field: &str) -> Result<&'a str, BindError> {
    input.get(field).and_then(Value::as_str).ok_or_else(|| BindError::BadInput {
        tool: tool.to_owned(),
        message: format!("`{field}` must be a string"),
    })
}

impl Bound {
    /// The filesystem target of each filesystem binding, in binding order:
    /// what producers open, through its resolution (ID-3).
    pub fn targets(&self, root: &SealedRoot) -> Vec<Target> {
        let filesystem = self.operation.bindings.iter().filter_map(|binding| {
            matches!(binding.resource.location(), Location::Filesystem(_)).then_some(&binding.resource)
        });
        filesystem.filter_map(|resource| Target::of_resource(root, resource).ok()).collect()
    }
}

/// Reads the resolved file's content for a classifier through its identity
/// (ID-3): a FIFO, socket or device is unreadable without being waited on,
/// and an object swapped in since the resolution is unreadable, not a wrong
/// pre-state.
pub fn read_pre_state(root: &SealedRoot, resolved: &Resolved, cap: u64) -> PreState {
    match Opener::new(root).read(&Target::of(resolved)) {
        Err(OpenError::NotFound { .. }) => PreState::Absent,
        Err(error) if error.is_directory() => PreState::Directory,
        Err(OpenError::Changed { .. }) => PreState::Unreadable("replaced while being read".into()),
        Err(error) => PreState::Unreadable(error.to_string()),
        Ok(opened) if opened.size > cap => PreState::Oversized(opened.size),
        Ok(opened) => match read_capped(opened.file, cap) {
            Err(error) => PreState::Unreadable(error.to_string()),
            // It grew past the cap between the stat and the read.
            Ok((_, true)) => PreState::Oversized(cap + 1),
            Ok((bytes, false)) => PreState::Content(bytes),
        },
    }
}

/// The resources of a tool the embedding runtime executes (ID-2), bound from
/// its input; empty for every other tool.
///
/// - `external`: the endpoint (`server`, `tool`, optional `endpoint`); nothing
///   remote is observed, so its incarnation is `unobserved`.
/// - `owned_write` / `owned_read`: the record (`collection`, `record`), its
///   incarnation the `revision` the runtime names; a write's `attachments`
///   (record names) are dependencies.
/// - `browser`: the session (`session`, incarnation `incarnation`), for
///   `session_info` only; any page operation is refused here, never bound.
fn reported_bindings(
    root: &SealedRoot,
    tool: &str,
    input: &Value,
) -> Result<Vec<(String, ResourceRef)>, BindError> {
    let named = |field: &str| -> Result<String, BindError> {
        let value = text(tool, input, field)?;
        if value.is_empty() {
            return Err(BindError::BadInput { tool: tool.into(), message: format!("`{field}` is empty") });
        }
        Ok(value.to_owned())
    };
    let optional = |field: &str, default: &str| {
        input.get(field).and_then(Value::as_str).filter(|v| !v.is_empty()).unwrap_or(default).to_owned()
    };
    let owner = root.root().owner.clone();
    let resource = |role, location, incarnation| ResourceRef::new(role, location, incarnation, None);
    let record = |collection: String, record: String| {
        Location::Owned(OwnedLocation {
            namespace: "store".into(),
            owner: owner.clone(),
            thread: "session".into(),
            collection,
            record,
        })
    };
    Ok(match tool {
        "external" => {
            let location = ExternalLocation {
                namespace: "mcp".into(),
                owner: owner.clone(),
                endpoint: optional("endpoint", ""),
                server: named("server")?,
                tool: named("tool")?,
            };
            vec![(
                "endpoint".into(),
                resource(ResourceRole::Target, Location::External(location), "unobserved".into()),
            )]
        }
        "owned_write" | "owned_read" => {
            let role = if tool == "owned_write" { ResourceRole::Target } else { ResourceRole::Source };
            let location = record(named("collection")?, named("record")?);
            let mut bound =
                vec![("record".into(), resource(role, location, optional("revision", "unobserved")))];
            let attachments = input.get("attachments").and_then(Value::as_array).into_iter().flatten();
            for attachment in attachments.filter_map(Value::as_str) {
                let location = record("attachments".into(), attachment.to_owned());
                bound.push((
                    attachment.to_owned(),
                    resource(ResourceRole::Dependency, location, "unobserved".into()),
                ));
            }
            bound
        }
        "browser" => {
            let action = optional("action", "");
            if action != "session_info" {
                return Err(BindError::PageOperation(action));
            }
            let location = Location::BrowserSession(BrowserLocation {
                owner: owner.clone(),
                thread: "session".into(),
                session_key: named("session")?,
            });
            vec![(
                "session".into(),
                resource(ResourceRole::Source, location, optional("incarnation", "unobserved")),
            )]
        }
        _ => Vec::new(),
    })
}

/// Binds one call. `input` is normalized to canonical JSON (sorted keys).
pub fn bind(
    root: &SealedRoot,
    tool: &str,
    input: &Value,
    request_id: &str,
    cap: u64,
) -> Result<Bound, BindError> {
    let mut named: Vec<(String, String, ResourceRole, bool)> = Vec::new(); // name, path, role, wants pre-state
    match tool {
        "write_file" => {
            named.push(("path".into(), text(tool, input, "path")?.into(), ResourceRole::Target, false))
        }
        "edit_file" => {
            named.push(("path".into(), text(tool, input, "path")?.into(), ResourceRole::Target, true))
        }
        "read_file" => {
            named.push(("path".into(), text(tool, input, "path")?.into(), ResourceRole::Source, false))
        }
        "ls" | "glob" | "grep" => {
            let path = input.get("path").and_then(Value::as_str).unwrap_or(".");
            named.push(("path".into(), path.into(), ResourceRole::SearchRoot, false));
        }
        "apply_patch" => {
            let patch = text(tool, input, "patch")?;
            let ops = parse_patch(patch)
                .map_err(|e| BindError::BadInput { tool: tool.into(), message: e.to_string() })?;
            let mut add = |path: &str, pre: bool| {
                if !named.iter().any(|(name, ..)| name == path) {
                    named.push((path.to_owned(), path.to_owned(), ResourceRole::Target, pre));
                }
            };
            for op in &ops {
                match op {
                    PatchOp::Add { path, .. } | PatchOp::Delete { path } => add(path, false),
                    PatchOp::Update { path, move_to, .. } => {
                        add(path, true);
                        if let Some(to) = move_to {
                            add(to, false);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    let mut bindings = Vec::new();
    let mut paths = Vec::new();
    let mut pre_states = Vec::new();
    for (name, resource) in reported_bindings(root, tool, input)? {
        bindings.push(Binding { name, resource });
        paths.push(String::new());
    }
    for (index, (name, path, role, wants_pre)) in named.into_iter().enumerate() {
        let resolved = root.resolve(&path, role)?;
        if wants_pre {
            pre_states
                .push(BoundPreState { binding: index as u32, state: read_pre_state(root, &resolved, cap) });
        }
        bindings.push(Binding { name, resource: resolved.resource });
        // The root itself is `.` for the producers and readbacks that open it.
        paths.push(if resolved.relative.is_empty() { ".".to_owned() } else { resolved.relative });
    }
    let input_json = input.to_string(); // serde_json's map is sorted: canonical
    let operation = BoundOperation {
        tool: tool.to_owned(),
        action: input.get("action").and_then(Value::as_str).unwrap_or("").to_owned(),
        request_id: request_id.to_owned(),
        input_sha256: Sha256Digest::of(input_json.as_bytes()).to_string(),
        input_json,
        bindings,
        pre_states,
        producer_bound: producer_bound(tool),
    };
    Ok(Bound { operation, paths })
}
