//! A private PostgreSQL cluster for the fleet store's tests (SPEC 13).
//!
//! `cargo xtask test` runs the store suites against a real server. When
//! `$EFFECTS_TEST_POSTGRES` names one, that is used; otherwise a throwaway
//! cluster is made with Debian's server binaries (installed with apt-get
//! when missing and running as root), run by an unprivileged user (`initdb`
//! refuses root: the `postgres` user when root, else the caller), listening
//! on a Unix socket only, and stopped and removed when the tests end.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The environment variable the tests read the server's URL from.
pub const URL_VAR: &str = "EFFECTS_TEST_POSTGRES";
/// The one they read a command that restarts that server from.
pub const RESTART_VAR: &str = "EFFECTS_TEST_POSTGRES_RESTART";
/// The one they read a command that stops it from (the restart command
/// starts it again).
pub const STOP_VAR: &str = "EFFECTS_TEST_POSTGRES_STOP";

/// A running cluster this process started; stopped when dropped.
pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    user: Option<&'static str>,
    url: String,
}

impl Cluster {
    /// A shell command that restarts the server (fast shutdown, then start
    /// with the same options), for the test of a restart mid-append.
    pub fn restart_command(&self) -> String {
        self.pg_ctl_command("restart")
    }

    /// A shell command that stops the server (fast shutdown); the restart
    /// command starts it again with the same options.
    pub fn stop_command(&self) -> String {
        self.pg_ctl_command("stop")
    }

    fn pg_ctl_command(&self, action: &str) -> String {
        let pg_ctl = self.bin.join("pg_ctl");
        let run = format!("{} -w -m fast -D {} {action}", pg_ctl.display(), self.data.display());
        match self.user {
            Some(user) => format!("runuser -u {user} -- {run} >/dev/null"),
            None => format!("{run} >/dev/null"),
        }
    }

    /// The server the tests use: `$EFFECTS_TEST_POSTGRES`, or a new cluster.
    pub fn for_tests() -> Result<(String, Option<Cluster>)> {
        if let Ok(url) = std::env::var(URL_VAR)
            && !url.is_empty()
        {
            return Ok((url, None));
        }
        let cluster = Cluster::start()?;
        Ok((cluster.url.clone(), Some(cluster)))
    }

    fn start() -> Result<Self> {
        let bin = server_bin()?;
        let root = is_root();
        let user = root.then_some("postgres");
        let base = std::env::temp_dir().join(format!("effects-pg-{}", std::process::id()));
        let data = base.join("data");
        let socket = base.join("socket");
        std::fs::create_dir_all(&socket).context("creating the cluster's directory")?;
        if let Some(user) = user {
            run(Command::new("chown").args(["-R", &format!("{user}:{user}")]).arg(&base))?;
        }
        eprintln!("xtask: starting a private PostgreSQL cluster in {}", base.display());
        let mut cluster = Self { bin, data, user, url: String::new() };
        cluster.as_owner(cluster.bin.join("initdb"), |command| {
            command.args(["--auth=trust", "--username=effects", "--no-sync", "-D"]).arg(&cluster.data)
        })?;
        let options = format!("-c listen_addresses='' -c unix_socket_directories='{}'", socket.display());
        let log = base.join("server.log");
        cluster.as_owner(cluster.bin.join("pg_ctl"), |command| {
            command.args(["-w", "-D"]).arg(&cluster.data).args(["-o", &options, "-l"]).arg(&log).arg("start")
        })?;
        cluster.url = format!("postgresql://effects@/postgres?host={}", socket.display());
        Ok(cluster)
    }

    fn as_owner(&self, program: PathBuf, args: impl FnOnce(&mut Command) -> &mut Command) -> Result<()> {
        let mut command = match self.user {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(program);
                command
            }
            None => Command::new(program),
        };
        args(&mut command);
        run(&mut command)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = self.as_owner(self.bin.join("pg_ctl"), |command| {
            command.args(["-w", "-m", "fast", "-D"]).arg(&self.data).arg("stop")
        });
        if let Err(error) = stopped {
            eprintln!("xtask: stopping the PostgreSQL cluster failed: {error:#}");
        }
        if let Some(base) = self.data.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.trim_ascii() == b"0").unwrap_or(false)
}

/// The newest installed server's `bin/` (`/usr/lib/postgresql/<major>/bin`),
/// installing Debian's `postgresql` when there is none and we are root.
fn server_bin() -> Result<PathBuf> {
    if let Some(bin) = newest_server() {
        return Ok(bin);
    }
    if !is_root() {
        bail!("no PostgreSQL server found: apt-get install postgresql, or set {URL_VAR} to a server's URL");
    }
    eprintln!("xtask: installing PostgreSQL: apt-get install -y postgresql");
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "postgresql"])
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    newest_server().context("apt-get installed postgresql, but no /usr/lib/postgresql/*/bin/initdb")
}

fn newest_server() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(Path::new("/usr/lib/postgresql"))
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let major = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn run(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}
