//! `classify-fs`: the filesystem family (SPEC section 6, rows 1-3).
//!
//! - `write_file`, `edit_file`, `apply_patch`: an exact claim on the bound
//!   targets, each with the postcondition the producer's own transformation
//!   implies (`effects_fs_transform`, the crate the host's producers run):
//!   the written bytes themselves (`content`, which the host hashes: the
//!   sandbox has no SHA instructions, POL-1 in 2.1.0), or `absent` for a
//!   deletion. If any
//!   target's state cannot be derived (no readable pre-state, not UTF-8, an
//!   edit that does not apply, a hunk that does not match) the claim carries
//!   **no** postcondition at all. No readbacks: verification needs a later
//!   admitted COMPLETE `read_file`.
//! - `read_file`: an admitted read; read back the exact source, COMPLETE only
//!   without offset or limit (the host downgrades a truncated read).
//! - `ls`, `glob`, `grep`: admitted reads; PARTIAL existence of the search root.
//!
//! Binding conventions (the host binder's side of the contract): one binding
//! per path, named by the input field (`path` for single-file tools, the
//! patch's own path strings for `apply_patch`), pre-states for every target
//! whose content a postcondition needs.

use effects_fs_transform::{PatchOp, apply_edit, apply_hunks, parse_patch, unwrap_fence};
use effects_policy_sdk::classifier::Guest;
use effects_policy_sdk::types::{
    BoundOperation, ClaimPlan, Classification, CleanupState, Coverage, Execution, Impact, Mechanism, Outcome,
    PlannedObligation, PlannedScope, Postcondition, PreState, ReadbackContext, ReadbackRequest,
    SettleRequest,
};
use effects_tool_inputs::{ApplyPatch, EditFile, ReadFile, WriteFile};
use serde::Deserialize;

/// The policy.
pub struct FilesystemPolicy;

fn input<T: for<'de> Deserialize<'de>>(operation: &BoundOperation) -> Result<T, String> {
    serde_json::from_str(&operation.input_json).map_err(|e| format!("{}: bad input: {e}", operation.tool))
}

/// The binding index named `name`.
fn binding(operation: &BoundOperation, name: &str) -> Result<u32, String> {
    operation
        .bindings
        .iter()
        .position(|b| b.name == name)
        .map(|i| i as u32)
        .ok_or_else(|| format!("{}: no binding named {name:?}", operation.tool))
}

/// The text content the host read for binding `index`, if it could.
fn pre_text(operation: &BoundOperation, index: u32) -> Option<String> {
    let state = operation.pre_states.iter().find(|p| p.binding == index)?;
    match &state.state {
        PreState::Content(bytes) => String::from_utf8(bytes.clone()).ok(),
        _ => None,
    }
}

/// An exact claim on `targets`; obligations only if every one was derived.
fn exact(targets: Vec<u32>, derived: Option<Vec<PlannedObligation>>) -> Classification {
    Classification::Effect(ClaimPlan {
        scope: PlannedScope::Exact(targets),
        dependencies: Vec::new(),
        obligations: derived.unwrap_or_default(),
        external: false,
    })
}

/// `target` must hold exactly `bytes`; the host records their SHA-256.
fn content(target: u32, bytes: &[u8]) -> PlannedObligation {
    PlannedObligation { target, postcondition: Postcondition::Content(bytes.to_vec()) }
}

/// Claim plan for one operation.
pub fn classify(operation: &BoundOperation) -> Result<Classification, String> {
    match operation.tool.as_str() {
        "write_file" => {
            let target = binding(operation, "path")?;
            let written: WriteFile = input(operation)?;
            Ok(exact(vec![target], Some(vec![content(target, unwrap_fence(&written.content).as_bytes())])))
        }
        "edit_file" => {
            let target = binding(operation, "path")?;
            let edit: EditFile = input(operation)?;
            let derived = pre_text(operation, target)
                .and_then(|pre| apply_edit(&pre, &edit.old_string, &edit.new_string, edit.replace_all).ok())
                .map(|text| vec![content(target, text.as_bytes())]);
            Ok(exact(vec![target], derived))
        }
        "apply_patch" => {
            let patch: ApplyPatch = input(operation)?;
            let ops = parse_patch(&patch.patch).map_err(|e| e.to_string())?;
            let mut targets = Vec::new();
            let mut obligations = Some(Vec::new());
            let oblige = |obligations: &mut Option<Vec<PlannedObligation>>,
                          obligation: Option<PlannedObligation>| {
                match (obligations.as_mut(), obligation) {
                    (Some(list), Some(obligation)) => list.push(obligation),
                    _ => *obligations = None, // one underivable target: no postconditions at all
                }
            };
            for op in &ops {
                match op {
                    PatchOp::Add { path, content: body } => {
                        let target = binding(operation, path)?;
                        targets.push(target);
                        oblige(&mut obligations, Some(content(target, body.as_bytes())));
                    }
                    PatchOp::Delete { path } => {
                        let target = binding(operation, path)?;
                        targets.push(target);
                        oblige(
                            &mut obligations,
                            Some(PlannedObligation { target, postcondition: Postcondition::Absent }),
                        );
                    }
                    PatchOp::Update { path, move_to, hunks } => {
                        let source = binding(operation, path)?;
                        let updated =
                            pre_text(operation, source).and_then(|pre| apply_hunks(&pre, hunks).ok());
                        let destination = match move_to {
                            Some(to) => binding(operation, to)?,
                            None => source,
                        };
                        targets.push(source);
                        if destination != source {
                            targets.push(destination);
                            oblige(
                                &mut obligations,
                                Some(PlannedObligation {
                                    target: source,
                                    postcondition: Postcondition::Absent,
                                }),
                            );
                        }
                        oblige(&mut obligations, updated.map(|text| content(destination, text.as_bytes())));
                    }
                }
            }
            targets.sort_unstable();
            targets.dedup();
            Ok(exact(targets, obligations))
        }
        "read_file" | "ls" | "glob" | "grep" => Ok(Classification::ReadOnly),
        other => Err(format!("classify-fs does not serve tool {other:?}")),
    }
}

/// Settlement: a bound filesystem producer's exit status; no processes, so no
/// cleanup. An unbound producer gets the SDK's exit-status-only outcome.
pub fn settle(request: &SettleRequest) -> Outcome {
    let facts = &request.facts;
    if !request.operation.producer_bound {
        return effects_policy_sdk::outcome::exit_status_only(facts);
    }
    // A producer that ran and gave no exit code is UNKNOWN, never a failure
    // (OUT-1, OUT-2); the reference producers always give one.
    let (execution, impact) = match facts.executed {
        false => (Execution::NotExecuted, Impact::None),
        true => (effects_policy_sdk::outcome::by_exit_code(facts.exit_code), Impact::Possible),
    };
    Outcome {
        execution,
        impact,
        cleanup: CleanupState::NotApplicable,
        replayed: false,
        remote_acknowledged: false,
        detached: false,
    }
}

/// Readbacks: the exact source of a read, the search root of a listing; none
/// for writes (verification needs a later admitted read).
pub fn readbacks(context: &ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
    let operation = &context.operation;
    // A read that failed is still read back by the host itself: where nothing
    // exists that is a COMPLETE absent observation, so a delete can be
    // verified (VER-1, revision 2); anything else there is observed as it is.
    let read_ran = operation.tool == "read_file" && context.outcome.execution == Execution::Failed;
    if context.outcome.execution != Execution::ReportedSuccess && !read_ran {
        return Ok(Vec::new());
    }
    match operation.tool.as_str() {
        "read_file" => {
            let read: ReadFile = input(operation)?;
            let whole = read.offset.unwrap_or(0) == 0 && read.limit.is_none();
            Ok(vec![ReadbackRequest {
                binding: binding(operation, "path")?,
                mechanism: Mechanism::FilesystemRead,
                coverage: if whole { Coverage::Complete } else { Coverage::Partial },
            }])
        }
        "ls" | "glob" | "grep" => Ok(vec![ReadbackRequest {
            binding: binding(operation, "path")?,
            mechanism: Mechanism::FilesystemStat,
            coverage: Coverage::Partial,
        }]),
        _ => Ok(Vec::new()),
    }
}

impl Guest for FilesystemPolicy {
    fn classify(operation: BoundOperation) -> Result<Classification, String> {
        classify(&operation)
    }

    fn settle(request: SettleRequest) -> Result<Outcome, String> {
        Ok(settle(&request))
    }

    fn readbacks(context: ReadbackContext) -> Result<Vec<ReadbackRequest>, String> {
        readbacks(&context)
    }
}

effects_policy_sdk::export_classifier!(FilesystemPolicy with_types_in effects_policy_sdk::bindings);

#[cfg(test)]
mod tests;
