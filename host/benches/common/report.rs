//! The one machine-readable line every bench prints per figure:
//! `BENCH {json}`, which `cargo xtask bench` collects into
//! docs/benchmarks.md. A figure is a measurement, its baseline from the same
//! run, the ratio between them and, where an issue set one, the goal.

use serde::Serialize;

/// Which way a ratio's goal points.
#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The ratio must not exceed this.
    AtMost(f64),
    /// The ratio must reach at least this.
    AtLeast(f64),
}

impl Goal {
    fn met(self, ratio: f64) -> bool {
        match self {
            Goal::AtMost(limit) => ratio <= limit,
            Goal::AtLeast(floor) => ratio >= floor,
        }
    }
}

/// One measured quantity at its median (and 99th percentile where the bench
/// keeps every sample).
#[derive(Clone, Serialize)]
pub struct Value {
    pub name: String,
    pub unit: &'static str,
    pub p50: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
}

/// One figure of one bench; printed by [`Figure::print`].
#[derive(Serialize)]
pub struct Figure {
    bench: &'static str,
    figure: &'static str,
    title: String,
    measured: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    goal: Option<Goal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    met: Option<bool>,
    scale: f64,
}

/// `value` in `unit`, named `name`.
pub fn value(name: impl Into<String>, unit: &'static str, p50: f64, p99: Option<f64>) -> Value {
    Value { name: name.into(), unit, p50, p99 }
}

impl Figure {
    /// Figure `figure` of `bench`, described by `title`, measuring `measured`.
    pub fn new(bench: &'static str, figure: &'static str, title: impl Into<String>, measured: Value) -> Self {
        let scale = std::env::var("EFFECTS_BENCH_SCALE").ok().and_then(|v| v.parse().ok()).unwrap_or(1.0);
        Figure {
            bench,
            figure,
            title: title.into(),
            measured,
            baseline: None,
            ratio: None,
            goal: None,
            met: None,
            scale,
        }
    }

    /// The baseline, and the ratio measured/baseline at the median.
    pub fn against(mut self, baseline: Value) -> Self {
        self.ratio = Some(self.measured.p50 / baseline.p50);
        self.baseline = Some(baseline);
        self
    }

    /// A ratio computed otherwise (an overhead, a growth), replacing the
    /// plain one.
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = Some(ratio);
        self
    }

    /// The goal for the ratio.
    pub fn goal(mut self, goal: Goal) -> Self {
        self.met = self.ratio.map(|ratio| goal.met(ratio));
        self.goal = Some(goal);
        self
    }

    /// Prints the figure's `BENCH` line.
    pub fn print(self) {
        println!("BENCH {}", serde_json::to_string(&self).expect("a figure serializes"));
    }
}
