//! `mmlab report RESULTS.json -o report.html`: one self-contained HTML file
//! (inline CSS and SVG, no script, nothing fetched at view time) with, per
//! experiment, its provenance, charts of what it measured, and its tables
//! beside the published ones.
//!
//! # Which charts
//!
//! An experiment gets the charts its data has: one bar chart per metric of
//! its table (in the table's mode: % of the baseline, % change, or the
//! value), then, where the runs have them, the zone-lock share per kernel,
//! the bytes faulted in per folio size, the cache-miss rates (kernel and
//! user), `move_pages()` GB/s against copy threads, and the PCP lists'
//! `high` (and `count`) over virtual time.

use crate::charts;
use crate::experiment::Mode;
use crate::metrics::MetricValue;
use crate::results::{ExperimentResults, ResultsDoc, Run};
use std::fmt::Write as _;

/// HTML-escapes text for element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const CSS: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; margin: 0; color: #1a1a1a; background: #fafafa; }
header { background: #1f3a5f; color: #fff; padding: 18px 32px; }
header h1 { margin: 0 0 4px 0; font-size: 26px; }
header p { margin: 2px 0; opacity: 0.9; }
main { padding: 8px 32px 40px 32px; max-width: 1900px; }
nav ul { columns: 3; padding-left: 18px; }
section.exp { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 22px 0; padding: 8px 22px 18px 22px; }
section.exp h2 { border-bottom: 2px solid #1f3a5f; padding-bottom: 4px; }
.desc { color: #333; max-width: 110ch; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; }
.chart { border: 1px solid #e3e3e3; border-radius: 4px; background: #fff; }
.tables { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e6e6e6; }
th { background: #f0f3f7; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td { text-align: right; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 4px 0; max-width: 80ch; }
td.base { font-weight: 600; }
details { margin: 8px 0; }
.prov td, .prov th { text-align: left; vertical-align: top; }
.note { color: #555; font-size: 13px; }
footer { color: #666; font-size: 12px; padding: 0 32px 24px 32px; }
"#;

/// The whole report.
pub fn render(doc: &ResultsDoc, source_name: &str) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>mmlab report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(source_name)
    );
    let _ = write!(
        h,
        "<header><h1>mmlab results</h1><p>{} · {} experiment{} · mmlab {} · schema {} v{}</p>\
         <p>Values are the model's (virtual time on the modelled machine, not this host's); \
         published figures are shown beside them where the experiment reproduces a publication.</p></header>\n<main>\n",
        esc(source_name),
        doc.experiments.len(),
        if doc.experiments.len() == 1 { "" } else { "s" },
        esc(&doc.mmlab_version),
        esc(&doc.schema),
        doc.schema_version
    );
    if doc.experiments.len() > 1 {
        h.push_str("<nav><ul>\n");
        for (i, e) in doc.experiments.iter().enumerate() {
            let _ = writeln!(h, "<li><a href=\"#e{i}\">{}</a></li>", esc(&e.name));
        }
        h.push_str("</ul></nav>\n");
    }
    for (i, e) in doc.experiments.iter().enumerate() {
        experiment(&mut h, i, e);
    }
    let _ = write!(
        h,
        "</main>\n<footer>Written by mmlab {} from {}. Charts drawn with plotters (SVG). \
         The results document's schema: docs/results-schema.md in the mmlab repository.</footer>\n</body>\n</html>\n",
        esc(&doc.mmlab_version),
        esc(source_name)
    );
    h
}

fn experiment(h: &mut String, i: usize, e: &ExperimentResults) {
    let _ = write!(
        h,
        "<section class=\"exp\" id=\"e{i}\">\n<h2>{}</h2>\n<p class=\"desc\">{}</p>\n",
        esc(&e.name),
        esc(&e.description)
    );
    provenance(h, e);
    h.push_str("<div class=\"charts\">\n");
    for svg in charts_of(e) {
        let _ = writeln!(h, "<div class=\"chart\">{svg}</div>");
    }
    h.push_str("</div>\n<div class=\"tables\">\n");
    for w in &e.workloads {
        model_table(h, e, &w.name);
    }
    for t in &e.published {
        published_table(h, t);
    }
    h.push_str("</div>\n</section>\n");
}

fn provenance(h: &mut String, e: &ExperimentResults) {
    let m = &e.machine;
    let cpus: u32 = m.nodes.iter().map(|n| n.cpus).sum();
    let mem: u64 = m.nodes.iter().map(|n| n.memory_bytes).sum();
    let seeds: Vec<String> = e.seeds.iter().map(u64::to_string).collect();
    let _ = writeln!(
        h,
        "<table class=\"prov\"><tr><th>seed{}</th><td>{}</td></tr>\
         <tr><th>profile</th><td>{} — {}</td></tr>\
         <tr><th>machine</th><td>{}: {} node{}, {} CPUs, {} GiB{}{}{}</td></tr></table>",
        if e.seeds.len() == 1 { "" } else { "s" },
        esc(&seeds.join(", ")),
        esc(&e.profile.name),
        esc(&e.profile.description),
        esc(&m.name),
        m.nodes.len(),
        if m.nodes.len() == 1 { "" } else { "s" },
        cpus,
        mem >> 30,
        if m.llc_bytes_per_node > 0 {
            format!(", LLC {} MiB per node", m.llc_bytes_per_node >> 20)
        } else {
            String::new()
        },
        if m.cache_model {
            ", cache model on"
        } else {
            ""
        },
        if m.source.is_empty() {
            String::new()
        } else {
            format!(" <span class=\"note\">({})</span>", esc(&m.source))
        }
    );
    h.push_str("<details><summary>kernels and workloads</summary><table class=\"prov\"><tr><th>kernel</th><th>preset</th><th>knobs</th></tr>\n");
    for k in &e.kernels {
        let knobs: Vec<String> = k.knobs.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&k.name),
            esc(&k.preset),
            esc(&knobs.join(", "))
        );
    }
    h.push_str("</table><table class=\"prov\"><tr><th>workload</th><th>type</th><th>parameters</th></tr>\n");
    for w in &e.workloads {
        let params: Vec<String> = w.params.iter().map(|(n, v)| format!("{n} = {v}")).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&w.name),
            esc(&w.kind),
            esc(&params.join(", "))
        );
    }
    h.push_str("</table></details>\n");
}

use crate::report::{doc_means as values, doc_mode};

fn baseline_of<'a>(e: &'a ExperimentResults, w: &str) -> Option<&'a str> {
    doc_mode(e, w).1
}

/// A table in HTML; `base` names the baseline row, shown bold.
fn html_table(h: &mut String, t: &crate::report::DocTable, base: Option<&str>) {
    let _ = write!(h, "<table><caption>{}</caption><tr>", esc(&t.title));
    for c in &t.header {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("</tr>\n");
    for r in &t.body {
        h.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let cls = if i == 0 && Some(c.as_str()) == base {
                " class=\"base\""
            } else {
                ""
            };
            let _ = write!(h, "<td{cls}>{}</td>", esc(c));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

fn model_table(h: &mut String, e: &ExperimentResults, w: &str) {
    html_table(h, &crate::report::doc_table(e, w), baseline_of(e, w));
}

fn published_table(h: &mut String, t: &crate::results::PublishedTable) {
    html_table(h, &crate::report::doc_published(t), None);
}

/// A chart's SVG, or a note saying why it could not be drawn.
fn svg_or_note(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| format!("<p class=\"note\">chart not drawn: {}</p>", esc(&e)))
}

/// Every chart of an experiment.
fn charts_of(e: &ExperimentResults) -> Vec<String> {
    let mut out = Vec::new();
    for m in &e.report.metrics {
        out.push(svg_or_note(metric_chart(e, m)));
    }
    let any = |m: &str, min: f64| e.runs.iter().any(|r| r.value(m).is_some_and(|v| v > min));
    if any("zone_lock_pct", 0.5) && !e.report.metrics.iter().any(|m| m == "zone_lock_pct") {
        out.push(svg_or_note(metric_chart(e, "zone_lock_pct")));
    }
    for w in &e.workloads {
        if mix_matters(e, &w.name) {
            out.push(svg_or_note(mix_chart(e, &w.name)));
        }
    }
    if any("llc_references", 0.0) {
        for w in &e.workloads {
            out.push(svg_or_note(miss_chart(e, &w.name)));
        }
    }
    if any("migrate_gbps", 0.0) {
        if let Some(c) = gbps_chart(e) {
            out.push(svg_or_note(c));
        }
    }
    for w in &e.workloads {
        if let Some(c) = pcp_chart(e, &w.name) {
            out.push(svg_or_note(c));
        }
    }
    out
}

/// The value shown for `v` in the table's mode (`None` when the baseline
/// is 0 and the value is not).
fn shown(metric: &str, v: f64, base: Option<f64>, mode: Mode) -> Option<f64> {
    let absolute = matches!(
        MetricValue::from_doc(metric, v),
        MetricValue::Pct(_) | MetricValue::SmallPct(_) | MetricValue::Gbps(_)
    );
    match (mode, base) {
        (_, None) | (Mode::Absolute, _) => Some(v),
        _ if absolute => Some(v),
        (Mode::Relative, Some(b)) if b != 0.0 => Some(100.0 * v / b),
        (Mode::Change, Some(b)) if b != 0.0 => Some(100.0 * (v - b) / b),
        (_, Some(_)) if v == 0.0 => Some(if mode == Mode::Relative { 100.0 } else { 0.0 }),
        _ => None,
    }
}

/// One report metric: groups = workloads, bars = kernels.
fn metric_chart(e: &ExperimentResults, metric: &str) -> Result<String, String> {
    let unit = crate::metrics::unit_of(metric).unwrap_or("");
    let mut modes = Vec::new();
    let series: Vec<(String, Vec<Option<f64>>)> = e
        .kernels
        .iter()
        .map(|k| {
            let vals = e
                .workloads
                .iter()
                .map(|w| {
                    let (mode, base_k) = doc_mode(e, &w.name);
                    modes.push(mode);
                    let v = values(e, &w.name, metric);
                    let base = base_k
                        .and_then(|b| v.iter().find(|(k, _)| k == b))
                        .and_then(|x| x.1);
                    v.iter()
                        .find(|(n, _)| *n == k.name)
                        .and_then(|x| x.1)
                        .and_then(|x| shown(metric, x, base, mode))
                })
                .collect();
            (k.name.clone(), vals)
        })
        .filter(|(_, v): &(String, Vec<Option<f64>>)| v.iter().any(Option::is_some))
        .collect();
    let pct_like = matches!(
        MetricValue::from_doc(metric, 0.0),
        MetricValue::Pct(_) | MetricValue::SmallPct(_) | MetricValue::Gbps(_)
    );
    let base = e
        .report
        .baseline
        .as_deref()
        .or_else(|| e.workloads.first().and_then(|w| w.baseline.as_deref()));
    let y = match (modes.first(), pct_like, base) {
        (Some(Mode::Relative), false, Some(b)) => format!("% of {b}"),
        (Some(Mode::Change), false, Some(b)) => format!("% change from {b}"),
        _ => unit.to_string(),
    };
    let groups: Vec<String> = e.workloads.iter().map(|w| w.name.clone()).collect();
    charts::grouped_bars(metric, &y, &groups, &series)
}

const MIX: [(&str, &str); 5] = [
    ("mix_4k_pct", "4 KiB"),
    ("mix_16k_pct", "16 KiB"),
    ("mix_32k_pct", "32 KiB"),
    ("mix_64k_pct", "64 KiB"),
    ("mix_large_pct", "128 KiB-2 MiB"),
];

/// True if workload `w`'s folio-size mix is worth a chart: its table shows
/// it, or some size's share differs between kernels by a point or more.
fn mix_matters(e: &ExperimentResults, w: &str) -> bool {
    if e.report.metrics.iter().any(|m| m.starts_with("mix_")) {
        return true;
    }
    MIX.iter().any(|(m, _)| {
        let v: Vec<f64> = values(e, w, m).into_iter().filter_map(|x| x.1).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        hi - lo >= 1.0
    })
}

/// Bytes faulted in per folio size, one stacked bar per kernel.
fn mix_chart(e: &ExperimentResults, w: &str) -> Result<String, String> {
    let kernels: Vec<String> = values(e, w, "mix_4k_pct")
        .into_iter()
        .map(|x| x.0)
        .collect();
    let parts: Vec<(String, Vec<f64>)> = MIX
        .iter()
        .map(|(m, label)| {
            let v = values(e, w, m)
                .into_iter()
                .map(|x| x.1.unwrap_or(0.0))
                .collect();
            (label.to_string(), v)
        })
        .collect();
    charts::stacked_bars(
        &format!("{w}: bytes faulted in, by folio size"),
        "% of bytes",
        &kernels,
        &parts,
    )
}

/// The cache model's miss rates: all, user, kernel per kernel.
fn miss_chart(e: &ExperimentResults, w: &str) -> Result<String, String> {
    let groups = ["all", "user", "kernel (clear/copy)"]
        .map(String::from)
        .to_vec();
    let metrics = [
        "cache_miss_pct",
        "user_cache_miss_pct",
        "kernel_cache_miss_pct",
    ];
    let series = e
        .kernels
        .iter()
        .filter(|k| e.runs_of(w, &k.name).next().is_some())
        .map(|k| {
            let v = metrics
                .iter()
                .map(|m| {
                    values(e, w, m)
                        .into_iter()
                        .find(|x| x.0 == k.name)
                        .and_then(|x| x.1)
                })
                .collect();
            (k.name.clone(), v)
        })
        .collect::<Vec<_>>();
    charts::grouped_bars(
        &format!("{w}: LLC miss rate"),
        "misses per 100 references",
        &groups,
        &series,
    )
}

/// `move_pages()` GB/s against copy threads (`vm.limit_mt_num`), one line
/// per workload, for the kernels with the multi-threaded engine and the
/// single-threaded one of the same preset (1 thread).
fn gbps_chart(e: &ExperimentResults) -> Option<Result<String, String>> {
    let engine = |k: &crate::results::KernelInfo| {
        k.knobs
            .get("mmlab.migrate_copy_engine")
            .and_then(|v| v.as_str())
            .unwrap_or("single")
            .to_string()
    };
    let mt: Vec<&crate::results::KernelInfo> =
        e.kernels.iter().filter(|k| engine(k) == "mt").collect();
    let preset = &mt.first()?.preset;
    let points: Vec<(&str, f64)> = e
        .kernels
        .iter()
        .filter(|k| &k.preset == preset && (engine(k) == "mt" || engine(k) == "single"))
        .map(|k| {
            let t = k
                .knobs
                .get("vm.limit_mt_num")
                .and_then(|v| v.as_f64())
                .unwrap_or(1.0);
            (k.name.as_str(), if engine(k) == "single" { 1.0 } else { t })
        })
        .collect();
    let series: Vec<(String, Vec<(f64, f64)>)> = e
        .workloads
        .iter()
        .map(|w| {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter_map(|(k, t)| {
                    let v: Vec<f64> = e
                        .runs_of(&w.name, k)
                        .filter_map(|r| r.value("migrate_gbps"))
                        .collect();
                    (!v.is_empty()).then(|| (*t, v.iter().sum::<f64>() / v.len() as f64))
                })
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (w.name.clone(), pts)
        })
        .filter(|(_, p)| p.len() > 1)
        .collect();
    if series.is_empty() {
        return None;
    }
    Some(charts::lines(
        "move_pages() GB/s against copy threads",
        "threads (vm.limit_mt_num)",
        "GB/s",
        &series,
    ))
}

/// The PCP lists' `high` summed over CPUs over virtual time, one line per
/// kernel, for the zone with the largest lists; only when the runs lasted
/// several vmstat intervals.
fn pcp_chart(e: &ExperimentResults, w: &str) -> Option<Result<String, String>> {
    let runs: Vec<&Run> = e
        .kernels
        .iter()
        .filter_map(|k| e.runs_of(w, &k.name).next())
        .collect();
    let times = |r: &Run| {
        let mut t: Vec<i64> = r.pcp_series.rows.iter().map(|x| x[0]).collect();
        t.dedup();
        t.len()
    };
    if runs.iter().all(|r| times(r) < 3) {
        return None;
    }
    // The zone whose `high` is largest in total.
    let mut by_zone: std::collections::BTreeMap<i64, i64> = std::collections::BTreeMap::new();
    for r in &runs {
        for x in &r.pcp_series.rows {
            *by_zone.entry(x[2]).or_default() += x[4];
        }
    }
    let zone = by_zone.iter().max_by_key(|(_, v)| **v).map(|(z, _)| *z)?;
    let series = runs
        .iter()
        .map(|r| {
            let mut sums: std::collections::BTreeMap<i64, f64> = std::collections::BTreeMap::new();
            for x in r.pcp_series.rows.iter().filter(|x| x[2] == zone) {
                *sums.entry(x[0]).or_default() += x[4] as f64;
            }
            let pts = sums.into_iter().map(|(t, v)| (t as f64 / 1e9, v)).collect();
            (r.kernel.clone(), pts)
        })
        .collect::<Vec<_>>();
    Some(charts::lines(
        &format!("{w}: PCP high over time (zone {zone}, summed over CPUs)"),
        "virtual time (s)",
        "pages",
        &series,
    ))
}
