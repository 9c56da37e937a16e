//! Parameter sweeps: one experiment run at many points, each point the
//! experiment with some kernel knobs or workload parameters set to other
//! values and a seed (the Python binding's `mmlab.sweep`).
//!
//! A point's settings are applied to the experiment *as written* (the
//! [`ExperimentFile`]), before validation, so a swept value is checked,
//! reported in errors and recorded in the results document exactly as if
//! it stood in the file. Each point is one deterministic run of the whole
//! experiment: the same point gives the same document on any host, in any
//! order and on any number of threads or machines.
//!
//! ```no_run
//! use mmlab::api::Source;
//! use mmlab::sweep::{self, Point, Spec};
//! let spec = Spec::from_source(Source::Builtin("page-churn"))?;
//! let point = Point {
//!     settings: vec![("vm.percpu_pagelist_high_fraction".into(), toml::Value::Integer(8))],
//!     seed: Some(3),
//! };
//! let doc = sweep::run_point(&spec, &point)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

use crate::api::{self, RunOptions, Source};
use crate::experiment::{Experiment, ExperimentFile};
use crate::results::ResultsDoc;
use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The experiments a sweep runs at every point, as written (not yet
/// validated), each with the path that names it in errors and locates its
/// relative profile paths.
#[derive(Clone, Debug)]
pub struct Spec {
    files: Vec<(ExperimentFile, PathBuf)>,
}

/// What a grid key sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    /// A kernel knob by its kernel name (`vm.percpu_pagelist_high_fraction`),
    /// set on every kernel of the experiment.
    Knob(String),
    /// A parameter of the workload named `workload` (key `workload.param`).
    Param { workload: String, param: String },
}

/// One point of a sweep: the settings (grid key, value) and the seed of
/// every run (`None`: the experiment's own).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Point {
    pub settings: Vec<(String, toml::Value)>,
    pub seed: Option<u64>,
}

fn parse_file(text: &str, origin: &Path) -> Result<ExperimentFile> {
    toml::from_str(text).map_err(|e| anyhow!("{}: {e}", origin.display()))
}

impl Spec {
    /// The experiments of `source` as written.
    pub fn from_source(source: Source) -> Result<Spec> {
        let files = match source {
            Source::Path(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| anyhow!("cannot read experiment {}: {e}", p.display()))?;
                vec![(parse_file(&text, p)?, p.to_path_buf())]
            }
            Source::Toml { text, origin } => vec![(parse_file(text, origin)?, origin.into())],
            Source::Parsed { file, origin } => vec![(*file, origin.into())],
            Source::Builtin(name) => api::builtin_group(name)?
                .into_iter()
                .map(|(n, text)| {
                    let origin = PathBuf::from(format!("experiments/{n}.toml"));
                    Ok((parse_file(text, &origin)?, origin))
                })
                .collect::<Result<_>>()?,
            Source::AllBuiltin => bail!("a sweep runs one experiment (or one built-in group), not every built-in experiment"),
        };
        Ok(Spec { files })
    }

    /// The names of the workloads, in file order, without repeats.
    fn workload_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for w in self.files.iter().flat_map(|(f, _)| &f.workloads) {
            if !names.contains(&w.name.as_str()) {
                names.push(&w.name);
            }
        }
        names
    }

    /// What a grid key sets: a kernel knob by its kernel name, or
    /// `workload.param` for a workload of the experiment (split at the last
    /// dot, as workload names may hold dots and parameter names do not).
    pub fn setting(&self, key: &str) -> Result<Setting> {
        if mm::knobs::all_knobs().any(|k| k.name == key) {
            return Ok(Setting::Knob(key.to_string()));
        }
        let names = self.workload_names();
        if let Some((w, p)) = key.rsplit_once('.') {
            if names.contains(&w) && !p.is_empty() {
                return Ok(Setting::Param {
                    workload: w.to_string(),
                    param: p.to_string(),
                });
            }
        }
        bail!(
            "grid key \"{key}\" is neither a kernel knob (`mmlab list` shows them, by their kernel names) \
             nor WORKLOAD.PARAM for a workload of this experiment ({})",
            names.join(", ")
        )
    }

    /// The experiments with `settings` applied, validated.
    pub fn experiments(&self, settings: &[(String, toml::Value)]) -> Result<Vec<Experiment>> {
        let mut files = self.files.clone();
        for (key, value) in settings {
            let setting = self.setting(key)?;
            for (f, _) in &mut files {
                apply(f, &setting, value);
            }
        }
        files
            .into_iter()
            .map(|(f, origin)| {
                Experiment::from_file(f, &origin, false).map_err(|e| match settings.is_empty() {
                    true => e,
                    false => e.context(format!("at {}", describe(settings))),
                })
            })
            .collect()
    }
}

/// `key=value, key=value` for errors.
pub fn describe(settings: &[(String, toml::Value)]) -> String {
    let parts: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(", ")
}

fn apply(f: &mut ExperimentFile, setting: &Setting, value: &toml::Value) {
    match setting {
        Setting::Knob(name) => {
            for k in &mut f.kernels {
                k.knobs.insert(name.clone(), value.clone());
            }
        }
        Setting::Param { workload, param } => {
            for w in f.workloads.iter_mut().filter(|w| &w.name == workload) {
                w.params.insert(param.clone(), value.clone());
            }
        }
    }
}

/// Runs one point: every experiment of the spec with the point's settings
/// and seed, one simulation at a time (points run side by side instead).
pub fn run_point(spec: &Spec, point: &Point) -> Result<ResultsDoc> {
    let exps = spec.experiments(&point.settings)?;
    let opts = RunOptions {
        seeds: point.seed.into_iter().collect(),
        jobs: Some(1),
        progress: false,
        ..Default::default()
    };
    api::run_loaded(exps, &opts, |_| Ok(()))
}

/// Runs every point on `jobs` host threads and returns their documents in
/// the points' order. A point that fails does not stop the others: its
/// slot holds its error. `progress(done)` is called from the calling
/// thread at least every 200 ms and after each point; when it returns
/// false no further point starts, and those not started report
/// "cancelled".
pub fn run_points(
    spec: &Spec,
    points: &[Point],
    jobs: usize,
    progress: &mut dyn FnMut(usize) -> bool,
) -> Vec<Result<ResultsDoc>> {
    let n = points.len();
    let jobs = jobs.max(1).min(n.max(1));
    let mut slots: Vec<Option<Result<ResultsDoc>>> = (0..n).map(|_| None).collect();
    let next = AtomicUsize::new(0);
    let cancel = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, Result<ResultsDoc>)>();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, cancel) = (&next, &cancel);
            s.spawn(move || {
                while !cancel.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n || tx.send((i, run_point(spec, &points[i]))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut done = 0;
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((i, r)) => {
                    slots[i] = Some(r);
                    done += 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if !progress(done) {
                cancel.store(true, Ordering::Relaxed);
            }
        }
    });
    slots
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow!("cancelled before it started"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI's small test experiment (kernels `base` and `big-high`,
    /// workload `churn`), shared with `api.rs` and the Python crate's tests.
    const SMALL: &str = include_str!("../tests/fixtures/small.toml");

    fn spec() -> Spec {
        spec_of(SMALL)
    }

    fn spec_of(text: &str) -> Spec {
        Spec::from_source(Source::Toml {
            text,
            origin: Path::new("small.toml"),
        })
        .expect("parses")
    }

    fn int(i: i64) -> toml::Value {
        toml::Value::Integer(i)
    }

    #[test]
    fn keys_resolve_to_knobs_or_workload_parameters() {
        // A workload name with a dot: the parameter is after the last one.
        let s = spec_of(&SMALL.replace("name = \"churn\"", "name = \"churn.v1\""));
        assert_eq!(
            s.setting("vm.percpu_pagelist_high_fraction").expect("knob"),
            Setting::Knob("vm.percpu_pagelist_high_fraction".into())
        );
        assert_eq!(
            s.setting("churn.v1.burst").expect("param"),
            Setting::Param {
                workload: "churn.v1".into(),
                param: "burst".into()
            }
        );
        let e = s.setting("nope.burst").expect_err("no such workload");
        assert!(e.to_string().contains("churn.v1"), "{e}");
    }

    #[test]
    fn a_point_equals_the_experiment_written_with_its_values() {
        let s = spec();
        let point = Point {
            settings: vec![
                ("vm.percpu_pagelist_high_fraction".into(), int(8)),
                ("churn.burst".into(), int(70)),
            ],
            seed: Some(5),
        };
        let swept = run_point(&s, &point).expect("runs");
        let written = SMALL
            .replace(
                "name = \"base\"\npreset = \"linux-6.6\"",
                "name = \"base\"\npreset = \"linux-6.6\"\nknobs = { \"vm.percpu_pagelist_high_fraction\" = 8 }",
            )
            .replace("burst = 200", "burst = 70");
        assert_eq!(written.matches("high_fraction\" = 8").count(), 2);
        assert!(written.contains("burst = 70"));
        let opts = RunOptions {
            seeds: vec![5],
            ..RunOptions::default()
        };
        let direct = api::run(
            Source::Toml {
                text: &written,
                origin: Path::new("small.toml"),
            },
            &opts,
        )
        .expect("runs");
        assert_eq!(swept, direct);
    }

    #[test]
    fn a_bad_value_fails_its_point_only_and_says_where() {
        let s = spec();
        let points = vec![
            Point {
                settings: vec![("vm.percpu_pagelist_high_fraction".into(), int(0))],
                seed: None,
            },
            Point {
                settings: vec![("vm.percpu_pagelist_high_fraction".into(), int(-3))],
                seed: None,
            },
        ];
        let mut calls = 0;
        let out = run_points(&s, &points, 2, &mut |_| {
            calls += 1;
            true
        });
        assert!(calls >= 1);
        assert!(out[0].is_ok());
        let e = format!("{:#}", out[1].as_ref().expect_err("invalid knob value"));
        assert!(
            e.contains("small.toml") && e.contains("percpu_pagelist_high_fraction"),
            "{e}"
        );
        assert!(e.contains("=-3"), "{e}");
    }

    #[test]
    fn points_come_back_in_order_whatever_the_threads() {
        let s = spec();
        let points: Vec<Point> = (1..=4)
            .map(|seed| Point {
                settings: Vec::new(),
                seed: Some(seed),
            })
            .collect();
        let one = run_points(&s, &points, 1, &mut |_| true);
        let two = run_points(&s, &points, 3, &mut |_| true);
        for (a, b) in one.iter().zip(&two) {
            assert_eq!(a.as_ref().expect("runs"), b.as_ref().expect("runs"));
        }
        let seeds: Vec<u64> = two
            .iter()
            .map(|d| d.as_ref().expect("runs").experiments[0].runs[0].seed)
            .collect();
        assert_eq!(seeds, [1, 2, 3, 4]);
    }

    #[test]
    fn a_cancelled_sweep_reports_the_points_not_run() {
        let s = spec();
        let points = vec![Point::default(); 50];
        let out = run_points(&s, &points, 1, &mut |_| false);
        assert!(out.iter().any(|r| r.is_err()));
    }
}
