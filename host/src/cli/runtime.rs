//! Opening the runtime the way `session` and `decide` share: the data dir
//! (created `0700`, each new directory fsynced into its parent, LOG-3), its
//! place checked against the root (ID-4), the effect store as control plane,
//! the sealed root, the operator key, the policy set (embedded or a
//! manifest) with the compiled-component cache.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use effect_ledger::data_dir::DataDir;
use effect_ledger::identity::{ControlPlane, SealedRoot, lies_beneath};
use effect_ledger::ledger::{Ledger, LedgerConfig};
use effect_ledger::policy::{PolicyOptions, PolicySet};
use effect_ledger::producers::confine::Confinement;

use super::input::read_key;
use super::policy::{manifest_source, open_cache};
use super::{Failure, exit};

/// The data dir of a process an agent launches (a hook, an MCP server)
/// when the command line and the environment name none: the CLI's
/// `.effects` is relative to the current directory, which such a process
/// does not choose (an agent's project, the root the ledger guards, ID-4;
/// `/` for some MCP hosts), so it keeps its store in the user's state
/// directory, `$XDG_STATE_HOME/effect-ledger` (else
/// `~/.local/state/effect-ledger`).
pub(super) fn state_dir(data_dir: &Path) -> PathBuf {
    if data_dir != Path::new(super::DEFAULT_DATA_DIR) || std::env::var_os("EFFECTS_DATA_DIR").is_some() {
        return data_dir.to_owned();
    }
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("effect-ledger")
}

pub(super) fn bad(error: impl Into<anyhow::Error>) -> Failure {
    Failure::new(exit::BAD_INPUT, error)
}

/// Creates `path` (and missing parents) `0700`, one directory at a time,
/// fsyncing each new directory's parent after its `mkdir` (LOG-3): a log
/// made durable inside a directory whose own entry was never made durable
/// can vanish with it in a crash.
#[allow(clippy::disallowed_methods)] // the data dir is a path from the command line; it is made here
pub(super) fn private_dir(path: &Path) -> Result<(), Failure> {
    let absolute =
        std::path::absolute(path).with_context(|| format!("resolving {}", path.display())).map_err(bad)?;
    let mut missing = Vec::new();
    let mut existing = absolute.as_path();
    while !existing.exists() {
        missing.push(existing);
        existing = existing
            .parent()
            .ok_or_else(|| bad(anyhow::anyhow!("{} has no existing ancestor", path.display())))?;
    }
    for directory in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(0o700).create(directory) {
            Ok(()) => {}
            // Another process made it meanwhile: it made its entry durable.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => {
                return Err(bad(
                    anyhow::Error::new(error).context(format!("creating {}", directory.display()))
                ));
            }
        }
        let parent = directory.parent().expect("a created directory has a parent");
        std::fs::File::open(parent)
            .and_then(|opened| opened.sync_all())
            .with_context(|| format!("fsyncing {} after creating {}", parent.display(), directory.display()))
            .map_err(bad)?;
    }
    Ok(())
}

/// Where this process traces its policy calls (`session --trace-policies`).
static TRACE: std::sync::OnceLock<effect_ledger::policy::Trace> = std::sync::OnceLock::new();

/// Traces every policy call of this process into `dir` (created `0700`),
/// which must lie outside `root`: the trace holds the tools' inputs, and
/// files appearing beneath the root would be changes nobody claimed.
#[allow(clippy::disallowed_methods)] // `--trace-policies DIR` and `--root`, from the command line
pub(super) fn trace_policies(root: &Path, dir: &Path) -> Result<(), Failure> {
    let canonical = canonical_to_be(dir)?;
    if canonical.starts_with(canonical_to_be(root)?) {
        return Err(bad(anyhow::anyhow!(
            "--trace-policies {} lies beneath the root {}: give a directory outside it",
            dir.display(),
            root.display()
        )));
    }
    if canonical.exists() {
        use std::os::unix::fs::MetadataExt;
        let metadata = std::fs::symlink_metadata(&canonical).map_err(bad)?;
        let ours = metadata.uid() == rustix::process::geteuid().as_raw();
        let private = metadata.mode() & 0o077 == 0;
        let empty = std::fs::read_dir(&canonical).map_err(bad)?.next().is_none();
        if !metadata.is_dir() || !ours || !private || !empty {
            return Err(bad(anyhow::anyhow!(
                "--trace-policies {}: give a new directory, or an empty one of yours with mode 0700 (a trace holds \
                 what the tools were given, and one session's files must not mix with another's)",
                dir.display()
            )));
        }
    }
    private_dir(dir)?;
    let opened = Dir::open_ambient_dir(&canonical, ambient_authority())
        .with_context(|| format!("opening {}", dir.display()))
        .map_err(bad)?;
    let _ = TRACE.set(effect_ledger::policy::Trace::new(opened, &dir.display().to_string()));
    Ok(())
}

/// The fleet store `--store` (or `$EFFECTS_STORE`) names, chosen once at
/// start for every data dir this process opens.
static STORE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Sets the fleet store for this process (the first call wins). With one,
/// the process is made non-dumpable: its `/proc/<pid>/environ` (which holds
/// `$EFFECTS_STORE` and its credentials) is then readable by root only, not
/// by every process of the same user, such as a command that ran without
/// confinement or an `mcp-proxy` upstream (ID-4). Commands it starts are
/// dumpable again after their `exec`, and never inherit the variable
/// (`data_dir::withhold_store`).
pub(super) fn choose_store(url: Option<String>) {
    let url = url.filter(|url| !url.is_empty());
    if url.is_some()
        && let Err(error) =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(
            "the fleet store's address stays readable in /proc: making this process non-dumpable failed: {error}"
        );
    }
    let _ = STORE.set(url);
}

/// The data dir at `path` as the library's [`DataDir`]: the ambient
/// authority `--data-dir` (or its default) brings, entering here once.
/// With `create` it is made first (`0700`, each new directory fsynced into
/// its parent, LOG-3); without, a data dir that does not exist is `None`
/// and nothing is made.
#[allow(clippy::disallowed_methods)] // `--data-dir`, opened by its path: where its authority enters
pub(super) fn open_data_dir(path: &Path, create: bool) -> Result<Option<DataDir>, Failure> {
    if create {
        private_dir(path)?;
    } else if !path.exists() {
        return Ok(None);
    }
    let dir = Dir::open_ambient_dir(path, ambient_authority())
        .with_context(|| format!("opening the data dir {}", path.display()))
        .map_err(bad)?;
    let data = DataDir::new(dir, &path.display().to_string());
    Ok(Some(match STORE.get().and_then(Option::as_deref) {
        Some(url) => data.with_server(url),
        None => data,
    }))
}

/// `path` canonical, though it may not exist yet: its nearest existing
/// ancestor canonicalized, the rest kept.
#[allow(clippy::disallowed_methods)] // a path from the command line, before it is created
fn canonical_to_be(path: &Path) -> Result<PathBuf, Failure> {
    let absolute = std::path::absolute(path).map_err(bad)?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        rest.push(existing.file_name().map(std::ffi::OsStr::to_owned).unwrap_or_default());
        existing = existing.parent().unwrap_or(Path::new("/"));
    }
    let mut canonical = existing.canonicalize().map_err(bad)?;
    canonical.extend(rest.iter().rev());
    Ok(canonical)
}

/// ID-4 by path, before anything is created: the canonical data dir is not
/// the canonical root, beneath it, or above it. (The library checks again by
/// `device:inode`, which also sees a symlinked second name; this one can
/// speak before the data dir exists, so a refused data dir is never created.
/// Neither sees a bind mount of the data dir beneath the root:
/// `Ledger::open` reads the mount table for that.)
#[allow(clippy::disallowed_methods)] // compares two paths from the command line, before either is opened
fn check_paths(root: &Path, data_dir: &Path) -> Result<(), Failure> {
    let root =
        root.canonicalize().with_context(|| format!("resolving the root {}", root.display())).map_err(bad)?;
    let data = canonical_to_be(data_dir)?;
    let refused = |what: &str| {
        bad(anyhow::anyhow!(
            "the data dir {} {what} the root {}: tools there could read and write the effect store (ID-4); \
             give --data-dir a directory outside the root that does not contain it (e.g. beside the root)",
            data.display(),
            root.display()
        ))
    };
    if data == root {
        return Err(refused("is"));
    }
    if data.starts_with(&root) {
        return Err(refused("lies beneath"));
    }
    if root.starts_with(&data) {
        return Err(refused("contains"));
    }
    Ok(())
}

/// ID-4 for the operator key: a key file beneath the root is readable by
/// `read_file` and `grep` and writable by tools and confined commands, so
/// it would authenticate nothing. Compared by `device:inode` of the key's
/// directory and its parents (its canonical path first, so a symlink to it
/// from outside is judged where the key really is).
#[allow(clippy::disallowed_methods)] // the key file's directory, opened by its path
fn check_key_place(root: &Dir, root_display: &str, key_file: &Path) -> Result<(), Failure> {
    if key_file == Path::new("-") {
        return Ok(());
    }
    let real =
        key_file.canonicalize().with_context(|| format!("key file {}", key_file.display())).map_err(bad)?;
    let directory = real.parent().unwrap_or(Path::new("/"));
    let opened = Dir::open_ambient_dir(directory, ambient_authority())
        .with_context(|| format!("opening the key file's directory {}", directory.display()))
        .map_err(bad)?;
    if lies_beneath(root, &opened).map_err(bad)? {
        return Err(bad(anyhow::anyhow!(
            "the key file {} lies beneath the root {root_display}, where tools and commands could read and \
             overwrite it (ID-4); keep the operator key outside the root",
            key_file.display()
        )));
    }
    Ok(())
}

/// A ledger over `root` (which must exist) with its store in `data_dir`,
/// its commands confined where Landlock is available to the root, their
/// private temporary directories and `allow_write` (ID-6; a path that
/// reaches the store is refused), writing with the operator key in
/// `key_file` if one is given (refused beneath the root). No mount beneath
/// the root may show the store. Returns it with the data dir's display name.
pub(super) fn open_ledger(
    root: &Path,
    data_dir: &Path,
    manifest: Option<&Path>,
    key_file: Option<&Path>,
    allow_write: &[PathBuf],
) -> Result<(Ledger, String), Failure> {
    open_ledger_with(root, data_dir, manifest, key_file, allow_write, false)
}

/// [`open_ledger`], its policies loaded on first use when `lazy` (a process
/// that serves one event: `PolicySet::load_lazily`).
#[allow(clippy::disallowed_methods)] // `--root` and `--data-dir`, opened by their paths
pub(super) fn open_ledger_with(
    root: &Path,
    data_dir: &Path,
    manifest: Option<&Path>,
    key_file: Option<&Path>,
    allow_write: &[PathBuf],
    lazy: bool,
) -> Result<(Ledger, String), Failure> {
    check_paths(root, data_dir)?;
    let data = open_data_dir(data_dir, true)?.expect("a created data dir opens");
    // No prefix: placement refuses a data dir beneath the root, so the store
    // has no place there; what can still show it there (a mount, a hard
    // link) is checked by `device:inode`.
    let control = ControlPlane::for_data_dir(data.dir(), None)
        .with_context(|| format!("listing the effect store in {}", data.display()))
        .map_err(bad)?;
    let root_dir = Dir::open_ambient_dir(root, ambient_authority())
        .with_context(|| format!("opening the root {}", root.display()))
        .map_err(bad)?;
    // The root's absolute path is recorded with every filesystem resource, so
    // `effects decide` can find it again (and checks its device and inode).
    let canonical_root = root.canonicalize().unwrap_or_else(|_| PathBuf::from(root));
    let display_root = canonical_root.display().to_string();
    if let Some(key_file) = key_file {
        check_key_place(&root_dir, &display_root, key_file)?;
    }
    let key = read_key(key_file)?;
    let sealed = SealedRoot::new(root_dir, &display_root, "session", "cli", control).map_err(bad)?;
    let options =
        PolicyOptions { cache: open_cache(&data), trace: TRACE.get().cloned(), ..PolicyOptions::default() };
    let source = manifest_source(manifest)?;
    let policies =
        if lazy { PolicySet::load_lazily(source, options) } else { PolicySet::load(&source, &options) }
            .map_err(|e| Failure::new(exit::REFUSED, e))?;
    let display_data = data.display().to_owned();
    let confine = Confinement::detect().allow_write(allow_write, data.dir(), sealed.dir()).map_err(bad)?;
    let config = LedgerConfig { confine, key, ..LedgerConfig::at(data, sealed, policies) };
    let ledger = Ledger::open(config).map_err(|e| bad(anyhow::anyhow!("{e} (give --data-dir elsewhere)")))?;
    Ok((ledger, display_data))
}
