//! `effects hook install`: the settings that run `effects hook` at every
//! event it needs, printed (the default) or merged into the agent's settings
//! file: Claude Code's `.claude/settings.json`, Codex CLI's
//! `.codex/hooks.json`, Gemini CLI's `.gemini/settings.json`, in the project
//! (`--project`) or the user's home (`--user`). A merge keeps every other
//! setting and every other hook, replaces an earlier `effects hook` entry
//! instead of adding a second, and writes the file whole (a temporary file
//! renamed over it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow};
use clap::Args;
use serde_json::{Map, Value, json};

use super::dialect::Dialect;
use crate::cli::Failure;
use crate::cli::runtime::bad;

/// Arguments of `effects hook install`.
#[derive(Args)]
pub struct InstallArgs {
    /// The agent to install the hooks for.
    #[arg(long, value_enum)]
    dialect: Dialect,
    /// Merge into the project's settings (beneath the current directory).
    #[arg(long, conflicts_with = "user")]
    project: bool,
    /// Merge into the user's settings (beneath $HOME).
    #[arg(long)]
    user: bool,
    /// The command the hooks run (default: this binary's path).
    #[arg(long, value_name = "COMMAND")]
    command: Option<String>,
    /// Extra arguments for every hook, e.g. `--require README.md`.
    #[arg(last = true)]
    extra: Vec<String>,
}

/// The settings file of `dialect` beneath `base`.
fn settings_file(dialect: Dialect, base: &Path) -> PathBuf {
    match dialect {
        Dialect::Claude => base.join(".claude/settings.json"),
        Dialect::Codex => base.join(".codex/hooks.json"),
        Dialect::Gemini => base.join(".gemini/settings.json"),
    }
}

/// The marker that says a hook entry is ours (so a merge replaces it).
fn is_ours(entry: &Value) -> bool {
    entry["hooks"].as_array().is_some_and(|hooks| {
        hooks.iter().any(|hook| hook["command"].as_str().is_some_and(|c| c.contains("hook --dialect")))
    })
}

/// The `hooks` object for `dialect`, each event running `command`.
pub fn snippet(dialect: Dialect, command: &str) -> Value {
    let mut hooks = Map::new();
    for event in dialect.events() {
        let mut entry = json!({"hooks": [{"type": "command", "command": command}]});
        // Tool events match every tool; lifecycle events take no matcher.
        if !matches!(*event, "Stop" | "AfterAgent") {
            entry["matcher"] = json!(if dialect == Dialect::Gemini { ".*" } else { "*" });
        }
        hooks.insert((*event).to_owned(), json!([entry]));
    }
    json!({ "hooks": hooks })
}

/// `snippet`'s hooks merged into `settings`.
pub fn merge(settings: &mut Value, snippet: &Value) -> Result<(), String> {
    let Some(settings) = settings.as_object_mut() else {
        return Err("the settings file does not hold a JSON object".into());
    };
    let hooks = settings.entry("hooks").or_insert_with(|| json!({}));
    let Some(hooks) = hooks.as_object_mut() else {
        return Err("its `hooks` is not an object".into());
    };
    for (event, entries) in snippet["hooks"].as_object().expect("a snippet has hooks") {
        let list = hooks.entry(event.clone()).or_insert_with(|| json!([]));
        let Some(list) = list.as_array_mut() else {
            return Err(format!("its `hooks.{event}` is not a list"));
        };
        list.retain(|entry| !is_ours(entry));
        list.extend(entries.as_array().expect("a list").iter().cloned());
    }
    Ok(())
}

fn quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:@".contains(c)) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

impl InstallArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let binary = match self.command {
            Some(command) => command,
            None => std::env::current_exe()
                .map(|path| quote(&path.display().to_string()))
                .unwrap_or_else(|_| "effects".into()),
        };
        let mut command = format!("{binary} hook --dialect {}", self.dialect.name());
        for word in &self.extra {
            command.push(' ');
            command.push_str(&quote(word));
        }
        let snippet = snippet(self.dialect, &command);
        let base = match (self.project, self.user) {
            (true, _) => std::env::current_dir().map_err(|e| bad(anyhow!("the current directory: {e}")))?,
            (_, true) => {
                PathBuf::from(std::env::var_os("HOME").ok_or_else(|| bad(anyhow!("$HOME is not set")))?)
            }
            _ => {
                let printed = serde_json::to_string_pretty(&snippet).expect("a snippet serializes");
                crate::cli::output::line(printed)?;
                eprintln!(
                    "effects hook install: merge this into {} (or run again with --project or --user)",
                    settings_file(self.dialect, Path::new("<project or ~>")).display()
                );
                return Ok(ExitCode::SUCCESS);
            }
        };
        let file = settings_file(self.dialect, &base);
        write_merged(&file, &snippet).map_err(bad)?;
        eprintln!("effects hook install: {} hooks merged into {}", self.dialect.name(), file.display());
        Ok(ExitCode::SUCCESS)
    }
}

#[allow(clippy::disallowed_methods)] // the user's own settings file, named by the flags above
fn write_merged(file: &Path, snippet: &Value) -> anyhow::Result<()> {
    let mut settings = match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not JSON; fix it or merge the hooks by hand", file.display()))?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(error) => return Err(error).with_context(|| format!("reading {}", file.display())),
    };
    merge(&mut settings, snippet).map_err(|why| anyhow!("{}: {why}", file.display()))?;
    let dir = file.parent().expect("a settings file has a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut text = serde_json::to_string_pretty(&settings).expect("settings serialize");
    text.push('\n');
    let temporary = dir.join(format!(".{}.effects-tmp", std::process::id()));
    std::fs::write(&temporary, text).with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, file).with_context(|| format!("replacing {}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_keeps_other_hooks_and_replaces_its_own() {
        let mut settings = json!({
            "model": "x",
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}]}
        });
        let ours = snippet(Dialect::Claude, "effects hook --dialect claude");
        merge(&mut settings, &ours).unwrap();
        merge(&mut settings, &ours).unwrap();
        assert_eq!(settings["model"], "x");
        let pre = settings["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2, "the user's lint hook and one of ours: {pre:?}");
        assert_eq!(pre[0]["hooks"][0]["command"], "lint");
        for event in Dialect::Claude.events() {
            assert_eq!(settings["hooks"][event].as_array().unwrap().iter().filter(|e| is_ours(e)).count(), 1);
        }
        assert!(settings["hooks"]["Stop"][0].get("matcher").is_none());
        assert!(merge(&mut json!([]), &ours).is_err());
        assert!(merge(&mut json!({"hooks": {"Stop": {}}}), &ours).is_err());
    }

    #[test]
    fn words_are_quoted_for_the_shell() {
        assert_eq!(quote("/usr/bin/effects"), "/usr/bin/effects");
        assert_eq!(quote("my dir/effects"), "'my dir/effects'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
