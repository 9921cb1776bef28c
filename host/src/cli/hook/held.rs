//! Commands the agent ran, held open until the ledger sees their processes
//! gone (SPEC 14, INV-2/PROC-1 extended to runtime-run commands).
//!
//! The agent runs its shell commands itself, so no supervisor of ours leads
//! them; the hook observes `/proc` instead ([`effect_ledger::runtime_window`]).
//! Between the agent's pre-tool and post-tool events, and from the post-tool
//! event until the processes are gone, the hook keeps a small file per
//! command in `DATA_DIR/windows/RUN/`:
//!
//! - at the claim: the [`Window`] (when the call was claimed);
//! - after the tool, when something the call may have started still lives:
//!   the facts the agent reported, when it looked, and what it found. The
//!   claim stays unsettled meanwhile (an effect in flight: its files are
//!   unsettled, CMP-2), and every later hook of the session looks again
//!   ([`Held::look_again`]); once nothing is left the claim is settled with
//!   the agent's facts and cleanup CLEAN, which closes its window.
//!
//! These files are bookkeeping, not evidence: a lost, unreadable, oversized
//! or implausible one (a window of another boot, or one that starts later
//! than now: no agent asking in this boot made it), or one that is not a
//! regular file, is no note at all and only leaves the window open (the
//! claim is settled with no observation, or stays unsettled until the agent
//! is gone and recovery settles it INTERRUPTED). A process that can rewrite the data dir can forge them, as
//! it could an unkeyed log (docs/threats.md).

use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use effect_ledger::ledger::Reported;
use effect_ledger::runtime_window::{Survivor, Window, ticks_now};

/// The data dir's folder of held windows.
const WINDOWS: &str = "windows";

/// The largest note read: a command line and a few PIDs fit many times over.
const NOTE_BOUND: u64 = 256 << 10;

/// A command's window as the hook keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeldCommand {
    /// The claim's request id.
    pub request_id: String,
    /// The ledger's tool and the input it claimed (to settle it again).
    pub tool: String,
    pub input: Value,
    /// When the call was claimed.
    pub window: Window,
    /// Once the agent said the call ended: what it reported, and the look.
    #[serde(default)]
    pub ended: Option<Ended>,
}

/// The agent's word that the call ended, and what the hook then saw.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ended {
    /// The facts the agent reported.
    pub reported: Reported,
    /// When the hook first looked (ticks since boot).
    pub looked: u64,
    /// What it found alive then, or at its latest look.
    pub survivors: Vec<Survivor>,
}

/// The session's held windows: one folder per run.
pub struct Held {
    dir: Option<Dir>,
}

fn file_name(request_id: &str) -> String {
    format!("{}.json", &hex::encode(Sha256::digest(request_id.as_bytes()))[..32])
}

impl Held {
    /// The folder of `run` in the data dir at `data_dir`, made when missing.
    /// `None` inside when it cannot be: every window then stays open.
    #[allow(clippy::disallowed_methods)] // the data dir's path, from the command line
    pub fn of(data_dir: &Path, run: &str) -> Self {
        let folder = format!("{WINDOWS}/{run}");
        let dir = Dir::open_ambient_dir(data_dir, ambient_authority())
            .and_then(|data| data.create_dir_all(&folder).and_then(|()| data.open_dir(&folder)))
            .map_err(|error| tracing::warn!("the hook's held windows in {}: {error}", data_dir.display()))
            .ok();
        Self { dir }
    }

    fn write(&self, held: &HeldCommand) {
        let Some(dir) = &self.dir else { return };
        let name = file_name(&held.request_id);
        // A name of this process's own: concurrent hooks never share one.
        let temporary = format!("{name}.{}.tmp", std::process::id());
        let bytes = serde_json::to_vec(held).expect("a held window serializes");
        if let Err(error) = dir.write(&temporary, bytes).and_then(|()| dir.rename(&temporary, dir, &name)) {
            tracing::warn!("keeping the window of {}: {error}", held.request_id);
        }
    }

    /// Notes a command's window when its claim is made.
    pub fn open(&self, request_id: &str, tool: &str, input: &Value) {
        self.write(&HeldCommand {
            request_id: request_id.to_owned(),
            tool: tool.to_owned(),
            input: input.clone(),
            window: Window::open(),
            ended: None,
        });
    }

    /// The window noted for `request_id`, if there is one the hook can use:
    /// a note that names another request, or a window that cannot be this
    /// boot's (forged or damaged), is none, so its command stays open.
    pub fn get(&self, request_id: &str) -> Option<HeldCommand> {
        self.read(&file_name(request_id)).filter(|held| held.request_id == request_id)
    }

    /// The note named `name`: a regular file of at most [`NOTE_BOUND`] bytes,
    /// opened without following a symlink or waiting on a FIFO, holding a
    /// plausible window ([`Window::is_plausible`]).
    fn read(&self, name: &str) -> Option<HeldCommand> {
        use std::io::Read;
        use std::os::fd::AsFd;

        use rustix::fs::{FileType, Mode, OFlags};
        let dir = self.dir.as_ref()?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = rustix::fs::openat(dir.as_fd(), name, flags, Mode::empty()).ok()?;
        let stat = rustix::fs::fstat(&fd).ok()?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_size > NOTE_BOUND as i64
        {
            return None;
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd).take(NOTE_BOUND + 1).read_to_end(&mut bytes).ok()?;
        let held: HeldCommand = serde_json::from_slice(&bytes).ok()?;
        held.window.is_plausible().then_some(held)
    }

    /// Forgets a window once its claim is settled.
    pub fn close(&self, request_id: &str) {
        if let Some(dir) = &self.dir {
            let _ = dir.remove_file(file_name(request_id));
        }
    }

    /// The first look after the agent said the call ended: `None` when
    /// nothing it may have started lives (settle now, processes gone);
    /// otherwise the window is kept with what was found.
    pub fn ended(&self, mut held: HeldCommand, runtime: u32, reported: &Reported) -> Option<HeldCommand> {
        let looked = ticks_now();
        let survivors = held.window.survivors(runtime);
        if survivors.is_empty() {
            return None;
        }
        held.ended = Some(Ended { reported: reported.clone(), looked, survivors });
        self.write(&held);
        Some(held)
    }

    /// Every window whose command ended, looked at again: those whose
    /// processes are now gone (to settle, and then [`Held::close`]), and
    /// those still held, with what still lives.
    pub fn look_again(&self, runtime: u32) -> (Vec<HeldCommand>, Vec<HeldCommand>) {
        let (mut gone, mut still) = (Vec::new(), Vec::new());
        let Some(dir) = &self.dir else { return (gone, still) };
        let Ok(entries) = dir.entries() else { return (gone, still) };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|name| name.ends_with(".json")) else { continue };
            let Some(mut held) = self.read(name).filter(|held| file_name(&held.request_id) == name) else {
                continue;
            };
            let Some(ended) = &mut held.ended else { continue };
            let survivors = held.window.survivors_after(runtime, ended.looked, &ended.survivors);
            if survivors.is_empty() {
                gone.push(held);
            } else {
                if survivors != ended.survivors {
                    ended.survivors = survivors;
                    self.write(&held);
                }
                still.push(held);
            }
        }
        (gone, still)
    }
}
