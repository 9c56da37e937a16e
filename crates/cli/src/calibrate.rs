//! `mmlab calibrate`: measures this host's kernel costs, derives a cost
//! profile from them, and checks the calibrated model's time against the
//! live kernel on patterns the fit did not use.
//!
//! # The three kinds of figure in a calibrated profile
//!
//! - **measured**: a micro-benchmark times the same instructions or the
//!   same kernel operation the model charges as that one cost
//!   (`clear_page()`'s `rep stosb`, a `getppid()` round trip, a cache line
//!   moved between two CPUs, ...), see [`live::run_micro`];
//! - **fitted**: costs that no single measurement isolates (the fault
//!   entry, the per-page clear of a fault, the allocator's steps, the PTE
//!   costs, the per-page part of `set_ptes()` for a large folio and the
//!   large folio's own once-per-fault work, `alloc_anon_folio_ns`) are the
//!   weighted least-squares solution of one equation per
//!   live measurement — anonymous write faults of 4K, 16K, 64K, 256K and 2M
//!   folios, zero-page read faults, a fault storm with the PCP lists forced
//!   small, and `munmap`, `mprotect` and `fork` per populated page — each
//!   equation the model's own charges for that operation (see [`fit`]);
//! - **estimate**: what this host cannot measure from user space (another
//!   socket, a DMA engine, page migration on a single node) keeps the base
//!   profile's figure, with the reason.
//!
//! # The closing check
//!
//! The calibrated model then predicts the live kernel's CPU time for
//! patterns the fit did not use — 1 GiB (or `--check-mib`) written in
//! folios of 4K-2M (32K and 128K were never fitted; 256K, fitted, is not
//! checked), a fork-COW
//! pattern, a PCP churn pattern with auto-tuned lists, zero-page reads —
//! and prints predicted against live with the error of each and
//! `calibration check: N/M within 10 %`.

mod compare;
mod fit;
mod live;
mod out;
mod reporting;

pub use compare::compare;

use crate::fault_model::{run_model_opts, ModelOpts};
use anyhow::{bail, Context, Result};
use fit::{Equation, RegionOp, Unknown};
use live::{names, LivePattern, Micro};
use mm::cost::{Cost, CostTable};
use mm::knobs::{KnobValue, Preset};
use native::calibrate::hw::CpuPair;
use native::calibrate::{fmt_num, HostInfo, Measurement};
use native::stats::Summary;
use sim::profile::Profile;
use std::path::PathBuf;
use std::time::Instant;

/// Options of one calibration.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Interleaved rounds of every micro-benchmark and fit pattern.
    pub rounds: usize,
    /// Size of the fit's fault patterns, MiB.
    pub fit_mib: usize,
    /// Size of the check's fault patterns, MiB.
    pub check_mib: usize,
    /// Runs of each check pattern (interleaved; the median counts).
    pub check_reps: usize,
    /// The profile whose figures stand where nothing is measured.
    pub base: Profile,
    /// The new profile's name.
    pub name: String,
    /// Where to write it (atomically).
    pub out: Option<PathBuf>,
    /// No progress on stderr.
    pub quiet: bool,
    /// Run the model on a machine of the host's memory and
    /// `min_free_kbytes` (what the PCP lists' `high` follows); off, on one
    /// just large enough for each pattern, which is much faster to set up
    /// (the smoke run) but sizes the lists differently.
    pub host_sized_model: bool,
    /// CI's smoke run (`--quick`): the report says what its check shows.
    pub quick: bool,
}

/// Rows of a text table, the header first.
type Rows = Vec<Vec<String>>;

/// How a cost's figure came about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Timed directly.
    Measured,
    /// Solved from live measurements through the model's charges.
    Fitted,
    /// Not measured yet (no probe, or the probe gave no usable figure on
    /// this run); the base profile's figure.
    Estimate,
    /// The step cannot happen on this host, or cannot be timed from user
    /// space here (two-node migration on one node, DMA engines, an SMT or
    /// socket relation a small VM lacks); the base profile's figure.
    NotHere,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Measured => "measured",
            Kind::Fitted => "fitted",
            Kind::Estimate => "estimate (not yet measured)",
            Kind::NotHere => "estimate (cannot measure here)",
        }
    }

    /// Either kind of estimate.
    pub fn is_estimate(self) -> bool {
        matches!(self, Kind::Estimate | Kind::NotHere)
    }
}

/// Prefixes of an estimate's source, by kind.
const NOT_YET: &str = "estimate (not yet measured by mmlab calibrate: ";
const NOT_HERE: &str = "estimate (mmlab calibrate cannot measure it here: ";

/// One cost of the calibrated profile.
#[derive(Clone, Debug)]
pub struct Derived {
    /// The cost.
    pub cost: Cost,
    /// Nanoseconds.
    pub ns: u64,
    /// Where it comes from.
    pub kind: Kind,
    /// The profile's `source` text.
    pub source: String,
    /// Relative spread (half the p10-p90 range over the median), if known.
    pub spread: Option<f64>,
    /// The plausible range of a figure that is a bound or an estimate (the
    /// profile's `band`), if known.
    pub band: Option<(u64, u64)>,
}

/// The host's memory as the model should see it: ZONE_DMA32 and
/// ZONE_NORMAL managed pages (from `/proc/zoneinfo`), `min_free_kbytes`,
/// and the last-level cache CPU 0 has (`cache/index3/size` in sysfs; the
/// LLC model's size, 0 if the host does not say).
struct HostMemory {
    nr_pages: u64,
    dma32_pages: u64,
    min_free_kbytes: i64,
    llc_bytes: u64,
}

/// The size of CPU 0's level-3 cache from sysfs (`32768K`), 0 if unknown.
fn host_llc_bytes() -> u64 {
    native::sys::llc_bytes()
}

fn host_memory() -> HostMemory {
    let text = std::fs::read_to_string("/proc/zoneinfo").unwrap_or_default();
    let mut zone = String::new();
    let (mut dma32, mut normal) = (0, 0);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Node ") {
            zone = rest.rsplit(' ').next().unwrap_or("").to_string();
        } else if let Some(v) = line.trim().strip_prefix("managed") {
            let v: u64 = v.trim().parse().unwrap_or(0);
            match zone.as_str() {
                "DMA32" => dma32 += v,
                "Normal" => normal += v,
                _ => {}
            }
        }
    }
    let min_free_kbytes = std::fs::read_to_string("/proc/sys/vm/min_free_kbytes")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if dma32 + normal == 0 {
        // No zoneinfo: a 4 GiB machine of one zone.
        normal = 1 << 20;
    }
    HostMemory {
        nr_pages: dma32 + normal,
        dma32_pages: dma32,
        min_free_kbytes,
        llc_bytes: host_llc_bytes(),
    }
}

impl HostMemory {
    fn opts(&self, table: CostTable, fraction: u32) -> ModelOpts {
        let mut knobs = Vec::new();
        if self.min_free_kbytes > 0 {
            knobs.push((
                "vm.min_free_kbytes".to_string(),
                KnobValue::Int(self.min_free_kbytes),
            ));
        }
        if fraction > 0 {
            knobs.push((
                "vm.percpu_pagelist_high_fraction".to_string(),
                KnobValue::Int(fraction as i64),
            ));
        }
        ModelOpts {
            table,
            // 0: the pattern's own size (fault_model's default).
            nr_pages: (self.nr_pages > 0).then_some(self.nr_pages),
            dma32_pages: self.dma32_pages,
            knobs,
            llc_bytes: self.llc_bytes,
        }
    }
}

/// The model's ns for the timed phases of `p` under `table`, user stores
/// (`touch_ns` per page touched) included; and its faults there.
fn model_pattern_ns(mem: &HostMemory, p: &LivePattern, table: &CostTable) -> Result<(f64, u64)> {
    let opts = mem.opts(table.clone(), p.fraction);
    let r = run_model_opts(&p.pattern, Preset::Linux6_18, &opts).map_err(anyhow::Error::msg)?;
    let (ns, faults) = match p.timed {
        live::Timed::Touch => (r.touch_model_ns, r.touch),
        live::Timed::Steps => (r.steps_model_ns.iter().sum(), r.steps.iter().sum()),
    };
    let user = p.timed_pages() * table.get(Cost::Touch);
    Ok(((ns + user) as f64, faults))
}

/// The unknowns of the fit, and the costs the fit leaves alone.
fn unknowns(base: &CostTable) -> Vec<Unknown> {
    let group = |cs: &[Cost]| Unknown {
        members: cs.iter().map(|&c| (c, base.get(c).max(1) as f64)).collect(),
    };
    vec![
        Unknown::single(Cost::FaultEntry),
        Unknown::single(Cost::ClearPage),
        Unknown::single(Cost::PteSet),
        // Only the 16K, 64K and 256K write faults charge it.
        Unknown::single(Cost::SetPtesPage),
        // Once per large folio: the 16K, 64K and 256K faults pin it with
        // set_ptes_page_ns (a fixed and a per-page part), the 2M one
        // charges it once per 512 pages.
        Unknown::single(Cost::AllocAnonFolio),
        Unknown::single(Cost::PteCopy),
        // munmap charges both once per page, and nothing else times either.
        group(&[Cost::PteZap, Cost::FreePagesEntry]),
        // The allocator's steps outside the zone lock. The buddy steps
        // (under it) stay out of the fit: every page of a fault storm goes
        // through both, so the fit cannot tell them apart, and charging the
        // fault's other per-page work under the zone lock would invent
        // contention on a many-CPU machine.
        group(&[Cost::AllocPagesEntry, Cost::WatermarkCheck, Cost::PcpListOp]),
    ]
}

/// What a calibration found, for printing and writing.
pub struct Calibration {
    host: HostInfo,
    micro: Micro,
    derived: Vec<Derived>,
    fit_rows: Rows,
    regression: Option<String>,
    check_rows: Rows,
    /// Check patterns within 10 % (median of each repetition's faster
    /// run), of those run.
    check_pass: (usize, usize),
    /// The same on the first runs' medians.
    check_pass_first: (usize, usize),
    /// The same on the immediate re-runs' medians.
    check_pass_rerun: (usize, usize),
    /// How free page reporting overlapped the fit's and the check's
    /// repetitions.
    reporting: live::Reporting,
    /// How the model's LLC was sized ([`effective_llc`]).
    llc: String,
    /// Where the time went, phase by phase.
    phases: Phases,
    secs: f64,
    /// A `--quick` smoke run.
    quick: bool,
}

/// One phase of a calibration: its name, wall seconds, of which seconds
/// waiting for the live-kernel lock, and the 1-minute load average at
/// its end (a timing means little without the load it was taken at).
#[derive(Clone, Debug)]
pub struct Phase {
    name: &'static str,
    secs: f64,
    lock_wait_secs: f64,
    load_at_end: String,
}

/// The phases of a calibration as they end ([`Phases::end`]).
#[derive(Clone, Debug)]
pub struct Phases {
    last: Instant,
    last_wait_ns: u64,
    list: Vec<Phase>,
}

impl Phases {
    fn new() -> Phases {
        Phases {
            last: Instant::now(),
            last_wait_ns: live::LOCK_WAIT_NS.load(std::sync::atomic::Ordering::Relaxed),
            list: Vec::new(),
        }
    }

    /// Ends the phase running since the last call (or since `new`).
    fn end(&mut self, name: &'static str) {
        let now = Instant::now();
        let wait = live::LOCK_WAIT_NS.load(std::sync::atomic::Ordering::Relaxed);
        let load = native::calibrate::load_average();
        self.list.push(Phase {
            name,
            secs: (now - self.last).as_secs_f64(),
            lock_wait_secs: wait.saturating_sub(self.last_wait_ns) as f64 / 1e9,
            load_at_end: load.split(' ').next().unwrap_or("?").to_string(),
        });
        self.last = now;
        self.last_wait_ns = wait;
    }

    /// The table: phase, seconds, lock wait, load at its end.
    fn rows(&self) -> Rows {
        let mut rows = vec![vec![
            "phase".to_string(),
            "s".into(),
            "waiting for the lock s".into(),
            "load at its end".into(),
        ]];
        for p in &self.list {
            rows.push(vec![
                p.name.to_string(),
                format!("{:.1}", p.secs),
                format!("{:.1}", p.lock_wait_secs),
                p.load_at_end.clone(),
            ]);
        }
        rows
    }
}

/// The live measurements: the micro-benchmarks, the fit's fault patterns
/// and the check's in alternation, the fresh-PTE probe, the PCP churns,
/// and two more phases of the cross-CPU probes between them.
struct LiveData {
    micro: Micro,
    fit_live: live::FitLive,
    pcp_live: live::FitLive,
    check_live: Vec<Result<live::CheckLive, String>>,
    reporting: live::Reporting,
}

/// Rounds of the fit's fault patterns per round of the micro-benchmarks:
/// they are cheap (128 MiB each, ~0.5 s a round here) and the fit's
/// large-folio costs hang on small differences between them.
const FIT_ROUNDS_PER_ROUND: usize = 2;

fn measure(
    opts: &Opts,
    pats: &Patterns,
    phases: &mut Phases,
    progress: &mut dyn FnMut(&str),
) -> Result<LiveData> {
    // The micro-benchmarks, the fit's patterns and the check's side by
    // side (`live::FitAndCheck` says why).
    let mut fac = live::FitAndCheck::new(
        &pats.fit,
        FIT_ROUNDS_PER_ROUND * opts.rounds,
        &pats.check,
        opts.check_reps,
    );
    let mut micro = live::run_micro(opts.rounds, progress, &mut |i, n, lock, progress| {
        fac.run_share(i, n, lock, progress)
    })
    .context("micro-benchmarks")?;
    let (fit_live, check_live, mut reporting) = fac.finish(progress);
    phases.end("micro-benchmarks and fit and check fault patterns, alternated");
    progress(names::FRESH_PTE);
    micro.outcomes.push(live::run_fresh_pte(opts.rounds));
    phases.end("fresh-PTE probe");
    progress("cross-CPU probes again");
    live::resample_cross_cpu(&mut micro, opts.rounds).context("cross-CPU probes")?;
    phases.end("cross-CPU probes, 2nd phase");
    // The PCP patterns change vm.percpu_pagelist_high_fraction, and putting
    // it back resets the lists' auto-tuned high: they run in rounds of their
    // own, so that the other patterns meet the lists as the check's do.
    let pcp_live = live::run_patterns(&pats.pcp, opts.rounds, &mut reporting, progress);
    phases.end("PCP churns (small and large lists)");
    progress("cross-CPU probes again");
    live::resample_cross_cpu(&mut micro, opts.rounds).context("cross-CPU probes")?;
    phases.end("cross-CPU probes, 3rd phase");
    Ok(LiveData {
        micro,
        fit_live,
        pcp_live,
        check_live,
        reporting,
    })
}

/// The host's memory as the model should see it for this run.
fn model_memory(opts: &Opts) -> HostMemory {
    if opts.host_sized_model {
        host_memory()
    } else {
        HostMemory {
            nr_pages: 0,
            dma32_pages: 0,
            min_free_kbytes: 0,
            llc_bytes: host_llc_bytes(),
        }
    }
}

/// Runs a calibration and prints it; writes the profile if asked.
pub fn run(opts: &Opts) -> Result<()> {
    let t0 = Instant::now();
    let mut phases = Phases::new();
    if opts.base.validate().is_err() {
        bail!("the base profile is not complete");
    }
    if let Some(path) = &opts.out {
        // A file that cannot be written fails now, not after minutes of work.
        host::output::check_writable(path, host::output::Mode::Shared)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let host = HostInfo::probe();
    let mut mem = model_memory(opts);
    let mut progress = |what: &str| {
        if !opts.quiet {
            eprintln!(
                "mmlab calibrate: {what} ... ({:.0} s)",
                t0.elapsed().as_secs_f64()
            );
        }
    };
    let pats = Patterns::new(opts);
    let LiveData {
        micro,
        mut fit_live,
        pcp_live,
        check_live,
        reporting,
    } = measure(opts, &pats, &mut phases, &mut progress)?;
    let (llc_bytes, llc) = effective_llc(&micro, mem.llc_bytes);
    mem.llc_bytes = llc_bytes;
    let base = opts.base.table();
    let mut known = base.clone();
    let mut derived = measured_costs(&micro, &opts.base, &host, &mut known);
    // The small-list churn is an equation of the fit; the two churns
    // together give the buddy steps after it.
    fit_live.push(pcp_live[0].clone());
    let fit_pats: Vec<LivePattern> = pats.fit.iter().chain([&pats.pcp[0]]).cloned().collect();
    progress("fitting the model's charges");
    let (fit_rows, fitted, regression) = fit_costs(&mem, &micro, &fit_pats, &fit_live, &mut known)?;
    merge_fitted(&mut derived, fitted, &opts.base, &host);
    let steps = buddy_steps(&mem, &pats.pcp, &pcp_live, &opts.base, &host, &known)?;
    add_derived(&mut derived, &mut known, steps);
    let tlb = tlb(&micro, &opts.base, &host, &known);
    add_derived(&mut derived, &mut known, tlb);
    add_unmeasured(&mut derived, &opts.base);
    annotate(&mut derived, &micro, regression.as_deref());
    phases.end("fit (the model)");
    progress("predicting the check patterns");
    let (check_rows, [check_pass, check_pass_first, check_pass_rerun]) =
        check(&mem, &known, &pats.check, &check_live)?;
    phases.end("closing check, the model");
    let cal = Calibration {
        host,
        micro,
        derived,
        fit_rows,
        regression,
        check_rows,
        check_pass,
        check_pass_first,
        check_pass_rerun,
        reporting,
        llc,
        phases,
        secs: t0.elapsed().as_secs_f64(),
        quick: opts.quick,
    };
    print!("{}", out::report(&cal));
    if let Some(path) = &opts.out {
        let text = out::profile_toml(&cal, &opts.name, opts.check_mib);
        let p: Profile = crate::experiment::parse_profile(&text, "the calibrated profile")?;
        p.validate()
            .map_err(|e| anyhow::anyhow!("the calibrated profile: {e}"))?;
        out::write_atomically(path, &text)?;
        eprintln!("mmlab calibrate: wrote {}", path.display());
    }
    Ok(())
}

/// The last-level cache this guest gets, for the model's LLC
/// ([`ModelOpts::llc_bytes`]), from the chases over growing working sets
/// (`live::CHASE_MIB`): the largest working set whose dependent-load
/// latency is still nearer the smallest set's (a cache's) than DRAM's
/// (the 256 MiB chase), each set up to it passing too. When every set
/// sysfs allows passes, or the chases did not run, the LLC is sysfs's
/// (`sysfs_bytes`). Returns the bytes and a sentence saying how.
fn effective_llc(micro: &Micro, sysfs_bytes: u64) -> (u64, String) {
    let mib = |b: u64| {
        if b.is_multiple_of(1 << 20) {
            (b >> 20).to_string()
        } else {
            fmt_num(b as f64 / (1 << 20) as f64)
        }
    };
    let chases: Vec<(usize, f64)> = live::CHASE_MIB
        .iter()
        .filter_map(|&m| Some((m, micro.get(&names::chase(m))?.median())))
        .collect();
    let (Some(dram), Some(&(small, hit))) = (micro.get(names::DRAM), chases.first()) else {
        return (
            sysfs_bytes,
            format!(
                "model's LLC: {} MiB (sysfs; the working-set chases did not run)",
                mib(sysfs_bytes)
            ),
        );
    };
    let dram = dram.median();
    let mid = (hit + dram) / 2.0;
    let all = chases
        .iter()
        .map(|(m, ns)| format!("{m} MiB {} ns", fmt_num(*ns)))
        .collect::<Vec<_>>()
        .join(", ");
    let fit = chases.iter().take_while(|(_, ns)| *ns <= mid).last();
    let beyond = chases.iter().find(|(_, ns)| *ns > mid);
    match (fit, beyond) {
        (Some(&(m, _)), Some(_)) if ((m as u64) << 20) < sysfs_bytes || sysfs_bytes == 0 => (
            (m as u64) << 20,
            format!("model's LLC: {m} MiB of the {} MiB sysfs gives: the largest working set whose dependent loads ({all}) are nearer the {small} MiB set's latency than DRAM's ({} ns, 256 MiB): this guest's share of the host's L3", mib(sysfs_bytes), fmt_num(dram)),
        ),
        _ => (
            sysfs_bytes,
            format!("model's LLC: {} MiB (sysfs; dependent loads {all}, DRAM {} ns: no working set up to it was nearer DRAM's latency than the {small} MiB set's)", mib(sysfs_bytes), fmt_num(dram)),
        ),
    }
}

/// Appends `new` to `derived`; the measured or fitted ones also become
/// `known`, for the costs derived after them.
fn add_derived(derived: &mut Vec<Derived>, known: &mut CostTable, new: Vec<Derived>) {
    for d in new {
        if !d.kind.is_estimate() {
            known.set(d.cost, d.ns);
        }
        derived.push(d);
    }
}

/// Adds every cost nothing derived, as an estimate saying why (cannot be
/// measured here, or not yet measured), and sorts the list by cost.
fn add_unmeasured(derived: &mut Vec<Derived>, base: &Profile) {
    for &c in Cost::ALL {
        if !derived.iter().any(|d| d.cost == c) {
            let (why, here) = not_measurable(c);
            derived.push(if here {
                estimate(c, base, why)
            } else {
                not_here(c, base, why)
            });
        }
    }
    derived.sort_by_key(|d| d.cost);
}

/// The live patterns of a calibration.
struct Patterns {
    /// The fit's fault patterns.
    fit: Vec<LivePattern>,
    /// The fit's PCP churns, small lists then large (run apart).
    pcp: Vec<LivePattern>,
    /// The closing check's patterns.
    check: Vec<LivePattern>,
}

impl Patterns {
    fn new(opts: &Opts) -> Patterns {
        let mib = opts.fit_mib;
        Patterns {
            fit: fit_patterns(mib),
            pcp: vec![
                live::churn_pattern((mib / 4).max(4), 2, 1_000_000),
                live::churn_pattern((mib / 4).max(4), 2, PCP_LARGE_FRACTION),
            ],
            check: check_patterns(opts.check_mib),
        }
    }
}

/// The fit's fault patterns: write faults of 4K pages, of 16K, 64K and
/// 256K folios (mapped by PTEs) and of 2M ones (by a PMD), and zero-page
/// reads.
fn fit_patterns(mib: usize) -> Vec<LivePattern> {
    let mut v: Vec<LivePattern> = FIT_SIZES_KB
        .iter()
        .map(|&kb| live::write_pattern(mib, kb))
        .collect();
    v.push(live::read_pattern(mib));
    v
}

/// The folio sizes of the fit's write patterns, KiB. Three PTE-mapped
/// large sizes pin `set_ptes_page_ns` (per page) and
/// `alloc_anon_folio_ns` (per folio) with one equation to spare: with
/// 16K and 64K alone, one of them running slow swung the folio's cost
/// 52-377 ns between runs or left it unfitted (2026-11-25 01:59-03:17).
const FIT_SIZES_KB: [u32; 5] = [4, 16, 64, 256, 2048];

/// The folio sizes of the check's 1 GiB write patterns, KiB: 32K and 128K
/// the fit never writes; 256K, which it does, is left out.
const CHECK_SIZES_KB: [u32; 6] = [4, 16, 32, 64, 128, 2048];

/// `vm.percpu_pagelist_high_fraction` of the large-list churn: 8, the
/// smallest the kernel accepts, gives each CPU's lists an eighth of the
/// zone over the CPUs (`zone_highsize()`), far more than the churn frees.
const PCP_LARGE_FRACTION: u32 = 8;

fn check_patterns(mib: usize) -> Vec<LivePattern> {
    let mut v: Vec<LivePattern> = CHECK_SIZES_KB
        .iter()
        .map(|&kb| live::write_pattern(mib, kb))
        .collect();
    v.push(live::read_pattern(mib));
    v.push(live::cow_pattern((mib / 4).max(4)));
    v.push(live::churn_pattern((mib / 16).max(4), 3, 0));
    v
}

/// The `source` prefix of every figure this run produced.
fn provenance(host: &HostInfo) -> String {
    format!(
        "mmlab calibrate, {}, Linux {}, {} ({} CPUs), load average {} at start",
        out::today(),
        host.kernel,
        host.cpu,
        host.nr_cpus,
        host.loadavg
    )
}

fn measured(cost: Cost, ns: f64, m: &[&Measurement], host: &HostInfo, how: &str) -> Derived {
    let parts: Vec<String> = m
        .iter()
        .map(|m| format!("{}: {} ({})", m.name, m.describe(), m.how))
        .collect();
    // A figure derived from several measurements (a difference of two)
    // moves by their half-ranges together: its spread is their sum over
    // the figure (an overstatement for a figure that is a fraction of a
    // difference, as the VMA cache's slot).
    let abs: f64 = m.iter().map(|m| m.rel_spread() * m.median().abs()).sum();
    let spread = if ns.abs() > 0.0 { abs / ns.abs() } else { 0.0 };
    Derived {
        cost,
        ns: ns.round().max(1.0) as u64,
        kind: Kind::Measured,
        source: format!(
            "measured ({}): {how}{}",
            provenance(host),
            if parts.is_empty() {
                String::new()
            } else {
                format!("; {}", parts.join("; "))
            }
        ),
        spread: Some(spread),
        band: None,
    }
}

fn estimate(cost: Cost, base: &Profile, why: &str) -> Derived {
    let e = &base.entries[cost.key()];
    // A base made by an earlier calibration already says why: keep its
    // figure's own source only.
    let mut old = e.source.as_str();
    for prefix in [NOT_HERE, NOT_YET] {
        if let Some(rest) = old.strip_prefix(prefix) {
            old = rest.split_once("): ").map_or(rest, |(_, src)| src);
        }
    }
    let old = old.strip_prefix("estimate: ").unwrap_or(old);
    Derived {
        cost,
        ns: e.ns,
        kind: Kind::Estimate,
        source: format!("{NOT_YET}{why}): {old}"),
        spread: None,
        band: e.band,
    }
}

/// The same estimate, as one this host cannot measure (`Kind::NotHere`).
fn not_here(cost: Cost, base: &Profile, why: &str) -> Derived {
    let d = estimate(cost, base, why);
    let old = d.source.strip_prefix(NOT_YET).unwrap_or(&d.source);
    Derived {
        kind: Kind::NotHere,
        source: format!("{NOT_HERE}{old}"),
        ..d
    }
}

/// The costs micro-benchmarks give directly; sets them in `known`.
fn measured_costs(
    micro: &Micro,
    base: &Profile,
    host: &HostInfo,
    known: &mut CostTable,
) -> Vec<Derived> {
    let mut out = Vec::new();
    let mut put = |d: Derived, known: &mut CostTable| {
        if !d.kind.is_estimate() {
            known.set(d.cost, d.ns);
        }
        out.push(d);
    };
    let one = |cost: Cost,
               name: &str,
               how: &str,
               known: &mut CostTable,
               put: &mut dyn FnMut(Derived, &mut CostTable)| {
        let d = match micro.get(name) {
            Some(m) => measured(cost, m.median(), &[m], host, how),
            None => estimate(cost, base, &micro.why_not(name).unwrap_or_default()),
        };
        put(d, known);
    };
    one(
        Cost::SyscallEntry,
        names::SYSCALL,
        "a system call round trip",
        known,
        &mut put,
    );
    let copy_how = "one cold 4 KiB page copied by itself among other work, as wp_page_copy() copies the old page (copy_mc_user_highpage(): rep movsb) with the fault path's work before and after it; a streaming loop of copies overlaps them and measures less (see the cross-check)";
    one(
        Cost::CopyPage,
        names::COPY_ISOLATED,
        copy_how,
        known,
        &mut put,
    );
    one(
        Cost::ContextSwitch,
        names::CONTEXT_SWITCH,
        "flush_work() of a work item on its own CPU: wake the kworker, switch to it, it wakes the waiter, switch back; timed as two threads on one CPU waking each other (the futex wake and wait around each switch included)",
        known,
        &mut put,
    );
    one(
        Cost::BuddyListInsn,
        names::BUDDY_INSN,
        "the instructions of one buddy free-list operation on lines already in L1 (the cache-line ownership model charges the misses), timed as the same unlink, link and flag updates in user space",
        known,
        &mut put,
    );
    one(
        Cost::Touch,
        names::TOUCH,
        "a user store to a mapped page, one per 4 KiB",
        known,
        &mut put,
    );
    put(fresh_pte_touch(micro, base, host, known), known);
    one(Cost::PcpLock, names::LOCK, "pcp_spin_trylock()/unlock on a CPU-local line: the locked cmpxchg and release store (interrupt-flag handling not included)", known, &mut put);
    one(Cost::ZoneLockAcquire, names::LOCK, "an uncontended spin_lock()/spin_unlock() pair: the locked cmpxchg and release store on an owned line", known, &mut put);
    one(
        Cost::DramLocal,
        names::DRAM,
        "a dependent load served by local DRAM",
        known,
        &mut put,
    );
    put(handoff(micro, base, host), known);
    for (cost, name, how) in [
        (Cost::WorkqueueQueue, names::WAKER, "queue_work_on() to another CPU ends in wake_up_process() of its kworker: timed as the waker's side of a futex wake of a thread parked on the other CPU (try_to_wake_up() and the IPI), without insert_work()'s list add"),
        (Cost::WorkqueueWakeup, names::WAKE_LATENCY, "a task woken on another CPU that was idle for 1 ms, from the wake call to the task running (a futex wake of a parked thread)"),
    ] {
        one(cost, name, how, known, &mut put);
    }
    put(vma_level(micro, base, host), known);
    for d in vmacache(micro, base, host) {
        put(d, known);
    }
    for d in c2c(micro, base, host) {
        put(d, known);
    }
    out
}

/// `fresh_pte_touch_ns`: the probe's time per page of a 64K folio that
/// did not fault, less the `touch_ns` the model charges every access.
fn fresh_pte_touch(micro: &Micro, base: &Profile, host: &HostInfo, known: &CostTable) -> Derived {
    let Some(m) = micro.get(names::FRESH_PTE) else {
        let why = micro.why_not(names::FRESH_PTE).unwrap_or_default();
        return estimate(Cost::FreshPteTouch, base, &why);
    };
    let touch = known.get(Cost::Touch) as f64;
    let mut d = measured(
        Cost::FreshPteTouch,
        (m.median() - touch).max(0.0),
        &[m],
        host,
        &format!("the first user access to each page of a large folio that the fault mapped by PTEs besides the faulting one, less touch_ns ({touch:.0} ns): the TLB fill right after do_anonymous_page()'s set_ptes() and folio_zero_user() (which hardware step costs it is not identified; a PMD-mapped THP does not pay it)"),
    );
    // 0 is a measured value here (a host without the effect), not "none".
    d.ns = (m.median() - touch).max(0.0).round() as u64;
    d
}

/// `zone_lock_handoff_ns`: the hand-off's near placement less the
/// uncontended lock round. A run that met only the far placement keeps
/// the far figure, said so in its source, with a band from the base
/// profile's figure to it (the near figure is not known; the far one
/// bounds it from above).
fn handoff(micro: &Micro, base: &Profile, host: &HostInfo) -> Derived {
    let (Some(h), Some(l)) = (micro.get(names::HANDOFF), micro.get(names::LOCK)) else {
        return estimate(
            Cost::ZoneLockHandoff,
            base,
            &micro.why_not(names::HANDOFF).unwrap_or_default(),
        );
    };
    let pl = Placements::of(h, dram_ns(micro));
    let (kept, far_only) = match (pl.near, pl.far) {
        (Some(n), _) => (n, false),
        (None, Some(f)) => (f, true),
        (None, None) => unreachable!("a measurement has samples"),
    };
    let figure = (kept.median - l.median()).max(1.0);
    let mut d = measured(
        Cost::ZoneLockHandoff,
        figure,
        &[h, l],
        host,
        &format!("a spin lock (and two lines written under it) handed to another CPU, less the uncontended lock round; {}", pl.text),
    );
    d.spread =
        Some((Placements::spread(&kept) * kept.median + l.rel_spread() * l.median()) / figure);
    if far_only {
        let b = base.entries[Cost::ZoneLockHandoff.key()].ns;
        d.band = Some((b.min(d.ns), d.ns.max(b)));
    }
    d
}

/// The DRAM chase's median, if it ran: the yardstick of [`Placements`].
fn dram_ns(micro: &Micro) -> Option<f64> {
    micro.get(names::DRAM).map(|m| m.median())
}

/// Consecutive sorted samples of a cross-CPU probe more than this far
/// apart start a new mode, where no DRAM latency is known to tell the
/// placements apart ([`Placements::of`]). The placements seen here give
/// ~20 and ~40 ns (near) and ~170-190 ns (far, 4-9x the near ones); the
/// scatter within one placement is a few per cent.
const MODE_GAP: f64 = 3.0;

/// A cross-CPU probe's rounds between two vCPUs that the guest's topology
/// says share their last-level cache, split by the host placement each
/// round met.
///
/// Two vCPUs of a guest run on host cores the hypervisor picks, and it
/// moves them: the same cache-line ping-pong between CPUs 0 and 1 gave
/// ~20-45 ns or ~170-190 ns one way here (2026-11-24, two hosts, load
/// 2-17), each level holding for tens of seconds to minutes, with the
/// guest's steal time at 0 throughout. Whether both vCPUs run at once does
/// not explain it: each sample keeps the fastest tenth of 200 short
/// batches, and in every mode under 3 % of batches stalled. A round is
/// *near* when it is faster than half the DRAM latency the run measured: a
/// line served from a cache both cores share is several times faster
/// than DRAM, while on AMD's chiplets a line moved between two LLCs
/// crosses the I/O die as a DRAM access does (here 170-190 ns against
/// DRAM's 153-193). Without a DRAM figure the fastest mode
/// ([`MODE_GAP`]) is near. The near rounds are the pair the topology
/// describes; the far ones are a placement on cores of different LLCs,
/// which the guest cannot see.
struct Placements {
    /// The near rounds, if any.
    near: Option<Summary>,
    /// The far rounds, if any.
    far: Option<Summary>,
    /// For the source: the rounds of each, and which the run met.
    text: String,
}

impl Placements {
    fn of(m: &Measurement, dram_ns: Option<f64>) -> Placements {
        let split = match dram_ns {
            Some(d) if d > 0.0 => d / 2.0,
            _ => {
                let modes = native::stats::modes(&m.samples, MODE_GAP);
                modes
                    .first()
                    .and_then(|v| v.last())
                    .map_or(f64::INFINITY, |&x| x * 1.0001)
            }
        };
        let (near, far): (Vec<f64>, Vec<f64>) = m.samples.iter().partition(|&&x| x < split);
        let (near, far) = (Summary::of(&near), Summary::of(&far));
        let n = m.samples.len();
        let desc = |s: &Summary, what: &str| {
            format!(
                "{} of {n} rounds {what} at median {} ns ({}-{})",
                s.nr_samples,
                fmt_num(s.median),
                fmt_num(s.min),
                fmt_num(s.max)
            )
        };
        let rule = match dram_ns {
            Some(d) if d > 0.0 => format!("a round faster than half the DRAM latency ({} ns) is near: the two vCPUs on cores sharing an LLC, as the guest's topology says; a slower one is far: the hypervisor ran them on cores of different LLCs, which the guest cannot see", fmt_num(d)),
            _ => format!("no DRAM latency measured: the fastest mode (rounds within {MODE_GAP}x of each other) is near"),
        };
        let met = match (&near, &far) {
            (Some(a), Some(b)) => format!("{}, {}; kept: the near ones", desc(a, "near"), desc(b, "far")),
            (Some(a), None) => format!("{}; this run did not meet the far placement", desc(a, "near")),
            (None, Some(b)) => format!("{}; this run did not meet the near placement: the figure is the far one, an upper bound of the near one", desc(b, "far")),
            (None, None) => "no samples".into(),
        };
        Placements {
            near,
            far,
            text: format!("taken in three phases of the run; {rule}: {met}"),
        }
    }

    /// Half the p10-p90 range over the median.
    fn spread(s: &Summary) -> f64 {
        if s.median > 0.0 {
            (s.p90 - s.p10) / 2.0 / s.median
        } else {
            0.0
        }
    }
}

/// Depth of the model's fan-out-16 maple tree over `n` VMAs
/// (`MmStruct::maple_depth`).
fn maple_depth(n: usize) -> u64 {
    let (mut depth, mut cap) = (1, 16usize);
    while n > cap {
        depth += 1;
        cap *= 16;
    }
    depth
}

/// `vma_lookup_level_ns` from random lookups: `mincore()` of pages drawn
/// at random among tens of thousands of one-page VMAs, less the same draw
/// over one VMA of the same span (`kernel::mincore_random_ns` says why
/// random), over the levels the model's fan-out-16 tree adds between the
/// two. The same `mincore()` repeated in a loop (the whole walk in L1) is
/// kept in the source as a lower bound.
fn vma_level(micro: &Micro, base: &Profile, host: &HostInfo) -> Derived {
    // The process's own VMAs plus the one VMA, against plus the many.
    let levels = maple_depth(micro.many_vmas) as f64 - maple_depth(micro.few_vmas + 1) as f64;
    let hot = match (
        micro.get(names::MINCORE_MANY),
        micro.get(names::MINCORE_FEW),
    ) {
        (Some(m), Some(f)) if levels > 0.0 => ((m.median() - f.median()) / levels).max(1.0),
        _ => 1.0,
    };
    let bound = match (micro.get(names::MINCORE_MANY), micro.get(names::MINCORE_FEW)) {
        (Some(m), Some(f)) => format!(
            "; lower bound: the same mincore() repeated in a loop took {} ns with {} VMAs against {} ns with {}",
            fmt_num(m.median()),
            micro.many_vmas,
            fmt_num(f.median()),
            micro.few_vmas,
        ),
        _ => String::new(),
    };
    match micro.get(names::VMA_RANDOM) {
        Some(r) if levels > 0.0 && r.median() > 0.0 => {
            let mut d = measured(
                Cost::VmaLookupLevel,
                r.median() / levels,
                &[r],
                host,
                &format!(
                    "one level of the VMA tree as a lookup meets it out of cache: random mincore() among {} VMAs less among {}, over the {levels} levels the model's fan-out-16 tree adds (an upper bound for a tree the work between lookups leaves partly cached; band: in cache to out of cache){bound}",
                    micro.many_vmas,
                    micro.few_vmas + 1
                ),
            );
            // A share of one measurement: its relative spread.
            d.spread = Some(r.rel_spread());
            d.band = Some((hot.round() as u64, d.ns.max(hot.round() as u64)));
            d
        }
        Some(r) => estimate(
            Cost::VmaLookupLevel,
            base,
            &format!(
                "random lookups among {} VMAs were not slower than among {} ({} ns){bound}",
                micro.many_vmas,
                micro.few_vmas + 1,
                fmt_num(r.median())
            ),
        ),
        None => estimate(
            Cost::VmaLookupLevel,
            base,
            &micro
                .why_not(names::VMA_RANDOM)
                .unwrap_or("vm.max_map_count leaves no room for more VMAs".into()),
        ),
    }
}

fn vmacache(micro: &Micro, base: &Profile, host: &HostInfo) -> Vec<Derived> {
    let (Some(one), Some(four)) = (micro.get(names::VMACACHE1), micro.get(names::VMACACHE4)) else {
        return vec![
            estimate(Cost::VmacacheProbe, base, "the replica did not run"),
            estimate(Cost::VmacacheFindEntry, base, "the replica did not run"),
        ];
    };
    let probe = ((four.median() - one.median()) / 3.0).max(0.0);
    let entry = (one.median() - probe).max(0.0);
    let how = "Linux 6.18 has no VMA cache (removed in 6.1): timed as the same loads and compares in user space";
    let mut p = measured(
        Cost::VmacacheProbe,
        probe,
        &[four, one],
        host,
        &format!("{how}; one slot = (hit in slot 3 - hit in slot 0) / 3"),
    );
    let mut e = measured(
        Cost::VmacacheFindEntry,
        entry,
        &[one],
        host,
        &format!("{how}; the fixed part = hit in slot 0 less one slot"),
    );
    // A cost of a nanosecond or less is recorded as 1 (the table is whole ns).
    p.ns = p.ns.max(1);
    e.ns = e.ns.max(1);
    vec![p, e]
}

/// The cache-line transfer costs of every kind of CPU pair the topology
/// has, and `dram_remote_ns` (an estimate on one node). A pair that
/// shares its LLC keeps its near rounds ([`Placements`]); its far rounds,
/// where the topology has no pair of other LLCs, measure
/// `c2c_other_llc_ns` (a line moved between two LLCs of the host).
fn c2c(micro: &Micro, base: &Profile, host: &HostInfo) -> Vec<Derived> {
    let mut v = Vec::new();
    let mut far_llc = None;
    for &(kind, pair) in &micro.pairs {
        let cost = Cost::from_key(kind.cost_key()).expect("a c2c cost");
        let m = micro
            .outcomes
            .iter()
            .filter_map(|o| o.measured())
            .find(|m| m.name.contains(kind.cost_key()));
        let shares_llc = matches!(kind, CpuPair::Smt | CpuPair::SameLlc);
        v.push(match (pair, m) {
            (Some((a, b)), Some(m)) => {
                // A pair of different LLCs or sockets has no farther
                // placement to tell apart: its fastest mode.
                let pl = Placements::of(m, dram_ns(micro).filter(|_| shares_llc));
                let how = format!(
                    "one-way cache-line transfer between CPUs {a} and {b}; {}",
                    pl.text
                );
                if shares_llc && far_llc.is_none() {
                    far_llc = pl.far.map(|f| (f, m, how.clone()));
                }
                match pl.near {
                    Some(n) => {
                        let mut d = measured(cost, n.median, &[m], host, &how);
                        d.spread = Some(Placements::spread(&n));
                        d
                    }
                    None => estimate(
                        cost,
                        base,
                        &format!("the run met only the far placement of CPUs {a} and {b}: {how}"),
                    ),
                }
            }
            (Some(_), None) => estimate(cost, base, "the ping-pong failed"),
            (None, _) => not_here(
                cost,
                base,
                "this host has no such pair of CPUs (sysfs topology)",
            ),
        });
    }
    if let Some((f, m, how)) = far_llc {
        if let Some(d) = v
            .iter_mut()
            .find(|d| d.cost == Cost::C2cOtherLlc && d.kind == Kind::NotHere)
        {
            *d = measured(Cost::C2cOtherLlc, f.median, &[m], host, &format!("the far rounds of a pair the topology says shares its LLC: the hypervisor ran the two vCPUs on cores of different LLCs (the guest's topology has no such pair); {how}"));
            d.spread = Some(Placements::spread(&f));
        }
    }
    let remote = if native_nodes() > 1 {
        estimate
    } else {
        not_here
    };
    v.push(remote(
        Cost::DramRemote,
        base,
        &format!(
            "{} NUMA node on this host, so no remote DRAM",
            native_nodes()
        ),
    ));
    v
}

fn native_nodes() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

/// TLB flushes from `mprotect` of one page: a populated page against one
/// whose PTE is none in a PTE table that exists (both walks reach the PTE;
/// the second has nothing to rewrite or flush) is one PTE rewrite
/// (`pte_set_ns`, fitted before) and this CPU's flush; with a thread of the
/// process on another CPU, the shootdown IPI comes on top.
fn tlb(micro: &Micro, base: &Profile, host: &HostInfo, known: &CostTable) -> Vec<Derived> {
    let mut v = Vec::new();
    let full = micro.get(names::MPROTECT1);
    match (full, micro.get(names::MPROTECT1_EMPTY)) {
        (Some(f), Some(e)) => {
            let local = f.median() - e.median() - known.get(Cost::PteSet) as f64;
            if local > 0.0 {
                v.push(measured(
                    Cost::TlbFlushLocal,
                    local,
                    &[f, e],
                    host,
                    &format!("mprotect() of a populated page less of one whose PTE is none in a PTE table that exists (both walk to the PTE; only the first rewrites it and flushes), less one pte_set ({} ns)", known.get(Cost::PteSet)),
                ));
            } else {
                v.push(estimate(Cost::TlbFlushLocal, base, &format!("the populated and the empty mprotect() differ by no more than one pte_set ({} - {} ns)", fmt_num(f.median()), fmt_num(e.median()))));
            }
        }
        _ => v.push(estimate(
            Cost::TlbFlushLocal,
            base,
            &micro.why_not(names::MPROTECT1_EMPTY).unwrap_or_default(),
        )),
    }
    match micro.get(names::MPROTECT1_IPI) {
        Some(i) if i.median() > 0.0 => v.push(measured(
            Cost::TlbFlushIpi,
            i.median(),
            &[i],
            host,
            "one remote CPU in a TLB shootdown, the initiator's wait: an mprotect() of one populated page (RW -> R) that sent a thread of the process on another CPU an IPI less one that sent none (the guest's paravirtual flush skips a preempted vCPU), each call timed by itself",
        )),
        Some(i) => v.push(estimate(
            Cost::TlbFlushIpi,
            base,
            &format!(
                "an mprotect() that sent another CPU an IPI was not slower than one that sent none ({} ns per IPI)",
                fmt_num(i.median())
            ),
        )),
        _ => {
            let why = micro.why_not(names::MPROTECT1_IPI).unwrap_or_default();
            // A guest whose flushes send the other vCPU no IPI (the
            // paravirtual flush) has no IPI to time; another failure is
            // one this run did not get past.
            let kind = if why.contains("paravirtual") { not_here } else { estimate };
            v.push(kind(Cost::TlbFlushIpi, base, &why))
        }
    }
    v
}

/// Why `mmlab calibrate` has no measurement for `c` on this host, and
/// whether one could be made here (`true`: not yet measured) or not
/// (`false`: the step cannot be timed on this host).
fn not_measurable(c: Cost) -> (&'static str, bool) {
    let why = match c {
        Cost::MigrateIsolate | Cost::MigrateUnmap | Cost::MigrateRemap | Cost::MigrateFolio
            if native_nodes() == 1 =>
        {
            return ("page migration needs two NUMA nodes to be timed from user space (move_pages() to the page's own node is a no-op) and this host has one", false);
        }
        Cost::WorkqueueQueue | Cost::WorkqueueWakeup => {
            return ("this process may run on one CPU only: no wake-up of another CPU to time", false);
        }
        Cost::DmaSubmit | Cost::DmaCompletion => {
            return ("no DMA engine is reachable from user space", false);
        }
        Cost::FaultEntry
        | Cost::ClearPage
        | Cost::PteSet
        | Cost::SetPtesPage
        | Cost::AllocAnonFolio
        | Cost::PteCopy
        | Cost::PteZap
        | Cost::FreePagesEntry
        | Cost::AllocPagesEntry
        | Cost::WatermarkCheck
        | Cost::PcpListOp => {
            "the fit gave it no positive value on this run, or its patterns could not run (see the fit table)"
        }
        _ => "no probe for it yet",
    };
    (why, true)
}

/// The buddy steps (`buddy_list_op_ns`, `buddy_merge_step_ns`,
/// `buddy_split_step_ns`, one unknown scaled from the base profile's
/// ratios) from the same churn run with the PCP lists forced small and
/// large: the fault path's own work is the same in both and cancels; what
/// the small lists add is the pages' trips through the buddy lists under
/// the zone lock (`free_pcppages_bulk()` merging, `rmqueue_bulk()`
/// splitting) and the batch handling around them, which the model charges
/// with the costs already measured or fitted. One equation,
/// `Δlive = Δknown + Δcount × x`, per round (the two churns of a round
/// are paired), and its median; its spread over the rounds.
fn buddy_steps(
    mem: &HostMemory,
    pats: &[LivePattern],
    live: &[Result<(Vec<f64>, u64), String>],
    base: &Profile,
    host: &HostInfo,
    known: &CostTable,
) -> Result<Vec<Derived>> {
    let group = [
        Cost::BuddyListOp,
        Cost::BuddyMergeStep,
        Cost::BuddySplitStep,
    ];
    let unk = Unknown {
        members: group
            .iter()
            .map(|&c| (c, known.get(c).max(1) as f64))
            .collect(),
    };
    let give_up = |why: String| -> Result<Vec<Derived>> {
        Ok(group.iter().map(|&c| estimate(c, base, &why)).collect())
    };
    let (Ok((small, _)), Ok((large, _))) = (&live[0], &live[1]) else {
        return give_up("a PCP churn pattern could not run (see the fit table)".into());
    };
    let mut without = known.clone();
    for &c in &group {
        without.set(c, 0);
    }
    let (col, scale) = unk.column_table();
    let per_page = |p: &LivePattern, t: &CostTable| -> Result<f64> {
        Ok(model_pattern_ns(mem, p, t)?.0 / p.timed_pages() as f64)
    };
    // Both churns touch the same pages: the user stores cancel too.
    let d_known = per_page(&pats[0], &without)? - per_page(&pats[1], &without)?;
    let d_count = (per_page(&pats[0], &col)? - per_page(&pats[1], &col)?) / scale;
    if d_count <= 0.0 {
        return give_up(format!("the model charges the small-list churn no more buddy steps than the large-list one ({d_count:.3} per page)"));
    }
    let pages = pats[0].timed_pages() as f64;
    let xs: Vec<f64> = small
        .iter()
        .zip(large)
        .map(|(s, l)| ((s - l) / pages - d_known) / d_count)
        .collect();
    let Some(sx) = Summary::of(&xs) else {
        return give_up("no paired rounds of the two churns".into());
    };
    let (ls, ll) = (
        Summary::of(small).expect("samples").median / pages,
        Summary::of(large).expect("samples").median / pages,
    );
    if sx.median <= 0.0 {
        return give_up(format!(
            "the small-list churn ({} ns/page) was not slower than the large-list one ({} ns/page) by more than the model's other charges for the difference ({} ns/page)",
            fmt_num(ls),
            fmt_num(ll),
            fmt_num(d_known)
        ));
    }
    let spread = (sx.p90 - sx.p10) / 2.0 / sx.median;
    Ok(unk
        .members
        .iter()
        .map(|&(c, b)| Derived {
            cost: c,
            ns: (sx.median * b).round().max(1.0) as u64,
            kind: Kind::Fitted,
            source: format!(
                "fitted ({}): {} ({} ns/page, median of {} rounds, CPU time) less {} ({} ns/page): {} ns/page, of which the model's measured and fitted costs account for {} ns/page; the rest over what the model charges the small lists more in buddy steps, {:.1} ns/page at the base profile's figures (buddy_list_op_ns, buddy_merge_step_ns, buddy_split_step_ns as one group scaled x{:.2} from them: no measurement here tells them apart; the spread is that of the per-round differences, two figures of ~1.5 us/page each); base profile: {} ns",
                provenance(host),
                pats[0].pattern.name,
                fmt_num(ls),
                small.len(),
                pats[1].pattern.name,
                fmt_num(ll),
                fmt_num(ls - ll),
                fmt_num(d_known),
                d_count,
                sx.median,
                base.entries[c.key()].ns
            ),
            spread: Some(spread),
            band: None,
        })
        .collect())
}

/// The fit: one equation per live measurement, solved for the unknowns;
/// returns the table rows, the fitted costs (with their spreads over the
/// rounds) and the size regression's line. Sets the fitted costs in `known`.
#[allow(clippy::type_complexity)]
fn fit_costs(
    mem: &HostMemory,
    micro: &Micro,
    pats: &[LivePattern],
    live: &[Result<(Vec<f64>, u64), String>],
    known: &mut CostTable,
) -> Result<(
    Vec<Vec<String>>,
    Vec<(Cost, f64, Option<f64>, String)>,
    Option<String>,
)> {
    let unk = unknowns(known);
    let mut base_known = known.clone();
    for u in &unk {
        for &(c, _) in &u.members {
            base_known.set(c, 0);
        }
    }
    // Per equation: name, live samples (per unit), model known part, columns, faults.
    let mut eqs: Vec<(Equation, Vec<f64>)> = Vec::new();
    let mut rows = vec![vec![
        "equation".to_string(),
        "live".into(),
        "p10-p90".into(),
        "rounds".into(),
        "unit".into(),
        "faults live/model".into(),
    ]];
    for (p, l) in pats.iter().zip(live) {
        let Ok((samples, faults)) = l else { continue };
        if samples.is_empty() {
            continue;
        }
        let (eq, per, model_faults) = pattern_equation(mem, p, samples, &unk, &base_known)?;
        rows.push(eq_row(
            &p.pattern.name,
            eq.live,
            &per,
            format!("{faults}/{model_faults}"),
        ));
        eqs.push((eq, per));
    }
    for (name, op) in [
        (names::MUNMAP_PAGES, RegionOp::Munmap),
        (names::MPROTECT_PAGES, RegionOp::Mprotect),
        (names::FORK_PAGES, RegionOp::Fork),
    ] {
        let Some(m) = micro.get(name) else { continue };
        let eq = region_equation(mem, name, m, op, &unk, &base_known)?;
        rows.push(eq_row(name, m.median(), &m.samples, "-".into()));
        eqs.push((eq, m.samples.clone()));
    }
    let plain: Vec<Equation> = eqs.iter().map(|e| e.0.clone()).collect();
    let x = fit::solve(&plain, unk.len());
    rows[0].push("model (fitted)".into());
    for (row, e) in rows.iter_mut().skip(1).zip(&plain) {
        let m = e.known
            + e.cols
                .iter()
                .zip(&x)
                .map(|(c, v)| c * v.unwrap_or(0.0))
                .sum::<f64>();
        row.push(format!(
            "{} ({:+.1} %)",
            fmt_num(m),
            (m - e.live) / e.live * 100.0
        ));
    }
    let spreads = round_spreads(&eqs, unk.len());
    let mut fitted = Vec::new();
    for (i, u) in unk.iter().enumerate() {
        let Some(v) = x[i] else { continue };
        for &(c, b) in &u.members {
            let ns = v * b;
            known.set(c, ns.round().max(1.0) as u64);
            let group = if u.members.len() > 1 {
                let names: Vec<_> = u.members.iter().map(|(c, _)| c.key()).collect();
                format!("; fitted as one group scaled x{v:.2} from the base profile's ratios ({}: no measurement here tells them apart)", names.join(", "))
            } else {
                String::new()
            };
            fitted.push((c, ns, spreads[i], group));
        }
    }
    let names: Vec<_> = plain.iter().map(|e| e.name.as_str()).collect();
    for f in &mut fitted {
        f.3 = format!(
            "weighted least squares of the model's charges against {} live measurements ({}){}",
            names.len(),
            names.join("; "),
            f.3
        );
    }
    Ok((rows, fitted, size_regression(&eqs)))
}

/// A row of the fit table: the equation, its live figure (ns per page),
/// the p10-p90 of its rounds' samples and how many, and the faults.
fn eq_row(name: &str, live: f64, samples: &[f64], faults: String) -> Vec<String> {
    let range = Summary::of(samples).map_or("-".into(), |s| {
        format!("{}-{}", fmt_num(s.p10), fmt_num(s.p90))
    });
    vec![
        name.to_string(),
        fmt_num(live),
        range,
        samples.len().to_string(),
        "ns/page".into(),
        faults,
    ]
}

/// The equation of a fault pattern: its live ns per page (the median of
/// `samples`, and each sample) against the model's charges; and the model's
/// faults in the timed phases.
fn pattern_equation(
    mem: &HostMemory,
    p: &LivePattern,
    samples: &[f64],
    unk: &[Unknown],
    base_known: &CostTable,
) -> Result<(Equation, Vec<f64>, u64)> {
    let pages = p.timed_pages() as f64;
    let (k, model_faults) = model_pattern_ns(mem, p, base_known)?;
    let mut cols = Vec::new();
    for u in unk {
        let (t, scale) = u.column_table();
        let (ns, _) = model_pattern_ns(mem, p, &t)?;
        let user = pages * t.get(Cost::Touch) as f64;
        cols.push((ns - user) / scale / pages);
    }
    let per: Vec<f64> = samples.iter().map(|s| s / pages).collect();
    let live = Summary::of(&per).expect("samples").median;
    let eq = Equation {
        name: p.pattern.name.clone(),
        live,
        known: k / pages,
        cols,
    };
    Ok((eq, per, model_faults))
}

/// The equation of a region operation: live ns per page against the
/// model's charges for the same operation on the same number of pages.
fn region_equation(
    mem: &HostMemory,
    name: &str,
    m: &Measurement,
    op: RegionOp,
    unk: &[Unknown],
    base_known: &CostTable,
) -> Result<Equation> {
    let per = |t: &CostTable| -> Result<f64> {
        let opts = mem.opts(t.clone(), 0);
        let big = live::REGION_PAGES as u64;
        if op == RegionOp::Fork {
            let small = live::FORK_SMALL_PAGES as u64;
            let a = fit::model_region_ns(&opts, big, op).map_err(anyhow::Error::msg)?;
            let b = fit::model_region_ns(&opts, small, op).map_err(anyhow::Error::msg)?;
            Ok((a as f64 - b as f64) / (big - small) as f64)
        } else {
            Ok(
                fit::model_region_ns(&opts, big, op).map_err(anyhow::Error::msg)? as f64
                    / big as f64,
            )
        }
    };
    let known = per(base_known)?;
    let mut cols = Vec::new();
    for u in unk {
        let (t, scale) = u.column_table();
        cols.push(per(&t)? / scale);
    }
    Ok(Equation {
        name: name.to_string(),
        live: m.median(),
        known,
        cols,
    })
}

/// The fit repeated with each round's samples of every equation (the
/// fault patterns' runs and the `munmap`/`mprotect`/`fork` probes' rounds,
/// paired by round number): each unknown's relative p10-p90 half range.
///
/// The region probes must vary too: they alone pin `pte_set_ns`,
/// `pte_copy_ns` and the `munmap` group, and with them held at their
/// medians those costs' recorded spreads (+-1-8 %) were a fraction of how
/// far two calibrations an hour apart put them (20-30 %).
fn round_spreads(eqs: &[(Equation, Vec<f64>)], nr: usize) -> Vec<Option<f64>> {
    let rounds = eqs.iter().map(|e| e.1.len()).max().unwrap_or(0);
    let mut sols: Vec<Vec<f64>> = vec![Vec::new(); nr];
    for r in 0..rounds {
        let these: Vec<Equation> = eqs
            .iter()
            .map(|(e, s)| Equation {
                live: *s.get(r).unwrap_or(&e.live),
                ..e.clone()
            })
            .collect();
        for (i, v) in fit::solve(&these, nr).into_iter().enumerate() {
            if let Some(v) = v {
                sols[i].push(v);
            }
        }
    }
    sols.iter()
        .map(|s| {
            let sm = Summary::of(s)?;
            (sm.median > 0.0).then(|| (sm.p90 - sm.p10) / 2.0 / sm.median)
        })
        .collect()
}

/// The write-fault patterns' ns per fault against pages per folio, fitted
/// by a line: the fixed cost of a fault and the cost per page.
fn size_regression(eqs: &[(Equation, Vec<f64>)]) -> Option<String> {
    let mut pts = Vec::new();
    for (e, _) in eqs {
        let Some(rest) = e.name.strip_prefix("write ") else {
            continue;
        };
        let size = rest.rsplit(", ").next()?;
        let kb: f64 = if let Some(m) = size.strip_suffix('M') {
            m.parse::<f64>().ok()? * 1024.0
        } else {
            size.strip_suffix('K')?.parse().ok()?
        };
        let pages = kb / 4.0;
        pts.push((pages, e.live * pages));
    }
    let (a, b) = fit::line_fit(&pts)?;
    let list: Vec<String> = pts
        .iter()
        .map(|(n, t)| format!("{n:.0} pages: {}", fmt_num(*t)))
        .collect();
    Some(format!(
        "write fault ns = {} + {} x pages per folio (least squares over {}; ns per fault by folio: {})",
        fmt_num(a),
        fmt_num(b),
        pts.len(),
        list.join(", ")
    ))
}

fn merge_fitted(
    derived: &mut Vec<Derived>,
    fitted: Vec<(Cost, f64, Option<f64>, String)>,
    base: &Profile,
    host: &HostInfo,
) {
    for (c, ns, spread, how) in fitted {
        derived.retain(|d| d.cost != c);
        let sp = spread.map_or(String::new(), |s| {
            format!(", spread over the rounds' fits +-{:.0} %", s * 100.0)
        });
        derived.push(Derived {
            cost: c,
            ns: ns.round().max(1.0) as u64,
            kind: Kind::Fitted,
            source: format!(
                "fitted ({}): {how}{sp}; base profile: {} ns",
                provenance(host),
                base.entries[c.key()].ns
            ),
            spread,
            band: None,
        });
    }
}

/// The closing check: every check pattern's live CPU time against the
/// calibrated model's prediction. Each pattern ran twice back to back per
/// repetition (`live::FitAndCheck`); the figure judged is the
/// median over the repetitions of the faster run of each, the statistic
/// of the fit's patterns (the model has no hypervisor, and the host's
/// page faults only ever slow a run down). The first runs' and the
/// re-runs' medians and ranges are printed beside it, so that the slow
/// mode shows; and the pass counts of the first runs' and the re-runs'
/// medians: `(judged, first, re-run)`.
#[allow(clippy::type_complexity)]
fn check(
    mem: &HostMemory,
    table: &CostTable,
    pats: &[LivePattern],
    live: &[Result<live::CheckLive, String>],
) -> Result<(Rows, [(usize, usize); 3])> {
    let mut rows = vec![vec![
        "pattern (not fitted)".to_string(),
        "live ms".into(),
        "p10-p90".into(),
        "first runs ms".into(),
        "re-runs ms".into(),
        "model ms".into(),
        "error".into(),
        "vs first".into(),
        "vs re-run".into(),
        "faults live/model".into(),
        "slow runs (host)".into(),
    ]];
    let mut pass = [(0, 0); 3];
    let range = |s: &Summary| {
        format!(
            "{:.1} ({:.1}-{:.1})",
            s.median / 1e6,
            s.min / 1e6,
            s.max / 1e6
        )
    };
    for (p, l) in pats.iter().zip(live) {
        let c = match l {
            Ok(c) if !c.rerun.is_empty() => c,
            Ok(_) => continue,
            Err(why) => {
                let mut row = vec![p.pattern.name.clone(), "SKIPPED".into()];
                row.extend(std::iter::repeat_n("-".to_string(), 7));
                row.push(why.clone());
                row.push("-".into());
                rows.push(row);
                continue;
            }
        };
        let mins: Vec<f64> = c
            .first
            .iter()
            .zip(&c.rerun)
            .map(|(a, b)| a.min(*b))
            .collect();
        let sums = [&mins, &c.first, &c.rerun].map(|v| Summary::of(v).expect("samples"));
        let (model, model_faults) = model_pattern_ns(mem, p, table)?;
        let errs = sums.map(|s| (model - s.median) / s.median);
        for (k, e) in errs.iter().enumerate() {
            pass[k].1 += 1;
            pass[k].0 += usize::from(e.abs() <= 0.10);
        }
        rows.push(vec![
            p.pattern.name.clone(),
            format!("{:.1}", sums[0].median / 1e6),
            format!("{:.1}-{:.1}", sums[0].p10 / 1e6, sums[0].p90 / 1e6),
            range(&sums[1]),
            range(&sums[2]),
            format!("{:.1}", model / 1e6),
            format!("{:+.1} %", errs[0] * 100.0),
            format!("{:+.1} %", errs[1] * 100.0),
            format!("{:+.1} %", errs[2] * 100.0),
            format!("{}/{model_faults}", c.faults),
            slow_runs(c),
        ]);
    }
    Ok((rows, pass))
}

/// A run this many times the pattern's fastest or more is slow: the check
/// patterns' runs are otherwise within ~1.3x of each other, and a run on
/// memory the host took back is 2-40x (see `live::run_rep`). It only
/// labels runs in the report: which repetitions are run again is decided
/// by the reporting counter, not by time.
const SLOW_RUN: f64 = 1.5;

/// Says how many of a check pattern's runs were slow (bimodal runs) and
/// in how many of those the guest's free page reporting handed memory
/// back to the host meanwhile, which makes the next first touch of that
/// memory fault in the host too: the host's cost, not the kernel's; and
/// the repetitions set aside because the guest reported memory to the
/// host during them (`live::run_rep`).
fn slow_runs(c: &live::CheckLive) -> String {
    let runs: Vec<(f64, Option<u64>)> = c
        .first
        .iter()
        .zip(&c.first_reported_kib)
        .chain(c.rerun.iter().zip(&c.rerun_reported_kib))
        .map(|(&ns, &kib)| (ns, kib))
        .collect();
    let fastest = c.fastest();
    let slow: Vec<_> = runs.iter().filter(|r| r.0 >= SLOW_RUN * fastest).collect();
    let kept = if slow.is_empty() {
        format!("0/{}", runs.len())
    } else if slow.iter().all(|r| r.1.is_none()) {
        format!("{}/{} (no reporting counter)", slow.len(), runs.len())
    } else {
        let reported: Vec<u64> = slow.iter().filter_map(|r| r.1).filter(|&k| k > 0).collect();
        format!(
            "{}/{}, {} after free page reporting ({} MiB to the host)",
            slow.len(),
            runs.len(),
            reported.len(),
            reported.iter().sum::<u64>() >> 10
        )
    };
    if c.set_aside.is_empty() {
        return kept;
    }
    let aside: Vec<String> = c
        .set_aside
        .iter()
        .map(|r| {
            let host = match r.reported_total() {
                Some(k) => format!(", {} MiB reported", k >> 10),
                None => String::new(),
            };
            format!("{:.1}+{:.1} ms{host}", r.ns[0] / 1e6, r.ns[1] / 1e6)
        })
        .collect();
    format!(
        "{kept}; {} repetition(s) reported during, set aside and run again ({})",
        c.set_aside.len(),
        aside.join("; ")
    )
}

/// Adds the measurements that cross-check a cost to its source: the page
/// clear's micro-benchmarks and the size regression beside the fitted
/// `clear_page_ns`, the hot copy beside `copy_page_ns`, `mmap`+`munmap`
/// beside `syscall_entry_ns`.
fn annotate(derived: &mut [Derived], micro: &Micro, regression: Option<&str>) {
    let m = |n: &str| micro.get(n).map(|m| format!("{n}: {}", m.describe()));
    for d in derived.iter_mut() {
        let extra: Vec<String> = match d.cost {
            Cost::ClearPage => [m(names::CLEAR_COLD), m(names::CLEAR_HOT), m(names::CLEAR_ALL), regression.map(|r| format!("size regression: {r}"))]
                .into_iter()
                .flatten()
                .collect(),
            Cost::CopyPage => [m(names::COPY_COLD), m(names::COPY_ALL), m(names::COPY_HOT)]
                .into_iter()
                .flatten()
                .collect(),
            Cost::SyscallEntry => [m(names::MMAP).map(|s| format!("{s} (the model charges mmap and munmap one syscall_entry each plus their VMA tree walks)"))]
                .into_iter()
                .flatten()
                .collect(),
            _ => Vec::new(),
        };
        if !extra.is_empty() {
            d.source += &format!("; cross-check: {}", extra.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measurement(samples: &[f64]) -> Measurement {
        Measurement {
            name: "cache line 0<->1 (c2c_same_llc_ns)".into(),
            unit: "ns",
            how: "ping-pong".into(),
            summary: Summary::of(samples).expect("samples"),
            samples: samples.to_vec(),
        }
    }

    /// A micro phase with the DRAM chase at `dram` ns and the working-set
    /// chases at `chases` (MiB, ns).
    fn chases(dram: f64, chases: &[(usize, f64)]) -> Micro {
        let m = |name: String, ns: f64| {
            native::calibrate::Outcome::Measured(Measurement {
                name,
                unit: "ns",
                how: "chase".into(),
                summary: Summary::of(&[ns]).expect("a sample"),
                samples: vec![ns],
            })
        };
        let mut outcomes = vec![m(names::DRAM.into(), dram)];
        outcomes.extend(chases.iter().map(|&(mib, ns)| m(names::chase(mib), ns)));
        Micro {
            outcomes,
            few_vmas: 0,
            many_vmas: 0,
            pairs: Vec::new(),
        }
    }

    #[test]
    fn the_models_llc_is_the_largest_working_set_nearer_the_caches_latency() {
        let sysfs = 32 << 20;
        // This guest: 1 and 2 MiB from a cache, 4 MiB on from DRAM.
        let here = chases(
            190.0,
            &[(1, 6.0), (2, 60.0), (4, 129.0), (8, 140.0), (16, 149.0)],
        );
        let (bytes, why) = effective_llc(&here, sysfs);
        assert_eq!(bytes, 2 << 20, "{why}");
        assert!(why.contains("2 MiB of the 32 MiB"), "{why}");
        // A set nearer DRAM's latency ends the LLC even if a larger one is
        // not (noise): the sets up to it must all pass.
        let noisy = chases(190.0, &[(1, 6.0), (2, 120.0), (4, 90.0)]);
        assert_eq!(effective_llc(&noisy, sysfs).0, 1 << 20);
        // Every set a cache's: the LLC is what sysfs says.
        let big = chases(
            190.0,
            &[(1, 6.0), (2, 7.0), (4, 9.0), (8, 12.0), (16, 20.0)],
        );
        assert_eq!(effective_llc(&big, sysfs).0, sysfs);
        // No chases (not run): sysfs, and the sentence says so.
        let (bytes, why) = effective_llc(&chases(190.0, &[]), sysfs);
        assert_eq!(bytes, sysfs);
        assert!(why.contains("did not run"), "{why}");
    }

    #[test]
    fn slow_runs_are_counted_with_the_reporting_before_them() {
        let c = live::CheckLive {
            first: vec![50.0, 200.0, 52.0],
            rerun: vec![49.0, 51.0, 90.0],
            faults: 512,
            first_reported_kib: vec![Some(0), Some(393_216), Some(0)],
            rerun_reported_kib: vec![Some(0), Some(0), Some(0)],
            set_aside: Vec::new(),
        };
        // 200 and 90 are 1.5x the fastest (49) or more; only the first
        // came after memory went back to the host.
        assert_eq!(
            slow_runs(&c),
            "2/6, 1 after free page reporting (384 MiB to the host)"
        );
        let even = live::CheckLive {
            first: vec![50.0, 60.0],
            rerun: vec![55.0, 52.0],
            first_reported_kib: vec![None, None],
            rerun_reported_kib: vec![None, None],
            ..c.clone()
        };
        assert_eq!(slow_runs(&even), "0/4");
        let no_counter = live::CheckLive {
            first: vec![50.0, 200.0],
            rerun: vec![55.0, 52.0],
            ..even.clone()
        };
        assert_eq!(slow_runs(&no_counter), "1/4 (no reporting counter)");
        let retried = live::CheckLive {
            set_aside: vec![
                live::Rep {
                    ns: [300e6, 250e6],
                    faults: 512,
                    reported_kib: [Some(2048), Some(0)],
                },
                live::Rep {
                    ns: [51e6, 52e6],
                    faults: 512,
                    reported_kib: [None, Some(1024)],
                },
            ],
            ..even
        };
        assert_eq!(
            slow_runs(&retried),
            "0/4; 2 repetition(s) reported during, set aside and run again (300.0+250.0 ms, 2 MiB reported; 51.0+52.0 ms, 1 MiB reported)"
        );
    }

    #[test]
    fn a_shared_llc_probe_splits_its_rounds_at_half_the_dram_latency() {
        // Near placements (21, 22, 40 ns) and far ones (170, 180 ns);
        // DRAM 153 ns: the split is at 76.5 ns.
        let m = measurement(&[170.0, 21.0, 40.0, 180.0, 22.0]);
        let pl = Placements::of(&m, Some(153.0));
        let (near, far) = (pl.near.unwrap(), pl.far.unwrap());
        assert_eq!((near.nr_samples, near.median), (3, 22.0));
        // Nearest rank: the median of two is the lower.
        assert_eq!((far.nr_samples, far.median), (2, 170.0));
        // Half of 21-40 over 22.
        assert!((Placements::spread(&near) - 19.0 / 2.0 / 22.0).abs() < 1e-9);
        assert!(
            pl.text.contains("3 of 5 rounds near at median 22.0 ns"),
            "{}",
            pl.text
        );
        assert!(
            pl.text.contains("2 of 5 rounds far at median 170 ns"),
            "{}",
            pl.text
        );
        // Only the far placement: no near figure, and the text says so.
        let far_only = Placements::of(&measurement(&[190.0, 200.0, 195.0]), Some(153.0));
        assert!(far_only.near.is_none());
        assert_eq!(far_only.far.unwrap().median, 195.0);
        assert!(
            far_only.text.contains("did not meet the near placement"),
            "{}",
            far_only.text
        );
        // No DRAM figure: the fastest mode is near, the rest far.
        let no_dram = Placements::of(&m, None);
        assert_eq!(no_dram.near.unwrap().nr_samples, 3);
        assert_eq!(no_dram.far.unwrap().nr_samples, 2);
        let one = Placements::of(&measurement(&[190.0, 200.0, 195.0]), None);
        assert_eq!(one.near.unwrap().median, 195.0);
        assert!(one.far.is_none());
    }

    /// A micro phase with the same-LLC ping-pong of CPUs 0 and 1 at
    /// `samples` and DRAM at 153 ns, on a topology of one LLC.
    fn one_llc(samples: &[f64]) -> Micro {
        let mut micro = chases(153.0, &[]);
        micro
            .outcomes
            .push(native::calibrate::Outcome::Measured(measurement(samples)));
        micro.pairs = CpuPair::ALL
            .iter()
            .map(|&k| (k, (k == CpuPair::SameLlc).then_some((0, 1))))
            .collect();
        micro
    }

    #[test]
    fn each_placement_met_gives_its_cost_and_the_other_is_labelled() {
        let (name, text) = crate::experiment::BUILTIN_PROFILES
            .iter()
            .find(|(n, _)| *n == "host-epyc-zen3")
            .expect("the host profile");
        let base = crate::experiment::parse_profile(text, name).unwrap();
        let host = HostInfo::probe();
        let get = |v: &[Derived], c: Cost| v.iter().find(|d| d.cost == c).unwrap().clone();
        let both = c2c(&one_llc(&[21.0, 22.0, 170.0, 23.0, 180.0]), &base, &host);
        let (same, other) = (get(&both, Cost::C2cSameLlc), get(&both, Cost::C2cOtherLlc));
        assert_eq!((same.ns, same.kind), (22, Kind::Measured));
        assert_eq!((other.ns, other.kind), (170, Kind::Measured));
        assert!(other.source.contains("far rounds"), "{}", other.source);
        // Near only: the other LLC stays an estimate this host cannot give.
        let near = c2c(&one_llc(&[21.0, 22.0, 23.0]), &base, &host);
        assert_eq!(get(&near, Cost::C2cSameLlc).kind, Kind::Measured);
        assert_eq!(get(&near, Cost::C2cOtherLlc).kind, Kind::NotHere);
        // Far only: measured as the other LLC; the same LLC is the base
        // profile's figure, labelled as a placement the run did not meet.
        let far = c2c(&one_llc(&[170.0, 180.0, 175.0]), &base, &host);
        let same = get(&far, Cost::C2cSameLlc);
        assert_eq!(same.kind, Kind::Estimate);
        assert_eq!(same.ns, base.entries["c2c_same_llc_ns"].ns);
        assert!(
            same.source.contains("only the far placement"),
            "{}",
            same.source
        );
        assert_eq!(get(&far, Cost::C2cOtherLlc).ns, 175);
    }
}
