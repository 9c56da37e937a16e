//! Results: the metrics of each run, the LKML-style tables, and the JSON
//! results document whose shape DESIGN.md fixes.

use crate::experiment::{Experiment, Mode};
use mm::cost::LockClass;
use mm::types::{HPAGE_PMD_ORDER, PAGE_SIZE};
use mm::vmstat::{MthpStat, VmEvent};
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
    /// A rate (runs per minute): relative to the baseline like a count.
    Rate(f64),
    /// A percentage of the order of a hundredth (the seed 002 overhead
    /// shares): shown to three decimals.
    SmallPct(f64),
    /// A rate such as GB/s: shown as it is with two decimals, never
    /// relative to the baseline (the seeds' migration tables print GB/s).
    Gbps(f64),
}

/// The metrics mmlab computes for every run, with what they mean.
pub const METRICS: &[(&str, &str)] = &[
    ("runtime_ns", "virtual time until the last task finished"),
    (
        "busy_ns",
        "vCPU time spent computing or spinning, summed over vCPUs",
    ),
    (
        "user_ns",
        "CPU time of the tasks in user mode, summed over vCPUs (time(1)'s user): compute, \
         touch_ns per access and, with the cache model, the accessed lines' time",
    ),
    (
        "sys_ns",
        "CPU time of the kernel on the tasks' behalf, summed over vCPUs (time(1)'s sys)",
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
        "mmap_lock_wait_pct",
        "time waiting for mm->mmap_lock (read or write), % of busy vCPU time",
    ),
    (
        "ptl_wait_pct",
        "time spinning on page-table locks, % of busy vCPU time",
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
        "runs_per_min",
        "benchmark runs per minute of virtual time (workloads that count runs: speedometer)",
    ),
    (
        "anon_alloc_bytes",
        "bytes of anonymous folios allocated and freed (every folio is freed by the end of a run)",
    ),
    (
        "anon_touched_bytes",
        "bytes of those folios that a user access reached",
    ),
    (
        "bloat_pct",
        "memory bloat: bytes of anonymous folios never touched, % of the bytes touched",
    ),
    (
        "mix_4k_pct",
        "order mix: bytes allocated by anonymous faults as 4 KiB folios, % of all such bytes",
    ),
    (
        "mix_16k_pct",
        "order mix: bytes allocated as 16 KiB folios, %",
    ),
    (
        "mix_32k_pct",
        "order mix: bytes allocated as 32 KiB folios, %",
    ),
    (
        "mix_64k_pct",
        "order mix: bytes allocated as 64 KiB folios, %",
    ),
    (
        "mix_large_pct",
        "order mix: bytes allocated as folios of 128 KiB to 2 MiB (PMD THP included), %",
    ),
    (
        "fault_mix_4k_pct",
        "order mix by count: anonymous faults that allocated a 4 KiB folio, % of the faults that allocated one (seed 004's bucket mix)",
    ),
    (
        "fault_mix_16k_pct",
        "order mix by count: faults that allocated a 16 KiB folio, %",
    ),
    (
        "fault_mix_32k_pct",
        "order mix by count: faults that allocated a 32 KiB folio, %",
    ),
    (
        "fault_mix_64k_pct",
        "order mix by count: faults that allocated a 64 KiB folio, %",
    ),
    (
        "vmacache_hit_pct",
        "vmacache_find hits, % of vmacache_find calls",
    ),
    (
        "vmacache_first_slot_pct",
        "hits in the first slot checked, % of vmacache_find hits (seed 002's figure: \
         the chance that a cached VMA is in the first slot examined)",
    ),
    (
        "vmacache_find_share_pct",
        "time in vmacache_find (faults and system calls), % of busy vCPU time, as perf \
         attributes cycles",
    ),
    (
        "vmacache_fault_share_pct",
        "time in vmacache_find during page faults, % of page-fault time (fault_ns)",
    ),
    (
        "throughput",
        "bytes per second that each task's user accesses covered over its access phase, summed over tasks (vm-scalability's throughput)",
    ),
    (
        "llc_references",
        "LLC references of the cache model (perf's cache-references: accesses that missed the L2); 0 without machine.cache_model",
    ),
    (
        "llc_misses",
        "LLC misses of the cache model (perf's cache-misses); 0 without machine.cache_model",
    ),
    (
        "cache_miss_pct",
        "llc_misses per 100 llc_references, as perf stat prints cache-misses (kernel and user)",
    ),
    (
        "user_cache_miss_pct",
        "the same for user accesses only (perf stat -e cache-misses:u,cache-references:u)",
    ),
    (
        "kernel_cache_miss_pct",
        "the same for the kernel's page clearing and copying only (:k)",
    ),
    (
        "move_pages_ns",
        "virtual time spent inside move_pages() calls, summed",
    ),
    (
        "migrate_gbps",
        "bytes migrated (pgmigrate_success x 4 KiB) per ns of move_pages(), i.e. GB/s (seed 001's figure)",
    ),
    (
        "migrate_copy_share_pct",
        "time copying page data (migrate_copy_ns), % of move_pages() time",
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
    /// Benchmark runs the workload made (0 if it does not count runs).
    pub nr_runs: u64,
}

impl RunResult {
    /// The value of `name`.
    pub fn metric(&self, name: &str) -> MetricValue {
        let s = &self.stats;
        let v = |e: VmEvent| MetricValue::Int(self.vmstat.get(e));
        match name {
            "runtime_ns" => MetricValue::Int(s.runtime_ns),
            "busy_ns" => MetricValue::Int(s.busy_ns),
            "user_ns" => MetricValue::Int(s.user_ns),
            "sys_ns" => MetricValue::Int(s.sys_ns),
            "zone_lock_pct" => MetricValue::Pct(s.lock_pct(LockClass::Zone)),
            "zone_lock_wait_pct" => MetricValue::Pct(s.lock_wait_pct(LockClass::Zone)),
            "zone_lock_contended" => MetricValue::Int(s.locks[LockClass::Zone as usize].contended),
            "mmap_lock_wait_pct" => MetricValue::Pct(s.lock_wait_pct(LockClass::MmapLock)),
            "ptl_wait_pct" => MetricValue::Pct(s.lock_wait_pct(LockClass::Ptl)),
            "alloc_zone" => v(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED),
            "pcpu_drain" => v(VmEvent::MM_PAGE_PCPU_DRAIN),
            "free_high" => v(VmEvent::PCP_FREE_HIGH),
            "alloc_fail" => v(VmEvent::ALLOC_FAIL),
            "peak_pcp_pages" => MetricValue::Int(s.peak_pcp_pages),
            "final_pcp_pages" => MetricValue::Int(s.final_pcp_pages),
            "nr_ops" => MetricValue::Int(s.nr_ops),
            "runs_per_min" => MetricValue::Rate(if s.runtime_ns == 0 {
                0.0
            } else {
                self.nr_runs as f64 * 60e9 / s.runtime_ns as f64
            }),
            "anon_alloc_bytes" => {
                MetricValue::Int(self.vmstat.get(VmEvent::MMLAB_ANON_PAGES_FREED) * PAGE_SIZE)
            }
            "anon_touched_bytes" => MetricValue::Int(self.touched_pages() * PAGE_SIZE),
            "bloat_pct" => pct(
                self.vmstat.get(VmEvent::MMLAB_ANON_PAGES_UNTOUCHED),
                self.touched_pages(),
            ),
            "mix_4k_pct" => self.mix(0..=0),
            "mix_16k_pct" => self.mix(2..=2),
            "mix_32k_pct" => self.mix(3..=3),
            "mix_64k_pct" => self.mix(4..=4),
            "mix_large_pct" => self.mix(5..=HPAGE_PMD_ORDER),
            "fault_mix_4k_pct" => self.fault_mix(0),
            "fault_mix_16k_pct" => self.fault_mix(2),
            "fault_mix_32k_pct" => self.fault_mix(3),
            "fault_mix_64k_pct" => self.fault_mix(4),
            "vmacache_hit_pct" => pct(
                self.vmstat.get(VmEvent::VMACACHE_FIND_HITS),
                self.vmstat.get(VmEvent::VMACACHE_FIND_CALLS),
            ),
            // Of hits, not of calls: the seed's "~25 % ... *if* the vma is
            // cached" is conditional on a hit.
            "vmacache_first_slot_pct" => pct(
                self.vmstat.get(VmEvent::VMACACHE_FIRST_SLOT_HITS),
                self.vmstat.get(VmEvent::VMACACHE_FIND_HITS),
            ),
            "vmacache_find_share_pct" => {
                small(pct(self.vmstat.get(VmEvent::VMACACHE_FIND_NS), s.busy_ns))
            }
            "vmacache_fault_share_pct" => small(pct(
                self.vmstat.get(VmEvent::VMACACHE_FIND_FAULT_NS),
                self.vmstat.get(VmEvent::FAULT_NS),
            )),
            "throughput" => MetricValue::Int(s.touch_bytes_per_s),
            "llc_references" => MetricValue::Int(s.cache.llc_references()),
            "llc_misses" => MetricValue::Int(s.cache.llc_misses),
            "cache_miss_pct" => pct(s.cache.llc_misses, s.cache.llc_references()),
            "user_cache_miss_pct" => {
                let k = &s.cache_kernel;
                pct(
                    s.cache.llc_misses - k.llc_misses,
                    s.cache.llc_references() - k.llc_references(),
                )
            }
            "kernel_cache_miss_pct" => {
                pct(s.cache_kernel.llc_misses, s.cache_kernel.llc_references())
            }
            "move_pages_ns" => MetricValue::Int(s.move_pages_ns),
            "migrate_gbps" => MetricValue::Gbps(if s.move_pages_ns == 0 {
                0.0
            } else {
                (self.vmstat.get(VmEvent::PGMIGRATE_SUCCESS) * 4096) as f64 / s.move_pages_ns as f64
            }),
            "migrate_copy_share_pct" => {
                pct(self.vmstat.get(VmEvent::MIGRATE_COPY_NS), s.move_pages_ns)
            }
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

impl RunResult {
    /// Pages of freed anonymous folios that a user access reached.
    fn touched_pages(&self) -> u64 {
        self.vmstat.get(VmEvent::MMLAB_ANON_PAGES_FREED)
            - self.vmstat.get(VmEvent::MMLAB_ANON_PAGES_UNTOUCHED)
    }

    /// Share of the bytes that anonymous faults allocated in folios of
    /// `orders`, in percent (order 0 as counted by the model, orders 2 and
    /// up as `hugepages-*/stats/anon_fault_alloc`).
    fn mix(&self, orders: std::ops::RangeInclusive<u8>) -> MetricValue {
        let pages = |o: u8| self.vmstat.mthp(o, MthpStat::AnonFaultAlloc) << o;
        let all: u64 = (0..=HPAGE_PMD_ORDER).filter(|&o| o != 1).map(pages).sum();
        pct(orders.map(pages).sum(), all)
    }

    /// The share of anonymous faults that allocated a folio of `order`, by
    /// count (not by bytes, as [`Self::mix`]).
    fn fault_mix(&self, order: u8) -> MetricValue {
        let n = |o: u8| self.vmstat.mthp(o, MthpStat::AnonFaultAlloc);
        let all: u64 = (0..=HPAGE_PMD_ORDER).filter(|&o| o != 1).map(n).sum();
        pct(n(order), all)
    }
}

/// A percentage shown with more decimals.
fn small(v: MetricValue) -> MetricValue {
    match v {
        MetricValue::Pct(p) => MetricValue::SmallPct(p),
        other => other,
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
        MetricValue::Pct(p) | MetricValue::Rate(p) | MetricValue::Gbps(p) => {
            json!((p * 1000.0).round() / 1000.0)
        }
        MetricValue::SmallPct(p) => json!((p * 100_000.0).round() / 100_000.0),
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

/// The tables of an experiment, one per workload, in `format`.
pub fn tables(exp: &Experiment, seed: u64, results: &[RunResult], format: Format) -> String {
    let metrics = &exp.report.metrics;
    let mut out = String::new();
    for w in &exp.workloads {
        let baseline = exp.baseline_of(w);
        let mode = if baseline.is_some() {
            exp.report.mode
        } else {
            Mode::Absolute
        };
        let rows: Vec<&RunResult> = results.iter().filter(|r| r.workload == w.name).collect();
        let base = baseline.and_then(|b| rows.iter().find(|r| &r.kernel == b).copied());
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
            match (mode, baseline) {
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
    }
    out
}

/// A published figure: "-" for `nan` (the source gives none), else as
/// many decimals as it was published with (at least one, at most three).
fn published_cell(v: f64, precision: Option<usize>) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert_eq!(pct_of(r.metric("vmacache_hit_pct")), 40.0);
        assert_eq!(pct_of(r.metric("vmacache_first_slot_pct")), 75.0);
        assert_eq!(pct_of(r.metric("vmacache_fault_share_pct")), 0.25);
        assert_eq!(pct_of(r.metric("vmacache_find_share_pct")), 0.06);
        assert_eq!(
            cell(r.metric("vmacache_fault_share_pct"), None, Mode::Absolute),
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
