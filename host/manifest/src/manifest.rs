//! The policy manifest (`policies/manifest.toml`): which components exist, which
//! world each exports, which tools each classifier serves, and the SHA-256 pin
//! each is loaded by (POL-1, POL-5).
//!
//! Format (written by `cargo xtask policies`, read here):
//!
//! ```toml
//! wit = "effects:policy@2.0.0"         # the contract the components were built for
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

use crate::WIT_PACKAGE;

/// The worlds of `effects:policy@2.0.0`.
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

    /// The fully qualified export names a component of this world carries:
    /// `types` (exported so that it is not imported) and the world's interface.
    pub fn export_names(self) -> [String; 2] {
        let (package, version) = WIT_PACKAGE.split_once('@').expect("a versioned package name");
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

    /// Consistency rules: the contract version, unique names, unique and
    /// non-empty tool routes for classifiers, none for evaluators, one evaluator
    /// at most, plain file names.
    fn check(&self) -> Result<(), String> {
        if self.wit != WIT_PACKAGE {
            return Err(format!("built for {:?}, this host speaks {WIT_PACKAGE:?}", self.wit));
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
            (manifest(&classifier("a", r#"["x"]"#)).replace("2.0.0", "1.0.0"), "this host speaks"),
            (manifest(&classifier("a", r#"["x"]"#)).replace(DIGEST, "abc"), "SHA-256"),
            (manifest(&classifier("a", r#"["x"]"#)) + "color = \"blue\"\n", "unknown field"),
        ];
        for (text, expected) in cases {
            let error = Manifest::parse(&text).unwrap_err();
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
        }
    }
}
