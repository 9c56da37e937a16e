//! `mmlab compare A.json B.json [C.json ...]`: the same (experiment,
//! workload, kernel, metric) in several results documents, side by side,
//! with the change from the first; as `compare-kernels.sh` of mmtests, LKP's
//! `ncompare` and `perf diff` do.
//!
//! # Spread
//!
//! With one seed a value is exact for that seed (the model is
//! deterministic), but says nothing of how it would move with another
//! seed. Where a document holds several seeds of a run, a cell shows the
//! mean and the sample standard deviation, and a change is flagged (`*`)
//! when the two sets of runs do not overlap at all: every run of one is
//! below every run of the other. With at most a handful of seeds this is
//! the robust form of "beyond the runs' spread"; it needs no assumption
//! about the distribution, and two seeds on each side already give it
//! meaning.

use crate::report::Format;
use crate::results::{ExperimentResults, ResultsDoc};
use serde::Serialize;
use std::fmt::Write as _;

/// The values of one metric of one (workload, kernel) in one document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    /// Mean over the seeds.
    pub mean: f64,
    /// Sample standard deviation (0 for one seed).
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    /// Number of seeds.
    pub n: usize,
}

impl Cell {
    fn of(values: &[f64]) -> Option<Cell> {
        if values.is_empty() {
            return None;
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Cell {
            mean,
            sd,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n,
        })
    }

    /// True if both sides ran several seeds and their ranges are apart.
    fn beyond_spread(&self, base: &Cell) -> bool {
        self.n > 1 && base.n > 1 && (self.min > base.max || self.max < base.min)
    }
}

/// One compared row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub experiment: String,
    pub workload: String,
    pub kernel: String,
    pub metric: String,
    pub unit: String,
    /// One per document (`None`: the document has no such run).
    pub cells: Vec<Option<Cell>>,
    /// Per document after the first: the change from the first, in % of
    /// it (for a `%` metric: in percentage points).
    pub change: Vec<Option<f64>>,
    /// Per document after the first: the change is beyond the runs' spread.
    pub beyond_spread: Vec<bool>,
}

/// Which metrics to compare.
#[derive(Clone, Debug)]
pub enum MetricSel {
    /// Each experiment's `report.metrics` (what its tables show).
    Report,
    /// Every metric and counter.
    All,
    /// These names.
    Named(Vec<String>),
}

fn metric_names(e: &ExperimentResults, sel: &MetricSel) -> Vec<String> {
    match sel {
        MetricSel::Report => e.report.metrics.clone(),
        MetricSel::Named(v) => v.clone(),
        MetricSel::All => e.runs.first().map_or_else(Vec::new, |r| {
            let mut v: Vec<String> = r.metrics.keys().cloned().collect();
            v.extend(
                r.vmstat
                    .keys()
                    .filter(|k| !r.metrics.contains_key(*k))
                    .cloned(),
            );
            v
        }),
    }
}

fn cell(e: Option<&ExperimentResults>, workload: &str, kernel: &str, metric: &str) -> Option<Cell> {
    let values: Vec<f64> = e?
        .runs_of(workload, kernel)
        .filter_map(|r| r.value(metric))
        .collect();
    Cell::of(&values)
}

/// The (workload, kernel) pairs of the first document's experiment, then
/// any the others add.
fn pairs(exps: &[Option<&ExperimentResults>]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in exps.iter().flatten() {
        for r in &e.runs {
            let p = (r.workload.clone(), r.kernel.clone());
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Compares `docs` (the first is the base): one row per experiment of the
/// first document (then experiments only the others have), workload,
/// kernel and metric.
pub fn compare(docs: &[ResultsDoc], sel: &MetricSel) -> Vec<Row> {
    let mut names: Vec<&str> = Vec::new();
    for d in docs {
        for e in &d.experiments {
            if !names.contains(&e.name.as_str()) {
                names.push(&e.name);
            }
        }
    }
    let mut rows = Vec::new();
    for name in names {
        let exps: Vec<Option<&ExperimentResults>> = docs
            .iter()
            .map(|d| d.experiments.iter().find(|e| e.name == name))
            .collect();
        let Some(first) = exps.iter().flatten().next() else {
            continue;
        };
        let metrics = metric_names(first, sel);
        for (w, k) in pairs(&exps) {
            for m in &metrics {
                let cells: Vec<Option<Cell>> = exps.iter().map(|e| cell(*e, &w, &k, m)).collect();
                if cells.iter().all(Option::is_none) {
                    continue;
                }
                rows.push(row(name, &w, &k, m, cells));
            }
        }
    }
    rows
}

fn row(
    experiment: &str,
    workload: &str,
    kernel: &str,
    metric: &str,
    cells: Vec<Option<Cell>>,
) -> Row {
    let unit = crate::metrics::unit_of(metric).unwrap_or("").to_string();
    let base = cells[0].clone();
    let mut change = Vec::new();
    let mut beyond = Vec::new();
    for c in &cells[1..] {
        let (ch, b) = match (&base, c) {
            (Some(b), Some(c)) => {
                let ch = if unit == "%" {
                    Some(c.mean - b.mean)
                } else if b.mean != 0.0 {
                    Some(100.0 * (c.mean - b.mean) / b.mean.abs())
                } else if c.mean == 0.0 {
                    Some(0.0)
                } else {
                    None
                };
                (ch, c.beyond_spread(b))
            }
            _ => (None, false),
        };
        change.push(ch);
        beyond.push(b);
    }
    Row {
        experiment: experiment.to_string(),
        workload: workload.to_string(),
        kernel: kernel.to_string(),
        metric: metric.to_string(),
        unit,
        cells,
        change,
        beyond_spread: beyond,
    }
}

/// A number as a person reads it: integers whole, fractions to three
/// significant decimals.
fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn cell_text(c: &Option<Cell>) -> String {
    match c {
        None => "-".into(),
        Some(c) if c.n > 1 => format!("{} ±{}", num(c.mean), num(c.sd)),
        Some(c) => num(c.mean),
    }
}

fn change_text(r: &Row, i: usize) -> String {
    let flag = if r.beyond_spread[i] { " *" } else { "" };
    match r.change[i] {
        None => "-".into(),
        Some(ch) if r.unit == "%" => format!("{ch:+.2}pt{flag}"),
        Some(ch) => format!("{ch:+.1}%{flag}"),
    }
}

/// What each document is, for the legend: its label, file, version and
/// seeds.
#[derive(Clone, Debug, Serialize)]
pub struct DocLabel {
    pub label: String,
    pub file: String,
    pub version: String,
    pub seeds: String,
}

/// The labels of the documents: their file names without extension when
/// those are distinct and short, else A, B, C, ...
pub fn labels(files: &[std::path::PathBuf], docs: &[ResultsDoc]) -> Vec<DocLabel> {
    let stems: Vec<String> = files
        .iter()
        .map(|f| {
            f.file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
        })
        .collect();
    let distinct = stems
        .iter()
        .enumerate()
        .all(|(i, s)| !s.is_empty() && s.chars().count() <= 20 && !stems[..i].contains(s));
    files
        .iter()
        .zip(docs)
        .enumerate()
        .map(|(i, (f, d))| {
            let mut seeds: Vec<u64> = d
                .experiments
                .iter()
                .flat_map(|e| e.seeds.iter().copied())
                .collect();
            seeds.sort_unstable();
            seeds.dedup();
            let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
            DocLabel {
                label: if distinct {
                    stems[i].clone()
                } else {
                    char::from(b'A' + (i % 26) as u8).to_string()
                },
                file: f.display().to_string(),
                version: d.mmlab_version.clone(),
                seeds: seeds.join(","),
            }
        })
        .collect()
}

fn shown_rows(rows: &[Row], changed_only: bool) -> impl Iterator<Item = &Row> {
    rows.iter()
        .filter(move |r| !changed_only || r.change.iter().any(|c| c.is_none_or(|c| c != 0.0)))
}

/// The comparison as one JSON object: the documents and the rows.
pub fn json(rows: &[Row], labels: &[DocLabel], changed_only: bool) -> serde_json::Value {
    let rows: Vec<&Row> = shown_rows(rows, changed_only).collect();
    serde_json::json!({ "documents": labels, "rows": rows })
}

/// The comparison as tidy CSV: one line per row and document.
pub fn csv(rows: &[Row], labels: &[DocLabel], changed_only: bool) -> anyhow::Result<String> {
    let mut w = ::csv::WriterBuilder::new()
        .terminator(::csv::Terminator::CRLF)
        .from_writer(Vec::new());
    w.write_record([
        "experiment",
        "workload",
        "kernel",
        "metric",
        "unit",
        "document",
        "mean",
        "sd",
        "n",
        "change",
        "beyond_spread",
    ])?;
    for r in shown_rows(rows, changed_only) {
        for (i, c) in r.cells.iter().enumerate() {
            let Some(c) = c else { continue };
            let (change, beyond) = if i == 0 {
                (String::new(), String::new())
            } else {
                (
                    r.change[i - 1].map(|v| format!("{v}")).unwrap_or_default(),
                    r.beyond_spread[i - 1].to_string(),
                )
            };
            w.write_record([
                r.experiment.as_str(),
                &r.workload,
                &r.kernel,
                &r.metric,
                &r.unit,
                &labels[i].label,
                &format!("{}", c.mean),
                &format!("{}", c.sd),
                &c.n.to_string(),
                &change,
                &beyond,
            ])?;
        }
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?)
}

/// The comparison as text or markdown tables, one per (experiment,
/// workload); `changed_only` leaves out rows where nothing changed.
pub fn render(rows: &[Row], labels: &[DocLabel], format: Format, changed_only: bool) -> String {
    let mut out = String::new();
    let md = format == Format::Markdown;
    for l in labels {
        let _ = writeln!(
            out,
            "{}{}: {} (mmlab {}, seeds {})",
            if md { "- " } else { "" },
            l.label,
            l.file,
            l.version,
            l.seeds
        );
    }
    let several = rows
        .iter()
        .any(|r| r.cells.iter().flatten().any(|c| c.n > 1));
    let _ = writeln!(
        out,
        "\nChange from {}: % of it; for percentages, percentage points (pt).{}\n",
        labels.first().map_or("the first", |l| l.label.as_str()),
        if several {
            " With several seeds: mean ±standard deviation; * = every run on one side is beyond every run on the other."
        } else {
            " One seed each: the model is deterministic, so a change is exact for that seed, but its spread over seeds is unknown (run with --seeds 1-5)."
        }
    );
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        if !groups.contains(&(r.experiment.as_str(), r.workload.as_str())) {
            groups.push((&r.experiment, &r.workload));
        }
    }
    for (e, w) in groups {
        let body: Vec<Vec<String>> = shown_rows(rows, changed_only)
            .filter(|r| r.experiment == e && r.workload == w)
            .map(|r| {
                let mut cells = vec![r.kernel.clone(), r.metric.clone(), cell_text(&r.cells[0])];
                for i in 1..r.cells.len() {
                    cells.push(cell_text(&r.cells[i]));
                    cells.push(change_text(r, i - 1));
                }
                cells
            })
            .collect();
        if body.is_empty() {
            continue;
        }
        let mut header = vec![
            "kernel".to_string(),
            "metric".to_string(),
            labels[0].label.clone(),
        ];
        for l in &labels[1..] {
            header.push(l.label.clone());
            header.push("change".to_string());
        }
        crate::report::render(&mut out, format, &format!("{e} / {w}"), &header, &body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_flags_only_separated_ranges_of_several_seeds() {
        let a = Cell::of(&[10.0, 11.0, 12.0]).expect("cell");
        let b = Cell::of(&[12.5, 13.0, 14.0]).expect("cell");
        let c = Cell::of(&[11.5, 13.0]).expect("cell");
        let one = Cell::of(&[20.0]).expect("cell");
        assert!(b.beyond_spread(&a));
        assert!(!c.beyond_spread(&a), "overlapping ranges");
        assert!(!one.beyond_spread(&a), "one seed has no spread");
        assert_eq!(a.mean, 11.0);
        assert!((a.sd - 1.0).abs() < 1e-12);
    }

    #[test]
    fn numbers_read_as_numbers() {
        assert_eq!(num(25845560.0), "25845560");
        assert_eq!(num(8.98349), "8.983");
        assert_eq!(num(123.456), "123.5");
    }
}
