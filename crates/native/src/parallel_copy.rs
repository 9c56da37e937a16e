//! Copying a huge page (and a large buffer) with several threads, on real hardware.
//!
//! # What this exercises
//!
//! Seed 001 (multi-threaded huge page migration, 2016, not merged) and its successors
//! copy one 2 MiB page with N threads: `copy_page_mt()` splits the page into N
//! contiguous byte ranges, one per CPU, and waits for all. Whether that pays depends
//! on how much one core's copy is limited by its own outstanding misses rather than
//! by DRAM; this module measures it on the host: one 2 MiB chunk cold (flushed from
//! the cache before each trial, like a page being migrated) and hot, and one large
//! buffer (256 MiB by default), with 1..=nproc threads pinned to distinct CPUs.
//!
//! # Method
//!
//! Worker threads are spawned once per (size, thread count) and pinned; for each
//! trial they meet at a [`Barrier`], each copies its contiguous share per 4 KiB with
//! `copy_from_slice` (glibc `memcpy`), and they meet again. Worker 0 times from
//! leaving the first barrier to leaving the second, so the figure includes the
//! barrier's wake-up cost, as the kernel's work-queue wait does. For cold trials each
//! worker `clflush`es its own share of both buffers before the first barrier.
//! Bandwidth is bytes copied / time, in GB/s (10^9 B/s).

use std::sync::Barrier;
use std::time::Instant;

use crate::error::NativeError;
use crate::stats::Summary;
use crate::sys::{allowed_cpus, flush_cache, pin_to_cpu, AffinityGuard, HugeBuf};
use crate::sys::{PAGE_SIZE, PMD_SIZE};

/// One copy job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Bytes to copy (a multiple of 4 KiB times the thread count is best; shares are
    /// rounded to 4 KiB and the last thread takes the remainder).
    pub bytes: usize,
    /// Whether both buffers are flushed from the cache before each trial.
    pub cold: bool,
}

impl Job {
    /// A short name for tables.
    pub fn name(&self) -> String {
        let size = if self.bytes >= 1 << 20 {
            format!("{} MiB", self.bytes >> 20)
        } else {
            format!("{} KiB", self.bytes >> 10)
        };
        format!("{size} {}", if self.cold { "cold" } else { "hot" })
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Config {
    /// The copy jobs.
    pub jobs: Vec<Job>,
    /// Thread counts to try; `None` means 1..=nproc (the CPUs this process may use).
    pub threads: Option<Vec<usize>>,
    /// Trials for jobs of at most 2 MiB.
    pub nr_trials_small: usize,
    /// Trials for larger jobs.
    pub nr_trials_large: usize,
}

impl Default for Config {
    /// 2 MiB cold and hot (200 trials), 256 MiB (5 trials), 1..=nproc threads:
    /// about 2 s on a 2-CPU host.
    fn default() -> Self {
        Config {
            jobs: vec![
                Job {
                    bytes: PMD_SIZE,
                    cold: true,
                },
                Job {
                    bytes: PMD_SIZE,
                    cold: false,
                },
                Job {
                    bytes: 256 << 20,
                    cold: true,
                },
            ],
            threads: None,
            nr_trials_small: 200,
            nr_trials_large: 5,
        }
    }
}

/// One (job, thread count) cell.
#[derive(Clone, Debug)]
pub struct Row {
    /// The job.
    pub job: Job,
    /// Threads used.
    pub nr_threads: usize,
    /// The CPUs they were pinned to.
    pub cpus: Vec<usize>,
    /// Time per copy, ns.
    pub copy_ns: Summary,
    /// Bandwidth, GB/s.
    pub gbps: Summary,
    /// Median bandwidth relative to the same job with one thread.
    pub speedup_vs_1: f64,
    /// Median bandwidth relative to the best median of the same job.
    pub fraction_of_best: f64,
}

/// The measurement's result.
#[derive(Clone, Debug)]
pub struct Report {
    /// What was measured.
    pub config: Config,
    /// One row per (job, thread count), jobs outermost.
    pub rows: Vec<Row>,
    /// PMD-mapped bytes of the largest source and destination buffers.
    pub thp_backed_bytes: (u64, u64),
}

impl Report {
    /// The row with the highest median bandwidth for `job`.
    pub fn best(&self, job: Job) -> Option<&Row> {
        self.rows
            .iter()
            .filter(|r| r.job == job)
            .max_by(|a, b| a.gbps.median.total_cmp(&b.gbps.median))
    }

    /// A text table, with the best configuration of each job named below it.
    pub fn table(&self) -> String {
        let mut rows = vec![vec![
            "job".to_string(),
            "threads".into(),
            "cpus".into(),
            "us p50".into(),
            "GB/s p50".into(),
            "[p10..p90]".into(),
            "vs 1 thread".into(),
            "of best".into(),
        ]];
        for r in &self.rows {
            rows.push(vec![
                r.job.name(),
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
            "copy_from_slice per 4 KiB, threads pinned to distinct CPUs; THP-backed src {} MiB dst {} MiB\n",
            self.thp_backed_bytes.0 >> 20,
            self.thp_backed_bytes.1 >> 20
        );
        out += &crate::table::format(&rows);
        for job in &self.config.jobs {
            if let Some(b) = self.best(*job) {
                out += &format!(
                    "best for {}: {} thread(s), {:.2} GB/s\n",
                    job.name(),
                    b.nr_threads,
                    b.gbps.median
                );
            }
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
    if config.jobs.is_empty()
        || threads.is_empty()
        || config.nr_trials_small == 0
        || config.nr_trials_large == 0
    {
        return Err(NativeError::InvalidConfig {
            what: "parallel_copy needs jobs, thread counts and trials".into(),
        });
    }
    if let Some(&t) = threads.iter().find(|&&t| t == 0 || t > cpus.len()) {
        return Err(NativeError::InvalidConfig {
            what: format!(
                "{t} threads: must be 1..={} (the CPUs this process may use)",
                cpus.len()
            ),
        });
    }
    if let Some(j) = config.jobs.iter().find(|j| j.bytes < PAGE_SIZE) {
        return Err(NativeError::InvalidConfig {
            what: format!("job of {} bytes: at least 4 KiB", j.bytes),
        });
    }
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
        let first = rows.len();
        for &n in &threads {
            let used = &cpus[..n];
            let ns = measure(
                &src.as_slice()[..job.bytes],
                &mut dst.as_mut_slice()[..job.bytes],
                used,
                job.cold,
                nr_trials,
            )?;
            let gbps: Vec<f64> = ns.iter().map(|t| job.bytes as f64 / t).collect();
            let summary = |xs: &[f64]| {
                Summary::of(xs).ok_or(NativeError::InvalidConfig {
                    what: "no samples".into(),
                })
            };
            rows.push(Row {
                job: *job,
                nr_threads: n,
                cpus: used.to_vec(),
                copy_ns: summary(&ns)?,
                gbps: summary(&gbps)?,
                speedup_vs_1: 0.0,
                fraction_of_best: 0.0,
            });
        }
        let cells = &mut rows[first..];
        let best = cells.iter().map(|r| r.gbps.median).fold(0.0, f64::max);
        let one = cells
            .iter()
            .find(|r| r.nr_threads == 1)
            .map(|r| r.gbps.median);
        for r in cells {
            r.fraction_of_best = if best > 0.0 {
                r.gbps.median / best
            } else {
                0.0
            };
            r.speedup_vs_1 = one.map_or(0.0, |o| if o > 0.0 { r.gbps.median / o } else { 0.0 });
        }
    }
    Ok(Report {
        config: config.clone(),
        rows,
        thp_backed_bytes: thp,
    })
}

/// Copies `src` into `dst` with one pinned thread per CPU in `cpus`, `nr_trials`
/// times; returns worker 0's time per trial in ns.
fn measure(
    src: &[u8],
    dst: &mut [u8],
    cpus: &[usize],
    cold: bool,
    nr_trials: usize,
) -> Result<Vec<f64>, NativeError> {
    let n = cpus.len();
    // Shares in whole 4 KiB pages; the last thread takes what is left.
    let share = (src.len() / n / PAGE_SIZE).max(1) * PAGE_SIZE;
    let mut pieces: Vec<(&[u8], &mut [u8])> = Vec::with_capacity(n);
    let (mut s_rest, mut d_rest) = (src, dst);
    for i in 0..n {
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
    let barrier = Barrier::new(n);
    std::thread::scope(|scope| {
        let handles: Vec<_> = pieces
            .into_iter()
            .zip(cpus)
            .enumerate()
            .map(|(i, ((s, d), &cpu))| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<Vec<f64>, NativeError> {
                    // A failed pin is reported after the trials: returning early
                    // would leave the other workers waiting at the barrier forever.
                    let pinned = pin_to_cpu(cpu);
                    let mut times = Vec::with_capacity(if i == 0 { nr_trials } else { 0 });
                    for _ in 0..nr_trials {
                        if cold {
                            flush_cache(s);
                            flush_cache(d);
                        }
                        barrier.wait();
                        let t0 = Instant::now();
                        for (dp, sp) in d.chunks_mut(PAGE_SIZE).zip(s.chunks(PAGE_SIZE)) {
                            dp.copy_from_slice(sp);
                        }
                        barrier.wait();
                        if i == 0 {
                            times.push((t0.elapsed().as_nanos() as f64).max(1.0));
                        }
                    }
                    std::hint::black_box(&d);
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
    fn smoke_run_copies_and_reports() {
        let config = Config {
            jobs: vec![
                Job {
                    bytes: PMD_SIZE,
                    cold: true,
                },
                Job {
                    bytes: 8 << 20,
                    cold: false,
                },
            ],
            threads: None,
            nr_trials_small: 5,
            nr_trials_large: 2,
        };
        let r = run(&config).unwrap();
        let nproc = allowed_cpus().unwrap().len();
        assert_eq!(r.rows.len(), 2 * nproc);
        for row in &r.rows {
            assert!(row.gbps.median > 0.0, "{row:?}");
            assert!(row.fraction_of_best > 0.0 && row.fraction_of_best <= 1.0);
            assert_eq!(row.cpus.len(), row.nr_threads);
        }
        assert!(r.best(config.jobs[0]).is_some());
        assert!(r.table().contains("best for 2 MiB cold"));
    }

    #[test]
    fn measure_copies_every_byte_with_uneven_shares() {
        let cpus = allowed_cpus().unwrap();
        let src: Vec<u8> = (0..5 * PAGE_SIZE + 100).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        measure(&src, &mut dst, &cpus, false, 1).unwrap();
        assert_eq!(src, dst);
    }

    #[test]
    fn rejects_too_many_threads() {
        let config = Config {
            threads: Some(vec![10_000]),
            ..Config::default()
        };
        assert!(matches!(
            run(&config),
            Err(NativeError::InvalidConfig { .. })
        ));
    }
}
