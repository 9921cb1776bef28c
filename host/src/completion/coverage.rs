//! Rule coverage of the conformance vectors (like `opa test --coverage`):
//! for each rule the evaluator decides, how many vectors exercise it, and
//! which rules the project requires vectors for have none.
//!
//! The list of the evaluator's rules is the project's own documentation, not
//! a second copy in code: `docs/rules.md` has a section headed
//! [`SECTION`] holding one table,
//!
//! ```markdown
//! | rule | vectors |
//! | --- | --- |
//! | `CMP-2` | required |
//! | `OUT-1` | pending: UNKNOWN outcomes in the ledger (revision 2) |
//! ```
//!
//! one row per rule ID the evaluator decides. `required` means at least one
//! vector must exercise the rule; `pending: why` lists a rule whose vectors
//! are still to come (it is reported, never required). Anything else in the
//! vectors cell, a first cell that is not one backquoted rule ID, a rule
//! listed twice or a section with no rows is an error naming the line: a typo
//! must not quietly stop requiring a rule. Making a pending rule required is
//! a one-word change of its row.
//!
//! A vector exercises the rule of its `rule` field and those of its optional
//! `rules` list (`vectors.rs`).

use std::collections::BTreeMap;

use serde::Serialize;

use std::path::Path;

use super::vectors::VectorResult;
use crate::model::ReasonCode;

/// The heading of the section of the rules document that lists the
/// evaluator's rules and whether vectors are required for each.
pub const SECTION: &str = "## Conformance vectors per rule";

/// Whether the docs require vectors for a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Requirement {
    /// At least one vector must exercise it.
    Required,
    /// Its vectors are still to come, and why.
    Pending(String),
}

/// The evaluator's rules as the docs list them, in the docs' order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTable {
    /// Each rule ID and its requirement.
    pub rules: Vec<(String, Requirement)>,
}

/// A rule ID: capitals, `-`, digits, an optional lower-case suffix (`CMP-7b`).
fn is_rule_id(text: &str) -> bool {
    let Some((family, number)) = text.split_once('-') else { return false };
    let digits = number.trim_end_matches(|c: char| c.is_ascii_lowercase());
    !family.is_empty()
        && family.bytes().all(|b| b.is_ascii_uppercase())
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
}

impl RuleTable {
    /// The table of `text`'s [`SECTION`] (a markdown document, named
    /// `display` in errors).
    pub fn parse(text: &str, display: &str) -> Result<Self, String> {
        let mut lines = text.lines().enumerate();
        if !lines.by_ref().any(|(_, line)| line.trim_end() == SECTION) {
            return Err(format!(
                "{display} has no `{SECTION}` section: add it, with a table of `| rule | vectors |` rows \
                 (`required` or `pending: why`), one per rule ID the evaluator decides"
            ));
        }
        let mut rules: Vec<(String, Requirement)> = Vec::new();
        for (index, line) in lines {
            let line = line.trim();
            if line.starts_with("## ") {
                break;
            }
            let Some(row) = line.strip_prefix('|') else { continue };
            let cells: Vec<&str> = row.trim_end_matches('|').split('|').map(str::trim).collect();
            let at = |why: String| format!("{display}:{}: {why}", index + 1);
            if cells.len() != 2 {
                return Err(at(format!("a row of `{SECTION}` has two cells, rule and vectors: {line}")));
            }
            // The header and the separator row.
            if cells[0] == "rule" || cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
                continue;
            }
            let rule = cells[0]
                .strip_prefix('`')
                .and_then(|c| c.strip_suffix('`'))
                .filter(|id| is_rule_id(id))
                .ok_or_else(|| at(format!("{:?} is not one backquoted rule ID like `CMP-2`", cells[0])))?;
            let requirement = match cells[1] {
                "required" => Requirement::Required,
                pending if pending.starts_with("pending:") && pending.len() > "pending:".len() => {
                    Requirement::Pending(pending["pending:".len()..].trim().to_owned())
                }
                other => {
                    return Err(at(format!(
                        "the vectors of {rule} are {other:?}; write `required`, or `pending: why` for a rule \
                         whose vectors are still to come"
                    )));
                }
            };
            if rules.iter().any(|(listed, _)| listed == rule) {
                return Err(at(format!("{rule} is listed twice")));
            }
            rules.push((rule.to_owned(), requirement));
        }
        if rules.is_empty() {
            return Err(format!("{display}: the `{SECTION}` section has no rule rows"));
        }
        Ok(Self { rules })
    }
}

/// One rule's coverage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleCoverage {
    /// The rule ID.
    pub rule: String,
    /// What the docs say of it; `None` for a rule only vectors name.
    pub requirement: Option<Requirement>,
    /// The vector files that exercise it, by file name.
    pub vectors: Vec<String>,
}

impl RuleCoverage {
    /// Required and exercised by no vector.
    pub fn uncovered(&self) -> bool {
        self.requirement == Some(Requirement::Required) && self.vectors.is_empty()
    }
}

/// Coverage of every rule the docs list, in their order, then of every rule
/// only vectors name, by ID.
pub fn coverage(table: &RuleTable, results: &[VectorResult]) -> Vec<RuleCoverage> {
    let mut by_rule: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for result in results {
        let file = result.file.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        for rule in &result.exercises {
            by_rule.entry(rule.as_str()).or_default().push(file.clone());
        }
    }
    let mut covered: Vec<RuleCoverage> = table
        .rules
        .iter()
        .map(|(rule, requirement)| RuleCoverage {
            rule: rule.clone(),
            requirement: Some(requirement.clone()),
            vectors: by_rule.remove(rule.as_str()).unwrap_or_default(),
        })
        .collect();
    covered.extend(by_rule.into_iter().map(|(rule, vectors)| RuleCoverage {
        rule: rule.to_owned(),
        requirement: None,
        vectors,
    }));
    covered
}

/// How many evaluator vectors expect one reason code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasonCoverage {
    /// The code, as the log spells it.
    pub code: String,
    /// The vector files that expect it, by file name.
    pub vectors: Vec<String>,
}

/// Every reason code the evaluator contract defines, with the vectors that
/// expect it (`expected`: each vector's file and its expected codes), in the
/// contract's order: a code no vector expects is one no vector pins.
pub fn reason_coverage(expected: &[(&Path, &[ReasonCode])]) -> Vec<ReasonCoverage> {
    reason_codes()
        .into_iter()
        .map(|code| {
            let vectors = expected
                .iter()
                .filter(|(_, codes)| codes.iter().any(|c| code_name(c) == code))
                .map(|(file, _)| {
                    file.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
                })
                .collect();
            ReasonCoverage { code, vectors }
        })
        .collect()
}

fn code_name(code: &ReasonCode) -> String {
    serde_json::to_value(code).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// Every [`ReasonCode`], by name, from its own schema: a code added to the
/// contract is counted without a list here to keep in step.
fn reason_codes() -> Vec<String> {
    fn collect(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("const", serde_json::Value::String(name)) => into.push(name.clone()),
                        ("enum", serde_json::Value::Array(names)) => {
                            into.extend(names.iter().filter_map(|n| n.as_str().map(str::to_owned)));
                        }
                        _ => collect(value, into),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|item| collect(item, into)),
            _ => {}
        }
    }
    let schema = serde_json::to_value(schemars::schema_for!(ReasonCode)).expect("a schema serializes");
    let mut names = Vec::new();
    collect(&schema, &mut names);
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_is_listed_once_and_counted_where_a_vector_expects_it() {
        let codes = reason_codes();
        assert!(
            codes.contains(&"POLICY_FAILURE".to_owned()) && codes.contains(&"UNCONFINED_COMMAND".to_owned())
        );
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len(), "{codes:?}");
        let expected: [(&Path, &[ReasonCode]); 2] = [
            (Path::new("d/a.json"), &[ReasonCode::PolicyFailure]),
            (Path::new("d/b.json"), &[ReasonCode::PolicyFailure, ReasonCode::RunningLaunch]),
        ];
        let covered = reason_coverage(&expected);
        assert_eq!(covered.len(), codes.len());
        let of = |code: &str| covered.iter().find(|c| c.code == code).unwrap().vectors.clone();
        assert_eq!(of("POLICY_FAILURE"), ["a.json", "b.json"]);
        assert_eq!(of("RUNNING_LAUNCH"), ["b.json"]);
        assert!(of("UNCONFINED_COMMAND").is_empty());
    }

    const DOC: &str = "# Rules\n\n## Conformance vectors per rule\n\nSome words.\n\n| rule | vectors |\n\
                       | --- | --- |\n| `CMP-2` | required |\n| `CMP-7b` | required |\n\
                       | `OUT-1` | pending: UNKNOWN outcomes |\n\n## Next\n\n| `CMP-9` | required |\n";

    fn result(file: &str, exercises: &[&str]) -> VectorResult {
        VectorResult {
            file: file.into(),
            rule: exercises[0].into(),
            exercises: exercises.iter().map(|r| (*r).to_owned()).collect(),
            title: String::new(),
            failures: Vec::new(),
            since: None,
        }
    }

    #[test]
    fn the_section_s_table_is_the_list_and_nothing_after_it() {
        let table = RuleTable::parse(DOC, "rules.md").unwrap();
        assert_eq!(
            table.rules,
            [
                ("CMP-2".to_owned(), Requirement::Required),
                ("CMP-7b".to_owned(), Requirement::Required),
                ("OUT-1".to_owned(), Requirement::Pending("UNKNOWN outcomes".into())),
            ]
        );
    }

    #[test]
    fn a_malformed_table_is_an_error_naming_the_line() {
        let error = RuleTable::parse("# Rules\n", "rules.md").unwrap_err();
        assert!(error.contains(SECTION), "{error}");
        let typo = DOC.replace("| `CMP-2` | required |", "| `CMP-2` | requird |");
        let error = RuleTable::parse(&typo, "rules.md").unwrap_err();
        assert!(error.starts_with("rules.md:9:") && error.contains("requird"), "{error}");
        let bare = DOC.replace("`CMP-2`", "CMP-2");
        assert!(RuleTable::parse(&bare, "rules.md").unwrap_err().contains("backquoted rule ID"));
        let twice = DOC.replace("`CMP-7b`", "`CMP-2`");
        assert!(RuleTable::parse(&twice, "rules.md").unwrap_err().contains("CMP-2 is listed twice"));
        let empty = DOC.replace("pending: UNKNOWN outcomes", "pending:");
        assert!(RuleTable::parse(&empty, "rules.md").is_err());
        let rowless = "## Conformance vectors per rule\n\n| rule | vectors |\n| --- | --- |\n";
        assert!(RuleTable::parse(rowless, "rules.md").unwrap_err().contains("no rule rows"));
    }

    #[test]
    fn every_rule_a_vector_names_counts_and_required_rules_without_one_are_uncovered() {
        let table = RuleTable::parse(DOC, "rules.md").unwrap();
        let results = [result("a.json", &["CMP-2", "OUT-1"]), result("b.json", &["CMP-2", "ZZZ-1"])];
        let covered = coverage(&table, &results);
        let summary: Vec<(&str, usize, bool)> =
            covered.iter().map(|c| (c.rule.as_str(), c.vectors.len(), c.uncovered())).collect();
        assert_eq!(
            summary,
            [("CMP-2", 2, false), ("CMP-7b", 0, true), ("OUT-1", 1, false), ("ZZZ-1", 1, false)]
        );
        assert_eq!(covered[3].requirement, None);
        assert_eq!(covered[0].vectors, ["a.json", "b.json"]);
    }
}
