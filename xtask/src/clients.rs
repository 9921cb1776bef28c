//! The embedding clients' tests (`clients/python`, `clients/typescript`),
//! the hook contract suite (`tests/hooks`) and the MCP interop suite
//! (`tests/mcp`), run against the `effects` binary of this workspace, as
//! part of `cargo xtask test`. Their packages
//! come from the registries, pinned (`clients/python/requirements-test.txt`,
//! the `package-lock.json` files), installed once into `target/clients/venv`
//! and each package's `node_modules`, and again only when the pins change.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::run;

/// Builds the server binary and runs both clients' tests against it.
pub fn test(root: &Path) -> Result<()> {
    let binary = crate::effects_binary(root)?;
    let python = python(root, &binary)?;
    typescript(root, &binary)?;
    hooks(root, &binary)?;
    mcp(root, &binary, &python)
}

/// A venv with the pinned test packages, the client installed into it from a
/// copy of its source (`pip install` offline, as a user would, without
/// leaving a build directory in the tree), then its unit tests.
/// Returns the venv's `python`.
fn python(root: &Path, binary: &Path) -> Result<std::path::PathBuf> {
    let client = root.join("clients/python");
    let clients = root.join("target/clients");
    let venv = clients.join("venv");
    let python = venv.join("bin/python");
    let requirements = client.join("requirements-test.txt");
    let pins = hex::encode(Sha256::digest(std::fs::read(&requirements).context("reading the test pins")?));
    let marker = venv.join(".pins-sha256");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(pins.as_str()) {
        eprintln!("xtask: installing the Python client's test packages into {}", venv.display());
        let _ = std::fs::remove_dir_all(&venv);
        std::fs::create_dir_all(&clients)?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements))?;
        std::fs::write(&marker, &pins)?;
    }
    let copy = clients.join("python-src");
    let _ = std::fs::remove_dir_all(&copy);
    copy_tree(&client, &copy)?;
    run(Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"])
        .args(["--no-build-isolation", "--no-index", "--force-reinstall"])
        .arg(&copy))?;
    let tests = client.join("tests");
    run(Command::new(&python)
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&tests)
        .arg("-t")
        .arg(&tests)
        .current_dir(root)
        .env("EFFECTS_BIN", binary))?;
    Ok(python)
}

/// The MCP interop suite (`tests/mcp`): `effects mcp` and `mcp-proxy`
/// against the official MCP SDKs' clients (Python, from the venv above;
/// TypeScript), the MCP Inspector's CLI on the Node 22 the suite installs
/// from npm, and the reference servers `server-everything` and
/// `server-filesystem`.
fn mcp(root: &Path, binary: &Path, python: &Path) -> Result<()> {
    let suite = root.join("tests/mcp");
    npm_ci(&suite, "the MCP interop suite's packages (the MCP SDK, Inspector, reference servers, Node 22)")?;
    run(Command::new(python)
        .args(["-m", "unittest", "-v", "test_python_sdk"])
        .current_dir(&suite)
        .env("EFFECTS_BIN", binary)
        .env("MCP_NODE_BIN", suite.join("node_modules/.bin")))?;
    run(Command::new("npm").arg("test").current_dir(&suite).env("EFFECTS_BIN", binary))
}

/// `npm ci` from the lock file, then the client's tests (which build it).
fn typescript(root: &Path, binary: &Path) -> Result<()> {
    let client = root.join("clients/typescript");
    npm_ci(&client, "the TypeScript client's packages")?;
    run(Command::new("npm").arg("test").current_dir(&client).env("EFFECTS_BIN", binary))
}

/// The hook contract suite (`tests/hooks`): `effects hook` against Claude
/// Code's Agent SDK types and Codex CLI's hook schemas.
fn hooks(root: &Path, binary: &Path) -> Result<()> {
    let suite = root.join("tests/hooks");
    npm_ci(&suite, "the hook contract suite's packages (the Claude Agent SDK, ajv, typescript)")?;
    run(Command::new("npm").arg("test").current_dir(&suite).env("EFFECTS_BIN", binary))
}

/// `npm ci` in `dir` when its lock file changed since the last install.
fn npm_ci(dir: &Path, what: &str) -> Result<()> {
    let lock = std::fs::read(dir.join("package-lock.json"))
        .with_context(|| format!("reading {}/package-lock.json", dir.display()))?;
    let pins = hex::encode(Sha256::digest(lock));
    let marker = dir.join("node_modules/.pins-sha256");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(pins.as_str()) {
        eprintln!("xtask: installing {what} (npm ci)");
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(dir))?;
        std::fs::write(&marker, &pins)?;
    }
    Ok(())
}

/// Copies `from` to `to`, skipping build outputs and caches.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let name_text = name.to_string_lossy();
        if matches!(name_text.as_ref(), "build" | "__pycache__" | "dist") || name_text.ends_with(".egg-info")
        {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &to.join(&name))?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), to.join(&name))?;
        } else {
            bail!("{}: not a file or a directory", entry.path().display());
        }
    }
    Ok(())
}
