//! Write confinement of commands by Landlock (ID-6).
//!
//! Every command (`bash` / `python`, a background job, a check) runs with
//! the user's authority, so unconfined it can write the store: cut its own
//! claim off the log, link a log into the root, rewrite a job's exit file.
//! Where the kernel offers Landlock, the command's supervisor
//! (`effects-supervisor`) restricts itself before it reaches its gate, and
//! the whole tree it starts inherits the domain: **write access** (every
//! write-ish right of the ABI: writing, truncating, creating, removing,
//! renaming and linking) only beneath the root, a private temporary
//! directory made for that command, the paths the operator allows
//! (`--allow-write`) and a few device files; nothing else, and the data dir
//! never (an allowed path that is, contains or lies beneath it is refused
//! here; a root that holds the store is refused by ID-4). Device nodes are
//! never made, device ioctls only on terminals, and the command runs with no
//! capabilities (root's would bypass Landlock), no descriptor but 0, 1 and 2
//! from the host, and (ABI 6) signals scoped to its own tree. Each writable
//! path is passed with the device and inode it must still be, so a command
//! that swaps a later command's path for a symlink stops that command rather
//! than opening the store to it. Reads and execution stay unrestricted:
//! confinement keeps commands from changing what the ledger trusts, not from
//! seeing it.
//!
//! Confinement is only as good as the binaries that do it: when `effects`
//! or `effects-supervisor` lies beneath the root or an allowed path (by
//! device and inode, walking `..` up from the binary), a command could
//! replace the helper with one that confines nothing and says `confined`;
//! commands then count as unconfined and decisions disclose it.
//!
//! Where Landlock is absent (or below ABI 3, which first handles truncation:
//! without it `truncate -s` of a log is still allowed), or forced off with
//! `EFFECTS_CONFINE=off`, commands run unconfined and every command claim
//! records so (`unconfined`), which the evaluator discloses on the decision.
//! The override can only make the ledger say less, never claim confinement
//! it does not have. A supervisor told to confine that cannot restrict
//! itself fully exits before its gate, so the command never runs: a claim
//! that says "confined" is never run unconfined.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;

/// The disclosure every decision over a run with an unconfined command
/// carries (the evaluator words it; this is its text, for the host's own
/// messages and tests).
pub const DISCLOSURE: &str = "Commands ran without write confinement.";

/// The environment variable that forces confinement off (`off`), for a
/// kernel that misbehaves with it, and for tests of the unconfined path.
pub const OVERRIDE: &str = "EFFECTS_CONFINE";

/// The least Landlock ABI that confines what a command could do to the
/// store: ABI 3 handles truncation (ABI 2 linking and renaming across
/// directories, ABI 1 the rest).
pub const LEAST_ABI: i32 = 3;

/// Device files every command may write (output discarded).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// Terminals every command may write and take ioctls on (the only device
/// ioctls granted).
const TERMINALS: &[&str] = &["/dev/tty", "/dev/pts"];

/// A file's device and inode: what a writable path must still be when a
/// supervisor opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Inode {
    dev: u64,
    ino: u64,
}

impl Inode {
    fn of(fd: impl AsFd) -> std::io::Result<Self> {
        let stat = rustix::fs::fstat(fd)?;
        Ok(Self { dev: stat.st_dev, ino: stat.st_ino })
    }

    /// The inode `path` names now (following symlinks, as the operator
    /// meant it).
    fn at(path: &Path) -> std::io::Result<Self> {
        let stat = rustix::fs::stat(path)?;
        Ok(Self { dev: stat.st_dev, ino: stat.st_ino })
    }

    fn arg(self) -> OsString {
        format!("{}:{}", self.dev, self.ino).into()
    }
}

/// The inodes of `dir` and every directory above it, by `..` (no path is
/// resolved again; mount points are crossed as the kernel does).
fn ancestry(dir: &Path) -> std::io::Result<Vec<Inode>> {
    use rustix::fs::{CWD, Mode, OFlags, openat};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = openat(CWD, dir, flags, Mode::empty())?;
    let mut seen = vec![Inode::of(&fd)?];
    // A bound on the walk: no real tree is this deep.
    for _ in 0..4096 {
        fd = openat(&fd, "..", flags, Mode::empty())?;
        let here = Inode::of(&fd)?;
        if seen.last() == Some(&here) {
            return Ok(seen);
        }
        seen.push(here);
    }
    Err(std::io::Error::other(format!("{} is nested too deep", dir.display())))
}

/// What the kernel offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landlock {
    /// Landlock works, at this ABI (the highest both it and the `landlock`
    /// crate know).
    Available {
        /// The effective ABI.
        abi: i32,
    },
    /// Commands cannot be confined, and why.
    Absent {
        /// Why not, for `effects doctor` and the claim's messages.
        why: String,
    },
}

/// Landlock's availability in this process, probed once: a short-lived
/// thread restricts itself (the domain dies with it) and reads what the
/// kernel said. [`OVERRIDE`]`=off` forces [`Landlock::Absent`].
pub fn landlock() -> &'static Landlock {
    static PROBED: OnceLock<Landlock> = OnceLock::new();
    PROBED.get_or_init(|| {
        if std::env::var_os(OVERRIDE).is_some_and(|v| v == "off") {
            return Landlock::Absent { why: format!("confinement forced off ({OVERRIDE}=off)") };
        }
        probe()
    })
}

fn probe() -> Landlock {
    use landlock::{ABI, AccessFs, LandlockStatus, Ruleset, RulesetAttr};
    // The thread is restricted, never the host: a domain is inherited only by
    // what the restricted thread creates afterwards, and it creates nothing.
    let status = std::thread::spawn(|| -> Result<LandlockStatus, String> {
        let status = Ruleset::default()
            .handle_access(AccessFs::from_write(ABI::V1))
            .and_then(|r| r.create())
            .and_then(|r| r.restrict_self())
            .map_err(|e| e.to_string())?;
        Ok(status.landlock)
    })
    .join()
    .unwrap_or_else(|_| Err("the probe panicked".into()));
    match status {
        Ok(LandlockStatus::Available { effective_abi, .. }) if effective_abi as i32 >= LEAST_ABI => {
            Landlock::Available { abi: effective_abi as i32 }
        }
        Ok(LandlockStatus::Available { effective_abi, .. }) => Landlock::Absent {
            why: format!(
                "Landlock ABI {} is below {LEAST_ABI}, which first confines truncation",
                effective_abi as i32
            ),
        },
        Ok(LandlockStatus::NotEnabled) => {
            Landlock::Absent { why: "Landlock is not enabled in this kernel".into() }
        }
        Ok(LandlockStatus::NotImplemented) => {
            Landlock::Absent { why: "this kernel does not implement Landlock".into() }
        }
        Err(error) => Landlock::Absent { why: format!("the Landlock probe failed: {error}") },
    }
}

/// Why a confinement could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// An allowed path would open the store to commands.
    #[error(
        "--allow-write {path} would let commands write the data dir {data} (it is, contains or lies beneath it); allow a path outside the data dir"
    )]
    Store {
        /// The allowed path.
        path: String,
        /// The data dir.
        data: String,
    },
    /// An allowed path that cannot be resolved.
    #[error("--allow-write {path}: {source}")]
    Path {
        /// The allowed path.
        path: String,
        /// Why not.
        source: std::io::Error,
    },
}

/// How a ledger runs its commands: confined by Landlock (at its ABI, with the
/// operator's extra writable paths), or unconfined and saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    landlock: Landlock,
    allowed: Vec<(PathBuf, Inode)>,
    data: Option<PathBuf>,
}

impl Default for Confinement {
    fn default() -> Self {
        Self::detect()
    }
}

/// The absolute path a directory handle is open at (what `/proc` says of its
/// descriptor: no path is resolved again).
fn path_of(dir: &Dir) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

/// `path` is, contains or lies beneath `data`.
fn reaches(path: &Path, data: &Path) -> bool {
    path.starts_with(data) || data.starts_with(path)
}

impl Confinement {
    /// What this process can do: confined when Landlock works and the
    /// `effects-supervisor` helper (which restricts itself) is installed.
    pub fn detect() -> Self {
        let landlock = match landlock() {
            Landlock::Available { .. } if !super::supervisor::has_helper() => Landlock::Absent {
                why: "no effects-supervisor beside the executable, which is what confines a command".into(),
            },
            found => found.clone(),
        };
        Self { landlock, allowed: Vec::new(), data: None }
    }

    /// Commands run unconfined, for `why` (claims record it; decisions
    /// disclose it).
    pub fn unconfined(why: &str) -> Self {
        Self { landlock: Landlock::Absent { why: why.to_owned() }, allowed: Vec::new(), data: None }
    }

    /// Adds the operator's writable `paths` (each must exist; each is
    /// remembered with its inode, which every command's supervisor checks
    /// again) and remembers the store (`data_dir`) so that no path, the
    /// private temporary ones included, ever opens it: a path that is,
    /// contains or lies beneath it is refused. Checked whether or not
    /// Landlock is present: the operator's mistake is one either way. Then,
    /// when the ledger's own binaries lie beneath `root` or an allowed path,
    /// commands count as unconfined (`Confinement::guard_binaries`).
    pub fn allow_write(
        mut self,
        paths: &[PathBuf],
        data_dir: &Dir,
        root: &Dir,
    ) -> Result<Self, ConfineError> {
        let data = path_of(data_dir)
            .map_err(|source| ConfineError::Path { path: "(the data dir)".into(), source })?;
        for path in paths {
            let resolved = path
                .canonicalize()
                .map_err(|source| ConfineError::Path { path: path.display().to_string(), source })?;
            if reaches(&resolved, &data) {
                return Err(ConfineError::Store {
                    path: path.display().to_string(),
                    data: data.display().to_string(),
                });
            }
            let inode = Inode::at(&resolved)
                .map_err(|source| ConfineError::Path { path: path.display().to_string(), source })?;
            self.allowed.push((resolved, inode));
        }
        self.data = Some(data);
        let root = Inode::of(root.as_fd())
            .map_err(|source| ConfineError::Path { path: "(the root)".into(), source })?;
        Ok(self.guard_binaries(root))
    }

    /// Commands count as unconfined when a command could replace what
    /// confines it: `effects` itself or its `effects-supervisor` lies
    /// beneath the root (`root`) or an allowed path, or is an allowed file.
    /// A replaced helper would say `confined` and confine nothing; a claim
    /// must not say so on its word.
    fn guard_binaries(mut self, root: Inode) -> Self {
        if !self.confined() {
            return self;
        }
        let writable: Vec<Inode> =
            std::iter::once(root).chain(self.allowed.iter().map(|(_, inode)| *inode)).collect();
        let binaries = std::env::current_exe().ok().into_iter().chain(super::supervisor::helper_path());
        for binary in binaries {
            let exposed = binary
                .canonicalize()
                .and_then(|path| {
                    let mut inodes = ancestry(path.parent().unwrap_or(Path::new("/")))?;
                    inodes.push(Inode::at(&path)?);
                    Ok(inodes.iter().any(|inode| writable.contains(inode)))
                })
                // A binary whose place cannot be walked cannot be vouched for.
                .unwrap_or(true);
            if exposed {
                self.landlock = Landlock::Absent {
                    why: format!(
                        "the ledger's binary {} lies beneath the root or an --allow-write path, where commands could replace it; install it elsewhere",
                        binary.display()
                    ),
                };
                break;
            }
        }
        self
    }

    /// Commands run confined.
    pub fn confined(&self) -> bool {
        matches!(self.landlock, Landlock::Available { .. })
    }

    /// What the kernel offers, as this confinement saw it.
    pub fn landlock(&self) -> &Landlock {
        &self.landlock
    }

    /// The operator's writable paths (resolved).
    pub fn allowed(&self) -> impl Iterator<Item = &Path> {
        self.allowed.iter().map(|(path, _)| path.as_path())
    }

    /// The jail of one command: `None` when commands run unconfined; else a
    /// fresh private temporary directory (mode 0700, its `TMPDIR`) and the
    /// supervisor's arguments. `Err` when the directory cannot be made, or
    /// would lie in the store: the command must then not run.
    pub fn jail(&self) -> std::io::Result<Option<Jail>> {
        let Landlock::Available { abi } = self.landlock else {
            return Ok(None);
        };
        let (tmp, inode) = private_temp_dir()?;
        let jail = Jail { abi, tmp, inode, allowed: self.allowed.clone(), keep: false };
        let resolved = jail.tmp.canonicalize()?;
        if let Some(data) = &self.data
            && reaches(&resolved, data)
        {
            return Err(std::io::Error::other(format!(
                "the private temporary directory {} lies in the data dir {}: set TMPDIR outside it",
                resolved.display(),
                data.display()
            )));
        }
        Ok(Some(jail))
    }
}

/// How every command's private temporary directory is named (then the
/// host's PID, a count and a nonce): the only directories
/// [`PrivateTmp::remove`] removes.
const TMP_PREFIX: &str = "effects-cmd-";

/// The directory `path` names beneath `at`, itself: opened without
/// following a symlink there (one is refused, not trusted), only to be
/// identified by its inode.
fn directory_itself(at: impl AsFd, path: impl rustix::path::Arg) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags, openat};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(openat(at, path, flags, Mode::empty())?)
}

/// A fresh directory beneath the system's temporary directory, mode 0700,
/// and its inode (of the directory made: opened without following a
/// symlink, so one swapped in since is refused, not trusted).
fn private_temp_dir() -> std::io::Result<(PathBuf, Inode)> {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "{TMP_PREFIX}{}-{}-{nanos:08x}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let path = base.join(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                let inode = directory_itself(rustix::fs::CWD, &path)?;
                return Ok((path, Inode::of(&inode)?));
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
}

/// One command's confinement: its private temporary directory (removed when
/// the jail is dropped, unless [`Jail::keep`]) and what its supervisor is
/// told.
#[derive(Debug)]
pub struct Jail {
    abi: i32,
    tmp: PathBuf,
    inode: Inode,
    allowed: Vec<(PathBuf, Inode)>,
    keep: bool,
}

impl Jail {
    /// The command's private temporary directory (its `TMPDIR`).
    pub fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// The supervisor's confinement arguments: `--confine ABI`, then
    /// `--write PATH DEV:INO` for every writable path but the root (the
    /// supervisor's working directory, which it restricts to through its own
    /// descriptor) and `--tty PATH DEV:INO` for each terminal, then `--`.
    pub fn args(&self) -> Vec<OsString> {
        let mut args = vec![OsString::from("--confine"), OsString::from(self.abi.to_string())];
        let device = |flag: &'static str| {
            move |path: &&str| Some((flag, PathBuf::from(path), Inode::at(Path::new(path)).ok()?))
        };
        let devices = DEVICES.iter().filter_map(device("--write"));
        let terminals = TERMINALS.iter().filter_map(device("--tty"));
        for (flag, path, inode) in std::iter::once(("--write", self.tmp.clone(), self.inode))
            .chain(self.allowed.iter().map(|(path, inode)| ("--write", path.clone(), *inode)))
            .chain(devices)
            .chain(terminals)
        {
            args.extend([flag.into(), path.into(), inode.arg()]);
        }
        args.push("--".into());
        args
    }

    /// Leaves the temporary directory behind (a background job outlives the
    /// call that started it), answering what names it in the job's record:
    /// whoever finds the job over removes it ([`PrivateTmp::remove`]).
    /// `None` when its path is not UTF-8 (a `TMPDIR` so named), which a
    /// record cannot hold: then it stays behind.
    pub fn keep(mut self) -> Option<PrivateTmp> {
        self.keep = true;
        let path = self.tmp.to_str()?.to_owned();
        Some(PrivateTmp { path, device: self.inode.dev, inode: self.inode.ino })
    }
}

/// The private temporary directory of a background job's jail, as its job
/// record names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateTmp {
    /// Where it is.
    pub path: String,
    /// Its device when it was made.
    pub device: u64,
    /// Its inode when it was made.
    pub inode: u64,
}

impl PrivateTmp {
    /// Removes the directory and everything in it, once the job whose
    /// directory it is has ended with nothing of it left alive: only if it
    /// is named as the host names them (an absolute path ending in
    /// `effects-cmd-…`) and, opened beneath its parent without following a
    /// symlink, is still the directory made for the job (the same device
    /// and inode); then it is removed through that parent's descriptor,
    /// never following a symlink within it. So neither a path swapped since
    /// nor a record naming another directory makes this remove anything
    /// else. Nothing there is no error (removed already, by an earlier read
    /// of the job or by the operator).
    #[allow(clippy::disallowed_methods)] // the system's temporary directory is a real path, not beneath a root
    pub fn remove(&self) -> std::io::Result<()> {
        let path = Path::new(&self.path);
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(self.not_ours());
        };
        if !path.is_absolute() || !name.to_str().is_some_and(|name| name.starts_with(TMP_PREFIX)) {
            return Err(self.not_ours());
        }
        let gone = |error: std::io::Error| match error.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(error),
        };
        let parent = match Dir::open_ambient_dir(parent, cap_std::ambient_authority()) {
            Ok(parent) => parent,
            Err(error) => return gone(error),
        };
        let made = match directory_itself(&parent, name) {
            Ok(made) => made,
            Err(error) => return gone(error),
        };
        if Inode::of(&made)? != (Inode { dev: self.device, ino: self.inode }) {
            return Err(std::io::Error::other(format!(
                "{} is no longer the directory made for the job; left alone",
                self.path
            )));
        }
        parent.remove_dir_all(name).or_else(gone)
    }

    fn not_ours(&self) -> std::io::Error {
        std::io::Error::other(format!(
            "{} is not a command's private temporary directory; left alone",
            self.path
        ))
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_holds_or_lies_in_the_store_reaches_it() {
        let data = Path::new("/srv/data");
        assert!(reaches(Path::new("/srv/data"), data));
        assert!(reaches(Path::new("/srv"), data));
        assert!(reaches(Path::new("/srv/data/effects"), data));
        assert!(!reaches(Path::new("/srv/database"), data), "components, not bytes");
        assert!(!reaches(Path::new("/srv/other"), data));
    }

    #[test]
    fn the_supervisor_is_told_every_writable_path_but_the_root() {
        let inode = |ino| Inode { dev: 1, ino };
        let jail = Jail {
            abi: 7,
            tmp: "/tmp/x".into(),
            inode: inode(2),
            allowed: vec![("/srv/out".into(), inode(3))],
            keep: true,
        };
        let args: Vec<String> = jail.args().into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(&args[..8], ["--confine", "7", "--write", "/tmp/x", "1:2", "--write", "/srv/out", "1:3"]);
        assert_eq!(args.last().map(String::as_str), Some("--"));
        let null = args.iter().position(|a| a == "/dev/null").expect("/dev/null is writable");
        assert_eq!(args[null - 1], "--write", "not a terminal: no ioctls");
        if let Some(tty) = args.iter().position(|a| a == "/dev/pts") {
            assert_eq!(args[tty - 1], "--tty");
        }
    }

    /// A kept directory as a job record names it: made the way a jail makes
    /// one, beneath `base`.
    #[allow(clippy::disallowed_methods)] // as the jail makes it, by path
    fn kept(base: &Path, name: &str) -> PrivateTmp {
        let path = base.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path).unwrap();
        let inode = Inode::at(&path).unwrap();
        PrivateTmp { path: path.to_str().unwrap().to_owned(), device: inode.dev, inode: inode.ino }
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a job's TMPDIR is a path outside any Dir, as here
    fn a_kept_directory_is_removed_only_while_it_is_the_one_made() {
        let base = tempfile::tempdir().unwrap();
        let precious = base.path().join("precious");
        std::fs::create_dir(&precious).unwrap();
        std::fs::write(precious.join("keep"), "k").unwrap();
        let intact = || assert!(precious.join("keep").exists(), "nothing outside the directory is touched");

        let tmp = kept(base.path(), "effects-cmd-1-0-job");
        let made = Path::new(&tmp.path);
        std::fs::create_dir(made.join("sub")).unwrap();
        std::fs::write(made.join("sub/scratch"), "x").unwrap();
        std::os::unix::fs::symlink(&precious, made.join("sub/link")).unwrap();
        tmp.remove().unwrap();
        assert!(!made.exists(), "removed with what was in it");
        intact();
        tmp.remove().expect("removed already is no error");

        // Swapped for a symlink to a directory that must survive.
        let swapped = kept(base.path(), "effects-cmd-1-1-swapped");
        std::fs::remove_dir(&swapped.path).unwrap();
        std::os::unix::fs::symlink(&precious, &swapped.path).unwrap();
        assert!(swapped.remove().is_err(), "a symlink is not the directory made");
        assert!(Path::new(&swapped.path).is_symlink());
        intact();

        // Replaced by another directory of the same name.
        let replaced = kept(base.path(), "effects-cmd-1-2-replaced");
        let at = Path::new(&replaced.path);
        std::fs::rename(at, base.path().join("moved")).unwrap();
        std::fs::create_dir(at).unwrap();
        std::fs::write(at.join("other"), "o").unwrap();
        let error = replaced.remove().expect_err("another inode");
        assert!(error.to_string().contains("no longer the directory made for the job"), "{error}");
        assert!(at.join("other").exists());

        // A record naming some other directory, by its own inode; or a
        // relative path.
        let other = kept(base.path(), "home");
        let error = other.remove().unwrap_err().to_string();
        assert!(error.contains("not a command's private temporary directory"), "{error}");
        assert!(Path::new(&other.path).exists());
        let relative = PrivateTmp { path: "effects-cmd-1-3".into(), ..other };
        assert!(relative.remove().is_err());
    }
}
