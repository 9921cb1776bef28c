//! What the benchmarks share: the sample count, scratch directories,
//! percentiles and the `BENCH` report line.

#![allow(dead_code)] // each bench uses a subset

pub mod report;
pub mod serve;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Ledger, LedgerConfig};
use effect_ledger::log::{
    Checkpoints, ClaimRecord, EffectLog, LineageLog, MemoryFile, OpenMode, OpenOptionsLog, OperationRef,
    open_lineage,
};
use effect_ledger::model::{ResourceRef, ResourceRole};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};

/// `n` scaled by `$EFFECTS_BENCH_SCALE` (at least 20).
pub fn samples(n: usize) -> usize {
    let factor: f64 = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    ((n as f64 * factor) as usize).max(20)
}

/// The median, in microseconds.
pub fn median_us(samples: &mut [Duration]) -> f64 {
    percentile_us(samples, 0.5)
}

/// The `p` quantile (0.5 the median, 0.99 the 99th percentile).
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

/// [`percentile`], in microseconds.
pub fn percentile_us(samples: &mut [Duration], p: f64) -> f64 {
    percentile(samples, p).as_secs_f64() * 1e6
}

/// The median and the 99th percentile of `samples` as a report value.
pub fn latency(name: &str, samples: &mut [Duration]) -> report::Value {
    report::value(name, "us", percentile_us(samples, 0.5), Some(percentile_us(samples, 0.99)))
}

/// A scratch directory under `target/bench-chain` (the same filesystem a real
/// data dir would be on here) holding `names`, each created `0700`.
pub fn scratch(names: &[&str]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-chain");
    std::fs::create_dir_all(&base).unwrap();
    let scratch = tempfile::tempdir_in(&base).unwrap();
    let dirs = names
        .iter()
        .map(|name| {
            let dir = scratch.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            dir
        })
        .collect();
    (scratch, dirs)
}

/// `path` opened as a sealed root.
pub fn seal(path: &Path) -> SealedRoot {
    let dir = Dir::open_ambient_dir(path, ambient_authority()).unwrap();
    SealedRoot::new(dir, "root", "bench", "bench", ControlPlane::default()).unwrap()
}

/// A ledger over the shipped policies, with `root` as its sealed root and
/// `data` as its data dir.
pub fn ledger(root: &Path, data: &Path) -> Ledger {
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let data = Dir::open_ambient_dir(data, ambient_authority()).unwrap();
    Ledger::new(LedgerConfig::new(data, "data", seal(root), policies))
}

/// [`ledger`] as the CLI opens one: its root guarded by the data dir's
/// control plane (every bind checks a target is not the store, ID-4),
/// which `ledger` leaves out to time the chain alone.
pub fn guarded_ledger(root: &Path, data: &Path) -> Ledger {
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
    let data = Dir::open_ambient_dir(data, ambient_authority()).unwrap();
    let control = ControlPlane::for_data_dir(&data, None).unwrap();
    let root = Dir::open_ambient_dir(root, ambient_authority()).unwrap();
    let sealed = SealedRoot::new(root, "root", "bench", "bench", control).unwrap();
    Ledger::new(LedgerConfig::new(data, "data", sealed, policies))
}

/// 97 files' refs, resolved once beneath a real root: a resource reference
/// is made by the host only (ID-1), so the bench resolves them as a tool
/// path would be, and each claim clones one.
pub fn targets() -> &'static [ResourceRef] {
    static TARGETS: OnceLock<Vec<ResourceRef>> = OnceLock::new();
    TARGETS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let opened = Dir::open_ambient_dir(dir.path(), ambient_authority()).unwrap();
        let root =
            SealedRoot::new(opened, "/work/demo", "workspace", "agent", ControlPlane::default()).unwrap();
        (0..97)
            .map(|k| {
                let path = format!("src/module_{k}.rs");
                std::fs::write(dir.path().join(&path), "").unwrap();
                root.resolve(&path, ResourceRole::Target).unwrap().resource
            })
            .collect()
    })
}

/// A claim of typical size: one filesystem target, one obligation.
pub fn claim(i: usize) -> ClaimRecord {
    let target = targets()[i % 97].clone();
    ClaimRecord {
        action_id: format!("action-{i}"),
        operation: OperationRef {
            tool: "write_file".into(),
            action: String::new(),
            input_sha256: "8f4c5bd1b0b8b4f9b5c6f0e2b1d1b7f0f7e0d9c2a6b3e4f5a6b7c8d9e0f1a2b3".into(),
            request_id: format!("req-{i}"),
        },
        impact_scope: vec![target],
        dependencies: Vec::new(),
        obligations: vec![effect_ledger::log::Obligation {
            target: 0,
            postcondition: effect_ledger::model::Postcondition::ContentSha256(
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
            ),
        }],
        parent_run_id: None,
        external: false,
        policy_failure: None,
        executor: Some(effect_ledger::executor::current()),
        root: None,
        confined: false,
        profile: None,
        // What the ledger records of the classifier that planned it (POL-4).
        classifier: Some(effect_ledger::log::PolicyRef {
            component: "classify-fs".into(),
            sha256: "5d0c8a1f9e7b6a4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c".into(),
        }),
    }
}

/// The bytes one claim appends (one framed line), from a scratch log.
pub fn claim_line(i: usize) -> Vec<u8> {
    let file = MemoryFile::new();
    let mut log = EffectLog::open(file.clone(), "scratch", None).unwrap();
    log.claim("bench", claim(i)).unwrap();
    file.contents()
}

/// Lineage `run_id` in `dir`, opened for appending without eager recovery
/// (several writers share it), keeping checkpoints as the ledger's handle
/// does (so a bench pays for them where the ledger would).
pub fn open_log(dir: &Path, run_id: &str) -> LineageLog {
    let handle = Dir::open_ambient_dir(dir, ambient_authority()).unwrap();
    let options = OpenOptionsLog {
        mode: OpenMode::ReadWrite,
        key: None,
        recover: false,
        checkpoints: Checkpoints::Keep,
    };
    open_lineage(&handle, "bench", run_id, &options).unwrap().unwrap()
}
