//! What a component file is, read from its bytes without compiling it: its
//! top-level imports and exports, the world and contract version those exports
//! make it, its size and digest. The loader uses this to refuse a component with imports before
//! wasmtime sees it (POL-1); `effects policy inspect` prints it.
//!
//! Only the outermost component's import and export sections count: nested core
//! modules and components can import only what the outer component provides, so
//! an outer component with no imports gives its insides no authority.

use serde::Serialize;
use wasmparser::{Encoding, Parser, Payload};

use crate::digest::Sha256Digest;

use super::{Contract, World};

/// The shape of one component file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentShape {
    /// The world its exports make it, if they match one of ours exactly.
    pub world: Option<World>,
    /// The contract version those exports name (`effects:policy/classify@2.0.0`
    /// is 2.0.0's classifier), when `world` is one.
    pub contract: Option<Contract>,
    /// Top-level export names.
    pub exports: Vec<String>,
    /// Top-level import names; empty for every component we ship.
    pub imports: Vec<String>,
    /// SHA-256 of the file.
    pub sha256: Sha256Digest,
    /// Size in bytes.
    pub size: usize,
}

/// Reads the shape of a component. Fails on bytes that are not a component
/// (a core module, garbage, a truncated file).
pub fn inspect(bytes: &[u8]) -> Result<ComponentShape, String> {
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    // Depth of nesting: 0 is the outer component's own sections.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| e.to_string())? {
            Payload::Version { encoding, .. } if depth == 0 && encoding != Encoding::Component => {
                return Err(
                    "this is a core wasm module, not a component (componentize it with wit-component)".into(),
                );
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.map_err(|e| e.to_string())?.name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.map_err(|e| e.to_string())?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    let mut sorted = exports.clone();
    sorted.sort();
    let found = Contract::ALL
        .into_iter()
        .flat_map(|contract| [World::Classifier, World::Evaluator].map(|world| (world, contract)))
        .find(|&(world, contract)| {
            let mut expected = world.export_names(contract);
            expected.sort();
            sorted == expected
        });
    let (world, contract) = (found.map(|(world, _)| world), found.map(|(_, contract)| contract));
    Ok(ComponentShape {
        world,
        contract,
        exports,
        imports,
        sha256: Sha256Digest::of(bytes),
        size: bytes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_is_not_a_component() {
        let core = b"\0asm\x01\0\0\0";
        assert!(inspect(core).unwrap_err().contains("core wasm module"));
    }

    #[test]
    fn garbage_and_truncation_fail() {
        assert!(inspect(b"not wasm at all").is_err());
        assert!(inspect(b"\0asm\x0d\0\x01").is_err());
    }

    #[test]
    fn an_empty_component_has_no_world() {
        let empty = b"\0asm\x0d\0\x01\0";
        let shape = inspect(empty).unwrap();
        assert_eq!((shape.world, shape.contract), (None, None));
        assert!(shape.imports.is_empty() && shape.exports.is_empty());
        assert_eq!(shape.size, 8);
    }
}
