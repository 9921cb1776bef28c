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

/// Whether one hook (a `{type, command}` object) runs `effects hook`: the
/// entries a merge replaces.
fn is_ours(hook: &Value) -> bool {
    hook["command"].as_str().is_some_and(|command| {
        let mut words = command
            .split_whitespace()
            .skip_while(|word| !word.ends_with("effects") && !word.ends_with("effects'"));
        words.next().is_some() && words.next() == Some("hook") && words.next() == Some("--dialect")
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
        // Our hooks leave each group; a group left empty goes; the user's
        // own hooks, in any group, stay.
        for group in list.iter_mut() {
            if let Some(hooks) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                hooks.retain(|hook| !is_ours(hook));
            }
        }
        list.retain(|group| group["hooks"].as_array().is_none_or(|hooks| !hooks.is_empty()));
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
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    // A symlinked settings file is written where it points.
    let file = file.canonicalize().unwrap_or_else(|_| file.to_owned());
    let (mut settings, mode) = match std::fs::read(&file) {
        Ok(bytes) => (
            serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is not JSON; fix it or merge the hooks by hand", file.display())
            })?,
            std::fs::metadata(&file)?.permissions().mode() & 0o7777,
        ),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => (json!({}), 0o600),
        Err(error) => return Err(error).with_context(|| format!("reading {}", file.display())),
    };
    merge(&mut settings, snippet).map_err(|why| anyhow!("{}: {why}", file.display()))?;
    let dir = file.parent().expect("a settings file has a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut text = serde_json::to_string_pretty(&settings).expect("settings serialize");
    text.push('\n');
    // Written whole beside it, with its mode, then renamed over it: a reader
    // sees the old file or the new one.
    let temporary = dir.join(format!(
        ".{}.{}.effects-tmp",
        file.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temporary)
        .with_context(|| format!("creating {}", temporary.display()))?;
    let written = out.write_all(text.as_bytes()).and_then(|()| out.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&temporary, &file));
    if let Err(error) = renamed {
        let _ = std::fs::remove_file(&temporary);
        return Err(error).with_context(|| format!("replacing {}", file.display()));
    }
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
            let ours = settings["hooks"][event]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|group| group["hooks"].as_array().unwrap())
                .filter(|hook| is_ours(hook))
                .count();
            assert_eq!(ours, 1, "{event}");
        }
        // A user's hook in the same group as ours survives a merge.
        let mut shared = json!({"hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": "notify-send done"},
            {"type": "command", "command": "/usr/bin/effects hook --dialect claude"}
        ]}]}});
        merge(&mut shared, &ours).unwrap();
        let commands: Vec<&str> = shared["hooks"]["Stop"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|group| group["hooks"].as_array().unwrap())
            .map(|hook| hook["command"].as_str().unwrap())
            .collect();
        assert_eq!(commands, ["notify-send done", "effects hook --dialect claude"]);
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
