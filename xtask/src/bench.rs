//! `cargo xtask bench`: runs every host bench, collects the `BENCH {json}`
//! line each prints per figure (host/benches/common/report.rs), and writes
//! them as docs/benchmarks.md: the method, the machine, and per bench each
//! figure's p50/p99, its baseline from the same run, the ratio and the goal.
//!
//! `--quick` scales every bench down (`EFFECTS_BENCH_SCALE=0.1`, short
//! criterion runs) and writes target/bench-report.md instead, leaving the
//! tracked page alone: CI runs that to keep the benches compiling and
//! running, and never gates on the figures (shared machines are noisy).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Every bench of the host crate, in the order the page lists them, and
/// whether it runs under criterion (which takes its own duration flags).
const BENCHES: &[(&str, bool)] = &[
    ("log_append", false),
    ("log_contention", false),
    ("fleet_store", false),
    ("chain_write", false),
    ("chain_bash", false),
    ("session_continue", false),
    ("serve_roundtrip", false),
    ("hook_latency", false),
    ("mcp_proxy", false),
    ("decide_read", false),
    ("evaluate", false),
    ("policy_call", true),
];

/// What `cargo xtask bench` was asked for.
pub struct Options {
    pub quick: bool,
    pub only: Vec<String>,
    pub out: Option<PathBuf>,
}

/// Runs the benches and writes the report.
pub fn run(root: &Path, options: &Options) -> Result<()> {
    for name in &options.only {
        if !BENCHES.iter().any(|(bench, _)| bench == name) {
            let known: Vec<&str> = BENCHES.iter().map(|(bench, _)| *bench).collect();
            bail!("no bench named {name}; the benches are {}", known.join(", "));
        }
    }
    let cargo = crate::cargo();
    let selected: Vec<(&str, bool)> = BENCHES
        .iter()
        .copied()
        .filter(|(name, _)| options.only.is_empty() || options.only.iter().any(|o| o == name))
        .collect();
    // The fleet store's bench runs against a real server; a cluster this
    // starts is stopped when `_cluster` drops.
    let (postgres_url, _cluster) = match selected.iter().any(|(name, _)| *name == "fleet_store") {
        true => {
            let (url, cluster) = crate::postgres::Cluster::for_tests()?;
            (Some(url), cluster)
        }
        false => (None, None),
    };
    let mut figures = Vec::new();
    for (i, (name, criterion)) in selected.iter().enumerate() {
        eprintln!(
            "xtask: bench {}/{}: {name}{}",
            i + 1,
            selected.len(),
            if options.quick { " (quick)" } else { "" }
        );
        figures.extend(run_bench(root, &cargo, name, *criterion, options.quick, postgres_url.as_deref())?);
    }
    let out = options.out.clone().unwrap_or_else(|| {
        if options.quick { root.join("target/bench-report.md") } else { root.join("docs/benchmarks.md") }
    });
    let mut page = render(&figures, &machine(root), options.quick);
    if !options.only.is_empty()
        && let Ok(old) = std::fs::read_to_string(&out)
    {
        // One bench rerun: the other benches keep their sections (each names
        // the commit and time it was measured at).
        page.push_str(&sections_not_in(&old, &page));
    }
    std::fs::write(&out, page).with_context(|| format!("writing {}", out.display()))?;
    let unmet: Vec<String> = figures
        .iter()
        .filter(|f| f["met"] == Value::Bool(false))
        .map(|f| format!("{}/{}", f["bench"].as_str().unwrap_or("?"), f["figure"].as_str().unwrap_or("?")))
        .collect();
    eprintln!("xtask: {} figures written to {}", figures.len(), out.display());
    if !unmet.is_empty() {
        eprintln!("xtask: goals not met in this run (not a failure; see the page): {}", unmet.join(", "));
    }
    Ok(())
}

/// Runs one bench, echoing its output, and returns its figures.
fn run_bench(
    root: &Path,
    cargo: &str,
    name: &str,
    criterion: bool,
    quick: bool,
    postgres_url: Option<&str>,
) -> Result<Vec<Value>> {
    let mut command = Command::new(cargo);
    command.current_dir(root).args(["bench", "--locked", "--bench", name]);
    if let Some(url) = postgres_url {
        command.env(crate::postgres::URL_VAR, url);
    }
    if quick {
        command.env("EFFECTS_BENCH_SCALE", "0.1");
        if criterion {
            command.args(["--", "--warm-up-time", "0.3", "--measurement-time", "1", "--sample-size", "10"]);
        }
    }
    let mut child = command.stdout(Stdio::piped()).spawn().with_context(|| format!("running {command:?}"))?;
    let mut figures = Vec::new();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        match line.strip_prefix("BENCH ") {
            Some(json) => figures.push(
                serde_json::from_str::<Value>(json)
                    .with_context(|| format!("bench {name} printed a bad line: {line}"))?,
            ),
            None => eprintln!("  {line}"),
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("bench {name} failed ({status}); its output is above");
    }
    if figures.is_empty() {
        bail!("bench {name} printed no BENCH line");
    }
    Ok(figures)
}

/// What the page says about where it was measured.
struct Machine {
    lines: Vec<(&'static str, String)>,
}

impl Machine {
    fn get(&self, key: &str) -> &str {
        self.lines.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str()).unwrap_or("")
    }
}

/// The `## bench` sections of `old` whose bench `new` does not have.
fn sections_not_in(old: &str, new: &str) -> String {
    let have: Vec<&str> = new.split("\n## ").skip(1).filter_map(|s| s.lines().next()).collect();
    old.split("\n## ")
        .skip(1)
        .filter(|section| {
            let name = section.lines().next().unwrap_or("");
            BENCHES.iter().any(|(bench, _)| *bench == name) && !have.contains(&name)
        })
        .map(|section| format!("\n## {}", section.trim_end_matches('\n').to_owned() + "\n"))
        .collect()
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn output(program: &str, args: &[&str], dir: &Path) -> Option<String> {
    let out = Command::new(program).args(args).current_dir(dir).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The machine: host name, CPU, cores, memory, kernel, the filesystem the
/// benches write to, the compiler, the commit and the time.
fn machine(root: &Path) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|rest| rest.split_once(':')).map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown")
        .to_owned();
    let cores = std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find(|l| l.starts_with("MemTotal:")).map(|l| l.to_owned()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kib| kib.parse::<u64>().ok()))
        .map(|kib| format!("{:.1} GiB", kib as f64 / (1024.0 * 1024.0)))
        .unwrap_or_default();
    let target = root.join("target");
    let filesystem = output("df", &["--output=fstype,source", "."], &target)
        .and_then(|text| text.lines().last().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" on ")))
        .unwrap_or_default();
    let commit = output("git", &["rev-parse", "--short", "HEAD"], root).unwrap_or_default();
    let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"], root)
        .map(|s| if s.is_empty() { "" } else { " (with uncommitted changes)" })
        .unwrap_or_default();
    Machine {
        lines: vec![
            ("host", read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default()),
            ("CPU", cpu),
            ("logical cores", cores),
            ("memory", memory),
            ("kernel", read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default()),
            ("filesystem of target/", filesystem),
            ("rustc", output("rustc", &["--version"], root).unwrap_or_default()),
            ("commit", format!("{commit}{dirty}")),
            ("measured", output("date", &["-u", "+%Y-%m-%d %H:%M UTC"], root).unwrap_or_default()),
        ],
    }
}

const METHOD: &str = "\
Every bench measures its subject beside a baseline **in the same run**, \
interleaved call by call or round by round, and reports the ratio: these \
machines are shared and noisy, so absolute figures drift between runs while \
ratios hold. Latencies are p50 (the median) and, where the bench keeps every \
sample, p99; throughputs are medians of rounds. A goal is a bound on the \
ratio, set by the issue named beside it; a goal not met is reported, never \
hidden, and does not fail a build (CI runs `cargo xtask bench --quick` to \
keep the benches running, and does not gate on the figures). Each bench's \
own header (host/benches/NAME.rs) says exactly what it times and why the \
baseline is the fair one.

Regenerate this page with `cargo xtask bench` (about 15 minutes; \
`cargo xtask bench --only NAME` reruns one bench and keeps the other \
sections, each of which names the commit it was measured at). Each bench prints one \
`BENCH {json}` line per figure, which is all this page is made from.";

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

fn format_value(value: &Value) -> String {
    let Some(p50) = value.get("p50").and_then(number) else { return String::new() };
    let unit = value["unit"].as_str().unwrap_or("");
    let amount = |x: f64| if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.2}") };
    match value.get("p99").and_then(number) {
        Some(p99) => {
            format!("{}: {} / {} {unit}", value["name"].as_str().unwrap_or(""), amount(p50), amount(p99))
        }
        None => format!("{}: {} {unit}", value["name"].as_str().unwrap_or(""), amount(p50)),
    }
}

fn format_goal(goal: &Value) -> String {
    if let Some(limit) = goal.get("at_most").and_then(number) {
        format!("<= {limit}x")
    } else if let Some(floor) = goal.get("at_least").and_then(number) {
        format!(">= {floor}x")
    } else {
        String::new()
    }
}

/// The page.
fn render(figures: &[Value], machine: &Machine, quick: bool) -> String {
    let mut page = String::from(
        "# Benchmarks\n\n<!-- Generated by `cargo xtask bench`: edit xtask/src/bench.rs, not this file. -->\n\n",
    );
    if quick {
        page.push_str(
            "**A quick run (`--quick`): every bench scaled down to a tenth; the figures are rough.**\n\n",
        );
    }
    page.push_str("## Method\n\n");
    page.push_str(METHOD);
    page.push_str("\n\n## Machine\n\n");
    for (key, value) in &machine.lines {
        page.push_str(&format!("- {key}: {value}\n"));
    }
    let mut benches: Vec<&str> = Vec::new();
    for figure in figures {
        let bench = figure["bench"].as_str().unwrap_or("?");
        if !benches.contains(&bench) {
            benches.push(bench);
        }
    }
    for bench in benches {
        page.push_str(&format!(
            "\n## {bench}\n\n`cargo bench --bench {bench}`, measured at {} ({}) on {}\n\n\
             | figure | measured (p50 / p99) | baseline (p50 / p99) | ratio | goal | met |\n\
             | --- | --- | --- | --- | --- | --- |\n",
            machine.get("commit"),
            machine.get("measured"),
            machine.get("host"),
        ));
        for figure in figures.iter().filter(|f| f["bench"] == bench) {
            let ratio = figure.get("ratio").and_then(number).map(|r| format!("{r:.2}x")).unwrap_or_default();
            let met = match figure.get("met") {
                Some(Value::Bool(true)) => "yes",
                Some(Value::Bool(false)) => "**no**",
                _ => "",
            };
            page.push_str(&format!(
                "| {} | {} | {} | {ratio} | {} | {met} |\n",
                figure["title"].as_str().unwrap_or(""),
                format_value(&figure["measured"]),
                figure.get("baseline").map(format_value).unwrap_or_default(),
                figure.get("goal").map(format_goal).unwrap_or_default(),
            ));
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_renders_with_its_baseline_ratio_and_goal() {
        let figure: Value = serde_json::from_str(
            r#"{"bench":"log_append","figure":"claim_vs_raw","title":"claim vs raw",
                "measured":{"name":"claim","unit":"us","p50":110.0,"p99":300.0},
                "baseline":{"name":"raw","unit":"us","p50":100.0,"p99":250.0},
                "ratio":1.1,"goal":{"at_most":1.1},"met":true,"scale":1.0}"#,
        )
        .unwrap();
        let page = render(&[figure], &Machine { lines: vec![("host", "h".into())] }, false);
        assert!(
            page.contains(
                "| claim vs raw | claim: 110 / 300 us | raw: 100 / 250 us | 1.10x | <= 1.1x | yes |"
            ),
            "{page}"
        );
        assert!(page.contains("- host: h"));
        assert!(page.contains("## log_append"));
    }

    #[test]
    fn a_rerun_of_one_bench_keeps_the_other_benches_sections() {
        let old = "# Benchmarks\n\n## Machine\n\n- host: a\n\n## log_append\n\nold claims\n\n## evaluate\n\nold decisions\n";
        let new = "# Benchmarks\n\n## Machine\n\n- host: b\n\n## evaluate\n\nnew decisions\n";
        let kept = sections_not_in(old, new);
        assert_eq!(kept, "\n## log_append\n\nold claims\n");
    }
}
