//! The informational commands, each in text and in JSON (`--format json`):
//! `mmlab list`, `mmlab zoneinfo` and `mmlab trace-stats`.

use crate::experiment::{self, Experiment};
use crate::metrics;
use anyhow::Result;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// `mmlab list` as text.
pub fn list_text() -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Kernel presets:");
    for p in mm::knobs::Preset::ALL {
        let _ = writeln!(s, "  {}", p.name());
    }
    let _ = writeln!(s, "\nKnobs (set in [kernel.knobs] by their kernel names):");
    for k in mm::knobs::all_knobs() {
        let _ = writeln!(
            s,
            "  {:<36} {}\n  {:<36} accepts {}",
            k.name, k.help, "", k.accepts
        );
    }
    let _ = writeln!(s, "\nWorkloads:");
    for w in workloads::WORKLOADS {
        let _ = writeln!(s, "  {:<14} {}", w.name, w.summary);
        for p in w.params {
            let _ = writeln!(
                s,
                "      {:<18} (default {}; {}) {}",
                p.name,
                p.default_text(),
                p.accepts_text(),
                p.help
            );
        }
    }
    let _ = writeln!(
        s,
        "\nMetrics (report.metrics; any /proc/vmstat-named counter below also works):"
    );
    for m in metrics::METRICS {
        let _ = writeln!(s, "  {:<24} [{}] {}", m.name, m.unit, m.help);
    }
    let names: Vec<_> = mm::vmstat::VmEvent::ALL.iter().map(|e| e.name()).collect();
    let _ = writeln!(s, "  counters: {}", names.join(", "));
    let _ = writeln!(s, "\nCost profiles:");
    for (n, _) in experiment::BUILTIN_PROFILES {
        let _ = writeln!(s, "  {n}");
    }
    let _ = writeln!(s, "\nBuilt-in experiments (mmlab reproduce NAME):");
    for n in crate::api::builtin_names() {
        let _ = writeln!(s, "  {n}");
    }
    s
}

/// `mmlab list --format json`: the same lists as objects.
pub fn list_json() -> Value {
    let knobs: Vec<Value> = mm::knobs::all_knobs()
        .map(|k| json!({ "name": k.name, "help": k.help, "accepts": k.accepts }))
        .collect();
    let wls: Vec<Value> = workloads::WORKLOADS
        .iter()
        .map(|w| {
            let params: Vec<Value> = w
                .params
                .iter()
                .map(|p| {
                    json!({
                        "name": p.name,
                        "default": p.default_text(),
                        "accepts": p.accepts_text(),
                        "help": p.help,
                    })
                })
                .collect();
            json!({ "name": w.name, "summary": w.summary, "params": params })
        })
        .collect();
    let ms: Vec<Value> = metrics::METRICS
        .iter()
        .map(|m| json!({ "name": m.name, "unit": m.unit, "help": m.help }))
        .collect();
    let counters: Vec<Value> = mm::vmstat::VmEvent::ALL
        .iter()
        .map(|e| json!({ "name": e.name(), "unit": metrics::counter_unit(e.name()) }))
        .collect();
    json!({
        "presets": mm::knobs::Preset::ALL.iter().map(|p| p.name()).collect::<Vec<_>>(),
        "knobs": knobs,
        "workloads": wls,
        "metrics": ms,
        "counters": counters,
        "profiles": experiment::BUILTIN_PROFILES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        "experiments": crate::api::builtin_names(),
    })
}

fn boot_state(exp: &Experiment, k: &experiment::Kernel) -> mm::page_alloc::PageAlloc {
    mm::page_alloc::PageAlloc::new(&exp.machine.memory_layout(), k.config.sysctl, k.config.pcp)
}

/// `mmlab zoneinfo` as text: `/proc/zoneinfo` per kernel.
pub fn zoneinfo_text(exp: &Experiment) -> String {
    let mut s = String::new();
    for k in &exp.kernels {
        let pa = boot_state(exp, k);
        let _ = writeln!(s, "# kernel {} ({})", k.name, k.config.preset.name());
        s.push_str(&mm::vmstat::zoneinfo(&pa));
    }
    s
}

/// `mmlab zoneinfo --format json`: per kernel, per zone, what the text
/// shows.
pub fn zoneinfo_json(exp: &Experiment) -> Value {
    use mm::page_alloc::Wmark;
    let kernels: Vec<Value> = exp
        .kernels
        .iter()
        .map(|k| {
            let pa = boot_state(exp, k);
            let zones: Vec<Value> = pa
                .zones
                .iter()
                .enumerate()
                .map(|(zi, z)| {
                    let pcp: Vec<Value> = (0..pa.nr_cpus())
                        .map(|cpu| {
                            let p = &pa.pcp[pa.pcp_index(mm::VcpuId(cpu), zi)];
                            json!({ "cpu": cpu, "count": p.count, "high": p.high, "batch": p.batch })
                        })
                        .collect();
                    json!({
                        "node": z.node.0,
                        "zone": z.zone_type.name(),
                        "free_pages": z.nr_free_pages,
                        "min": z.wmark_pages(Wmark::Min),
                        "low": z.wmark_pages(Wmark::Low),
                        "high": z.wmark_pages(Wmark::High),
                        "spanned": z.spanned_pages,
                        "managed": z.managed_pages,
                        "protection": z.lowmem_reserve.to_vec(),
                        "free_blocks_per_order": z.nr_free.to_vec(),
                        "start_pfn": z.zone_start_pfn,
                        "pagesets": pcp,
                    })
                })
                .collect();
            json!({ "kernel": k.name, "preset": k.config.preset.name(), "zones": zones })
        })
        .collect();
    json!({ "experiment": exp.name, "kernels": kernels })
}

/// What `mmlab trace-stats` finds in a trace.
pub struct TraceStats {
    pub path: String,
    pub kernel: String,
    pub nr_cpus: u32,
    pub nr_zones: usize,
    pub events_by_kind: std::collections::BTreeMap<&'static str, u64>,
    /// Lost events and unpaired syscalls, from the trailer (if the trace
    /// has one).
    pub trailer: Option<(u64, u64)>,
    /// Why reading stopped early, and after how many events.
    pub damage: Option<(u64, String)>,
}

/// Reads a whole trace and counts its events per kind.
pub fn trace_stats(path: &Path) -> Result<TraceStats> {
    let mut r = trace::TraceReader::open(path)?;
    let h = r.header().clone();
    let mut by_kind = std::collections::BTreeMap::new();
    let mut damage = None;
    for ev in r.by_ref() {
        match ev {
            Ok(e) => *by_kind.entry(e.kind.name()).or_default() += 1,
            Err(e) => {
                damage = Some(e.to_string());
                break;
            }
        }
    }
    Ok(TraceStats {
        path: path.display().to_string(),
        kernel: h.kernel_release.clone().unwrap_or_else(|| "unknown".into()),
        nr_cpus: h.machine.nr_cpus,
        nr_zones: h.machine.zones.len(),
        events_by_kind: by_kind,
        trailer: r
            .trailer()
            .map(|t| (t.nr_lost_events, t.nr_unpaired_syscalls)),
        damage: damage.map(|d| (r.nr_events_read(), d)),
    })
}

impl TraceStats {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "trace {}: kernel {}, {} CPUs, {} zones",
            self.path, self.kernel, self.nr_cpus, self.nr_zones
        );
        for (k, n) in &self.events_by_kind {
            let _ = writeln!(s, "  {k:<28} {n}");
        }
        if let Some((lost, unpaired)) = self.trailer {
            let _ = writeln!(s, "  lost events: {lost}, unpaired syscalls: {unpaired}");
        }
        s
    }

    pub fn json(&self) -> Value {
        json!({
            "trace": self.path,
            "kernel": self.kernel,
            "nr_cpus": self.nr_cpus,
            "nr_zones": self.nr_zones,
            "events_by_kind": self.events_by_kind,
            "lost_events": self.trailer.map(|t| t.0),
            "unpaired_syscalls": self.trailer.map(|t| t.1),
            "damaged": self.damage.as_ref().map(|(n, e)| json!({ "after_events": n, "error": e })),
        })
    }

    /// The error to exit with when the trace is damaged (after printing
    /// what could be read).
    pub fn damage_error(&self) -> Option<anyhow::Error> {
        self.damage.as_ref().map(|(n, e)| {
            anyhow::anyhow!("{}: the trace is damaged after {n} events: {e}", self.path)
        })
    }
}
