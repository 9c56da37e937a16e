//! Results of runs and the LKML-style tables (text, markdown, wide CSV).
//! The metrics are in `metrics.rs`, the results document in `results.rs`.

use crate::experiment::{Experiment, Mode, Workload};
pub use crate::metrics::MetricValue;
use crate::metrics::{self};
use crate::results::{ExperimentResults, PublishedTable, ResultsDoc};
use sim::RunStats;
use std::fmt::Write;

/// What one (kernel, workload, seed) run produced.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub kernel: String,
    pub workload: String,
    /// The seed of the run.
    pub seed: u64,
    pub stats: RunStats,
    pub vmstat: mm::vmstat::VmStat,
    /// Benchmark runs the workload made (0 if it does not count runs).
    pub nr_runs: u64,
    /// What each vCPU did when, if a timeline was asked for.
    pub timeline: Option<std::sync::Arc<sim::Timeline>>,
}

impl RunResult {
    /// The value of `name`: a metric of the registry, else a
    /// `/proc/vmstat`-named counter; `None` for any other name (experiment
    /// files are checked against [`metrics::is_metric`] when loaded).
    pub fn metric(&self, name: &str) -> Option<MetricValue> {
        metrics::find(name)
            .map(|m| (m.value)(self))
            .or_else(|| metrics::find_counter(name).map(|e| MetricValue::Int(self.vmstat.get(e))))
    }
}

/// The mean of a metric over the runs of several seeds (the one value for
/// one seed); `None` if a run does not know the name.
pub fn mean_metric(runs: &[&RunResult], name: &str) -> Option<MetricValue> {
    let first = runs.first()?.metric(name)?;
    if runs.len() == 1 {
        return Some(first);
    }
    let mut sum = 0.0;
    for r in runs {
        sum += r.metric(name)?.as_f64();
    }
    Some(first.with(sum / runs.len() as f64))
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables for a terminal.
    Text,
    /// Markdown tables (for a mail to linux-mm or an issue).
    Markdown,
    /// The results document: one JSON object.
    Json,
    /// The results document as JSON Lines: a header, then one experiment a line.
    Jsonl,
    /// Tidy CSV: one row per (experiment, workload, kernel, seed, metric).
    Csv,
    /// Wide CSV: one row per (experiment, workload, kernel, seed), a column per metric.
    CsvWide,
}

impl Format {
    /// True for the formats that print the results document rather than tables.
    pub fn is_data(self) -> bool {
        !matches!(self, Format::Text | Format::Markdown)
    }
}

/// A table cell: `v` shown in `mode` against the baseline's value `base`.
pub fn cell_text(v: MetricValue, base: Option<MetricValue>, mode: Mode) -> String {
    cell(v, base, mode)
}

fn cell(v: MetricValue, base: Option<MetricValue>, mode: Mode) -> String {
    match (v, base, mode) {
        (MetricValue::Rate(r), Some(MetricValue::Rate(b)), Mode::Relative) if b != 0.0 => {
            format!("{:.1}", 100.0 * r / b)
        }
        (MetricValue::Rate(r), Some(MetricValue::Rate(b)), Mode::Change) if b != 0.0 => {
            format!("{:+.1}%", 100.0 * (r - b) / b)
        }
        (MetricValue::Rate(r), _, _) => format!("{r:.1}"),
        (MetricValue::Pct(p), _, _) => format!("{p:.1}"),
        (MetricValue::SmallPct(p), _, _) => format!("{p:.3}"),
        (MetricValue::Gbps(r), _, _) => format!("{r:.2}"),
        (MetricValue::Int(i), _, Mode::Absolute) | (MetricValue::Int(i), None, _) => i.to_string(),
        (MetricValue::Int(i), Some(MetricValue::Int(b)), Mode::Relative) => {
            if b == 0 {
                if i == 0 {
                    "100.0".into()
                } else {
                    "-".into()
                }
            } else {
                format!("{:.1}", 100.0 * i as f64 / b as f64)
            }
        }
        (MetricValue::Int(i), Some(MetricValue::Int(b)), Mode::Change) => {
            if b == 0 {
                if i == 0 {
                    "0.0%".into()
                } else {
                    "-".into()
                }
            } else {
                format!("{:+.1}%", 100.0 * (i as f64 - b as f64) / b as f64)
            }
        }
        (
            MetricValue::Int(i),
            Some(
                MetricValue::Pct(_)
                | MetricValue::Rate(_)
                | MetricValue::SmallPct(_)
                | MetricValue::Gbps(_),
            ),
            _,
        ) => i.to_string(),
    }
}

/// The seeds of a table's title: `seed 1`, or `mean of seeds 1, 2, 3`.
pub fn seeds_text(seeds: &[u64]) -> String {
    match seeds {
        [one] => format!("seed {one}"),
        _ => {
            let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
            format!("mean of seeds {}", list.join(", "))
        }
    }
}

/// The title line of workload `w`'s table.
fn table_title(exp: &Experiment, w: &Workload, seeds: &[u64], mode: Mode) -> String {
    let nodes = exp.machine.nodes.len();
    format!(
        "{} / {} — {} ({} CPUs, {} node{}), profile {}, {}{}",
        exp.name,
        w.name,
        exp.machine.name,
        exp.machine.nr_cpus(),
        nodes,
        if nodes == 1 { "" } else { "s" },
        exp.profile.name,
        seeds_text(seeds),
        match (mode, exp.baseline_of(w)) {
            (Mode::Relative, Some(b)) =>
                format!("; counts relative to {b} = 100.0, percentages absolute"),
            (Mode::Change, Some(b)) =>
                format!("; counts as % change from {b}, percentages absolute"),
            _ => String::new(),
        }
    )
}

/// The runs of each kernel of workload `w`, in the experiment's kernel
/// order (one per seed).
fn runs_by_kernel<'a>(
    exp: &'a Experiment,
    w: &Workload,
    results: &'a [RunResult],
) -> Vec<(&'a str, Vec<&'a RunResult>)> {
    let mut out: Vec<(&str, Vec<&RunResult>)> = Vec::new();
    for r in results.iter().filter(|r| r.workload == w.name) {
        match out.iter_mut().find(|(k, _)| *k == r.kernel) {
            Some((_, v)) => v.push(r),
            None => out.push((r.kernel.as_str(), vec![r])),
        }
    }
    let pos = |k: &str| exp.kernels.iter().position(|x| x.name == k);
    out.sort_by_key(|(k, _)| pos(k));
    out
}

/// The tables of an experiment, one per workload, then the published
/// table, in `format` (text or markdown; the CSV forms are `csv_out`'s).
/// With several seeds a cell is the mean over them.
pub fn tables(exp: &Experiment, seeds: &[u64], results: &[RunResult], format: Format) -> String {
    let metrics = &exp.report.metrics;
    let mut out = String::new();
    for w in &exp.workloads {
        let baseline = exp.baseline_of(w);
        let mode = if baseline.is_some() {
            exp.report.mode
        } else {
            Mode::Absolute
        };
        let rows = runs_by_kernel(exp, w, results);
        let base = baseline.and_then(|b| rows.iter().find(|(k, _)| k == b));
        let header: Vec<String> = std::iter::once("kernel".to_string())
            .chain(metrics.iter().cloned())
            .collect();
        let body: Vec<Vec<String>> = rows
            .iter()
            .map(|(k, runs)| {
                let value = |m: &str| mean_metric(runs, m);
                std::iter::once(k.to_string())
                    .chain(metrics.iter().map(|m| match value(m) {
                        Some(v) => cell(v, base.and_then(|(_, b)| mean_metric(b, m)), mode),
                        None => "?".to_string(),
                    }))
                    .collect()
            })
            .collect();
        render(
            &mut out,
            format,
            &table_title(exp, w, seeds, mode),
            &header,
            &body,
        );
    }
    if let Some(p) = &exp.published {
        let header: Vec<String> = std::iter::once("kernel".to_string())
            .chain(p.columns.iter().cloned())
            .collect();
        // Rows in the experiment's kernel order, then any others.
        let mut names: Vec<&String> = exp
            .kernels
            .iter()
            .map(|k| &k.name)
            .filter(|n| p.rows.contains_key(*n))
            .collect();
        names.extend(
            p.rows
                .keys()
                .filter(|k| !exp.kernels.iter().any(|x| &x.name == *k)),
        );
        let body: Vec<Vec<String>> = names
            .into_iter()
            .map(|k| {
                std::iter::once(k.clone())
                    .chain(p.rows[k].iter().map(|&v| published_cell(v, p.precision)))
                    .collect()
            })
            .collect();
        render(
            &mut out,
            format,
            &format!("published: {}", p.source),
            &header,
            &body,
        );
    }
    out
}

/// One table read back from a results document: title, header, rows.
pub struct DocTable {
    pub title: String,
    pub header: Vec<String>,
    pub body: Vec<Vec<String>>,
}

/// The mean of `metric` over the seeds of each kernel of workload `w`, in
/// the experiment's kernel order (kernels that did not run it left out).
pub fn doc_means(e: &ExperimentResults, w: &str, metric: &str) -> Vec<(String, Option<f64>)> {
    e.kernels
        .iter()
        .filter(|k| e.runs_of(w, &k.name).next().is_some())
        .map(|k| {
            let v: Vec<f64> = e
                .runs_of(w, &k.name)
                .filter_map(|r| r.value(metric))
                .collect();
            let mean = (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            (k.name.clone(), mean)
        })
        .collect()
}

/// The table mode of workload `w` of a document's experiment, and its
/// baseline kernel.
pub fn doc_mode<'a>(e: &'a ExperimentResults, w: &str) -> (Mode, Option<&'a str>) {
    let baseline = e
        .workloads
        .iter()
        .find(|x| x.name == w)
        .and_then(|x| x.baseline.as_deref());
    let mode = match (e.report.mode.as_str(), baseline) {
        (_, None) | ("absolute", _) => Mode::Absolute,
        ("relative", _) => Mode::Relative,
        _ => Mode::Change,
    };
    (mode, baseline)
}

/// Workload `w`'s table from a results document, as `tables` prints it
/// from the runs (the values as rounded in the document).
pub fn doc_table(e: &ExperimentResults, w: &str) -> DocTable {
    let (mode, baseline) = doc_mode(e, w);
    type Column<'a> = (&'a String, Vec<(String, Option<f64>)>);
    let cols: Vec<Column> = e
        .report
        .metrics
        .iter()
        .map(|m| (m, doc_means(e, w, m)))
        .collect();
    let kernels: Vec<String> = cols
        .first()
        .map(|(_, v)| v.iter().map(|x| x.0.clone()).collect())
        .unwrap_or_default();
    let body = kernels
        .iter()
        .enumerate()
        .map(|(row, k)| {
            std::iter::once(k.clone())
                .chain(cols.iter().map(|(m, vals)| {
                    let base = baseline
                        .and_then(|b| vals.iter().find(|(k, _)| k == b))
                        .and_then(|x| x.1)
                        .map(|b| MetricValue::from_doc(m, b));
                    match vals[row].1 {
                        None => "?".to_string(),
                        Some(v) => cell(MetricValue::from_doc(m, v), base, mode),
                    }
                }))
                .collect()
        })
        .collect();
    let m = &e.machine;
    let cpus: u32 = m.nodes.iter().map(|n| n.cpus).sum();
    let nodes = m.nodes.len();
    let title = format!(
        "{} / {w} — {} ({cpus} CPUs, {nodes} node{}), profile {}, {}{}",
        e.name,
        m.name,
        if nodes == 1 { "" } else { "s" },
        e.profile.name,
        seeds_text(&e.seeds),
        match (mode, baseline) {
            (Mode::Relative, Some(b)) =>
                format!("; counts relative to {b} = 100.0, percentages absolute"),
            (Mode::Change, Some(b)) =>
                format!("; counts as % change from {b}, percentages absolute"),
            _ => String::new(),
        }
    );
    DocTable {
        title,
        header: std::iter::once("kernel".to_string())
            .chain(e.report.metrics.iter().cloned())
            .collect(),
        body,
    }
}

/// A published table of a results document.
pub fn doc_published(t: &PublishedTable) -> DocTable {
    DocTable {
        title: format!("published: {}", t.source),
        header: std::iter::once("kernel".to_string())
            .chain(t.columns.iter().cloned())
            .collect(),
        body: t
            .rows
            .iter()
            .map(|r| {
                std::iter::once(r.label.clone())
                    .chain(
                        r.values
                            .iter()
                            .map(|v| published_cell(v.unwrap_or(f64::NAN), t.precision)),
                    )
                    .collect()
            })
            .collect(),
    }
}

/// Every table of a results document, as `mmlab run` prints them.
pub fn tables_from_doc(doc: &ResultsDoc, format: Format) -> String {
    let mut out = String::new();
    for e in &doc.experiments {
        for w in &e.workloads {
            let t = doc_table(e, &w.name);
            render(&mut out, format, &t.title, &t.header, &t.body);
        }
        for p in &e.published {
            let t = doc_published(p);
            render(&mut out, format, &t.title, &t.header, &t.body);
        }
    }
    out
}

/// A published figure: "-" for `nan` (the source gives none), else as
/// many decimals as it was published with (at least one, at most three).
pub fn published_cell(v: f64, precision: Option<usize>) -> String {
    if v.is_nan() {
        return "-".into();
    }
    if let Some(p) = precision {
        return format!("{v:.p$}");
    }
    let decimals = (1..=3)
        .find(|&d| {
            let scale = 10f64.powi(d);
            ((v * scale).round() - v * scale).abs() < 1e-6
        })
        .unwrap_or(3) as usize;
    format!("{v:.decimals$}")
}

/// Renders one table: `format` markdown gives a markdown table, every
/// other format aligned text.
pub fn render(
    out: &mut String,
    format: Format,
    title: &str,
    header: &[String],
    body: &[Vec<String>],
) {
    match format {
        Format::Markdown => markdown(out, title, header, body),
        _ => text_table(out, title, header, body),
    }
}

/// An aligned text table: the first column left-aligned, the others right.
fn text_table(out: &mut String, title: &str, header: &[String], body: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            std::iter::once(&header[c])
                .chain(body.iter().map(|r| &r[c]))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let _ = writeln!(out, "{title}\n");
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (c, v) in cells.iter().enumerate() {
            if c == 0 {
                let _ = write!(s, "{v:<w$}", w = widths[0]);
            } else {
                let _ = write!(s, "  {v:>w$}", w = widths[c]);
            }
        }
        s
    };
    let _ = writeln!(out, "{}", line(header));
    let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    let _ = writeln!(out, "{}", "-".repeat(total));
    for r in body {
        let _ = writeln!(out, "{}", line(r));
    }
    let _ = writeln!(out);
}

/// A markdown table with a bold title, numbers right-aligned.
fn markdown(out: &mut String, title: &str, header: &[String], body: &[Vec<String>]) {
    let _ = writeln!(out, "**{title}**\n");
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let seps: Vec<&str> = (0..header.len())
        .map(|i| if i == 0 { ":---" } else { "---:" })
        .collect();
    let _ = writeln!(out, "|{}|", seps.join("|"));
    for r in body {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mm::vmstat::VmEvent;

    fn pct_of(v: MetricValue) -> f64 {
        match v {
            MetricValue::Pct(p) | MetricValue::SmallPct(p) => p,
            MetricValue::Rate(r) | MetricValue::Gbps(r) => panic!("{r} is a rate"),
            MetricValue::Int(i) => panic!("{i} is a count"),
        }
    }

    /// Seed 002's figure of merit is conditional on a hit ("~25 % ... *if*
    /// the vma is cached"): 30 first-slot hits of 40 hits in 100 calls is
    /// 75 %, not 30 %.
    #[test]
    fn first_slot_rate_is_of_hits_and_fault_share_of_fault_time() {
        let mut vmstat = mm::vmstat::VmStat::default();
        vmstat.count(VmEvent::VMACACHE_FIND_CALLS, 100);
        vmstat.count(VmEvent::VMACACHE_FIND_HITS, 40);
        vmstat.count(VmEvent::VMACACHE_FIRST_SLOT_HITS, 30);
        vmstat.count(VmEvent::VMACACHE_FIND_NS, 600);
        vmstat.count(VmEvent::VMACACHE_FIND_FAULT_NS, 500);
        vmstat.count(VmEvent::FAULT_NS, 200_000);
        let r = RunResult {
            kernel: "k".into(),
            workload: "w".into(),
            stats: RunStats {
                busy_ns: 1_000_000,
                ..RunStats::default()
            },
            vmstat,
            nr_runs: 0,
            seed: 1,
            timeline: None,
        };
        let m = |n: &str| r.metric(n).expect("a metric");
        assert_eq!(pct_of(m("vmacache_hit_pct")), 40.0);
        assert_eq!(pct_of(m("vmacache_first_slot_pct")), 75.0);
        assert_eq!(pct_of(m("vmacache_fault_share_pct")), 0.25);
        assert_eq!(pct_of(m("vmacache_find_share_pct")), 0.06);
        assert_eq!(r.metric("no_such_metric"), None);
        assert_eq!(
            cell(m("vmacache_fault_share_pct"), None, Mode::Absolute),
            "0.250"
        );
    }

    #[test]
    fn published_cells_keep_their_decimals_and_nan_is_a_dash() {
        assert_eq!(published_cell(25.0, None), "25.0");
        assert_eq!(published_cell(0.055, None), "0.055");
        assert_eq!(published_cell(99.97, None), "99.97");
        assert_eq!(published_cell(f64::NAN, None), "-");
    }
}
