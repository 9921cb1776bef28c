//! Bound operations and what a classifier plans for them (CL-1, CL-2).
//!
//! A [`BoundOperation`] is the only input to classification: the tool call after
//! the host resolved its inputs to typed bindings. A [`ClaimPlan`] refers back to
//! those bindings by index, so a policy can narrow or widen a claim but never
//! invent a resource.

use serde::{Deserialize, Serialize};

use super::resource::ResourceRef;

/// Index into [`BoundOperation::bindings`].
pub type BindingIndex = u32;

/// One input field resolved to a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// The input field or role name (`path`, `source`, `job`, ...).
    pub name: String,
    /// The resource the host resolved it to.
    #[serde(deserialize_with = "super::resource::deserialize")]
    pub resource: ResourceRef,
}

/// A bound resource's state as the host read it before dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PreState {
    /// Nothing exists there.
    Absent,
    /// The complete content, identity-checked before and after the read.
    Content(Vec<u8>),
    /// A directory.
    Directory,
    /// Larger than the pre-read cap (size in bytes).
    Oversized(u64),
    /// Could not be read; the reason says why.
    Unreadable(String),
}

/// A pre-state paired with its binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundPreState {
    /// Which binding.
    pub binding: BindingIndex,
    /// What the host read there.
    pub state: PreState,
}

/// A tool call after binding: the only input to classification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundOperation {
    /// Tool name.
    pub tool: String,
    /// Action within the tool, or `""`.
    pub action: String,
    /// The runtime's request id.
    pub request_id: String,
    /// Normalized input as canonical JSON.
    pub input_json: String,
    /// SHA-256 of `input_json`.
    pub input_sha256: String,
    /// Typed bindings resolved from the input.
    pub bindings: Vec<Binding>,
    /// Pre-states read for the policy.
    pub pre_states: Vec<BoundPreState>,
    /// The call goes through a producer the host bound (TRU-1).
    pub producer_bound: bool,
}

/// What an obligation asserts (CL-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Postcondition {
    /// The complete content has this SHA-256.
    ContentSha256(String),
    /// Nothing exists there.
    Absent,
    /// Something exists there.
    Exists,
}

/// A planned obligation on one bound target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedObligation {
    /// The target binding; in the plan's exact scope.
    pub target: BindingIndex,
    /// What must hold.
    pub postcondition: Postcondition,
}

/// The impact scope of a plan: unknown, or exactly some bindings (CL-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PlannedScope {
    /// May touch anything.
    Unknown,
    /// Exactly these bindings.
    Exact(Vec<BindingIndex>),
}

/// What to claim durably before dispatch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimPlan {
    /// Impact scope.
    pub scope: PlannedScope,
    /// Dependencies (bindings).
    pub dependencies: Vec<BindingIndex>,
    /// Obligations.
    pub obligations: Vec<PlannedObligation>,
    /// External effect (never verified: CMP-6).
    pub external: bool,
}

impl ClaimPlan {
    /// The conservative plan the host claims when classification fails (POL-4).
    pub fn unknown_scope() -> Self {
        Self {
            scope: PlannedScope::Unknown,
            dependencies: Vec::new(),
            obligations: Vec::new(),
            external: false,
        }
    }
}

/// A classifier's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Classification {
    /// Claim this plan, then dispatch.
    Effect(ClaimPlan),
    /// An admitted read: no claim.
    ReadOnly,
    /// Refused before dispatch; never run.
    Refused(String),
}
