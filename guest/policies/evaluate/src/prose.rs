//! CMP-10, the prose gate, and CMP-6's presented answer.
//!
//! The gate is secondary and never relied on: the verdict and the disclosures
//! come from the evidence, and the disclosures are appended whatever the answer
//! says. The gate only annotates sentences that claim what the evidence does
//! not support, one UNSUPPORTED_CLAIM reason (UNVERIFIED, with a remedy and a
//! disclosure) per annotated sentence. It reads three kinds of claim, from
//! fixed word tables (no scoring, nothing probabilistic):
//!
//! - **A change**: a past-tense mutation or remote verb ("wrote", "updated",
//!   "deployed", "sent"). A remote claim is never supported (nothing remote is
//!   independently verified). Every file the sentence names as changed must
//!   have a verified latest change: one the run only observed was not changed
//!   by it, and one that no claim's scope and no observation names (a
//!   file-like token such as `b.txt`) was neither changed nor observed. A file
//!   the sentence says was read ("I read c.txt and updated a.txt") is not
//!   named as changed. A sentence that names no file ("I updated it") cannot
//!   borrow the single required artifact: it is supported only when every
//!   effect of the run is verified.
//! - **Tests or a build passing** ("all tests pass", "the build succeeds",
//!   "CI is green"): supported only by a latest check that PASSED and started
//!   after the last change ended (the latest effect that is not a no-op, its
//!   end where [`window_end`](crate::history::Claim::window_end) says, as in
//!   `decide`; the check's own run is not a change after it, CMP-5). A latest
//!   check that failed or did not finish supports nothing.
//! - **A bare "Done."**: supported only when nothing else fired.
//!
//! A run with no claims is conversation or read-only synthesis (CMP-9), and
//! reports of what the agent read ("the changelog says the bug was fixed") are
//! left alone there; but an answer that claims work of its own in it ("I
//! updated a.txt", "all tests pass") is annotated like any other: CMP-9's "no
//! disclosures" holds for answers that claim nothing. In such a run a change
//! verb is the agent's claim when it opens the sentence or follows a first
//! person or a perfect ("I fixed", "we have updated", "has been written")
//! within three words.
//!
//! The presented answer is the annotated text, then the disclosures under
//! [`DISCLOSURE_HEADING`]. The answer cannot forge that section: every line of
//! it that reads as the heading (any case or spacing, markdown emphasis,
//! heading, quote or list marks, HTML tags, invisible characters, fullwidth,
//! mathematical, circled and common Cyrillic and Greek lookalike letters) is
//! escaped with [`ESCAPE`] in front, and the decision says so in a reason of
//! its own. [`present`] escapes whoever calls it, the host's POLICY_FAILURE
//! decision included, so the server's section is the only one under its
//! heading. Lookalikes outside the fixed table can still slip through the
//! escaping; the server's section is still the last, after a blank line.
//!
//! The gate never annotates what it cannot read as a claim; its tables are a
//! floor, not a grammar. Cost: the answer's length, plus one pass over the
//! changed, required and observed files when the answer is not empty, plus one
//! pass over the claims when it claims tests pass.

use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};
use std::collections::BTreeMap;

use effects_evaluator_sdk::types::{Assessment, CheckResult, Reason, ReasonCode, Verdict};

use crate::decide::Index;
use crate::history::History;
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
    "copied",
    "committed",
    "installed",
    "upgraded",
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

/// Words after which a file in a change claim is one the agent says it read,
/// not changed ("I read c.txt and updated a.txt").
const READ_VERBS: &[&str] = &[
    "read",
    "reread",
    "reading",
    "looked",
    "checked",
    "inspected",
    "viewed",
    "opened",
    "examined",
    "reviewed",
    "consulted",
    "studied",
    "searched",
    "grepped",
    "listed",
    "saw",
    "found",
    "compared",
    "using",
    "used",
    "based",
    "according",
];

/// In a run with no claims, words that make a change verb within three words
/// after them the agent's own claim: a first person, or a perfect ("has been
/// updated") that reports a change just made rather than history.
const AGENT_WORDS: &[&str] = &["i", "we", "me", "us", "my", "our", "has", "have", "now"];

/// Words that name a check: a test suite, a build, CI, lints.
const CHECK_NOUNS: &[&str] = &[
    "test",
    "tests",
    "testsuite",
    "suite",
    "suites",
    "specs",
    "build",
    "builds",
    "ci",
    "check",
    "checks",
    "pipeline",
    "lint",
    "lints",
    "linter",
    "clippy",
    "typecheck",
    "compilation",
];

/// Words that say a check succeeded, after its noun within four words ("the
/// tests now all pass") or just before it ("a green build").
const SUCCESS_WORDS: &[&str] = &[
    "pass",
    "passes",
    "passed",
    "passing",
    "green",
    "succeed",
    "succeeds",
    "succeeded",
    "success",
    "successful",
    "successfully",
    "clean",
    "cleanly",
    "ok",
    "okay",
];

/// Phrases that claim checks pass without a noun and a success word.
const CHECK_PHRASES: &[&[&str]] = &[
    &["all", "green"],
    &["everything", "passes"],
    &["everything", "passed"],
    &["everything", "is", "green"],
    &["compiles"],
    &["compiled", "successfully"],
    &["compiled", "cleanly"],
    &["0", "failed"],
    &["0", "failures"],
    &["zero", "failures"],
    &["no", "failures"],
    &["no", "failing", "tests"],
];

/// Words that make a mention of a check no claim that it passes: negation
/// (`t` is what is left of "don't", "isn't"), failure, a condition, the future.
const NOT_A_PASS: &[&str] = &[
    "not", "no", "never", "none", "nothing", "t", "cannot", "fail", "fails", "failed", "failing", "failure",
    "failures", "broken", "break", "breaks", "if", "whether", "unless", "until", "once", "should", "would",
    "could", "might", "may", "will", "to",
];

/// First words of a yes/no question: "Do the tests pass?" claims nothing.
const QUESTION_WORDS: &[&str] = &[
    "do", "does", "did", "is", "are", "was", "were", "can", "could", "should", "will", "would", "have",
    "has", "shall", "may", "might",
];

/// Dotted words that are no file names.
const NOT_FILES: &[&str] = &["e.g", "i.e", "a.k.a", "u.s", "a.m", "p.m"];

/// What follows an unsupported sentence in the presented answer.
pub const ANNOTATION: &str = " [not verified]";

/// The heading of the disclosure block.
pub const DISCLOSURE_HEADING: &str = "Effect ledger disclosures:";

/// What goes in front of a line of the answer that reads as
/// [`DISCLOSURE_HEADING`]: it then opens with other words, so it no longer
/// reads as the heading (escaping an escaped answer again changes nothing).
pub const ESCAPE: &str = "[not from the effect ledger] ";

/// The disclosure of an answer that imitated the heading.
pub const ESCAPED_DISCLOSURE: &str = "The answer contained text imitating the effect ledger's disclosure heading; it was escaped and marked \"[not from the effect ledger]\".";

/// Longest sentence quoted in a reason.
const QUOTE_CHARS: usize = 160;

/// Characters that end a line for some reader of the answer (a terminal, a
/// browser, a markdown renderer), not only `\n`.
fn is_line_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// Sentences with their byte ranges: a sentence ends at `.`, `!` or `?`
/// followed by whitespace or the end, or at a line break.
fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|&(_, n)| n.is_whitespace());
        let end = match c {
            c if is_line_break(c) => Some(i),
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
/// trimmed, a leading `./` and a trailing line reference (`:42`, `:42:7`)
/// cut: candidates for file names.
fn tokens(sentence: &str) -> impl Iterator<Item = &str> {
    sentence
        .split_whitespace()
        .map(|t| {
            let quote = |c: char| "`\"'()[]{}<>,;:!?*".contains(c);
            let t = t.trim_start_matches(quote).trim_end_matches(|c: char| quote(c) || c == '.');
            let t = t.strip_prefix("./").unwrap_or(t);
            match t.split_once(':') {
                Some((file, line))
                    if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit() || b == b':') =>
                {
                    file
                }
                _ => t,
            }
        })
        .filter(|t| !t.is_empty())
}

/// A token that reads as a file name: path characters only, and a base name
/// with an extension of up to ten letters and digits, one a letter (`a.txt`,
/// `src/lib.rs`, `.gitignore`; not `v1.2`, `e.g` or `https://x.io`).
fn file_like(token: &str) -> bool {
    if !token.chars().all(|c| c.is_alphanumeric() || "._-/+~".contains(c)) {
        return false;
    }
    if NOT_FILES.iter().any(|n| n.eq_ignore_ascii_case(token)) {
        return false;
    }
    let base = split_last_slash(token).map_or(token, |(_, base)| base);
    match base.rsplit_once('.') {
        Some((stem, ext)) => {
            (!stem.is_empty() || base.len() > 1)
                && !stem.ends_with('.')
                && (1..=10).contains(&ext.len())
                && ext.bytes().all(|b| b.is_ascii_alphanumeric())
                && ext.bytes().any(|b| b.is_ascii_alphabetic())
        }
        None => false,
    }
}

fn quote(sentence: &str) -> String {
    let trimmed = sentence.trim();
    match trimmed.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => format!("{}...", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

/// `words` has `phrase` at some index.
fn find_phrase(words: &[String], phrase: &[&str]) -> Option<usize> {
    (0..words.len()).find(|&i| {
        words.len() - i >= phrase.len() && words[i..i + phrase.len()].iter().zip(phrase).all(|(w, p)| w == p)
    })
}

/// Does the sentence claim that tests, a build or CI pass? A check noun with a
/// success word after it (within four words) or just before it, or a fixed
/// phrase, none of it hedged (a negation, a failure, a condition or the
/// future among the words from three before the noun to the success word);
/// a yes/no question claims nothing.
fn claims_checks_pass(sentence: &str, words: &[String]) -> bool {
    let question = sentence.trim_end().ends_with('?')
        && words.first().is_some_and(|w| QUESTION_WORDS.contains(&w.as_str()));
    if question {
        return false;
    }
    let hedged = |from: usize, to: usize| words[from..to].iter().any(|w| NOT_A_PASS.contains(&w.as_str()));
    let is = |i: usize, table: &[&str]| table.contains(&words[i].as_str());
    for i in (0..words.len()).filter(|&i| is(i, CHECK_NOUNS)) {
        let from = i.saturating_sub(3);
        let after = (i + 1..words.len().min(i + 5)).find(|&j| is(j, SUCCESS_WORDS));
        if after.is_some_and(|j| !hedged(from, j + 1)) {
            return true;
        }
        if i > 0 && is(i - 1, SUCCESS_WORDS) && !hedged(i.saturating_sub(4), i) {
            return true;
        }
    }
    CHECK_PHRASES
        .iter()
        .any(|phrase| find_phrase(words, phrase).is_some_and(|at| !hedged(at.saturating_sub(2), at)))
}

/// In a run with no claims: is the change verb at `verb` the agent's own
/// claim? It opens the sentence, or an [`AGENT_WORDS`] word is among the three
/// before it.
fn agent_claims(words: &[String], verb: usize) -> bool {
    verb == 0 || words[verb.saturating_sub(3)..verb].iter().any(|w| AGENT_WORDS.contains(&w.as_str()))
}

/// One thing a sentence claims that the evidence does not support: why, what
/// would clear it, and the records that show it.
#[derive(Clone)]
struct Problem {
    why: String,
    remedy: String,
    evidence: Vec<u64>,
}

/// The latest change, for the test-claim rule: its tool, its claim's
/// position, and where it ended (`None`: it has not, or never will, INV-2).
struct Change<'a> {
    tool: &'a str,
    position: u64,
    end: Option<u64>,
}

/// What `check` must do to vouch for the state after `change`; `again` when
/// it ran before.
fn run_after(check: &str, change: Option<&Change<'_>>, again: bool) -> String {
    let again = if again { " again" } else { "" };
    match change {
        None => format!("run {check}"),
        Some(Change { end: Some(end), .. }) => format!("run {check}{again} after position {end}"),
        Some(Change { position, .. }) => {
            format!(
                "let position {position} end (settled, its processes known dead), then run {check}{again}"
            )
        }
    }
}

/// Why a claim that tests or the build pass is unsupported, or `None`: the
/// latest check passed, and started (its own claim, or its record when the
/// ledger links none) after the latest effect that is not a no-op, other
/// than the check's own run, ended.
fn check_gap(history: &History<'_>) -> Option<Problem> {
    let latest = history.verifiers.last();
    let own = history.latest_check_own_run().map(|i| history.claims[i].position());
    let change = history
        .claims
        .iter()
        .filter(|c| !c.no_op() && Some(c.position()) != own)
        .max_by_key(|c| (c.window_end().unwrap_or(u64::MAX), c.position()))
        .map(|c| Change { tool: c.tool, position: c.position(), end: c.window_end() });
    let change_evidence: Vec<u64> = change.iter().map(|c| c.position).collect();
    let Some(check) = latest else {
        let why = match &change {
            Some(c) => format!("no check ran after the last change ({}, position {})", c.tool, c.position),
            None => "no check ran".to_owned(),
        };
        return Some(Problem {
            why,
            remedy: run_after("the designated check", change.as_ref(), false),
            evidence: change_evidence,
        });
    };
    let command = format!("`{}`", check.command);
    match check.result {
        CheckResult::Failed => Some(Problem {
            why: format!("the latest check {command} failed"),
            remedy: format!("fix what {command} reports, then run it again"),
            evidence: vec![check.position],
        }),
        CheckResult::Incomplete => Some(Problem {
            why: format!("the latest check {command} did not finish (timed out or cancelled)"),
            remedy: format!("run {command} again to the end"),
            evidence: vec![check.position],
        }),
        CheckResult::Passed => {
            let started = history.check_start(check);
            let c = change.as_ref().filter(|c| c.end.is_none_or(|end| end > started))?;
            Some(Problem {
                why: format!(
                    "the latest check {command} (position {}) passed before the last change ({}, position {}) ended",
                    check.position, c.tool, c.position
                ),
                remedy: run_after(&command, Some(c), true),
                evidence: vec![check.position, c.position],
            })
        }
    }
}

/// What the gate needs to know about the run.
pub struct Support<'i, 'h, 'a> {
    index: &'i Index<'h, 'a>,
    /// File names (relative paths and base names) of changed, required or
    /// observed files that the answer mentions.
    names: BTreeMap<&'h str, Vec<LocId>>,
    /// Of those files, the observed ones, with their newest observation.
    observed: FixedMap<LocId, u64>,
    /// The decision before the gate.
    verdict: Verdict,
    /// Every effect verified, and there is at least one.
    all_verified: bool,
    /// The run has no claims at all (CMP-9: only the agent's own claims count).
    no_claims: bool,
    /// Some claim is not a no-op: the run changed (or may have changed) something.
    changed_anything: bool,
    /// Per named file: is its latest change verified? (Each asked once.)
    verified: RefCell<FixedMap<LocId, bool>>,
    /// Why a test or build claim is unsupported (asked once, when one is made).
    check_gap: OnceCell<Option<Problem>>,
}

impl<'i, 'h, 'a> Support<'i, 'h, 'a> {
    /// Collects the run-wide facts and the names of changed, required or
    /// observed files that `answer` mentions (only those: the answer is
    /// short, the run may not be).
    pub fn new(index: &'i Index<'h, 'a>, verdict: Verdict, answer: &str) -> Self {
        let history = index.history;
        let locations = &history.locations;
        let mentioned: FixedMap<&str, ()> = tokens(answer).map(|t| (t, ())).collect();
        let mut names: BTreeMap<&'h str, Vec<LocId>> = BTreeMap::new();
        let mut observed = FixedMap::default();
        if !mentioned.is_empty() {
            // Per location, whether it is mentioned, asked once each: a run
            // reads back most of what it changes, so most observations find
            // their answer here, with no hashing.
            let mut asked: Vec<Option<bool>> = vec![None; locations.len()];
            let mut note = |loc: LocId, names: &mut BTreeMap<&'h str, Vec<LocId>>| {
                *asked[loc as usize].get_or_insert_with(|| {
                    if locations.kind(loc) != Kind::Filesystem {
                        return false;
                    }
                    let path = locations.name(loc);
                    let base = split_last_slash(path).map_or(path, |(_, base)| base);
                    let both = [Some(path), (base != path).then_some(base)];
                    let mut found = false;
                    for name in both.into_iter().flatten().filter(|name| mentioned.contains_key(name)) {
                        names.entry(name).or_default().push(loc);
                        found = true;
                    }
                    found
                })
            };
            for &loc in index.changes.changed.iter().chain(&history.required) {
                note(loc, &mut names);
            }
            for observation in &history.observations {
                if note(observation.loc, &mut names) {
                    observed.insert(observation.loc, observation.position);
                }
            }
        }
        let all = &index.assessments.all;
        let all_verified =
            !all.is_empty() && all.iter().all(|a| matches!(a.assessment, Assessment::Verified));
        Support {
            index,
            names,
            observed,
            verdict,
            all_verified,
            no_claims: history.claims.is_empty(),
            changed_anything: history.claims.iter().any(|c| !c.no_op()),
            verified: RefCell::default(),
            check_gap: OnceCell::new(),
        }
    }

    /// What `sentence` claims that the evidence does not support (nothing
    /// when it is no claim, or a supported one).
    fn problems(&self, sentence: &str) -> Vec<Problem> {
        let words: Vec<String> = words(sentence).collect();
        let mut problems = Vec::new();
        if words == ["done"] || words == ["all", "done"] {
            if self.verdict != Verdict::Completed {
                problems.push(Problem {
                    why: "the run is not complete".to_owned(),
                    remedy: "clear the decision's other reasons first, or say what is left to do".to_owned(),
                    evidence: Vec::new(),
                });
            }
            return problems;
        }
        if claims_checks_pass(sentence, &words) {
            problems.extend(self.check_gap.get_or_init(|| check_gap(self.index.history)).clone());
        }
        let claimed = |table: &[&str]| {
            words
                .iter()
                .enumerate()
                .any(|(i, w)| table.contains(&w.as_str()) && (!self.no_claims || agent_claims(&words, i)))
        };
        if claimed(REMOTE_VERBS) {
            problems.push(Problem {
                why: "remote effects are never independently verified".to_owned(),
                remedy: "say only that the call was made and what it reported".to_owned(),
                evidence: Vec::new(),
            });
        }
        if claimed(MUTATION_VERBS) {
            self.changes(sentence, &mut problems);
        }
        problems
    }

    /// The files a change claim names as changed, each checked: changed and
    /// verified, only observed, or neither claimed nor observed; or, when it
    /// names none, the run-wide rule.
    fn changes(&self, sentence: &str, problems: &mut Vec<Problem>) {
        let locations = &self.index.history.locations;
        let changes = &self.index.changes;
        let (mut unverified, mut only_observed, mut untouched): (Vec<LocId>, Vec<LocId>, Vec<&str>) =
            Default::default();
        let mut named = false;
        // A file before any verb counts as changed: "In c.txt I fixed it".
        let mut read = false;
        for token in tokens(sentence) {
            let lower = token.to_lowercase();
            if MUTATION_VERBS.contains(&lower.as_str()) || REMOTE_VERBS.contains(&lower.as_str()) {
                read = false;
                continue;
            }
            if READ_VERBS.contains(&lower.as_str()) {
                read = true;
                continue;
            }
            let matched = self.names.get(token);
            if read || (matched.is_none() && !file_like(token)) {
                continue;
            }
            named = true;
            let Some(matched) = matched else {
                untouched.push(token);
                continue;
            };
            // A whole path names that file; a base name every file it is the base of.
            let exact: Vec<LocId> = matched.iter().copied().filter(|&l| locations.name(l) == token).collect();
            let candidates = if exact.is_empty() { matched.clone() } else { exact };
            let changed: Vec<LocId> =
                candidates.iter().copied().filter(|&l| !changes.of(l).is_empty()).collect();
            if changed.is_empty() {
                for loc in candidates {
                    if self.observed.contains_key(&loc) {
                        only_observed.push(loc);
                    } else {
                        untouched.push(locations.name(loc));
                    }
                }
            } else {
                unverified.extend(changed.into_iter().filter(|&loc| !self.verified(loc)));
            }
        }
        if !named {
            if !self.changed_anything {
                problems.push(Problem {
                    why: "the run changed nothing".to_owned(),
                    remedy:
                        "say only what was read or found, or make the change with a tool the ledger claims"
                            .to_owned(),
                    evidence: Vec::new(),
                });
            } else if !self.all_verified || self.verdict != Verdict::Completed {
                problems.push(Problem {
                    why: "it names no file, and not every effect of the run is verified".to_owned(),
                    remedy: "name the files changed, each read back completely after its latest change"
                        .to_owned(),
                    evidence: Vec::new(),
                });
            }
            return;
        }
        let listed = |locs: &mut Vec<LocId>| {
            locs.sort_unstable();
            locs.dedup();
            locs.iter().map(|&l| locations.name(l)).collect::<Vec<_>>().join(", ")
        };
        if !unverified.is_empty() {
            let names = listed(&mut unverified);
            problems.push(Problem {
                why: format!("the latest change of {names} is not verified"),
                remedy: format!(
                    "read {names} back completely after its latest change, or say it is not verified"
                ),
                evidence: unverified
                    .iter()
                    .filter_map(|&l| changes.of(l).last())
                    .map(|&i| self.index.history.claims[i].position())
                    .collect(),
            });
        }
        if !only_observed.is_empty() {
            let names = listed(&mut only_observed);
            problems.push(Problem {
                why: format!("the run only observed {names}: no claimed change targeted it"),
                remedy: format!(
                    "say what was read, or change {names} with a tool the ledger claims and read it back"
                ),
                evidence: only_observed.iter().filter_map(|l| self.observed.get(l).copied()).collect(),
            });
        }
        if !untouched.is_empty() {
            untouched.sort_unstable();
            untouched.dedup();
            let names = untouched.join(", ");
            problems.push(Problem {
                why: format!("the run neither claimed nor observed {names}"),
                remedy: format!(
                    "name only files the run changed, or change {names} with a tool the ledger claims and read it back"
                ),
                evidence: Vec::new(),
            });
        }
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

/// The reason for an unsupported `sentence`: every problem's why and remedy,
/// the records they cite, once each.
fn unsupported(sentence: &str, problems: Vec<Problem>) -> Reason {
    let quoted = quote(sentence);
    let why = problems.iter().map(|p| p.why.as_str()).collect::<Vec<_>>().join("; ");
    let remedy = problems.iter().map(|p| p.remedy.as_str()).collect::<Vec<_>>().join("; ");
    let mut evidence: Vec<u64> = problems.into_iter().flat_map(|p| p.evidence).collect();
    evidence.sort_unstable();
    evidence.dedup();
    Reason {
        code: ReasonCode::UnsupportedClaim,
        verdict: Verdict::Unverified,
        message: format!("the answer says \"{quoted}\": {why}"),
        remedy,
        evidence,
        disclosure: Some(format!("Not verified: \"{quoted}\" ({why}).")),
    }
}

/// Annotates unsupported claims in `answer`; returns the annotated text and a
/// reason per unsupported sentence, and one more when the answer imitates the
/// disclosure heading (which [`present`] escapes).
pub fn gate(answer: &str, support: &Support<'_, '_, '_>) -> (String, Vec<Reason>) {
    let mut annotated = String::with_capacity(answer.len());
    let mut reasons = Vec::new();
    let mut copied = 0;
    for (start, end) in sentences(answer) {
        let sentence = &answer[start..end];
        let problems = support.problems(sentence);
        if !problems.is_empty() {
            annotated.push_str(&answer[copied..end]);
            annotated.push_str(ANNOTATION);
            copied = end;
            reasons.push(unsupported(sentence, problems));
        }
    }
    annotated.push_str(&answer[copied..]);
    let forged = imitations(&annotated);
    if forged > 0 {
        reasons.push(Reason {
            code: ReasonCode::UnsupportedClaim,
            verdict: Verdict::Unverified,
            message: format!(
                "the answer imitates the disclosure heading on {forged} line(s); each was escaped with \"{}\"",
                ESCAPE.trim_end()
            ),
            remedy: "leave the disclosure section to the ledger: remove the lines that imitate its heading"
                .to_owned(),
            evidence: Vec::new(),
            disclosure: Some(ESCAPED_DISCLOSURE.to_owned()),
        });
    }
    (annotated, reasons)
}

/// The lines of `text` with their byte offsets, each with its line break.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive(is_line_break).scan(0, |at, line| {
        let start = *at;
        *at += line.len();
        Some((start, line))
    })
}

/// Appends `c` as the heading check compares it: lowercase, invisible
/// characters dropped, lookalikes as the ASCII letter they imitate.
fn fold(c: char, out: &mut Vec<char>) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
        return;
    }
    let code = c as u32;
    let letter = |i: u32| char::from(b'a' + (i % 26) as u8);
    let mapped = match code {
        // Soft hyphen, combining marks, fillers, zero-width and direction
        // marks, word joiners, variation selectors, the BOM, tags.
        0xAD
        | 0x300..=0x36F
        | 0x61C
        | 0x115F
        | 0x1160
        | 0x17B4
        | 0x17B5
        | 0x180B..=0x180F
        | 0x200B..=0x200F
        | 0x202A..=0x202E
        | 0x2060..=0x206F
        | 0x3164
        | 0xFE00..=0xFE0F
        | 0xFEFF
        | 0xFFA0
        | 0xE0000..=0xE007F => {
            return;
        }
        0xFB00..=0xFB04 => {
            let ligature = ["ff", "fi", "fl", "ffi", "ffl"][(code - 0xFB00) as usize];
            out.extend(ligature.chars());
            return;
        }
        // Fullwidth ASCII.
        0xFF01..=0xFF5E => char::from_u32(code - 0xFEE0).unwrap_or(c).to_ascii_lowercase(),
        // Mathematical letters (bold, italic, script, ...: 52 a style) and digits.
        0x1D400..=0x1D6A3 => letter(code - 0x1D400),
        0x1D7CE..=0x1D7FF => char::from(b'0' + ((code - 0x1D7CE) % 10) as u8),
        // Circled letters.
        0x24B6..=0x24E9 => letter(code - 0x24B6),
        _ => match LOOKALIKES.chars().position(|from| from == c) {
            Some(at) => char::from(LOOKALIKE_OF.as_bytes()[at]),
            None => c.to_lowercase().next().unwrap_or(c),
        },
    };
    out.push(mapped);
}

/// Letters that look like ASCII ones (Cyrillic, Greek, small capitals), and
/// the letter each imitates, at the same place.
const LOOKALIKES: &str =
    "авекмнорстухіјѕԁӏһԛԝАВЕКМНОРСТХІЈЅӀαεικορτυΑΒΕΖΗΙΚΜΝΟΡΤΥΧıɡɩℓℯⅼᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘʀꜱᴛᴜᴠᴡʏᴢ";
const LOOKALIKE_OF: &str =
    "abekmhopctyxijsdlhqwabekmhopctxijslaeikoptuabezhikmnoptyxigilelabcdefghijklmnoprstuvwyz";

/// Does `line` read as [`DISCLOSURE_HEADING`]? After decoration (anything
/// but letters and digits: markdown `#`, `*`, `_`, `>`, `-`, `|`, spaces),
/// HTML tags and an ordered-list number, it spells "effect ledger
/// disclosure(s)" (decoration allowed between the letters), and what follows
/// is the end of the line or punctuation, not another word: "Effect ledger
/// disclosures are listed below" is prose, "**Effect ledger disclosures:**
/// none" a heading.
pub fn imitates_heading(line: &str) -> bool {
    let mut folded = Vec::with_capacity(line.len());
    // An HTML tag is decoration, `<b>` and `</h2>` alike: a `<` with a `>`
    // after it starts one.
    let last_close = line.rfind('>');
    let mut tag = false;
    for (i, c) in line.char_indices() {
        match c {
            '<' if last_close.is_some_and(|close| close > i) => tag = true,
            '>' if tag => tag = false,
            _ if tag => {}
            c => fold(c, &mut folded),
        }
    }
    let mut at = 0;
    let skip = |at: &mut usize| {
        while folded.get(*at).is_some_and(|c| !c.is_alphanumeric()) {
            *at += 1;
        }
    };
    skip(&mut at);
    let digits = folded[at..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 && matches!(folded.get(at + digits), Some('.' | ')')) {
        at += digits + 1;
    }
    for expected in "effectledgerdisclosure".chars() {
        skip(&mut at);
        if folded.get(at) != Some(&expected) {
            return false;
        }
        at += 1;
    }
    if folded.get(at) == Some(&'s') {
        at += 1;
    }
    match folded.get(at) {
        None => true,
        Some(c) if c.is_alphanumeric() => false,
        Some(_) => {
            while folded.get(at).is_some_and(|c| c.is_whitespace()) {
                at += 1;
            }
            folded.get(at).is_none_or(|c| !c.is_alphanumeric())
        }
    }
}

/// How many lines of `text` imitate the heading ([`present`] escapes each).
pub fn imitations(text: &str) -> usize {
    lines(text).filter(|&(_, line)| imitates_heading(line)).count()
}

/// `text` with [`ESCAPE`] in front of every line that imitates the heading.
fn escape_headings(text: &str) -> Cow<'_, str> {
    let forged: Vec<usize> =
        lines(text).filter(|&(_, line)| imitates_heading(line)).map(|(at, _)| at).collect();
    if forged.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + forged.len() * ESCAPE.len());
    let mut copied = 0;
    for at in forged {
        out.push_str(&text[copied..at]);
        out.push_str(ESCAPE);
        copied = at;
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Writes every line break in `disclosure` as an escape (`\n`, `\u{2028}`),
/// so a disclosure that quotes a name or a sentence stays one line of the
/// section and cannot start a line that reads as the heading.
pub fn keep_on_one_line(disclosure: &mut String) {
    if !disclosure.contains(is_line_break) {
        return;
    }
    *disclosure = disclosure
        .chars()
        .map(|c| match c {
            '\n' => "\\n".to_owned(),
            '\r' => "\\r".to_owned(),
            c if is_line_break(c) => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect();
}

/// The presented answer: the annotated text, every line that imitates the
/// disclosure heading escaped, then every disclosure (CMP-6) under the
/// heading, which is then the only one.
pub fn present(annotated: &str, disclosures: &[String]) -> String {
    let escaped = escape_headings(annotated);
    if disclosures.is_empty() {
        return escaped.into_owned();
    }
    let mut out = escaped.trim_end().to_owned();
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
    use effects_evaluator_sdk::types::{CleanupState, Decision, Execution, VerifierFlags};

    use crate::tables::tests::Built;

    #[test]
    fn sentences_end_at_terminators_followed_by_space_not_inside_file_names() {
        let text = "I wrote a.txt. Then I ran it!\nDone";
        let found: Vec<&str> = sentences(text).into_iter().map(|(s, e)| text[s..e].trim()).collect();
        assert_eq!(found, ["I wrote a.txt.", "Then I ran it!", "Done"]);
        // Every line break a reader may honour ends a sentence, not only `\n`.
        let text = "I wrote a.txt\u{2028}Effect ledger disclosures:\r- fine";
        let found: Vec<&str> = sentences(text).into_iter().map(|(s, e)| &text[s..e]).collect();
        assert_eq!(found, ["I wrote a.txt", "Effect ledger disclosures:", "- fine"]);
    }

    #[test]
    fn tokens_strip_quotes_trailing_periods_a_leading_dot_slash_and_line_numbers() {
        let found: Vec<&str> = tokens("I updated `src/a.rs` and \"b.txt\".").collect();
        assert_eq!(found, ["I", "updated", "src/a.rs", "and", "b.txt"]);
        let found: Vec<&str> = tokens("Fixed ./src/lib.rs:42 and src/main.rs:7:3, see a:b.").collect();
        assert_eq!(found, ["Fixed", "src/lib.rs", "and", "src/main.rs", "see", "a:b"]);
    }

    #[test]
    fn file_like_tokens_have_an_extension_with_a_letter() {
        for file in ["a.txt", "src/lib.rs", ".gitignore", "Cargo.toml", "d/e/é.md", "x.tar.gz", "a-b_c.json"]
        {
            assert!(file_like(file), "{file}");
        }
        for word in
            ["it", "v1.2", "3.14", "e.g", "I.E", "src/", "a.", "..", "https://x.io/a.txt", "bob@x.io", "a:b"]
        {
            assert!(!file_like(word), "{word}");
        }
    }

    fn claims_pass(sentence: &str) -> bool {
        claims_checks_pass(sentence, &words(sentence).collect::<Vec<_>>())
    }

    #[test]
    fn test_and_build_claims_are_read_from_the_tables() {
        for claim in [
            "Tests pass.",
            "All tests pass.",
            "All 42 tests passed.",
            "The tests are now passing.",
            "All green.",
            "Everything is green!",
            "The build succeeds.",
            "Build passes.",
            "The build was successful.",
            "CI is green.",
            "The CI pipeline is green.",
            "cargo test: 12 passed, 0 failed.",
            "It compiles.",
            "The test suite passes and I wrote a.txt.",
            "A clean build and passing tests.",
            "Clippy is clean.",
            "All tests pass, right?",
        ] {
            assert!(claims_pass(claim), "{claim:?} claims checks pass");
        }
        for not_a_claim in [
            "The tests do not pass yet.",
            "The tests don't pass.",
            "3 tests failed and 9 passed.",
            "I could not get the build to pass.",
            "Do the tests pass?",
            "If the tests pass, merge it.",
            "I have not run the tests.",
            "The build will succeed once the cache is warm.",
            "I added a test for the parser.",
            "It no longer compiles.",
            "The file says hi.",
            "I passed the flag to the build script.",
        ] {
            assert!(!claims_pass(not_a_claim), "{not_a_claim:?} claims nothing about checks");
        }
    }

    #[test]
    fn a_line_imitating_the_heading_is_recognised_in_its_disguises() {
        assert!(imitates_heading(DISCLOSURE_HEADING));
        for forged in [
            "Effect ledger disclosures:",
            "effect LEDGER   disclosures :",
            "  Effect ledger disclosure",
            "**Effect ledger disclosures:**",
            "## Effect ledger disclosures",
            "> _Effect ledger disclosures_",
            "| Effect ledger disclosures: |",
            "1. Effect ledger disclosures:",
            "- Effect-ledger disclosures: none",
            "Effect ledger disclosures: - everything verified",
            "<b>Effect ledger disclosures:</b>",
            "<h2>Effect <i>ledger</i> disclosures</h2>",
            "Effect\u{200B} ledger dis\u{AD}closures:",
            "\u{FEFF}Effect ledger disclosures:",
            "Еffесt lеdgеr disсlosurеs:",
            "Ｅｆｆｅｃｔ ｌｅｄｇｅｒ ｄｉｓｃｌｏｓｕｒｅｓ：",
            "𝐄𝐟𝐟𝐞𝐜𝐭 𝐥𝐞𝐝𝐠𝐞𝐫 𝐝𝐢𝐬𝐜𝐥𝐨𝐬𝐮𝐫𝐞𝐬:",
            "Eﬀect ledger disclosures:",
            "ᴇꜰꜰᴇᴄᴛ ʟᴇᴅɢᴇʀ ᴅɪꜱᴄʟᴏꜱᴜʀᴇꜱ:",
        ] {
            assert!(imitates_heading(forged), "{forged:?} reads as the heading");
        }
        for prose in [
            "Effect ledger disclosures are listed below.",
            "The effect ledger disclosures say nothing.",
            "See Effect ledger disclosures: below.",
            "Effect ledger disclosuresx",
            "Effect ledger",
            "[not from the effect ledger] Effect ledger disclosures:",
            "- Not verified: \"Effect ledger disclosures:\" (the run changed nothing).",
            "",
        ] {
            assert!(!imitates_heading(prose), "{prose:?} is no heading");
        }
    }

    #[test]
    fn every_lookalike_has_the_ascii_letter_it_imitates() {
        assert_eq!(LOOKALIKES.chars().count(), LOOKALIKE_OF.len());
        assert!(LOOKALIKE_OF.bytes().all(|b| b.is_ascii_lowercase()));
        assert!(LOOKALIKES.chars().all(|c| !c.is_ascii()));
    }

    #[test]
    fn the_presented_answer_escapes_every_forged_heading_and_has_one_of_its_own() {
        let answer = "I wrote a.txt.\n\n**Effect ledger disclosures:**\r\n- none\u{2028}## effect ledger disclosures\nbye";
        let presented = present(answer, &["One.".to_owned()]);
        let headings: Vec<&str> =
            lines(&presented).map(|(_, l)| l.trim_end()).filter(|l| imitates_heading(l)).collect();
        assert_eq!(headings, [DISCLOSURE_HEADING], "{presented}");
        assert!(presented.ends_with("\n\nEffect ledger disclosures:\n- One."), "{presented}");
        assert!(
            presented.contains("\n[not from the effect ledger] **Effect ledger disclosures:**\r\n"),
            "{presented}"
        );
        assert!(presented.contains("\u{2028}[not from the effect ledger] ## effect ledger"), "{presented}");
        // Escaping is applied with no disclosures too, and only once.
        let alone = present("Effect ledger disclosures:", &[]);
        assert_eq!(alone, "[not from the effect ledger] Effect ledger disclosures:");
        assert_eq!(present(&alone, &[]), alone);
    }

    #[test]
    fn a_disclosure_is_kept_on_one_line() {
        let mut disclosure = "x\nEffect ledger disclosures:\u{2028}y was changed.".to_owned();
        keep_on_one_line(&mut disclosure);
        assert_eq!(disclosure, "x\\nEffect ledger disclosures:\\u{2028}y was changed.");
        assert_eq!(lines(&disclosure).count(), 1);
        let mut plain = "The latest check failed.".to_owned();
        keep_on_one_line(&mut plain);
        assert_eq!(plain, "The latest check failed.");
    }

    fn decide(built: &mut Built, answer: &str) -> Decision {
        built.ledger.answer = answer.to_owned();
        crate::evaluate(&built.ledger).expect("a consistent ledger")
    }

    fn unsupported(decision: &Decision) -> Vec<&Reason> {
        decision.reasons.iter().filter(|r| r.code == ReasonCode::UnsupportedClaim).collect()
    }

    /// `d/a.txt` (required) written and read back: verified.
    fn verified_write() -> Built {
        let mut built = Built::new();
        let write = built.write();
        built.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        built.read();
        built
    }

    /// The latest verifier ran as `result`, its own claim at `claim` if any.
    fn last_check(built: &mut Built, result: CheckResult, claim: Option<u64>) {
        let run = &mut built.ledger.verifiers;
        *run.result.last_mut().unwrap() = result as u8;
        if let Some(claim) = claim {
            *run.claim.last_mut().unwrap() = claim;
            *run.flags.last_mut().unwrap() = VerifierFlags::CLAIM.bits();
        }
    }

    #[test]
    fn tests_pass_is_supported_by_a_passing_check_after_the_last_change_only() {
        let mut after = verified_write();
        after.verifier(true);
        let decision = decide(&mut after, "I wrote d/a.txt. All tests pass.");
        assert_eq!(decision.verdict, Verdict::Completed, "{:?}", decision.reasons);
        assert!(!decision.presented_answer.contains(ANNOTATION));

        // The check passed before the write: the write is the last change.
        let mut before = Built::new();
        let check = before.verifier(true);
        let write = before.write();
        let settled = before.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        before.read();
        let decision = decide(&mut before, "I wrote d/a.txt. All tests pass.");
        assert_eq!(decision.verdict, Verdict::Unverified);
        let [reason] = unsupported(&decision)[..] else { panic!("{:?}", decision.reasons) };
        assert!(reason.message.contains("\"All tests pass.\""), "{}", reason.message);
        assert!(
            reason.message.contains(&format!("before the last change (write_file, position {write}) ended"))
        );
        assert_eq!(reason.remedy, format!("run `cargo test` again after position {settled}"));
        assert_eq!(reason.evidence, [check, write]);
        assert!(
            reason.disclosure.as_deref().is_some_and(|d| d.starts_with("Not verified: \"All tests pass.\""))
        );
        assert_eq!(decision.presented_answer.matches(ANNOTATION).count(), 1, "only the test claim");

        // No check at all.
        let mut none = verified_write();
        let decision = decide(&mut none, "The build succeeds.");
        let [reason] = unsupported(&decision)[..] else { panic!("{:?}", decision.reasons) };
        assert!(reason.message.contains("no check ran after the last change (write_file, position 1)"));
        assert_eq!(reason.remedy, "run the designated check after position 2");
    }

    #[test]
    fn a_latest_check_that_failed_or_did_not_finish_supports_no_test_claim() {
        for (result, why, verdict) in [
            (CheckResult::Failed, "the latest check `cargo test` failed", Verdict::Failed),
            (CheckResult::Incomplete, "did not finish", Verdict::Blocked),
        ] {
            let mut built = verified_write();
            built.verifier(true);
            last_check(&mut built, result, None);
            let decision = decide(&mut built, "CI is green.");
            assert_eq!(decision.verdict, verdict, "{result:?}");
            let [reason] = unsupported(&decision)[..] else { panic!("{:?}", decision.reasons) };
            assert!(reason.message.contains(why), "{}", reason.message);
            assert!(decision.presented_answer.starts_with("CI is green. [not verified]"));
        }
    }

    #[test]
    fn a_check_covers_its_own_run_but_not_a_change_that_ended_while_it_ran() {
        // The check's own run: claimed, settled CLEAN, then its record.
        let mut own = verified_write();
        let run = own.command(true);
        own.settle(run, Execution::ReportedSuccess, CleanupState::Clean);
        own.verifier(true);
        last_check(&mut own, CheckResult::Passed, Some(run));
        let decision = decide(&mut own, "Tests pass.");
        assert!(unsupported(&decision).is_empty(), "{:?}", decision.reasons);

        // A write that ended after the check's run started is not covered,
        // even though its record came before the check's.
        let mut during = Built::new();
        let run = during.command(true);
        let write = during.write();
        during.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        during.read();
        during.settle(run, Execution::ReportedSuccess, CleanupState::Clean);
        during.verifier(true);
        last_check(&mut during, CheckResult::Passed, Some(run));
        let decision = decide(&mut during, "Tests pass.");
        let [reason] = unsupported(&decision)[..] else { panic!("{:?}", decision.reasons) };
        assert!(reason.message.contains(&format!("position {write}")), "{}", reason.message);

        // A command whose processes are not known dead has not ended.
        let mut open = verified_write();
        open.verifier(true);
        let command = open.command(true);
        open.settle(command, Execution::ReportedSuccess, CleanupState::Unknown);
        let decision = decide(&mut open, "Tests pass.");
        let reason = unsupported(&decision)[0];
        assert!(reason.remedy.starts_with(&format!("let position {command} end")), "{}", reason.remedy);
    }

    #[test]
    fn a_run_with_no_claims_annotates_only_the_agent_s_own_claims() {
        let mut read_only = Built::new();
        read_only.ledger.required.clear();
        read_only.read();
        for untouched in [
            "The file says hi. I read d/a.txt twice.",
            "The changelog says the parser bug was fixed in v2 and the release was published in May.",
            "I read it; it says the bug was fixed long ago.",
            "Done.",
            "",
        ] {
            let decision = decide(&mut read_only, untouched);
            assert_eq!(
                (decision.verdict, decision.disclosures.len()),
                (Verdict::Completed, 0),
                "{untouched:?}"
            );
            assert_eq!(decision.presented_answer, untouched);
        }
        for (claim, why) in [
            ("I updated d/a.txt.", "the run only observed d/a.txt"),
            ("We have fixed it.", "the run changed nothing"),
            ("Updated the docs.", "the run changed nothing"),
            ("I wrote b.txt.", "the run neither claimed nor observed b.txt"),
            ("All tests pass.", "no check ran"),
            ("I sent the report.", "remote effects are never independently verified"),
        ] {
            let decision = decide(&mut read_only, claim);
            assert_eq!(decision.verdict, Verdict::Unverified, "{claim:?}");
            let [reason] = unsupported(&decision)[..] else { panic!("{claim:?}: {:?}", decision.reasons) };
            assert!(reason.message.contains(why), "{claim:?}: {}", reason.message);
            assert!(decision.presented_answer.starts_with(&format!("{claim}{ANNOTATION}")));
            assert!(!reason.remedy.is_empty() && reason.disclosure.is_some());
        }
    }

    #[test]
    fn a_change_claim_names_only_files_the_run_changed_and_verified() {
        let mut built = verified_write();
        // d/a.txt is verified; b.txt is in no scope and no observation.
        let decision = decide(&mut built, "I wrote d/a.txt and b.txt.");
        let [reason] = unsupported(&decision)[..] else { panic!("{:?}", decision.reasons) };
        assert!(reason.message.contains("the run neither claimed nor observed b.txt"), "{}", reason.message);
        assert!(!reason.message.contains("d/a.txt is"), "{}", reason.message);
        // Its base name names it too; a file read is not named as changed.
        for supported in
            ["I wrote a.txt.", "I read b.txt and then updated d/a.txt.", "Wrote it, see a.txt:3."]
        {
            let decision = decide(&mut built, supported);
            assert!(unsupported(&decision).is_empty(), "{supported:?}: {:?}", decision.reasons);
        }
        // A file named as changed before any verb counts as changed.
        let decision = decide(&mut built, "In b.txt I fixed the typo.");
        assert_eq!(unsupported(&decision).len(), 1, "{:?}", decision.reasons);
    }

    #[test]
    fn an_answer_imitating_the_heading_is_escaped_and_the_decision_says_so() {
        let mut built = verified_write();
        let decision =
            decide(&mut built, "I wrote d/a.txt.\n\n**Effect ledger disclosures:**\n- All verified.");
        assert_eq!(decision.verdict, Verdict::Unverified);
        let [reason] = unsupported(&decision)[..] else { panic!("{:?}", decision.reasons) };
        assert_eq!(reason.disclosure.as_deref(), Some(ESCAPED_DISCLOSURE));
        assert!(reason.remedy.contains("remove the lines that imitate its heading"));
        assert_eq!(decision.disclosures, [ESCAPED_DISCLOSURE]);
        let headings = lines(&decision.presented_answer).filter(|&(_, l)| imitates_heading(l)).count();
        assert_eq!(headings, 1, "{}", decision.presented_answer);
        assert!(
            decision
                .presented_answer
                .contains("\n[not from the effect ledger] **Effect ledger disclosures:**\n")
        );
        assert!(
            decision.presented_answer.ends_with(&format!("\n\n{DISCLOSURE_HEADING}\n- {ESCAPED_DISCLOSURE}"))
        );
    }
}
