//! What the chain benchmarks share: the sample count, scratch directories and
//! medians.

#![allow(dead_code)] // each bench uses a subset

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Ledger, LedgerConfig};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};

/// `n` scaled by `$EFFECTS_BENCH_SCALE` (at least 20).
pub fn samples(n: usize) -> usize {
    let factor: f64 = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
    ((n as f64 * factor) as usize).max(20)
}

/// The median, in microseconds.
pub fn median_us(samples: &mut [Duration]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
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
