//! The policy manifest (`policies/manifest.toml`): which components exist, which
//! world each exports, which tools each classifier serves, and the SHA-256 pin
//! each is loaded by (POL-1, POL-5).
//!
//! Format (written by `cargo xtask policies`, read here):
//!
//! ```toml
//! wit = "effects:policy@2.1.0"         # the contract the components were built for
//! route = "debian"                      # toolchain route the pinned bytes come from
//! toolchain = "rustc 1.96.0 ..."        # that toolchain's version line
//!
//! [[component]]
//! name = "classify-unbound"
//! world = "classifier"                  # or "evaluator"
//! file = "classify-unbound.wasm"        # relative to the manifest
//! sha256 = "<64 hex>"
//! tools = ["*"]                         # classifiers only; "*" is the fallback
//! ```
//!
//! This module parses and checks the table; it reads no files itself.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::digest::Sha256Digest;

/// A version of the contract this host speaks. A component is built against
/// one; the host generates bindings for each (`host/src/policy/bindings.rs`)
/// and tells them apart by the export names a component carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Contract {
    /// `effects:policy@2.0.0`, frozen in `wit/2.0.0/policy.wit`: still loaded
    /// and run unchanged (SPEC revision 3, POL-1).
    #[serde(rename = "effects:policy@2.0.0")]
    V2_0,
    /// `effects:policy@2.1.0`, `wit/policy.wit`: adds `postcondition.content`,
    /// two reason codes and `evidence-ledger.concurrent`.
    #[serde(rename = "effects:policy@2.1.0")]
    V2_1,
}

impl Contract {
    /// The version components are built against today.
    pub const CURRENT: Contract = Contract::V2_1;

    /// Every version this host speaks, newest first.
    pub const ALL: [Contract; 2] = [Contract::V2_1, Contract::V2_0];

    /// The versioned package name, as a manifest's `wit` line spells it.
    pub const fn package(self) -> &'static str {
        match self {
            Contract::V2_0 => "effects:policy@2.0.0",
            Contract::V2_1 => "effects:policy@2.1.0",
        }
    }

    /// The contract `package` names, if this host speaks it.
    pub fn parse(package: &str) -> Option<Contract> {
        Contract::ALL.into_iter().find(|c| c.package() == package)
    }

    /// The WIT file of this version, relative to the repository root.
    pub const fn wit_file(self) -> &'static str {
        match self {
            Contract::V2_0 => "wit/2.0.0/policy.wit",
            Contract::V2_1 => "wit/policy.wit",
        }
    }

    /// Every package this host speaks, for messages: `"a", "b"`.
    pub fn spoken() -> String {
        Contract::ALL.map(|c| format!("{:?}", c.package())).join(", ")
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.package())
    }
}

/// The worlds of `effects:policy` (the same two in every [`Contract`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum World {
    /// Exports `classify`.
    Classifier,
    /// Exports `evaluate`.
    Evaluator,
}

impl World {
    /// The interface this world exports.
    pub fn interface(self) -> &'static str {
        match self {
            World::Classifier => "classify",
            World::Evaluator => "evaluate",
        }
    }

    /// The fully qualified export names a component of this world built
    /// against `contract` carries: `types` (exported so that it is not
    /// imported) and the world's interface.
    pub fn export_names(self, contract: Contract) -> [String; 2] {
        let (package, version) = contract.package().split_once('@').expect("a versioned package name");
        [format!("{package}/types@{version}"), format!("{package}/{}@{version}", self.interface())]
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            World::Classifier => "classifier",
            World::Evaluator => "evaluator",
        })
    }
}

/// The tool name a fallback classifier serves.
pub const FALLBACK_TOOL: &str = "*";

/// One `[[component]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentEntry {
    /// Unique name.
    pub name: String,
    /// The world it exports.
    pub world: World,
    /// File name, relative to the manifest's directory.
    pub file: String,
    /// The pin.
    pub sha256: Sha256Digest,
    /// Tools served (classifiers only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// A parsed and checked manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The WIT package the components were built against.
    pub wit: String,
    /// Toolchain route of the pinned bytes (`debian` or `rustup`).
    pub route: String,
    /// Toolchain version line.
    pub toolchain: String,
    /// The components.
    #[serde(rename = "component", default)]
    pub components: Vec<ComponentEntry>,
}

impl Manifest {
    /// Parses and checks a manifest.
    pub fn parse(text: &str) -> Result<Self, String> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| e.to_string())?;
        manifest.check()?;
        Ok(manifest)
    }

    /// Renders the manifest as TOML, with a header saying who writes it.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).expect("a manifest always serializes");
        format!(
            "# Written by `cargo xtask policies`; pinned digests are checked by `cargo xtask policies --check`.\n{body}"
        )
    }

    /// The contract the components were built against (checked by
    /// [`Manifest::parse`] to be one this host speaks).
    pub fn contract(&self) -> Option<Contract> {
        Contract::parse(&self.wit)
    }

    /// Consistency rules: a contract version this host speaks, unique names, unique and
    /// non-empty tool routes for classifiers, none for evaluators, one evaluator
    /// at most, plain file names.
    fn check(&self) -> Result<(), String> {
        if self.contract().is_none() {
            return Err(format!("built for {:?}, this host speaks {}", self.wit, Contract::spoken()));
        }
        let mut names = BTreeMap::new();
        let mut tools: BTreeMap<&str, &str> = BTreeMap::new();
        let mut evaluators = 0;
        for entry in &self.components {
            if names.insert(entry.name.as_str(), ()).is_some() {
                return Err(format!("component name {:?} appears twice", entry.name));
            }
            if entry.file.is_empty() || entry.file.contains('/') || entry.file.starts_with('.') {
                return Err(format!(
                    "component {}: file {:?} must be a plain file name beside the manifest",
                    entry.name, entry.file
                ));
            }
            match entry.world {
                World::Classifier if entry.tools.is_empty() => {
                    return Err(format!(
                        "classifier {} serves no tools (add tools = [\"*\"] for a fallback)",
                        entry.name
                    ));
                }
                World::Classifier => {
                    for tool in &entry.tools {
                        if let Some(other) = tools.insert(tool, &entry.name) {
                            return Err(format!(
                                "tool {tool:?} is served by both {other} and {}",
                                entry.name
                            ));
                        }
                    }
                }
                World::Evaluator if !entry.tools.is_empty() => {
                    return Err(format!("evaluator {} must not list tools", entry.name));
                }
                World::Evaluator => evaluators += 1,
            }
        }
        if evaluators > 1 {
            return Err(format!("{evaluators} evaluators listed; a manifest has one at most (POL-5)"));
        }
        Ok(())
    }

    /// The component that classifies `tool`: its own entry, else the `*` fallback.
    pub fn classifier_for(&self, tool: &str) -> Option<&ComponentEntry> {
        let serves = |wanted: &str| {
            self.components
                .iter()
                .find(|c| c.world == World::Classifier && c.tools.iter().any(|t| t == wanted))
        };
        serves(tool).or_else(|| serves(FALLBACK_TOOL))
    }

    /// The evaluator, if any.
    pub fn evaluator(&self) -> Option<&ComponentEntry> {
        self.components.iter().find(|c| c.world == World::Evaluator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::WIT_PACKAGE;

    fn manifest(components: &str) -> String {
        format!("wit = \"{WIT_PACKAGE}\"\nroute = \"debian\"\ntoolchain = \"t\"\n{components}")
    }

    const DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn classifier(name: &str, tools: &str) -> String {
        format!(
            "[[component]]\nname = \"{name}\"\nworld = \"classifier\"\nfile = \"{name}.wasm\"\nsha256 = \"{DIGEST}\"\ntools = {tools}\n"
        )
    }

    #[test]
    fn routes_tools_to_their_classifier_then_the_fallback() {
        let text = manifest(&(classifier("fs", r#"["write_file"]"#) + &classifier("any", r#"["*"]"#)));
        let parsed = Manifest::parse(&text).unwrap();
        assert_eq!(parsed.classifier_for("write_file").unwrap().name, "fs");
        assert_eq!(parsed.classifier_for("bash").unwrap().name, "any");
        assert!(parsed.evaluator().is_none());
        assert_eq!(Manifest::parse(&parsed.to_toml()).unwrap(), parsed);
    }

    #[test]
    fn refuses_inconsistent_manifests() {
        let cases = [
            (manifest(&(classifier("a", r#"["x"]"#) + &classifier("a", r#"["y"]"#))), "appears twice"),
            (manifest(&(classifier("a", r#"["x"]"#) + &classifier("b", r#"["x"]"#))), "served by both"),
            (manifest(&classifier("a", "[]")), "serves no tools"),
            (manifest(&classifier("a", r#"["x"]"#).replace("a.wasm", "../a.wasm")), "plain file name"),
            (manifest(&classifier("a", r#"["x"]"#)).replace("2.1.0", "1.0.0"), "this host speaks"),
            (manifest(&classifier("a", r#"["x"]"#)).replace("2.1.0", "9.9.9"), "\"effects:policy@2.0.0\""),
            (manifest(&classifier("a", r#"["x"]"#)).replace(DIGEST, "abc"), "SHA-256"),
            (manifest(&classifier("a", r#"["x"]"#)) + "color = \"blue\"\n", "unknown field"),
        ];
        for (text, expected) in cases {
            let error = Manifest::parse(&text).unwrap_err();
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
        }
    }

    #[test]
    fn accepts_every_contract_the_host_speaks() {
        for contract in Contract::ALL {
            let text = manifest(&classifier("a", r#"["x"]"#)).replace(WIT_PACKAGE, contract.package());
            assert_eq!(Manifest::parse(&text).unwrap().contract(), Some(contract));
        }
        assert_eq!(WIT_PACKAGE, "effects:policy@2.1.0");
        assert_eq!(World::Evaluator.export_names(Contract::V2_0)[1], "effects:policy/evaluate@2.0.0");
    }
}
