//! `mmlab replay` and `mmlab validate`: replay mode (a), a recorded trace's
//! page-allocator stream run on the model (see `trace::replay`).
//!
//! The machine comes from the trace header (its CPUs, and one node with the
//! zones' managed memory) unless an experiment file gives one; the kernels
//! come from the experiment's `[[kernel]]` list or, by default, one kernel
//! `recorded`: preset linux-6.18 with the recorded
//! `vm.percpu_pagelist_high_fraction` and a `vm.min_free_kbytes` equal to the
//! recorded zones' min watermarks summed.

use crate::experiment::{self, Experiment, Kernel, Mode, ReportFile, Workload};
use crate::report::{self, Format, RunResult};
use anyhow::{anyhow, bail, Result};
use mm::knobs::{KnobValue, Preset};
use mm::page_alloc::PageAlloc;
use serde_json::json;
use sim::{Engine, Machine, NodeSpec};
use std::io::Write;
use std::path::Path;
use trace::event::Header;
use trace::replay::{Prepared, ReplayStats};

/// The cost profile of replays without an experiment file.
const DEFAULT_PROFILE: &str = "host-epyc-zen3";

/// The metrics a replay reports.
const REPLAY_METRICS: &[&str] = &[
    "alloc_zone",
    "pcpu_drain",
    "zone_lock_pct",
    "pgfree",
    "alloc_fail",
    "runtime_ns",
    "nr_ops",
];

/// The model's machine for a trace header: its CPUs and one node with the
/// zones' managed pages (rounded down to whole 2 MiB pageblocks); the
/// DMA/DMA32 zones' managed pages form ZONE_DMA32.
pub fn machine_from_header(h: &Header, min_cpus: u32) -> Result<Machine> {
    let zones = &h.machine.zones;
    if zones.is_empty() {
        bail!(
            "the trace header describes no memory zones; give the machine with --experiment E.toml"
        );
    }
    let pages: u64 = zones.iter().map(|z| z.managed).sum();
    let block = mm::page_alloc::PAGEBLOCK_NR_PAGES;
    let memory_bytes = pages / block * block * mm::PAGE_SIZE;
    let dma_pages: u64 = zones
        .iter()
        .filter(|z| z.name == "DMA" || z.name == "DMA32")
        .map(|z| z.managed)
        .sum();
    let cpus = h.machine.nr_cpus.max(min_cpus).max(1);
    let m = Machine {
        name: format!(
            "recorded ({} CPUs, {})",
            cpus,
            sim::machine::human_bytes(memory_bytes)
        ),
        nodes: vec![NodeSpec { cpus, memory_bytes }],
        llc_bytes: 0,
        dma32_bytes: (dma_pages * mm::PAGE_SIZE).min(memory_bytes),
    };
    m.validate(experiment::host_memory_bytes())
        .map_err(|e| anyhow!("the recorded machine cannot be modelled: {e}"))?;
    Ok(m)
}

/// The default kernel: the recorded knobs on linux-6.18 (linux-6.6 where
/// that preset does not exist).
pub fn recorded_kernel(h: &Header) -> Result<Kernel> {
    let preset = Preset::from_name("linux-6.18")
        .or_else(|| Preset::from_name("linux-6.6"))
        .ok_or_else(|| anyhow!("no linux-6.18 or linux-6.6 preset"))?;
    let mut config = preset.config();
    let mut knobs = Vec::new();
    if let Some(f) = h.knobs.percpu_pagelist_high_fraction {
        knobs.push((
            "vm.percpu_pagelist_high_fraction".to_string(),
            KnobValue::Int(f as i64),
        ));
    }
    let min_kb: u64 = h.machine.zones.iter().map(|z| z.min).sum::<u64>() * (mm::PAGE_SIZE / 1024);
    if min_kb > 0 {
        knobs.push((
            "vm.min_free_kbytes".to_string(),
            KnobValue::Int(min_kb as i64),
        ));
    }
    for (name, v) in &knobs {
        config
            .set_knob(name, v)
            .map_err(|e| anyhow!("recorded knob: {e}"))?;
    }
    Ok(Kernel {
        name: "recorded".to_string(),
        config,
        knobs,
    })
}

/// The experiment a replay runs: machine, kernels and profile; one workload
/// standing for the trace.
pub fn replay_experiment(
    trace: &Path,
    prep: &Prepared,
    exp_file: Option<&Path>,
) -> Result<Experiment> {
    let workload = Workload {
        name: format!("replay {}", trace.display()),
        kind: "replay".to_string(),
        params: workloads::Params::default(),
        kernels: None,
        baseline: None,
    };
    let report = ReportFile {
        metrics: REPLAY_METRICS.iter().map(|s| s.to_string()).collect(),
        baseline: None,
        mode: Mode::Absolute,
    };
    if let Some(path) = exp_file {
        let mut exp = Experiment::load(path)?;
        exp.workloads = vec![workload];
        if exp.report.baseline.is_none() {
            exp.report = report;
        }
        return Ok(exp);
    }
    let min_cpus = prep.recorded.cpus.last().map_or(1, |c| c + 1);
    let machine = machine_from_header(&prep.header, min_cpus)
        .map_err(|e| anyhow!("{}: {e}", trace.display()))?;
    let (_, text) = experiment::BUILTIN_PROFILES
        .iter()
        .find(|(n, _)| *n == DEFAULT_PROFILE)
        .ok_or_else(|| anyhow!("no built-in profile {DEFAULT_PROFILE}"))?;
    let profile = experiment::parse_profile(text, DEFAULT_PROFILE)?;
    Ok(Experiment {
        name: format!("replay of {}", trace.display()),
        description: "replay mode (a): the recorded page-allocator stream".to_string(),
        seed: 1,
        machine,
        machine_source: format!(
            "trace header (kernel {})",
            prep.header.kernel_release.as_deref().unwrap_or("unknown")
        ),
        profile,
        kernels: vec![recorded_kernel(&prep.header)?],
        workloads: vec![workload],
        report,
        published: None,
        idle_tail_s: 0,
        cache: None,
    })
}

/// One kernel's replay; `warm`: start with the recorded PCP list contents
/// (`Prepared::warm_pcp`) instead of empty lists.
pub fn replay_one(
    exp: &Experiment,
    k: &Kernel,
    prep: &Prepared,
    seed: u64,
    warm: bool,
) -> (RunResult, ReplayStats) {
    let mut pa = PageAlloc::new(&exp.machine.memory_layout(), k.config.sysctl, k.config.pcp);
    if warm {
        prep.warm_pcp(&mut pa, exp.machine.nr_cpus());
    }
    let mut eng = Engine::new(pa, exp.profile.table(), seed);
    let (tasks, stats) = prep.tasks(exp.machine.nr_cpus());
    for t in tasks {
        eng.spawn(t);
    }
    let run = eng.run();
    let st = stats.borrow().clone();
    (
        RunResult {
            kernel: k.name.clone(),
            workload: exp.workloads[0].name.clone(),
            stats: run,
            vmstat: eng.pa.vmstat.clone(),
            nr_runs: 0,
        },
        st,
    )
}

fn stats_json(s: &ReplayStats) -> serde_json::Value {
    json!({
        "allocs": s.allocs,
        "alloc_failed": s.alloc_failed,
        "frees": s.frees,
        "frees_of_failed_allocs": s.frees_of_failed,
        "cross_cpu_waits": s.cross_cpu_waits,
    })
}

fn recorded_json(p: &Prepared) -> serde_json::Value {
    let r = &p.recorded;
    json!({
        "mm_page_alloc": r.allocs,
        "mm_page_free": r.frees,
        "mm_page_alloc_zone_locked": r.alloc_zone_locked,
        "mm_page_pcpu_drain": r.pcpu_drains,
        "unmatched_frees": r.unmatched_frees,
        "order_mismatches": r.order_mismatches,
        "unsupported_order": r.unsupported_order,
        "cross_cpu_frees": r.cross_cpu_frees,
        "never_freed": r.never_freed,
        "cpus": r.cpus,
        "span_ns": r.span_ns,
    })
}

/// `mmlab replay`.
pub fn replay_cmd(
    trace: &Path,
    exp_file: Option<&Path>,
    format: Format,
    out: Option<&Path>,
    seed: Option<u64>,
    quiet: bool,
    warm: bool,
) -> Result<()> {
    let t0 = std::time::Instant::now();
    let prep = Prepared::open(trace)?;
    let exp = replay_experiment(trace, &prep, exp_file)?;
    let seed = seed.unwrap_or(exp.seed);
    let t1 = std::time::Instant::now();
    let mut results = Vec::new();
    let mut per_kernel = serde_json::Map::new();
    for k in &exp.kernels {
        let (r, st) = replay_one(&exp, k, &prep, seed, warm);
        per_kernel.insert(k.name.clone(), stats_json(&st));
        results.push(r);
    }
    let t2 = std::time::Instant::now();
    let mut doc = report::results_json(&exp, seed, &results);
    if let Some(o) = doc.as_object_mut() {
        o.insert(
            "replay".to_string(),
            json!({ "trace": trace.display().to_string(), "recorded": recorded_json(&prep), "model": per_kernel }),
        );
    }
    let mut stdout = std::io::stdout().lock();
    if format == Format::Json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        write!(stdout, "{}", report::tables(&exp, seed, &results, format))?;
    }
    if let Some(path) = out {
        crate::write_atomically(path, &doc)?;
    }
    if !quiet {
        let r = &prep.recorded;
        let replayed = (r.allocs + r.frees) * exp.kernels.len() as u64;
        let secs = (t2 - t1).as_secs_f64().max(1e-9);
        eprintln!(
            "mmlab replay: {} allocator events × {} kernels replayed in {:.2}s ({:.2} M events/s; first pass {:.2}s); {} frees of pages allocated before the recording skipped",
            r.allocs + r.frees,
            exp.kernels.len(),
            secs,
            replayed as f64 / secs / 1e6,
            (t1 - t0).as_secs_f64(),
            r.unmatched_frees
        );
    }
    Ok(())
}

fn err_pct(recorded: u64, model: u64) -> String {
    if recorded == 0 {
        if model == 0 {
            "0.0%".to_string()
        } else {
            "n/a".to_string()
        }
    } else {
        format!(
            "{:+.1}%",
            100.0 * (model as f64 - recorded as f64) / recorded as f64
        )
    }
}

/// The `mmlab validate` table: recorded counters beside the model's.
pub fn validate_text(
    trace: &Path,
    prep: &Prepared,
    exp: &Experiment,
    r: &RunResult,
    st: &ReplayStats,
    warm: bool,
) -> String {
    use mm::vmstat::VmEvent;
    use std::fmt::Write as _;
    let rec = &prep.recorded;
    let rows: [(&str, u64, u64); 4] = [
        ("page allocations (mm_page_alloc)", rec.allocs, st.allocs),
        ("page frees (mm_page_free)", rec.frees, st.frees),
        (
            "zone-locked allocs (mm_page_alloc_zone_locked)",
            rec.alloc_zone_locked,
            r.vmstat.get(VmEvent::MM_PAGE_ALLOC_ZONE_LOCKED),
        ),
        (
            "PCP drains (mm_page_pcpu_drain)",
            rec.pcpu_drains,
            r.vmstat.get(VmEvent::MM_PAGE_PCPU_DRAIN),
        ),
    ];
    let mut s = String::new();
    let k = &exp.kernels[0];
    let knobs: Vec<String> = k.knobs.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let _ = writeln!(
        s,
        "validate {}: kernel {} recorded; model {} ({}) on {}, profile {}, PCP lists {}",
        trace.display(),
        prep.header.kernel_release.as_deref().unwrap_or("unknown"),
        k.config.preset.name(),
        if knobs.is_empty() {
            "default knobs".to_string()
        } else {
            knobs.join(", ")
        },
        exp.machine.name,
        exp.profile.name,
        if warm {
            "warm (recorded counts)"
        } else {
            "empty at start"
        }
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<48} {:>10} {:>10} {:>8}",
        "counter", "recorded", "model", "error"
    );
    for (name, a, b) in rows {
        let _ = writeln!(s, "{name:<48} {a:>10} {b:>10} {:>8}", err_pct(a, b));
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "frees of pages allocated before the recording (skipped): {}; frees on another CPU than the allocation: {}; allocations failed in the model: {}; never freed: {}",
        rec.unmatched_frees, rec.cross_cpu_frees, st.alloc_failed, rec.never_freed
    );
    if rec.order_mismatches + rec.unsupported_order > 0 {
        let _ = writeln!(
            s,
            "frees of another order than their allocation: {}; allocations above order {} (skipped): {}",
            rec.order_mismatches,
            mm::page_alloc::MAX_ORDER,
            rec.unsupported_order
        );
    }
    s
}

/// `mmlab validate`.
pub fn validate_cmd(trace: &Path, seed: Option<u64>, warm: bool) -> Result<()> {
    let prep = Prepared::open(trace)?;
    let exp = replay_experiment(trace, &prep, None)?;
    let seed = seed.unwrap_or(exp.seed);
    let (r, st) = replay_one(&exp, &exp.kernels[0], &prep, seed, warm);
    print!("{}", validate_text(trace, &prep, &exp, &r, &st, warm));
    Ok(())
}
