//! `effects policy test`: the conformance vectors (`completion::suite`)
//! against the chosen evaluator and classifiers, printed as text, JSON,
//! JUnit XML or TAP, with rule coverage (and, asked, reason-code coverage).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use regex::Regex;
use serde_json::{Value, json};

use effect_ledger::completion::coverage::{
    ReasonCoverage, Requirement, RuleCoverage, RuleTable, coverage, reason_coverage,
};
use effect_ledger::completion::suite::{Answerers, Checked, VectorKind, check, files};
use effect_ledger::completion::{Evaluator, evaluator_of};
use effect_ledger::policy::{
    self, ClassifierComponent, LoadedComponent, NativeEvaluator, PolicyOptions, PolicySet, PolicySource,
    World,
};

use super::input::read_bounded_text;
use super::output::out;
use super::policy::{Answering, Format};
use super::{Failure, exit};

/// Runs `effects policy test`.
pub fn test(
    paths: &[PathBuf],
    rules: &Path,
    answering: &Answering<'_>,
    filter: Option<&str>,
    reasons: bool,
    format: Format,
) -> Result<ExitCode, Failure> {
    let text = read_bounded_text(rules, "the rules document").map_err(|f| {
        Failure::new(f.code, f.error.context("run from the repository root or give --rules FILE"))
    })?;
    let table = RuleTable::parse(&text, &rules.display().to_string())
        .map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!(e)))?;
    let filter = filter
        .map(Regex::new)
        .transpose()
        .map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!("--run: not a regular expression: {e}")))?;
    let mut selected = files(paths).map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!(e)))?;
    if let Some(filter) = &filter {
        selected.retain(|file| file.file_name().is_some_and(|name| filter.is_match(&name.to_string_lossy())));
        if selected.is_empty() {
            return Err(Failure::new(
                exit::BAD_INPUT,
                anyhow!("--run {filter}: no vector file name matches"),
            ));
        }
    }

    if answering.evaluator.is_none() || answering.classifier.is_none() {
        super::policy::warn_if_embedded_differ();
    }
    let mut shipped;
    let mut loaded;
    let mut evaluator = if answering.native {
        Evaluator::Native(NativeEvaluator)
    } else if let Some(file) = answering.evaluator {
        loaded = match load(file, World::Evaluator)? {
            LoadedComponent::Evaluator(component) => component,
            LoadedComponent::Classifier(_) => unreachable!("loaded as an evaluator"),
        };
        Evaluator::Component(&mut loaded)
    } else {
        shipped = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default())
            .map_err(|e| Failure::new(exit::REFUSED, e))?;
        evaluator_of(shipped.evaluator())
    };
    let mut classifiers = Classifiers::new(answering.classifier)?;
    let mut decide = |ledger: &_| evaluator.decide(ledger);
    let mut classify = |operation: &Value| classifiers.classify(operation);
    let mut answerers = Answerers { decide: &mut decide, classify: &mut classify };
    let checked: Vec<Checked> = selected.iter().map(|file| check(file, &mut answerers)).collect();

    let failed = checked.iter().filter(|c| !c.result.passed()).count();
    let of_kind = |kind| -> Vec<_> {
        checked.iter().filter(|c| c.kind == Some(kind)).map(|c| c.result.clone()).collect()
    };
    // The rules document lists the evaluator's rules: only evaluator vectors
    // count for them. Classifier vectors are counted by rule on their own.
    let evaluator_results = of_kind(VectorKind::Evaluator);
    let covered = coverage(&table, &evaluator_results);
    let by_classifier_rule = coverage(&RuleTable { rules: Vec::new() }, &of_kind(VectorKind::Classifier));
    // A subset of the vectors says nothing of what the whole set covers:
    // the requirement holds for whole directories of evaluator vectors.
    #[allow(clippy::disallowed_methods)] // the paths the command line names, as `files` read them
    let whole = filter.is_none() && paths.iter().all(|p| p.is_dir()) && !evaluator_results.is_empty();
    let uncovered: Vec<&str> = if whole {
        covered.iter().filter(|c| c.uncovered()).map(|c| c.rule.as_str()).collect()
    } else {
        Vec::new()
    };
    let expected: Vec<(&Path, &[_])> = checked
        .iter()
        .filter(|c| c.kind == Some(VectorKind::Evaluator))
        .map(|c| (c.result.file.as_path(), c.reasons.as_slice()))
        .collect();
    let by_reason = reasons.then(|| reason_coverage(&expected));
    let report = Report {
        checked: &checked,
        covered: &covered,
        by_classifier_rule: &by_classifier_rule,
        by_reason: by_reason.as_deref(),
        uncovered: &uncovered,
        failed,
        rules,
    };
    match format {
        Format::Text => report.text(),
        Format::Json => report.json(),
        Format::Junit => report.junit(),
        Format::Tap => report.tap(),
    }?;
    if !uncovered.is_empty() {
        let (which, it) = if uncovered.len() == 1 { ("it", "it") } else { ("them", "each") };
        eprintln!(
            "effects: no vector exercises {}, which {} marks required: add a vector whose \"rule\" (or \
             \"rules\" list) names {it}, or mark {which} `pending: why` there",
            uncovered.join(", "),
            rules.display()
        );
    }
    Ok(if failed == 0 && uncovered.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(exit::PROBLEMS) })
}

/// A component file, loaded unpinned into `world` (exit 3 when refused).
fn load(file: &Path, world: World) -> Result<LoadedComponent, Failure> {
    super::policy::load_file(file, "the component", world, &PolicyOptions::default())
}

/// Who classifies a classifier vector's operation: one component for all,
/// or the shipped set's classifier for the operation's tool, loaded on
/// first use.
enum Classifiers {
    One(Box<ClassifierComponent>),
    Routed(Box<PolicySet>),
}

impl Classifiers {
    fn new(file: Option<&Path>) -> Result<Self, Failure> {
        Ok(match file {
            Some(file) => match load(file, World::Classifier)? {
                LoadedComponent::Classifier(component) => Classifiers::One(Box::new(component)),
                LoadedComponent::Evaluator(_) => unreachable!("loaded as a classifier"),
            },
            None => Classifiers::Routed(Box::new(
                PolicySet::load_lazily(PolicySource::Shipped, PolicyOptions::default())
                    .map_err(|e| Failure::new(exit::REFUSED, e))?,
            )),
        })
    }

    fn classify(&mut self, operation: &Value) -> Result<Value, String> {
        let component = match self {
            Classifiers::One(component) => component.as_mut(),
            Classifiers::Routed(set) => {
                let tool = operation["tool"].as_str().ok_or("the operation names no `tool`")?;
                set.classifier(tool).map_err(|e| e.to_string())?
            }
        };
        policy::classify_json(component, operation).map_err(|e| e.to_string())
    }
}

/// What `policy test` prints, in each format.
struct Report<'a> {
    checked: &'a [Checked],
    covered: &'a [RuleCoverage],
    by_classifier_rule: &'a [RuleCoverage],
    by_reason: Option<&'a [ReasonCoverage]>,
    uncovered: &'a [&'a str],
    failed: usize,
    rules: &'a Path,
}

/// A vector's name: its file name.
fn name(checked: &Checked) -> String {
    checked.result.file.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

impl Report<'_> {
    fn passed(&self) -> usize {
        self.checked.len() - self.failed
    }

    fn text(&self) -> Result<(), Failure> {
        for checked in self.checked {
            let result = &checked.result;
            let file = name(checked);
            if result.passed() {
                out!("ok    {file} ({}: {})", result.rule, result.title);
            } else {
                out!("FAIL  {file} ({}: {})", result.rule, result.title);
                for failure in &result.failures {
                    out!("        {failure}");
                }
            }
        }
        let evaluator_vectors = self.checked.iter().filter(|c| c.kind == Some(VectorKind::Evaluator)).count();
        if evaluator_vectors == 0 {
            out!("coverage of the rules {} lists: no evaluator vector ran", self.rules.display());
        }
        if evaluator_vectors > 0 {
            out!("coverage of the rules {} lists:", self.rules.display());
        }
        for rule in self.covered.iter().filter(|_| evaluator_vectors > 0) {
            let status = match &rule.requirement {
                Some(Requirement::Required) if rule.vectors.is_empty() => "required, UNCOVERED".to_owned(),
                Some(Requirement::Required) => "required".to_owned(),
                Some(Requirement::Pending(why)) if rule.vectors.is_empty() => format!("pending: {why}"),
                Some(Requirement::Pending(_)) => {
                    "pending, but it has vectors now: mark it required".to_owned()
                }
                None => format!("not listed in {}", self.rules.display()),
            };
            out!("  {:<8} {:>3} vector(s)  {status}", rule.rule, rule.vectors.len());
        }
        if !self.by_classifier_rule.is_empty() {
            out!("classifier vectors per rule:");
            for rule in self.by_classifier_rule {
                out!("  {:<8} {:>3} vector(s)", rule.rule, rule.vectors.len());
            }
        }
        if let Some(by_reason) = self.by_reason {
            out!("coverage of the reason codes (evaluator vectors):");
            for reason in by_reason {
                let none = if reason.vectors.is_empty() { "  NO VECTOR EXPECTS IT" } else { "" };
                out!("  {:<28} {:>3} vector(s){none}", reason.code, reason.vectors.len());
            }
        }
        out!("{} passed, {} failed", self.passed(), self.failed);
        Ok(())
    }

    fn json(&self) -> Result<(), Failure> {
        for checked in self.checked {
            let result = &checked.result;
            out!(
                "{}",
                json!({
                    "file": name(checked), "kind": checked.kind, "rule": result.rule, "title": result.title,
                    "passed": result.passed(), "failures": result.failures,
                })
            );
        }
        out!("{}", json!({ "coverage": self.covered, "classifier_rules": self.by_classifier_rule }));
        if let Some(by_reason) = self.by_reason {
            out!("{}", json!({ "reasons": by_reason }));
        }
        out!(
            "{}",
            json!({ "summary": { "passed": self.passed(), "failed": self.failed, "uncovered": self.uncovered } })
        );
        Ok(())
    }

    /// JUnit XML as CI servers read it: one suite, a testcase per vector
    /// (class: its rule), a `failure` holding what differed.
    fn junit(&self) -> Result<(), Failure> {
        out!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>");
        out!(
            "<testsuites name=\"effects policy test\" tests=\"{}\" failures=\"{}\">",
            self.checked.len(),
            self.failed
        );
        out!(
            "  <testsuite name=\"conformance vectors\" tests=\"{}\" failures=\"{}\">",
            self.checked.len(),
            self.failed
        );
        for checked in self.checked {
            let result = &checked.result;
            let case = format!(
                "    <testcase classname=\"{}\" name=\"{}\"",
                xml(&result.rule),
                xml(&format!("{}: {}", name(checked), result.title))
            );
            if result.passed() {
                out!("{case}/>");
            } else {
                out!("{case}>");
                out!(
                    "      <failure message=\"{}\">{}</failure>",
                    xml(result.failures.first().map_or("", String::as_str)),
                    xml(&result.failures.join("\n"))
                );
                out!("    </testcase>");
            }
        }
        out!("  </testsuite>");
        out!("</testsuites>");
        Ok(())
    }

    /// TAP version 13: a test point per vector, what differed as YAML.
    fn tap(&self) -> Result<(), Failure> {
        out!("TAP version 13");
        out!("1..{}", self.checked.len());
        for (i, checked) in self.checked.iter().enumerate() {
            let result = &checked.result;
            let status = if result.passed() { "ok" } else { "not ok" };
            // One line, and a `#` is not read as a directive.
            let description = format!("{} ({}: {})", name(checked), result.rule, result.title)
                .replace(['\n', '\r'], " ")
                .replace('#', "\\#");
            out!("{status} {} - {description}", i + 1);
            if !result.passed() {
                out!("  ---");
                out!("  failures:");
                for failure in &result.failures {
                    out!("    - {}", serde_json::to_string(failure).expect("a string serializes"));
                }
                out!("  ...");
            }
        }
        Ok(())
    }
}

/// `text` escaped for an XML attribute or element.
fn xml(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            // Kept as they are in an attribute too, where a parser would
            // otherwise read them as spaces.
            '\n' => escaped.push_str("&#10;"),
            '\r' => escaped.push_str("&#13;"),
            '\u{FFFE}' | '\u{FFFF}' => escaped.push('\u{FFFD}'),
            // XML 1.0 admits no other control character, even escaped.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => escaped.push('\u{FFFD}'),
            c => escaped.push(c),
        }
    }
    escaped
}
