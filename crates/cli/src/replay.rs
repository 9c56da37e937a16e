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
use crate::report::{self, RunResult};
use crate::results::{ExperimentResults, ResultsDoc};
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
            "the trace describes no memory zones (a perf.data imported without --zoneinfo): import it \
             again with `mmlab import --zoneinfo FILE` (a copy of /proc/zoneinfo taken just before the \
             recording) or `--snapshot DIR`; `mmlab replay` also takes the machine from --experiment E.toml"
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
/// that preset does not exist): `vm.percpu_pagelist_high_fraction`,
/// `vm.min_free_kbytes` from the zones' min watermarks,
/// `transparent_hugepage/enabled` and the per-size
/// `hugepages-<size>kB/enabled` that differ from the kernel's defaults.
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
    knobs.extend(trace::aspace::recorded_thp_knobs(h));
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

/// Where a replay's machine, profile and kernels come from.
pub enum ReplayOn<'a> {
    /// The recorded machine and configuration (the trace's header).
    Recorded,
    /// An experiment file (`mmlab replay --experiment FILE`).
    File(&'a Path),
    /// An experiment already loaded for replay (the Python package's TOML
    /// text or dict, through [`Experiment::from_file`] with `for_replay`).
    Loaded(Box<Experiment>),
}

impl<'a> ReplayOn<'a> {
    fn from_file(exp_file: Option<&'a Path>) -> Self {
        exp_file.map_or(ReplayOn::Recorded, ReplayOn::File)
    }
}

/// The experiment a replay runs: machine, kernels and profile; one workload
/// standing for the trace.
pub fn replay_experiment(
    trace: &Path,
    header: &Header,
    min_cpus: u32,
    exp_file: Option<&Path>,
) -> Result<Experiment> {
    replay_experiment_on(trace, header, min_cpus, ReplayOn::from_file(exp_file))
}

/// [`replay_experiment`] under `on`'s machine and kernels.
pub fn replay_experiment_on(
    trace: &Path,
    header: &Header,
    min_cpus: u32,
    on: ReplayOn,
) -> Result<Experiment> {
    let workload = Workload {
        name: format!("replay {}", trace.display()),
        kind: "replay".to_string(),
        params: workloads::Params::default(),
        kernels: None,
        baseline: None,
        bands: Vec::new(),
    };
    let report = ReportFile {
        metrics: REPLAY_METRICS.iter().map(|s| s.to_string()).collect(),
        baseline: None,
        mode: Mode::Absolute,
    };
    let given = match on {
        ReplayOn::Recorded => None,
        ReplayOn::File(path) => Some(Experiment::load_for_replay(path)?),
        ReplayOn::Loaded(exp) => Some(*exp),
    };
    if let Some(mut exp) = given {
        exp.workloads = vec![workload];
        if exp.report.baseline.is_none() {
            exp.report = report;
        }
        return Ok(exp);
    }
    let machine =
        machine_from_header(header, min_cpus).map_err(|e| anyhow!("{}: {e}", trace.display()))?;
    let (_, text) = experiment::BUILTIN_PROFILES
        .iter()
        .find(|(n, _)| *n == DEFAULT_PROFILE)
        .ok_or_else(|| anyhow!("no built-in profile {DEFAULT_PROFILE}"))?;
    let profile = experiment::parse_profile(text, DEFAULT_PROFILE)?;
    let kernel = recorded_kernel(header).map_err(|e| anyhow!("{}: {e}", trace.display()))?;
    experiment::check_fits_machine(&machine, &kernel.config).map_err(|e| {
        anyhow!(
            "{}: the recorded knobs on the recorded machine: {e}",
            trace.display()
        )
    })?;
    Ok(Experiment {
        name: format!("replay of {}", trace.display()),
        description: "replay of a recorded trace: (a) the page-allocator stream, (b) the address-space stream".to_string(),
        seed: 1,
        machine,
        machine_source: format!(
            "trace header (kernel {})",
            header.kernel_release.as_deref().unwrap_or("unknown")
        ),
        profile,
        kernels: vec![kernel],
        workloads: vec![workload],
        report,
        published: None,
        idle_tail_s: 0,
        cache: None,
    })
}

/// When the replay's machine has fewer CPUs than the recording: recorded
/// CPU `c` replays on vCPU `c % n`, so the per-CPU lists and the lock
/// contention of several recorded CPUs are folded into one.
pub fn cpu_fold_warning(h: &Header, min_cpus: u32, exp: &Experiment) -> Option<String> {
    let recorded = h.machine.nr_cpus.max(min_cpus);
    let n = exp.machine.nr_cpus();
    (n < recorded).then(|| {
        format!(
            "the trace was recorded on {recorded} CPUs and machine \"{}\" has {n}: recorded CPU c \
             replays on vCPU c % {n}, folding the per-CPU lists and lock contention of several \
             CPUs into one; give the replay a machine with at least {recorded} CPUs",
            exp.machine.name
        )
    })
}

/// One kernel's replay; `warm`: start with the recorded PCP list contents
/// (`Prepared::warm_pcp`) instead of empty lists.
/// Refuses `--warm-pcp` when the pages it would put on the per-CPU lists
/// ([`Prepared::warm_pcp_pages_bound`], at most the machine's) need more
/// host memory than half the host (with the machine's boot-time metadata):
/// each warmed page's `struct page` is materialised and held once while
/// the lists fill. A header's pageset counts are otherwise unchecked, and a
/// damaged one could ask for terabytes of pages.
pub fn check_warm_fits(trace: &Path, exp: &Experiment, prep: &Prepared) -> Result<()> {
    let machine_pages = exp.machine.memory_bytes() / mm::types::PAGE_SIZE;
    let pages = prep.warm_pcp_pages_bound().min(machine_pages);
    // The page's struct page, and its (pfn, order) held until the frees.
    let per_page = mm::page::MemMap::BYTES_PER_PAGE as u64 + 16;
    let needed = exp
        .machine
        .metadata_bytes()
        .saturating_add(pages.saturating_mul(per_page));
    let allowed = experiment::host_memory_bytes() / 2;
    if needed > allowed {
        bail!(
            "{}: --warm-pcp would put up to {pages} pages on the per-CPU lists (the recorded \
             pagesets' counts), about {} MiB of model state with the machine's; at most {} MiB \
             fit in half of this host's memory: replay without --warm-pcp, or on a smaller \
             machine (--experiment)",
            trace.display(),
            needed >> 20,
            allowed >> 20
        );
    }
    Ok(())
}

pub fn replay_one(
    exp: &Experiment,
    k: &Kernel,
    prep: &Prepared,
    seed: u64,
    warm: bool,
    timeline: Option<sim::TimelineOptions>,
) -> (RunResult, ReplayStats) {
    let mut pa = PageAlloc::new(&exp.machine.memory_layout(), k.config.sysctl, k.config.pcp);
    let pre = prep.preallocate(&mut pa, exp.machine.nr_cpus());
    if warm {
        prep.warm_pcp(&mut pa, exp.machine.nr_cpus());
    }
    let mut eng = Engine::new(pa, exp.profile.table(), seed);
    // The recorded counters end with the recording.
    eng.stop_with_last_task();
    if prep.replays_vmstat() {
        eng.vmstat_work_from_workload();
    }
    if let Some(t) = timeline {
        eng = eng.with_timeline(t);
    }
    let (tasks, stats) = prep.tasks_with(exp.machine.nr_cpus(), pre);
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
            seed,
            timeline: eng.take_timeline().map(std::sync::Arc::new),
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
        "vmstat_update_runs": r.vmstat_works,
        "vmstat_work_replayed": p.replays_vmstat(),
        "unmatched_frees": r.unmatched_frees,
        "order_mismatches": r.order_mismatches,
        "unsupported_order": r.unsupported_order,
        "cross_cpu_frees": r.cross_cpu_frees,
        "never_freed": r.never_freed,
        "cpus": r.cpus,
        "span_ns": r.span_ns,
    })
}

/// Which replay modes `mmlab replay` and `mmlab validate` run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayMode {
    /// Mode (a): the page-allocator stream through the PCP and buddy model.
    Alloc,
    /// Mode (b): the address-space stream through the fault path.
    Aspace,
    /// Every mode the trace has the events for.
    Both,
}

/// When `mmlab validate`'s mode (a) runs the vmstat work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VmstatWork {
    /// Where the trace recorded each CPU's `vmstat_update()` runs; the
    /// model's one-second timer when it recorded none.
    Recorded,
    /// The model's one-second timer, even where the trace recorded the runs.
    Timer,
}

/// Mode (a) of a trace, or why it cannot run: `Ok(None)` when the trace has
/// no allocator events and the mode was not asked for by name.
pub(crate) fn open_alloc(trace: &Path, mode: ReplayMode) -> Result<Option<Prepared>> {
    if mode == ReplayMode::Aspace {
        return Ok(None);
    }
    match Prepared::open(trace) {
        Ok(p) => Ok(Some(p)),
        Err(trace::replay::ReplayError::NoAllocatorEvents { .. }) if mode == ReplayMode::Both => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The trace's header, read without replaying anything.
pub(crate) fn read_header(trace: &Path) -> Result<Header> {
    let r = trace::TraceReader::open(trace).map_err(|e| anyhow!("{}: {e}", trace.display()))?;
    Ok(r.header().clone())
}

/// A replay that has run: what `mmlab replay` prints and writes, and what
/// the Python package's `mmlab.replay` returns.
pub struct Replayed {
    pub exp: Experiment,
    pub seed: u64,
    /// Mode (a)'s input, if it ran.
    pub prep: Option<Prepared>,
    /// Mode (a)'s runs, one per kernel.
    pub results: Vec<RunResult>,
    /// Mode (b), if it ran.
    pub aspace: Option<trace::aspace::AspaceReplay>,
    /// The results document (with the warnings).
    pub doc: ResultsDoc,
    /// Seconds spent reading the trace for mode (a), in mode (a), in mode (b).
    pub secs: [f64; 3],
}

/// Replays `trace` in the modes of `mode` it has events for, under the
/// kernels of `exp_file` or the recorded configuration.
pub fn replay(
    trace: &Path,
    exp_file: Option<&Path>,
    seed: Option<u64>,
    warm: bool,
    mode: ReplayMode,
) -> Result<Replayed> {
    replay_with(trace, exp_file, seed, warm, mode, None)
}

/// [`replay`], with a timeline of each kernel's allocator replay (mode a)
/// recorded in its `RunResult` when `timeline` is given.
pub fn replay_with(
    trace: &Path,
    exp_file: Option<&Path>,
    seed: Option<u64>,
    warm: bool,
    mode: ReplayMode,
    timeline: Option<sim::TimelineOptions>,
) -> Result<Replayed> {
    replay_on(
        trace,
        ReplayOn::from_file(exp_file),
        seed,
        warm,
        mode,
        timeline,
    )
}

/// [`replay_with`] under `on`'s machine and kernels.
pub fn replay_on(
    trace: &Path,
    on: ReplayOn,
    seed: Option<u64>,
    warm: bool,
    mode: ReplayMode,
    timeline: Option<sim::TimelineOptions>,
) -> Result<Replayed> {
    let t0 = std::time::Instant::now();
    let prep = open_alloc(trace, mode)?;
    let header = match &prep {
        Some(p) => p.header.clone(),
        None => read_header(trace)?,
    };
    let min_cpus = prep
        .as_ref()
        .and_then(|p| p.recorded.cpus.last().map(|c| c.saturating_add(1)))
        .unwrap_or(1);
    let exp = replay_experiment_on(trace, &header, min_cpus, on)?;
    let seed = seed.unwrap_or(exp.seed);
    let t1 = std::time::Instant::now();
    let mut results = Vec::new();
    // Each kernel's replay gets its share of the timeline's record limit.
    let timeline = timeline.map(|mut t| {
        t.max_records = (t.max_records / exp.kernels.len().max(1)).max(1000);
        t
    });
    let mut per_kernel = serde_json::Map::new();
    if let Some(prep) = &prep {
        if warm {
            check_warm_fits(trace, &exp, prep)?;
        }
        for k in &exp.kernels {
            let (r, st) = replay_one(&exp, k, prep, seed, warm, timeline);
            per_kernel.insert(k.name.clone(), stats_json(&st));
            results.push(r);
        }
    }
    let t2 = std::time::Instant::now();
    let aspace = if mode == ReplayMode::Alloc {
        None
    } else {
        crate::aspace::run(trace, &exp, mode == ReplayMode::Aspace)?
    };
    let t3 = std::time::Instant::now();
    if prep.is_none() && aspace.is_none() {
        bail!(
            "{}: the trace has neither page allocator events (kmem:mm_page_alloc/free, replay mode a) \
             nor page faults, address-space system calls or process events (replay mode b)",
            trace.display()
        );
    }
    let mut part = ExperimentResults::new(&exp, &[seed], &results);
    if let Some(prep) = &prep {
        part.replay = Some(
            json!({ "trace": trace.display().to_string(), "recorded": recorded_json(prep), "model": per_kernel }),
        );
    }
    part.aspace = aspace.as_ref().map(|a| crate::aspace::json(&exp, a));
    // The fold first: it changes every allocator figure of the replay.
    part.warnings = cpu_fold_warning(&header, min_cpus, &exp)
        .into_iter()
        .chain(crate::aspace::warnings(&header, &exp, aspace.as_ref()))
        .collect();
    let doc = ResultsDoc::new(vec![part]);
    let secs = [(t1 - t0), (t2 - t1), (t3 - t2)].map(|d| d.as_secs_f64());
    Ok(Replayed {
        exp,
        seed,
        prep,
        results,
        aspace,
        doc,
        secs,
    })
}

/// `mmlab replay`: replays, prints the warnings, the tables (or the
/// document in a data `--format`) and the speed; the caller writes `--out`
/// and `--timeline` from what it returns.
pub fn replay_cmd(trace: &Path, a: &crate::args::ReplayArgs) -> Result<Replayed> {
    let r = replay_with(
        trace,
        a.experiment.as_deref(),
        a.seed,
        a.warm_pcp,
        a.mode,
        a.timeline.options(),
    )?;
    let format = a.format;
    let (exp, doc) = (&r.exp, &r.doc);
    for w in doc.experiments.iter().flat_map(|e| &e.warnings) {
        eprintln!("warning: {w}");
    }
    let mut stdout = std::io::stdout().lock();
    if format.is_data() {
        crate::output::write_document(doc, format, &mut stdout)?;
    } else {
        if r.prep.is_some() {
            write!(
                stdout,
                "{}",
                report::tables(exp, &[r.seed], &r.results, format)
            )?;
        }
        if let Some(a) = &r.aspace {
            write!(stdout, "{}", crate::aspace::table(exp, a, format))?;
        }
    }
    if !a.quiet {
        print_speed(&r);
    }
    Ok(r)
}

/// The replay's speed on stderr.
fn print_speed(r: &Replayed) {
    let nk = r.exp.kernels.len();
    if let Some(prep) = &r.prep {
        let rec = &prep.recorded;
        let replayed = (rec.allocs + rec.frees) * nk as u64;
        let secs = r.secs[1].max(1e-9);
        eprintln!(
            "mmlab replay (a): {} allocator events × {} kernels replayed in {:.2}s ({:.2} M events/s; first pass {:.2}s); {} frees of pages allocated before the recording skipped",
            rec.allocs + rec.frees,
            nk,
            secs,
            replayed as f64 / secs / 1e6,
            r.secs[0],
            rec.unmatched_frees
        );
    }
    if let Some(a) = &r.aspace {
        let n = a.recorded.nr_events;
        let secs = r.secs[2].max(1e-9);
        eprintln!(
            "mmlab replay (b): {} events × {} kernels replayed in {:.2}s ({:.2} M events/s, {:.2} M kernel-events/s)",
            n,
            nk,
            secs,
            n as f64 / secs / 1e6,
            (n * nk as u64) as f64 / secs / 1e6,
        );
    }
}

pub fn err_pct(recorded: u64, model: u64) -> String {
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

/// Mode (a)'s rows of `mmlab validate`: (counter, recorded, model).
pub fn alloc_rows(
    prep: &Prepared,
    r: &RunResult,
    st: &ReplayStats,
) -> [(&'static str, u64, u64); 4] {
    use mm::vmstat::VmEvent;
    let rec = &prep.recorded;
    [
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
    ]
}

/// `mmlab validate --format json`'s allocator part: what the table shows.
fn validate_json(
    prep: &Prepared,
    exp: &Experiment,
    r: &RunResult,
    st: &ReplayStats,
    warm: bool,
) -> serde_json::Value {
    let k = &exp.kernels[0];
    let rows: Vec<serde_json::Value> = alloc_rows(prep, r, st)
        .iter()
        .map(|(name, rec, model)| {
            let error_pct = (*rec > 0).then(|| 100.0 * (*model as f64 - *rec as f64) / *rec as f64);
            json!({ "counter": name, "recorded": rec, "model": model, "error_pct": error_pct })
        })
        .collect();
    let knobs: serde_json::Map<String, serde_json::Value> = k
        .knobs
        .iter()
        .map(|(n, v)| (n.clone(), json!(v.to_string())))
        .collect();
    json!({
        "kernel_recorded": prep.header.kernel_release,
        "model": { "preset": k.config.preset.name(), "knobs": knobs, "machine": exp.machine.name, "profile": exp.profile.name },
        "warm_pcp": warm,
        "counters": rows,
        "recorded": recorded_json(prep),
        "replayed": stats_json(st),
    })
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
    use std::fmt::Write as _;
    let rec = &prep.recorded;
    let rows = alloc_rows(prep, r, st);
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
        "frees of pages allocated before the recording (replayed with pages set aside at the start): {}; frees on another CPU than the allocation: {}; allocations failed in the model: {}; never freed: {}",
        rec.unmatched_frees, rec.cross_cpu_frees, st.alloc_failed, rec.never_freed
    );
    if prep.header.snapshot_at_exec {
        let _ = writeln!(
            s,
            "the snapshot was read at the command's exec: the {} allocator events before it (already in \
             the snapshot's lists) are left out of the replay and of the recorded counts",
            rec.before_snapshot
        );
    }
    if warm {
        let at_start: u64 = prep
            .header
            .machine
            .zones
            .iter()
            .flat_map(|z| &z.pagesets)
            .map(|p| p.count)
            .sum();
        if at_start > 0 {
            let _ = writeln!(s, "{}", warm_text(prep, at_start));
        }
    }
    if let Some(line) = machine_share_text(prep) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "{}", vmstat_work_text(prep));
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

/// How much of the machine's allocation traffic during the recording the
/// trace holds (`pgalloc_*` before and after), when the counters are there.
fn machine_share_text(prep: &Prepared) -> Option<String> {
    // The PCP lists are per CPU, not per process: the kernel's saw every
    // process of the machine, the replay only the recorded ones.
    let before = prep.header.counters_before.as_ref();
    let after = prep
        .trailer
        .as_ref()
        .and_then(|t| t.counters_after.as_ref());
    let (Some(b), Some(a)) = (before, after) else {
        return None;
    };
    let sum = |c: &trace::event::Counters| -> u64 {
        [
            "pgalloc_dma",
            "pgalloc_dma32",
            "pgalloc_normal",
            "pgalloc_movable",
        ]
        .iter()
        .filter_map(|k| c.vmstat.get(*k))
        .sum()
    };
    let machine = sum(a).saturating_sub(sum(b));
    if machine == 0 {
        return None;
    }
    // pgalloc_* count pages, mm_page_alloc blocks of any order.
    let traced = prep.recorded.pages_allocated;
    let untraced = machine.saturating_sub(traced);
    Some(format!(
        "pages allocated on the whole machine during the recording (pgalloc_*): {machine}; in the trace: {traced} ({:.0}%){}",
        100.0 * traced as f64 / machine as f64,
        if prep.header.kmem_system_wide && untraced > 0 {
            // 6.18's alloc_pages_bulk() takes pages from the PCP lists and
            // counts PGALLOC, but has no trace_mm_page_alloc(); the pages'
            // frees are traced. (A snapshot copied with sendfile(), as
            // Python's shutil.copy() does, takes thousands this way.)
            format!(
                " (every process's allocator events were recorded; the other {untraced} pages were allocated \
                 without an mm_page_alloc event (alloc_pages_bulk() has none: vmalloc, sendfile() or splice() \
                 from /proc and sysfs, page_pool); they left the per-CPU lists unseen, and where they are freed in \
                 the trace the model sees frees without allocations)"
            )
        } else if prep.header.kmem_system_wide {
            " (every process's allocator events were recorded)".to_string()
        } else {
            ": the other processes' allocations and frees went through the same per-CPU lists and are not \
             in the trace; record with --kmem-system-wide to replay them"
                .to_string()
        }
    ))
}

/// When the model's vmstat work (its `decay_pcp_high()` drains) ran.
fn vmstat_work_text(prep: &Prepared) -> String {
    let n = prep.recorded.vmstat_works;
    if prep.replays_vmstat() {
        format!(
            "vmstat work: at the {n} recorded runs of vmstat_update (workqueue_execute_start), each in its \
             CPU's recorded order among the allocator events; no model timer"
        )
    } else if n > 0 {
        format!(
            "vmstat work: the model's one-second timer (the {n} recorded runs of vmstat_update are left out: \
             --vmstat-work timer)"
        )
    } else {
        "vmstat work: the model's one-second timer, at whole seconds (the trace does not say when the \
         kernel's vmstat_update ran: no workqueue:workqueue_execute_start events; the PCP drains of \
         decay_pcp_high() may come at other moments than the kernel's)"
            .to_string()
    }
}

/// What the warm-up put on the lists, and how it knows.
fn warm_text(prep: &Prepared, at_start: u64) -> String {
    use trace::replay::Inferred;
    let mut by_how = [0u64; 3];
    for l in prep.recorded.pcp_start.values().flatten() {
        let i = match l.how {
            Inferred::Exact => 0,
            Inferred::LowerBound => 1,
            Inferred::Estimate => 2,
        };
        by_how[i] += l.blocks << l.order;
    }
    format!(
        "the recorded lists held {at_start} pages at the start, all migratetypes and orders together \
         (/proc/zoneinfo has no breakdown); the trace tells how they were spread over the lists: {} pages \
         exactly (lists refilled during the recording), {} as lower bounds, {} ESTIMATED (the rest of each \
         CPU's count shared over the lists never refilled); the warm-up puts up to high - batch of them back \
         (lists the trace says nothing of: the CPU's recorded order-0 mix, a guess); --warm-pcp false starts \
         the lists empty",
        by_how[0], by_how[1], by_how[2]
    )
}

/// A validation that has run: mode (a)'s replay under the recorded
/// configuration and mode (b)'s, whichever ran.
pub struct Validation {
    pub exp: Experiment,
    pub alloc: Option<(Prepared, RunResult, ReplayStats)>,
    pub aspace: Option<trace::aspace::AspaceReplay>,
    pub warnings: Vec<String>,
    /// The seed of the replay.
    pub seed: u64,
    warm: bool,
}

/// One row of `mmlab validate`: a counter as recorded (`None`: the
/// recording has no such count) and as the model predicts it.
pub struct ValidateRow {
    /// `alloc` (mode a) or `aspace` (mode b).
    pub mode: &'static str,
    pub counter: String,
    pub recorded: Option<u64>,
    pub model: u64,
}

/// Replays `trace` under the recorded configuration in the modes of `mode`
/// it has events for.
pub fn validate(
    trace: &Path,
    seed: Option<u64>,
    warm: bool,
    mode: ReplayMode,
) -> Result<Validation> {
    validate_with(trace, seed, warm, mode, true)
}

/// [`validate`], with the recorded vmstat work left out when
/// `recorded_vmstat` is false (the engine's own one-second timer then runs
/// it, as for a trace without it).
pub fn validate_with(
    trace: &Path,
    seed: Option<u64>,
    warm: bool,
    mode: ReplayMode,
    recorded_vmstat: bool,
) -> Result<Validation> {
    let mut prep = open_alloc(trace, mode)?;
    if let Some(p) = prep.as_mut() {
        p.use_recorded_vmstat = recorded_vmstat;
    }
    let header = match &prep {
        Some(p) => p.header.clone(),
        None => read_header(trace)?,
    };
    let min_cpus = prep
        .as_ref()
        .and_then(|p| p.recorded.cpus.last().map(|c| c.saturating_add(1)))
        .unwrap_or(1);
    let exp = replay_experiment(trace, &header, min_cpus, None)?;
    let seed = seed.unwrap_or(exp.seed);
    let aspace = if mode == ReplayMode::Alloc {
        None
    } else {
        crate::aspace::run(trace, &exp, mode == ReplayMode::Aspace)?
    };
    if prep.is_none() && aspace.is_none() {
        bail!(
            "{}: the trace has neither page allocator events (kmem:mm_page_alloc/free, replay mode a) \
             nor page faults, address-space system calls or process events (replay mode b)",
            trace.display()
        );
    }
    if let (Some(p), true) = (&prep, warm) {
        check_warm_fits(trace, &exp, p)?;
    }
    let warnings = crate::aspace::warnings(&header, &exp, aspace.as_ref());
    let alloc = prep.map(|p| {
        let (r, st) = replay_one(&exp, &exp.kernels[0], &p, seed, warm, None);
        (p, r, st)
    });
    Ok(Validation {
        exp,
        alloc,
        aspace,
        warnings,
        seed,
        warm,
    })
}

impl Validation {
    /// The tables `mmlab validate` prints.
    pub fn text(&self, trace: &Path) -> String {
        let mut s = String::new();
        if let Some((prep, r, st)) = &self.alloc {
            s += &validate_text(trace, prep, &self.exp, r, st, self.warm);
        }
        if let Some(a) = &self.aspace {
            if self.alloc.is_some() {
                s.push('\n');
            }
            s += &crate::aspace::validate_text(trace, &self.exp, a);
        }
        s
    }

    /// What `mmlab validate --format json` prints: the trace, seed and
    /// warnings, and each mode's counters recorded and modelled.
    pub fn json(&self, trace: &Path) -> serde_json::Value {
        let mut doc = json!({
            "trace": trace.display().to_string(),
            "seed": self.seed,
            "warnings": self.warnings,
        });
        if let Some((prep, r, st)) = &self.alloc {
            doc["alloc"] = validate_json(prep, &self.exp, r, st, self.warm);
        }
        if let Some(a) = &self.aspace {
            doc["aspace"] = crate::aspace::json(&self.exp, a);
        }
        doc
    }

    /// The tables' rows, mode (a)'s first.
    pub fn rows(&self) -> Vec<ValidateRow> {
        let mut out = Vec::new();
        if let Some((prep, r, st)) = &self.alloc {
            for (c, rec, model) in alloc_rows(prep, r, st) {
                out.push(ValidateRow {
                    mode: "alloc",
                    counter: c.to_string(),
                    recorded: Some(rec),
                    model,
                });
            }
        }
        if let Some(a) = &self.aspace {
            for (counter, recorded, model) in crate::aspace::validate_rows(a) {
                out.push(ValidateRow {
                    mode: "aspace",
                    counter,
                    recorded,
                    model,
                });
            }
        }
        out
    }
}

/// `mmlab validate`.
pub fn validate_cmd(trace: &Path, seed: Option<u64>, warm: bool, mode: ReplayMode) -> Result<()> {
    let v = validate(trace, seed, warm, mode)?;
    for w in &v.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", v.text(trace));
    Ok(())
}
