//! `effects policy new classifier|evaluator NAME`: a new guest crate in the
//! guest workspace's `policies/`, from the templates in
//! `host/templates/policy-new/`, with a native unit test and a conformance
//! vector, that builds and passes as generated (`cargo xtask test` builds and
//! tests one of each).
//!
//! A classifier starts from the conservative floor (unknown scope, exit
//! status only); an evaluator starts as the shipped evaluator's pipeline over
//! its own modules, compiled again. Neither is shipped until its author says
//! so (`shipped = true` in its `Cargo.toml`). Nothing is overwritten: the
//! crate's directory must not exist, and a failure part way removes what this
//! command created.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use cap_std::fs::Dir;
use clap::{Args, ValueEnum};
use serde_json::json;

use effect_ledger::policy::World;

use super::output::out;
use super::{Failure, exit};

/// Arguments of `effects policy new`.
#[derive(Args)]
#[command(after_help = "The crate goes to GUEST/policies/NAME (GUEST: the guest workspace, `guest` \
from the repository root), which joins the workspace by its `policies/*` member pattern:

  Cargo.toml          the package, its world, the tools it serves, shipped = false
  src/lib.rs          the policy as plain functions, its export, a native unit test
  vectors/NAME.json   a conformance vector it passes as generated

Then build it into target/policies (policies/ untouched) and run its tests:

  cargo test --manifest-path guest/Cargo.toml -p NAME
  cargo xtask policies -p NAME
  effects policy test --classifier target/policies/NAME.wasm guest/policies/NAME/vectors

`cargo xtask policies -p NAME` records a new crate in guest/Cargo.lock before its first build. A \
classifier begins as the \
conservative floor: every call an effect of unknown scope, settled by its exit status (TRU-1). An \
evaluator begins as the shipped evaluator (its modules are included from guest/policies/evaluate), so \
the shipped vectors pass; `effects policy replay` then shows which recorded decisions a change alters.

Exit status: 0 created; 1 the crate could not be created or written (what was written is removed); 2 \
a bad name or tool, no guest workspace there (or its policies/ is a symlink), or the crate exists.")]
pub struct NewArgs {
    /// Which world the component exports.
    #[arg(value_enum)]
    world: WorldArg,
    /// The crate's name: also the component's name and file stem (lowercase
    /// letters, digits and single dashes, starting with a letter).
    name: String,
    /// A tool the classifier serves (repeatable; `*` for the fallback).
    #[arg(long = "tool", value_name = "TOOL")]
    tools: Vec<String>,
    /// The guest workspace.
    #[arg(long, value_name = "DIR", default_value = "guest")]
    guest: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum WorldArg {
    Classifier,
    Evaluator,
}

impl From<WorldArg> for World {
    fn from(world: WorldArg) -> Self {
        match world {
            WorldArg::Classifier => World::Classifier,
            WorldArg::Evaluator => World::Evaluator,
        }
    }
}

/// One template: where it goes in the crate, and its text.
struct Template {
    path: &'static str,
    text: &'static str,
}

/// A world's templates, from `host/templates/policy-new/<world>/`.
macro_rules! templates {
    ($world:literal) => {
        [
            Template {
                path: "Cargo.toml",
                text: include_str!(concat!("../../templates/policy-new/", $world, "/Cargo.toml")),
            },
            Template {
                path: "src/lib.rs",
                text: include_str!(concat!("../../templates/policy-new/", $world, "/lib.rs")),
            },
            Template {
                path: "vectors/{{name}}.json",
                text: include_str!(concat!("../../templates/policy-new/", $world, "/vector.json")),
            },
        ]
    };
}

const CLASSIFIER: [Template; 3] = templates!("classifier");
const EVALUATOR: [Template; 3] = templates!("evaluator");

/// The shipped evaluator's modules a new evaluator includes by path.
const EVALUATOR_MODULES: &str = "policies/evaluate/src";

impl NewArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let world = World::from(self.world);
        check_name(&self.name)?;
        match world {
            World::Classifier if self.tools.is_empty() => {
                return Err(bad(anyhow!(
                    "a classifier serves tools: add --tool TOOL (repeatable; `*` for the fallback)"
                )));
            }
            World::Evaluator if !self.tools.is_empty() => {
                return Err(bad(anyhow!("an evaluator serves no tools: drop --tool (POL-5)")));
            }
            _ => {}
        }
        for (at, tool) in self.tools.iter().enumerate() {
            check_tool(tool)?;
            if self.tools[..at].contains(tool) {
                return Err(bad(anyhow!("--tool {tool} is given twice")));
            }
        }
        let guest = open_guest(&self.guest, &self.name, world)?;
        let values = Values::new(&self.name, &self.tools);
        let templates = match world {
            World::Classifier => &CLASSIFIER,
            World::Evaluator => &EVALUATOR,
        };
        let crate_dir = Path::new("policies").join(&self.name);
        let shown = self.guest.join(&crate_dir);
        // `policies` itself is not followed if it is a symlink, and the crate
        // is written only through the handle of the directory made here.
        let policies = open_dir_nofollow(&guest, "policies").map_err(|error| {
            let at = format!("{}/policies", self.guest.display());
            match guest.symlink_metadata("policies") {
                Ok(meta) if meta.is_symlink() => {
                    bad(anyhow!("{at} is a symlink; not followed (make it the directory itself)"))
                }
                Err(_) => bad(anyhow!("{at} is missing (the guest workspace keeps its components there)")),
                Ok(_) => Failure::new(exit::PROBLEMS, anyhow!("opening {at}: {error}")),
            }
        })?;
        policies.create_dir(&self.name).map_err(|error| match error.kind() {
            std::io::ErrorKind::AlreadyExists => bad(anyhow!(
                "{} exists: pick another name, or remove it first (nothing is overwritten)",
                shown.display()
            )),
            _ => Failure::new(exit::PROBLEMS, anyhow!("creating {}: {error}", shown.display())),
        })?;
        let mut files = Vec::new();
        let written = open_dir_nofollow(&policies, &self.name).and_then(|made| {
            templates.iter().try_for_each(|template| {
                let path = PathBuf::from(values.fill(template.path));
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    made.create_dir_all(parent)?;
                }
                write_new(&made, &path, &values.fill(template.text))?;
                files.push(crate_dir.join(path));
                Ok(())
            })
        });
        if let Err(error) = written {
            // Ours alone: the directory did not exist a moment ago.
            let cleaned = match policies.remove_dir_all(&self.name) {
                Ok(()) => "removed what was written".to_owned(),
                Err(cleanup) => format!("and removing it failed too ({cleanup}): remove it yourself"),
            };
            return Err(Failure::new(
                exit::PROBLEMS,
                anyhow!("writing {}: {error}; {cleaned}", shown.display()),
            ));
        }
        self.report(world, &crate_dir, &files)
    }

    fn report(&self, world: World, crate_dir: &Path, files: &[PathBuf]) -> Result<ExitCode, Failure> {
        let shown = |path: &Path| self.guest.join(path).display().to_string();
        let component = format!("target/policies/{}.wasm", self.name);
        let vectors = shown(&crate_dir.join("vectors"));
        let test = match world {
            World::Classifier => format!("effects policy test --classifier {component} {vectors}"),
            World::Evaluator => {
                format!("effects policy test --evaluator {component} tests/vectors {vectors}")
            }
        };
        let next = [
            format!("cargo test --manifest-path {} -p {}", shown(Path::new("Cargo.toml")), self.name),
            if self.guest == Path::new("guest") {
                format!("cargo xtask policies -p {}", self.name)
            } else {
                format!("cargo xtask policies -p {} --guest {}", self.name, self.guest.display())
            },
            test,
        ];
        if self.json {
            let value = json!({
                "crate": shown(crate_dir),
                "world": world,
                "tools": self.tools,
                "files": files.iter().map(|f| shown(f)).collect::<Vec<_>>(),
                "next": next,
            });
            out!("{value}");
            return Ok(ExitCode::SUCCESS);
        }
        let serves = match world {
            World::Classifier => format!(" for {}", self.tools.join(", ")),
            World::Evaluator => " (the shipped evaluator's rules, ready to change)".to_owned(),
        };
        out!("created {} ({world}{serves}):", shown(crate_dir));
        for file in files {
            out!("  {}", shown(file));
        }
        out!("next:");
        for step in &next {
            out!("  {step}");
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The values the templates name: `{{name}}`, `{{tool}}` (the first tool),
/// `{{tools_toml}}` and `{{tools_prose}}`.
struct Values {
    pairs: [(&'static str, String); 4],
}

impl Values {
    fn new(name: &str, tools: &[String]) -> Self {
        let quoted: Vec<String> = tools.iter().map(|t| format!("\"{t}\"")).collect();
        let prose = match tools {
            [] => String::new(),
            [one] if one == "*" => "every tool no other classifier serves".to_owned(),
            _ => tools.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", "),
        };
        Self {
            pairs: [
                ("{{name}}", name.to_owned()),
                ("{{tool}}", tools.first().cloned().unwrap_or_default()),
                ("{{tools_toml}}", format!("[{}]", quoted.join(", "))),
                ("{{tools_prose}}", prose),
            ],
        }
    }

    fn fill(&self, template: &str) -> String {
        self.pairs.iter().fold(template.to_owned(), |text, (key, value)| text.replace(key, value))
    }
}

fn bad(error: anyhow::Error) -> Failure {
    Failure::new(exit::BAD_INPUT, error)
}

/// A package name cargo takes and a component name the manifest takes:
/// lowercase ASCII letters and digits in dash-separated words, starting with
/// a letter, at most 64 bytes.
fn check_name(name: &str) -> Result<(), Failure> {
    let words_ok = name
        .split('-')
        .all(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    if name.len() <= 64 && name.starts_with(|c: char| c.is_ascii_lowercase()) && words_ok {
        return Ok(());
    }
    Err(bad(anyhow!(
        "{name:?} is not a policy name: use lowercase letters, digits and single dashes, starting with a letter \
         (like classify-deploy)"
    )))
}

/// A tool name the templates can quote in TOML, Rust and JSON as it is.
fn check_tool(tool: &str) -> Result<(), Failure> {
    let plain = tool.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b));
    if tool == "*" || (!tool.is_empty() && tool.len() <= 128 && plain) {
        return Ok(());
    }
    Err(bad(anyhow!("--tool {tool:?}: a tool name is letters, digits and _ - . : / (or `*`, the fallback)")))
}

/// Opens the guest workspace and checks that a crate named `name` can join
/// it: a workspace whose members include `policies/*`, no package of that
/// name in its lock file, and for an evaluator the shipped modules it
/// includes.
fn open_guest(guest: &Path, name: &str, world: World) -> Result<Dir, Failure> {
    let hint = "run from the repository root, or pass --guest DIR";
    // The guest workspace is named on the command line: ambient authority
    // enters here, at the edge.
    #[allow(clippy::disallowed_methods)]
    let dir = Dir::open_ambient_dir(guest, cap_std::ambient_authority())
        .map_err(|error| bad(anyhow!("no guest workspace at {}: {error} ({hint})", guest.display())))?;
    let manifest = dir.read_to_string("Cargo.toml").unwrap_or_default();
    if !manifest.contains("[workspace]") || !manifest.contains("\"policies/*\"") {
        return Err(bad(anyhow!(
            "{} is not the guest workspace (its Cargo.toml has no `policies/*` member; {hint})",
            guest.display()
        )));
    }
    let lock = match dir.read_to_string("Cargo.lock") {
        Ok(lock) => lock,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(bad(anyhow!("{}/Cargo.lock: {error}", guest.display()))),
    };
    if lock.lines().any(|line| line == format!("name = \"{name}\"")) {
        return Err(bad(anyhow!(
            "a package named {name} is already in {}/Cargo.lock: pick another name",
            guest.display()
        )));
    }
    if world == World::Evaluator && !dir.is_dir(EVALUATOR_MODULES) {
        return Err(bad(anyhow!(
            "{}/{EVALUATOR_MODULES} is missing: a new evaluator includes the shipped evaluator's modules",
            guest.display()
        )));
    }
    Ok(dir)
}

/// `name` beneath `dir` as a directory handle, refusing a symlink there.
fn open_dir_nofollow(dir: &Dir, name: &str) -> std::io::Result<Dir> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    Ok(Dir::from_std_file(std::fs::File::from(fd)))
}

fn write_new(dir: &Dir, path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    let mut file = dir.open_with(path, &options)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tools_are_checked_before_anything_is_written() {
        for good in ["classify-deploy", "a", "x1-y2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Classify", "1x", "a--b", "a-", "-a", "a_b", "../x", "a/b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["deploy", "*", "mcp:server/tool", "write_file"] {
            assert!(check_tool(good).is_ok(), "{good}");
        }
        for bad in ["", "a\"b", "a b", "a\\b", "x*", "a\nb"] {
            assert!(check_tool(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        let values = Values::new("classify-deploy", &["deploy".to_owned(), "ship".to_owned()]);
        for template in CLASSIFIER.iter().chain(&EVALUATOR) {
            let filled = values.fill(template.text);
            assert!(!filled.contains("{{"), "{}: {filled}", template.path);
        }
        let toml = values.fill(CLASSIFIER[0].text);
        assert!(toml.contains("tools = [\"deploy\", \"ship\"]"), "{toml}");
        assert!(toml.contains("name = \"classify-deploy\""), "{toml}");
    }
}
