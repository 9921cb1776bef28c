//! The data dir and its layout: the one place that knows where the effect
//! store's pieces live beneath it.
//!
//! ```text
//! DATA_DIR/
//!   effects/                   the store (0700)          [`DataDir::STORE`]
//!     <lineage>.log            a root run lineage's log  [`DataDir::log_name`]
//!     <lineage>.log.broken     a cut torn tail, if any
//!     launch-<generation>.json the launch index (LOG-8)  [`DataDir::launch_entry`]
//!     jobs/                    background jobs' records  [`DataDir::JOBS`]
//!   cache/components/          compiled components (POL-1) [`DataDir::CACHE`]
//!   inflight/<action id>       a claim in flight, for other runs' decisions (CMP-13, `ledger::inflight`)
//! ```
//!
//! A [`DataDir`] holds the data dir as a cap-std [`Dir`] handed in by the
//! caller, plus the name to print for it: it never opens anything by an
//! ambient path, so authority still enters only at the edge (the CLI creates
//! the directory and opens it). Every surface asks it for the store, a log,
//! the jobs directory or the cache, so the layout is spelled here once.
//!
//! With a fleet store ([`DataDir::with_server`], SPEC 13) the lineages' logs
//! live on a PostgreSQL server instead of in `effects/`; the rest of the
//! layout (launch index, jobs, cache) stays in the data dir. Its address
//! (which may carry a password) is as much the store as the data dir is
//! (ID-4): [`withhold_store`] keeps it out of every command the ledger runs.
//!
//! Boundary: names come in as run ids and are checked before they become a
//! file name (letters, digits, `-`, `_`; a child's `PARENT.NAME` names its
//! lineage's log), so no caller's string can climb out of the store. The log
//! itself is opened with the LOG-1 / LOG-9 checks of `log::file`.

use cap_std::fs::{Dir, DirBuilder};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::ledger::Run;
use crate::log::{
    Checkpoints, EffectLog, LineageLog, LogError, Medium, OpenMode, OpenOptionsLog, OperatorKey, PgStore,
    check_run_id, open_effects_dir,
};
use crate::policy::{CacheError, CompileCache};
use crate::producers::job::Jobs;

/// The environment variable that names the fleet store (`--store`).
pub const STORE_ENV: &str = "EFFECTS_STORE";

/// ID-4 for the fleet store: a process the ledger starts for a tool (a
/// command, a job, an upstream MCP server) does not inherit the store's
/// address. With it, and the credentials it may carry, a tool could take a
/// writer's lease and append, or edit lines, as the data dir's permissions
/// keep it from doing to a local log.
pub fn withhold_store(command: &mut std::process::Command) -> &mut std::process::Command {
    command.env_remove(STORE_ENV)
}

/// A data directory: the capability to reach it and its display name.
#[derive(Debug)]
pub struct DataDir {
    dir: Dir,
    display: String,
    /// The fleet store's connection string, when the logs live there.
    server: Option<String>,
}

impl DataDir {
    /// The effect store beneath the data dir.
    pub const STORE: &'static str = "effects";
    /// The background jobs' records beneath the store.
    pub const JOBS: &'static str = "jobs";
    /// The compiled-policy cache beneath the data dir.
    pub const CACHE: &'static str = "cache";
    /// The cache's components directory beneath [`Self::CACHE`].
    pub const CACHE_COMPONENTS: &'static str = "components";
    /// How a lineage's log is named in the store: `<lineage>` and this.
    pub const LOG_SUFFIX: &'static str = ".log";

    /// The data dir reached through `dir`, printed as `display`.
    pub fn new(dir: Dir, display: &str) -> Self {
        Self { dir, display: display.to_owned(), server: None }
    }

    /// The same data dir, with the lineages' logs on the PostgreSQL server
    /// at `url` (`postgres://...`, libpq's syntax) instead of in `effects/`.
    pub fn with_server(self, url: &str) -> Self {
        Self { server: Some(url.to_owned()), ..self }
    }

    /// Whether the lineages' logs live on a fleet store.
    pub fn on_server(&self) -> bool {
        self.server.is_some()
    }

    /// The fleet store's address for messages (no password), if the logs
    /// live there.
    pub fn server_display(&self) -> Option<String> {
        self.server.as_deref().map(redact)
    }

    /// The data dir's handle.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// How to name the data dir in messages.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// A second handle to the same directory.
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self { dir: self.dir.try_clone()?, display: self.display.clone(), server: self.server.clone() })
    }

    /// `DATA_DIR/effects`, or the fleet store, for messages.
    pub fn store_display(&self) -> String {
        match self.server_display() {
            Some(server) => server,
            None => self.local_store_display(),
        }
    }

    /// `DATA_DIR/effects`, the local store (the launch index and jobs live
    /// there even when the logs are on the fleet store).
    fn local_store_display(&self) -> String {
        format!("{}/{}", self.display, Self::STORE)
    }

    /// The file name of `lineage`'s log in the store, refused unless
    /// `lineage` is a run id (so it names a file in the store and nothing
    /// else: no `/`, no `..`).
    pub fn log_name(lineage: &str) -> Result<String, String> {
        check_run_id(lineage)?;
        Ok(format!("{lineage}{}", Self::LOG_SUFFIX))
    }

    /// The lineage a store entry is the log of, if it is named as one.
    pub fn lineage_of(file_name: &str) -> Option<&str> {
        let lineage = file_name.strip_suffix(Self::LOG_SUFFIX)?;
        check_run_id(lineage).is_ok().then_some(lineage)
    }

    /// `DATA_DIR/effects/<lineage>.log` (on the fleet store
    /// `URL#<lineage>`), for messages.
    pub fn log_display(&self, lineage: &str) -> String {
        if let Some(server) = self.server_display() {
            return format!("{server}#{lineage}");
        }
        format!("{}/{lineage}{}", self.store_display(), Self::LOG_SUFFIX)
    }

    /// The launch index entry of `generation` in the store (LOG-8).
    pub fn launch_entry(generation: u64) -> String {
        format!("launch-{generation}.json")
    }

    /// The store (created `0700` and fsynced into the data dir when `mode`
    /// is read-write; checked private either way, LOG-1). `None` when it
    /// does not exist and `mode` is read-only: nothing was ever claimed.
    pub fn open_store(&self, mode: OpenMode) -> Result<Option<Dir>, LogError> {
        open_effects_dir(&self.dir, &self.display, mode)
    }

    /// The store, created if missing.
    pub fn writable_store(&self) -> Result<Dir, LogError> {
        self.open_store(OpenMode::ReadWrite).map(|store| store.expect("read-write opens create"))
    }

    /// `lineage`'s log with every LOG-1 / LOG-9 check. When `create` is
    /// false a lineage with no log is `None` and nothing is created (not
    /// even the store); when true the store and log are created if missing.
    /// `options.mode` says whether the handle may write.
    pub fn open_lineage(
        &self,
        lineage: &str,
        create: bool,
        options: &OpenOptionsLog,
    ) -> Result<Option<LineageLog>, LogError> {
        let name = Self::log_name(lineage).map_err(|reason| self.refused(reason))?;
        if let Some(url) = &self.server {
            return self.open_on_server(url, lineage, create, options);
        }
        let store_mode = if create { OpenMode::ReadWrite } else { OpenMode::ReadOnly };
        let Some(store) = self.open_store(store_mode)? else { return Ok(None) };
        // `exists` does not follow a final symlink's absence away: a symlink
        // in the log's place "exists" and is then refused by the open.
        if !create && store.symlink_metadata(&name).is_err() {
            return Ok(None);
        }
        let mode = if create { OpenMode::ReadWrite } else { options.mode };
        let options = OpenOptionsLog { mode, ..options.clone() };
        crate::log::open_lineage(&store, &self.local_store_display(), lineage, &options)
    }

    /// [`DataDir::open_lineage`] on the fleet store. A writable handle
    /// holds a writer's lease ([`crate::log::LEASE`]). Recovery (LOG-7)
    /// judges by leases, not by this machine's `/proc`: a claim's executor
    /// may be a process on another machine or in another container, so a
    /// claim is known dead only when the lease that wrote it has expired and
    /// its executor is that lease's holder ([`crate::executor::judge_leased`]).
    fn open_on_server(
        &self,
        url: &str,
        lineage: &str,
        create: bool,
        options: &OpenOptionsLog,
    ) -> Result<Option<LineageLog>, LogError> {
        let display = self.log_display(lineage);
        let io =
            |source| LogError::Io { path: display.clone(), operation: "open on the fleet store", source };
        let writable = create || options.mode == OpenMode::ReadWrite;
        let lease = writable.then_some(crate::log::LEASE);
        let Some(store) = PgStore::open(url, lineage, create, lease).map_err(io)? else { return Ok(None) };
        let checkpoints = match (writable, options.checkpoints) {
            (false, Checkpoints::Keep) => Checkpoints::Use,
            (_, checkpoints) => checkpoints,
        };
        let mut log =
            EffectLog::open_with(Medium::Server(store), display.clone(), options.key.clone(), checkpoints)?;
        if !writable {
            log.set_read_only();
        }
        if options.recover && writable {
            let recovered = crate::executor::recover(&mut log)?;
            if !recovered.is_empty() {
                tracing::info!(path = %log.path(), ?recovered, "recorded claims of expired writers as INTERRUPTED");
            }
        }
        Ok(Some(log))
    }

    /// The log holding `run` (a root run or a child `PARENT.NAME`: its
    /// lineage's log, LOG-1), read-only: nothing is recovered, created or
    /// written. `None` when the lineage has no log here.
    pub fn open_lineage_read_only(
        &self,
        run: &str,
        key: Option<&OperatorKey>,
    ) -> Result<Option<LineageLog>, LogError> {
        let lineage = Run::parse(run).map_err(|e| self.refused(e.to_string()))?.lineage;
        let options = OpenOptionsLog {
            mode: OpenMode::ReadOnly,
            key: key.cloned(),
            recover: false,
            ..Default::default()
        };
        self.open_lineage(&lineage, false, &options)
    }

    /// The lineages that have a log in the store, sorted. Entries that are
    /// not named `<run id>.log` (a `.broken` tail, the launch index, `jobs/`,
    /// a stray file) are not lineages and are skipped; an entry that is named
    /// as a log is listed whatever it is, so opening it says what is wrong
    /// (a symlink, a FIFO) instead of the listing hiding it.
    pub fn lineages(&self) -> Result<Vec<String>, LogError> {
        if let Some(url) = &self.server {
            return PgStore::lineages(url).map_err(|source| LogError::Io {
                path: redact(url),
                operation: "list lineages",
                source,
            });
        }
        let Some(store) = self.open_store(OpenMode::ReadOnly)? else { return Ok(Vec::new()) };
        let io = |operation| {
            let path = self.store_display();
            move |source| LogError::Io { path, operation, source }
        };
        let mut lineages = Vec::new();
        for entry in store.entries().map_err(io("list directory"))? {
            let entry = entry.map_err(io("list directory"))?;
            if let Some(lineage) = entry.file_name().to_str().and_then(Self::lineage_of) {
                lineages.push(lineage.to_owned());
            }
        }
        lineages.sort();
        Ok(lineages)
    }

    /// The jobs directory, `effects/jobs/`, created (with the store) if
    /// missing.
    pub fn jobs(&self) -> Result<Jobs, LogError> {
        Jobs::open(&self.writable_store()?, &self.local_store_display())
    }

    /// The compiled-component cache, `cache/components`, each directory made
    /// `0700` if absent. Neither is followed as a symbolic link, and the cache
    /// is refused unless private (POL-1).
    pub fn open_cache(&self) -> Result<CompileCache, CacheError> {
        let io = |source| CacheError::Io { what: "the cache directory", source };
        let mut builder = DirBuilder::new();
        cap_std::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match self.dir.create_dir_with(Self::CACHE, &builder) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(io(error)),
        }
        // Opened without following a symbolic link: a link in its place
        // makes the cache unusable, whatever it points to.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let cache = match rustix::fs::openat(&self.dir, Self::CACHE, flags, Mode::empty()) {
            Ok(fd) => Dir::from_std_file(std::fs::File::from(fd)),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(CacheError::NotPrivate {
                    what: "the cache directory",
                    problem: "a symbolic link or other non-directory stands in its place".into(),
                });
            }
            Err(errno) => return Err(io(errno.into())),
        };
        CompileCache::open_beneath(&cache, Self::CACHE_COMPONENTS)
    }

    /// `DATA_DIR/cache/components`, for messages.
    pub fn cache_display(&self) -> String {
        format!("{}/{}/{}", self.display, Self::CACHE, Self::CACHE_COMPONENTS)
    }

    fn refused(&self, reason: String) -> LogError {
        LogError::Refused { path: self.store_display(), reason }
    }
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &url[..scheme + 3], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// Opens a log file an operator holds by path, `DIR/<run id>.log`, reached
/// through `dir` (its directory, displayed `display`), with the LOG-1 /
/// LOG-9 checks and without recovery: for `effects log verify|show|recover
/// PATH` on a log that need not lie in a data dir. `None` when it does not
/// exist and `options.mode` is read-only.
pub fn open_log_file(
    dir: &Dir,
    display: &str,
    file_name: &str,
    options: &OpenOptionsLog,
) -> Result<Option<LineageLog>, LogError> {
    let lineage = DataDir::lineage_of(file_name).ok_or_else(|| LogError::Refused {
        path: format!("{display}/{file_name}"),
        reason: format!("not a log file name (want <run id>{})", DataDir::LOG_SUFFIX),
    })?;
    let options = OpenOptionsLog { recover: false, ..options.clone() };
    crate::log::open_lineage(dir, display, lineage, &options)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // tests build their fixtures with real paths

    use std::os::unix::fs::PermissionsExt;

    use cap_std::ambient_authority;

    use super::*;

    fn data_dir() -> (tempfile::TempDir, DataDir) {
        let base = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(base.path(), ambient_authority()).unwrap();
        let display = base.path().display().to_string();
        (base, DataDir::new(dir, &display))
    }

    /// What an open came to, printable (a log handle is not `Debug`).
    fn outcome(opened: &Result<Option<LineageLog>, LogError>) -> String {
        match opened {
            Ok(Some(log)) => format!("opened {}", log.path()),
            Ok(None) => "no log".into(),
            Err(error) => format!("{error:?}"),
        }
    }

    fn create(data: &DataDir, lineage: &str) -> LineageLog {
        let options = OpenOptionsLog { recover: false, ..OpenOptionsLog::default() };
        data.open_lineage(lineage, true, &options).unwrap().expect("created")
    }

    #[test]
    fn names_come_from_the_layout() {
        assert_eq!(DataDir::log_name("run-1").unwrap(), "run-1.log");
        assert_eq!(DataDir::lineage_of("run-1.log"), Some("run-1"));
        assert_eq!(DataDir::lineage_of("run-1.log.broken"), None);
        assert_eq!(DataDir::lineage_of("launch-7.json"), None);
        assert_eq!(DataDir::launch_entry(7), "launch-7.json");
        let (_base, data) = data_dir();
        assert_eq!(data.log_display("r"), format!("{}/effects/r.log", data.display()));
    }

    #[test]
    fn a_lineage_that_is_not_a_run_id_names_no_file() {
        let (base, data) = data_dir();
        std::fs::write(base.path().join("outside.log"), "").unwrap();
        for name in ["../outside", "a/b", "..", "", ".", "x.log/.."] {
            assert!(DataDir::log_name(name).is_err(), "{name:?}");
            let refused = data.open_lineage(name, true, &OpenOptionsLog::default());
            assert!(matches!(refused, Err(LogError::Refused { .. })), "{name:?}: {}", outcome(&refused));
        }
        // A run id with a path in it is refused before any file is looked at.
        for run in ["../outside", "a/../../x", "run.../x"] {
            let refused = data.open_lineage_read_only(run, None);
            assert!(matches!(refused, Err(LogError::Refused { .. })), "{run:?}: {}", outcome(&refused));
        }
        assert!(!base.path().join("effects").exists(), "nothing was created");
    }

    #[test]
    fn reading_creates_nothing_and_a_missing_log_is_none() {
        let (base, data) = data_dir();
        assert!(data.open_lineage_read_only("run-1", None).unwrap().is_none());
        assert!(data.lineages().unwrap().is_empty());
        assert!(!base.path().join("effects").exists(), "a read does not make the store");
        data.writable_store().unwrap();
        assert!(data.open_lineage_read_only("run-1", None).unwrap().is_none());
        assert!(!base.path().join("effects/run-1.log").exists());
    }

    #[test]
    fn a_child_run_finds_its_lineage_log() {
        let (_base, data) = data_dir();
        drop(create(&data, "run-1"));
        let log = data.open_lineage_read_only("run-1.fix.again", None).unwrap();
        assert_eq!(log.expect("the lineage's log").path(), data.log_display("run-1"));
        assert!(data.open_lineage_read_only("run-2.fix", None).unwrap().is_none());
    }

    #[test]
    fn lineages_lists_logs_only() {
        let (base, data) = data_dir();
        drop(create(&data, "run-b"));
        drop(create(&data, "run-a"));
        data.jobs().unwrap();
        let store = base.path().join("effects");
        std::fs::write(store.join("notes.txt"), "stray").unwrap();
        std::fs::write(store.join("run-a.log.broken"), "torn").unwrap();
        std::fs::write(store.join(DataDir::launch_entry(3)), "{}").unwrap();
        std::fs::write(store.join("..log"), "").unwrap();
        assert_eq!(data.lineages().unwrap(), ["run-a", "run-b"]);
    }

    #[test]
    fn a_symlinked_log_is_listed_but_never_followed() {
        let (base, data) = data_dir();
        drop(create(&data, "run-a"));
        let store = base.path().join("effects");
        std::os::unix::fs::symlink(store.join("run-a.log"), store.join("run-b.log")).unwrap();
        assert_eq!(data.lineages().unwrap(), ["run-a", "run-b"]);
        let refused = data.open_lineage_read_only("run-b", None);
        match &refused {
            Err(LogError::Refused { reason, .. }) => assert!(reason.contains("symlink"), "{reason}"),
            other => panic!("a symlinked log must be refused (LOG-9): {}", outcome(other)),
        }
    }

    #[test]
    fn a_store_that_is_not_private_is_refused() {
        let (base, data) = data_dir();
        data.writable_store().unwrap();
        std::fs::set_permissions(base.path().join("effects"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert!(matches!(data.lineages(), Err(LogError::Refused { .. })));
        assert!(matches!(data.open_lineage_read_only("run-1", None), Err(LogError::Refused { .. })));
    }

    #[test]
    fn the_cache_lives_in_cache_components_and_a_symlink_there_is_refused() {
        let (base, data) = data_dir();
        data.open_cache().unwrap();
        let mode = std::fs::metadata(base.path().join("cache/components")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let (other, data) = data_dir();
        std::os::unix::fs::symlink(base.path().join("cache"), other.path().join("cache")).unwrap();
        assert!(matches!(data.open_cache(), Err(CacheError::NotPrivate { .. })));
    }

    #[test]
    fn a_log_file_held_by_path_opens_by_its_name() {
        let (base, data) = data_dir();
        drop(create(&data, "run-1"));
        let store = Dir::open_ambient_dir(base.path().join("effects"), ambient_authority()).unwrap();
        let options = OpenOptionsLog { mode: OpenMode::ReadOnly, ..OpenOptionsLog::default() };
        assert!(open_log_file(&store, "s", "run-1.log", &options).unwrap().is_some());
        assert!(open_log_file(&store, "s", "run-2.log", &options).unwrap().is_none());
        assert!(matches!(open_log_file(&store, "s", "run-1.txt", &options), Err(LogError::Refused { .. })));
    }
}
