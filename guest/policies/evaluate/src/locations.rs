//! Locations, interned: every resource of the ledger maps to a [`LocId`], and
//! every location knows its parent, so overlap (ID-3) is a walk up a short
//! chain instead of a comparison with every other resource.
//!
//! Overlap is ancestor-or-self within one root identity: a filesystem path's
//! parents are its directories up to the sealed root (`""`); an owned record's
//! parent is its collection's `*` binding (ID-2). Every other kind overlaps only
//! itself. The incarnation is not part of a location: a replaced file is the
//! same location with a different incarnation (INV-1).
//!
//! Cost: a filesystem path is keyed by its root and a slice of the ledger's own
//! string (a parent directory is a prefix of its child's path), so interning
//! allocates nothing but the table entries. The path table holds bare ids (4
//! bytes a slot, the keys kept beside the entries), so at tens of thousands of
//! paths it still fits in cache, where a map of whole keys did not and every
//! probe missed; each path is hashed and probed once. Hashing is
//! `rustc-hash`'s Fx hash: fixed, so it needs no randomness (the guest has
//! none) and is deterministic (POL-3).

use std::borrow::Cow;
use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry as TableEntry, HashTable};

use effects_evaluator_sdk::types::{FilesystemRoot, Location};

/// A hash map with fixed hashing: deterministic, no randomness needed.
pub type FixedMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// Up to this many entries, a linear scan beats building a set.
pub const SCAN_LIMIT: usize = 8;

/// String equality eight bytes at a time. The guest's `memcmp` (which `==`
/// on strings calls) compares one byte at a time, and the evaluator compares
/// many paths, incarnations and 64-character digests.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let ((a_words, a_tail), (b_words, b_tail)) = (a.as_chunks::<8>(), b.as_chunks::<8>());
    a_words.iter().zip(b_words).all(|(x, y)| u64::from_ne_bytes(*x) == u64::from_ne_bytes(*y))
        && a_tail.iter().zip(b_tail).all(|(x, y)| x == y)
}

/// `path` split at its last `/` into the parent and the base name, as
/// `str::rsplit_once('/')` would: `/` is ASCII, so a byte search finds it on a
/// character boundary without the character search `rsplit_once` runs.
pub fn split_last_slash(path: &str) -> Option<(&str, &str)> {
    let slash = path.as_bytes().iter().rposition(|&b| b == b'/')?;
    Some((&path[..slash], &path[slash + 1..]))
}

/// A path beneath a root, as the interning table keys it (compared with
/// [`same`], its hash first).
#[derive(Clone, Copy, Default)]
struct PathKey<'a> {
    root: u32,
    path: &'a str,
    hash: u64,
}

impl<'a> PathKey<'a> {
    fn new(root: u32, path: &'a str) -> Self {
        PathKey { root, path, hash: rustc_hash::FxBuildHasher.hash_one((root, path)) }
    }
}

impl PartialEq for PathKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.root == other.root && same(self.path, other.path)
    }
}

/// An interned location.
pub type LocId = u32;

/// What kind of resource a location is (the `location` variant case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file or directory beneath a sealed root.
    Filesystem,
    /// A process.
    Process,
    /// One background launch.
    Launch,
    /// A background job.
    Job,
    /// An owned record or collection.
    Owned,
    /// An external endpoint and tool.
    External,
    /// A browser session.
    Browser,
}

struct Entry<'a> {
    kind: Kind,
    name: Cow<'a, str>,
    parent: Option<LocId>,
}

/// The interned locations of one ledger, borrowing its strings.
#[derive(Default)]
pub struct Locations<'a> {
    roots: FixedMap<(u64, u64), u32>,
    /// Filesystem locations by path: bare ids, keyed by `keys`.
    paths: HashTable<LocId>,
    /// Per location, its path key (the default for other kinds, which the
    /// path table never holds, so it is never compared).
    keys: Vec<PathKey<'a>>,
    others: FixedMap<String, LocId>,
    entries: Vec<Entry<'a>>,
}

/// Appends `field` to `key` length-prefixed, so no two field lists share a key.
fn push_field(key: &mut String, field: &str) {
    key.push_str(&field.len().to_string());
    key.push(':');
    key.push_str(field);
}

fn key_of(prefix: &str, fields: &[&str]) -> String {
    let mut key = String::from(prefix);
    for field in fields {
        push_field(&mut key, field);
    }
    key
}

impl<'a> Locations<'a> {
    /// Room for about `resources` locations without growing.
    pub fn with_capacity(resources: usize) -> Self {
        let mut locations = Locations::default();
        locations.paths.reserve(resources, |&id| locations.keys[id as usize].hash);
        locations.entries.reserve(resources);
        locations.keys.reserve(resources);
        locations
    }

    /// The root identity's number: a root is its device and inode (ID-3).
    pub fn root(&mut self, root: &FilesystemRoot) -> u32 {
        let next = self.roots.len() as u32;
        *self.roots.entry((root.device, root.inode)).or_insert(next)
    }

    /// The id of `location`, interning it (and its ancestors) on first sight.
    pub fn intern(&mut self, location: &'a Location) -> LocId {
        match location {
            Location::Filesystem(fs) => {
                let root = self.root(&fs.root);
                self.intern_path(root, &fs.path)
            }
            Location::Owned(owned) => {
                let base = [&*owned.namespace, &owned.owner, &owned.thread, &owned.collection];
                let collection = self.insert(key_of("owned", &[&base[..], &["*"]].concat()), || Entry {
                    kind: Kind::Owned,
                    name: Cow::Owned(format!("{}/*", owned.collection)),
                    parent: None,
                });
                if owned.record == "*" {
                    return collection;
                }
                self.insert(key_of("owned", &[&base[..], &[&*owned.record]].concat()), || Entry {
                    kind: Kind::Owned,
                    name: Cow::Owned(format!("{}/{}", owned.collection, owned.record)),
                    parent: Some(collection),
                })
            }
            Location::External(ext) => self.leaf(
                key_of("ext", &[&ext.namespace, &ext.owner, &ext.endpoint, &ext.server, &ext.tool]),
                Kind::External,
                format!("{}/{}", ext.server, ext.tool),
            ),
            Location::Process(p) => self.leaf(
                key_of(
                    "proc",
                    &[
                        &p.namespace,
                        &p.owner,
                        &p.request,
                        &p.thread,
                        &p.pid.to_string(),
                        &p.start_token.to_string(),
                    ],
                ),
                Kind::Process,
                format!("process {}", p.pid),
            ),
            Location::ProcessLaunch(generation) => {
                self.leaf(format!("launch{generation}"), Kind::Launch, format!("launch {generation}"))
            }
            Location::BackgroundJob(job) => self.leaf(
                key_of("job", &[&job.job_id, &job.generation.to_string()]),
                Kind::Job,
                format!("job {}", job.job_id),
            ),
            Location::BrowserSession(b) => self.leaf(
                key_of("browser", &[&b.owner, &b.thread, &b.session_key]),
                Kind::Browser,
                format!("browser session {}", b.session_key),
            ),
        }
    }

    /// A filesystem path beneath `root`, with every directory up to the root
    /// (iteratively: a deep path must not exhaust the guest's stack). Each
    /// path is hashed and probed once: a path seen before ends the walk; a new
    /// one gets the next id at once, and its parent is filled in when the walk
    /// reaches it.
    pub fn intern_path(&mut self, root: u32, path: &'a str) -> LocId {
        // `path`'s id once known; the last new entry, whose parent is `at`.
        let (mut interned, mut child): (Option<LocId>, Option<LocId>) = (None, None);
        let mut at = path;
        loop {
            let key = PathKey::new(root, at);
            let next = self.entries.len() as LocId;
            let keys = &self.keys;
            let (id, known) = match self.paths.entry(
                key.hash,
                |&id| keys[id as usize] == key,
                |&id| keys[id as usize].hash,
            ) {
                TableEntry::Occupied(entry) => (*entry.get(), true),
                TableEntry::Vacant(slot) => {
                    slot.insert(next);
                    (next, false)
                }
            };
            if let Some(child) = child {
                self.entries[child as usize].parent = Some(id);
            }
            let path_id = *interned.get_or_insert(id);
            if known {
                return path_id;
            }
            let name = Cow::Borrowed(if at.is_empty() { "." } else { at });
            self.entries.push(Entry { kind: Kind::Filesystem, name, parent: None });
            self.keys.push(key);
            if at.is_empty() {
                return path_id;
            }
            child = Some(id);
            at = split_last_slash(at).map_or("", |(parent, _)| parent);
        }
    }

    fn leaf(&mut self, key: String, kind: Kind, name: String) -> LocId {
        self.insert(key, || Entry { kind, name: Cow::Owned(name), parent: None })
    }

    fn insert(&mut self, key: String, entry: impl FnOnce() -> Entry<'a>) -> LocId {
        if let Some(&id) = self.others.get(&key) {
            return id;
        }
        let id = self.entries.len() as LocId;
        self.entries.push(entry());
        self.keys.push(PathKey::default());
        self.others.insert(key, id);
        id
    }

    /// How many locations there are (ids are `0..len`).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The kind of `id`.
    pub fn kind(&self, id: LocId) -> Kind {
        self.entries[id as usize].kind
    }

    /// A display name: the relative path, `server/tool`, `collection/record`...
    pub fn name(&self, id: LocId) -> &str {
        &self.entries[id as usize].name
    }

    /// `id`, then its parent, up to the top of its chain.
    pub fn ancestors_or_self(&self, id: LocId) -> impl Iterator<Item = LocId> + '_ {
        std::iter::successors(Some(id), |&id| self.entries[id as usize].parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use effects_evaluator_sdk::types::{FilesystemLocation, FilesystemRoot};

    fn file(path: &str, device: u64) -> Location {
        let root =
            FilesystemRoot { scope: "s".into(), owner: "o".into(), path: "/w".into(), device, inode: 2 };
        Location::Filesystem(FilesystemLocation { root, path: path.into() })
    }

    #[test]
    fn paths_share_their_directories_and_roots_are_separate() {
        let files = [file("d/a.txt", 1), file("d/b.txt", 1), file("d", 1), file("d", 9)];
        let mut locations = Locations::default();
        let [a, b, d, other] = [0, 1, 2, 3].map(|i| locations.intern(&files[i]));
        assert_eq!(locations.ancestors_or_self(a).collect::<Vec<_>>()[1], d);
        assert_eq!(locations.ancestors_or_self(b).nth(1), Some(d));
        assert_ne!(d, other);
        assert_eq!(locations.name(a), "d/a.txt");
        assert_eq!(locations.ancestors_or_self(a).count(), 3, "a.txt, d, the root");
    }

    #[test]
    fn a_deep_path_interns_its_directories_once_each() {
        let mut locations = Locations::default();
        let deep = locations.intern_path(0, "a/b/c.txt");
        let chain: Vec<LocId> = locations.ancestors_or_self(deep).collect();
        let names: Vec<&str> = chain.iter().map(|&id| locations.name(id)).collect();
        assert_eq!(names, ["a/b/c.txt", "a/b", "a", "."]);
        assert_eq!(locations.intern_path(0, "a/b"), chain[1], "a directory seen before is found");
        let sibling = locations.intern_path(0, "a/z.txt");
        assert_eq!(locations.ancestors_or_self(sibling).nth(1), Some(chain[2]));
        assert_eq!(locations.len(), 5, "four from the deep path, one new file");
        assert_ne!(locations.intern_path(1, "a/b"), chain[1], "another root is another location");
    }

    #[test]
    fn split_last_slash_matches_rsplit_once() {
        for path in ["", "a.txt", "d/a.txt", "d/e/é.txt", "d/", "/a", "é/ü"] {
            assert_eq!(split_last_slash(path), path.rsplit_once('/'), "{path:?}");
        }
    }

    #[test]
    fn same_compares_every_byte_in_words_and_tail() {
        let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let copy = String::from(digest);
        assert!(same(digest, &copy), "equal bytes in another buffer");
        assert!(same("", ""));
        for i in 0..digest.len() {
            let mut other = digest.as_bytes().to_vec();
            other[i] = b'x';
            assert!(!same(digest, std::str::from_utf8(&other).unwrap()), "byte {i} differs");
        }
        assert!(!same("dir/a.txt", "dir/a.tx"), "a prefix is not the same");
        assert!(!same("dir/é", "dir/e\u{301}"));
    }
}
