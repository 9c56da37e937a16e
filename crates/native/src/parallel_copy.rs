//! Copying a huge page (and a large buffer) with several threads, on real hardware.
//!
//! # What this exercises
//!
//! Seed 001 (multi-threaded huge page migration, 2016, not merged) and its successors
//! copy one 2 MiB page with N threads: `copy_page_mt()` splits the page into N
//! contiguous byte ranges, one per CPU, and waits for all. Whether that pays depends
//! on how much one core's copy is limited by its own outstanding misses rather than
//! by DRAM, and on how the copy is written. This module measures the host's copy
//! bandwidth over a grid of configurations and names the best one:
//!
//! - jobs: one 2 MiB chunk cold (flushed from the cache before each trial, like a
//!   page being migrated) and hot; a large buffer (256 MiB) copied as 2 MiB chunks
//!   one after another, each split over the threads with a wait after each (the
//!   seed's `copy_page_mt()` over a run of THPs); and the same buffer as one copy
//!   (each thread one contiguous share: the host's streaming copy);
//! - methods ([`Method`]): the kernel's `copy_page()` (`rep movsq` per 4 KiB),
//!   `rep movsb` (ERMS) of the whole share, glibc `memcpy` per 4 KiB and of the
//!   whole share (glibc switches to non-temporal stores above its threshold, a
//!   fraction of the LLC), and explicit non-temporal stores (`movntdq`);
//! - 1..=nproc threads pinned to distinct CPUs.
//!
//! # The goal it checks
//!
//! Issue 8: "the best configuration reaches ≥ 90 % of the host's best measured copy
//! bandwidth, and the tool says which configuration that is". The host's best copy
//! bandwidth is the highest median of the cold large-buffer cells: what the host
//! sustains (hot copies come from the caches, and one cold 2 MiB copy is a burst
//! that the memory system's queues absorb, so both can exceed it). The
//! configurations a huge page migration can use are those that copy 2 MiB chunks:
//! the report names the best for one page and for pages back to back, each with its
//! share of the host's best, and judges the goal on pages back to back (a
//! migration of many THPs), the sustained case.
//!
//! # Method
//!
//! Worker threads are spawned once per (job, method, thread count) and pinned; for
//! each trial they meet at a [`Barrier`], each copies its contiguous share of each
//! chunk, meeting again after every chunk. Worker 0 times from leaving the first
//! barrier to leaving the last, so the figure includes the barriers' wake-up cost,
//! as the kernel's work-queue wait does. For cold trials each worker `clflush`es its
//! own shares of both buffers before the first barrier. Bandwidth is bytes copied /
//! time, in GB/s (10^9 B/s). The host is shared, so every cell reports its median
//! and its 10th..90th percentile spread.

use std::sync::Barrier;
use std::time::Instant;

use crate::error::NativeError;
use crate::stats::Summary;
use crate::sys::{allowed_cpus, flush_cache, pin_to_cpu, AffinityGuard, HugeBuf};
use crate::sys::{PAGE_SIZE, PMD_SIZE};

/// The share of the host's best copy bandwidth the best 2 MiB-chunk configuration
/// should reach (issue 8's goal).
pub const GOAL_FRACTION: f64 = 0.90;

/// How a thread copies its share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The kernel's `copy_page()` on x86-64 with `REP_GOOD`: `rep movsq` of 512
    /// quadwords per 4 KiB page (what `folio_copy()` and the seed's work items do).
    RepMovsq4K,
    /// `rep movsb` of the whole share (fast strings, ERMS).
    RepMovsb,
    /// glibc `memcpy` per 4 KiB page (vector loads and stores).
    Memcpy4K,
    /// glibc `memcpy` of the whole share: non-temporal stores above glibc's
    /// `x86_non_temporal_threshold` (a fraction of the LLC), else vectors or
    /// `rep movsb`.
    Memcpy,
    /// Explicit non-temporal stores (`movntdq`, 64 bytes a step) and an `sfence`:
    /// the destination bypasses the caches, no read-for-ownership.
    NtStore,
}

impl Method {
    /// Every method, in table order.
    pub const ALL: &'static [Method] = &[
        Method::RepMovsq4K,
        Method::RepMovsb,
        Method::Memcpy4K,
        Method::Memcpy,
        Method::NtStore,
    ];

    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Method::RepMovsq4K => "rep-movsq/4K",
            Method::RepMovsb => "rep-movsb",
            Method::Memcpy4K => "memcpy/4K",
            Method::Memcpy => "memcpy",
            Method::NtStore => "nt-store",
        }
    }

    /// Copies `src` into `dst` (same length).
    pub fn copy(self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(dst.len(), src.len(), "copy of unequal slices");
        match self {
            Method::RepMovsq4K => {
                for (d, s) in dst.chunks_mut(PAGE_SIZE).zip(src.chunks(PAGE_SIZE)) {
                    rep_movs(d, s, true);
                }
            }
            Method::RepMovsb => rep_movs(dst, src, false),
            Method::Memcpy4K => {
                for (d, s) in dst.chunks_mut(PAGE_SIZE).zip(src.chunks(PAGE_SIZE)) {
                    d.copy_from_slice(s);
                }
            }
            Method::Memcpy => dst.copy_from_slice(src),
            Method::NtStore => nt_copy(dst, src),
        }
    }
}

/// `rep movsq` (whole quadwords, the rest by `rep movsb`) or `rep movsb`.
/// Elsewhere than x86-64: `copy_from_slice`.
fn rep_movs(dst: &mut [u8], src: &[u8], quads: bool) {
    debug_assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    {
        let (n8, tail) = if quads {
            (dst.len() / 8, dst.len() % 8)
        } else {
            (0, dst.len())
        };
        // SAFETY: the slices have the same length (asserted by the caller) and do
        // not overlap (one is borrowed mutably); `rep movsq` moves n8 * 8 bytes and
        // `rep movsb` the `tail` bytes after them, all inside both slices; the
        // direction flag is clear per the ABI.
        unsafe {
            std::arch::asm!(
                "rep movsq",
                "mov rcx, {tail}",
                "rep movsb",
                tail = in(reg) tail,
                inout("rcx") n8 => _,
                inout("rdi") dst.as_mut_ptr() => _,
                inout("rsi") src.as_ptr() => _,
                options(nostack, preserves_flags)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = quads;
        dst.copy_from_slice(src);
    }
}

/// Copies with non-temporal 16-byte stores, four to a cache line, then `sfence`;
/// bytes past the last whole line are copied normally. Elsewhere than x86-64:
/// `copy_from_slice`.
fn nt_copy(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Non-temporal stores need 16-byte aligned destinations: copy up to the
        // first aligned byte normally.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let (d, s) = (&mut dst[head..], &src[head..]);
        let lines = d.len() / 64;
        for i in 0..lines {
            // SAFETY: line i lies inside both slices (i < len / 64); the destination
            // is 16-byte aligned (after `head`), as movntdq requires; loads are
            // unaligned loads; SSE2 is part of x86-64.
            unsafe {
                let sp = s.as_ptr().add(i * 64) as *const __m128i;
                let dp = d.as_mut_ptr().add(i * 64) as *mut __m128i;
                let a = _mm_loadu_si128(sp);
                let b = _mm_loadu_si128(sp.add(1));
                let c = _mm_loadu_si128(sp.add(2));
                let e = _mm_loadu_si128(sp.add(3));
                _mm_stream_si128(dp, a);
                _mm_stream_si128(dp.add(1), b);
                _mm_stream_si128(dp.add(2), c);
                _mm_stream_si128(dp.add(3), e);
            }
        }
        let done = lines * 64;
        d[done..].copy_from_slice(&s[done..]);
        // SAFETY: sfence has no preconditions; it orders the streaming stores
        // before whatever follows (the barrier that ends the trial).
        unsafe { _mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// One copy job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Bytes to copy (shares are rounded to 4 KiB and the last thread takes the
    /// remainder).
    pub bytes: usize,
    /// The buffer is copied in chunks of this many bytes; equal to `bytes` for one
    /// copy.
    pub chunk: usize,
    /// With several chunks: `false` splits each chunk over the threads, which
    /// wait for each other after each one (the seed's `copy_page_mt()` per THP);
    /// `true` deals whole chunks out, a contiguous run to each thread, with one
    /// wait at the end (the 2025 series' batched copy of a folio list).
    pub batched: bool,
    /// Whether both buffers are flushed from the cache before each trial.
    pub cold: bool,
}

impl Job {
    /// A short name for tables.
    pub fn name(&self) -> String {
        let size = |b: usize| {
            if b >= 1 << 20 {
                format!("{} MiB", b >> 20)
            } else {
                format!("{} KiB", b >> 10)
            }
        };
        let mut name = format!(
            "{} {}",
            size(self.bytes),
            if self.cold { "cold" } else { "hot" }
        );
        if self.chunk < self.bytes {
            name += &format!(
                " in {}{}",
                size(self.chunk),
                if self.batched { ", batched" } else { "" }
            );
        }
        name
    }

    /// True for the jobs that copy 2 MiB chunks, as a huge page migration does.
    pub fn is_page_copy(&self) -> bool {
        self.chunk == PMD_SIZE
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// The copy jobs.
    pub jobs: Vec<Job>,
    /// The copy methods.
    pub methods: Vec<Method>,
    /// Thread counts to try; `None` means 1..=nproc (the CPUs this process may use).
    pub threads: Option<Vec<usize>>,
    /// Trials for jobs of at most 2 MiB.
    pub nr_trials_small: usize,
    /// Trials for larger jobs.
    pub nr_trials_large: usize,
}

impl Default for Config {
    /// 2 MiB cold and hot (100 trials); 256 MiB in 2 MiB chunks (split, and
    /// batched) and as one copy (5 trials); every method; 1..=nproc threads:
    /// about 8 s on a 2-CPU host.
    fn default() -> Self {
        let big = 256 << 20;
        Config {
            jobs: vec![
                Job {
                    bytes: PMD_SIZE,
                    chunk: PMD_SIZE,
                    cold: true,
                    batched: false,
                },
                Job {
                    bytes: PMD_SIZE,
                    chunk: PMD_SIZE,
                    cold: false,
                    batched: false,
                },
                Job {
                    bytes: big,
                    chunk: PMD_SIZE,
                    cold: true,
                    batched: false,
                },
                Job {
                    bytes: big,
                    chunk: PMD_SIZE,
                    cold: true,
                    batched: true,
                },
                Job {
                    bytes: big,
                    chunk: big,
                    cold: true,
                    batched: false,
                },
            ],
            methods: Method::ALL.to_vec(),
            threads: None,
            nr_trials_small: 100,
            nr_trials_large: 5,
        }
    }
}

/// One (job, method, thread count) cell.
#[derive(Clone, Debug)]
pub struct Row {
    /// The job.
    pub job: Job,
    /// The copy method.
    pub method: Method,
    /// Threads used.
    pub nr_threads: usize,
    /// The CPUs they were pinned to.
    pub cpus: Vec<usize>,
    /// Time per copy, ns.
    pub copy_ns: Summary,
    /// Bandwidth, GB/s.
    pub gbps: Summary,
    /// Median bandwidth relative to the same job and method with one thread.
    pub speedup_vs_1: f64,
    /// Median bandwidth relative to the host's best (the best median of the cold
    /// large-buffer cells); hot cells and single 2 MiB copies can exceed 1.
    pub fraction_of_best: f64,
}

impl Row {
    /// The configuration in words.
    pub fn describe(&self) -> String {
        format!(
            "{}, {}, {} thread{} (CPUs {})",
            self.job.name(),
            self.method.name(),
            self.nr_threads,
            if self.nr_threads == 1 { "" } else { "s" },
            self.cpus
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

/// The measurement's result.
#[derive(Clone, Debug)]
pub struct Report {
    /// What was measured.
    pub config: Config,
    /// One row per (job, method, thread count), jobs outermost.
    pub rows: Vec<Row>,
    /// PMD-mapped bytes of the largest source and destination buffers.
    pub thp_backed_bytes: (u64, u64),
}

impl Report {
    fn max_by_median<'a>(rows: impl Iterator<Item = &'a Row>) -> Option<&'a Row> {
        rows.max_by(|a, b| a.gbps.median.total_cmp(&b.gbps.median))
    }

    /// The row with the highest median bandwidth for `job`.
    pub fn best(&self, job: Job) -> Option<&Row> {
        Self::max_by_median(self.rows.iter().filter(|r| r.job == job))
    }

    /// The host's best (sustained) copy bandwidth: the cold cell larger than one
    /// 2 MiB chunk with the highest median (any cold cell if there is none).
    pub fn host_best(&self) -> Option<&Row> {
        host_best_of(&self.rows)
    }

    /// The best cold configuration for one 2 MiB page.
    pub fn best_single_page(&self) -> Option<&Row> {
        Self::max_by_median(
            self.rows
                .iter()
                .filter(|r| r.job.cold && r.job.is_page_copy() && r.job.bytes == PMD_SIZE),
        )
    }

    /// The best cold configuration for 2 MiB pages back to back (a large buffer in
    /// 2 MiB chunks), or for one page if no such job ran.
    pub fn best_page_copy(&self) -> Option<&Row> {
        Self::max_by_median(
            self.rows
                .iter()
                .filter(|r| r.job.cold && r.job.is_page_copy() && r.job.bytes > PMD_SIZE),
        )
        .or_else(|| self.best_single_page())
    }

    /// Whether the best configuration for 2 MiB pages back to back reaches
    /// [`GOAL_FRACTION`] of the host's best (by medians); `None` without such
    /// cells.
    pub fn goal_holds(&self) -> Option<bool> {
        let best = self.host_best()?.gbps.median;
        let page = self.best_page_copy()?.gbps.median;
        Some(best > 0.0 && page >= GOAL_FRACTION * best)
    }

    /// A text table, then the host's best, the best configuration of each job, and
    /// the goal's verdict.
    pub fn table(&self) -> String {
        let mut rows = vec![vec![
            "job".to_string(),
            "method".into(),
            "threads".into(),
            "cpus".into(),
            "us p50".into(),
            "GB/s p50".into(),
            "[p10..p90]".into(),
            "vs 1 thread".into(),
            "of host best".into(),
        ]];
        for r in &self.rows {
            rows.push(vec![
                r.job.name(),
                r.method.name().into(),
                r.nr_threads.to_string(),
                r.cpus
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                format!("{:.1}", r.copy_ns.median / 1e3),
                format!("{:.2}", r.gbps.median),
                format!("[{:.2}..{:.2}]", r.gbps.p10, r.gbps.p90),
                format!("{:.2}x", r.speedup_vs_1),
                format!("{:.1}%", 100.0 * r.fraction_of_best),
            ]);
        }
        let mut out = format!(
            "threads pinned to distinct CPUs; THP-backed src {} MiB dst {} MiB; \
             hot rows come from the caches and do not count as the host's best\n",
            self.thp_backed_bytes.0 >> 20,
            self.thp_backed_bytes.1 >> 20
        );
        out += &crate::table::format(&rows);
        for job in &self.config.jobs {
            if let Some(b) = self.best(*job) {
                out += &format!(
                    "best for {}: {}, {} thread(s), {:.2} GB/s [{:.2}..{:.2}]\n",
                    job.name(),
                    b.method.name(),
                    b.nr_threads,
                    b.gbps.median,
                    b.gbps.p10,
                    b.gbps.p90
                );
            }
        }
        if let Some(h) = self.host_best() {
            out += &format!(
                "host's best (sustained) copy bandwidth: {:.2} GB/s [{:.2}..{:.2}]: {}\n",
                h.gbps.median,
                h.gbps.p10,
                h.gbps.p90,
                h.describe()
            );
        }
        if let Some(p) = self.best_single_page() {
            out += &format!(
                "one 2 MiB page, best: {}: {:.2} GB/s = {:.1}% of the host's best (a burst)\n",
                p.describe(),
                p.gbps.median,
                100.0 * p.fraction_of_best
            );
        }
        if let (Some(p), Some(ok)) = (self.best_page_copy(), self.goal_holds()) {
            out += &format!(
                "2 MiB pages back to back, best: {}: {:.2} GB/s = {:.1}% of the host's best; \
                 goal (>= {:.0}%) {}\n",
                p.describe(),
                p.gbps.median,
                100.0 * p.fraction_of_best,
                100.0 * GOAL_FRACTION,
                if ok { "holds" } else { "does NOT hold" }
            );
        }
        out
    }
}

/// Runs the measurement. No knobs change; the buffers ask for THP with
/// `MADV_HUGEPAGE`.
pub fn run(config: &Config) -> Result<Report, NativeError> {
    let cpus = allowed_cpus()?;
    let threads = config
        .threads
        .clone()
        .unwrap_or_else(|| (1..=cpus.len()).collect());
    config.check(&threads, cpus.len())?;
    let _affinity = AffinityGuard::save()?;
    let max_bytes = config
        .jobs
        .iter()
        .map(|j| j.bytes)
        .max()
        .unwrap_or(PMD_SIZE);
    let src = HugeBuf::new(max_bytes, 0x3c)?;
    let mut dst = HugeBuf::new(max_bytes, 0)?;
    let thp = (src.thp_backed_bytes()?, dst.thp_backed_bytes()?);
    let mut rows = Vec::new();
    for job in &config.jobs {
        let nr_trials = if job.bytes <= PMD_SIZE {
            config.nr_trials_small
        } else {
            config.nr_trials_large
        };
        for &method in &config.methods {
            let first = rows.len();
            for &n in &threads {
                let src = &src.as_slice()[..job.bytes];
                let dst = &mut dst.as_mut_slice()[..job.bytes];
                rows.push(measure_row(src, dst, job, method, &cpus[..n], nr_trials)?);
            }
            // Each thread count's speed-up over one thread, for this job
            // and method.
            let cells = &mut rows[first..];
            let one = cells
                .iter()
                .find(|r| r.nr_threads == 1)
                .map(|r| r.gbps.median);
            for r in cells {
                r.speedup_vs_1 = one.map_or(0.0, |o| if o > 0.0 { r.gbps.median / o } else { 0.0 });
            }
        }
    }
    let best = host_best_of(&rows).map_or(0.0, |r| r.gbps.median);
    for r in &mut rows {
        r.fraction_of_best = if best > 0.0 {
            r.gbps.median / best
        } else {
            0.0
        };
    }
    Ok(Report {
        config: config.clone(),
        rows,
        thp_backed_bytes: thp,
    })
}

impl Config {
    /// Refuses a configuration that would measure nothing or more threads
    /// than this process may run on (`nr_cpus`).
    fn check(&self, threads: &[usize], nr_cpus: usize) -> Result<(), NativeError> {
        if self.jobs.is_empty()
            || self.methods.is_empty()
            || threads.is_empty()
            || self.nr_trials_small == 0
            || self.nr_trials_large == 0
        {
            return Err(NativeError::InvalidConfig {
                what: "parallel_copy needs jobs, methods, thread counts and trials".into(),
            });
        }
        if let Some(&t) = threads.iter().find(|&&t| t == 0 || t > nr_cpus) {
            return Err(NativeError::InvalidConfig {
                what: format!("{t} threads: must be 1..={nr_cpus} (the CPUs this process may use)"),
            });
        }
        if let Some(j) = self
            .jobs
            .iter()
            .find(|j| j.bytes < PAGE_SIZE || j.chunk < PAGE_SIZE || j.bytes % j.chunk != 0)
        {
            return Err(NativeError::InvalidConfig {
                what: format!(
                    "job of {} bytes in chunks of {}: at least 4 KiB, a whole number of chunks",
                    j.bytes, j.chunk
                ),
            });
        }
        Ok(())
    }
}

/// One cell of the table: `job` copied with `method` by one thread on each
/// of `cpus`, `nr_trials` times (speed-up and share of the best filled in
/// later, once the other cells are known).
fn measure_row(
    src: &[u8],
    dst: &mut [u8],
    job: &Job,
    method: Method,
    cpus: &[usize],
    nr_trials: usize,
) -> Result<Row, NativeError> {
    let ns = measure(src, dst, job, method, cpus, nr_trials)?;
    let gbps: Vec<f64> = ns.iter().map(|t| job.bytes as f64 / t).collect();
    let summary = |xs: &[f64]| {
        Summary::of(xs).ok_or(NativeError::InvalidConfig {
            what: "no samples".into(),
        })
    };
    Ok(Row {
        job: *job,
        method,
        nr_threads: cpus.len(),
        cpus: cpus.to_vec(),
        copy_ns: summary(&ns)?,
        gbps: summary(&gbps)?,
        speedup_vs_1: 0.0,
        fraction_of_best: 0.0,
    })
}

/// The cold cell larger than one 2 MiB chunk with the highest median, or the best
/// cold cell if there is none.
fn host_best_of(rows: &[Row]) -> Option<&Row> {
    Report::max_by_median(rows.iter().filter(|r| r.job.cold && r.job.bytes > PMD_SIZE))
        .or_else(|| Report::max_by_median(rows.iter().filter(|r| r.job.cold)))
}

/// One thread's pieces of every chunk: (source, destination).
type Pieces<'a> = Vec<(&'a [u8], &'a mut [u8])>;

/// Copies `src` into `dst` with `method`, in chunks of `job.chunk` bytes,
/// with one pinned thread per CPU in `cpus`, `nr_trials` times; returns
/// worker 0's time per trial in ns. Each chunk is split over the threads,
/// which wait for each other after each chunk; with `job.batched`, each
/// thread copies a contiguous run of whole chunks and they wait once; with
/// `job.cold`, both buffers leave the cache before each trial. (`job.bytes`
/// is not used: the slices' length is the size.)
fn measure(
    src: &[u8],
    dst: &mut [u8],
    job: &Job,
    method: Method,
    cpus: &[usize],
    nr_trials: usize,
) -> Result<Vec<f64>, NativeError> {
    let Job {
        chunk,
        batched,
        cold,
        ..
    } = *job;
    let n = cpus.len();
    let mut per_thread: Vec<Pieces> = (0..n).map(|_| Vec::new()).collect();
    let nr_chunks = src.len().div_ceil(chunk);
    let per = nr_chunks.div_ceil(n);
    for (c, (sc, dc)) in src.chunks(chunk).zip(dst.chunks_mut(chunk)).enumerate() {
        if batched {
            per_thread[c / per].push((sc, dc));
            continue;
        }
        // Shares in whole 4 KiB pages; the last thread takes what is left.
        let share = (sc.len() / n / PAGE_SIZE).max(1) * PAGE_SIZE;
        let (mut s_rest, mut d_rest) = (sc, dc);
        for (i, pieces) in per_thread.iter_mut().enumerate() {
            let take = if i + 1 == n {
                s_rest.len()
            } else {
                share.min(s_rest.len())
            };
            let (s, sr) = s_rest.split_at(take);
            let (d, dr) = d_rest.split_at_mut(take);
            pieces.push((s, d));
            s_rest = sr;
            d_rest = dr;
        }
    }
    let barrier = Barrier::new(n);
    std::thread::scope(|scope| {
        let handles: Vec<_> = per_thread
            .into_iter()
            .zip(cpus)
            .enumerate()
            .map(|(i, (mut pieces, &cpu))| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<Vec<f64>, NativeError> {
                    // A failed pin is reported after the trials: returning early
                    // would leave the other workers waiting at the barrier forever.
                    let pinned = pin_to_cpu(cpu);
                    let mut times = Vec::with_capacity(if i == 0 { nr_trials } else { 0 });
                    for _ in 0..nr_trials {
                        if cold {
                            for (s, d) in &pieces {
                                flush_cache(s);
                                flush_cache(d);
                            }
                        }
                        barrier.wait();
                        let t0 = Instant::now();
                        for (s, d) in pieces.iter_mut() {
                            method.copy(d, s);
                            if !batched {
                                barrier.wait();
                            }
                        }
                        if batched {
                            barrier.wait();
                        }
                        if i == 0 {
                            times.push((t0.elapsed().as_nanos() as f64).max(1.0));
                        }
                    }
                    std::hint::black_box(&pieces);
                    pinned.map(|()| times)
                })
            })
            .collect();
        let mut times = Vec::new();
        for (i, h) in handles.into_iter().enumerate() {
            let t = h.join().map_err(|_| NativeError::ThreadPanicked {
                what: "copy worker",
            })??;
            if i == 0 {
                times = t;
            }
        }
        Ok(times)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoke_run_copies_reports_and_judges_the_goal() {
        let config = Config {
            jobs: vec![
                Job {
                    bytes: PMD_SIZE,
                    chunk: PMD_SIZE,
                    cold: true,
                    batched: false,
                },
                Job {
                    bytes: 8 << 20,
                    chunk: PMD_SIZE,
                    cold: true,
                    batched: false,
                },
                Job {
                    bytes: 8 << 20,
                    chunk: 8 << 20,
                    cold: false,
                    batched: false,
                },
            ],
            methods: Method::ALL.to_vec(),
            threads: None,
            nr_trials_small: 3,
            nr_trials_large: 2,
        };
        let r = run(&config).unwrap();
        let nproc = allowed_cpus().unwrap().len();
        assert_eq!(r.rows.len(), 3 * Method::ALL.len() * nproc);
        for row in &r.rows {
            assert!(row.gbps.median > 0.0, "{row:?}");
            assert!(row.fraction_of_best > 0.0);
            if row.job.cold && row.job.bytes > PMD_SIZE {
                assert!(row.fraction_of_best <= 1.0);
            }
            assert_eq!(row.cpus.len(), row.nr_threads);
        }
        let host = r.host_best().unwrap();
        assert!(host.job.cold && host.job.bytes > PMD_SIZE);
        assert_eq!(r.best_single_page().unwrap().job.bytes, PMD_SIZE);
        assert!((host.fraction_of_best - 1.0).abs() < 1e-12);
        let page = r.best_page_copy().unwrap();
        assert!(page.job.is_page_copy() && page.job.cold && page.job.bytes > PMD_SIZE);
        assert_eq!(
            r.goal_holds(),
            Some(page.gbps.median >= GOAL_FRACTION * host.gbps.median)
        );
        let t = r.table();
        assert!(t.contains("best for 2 MiB cold") && t.contains("host's best (sustained)"));
        assert!(t.contains("goal (>= 90%)"), "{t}");
    }

    /// Every method copies every byte, with shares and chunks that do not divide
    /// evenly and an unaligned destination.
    #[test]
    fn every_method_copies_every_byte_with_uneven_shares_and_chunks() {
        let cpus = allowed_cpus().unwrap();
        let src: Vec<u8> = (0..6 * PAGE_SIZE + 100).map(|i| (i % 251) as u8).collect();
        for &m in Method::ALL {
            for batched in [false, true] {
                let mut dst = vec![0u8; src.len() + 1];
                let job = Job {
                    bytes: src.len(),
                    chunk: 2 * PAGE_SIZE,
                    batched,
                    cold: false,
                };
                measure(&src, &mut dst[1..], &job, m, &cpus, 1).unwrap();
                assert_eq!(src, dst[1..], "{m:?} batched {batched}");
            }
            let mut dst = vec![0u8; src.len()];
            let job = Job {
                bytes: src.len(),
                chunk: src.len(),
                batched: false,
                cold: true,
            };
            measure(&src, &mut dst, &job, m, &cpus, 1).unwrap();
            assert_eq!(src, dst, "{m:?}");
        }
    }

    #[test]
    fn rejects_too_many_threads_and_ragged_chunks() {
        let config = Config {
            threads: Some(vec![10_000]),
            ..Config::default()
        };
        assert!(matches!(
            run(&config),
            Err(NativeError::InvalidConfig { .. })
        ));
        let config = Config {
            jobs: vec![Job {
                bytes: 3 << 20,
                chunk: PMD_SIZE,
                cold: true,
                batched: false,
            }],
            ..Config::default()
        };
        assert!(matches!(
            run(&config),
            Err(NativeError::InvalidConfig { .. })
        ));
    }
}
