//! `cargo xtask`: project automation that needs more than cargo.
//!
//! - `policies [--check]`: build every shipped guest into `policies/` and write
//!   `policies/manifest.toml`; `--check` rebuilds from scratch in a temporary
//!   directory and fails, naming the component, if any shipped byte differs.
//!   `-p NAME... [--out DIR]` builds only those guests into DIR (default
//!   `target/policies`) and prints their manifest entries; `policies/` is
//!   left alone.
//! - `fixtures`: build the hostile test guests into `target/policy-fixtures/`.
//! - `test`: the whole test suite, as a new user and CI run it: guests, host,
//!   then the Python and TypeScript clients against the server and the hook
//!   contract suite (`clients.rs`; skipped when `cargo test` arguments narrow
//!   the run), and the check that `effects policy new`'s crates build and
//!   pass as generated (`scaffold.rs`).
//! - `bench [--quick] [--only NAME]...`: every host bench, collected into
//!   docs/benchmarks.md (`--quick`: scaled down, into target/bench-report.md).
//! - `check-scaffold`: the `effects policy new` check alone.
//! - `setup`: install the wasm guest toolchain (Debian route) if missing.

// xtask is a build tool: ambient filesystem authority is its job.
#![allow(clippy::disallowed_methods)]

mod bench;
mod clients;
mod guests;
mod postgres;
mod scaffold;
mod toolchain;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use effects_manifest::digest::Sha256Digest;
use effects_manifest::{ComponentEntry, Manifest, WIT_PACKAGE};

use guests::{Builder, Guest};
use toolchain::Route;

#[derive(Parser)]
#[command(about = "Build, check and test the effect ledger's policy components")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build the shipped policy components into policies/ with their manifest.
    Policies {
        /// Rebuild in a temporary directory and compare byte for byte instead.
        #[arg(long, conflicts_with_all = ["packages", "out"])]
        check: bool,
        /// Build only this guest crate (repeatable; a shipped policy or a
        /// fixture), into --out, leaving policies/ as it is.
        #[arg(short = 'p', long = "package", value_name = "NAME")]
        packages: Vec<String>,
        /// Where -p writes its components (default: target/policies).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The guest workspace -p builds from (default: guest/).
        #[arg(long, value_name = "DIR", conflicts_with = "check")]
        guest: Option<PathBuf>,
        /// Force a toolchain route (default: rustup's wasm32 target if
        /// installed, else Debian's).
        #[arg(long, value_enum)]
        route: Option<Route>,
    },
    /// Build the hostile test fixtures into target/policy-fixtures/.
    Fixtures {
        /// Force a toolchain route.
        #[arg(long, value_enum)]
        route: Option<Route>,
    },
    /// Run every test: guest unit tests, fixtures, the host workspace, then
    /// the Python and TypeScript clients against `effects serve` and `effects
    /// hook` against the agents' own hook types and schemas (their pinned
    /// packages installed from the registries on first use). Extra arguments
    /// narrow the host run and skip those.
    Test {
        /// Extra arguments for `cargo test` of the host workspace.
        #[arg(trailing_var_arg = true)]
        cargo_test_args: Vec<String>,
    },
    /// Install the wasm guest toolchain (Debian route) when it is missing.
    Setup,
    /// Check that `effects policy new` crates build and pass as generated,
    /// in a copy of the guest workspace (part of `test`).
    CheckScaffold,
    /// Run every host bench and write docs/benchmarks.md from their figures.
    Bench {
        /// Scale every bench down (a tenth) and write target/bench-report.md
        /// instead of the tracked page (what CI runs).
        #[arg(long)]
        quick: bool,
        /// Run only this bench (repeatable): log_append, log_contention,
        /// chain_write, chain_bash, session_continue, decide_read, evaluate,
        /// policy_call.
        #[arg(long, value_name = "NAME")]
        only: Vec<String>,
        /// Write the page here instead.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the project root").to_path_buf()
}

fn main() -> Result<()> {
    let root = project_root();
    match Cli::parse().command {
        Task::Policies { check: false, route, packages, out, guest }
            if !packages.is_empty() || out.is_some() || guest.is_some() =>
        {
            build_some(&root, route, &packages, out, guest)
        }
        Task::Policies { check: false, route, .. } => build_policies(&root, route),
        Task::Policies { check: true, route, .. } => check_policies(&root, route),
        Task::Fixtures { route } => build_fixtures(&root, route).map(drop),
        Task::Test { cargo_test_args } => test(&root, &cargo_test_args),
        Task::Setup => toolchain::ensure_debian_installed(),
        Task::CheckScaffold => scaffold::check(&root),
        Task::Bench { quick, only, out } => bench::run(&root, &bench::Options { quick, only, out }),
    }
}

/// Builds the shipped guests into `out_dir` and returns their manifest.
fn build_shipped(root: &Path, route: Route, target_dir: &Path, out_dir: &Path) -> Result<Manifest> {
    let builder = Builder { route, guest_dir: root.join("guest"), target_dir: target_dir.to_path_buf() };
    let mut components = Vec::new();
    for guest in guests::discover(&builder.guest_dir)?.into_iter().filter(|g| g.shipped) {
        eprintln!("xtask: building {} ({} world, {} route)", guest.name, guest.world, route.name());
        let bytes = builder.build(&guest)?;
        let file = format!("{}.wasm", guest.name);
        std::fs::write(out_dir.join(&file), &bytes)?;
        components.push(ComponentEntry {
            name: guest.name,
            world: guest.world,
            file,
            sha256: Sha256Digest::of(&bytes),
            tools: guest.tools,
        });
    }
    Ok(Manifest {
        wit: WIT_PACKAGE.to_owned(),
        route: route.name().to_owned(),
        toolchain: route.version()?,
        components,
    })
}

/// `policies -p NAME... [--out DIR]`: only the named guests (every shipped
/// one when none is named), into DIR, with their pins printed as manifest
/// entries; the tracked `policies/` is not touched.
fn build_some(
    root: &Path,
    route: Option<Route>,
    packages: &[String],
    out: Option<PathBuf>,
    guest: Option<PathBuf>,
) -> Result<()> {
    let route = Route::detect(route)?;
    let out = out.unwrap_or_else(|| root.join("target/policies"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    if out.canonicalize()? == root.join("policies").canonicalize()? {
        bail!(
            "--out policies/ would rewrite the shipped set without its manifest: run `cargo xtask policies`"
        );
    }
    let guest_dir = match guest {
        Some(dir) => dir.canonicalize().with_context(|| format!("--guest {}", dir.display()))?,
        None => root.join("guest"),
    };
    let builder = Builder { route, guest_dir, target_dir: root.join("guest/target") };
    let all = guests::discover(&builder.guest_dir)?;
    let chosen: Vec<&Guest> = if packages.is_empty() {
        all.iter().filter(|g| g.shipped).collect()
    } else {
        packages
            .iter()
            .map(|name| {
                all.iter().find(|g| &g.name == name).with_context(|| {
                    let names: Vec<&str> = all.iter().map(|g| g.name.as_str()).collect();
                    format!("no guest crate named {name}; the guest workspace has {}", names.join(", "))
                })
            })
            .collect::<Result<_>>()?
    };
    record_in_lock(&builder.guest_dir, &all)?;
    let toolchain = route.version()?;
    for guest in chosen {
        let started = std::time::Instant::now();
        eprintln!("xtask: building {} ({} world, {} route)", guest.name, guest.world, route.name());
        let bytes = builder.build(guest)?;
        let file = out.join(format!("{}.wasm", guest.name));
        std::fs::write(&file, &bytes)?;
        eprintln!("xtask: built {} in {:.1} s", file.display(), started.elapsed().as_secs_f64());
        let entry = ComponentEntry {
            name: guest.name.clone(),
            world: guest.world,
            file: format!("{}.wasm", guest.name),
            sha256: Sha256Digest::of(&bytes),
            tools: guest.tools.clone(),
        };
        let manifest = Manifest {
            wit: WIT_PACKAGE.to_owned(),
            route: route.name().to_owned(),
            toolchain: toolchain.clone(),
            components: vec![entry],
        };
        let toml = manifest.to_toml();
        // The component's entry, ready to paste into a manifest.
        if let Some(at) = toml.find("[[component]]") {
            println!("{}", toml[at..].trim_end());
        }
    }
    Ok(())
}

/// A crate `effects policy new` just made is not in the guest workspace's
/// lock file yet, and the wasm build runs `--locked`: when any member of
/// the workspace is missing from it, `cargo update --workspace --offline`
/// records the members. It keeps every locked version (`--workspace` bumps
/// nothing) and fetches nothing; the lock gains what a new crate needs
/// from the local cache, and loses entries nothing uses any more.
fn record_in_lock(guest_dir: &Path, members: &[Guest]) -> Result<()> {
    let lock = std::fs::read_to_string(guest_dir.join("Cargo.lock")).unwrap_or_default();
    let missing: Vec<&str> = members
        .iter()
        .map(|g| g.name.as_str())
        .filter(|name| !lock.lines().any(|line| line == format!("name = \"{name}\"")))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: recording {} in {}/Cargo.lock", missing.join(", "), guest_dir.display());
    run(Command::new(cargo()).current_dir(guest_dir).args(["update", "--workspace", "--offline"]))
}

fn build_policies(root: &Path, route: Option<Route>) -> Result<()> {
    let route = Route::detect(route)?;
    let out_dir = root.join("policies");
    let manifest = build_shipped(root, route, &root.join("guest/target"), &out_dir)?;
    std::fs::write(out_dir.join("manifest.toml"), manifest.to_toml())?;
    for entry in &manifest.components {
        println!("{}  {}  {}", entry.sha256, entry.world, entry.file);
    }
    println!(
        "wrote policies/manifest.toml ({} components, {} route)",
        manifest.components.len(),
        route.name()
    );
    Ok(())
}

fn check_policies(root: &Path, route: Option<Route>) -> Result<()> {
    let route = Route::detect(route)?;
    let scratch = tempfile::tempdir()?;
    let (target_dir, out_dir) = (scratch.path().join("target"), scratch.path().join("policies"));
    std::fs::create_dir_all(&out_dir)?;
    let rebuilt = build_shipped(root, route, &target_dir, &out_dir)?;
    let shipped_text = std::fs::read_to_string(root.join("policies/manifest.toml"))
        .context("reading policies/manifest.toml")?;
    let shipped =
        Manifest::parse(&shipped_text).map_err(|e| anyhow::anyhow!("policies/manifest.toml: {e}"))?;
    let mut problems = Vec::new();
    for entry in &rebuilt.components {
        let ours = std::fs::read(out_dir.join(&entry.file))?;
        match std::fs::read(root.join("policies").join(&entry.file)) {
            Err(error) => {
                problems.push(format!("{}: policies/{} unreadable: {error}", entry.name, entry.file))
            }
            Ok(theirs) if theirs != ours => problems.push(format!(
                "{}: policies/{} differs from a fresh build ({} shipped vs {} rebuilt)",
                entry.name,
                entry.file,
                Sha256Digest::of(&theirs),
                entry.sha256
            )),
            Ok(_) => {}
        }
    }
    for entry in &shipped.components {
        if !rebuilt.components.iter().any(|c| c.name == entry.name) {
            problems.push(format!("{}: listed in the manifest but no guest crate builds it", entry.name));
        }
    }
    if shipped_text != rebuilt.to_toml() {
        problems.push("policies/manifest.toml differs from the one a fresh build writes".to_owned());
    }
    if problems.is_empty() {
        println!(
            "policies/ is reproducible: {} components byte-identical ({} route)",
            rebuilt.components.len(),
            route.name()
        );
        return Ok(());
    }
    for problem in &problems {
        eprintln!("{problem}");
    }
    if shipped.route != route.name() {
        eprintln!(
            "note: the shipped digests come from the {} route; this check used the {} route",
            shipped.route,
            route.name()
        );
    }
    bail!(
        "{} problem(s): run `cargo xtask policies` and commit policies/, or find what made the build differ",
        problems.len()
    )
}

/// Where the fixtures go; the host tests look here.
fn fixtures_dir(root: &Path) -> PathBuf {
    root.join("target/policy-fixtures")
}

fn build_fixtures(root: &Path, route: Option<Route>) -> Result<Vec<Guest>> {
    let route = Route::detect(route)?;
    let builder = Builder { route, guest_dir: root.join("guest"), target_dir: root.join("guest/target") };
    let out = fixtures_dir(root);
    std::fs::create_dir_all(&out)?;
    let fixtures: Vec<Guest> =
        guests::discover(&builder.guest_dir)?.into_iter().filter(|g| g.fixture).collect();
    for guest in &fixtures {
        eprintln!("xtask: building fixture {}", guest.name);
        std::fs::write(out.join(format!("{}.wasm", guest.name)), builder.build(guest)?)?;
    }
    Ok(fixtures)
}

/// The cargo to run: the one running xtask, else `cargo` from the PATH.
fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// The host workspace's target directory, as cargo resolves it.
fn target_dir(root: &Path) -> Result<PathBuf> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(root.join("Cargo.toml"))
        .no_deps()
        .exec()
        .context("finding the host's target dir")?;
    Ok(metadata.target_directory.into_std_path_buf())
}

/// Builds the `effects` binary from this checkout (nothing to do when it is
/// current) and returns its path.
fn effects_binary(root: &Path) -> Result<PathBuf> {
    run(Command::new(cargo()).current_dir(root).args([
        "build",
        "--release",
        "--locked",
        "--bin",
        "effects",
    ]))?;
    Ok(target_dir(root)?.join("release/effects"))
}

fn run(command: &mut Command) -> Result<()> {
    eprintln!("xtask: running {command:?}");
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

fn test(root: &Path, cargo_test_args: &[String]) -> Result<()> {
    toolchain::ensure_debian_installed()?;
    let cargo = cargo();
    // The guests' own logic, natively (STYLE: guests testable without wasm).
    run(Command::new(&cargo).current_dir(root.join("guest")).args(["test", "--quiet", "--locked"]))?;
    build_fixtures(root, None)?;
    // The fleet store's suites run against a real server; a cluster this
    // starts is stopped when `_cluster` drops, whatever the tests did.
    let (postgres_url, cluster) = postgres::Cluster::for_tests()?;
    let mut tests = Command::new(&cargo);
    tests
        .current_dir(root)
        .args(["test", "--release", "--locked", "--workspace"])
        .args(cargo_test_args)
        .env("EFFECTS_FIXTURES_DIR", fixtures_dir(root))
        .env(postgres::URL_VAR, &postgres_url);
    if let Some(cluster) = &cluster {
        tests.env(postgres::RESTART_VAR, cluster.restart_command());
        tests.env(postgres::STOP_VAR, cluster.stop_command());
    }
    run(&mut tests)?;
    if !cargo_test_args.is_empty() {
        return Ok(());
    }
    scaffold::check(root)?;
    clients::test(root)
}
