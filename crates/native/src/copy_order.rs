//! The order in which a huge page's 4 KiB sub-pages are copied, measured on real
//! hardware.
//!
//! # What this exercises
//!
//! `process_huge_page()` in `mm/memory.c` (Linux 4.17+, seed 000; today behind
//! `folio_zero_user()` and `copy_user_large_folio()`) clears or copies the sub-pages
//! of a huge page so that the one holding the faulting address, the *target*, is done
//! last, with its neighbours just before it: when the fault returns, the bytes the
//! task is about to touch are still in L1/L2. This module copies a 2 MiB huge page per
//! 4 KiB sub-page in three orders, then times reading the target sub-page (and its
//! neighbours) one cache line at a time, optionally while another CPU streams through
//! a large buffer to evict the LLC.
//!
//! # The orders
//!
//! - [`CopyOrder::Sequential`]: 0, 1, ..., N−1 (what gigantic folios get).
//! - [`CopyOrder::TargetLast`]: the kernel's order, see [`process_huge_page_order`].
//! - [`CopyOrder::Neighbourhood`]: the 2025–26 proposal for `folio_zero_user()`
//!   (status unconfirmed), in this crate's exact definition, see
//!   [`neighbourhood_order`]: the right fringe ascending, the left fringe ascending,
//!   then the neighbourhood of radius `r` from the outside in, the target last.
//!
//! # Method
//!
//! Each trial draws a target from [`SplitMix64`]. For every order it flushes both
//! buffers from the cache (`clflush`, so every copy starts from DRAM as a COW copy of
//! a cold page would), copies per sub-page with the same routine whatever the order
//! ([`CopyMethod`]: by default `rep movsq` of 4 KiB, the kernel's `copy_page()` on
//! x86-64 CPUs with `REP_GOOD`; or glibc `memcpy`), then reads one byte per cache line
//! of the target sub-page, and then of its neighbours, as a dependent chain in a
//! scrambled line order so that the time per line is a latency.
//!
//! The host is shared (other processes, frequency changes), and a 2 MiB copy from
//! DRAM is disturbed by anything else that uses the memory bus. So that the figures
//! describe the orders and not the neighbours:
//!
//! - the orders are interleaved within a trial, and the order that goes first rotates
//!   from trial to trial, so that drift and position effects hit all orders alike;
//! - each order is copied [`Config::repeats`] times per trial (each time from cold
//!   caches) and the trial keeps the fastest copy, with the reads that followed it: a
//!   copy that another tenant slowed down is not the order's cost;
//! - the first [`Config::warmup_trials`] trials are discarded;
//! - "vs base" is the median over trials of the per-trial ratio of the baseline's copy
//!   time to this order's (same target, same moment), not a ratio of medians.
//!
//! The measuring thread is pinned to the first allowed CPU, the pressure thread to the
//! second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::error::NativeError;
use crate::rng::SplitMix64;
use crate::stats::Summary;
use crate::sys::{allowed_cpus, flush_cache, pin_to_cpu, AffinityGuard, HugeBuf, CACHE_LINE};
use crate::sys::{PAGE_SIZE, PMD_SIZE};

/// Sub-pages in a 2 MiB huge page.
pub const NR_SUBPAGES: usize = PMD_SIZE / PAGE_SIZE;

/// A sub-page copy order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CopyOrder {
    /// Ascending.
    Sequential,
    /// `process_huge_page()`: the target last, neighbours converging on it.
    TargetLast,
    /// Right fringe, left fringe, neighbourhood of radius `radius` (outside in),
    /// target last.
    Neighbourhood {
        /// The neighbourhood's radius in sub-pages.
        radius: usize,
    },
}

impl CopyOrder {
    /// A short name for tables.
    pub fn name(self) -> String {
        match self {
            CopyOrder::Sequential => "sequential".into(),
            CopyOrder::TargetLast => "target-last".into(),
            CopyOrder::Neighbourhood { radius } => format!("neighbourhood(r={radius})"),
        }
    }

    /// The sub-page indices in this order for `n` sub-pages and target `target`.
    pub fn indices(self, n: usize, target: usize) -> Vec<usize> {
        match self {
            CopyOrder::Sequential => (0..n).collect(),
            CopyOrder::TargetLast => process_huge_page_order(n, target),
            CopyOrder::Neighbourhood { radius } => neighbourhood_order(n, target, radius),
        }
    }
}

/// The order in which `process_huge_page()` visits `n` sub-pages (a power of two)
/// for target `t < n`.
///
/// If the target is in the lower half (2t ≤ n), the sub-pages from n−1 down to 2t go
/// first, one by one; the remaining window [0, 2t) is then processed from both ends
/// towards the target: 0, 2t−1, 1, 2t−2, ... If the target is in the upper half, the
/// sub-pages 0..b (b = 2t−n) go first in ascending order, then the window [b, n) from
/// both ends: b, n−1, b+1, n−2, ... Either way the last two are t−1 and t (for t > 0).
///
/// Examples: n=8, t=2 → 7,6,5,4,0,3,1,2; n=8, t=6 → 0,1,2,3,4,7,5,6.
pub fn process_huge_page_order(n: usize, t: usize) -> Vec<usize> {
    assert!(t < n, "target {t} outside {n} sub-pages");
    let mut out = Vec::with_capacity(n);
    let (base, l) = if 2 * t <= n {
        // The target is in the lower half: the far (upper) end goes first.
        out.extend((2 * t..n).rev());
        (0, t)
    } else {
        // The target is in the upper half: the far (lower) end goes first.
        let b = 2 * t - n;
        out.extend(0..b);
        (b, n - t)
    };
    // The window [base, base + 2l) is symmetric around the target's lower edge;
    // alternate between its two ends, converging on the target.
    let right_end = base + 2 * l;
    for k in 0..l {
        out.push(base + k);
        out.push(right_end - 1 - k);
    }
    out
}

/// This crate's neighbourhood order for `n` sub-pages, target `t < n`, radius `r`.
///
/// With the window `lo = t − r` and `hi = t + r` clipped to `[0, n)`: first the right
/// fringe `hi+1 .. n` ascending, then the left fringe `0 .. lo` ascending (each fringe
/// is one sequential stream, which is what hardware prefetchers want), then the
/// neighbours from the outside in — `t−r, t+r, t−r+1, t+r−1, ..., t−1, t+1` (those that
/// exist) — and the target last. The left fringe comes after the right one so that the
/// bytes just below the target, which a task walking upwards has just used, are the
/// more recent ones.
pub fn neighbourhood_order(n: usize, t: usize, r: usize) -> Vec<usize> {
    assert!(t < n, "target {t} outside {n} sub-pages");
    let lo = t.saturating_sub(r);
    let hi = (t + r).min(n - 1);
    let mut out = Vec::with_capacity(n);
    out.extend(hi + 1..n);
    out.extend(0..lo);
    for d in (1..=r).rev() {
        if d <= t && t - d >= lo {
            out.push(t - d);
        }
        if t + d <= hi {
            out.push(t + d);
        }
    }
    out.push(t);
    out
}

/// How one 4 KiB sub-page is copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyMethod {
    /// `rep movsq` of 512 quadwords: the kernel's `copy_page()` on x86-64 with
    /// `X86_FEATURE_REP_GOOD` (AMD Zen, recent Intel). Elsewhere: `memcpy`.
    RepMovsq,
    /// glibc `memcpy` (`copy_from_slice`): vector loads and stores for 4 KiB.
    Memcpy,
}

impl CopyMethod {
    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            CopyMethod::RepMovsq => "rep-movsq",
            CopyMethod::Memcpy => "memcpy",
        }
    }

    /// The method called `name`.
    pub fn from_name(name: &str) -> Option<CopyMethod> {
        [CopyMethod::RepMovsq, CopyMethod::Memcpy]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// Trials per (order, pressure) cell.
    pub nr_trials: usize,
    /// Seed of the target draws.
    pub seed: u64,
    /// The orders to compare; the first is the baseline of the bandwidth ratio.
    pub orders: Vec<CopyOrder>,
    /// Which pressure settings to run: `false` = quiet, `true` = a second thread
    /// streams through `pressure_bytes`.
    pub pressure: Vec<bool>,
    /// The pressure thread's buffer (larger than the LLC to evict it).
    pub pressure_bytes: usize,
    /// Neighbours on each side of the target whose post-copy reads are timed.
    pub read_radius: usize,
    /// How each sub-page is copied.
    pub method: CopyMethod,
    /// Copies of each order per trial; the fastest one counts.
    pub repeats: usize,
    /// Trials run first and discarded (page-table, TLB and frequency warm-up).
    pub warmup_trials: usize,
}

impl Default for Config {
    /// 200 trials of 3 copies per order, both pressure settings, 256 MiB pressure
    /// buffer, `rep movsq`: about 5 s.
    fn default() -> Self {
        Config {
            nr_trials: 200,
            seed: 1,
            orders: vec![
                CopyOrder::Sequential,
                CopyOrder::TargetLast,
                CopyOrder::Neighbourhood { radius: 2 },
            ],
            pressure: vec![false, true],
            pressure_bytes: 256 << 20,
            read_radius: 2,
            method: CopyMethod::RepMovsq,
            repeats: 3,
            warmup_trials: 5,
        }
    }
}

/// One (order, pressure) cell.
#[derive(Clone, Debug)]
pub struct Row {
    /// The order.
    pub order: CopyOrder,
    /// Whether the pressure thread ran.
    pub pressure: bool,
    /// Time to copy 2 MiB, ns.
    pub copy_ns: Summary,
    /// Copy bandwidth, GB/s (10^9 bytes per second).
    pub copy_gbps: Summary,
    /// Reading the target sub-page right after the copy, ns per cache line.
    pub target_read_ns_per_line: Summary,
    /// Reading the neighbours (radius [`Config::read_radius`]) after that, ns per line.
    pub neighbour_read_ns_per_line: Summary,
    /// Copy bandwidth relative to the first order's with the same pressure: the
    /// median over trials of (baseline copy time / this order's copy time).
    pub bandwidth_vs_baseline: f64,
    /// The same ratio's 10th and 90th percentiles.
    pub bandwidth_vs_baseline_p10_p90: (f64, f64),
    /// The median ratio over the trials whose target is in the lower half
    /// (`process_huge_page()` then copies the upper part first, descending) and
    /// in the upper half (the lower part first, ascending).
    pub bandwidth_vs_baseline_by_half: (f64, f64),
}

/// The measurement's result.
#[derive(Clone, Debug)]
pub struct Report {
    /// What was measured.
    pub config: Config,
    /// One row per (pressure, order), pressure settings outermost.
    pub rows: Vec<Row>,
    /// PMD-mapped bytes of the source and destination buffers (`AnonHugePages`).
    pub thp_backed_bytes: (u64, u64),
    /// The CPU of the measuring thread and of the pressure thread (if any).
    pub cpus: (usize, Option<usize>),
}

impl Report {
    /// The row for `order` and `pressure`.
    pub fn row(&self, order: CopyOrder, pressure: bool) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.order == order && r.pressure == pressure)
    }

    /// A text table.
    pub fn table(&self) -> String {
        let mut rows = vec![vec![
            "order".to_string(),
            "pressure".into(),
            "copy us p50".into(),
            "[p10..p90]".into(),
            "GB/s".into(),
            "vs base".into(),
            "[p10..p90]".into(),
            "t<256".into(),
            "t>=256".into(),
            "target ns/line".into(),
            "[p10..p90]".into(),
            "neigh ns/line".into(),
        ]];
        for r in &self.rows {
            rows.push(vec![
                r.order.name(),
                if r.pressure { "LLC" } else { "none" }.into(),
                format!("{:.1}", r.copy_ns.median / 1e3),
                format!("[{:.1}..{:.1}]", r.copy_ns.p10 / 1e3, r.copy_ns.p90 / 1e3),
                format!("{:.2}", r.copy_gbps.median),
                format!("{:.1}%", 100.0 * r.bandwidth_vs_baseline),
                format!(
                    "[{:.0}..{:.0}%]",
                    100.0 * r.bandwidth_vs_baseline_p10_p90.0,
                    100.0 * r.bandwidth_vs_baseline_p10_p90.1
                ),
                format!("{:.1}%", 100.0 * r.bandwidth_vs_baseline_by_half.0),
                format!("{:.1}%", 100.0 * r.bandwidth_vs_baseline_by_half.1),
                format!("{:.1}", r.target_read_ns_per_line.median),
                format!(
                    "[{:.1}..{:.1}]",
                    r.target_read_ns_per_line.p10, r.target_read_ns_per_line.p90
                ),
                format!("{:.1}", r.neighbour_read_ns_per_line.median),
            ]);
        }
        let mut out = format!(
            "2 MiB copy per 4 KiB sub-page ({}), {} trials (+{} warm-up) of the best of {} \
             copies per order from cold caches, seed {}, CPU {} (pressure on {}), THP-backed \
             src {} KiB dst {} KiB; vs base: median of per-trial ratios (all targets, then by half)\n",
            self.config.method.name(),
            self.config.nr_trials,
            self.config.warmup_trials,
            self.config.repeats,
            self.config.seed,
            self.cpus.0,
            self.cpus.1.map_or("-".to_string(), |c| c.to_string()),
            self.thp_backed_bytes.0 >> 10,
            self.thp_backed_bytes.1 >> 10,
        );
        out += &crate::table::format(&rows);
        out
    }
}

/// Runs the measurement (no knobs change; the buffers ask for THP with
/// `MADV_HUGEPAGE`, and the report says whether they got it).
pub fn run(config: &Config) -> Result<Report, NativeError> {
    if config.nr_trials == 0
        || config.repeats == 0
        || config.orders.is_empty()
        || config.pressure.is_empty()
    {
        return Err(NativeError::InvalidConfig {
            what: "copy_order needs nr_trials > 0, repeats > 0, at least one order and one \
                   pressure setting"
                .into(),
        });
    }
    if config.read_radius >= NR_SUBPAGES {
        return Err(NativeError::InvalidConfig {
            what: format!("read_radius {} too large", config.read_radius),
        });
    }
    let cpus = allowed_cpus()?;
    let main_cpu = cpus[0];
    let pressure_cpu = cpus.get(1).copied();
    let _affinity = AffinityGuard::save()?;
    pin_to_cpu(main_cpu)?;

    let src = HugeBuf::new(PMD_SIZE, 0xa5)?;
    let mut dst = HugeBuf::new(PMD_SIZE, 0)?;
    let thp = (src.thp_backed_bytes()?, dst.thp_backed_bytes()?);
    let mut pressure_buf = if config.pressure.contains(&true) {
        Some(HugeBuf::new(config.pressure_bytes.max(PMD_SIZE), 1)?)
    } else {
        None
    };

    let mut rows = Vec::new();
    for &pressure in &config.pressure {
        let stop = AtomicBool::new(false);
        let cells = std::thread::scope(|s| -> Result<Vec<Cell>, NativeError> {
            let streamer = match (pressure, pressure_buf.as_mut()) {
                (true, Some(buf)) => {
                    let stop = &stop;
                    Some(s.spawn(move || stream_until(buf.as_mut_slice(), pressure_cpu, stop)))
                }
                _ => None,
            };
            let cells = measure_cells(config, &src, &mut dst);
            stop.store(true, Ordering::Relaxed);
            if let Some(h) = streamer {
                h.join().map_err(|_| NativeError::ThreadPanicked {
                    what: "LLC pressure",
                })??;
            }
            Ok(cells)
        })?;
        let base_ns = cells[0].copy_ns.clone();
        for (order, cell) in config.orders.iter().zip(cells) {
            rows.push(cell.into_row(*order, pressure, &base_ns)?);
        }
    }
    Ok(Report {
        config: config.clone(),
        rows,
        thp_backed_bytes: thp,
        cpus: (
            main_cpu,
            pressure_cpu.filter(|_| config.pressure.contains(&true)),
        ),
    })
}

/// Samples of one (order, pressure) cell.
#[derive(Default)]
struct Cell {
    targets: Vec<usize>,
    copy_ns: Vec<f64>,
    target_ns_per_line: Vec<f64>,
    neighbour_ns_per_line: Vec<f64>,
}

impl Cell {
    fn into_row(
        self,
        order: CopyOrder,
        pressure: bool,
        base_ns: &[f64],
    ) -> Result<Row, NativeError> {
        let gbps: Vec<f64> = self.copy_ns.iter().map(|ns| PMD_SIZE as f64 / ns).collect();
        let ratios: Vec<f64> = base_ns
            .iter()
            .zip(&self.copy_ns)
            .map(|(b, o)| b / o)
            .collect();
        let summarize = |xs: &[f64]| {
            Summary::of(xs).ok_or(NativeError::InvalidConfig {
                what: "no samples".into(),
            })
        };
        let vs = summarize(&ratios)?;
        let half = |upper: bool| {
            let xs: Vec<f64> = ratios
                .iter()
                .zip(&self.targets)
                .filter(|(_, &t)| (t >= NR_SUBPAGES / 2) == upper)
                .map(|(r, _)| *r)
                .collect();
            Summary::of(&xs).map_or(f64::NAN, |s| s.median)
        };
        Ok(Row {
            order,
            pressure,
            copy_ns: summarize(&self.copy_ns)?,
            bandwidth_vs_baseline: vs.median,
            bandwidth_vs_baseline_p10_p90: (vs.p10, vs.p90),
            bandwidth_vs_baseline_by_half: (half(false), half(true)),
            copy_gbps: summarize(&gbps)?,
            target_read_ns_per_line: summarize(&self.target_ns_per_line)?,
            neighbour_read_ns_per_line: summarize(&self.neighbour_ns_per_line)?,
        })
    }
}

/// One copy of one order from cold caches, then the reads: (copy ns, target
/// ns per line, neighbours ns per line).
fn one_copy(
    config: &Config,
    src: &HugeBuf,
    dst: &mut HugeBuf,
    indices: &[usize],
    target: usize,
) -> (f64, f64, f64) {
    flush_cache(src.as_slice());
    flush_cache(dst.as_slice());
    let t0 = Instant::now();
    copy_subpages_with(config.method, src.as_slice(), dst.as_mut_slice(), indices);
    let copy_ns = (t0.elapsed().as_nanos() as f64).max(1.0);

    let lines_per_page = (PAGE_SIZE / CACHE_LINE) as f64;
    let target_ns = time_read(dst.as_slice(), target..target + 1);
    let lo = target.saturating_sub(config.read_radius);
    let hi = (target + config.read_radius).min(NR_SUBPAGES - 1);
    let mut nr_neigh = 0usize;
    let mut neigh_ns = 0.0;
    for i in (lo..=hi).filter(|&i| i != target) {
        neigh_ns += time_read(dst.as_slice(), i..i + 1);
        nr_neigh += 1;
    }
    let neigh = if nr_neigh > 0 {
        neigh_ns / (nr_neigh as f64 * lines_per_page)
    } else {
        0.0
    };
    (copy_ns, target_ns / lines_per_page, neigh)
}

/// Runs every trial of every order, interleaved: per trial, `repeats` rounds
/// over the orders, the first order rotating with the trial; each order keeps
/// its fastest copy of the trial.
fn measure_cells(config: &Config, src: &HugeBuf, dst: &mut HugeBuf) -> Vec<Cell> {
    let nr_orders = config.orders.len();
    let mut cells: Vec<Cell> = config.orders.iter().map(|_| Cell::default()).collect();
    let mut rng = SplitMix64::new(config.seed);
    for trial in 0..config.warmup_trials + config.nr_trials {
        let target = rng.below(NR_SUBPAGES as u64) as usize;
        let indices: Vec<Vec<usize>> = config
            .orders
            .iter()
            .map(|o| o.indices(NR_SUBPAGES, target))
            .collect();
        let mut best = vec![(f64::INFINITY, 0.0, 0.0); nr_orders];
        for round in 0..config.repeats {
            for k in 0..nr_orders {
                let o = (k + trial + round) % nr_orders;
                let r = one_copy(config, src, dst, &indices[o], target);
                if r.0 < best[o].0 {
                    best[o] = r;
                }
            }
        }
        if trial < config.warmup_trials {
            continue;
        }
        for (cell, (copy_ns, target_ns, neigh_ns)) in cells.iter_mut().zip(best) {
            cell.targets.push(target);
            cell.copy_ns.push(copy_ns);
            cell.target_ns_per_line.push(target_ns);
            cell.neighbour_ns_per_line.push(neigh_ns);
        }
    }
    cells
}

/// Copies sub-page `i` of `src` to `dst` for each `i` in `indices`, in that
/// order, with `method`.
pub fn copy_subpages_with(method: CopyMethod, src: &[u8], dst: &mut [u8], indices: &[usize]) {
    assert_eq!(
        src.len(),
        dst.len(),
        "source and destination differ in size"
    );
    for &i in indices {
        let range = i * PAGE_SIZE..(i + 1) * PAGE_SIZE;
        match method {
            CopyMethod::RepMovsq => copy_page(&mut dst[range.clone()], &src[range]),
            CopyMethod::Memcpy => dst[range.clone()].copy_from_slice(&src[range]),
        }
    }
}

/// The kernel's `copy_page()` (arch/x86/lib/copy_page_64.S with `REP_GOOD`):
/// `rep movsq` of 512 quadwords. Elsewhere: `copy_from_slice`.
fn copy_page(dst: &mut [u8], src: &[u8]) {
    assert!(dst.len() == PAGE_SIZE && src.len() == PAGE_SIZE);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: both slices are PAGE_SIZE bytes (checked above), so `rep movsq`
        // of PAGE_SIZE / 8 quadwords stays inside them; they do not overlap (one
        // is borrowed mutably); the direction flag is clear per the ABI.
        unsafe {
            std::arch::asm!(
                "rep movsq",
                inout("rcx") PAGE_SIZE / 8 => _,
                inout("rdi") dst.as_mut_ptr() => _,
                inout("rsi") src.as_ptr() => _,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Copies sub-page `i` of `src` to `dst` for each `i` in `indices`, in that
/// order, with `memcpy`.
pub fn copy_subpages(src: &[u8], dst: &mut [u8], indices: &[usize]) {
    copy_subpages_with(CopyMethod::Memcpy, src, dst, indices);
}

/// Reads one byte of every cache line of sub-pages `pages` of `buf` as a dependent
/// chain in a scrambled line order; returns the ns.
///
/// Each load's address depends on the previous load's value (through a zero the
/// compiler cannot see), and the lines are visited in a fixed scrambled order, so
/// neither memory-level parallelism nor the stream prefetcher hides the latency:
/// the figure per line is the latency of wherever the copy left that line.
fn time_read(buf: &[u8], pages: std::ops::Range<usize>) -> f64 {
    let bytes = &buf[pages.start * PAGE_SIZE..pages.end * PAGE_SIZE];
    let nr_lines = bytes.len() / CACHE_LINE;
    let zero = std::hint::black_box(0usize);
    let t0 = Instant::now();
    let mut carry = 0usize;
    for k in 0..nr_lines {
        // 37 is odd, so k * 37 mod nr_lines (a power of two times 1..5) visits every
        // line of a sub-page once when nr_lines is a power of two; for other counts
        // some lines repeat, which only makes the figure more cache-friendly.
        let line = (k * 37 + carry) % nr_lines;
        carry = usize::from(bytes[line * CACHE_LINE]) & zero;
    }
    std::hint::black_box(carry);
    t0.elapsed().as_nanos() as f64
}

/// Read-modify-writes one byte per cache line of `buf`, round and round, until
/// `stop`; pinned to `cpu` if there is one.
pub(crate) fn stream_until(
    buf: &mut [u8],
    cpu: Option<usize>,
    stop: &AtomicBool,
) -> Result<(), NativeError> {
    if let Some(c) = cpu {
        pin_to_cpu(c)?;
    }
    while !stop.load(Ordering::Relaxed) {
        // Check the flag every 2 MiB so the thread stops promptly.
        for chunk in buf.chunks_mut(PMD_SIZE) {
            for line in chunk.chunks_mut(CACHE_LINE) {
                line[0] = line[0].wrapping_add(1);
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
    std::hint::black_box(&buf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_huge_page_examples() {
        assert_eq!(process_huge_page_order(8, 2), vec![7, 6, 5, 4, 0, 3, 1, 2]);
        assert_eq!(process_huge_page_order(8, 6), vec![0, 1, 2, 3, 4, 7, 5, 6]);
        assert_eq!(process_huge_page_order(8, 0), vec![7, 6, 5, 4, 3, 2, 1, 0]);
        assert_eq!(process_huge_page_order(8, 7), vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(process_huge_page_order(8, 4), vec![0, 7, 1, 6, 2, 5, 3, 4]);
    }

    #[test]
    fn neighbourhood_examples() {
        // Window [2, 6] around 4: right fringe 7, left fringe 0 1, then 2 6 3 5, 4.
        assert_eq!(neighbourhood_order(8, 4, 2), vec![7, 0, 1, 2, 6, 3, 5, 4]);
        // Clipped at the low end: window [0, 2].
        assert_eq!(neighbourhood_order(8, 0, 2), vec![3, 4, 5, 6, 7, 2, 1, 0]);
        // Clipped at the high end: window [5, 7].
        assert_eq!(neighbourhood_order(8, 7, 2), vec![0, 1, 2, 3, 4, 5, 6, 7]);
    }

    /// Every order of every target for small powers of two visits each sub-page
    /// exactly once and ends with the target; the kernel's order puts t−1 just
    /// before it.
    #[test]
    fn orders_are_permutations_ending_in_the_target() {
        for n in [1usize, 2, 4, 8, 16, 32, 64, 512] {
            for t in 0..n {
                for order in [
                    CopyOrder::Sequential,
                    CopyOrder::TargetLast,
                    CopyOrder::Neighbourhood { radius: 2 },
                    CopyOrder::Neighbourhood { radius: 0 },
                ] {
                    let v = order.indices(n, t);
                    let mut seen = vec![false; n];
                    for &i in &v {
                        assert!(!seen[i], "{order:?} n={n} t={t}: {i} twice in {v:?}");
                        seen[i] = true;
                    }
                    assert_eq!(v.len(), n, "{order:?} n={n} t={t}");
                    if order != CopyOrder::Sequential {
                        assert_eq!(*v.last().unwrap(), t, "{order:?} n={n} t={t}");
                    }
                }
                if t > 0 {
                    let v = process_huge_page_order(n, t);
                    assert_eq!(v[n - 2], t - 1, "n={n} t={t}: {v:?}");
                }
            }
        }
    }

    #[test]
    fn copy_subpages_copies_everything() {
        let src: Vec<u8> = (0..8 * PAGE_SIZE)
            .map(|i| (i / PAGE_SIZE) as u8 + 1)
            .collect();
        let mut dst = vec![0u8; src.len()];
        copy_subpages(&src, &mut dst, &process_huge_page_order(8, 3));
        assert_eq!(src, dst);
        let mut dst = vec![0u8; src.len()];
        copy_subpages_with(
            CopyMethod::RepMovsq,
            &src,
            &mut dst,
            &process_huge_page_order(8, 5),
        );
        assert_eq!(src, dst);
    }

    #[test]
    fn smoke_run() {
        let config = Config {
            nr_trials: 3,
            warmup_trials: 1,
            repeats: 2,
            pressure_bytes: 8 << 20,
            ..Config::default()
        };
        let r = run(&config).unwrap();
        assert_eq!(r.rows.len(), 6);
        for row in &r.rows {
            assert!(row.copy_gbps.median > 0.0, "{row:?}");
            assert!(row.target_read_ns_per_line.median >= 0.0);
            assert!(row.bandwidth_vs_baseline > 0.0);
        }
        assert!(r.table().contains("target-last"));
    }
}
