//! Resource references (ID-1, ID-2): where a resource is and which object was
//! seen there.
//!
//! A [`ResourceRef`] is built only by the host from typed resources. Its fields
//! are private and its constructor is crate-private, so nothing outside this
//! crate can make one from a bare string or path; the policy boundary passes
//! refs into guests and gets back indices, never refs (ID-1). Deserializing one
//! from a durable record is allowed: that record was written by this host.

use serde::{Deserialize, Serialize};

/// The sealed root a filesystem resource lives beneath (ID-2, ID-3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemRoot {
    /// The scope the root was opened for.
    pub scope: String,
    /// Who owns the root.
    pub owner: String,
    /// The root's path as opened, for display only.
    pub path: String,
    /// Device number of the root directory.
    pub device: u64,
    /// Inode number of the root directory.
    pub inode: u64,
}

/// A filesystem location: a sealed root and a normalized relative path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemLocation {
    /// The sealed root.
    pub root: FilesystemRoot,
    /// Normalized `/`-separated path beneath the root; `""` is the root.
    pub path: String,
}

/// A process; a reused PID has a different start token, so a different location.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessLocation {
    /// PID namespace identity.
    pub namespace: String,
    /// Owner.
    pub owner: String,
    /// Request that started it.
    pub request: String,
    /// Thread that started it.
    pub thread: String,
    /// Process id.
    pub pid: u32,
    /// Start time from `/proc/PID/stat` (field 22).
    pub start_token: u64,
}

/// An owned record; the record `*` stands for the whole collection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnedLocation {
    /// Store namespace.
    pub namespace: String,
    /// Owner.
    pub owner: String,
    /// Thread.
    pub thread: String,
    /// Collection.
    pub collection: String,
    /// Record key or `*`.
    pub record: String,
}

/// An external (MCP) endpoint and tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalLocation {
    /// Integration namespace.
    pub namespace: String,
    /// Credential owner.
    pub owner: String,
    /// Endpoint address.
    pub endpoint: String,
    /// Server name.
    pub server: String,
    /// Tool name.
    pub tool: String,
}

/// A browser session (pages are never bound).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserLocation {
    /// Owner.
    pub owner: String,
    /// Thread.
    pub thread: String,
    /// Session key.
    pub session_key: String,
}

/// A background job at one launch generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobLocation {
    /// Job id.
    pub job_id: String,
    /// Launch generation.
    pub generation: u64,
}

/// Where a resource is; the variant is its kind (ID-2).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Location {
    /// Beneath a sealed root.
    Filesystem(FilesystemLocation),
    /// A process.
    Process(ProcessLocation),
    /// One exact background launch, by generation.
    ProcessLaunch(u64),
    /// A background job.
    BackgroundJob(JobLocation),
    /// An owned record.
    Owned(OwnedLocation),
    /// An external endpoint.
    External(ExternalLocation),
    /// A browser session.
    BrowserSession(BrowserLocation),
}

/// The part a resource plays in an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceRole {
    /// May be changed.
    Target,
    /// Read.
    Source,
    /// Where a search starts.
    SearchRoot,
    /// Depended upon, not changed.
    Dependency,
    /// The process or job acted as or upon.
    Executor,
}

/// A reference to one resource (ID-1): location, role, incarnation, snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceRef {
    role: ResourceRole,
    location: Location,
    incarnation: String,
    snapshot_sha256: Option<String>,
}

impl ResourceRef {
    /// Builds a ref. Crate-private: only the host's identity code (and the policy
    /// bindings, which convert refs the host made) may call it (ID-1); the
    /// filesystem's refs come from `crate::identity`.
    pub(crate) fn new(
        role: ResourceRole,
        location: Location,
        incarnation: String,
        snapshot_sha256: Option<String>,
    ) -> Self {
        Self { role, location, incarnation, snapshot_sha256 }
    }

    /// The part it plays.
    pub fn role(&self) -> ResourceRole {
        self.role
    }

    /// Where it is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The object seen there.
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// SHA-256 of its complete content, when the host read it.
    pub fn snapshot_sha256(&self) -> Option<&str> {
        self.snapshot_sha256.as_deref()
    }
}
