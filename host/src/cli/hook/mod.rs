//! `effects hook`: the ledger inside an agent's own tools, through its hook
//! contract (docs/hooks.md). One short-lived process per event:
//!
//! - before a tool: claim it (EMB-1), with the **agent** as the claim's
//!   executor (LOG-7), so the claim outlives this process and is settled by
//!   the next hook, not recovered; a refusal denies the tool, anything else
//!   says nothing at all (EMB-5: an "allow" would skip the user's prompt);
//! - after it: settle the claim by the agent's tool-use id (EMB-3; Gemini
//!   has none: by tool and input digest, first in first out), with only the
//!   facts the agent gave (no exit status is UNKNOWN, OUT-1); the ledger then
//!   reads the files back itself (EMB-4) and tells the agent whether the
//!   bytes are the ones claimed;
//! - at stop: decide. COMPLETED is told to the user with its disclosures;
//!   anything else (or a command still held open, `held.rs`) blocks the
//!   stop once with the reasons and what would clear them; a stop that a
//!   stop hook already held once goes through, with the disclosures shown to
//!   the user (never a loop). Every stop's verdict is also written to a file
//!   a headless run's user reads (CMP-14).
//!
//! `dialect.rs` reads and writes each agent's JSON; `install.rs` prints or
//! merges the settings that run this.

mod dialect;
mod held;
mod install;
mod verdict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Args, Subcommand};
use serde_json::Value;
use sha2::{Digest, Sha256};

use effect_ledger::bounded::read_within_bound;
use effect_ledger::ledger::{ClaimStatus, Ledger, Reported, Run, RunError, StepRequest, StepStatus};
use effect_ledger::log::{Executor, Record};
use effect_ledger::model::{Assessment, Verdict};
use effect_ledger::procfs;
use effect_ledger::tools::Call;

use super::output::name;
use super::runtime::{bad, open_ledger_with, state_dir};
use super::{Failure, exit};
use dialect::{Answer, Dialect, Event, EventScan, Kind, Mapped};
use held::{Held, HeldCommand};

/// Arguments of `effects hook`.
#[derive(Args)]
#[command(
    subcommand_negates_reqs = true,
    after_help = "Reads one hook event (JSON) on stdin, as Claude Code, Codex CLI or Gemini CLI \
send it, and answers in that agent's contract: before a tool, a durable claim (a refusal denies \
the tool; otherwise nothing is said, so the user's own approval still applies); after it, the \
ledger's own readback, told to the agent; at stop, the completion decision (not COMPLETED: the \
stop is blocked once with the reasons). Install it with `effects hook install --dialect D`. \
The data dir defaults to $XDG_STATE_HOME/effect-ledger (~/.local/state/effect-ledger), outside \
every project; --data-dir or $EFFECTS_DATA_DIR names another."
)]
pub struct HookArgs {
    #[command(subcommand)]
    command: Option<HookCommand>,
    /// The agent whose hook contract stdin and stdout speak.
    #[arg(long, value_enum, required = true)]
    dialect: Option<Dialect>,
    /// The directory the agent works beneath (default: the event's `cwd`).
    #[arg(long)]
    root: Option<PathBuf>,
    /// A file the session must have produced and verified before it may stop
    /// (repeatable; a path beneath the root).
    #[arg(long = "require", value_name = "PATH")]
    require: Vec<String>,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Operator key file: records are written HMAC-authenticated with it.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
}

#[derive(Subcommand)]
enum HookCommand {
    /// Print, or merge into the agent's settings, the hooks that run
    /// `effects hook` for every event it needs.
    Install(install::InstallArgs),
}

/// A failure the agent must not read as "block": exit 1, which every
/// dialect takes as a warning (exit 2 would deny a tool or hold a stop).
fn unblocking(error: anyhow::Error) -> Failure {
    Failure::new(exit::PROBLEMS, error)
}

/// The project directory the agent names for its hooks (Claude Code's
/// `$CLAUDE_PROJECT_DIR`, Gemini CLI's `$GEMINI_PROJECT_DIR`): the root, as
/// the event's `cwd` follows the agent's shell wherever it `cd`s.
fn project_dir(dialect: Dialect) -> Option<PathBuf> {
    let variable = match dialect {
        Dialect::Claude => "CLAUDE_PROJECT_DIR",
        Dialect::Gemini => "GEMINI_PROJECT_DIR",
        Dialect::Codex => return None,
    };
    std::env::var_os(variable).map(PathBuf::from).filter(|path| path.is_absolute())
}

/// The answer to a tool about to run that nothing could claim (EMB-1).
fn deny_unclaimed(why: &str) -> Answer {
    Answer::Deny(format!("effect ledger: {why}; nothing was claimed, so this tool must not run"))
}

/// Scans the rest of an input past its bound, reading it to its end.
fn scan_rest(input: &mut impl std::io::Read, scan: &mut EventScan) {
    let mut chunk = vec![0; 64 << 10];
    loop {
        match input.read(&mut chunk) {
            Ok(0) => return,
            Ok(read) => scan.feed(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            // What could not be read is not scanned; the hook warns.
            Err(_) => return,
        }
    }
}

/// The directory the agent's own tools take a relative path from: Gemini
/// CLI's project, else the event's `cwd` (Codex CLI's patches, any agent's
/// relative path). `None` when the event names neither: the root.
fn agent_directory(dialect: Dialect, event: &Event) -> Option<PathBuf> {
    let cwd = || event.cwd.as_deref().map(PathBuf::from).filter(|cwd| cwd.is_absolute());
    match dialect {
        Dialect::Gemini => project_dir(dialect).or_else(cwd),
        Dialect::Claude | Dialect::Codex => cwd(),
    }
}

fn print(dialect: Dialect, event: &str, answer: &Answer) -> Result<ExitCode, Failure> {
    if let Some(printed) = dialect::render(dialect, event, answer) {
        super::output::line(printed)?;
    }
    Ok(ExitCode::SUCCESS)
}

impl HookArgs {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        if let Some(HookCommand::Install(args)) = self.command {
            return args.run();
        }
        let dialect = self.dialect.expect("clap requires --dialect");
        let mut stdin = std::io::stdin().lock();
        let mut bytes = Vec::new();
        let read = read_within_bound(&mut stdin, &mut bytes);
        let payload = match &read {
            Err(error) => Err(format!("the hook input could not be read whole: {error}")),
            Ok(()) => serde_json::from_slice::<Value>(&bytes).map_err(|error| {
                format!("the hook input is not JSON ({error}); an agent sends one object per event")
            }),
        };
        let payload = match payload {
            Ok(payload) => payload,
            // An event that cannot be read (too large, too deep, a lone
            // surrogate in a tool's input) cannot be claimed; if it is a
            // tool about to run, the tool is denied (EMB-1), never let run
            // unclaimed behind a warning.
            Err(why) => {
                let mut scan = EventScan::default();
                scan.feed(&bytes);
                if read.is_err() {
                    // Past the bound: the rest is scanned too (the event's
                    // name may come after the tool's input), and read to
                    // its end, so the agent's write never fails.
                    scan_rest(&mut stdin, &mut scan);
                }
                if scan.names_a_tool_about_to_run(dialect) {
                    return print(dialect, "PreToolUse", &deny_unclaimed(&why));
                }
                return Err(unblocking(anyhow!(why)));
            }
        };
        let event = match dialect::parse(dialect, &payload) {
            Ok(event) => event,
            // A tool event that cannot be read cannot be claimed: deny it
            // (EMB-1). Anything else only warns: a stop must never be held
            // by an error it cannot clear (EMB-5).
            Err(why) if dialect::names_a_tool_about_to_run(dialect, &payload) => {
                return print(dialect, "PreToolUse", &deny_unclaimed(&why));
            }
            Err(why) => return Err(unblocking(anyhow!(why))),
        };
        let root = match (&self.root, project_dir(dialect), &event.cwd) {
            (Some(root), _, _) => root.clone(),
            (None, Some(project), _) => project,
            (None, None, Some(cwd)) => PathBuf::from(cwd),
            (None, None, None) => return Err(unblocking(anyhow!("the event names no `cwd`; give --root"))),
        };
        let answer = match (self.answer(dialect, &event, &root, &state_dir(data_dir)), &event.kind) {
            (Ok(answer), _) => answer,
            // Before a tool, a claim that cannot be made is a tool that must
            // not run (EMB-1).
            (Err(failure), Kind::Before) => Answer::Deny(format!(
                "effect ledger: no durable claim could be made, so this tool must not run: {}",
                failure.error
            )),
            // At stop, nothing could be decided: held once, with why; a
            // stop already held goes through (EMB-5: never a loop).
            (Err(failure), Kind::Stop { active, .. }) => {
                let mut why = format!("effect ledger: the session could not be decided: {}", failure.error);
                // CMP-14: the verdict file never keeps an older verdict.
                let run = run_id(dialect, &event.session_id);
                if let Some(file) = verdict::record(&state_dir(data_dir), &run, &why) {
                    why.push_str(&format!("\n(This is also in {}.)", file.display()));
                }
                if *active { Answer::Tell(why) } else { Answer::Block(why) }
            }
            // After a tool, the agent goes on and the failure is on stderr.
            (Err(failure), _) => return Err(unblocking(failure.error)),
        };
        print(dialect, &event.name, &answer)
    }

    fn answer(
        &self,
        dialect: Dialect,
        event: &Event,
        root: &Path,
        data_dir: &Path,
    ) -> Result<Answer, Failure> {
        if let Kind::Other(_) = event.kind {
            return Ok(Answer::Silent);
        }
        let canonical = root.canonicalize().unwrap_or_else(|_| root.to_owned());
        let base = agent_directory(dialect, event)
            .map_or_else(|| canonical.clone(), |base| base.canonicalize().unwrap_or(base));
        let mapped = dialect::map(dialect, &canonical, &base, &event.tool_name, &event.tool_input);
        match (&event.kind, &mapped) {
            (Kind::Before | Kind::After | Kind::Failed { .. } | Kind::Denied, Mapped::Nothing) => {
                return Ok(Answer::Silent);
            }
            // Refused before the ledger is opened: no run is begun for it.
            (Kind::Before, Mapped::Refused(why)) => return Ok(deny_unclaimed(why)),
            (_, Mapped::Refused(_)) => return Ok(Answer::Silent),
            _ => {}
        }
        // One event needs one classifier, or the evaluator: the rest are
        // never loaded.
        let (mut ledger, _) =
            open_ledger_with(root, data_dir, self.manifest.as_deref(), self.key_file.as_deref(), &[], true)?;
        let run = session_run(&mut ledger, dialect, &event.session_id)?;
        let held = Held::of(data_dir, &run.id);
        let mut hooked = Hooked { ledger: &mut ledger, run, dialect, event, data_dir, held, agent: agent() };
        // Commands whose processes were still alive at an earlier look:
        // settled as soon as the ledger sees them gone.
        let still_held = hooked.settle_held();
        Ok(match (&event.kind, mapped) {
            (Kind::Before, Mapped::Effect { tool, input }) => hooked.claim(&tool, &input),
            (Kind::Before, Mapped::Read { .. }) => Answer::Silent,
            (Kind::After, Mapped::Read { path }) => hooked.read_back(&path),
            (Kind::After | Kind::Failed { .. } | Kind::Denied, Mapped::Effect { tool, input }) => {
                hooked.settle(&tool, &input)
            }
            (Kind::Stop { active, last_message }, _) => {
                // No message from the agent: no answer to check, only
                // the evidence.
                let answer = last_message.as_deref().unwrap_or("");
                hooked.stop(&self.require, answer, *active, &still_held)?
            }
            _ => Answer::Silent,
        })
    }
}

/// The run of the agent's session: `DIALECT-SESSION`, continued when its
/// log exists, begun when it does not (a session's first hook).
fn session_run(ledger: &mut Ledger, dialect: Dialect, session: &str) -> Result<Run, Failure> {
    let id = run_id(dialect, session);
    match ledger.continue_run(&id) {
        Ok(run) => Ok(run),
        // Two first hooks of a session may race: the loser continues.
        Err(RunError::NoSuchRun { .. }) => {
            ledger.new_run(&id).or_else(|_| ledger.continue_run(&id)).map_err(|e| bad(anyhow!("{e}")))
        }
        Err(error) => Err(bad(anyhow!("{error}"))),
    }
}

/// A run id (1-64 letters, digits, `-`, `_`) from a session id of any
/// shape: kept when it fits, else a digest of it.
fn run_id(dialect: Dialect, session: &str) -> String {
    let clean: String = session
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    let id = format!("{}-{clean}", dialect.name());
    if id.len() <= 64 && clean == session {
        return id;
    }
    let digest = hex::encode(Sha256::digest(session.as_bytes()));
    format!("{}-{}", dialect.name(), &digest[..40])
}

/// What the agent is told of a command held open after its end (after
/// "effect ledger: ", or as an item of a held stop).
fn held_message(held: &HeldCommand) -> String {
    let command = held.input.get("command").and_then(Value::as_str).unwrap_or(&held.tool);
    let survivors = held.ended.as_ref().map(|ended| &ended.survivors[..]).unwrap_or_default();
    let pids: Vec<String> = survivors.iter().map(|s| s.pid.to_string()).collect();
    let named: Vec<String> = survivors.iter().map(ToString::to_string).collect();
    format!(
        "`{command}` ended, but processes it may have started are still running ({}); \
         until they end, every file it may touch is unsettled and \"done\" cannot be verified. The ledger \
         looks again at every later hook; to clear it, end them (`kill {}`) or let them finish.",
        named.join(", "),
        pids.join(" ")
    )
}

/// The agent: the nearest ancestor of this hook that is not a shell (the
/// agents start hooks through one), or `$EFFECTS_AGENT_PID` when that names
/// an ancestor (anything else is ignored: a PID that is not ours to speak
/// for would keep claims from ever being recovered). It is the executor of
/// the claims this hook makes (LOG-7): they stay open while it lives and are
/// recovered INTERRUPTED once it is gone.
fn agent() -> Executor {
    const SHELLS: &[&str] = &["sh", "dash", "bash", "zsh", "ksh", "fish", "busybox"];
    let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
    let mut ancestors = vec![parent];
    while ancestors.len() < 64 {
        match procfs::stat_of(*ancestors.last().expect("not empty")) {
            Some(stat) if stat.parent != 0 => ancestors.push(stat.parent),
            _ => break,
        }
    }
    let named = std::env::var("EFFECTS_AGENT_PID").ok().and_then(|pid| pid.trim().parse::<u32>().ok());
    let pid = match named.filter(|pid| ancestors.contains(pid)) {
        Some(pid) => pid,
        None => *ancestors
            .iter()
            .find(|pid| !SHELLS.contains(&procfs::command_name(**pid).unwrap_or_default().as_str()))
            .unwrap_or(&parent),
    };
    match procfs::identity_of(pid) {
        Some(identity) => Executor::Process(identity),
        // No agent to name: this process, whose claims recover as soon as
        // it is gone (the honest default for a parent already dead).
        None => effect_ledger::executor::current(),
    }
}

fn call(tool: &str, input: &Value) -> Result<Call, String> {
    Call::parse(tool, input).map_err(|error| format!("{}: {}", error.tool, error.message))
}

/// One hook event being answered: the ledger, the session's run, the
/// dialect and the event.
struct Hooked<'a> {
    ledger: &'a mut Ledger,
    run: Run,
    dialect: Dialect,
    event: &'a Event,
    /// The data dir (the hooks' state dir): where verdicts are written.
    data_dir: &'a Path,
    /// The session's commands whose windows the hook keeps.
    held: Held,
    /// The agent: the executor of this hook's claims, and the runtime whose
    /// processes a command's window is judged by.
    agent: Executor,
}

impl Hooked<'_> {
    /// The claim's request id: the agent's tool-use id, or (Gemini) the call's
    /// digest and its rank among the calls with that digest, first in first out.
    fn request_id(&mut self, tool: &str, input: &Value, opening: bool) -> Option<String> {
        let (ledger, run, event) = (&mut *self.ledger, &self.run, self.event);
        if let Some(id) = &event.tool_use_id {
            return Some(id.clone());
        }
        let canonical = serde_json::to_string(&(tool, input)).unwrap_or_default();
        let prefix = format!("fifo-{}-", &hex::encode(Sha256::digest(canonical.as_bytes()))[..24]);
        let history = ledger.history(&run.lineage).ok()?;
        let mut claims = Vec::new();
        let mut settled = std::collections::HashSet::new();
        for framed in &history {
            match &framed.record {
                Record::Claim(claim) if claim.operation.request_id.starts_with(&prefix) => {
                    claims.push((framed.position, claim.operation.request_id.clone()));
                }
                Record::Outcome(outcome) => {
                    settled.insert(outcome.claim);
                }
                _ => {}
            }
        }
        if opening {
            // The next rank; a concurrent hook that takes it first is answered
            // as a duplicate, and the caller tries the rank after.
            return Some(format!("{prefix}{}", claims.len()));
        }
        // A command held open after its end has had its facts: the next
        // end of an identical call is the next claim's.
        let ended = |id: &String| self.held.get(id).is_some_and(|held| held.ended.is_some());
        claims
            .iter()
            .find(|(position, id)| !settled.contains(position) && !ended(id))
            .map(|(_, id)| id.clone())
    }

    fn claim(&mut self, tool: &str, input: &Value) -> Answer {
        let (dialect, event) = (self.dialect, self.event);
        let executor = self.agent.clone();
        for _ in 0..64 {
            let call = match call(tool, input) {
                Ok(call) => call,
                Err(why) => return Answer::Deny(format!("effect ledger: {why}")),
            };
            let Some(id) = self.request_id(tool, input, true) else {
                return Answer::Deny(
                    "effect ledger: the session's log could not be read; nothing was claimed".into(),
                );
            };
            let claimed = self.ledger.claim_as(&self.run, &id, call, dialect.profile(), executor.clone());
            match claimed.status {
                // A retried hook (same tool-use id) is answered by the first claim.
                ClaimStatus::Run if !claimed.duplicate || event.tool_use_id.is_some() => {
                    // A command's window opens now (a retried hook keeps
                    // the first one's, which is earlier).
                    if effect_ledger::tools::is_command(tool) && self.held.get(&id).is_none() {
                        self.held.open(&id, tool, input);
                    }
                    return Answer::Silent;
                }
                ClaimStatus::Run => continue,
                ClaimStatus::Refused | ClaimStatus::Blocked => {
                    let why = claimed.reason.unwrap_or_default();
                    return Answer::Deny(format!("effect ledger refused {}: {why}", event.tool_name));
                }
            }
        }
        Answer::Deny("effect ledger: too many identical calls in flight; nothing was claimed".into())
    }

    fn settle(&mut self, tool: &str, input: &Value) -> Answer {
        let (dialect, event) = (self.dialect, self.event);
        let facts = reported(dialect, event, tool);
        let claimed = self.request_id(tool, input, false).filter(|id| {
            // A claim by any hook of the session; a log that cannot be read
            // here is the settle's to report.
            self.ledger.claim_of_request(&self.run, id).map_or(true, |claim| claim.is_some())
        });
        let Some(id) = claimed else {
            return self.ran_unclaimed(&facts);
        };
        // A command's window closes only on the ledger's own look at what it
        // started (SPEC 14): settled now if nothing lives, else held.
        // Looked at even when the agent says it never ran: what it started
        // and left running says otherwise (OUT-2), and then it ran, status
        // unknown.
        let observed = match self.held.get(&id) {
            Some(held) => {
                let alive_means = match facts.executed {
                    true => facts.clone(),
                    false => Reported::ran(None),
                };
                match self.held.ended(held, self.agent_pid(), &alive_means) {
                    None => Some(true),
                    Some(held) => return Answer::Context(format!("effect ledger: {}", held_message(&held))),
                }
            }
            None => None,
        };
        let mut settled =
            self.ledger.settle_observed(&self.run, &id, &facts, observed, call(tool, input).ok());
        self.held.close(&id);
        // Without ids (Gemini), a concurrent hook may have settled the oldest
        // claim of this digest first: these facts are the next one's.
        for _ in 0..64 {
            let lost = event.tool_use_id.is_none()
                && settled.reason.as_deref().is_some_and(|reason| reason.contains("already settled"));
            if !lost {
                break;
            }
            let Some(next) = self.request_id(tool, input, false) else { break };
            settled = self.ledger.settle_observed(&self.run, &next, &facts, observed, call(tool, input).ok());
            self.held.close(&next);
        }
        if settled.status != StepStatus::Ran {
            let why = settled.reason.unwrap_or_default();
            return Answer::Context(format!("effect ledger: {} was not settled: {why}", event.tool_name));
        }
        let execution = settled.outcome.as_ref().map(|o| name(&o.execution)).unwrap_or_default();
        let Some(claim) = settled.claim else {
            return Answer::Silent;
        };
        // The ledger's own verdict on this effect, over its readbacks (writes
        // nothing: the decision is taken at stop).
        let assessed = self.ledger.annotate(&self.run, "").ok().and_then(|decided| {
            decided.decision.assessments.iter().find(|a| a.claim == claim).map(|a| a.assessment)
        });
        let files: Vec<String> = settled.observations.iter().filter_map(|o| o.path.clone()).collect();
        let files = if files.is_empty() { String::new() } else { format!(" ({})", files.join(", ")) };
        let verdict = match assessed {
            Some(Assessment::Verified) => {
                "read back by the ledger: the bytes are the ones claimed".to_owned()
            }
            Some(Assessment::Contradicted) => {
                "read back by the ledger: the file does NOT hold the bytes this call was to write; \
                 do not report it as done"
                    .to_owned()
            }
            Some(Assessment::Failed) => "it failed, as the agent reported".to_owned(),
            Some(other) => format!("the ledger could not verify it ({})", name(&other)),
            None => "nothing of it could be verified".to_owned(),
        };
        Answer::Context(format!("effect ledger: {} settled {execution}{files}; {verdict}", event.tool_name))
    }

    /// A tool the agent ran with no claim (its pre-tool hook timed out, did
    /// not run, or was answered after the tool started): recorded now as an
    /// effect that ran unclaimed, of unknown scope, under a tool name that
    /// says so, so no decision of the session is silent about it (EMB-1 as
    /// extended in SPEC 14). One the agent says never ran is not recorded.
    fn ran_unclaimed(&mut self, facts: &Reported) -> Answer {
        let event = self.event;
        if !facts.executed {
            return Answer::Silent;
        }
        let id = match &event.tool_use_id {
            Some(id) => format!("unclaimed-{id}"),
            None => format!("unclaimed-{}", uuid::Uuid::now_v7()),
        };
        let tool = format!("{} (ran unclaimed)", event.tool_name);
        let input = serde_json::json!({"tool_input": event.tool_input});
        let recorded = call(&tool, &input).and_then(|unclaimed| {
            let claimed = self.ledger.claim_as(
                &self.run,
                &id,
                unclaimed.clone(),
                self.dialect.profile(),
                self.agent.clone(),
            );
            if claimed.status != ClaimStatus::Run {
                return Err(claimed.reason.unwrap_or_default());
            }
            let settled = self.ledger.settle(&self.run, &id, facts, Some(unclaimed));
            match settled.status {
                StepStatus::Ran => Ok(claimed.claim),
                _ => Err(settled.reason.unwrap_or_default()),
            }
        });
        let at = match recorded {
            Ok(Some(position)) => format!(" (#{position})"),
            Ok(None) => String::new(),
            Err(why) => {
                return Answer::Context(format!(
                    "effect ledger: {} ran without a claim, and could not be recorded ({why}); nothing of it \
                     is verified",
                    event.tool_name
                ));
            }
        };
        Answer::Context(format!(
            "effect ledger: {} ran without a claim (its pre-tool hook did not run, timed out or was refused); \
             it is recorded as an effect that ran unclaimed{at}: nothing of it can be verified, and the \
             session's decision says so",
            event.tool_name
        ))
    }

    /// After the agent read a file: the ledger reads it too, whole, with its
    /// own producer, so the run holds a fresh observation of it.
    fn read_back(&mut self, path: &str) -> Answer {
        let event = self.event;
        let id = event.tool_use_id.clone().unwrap_or_else(|| format!("read-{path}"));
        let Ok(call) = Call::parse("read_file", &serde_json::json!({"path": path})) else {
            return Answer::Silent;
        };
        let Ok(request) = StepRequest::new(0, &id, call, None) else { return Answer::Silent };
        let step = self.ledger.step(&self.run, &request);
        if step.status != StepStatus::Ran {
            tracing::warn!("the ledger's readback of {path}: {}", step.reason.unwrap_or_default());
        }
        Answer::Silent
    }

    /// The agent's PID (0 when it is unknown: nothing is beneath it).
    fn agent_pid(&self) -> u32 {
        match &self.agent {
            Executor::Process(identity) => identity.pid,
        }
    }

    /// Looks again at every command held open: each one whose processes
    /// are now gone is settled with the facts the agent reported and
    /// cleanup CLEAN. Returns those still held.
    fn settle_held(&mut self) -> Vec<HeldCommand> {
        let (gone, still) = self.held.look_again(self.agent_pid());
        for held in gone {
            let Some(ended) = &held.ended else { continue };
            let call = call(&held.tool, &held.input).ok();
            let settled =
                self.ledger.settle_observed(&self.run, &held.request_id, &ended.reported, Some(true), call);
            // Not recorded (the log failed): kept, to be tried again.
            if settled.status == StepStatus::Ran
                || settled.reason.as_deref().is_some_and(|r| r.contains("already settled"))
            {
                self.held.close(&held.request_id);
            }
        }
        still
    }

    fn stop(
        &mut self,
        extra_required: &[String],
        answer: &str,
        active: bool,
        still_held: &[HeldCommand],
    ) -> Result<Answer, Failure> {
        // `Ledger::complete` requires what the session's changes left in
        // place and what was required before, beside `--require` (CMP-7):
        // the set `effects decide --run` decides too, so a change never
        // settled, recovered INTERRUPTED or never read back keeps the agent
        // from stopping, naming the file.
        let completion = self
            .ledger
            .complete(&self.run, extra_required, answer)
            .map_err(|e| Failure::new(exit::PROBLEMS, anyhow!("deciding the session: {e}")))?;
        let decision = completion.decided.decision;
        // Done only when the decision says so and no command of the
        // session is held open (SPEC 14: without the ledger's own look at
        // its processes, the stop is held, naming the command).
        let done = decision.verdict == Verdict::Completed && still_held.is_empty();
        let mut text = match done {
            true => "effect ledger: this session's work is COMPLETED: verified done.".to_owned(),
            false => format!(
                "effect ledger: this session's work is {}, not verified done.",
                name(&decision.verdict)
            ),
        };
        for held in still_held {
            text.push_str(&format!("\n- {}", held_message(held)));
        }
        for reason in &decision.reasons {
            text.push_str(&format!("\n- {}", sentence(&reason.message)));
            if !reason.remedy.is_empty() {
                text.push_str(&format!(" To clear it: {}", sentence(&reason.remedy)));
            }
        }
        if !decision.disclosures.is_empty() {
            text.push_str("\nThe final answer must say:");
            for disclosure in &decision.disclosures {
                text.push_str(&format!("\n- {disclosure}"));
            }
        }
        // CMP-14: every decision reaches the user, COMPLETED included: in
        // the agent's channel for the user, and in a file a headless run's
        // user can read, named in the message.
        if let Some(file) = verdict::record(self.data_dir, &self.run.id, &text) {
            text.push_str(&format!("\n(This verdict is also in {}.)", file.display()));
        }
        Ok(match (done, active) {
            (true, _) | (false, true) => Answer::Tell(text),
            (false, false) => Answer::Block(text),
        })
    }
}

/// The facts the agent gave, and nothing more (OUT-1, TRU-1). A status is
/// read only where the agent's own shell tool says it: Codex's `Bash`
/// response, Claude Code's `Exit code N` failure, Gemini's `Exit Code: N`
/// line; never from another tool's output (an MCP result could say
/// anything). Without one, a command that ran is UNKNOWN, except where the
/// contract itself says the tool succeeded (Claude Code's PostToolUse of a
/// tool that is not a shell, or of a shell not interrupted; Gemini's
/// AfterTool of a tool that is not a shell, without an error). A denied tool
/// never ran; an interrupted one was cancelled.
fn reported(dialect: Dialect, event: &Event, tool: &str) -> Reported {
    let ran = Reported::ran;
    let shell = tool == "bash";
    let response = &event.tool_response;
    let interrupted = response.get("interrupted").and_then(Value::as_bool).unwrap_or(false);
    let status = shell.then(|| shell_status(dialect, event)).flatten();
    // A command the agent started in the background: its post-tool event
    // says it was launched, not how it ended.
    let background = ["run_in_background", "is_background"]
        .iter()
        .any(|key| event.tool_input.get(*key).and_then(Value::as_bool).unwrap_or(false));
    match &event.kind {
        Kind::Denied => Reported::never_ran(),
        Kind::Failed { interrupted: true, .. } => Reported { cancelled: true, ..ran(None) },
        _ if interrupted => Reported { cancelled: true, ..ran(None) },
        Kind::Failed { .. } => ran(status.filter(|code| *code != 0)),
        _ if shell && background => ran(None),
        _ => match (dialect, shell) {
            (_, true) if status.is_some() => ran(status),
            (Dialect::Claude, _) => ran(Some(0)),
            (Dialect::Gemini, false) => ran(Some(0)),
            _ => ran(None),
        },
    }
}

/// The exit status the agent's shell tool reported, where it says one, read
/// only from the part of its result the command cannot write: its output
/// could print any status line it likes.
fn shell_status(dialect: Dialect, event: &Event) -> Option<i32> {
    match (dialect, &event.kind) {
        (Dialect::Claude, Kind::Failed { error, .. }) => claude_exit_code(error),
        (Dialect::Codex, _) => ["exit_code", "exitCode"]
            .iter()
            .find_map(|key| event.tool_response.get(*key).and_then(Value::as_i64))
            .and_then(|code| i32::try_from(code).ok()),
        (Dialect::Gemini, _) => {
            event.tool_response.get("llmContent").and_then(Value::as_str).and_then(gemini_exit_code)
        }
        _ => None,
    }
}

/// Claude Code's failed `Bash`: the error's first line is `Exit code N`, and
/// the command's output follows it.
fn claude_exit_code(error: &str) -> Option<i32> {
    error.lines().next()?.strip_prefix("Exit code ")?.trim().parse().ok()
}

/// The lines Gemini CLI's shell result ends with after its `Exit Code` line:
/// its own, never the command's.
const GEMINI_TRAILER: [&str; 3] = ["Signal: ", "Background PIDs: ", "Process Group PGID: "];

/// Gemini CLI's shell result (`llmContent`) is `Command: ...`, `Directory:
/// ...`, the output, `Error: ...`, then `Exit Code: N` and a trailer of its
/// own. The output comes first and can hold any line, so the status is the
/// `Exit Code` line found walking back over the trailer alone; anything else
/// (`(none)` for a command a signal ended, no such line) says no status.
fn gemini_exit_code(text: &str) -> Option<i32> {
    for line in text.lines().rev() {
        if let Some(code) = line.strip_prefix("Exit Code: ") {
            return code.trim().parse().ok();
        }
        if !GEMINI_TRAILER.iter().any(|key| line.starts_with(key)) {
            return None;
        }
    }
    None
}

/// `text` ending as a sentence does.
fn sentence(text: &str) -> String {
    let text = text.trim_end();
    if text.ends_with(['.', '!', '?', ')']) { text.to_owned() } else { format!("{text}.") }
}

#[cfg(test)]
mod tests {
    use super::{claude_exit_code, gemini_exit_code};

    #[test]
    fn a_gemini_status_is_read_only_from_the_trailer_after_the_output() {
        let result = |output: &str, exit: &str| {
            format!(
                "Command: make\nDirectory: (root)\nOutput: {output}\nError: (none)\nExit Code: {exit}\n\
                 Signal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 77"
            )
        };
        assert_eq!(gemini_exit_code(&result("ok", "0")), Some(0));
        assert_eq!(gemini_exit_code(&result("ok", "2")), Some(2));
        assert_eq!(gemini_exit_code(&result("Exit Code: 0", "1")), Some(1), "the output's line is not read");
        assert_eq!(gemini_exit_code(&result("x\nExit Code: 0\nSignal: (none)", "(none)")), None);
        // Without Gemini's own line, a status the output printed last is
        // still the output's.
        assert_eq!(gemini_exit_code("Command: make\nOutput: x\nExit Code: 0\nError: (none)"), None);
        assert_eq!(gemini_exit_code("Output: done"), None);
    }

    #[test]
    fn a_claude_status_is_the_first_line_of_the_failure() {
        assert_eq!(claude_exit_code("Exit code 1"), Some(1));
        assert_eq!(claude_exit_code("Exit code 2\nExit code 0"), Some(2));
        assert_eq!(claude_exit_code("Command timed out\nExit code 0"), None, "the output's line is not read");
    }
}
