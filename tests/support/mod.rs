//! Shared helpers for the host's integration tests: where the built guest
//! fixtures are, sample inputs, and a scratch copy of the shipped policies.

#![allow(dead_code)] // each test binary uses a different subset
#![allow(clippy::disallowed_methods)] // test fixtures are read with ambient authority

pub mod agent;
pub mod session;

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::log::{ClaimRecord, OperationRef};
use effect_ledger::model::{BoundOperation, ProducerFacts, SettleRequest};
use effect_ledger::policy::PolicySource;

/// The project root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Where `cargo xtask fixtures` builds the guest fixture `name`.
pub fn fixture_path(name: &str) -> PathBuf {
    let dir = std::env::var_os("EFFECTS_FIXTURES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/policy-fixtures"));
    dir.join(format!("fixture-{name}.wasm"))
}

/// The bytes of a guest fixture built by `cargo xtask fixtures`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_path(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the fixtures first with `cargo xtask fixtures` (or run `cargo xtask test`)",
            path.display()
        )
    })
}

/// The shipped component bytes.
pub fn shipped(file: &str) -> Vec<u8> {
    std::fs::read(root().join("policies").join(file)).unwrap()
}

/// A bound `write_file` operation of `a.txt` with one target binding (the
/// one of tests/data/bound-operation.json), bound by the host beneath a
/// fresh root: a resource reference is made by the host only (ID-1), never
/// read from JSON here.
pub fn operation() -> BoundOperation {
    let dir = tempfile::tempdir().unwrap();
    let opened = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
    let root = SealedRoot::new(opened, "/work/demo", "workspace", "agent", ControlPlane::default()).unwrap();
    let input = serde_json::json!({ "path": "a.txt", "content": "hi\n" });
    let call = effect_ledger::tools::Call::parse("write_file", &input).unwrap();
    effect_ledger::ledger::bind::bind(&root, call, None, "req-1", 1 << 20).unwrap().operation
}

/// A settle request for [`operation`] with the given exit code.
pub fn settle_request(exit_code: Option<i32>) -> SettleRequest {
    SettleRequest {
        operation: operation(),
        plan: None,
        facts: ProducerFacts { executed: true, exit_code, ..ProducerFacts::default() },
    }
}

/// A directory holding a copy of the shipped manifest and components, to be
/// tampered with.
pub struct PolicyCopy {
    pub dir: tempfile::TempDir,
}

impl PolicyCopy {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(root().join("policies")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
        Self { dir }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// Replaces component `file` with `bytes` and re-pins it in the manifest.
    pub fn replace(&self, file: &str, bytes: &[u8]) {
        let old =
            effect_ledger::digest::Sha256Digest::of(&std::fs::read(self.path(file)).unwrap()).to_string();
        let new = effect_ledger::digest::Sha256Digest::of(bytes).to_string();
        std::fs::write(self.path(file), bytes).unwrap();
        let manifest = std::fs::read_to_string(self.path("manifest.toml")).unwrap();
        std::fs::write(self.path("manifest.toml"), manifest.replace(&old, &new)).unwrap();
    }

    pub fn source(&self) -> PolicySource {
        PolicySource::Directory {
            dir: Dir::open_ambient_dir(self.dir.path(), ambient_authority()).unwrap(),
            manifest_file: "manifest.toml".into(),
            display: self.path("manifest.toml").display().to_string(),
        }
    }
}

/// An unknown-scope `bash` claim with the given action id.
pub fn claim(action: &str) -> ClaimRecord {
    ClaimRecord {
        action_id: action.into(),
        operation: OperationRef {
            tool: "bash".into(),
            action: String::new(),
            input_sha256: "0".repeat(64),
            request_id: "req".into(),
        },
        impact_scope: Vec::new(),
        dependencies: Vec::new(),
        obligations: Vec::new(),
        parent_run_id: None,
        external: false,
        policy_failure: None,
        executor: None,
        root: None,
        confined: false,
        profile: None,
        classifier: None,
    }
}

/// Reads an `effects-test-writer`'s stdout: its `ack <position> <check>`
/// lines.
pub fn acks(stdout: &[u8]) -> Vec<(u64, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            (words.next() == Some("ack")).then(|| {
                let position = words.next().unwrap().parse().unwrap();
                (position, words.next().unwrap().to_owned())
            })
        })
        .collect()
}
