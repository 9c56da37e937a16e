//! Micro-benchmarks of this host's hardware and live kernel, the raw material
//! of `mmlab calibrate`.
//!
//! # What is measured, and how
//!
//! Each [`Probe`] is one small, repeatable measurement that returns one
//! number (nanoseconds per operation). [`run_interleaved`] runs every probe
//! once per round, round after round, so that a burst of load from another
//! tenant of a shared host touches one sample of every probe rather than all
//! samples of one; each round keeps the fastest of a few back-to-back
//! repeats, and the report keeps the median of those per-round minima and
//! their spread ([`Summary`]). Time is the measuring thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) wherever one thread does the work; the two
//! cross-core probes (cache-line ping-pong, lock hand-off), whose threads
//! spin on each other, use the wall clock over short batches and keep the
//! median batch.
//!
//! - [`hw`]: `clear_page()`'s `rep stosb` and `copy_page()`'s `rep movsq`
//!   per 4 KiB page, hot and cold, one thread and every CPU at once; an
//!   uncontended locked compare-and-swap and release store (a spin lock);
//!   a spin lock handed between two CPUs; one cache line bounced between
//!   two CPUs (classified by the topology in sysfs); DRAM latency by a
//!   dependent pointer chase; a user store per 4 KiB page of mapped memory.
//! - [`kernel`]: a system call round trip (`getppid`); `mmap`+`munmap` and
//!   `mprotect` of one page; the cost of one level of the VMA tree (a
//!   `mincore()` with few VMAs against one with tens of thousands); the
//!   per-page cost of `munmap` of populated 4 KiB pages, of `mprotect`
//!   rewriting populated PTEs and of `fork` copying them.
//!
//! Anonymous-fault patterns and the PCP churn run through
//! [`crate::faults`]; the CLI (`mmlab calibrate`) combines all of these
//! with the model.
//!
//! A probe that cannot run here (a single CPU, no THP) says why in a
//! [`Outcome::Skipped`]; nothing here changes a knob.

pub mod hw;
pub mod isolated;
pub mod kernel;

use crate::error::NativeError;
use crate::stats::Summary;

/// One measurement of a calibration: a name, a unit, what it ran, and a
/// closure that returns one sample.
pub struct Probe<'a> {
    /// Short name (`clear_page cold, 1 thread`).
    pub name: String,
    /// Unit of the samples (`ns/page`).
    pub unit: &'static str,
    /// What the probe runs, for the profile's `source`.
    pub how: String,
    /// One sample.
    pub run: Box<dyn FnMut() -> Result<f64, NativeError> + 'a>,
}

impl<'a> Probe<'a> {
    /// A probe.
    pub fn new(
        name: impl Into<String>,
        unit: &'static str,
        how: impl Into<String>,
        run: impl FnMut() -> Result<f64, NativeError> + 'a,
    ) -> Probe<'a> {
        Probe {
            name: name.into(),
            unit,
            how: how.into(),
            run: Box::new(run),
        }
    }

    /// The same probe under another name.
    pub fn renamed(mut self, name: impl Into<String>) -> Probe<'a> {
        self.name = name.into();
        self
    }
}

/// A probe's result over all rounds.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// The probe's name.
    pub name: String,
    /// Unit.
    pub unit: &'static str,
    /// What ran.
    pub how: String,
    /// Median and spread of the samples.
    pub summary: Summary,
    /// The samples, one per round in the order run (each the fastest of
    /// its round's repeats), so that a figure derived from several probes
    /// can be re-derived round by round.
    pub samples: Vec<f64>,
}

impl Measurement {
    /// The median.
    pub fn median(&self) -> f64 {
        self.summary.median
    }

    /// `median U (p10-p90 a-b, n N)`, for a profile's `source`.
    pub fn describe(&self) -> String {
        let s = &self.summary;
        format!(
            "median {} {} (p10-p90 {}-{}, n {})",
            fmt_num(s.median),
            self.unit,
            fmt_num(s.p10),
            fmt_num(s.p90),
            s.nr_samples
        )
    }

    /// Half the p10-p90 range as a share of the median (0.05 = ±5 %).
    pub fn rel_spread(&self) -> f64 {
        let s = &self.summary;
        if s.median == 0.0 {
            0.0
        } else {
            (s.p90 - s.p10) / 2.0 / s.median.abs()
        }
    }
}

/// A number with three significant digits or so.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// What became of one probe.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// It ran.
    Measured(Measurement),
    /// It could not run here.
    Skipped {
        /// The probe.
        name: String,
        /// Why.
        why: String,
    },
}

impl Outcome {
    /// The probe's name.
    pub fn name(&self) -> &str {
        match self {
            Outcome::Measured(m) => &m.name,
            Outcome::Skipped { name, .. } => name,
        }
    }

    /// The measurement, if it ran.
    pub fn measured(&self) -> Option<&Measurement> {
        match self {
            Outcome::Measured(m) => Some(m),
            Outcome::Skipped { .. } => None,
        }
    }
}

/// Runs every probe `repeats` times in a row per round for `rounds` rounds
/// (after one warm-up round whose samples are dropped); a round's sample is
/// the smallest of its repeats, and the report keeps the median of those
/// per-round minima with their spread.
///
/// Why the minimum inside a round and the median across rounds: on a host
/// shared with other tenants a sample can only be slowed by them (a
/// preemption, another vCPU's cache traffic), never sped up, so the fastest
/// of a few back-to-back repeats is the operation with the least of that
/// interference; the median of those over rounds spread in time then keeps
/// one unlucky round (all its repeats disturbed) from setting the figure.
/// A probe whose sample fails is dropped from later rounds and reported as
/// skipped with the error.
pub fn run_interleaved(
    probes: Vec<Probe<'_>>,
    rounds: usize,
    repeats: usize,
    progress: impl FnMut(&str),
) -> Vec<Outcome> {
    run_interleaved_between(probes, rounds, repeats, progress, |_, _| {})
}

/// [`run_interleaved`], calling `between(round, progress)` after each
/// sampled round (1 to `rounds`): for measurements of another kind taken
/// in alternation with these, so that a slow phase of the host meets both
/// kinds alike.
pub fn run_interleaved_between(
    mut probes: Vec<Probe<'_>>,
    rounds: usize,
    repeats: usize,
    mut progress: impl FnMut(&str),
    mut between: impl FnMut(usize, &mut dyn FnMut(&str)),
) -> Vec<Outcome> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); probes.len()];
    let mut failed: Vec<Option<String>> = vec![None; probes.len()];
    for round in 0..=rounds {
        for (i, p) in probes.iter_mut().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            if round == 0 {
                progress(&p.name);
            }
            match round_min(&mut p.run, if round == 0 { 1 } else { repeats }) {
                Ok(x) if round > 0 => samples[i].push(x),
                Ok(_) => {}
                Err(e) => failed[i] = Some(e.to_string()),
            }
        }
        if round > 0 {
            between(round, &mut progress);
        }
    }
    probes
        .into_iter()
        .zip(samples)
        .zip(failed)
        .map(|((p, s), f)| match (f, Summary::of(&s)) {
            (None, Some(summary)) => Outcome::Measured(Measurement {
                name: p.name,
                unit: p.unit,
                how: p.how,
                summary,
                samples: s,
            }),
            (Some(why), _) => Outcome::Skipped { name: p.name, why },
            (None, None) => Outcome::Skipped {
                name: p.name,
                why: "no samples".into(),
            },
        })
        .collect()
}

/// The smallest of `repeats` (at least one) samples of `run` taken back to back.
fn round_min(
    run: &mut Box<dyn FnMut() -> Result<f64, NativeError> + '_>,
    repeats: usize,
) -> Result<f64, NativeError> {
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        best = best.min(run()?);
    }
    Ok(best)
}

/// This host, for the `source` of every measured figure: kernel release,
/// CPU model, CPU count and the load average when the calibration started.
#[derive(Clone, Debug)]
pub struct HostInfo {
    /// `uname -r`.
    pub kernel: String,
    /// `model name` of `/proc/cpuinfo`, with its `cpu family` and `model`
    /// ([`cpu_name`]).
    pub cpu: String,
    /// Online CPUs this process may use.
    pub nr_cpus: usize,
    /// `/proc/loadavg`'s first three fields.
    pub loadavg: String,
    /// `MemTotal` in bytes.
    pub mem_bytes: u64,
}

impl HostInfo {
    /// Reads the host's description; missing pieces are `unknown`.
    pub fn probe() -> HostInfo {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = cpu_name(&read("/proc/cpuinfo"));
        let mem_kb = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        HostInfo {
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu,
            nr_cpus: crate::sys::allowed_cpus().map_or(1, |c| c.len()),
            loadavg: load_average(),
            mem_bytes: mem_kb * 1024,
        }
    }
}

/// The first CPU's value of `key` in `/proc/cpuinfo` text.
fn cpuinfo_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// `model name` with `cpu family` and `model` (`AMD EPYC (family 26,
/// model 2)`): a guest's masked model name alone does not tell one host
/// CPU from another (this project's host changed on 2026-11-24 and both
/// called themselves "AMD EPYC"; the new one is family 26).
pub fn cpu_name(cpuinfo: &str) -> String {
    let name = cpuinfo_field(cpuinfo, "model name").unwrap_or("unknown");
    match (
        cpuinfo_field(cpuinfo, "cpu family"),
        cpuinfo_field(cpuinfo, "model"),
    ) {
        (Some(f), Some(m)) => format!("{name} (family {f}, model {m})"),
        _ => name.to_string(),
    }
}

/// `/proc/loadavg`'s 1, 5 and 15 minute figures.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Nanoseconds of this thread's CPU time taken by `f`.
pub(crate) fn cpu_ns_of(f: impl FnOnce()) -> u64 {
    let t0 = crate::sys::thread_cpu_ns();
    f();
    crate::sys::thread_cpu_ns() - t0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_rounds_collect_every_probe() {
        let mut calls = Vec::new();
        let log = std::cell::RefCell::new(&mut calls);
        let probes = vec![
            Probe::new("a", "ns", "a", || {
                log.borrow_mut().push('a');
                Ok(1.0)
            }),
            Probe::new("b", "ns", "b", || {
                log.borrow_mut().push('b');
                Err(NativeError::InvalidConfig { what: "no".into() })
            }),
            Probe::new("c", "ns", "c", || {
                log.borrow_mut().push('c');
                Ok(3.0)
            }),
        ];
        let out = run_interleaved(probes, 3, 1, |_| {});
        // One warm-up round and three measured ones, interleaved; b fails at once.
        assert_eq!(calls.iter().collect::<String>(), "abcacacac");
        assert_eq!(out[0].measured().unwrap().summary.nr_samples, 3);
        assert!(matches!(&out[1], Outcome::Skipped { why, .. } if why.contains("no")));
        assert_eq!(out[2].measured().unwrap().median(), 3.0);
    }

    #[test]
    fn other_measurements_run_between_the_sampled_rounds() {
        let log = std::cell::RefCell::new(String::new());
        let probes = vec![
            Probe::new("a", "ns", "a", || {
                log.borrow_mut().push('a');
                Ok(1.0)
            }),
            Probe::new("b", "ns", "b", || {
                log.borrow_mut().push('b');
                Ok(2.0)
            }),
        ];
        let out = run_interleaved_between(
            probes,
            3,
            1,
            |_| {},
            |round, progress| {
                progress("between");
                log.borrow_mut().push_str(&round.to_string());
            },
        );
        // Not after the warm-up round; after each of the three sampled.
        assert_eq!(*log.borrow(), "abab1ab2ab3");
        assert_eq!(out[1].measured().unwrap().summary.nr_samples, 3);
    }

    #[test]
    fn the_cpu_is_named_with_its_family_and_model() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 25\n";
        assert_eq!(cpu_name(text), "AMD EPYC (family 26, model 2)");
        assert_eq!(cpu_name("model name\t: Some CPU\n"), "Some CPU");
        assert_eq!(cpu_name(""), "unknown");
    }

    #[test]
    fn a_round_keeps_the_smallest_of_its_repeats() {
        // Samples 9, then 5 4 6 | 3 8 7 | 2 9 9 in rounds of three repeats:
        // the warm-up sample is dropped, the minima are 4, 3 and 2.
        let mut xs = vec![9.0, 5.0, 4.0, 6.0, 3.0, 8.0, 7.0, 2.0, 9.0, 9.0].into_iter();
        let probes = vec![Probe::new("a", "ns", "a", move || Ok(xs.next().unwrap()))];
        let out = run_interleaved(probes, 3, 3, |_| {});
        let s = out[0].measured().unwrap().summary;
        assert_eq!((s.min, s.median, s.max, s.nr_samples), (2.0, 3.0, 4.0, 3));
    }
}
