//! CMP-10, the prose gate, and CMP-6's presented answer.
//!
//! The gate is secondary and never relied on: the verdict and the disclosures
//! come from the evidence, and the disclosures are appended whatever the answer
//! says. The gate only annotates sentences that claim work the evidence does not
//! support: a mutation or remote verb ("wrote", "updated", "deployed", "sent"),
//! or a bare "Done.". A sentence that names files is supported only when each
//! named file's latest change is verified; an unnamed one ("I updated it")
//! cannot borrow the single required artifact, so it is supported only when
//! every effect of the run is verified; a remote claim is never supported
//! (nothing remote is independently verified); "Done." is supported only when
//! nothing else fired. A run with no effects at all is conversation or
//! read-only synthesis (CMP-9): its answer is left alone.

use std::cell::RefCell;
use std::collections::BTreeMap;

use effects_evaluator_sdk::types::{Assessment, Reason, ReasonCode, Verdict};

use crate::decide::Index;
use crate::locations::{FixedMap, Kind, LocId, split_last_slash};

/// Past-tense verbs that claim a local change.
const MUTATION_VERBS: &[&str] = &[
    "wrote",
    "written",
    "rewrote",
    "rewritten",
    "overwrote",
    "overwritten",
    "updated",
    "created",
    "edited",
    "modified",
    "patched",
    "changed",
    "fixed",
    "added",
    "appended",
    "deleted",
    "removed",
    "renamed",
    "moved",
    "replaced",
    "saved",
    "applied",
    "generated",
    "implemented",
    "refactored",
    "inserted",
    "restored",
    "reverted",
];

/// Past-tense verbs that claim a remote change.
const REMOTE_VERBS: &[&str] = &[
    "deployed",
    "sent",
    "posted",
    "published",
    "pushed",
    "uploaded",
    "emailed",
    "submitted",
    "merged",
    "released",
    "notified",
    "messaged",
    "filed",
];

/// What follows an unsupported sentence in the presented answer.
pub const ANNOTATION: &str = " [not verified]";

/// The heading of the disclosure block.
pub const DISCLOSURE_HEADING: &str = "Effect ledger disclosures:";

/// Longest sentence quoted in a reason.
const QUOTE_CHARS: usize = 160;

/// Sentences with their byte ranges: a sentence ends at `.`, `!` or `?`
/// followed by whitespace or the end, or at a newline.
fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|&(_, n)| n.is_whitespace());
        let end = match c {
            '\n' => Some(i),
            '.' | '!' | '?' if next_is_space => Some(i + c.len_utf8()),
            _ => None,
        };
        if let Some(end) = end {
            if !text[start..end].trim().is_empty() {
                out.push((start, end));
            }
            start = i + c.len_utf8();
        }
    }
    if !text[start..].trim().is_empty() {
        out.push((start, text.len()));
    }
    out
}

/// Lowercase words (letters and digits) of a sentence.
fn words(sentence: &str) -> impl Iterator<Item = String> + '_ {
    sentence.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// Whitespace-separated tokens with quotes, brackets and trailing punctuation
/// trimmed: candidates for file names.
fn tokens(sentence: &str) -> impl Iterator<Item = &str> {
    sentence
        .split_whitespace()
        .map(|t| {
            let quote = |c: char| "`\"'()[]{}<>,;:!?*".contains(c);
            t.trim_start_matches(quote).trim_end_matches(|c: char| quote(c) || c == '.')
        })
        .filter(|t| !t.is_empty())
}

fn quote(sentence: &str) -> String {
    let trimmed = sentence.trim();
    match trimmed.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => format!("{}...", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

/// What the gate needs to know about the run.
pub struct Support<'i, 'h, 'a> {
    index: &'i Index<'h, 'a>,
    /// File names (relative paths and base names) of changed or required files.
    names: BTreeMap<&'h str, Vec<LocId>>,
    /// The decision before the gate.
    verdict: Verdict,
    /// Every effect verified, and there is at least one.
    all_verified: bool,
    /// Per named file: is its latest change verified? (Each asked once.)
    verified: RefCell<FixedMap<LocId, bool>>,
}

impl<'i, 'h, 'a> Support<'i, 'h, 'a> {
    /// Collects the run-wide facts and the names of changed or required files
    /// that `answer` mentions (only those: the answer is short, the run may
    /// not be).
    pub fn new(index: &'i Index<'h, 'a>, verdict: Verdict, answer: &str) -> Self {
        let locations = &index.history.locations;
        let mentioned: FixedMap<&str, ()> = tokens(answer).map(|t| (t, ())).collect();
        let mut names: BTreeMap<&'h str, Vec<LocId>> = BTreeMap::new();
        if !mentioned.is_empty() {
            for &loc in index.changes.changed.iter().chain(&index.history.required) {
                if locations.kind(loc) != Kind::Filesystem {
                    continue;
                }
                let path = locations.name(loc);
                let base = split_last_slash(path).map_or(path, |(_, base)| base);
                let both = [Some(path), (base != path).then_some(base)];
                for name in both.into_iter().flatten().filter(|name| mentioned.contains_key(name)) {
                    names.entry(name).or_default().push(loc);
                }
            }
        }
        let all = &index.assessments.all;
        let all_verified =
            !all.is_empty() && all.iter().all(|a| matches!(a.assessment, Assessment::Verified));
        Support { index, names, verdict, all_verified, verified: RefCell::default() }
    }

    /// Why `sentence` is an unsupported claim, or `None` when it is no claim or
    /// a supported one.
    fn unsupported(&self, sentence: &str) -> Option<String> {
        let words: Vec<String> = words(sentence).collect();
        if words == ["done"] || words == ["all", "done"] {
            return (self.verdict != Verdict::Completed).then(|| "the run is not complete".to_owned());
        }
        if words.iter().any(|w| REMOTE_VERBS.contains(&w.as_str())) {
            return Some("remote effects are never independently verified".to_owned());
        }
        if !words.iter().any(|w| MUTATION_VERBS.contains(&w.as_str())) {
            return None;
        }
        let mut named: Vec<LocId> =
            tokens(sentence).filter_map(|t| self.names.get(t)).flatten().copied().collect();
        named.sort_unstable();
        named.dedup();
        if named.is_empty() {
            return (!self.all_verified || self.verdict != Verdict::Completed)
                .then(|| "it names no file, and not every effect of the run is verified".to_owned());
        }
        let locations = &self.index.history.locations;
        let unverified: Vec<&str> =
            named.iter().filter(|&&loc| !self.verified(loc)).map(|&loc| locations.name(loc)).collect();
        (!unverified.is_empty())
            .then(|| format!("the latest change of {} is not verified", unverified.join(", ")))
    }
}

impl Support<'_, '_, '_> {
    /// A named file's latest change is verified (or covered): it was changed
    /// and the artifact rules give no reason about it.
    fn verified(&self, loc: LocId) -> bool {
        *self.verified.borrow_mut().entry(loc).or_insert_with(|| {
            let mut reasons = Vec::new();
            self.index.artifact(loc, &mut reasons);
            reasons.is_empty() && !self.index.changes.of(loc).is_empty()
        })
    }
}

/// Annotates unsupported claims in `answer`; returns the annotated text and a
/// reason per unsupported sentence.
pub fn gate(answer: &str, support: &Support<'_, '_, '_>) -> (String, Vec<Reason>) {
    let mut annotated = String::with_capacity(answer.len());
    let mut reasons = Vec::new();
    let mut copied = 0;
    for (start, end) in sentences(answer) {
        let sentence = &answer[start..end];
        if let Some(why) = support.unsupported(sentence) {
            annotated.push_str(&answer[copied..end]);
            annotated.push_str(ANNOTATION);
            copied = end;
            let quoted = quote(sentence);
            reasons.push(Reason {
                code: ReasonCode::UnsupportedClaim,
                verdict: Verdict::Unverified,
                message: format!("the answer says \"{quoted}\": {why}"),
                remedy: "say only what the evidence supports, or verify it first".to_owned(),
                evidence: Vec::new(),
                disclosure: Some(format!("Not verified: \"{quoted}\" ({why}).")),
            });
        }
    }
    annotated.push_str(&answer[copied..]);
    (annotated, reasons)
}

/// The presented answer: the annotated text, then every disclosure (CMP-6).
pub fn present(annotated: &str, disclosures: &[String]) -> String {
    if disclosures.is_empty() {
        return annotated.to_owned();
    }
    let mut out = annotated.trim_end().to_owned();
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(DISCLOSURE_HEADING);
    for disclosure in disclosures {
        out.push_str("\n- ");
        out.push_str(disclosure);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_end_at_terminators_followed_by_space_not_inside_file_names() {
        let text = "I wrote a.txt. Then I ran it!\nDone";
        let found: Vec<&str> = sentences(text).into_iter().map(|(s, e)| text[s..e].trim()).collect();
        assert_eq!(found, ["I wrote a.txt.", "Then I ran it!", "Done"]);
    }

    #[test]
    fn tokens_strip_quotes_and_trailing_periods() {
        let found: Vec<&str> = tokens("I updated `src/a.rs` and \"b.txt\".").collect();
        assert_eq!(found, ["I", "updated", "src/a.rs", "and", "b.txt"]);
    }

    #[test]
    fn disclosures_follow_the_answer_under_a_heading() {
        let presented = present("Hi.\n", &["One.".to_owned(), "Two.".to_owned()]);
        assert_eq!(presented, "Hi.\n\nEffect ledger disclosures:\n- One.\n- Two.");
        assert_eq!(present("", &["One.".to_owned()]), "Effect ledger disclosures:\n- One.");
        assert_eq!(present("Hi.", &[]), "Hi.");
    }
}
