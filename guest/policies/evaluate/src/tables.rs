//! The evidence ledger's flat tables, read back and resolved once (see the
//! WIT's `evidence-ledger`): a `span` is a string of its `text`, a `range` a
//! run of its `indices` or `obligations`. Every resource is interned to its
//! location up front, and so is every entry of `indices` and `obligations`,
//! so a claim's scope and obligations are slices of these tables: nothing is
//! allocated per claim. Every lookup is checked, so a span, range or index
//! outside its table refuses the ledger instead of reading the wrong thing.

use effects_evaluator_sdk::types::{
    EvidenceLedger, EvidenceLocation, EvidencePostcondition, FilesystemRoot, Range, Span,
};

use crate::locations::{LocId, Locations};

/// What an obligation asserts (CL-2), its digest read from the ledger's text.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Postcondition<'a> {
    /// The complete content has this SHA-256.
    ContentSha256(&'a str),
    /// Nothing exists there.
    Absent,
    /// Something exists there.
    Exists,
}

/// An obligation with its target's location.
#[derive(Clone, Copy)]
pub struct Obligation<'a> {
    /// The target's location.
    pub target: LocId,
    /// What must hold there.
    pub postcondition: Postcondition<'a>,
}

/// The ledger as it crossed the boundary: strings by span, roots by index.
#[derive(Clone, Copy)]
pub struct Wire<'a> {
    ledger: &'a EvidenceLedger,
}

/// The resolved tables of one ledger.
pub struct Tables<'a> {
    /// The ledger's strings and roots.
    pub wire: Wire<'a>,
    /// Every location the resources name, interned.
    pub locations: Locations<'a>,
    /// Per resource, its location.
    resource_loc: Vec<LocId>,
    /// Per entry of `indices`, its resource's location.
    index_loc: Vec<LocId>,
    /// Per entry of `obligations`, resolved.
    obligations: Vec<Obligation<'a>>,
}

/// `items[range]`, or an error naming the table.
fn run<'t, T>(items: &'t [T], range: Range, table: &str) -> Result<&'t [T], String> {
    let (start, len) = (range.start as usize, range.len as usize);
    start.checked_add(len).and_then(|end| items.get(start..end)).ok_or_else(|| {
        format!("range {start}+{len} is outside the ledger's {table} ({} entries)", items.len())
    })
}

/// The location of resource `index`, given every resource's location.
fn loc_in(resource_loc: &[LocId], index: u32) -> Result<LocId, String> {
    resource_loc
        .get(index as usize)
        .copied()
        .ok_or_else(|| format!("resource index {index} is out of range ({} resources)", resource_loc.len()))
}

impl<'a> Wire<'a> {
    /// The string `span` names.
    pub fn get(&self, span: Span) -> Result<&'a str, String> {
        let (start, len) = (span.start as usize, span.len as usize);
        start.checked_add(len).and_then(|end| self.ledger.text.get(start..end)).ok_or_else(|| {
            format!(
                "span {start}+{len} is outside the ledger's text ({} bytes) or splits a character",
                self.ledger.text.len()
            )
        })
    }

    /// The root at `index`.
    pub fn root(&self, index: u32) -> Result<&'a FilesystemRoot, String> {
        self.ledger
            .roots
            .get(index as usize)
            .ok_or_else(|| format!("root index {index} is out of range ({} roots)", self.ledger.roots.len()))
    }
}

impl<'a> Tables<'a> {
    /// Resolves every table of `ledger`.
    pub fn new(ledger: &'a EvidenceLedger) -> Result<Self, String> {
        let wire = Wire { ledger };
        let mut locations = Locations::default();
        let mut resource_loc = Vec::with_capacity(ledger.resources.len());
        for resource in &ledger.resources {
            resource_loc.push(match &resource.location {
                EvidenceLocation::Filesystem(file) => {
                    let root = locations.root(wire.root(file.root)?);
                    locations.intern_path(root, wire.get(file.path)?)
                }
                EvidenceLocation::Other(location) => locations.intern(location),
            });
            // Read once so a span outside the text is refused even where no
            // rule looks.
            wire.get(resource.incarnation)?;
            resource.snapshot_sha256.map(|digest| wire.get(digest)).transpose()?;
        }
        let loc = |index: u32| loc_in(&resource_loc, index);
        let index_loc = ledger.indices.iter().map(|&i| loc(i)).collect::<Result<Vec<_>, _>>()?;
        let obligations = ledger
            .obligations
            .iter()
            .map(|o| {
                let postcondition = match o.postcondition {
                    EvidencePostcondition::ContentSha256(digest) => {
                        Postcondition::ContentSha256(wire.get(digest)?)
                    }
                    EvidencePostcondition::Absent => Postcondition::Absent,
                    EvidencePostcondition::Exists => Postcondition::Exists,
                };
                Ok(Obligation { target: loc(o.target)?, postcondition })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Tables { wire, locations, resource_loc, index_loc, obligations })
    }

    /// The ledger these tables resolve.
    pub fn ledger(&self) -> &'a EvidenceLedger {
        self.wire.ledger
    }

    /// The location of resource `index`.
    pub fn loc(&self, index: u32) -> Result<LocId, String> {
        loc_in(&self.resource_loc, index)
    }

    /// The locations of the resources `range` of `indices` names.
    pub fn locs(&self, range: Range) -> Result<&[LocId], String> {
        run(&self.index_loc, range, "indices")
    }

    /// The obligations `range` names.
    pub fn obligations(&self, range: Range) -> Result<&[Obligation<'a>], String> {
        run(&self.obligations, range, "obligations")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use effects_evaluator_sdk::types::{EvidenceLocation, EvidencePath, EvidenceResource, ResourceRole};

    fn ledger(text: &str, path: Span) -> EvidenceLedger {
        let root =
            FilesystemRoot { scope: "s".into(), owner: "o".into(), path: "/w".into(), device: 1, inode: 2 };
        EvidenceLedger {
            text: text.into(),
            roots: vec![root],
            resources: vec![EvidenceResource {
                role: ResourceRole::Target,
                location: EvidenceLocation::Filesystem(EvidencePath { root: 0, path }),
                incarnation: Span { start: 0, len: 0 },
                snapshot_sha256: None,
            }],
            indices: vec![0],
            obligations: Vec::new(),
            required: Vec::new(),
            records: Vec::new(),
            answer: String::new(),
        }
    }

    #[test]
    fn a_claim_whose_unread_run_id_is_outside_the_text_is_refused() {
        use effects_evaluator_sdk::types::{ClaimEvidence, EvidenceRecord};
        let mut ledger = ledger("d/a.txt", Span { start: 0, len: 7 });
        let claim = |run_id: Span| {
            EvidenceRecord::Claim(ClaimEvidence {
                position: 1,
                run_id,
                action_id: Span { start: 0, len: 1 },
                tool: Span { start: 0, len: 1 },
                scope: Some(Range { start: 0, len: 1 }),
                dependencies: Range { start: 0, len: 0 },
                obligations: Range { start: 0, len: 0 },
                external: false,
                no_op: false,
            })
        };
        ledger.records = vec![claim(Span { start: 0, len: 1 })];
        assert!(crate::evaluate(&ledger).is_ok());
        ledger.records = vec![claim(Span { start: 99, len: 5 })];
        let error = crate::evaluate(&ledger).expect_err("refused");
        assert!(error.contains("outside the ledger's text"), "{error}");
    }

    fn refusal(ledger: &EvidenceLedger) -> String {
        Tables::new(ledger).err().expect("the ledger is refused")
    }

    #[test]
    fn spans_and_ranges_resolve_inside_their_tables() {
        let ledger = ledger("d/a.txt", Span { start: 0, len: 7 });
        let tables = Tables::new(&ledger).expect("a well-formed ledger");
        let loc = tables.loc(0).unwrap();
        assert_eq!(tables.locations.name(loc), "d/a.txt");
        assert_eq!(tables.locs(Range { start: 0, len: 1 }).unwrap(), &[loc]);
        assert!(tables.obligations(Range { start: 0, len: 0 }).unwrap().is_empty());
    }

    #[test]
    fn a_span_outside_the_text_or_inside_a_character_is_refused() {
        let past_end = refusal(&ledger("d/a.txt", Span { start: 4, len: 9 }));
        assert!(past_end.contains("outside the ledger's text"), "{past_end}");
        let wrapping = refusal(&ledger("d/a.txt", Span { start: u32::MAX, len: u32::MAX }));
        assert!(wrapping.contains("span"), "{wrapping}");
        let split = refusal(&ledger("é", Span { start: 1, len: 1 }));
        assert!(split.contains("splits a character"), "{split}");
    }

    #[test]
    fn a_range_or_root_outside_its_table_is_refused() {
        let ledger = ledger("a", Span { start: 0, len: 1 });
        let tables = Tables::new(&ledger).unwrap();
        let error = tables.locs(Range { start: 1, len: 1 }).unwrap_err();
        assert!(error.contains("outside the ledger's indices"), "{error}");
        assert!(tables.obligations(Range { start: 0, len: 1 }).is_err());
        let mut bad_incarnation = ledger.clone();
        bad_incarnation.resources[0].incarnation = Span { start: 50, len: 1 };
        assert!(
            refusal(&bad_incarnation).contains("outside the ledger's text"),
            "no rule reads it, still refused"
        );
        let mut bad_root = ledger.clone();
        bad_root.resources[0].location =
            EvidenceLocation::Filesystem(EvidencePath { root: 3, path: Span { start: 0, len: 1 } });
        assert!(refusal(&bad_root).contains("root index 3"));
    }
}
