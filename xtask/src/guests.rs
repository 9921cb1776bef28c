//! The guest workspace (`guest/`): which crates are policy components, and how
//! each becomes a component file.
//!
//! A crate is a component when its `Cargo.toml` has
//! `[package.metadata.effects]` with `world` (`classifier` / `evaluator`),
//! `shipped` (true for `policies/`, false for test fixtures under
//! `fixtures/` and for crates `effects policy new` made) and, for shipped
//! classifiers, `tools`. Each is compiled as a cdylib for wasm32-unknown-unknown
//! with paths remapped (so the bytes do not depend on where the checkout is),
//! then componentized with `wit-component`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use effects_manifest::World;
use serde::Deserialize;

use crate::toolchain::Route;

/// The shadow stack each guest is linked with (see `compile_core`).
const GUEST_STACK_BYTES: u32 = 128 << 10;

/// The `[package.metadata.effects]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    world: World,
    shipped: bool,
    #[serde(default)]
    tools: Vec<String>,
}

/// One component crate of the guest workspace.
#[derive(Debug, Clone)]
pub struct Guest {
    /// Package name; also the component name and file stem.
    pub name: String,
    /// World it exports.
    pub world: World,
    /// Shipped in `policies/`.
    pub shipped: bool,
    /// A test fixture: a crate under `fixtures/` (never shipped). A crate
    /// that is neither (`effects policy new`'s) is built only when named.
    pub fixture: bool,
    /// Tools served (shipped classifiers).
    pub tools: Vec<String>,
}

/// Lists the component crates of `guest_dir`'s workspace, sorted by name.
pub fn discover(guest_dir: &Path) -> Result<Vec<Guest>> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(guest_dir.join("Cargo.toml"))
        .no_deps()
        .exec()
        .context("reading the guest workspace with cargo metadata")?;
    let mut guests = Vec::new();
    for package in metadata.workspace_packages() {
        let Some(table) = package.metadata.get("effects") else { continue };
        let meta: Metadata = serde_json::from_value(table.clone())
            .with_context(|| format!("{}: bad [package.metadata.effects]", package.name))?;
        if meta.shipped && meta.world == World::Classifier && meta.tools.is_empty() {
            bail!("{}: a shipped classifier must list the tools it serves", package.name);
        }
        let relative = package.manifest_path.strip_prefix(&metadata.workspace_root).ok();
        let fixture = relative.is_some_and(|path| path.starts_with("fixtures"));
        if meta.shipped && fixture {
            bail!("{}: a fixture is never shipped", package.name);
        }
        guests.push(Guest {
            name: package.name.to_string(),
            world: meta.world,
            shipped: meta.shipped,
            fixture,
            tools: meta.tools,
        });
    }
    guests.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(guests)
}

/// Builds guests with one route into one cargo target directory.
pub struct Builder {
    /// The route.
    pub route: Route,
    /// The guest workspace.
    pub guest_dir: PathBuf,
    /// Cargo's target directory for the wasm build.
    pub target_dir: PathBuf,
}

impl Builder {
    /// Compiles `guest` and returns its component bytes.
    pub fn build(&self, guest: &Guest) -> Result<Vec<u8>> {
        let core = self.compile_core(guest)?;
        wit_component::ComponentEncoder::default()
            .module(&core)
            .and_then(|encoder| encoder.validate(true).encode())
            .with_context(|| format!("{}: componentizing with wit-component", guest.name))
    }

    fn compile_core(&self, guest: &Guest) -> Result<Vec<u8>> {
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
            .context("neither CARGO_HOME nor HOME is set")?;
        // Later remaps win, so the target dir (which may sit inside guest/)
        // always maps to the same place, whatever directory it really is.
        let mut rustflags: Vec<String> = self.route.rustflags().iter().map(|s| s.to_string()).collect();
        // A guest's shadow stack lives in its linear memory, and every byte of
        // that memory is reset for the next instance (`host/src/policy/
        // sandbox.rs`): Rust's default 1 MiB stack was most of what a fresh
        // instance cost. The guests need a few KiB; an overflow traps (the
        // stack sits first, below it is address zero), a policy failure the
        // host handles like any other.
        rustflags.extend(["-C".to_owned(), format!("link-arg=-zstack-size={GUEST_STACK_BYTES}")]);
        for (from, to) in
            [(&self.guest_dir, "/guest"), (&cargo_home, "/cargo"), (&self.target_dir, "/target")]
        {
            rustflags.push(format!("--remap-path-prefix={}={to}", from.display()));
        }
        let mut command = Command::new(self.route.cargo());
        // Start from a clean slate: the outer `cargo run` exports variables that
        // would point this build at rustup's rustc or the host's target dir.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if (key.starts_with("CARGO") && key != "CARGO_HOME") || key.starts_with("RUST") {
                command.env_remove(key.as_ref());
            }
        }
        command
            .current_dir(&self.guest_dir)
            .env("RUSTC", self.route.rustc())
            .env("CARGO_TARGET_DIR", &self.target_dir)
            .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
            // Not quiet: a first build compiles the guest's dependencies for
            // minutes, and cargo's progress is the only sign of life.
            .args(["rustc", "--locked", "--release", "--lib", "--crate-type", "cdylib"])
            .args(["--target", "wasm32-unknown-unknown", "-p", &guest.name])
            .args(self.route.cargo_args());
        if self.route == Route::Debian {
            // Only for -Zbuild-std on Debian's stable rustc; never for the host.
            command.env("RUSTC_BOOTSTRAP", "1");
        }
        let status = command.status().with_context(|| format!("running {}", self.route.cargo().display()))?;
        if !status.success() {
            bail!("{}: cargo build for wasm32 failed ({status})", guest.name);
        }
        let core = self
            .target_dir
            .join("wasm32-unknown-unknown/release")
            .join(format!("{}.wasm", guest.name.replace('-', "_")));
        std::fs::read(&core).with_context(|| format!("reading {}", core.display()))
    }
}
