//! Binding: a typed tool call ([`Call`]) resolved to resources beneath the
//! sealed root, plus the pre-states a classifier needs (SPEC section 2, the
//! first arrow). A path that escapes the root or reaches the effect store is
//! refused here, before anything is claimed or run.
//!
//! Conventions shared with `classify-fs`: single-file tools bind `path`;
//! searches bind `path` (default `.`) as their search root; `apply_patch` binds
//! every path its patch names, under that path string, with the content
//! pre-state of each file it updates.

use effects_fs_transform::{PatchOp, parse_patch};

use crate::digest::Sha256Digest;
use crate::identity::{IdentityError, OpenError, Opener, Resolved, SealedRoot, Target};
use crate::model::{
    Binding, BoundOperation, BoundPreState, BrowserLocation, ExternalLocation, Location, OwnedLocation,
    PreState, ResourceRef, ResourceRole,
};
use crate::producers::fs::read_capped;
use crate::tools::{Call, InputError};

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
    #[error(transparent)]
    BadInput(#[from] InputError),
}

/// A bound call: the typed call, the operation the classifier sees (its
/// `input_json` is the call's canonical input), and the root-relative path
/// of each binding. The producer acts on `call`: the very value claimed.
#[derive(Debug, Clone)]
pub struct Bound {
    /// The call, as checked against its tool's input type.
    pub call: Call,
    /// What the classifier sees.
    pub operation: BoundOperation,
    /// Normalized path of each binding, by index (`.` for the root itself).
    pub paths: Vec<String>,
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
fn reported_bindings(root: &SealedRoot, call: &Call) -> Result<Vec<(String, ResourceRef)>, BindError> {
    let tool = call.tool();
    let named = |field: &str, value: &str| -> Result<String, BindError> {
        if value.is_empty() {
            let message = format!("`{field}` is empty");
            return Err(InputError { tool: tool.into(), message }.into());
        }
        Ok(value.to_owned())
    };
    let or_unobserved = |value: &Option<String>| {
        value.as_deref().filter(|v| !v.is_empty()).unwrap_or("unobserved").to_owned()
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
    Ok(match call {
        Call::External(external) => {
            let location = ExternalLocation {
                namespace: "mcp".into(),
                owner: owner.clone(),
                endpoint: external.endpoint.clone().unwrap_or_default(),
                server: named("server", &external.server)?,
                tool: named("tool", &external.tool)?,
            };
            vec![(
                "endpoint".into(),
                resource(ResourceRole::Target, Location::External(location), "unobserved".into()),
            )]
        }
        Call::OwnedWrite(owned) | Call::OwnedRead(owned) => {
            let role = if tool == "owned_write" { ResourceRole::Target } else { ResourceRole::Source };
            let location = record(named("collection", &owned.collection)?, named("record", &owned.record)?);
            let mut bound = vec![("record".into(), resource(role, location, or_unobserved(&owned.revision)))];
            for attachment in &owned.attachments {
                let location = record("attachments".into(), attachment.clone());
                bound.push((
                    attachment.clone(),
                    resource(ResourceRole::Dependency, location, "unobserved".into()),
                ));
            }
            bound
        }
        Call::Browser(browser) => {
            if browser.action != "session_info" {
                return Err(BindError::PageOperation(browser.action.clone()));
            }
            let location = Location::BrowserSession(BrowserLocation {
                owner: owner.clone(),
                thread: "session".into(),
                session_key: named("session", &browser.session)?,
            });
            vec![(
                "session".into(),
                resource(ResourceRole::Source, location, or_unobserved(&browser.incarnation)),
            )]
        }
        _ => Vec::new(),
    })
}

/// The filesystem bindings of a call, by the conventions `classify-fs`
/// reads: single-file tools bind `path`; searches bind `path` (default `.`)
/// as their search root; `apply_patch` binds every path its patch names,
/// under that path string. Each with its role and whether the classifier
/// needs its content pre-state.
fn named_paths(call: &Call) -> Result<Vec<(String, String, ResourceRole, bool)>, BindError> {
    let one = |path: &str, role, pre| vec![("path".to_owned(), path.to_owned(), role, pre)];
    Ok(match call {
        Call::WriteFile(write) => one(&write.path, ResourceRole::Target, false),
        Call::EditFile(edit) => one(&edit.path, ResourceRole::Target, true),
        Call::ReadFile(read) => one(&read.path, ResourceRole::Source, false),
        Call::Ls(ls) => one(ls.path.as_deref().unwrap_or("."), ResourceRole::SearchRoot, false),
        Call::Glob(search) | Call::Grep(search) => {
            one(search.path.as_deref().unwrap_or("."), ResourceRole::SearchRoot, false)
        }
        Call::ApplyPatch(patch) => {
            let ops = parse_patch(&patch.patch)
                .map_err(|e| InputError { tool: call.tool().into(), message: e.to_string() })?;
            let mut named: Vec<(String, String, ResourceRole, bool)> = Vec::new();
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
            named
        }
        _ => Vec::new(),
    })
}

/// Binds one call. The operation's `input_json` is the call's canonical
/// input (sorted keys, defaults left out); `action` overrides the call's own
/// action (a verifier run is a `bash` call with action `verify`). An
/// external call's own action is `server/tool`: its claim records what it
/// called even when its scope is unknown (a runtime-run call, TRU-1), so its
/// disclosure can name it (CMP-6).
pub fn bind(
    root: &SealedRoot,
    call: Call,
    action: Option<&str>,
    request_id: &str,
    cap: u64,
) -> Result<Bound, BindError> {
    let mut bindings = Vec::new();
    let mut paths = Vec::new();
    let mut pre_states = Vec::new();
    for (name, resource) in reported_bindings(root, &call)? {
        bindings.push(Binding { name, resource });
        paths.push(String::new());
    }
    for (name, path, role, wants_pre) in named_paths(&call)? {
        let resolved = root.resolve(&path, role)?;
        if wants_pre {
            let binding = bindings.len() as u32;
            pre_states.push(BoundPreState { binding, state: read_pre_state(root, &resolved, cap) });
        }
        bindings.push(Binding { name, resource: resolved.resource });
        // The root itself is `.` for the producers and readbacks that open it.
        paths.push(if resolved.relative.is_empty() { ".".to_owned() } else { resolved.relative });
    }
    let input_json = call.input().to_string(); // serde_json's map is sorted: canonical
    let operation = BoundOperation {
        tool: call.tool().to_owned(),
        action: match (action, &call) {
            (Some(action), _) => action.to_owned(),
            (None, Call::External(external)) => format!("{}/{}", external.server, external.tool),
            (None, call) => call.action().to_owned(),
        },
        request_id: request_id.to_owned(),
        input_sha256: Sha256Digest::of(input_json.as_bytes()).to_string(),
        input_json,
        bindings,
        pre_states,
        producer_bound: crate::tools::producer_bound(call.tool()),
    };
    Ok(Bound { call, operation, paths })
}
