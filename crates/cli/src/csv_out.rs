//! Results as CSV (RFC 4180: fields quoted where they need it, CRLF line
//! ends), written by the `csv` crate.
//!
//! - Tidy (`--format csv`): one row per (experiment, workload, kernel,
//!   seed, metric) with its value and unit, the published figures too
//!   (`source` = `published`): the form pandas, R and spreadsheets pivot.
//! - Wide (`--format csv-wide`): one row per (experiment, workload,
//!   kernel, seed) and per published row, one column per metric that the
//!   experiments' tables show (the union, in order of appearance; empty
//!   where a row has no such value).
//!
//! Values are numbers as the results document has them (no `%` signs, no
//! relative values): a spreadsheet computes changes itself.

use crate::results::{ResultsDoc, TIDY_COLUMNS};
use std::io::Write;

fn writer<W: Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(w)
}

fn io(e: csv::Error) -> std::io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("{other:?}")),
    }
}

/// Writes the tidy form of `doc`.
pub fn write_tidy<W: Write>(doc: &ResultsDoc, w: W) -> std::io::Result<()> {
    let mut out = writer(w);
    out.write_record(TIDY_COLUMNS).map_err(io)?;
    for r in doc.tidy_rows() {
        let seed = r.seed.map(|s| s.to_string()).unwrap_or_default();
        let value = r.value.to_string();
        out.write_record([
            r.experiment.as_str(),
            &r.workload,
            &r.kernel,
            &seed,
            &r.metric,
            &value,
            &r.unit,
            r.source,
        ])
        .map_err(io)?;
    }
    out.flush()
}

/// The wide form's metric columns: every experiment's report metrics, then
/// its published columns, each name once.
fn wide_columns(doc: &ResultsDoc) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    for e in &doc.experiments {
        let published = e.published.iter().flat_map(|t| t.columns.iter());
        for c in e.report.metrics.iter().chain(published) {
            if !cols.contains(c) {
                cols.push(c.clone());
            }
        }
    }
    cols
}

/// Writes the wide form of `doc`.
pub fn write_wide<W: Write>(doc: &ResultsDoc, w: W) -> std::io::Result<()> {
    let cols = wide_columns(doc);
    let mut out = writer(w);
    let head = ["source", "experiment", "workload", "kernel", "seed"];
    out.write_record(head.iter().copied().chain(cols.iter().map(String::as_str)))
        .map_err(io)?;
    for e in &doc.experiments {
        for r in &e.runs {
            let mut rec = vec![
                "model".to_string(),
                e.name.clone(),
                r.workload.clone(),
                r.kernel.clone(),
                r.seed.to_string(),
            ];
            rec.extend(cols.iter().map(|c| {
                if e.report.metrics.contains(c) {
                    r.number(c).map(|n| n.to_string()).unwrap_or_default()
                } else {
                    String::new()
                }
            }));
            out.write_record(&rec).map_err(io)?;
        }
        for t in &e.published {
            for row in &t.rows {
                let mut rec = vec![
                    "published".to_string(),
                    e.name.clone(),
                    String::new(),
                    row.label.clone(),
                    String::new(),
                ];
                rec.extend(cols.iter().map(|c| {
                    t.columns
                        .iter()
                        .position(|x| x == c)
                        .and_then(|i| row.values[i])
                        .and_then(serde_json::Number::from_f64)
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                }));
                out.write_record(&rec).map_err(io)?;
            }
        }
    }
    out.flush()
}
