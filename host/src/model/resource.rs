//! Resource references (ID-1, ID-2): where a resource is and which object was
//! seen there.
//!
//! A [`ResourceRef`] is built only by the host from typed resources. Its fields
//! are private and its constructor is crate-private, so nothing outside this
//! crate can make one from a bare string or path; the policy boundary passes
//! refs into guests and gets back indices, never refs (ID-1).
//!
//! Nor from JSON: `ResourceRef` has no `Deserialize`, so this does not
//! compile outside the crate:
//!
//! ```compile_fail,E0277
//! let forged: effect_ledger::model::ResourceRef = serde_json::from_str("{}").unwrap();
//! ```
//!
//! The records that hold refs (log records, bound operations, evidence
//! ledgers) read them through [`deserialize`] and [`deserialize_all`], which
//! refuse to make one outside [`trusted`]: the crate's own loaders (the log's frame
//! decoder, a policy author's JSON call) run there, so a record or ledger
//! parsed anywhere else fails with an error naming ID-1 instead of yielding a
//! forged ref. The format is the one `Serialize` writes, field for field.

use std::cell::Cell;

use serde::{Deserialize, Deserializer, Serialize};

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
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
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

/// A ref as the log writes it, for the crate's loaders only (ID-1).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    role: ResourceRole,
    location: Location,
    incarnation: String,
    snapshot_sha256: Option<String>,
}

impl From<Written> for ResourceRef {
    fn from(written: Written) -> Self {
        ResourceRef::new(written.role, written.location, written.incarnation, written.snapshot_sha256)
    }
}

thread_local! {
    /// How many of the crate's loaders this thread is inside.
    static TRUSTED: Cell<usize> = const { Cell::new(0) };
}

/// Runs `load` as one of the crate's own loaders: inside it, records may
/// read resource refs (ID-1). Only crate code calls this, around parsing
/// what the host wrote (the log) or what a policy author hands a component
/// and never gets back (`policy::call_json`).
pub(crate) fn trusted<T>(load: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            TRUSTED.with(|depth| depth.set(depth.get() - 1));
        }
    }
    TRUSTED.with(|depth| depth.set(depth.get() + 1));
    let _leave = Leave;
    load()
}

fn refuse_untrusted<E: serde::de::Error>() -> Result<(), E> {
    if TRUSTED.with(Cell::get) > 0 {
        Ok(())
    } else {
        Err(E::custom(
            "a resource reference is made by the host only (ID-1): records holding one are read by the \
             crate's loaders (the effect log, `policy::call_json`), never deserialized directly",
        ))
    }
}

/// `#[serde(deserialize_with)]` for one ref: refused outside [`trusted`].
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ResourceRef, D::Error> {
    refuse_untrusted()?;
    Written::deserialize(deserializer).map(ResourceRef::from)
}

/// `#[serde(deserialize_with)]` for a list of refs: refused outside
/// [`trusted`] unless it is empty (no ref is made then).
pub(crate) fn deserialize_all<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<ResourceRef>, D::Error> {
    let written = Vec::<Written>::deserialize(deserializer)?;
    if !written.is_empty() {
        refuse_untrusted()?;
    }
    Ok(written.into_iter().map(ResourceRef::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ResourceRef {
        let location = Location::Owned(OwnedLocation {
            namespace: "store".into(),
            owner: "o".into(),
            thread: "t".into(),
            collection: "notes".into(),
            record: "*".into(),
        });
        ResourceRef::new(ResourceRole::Target, location, "r1".into(), Some("ab".into()))
    }

    #[derive(Debug, Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "deserialize")]
        one: ResourceRef,
        #[serde(deserialize_with = "deserialize_all")]
        all: Vec<ResourceRef>,
    }

    #[test]
    fn refs_are_read_back_as_written_only_by_the_crate_s_loaders() {
        let json = serde_json::json!({ "one": sample(), "all": [sample(), sample()] }).to_string();
        let error = serde_json::from_str::<Holder>(&json).unwrap_err();
        assert!(error.to_string().contains("made by the host only (ID-1)"), "{error}");
        let read: Holder = trusted(|| serde_json::from_str(&json)).unwrap();
        assert_eq!((read.one, read.all), (sample(), vec![sample(), sample()]));
        // Outside the loader again, and after a loader that failed, refused.
        let _ = trusted(|| serde_json::from_str::<Holder>("{"));
        assert!(serde_json::from_str::<Holder>(&json).is_err());
        // A list that holds no ref makes none: it reads anywhere.
        #[derive(Debug, Deserialize)]
        struct List {
            #[serde(deserialize_with = "deserialize_all")]
            all: Vec<ResourceRef>,
        }
        assert!(serde_json::from_str::<List>(r#"{"all": []}"#).unwrap().all.is_empty());
        // An unknown field is refused as before.
        let extra = json.replacen("\"role\"", "\"extra\":1,\"role\"", 1);
        assert!(trusted(|| serde_json::from_str::<Holder>(&extra)).is_err());
    }
}
