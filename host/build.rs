//! Embeds the shipped policies (`policies/manifest.toml` and every file it
//! lists) into the `effects` binary, so it runs on the embedded default from
//! anywhere. Only the file names are read here; the digests are checked at load
//! time, every time, like any other source (POL-1).

#![allow(clippy::disallowed_methods)] // a build script reads the source tree

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let policies = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../policies");
    let manifest = policies.join("manifest.toml");
    println!("cargo::rerun-if-changed={}", manifest.display());
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("cannot read {}: {e} (run `cargo xtask policies`)", manifest.display()));
    let table: toml::Table = text.parse().expect("policies/manifest.toml is not TOML");
    let mut generated =
        format!("pub(super) const MANIFEST: &str = include_str!({:?});\n", manifest.display().to_string());
    generated.push_str("pub(super) const FILES: &[(&str, &[u8])] = &[\n");
    let components = table.get("component").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    for component in components {
        let file = component.get("file").and_then(|f| f.as_str()).expect("every component has a file");
        let path = policies.join(file);
        println!("cargo::rerun-if-changed={}", path.display());
        writeln!(generated, "    ({file:?}, include_bytes!({:?})),", path.display().to_string()).unwrap();
    }
    generated.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("shipped.rs");
    std::fs::write(out, generated).unwrap();
}
