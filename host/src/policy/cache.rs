//! The on-disk cache of compiled components, so `effects` does not recompile
//! every policy on every start, and never runs an artifact that is not bound to
//! the pinned component (POL-1, revision 2).
//!
//! Layout: `<cache dir>/<engine key>/<component sha256>.cwasm`, and
//! `<cache dir>/secret`. The engine key is the SHA-256 of this cache's entry
//! format and wasmtime's `precompile_compatibility_hash` (target, compiler
//! flags, tunables, wasm features and wasmtime's own version: everything that
//! changes the compiled code; our engine has no setting of its own outside
//! wasmtime's `Config`). SHA-256 and not `DefaultHasher`, whose output may
//! change between Rust releases.
//!
//! An entry is `MAGIC`, a 32-byte tag, then wasmtime's serialized component.
//! The tag is HMAC-SHA256, keyed by the cache's secret, over the magic, the
//! engine key, the component's digest and the artifact: it is made when the
//! entry is compiled and checked before the entry is used. The whole entry is
//! read into memory, the tag checked, and only those verified bytes are handed
//! to `Component::deserialize`: nothing is read twice from a path that could
//! change between the check and the load. An entry that fails its check (or is
//! a symbolic link, not a regular file, multiply linked, or too large) is never
//! run: it is recompiled and replaced by a rename, with a warning naming it.
//!
//! Private: [`CompileCache::open`] refuses a directory that is not owned by
//! the effective uid or has any group or other permission bit, and a secret
//! that is not a private regular file of ours with one link; the caller then
//! compiles in memory. The secret (32 random bytes, `0600`) is made once, by
//! linking an unnamed file into place, so that concurrent first opens agree
//! on one and none sees it with a second name.
//!
//! What the tag defends against: an entry of another pinned component swapped
//! into place (the issue-16 attack: a compiled always-COMPLETED evaluator under
//! the shipped evaluator's digest), an entry compiled under another engine
//! configuration copied into this one's place, a torn or corrupted write, a
//! cache copied from another data dir, and any writer who cannot read the
//! secret. What it does not: a process running as this user that can read the
//! secret can forge a tag (so can one that can write the `effects` binary).
//! Keeping such processes out of the data dir is the job of the store's
//! placement (ID-4) and of command confinement (ID-6); see
//! docs/limitations.md.
//!
//! A cache that cannot be written is reported and otherwise ignored: it is an
//! optimisation, never a reason to refuse a call.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;
use hmac::{Hmac, Mac};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::digest::Sha256Digest;

/// The first bytes of every entry; a new entry format changes it (and, through
/// the engine key, the bucket), so an old entry is never even looked at.
const MAGIC: &[u8] = b"effects compiled component v1\n";

/// Length of the tag after `MAGIC`.
const TAG_BYTES: usize = 32;

/// The secret's file name in the cache dir, and its length.
const SECRET_FILE: &str = "secret";
const SECRET_BYTES: usize = 32;

/// The largest entry read: the shipped evaluator compiles to a few MiB. A
/// larger file is not one of ours, and is not read into memory.
const MAX_ENTRY_BYTES: u64 = 256 << 20;

/// Why a cache directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The directory or its secret could not be opened, read or made.
    #[error("{what}: {source}")]
    Io {
        /// Which part of the cache.
        what: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The directory or its secret could be changed or read by someone else.
    #[error("{what} is not private: {problem}")]
    NotPrivate {
        /// Which part of the cache.
        what: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// What a cache entry for one component is (`effects policy verify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryState {
    /// No entry: the next load compiles and stores one.
    Missing,
    /// An entry that passes its check: the next load uses it.
    Passed,
    /// An entry that fails its check, and why: the next load recompiles and
    /// replaces it, and never runs it.
    Failed(String),
}

/// A private directory of compiled components, each entry bound to its pin.
pub struct CompileCache {
    dir: Dir,
    secret: [u8; SECRET_BYTES],
}

/// The bucket and tag input that stands for one engine configuration.
#[derive(Clone, Copy)]
struct EngineKey([u8; 32]);

impl EngineKey {
    fn of(engine: &Engine) -> Self {
        use std::hash::Hash;
        let mut hasher = Sha256Hasher(Sha256::new());
        hasher.0.update(MAGIC);
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self(hasher.0.finalize().into())
    }

    fn bucket(&self) -> String {
        hex::encode(self.0)
    }
}

/// Feeds what wasmtime hashes into SHA-256, so the bucket name is the same in
/// every build of one binary and every binary with one configuration.
struct Sha256Hasher(Sha256);

impl std::hash::Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Never used for the key (the whole digest is); required by the trait.
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 8 bytes"))
    }
}

/// Checks what `fstat` says of a part of the cache: ours, and nothing for
/// group or other.
fn check_private(what: &'static str, stat: &rustix::fs::Stat) -> Result<(), CacheError> {
    let ours = rustix::process::geteuid().as_raw();
    if stat.st_uid != ours {
        return Err(CacheError::NotPrivate {
            what,
            problem: format!("owned by uid {}, not by uid {ours} (this process)", stat.st_uid),
        });
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        return Err(CacheError::NotPrivate {
            what,
            problem: format!(
                "mode {mode:04o} gives group or other access; it must be 0700 (0600 for a file)"
            ),
        });
    }
    Ok(())
}

fn io(what: &'static str) -> impl FnOnce(Errno) -> CacheError {
    move |errno| CacheError::Io { what, source: errno.into() }
}

/// Opens `name` beneath `dir` for reading, never following a symbolic link
/// and never blocking on a FIFO.
fn open_nofollow(dir: impl AsFd, name: &str, directory: bool) -> rustix::io::Result<OwnedFd> {
    let mut flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    rustix::fs::openat(dir, name, flags, Mode::empty())
}

/// A name no other writer uses at the same time, for a file renamed or linked
/// into place.
fn temporary_name(base: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(".{base}.tmp-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Writes `parts` to a new private file `name` beneath `dir` (it must not exist).
fn write_new(dir: impl AsFd, name: &str, parts: &[&[u8]]) -> std::io::Result<()> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut file = File::from(rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))?);
    for part in parts {
        file.write_all(part)?;
    }
    Ok(())
}

impl CompileCache {
    /// The cache in `dir`, after checking that `dir` is private (owned by this
    /// process's uid, no group or other permission bits) and reading its
    /// secret, made now if it has none. `dir` should have been opened without
    /// following a symbolic link (see [`CompileCache::open_beneath`]); the
    /// checks are made on the opened directory itself, so a rename after the
    /// open cannot change what was checked.
    pub fn open(dir: Dir) -> Result<Self, CacheError> {
        let stat = rustix::fs::fstat(&dir).map_err(io("the cache directory"))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            return Err(CacheError::NotPrivate {
                what: "the cache directory",
                problem: "not a directory".into(),
            });
        }
        check_private("the cache directory", &stat)?;
        let secret = match Self::read_secret(&dir)? {
            Some(secret) => secret,
            None => Self::make_secret(&dir)?,
        };
        Ok(Self { dir, secret })
    }

    /// The cache in directory `name` beneath `parent`, made `0700` if absent.
    /// `name` itself is never followed as a symbolic link: a link in its place
    /// makes the cache unusable, whatever it points to.
    pub fn open_beneath(parent: &Dir, name: &str) -> Result<Self, CacheError> {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(errno) => return Err(io("the cache directory cannot be made")(errno)),
        }
        let opened = open_nofollow(parent, name, true).map_err(|errno| match errno {
            Errno::LOOP | Errno::NOTDIR => CacheError::NotPrivate {
                what: "the cache directory",
                problem: "a symbolic link or other non-directory stands in its place".into(),
            },
            errno => io("the cache directory")(errno),
        })?;
        Self::open(Dir::from_std_file(File::from(opened)))
    }

    /// The secret, if there is one; an error if what is there is not a private
    /// regular file of ours with one link and the right length.
    fn read_secret(dir: &Dir) -> Result<Option<[u8; SECRET_BYTES]>, CacheError> {
        const WHAT: &str = "the cache's secret";
        let opened = match open_nofollow(dir, SECRET_FILE, false) {
            Ok(opened) => opened,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(CacheError::NotPrivate { what: WHAT, problem: "a symbolic link".into() });
            }
            Err(errno) => return Err(io(WHAT)(errno)),
        };
        let stat = rustix::fs::fstat(&opened).map_err(io(WHAT))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
            return Err(CacheError::NotPrivate {
                what: WHAT,
                problem: format!("not a regular file with one link ({} links)", stat.st_nlink),
            });
        }
        check_private(WHAT, &stat)?;
        let mut secret = [0; SECRET_BYTES];
        let mut file = File::from(opened);
        let mut rest = Vec::new();
        file.read_exact(&mut secret)
            .and_then(|()| file.read_to_end(&mut rest))
            .map_err(|source| CacheError::Io { what: WHAT, source })?;
        if !rest.is_empty() {
            return Err(CacheError::NotPrivate {
                what: WHAT,
                problem: format!("{} bytes, not {SECRET_BYTES}", SECRET_BYTES + rest.len()),
            });
        }
        Ok(Some(secret))
    }

    /// Makes the secret: written whole in a file with no name yet, then
    /// linked into place (`durable::link_new`), so a concurrent first open
    /// either wins or reads the winner's, never a partial file, and never
    /// sees it with a second name (its check refuses a multiply linked
    /// secret, which is how a planted hard link would look). Where that
    /// cannot be done, written under a temporary name and linked, which
    /// leaves that moment of two names.
    fn make_secret(dir: &Dir) -> Result<[u8; SECRET_BYTES], CacheError> {
        const WHAT: &str = "the cache's secret cannot be made";
        let mut secret = [0; SECRET_BYTES];
        let mut filled = 0;
        while filled < SECRET_BYTES {
            filled += rustix::rand::getrandom(&mut secret[filled..], rustix::rand::GetRandomFlags::empty())
                .map_err(io(WHAT))?;
        }
        // Fsynced before it is linked: a crash must not leave the name on an
        // empty file, which every later open would refuse.
        let linked = match crate::log::durable::link_new(dir, SECRET_FILE, &secret, true) {
            Some(linked) => linked,
            None => {
                let temporary = temporary_name(SECRET_FILE);
                write_new(dir, &temporary, &[&secret])
                    .map_err(|source| CacheError::Io { what: WHAT, source })?;
                let linked = rustix::fs::linkat(dir, &temporary, dir, SECRET_FILE, AtFlags::empty());
                let _ = rustix::fs::unlinkat(dir, &temporary, AtFlags::empty());
                linked
            }
        };
        match linked {
            Ok(()) => Ok(secret),
            // Another process made it first: use theirs.
            Err(Errno::EXIST) => Self::read_secret(dir)?.ok_or_else(|| CacheError::Io {
                what: WHAT,
                source: std::io::Error::other("it was made by another process and then removed"),
            }),
            Err(errno) => Err(io(WHAT)(errno)),
        }
    }

    /// The tag binding `artifact` to the component `digest` and `engine`.
    fn tag(&self, engine: EngineKey, digest: &Sha256Digest) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(MAGIC);
        mac.update(&engine.0);
        mac.update(digest.as_bytes());
        mac
    }

    fn entry_name(digest: &Sha256Digest) -> String {
        format!("{digest}.cwasm")
    }

    /// Reads the entry for `digest` whole and checks it: `Ok(None)` when there
    /// is none, `Ok(Some(artifact))` when it passes, `Err(why)` when it fails.
    fn read_checked(&self, engine: EngineKey, digest: &Sha256Digest) -> Result<Option<Vec<u8>>, String> {
        let bucket = match open_nofollow(&self.dir, &engine.bucket(), true) {
            Ok(bucket) => bucket,
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(format!("its directory cannot be opened: {errno}")),
        };
        let opened = match open_nofollow(&bucket, &Self::entry_name(digest), false) {
            Ok(opened) => opened,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err("it is a symbolic link".into()),
            Err(errno) => return Err(format!("it cannot be opened: {errno}")),
        };
        let stat = rustix::fs::fstat(&opened).map_err(|errno| format!("it cannot be examined: {errno}"))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err("it is not a regular file".into());
        }
        if stat.st_nlink != 1 {
            return Err(format!("it has {} links; an entry has one", stat.st_nlink));
        }
        let mut entry = Vec::new();
        File::from(opened)
            .take(MAX_ENTRY_BYTES + 1)
            .read_to_end(&mut entry)
            .map_err(|error| format!("it cannot be read: {error}"))?;
        if entry.len() as u64 > MAX_ENTRY_BYTES {
            return Err(format!("it is larger than {MAX_ENTRY_BYTES} bytes"));
        }
        let Some(rest) = entry.strip_prefix(MAGIC) else {
            return Err("it does not start as an entry of this format does".into());
        };
        if rest.len() < TAG_BYTES {
            return Err("it is shorter than its tag".into());
        }
        let (tag, artifact) = rest.split_at(TAG_BYTES);
        let mut mac = self.tag(engine, digest);
        mac.update(artifact);
        mac.verify_slice(tag).map_err(|_| {
            "its tag does not match: it was not compiled here from the pinned component under this \
             engine configuration"
                .to_owned()
        })?;
        Ok(Some(entry.split_off(MAGIC.len() + TAG_BYTES)))
    }

    /// What the entry for the component `digest` is under `engine`, without
    /// changing anything.
    pub(crate) fn check(&self, engine: &Engine, digest: &Sha256Digest) -> EntryState {
        match self.read_checked(EngineKey::of(engine), digest) {
            Ok(None) => EntryState::Missing,
            Ok(Some(_)) => EntryState::Passed,
            Err(why) => EntryState::Failed(why),
        }
    }

    /// The compiled component for `bytes` (whose digest is `digest`), from the
    /// cache when its entry passes its check, else compiled now and stored.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &Sha256Digest,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let key = EngineKey::of(engine);
        let entry = format!("{}/{}", key.bucket(), Self::entry_name(digest));
        match self.read_checked(key, digest) {
            Ok(Some(artifact)) => {
                // SAFETY: `artifact` is in memory and its tag was just checked:
                // it is a serialization this cache made, with its secret, from
                // the component pinned as `digest`, under this engine's
                // configuration (see the module docs for what that does not
                // cover). Wasmtime's own header checks still apply.
                match unsafe { Component::deserialize(engine, &artifact) } {
                    Ok(component) => return Ok(component),
                    Err(error) => {
                        tracing::warn!(%entry, "discarding unusable compiled component: {error:#}");
                    }
                }
            }
            Ok(None) => {}
            Err(why) => tracing::warn!(
                %entry,
                "compiled-component cache entry failed its check ({why}); it is not run, and is \
                 recompiled and replaced"
            ),
        }
        let component = Component::new(engine, bytes)?;
        if let Err(error) = self.store(key, digest, &component) {
            tracing::warn!(%entry, "could not cache the compiled component: {error:#}");
        }
        Ok(component)
    }

    /// Writes the entry for `digest` under a temporary name and renames it into
    /// place, so a reader sees the old entry or the new one, never a mix (and
    /// a torn write fails its check).
    fn store(&self, engine: EngineKey, digest: &Sha256Digest, component: &Component) -> anyhow::Result<()> {
        let bucket_name = engine.bucket();
        match rustix::fs::mkdirat(&self.dir, &bucket_name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(errno) => return Err(errno.into()),
        }
        let bucket = open_nofollow(&self.dir, &bucket_name, true)?;
        let artifact = component.serialize()?;
        let mut mac = self.tag(engine, digest);
        mac.update(&artifact);
        let tag = mac.finalize().into_bytes();
        let name = Self::entry_name(digest);
        let temporary = temporary_name(&name);
        let written = write_new(&bucket, &temporary, &[MAGIC, &tag, &artifact])
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(rustix::fs::renameat(&bucket, &temporary, &bucket, &name)?));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&bucket, &temporary, AtFlags::empty());
        }
        written
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests set up their cache directories with ambient authority
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    /// An engine like the policy engine but for one compiler setting, as
    /// another build or configuration of `effects` would have.
    fn other_engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).consume_fuel(true).cranelift_nan_canonicalization(false);
        Engine::new(&config).unwrap()
    }

    /// The smallest component, in binary (no `wat` feature here): the
    /// preamble and component layer version 1, no sections.
    fn component() -> Vec<u8> {
        vec![0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00]
    }

    #[test]
    fn an_entry_compiled_under_another_engine_configuration_is_never_used() {
        let base = tempfile::tempdir().unwrap();
        let parent = Dir::open_ambient_dir(base.path(), ambient_authority()).unwrap();
        let cache = CompileCache::open_beneath(&parent, "components").unwrap();
        let ours = crate::policy::sandbox::engine(&Default::default()).unwrap();
        let theirs = other_engine();
        let (our_key, their_key) = (EngineKey::of(&ours), EngineKey::of(&theirs));
        assert_ne!(our_key.bucket(), their_key.bucket(), "another configuration, another bucket");

        let bytes = component();
        let digest = Sha256Digest::of(&bytes);
        cache.load_or_compile(&theirs, &digest, &bytes).unwrap();
        assert_eq!(cache.check(&theirs, &digest), EntryState::Passed);
        // Under our engine its bucket is not even looked at.
        assert_eq!(cache.check(&ours, &digest), EntryState::Missing);

        // Copied into our bucket with its valid tag, it still fails: the tag
        // binds the engine key.
        let name = CompileCache::entry_name(&digest);
        let their_entry = base.path().join("components").join(their_key.bucket()).join(&name);
        let our_bucket = base.path().join("components").join(our_key.bucket());
        #[allow(clippy::disallowed_methods)] // the test plays the one who copies it
        {
            std::fs::create_dir(&our_bucket).unwrap();
            std::fs::write(our_bucket.join(&name), std::fs::read(&their_entry).unwrap()).unwrap();
        }
        assert!(matches!(cache.check(&ours, &digest), EntryState::Failed(why) if why.contains("tag")));
        cache.load_or_compile(&ours, &digest, &bytes).unwrap();
        assert_eq!(cache.check(&ours, &digest), EntryState::Passed, "recompiled and replaced");
    }

    #[test]
    fn the_engine_key_is_stable_for_one_configuration() {
        let a = crate::policy::sandbox::engine(&Default::default()).unwrap();
        let b = crate::policy::sandbox::engine(&Default::default()).unwrap();
        assert_eq!(EngineKey::of(&a).bucket(), EngineKey::of(&b).bucket());
    }

    /// Concurrent first opens (a session's first hooks, all at once) each
    /// get the cache, and agree on one secret: none sees it with a second
    /// name (a temporary one, as when it was linked from a named file) and
    /// refuses it as a planted hard link.
    #[test]
    fn concurrent_first_opens_all_get_the_cache_and_agree_on_its_secret() {
        let probe = tempfile::tempdir().unwrap();
        if crate::log::durable::link_new(File::open(probe.path()).unwrap(), "probe", b"", false).is_none() {
            eprintln!(
                "no O_TMPFILE in {}: the secret is linked from a named file there",
                probe.path().display()
            );
            return;
        }
        for _ in 0..1000 {
            let base = tempfile::tempdir().unwrap();
            let parent = Dir::open_ambient_dir(base.path(), ambient_authority()).unwrap();
            let opened: Vec<Result<CompileCache, CacheError>> = std::thread::scope(|scope| {
                let openers: Vec<_> =
                    (0..8).map(|_| scope.spawn(|| CompileCache::open_beneath(&parent, "cache"))).collect();
                openers.into_iter().map(|opener| opener.join().unwrap()).collect()
            });
            let secrets: Vec<[u8; SECRET_BYTES]> =
                opened.into_iter().map(|cache| cache.expect("a first open gets the cache").secret).collect();
            assert!(secrets.iter().all(|secret| *secret == secrets[0]), "one secret for all");
        }
    }
}
