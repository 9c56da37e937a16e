//! Runs an experiment's (kernel, workload) pairs, in parallel on the host's
//! cores, each one a deterministic simulation of its own.

use crate::experiment::{Experiment, Kernel, Workload};
use crate::report::RunResult;
use anyhow::{anyhow, Result};
use mm::cacheline::{CpuTopology, LlcClocks};
use mm::page_alloc::PageAlloc;
use sim::Engine;
use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How to run.
#[derive(Clone, Copy, Debug)]
pub struct RunOpts<'a> {
    /// The seeds: every (kernel, workload) pair runs once with each.
    pub seeds: &'a [u64],
    /// No progress on stderr.
    pub quiet: bool,
    /// Host threads (each runs whole simulations).
    pub jobs: usize,
    /// Record a timeline of every run, with these bounds (its record limit
    /// is shared by the runs).
    pub timeline: Option<sim::TimelineOptions>,
}

/// Runs one kernel on one workload.
pub fn run_one(
    exp: &Experiment,
    k: &Kernel,
    w: &Workload,
    seed: u64,
    timeline: Option<sim::TimelineOptions>,
) -> Result<RunResult> {
    run_one_within(exp, k, w, seed, timeline, None).map(|(r, _)| r)
}

/// The LLC model's clocks for a machine with `llc_per_node` bytes of
/// last-level cache per node (its `[machine]` section, sourced there),
/// split evenly among the node's LLCs when the topology has several (AMD's
/// CCXs); `None` when the machine gives no LLC size.
fn llc_clocks(llc_per_node: u64, topo: Option<CpuTopology>, nr_cpus: u32) -> Option<LlcClocks> {
    if llc_per_node == 0 {
        return None;
    }
    let llcs = topo.map_or(1, |t| {
        let cores = (t.cpus_per_node / t.threads_per_core.max(1)).max(1);
        cores.div_ceil(t.cores_per_llc.max(1)) as u64
    });
    Some(LlcClocks::new(llc_per_node / llcs, topo, nr_cpus))
}

/// [`run_one`] that stops after `event_budget` engine events, if given;
/// the flag says whether it did (the fuzzer's liveness check).
pub fn run_one_within(
    exp: &Experiment,
    k: &Kernel,
    w: &Workload,
    seed: u64,
    timeline: Option<sim::TimelineOptions>,
    event_budget: Option<u64>,
) -> Result<(RunResult, bool)> {
    let layout = exp.machine.memory_layout();
    let mut pa = PageAlloc::new(&layout, k.config.sysctl, k.config.pcp);
    // Each CPU's share of its node's last-level cache (patch 2 of the PCP
    // series computes it from cacheinfo).
    let cpus_per_node = exp.machine.nodes.first().map_or(1, |n| n.cpus.max(1)) as u64;
    pa.setup_pcp_cacheinfo(exp.machine.llc_bytes / cpus_per_node);
    let topo = match &exp.profile.topology {
        Some(t) => Some(
            t.for_machine(&exp.machine)
                .map_err(|e| anyhow!("profile \"{}\": {e}", exp.profile.name))?,
        ),
        None => None,
    };
    if let Some(t) = topo {
        pa.set_cpu_topology(t);
        if let Some(n) = exp
            .profile
            .topology
            .as_ref()
            .and_then(|t| t.line_fill_buffers)
        {
            pa.set_lock_mlp(n);
        }
    }
    let mut llc = llc_clocks(exp.machine.llc_bytes, topo, pa.nr_cpus());
    if let (Some(c), Some((l2_bytes, hit_ns))) = (
        llc.as_mut(),
        exp.profile.topology.as_ref().and_then(|t| t.l2),
    ) {
        c.set_l2(l2_bytes, hit_ns);
    }
    if llc.is_some() {
        pa.set_llc_lines();
    }
    let mut eng = Engine::new(pa, exp.profile.table(), seed)
        .with_mm_config(k.config.mm)
        .with_vmacache(k.config.vmacache)
        .with_migrate_config(k.config.migrate);
    if let Some(c) = llc {
        eng = eng.with_llc(c);
    }
    if let Some((cfg, costs)) = &exp.cache {
        let cache =
            sim::cache::CacheModel::new(cfg.clone()).map_err(|e| anyhow!("cache model: {e}"))?;
        eng = eng.with_cache(cache, *costs);
    }
    if let Some(n) = &exp.profile.numa {
        eng = eng.with_numa(exp.profile.numa_hw(), &n.distance_flat());
    }
    eng.set_idle_tail_ns(exp.idle_tail_s * 1_000_000_000);
    if let Some(t) = timeline {
        eng = eng.with_timeline(t);
    }
    let tasks = workloads::build(&w.kind, &w.params, &exp.machine)
        .map_err(|e| anyhow!("workload \"{}\": {e}", w.name))?;
    for t in tasks {
        eng.spawn(t);
    }
    if let Some(b) = event_budget {
        eng.set_event_budget(b);
    }
    let stats = eng.run();
    let result = RunResult {
        kernel: k.name.clone(),
        workload: w.name.clone(),
        stats,
        vmstat: eng.pa.vmstat.clone(),
        nr_runs: workloads::nr_runs(&w.kind, &w.params, &exp.machine)
            .map_err(|e| anyhow!("workload \"{}\": {e}", w.name))?,
        seed,
        timeline: eng.take_timeline().map(std::sync::Arc::new),
    };
    Ok((result, eng.budget_exhausted()))
}

/// Runs every (kernel, workload) pair with every seed; results come back
/// in the experiment's order (pairs, then seeds) whatever the order they
/// finish in.
pub fn run_experiment(exp: &Experiment, opts: RunOpts) -> Result<Vec<RunResult>> {
    let pairs: Vec<(&Kernel, &Workload, u64)> = exp
        .pairs()
        .into_iter()
        .flat_map(|(k, w)| opts.seeds.iter().map(move |&s| (k, w, s)))
        .collect();
    let n = pairs.len();
    let jobs = fit_jobs(exp, opts.jobs.max(1).min(n), opts.quiet);
    // Each run gets its share of the timeline's record limit.
    let timeline = opts.timeline.map(|mut t| {
        t.max_records = (t.max_records / n.max(1)).max(1000);
        t
    });
    let start = Instant::now();
    let mut slots: Vec<Option<Result<RunResult>>> = (0..n).map(|_| None).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Result<RunResult>)>();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let pairs = &pairs;
            let next = &next;
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= pairs.len() {
                    break;
                }
                let (k, w, seed) = pairs[i];
                let r = run_one(exp, k, w, seed, timeline);
                if tx.send((i, r)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut progress = Progress::new(n, opts.quiet, &exp.name);
        let mut done = 0;
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((i, r)) => {
                    let (k, w, _) = pairs[i];
                    slots[i] = Some(r);
                    done += 1;
                    progress.update(done, &format!("{} × {}", k.name, w.name), start.elapsed());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => progress.update(done, "", start.elapsed()),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        progress.finish(start.elapsed());
    });
    slots
        .into_iter()
        .map(|r| r.expect("every run reports"))
        .collect()
}

/// The memory one run needs before its workload allocates anything: the
/// simulated machine's `struct page` array, plus the PCP samples of the
/// idle tail (the samples of the run itself grow with its operations).
pub fn run_memory_bytes(exp: &Experiment) -> u64 {
    let nr_zones = mm::page_alloc::zone_sizes(&exp.machine.memory_layout()).len() as u64;
    let tail_samples = exp.idle_tail_s * exp.machine.nr_cpus() as u64 * nr_zones;
    exp.machine.metadata_bytes()
        + tail_samples * std::mem::size_of::<sim::engine::PcpSample>() as u64
}

/// `jobs`, or fewer if that many runs side by side would need more than half
/// the host's memory (`Machine::validate` checks one run against the same
/// half). Results do not depend on how many run at once.
fn fit_jobs(exp: &Experiment, jobs: usize, quiet: bool) -> usize {
    let host = crate::experiment::host_memory_bytes();
    let per_run = run_memory_bytes(exp).max(1);
    let fit = ((host / 2) / per_run).max(1) as usize;
    if jobs > fit && !quiet {
        eprintln!(
            "mmlab: {}: running {fit} simulation(s) at a time instead of {jobs}: each needs about {} \
             and the host has {}",
            exp.name,
            sim::machine::human_bytes(per_run),
            sim::machine::human_bytes(host)
        );
    }
    jobs.min(fit)
}

/// A progress bar on stderr, shown only once a run has taken over a second.
struct Progress {
    total: usize,
    quiet: bool,
    tty: bool,
    shown: bool,
    name: String,
    last_line: usize,
}

impl Progress {
    fn new(total: usize, quiet: bool, name: &str) -> Progress {
        Progress {
            total,
            quiet,
            tty: std::io::stderr().is_terminal(),
            shown: false,
            name: name.to_string(),
            last_line: usize::MAX,
        }
    }

    fn update(&mut self, done: usize, what: &str, elapsed: Duration) {
        if self.quiet || elapsed < Duration::from_secs(1) {
            return;
        }
        self.shown = true;
        let mut err = std::io::stderr().lock();
        if self.tty {
            let width = 30;
            let filled = width * done / self.total.max(1);
            let _ = write!(
                err,
                "\r{}: [{}{}] {done}/{} runs, {:.1}s {:<40}",
                self.name,
                "=".repeat(filled),
                " ".repeat(width - filled),
                self.total,
                elapsed.as_secs_f64(),
                what
            );
        } else if done != self.last_line && !what.is_empty() {
            let _ = writeln!(
                err,
                "{}: {done}/{} runs done ({what}), {:.1}s",
                self.name,
                self.total,
                elapsed.as_secs_f64()
            );
            self.last_line = done;
        }
    }

    fn finish(&mut self, elapsed: Duration) {
        if self.shown && self.tty {
            let _ = writeln!(
                std::io::stderr(),
                "\r{}: {} runs in {:.1}s{:60}",
                self.name,
                self.total,
                elapsed.as_secs_f64(),
                ""
            );
        }
    }
}
