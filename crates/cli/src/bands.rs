//! The seeds' headline figures, and how far each moves when the model's
//! uncertain inputs move (`mmlab reproduce --bands`).
//!
//! # Headlines
//!
//! [`HEADLINES`] names the fifteen published figures the reproductions are
//! judged on, each as an experiment, a workload, a kernel (and the kernel it
//! is compared with), a metric and the published value. They are data, so
//! the README's table, this command and the audit all mean the same
//! figures.
//!
//! # Bands
//!
//! A profile gives a `band = [low, high]` for every figure that is an
//! estimate or a bound (a `[costs.*]` entry, `line_fill_buffers`,
//! `link_mbps`, `link_snoop_flits` and `package_idle_exit_ns` of `[numa]`, or
//! `llc_hit_ns` of `[topology]`). A headline's band is the range it takes when
//! those inputs move across their bands:
//!
//! - one at a time: each input alone at its low and then its high end, the
//!   others at their central values (which input moves the headline most
//!   is reported as its "widest input");
//! - together, by a small Latin-hypercube sample ([`LHS_SAMPLES`] points:
//!   every input's band cut into that many equal strata, each stratum used
//!   once, at its middle, the strata of different inputs paired by seeded
//!   permutations), so that inputs that push the same way are seen acting
//!   together;
//! - over seeds: the central inputs at [`SEED_SPREAD`] more seeds (the
//!   experiment's seed + 1, + 2, ...), so that a figure decided by the run's
//!   own chance (which job of a build starts last, where ASLR puts a
//!   buffer) shows that spread too.
//!
//! A headline whose band stays on the published figure's side of "no
//! change" keeps its conclusion whatever those inputs are; one whose band
//! crosses it does not. Without `--bands` only the central values are
//! computed, from the runs `reproduce` makes anyway.

use crate::api::BUILTIN_EXPERIMENTS;
use crate::experiment::Experiment;
use crate::report::RunResult;
use crate::runner::{run_experiment, RunOpts};
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Points of the Latin-hypercube sample.
pub const LHS_SAMPLES: usize = 8;
/// The seed of the sample's permutations (any fixed number: the sample is
/// part of the result and must not change between runs).
const LHS_SEED: u64 = 14;
/// Seeds run besides the experiment's own, at the central inputs.
pub const SEED_SPREAD: u64 = 3;

/// How a headline's value is computed from the runs.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    /// The metric of the kernel as it is.
    Abs,
    /// `(kernel / base - 1) x 100` of the metric.
    ChangePct,
    /// `(base / kernel - 1) x 100` of the metric (a score that is the
    /// inverse of a run time).
    InverseChangePct,
    /// `kernel / base` of the metric.
    Ratio,
}

/// One published figure and where the model's counterpart comes from.
#[derive(Clone, Copy, Debug)]
pub struct Headline {
    /// Short name (seed and figure).
    pub name: &'static str,
    /// Built-in experiment.
    pub experiment: &'static str,
    /// Its workload.
    pub workload: &'static str,
    /// The kernel whose figure it is.
    pub kernel: &'static str,
    /// The kernel it is compared with (for changes and ratios).
    pub base: &'static str,
    /// The metric.
    pub metric: &'static str,
    /// How the value is formed.
    pub value: Value,
    /// The published figure.
    pub published: f64,
}

/// A headline: `[kernel, base]` are the kernel whose figure it is and the
/// one it is compared with (`""` for none).
const fn h(
    name: &'static str,
    experiment: &'static str,
    workload: &'static str,
    [kernel, base]: [&'static str; 2],
    metric: &'static str,
    value: Value,
    published: f64,
) -> Headline {
    Headline {
        name,
        experiment,
        workload,
        kernel,
        base,
        metric,
        value,
        published,
    }
}

/// The fifteen headlines of the five seeds.
pub const HEADLINES: &[Headline] = &[
    h(
        "000 anon-cow-seq throughput, target-last (%)",
        "huge-copy-order",
        "anon-cow-seq",
        ["target-last", "sequential"],
        "throughput",
        Value::ChangePct,
        16.6,
    ),
    h(
        "000 anon-w-seq throughput, target-last (%)",
        "huge-copy-order",
        "anon-w-seq",
        ["target-last", "sequential"],
        "throughput",
        Value::ChangePct,
        28.3,
    ),
    h(
        "001 1x4K, 4.x single (GB/s)",
        "thp-migration",
        "1x4K",
        ["4.x single", ""],
        "migrate_gbps",
        Value::Abs,
        0.06,
    ),
    h(
        "001 512x4K, 4.x single (GB/s)",
        "thp-migration",
        "512x4K",
        ["4.x single", ""],
        "migrate_gbps",
        Value::Abs,
        0.98,
    ),
    h(
        "001 1x2M, 4.x single (GB/s)",
        "thp-migration",
        "1x2M",
        ["4.x single", ""],
        "migrate_gbps",
        Value::Abs,
        2.97,
    ),
    h(
        "001 1x2M, 8 threads (GB/s)",
        "thp-migration",
        "1x2M",
        ["mt-8", ""],
        "migrate_gbps",
        Value::Abs,
        8.58,
    ),
    h(
        "002 first-slot share of hits, pfn (%)",
        "vmacache",
        "ebizzy",
        ["pfn (4.18)", ""],
        "vmacache_first_slot_pct",
        Value::Abs,
        25.0,
    ),
    h(
        "002 first-slot share of hits, pmd (%)",
        "vmacache",
        "ebizzy",
        ["pmd (4.19)", ""],
        "vmacache_first_slot_pct",
        Value::Abs,
        70.0,
    ),
    h(
        "003 kbuild zone lock, base (%)",
        "pcp-autotune",
        "kbuild",
        ["base", ""],
        "zone_lock_pct",
        Value::Abs,
        43.6,
    ),
    h(
        "003 kbuild build time, patch9 (%)",
        "pcp-autotune",
        "kbuild",
        ["patch9", "base"],
        "runtime_ns",
        Value::ChangePct,
        -14.1,
    ),
    h(
        "003 lmbench UNIX score, patch3 (%)",
        "pcp-autotune-lmbench",
        "lmbench-unix",
        ["patch3", "base"],
        "runtime_ns",
        Value::InverseChangePct,
        101.6,
    ),
    h(
        "003 netperf zone lock, base (%)",
        "pcp-autotune-netperf",
        "netperf",
        ["base", ""],
        "zone_lock_pct",
        Value::Abs,
        2.0,
    ),
    h(
        "004 kbuild -j8 kernel time, v2 (%)",
        "large-anon-folios",
        "kernel-compile-j8",
        ["anonfolio-lkml-v2", "baseline-4k"],
        "sys_ns",
        Value::ChangePct,
        -38.6,
    ),
    h(
        "004 kbuild -j8 real time, v2 (%)",
        "large-anon-folios",
        "kernel-compile-j8",
        ["anonfolio-lkml-v2", "baseline-4k"],
        "runtime_ns",
        Value::ChangePct,
        -4.8,
    ),
    h(
        "004 page faults, simple-order / v1",
        "large-anon-folios-order-mix",
        "speedometer",
        ["anonfolio-lkml-v2-simple-order", "anonfolio-lkml-v1"],
        "pgfault",
        Value::Ratio,
        2.75,
    ),
];

impl Headline {
    /// The headline's value in `results` (NaN if a run is missing).
    pub fn eval(&self, results: &[RunResult]) -> f64 {
        let get = |k: &str| {
            results
                .iter()
                .find(|r| r.kernel == k && r.workload == self.workload)
                .and_then(|r| r.metric(self.metric))
                .map_or(f64::NAN, |v| v.as_f64())
        };
        let x = get(self.kernel);
        match self.value {
            Value::Abs => x,
            Value::ChangePct => (x / get(self.base) - 1.0) * 100.0,
            Value::InverseChangePct => (get(self.base) / x - 1.0) * 100.0,
            Value::Ratio => x / get(self.base),
        }
    }

    /// The value that means "no effect": a conclusion is the side of it
    /// the figure is on (none for absolute figures).
    pub fn neutral(&self) -> Option<f64> {
        match self.value {
            Value::Abs => None,
            Value::ChangePct | Value::InverseChangePct => Some(0.0),
            Value::Ratio => Some(1.0),
        }
    }
}

/// How a headline's value is formed, as the results document names it.
fn value_name(v: Value) -> &'static str {
    match v {
        Value::Abs => "absolute",
        Value::ChangePct => "change_pct",
        Value::InverseChangePct => "inverse_change_pct",
        Value::Ratio => "ratio",
    }
}

/// One headline in a results document (its `headlines` array): the
/// published figure, the model's, and, with `--bands`, the range the
/// model's takes over its profile's uncertain inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadlineResult {
    /// Seed and figure.
    pub name: String,
    /// The built-in experiment, workload and kernel the figure comes from.
    pub experiment: String,
    pub workload: String,
    pub kernel: String,
    /// The kernel it is compared with (`null` for an absolute figure).
    pub base: Option<String>,
    /// The metric.
    pub metric: String,
    /// `absolute`, `change_pct` ((kernel / base − 1) × 100),
    /// `inverse_change_pct` ((base / kernel − 1) × 100: a score that is the
    /// inverse of a time) or `ratio` (kernel / base).
    pub value: String,
    /// The published figure.
    pub published: f64,
    /// The model's figure at the profile's central values (`null` if a run
    /// it needs is missing).
    pub model: Option<f64>,
    /// `[low, high]`: the union of the three bands below (`null` without
    /// `--bands`).
    pub band: Option<[f64; 2]>,
    /// The range over each banded input alone at either end of its band.
    pub band_one_at_a_time: Option<[f64; 2]>,
    /// The range over the Latin-hypercube sample of all banded inputs.
    pub band_sample: Option<[f64; 2]>,
    /// The range over the experiment's seed and [`SEED_SPREAD`] more, at
    /// the central inputs (absent from documents written before it).
    #[serde(default)]
    pub band_seeds: Option<[f64; 2]>,
    /// The input that moved the figure most on its own: `key [low, high]`.
    pub widest_input: Option<String>,
    /// Within ±30 % of the published figure, with the same direction (for
    /// a change or a ratio).
    pub within_30pct: bool,
    /// For a change or a ratio: the band stays on the published figure's
    /// side of "no change" (`null` without a band, or for an absolute
    /// figure).
    pub band_keeps_direction: Option<bool>,
}

/// Rounds to 4 decimals, so that documents do not carry float noise.
fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

impl Headline {
    /// This headline with the model's central value `model` and no band.
    fn result(&self, model: f64) -> HeadlineResult {
        let model = model.is_finite().then(|| round(model));
        let mut r = HeadlineResult {
            name: self.name.to_string(),
            experiment: self.experiment.to_string(),
            workload: self.workload.to_string(),
            kernel: self.kernel.to_string(),
            base: (!self.base.is_empty()).then(|| self.base.to_string()),
            metric: self.metric.to_string(),
            value: value_name(self.value).to_string(),
            published: self.published,
            model,
            band: None,
            band_one_at_a_time: None,
            band_sample: None,
            band_seeds: None,
            widest_input: None,
            within_30pct: false,
            band_keeps_direction: None,
        };
        r.within_30pct = model.is_some_and(|m| self.within(m));
        r
    }

    /// Within ±30 % of the published figure and on its side of "no
    /// change": for a change, the changes themselves are compared.
    fn within(&self, model: f64) -> bool {
        let p = self.published;
        match self.neutral() {
            Some(n) => {
                let (dp, dm) = (p - n, model - n);
                dp.signum() == dm.signum() && (dm - dp).abs() <= 0.3 * dp.abs()
            }
            None => (model - p).abs() <= 0.3 * p.abs(),
        }
    }

    /// For a change or ratio: `[lo, hi]` stays on the published side.
    fn keeps(&self, lo: f64, hi: f64) -> Option<bool> {
        let n = self.neutral()?;
        let side = (self.published - n).signum();
        Some((lo - n).signum() == side && (hi - n).signum() == side)
    }
}

/// The headlines of experiment `name` evaluated on its runs `results` (the
/// central values; no band).
pub fn central(name: &str, results: &[RunResult]) -> Vec<HeadlineResult> {
    HEADLINES
        .iter()
        .filter(|h| h.experiment == name)
        .map(|h| h.result(h.eval(results)))
        .collect()
}

/// One uncertain input of a profile or a workload: its key and band.
#[derive(Clone, Debug)]
pub struct Input {
    /// `costs.x`, `numa.x`, `topology.x`, or `params.<workload>.<parameter>` (a
    /// workload parameter the experiment file gives a band).
    pub key: String,
    /// Low end of the band.
    pub lo: u64,
    /// High end of the band.
    pub hi: u64,
}

/// The banded inputs of `exp`'s profile, then its workloads' banded
/// parameters.
pub fn inputs(exp: &Experiment) -> Vec<Input> {
    let mut v: Vec<Input> = exp
        .profile
        .entries
        .iter()
        .filter_map(|(k, e)| {
            let (lo, hi) = e.band?;
            (lo < hi).then(|| Input {
                key: format!("costs.{k}"),
                lo,
                hi,
            })
        })
        .collect();
    if let Some(n) = &exp.profile.numa {
        for (k, &(lo, hi)) in &n.bands {
            let varied = matches!(
                k.as_str(),
                "link_mbps" | "line_fill_buffers" | "link_snoop_flits" | "package_idle_exit_ns"
            );
            if varied && lo < hi {
                v.push(Input {
                    key: format!("numa.{k}"),
                    lo,
                    hi,
                });
            }
        }
    }
    if let Some(t) = &exp.profile.topology {
        for (k, &(lo, hi)) in &t.bands {
            if lo < hi {
                v.push(Input {
                    key: format!("topology.{k}"),
                    lo,
                    hi,
                });
            }
        }
    }
    for w in &exp.workloads {
        for (p, lo, hi) in &w.bands {
            if lo < hi {
                v.push(Input {
                    key: format!("params.{}.{p}", w.name),
                    lo: *lo,
                    hi: *hi,
                });
            }
        }
    }
    v
}

/// Sets input `key` of `exp`'s profile (or of one of its workloads) to
/// `value`.
fn set(exp: &mut Experiment, key: &str, value: u64) {
    if let Some(wp) = key.strip_prefix("params.") {
        for w in &mut exp.workloads {
            if let Some(p) = wp.strip_prefix(&format!("{}.", w.name)) {
                if w.bands.iter().any(|(b, _, _)| b == p) {
                    w.params
                        .0
                        .insert(p.to_string(), workloads::ParamValue::Int(value as i64));
                }
            }
        }
    } else if let Some(k) = key.strip_prefix("costs.") {
        if let Some(e) = exp.profile.entries.get_mut(k) {
            e.ns = value;
        }
    } else if key == "topology.llc_hit_ns" {
        if let Some((_, hit)) = exp.profile.topology.as_mut().and_then(|t| t.l2.as_mut()) {
            *hit = value;
        }
    } else if key == "topology.line_fill_buffers" {
        if let Some(t) = exp.profile.topology.as_mut() {
            t.line_fill_buffers = Some(value as u32);
        }
    } else if let Some(n) = exp.profile.numa.as_mut() {
        match key {
            "numa.link_mbps" => n.link_mbps = value,
            "numa.line_fill_buffers" => n.line_fill_buffers = Some(value as u32),
            "numa.link_snoop_flits" => n.link_snoop_flits = Some(value as u32),
            "numa.package_idle_exit_ns" => n.package_idle_exit_ns = Some(value),
            _ => {}
        }
    }
}

/// The built-in experiment `name`, reduced to the runs `hs` need.
fn load(name: &str, hs: &[&Headline]) -> Result<Experiment> {
    let text = BUILTIN_EXPERIMENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| anyhow!("no built-in experiment {name}"))?;
    let mut exp = Experiment::parse(text, Path::new(&format!("experiments/{name}.toml")))?;
    exp.kernels
        .retain(|k| hs.iter().any(|h| h.kernel == k.name || h.base == k.name));
    exp.workloads
        .retain(|w| hs.iter().any(|h| h.workload == w.name));
    Ok(exp)
}

/// The Latin-hypercube sample: `LHS_SAMPLES` points, each a value for
/// every input (the middle of one of its strata; every stratum of every
/// input used once; strata paired across inputs by seeded permutations).
fn lhs(inputs: &[Input]) -> Vec<Vec<u64>> {
    let n = LHS_SAMPLES;
    let mut rng = mm::rng::SplitMix64(LHS_SEED);
    let perms: Vec<Vec<usize>> = inputs
        .iter()
        .map(|_| {
            // Fisher-Yates.
            let mut p: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                p.swap(i, rng.below(i as u64 + 1) as usize);
            }
            p
        })
        .collect();
    (0..n)
        .map(|j| {
            inputs
                .iter()
                .zip(&perms)
                .map(|(inp, p)| {
                    let frac = (p[j] as f64 + 0.5) / n as f64;
                    (inp.lo as f64 + frac * (inp.hi - inp.lo) as f64).round() as u64
                })
                .collect()
        })
        .collect()
}

/// `[min, max]` of `xs` (the finite ones), or `None`.
fn range(xs: impl Iterator<Item = f64>) -> Option<[f64; 2]> {
    xs.filter(|x| x.is_finite()).fold(None, |r, x| match r {
        None => Some([x, x]),
        Some([lo, hi]) => Some([lo.min(x), hi.max(x)]),
    })
}

/// Keeps in `widest` the input that moved a headline most, one at a time:
/// `name()` replaces it when `swing` (the headline's range over the input's
/// two ends) is wider than the widest so far. Starting from `(0.0, None)`,
/// an input that does not move the headline at all is never named, so a
/// headline no input moves has no widest input.
fn widen(widest: &mut (f64, Option<String>), swing: f64, name: impl FnOnce() -> String) {
    if swing.is_finite() && swing > widest.0 {
        *widest = (swing, Some(name()));
    }
}

/// Fills in the bands of `results` (the headlines of one or more
/// experiments, as [`central`] made them): each experiment's runs again with
/// every banded input at either end of its band, one at a time, at each
/// point of the Latin-hypercube sample, and at [`SEED_SPREAD`] more seeds.
pub fn fill_bands(results: &mut [HeadlineResult], jobs: usize, quiet: bool) -> Result<()> {
    let mut names: Vec<String> = results.iter().map(|r| r.experiment.clone()).collect();
    names.dedup();
    for name in names {
        let hs: Vec<&Headline> = HEADLINES.iter().filter(|h| h.experiment == name).collect();
        let base = load(&name, &hs)?;
        let ins = inputs(&base);
        let run_seed = |values: &[(usize, u64)], extra_seed: u64| -> Result<Vec<f64>> {
            let mut e = load(&name, &hs)?;
            for &(i, v) in values {
                set(&mut e, &ins[i].key, v);
            }
            let seeds = [e.seed.wrapping_add(extra_seed)];
            let res = run_experiment(
                &e,
                RunOpts {
                    seeds: &seeds,
                    quiet,
                    jobs,
                    timeline: None,
                },
            )?;
            Ok(hs.iter().map(|h| h.eval(&res)).collect())
        };
        let run = |values: &[(usize, u64)]| run_seed(values, 0);
        let mut oat: Vec<Vec<f64>> = vec![Vec::new(); hs.len()];
        let mut widest: Vec<(f64, Option<String>)> = vec![(0.0, None); hs.len()];
        for (i, input) in ins.iter().enumerate() {
            let (a, b) = (run(&[(i, input.lo)])?, run(&[(i, input.hi)])?);
            for k in 0..hs.len() {
                oat[k].extend([a[k], b[k]]);
                widen(&mut widest[k], (a[k] - b[k]).abs(), || {
                    format!("{} [{}, {}]", input.key, input.lo, input.hi)
                });
            }
        }
        let mut sample: Vec<Vec<f64>> = vec![Vec::new(); hs.len()];
        if !ins.is_empty() {
            for point in lhs(&ins) {
                let values: Vec<(usize, u64)> = point.into_iter().enumerate().collect();
                let v = run(&values)?;
                for k in 0..hs.len() {
                    sample[k].push(v[k]);
                }
            }
        }
        let mut by_seed: Vec<Vec<f64>> = vec![Vec::new(); hs.len()];
        for extra in 1..=SEED_SPREAD {
            let v = run_seed(&[], extra)?;
            for k in 0..hs.len() {
                by_seed[k].push(v[k]);
            }
        }
        for (k, h) in hs.iter().enumerate() {
            let Some(r) = results.iter_mut().find(|r| r.name == h.name) else {
                continue;
            };
            let centre = r.model.into_iter();
            let one = range(oat[k].iter().copied().chain(centre.clone()));
            let smp = range(sample[k].iter().copied().chain(centre.clone()));
            let sds = range(by_seed[k].iter().copied().chain(centre));
            let all = range([one, smp, sds].into_iter().flatten().flatten());
            let rounded = |b: Option<[f64; 2]>| b.map(|[lo, hi]| [round(lo), round(hi)]);
            r.band_one_at_a_time = rounded(one);
            r.band_sample = rounded(smp);
            r.band_seeds = rounded(sds);
            r.band = rounded(all);
            r.widest_input = widest[k].1.clone();
            r.band_keeps_direction = all.and_then(|[lo, hi]| h.keeps(lo, hi));
        }
    }
    Ok(())
}

/// The table `reproduce` prints after the experiments' tables.
pub fn table(results: &[HeadlineResult]) -> String {
    let banded = results.iter().any(|r| r.band.is_some());
    let mut s = if banded {
        format!("headlines: the seeds' published figures beside the model's; band: the model with the profile's estimated inputs moved across their ranges (each alone, and a Latin-hypercube sample of all together) and at {SEED_SPREAD} more seeds\n\n")
    } else {
        String::from("headlines: the seeds' published figures beside the model's (mmlab reproduce --bands adds each one's range over the profile's estimated inputs)\n\n")
    };
    s += &format!(
        "{:<44} {:>10} {:>10} {:>21} {:>7} {:>6}  {}\n",
        "headline", "published", "model", "band", "±30 %", "keeps", "widest input"
    );
    s += &format!("{}\n", "-".repeat(130));
    for r in results {
        let model = r.model.map_or("-".to_string(), |m| format!("{m:.2}"));
        let band = r
            .band
            .map_or("-".to_string(), |[lo, hi]| format!("[{lo:.2}, {hi:.2}]"));
        let keeps = match r.band_keeps_direction {
            None => "-",
            Some(true) => "yes",
            Some(false) => "no",
        };
        s += &format!(
            "{:<44} {:>10.2} {:>10} {:>21} {:>7} {:>6}  {}\n",
            r.name,
            r.published,
            model,
            band,
            if r.within_30pct { "yes" } else { "no" },
            keeps,
            r.widest_input.as_deref().unwrap_or("")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(lo: u64, hi: u64) -> Input {
        Input {
            key: "costs.x".into(),
            lo,
            hi,
        }
    }

    /// Every input's strata are each used once, at their middles.
    #[test]
    fn the_sample_uses_every_stratum_of_every_input_once() {
        let ins = [input(0, 80), input(100, 260), input(5, 5 + 8 * 3)];
        let pts = lhs(&ins);
        assert_eq!(pts.len(), LHS_SAMPLES);
        for (i, inp) in ins.iter().enumerate() {
            let width = (inp.hi - inp.lo) as f64 / LHS_SAMPLES as f64;
            let mut strata: Vec<usize> = pts
                .iter()
                .map(|p| ((p[i] - inp.lo) as f64 / width) as usize)
                .collect();
            strata.sort_unstable();
            assert_eq!(strata, (0..LHS_SAMPLES).collect::<Vec<_>>(), "input {i}");
        }
        // Not the same permutation for every input.
        assert!(pts
            .iter()
            .any(|p| (p[0] / 10) as usize != ((p[1] - 100) / 20) as usize));
        // Deterministic.
        assert_eq!(lhs(&ins), pts);
    }

    #[test]
    fn the_widest_input_is_the_one_that_moved_the_headline_most_and_none_if_none_did() {
        let mut w = (0.0, None);
        widen(&mut w, 0.0, || "a".into());
        widen(&mut w, f64::NAN, || "b".into());
        assert_eq!(w, (0.0, None), "no input moved it: none is named");
        widen(&mut w, 0.5, || "c".into());
        widen(&mut w, 2.0, || "d".into());
        widen(&mut w, 1.0, || "e".into());
        widen(&mut w, 2.0, || "f".into());
        assert_eq!(
            w,
            (2.0, Some("d".to_string())),
            "the widest, the first of a tie"
        );
    }

    #[test]
    fn verdicts_compare_changes_and_keep_the_side() {
        let h = HEADLINES
            .iter()
            .find(|h| h.name.starts_with("000 anon-w-seq"))
            .unwrap();
        // Published +28.3 %: within 30 % of the change is 19.81..36.79.
        assert!(h.within(24.6) && h.within(36.0));
        assert!(!h.within(19.0) && !h.within(-28.3));
        assert_eq!(h.keeps(1.0, 40.0), Some(true));
        assert_eq!(h.keeps(-1.0, 40.0), Some(false));
        let abs = HEADLINES
            .iter()
            .find(|h| h.name.starts_with("001 1x2M, 4.x"))
            .unwrap();
        assert_eq!(abs.keeps(0.0, 9.0), None);
        assert!(abs.within(2.63) && !abs.within(2.0));
    }

    /// A headline written before the seed band existed still reads, with
    /// no seed band; a new one keeps it.
    #[test]
    fn the_seed_band_is_optional_in_documents() {
        let mut r = HEADLINES[0].result(24.6);
        r.band_seeds = Some([20.0, 25.0]);
        let json = serde_json::to_value(&r).unwrap();
        let back: HeadlineResult = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, r);
        let mut old = json;
        old.as_object_mut().unwrap().remove("band_seeds");
        let back: HeadlineResult = serde_json::from_value(old).unwrap();
        assert_eq!(back.band_seeds, None);
    }

    /// A workload parameter the experiment file bands is an input, and
    /// setting it changes that workload's parameter and nothing else.
    #[test]
    fn a_banded_workload_parameter_is_an_input() {
        let hs: Vec<&Headline> = HEADLINES
            .iter()
            .filter(|h| h.experiment == "pcp-autotune-netperf")
            .collect();
        let mut exp = load("pcp-autotune-netperf", &hs).unwrap();
        let key = "params.netperf.recv_copy_mbps";
        let i = inputs(&exp).into_iter().find(|i| i.key == key).unwrap();
        assert!(i.lo < 120_470 && 120_470 < i.hi, "{i:?}");
        let before = exp.workloads[0].params.clone();
        set(&mut exp, key, i.lo);
        let after = &exp.workloads[0].params;
        assert_eq!(
            after.0.get("recv_copy_mbps"),
            Some(&workloads::ParamValue::Int(i.lo as i64))
        );
        let others = |p: &workloads::Params| {
            let mut p = p.clone();
            p.0.remove("recv_copy_mbps");
            p
        };
        assert_eq!(others(after), others(&before));
    }

    /// A band must name an integer parameter that is given, and hold it.
    #[test]
    fn a_bad_parameter_band_is_refused_with_its_name() {
        let base = BUILTIN_EXPERIMENTS
            .iter()
            .find(|(n, _)| *n == "pcp-autotune-netperf")
            .unwrap()
            .1;
        let path = Path::new("x.toml");
        for (from, to, says) in [
            (
                "band = [73140, 182040]",
                "band = [1, 2]",
                "must hold the value 120470",
            ),
            (
                "bands = { recv_copy_mbps",
                "bands = { messages_x",
                "expected an integer parameter",
            ),
            (
                "source = \"profiles/icx",
                "source = \" \", extra = \"profiles/icx",
                "extra",
            ),
        ] {
            let text = base.replacen(from, to, 1);
            assert_ne!(text, base, "{from}");
            let err = format!("{:#}", Experiment::parse(&text, path).unwrap_err());
            assert!(err.contains(says), "{err}");
        }
    }

    /// The LLC hit of the private-L2 model is an estimate with a band: it
    /// is one of the kbuild experiment's inputs, and `set` moves it.
    #[test]
    fn the_llc_hit_of_the_l2_model_is_a_banded_input() {
        let hs: Vec<&Headline> = HEADLINES
            .iter()
            .filter(|h| h.experiment == "pcp-autotune")
            .collect();
        let mut exp = load("pcp-autotune", &hs).expect("built-in");
        let hit = inputs(&exp)
            .into_iter()
            .find(|i| i.key == "topology.llc_hit_ns")
            .expect("spr-2s-224 gives llc_hit_ns a band");
        assert!(hit.lo < hit.hi);
        set(&mut exp, "topology.llc_hit_ns", hit.hi);
        let l2 = exp.profile.topology.as_ref().and_then(|t| t.l2);
        assert_eq!(l2, Some((2 << 20, hit.hi)));
    }

    /// The private-L2 model needs both its values, and an estimate's band
    /// must hold it.
    #[test]
    fn a_half_given_l2_model_or_a_band_outside_its_value_is_refused() {
        let spr = crate::experiment::BUILTIN_PROFILES
            .iter()
            .find(|(n, _)| *n == "spr-2s-224")
            .unwrap()
            .1;
        let no_hit: String = spr
            .lines()
            .filter(|l| !l.starts_with("llc_hit_ns"))
            .map(|l| format!("{l}\n"))
            .collect();
        let outside = spr.replacen("band = [20, 59]", "band = [40, 59]", 1);
        assert_ne!(outside, spr);
        for (text, says) in [(no_hit, "give both"), (outside, "must contain 33")] {
            let err = format!(
                "{:#}",
                crate::experiment::parse_profile(&text, "p").unwrap_err()
            );
            assert!(err.contains(says), "{err}");
        }
    }

    /// The fill buffers that bound a lock hold's overlapped misses are a
    /// banded input of the kbuild experiment (the band is the reorder
    /// buffer's reach), `set` moves them, and a count of 0 or a band that
    /// leaves out its value is refused.
    #[test]
    fn the_line_fill_buffers_of_the_topology_are_a_banded_input() {
        let hs: Vec<&Headline> = HEADLINES
            .iter()
            .filter(|h| h.experiment == "pcp-autotune")
            .collect();
        let mut exp = load("pcp-autotune", &hs).expect("built-in");
        let lfb = inputs(&exp)
            .into_iter()
            .find(|i| i.key == "topology.line_fill_buffers")
            .expect("spr-2s-224 gives line_fill_buffers a band");
        assert_eq!((lfb.lo, lfb.hi), (8, 16));
        set(&mut exp, "topology.line_fill_buffers", lfb.lo);
        let n = exp
            .profile
            .topology
            .as_ref()
            .and_then(|t| t.line_fill_buffers);
        assert_eq!(n, Some(8));
        let spr = crate::experiment::BUILTIN_PROFILES
            .iter()
            .find(|(n, _)| *n == "spr-2s-224")
            .unwrap()
            .1;
        let zero = spr.replacen("value = 16, band = [8, 16]", "value = 0", 1);
        let outside = spr.replacen(
            "value = 16, band = [8, 16]",
            "value = 16, band = [0, 12]",
            1,
        );
        for (text, says) in [(zero, "at least 1"), (outside, "contain 16")] {
            assert_ne!(text, spr);
            let err = format!(
                "{:#}",
                crate::experiment::parse_profile(&text, "p").unwrap_err()
            );
            assert!(err.contains(says), "{err}");
        }
    }
}
