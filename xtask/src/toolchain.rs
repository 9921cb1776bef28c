//! Which toolchain route builds the wasm guests (see `docs/toolchain.md`):
//! a rustup toolchain with the `wasm32-unknown-unknown` target if one is
//! installed, else Debian's `rustc-web` with `-Zbuild-std`, else an error that
//! gives the exact install command.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The Debian packages the documented route needs, plus `strace`, which the
/// log's fsync-injection test drives.
pub const DEBIAN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "lld", "strace"];

/// The command that installs them.
pub fn install_command() -> String {
    format!("apt-get update && apt-get install -y {}", DEBIAN_PACKAGES.join(" "))
}

/// A way to build wasm32-unknown-unknown guests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Route {
    /// Debian's rustc-web + rust-web-src, `-Zbuild-std`, linked by `wasm-ld`.
    /// The pinned digests in `policies/` come from this route.
    Debian,
    /// A rustup toolchain with the wasm32 target installed.
    Rustup,
}

impl Route {
    /// The name recorded in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Route::Debian => "debian",
            Route::Rustup => "rustup",
        }
    }

    /// Picks a route: the one asked for (checked), else rustup's wasm32 target
    /// if installed, else Debian's, else an error with the install command.
    pub fn detect(wanted: Option<Route>) -> Result<Route> {
        match wanted {
            Some(Route::Debian) => debian_ready().map(|()| Route::Debian),
            Some(Route::Rustup) if rustup_has_wasm32() => Ok(Route::Rustup),
            Some(Route::Rustup) => bail!(
                "rustup has no wasm32-unknown-unknown target: `rustup target add wasm32-unknown-unknown`"
            ),
            None if rustup_has_wasm32() => Ok(Route::Rustup),
            None => debian_ready().map(|()| Route::Debian),
        }
    }

    /// The cargo to run.
    pub fn cargo(self) -> PathBuf {
        match self {
            Route::Debian => PathBuf::from("/usr/bin/cargo"),
            Route::Rustup => PathBuf::from("cargo"),
        }
    }

    /// The rustc that cargo must use.
    pub fn rustc(self) -> PathBuf {
        match self {
            Route::Debian => PathBuf::from("/usr/bin/rustc"),
            Route::Rustup => PathBuf::from("rustc"),
        }
    }

    /// Extra arguments for `cargo rustc`.
    pub fn cargo_args(self) -> &'static [&'static str] {
        match self {
            Route::Debian => &["-Zbuild-std=std,panic_abort"],
            Route::Rustup => &[],
        }
    }

    /// Extra flags for rustc.
    pub fn rustflags(self) -> &'static [&'static str] {
        match self {
            // The default linker name points at an LLVM that is not installed.
            Route::Debian => &["-C", "linker=wasm-ld"],
            Route::Rustup => &[],
        }
    }

    /// The route's rustc version line, recorded in the manifest.
    pub fn version(self) -> Result<String> {
        let output =
            Command::new(self.rustc()).arg("--version").output().context("running rustc --version")?;
        let line = String::from_utf8(output.stdout)?.trim().to_owned();
        Ok(format!("{line} ({} route)", self.name()))
    }
}

fn rustup_has_wasm32() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == "wasm32-unknown-unknown"))
        .unwrap_or(false)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// Checks every piece of the Debian route, naming what is missing.
pub fn debian_ready() -> Result<()> {
    let missing: Vec<&str> = [
        (Path::new("/usr/bin/cargo").is_file(), "cargo-web (/usr/bin/cargo)"),
        (Path::new("/usr/bin/rustc").is_file(), "rustc-web (/usr/bin/rustc)"),
        (
            Path::new("/usr/lib/rustlib/src/rust/library").is_dir(),
            "rust-web-src (/usr/lib/rustlib/src/rust/library)",
        ),
        (on_path("wasm-ld"), "lld (wasm-ld)"),
    ]
    .into_iter()
    .filter(|(present, _)| !present)
    .map(|(_, what)| what)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        bail!(
            "no wasm32 guest toolchain: missing {}.\nInstall the Debian route (see docs/toolchain.md) as root:\n    {}\nor install a rustup wasm32 target: rustup target add wasm32-unknown-unknown",
            missing.join(", "),
            install_command()
        )
    }
}

/// Installs the Debian route (and strace) with apt-get when it is missing and
/// this process may (it runs as root); otherwise returns the error that says how.
pub fn ensure_debian_installed() -> Result<()> {
    if (debian_ready().is_ok() || rustup_has_wasm32()) && on_path("strace") {
        return Ok(());
    }
    let is_root =
        Command::new("id").arg("-u").output().map(|o| o.stdout.trim_ascii() == b"0").unwrap_or(false);
    if !is_root {
        debian_ready()?;
        bail!("strace is missing (the log tests inject fsync failures with it): {}", install_command());
    }
    eprintln!("xtask: installing the wasm guest toolchain: {}", install_command());
    let status = Command::new("sh")
        .args(["-c", &install_command()])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("running apt-get")?;
    if !status.success() {
        bail!("apt-get failed ({status}); run it yourself: {}", install_command());
    }
    debian_ready()
}
