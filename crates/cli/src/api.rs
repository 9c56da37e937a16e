//! The library interface: run an experiment and get its results document as
//! a Rust value. The `mmlab` binary and the Python binding (`python/`) both
//! go through here, so they produce the same documents.
//!
//! ```no_run
//! use mmlab::api::{self, RunOptions, Source};
//! let doc = api::run(Source::Builtin("page-churn"), &RunOptions::default())?;
//! for row in doc.tidy_rows() {
//!     println!("{} {} {} = {} {}", row.workload, row.kernel, row.metric, row.value, row.unit);
//! }
//! # Ok::<(), anyhow::Error>(())
//! ```

use crate::experiment::{Experiment, ExperimentFile};
use crate::report::{self, Format, RunResult};
use crate::results::{ExperimentResults, ResultsDoc};
use crate::runner;
use anyhow::{bail, Result};
use std::path::Path;

/// The built-in experiments, embedded so that `mmlab reproduce` works from
/// any directory, in alphabetical order.
pub const BUILTIN_EXPERIMENTS: &[(&str, &str)] = &[
    (
        "anon-cow-seq",
        include_str!("../../../experiments/anon-cow-seq.toml"),
    ),
    (
        "huge-copy-order",
        include_str!("../../../experiments/huge-copy-order.toml"),
    ),
    (
        "large-anon-folios",
        include_str!("../../../experiments/large-anon-folios.toml"),
    ),
    (
        "large-anon-folios-j80",
        include_str!("../../../experiments/large-anon-folios-j80.toml"),
    ),
    (
        "large-anon-folios-order-mix",
        include_str!("../../../experiments/large-anon-folios-order-mix.toml"),
    ),
    (
        "large-anon-folios-page-fault",
        include_str!("../../../experiments/large-anon-folios-page-fault.toml"),
    ),
    (
        "large-anon-folios-speedometer",
        include_str!("../../../experiments/large-anon-folios-speedometer.toml"),
    ),
    (
        "page-churn",
        include_str!("../../../experiments/page-churn.toml"),
    ),
    (
        "page-fault1",
        include_str!("../../../experiments/page-fault1.toml"),
    ),
    (
        "pcp-autotune",
        include_str!("../../../experiments/pcp-autotune.toml"),
    ),
    (
        "pcp-autotune-lmbench",
        include_str!("../../../experiments/pcp-autotune-lmbench.toml"),
    ),
    (
        "pcp-autotune-netperf",
        include_str!("../../../experiments/pcp-autotune-netperf.toml"),
    ),
    (
        "thp-migration",
        include_str!("../../../experiments/thp-migration.toml"),
    ),
    (
        "thp-migration-tiering",
        include_str!("../../../experiments/thp-migration-tiering.toml"),
    ),
    (
        "vmacache",
        include_str!("../../../experiments/vmacache.toml"),
    ),
];

/// The names of the built-in experiments.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN_EXPERIMENTS.iter().map(|(n, _)| *n).collect()
}

/// Where the experiments to run come from.
pub enum Source<'a> {
    /// An experiment file (TOML).
    Path(&'a Path),
    /// An experiment's TOML text; `origin` names it in errors and locates
    /// profile paths relative to it.
    Toml { text: &'a str, origin: &'a Path },
    /// An experiment already parsed, from TOML or any other serde source
    /// (a Python dict through the binding).
    Parsed {
        file: Box<ExperimentFile>,
        origin: &'a Path,
    },
    /// A built-in experiment and its companions (`pcp-autotune` is also
    /// `pcp-autotune-netperf` and `pcp-autotune-lmbench`).
    Builtin(&'a str),
    /// Every built-in experiment.
    AllBuiltin,
}

/// The built-in experiments a name stands for: itself and the ones named
/// `NAME-*`.
///
/// Only a whole name counts: a prefix that is not itself a name (`page`) is
/// an error that lists the experiments it starts, rather than running them
/// all.
pub fn builtin_group(name: &str) -> Result<Vec<(&'static str, &'static str)>> {
    if !builtin_names().contains(&name) {
        let starting: Vec<&str> = builtin_names()
            .into_iter()
            .filter(|k| k.starts_with(name))
            .collect();
        if !starting.is_empty() {
            bail!(
                "no built-in experiment is named \"{name}\"; the ones whose names start with it: {} \
                 (give the whole name)",
                starting.join(", ")
            );
        }
        bail!(
            "no built-in experiment \"{name}\"; built-in experiments: {}",
            builtin_names().join(", ")
        );
    }
    Ok(BUILTIN_EXPERIMENTS
        .iter()
        .filter(|(k, _)| *k == name || k.strip_prefix(name).is_some_and(|r| r.starts_with('-')))
        .copied()
        .collect())
}

fn parse_builtin(list: &[(&str, &str)]) -> Result<Vec<Experiment>> {
    list.iter()
        .map(|(n, text)| Experiment::parse(text, Path::new(&format!("experiments/{n}.toml"))))
        .collect()
}

/// Reads and validates the experiments of `source` (nothing runs yet).
pub fn load(source: Source) -> Result<Vec<Experiment>> {
    Ok(match source {
        Source::Path(p) => vec![Experiment::load(p)?],
        Source::Toml { text, origin } => vec![Experiment::parse(text, origin)?],
        Source::Parsed { file, origin } => vec![Experiment::from_file(*file, origin, false)?],
        Source::Builtin(name) => parse_builtin(&builtin_group(name)?)?,
        Source::AllBuiltin => parse_builtin(BUILTIN_EXPERIMENTS)?,
    })
}

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Run every (kernel, workload) with each of these seeds; empty: the
    /// experiment's own seed.
    pub seeds: Vec<u64>,
    /// Simulations at once (`None`: the host's cores).
    pub jobs: Option<usize>,
    /// Show progress on stderr for runs longer than a second.
    pub progress: bool,
    /// Record a timeline of each run (`--timeline`); `max_records` is for
    /// all the runs of an experiment together.
    pub timeline: Option<sim::TimelineOptions>,
}

/// One experiment that has run: its definition, seeds and raw results.
pub struct ExperimentRun {
    pub experiment: Experiment,
    pub seeds: Vec<u64>,
    pub results: Vec<RunResult>,
}

impl ExperimentRun {
    /// Its part of the results document.
    pub fn to_results(&self) -> ExperimentResults {
        ExperimentResults::new(&self.experiment, &self.seeds, &self.results)
    }

    /// Its tables (text or markdown), as `mmlab run` prints them.
    pub fn tables(&self, format: Format) -> String {
        report::tables(&self.experiment, &self.seeds, &self.results, format)
    }
}

/// Runs one experiment.
pub fn run_experiment(exp: Experiment, opts: &RunOptions) -> Result<ExperimentRun> {
    let seeds = if opts.seeds.is_empty() {
        vec![exp.seed]
    } else {
        opts.seeds.clone()
    };
    let jobs = opts
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let results = runner::run_experiment(
        &exp,
        runner::RunOpts {
            seeds: &seeds,
            quiet: !opts.progress,
            jobs,
            timeline: opts.timeline,
        },
    )?;
    Ok(ExperimentRun {
        experiment: exp,
        seeds,
        results,
    })
}

/// Runs every experiment of `source`, calling `each` as each one finishes
/// (to print its tables or stream it), and returns the whole document.
pub fn run_each(
    source: Source,
    opts: &RunOptions,
    each: impl FnMut(&ExperimentRun) -> Result<()>,
) -> Result<ResultsDoc> {
    run_loaded(load(source)?, opts, each)
}

/// Runs experiments already loaded, calling `each` as each one finishes.
pub fn run_loaded(
    exps: Vec<Experiment>,
    opts: &RunOptions,
    mut each: impl FnMut(&ExperimentRun) -> Result<()>,
) -> Result<ResultsDoc> {
    let mut parts = Vec::new();
    for exp in exps {
        let run = run_experiment(exp, opts)?;
        each(&run)?;
        parts.push(run.to_results());
    }
    Ok(ResultsDoc::new(parts))
}

/// Runs every experiment of `source` and returns the results document.
pub fn run(source: Source, opts: &RunOptions) -> Result<ResultsDoc> {
    run_each(source, opts, |_| Ok(()))
}

/// Reads a results document from a file (JSON, or JSON Lines if the
/// first line is a header record).
pub fn read_results(path: &Path) -> Result<ResultsDoc> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let doc = if first.contains("\"record\"") && first.contains("\"header\"") {
        ResultsDoc::from_jsonl(&text)
    } else {
        ResultsDoc::from_json(&text)
    };
    doc.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI's small test experiment (two kernels, page churn on 4
    /// CPUs), shared with `sweep.rs` and the Python crate's tests.
    const SMALL: &str = include_str!("../tests/fixtures/small.toml");

    #[test]
    fn toml_and_parsed_sources_give_the_same_document_and_tidy_rows() {
        let origin = Path::new("small.toml");
        let a = run(
            Source::Toml {
                text: SMALL,
                origin,
            },
            &RunOptions::default(),
        )
        .expect("runs");
        let file: Box<ExperimentFile> = toml::from_str(SMALL).expect("parses");
        let b = run(Source::Parsed { file, origin }, &RunOptions::default()).expect("runs");
        assert_eq!(a, b);
        assert_eq!(a.experiments.len(), 1);
        // One run per kernel (`base`, `big-high`).
        assert_eq!(a.experiments[0].runs.len(), 2);
        let rows = a.tidy_rows();
        let runtime = rows
            .iter()
            .find(|r| r.metric == "runtime_ns")
            .expect("a runtime row");
        assert_eq!(runtime.unit, "ns");
        assert_eq!(
            runtime.value.as_u64(),
            a.experiments[0].runs[0].metrics["runtime_ns"].as_u64()
        );
        assert!(rows
            .iter()
            .any(|r| r.metric == "pgfree" && r.unit == "pages"));
    }

    #[test]
    fn several_seeds_run_each_pair_once_per_seed() {
        let origin = Path::new("small.toml");
        let opts = RunOptions {
            seeds: vec![3, 4],
            ..RunOptions::default()
        };
        let doc = run(
            Source::Toml {
                text: SMALL,
                origin,
            },
            &opts,
        )
        .expect("runs");
        let e = &doc.experiments[0];
        assert_eq!(e.seeds, [3, 4]);
        let mut pairs: Vec<(&str, u64)> =
            e.runs.iter().map(|r| (r.kernel.as_str(), r.seed)).collect();
        pairs.sort_unstable();
        assert_eq!(
            pairs,
            [("base", 3), ("base", 4), ("big-high", 3), ("big-high", 4)]
        );
    }

    #[test]
    fn an_unknown_builtin_lists_the_others() {
        let e = load(Source::Builtin("nope")).expect_err("unknown");
        assert!(e.to_string().contains("page-churn"), "{e}");
    }
}
