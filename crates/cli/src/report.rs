//! Results: the metrics of each run, the LKML-style tables, and the JSON
//! results document whose shape DESIGN.md fixes.

use crate::experiment::{Experiment, Mode};
use mm::cost::LockClass;
use mm::vmstat::VmEvent;
use serde_json::{json, Map, Value};
use sim::RunStats;
use std::fmt::Write;

/// One metric's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MetricValue {
    /// A count or a duration in ns.
    Int(u64),
    /// A percentage: shown as it is, never relative to the baseline (as the
    /// seeds' "zone lock%" columns are).
    Pct(f64),
}

/// The metrics mmlab computes for every run, with what they mean.
pub const METRICS: &[(&str, &str)] = &[
    ("runtime_ns", "virtual time until the last task finished"),
    (
        "busy_ns",
        "vCPU time spent computing or spinning, summed over vCPUs",
    ),
    (
        "zone_lock_pct",
        "time waiting for or holding zone->lock, % of busy vCPU time",
    ),
    (
        "zone_lock_wait_pct",
        "time spinning on zone->lock, % of busy vCPU time",
    ),
    (
        "zone_lock_contended",
        "zone->lock acquisitions that found it held",
    ),
    (
        "alloc_zone",
        "blocks taken from the buddy lists under zone->lock (mm_page_alloc_zone_locked)",
    ),
    (
        "pcpu_drain",
        "blocks moved from PCP lists to the buddy lists (mm_page_pcpu_drain)",
    ),
    (
        "free_high",
        "PCP drains caused by consecutive high-order frees",
    ),
    (
        "alloc_fail",
        "allocations that failed (the kernel would reclaim or OOM)",
    ),
    (
        "peak_pcp_pages",
        "most pages held on PCP lists at once (sampled)",
    ),
    ("final_pcp_pages", "pages held on PCP lists at the end"),
    ("nr_ops", "operations the tasks executed"),
    (
        "vmacache_hit_pct",
        "vmacache_find hits, % of vmacache_find calls",
    ),
    (
        "vmacache_first_slot_pct",
        "hits in the first slot checked, % of vmacache_find calls (seed 002's figure)",
    ),
    (
        "vmacache_find_share_pct",
        "time in vmacache_find, % of busy vCPU time",
    ),
];

/// True if `name` is a metric or a counter.
pub fn is_metric(name: &str) -> bool {
    METRICS.iter().any(|m| m.0 == name) || VmEvent::ALL.iter().any(|e| e.name() == name)
}

/// Every valid metric name.
pub fn metric_names() -> Vec<&'static str> {
    METRICS
        .iter()
        .map(|m| m.0)
        .chain(VmEvent::ALL.iter().map(|e| e.name()))
        .collect()
}

/// What one (kernel, workload) run produced.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub kernel: String,
    pub workload: String,
    pub stats: RunStats,
    pub vmstat: mm::vmstat::VmStat,
}

impl RunResult {
    /// The value of `name`.
    pub fn metric(&self, name: &str) -> MetricValue {
        let s = &self.stats;
        let v = |e: VmEvent| MetricValue::Int(self.vmstat.get(e));
        match name {
            "runtime_ns" => MetricValue::Int(s.runtime_ns),
            "busy_ns" => MetricValue::Int(s.busy_ns),
            "zone_lock_pct" => MetricValue::Pct(s.lock_pct(LockClass::Zone)),
            "zone_lock_wait_pct" => MetricValue::Pct(s.lock_wait_pct(LockClass::Zone)),
            "zone_lock_contended" => MetricValue::Int(s.locks[LockClass::Zone as usize].contended),
            "alloc_zone" => v(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED),
            "pcpu_drain" => v(VmEvent::MM_PAGE_PCPU_DRAIN),
            "free_high" => v(VmEvent::PCP_FREE_HIGH),
            "alloc_fail" => v(VmEvent::ALLOC_FAIL),
            "peak_pcp_pages" => MetricValue::Int(s.peak_pcp_pages),
            "final_pcp_pages" => MetricValue::Int(s.final_pcp_pages),
            "nr_ops" => MetricValue::Int(s.nr_ops),
            "vmacache_hit_pct" => pct(
                self.vmstat.get(VmEvent::VMACACHE_FIND_HITS),
                self.vmstat.get(VmEvent::VMACACHE_FIND_CALLS),
            ),
            "vmacache_first_slot_pct" => pct(
                self.vmstat.get(VmEvent::VMACACHE_FIRST_SLOT_HITS),
                self.vmstat.get(VmEvent::VMACACHE_FIND_CALLS),
            ),
            "vmacache_find_share_pct" => pct(self.vmstat.get(VmEvent::VMACACHE_FIND_NS), s.busy_ns),
            other => {
                let e = VmEvent::ALL
                    .iter()
                    .find(|e| e.name() == other)
                    .unwrap_or_else(|| panic!("unknown metric {other} passed validation"));
                v(*e)
            }
        }
    }
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
fn pct(part: u64, whole: u64) -> MetricValue {
    MetricValue::Pct(if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    })
}

fn json_value(v: MetricValue) -> Value {
    match v {
        MetricValue::Int(i) => json!(i),
        MetricValue::Pct(p) => json!((p * 1000.0).round() / 1000.0),
    }
}

/// The results document (DESIGN.md, "The results file").
pub fn results_json(exp: &Experiment, seed: u64, results: &[RunResult]) -> Value {
    let rs: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut metrics = Map::new();
            for (m, _) in METRICS {
                metrics.insert(m.to_string(), json_value(r.metric(m)));
            }
            let mut vmstat = Map::new();
            for (k, v) in r.vmstat.iter() {
                vmstat.insert(k.to_string(), json!(v));
            }
            // Each CPU's PCP count and high per zone, once a virtual second.
            let series: Vec<Value> = r
                .stats
                .pcp_series
                .iter()
                .map(|p| json!([p.time_ns, p.cpu, p.zone, p.count, p.high]))
                .collect();
            json!({
                "kernel": r.kernel,
                "workload": r.workload,
                "metrics": metrics,
                "vmstat": vmstat,
                "pcp_series": { "columns": ["time_ns", "cpu", "zone", "count", "high"], "rows": series },
            })
        })
        .collect();
    let kernels: Vec<Value> = exp
        .kernels
        .iter()
        .map(|k| {
            let knobs: Map<String, Value> = k
                .knobs
                .iter()
                .map(|(n, v)| {
                    let v = match v {
                        mm::knobs::KnobValue::Int(i) => json!(i),
                        mm::knobs::KnobValue::Str(s) => json!(s),
                    };
                    (n.clone(), v)
                })
                .collect();
            json!({ "name": k.name, "preset": k.config.preset.name(), "knobs": knobs })
        })
        .collect();
    json!({
        "mmlab_version": env!("CARGO_PKG_VERSION"),
        "experiment": exp.name,
        "description": exp.description,
        "seed": seed,
        "profile": exp.profile.name,
        "machine": exp.machine.name,
        "machine_source": exp.machine_source,
        "kernels": kernels,
        "results": rs,
    })
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Csv,
    Json,
}

fn cell(v: MetricValue, base: Option<MetricValue>, mode: Mode) -> String {
    match (v, base, mode) {
        (MetricValue::Pct(p), _, _) => format!("{p:.1}"),
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
        (MetricValue::Int(i), Some(MetricValue::Pct(_)), _) => i.to_string(),
    }
}

/// The tables of an experiment, one per workload, in `format`.
pub fn tables(exp: &Experiment, seed: u64, results: &[RunResult], format: Format) -> String {
    let metrics = &exp.report.metrics;
    let mode = if exp.report.baseline.is_some() {
        exp.report.mode
    } else {
        Mode::Absolute
    };
    let mut out = String::new();
    for w in &exp.workloads {
        let rows: Vec<&RunResult> = results.iter().filter(|r| r.workload == w.name).collect();
        let base = exp
            .report
            .baseline
            .as_ref()
            .and_then(|b| rows.iter().find(|r| &r.kernel == b).copied());
        let header: Vec<String> = std::iter::once("kernel".to_string())
            .chain(metrics.iter().cloned())
            .collect();
        let body: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                std::iter::once(r.kernel.clone())
                    .chain(
                        metrics
                            .iter()
                            .map(|m| cell(r.metric(m), base.map(|b| b.metric(m)), mode)),
                    )
                    .collect()
            })
            .collect();
        let title = format!(
            "{} / {} — {} ({} CPUs, {} node{}), profile {}, seed {}{}",
            exp.name,
            w.name,
            exp.machine.name,
            exp.machine.nr_cpus(),
            exp.machine.nodes.len(),
            if exp.machine.nodes.len() == 1 {
                ""
            } else {
                "s"
            },
            exp.profile.name,
            seed,
            match (mode, &exp.report.baseline) {
                (Mode::Relative, Some(b)) =>
                    format!("; counts relative to {b} = 100.0, percentages absolute"),
                (Mode::Change, Some(b)) =>
                    format!("; counts as % change from {b}, percentages absolute"),
                _ => String::new(),
            }
        );
        render(&mut out, format, &title, &header, &body);
    }
    if let Some(p) = &exp.published {
        if format != Format::Csv {
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
                        .chain(p.rows[k].iter().map(|v| format!("{v:.1}")))
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
    }
    out
}

pub fn render(
    out: &mut String,
    format: Format,
    title: &str,
    header: &[String],
    body: &[Vec<String>],
) {
    match format {
        Format::Text | Format::Json => {
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
        Format::Markdown => {
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
        Format::Csv => {
            let _ = writeln!(out, "# {title}");
            let _ = writeln!(out, "{}", header.join(","));
            for r in body {
                let _ = writeln!(out, "{}", r.join(","));
            }
        }
    }
}
