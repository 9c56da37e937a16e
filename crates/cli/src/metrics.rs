//! The metrics of a run: one registry row per metric holding its name, its
//! unit, its help and the function that computes it from a [`RunResult`].
//!
//! # Why one table
//!
//! Before this module the names and help lived in one table and the values
//! in a `match name` elsewhere, which ended in a panic for a name that one
//! knew and the other did not. Here a metric cannot exist without its value
//! function, `mmlab list` and the results document read the same rows, and
//! a `/proc/vmstat`-named counter is the fallback for any other name
//! (`RunResult::metric` returns `None` for a name that is neither).

use crate::report::RunResult;
use mm::cost::LockClass;
use mm::types::{HPAGE_PMD_ORDER, PAGE_SIZE};
use mm::vmstat::{MthpStat, VmEvent};

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

impl MetricValue {
    /// The value as a float (for means, charts and comparisons).
    pub fn as_f64(self) -> f64 {
        match self {
            MetricValue::Int(i) => i as f64,
            MetricValue::Pct(v)
            | MetricValue::Rate(v)
            | MetricValue::SmallPct(v)
            | MetricValue::Gbps(v) => v,
        }
    }

    /// The same kind of value holding `v` (an integer is rounded).
    pub fn with(self, v: f64) -> MetricValue {
        match self {
            MetricValue::Int(_) => MetricValue::Int(v.round().max(0.0) as u64),
            MetricValue::Pct(_) => MetricValue::Pct(v),
            MetricValue::Rate(_) => MetricValue::Rate(v),
            MetricValue::SmallPct(_) => MetricValue::SmallPct(v),
            MetricValue::Gbps(_) => MetricValue::Gbps(v),
        }
    }

    /// The value of metric or counter `name` as read back from a results
    /// document: its kind follows from its unit (a share of a hundredth
    /// is a `SmallPct`), so that tables printed from a document look like
    /// the ones printed from the run.
    pub fn from_doc(name: &str, v: f64) -> MetricValue {
        match unit_of(name).unwrap_or("count") {
            "%" if name.ends_with("_share_pct") && name.starts_with("vmacache_") => {
                MetricValue::SmallPct(v)
            }
            "%" => MetricValue::Pct(v),
            "runs/min" => MetricValue::Rate(v),
            "GB/s" => MetricValue::Gbps(v),
            _ => MetricValue::Int(v.round().max(0.0) as u64),
        }
    }

    /// The number written in the results document: integers as they are,
    /// fractions rounded to three decimals (five for the small shares), so
    /// that the document does not carry noise digits.
    pub fn json_number(self) -> serde_json::Number {
        let round = |v: f64, scale: f64| {
            serde_json::Number::from_f64((v * scale).round() / scale)
                .unwrap_or_else(|| serde_json::Number::from(0))
        };
        match self {
            MetricValue::Int(i) => serde_json::Number::from(i),
            MetricValue::Pct(p) | MetricValue::Rate(p) | MetricValue::Gbps(p) => round(p, 1000.0),
            MetricValue::SmallPct(p) => round(p, 100_000.0),
        }
    }
}

/// One metric: its name (as written in `report.metrics`), its unit, what it
/// means, and how it is computed.
pub struct Metric {
    pub name: &'static str,
    /// The unit of the value (`ns`, `%`, `count`, `bytes`, `bytes/s`,
    /// `runs/min`, `GB/s`, `pages`).
    pub unit: &'static str,
    pub help: &'static str,
    pub value: fn(&RunResult) -> MetricValue,
}

/// A metric whose value is one `/proc/vmstat`-named counter.
fn counter(r: &RunResult, e: VmEvent) -> MetricValue {
    MetricValue::Int(r.vmstat.get(e))
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
pub fn pct(part: u64, whole: u64) -> MetricValue {
    MetricValue::Pct(if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    })
}

/// A percentage shown with more decimals.
fn small(v: MetricValue) -> MetricValue {
    match v {
        MetricValue::Pct(p) => MetricValue::SmallPct(p),
        other => other,
    }
}

/// Pages of freed anonymous folios that a user access reached.
fn touched_pages(r: &RunResult) -> u64 {
    r.vmstat.get(VmEvent::MMLAB_ANON_PAGES_FREED)
        - r.vmstat.get(VmEvent::MMLAB_ANON_PAGES_UNTOUCHED)
}

/// Share of the bytes that anonymous faults allocated in folios of
/// `orders`, in percent (order 0 as counted by the model, orders 2 and up
/// as `hugepages-*/stats/anon_fault_alloc`).
fn mix(r: &RunResult, orders: std::ops::RangeInclusive<u8>) -> MetricValue {
    let pages = |o: u8| r.vmstat.mthp(o, MthpStat::AnonFaultAlloc) << o;
    let all: u64 = (0..=HPAGE_PMD_ORDER).filter(|&o| o != 1).map(pages).sum();
    pct(orders.map(pages).sum(), all)
}

/// Share of the anonymous faults that allocated a folio of `order`, by
/// count (not by bytes, as [`mix`]).
fn fault_mix(r: &RunResult, order: u8) -> MetricValue {
    let n = |o: u8| r.vmstat.mthp(o, MthpStat::AnonFaultAlloc);
    let all: u64 = (0..=HPAGE_PMD_ORDER).filter(|&o| o != 1).map(n).sum();
    pct(n(order), all)
}

/// The user accesses' share of the cache model's misses.
fn user_cache_miss_pct(r: &RunResult) -> MetricValue {
    let (all, k) = (&r.stats.cache, &r.stats.cache_kernel);
    pct(
        all.llc_misses - k.llc_misses,
        all.llc_references() - k.llc_references(),
    )
}

fn runs_per_min(r: &RunResult) -> MetricValue {
    let t = r.stats.runtime_ns;
    MetricValue::Rate(if t == 0 {
        0.0
    } else {
        r.nr_runs as f64 * 60e9 / t as f64
    })
}

fn migrate_gbps(r: &RunResult) -> MetricValue {
    let t = r.stats.move_pages_ns;
    let bytes = r.vmstat.get(VmEvent::PGMIGRATE_SUCCESS) * PAGE_SIZE;
    MetricValue::Gbps(if t == 0 { 0.0 } else { bytes as f64 / t as f64 })
}

/// Shorthand for the rows below.
const fn m(
    name: &'static str,
    unit: &'static str,
    help: &'static str,
    value: fn(&RunResult) -> MetricValue,
) -> Metric {
    Metric {
        name,
        unit,
        help,
        value,
    }
}

use MetricValue::Int;

/// The metrics mmlab computes for every run, in the order the results
/// document lists them.
pub const METRICS: &[Metric] = &[
    m(
        "runtime_ns",
        "ns",
        "virtual time until the last task finished",
        |r| Int(r.stats.runtime_ns),
    ),
    m(
        "busy_ns",
        "ns",
        "vCPU time spent computing or spinning, summed over vCPUs",
        |r| Int(r.stats.busy_ns),
    ),
    m(
        "user_ns",
        "ns",
        "CPU time of the tasks in user mode, summed over vCPUs (time(1)'s user): compute, \
         touch_ns per access and, with the cache model, the accessed lines' time",
        |r| Int(r.stats.user_ns),
    ),
    m(
        "sys_ns",
        "ns",
        "CPU time of the kernel on the tasks' behalf, summed over vCPUs (time(1)'s sys)",
        |r| Int(r.stats.sys_ns),
    ),
    m(
        "zone_lock_pct",
        "%",
        "time waiting for or holding zone->lock, % of busy vCPU time",
        |r| MetricValue::Pct(r.stats.lock_pct(LockClass::Zone)),
    ),
    m(
        "zone_lock_wait_pct",
        "%",
        "time spinning on zone->lock, % of busy vCPU time",
        |r| MetricValue::Pct(r.stats.lock_wait_pct(LockClass::Zone)),
    ),
    m(
        "zone_lock_contended",
        "count",
        "zone->lock acquisitions that found it held",
        |r| Int(r.stats.locks[LockClass::Zone as usize].contended),
    ),
    m(
        "mmap_lock_wait_pct",
        "%",
        "time waiting for mm->mmap_lock (read or write), % of busy vCPU time",
        |r| MetricValue::Pct(r.stats.lock_wait_pct(LockClass::MmapLock)),
    ),
    m(
        "ptl_wait_pct",
        "%",
        "time spinning on page-table locks, % of busy vCPU time",
        |r| MetricValue::Pct(r.stats.lock_wait_pct(LockClass::Ptl)),
    ),
    m(
        "alloc_zone",
        "count",
        "blocks taken from the buddy lists under zone->lock (mm_page_alloc_zone_locked)",
        |r| counter(r, VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED),
    ),
    m(
        "pcpu_drain",
        "count",
        "blocks moved from PCP lists to the buddy lists (mm_page_pcpu_drain)",
        |r| counter(r, VmEvent::MM_PAGE_PCPU_DRAIN),
    ),
    m(
        "free_high",
        "count",
        "PCP drains caused by consecutive high-order frees",
        |r| counter(r, VmEvent::PCP_FREE_HIGH),
    ),
    m(
        "alloc_fail",
        "count",
        "allocations that failed (the kernel would reclaim or OOM)",
        |r| counter(r, VmEvent::ALLOC_FAIL),
    ),
    m(
        "peak_pcp_pages",
        "pages",
        "most pages held on PCP lists at once (sampled)",
        |r| Int(r.stats.peak_pcp_pages),
    ),
    m(
        "final_pcp_pages",
        "pages",
        "pages held on PCP lists at the end",
        |r| Int(r.stats.final_pcp_pages),
    ),
    m("nr_ops", "count", "operations the tasks executed", |r| {
        Int(r.stats.nr_ops)
    }),
    m(
        "runs_per_min",
        "runs/min",
        "benchmark runs per minute of virtual time (workloads that count runs: speedometer)",
        runs_per_min,
    ),
    m(
        "anon_alloc_bytes",
        "bytes",
        "bytes of anonymous folios allocated and freed (every folio is freed by the end of a run)",
        |r| Int(r.vmstat.get(VmEvent::MMLAB_ANON_PAGES_FREED) * PAGE_SIZE),
    ),
    m(
        "anon_touched_bytes",
        "bytes",
        "bytes of those folios that a user access reached",
        |r| Int(touched_pages(r) * PAGE_SIZE),
    ),
    m(
        "bloat_pct",
        "%",
        "memory bloat: bytes of anonymous folios never touched, % of the bytes touched",
        |r| {
            pct(
                r.vmstat.get(VmEvent::MMLAB_ANON_PAGES_UNTOUCHED),
                touched_pages(r),
            )
        },
    ),
    m(
        "mix_4k_pct",
        "%",
        "order mix: bytes allocated by anonymous faults as 4 KiB folios, % of all such bytes",
        |r| mix(r, 0..=0),
    ),
    m(
        "mix_16k_pct",
        "%",
        "order mix: bytes allocated as 16 KiB folios, %",
        |r| mix(r, 2..=2),
    ),
    m(
        "mix_32k_pct",
        "%",
        "order mix: bytes allocated as 32 KiB folios, %",
        |r| mix(r, 3..=3),
    ),
    m(
        "mix_64k_pct",
        "%",
        "order mix: bytes allocated as 64 KiB folios, %",
        |r| mix(r, 4..=4),
    ),
    m(
        "mix_large_pct",
        "%",
        "order mix: bytes allocated as folios of 128 KiB to 2 MiB (PMD THP included), %",
        |r| mix(r, 5..=HPAGE_PMD_ORDER),
    ),
    m(
        "fault_mix_4k_pct",
        "%",
        "order mix by count: anonymous faults that allocated a 4 KiB folio, % of the faults that allocated one (seed 004's bucket mix)",
        |r| fault_mix(r, 0),
    ),
    m(
        "fault_mix_16k_pct",
        "%",
        "order mix by count: faults that allocated a 16 KiB folio, %",
        |r| fault_mix(r, 2),
    ),
    m(
        "fault_mix_32k_pct",
        "%",
        "order mix by count: faults that allocated a 32 KiB folio, %",
        |r| fault_mix(r, 3),
    ),
    m(
        "fault_mix_64k_pct",
        "%",
        "order mix by count: faults that allocated a 64 KiB folio, %",
        |r| fault_mix(r, 4),
    ),
    m(
        "vmacache_hit_pct",
        "%",
        "vmacache_find hits, % of vmacache_find calls",
        |r| {
            pct(
                r.vmstat.get(VmEvent::VMACACHE_FIND_HITS),
                r.vmstat.get(VmEvent::VMACACHE_FIND_CALLS),
            )
        },
    ),
    // Of hits, not of calls: the seed's "~25 % ... *if* the vma is cached"
    // is conditional on a hit.
    m(
        "vmacache_first_slot_pct",
        "%",
        "hits in the first slot checked, % of vmacache_find hits (seed 002's figure: \
         the chance that a cached VMA is in the first slot examined)",
        |r| {
            pct(
                r.vmstat.get(VmEvent::VMACACHE_FIRST_SLOT_HITS),
                r.vmstat.get(VmEvent::VMACACHE_FIND_HITS),
            )
        },
    ),
    m(
        "vmacache_find_share_pct",
        "%",
        "time in vmacache_find (faults and system calls), % of busy vCPU time, as perf \
         attributes cycles",
        |r| {
            small(pct(
                r.vmstat.get(VmEvent::VMACACHE_FIND_NS),
                r.stats.busy_ns,
            ))
        },
    ),
    m(
        "vmacache_fault_share_pct",
        "%",
        "time in vmacache_find during page faults, % of page-fault time (fault_ns)",
        |r| {
            small(pct(
                r.vmstat.get(VmEvent::VMACACHE_FIND_FAULT_NS),
                r.vmstat.get(VmEvent::FAULT_NS),
            ))
        },
    ),
    m(
        "throughput",
        "bytes/s",
        "bytes per second that each task's user accesses covered over its access phase, \
         summed over tasks (vm-scalability's throughput)",
        |r| Int(r.stats.touch_bytes_per_s),
    ),
    m(
        "llc_references",
        "count",
        "LLC references of the cache model (perf's cache-references: accesses that missed \
         the L2); 0 without machine.cache_model",
        |r| Int(r.stats.cache.llc_references()),
    ),
    m(
        "llc_misses",
        "count",
        "LLC misses of the cache model (perf's cache-misses); 0 without machine.cache_model",
        |r| Int(r.stats.cache.llc_misses),
    ),
    m(
        "cache_miss_pct",
        "%",
        "llc_misses per 100 llc_references, as perf stat prints cache-misses (kernel and user)",
        |r| pct(r.stats.cache.llc_misses, r.stats.cache.llc_references()),
    ),
    m(
        "user_cache_miss_pct",
        "%",
        "the same for user accesses only (perf stat -e cache-misses:u,cache-references:u)",
        user_cache_miss_pct,
    ),
    m(
        "kernel_cache_miss_pct",
        "%",
        "the same for the kernel's page clearing and copying only (:k)",
        |r| {
            let k = &r.stats.cache_kernel;
            pct(k.llc_misses, k.llc_references())
        },
    ),
    m(
        "move_pages_ns",
        "ns",
        "virtual time spent inside move_pages() calls, summed",
        |r| Int(r.stats.move_pages_ns),
    ),
    m(
        "migrate_gbps",
        "GB/s",
        "bytes migrated (pgmigrate_success x 4 KiB) per ns of move_pages(), i.e. GB/s \
         (seed 001's figure)",
        migrate_gbps,
    ),
    m(
        "migrate_copy_share_pct",
        "%",
        "time copying page data (migrate_copy_ns), % of move_pages() time",
        |r| {
            pct(
                r.vmstat.get(VmEvent::MIGRATE_COPY_NS),
                r.stats.move_pages_ns,
            )
        },
    ),
];

/// The registry row of `name`, if it is a computed metric.
pub fn find(name: &str) -> Option<&'static Metric> {
    METRICS.iter().find(|m| m.name == name)
}

/// The `/proc/vmstat`-named counter `name`, if it is one.
pub fn find_counter(name: &str) -> Option<VmEvent> {
    VmEvent::ALL.iter().copied().find(|e| e.name() == name)
}

/// The unit of a counter: nanoseconds for the model's `*_ns` time
/// counters, pages for the kernel's page counts, events otherwise.
pub fn counter_unit(name: &str) -> &'static str {
    if name.ends_with("_ns") {
        "ns"
    } else if name.starts_with("pgalloc_")
        || name == "pgfree"
        || name.starts_with("mmlab_anon_pages_")
    {
        "pages"
    } else {
        "count"
    }
}

/// The unit of any metric or counter name (`None`: neither).
pub fn unit_of(name: &str) -> Option<&'static str> {
    find(name)
        .map(|m| m.unit)
        .or_else(|| find_counter(name).map(|e| counter_unit(e.name())))
}

/// True if `name` is a metric or a counter.
pub fn is_metric(name: &str) -> bool {
    find(name).is_some() || find_counter(name).is_some()
}

/// Every valid metric name, each once.
pub fn metric_names() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = METRICS.iter().map(|m| m.name).collect();
    for e in VmEvent::ALL {
        if find(e.name()).is_none() {
            out.push(e.name());
        }
    }
    out
}

/// Every metric and counter with its unit, each name once, in the
/// document's order.
pub fn units() -> Vec<(&'static str, &'static str)> {
    metric_names()
        .into_iter()
        .map(|n| (n, unit_of(n).unwrap_or("count")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_a_shared_name_means_the_same_counter() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len(), "a metric is listed twice");
        // A metric may carry a counter's name only if it is that counter
        // (alloc_fail); the document then has it in both maps.
        let shared: Vec<&str> = METRICS
            .iter()
            .map(|m| m.name)
            .filter(|n| find_counter(n).is_some())
            .collect();
        assert_eq!(shared, ["alloc_fail"]);
        assert_eq!(metric_names().len(), METRICS.len() + VmEvent::ALL.len() - 1);
        for m in METRICS {
            assert!(!m.help.is_empty(), "{} has no help", m.name);
            assert!(unit_of(m.name).is_some());
        }
        assert_eq!(unit_of("pgfault"), Some("count"));
        assert_eq!(unit_of("fault_ns"), Some("ns"));
        assert_eq!(unit_of("pgalloc_normal"), Some("pages"));
        assert_eq!(unit_of("no_such_metric"), None);
    }

    /// `from_doc` gives every metric the kind its value function gives.
    #[test]
    fn kinds_read_back_from_a_document_match_the_registry() {
        let r = RunResult {
            kernel: "k".into(),
            workload: "w".into(),
            seed: 1,
            stats: sim::RunStats {
                locks: vec![Default::default(); 8],
                ..Default::default()
            },
            vmstat: Default::default(),
            nr_runs: 0,
            timeline: None,
        };
        for m in METRICS {
            let v = (m.value)(&r);
            let back = MetricValue::from_doc(m.name, v.as_f64());
            assert_eq!(
                std::mem::discriminant(&v),
                std::mem::discriminant(&back),
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn json_numbers_round_fractions_and_keep_integers() {
        assert_eq!(MetricValue::Int(7).json_number().to_string(), "7");
        assert_eq!(MetricValue::Pct(8.98349).json_number().to_string(), "8.983");
        assert_eq!(
            MetricValue::SmallPct(0.0500949).json_number().to_string(),
            "0.05009"
        );
        assert_eq!(MetricValue::Pct(0.0).json_number().to_string(), "0.0");
    }
}
