//! ID-3's hard links: two filesystem locations whose incarnations, as the
//! records saw them, name the same device:inode are **aliases**, two names of
//! one object, from the first record that shows it until either is seen as
//! another object (or as nothing). A claim on one name reaches the other; a
//! claim on a directory reaches the other names of what lies beneath it; an
//! observation of one name is a sighting of the object every alias names
//! (VER-2: a hard link's postcondition stands for the object it names). Only
//! filesystem claims (their scope, as bound) and filesystem observations (a
//! read or a stat) show the incarnations that make aliases; any record that
//! shows a name as another object ends its alias.
//!
//! This module owns one forward pass over the log that keeps, per location,
//! the object it was last seen as and, per object, the class of locations
//! last seen as it. It hands back, per claim, the locations its targets reach
//! through aliases ([`Reach`]), and per observation the other names of the
//! object it saw. The history and the decision treat a reached location as
//! one the claim targets, so every overlap rule (INV-1, INV-2, CMP-2, CMP-5,
//! CMP-7) sees aliases through one list. It judges nothing itself.
//!
//! A hard link never names a directory (the kernel refuses them), so an alias
//! has nothing beneath it: a claim reaches an alias through its own name or
//! through a directory above one of the object's names, never from below.
//!
//! Cost: first, one pass over the resource table (each distinct resource
//! once, never more than the records) parses each file's device:inode and
//! probes a hash table keyed by it, to find the objects seen under two
//! locations. When there is none, nearly every ledger, that is all: no
//! record is visited and nothing is allocated per claim. Otherwise the
//! forward pass over the records follows only those objects (a lookup per
//! filesystem record; joining or leaving a class is constant time), and
//! while some object has two names a claim on a name lists its class (a
//! handful of names), and a claim on a directory with an alias beneath it (a
//! count kept per directory says so at once) walks the chain of every aliased
//! name to find those beneath it: O(aliased names x depth) for that claim.

use effects_evaluator_sdk::types::Mechanism;

use crate::locations::{FixedMap, Kind, LocId, Locations};
use crate::tables::{Record, Tables};

/// No class, no location, not in the aliased list.
const NONE: u32 = u32::MAX;

/// A location a claim reaches through an alias of what it targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// The location reached.
    pub loc: LocId,
    /// The claim's own target that `loc` is another name of, so that
    /// target's postconditions on the object stand for `loc` too; `None`
    /// when it is reached through a directory the claim targets.
    pub alias_of: Option<LocId>,
}

/// Per claim and per observation, what aliasing adds (see the module doc).
#[derive(Default)]
pub struct Aliases {
    reach: Vec<Reach>,
    /// Where each claim's run of `reach` ends; empty while no claim reaches
    /// anything (then every run is empty).
    reach_ends: Vec<u32>,
    also: Vec<LocId>,
    /// Where each observation's run of `also` ends; empty like `reach_ends`.
    also_ends: Vec<u32>,
}

/// The device and inode an incarnation names (`7:42@<chain>`, as the host
/// spells it: decimal numbers), or `None` when it names no object:
/// `absent:<chain>`, or any other spelling (a conformance vector's `1`).
///
/// Cost: the host's chain is 64 hexadecimal characters, so its `@` is found
/// at once, and so is its `absent:`; only another spelling is scanned (the
/// guest reads strings byte by byte). The numbers are parsed rather than
/// hashed as text: two integers hash and compare in a few instructions.
pub fn object(incarnation: &str) -> Option<(u64, u64)> {
    let bytes = incarnation.as_bytes();
    let at = match bytes.len().checked_sub(65) {
        Some(at) if bytes[at] == b'@' => at,
        _ if bytes.starts_with(b"absent:") => return None,
        _ => bytes.iter().position(|&b| b == b'@')?,
    };
    let key = &bytes[..at];
    let colon = key.iter().position(|&b| b == b':')?;
    Some((decimal(&key[..colon])?, decimal(&key[colon + 1..])?))
}

/// `digits` as a decimal number: 1 to 19 digits, so it fits a u64 without
/// overflow checks.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &b| {
        let digit = b.wrapping_sub(b'0');
        (digit < 10).then(|| value * 10 + u64::from(digit))
    })
}

/// Run `i` of `values` cut by `ends`, or nothing when `ends` is empty.
fn run_of<'v, T>(values: &'v [T], ends: &[u32], i: usize) -> &'v [T] {
    if ends.is_empty() {
        return &[];
    }
    let start = i.checked_sub(1).map_or(0, |p| ends[p]);
    &values[start as usize..ends[i] as usize]
}

/// Closes run `i` (whose entries start at `start`), cutting runs only once
/// some run is not empty.
fn close_run(ends: &mut Vec<u32>, i: usize, start: usize, len: usize) {
    if len > start || !ends.is_empty() {
        ends.resize(i, start as u32);
        ends.push(len as u32);
    }
}

/// The classes of locations seen as one object, as of the record at hand:
/// one class per object that some two locations were seen as.
struct Classes<'l, 'a> {
    locations: &'l Locations<'a>,
    /// Per class, its first member and its size.
    head: Vec<LocId>,
    size: Vec<u32>,
    /// Per location, its class and the next member of that class.
    class: Vec<u32>,
    next: Vec<LocId>,
    /// Locations whose class has two members or more (aliases), each with
    /// its index in the list, and per location how many lie at or beneath
    /// it; allocated at the first alias.
    aliased: Vec<LocId>,
    aliased_at: Vec<u32>,
    below: Vec<u32>,
}

impl<'l, 'a> Classes<'l, 'a> {
    fn new(locations: &'l Locations<'a>, classes: usize) -> Self {
        let n = locations.len();
        Classes {
            locations,
            head: vec![NONE; classes],
            size: vec![0; classes],
            class: vec![NONE; n],
            next: vec![NONE; n],
            aliased: Vec::new(),
            aliased_at: Vec::new(),
            below: Vec::new(),
        }
    }

    /// `loc` is seen as the object of `class` (`NONE`: an object no other
    /// location was seen as, or none): it joins that class, leaving the one
    /// it was in.
    fn see(&mut self, loc: LocId, class: u32) {
        if self.class[loc as usize] == class {
            return;
        }
        if self.class[loc as usize] != NONE {
            self.leave(loc);
        }
        if class != NONE {
            self.join(loc, class);
        }
    }

    /// `loc` is seen as the object of `class` by a record that makes no
    /// alias (a receipt, a job or process observation): it leaves its
    /// class if that is another object, and joins none.
    fn unsee(&mut self, loc: LocId, class: u32) {
        let current = self.class[loc as usize];
        if current != NONE && current != class {
            self.leave(loc);
        }
    }

    fn join(&mut self, loc: LocId, class: u32) {
        let c = class as usize;
        self.next[loc as usize] = self.head[c];
        self.head[c] = loc;
        self.class[loc as usize] = class;
        self.size[c] += 1;
        match self.size[c] {
            2 => {
                let other = self.next[loc as usize];
                self.alias(other);
                self.alias(loc);
            }
            n if n > 2 => self.alias(loc),
            _ => {}
        }
    }

    fn leave(&mut self, loc: LocId) {
        let c = self.class[loc as usize] as usize;
        let after = self.next[loc as usize];
        if self.head[c] == loc {
            self.head[c] = after;
        } else {
            let mut at = self.head[c];
            while self.next[at as usize] != loc {
                at = self.next[at as usize];
            }
            self.next[at as usize] = after;
        }
        self.class[loc as usize] = NONE;
        self.next[loc as usize] = NONE;
        self.size[c] -= 1;
        if self.size[c] >= 1 {
            self.unalias(loc);
        }
        if self.size[c] == 1 {
            self.unalias(self.head[c]);
        }
    }

    fn alias(&mut self, loc: LocId) {
        if self.aliased_at.is_empty() {
            self.aliased_at = vec![NONE; self.class.len()];
            self.below = vec![0; self.class.len()];
        }
        self.aliased_at[loc as usize] = self.aliased.len() as u32;
        self.aliased.push(loc);
        for a in self.locations.ancestors_or_self(loc) {
            self.below[a as usize] += 1;
        }
    }

    fn unalias(&mut self, loc: LocId) {
        let at = std::mem::replace(&mut self.aliased_at[loc as usize], NONE) as usize;
        self.aliased.swap_remove(at);
        if let Some(&moved) = self.aliased.get(at) {
            self.aliased_at[moved as usize] = at as u32;
        }
        for a in self.locations.ancestors_or_self(loc) {
            self.below[a as usize] -= 1;
        }
    }

    fn is_aliased(&self, loc: LocId) -> bool {
        self.aliased_at.get(loc as usize).is_some_and(|&at| at != NONE)
    }

    /// The other names of `loc`'s object, when it has any.
    fn others(&self, loc: LocId) -> impl Iterator<Item = LocId> + '_ {
        let first = if self.is_aliased(loc) { self.head[self.class[loc as usize] as usize] } else { NONE };
        std::iter::successors((first != NONE).then_some(first), |&m| {
            let next = self.next[m as usize];
            (next != NONE).then_some(next)
        })
        .filter(move |&m| m != loc)
    }

    /// Pushes onto `reach` what a claim on `targets` reaches through aliases,
    /// each location once and none of the targets themselves.
    fn reach(&self, targets: &[LocId], reach: &mut Vec<Reach>) {
        if self.aliased.is_empty() {
            return;
        }
        let start = reach.len();
        let add = |reach: &mut Vec<Reach>, found: Reach| {
            if targets.contains(&found.loc) {
                return;
            }
            match reach[start..].iter_mut().find(|r| r.loc == found.loc) {
                Some(known) => known.alias_of = known.alias_of.or(found.alias_of),
                None => reach.push(found),
            }
        };
        for &t in targets {
            if self.locations.kind(t) != Kind::Filesystem {
                continue;
            }
            for other in self.others(t) {
                add(reach, Reach { loc: other, alias_of: Some(t) });
            }
            // Aliases strictly beneath `t`: their other names are reached
            // through the directory.
            let own = u32::from(self.is_aliased(t));
            if self.below[t as usize] > own {
                for &name in &self.aliased {
                    if name != t && self.locations.ancestors_or_self(name).skip(1).any(|a| a == t) {
                        for other in self.others(name) {
                            add(reach, Reach { loc: other, alias_of: None });
                        }
                    }
                }
            }
        }
    }
}

/// Whether an observation taken by `mechanism` shows which object a file
/// is, and so may make an alias (ID-3 as settled in revision 2: only
/// filesystem claims and observations do). A receipt's, a job's, a process's
/// or a browser's incarnation is no sighting of a file's object, though one
/// that names another object still ends an alias (a name seen as another).
fn shows_files(mechanism: Mechanism) -> bool {
    matches!(mechanism, Mechanism::FilesystemRead | Mechanism::FilesystemStat)
}

/// The objects (device and inode) some two filesystem locations of the
/// ledger's resources were seen as, each with its class number; `None` when
/// there is none (see the module doc's cost).
fn shared_objects(tables: &Tables<'_>) -> Option<FixedMap<(u64, u64), u32>> {
    let n = tables.ledger.resources.role.len();
    // Per object, the first location seen as it, and whether another was.
    let mut first: FixedMap<(u64, u64), (LocId, bool)> = FixedMap::default();
    first.reserve(n);
    let mut shared = false;
    // The last file and object probed: a file's resources are often listed
    // together (as a target, then as a source), seen as the same object.
    let mut last: Option<(LocId, (u64, u64))> = None;
    for r in 0..n as u32 {
        let loc = tables.loc(r);
        if tables.locations.kind(loc) != Kind::Filesystem {
            continue;
        }
        let Some(key) = object(tables.incarnation(r)) else { continue };
        if last.replace((loc, key)) == Some((loc, key)) {
            continue;
        }
        let (seen, other) = first.entry(key).or_insert((loc, false));
        if *seen != loc {
            *other = true;
            shared = true;
        }
    }
    shared.then(|| {
        let mut classes = FixedMap::default();
        for (key, (_, other)) in first {
            if other {
                let next = classes.len() as u32;
                classes.insert(key, next);
            }
        }
        classes
    })
}

impl Aliases {
    /// One forward pass over the log `tables` resolved (see the module doc).
    pub fn build(tables: &Tables<'_>) -> Self {
        let ledger = tables.ledger;
        let Some(shared) = shared_objects(tables) else { return Aliases::default() };
        let class_of = |resource: u32| {
            let fs = tables.locations.kind(tables.loc(resource)) == Kind::Filesystem;
            let key = object(tables.incarnation(resource)).filter(|_| fs);
            key.and_then(|key| shared.get(&key)).copied().unwrap_or(NONE)
        };
        let mut classes = Classes::new(&tables.locations, shared.len());
        let mut aliases = Aliases::default();
        let (mut next_claim, mut next_observation) = (0, 0);
        for record in &tables.order {
            match record {
                Record::Claim => {
                    let i = next_claim;
                    next_claim += 1;
                    let Some(targets) = tables.scope(i) else { continue };
                    // The claim shows every name as bound before it reaches
                    // anything: it is the first record of an alias it shows.
                    for &resource in tables.scope_resources(i) {
                        classes.see(tables.loc(resource), class_of(resource));
                    }
                    let start = aliases.reach.len();
                    classes.reach(targets, &mut aliases.reach);
                    close_run(&mut aliases.reach_ends, i, start, aliases.reach.len());
                }
                Record::Observation => {
                    let j = next_observation;
                    next_observation += 1;
                    let resource = ledger.observations.resource[j];
                    let loc = tables.loc(resource);
                    if shows_files(tables.mechanism.get(j)) {
                        classes.see(loc, class_of(resource));
                    } else {
                        classes.unsee(loc, class_of(resource));
                    }
                    let start = aliases.also.len();
                    aliases.also.extend(classes.others(loc));
                    close_run(&mut aliases.also_ends, j, start, aliases.also.len());
                }
                Record::Outcome | Record::Verifier => {}
            }
        }
        if !aliases.reach_ends.is_empty() {
            aliases.reach_ends.resize(ledger.claims.position.len(), aliases.reach.len() as u32);
        }
        if !aliases.also_ends.is_empty() {
            aliases.also_ends.resize(ledger.observations.position.len(), aliases.also.len() as u32);
        }
        aliases
    }

    /// What claim `i` reaches through aliases, besides its own targets.
    pub fn reach(&self, i: usize) -> &[Reach] {
        run_of(&self.reach, &self.reach_ends, i)
    }

    /// The other names of the object observation `j` saw, as of it.
    pub fn also(&self, j: usize) -> &[LocId] {
        run_of(&self.also, &self.also_ends, j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incarnation_names_an_object_only_as_the_host_spells_one() {
        let chain = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert_eq!(object(&format!("2049:131@{chain}")), Some((2049, 131)));
        assert_eq!(object(&format!("7:42@{chain}x")), Some((7, 42)), "found by scanning");
        assert_eq!(object("7:42@c"), Some((7, 42)));
        let max = format!("{}:1@x", 10u64.pow(18));
        assert_eq!(object(&max), Some((10u64.pow(18), 1)), "19 digits");
        let too_long = format!("{}0:1@x", 10u64.pow(18));
        for none in [
            format!("absent:{chain}"),
            "1".into(),
            ":42@x".into(),
            "7:@x".into(),
            "742@x".into(),
            "7:42".into(),
            "7:4x@c".into(),
            too_long,
        ] {
            assert_eq!(object(&none), None, "{none:?}");
        }
    }

    #[test]
    fn classes_join_and_leave_and_count_the_aliases_beneath_each_directory() {
        let mut locations = Locations::default();
        let [a, h, d_x] = ["a.txt", "h.txt", "d/x"].map(|p| locations.intern_path(0, p));
        let d = locations.intern_path(0, "d");
        let root = locations.intern_path(0, "");
        // Class 0 is the object 7:42, class 1 the object 7:43.
        let mut classes = Classes::new(&locations, 2);
        classes.see(a, 0);
        assert!(classes.aliased.is_empty(), "one name is no alias");
        classes.see(h, 0);
        assert_eq!(classes.others(a).collect::<Vec<_>>(), [h]);
        assert_eq!(classes.others(h).collect::<Vec<_>>(), [a]);
        classes.see(d_x, 0);
        assert_eq!(classes.below[root as usize], 3);
        assert_eq!(classes.below[d as usize], 1);
        let mut reach = Vec::new();
        classes.reach(&[d], &mut reach);
        let mut reached: Vec<LocId> = reach.iter().map(|r| r.loc).collect();
        reached.sort_unstable();
        assert_eq!(reached, [a, h], "a claim on d reaches the other names of d/x");
        assert!(reach.iter().all(|r| r.alias_of.is_none()));
        // Seen as another object, then as nothing: the class shrinks to one.
        classes.see(h, 1);
        classes.see(d_x, NONE);
        assert!(classes.aliased.is_empty());
        assert_eq!(classes.below[root as usize], 0);
        assert_eq!(classes.others(a).count(), 0);
        classes.see(h, 0);
        reach.clear();
        classes.reach(&[a], &mut reach);
        assert_eq!(reach, [Reach { loc: h, alias_of: Some(a) }]);
    }
}
