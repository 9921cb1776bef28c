//! Opening the runtime the way `session` and `decide` share: the data dir
//! (created `0700`), the effect store as control plane, the sealed root, the
//! policy set (embedded or a manifest) with the compiled-component cache.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Ledger, LedgerConfig};
use effect_ledger::policy::{PolicyOptions, PolicySet};
use effect_ledger::producers::confine::Confinement;

use super::policy::{manifest_source, open_cache};
use super::{Failure, exit};

pub(super) fn bad(error: impl Into<anyhow::Error>) -> Failure {
    Failure::new(exit::BAD_INPUT, error)
}

/// Creates `path` (and parents) `0700` if missing.
pub(super) fn private_dir(path: &Path) -> Result<(), Failure> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .with_context(|| format!("creating {}", path.display()))
        .map_err(bad)
}

/// The effect store's place beneath the root, if the data dir lies there.
fn store_prefix(root: &Path, data_dir: &Path) -> Option<String> {
    let root = root.canonicalize().ok()?;
    let data = data_dir.canonicalize().ok()?;
    data.strip_prefix(&root).ok().map(|relative| relative.to_string_lossy().into_owned())
}

/// A ledger over `root` (which must exist) with its store in `data_dir`,
/// its commands confined where Landlock is available to the root, their
/// private temporary directories and `allow_write` (ID-6; a path that
/// reaches the store is refused). Returns it with the data dir's display
/// name.
pub(super) fn open_ledger(
    root: &Path,
    data_dir: &Path,
    manifest: Option<&Path>,
    allow_write: &[PathBuf],
) -> Result<(Ledger, String), Failure> {
    private_dir(data_dir)?;
    let data = Dir::open_ambient_dir(data_dir, ambient_authority())
        .with_context(|| format!("opening the data dir {}", data_dir.display()))
        .map_err(bad)?;
    let prefix = store_prefix(root, data_dir).map(|p| format!("{p}/effects"));
    let control = match data.open_dir("effects") {
        Ok(store) => ControlPlane::new(&store, prefix).map_err(bad)?,
        Err(_) => ControlPlane::without_files(prefix),
    };
    let root_dir = Dir::open_ambient_dir(root, ambient_authority())
        .with_context(|| format!("opening the root {}", root.display()))
        .map_err(bad)?;
    // The root's absolute path is recorded with every filesystem resource, so
    // `effects decide` can find it again (and checks its device and inode).
    let display_root = root.canonicalize().unwrap_or_else(|_| PathBuf::from(root)).display().to_string();
    let sealed = SealedRoot::new(root_dir, &display_root, "session", "cli", control).map_err(bad)?;
    let options = PolicyOptions { cache: open_cache(data_dir), ..PolicyOptions::default() };
    let policies =
        PolicySet::load(&manifest_source(manifest)?, &options).map_err(|e| Failure::new(exit::REFUSED, e))?;
    let display_data = data_dir.display().to_string();
    let confine = Confinement::detect().allow_write(allow_write, &data).map_err(bad)?;
    let config = LedgerConfig { confine, ..LedgerConfig::new(data, &display_data, sealed, policies) };
    Ok((Ledger::new(config), display_data))
}
